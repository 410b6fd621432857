// rope.cu - rotary position embeddings applied in place to (B, T, NH, HS) queries, as LLaMA-style
// training code does (pairs (2i, 2i+1) rotated by angle t * theta^(-2i/HS)).
//
// Versions:
//   kernel1: one thread per rotated pair, frequencies computed with powf
//   kernel2: the same reading (x, y) as one float2 and cos/sin from a precomputed table
// Run: pytest tests/sim/test_realworld.py -k rope (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void rope_kernel1(float* x, int B, int T, int NH, int HS, float theta) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x, half_hs = HS / 2;
    if (idx >= B * T * NH * half_hs) return;
    int i = idx % half_hs, t = (idx / (half_hs * NH)) % T;
    float freq = powf(theta, -2.0f * i / HS), angle = t * freq;
    float c = cosf(angle), s = sinf(angle);
    float* p = x + (idx / half_hs) * HS + 2 * i;
    float a = p[0], b = p[1];
    p[0] = a * c - b * s;
    p[1] = a * s + b * c;
}

__global__ void rope_kernel2(float2* x, const float2* cos_sin, int B, int T, int NH, int HS) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x, half_hs = HS / 2;
    if (idx >= B * T * NH * half_hs) return;
    int i = idx % half_hs, t = (idx / (half_hs * NH)) % T;
    float2 cs = cos_sin[t * half_hs + i], v = x[idx];
    x[idx] = make_float2(v.x * cs.x - v.y * cs.y, v.x * cs.y + v.y * cs.x);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void rope(int version, float* x, const float* cos_sin, int B, int T, int NH, int HS, float theta, int block_size) {
    int pairs = B * T * NH * HS / 2;
    if (version == 1) rope_kernel1<<<ceil_div(pairs, block_size), block_size>>>(x, B, T, NH, HS, theta);
    else rope_kernel2<<<ceil_div(pairs, block_size), block_size>>>((float2*)x, (const float2*)cos_sin, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int B = 2, T = 9, NH = 3, HS = 16;
    const float theta = 10000.0f;
    const int n = B * T * NH * HS;
    float* x = make_random(n);
    float* table = (float*)malloc(T * HS * sizeof(float));
    float* ref = (float*)malloc(n * sizeof(float));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HS / 2; i++) {
            float angle = t * powf(theta, -2.0f * i / HS);
            table[(t * HS / 2 + i) * 2] = cosf(angle);
            table[(t * HS / 2 + i) * 2 + 1] = sinf(angle);
        }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < HS / 2; i++) {
                    int o = ((b * T + t) * NH + h) * HS + 2 * i;
                    float c = table[(t * HS / 2 + i) * 2], s = table[(t * HS / 2 + i) * 2 + 1];
                    ref[o] = x[o] * c - x[o + 1] * s;
                    ref[o + 1] = x[o] * s + x[o + 1] * c;
                }
    float* d_table = to_device<float>(table, T * HS);
    int block_sizes[] = {32, 128};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            float* d_x = to_device<float>(x, n);
            rope(version, d_x, d_table, B, T, NH, HS, theta, bs);
            validate_result(d_x, ref, "x", n, 1e-4f);
            cudaFree(d_x);
        }
    cudaFree(d_table);
    free(x); free(table); free(ref);
    write_report(report);
}
