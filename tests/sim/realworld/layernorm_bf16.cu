// layernorm_bf16.cu - LayerNorm with bf16 input/output and fp32 statistics, in the style of llm.c's
// layernorm_forward_kernel3 (one warp per row, cooperative groups).
//
// Versions:
//   kernel1: one warp per row, cg::reduce for mean and variance, __ldcs streaming loads
// Run: pytest tests/sim/test_realworld.py -k layernorm_bf16 (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "common.h"
namespace cg = cooperative_groups;
typedef __nv_bfloat16 floatX;

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void layernorm_bf16_kernel1(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                                       const floatX* bias, int N, int C) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (idx >= N) return;
    const floatX* x = inp + idx * C;
    float sum = 0.0f;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) sum += (float)x[i];
    float m = cg::reduce(warp, sum, cg::plus<float>{}) / C;
    if (warp.thread_rank() == 0 && mean != nullptr) __stcs(mean + idx, m);
    sum = 0.0f;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) {
        float diff = (float)x[i] - m;
        sum += diff * diff;
    }
    float s = rsqrtf(cg::reduce(warp, sum, cg::plus<float>{}) / C + 1e-5f);
    if (warp.thread_rank() == 0 && rstd != nullptr) __stcs(rstd + idx, s);
    floatX* o = out + idx * C;
    for (int c = warp.thread_rank(); c < C; c += warp.size()) {
        float n = s * ((float)__ldcs(x + c) - m);
        __stcs(o + c, (floatX)(n * (float)weight[c] + (float)bias[c]));
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void layernorm_bf16(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* inp,
                    const __nv_bfloat16* weight, const __nv_bfloat16* bias, int N, int C, int block_size) {
    layernorm_bf16_kernel1<<<ceil_div(N * 32, block_size), block_size>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 13, C = 96;
    float* inp = make_random(N * C);
    float* weight = make_random(C);
    float* bias = make_random(C);
    for (int i = 0; i < N * C; i++) inp[i] = (float)(floatX)inp[i];  // the kernel sees bf16 values
    for (int c = 0; c < C; c++) { weight[c] = (float)(floatX)weight[c]; bias[c] = (float)(floatX)bias[c]; }
    float* ref = (float*)malloc(N * C * sizeof(float));
    float* mean = (float*)malloc(N * sizeof(float));
    float* rstd = (float*)malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += inp[i * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (inp[i * C + c] - m) * (inp[i * C + c] - m);
        float s = 1.0f / sqrtf((float)(v / C) + 1e-5f);
        for (int c = 0; c < C; c++) ref[i * C + c] = s * (float)(inp[i * C + c] - m) * weight[c] + bias[c];
        mean[i] = (float)m;
        rstd[i] = s;
    }
    floatX* d_inp = to_device<floatX>(inp, N * C);
    floatX* d_w = to_device<floatX>(weight, C);
    floatX* d_b = to_device<floatX>(bias, C);
    floatX* d_out = device_poisoned<floatX>(N * C);
    float* d_mean = device_poisoned<float>(N);
    float* d_rstd = device_poisoned<float>(N);
    int block_sizes[] = {32, 128, 256};
    for (int bs : block_sizes) {
        cudaCheck(cudaMemset(d_out, 0xFF, N * C * sizeof(floatX)));
        layernorm_bf16(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, bs);
        validate_result(d_out, ref, "out", N * C, 2e-2f);
        validate_result(d_mean, mean, "mean", N, 1e-4f);
        validate_result(d_rstd, rstd, "rstd", N, 1e-4f);
    }
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b); cudaFree(d_out); cudaFree(d_mean); cudaFree(d_rstd);
    free(inp); free(weight); free(bias); free(ref); free(mean); free(rstd);
    write_report(report);
}
