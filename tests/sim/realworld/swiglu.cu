// swiglu.cu - the SwiGLU activation of a fused (gate | up) projection: out = silu(gate) * up, where the
// input row holds [gate (H) | up (H)].
//
// Versions:
//   kernel1: one thread per output element
//   kernel2: float4 over 4 outputs (H % 4 == 0), __expf fast exponential
// Run: pytest tests/sim/test_realworld.py -k swiglu (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__global__ void swiglu_kernel1(float* out, const float* inp, int N, int H) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * H) return;
    int row = idx / H, j = idx % H;
    out[idx] = silu(inp[row * 2 * H + j]) * inp[row * 2 * H + H + j];
}

__global__ void swiglu_kernel2(float* out, const float* inp, int N, int H) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x, H4 = H / 4;
    if (idx >= N * H4) return;
    int row = idx / H4, j4 = idx % H4;
    const float4* g = reinterpret_cast<const float4*>(inp + row * 2 * H);
    float4 a = g[j4], b = g[H4 + j4];
    float4 r;
    r.x = a.x / (1.0f + __expf(-a.x)) * b.x;
    r.y = a.y / (1.0f + __expf(-a.y)) * b.y;
    r.z = a.z / (1.0f + __expf(-a.z)) * b.z;
    r.w = a.w / (1.0f + __expf(-a.w)) * b.w;
    reinterpret_cast<float4*>(out)[idx] = r;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void swiglu(int version, float* out, const float* inp, int N, int H, int block_size) {
    if (version == 1) swiglu_kernel1<<<ceil_div(N * H, block_size), block_size>>>(out, inp, N, H);
    else swiglu_kernel2<<<ceil_div(N * H / 4, block_size), block_size>>>(out, inp, N, H);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation (__expf is approximate on a GPU: tolerance 1e-4)
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 11, H = 44;
    float* inp = make_random(N * 2 * H, 2.0f);
    float* ref = (float*)malloc(N * H * sizeof(float));
    for (int r = 0; r < N; r++)
        for (int j = 0; j < H; j++) {
            float g = inp[r * 2 * H + j];
            ref[r * H + j] = g / (1.0f + expf(-g)) * inp[r * 2 * H + H + j];
        }
    float* d_inp = to_device<float>(inp, N * 2 * H);
    float* d_out = device_poisoned<float>(N * H);
    int block_sizes[] = {32, 256};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, N * H * sizeof(float)));
            swiglu(version, d_out, d_inp, N, H, bs);
            validate_result(d_out, ref, "out", N * H, 1e-4f);
        }
    cudaFree(d_inp); cudaFree(d_out);
    free(inp); free(ref);
    write_report(report);
}
