// warp_scan.cu - inclusive prefix sums with warp shuffles: __shfl_up_sync within a warp, warp totals
// through shared memory, a second warp-level scan of the totals (the CUB BlockScan "warp scans" layout).
//
// Versions:
//   kernel1: per-block inclusive scan of float values (rows of length <= blockDim.x), lane guard on shfl_up
//   kernel2: the same with cg::inclusive_scan on a 32-thread tile
// Run: pytest tests/sim/test_realworld.py -k warp_scan (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>
#include "common.h"
namespace cg = cooperative_groups;

// ----------------------------------------------------------------------------------------------------
// Kernels: block b scans row b (length C <= blockDim.x, blockDim.x a multiple of 32)
// ----------------------------------------------------------------------------------------------------
__device__ float warp_inclusive_scan(float v) {
    int lane = threadIdx.x % 32;
    for (int d = 1; d < 32; d *= 2) {
        float up = __shfl_up_sync(0xFFFFFFFF, v, d);
        if (lane >= d) v += up;
    }
    return v;
}

__global__ void row_scan_kernel1(float* out, const float* in, int C) {
    __shared__ float warp_totals[32];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    float v = tid < C ? in[blockIdx.x * C + tid] : 0.0f;
    v = warp_inclusive_scan(v);
    if (lane == 31) warp_totals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < warps ? warp_totals[lane] : 0.0f;
        t = warp_inclusive_scan(t);
        if (lane < warps) warp_totals[lane] = t;
    }
    __syncthreads();
    if (warp > 0) v += warp_totals[warp - 1];
    if (tid < C) out[blockIdx.x * C + tid] = v;
}

__global__ void row_scan_kernel2(float* out, const float* in, int C) {
    __shared__ float warp_totals[32];
    auto tile = cg::tiled_partition<32>(cg::this_thread_block());
    int tid = threadIdx.x, warp = tid / 32, warps = blockDim.x / 32;
    float v = tid < C ? in[blockIdx.x * C + tid] : 0.0f;
    v = cg::inclusive_scan(tile, v);
    if (tile.thread_rank() == 31) warp_totals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = tile.thread_rank() < warps ? warp_totals[tile.thread_rank()] : 0.0f;
        t = cg::exclusive_scan(tile, t, cg::plus<float>());
        if (tile.thread_rank() < warps) warp_totals[tile.thread_rank()] = t;
    }
    __syncthreads();
    if (tid < C) out[blockIdx.x * C + tid] = v + warp_totals[warp];
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void row_scan(int version, float* out, const float* in, int rows, int C) {
    int threads = ceil_div(C, 32) * 32;
    if (version == 1) row_scan_kernel1<<<rows, threads>>>(out, in, C);
    else row_scan_kernel2<<<rows, threads>>>(out, in, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int rows = 6, C = 300;
    float* in = make_random(rows * C);
    float* ref = (float*)malloc(rows * C * sizeof(float));
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < C; c++) ref[r * C + c] = (float)(s += in[r * C + c]);
    }
    float* d_in = to_device<float>(in, rows * C);
    float* d_out = device_poisoned<float>(rows * C);
    for (int version = 1; version <= 2; version++) {
        cudaCheck(cudaMemset(d_out, 0xFF, rows * C * sizeof(float)));
        row_scan(version, d_out, d_in, rows, C);
        validate_result(d_out, ref, "scan", rows * C, 1e-4f);
    }
    cudaFree(d_in); cudaFree(d_out);
    free(in); free(ref);
    write_report(report);
}
