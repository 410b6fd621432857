// scan_blelloch.cu - exclusive prefix sum of any length: a work-efficient (Blelloch) scan per block in
// shared memory, a scan of the block totals, and a uniform add (GPU Gems 3, chapter 39).
//
// Versions:
//   scan_blocks + scan of the sums (recursive, one level for these sizes) + add_block_sums
// Run: pytest tests/sim/test_realworld.py -k scan_blelloch (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define SCAN_BLOCK 128  // threads; each block scans 2 * SCAN_BLOCK elements

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void scan_blocks(int* out, const int* in, int* block_sums, int n) {
    __shared__ int temp[2 * SCAN_BLOCK];
    int tid = threadIdx.x, base = blockIdx.x * 2 * SCAN_BLOCK;
    temp[2 * tid] = base + 2 * tid < n ? in[base + 2 * tid] : 0;
    temp[2 * tid + 1] = base + 2 * tid + 1 < n ? in[base + 2 * tid + 1] : 0;
    int offset = 1;
    for (int d = SCAN_BLOCK; d > 0; d >>= 1) {  // up-sweep
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
            temp[bi] += temp[ai];
        }
        offset *= 2;
    }
    if (tid == 0) {
        if (block_sums) block_sums[blockIdx.x] = temp[2 * SCAN_BLOCK - 1];
        temp[2 * SCAN_BLOCK - 1] = 0;
    }
    for (int d = 1; d <= SCAN_BLOCK; d *= 2) {  // down-sweep
        offset >>= 1;
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
            int t = temp[ai];
            temp[ai] = temp[bi];
            temp[bi] += t;
        }
    }
    __syncthreads();
    if (base + 2 * tid < n) out[base + 2 * tid] = temp[2 * tid];
    if (base + 2 * tid + 1 < n) out[base + 2 * tid + 1] = temp[2 * tid + 1];
}

__global__ void add_block_sums(int* out, const int* scanned_sums, int n) {
    int i = blockIdx.x * 2 * SCAN_BLOCK + threadIdx.x;
    int add = scanned_sums[blockIdx.x];
    if (i < n) out[i] += add;
    if (i + SCAN_BLOCK < n) out[i + SCAN_BLOCK] += add;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void exclusive_scan(int* out, const int* in, int n) {
    int blocks = ceil_div(n, 2 * SCAN_BLOCK);
    int *sums, *sums_scanned;
    cudaCheck(cudaMalloc(&sums, blocks * sizeof(int)));
    cudaCheck(cudaMalloc(&sums_scanned, blocks * sizeof(int)));
    scan_blocks<<<blocks, SCAN_BLOCK>>>(out, in, sums, n);
    scan_blocks<<<1, SCAN_BLOCK>>>(sums_scanned, sums, nullptr, blocks);  // blocks <= 2 * SCAN_BLOCK
    add_block_sums<<<blocks, SCAN_BLOCK>>>(out, sums_scanned, n);
    cudaCheck(cudaGetLastError());
    cudaFree(sums);
    cudaFree(sums_scanned);
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    int sizes[] = {1, 255, 256, 1000, 3001};
    for (int n : sizes) {
        int* in = make_random_int(n, 100);
        float* ref = (float*)malloc(n * sizeof(float));
        int run = 0;
        for (int i = 0; i < n; i++) { ref[i] = (float)run; run += in[i]; }
        int* d_in;
        cudaCheck(cudaMalloc(&d_in, n * sizeof(int)));
        cudaCheck(cudaMemcpy(d_in, in, n * sizeof(int), cudaMemcpyHostToDevice));
        int* d_out = device_poisoned<int>(n);
        exclusive_scan(d_out, d_in, n);
        validate_result(d_out, ref, "scan", n, 0.0f);
        cudaFree(d_in); cudaFree(d_out);
        free(in); free(ref);
    }
    write_report(report);
}
