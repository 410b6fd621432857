// block_sum_unguarded.cu - row sums with a block reduction whose per-warp store has no lane guard: after a
// __shfl_xor_sync butterfly every lane holds the warp's sum, and every lane stores it to shared[warp]
// (a common idiom; all 32 stores write the same value, which CUDA and compute-sanitizer accept).
//
// Versions:
//   kernel1: butterfly, unguarded `shared[warp] = v;`, then warp 0 sums the warp totals
// Run: pytest tests/sim/test_realworld.py -k block_sum_unguarded (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void row_sum_kernel(float* out, const float* x, int C) {
    __shared__ float shared[32];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    float v = 0.0f;
    for (int c = tid; c < C; c += blockDim.x) v += x[blockIdx.x * C + c];
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFF, v, off);
    shared[warp] = v;  // every lane: the same value
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? shared[lane] : 0.0f;
        for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFF, v, off);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void row_sum(float* out, const float* x, int rows, int C, int block_size) {
    row_sum_kernel<<<rows, block_size>>>(out, x, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int rows = 5, C = 500;
    float* x = make_random(rows * C);
    float* ref = (float*)malloc(rows * sizeof(float));
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < C; c++) s += x[r * C + c];
        ref[r] = (float)s;
    }
    float* d_x = to_device<float>(x, rows * C);
    float* d_out = device_poisoned<float>(rows);
    int block_sizes[] = {64, 256};
    for (int bs : block_sizes) {
        cudaCheck(cudaMemset(d_out, 0xFF, rows * sizeof(float)));
        row_sum(d_out, d_x, rows, C, bs);
        validate_result(d_out, ref, "sum", rows, 1e-4f);
    }
    cudaFree(d_x); cudaFree(d_out);
    free(x); free(ref);
    write_report(report);
}
