// common.h - the small helpers every file of the real-world corpus shares, in the style of llm.c's
// dev/cuda/common.h: ceil_div, error checks, a seeded host RNG, and a tolerance-aware validator that
// records its findings for the test harness.
//
// Contract with tests/sim/test_realworld.py and tests/test_parity.py: every corpus file defines
// `void validate(int seed, float* report)`. It builds random inputs on the host, runs the file's CPU
// reference and its launchers, compares each output with validate_result(), and ends with
// write_report(report): report[0] mismatches, [1] elements checked, [2] largest error, [3] outputs compared.
// The report buffer is device memory on a GPU (tensors live there), so it is written with cudaMemcpy.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// ----------------------------------------------------------------------------------------------------
// Utilities
// ----------------------------------------------------------------------------------------------------
template <class T> __host__ __device__ inline T ceil_div(T a, T b) { return (a + b - 1) / b; }

struct CorpusReport { float mismatches, checked, max_err, outputs; };
static CorpusReport g_report;

// A failed CUDA call counts as a mismatch and names itself (the harness then fails the case).
static inline void cuda_check(cudaError_t e, const char* file, int line) {
    if (e != cudaSuccess) {
        printf("[CUDA ERROR] at %s:%d: %s\n", file, line, cudaGetErrorString(e));
        g_report.mismatches += 1;
    }
}
#define cudaCheck(e) cuda_check((e), __FILE__, __LINE__)

// Packed128: 16 bytes of T moved with one vector load or store (llm.c's x128 idiom). The pointer must be
// 16-byte aligned: callers vectorise only when the element count per row is a multiple of Packed128::size.
template <class T> struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T payload[size];
    __device__ T& operator[](int i) { return payload[i]; }
    __device__ const T& operator[](int i) const { return payload[i]; }
};
template <class T> __device__ inline Packed128<T> load128(const T* p) { return *reinterpret_cast<const Packed128<T>*>(p); }
template <class T> __device__ inline void store128(T* p, const Packed128<T>& v) { *reinterpret_cast<Packed128<T>*>(p) = v; }

// ----------------------------------------------------------------------------------------------------
// Seeded host RNG (xorshift64*), so the CPU reference and the GPU see the same inputs everywhere
// ----------------------------------------------------------------------------------------------------
static unsigned long long g_rng_state = 1;
static inline void rng_seed(int seed) { g_rng_state = 0x9E3779B97F4A7C15ull * (unsigned long long)(seed + 1); }
static inline unsigned rng_u32() {
    g_rng_state ^= g_rng_state >> 12; g_rng_state ^= g_rng_state << 25; g_rng_state ^= g_rng_state >> 27;
    return (unsigned)((g_rng_state * 2685821657736338717ull) >> 32);
}
static inline float rng_uniform() { return (rng_u32() >> 8) * (1.0f / 16777216.0f); }  // [0, 1)
static inline float rng_normal() {
    float u = rng_uniform() + 1e-7f, v = rng_uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}
static inline float* make_random(size_t n, float scale = 1.0f) {
    float* p = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; ++i) p[i] = scale * rng_normal();
    return p;
}
static inline int* make_random_int(size_t n, int hi) {
    int* p = (int*)malloc(n * sizeof(int));
    for (size_t i = 0; i < n; ++i) p[i] = (int)(rng_u32() % (unsigned)hi);
    return p;
}
// A device copy of a host array (converted to T).
template <class T> static inline T* to_device(const float* h, size_t n) {
    T* tmp = (T*)malloc(n * sizeof(T));
    for (size_t i = 0; i < n; ++i) tmp[i] = (T)h[i];
    T* d;
    cudaCheck(cudaMalloc(&d, n * sizeof(T)));
    cudaCheck(cudaMemcpy(d, tmp, n * sizeof(T), cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}
// A device output buffer filled with NaN bytes, so an unwritten element fails validation.
template <class T> static inline T* device_poisoned(size_t n) {
    T* d;
    cudaCheck(cudaMalloc(&d, n * sizeof(T)));
    cudaCheck(cudaMemset(d, 0xFF, n * sizeof(T)));
    return d;
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
static inline void report_reset() { memset(&g_report, 0, sizeof g_report); }

// Compare n device values with the CPU reference: |got - ref| <= tol * (1 + |ref|); NaN never matches.
template <class T>
static inline void validate_result(const T* device, const float* ref, const char* name, size_t n, float tol) {
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaGetLastError());
    T* host = (T*)malloc(n * sizeof(T));
    cudaCheck(cudaMemcpy(host, device, n * sizeof(T), cudaMemcpyDeviceToHost));
    int shown = 0;
    for (size_t i = 0; i < n; ++i) {
        float got = (float)host[i], err = fabsf(got - ref[i]);
        bool ok = err <= tol * (1.0f + fabsf(ref[i]));
        if (!ok || got != got) {
            g_report.mismatches += 1;
            if (shown++ < 5) printf("%s mismatch at %zu: CPU %g, device %g\n", name, i, ref[i], got);
        }
        if (err > g_report.max_err || got != got) g_report.max_err = got != got ? INFINITY : err;
    }
    g_report.checked += (float)n;
    g_report.outputs += 1;
    free(host);
}

static inline void write_report(float* report) {
    cudaCheck(cudaDeviceSynchronize());
    cudaMemcpy(report, &g_report, sizeof g_report, cudaMemcpyHostToDevice);
}
