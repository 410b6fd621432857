// host_launch_config_names.cu - host code that names its launch configuration `blockDim` and `gridDim`
// (plain C++ locals: the built-ins exist only in device code), as many tutorials write it.
//
// Versions:
//   kernel1: y = 2 * x + 1 over a 2-D grid of 1-D blocks
// Run: pytest tests/sim/test_realworld.py -k host_launch_config_names (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void affine_kernel(float* y, const float* x, int n) {
    int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void affine(float* y, const float* x, int n) {
    dim3 blockDim(64);
    int blocks = ceil_div(n, (int)blockDim.x);
    dim3 gridDim(4, ceil_div(blocks, 4));
    affine_kernel<<<gridDim, blockDim>>>(y, x, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int n = 1001;
    float* x = make_random(n);
    float* ref = (float*)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) ref[i] = 2.0f * x[i] + 1.0f;
    float* d_x = to_device<float>(x, n);
    float* d_y = device_poisoned<float>(n);
    affine(d_y, d_x, n);
    validate_result(d_y, ref, "y", n, 1e-6f);
    cudaFree(d_x); cudaFree(d_y);
    free(x); free(ref);
    write_report(report);
}
