// stage_cost.cu - what lesson 07's pipeline_stage_in costs on the host, part by part (issue 35).
//
// Task 7.5's speed test restages every buffer set before each timed sample (the judge's poison): 21 calls of
// pipeline_stage_in per grade, each copying 64M floats from the GPU into pinned memory and filling the pinned
// output with NaN. This times those parts apart, with the course's nvcc flags, on 64M floats:
//   d2h       cudaMemcpy of the input, device to pinned host (cudaMallocHost)
//   nan_loop  the lesson's fill, `for (i) out[i] = NAN` (as in host_side.cu before the change)
//   memset    memset(out, 0xFF, bytes): every float 0xFFFFFFFF, a NaN
//
// Run it (GPU machine):
//   nvcc -O3 -lineinfo -std=c++17 -o /tmp/stage_cost benchmarks/stage_cost.cu && /tmp/stage_cost
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

static float* g_out = nullptr;  // a global pointer, as the lesson's g_h_out

static void nan_loop(long long n) {
    for (long long i = 0; i < n; ++i) g_out[i] = NAN;
}

template <class F>
static double best_ms(F f, int reps = 5) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        auto t1 = std::chrono::steady_clock::now();
        double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
        best = ms < best ? ms : best;
    }
    return best;
}

int main() {
    const long long n = 1LL << 26;
    const size_t bytes = n * sizeof(float);
    float *h_in = nullptr, *d_x = nullptr;
    cudaMallocHost(&h_in, bytes);
    cudaHostAlloc(&g_out, bytes, cudaHostAllocDefault);
    cudaMalloc(&d_x, bytes);
    cudaMemset(d_x, 0, bytes);
    cudaDeviceSynchronize();
    double d2h = best_ms([&] { cudaMemcpy(h_in, d_x, bytes, cudaMemcpyDeviceToHost); });
    double loop = best_ms([&] { nan_loop(n); });
    double ms = best_ms([&] { memset(g_out, 0xFF, bytes); });
    bool nan_ok = std::isnan(g_out[0]) && std::isnan(g_out[n - 1]);
    printf("64M floats: d2h %.1f ms (%.1f GB/s), nan_loop %.1f ms, memset %.1f ms (NaN: %s)\n", d2h,
           bytes / d2h / 1e6, loop, ms, nan_ok ? "yes" : "no");
    return 0;
}
