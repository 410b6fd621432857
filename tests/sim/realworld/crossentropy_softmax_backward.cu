// crossentropy_softmax_backward.cu - fused softmax + cross-entropy backward, in the style of llm.c dev/cuda.
//
// dlogits[b,t,v] += (probs[b,t,v] - (v == targets[b,t])) * dlosses[b,t]
// Versions:
//   kernel1: one thread per (b, t), looping over the vocabulary
//   kernel2: one thread per element of dlogits
// Run: pytest tests/sim/test_realworld.py -k crossentropy_softmax_backward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void crossentropy_softmax_backward_kernel1(float* dlogits, const float* dlosses, const float* probs,
                                                      const int* targets, int B, int T, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T) return;
    float d = dlosses[i];
    int ix = targets[i];
    for (int v = 0; v < V; v++) dlogits[i * V + v] += (probs[i * V + v] - (v == ix ? 1.0f : 0.0f)) * d;
}

__global__ void crossentropy_softmax_backward_kernel2(float* dlogits, const float* dlosses, const float* probs,
                                                      const int* targets, int B, int T, int V) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * V) return;
    int bt = idx / V, v = idx % V;
    dlogits[idx] += (probs[idx] - (v == targets[bt] ? 1.0f : 0.0f)) * dlosses[bt];
}

// ----------------------------------------------------------------------------------------------------
// Launchers (dlogits accumulates)
// ----------------------------------------------------------------------------------------------------
void crossentropy_softmax_backward(int version, float* dlogits, const float* dlosses, const float* probs,
                                   const int* targets, int B, int T, int V, int block_size) {
    if (version == 1)
        crossentropy_softmax_backward_kernel1<<<ceil_div(B * T, block_size), block_size>>>(dlogits, dlosses, probs,
                                                                                           targets, B, T, V);
    else
        crossentropy_softmax_backward_kernel2<<<ceil_div(B * T * V, block_size), block_size>>>(dlogits, dlosses, probs,
                                                                                               targets, B, T, V);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int B = 2, T = 5, V = 45;
    float* probs = (float*)malloc(B * T * V * sizeof(float));
    for (int i = 0; i < B * T * V; i++) probs[i] = rng_uniform();
    float* dlosses = make_random(B * T);
    float* dlogits0 = make_random(B * T * V);
    int* targets = make_random_int(B * T, V);
    float* ref = (float*)malloc(B * T * V * sizeof(float));
    for (int i = 0; i < B * T; i++)
        for (int v = 0; v < V; v++)
            ref[i * V + v] = dlogits0[i * V + v] + (probs[i * V + v] - (v == targets[i] ? 1.0f : 0.0f)) * dlosses[i];
    float* d_probs = to_device<float>(probs, B * T * V);
    float* d_dlosses = to_device<float>(dlosses, B * T);
    int* d_targets;
    cudaCheck(cudaMalloc(&d_targets, B * T * sizeof(int)));
    cudaCheck(cudaMemcpy(d_targets, targets, B * T * sizeof(int), cudaMemcpyHostToDevice));
    float* d_dlogits = device_poisoned<float>(B * T * V);
    int block_sizes[] = {32, 128};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemcpy(d_dlogits, dlogits0, B * T * V * sizeof(float), cudaMemcpyHostToDevice));
            crossentropy_softmax_backward(version, d_dlogits, d_dlosses, d_probs, d_targets, B, T, V, bs);
            validate_result(d_dlogits, ref, "dlogits", B * T * V, 1e-5f);
        }
    cudaFree(d_probs); cudaFree(d_dlosses); cudaFree(d_targets); cudaFree(d_dlogits);
    free(probs); free(dlosses); free(dlogits0); free(targets); free(ref);
    write_report(report);
}
