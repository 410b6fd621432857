// gelu_forward.cu - GELU (tanh approximation), in the style of llm.c dev/cuda.
//
// Versions:
//   kernel1: one thread per element
//   kernel2: one thread per Packed128 (4 floats) with 128-bit loads and stores (N % 4 == 0 handled by
//            a scalar tail in the last thread)
//   kernel3: grid-stride loop, fixed grid
// Run: pytest tests/sim/test_realworld.py -k gelu_forward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void gelu_forward_cpu(float* out, const float* inp, int N) {
    for (int i = 0; i < N; i++) {
        float x = inp[i], cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
    }
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__device__ inline float gelu(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
}

__global__ void gelu_forward_kernel1(float* out, const float* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = gelu(inp[i]);
}

__global__ void gelu_forward_kernel2(float* out, const float* inp, int N) {
    using x128 = Packed128<float>;
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i + x128::size <= N) {
        x128 packed_inp = load128(inp + i);
        x128 packed_out;
        for (int k = 0; k < x128::size; ++k) packed_out[k] = gelu(packed_inp[k]);
        store128(out + i, packed_out);
    } else {
        for (; i < N; ++i) out[i] = gelu(inp[i]);  // the ragged tail
    }
}

__global__ void gelu_forward_kernel3(float* out, const float* inp, int N) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += blockDim.x * gridDim.x) out[i] = gelu(inp[i]);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void gelu_forward(int version, float* out, const float* inp, int N, int block_size) {
    if (version == 1) gelu_forward_kernel1<<<ceil_div(N, block_size), block_size>>>(out, inp, N);
    else if (version == 2) gelu_forward_kernel2<<<ceil_div(N, block_size * 4), block_size>>>(out, inp, N);
    else gelu_forward_kernel3<<<3, block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 1027;  // not a multiple of 4: the packed version's tail runs too
    float* inp = make_random(N, 2.0f);
    float* ref = (float*)malloc(N * sizeof(float));
    gelu_forward_cpu(ref, inp, N);
    float* d_inp = to_device<float>(inp, N);
    float* d_out = device_poisoned<float>(N);
    int block_sizes[] = {32, 128, 256};
    for (int version = 1; version <= 3; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, N * sizeof(float)));
            gelu_forward(version, d_out, d_inp, N, bs);
            validate_result(d_out, ref, "out", N, 1e-5f);
        }
    cudaFree(d_inp); cudaFree(d_out);
    free(inp); free(ref);
    write_report(report);
}
