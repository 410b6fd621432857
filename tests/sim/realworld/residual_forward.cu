// residual_forward.cu - the residual add out = inp1 + inp2, in the style of llm.c dev/cuda.
//
// Versions:
//   kernel1: one thread per element
//   kernel2: float4 vector loads/stores through reinterpret_cast (N % 4 == 0)
//   kernel3: Packed128 with a grid-stride loop
// Run: pytest tests/sim/test_realworld.py -k residual_forward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void residual_forward_kernel1(float* out, const float* inp1, const float* inp2, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = __ldcs(&inp1[i]) + __ldcs(&inp2[i]);
}

__global__ void residual_forward_kernel2(float* out, const float* inp1, const float* inp2, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i * 4 >= N) return;
    float4 a = reinterpret_cast<const float4*>(inp1)[i];
    float4 b = reinterpret_cast<const float4*>(inp2)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__global__ void residual_forward_kernel3(float* out, const float* inp1, const float* inp2, int N) {
    using x128 = Packed128<float>;
    for (int i = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size; i < N; i += gridDim.x * blockDim.x * x128::size) {
        x128 a = load128(inp1 + i), b = load128(inp2 + i), r;
        for (int k = 0; k < x128::size; k++) r[k] = a[k] + b[k];
        store128(out + i, r);
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void residual_forward(int version, float* out, const float* inp1, const float* inp2, int N, int block_size) {
    if (version == 1) residual_forward_kernel1<<<ceil_div(N, block_size), block_size>>>(out, inp1, inp2, N);
    else if (version == 2) residual_forward_kernel2<<<ceil_div(N / 4, block_size), block_size>>>(out, inp1, inp2, N);
    else residual_forward_kernel3<<<2, block_size>>>(out, inp1, inp2, N);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 4 * 517;
    float* a = make_random(N);
    float* b = make_random(N);
    float* ref = (float*)malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) ref[i] = a[i] + b[i];
    float* d_a = to_device<float>(a, N);
    float* d_b = to_device<float>(b, N);
    float* d_out = device_poisoned<float>(N);
    int block_sizes[] = {32, 128, 1024};
    for (int version = 1; version <= 3; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, N * sizeof(float)));
            residual_forward(version, d_out, d_a, d_b, N, bs);
            validate_result(d_out, ref, "out", N, 1e-6f);
        }
    cudaFree(d_a); cudaFree(d_b); cudaFree(d_out);
    free(a); free(b); free(ref);
    write_report(report);
}
