// gemm_ex_bf16_gelu.cu - a bf16 MLP block: cublasGemmEx (bf16 inputs, fp32 accumulate, bf16 output)
// followed by a fused bias + GELU kernel on Packed128<bf16>, as mixed-precision training code does.
//
// inp (BT, C) bf16, weight (OC, C) bf16, bias (OC) bf16 -> out (BT, OC) bf16 = gelu(inp @ weight^T + bias)
// Versions:
//   cublasGemmEx(CUDA_R_16BF, CUBLAS_COMPUTE_32F) + bias_gelu_kernel (OC % 8 == 0)
// Run: pytest tests/sim/test_realworld.py -k gemm_ex_bf16_gelu (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include "common.h"

typedef __nv_bfloat16 floatX;
#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void bias_gelu_kernel(floatX* out, const floatX* bias, int BT, int OC) {
    using x128 = Packed128<floatX>;
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= BT * OC) return;
    x128 o = load128(out + i), b = load128(bias + i % OC), r;
    for (int k = 0; k < x128::size; k++) {
        float x = (float)o[k] + (float)b[k];
        r[k] = (floatX)(0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x))));
    }
    store128(out + i, r);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void mlp_bf16(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
              int BT, int C, int OC, int block_size) {
    cublasHandle_t handle;
    cublasCreate(&handle);
    cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);
    const float alpha = 1.0f, beta = 0.0f;
    cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &alpha, weight, CUDA_R_16BF, C, inp, CUDA_R_16BF, C,
                 &beta, out, CUDA_R_16BF, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    bias_gelu_kernel<<<ceil_div(BT * OC / 8, block_size), block_size>>>(out, bias, BT, OC);
    cublasDestroy(handle);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation (reference from the bf16-rounded inputs, rounding the GEMM result to bf16 as cuBLAS does)
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int BT = 10, C = 32, OC = 24;
    float* inp = make_random(BT * C, 0.5f);
    float* weight = make_random(OC * C, 0.5f);
    float* bias = make_random(OC);
    for (int i = 0; i < BT * C; i++) inp[i] = (float)(floatX)inp[i];
    for (int i = 0; i < OC * C; i++) weight[i] = (float)(floatX)weight[i];
    for (int i = 0; i < OC; i++) bias[i] = (float)(floatX)bias[i];
    float* ref = (float*)malloc(BT * OC * sizeof(float));
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) {
            float s = 0.0f;
            for (int c = 0; c < C; c++) s += inp[i * C + c] * weight[o * C + c];
            float x = (float)(floatX)s + bias[o];
            ref[i * OC + o] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x)));
        }
    floatX* d_inp = to_device<floatX>(inp, BT * C);
    floatX* d_weight = to_device<floatX>(weight, OC * C);
    floatX* d_bias = to_device<floatX>(bias, OC);
    floatX* d_out = device_poisoned<floatX>(BT * OC);
    mlp_bf16(d_out, d_inp, d_weight, d_bias, BT, C, OC, 32);
    validate_result(d_out, ref, "out", BT * OC, 2e-2f);
    cudaFree(d_inp); cudaFree(d_weight); cudaFree(d_bias); cudaFree(d_out);
    free(inp); free(weight); free(bias); free(ref);
    write_report(report);
}
