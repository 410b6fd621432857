// crossentropy_forward.cu - per-token cross-entropy loss from probabilities, in the style of llm.c dev/cuda.
//
// losses[b,t] = -log(probs[b,t,targets[b,t]])
// Versions:
//   kernel1: one thread per (b, t)
// Run: pytest tests/sim/test_realworld.py -k crossentropy_forward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void crossentropy_forward_kernel1(float* losses, const float* probs, const int* targets, int B, int T,
                                             int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * T) losses[i] = -logf(probs[i * V + targets[i]]);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void crossentropy_forward(float* losses, const float* probs, const int* targets, int B, int T, int V, int block_size) {
    crossentropy_forward_kernel1<<<ceil_div(B * T, block_size), block_size>>>(losses, probs, targets, B, T, V);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int B = 4, T = 7, V = 33;
    float* probs = (float*)malloc(B * T * V * sizeof(float));
    for (int i = 0; i < B * T; i++) {  // random rows normalised to sum to one
        float s = 0.0f;
        for (int v = 0; v < V; v++) s += (probs[i * V + v] = rng_uniform() + 1e-3f);
        for (int v = 0; v < V; v++) probs[i * V + v] /= s;
    }
    int* targets = make_random_int(B * T, V);
    float* ref = (float*)malloc(B * T * sizeof(float));
    for (int i = 0; i < B * T; i++) ref[i] = -logf(probs[i * V + targets[i]]);
    float* d_probs = to_device<float>(probs, B * T * V);
    int* d_targets;
    cudaCheck(cudaMalloc(&d_targets, B * T * sizeof(int)));
    cudaCheck(cudaMemcpy(d_targets, targets, B * T * sizeof(int), cudaMemcpyHostToDevice));
    float* d_losses = device_poisoned<float>(B * T);
    int block_sizes[] = {32, 64};
    for (int bs : block_sizes) {
        cudaCheck(cudaMemset(d_losses, 0xFF, B * T * sizeof(float)));
        crossentropy_forward(d_losses, d_probs, d_targets, B, T, V, bs);
        validate_result(d_losses, ref, "losses", B * T, 1e-5f);
    }
    cudaFree(d_probs); cudaFree(d_targets); cudaFree(d_losses);
    free(probs); free(targets); free(ref);
    write_report(report);
}
