// block_reduce_template_fn.cu - a templated device-side block reduction with its own __shared__ scratch
// (the CUB BlockReduce / "blockReduce<Op>" helper pattern), called twice in one kernel with two
// instantiations: each instantiation has its own static shared array, as on the GPU.
//
// Versions:
//   kernel1: mean and max of each row through block_reduce<SumOp> then block_reduce<MaxOp>, no barrier between
// Run: pytest tests/sim/test_realworld.py -k block_reduce_template_fn (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cfloat>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
struct SumOp { __device__ float operator()(float a, float b) const { return a + b; } static constexpr float init = 0.0f; };
struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } static constexpr float init = -FLT_MAX; };

template <class Op>
__device__ float block_reduce(float v) {
    __shared__ float partial[32];
    Op op;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xFFFFFFFF, v, off));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float r = Op::init;
    for (int w = 0; w < warps; w++) r = op(r, partial[w]);  // every thread reads every warp's value
    return r;
}

__global__ void row_stats_kernel(float* mean, float* maxv, const float* x, int C) {
    float s = 0.0f, m = -FLT_MAX;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = x[blockIdx.x * C + c];
        s += v;
        m = fmaxf(m, v);
    }
    float total = block_reduce<SumOp>(s);
    float biggest = block_reduce<MaxOp>(m);  // a different instantiation: a different shared array
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = total / C;
        maxv[blockIdx.x] = biggest;
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void row_stats(float* mean, float* maxv, const float* x, int rows, int C, int block_size) {
    row_stats_kernel<<<rows, block_size>>>(mean, maxv, x, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int rows = 4, C = 300;
    float* x = make_random(rows * C);
    float* mean = (float*)malloc(rows * sizeof(float));
    float* maxv = (float*)malloc(rows * sizeof(float));
    for (int r = 0; r < rows; r++) {
        double s = 0;
        float m = -FLT_MAX;
        for (int c = 0; c < C; c++) { s += x[r * C + c]; m = fmaxf(m, x[r * C + c]); }
        mean[r] = (float)(s / C);
        maxv[r] = m;
    }
    float* d_x = to_device<float>(x, rows * C);
    float* d_mean = device_poisoned<float>(rows);
    float* d_max = device_poisoned<float>(rows);
    int block_sizes[] = {64, 128};
    for (int bs : block_sizes) {
        row_stats(d_mean, d_max, d_x, rows, C, bs);
        validate_result(d_mean, mean, "mean", rows, 1e-5f);
        validate_result(d_max, maxv, "max", rows, 0.0f);
    }
    cudaFree(d_x); cudaFree(d_mean); cudaFree(d_max);
    free(x); free(mean); free(maxv);
    write_report(report);
}
