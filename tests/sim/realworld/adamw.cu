// adamw.cu - the AdamW optimizer step, in the style of llm.c dev/cuda.
//
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p)
// Versions:
//   kernel1: one thread per parameter, straight from the formula
//   kernel2: lerp form of the moment updates (fmaf), bias corrections precomputed on the host
// Run: pytest tests/sim/test_realworld.py -k adamw (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void adamw_cpu(float* p, const float* g, float* m, float* v, int N, int t, float lr, float b1, float b2,
                      float eps, float wd) {
    for (int i = 0; i < N; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        float mh = m[i] / (1 - powf(b1, t)), vh = v[i] / (1 - powf(b2, t));
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void adamw_kernel1(float* p, const float* g, float* m, float* v, int N, float lr, float b1, float b2,
                              float b1_corr, float b2_corr, float eps, float wd) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr * ((m[i] / b1_corr) / (sqrtf(v[i] / b2_corr) + eps) + wd * p[i]);
}

__device__ inline float lerp(float start, float end, float weight) { return fmaf(weight, end, fmaf(-weight, start, start)); }

__global__ void adamw_kernel2(float* p, const float* g, float* m, float* v, int N, float lr, float b1, float b2,
                              float b1_corr, float b2_corr, float eps, float wd) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float grad = g[i];
    float mi = lerp(grad, m[i], b1), vi = lerp(grad * grad, v[i], b2);
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / b1_corr) / (sqrtf(vi / b2_corr) + eps) + wd * p[i]);
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void adamw(int version, float* p, const float* g, float* m, float* v, int N, int t, float lr, float b1, float b2,
           float eps, float wd, int block_size) {
    float b1c = 1.0f - powf(b1, t), b2c = 1.0f - powf(b2, t);
    if (version == 1) adamw_kernel1<<<ceil_div(N, block_size), block_size>>>(p, g, m, v, N, lr, b1, b2, b1c, b2c, eps, wd);
    else adamw_kernel2<<<ceil_div(N, block_size), block_size>>>(p, g, m, v, N, lr, b1, b2, b1c, b2c, eps, wd);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation: three steps, so the moments carry over
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 1001;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float* p0 = make_random(N);
    float* g = make_random(N);
    for (int version = 1; version <= 2; version++) {
        float* p = (float*)malloc(N * sizeof(float));
        memcpy(p, p0, N * sizeof(float));
        float* m = (float*)calloc(N, sizeof(float));
        float* v = (float*)calloc(N, sizeof(float));
        float* d_p = to_device<float>(p0, N);
        float* d_g = to_device<float>(g, N);
        float* d_m = to_device<float>(m, N);
        float* d_v = to_device<float>(v, N);
        for (int t = 1; t <= 3; t++) {
            adamw_cpu(p, g, m, v, N, t, lr, b1, b2, eps, wd);
            adamw(version, d_p, d_g, d_m, d_v, N, t, lr, b1, b2, eps, wd, 128);
        }
        validate_result(d_p, p, "params", N, 1e-5f);
        validate_result(d_m, m, "m", N, 1e-5f);
        validate_result(d_v, v, "v", N, 1e-5f);
        cudaFree(d_p); cudaFree(d_g); cudaFree(d_m); cudaFree(d_v);
        free(p); free(m); free(v);
    }
    free(p0); free(g);
    write_report(report);
}
