// layernorm_backward.cu - LayerNorm backward (dinp, dweight, dbias), in the style of llm.c dev/cuda.
//
// Versions:
//   kernel1: one thread per row for dinp; dweight/dbias through atomicAdd from every thread
//   kernel2: one warp per row (warp shuffles for the two row sums); dweight/dbias accumulated per block in
//            shared memory, then one atomicAdd per channel and block
// Run: pytest tests/sim/test_realworld.py -k layernorm_backward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void layernorm_backward_cpu(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                   const float* weight, const float* mean, const float* rstd, int N, int C) {
    for (int i = 0; i < N; i++) {
        const float* d = dout + i * C;
        const float* x = inp + i * C;
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mean[i]) * rstd[i], dnorm = weight[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mean[i]) * rstd[i], dnorm = weight[c] * d[c];
            dbias[c] += d[c];
            dweight[c] += norm * d[c];
            dinp[i * C + c] = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd[i];
        }
    }
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void layernorm_backward_kernel1(float* dinp, float* dweight, float* dbias, const float* dout,
                                           const float* inp, const float* weight, const float* mean,
                                           const float* rstd, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float* d = dout + i * C;
    const float* x = inp + i * C;
    float dm = 0.0f, dnm = 0.0f;
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - mean[i]) * rstd[i], dnorm = weight[c] * d[c];
        dm += dnorm;
        dnm += dnorm * norm;
    }
    dm /= C;
    dnm /= C;
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - mean[i]) * rstd[i], dnorm = weight[c] * d[c];
        atomicAdd(&dbias[c], d[c]);
        atomicAdd(&dweight[c], norm * d[c]);
        dinp[i * C + c] = (dnorm - dm - norm * dnm) * rstd[i];
    }
}

__global__ void layernorm_backward_kernel2(float* dinp, float* dweight, float* dbias, const float* dout,
                                           const float* inp, const float* weight, const float* mean,
                                           const float* rstd, int N, int C) {
    extern __shared__ float shared[];  // dbias[C], dweight[C] of this block
    float* dbias_s = shared;
    float* dweight_s = shared + C;
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) shared[c] = 0.0f;
    __syncthreads();
    int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    int row = blockIdx.x * warps + threadIdx.x / 32;
    if (row < N) {  // no early return: the block still meets at the barrier below
        const float* d = dout + row * C;
        const float* x = inp + row * C;
        float m = mean[row], r = rstd[row];
        float dm = 0.0f, dnm = 0.0f;
        for (int c = lane; c < C; c += 32) {
            float norm = (x[c] - m) * r, dnorm = weight[c] * d[c];
            dm += dnorm;
            dnm += dnorm * norm;
        }
        for (int off = 16; off > 0; off /= 2) {
            dm += __shfl_xor_sync(0xFFFFFFFF, dm, off);
            dnm += __shfl_xor_sync(0xFFFFFFFF, dnm, off);
        }
        dm /= C;
        dnm /= C;
        for (int c = lane; c < C; c += 32) {
            float norm = (x[c] - m) * r, dnorm = weight[c] * d[c];
            atomicAdd(&dbias_s[c], d[c]);
            atomicAdd(&dweight_s[c], norm * d[c]);
            dinp[row * C + c] = (dnorm - dm - norm * dnm) * r;
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        atomicAdd(&dbias[c], dbias_s[c]);
        atomicAdd(&dweight[c], dweight_s[c]);
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers (dweight and dbias accumulate)
// ----------------------------------------------------------------------------------------------------
void layernorm_backward(int version, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, int block_size) {
    if (version == 1)
        layernorm_backward_kernel1<<<ceil_div(N, block_size), block_size>>>(dinp, dweight, dbias, dout, inp, weight,
                                                                            mean, rstd, N, C);
    else
        layernorm_backward_kernel2<<<ceil_div(N, block_size / 32), block_size, 2 * C * sizeof(float)>>>(
            dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 10, C = 40;
    float* dout = make_random(N * C);
    float* inp = make_random(N * C);
    float* weight = make_random(C);
    float* mean = make_random(N, 0.1f);
    float* rstd = (float*)malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) rstd[i] = 0.5f + rng_uniform();
    float* dinp = (float*)malloc(N * C * sizeof(float));
    float* dweight = (float*)calloc(C, sizeof(float));
    float* dbias = (float*)calloc(C, sizeof(float));
    layernorm_backward_cpu(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    float* d_dout = to_device<float>(dout, N * C);
    float* d_inp = to_device<float>(inp, N * C);
    float* d_weight = to_device<float>(weight, C);
    float* d_mean = to_device<float>(mean, N);
    float* d_rstd = to_device<float>(rstd, N);
    float* d_dinp = device_poisoned<float>(N * C);
    float *d_dweight, *d_dbias;
    cudaCheck(cudaMalloc(&d_dweight, C * sizeof(float)));
    cudaCheck(cudaMalloc(&d_dbias, C * sizeof(float)));
    int block_sizes[] = {32, 128};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_dinp, 0xFF, N * C * sizeof(float)));
            cudaCheck(cudaMemset(d_dweight, 0, C * sizeof(float)));
            cudaCheck(cudaMemset(d_dbias, 0, C * sizeof(float)));
            layernorm_backward(version, d_dinp, d_dweight, d_dbias, d_dout, d_inp, d_weight, d_mean, d_rstd, N, C, bs);
            validate_result(d_dinp, dinp, "dinp", N * C, 1e-4f);
            validate_result(d_dweight, dweight, "dweight", C, 1e-4f);
            validate_result(d_dbias, dbias, "dbias", C, 1e-4f);
        }
    cudaFree(d_dout); cudaFree(d_inp); cudaFree(d_weight); cudaFree(d_mean); cudaFree(d_rstd);
    cudaFree(d_dinp); cudaFree(d_dweight); cudaFree(d_dbias);
    free(dout); free(inp); free(weight); free(mean); free(rstd); free(dinp); free(dweight); free(dbias);
    write_report(report);
}
