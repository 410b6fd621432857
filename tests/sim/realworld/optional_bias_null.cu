// optional_bias_null.cu - a linear layer whose bias is optional: the launcher passes NULL when there is
// none and the kernel tests the pointer (llm.c's matmul_forward does this with its bias argument).
//
// Versions:
//   kernel1: out = inp @ weight^T (+ bias if bias != NULL), one thread per output element
// Run: pytest tests/sim/test_realworld.py -k optional_bias_null (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cstddef>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void linear_kernel(float* out, const float* inp, const float* weight, const float* bias, int BT, int C,
                              int OC) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= BT * OC) return;
    int i = idx / OC, o = idx % OC;
    float v = bias != NULL ? bias[o] : 0.0f;
    for (int c = 0; c < C; c++) v += inp[i * C + c] * weight[o * C + c];
    out[idx] = v;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void linear(float* out, const float* inp, const float* weight, const float* bias, int BT, int C, int OC, int use_bias) {
    if (use_bias) linear_kernel<<<ceil_div(BT * OC, 64), 64>>>(out, inp, weight, bias, BT, C, OC);
    else linear_kernel<<<ceil_div(BT * OC, 64), 64>>>(out, inp, weight, NULL, BT, C, OC);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int BT = 9, C = 16, OC = 12;
    float* inp = make_random(BT * C);
    float* weight = make_random(OC * C);
    float* bias = make_random(OC);
    float* d_inp = to_device<float>(inp, BT * C);
    float* d_weight = to_device<float>(weight, OC * C);
    float* d_bias = to_device<float>(bias, OC);
    float* d_out = device_poisoned<float>(BT * OC);
    float* ref = (float*)malloc(BT * OC * sizeof(float));
    for (int use_bias = 0; use_bias <= 1; use_bias++) {
        for (int i = 0; i < BT; i++)
            for (int o = 0; o < OC; o++) {
                float v = use_bias ? bias[o] : 0.0f;
                for (int c = 0; c < C; c++) v += inp[i * C + c] * weight[o * C + c];
                ref[i * OC + o] = v;
            }
        cudaCheck(cudaMemset(d_out, 0xFF, BT * OC * sizeof(float)));
        linear(d_out, d_inp, d_weight, d_bias, BT, C, OC, use_bias);
        validate_result(d_out, ref, "out", BT * OC, 1e-5f);
    }
    cudaFree(d_inp); cudaFree(d_weight); cudaFree(d_bias); cudaFree(d_out);
    free(inp); free(weight); free(bias); free(ref);
    write_report(report);
}
