// encoder_forward.cu - token + position embeddings (GPT-2 encoder), in the style of llm.c dev/cuda.
//
// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
// Versions:
//   kernel1: one thread per (b, t), looping over channels
//   kernel2: one thread per output element
//   kernel3: one thread per 4 channels with float4 loads and stores (C % 4 == 0)
// Run: pytest tests/sim/test_realworld.py -k encoder_forward (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void encoder_forward_cpu(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float* e = wte + inp[b * T + t] * C;
            const float* p = wpe + t * C;
            for (int c = 0; c < C; c++) out[(b * T + t) * C + c] = e[c] + p[c];
        }
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void encoder_forward_kernel1(float* out, const int* inp, const float* wte, const float* wpe,
                                        int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T) return;
    int t = idx % T;
    const float* e = wte + inp[idx] * C;
    const float* p = wpe + t * C;
    for (int c = 0; c < C; c++) out[idx * C + c] = e[c] + p[c];
}

__global__ void encoder_forward_kernel2(float* out, const int* inp, const float* wte, const float* wpe,
                                        int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * C) return;
    int bt = idx / C, c = idx % C, t = bt % T;
    out[idx] = wte[inp[bt] * C + c] + wpe[t * C + c];
}

__global__ void encoder_forward_kernel3(float4* out, const int* inp, const float4* wte, const float4* wpe,
                                        int B, int T, int C) {
    int C4 = C / 4;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * C4) return;
    int bt = idx / C4, c4 = idx % C4, t = bt % T;
    float4 e = wte[inp[bt] * C4 + c4], p = wpe[t * C4 + c4];
    out[idx] = make_float4(e.x + p.x, e.y + p.y, e.z + p.z, e.w + p.w);  // one 16-byte store
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void encoder_forward(int version, float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C,
                     int block_size) {
    if (version == 1) {
        encoder_forward_kernel1<<<ceil_div(B * T, block_size), block_size>>>(out, inp, wte, wpe, B, T, C);
    } else if (version == 2) {
        encoder_forward_kernel2<<<ceil_div(B * T * C, block_size), block_size>>>(out, inp, wte, wpe, B, T, C);
    } else {
        encoder_forward_kernel3<<<ceil_div(B * T * C / 4, block_size), block_size>>>(
            (float4*)out, inp, (const float4*)wte, (const float4*)wpe, B, T, C);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int B = 2, T = 13, C = 36, V = 50;
    float* wte = make_random(V * C);
    float* wpe = make_random(T * C);
    int* inp = make_random_int(B * T, V);
    float* ref = (float*)malloc(B * T * C * sizeof(float));
    encoder_forward_cpu(ref, inp, wte, wpe, B, T, C);
    float* d_wte = to_device<float>(wte, V * C);
    float* d_wpe = to_device<float>(wpe, T * C);
    int* d_inp;
    cudaCheck(cudaMalloc(&d_inp, B * T * sizeof(int)));
    cudaCheck(cudaMemcpy(d_inp, inp, B * T * sizeof(int), cudaMemcpyHostToDevice));
    float* d_out;
    cudaCheck(cudaMalloc(&d_out, B * T * C * sizeof(float)));
    int block_sizes[] = {32, 64, 128};
    for (int version = 1; version <= 3; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, B * T * C * sizeof(float)));
            encoder_forward(version, d_out, d_inp, d_wte, d_wpe, B, T, C, bs);
            validate_result(d_out, ref, "out", B * T * C, 1e-5f);
        }
    cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_inp); cudaFree(d_out);
    free(wte); free(wpe); free(inp); free(ref);
    write_report(report);
}
