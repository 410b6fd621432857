// conv1d_halo.cu - 1-D convolution with the filter in __constant__ memory and a shared-memory tile with
// halo cells (the textbook "tiled 1D convolution" pattern).
//
// out[i] = sum_k in[i + k - R] * filter[k], zero outside [0, n)
// Versions:
//   kernel1: straight from global memory
//   kernel2: shared tile of blockDim.x + 2R elements, halos loaded by the first/last R threads
// Run: pytest tests/sim/test_realworld.py -k conv1d_halo (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define RADIUS 3
#define TAPS (2 * RADIUS + 1)
__constant__ float c_filter[TAPS];

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void conv1d_kernel1(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int k = 0; k < TAPS; k++) {
        int j = i + k - RADIUS;
        if (j >= 0 && j < n) s += in[j] * c_filter[k];
    }
    out[i] = s;
}

__global__ void conv1d_kernel2(float* out, const float* in, int n) {
    extern __shared__ float tile[];  // blockDim.x + 2 * RADIUS
    int i = blockIdx.x * blockDim.x + threadIdx.x, t = threadIdx.x + RADIUS;
    tile[t] = i < n ? in[i] : 0.0f;
    if (threadIdx.x < RADIUS) {
        int left = i - RADIUS, right = i + blockDim.x;
        tile[threadIdx.x] = left >= 0 && left < n ? in[left] : 0.0f;
        tile[t + blockDim.x] = right < n ? in[right] : 0.0f;
    }
    __syncthreads();
    if (i >= n) return;
    float s = 0.0f;
    for (int k = 0; k < TAPS; k++) s += tile[t + k - RADIUS] * c_filter[k];
    out[i] = s;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void conv1d(int version, float* out, const float* in, const float* filter_host, int n, int block_size) {
    cudaCheck(cudaMemcpyToSymbol(c_filter, filter_host, TAPS * sizeof(float)));
    if (version == 1) conv1d_kernel1<<<ceil_div(n, block_size), block_size>>>(out, in, n);
    else conv1d_kernel2<<<ceil_div(n, block_size), block_size, (block_size + 2 * RADIUS) * sizeof(float)>>>(out, in, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int n = 1009;
    float* in = make_random(n);
    float* filter = make_random(TAPS);
    float* ref = (float*)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) {
        float s = 0.0f;
        for (int k = 0; k < TAPS; k++) {
            int j = i + k - RADIUS;
            if (j >= 0 && j < n) s += in[j] * filter[k];
        }
        ref[i] = s;
    }
    float* d_in = to_device<float>(in, n);
    float* d_out = device_poisoned<float>(n);
    int block_sizes[] = {32, 128};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, n * sizeof(float)));
            conv1d(version, d_out, d_in, filter, n, bs);
            validate_result(d_out, ref, "out", n, 1e-5f);
        }
    cudaFree(d_in); cudaFree(d_out);
    free(in); free(filter); free(ref);
    write_report(report);
}
