// matmul_forward_cublas.cu - a linear layer out = inp @ weight^T + bias with cuBLAS around a custom
// bias kernel, in the style of llm.c dev/cuda matmul_forward.
//
// inp (B*T, C), weight (OC, C), bias (OC), out (B*T, OC), all row-major.
// Versions:
//   kernel1: naive matmul kernel, one thread per output element (bias fused)
//   version 2: cublasSgemm (row-major through the column-major transpose trick) + add_bias kernel
//   version 3: cublasGemmEx with CUBLAS_COMPUTE_32F + add_bias kernel with float4 loads
// Run: pytest tests/sim/test_realworld.py -k matmul_forward_cublas (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include "common.h"

static cublasHandle_t cublas_handle;
static void cublas_check(cublasStatus_t s, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        printf("[cuBLAS ERROR] %d at line %d\n", (int)s, line);
        g_report.mismatches += 1;
    }
}
#define cublasCheck(s) cublas_check((s), __LINE__)

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void matmul_forward_cpu(float* out, const float* inp, const float* weight, const float* bias, int BT, int C,
                               int OC) {
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) {
            double v = bias[o];
            for (int c = 0; c < C; c++) v += (double)inp[i * C + c] * weight[o * C + c];
            out[i * OC + o] = (float)v;
        }
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void matmul_forward_kernel1(float* out, const float* inp, const float* weight, const float* bias, int BT,
                                       int C, int OC) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, o = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= BT || o >= OC) return;
    float v = bias[o];
    for (int c = 0; c < C; c++) v += inp[i * C + c] * weight[o * C + c];
    out[i * OC + o] = v;
}

__global__ void add_bias(float* out, const float* bias, int BT, int OC) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = idx; i < BT * OC; i += gridDim.x * blockDim.x) out[i] += bias[i % OC];
}

__global__ void add_bias_float4(float4* out, const float4* bias, int BT, int OC) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x, OC4 = OC / 4;
    if (idx >= BT * OC4) return;
    float4 o = out[idx], b = bias[idx % OC4];
    out[idx] = make_float4(o.x + b.x, o.y + b.y, o.z + b.z, o.w + b.w);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void matmul_forward(int version, float* out, const float* inp, const float* weight, const float* bias, int BT, int C,
                    int OC, int block_size) {
    const float alpha = 1.0f, beta = 0.0f;
    if (version == 1) {
        int sq = block_size >= 256 ? 16 : 8;
        dim3 block(sq, sq), grid(ceil_div(BT, sq), ceil_div(OC, sq));
        matmul_forward_kernel1<<<grid, block>>>(out, inp, weight, bias, BT, C, OC);
    } else if (version == 2) {
        // row-major out (BT, OC) is column-major out^T (OC, BT) = weight (OC, C) @ inp^T: weight is C x OC
        // column-major, so op T; inp is C x BT column-major, op N
        cublasCheck(cublasSgemm(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &alpha, weight, C, inp, C, &beta,
                                out, OC));
        add_bias<<<ceil_div(BT * OC, block_size), block_size>>>(out, bias, BT, OC);
    } else {
        cublasCheck(cublasGemmEx(cublas_handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &alpha, weight, CUDA_R_32F, C,
                                 inp, CUDA_R_32F, C, &beta, out, CUDA_R_32F, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        add_bias_float4<<<ceil_div(BT * OC / 4, block_size), block_size>>>((float4*)out, (const float4*)bias, BT, OC);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    cublasCheck(cublasCreate(&cublas_handle));
    const int BT = 19, C = 24, OC = 36;  // OC % 4 == 0 for the float4 bias
    float* inp = make_random(BT * C);
    float* weight = make_random(OC * C);
    float* bias = make_random(OC);
    float* ref = (float*)malloc(BT * OC * sizeof(float));
    matmul_forward_cpu(ref, inp, weight, bias, BT, C, OC);
    float* d_inp = to_device<float>(inp, BT * C);
    float* d_weight = to_device<float>(weight, OC * C);
    float* d_bias = to_device<float>(bias, OC);
    float* d_out = device_poisoned<float>(BT * OC);
    int block_sizes[] = {64, 256};
    for (int version = 1; version <= 3; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, BT * OC * sizeof(float)));
            matmul_forward(version, d_out, d_inp, d_weight, d_bias, BT, C, OC, bs);
            validate_result(d_out, ref, "out", BT * OC, 1e-4f);
        }
    cublasCheck(cublasDestroy(cublas_handle));
    cudaFree(d_inp); cudaFree(d_weight); cudaFree(d_bias); cudaFree(d_out);
    free(inp); free(weight); free(bias); free(ref);
    write_report(report);
}
