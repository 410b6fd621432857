// rmsnorm.cu - RMSNorm (LLaMA-style): out = x / sqrt(mean(x^2) + eps) * weight.
//
// Versions:
//   kernel1: one warp per row, __shfl_xor_sync butterfly (every lane ends with the sum)
//   kernel2: one block per row, warp sums, then warp 0 combines the per-warp sums from shared memory
// Run: pytest tests/sim/test_realworld.py -k rmsnorm (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffff, v, mask);
    return v;
}

__global__ void rmsnorm_kernel1(float* out, const float* x, const float* weight, int N, int C, float eps) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float* xr = x + row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += xr[c] * xr[c];
    float scale = rsqrtf(warp_sum(ss) / C + eps);
    for (int c = lane; c < C; c += 32) out[row * C + c] = xr[c] * scale * weight[c];
}

__global__ void rmsnorm_kernel2(float* out, const float* x, const float* weight, int N, int C, float eps) {
    __shared__ float partial[32];
    __shared__ float scale;
    int row = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const float* xr = x + row * C;
    float ss = 0.0f;
    for (int c = tid; c < C; c += blockDim.x) ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        float v = lane < blockDim.x / 32 ? partial[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) scale = rsqrtf(v / C + eps);
    }
    __syncthreads();
    for (int c = tid; c < C; c += blockDim.x) out[row * C + c] = xr[c] * scale * weight[c];
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void rmsnorm(int version, float* out, const float* x, const float* weight, int N, int C, float eps, int block_size) {
    if (version == 1) rmsnorm_kernel1<<<ceil_div(N * 32, block_size), block_size>>>(out, x, weight, N, C, eps);
    else rmsnorm_kernel2<<<N, block_size>>>(out, x, weight, N, C, eps);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 7, C = 200;
    const float eps = 1e-6f;
    float* x = make_random(N * C);
    float* w = make_random(C);
    float* ref = (float*)malloc(N * C * sizeof(float));
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[i * C + c] * x[i * C + c];
        float scale = 1.0f / sqrtf((float)(ss / C) + eps);
        for (int c = 0; c < C; c++) ref[i * C + c] = x[i * C + c] * scale * w[c];
    }
    float* d_x = to_device<float>(x, N * C);
    float* d_w = to_device<float>(w, C);
    float* d_out = device_poisoned<float>(N * C);
    int block_sizes[] = {32, 128, 256};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, N * C * sizeof(float)));
            rmsnorm(version, d_out, d_x, d_w, N, C, eps, bs);
            validate_result(d_out, ref, "out", N * C, 1e-5f);
        }
    cudaFree(d_x); cudaFree(d_w); cudaFree(d_out);
    free(x); free(w); free(ref);
    write_report(report);
}
