// compact_coalesced.cu - stream compaction (keep the positive values) with a coalesced group: the lanes
// that pass the filter form cg::coalesced_threads(), rank themselves with an exclusive scan, and the
// group's leader reserves space with one atomicAdd (the "warp-aggregated atomics" pattern of the CUDA
// blog). Output order within a warp follows lane order; across warps it depends on scheduling, so the
// validation sorts.
//
// Versions:
//   kernel1: coalesced_threads + cg::exclusive_scan + leader atomicAdd + shfl of the base
// Run: pytest tests/sim/test_realworld.py -k compact_coalesced (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>
#include "common.h"
namespace cg = cooperative_groups;

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void compact_kernel(float* out, int* count, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && in[i] > 0.0f) {
        cg::coalesced_group g = cg::coalesced_threads();
        int rank = cg::exclusive_scan(g, 1);
        int base = 0;
        if (g.thread_rank() == 0) base = atomicAdd(count, (int)g.size());
        base = g.shfl(base, 0);
        out[base + rank] = in[i];
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void compact(float* out, int* count, const float* in, int n) {
    cudaCheck(cudaMemset(count, 0, sizeof(int)));
    compact_kernel<<<ceil_div(n, 128), 128>>>(out, count, in, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
static int cmp_float(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int n = 1000;
    float* in = make_random(n);
    float* ref = (float*)malloc(n * sizeof(float));
    int kept = 0;
    for (int i = 0; i < n; i++) if (in[i] > 0.0f) ref[kept++] = in[i];
    qsort(ref, kept, sizeof(float), cmp_float);
    float* d_in = to_device<float>(in, n);
    float* d_out = device_poisoned<float>(n);
    int* d_count;
    cudaCheck(cudaMalloc(&d_count, sizeof(int)));
    compact(d_out, d_count, d_in, n);
    int count = 0;
    cudaCheck(cudaMemcpy(&count, d_count, sizeof(int), cudaMemcpyDeviceToHost));
    float fcount = (float)count, fkept = (float)kept;
    float* got = (float*)malloc(n * sizeof(float));
    cudaCheck(cudaMemcpy(got, d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
    qsort(got, count <= n ? count : n, sizeof(float), cmp_float);
    float* d_sorted = to_device<float>(got, kept);
    validate_result(d_sorted, ref, "kept values", kept, 0.0f);
    float* d_fcount = to_device<float>(&fcount, 1);
    validate_result(d_fcount, &fkept, "count", 1, 0.0f);
    cudaFree(d_in); cudaFree(d_out); cudaFree(d_count); cudaFree(d_sorted); cudaFree(d_fcount);
    free(in); free(ref); free(got);
    write_report(report);
}
