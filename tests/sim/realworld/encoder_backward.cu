// encoder_backward.cu - gradients of the token and position embeddings, in the style of llm.c dev/cuda.
//
// dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] (many (b,t) share a token: atomics)
// Versions:
//   kernel1: one thread per channel, looping over (b, t) serially (no atomics, deterministic)
//   kernel2: one thread per element with atomicAdd into both gradients
// Run: pytest tests/sim/test_realworld.py -k encoder_backward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void encoder_backward_cpu(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                float d = dout[(b * T + t) * C + c];
                dwte[inp[b * T + t] * C + c] += d;
                dwpe[t * C + c] += d;
            }
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void encoder_backward_kernel1(float* dwte, float* dwpe, const float* dout, const int* inp,
                                         int B, int T, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float d = dout[(b * T + t) * C + c];
            dwte[inp[b * T + t] * C + c] += d;
            dwpe[t * C + c] += d;
        }
}

__global__ void encoder_backward_kernel2(float* dwte, float* dwpe, const float* dout, const int* inp,
                                         int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * C) return;
    int bt = idx / C, c = idx % C, t = bt % T;
    float d = dout[idx];
    atomicAdd(&dwte[inp[bt] * C + c], d);
    atomicAdd(&dwpe[t * C + c], d);
}

// ----------------------------------------------------------------------------------------------------
// Launchers (gradients accumulate: the caller zeroes them)
// ----------------------------------------------------------------------------------------------------
void encoder_backward(int version, float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C,
                      int block_size) {
    if (version == 1)
        encoder_backward_kernel1<<<ceil_div(C, block_size), block_size>>>(dwte, dwpe, dout, inp, B, T, C);
    else
        encoder_backward_kernel2<<<ceil_div(B * T * C, block_size), block_size>>>(dwte, dwpe, dout, inp, B, T, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int B = 3, T = 9, C = 20, V = 7;  // few tokens: many collisions in dwte
    float* dout = make_random(B * T * C);
    int* inp = make_random_int(B * T, V);
    float* dwte = (float*)calloc(V * C, sizeof(float));
    float* dwpe = (float*)calloc(T * C, sizeof(float));
    encoder_backward_cpu(dwte, dwpe, dout, inp, B, T, C);
    float* d_dout = to_device<float>(dout, B * T * C);
    int* d_inp;
    cudaCheck(cudaMalloc(&d_inp, B * T * sizeof(int)));
    cudaCheck(cudaMemcpy(d_inp, inp, B * T * sizeof(int), cudaMemcpyHostToDevice));
    float *d_dwte, *d_dwpe;
    cudaCheck(cudaMalloc(&d_dwte, V * C * sizeof(float)));
    cudaCheck(cudaMalloc(&d_dwpe, T * C * sizeof(float)));
    int block_sizes[] = {32, 96};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_dwte, 0, V * C * sizeof(float)));
            cudaCheck(cudaMemset(d_dwpe, 0, T * C * sizeof(float)));
            encoder_backward(version, d_dwte, d_dwpe, d_dout, d_inp, B, T, C, bs);
            validate_result(d_dwte, dwte, "dwte", V * C, 1e-5f);
            validate_result(d_dwpe, dwpe, "dwpe", T * C, 1e-5f);
        }
    cudaFree(d_dout); cudaFree(d_inp); cudaFree(d_dwte); cudaFree(d_dwpe);
    free(dout); free(inp); free(dwte); free(dwpe);
    write_report(report);
}
