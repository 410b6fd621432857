// softmax_half2.cu - row softmax on fp16 data read two at a time as __half2, math in fp32 (the usual
// inference-kernel layout), one warp per row.
//
// Versions:
//   kernel1: __half2 loads, warp max/sum with __shfl_xor_sync, __half2 stores (C even)
// Run: pytest tests/sim/test_realworld.py -k softmax_half2 (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cfloat>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void softmax_half2_kernel(__half* out, const __half* inp, int N, int C) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const __half2* x = reinterpret_cast<const __half2*>(inp + row * C);
    __half2* y = reinterpret_cast<__half2*>(out + row * C);
    int C2 = C / 2;
    float m = -FLT_MAX;
    for (int j = lane; j < C2; j += 32) {
        float2 v = __half22float2(x[j]);
        m = fmaxf(m, fmaxf(v.x, v.y));
    }
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
    float s = 0.0f;
    for (int j = lane; j < C2; j += 32) {
        float2 v = __half22float2(x[j]);
        s += expf(v.x - m) + expf(v.y - m);
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffff, s, off);
    float inv = 1.0f / s;
    for (int j = lane; j < C2; j += 32) {
        float2 v = __half22float2(x[j]);
        y[j] = __floats2half2_rn(expf(v.x - m) * inv, expf(v.y - m) * inv);
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void softmax_half2(__half* out, const __half* inp, int N, int C, int block_size) {
    softmax_half2_kernel<<<ceil_div(N * 32, block_size), block_size>>>(out, inp, N, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 7, C = 130;
    float* inp = make_random(N * C, 4.0f);
    for (int i = 0; i < N * C; i++) inp[i] = (float)__float2half(inp[i]);
    float* ref = (float*)malloc(N * C * sizeof(float));
    for (int r = 0; r < N; r++) {
        float m = -FLT_MAX;
        for (int j = 0; j < C; j++) m = fmaxf(m, inp[r * C + j]);
        double s = 0;
        for (int j = 0; j < C; j++) s += expf(inp[r * C + j] - m);
        for (int j = 0; j < C; j++) ref[r * C + j] = (float)(expf(inp[r * C + j] - m) / s);
    }
    __half* d_inp = to_device<__half>(inp, N * C);
    __half* d_out = device_poisoned<__half>(N * C);
    int block_sizes[] = {32, 128};
    for (int bs : block_sizes) {
        cudaCheck(cudaMemset(d_out, 0xFF, N * C * sizeof(__half)));
        softmax_half2(d_out, d_inp, N, C, bs);
        validate_result(d_out, ref, "out", N * C, 2e-3f);
    }
    cudaFree(d_inp); cudaFree(d_out);
    free(inp); free(ref);
    write_report(report);
}
