// reduce_sum_cg.cu - a full-array sum with cooperative groups: grid-stride partial sums, cg::reduce in
// each 32-thread tile, one atomicAdd per tile (the pattern of the CUDA samples' reductionMultiBlockCG,
// without grid sync).
//
// Versions:
//   kernel1: cg::reduce on thread_block_tile<32> + atomicAdd
//   kernel2: tile of 16 (two tiles per warp), tile.shfl_down loop by hand + atomicAdd from rank 0
// Run: pytest tests/sim/test_realworld.py -k reduce_sum_cg (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "common.h"
namespace cg = cooperative_groups;

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void reduce_sum_kernel1(float* out, const float* in, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += in[i];
    s = cg::reduce(tile, s, cg::plus<float>());
    if (tile.thread_rank() == 0) atomicAdd(out, s);
}

__global__ void reduce_sum_kernel2(float* out, const float* in, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += in[i];
    for (int off = tile.size() / 2; off > 0; off /= 2) s += tile.shfl_down(s, off);
    if (tile.thread_rank() == 0) atomicAdd(out, s);
}

// ----------------------------------------------------------------------------------------------------
// Launchers (out accumulates)
// ----------------------------------------------------------------------------------------------------
void reduce_sum(int version, float* out, const float* in, int n, int block_size) {
    int grid = 4;
    if (version == 1) reduce_sum_kernel1<<<grid, block_size>>>(out, in, n);
    else reduce_sum_kernel2<<<grid, block_size>>>(out, in, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int n = 5003;
    float* in = make_random(n);
    double s = 0;
    for (int i = 0; i < n; i++) s += in[i];
    float ref = (float)s;
    float* d_in = to_device<float>(in, n);
    float* d_out;
    cudaCheck(cudaMalloc(&d_out, sizeof(float)));
    int block_sizes[] = {32, 64, 256};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0, sizeof(float)));
            reduce_sum(version, d_out, d_in, n, bs);
            validate_result(d_out, &ref, "sum", 1, 1e-4f);
        }
    cudaFree(d_in); cudaFree(d_out);
    free(in);
    write_report(report);
}
