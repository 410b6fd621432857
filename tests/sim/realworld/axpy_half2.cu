// axpy_half2.cu - y = a * x + y on fp16 data, two values per instruction with __half2.
//
// Versions:
//   kernel1: scalar __half with __hfma
//   kernel2: __half2 with __hfma2 (N even), reinterpret_cast of the __half arrays
//   kernel3: __half2 loads, math in float through __half22float2 / __float22half2_rn
// Run: pytest tests/sim/test_realworld.py -k axpy_half2 (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void axpy_half_kernel1(__half* y, const __half* x, __half a, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = __hfma(a, x[i], y[i]);
}

__global__ void axpy_half_kernel2(__half* y, const __half* x, __half a, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N / 2) return;
    __half2* y2 = reinterpret_cast<__half2*>(y);
    const __half2* x2 = reinterpret_cast<const __half2*>(x);
    y2[i] = __hfma2(__half2half2(a), x2[i], y2[i]);
}

__global__ void axpy_half_kernel3(__half* y, const __half* x, float a, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N / 2) return;
    float2 xv = __half22float2(reinterpret_cast<const __half2*>(x)[i]);
    float2 yv = __half22float2(reinterpret_cast<__half2*>(y)[i]);
    reinterpret_cast<__half2*>(y)[i] = __float22half2_rn(make_float2(a * xv.x + yv.x, a * xv.y + yv.y));
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void axpy_half(int version, __half* y, const __half* x, float a, int N, int block_size) {
    if (version == 1) axpy_half_kernel1<<<ceil_div(N, block_size), block_size>>>(y, x, __float2half(a), N);
    else if (version == 2) axpy_half_kernel2<<<ceil_div(N / 2, block_size), block_size>>>(y, x, __float2half(a), N);
    else axpy_half_kernel3<<<ceil_div(N / 2, block_size), block_size>>>(y, x, a, N);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation: the reference uses the fp16-rounded inputs; tolerance covers one fp16 rounding
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 2 * 601;
    const float a = 0.75f;
    float* x = make_random(N);
    float* y = make_random(N);
    for (int i = 0; i < N; i++) { x[i] = (float)__float2half(x[i]); y[i] = (float)__float2half(y[i]); }
    float* ref = (float*)malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) ref[i] = a * x[i] + y[i];
    __half* d_x = to_device<__half>(x, N);
    __half* d_y = to_device<__half>(y, N);
    int block_sizes[] = {32, 256};
    for (int version = 1; version <= 3; version++)
        for (int bs : block_sizes) {
            __half* d_y2 = to_device<__half>(y, N);
            axpy_half(version, d_y2, d_x, a, N, bs);
            validate_result(d_y2, ref, "y", N, 2e-3f);
            cudaFree(d_y2);
        }
    cudaFree(d_x); cudaFree(d_y);
    free(x); free(y); free(ref);
    write_report(report);
}
