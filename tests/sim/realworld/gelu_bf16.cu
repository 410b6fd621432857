// gelu_bf16.cu - GELU on bf16 activations with fp32 math, in the style of llm.c's bf16 kernels.
//
// Versions:
//   kernel1: one thread per element, __bfloat162float / __float2bfloat16
//   kernel2: Packed128<__nv_bfloat16> (8 values per 128-bit load/store), N % 8 == 0
// Run: pytest tests/sim/test_realworld.py -k gelu_bf16 (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "common.h"

#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)
typedef __nv_bfloat16 floatX;

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__device__ inline float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_bf16_kernel1(floatX* out, const floatX* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = __float2bfloat16(gelu(__bfloat162float(inp[i])));
}

__global__ void gelu_bf16_kernel2(floatX* out, const floatX* inp, int N) {
    using x128 = Packed128<floatX>;
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    x128 in = load128(inp + i), res;
    for (int k = 0; k < x128::size; ++k) res[k] = (floatX)gelu((float)in[k]);
    store128(out + i, res);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void gelu_bf16(int version, __nv_bfloat16* out, const __nv_bfloat16* inp, int N, int block_size) {
    if (version == 1) gelu_bf16_kernel1<<<ceil_div(N, block_size), block_size>>>(out, inp, N);
    else gelu_bf16_kernel2<<<ceil_div(N, block_size * 8), block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation (the reference rounds the input to bf16 first, as the kernel sees it)
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 8 * 131;
    float* inp = make_random(N, 2.0f);
    float* ref = (float*)malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        float x = (float)(__nv_bfloat16)inp[i];
        ref[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x)));
    }
    floatX* d_inp = to_device<floatX>(inp, N);
    floatX* d_out = device_poisoned<floatX>(N);
    int block_sizes[] = {32, 128};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, N * sizeof(floatX)));
            gelu_bf16(version, d_out, d_inp, N, bs);
            validate_result(d_out, ref, "out", N, 1e-2f);  // bf16 output: 8 significant bits
        }
    cudaFree(d_inp); cudaFree(d_out);
    free(inp); free(ref);
    write_report(report);
}
