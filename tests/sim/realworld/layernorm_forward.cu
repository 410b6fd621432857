// layernorm_forward.cu - LayerNorm over the last dimension, in the style of llm.c dev/cuda.
//
// out = (x - mean) * rstd * weight + bias, also saving mean and rstd for the backward pass.
// Versions:
//   kernel1: one thread per row (naive)
//   kernel2: one warp per row with cooperative groups (cg::reduce on a 32-thread tile)
//   kernel3: one block per row, shared-memory tree reduction with __syncthreads
// Run: pytest tests/sim/test_realworld.py -k layernorm_forward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "common.h"
namespace cg = cooperative_groups;

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                  const float* bias, int N, int C) {
    const float eps = 1e-5f;
    for (int i = 0; i < N; i++) {
        const float* x = inp + i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        float s = 1.0f / sqrtf((float)v + eps);
        for (int c = 0; c < C; c++) out[i * C + c] = (float)(s * (x[c] - m)) * weight[c] + bias[c];
        mean[i] = (float)m;
        rstd[i] = s;
    }
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void layernorm_forward_kernel1(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float* x = inp + i * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    float s = rsqrtf(v / C + 1e-5f);
    for (int c = 0; c < C; c++) out[i * C + c] = s * (x[c] - m) * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
}

__global__ void layernorm_forward_kernel2(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (row >= N) return;  // a whole warp leaves together
    const float* x = inp + row * C;
    float sum = 0.0f;
    for (int c = warp.thread_rank(); c < C; c += warp.size()) sum += x[c];
    float m = cg::reduce(warp, sum, cg::plus<float>()) / C;
    float sq = 0.0f;
    for (int c = warp.thread_rank(); c < C; c += warp.size()) sq += (x[c] - m) * (x[c] - m);
    float s = rsqrtf(cg::reduce(warp, sq, cg::plus<float>()) / C + 1e-5f);
    for (int c = warp.thread_rank(); c < C; c += warp.size())
        __stcs(out + row * C + c, s * (__ldcs(x + c) - m) * weight[c] + bias[c]);  // streaming: read once
    if (warp.thread_rank() == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

__global__ void layernorm_forward_kernel3(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
    extern __shared__ float shared[];  // blockDim.x floats
    int row = blockIdx.x, tid = threadIdx.x;
    const float* x = inp + row * C;
    float sum = 0.0f;
    for (int c = tid; c < C; c += blockDim.x) sum += x[c];
    shared[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) shared[tid] += shared[tid + s];
        __syncthreads();
    }
    float m = shared[0] / C;
    __syncthreads();  // everyone read shared[0] before it is reused
    float sq = 0.0f;
    for (int c = tid; c < C; c += blockDim.x) sq += (x[c] - m) * (x[c] - m);
    shared[tid] = sq;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) shared[tid] += shared[tid + s];
        __syncthreads();
    }
    float r = rsqrtf(shared[0] / C + 1e-5f);
    for (int c = tid; c < C; c += blockDim.x) out[row * C + c] = r * (x[c] - m) * weight[c] + bias[c];
    if (tid == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void layernorm_forward(int version, float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, int block_size) {
    if (version == 1) {
        layernorm_forward_kernel1<<<ceil_div(N, block_size), block_size>>>(out, mean, rstd, inp, weight, bias, N, C);
    } else if (version == 2) {
        int rows_per_block = block_size / 32;
        layernorm_forward_kernel2<<<ceil_div(N, rows_per_block), block_size>>>(out, mean, rstd, inp, weight, bias,
                                                                                N, C);
    } else {
        layernorm_forward_kernel3<<<N, block_size, block_size * sizeof(float)>>>(out, mean, rstd, inp, weight, bias,
                                                                                  N, C);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 11, C = 70;
    float* inp = make_random(N * C);
    float* weight = make_random(C);
    float* bias = make_random(C);
    float* out = (float*)malloc(N * C * sizeof(float));
    float* mean = (float*)malloc(N * sizeof(float));
    float* rstd = (float*)malloc(N * sizeof(float));
    layernorm_forward_cpu(out, mean, rstd, inp, weight, bias, N, C);
    float* d_inp = to_device<float>(inp, N * C);
    float* d_w = to_device<float>(weight, C);
    float* d_b = to_device<float>(bias, C);
    float* d_out = device_poisoned<float>(N * C);
    float* d_mean = device_poisoned<float>(N);
    float* d_rstd = device_poisoned<float>(N);
    int block_sizes[] = {32, 64, 128};
    for (int version = 1; version <= 3; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, N * C * sizeof(float)));
            layernorm_forward(version, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, bs);
            validate_result(d_out, out, "out", N * C, 1e-4f);
            validate_result(d_mean, mean, "mean", N, 1e-4f);
            validate_result(d_rstd, rstd, "rstd", N, 1e-4f);
        }
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b); cudaFree(d_out); cudaFree(d_mean); cudaFree(d_rstd);
    free(inp); free(weight); free(bias); free(out); free(mean); free(rstd);
    write_report(report);
}
