// smem_optin_64k.cu - a kernel that stages a 64 KB slice in dynamic shared memory after opting in with
// cudaFuncSetAttribute(..., cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) (needed above 48 KB;
// H100 allows up to 227 KB per block), as flash-attention-style kernels do.
//
// Versions:
//   kernel1: each block copies 16384 floats into shared memory, then writes them reversed
// Run: pytest tests/sim/test_realworld.py -k smem_optin_64k (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define SLICE 16384  // floats: 64 KB

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void reverse_slices_kernel(float* out, const float* in, int n) {
    extern __shared__ float slice[];
    int base = blockIdx.x * SLICE;
    for (int i = threadIdx.x; i < SLICE; i += blockDim.x) slice[i] = base + i < n ? in[base + i] : 0.0f;
    __syncthreads();
    for (int i = threadIdx.x; i < SLICE; i += blockDim.x)
        if (base + i < n) out[base + i] = slice[SLICE - 1 - i];
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void reverse_slices(float* out, const float* in, int n) {
    size_t bytes = SLICE * sizeof(float);
    cudaCheck(cudaFuncSetAttribute(reverse_slices_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    reverse_slices_kernel<<<ceil_div(n, SLICE), 256, bytes>>>(out, in, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int n = 2 * SLICE;
    float* in = make_random(n);
    float* ref = (float*)malloc(n * sizeof(float));
    for (int b = 0; b < n / SLICE; b++)
        for (int i = 0; i < SLICE; i++) ref[b * SLICE + i] = in[b * SLICE + SLICE - 1 - i];
    float* d_in = to_device<float>(in, n);
    float* d_out = device_poisoned<float>(n);
    reverse_slices(d_out, d_in, n);
    validate_result(d_out, ref, "out", n, 0.0f);
    cudaFree(d_in); cudaFree(d_out);
    free(in); free(ref);
    write_report(report);
}
