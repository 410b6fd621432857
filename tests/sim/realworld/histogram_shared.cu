// histogram_shared.cu - a 64-bin histogram with per-block privatised bins in shared memory (the CUDA
// samples' histogram64 idea), then one global atomicAdd per bin and block.
//
// Versions:
//   kernel1: global atomicAdd per element
//   kernel2: shared-memory bins (atomicAdd on shared), merged once per block
// Run: pytest tests/sim/test_realworld.py -k histogram_shared (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define BINS 64

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void histogram_kernel1(unsigned int* hist, const unsigned char* data, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&hist[data[i] % BINS], 1u);
}

__global__ void histogram_kernel2(unsigned int* hist, const unsigned char* data, int n) {
    __shared__ unsigned int bins[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&bins[data[i] % BINS], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x)
        if (bins[b]) atomicAdd(&hist[b], bins[b]);
}

// ----------------------------------------------------------------------------------------------------
// Launchers (hist accumulates)
// ----------------------------------------------------------------------------------------------------
void histogram(int version, unsigned int* hist, const unsigned char* data, int n, int block_size) {
    if (version == 1) histogram_kernel1<<<5, block_size>>>(hist, data, n);
    else histogram_kernel2<<<5, block_size>>>(hist, data, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int n = 7777;
    unsigned char* data = (unsigned char*)malloc(n);
    for (int i = 0; i < n; i++) data[i] = (unsigned char)(rng_u32() & 0xFF);
    float ref[BINS] = {0};
    for (int i = 0; i < n; i++) ref[data[i] % BINS] += 1.0f;
    unsigned char* d_data;
    cudaCheck(cudaMalloc(&d_data, n));
    cudaCheck(cudaMemcpy(d_data, data, n, cudaMemcpyHostToDevice));
    unsigned int* d_hist;
    cudaCheck(cudaMalloc(&d_hist, BINS * sizeof(unsigned int)));
    int block_sizes[] = {32, 100, 256};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_hist, 0, BINS * sizeof(unsigned int)));
            histogram(version, d_hist, d_data, n, bs);
            validate_result(d_hist, ref, "hist", BINS, 0.0f);
        }
    cudaFree(d_data); cudaFree(d_hist);
    free(data);
    write_report(report);
}
