// dot_product_atomic.cu - dot product with a grid-stride loop, a warp reduction and one atomicAdd per warp;
// double accumulation variant with atomicAdd(double*) (sm_60+).
//
// Versions:
//   kernel1: float partials, __shfl_down_sync, lane 0 atomicAdd(float*)
//   kernel2: double partials, __reduce_add_sync-free butterfly with __shfl_xor_sync, atomicAdd(double*)
// Run: pytest tests/sim/test_realworld.py -k dot_product_atomic (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void dot_kernel1(float* out, const float* a, const float* b, int n) {
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += a[i] * b[i];
    for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xFFFFFFFF, s, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

__global__ void dot_kernel2(double* out, const float* a, const float* b, int n) {
    double s = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) s += (double)a[i] * b[i];
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xFFFFFFFF, s, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

__global__ void double_to_float(float* out, const double* in) { *out = (float)*in; }

// ----------------------------------------------------------------------------------------------------
// Launchers (out is overwritten)
// ----------------------------------------------------------------------------------------------------
void dot(int version, float* out, const float* a, const float* b, int n, int block_size) {
    if (version == 1) {
        cudaCheck(cudaMemset(out, 0, sizeof(float)));
        dot_kernel1<<<3, block_size>>>(out, a, b, n);
    } else {
        double* acc;
        cudaCheck(cudaMalloc(&acc, sizeof(double)));
        cudaCheck(cudaMemset(acc, 0, sizeof(double)));
        dot_kernel2<<<3, block_size>>>(acc, a, b, n);
        double_to_float<<<1, 1>>>(out, acc);
        cudaCheck(cudaFree(acc));
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int n = 4099;
    float* a = make_random(n);
    float* b = make_random(n);
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    float ref = (float)s;
    float* d_a = to_device<float>(a, n);
    float* d_b = to_device<float>(b, n);
    float* d_out = device_poisoned<float>(1);
    int block_sizes[] = {32, 256};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            dot(version, d_out, d_a, d_b, n, bs);
            validate_result(d_out, &ref, "dot", 1, version == 1 ? 1e-4f : 1e-6f);
        }
    cudaFree(d_a); cudaFree(d_b); cudaFree(d_out);
    free(a); free(b);
    write_report(report);
}
