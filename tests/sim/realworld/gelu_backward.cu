// gelu_backward.cu - the GELU (tanh approximation) backward pass, in the style of llm.c dev/cuda.
//
// dinp = local_grad(inp) * dout
// Versions:
//   kernel1: one thread per element
//   kernel2: Packed128 loads of inp and dout, one 128-bit store of dinp (N % 4 == 0 required here)
// Run: pytest tests/sim/test_realworld.py -k gelu_backward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static float gelu_grad_cpu(float x) {
    float cube = 0.044715f * x * x * x;
    float tanh_arg = GELU_SCALING_FACTOR * (x + cube), tanh_out = tanhf(tanh_arg);
    float coshf_out = coshf(tanh_arg), sech_out = 1.0f / (coshf_out * coshf_out);
    return 0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__device__ inline float gelu_grad(float x) {
    float cube = 0.044715f * x * x * x;
    float tanh_arg = GELU_SCALING_FACTOR * (x + cube), tanh_out = tanhf(tanh_arg);
    float coshf_out = coshf(tanh_arg), sech_out = 1.0f / (coshf_out * coshf_out);
    return 0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void gelu_backward_kernel1(float* dinp, const float* inp, const float* dout, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) dinp[i] = gelu_grad(inp[i]) * dout[i];
}

__global__ void gelu_backward_kernel2(float* dinp, const float* inp, const float* dout, int N) {
    using x128 = Packed128<float>;
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    x128 x = load128(inp + i), d = load128(dout + i), r;
    for (int k = 0; k < x128::size; ++k) r[k] = gelu_grad(x[k]) * d[k];
    store128(dinp + i, r);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void gelu_backward(int version, float* dinp, const float* inp, const float* dout, int N, int block_size) {
    if (version == 1) gelu_backward_kernel1<<<ceil_div(N, block_size), block_size>>>(dinp, inp, dout, N);
    else gelu_backward_kernel2<<<ceil_div(N, block_size * 4), block_size>>>(dinp, inp, dout, N);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 4 * 333;
    float* inp = make_random(N, 2.0f);
    float* dout = make_random(N);
    float* ref = (float*)malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) ref[i] = gelu_grad_cpu(inp[i]) * dout[i];
    float* d_inp = to_device<float>(inp, N);
    float* d_dout = to_device<float>(dout, N);
    float* d_dinp = device_poisoned<float>(N);
    int block_sizes[] = {32, 64, 512};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_dinp, 0xFF, N * sizeof(float)));
            gelu_backward(version, d_dinp, d_inp, d_dout, N, bs);
            validate_result(d_dinp, ref, "dinp", N, 1e-5f);
        }
    cudaFree(d_inp); cudaFree(d_dout); cudaFree(d_dinp);
    free(inp); free(dout); free(ref);
    write_report(report);
}
