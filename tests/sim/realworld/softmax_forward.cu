// softmax_forward.cu - row softmax, in the style of llm.c dev/cuda.
//
// Versions:
//   kernel1: one thread per row, three passes (max, sum, normalise)
//   kernel2: one block per row, warp shuffles then a shared-memory pass across warps (lane-guarded stores)
//   kernel3: one warp per row, "online" softmax: running max and rescaled sum in one pass
// Run: pytest tests/sim/test_realworld.py -k softmax_forward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cfloat>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void softmax_forward_cpu(float* out, const float* inp, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float* x = inp + i * C;
        float m = -INFINITY;
        for (int j = 0; j < C; j++) m = fmaxf(m, x[j]);
        double s = 0;
        for (int j = 0; j < C; j++) s += expf(x[j] - m);
        for (int j = 0; j < C; j++) out[i * C + j] = (float)(expf(x[j] - m) / s);
    }
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void softmax_forward_kernel1(float* out, const float* inp, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float* x = inp + i * C;
    float m = -INFINITY;
    for (int j = 0; j < C; j++) m = fmaxf(m, x[j]);
    float s = 0.0f;
    for (int j = 0; j < C; j++) s += expf(x[j] - m);
    for (int j = 0; j < C; j++) out[i * C + j] = expf(x[j] - m) / s;
}

__device__ float warp_reduce_max(float v) {
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_down_sync(0xFFFFFFFF, v, off));
    return v;
}
__device__ float warp_reduce_sum(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xFFFFFFFF, v, off);
    return v;
}

__global__ void softmax_forward_kernel2(float* out, const float* inp, int N, int C) {
    extern __shared__ float shared[];  // 2 * warps floats: maxima, then sums
    int row = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    float* maxvals = shared;
    float* sumvals = shared + warps;
    const float* x = inp + row * C;
    float m = -INFINITY;
    for (int j = tid; j < C; j += blockDim.x) m = fmaxf(m, x[j]);
    m = warp_reduce_max(m);  // lane 0 holds the warp's maximum
    if (lane == 0) maxvals[warp] = m;
    __syncthreads();
    if (tid == 0) {
        float v = maxvals[0];
        for (int w = 1; w < warps; w++) v = fmaxf(v, maxvals[w]);
        maxvals[0] = v;
    }
    __syncthreads();
    float offset = maxvals[0];
    float s = 0.0f;
    for (int j = tid; j < C; j += blockDim.x) s += expf(x[j] - offset);
    s = warp_reduce_sum(s);
    if (lane == 0) sumvals[warp] = s;
    __syncthreads();
    if (tid == 0) {
        float v = 0.0f;
        for (int w = 0; w < warps; w++) v += sumvals[w];
        sumvals[0] = v;
    }
    __syncthreads();
    float total = sumvals[0];
    for (int j = tid; j < C; j += blockDim.x) out[row * C + j] = expf(x[j] - offset) / total;
}

__global__ void softmax_forward_kernel3(float* out, const float* inp, int N, int C) {
    int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * warps + threadIdx.x / 32;
    if (row >= N) return;
    const float* x = inp + row * C;
    float m = -FLT_MAX, s = 0.0f;
    for (int j = lane; j < C; j += 32) {  // online: rescale the running sum when the maximum grows
        float v = x[j], nm = fmaxf(m, v);
        s = s * expf(m - nm) + expf(v - nm);
        m = nm;
    }
    for (int off = 16; off > 0; off /= 2) {  // combine (max, sum) pairs across the warp
        float om = __shfl_xor_sync(0xFFFFFFFF, m, off), os = __shfl_xor_sync(0xFFFFFFFF, s, off);
        float nm = fmaxf(m, om);
        s = s * expf(m - nm) + os * expf(om - nm);
        m = nm;
    }
    for (int j = lane; j < C; j += 32) out[row * C + j] = expf(x[j] - m) / s;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void softmax_forward(int version, float* out, const float* inp, int N, int C, int block_size) {
    if (version == 1) softmax_forward_kernel1<<<ceil_div(N, block_size), block_size>>>(out, inp, N, C);
    else if (version == 2)
        softmax_forward_kernel2<<<N, block_size, 2 * (block_size / 32) * sizeof(float)>>>(out, inp, N, C);
    else softmax_forward_kernel3<<<ceil_div(N, block_size / 32), block_size>>>(out, inp, N, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 9, C = 257;
    float* inp = make_random(N * C, 10.0f);  // large logits: the max subtraction matters
    float* ref = (float*)malloc(N * C * sizeof(float));
    softmax_forward_cpu(ref, inp, N, C);
    float* d_inp = to_device<float>(inp, N * C);
    float* d_out = device_poisoned<float>(N * C);
    int block_sizes[] = {32, 64, 256};
    for (int version = 1; version <= 3; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, N * C * sizeof(float)));
            softmax_forward(version, d_out, d_inp, N, C, bs);
            validate_result(d_out, ref, "out", N * C, 1e-5f);
        }
    cudaFree(d_inp); cudaFree(d_out);
    free(inp); free(ref);
    write_report(report);
}
