// argmax_rows.cu - per-row argmax (greedy decoding over logits) with warp-level (value, index) reductions;
// ties go to the lower index, as torch.argmax does.
//
// Versions:
//   kernel1: one warp per row, two __shfl_down_sync per step (value and index)
//   kernel2: one block per row, warp reduce, per-warp winners in shared memory, warp 0 finishes
// Run: pytest tests/sim/test_realworld.py -k argmax_rows (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cfloat>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__device__ void argmax_step(float& v, int& i, float ov, int oi) {
    if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
}
__device__ void warp_argmax(float& v, int& i) {
    for (int off = 16; off > 0; off /= 2) {
        float ov = __shfl_down_sync(0xFFFFFFFF, v, off);
        int oi = __shfl_down_sync(0xFFFFFFFF, i, off);
        argmax_step(v, i, ov, oi);
    }
}

__global__ void argmax_kernel1(int* out, const float* x, int N, int V) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    float v = -FLT_MAX;
    int i = INT_MAX;
    for (int j = lane; j < V; j += 32) argmax_step(v, i, x[row * V + j], j);
    warp_argmax(v, i);
    if (lane == 0) out[row] = i;
}

__global__ void argmax_kernel2(int* out, const float* x, int N, int V) {
    __shared__ float vals[32];
    __shared__ int idxs[32];
    int row = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    float v = -FLT_MAX;
    int i = INT_MAX;
    for (int j = tid; j < V; j += blockDim.x) argmax_step(v, i, x[row * V + j], j);
    warp_argmax(v, i);
    if (lane == 0) { vals[warp] = v; idxs[warp] = i; }
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? vals[lane] : -FLT_MAX;
        i = lane < warps ? idxs[lane] : INT_MAX;
        warp_argmax(v, i);
        if (lane == 0) out[row] = i;
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void argmax_rows(int version, int* out, const float* x, int N, int V, int block_size) {
    if (version == 1) argmax_kernel1<<<ceil_div(N * 32, block_size), block_size>>>(out, x, N, V);
    else argmax_kernel2<<<N, block_size>>>(out, x, N, V);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation: rows with planted ties
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 9, V = 333;
    float* x = make_random(N * V);
    for (int r = 0; r < N; r += 3) {  // a tie at the maximum: the lower index wins
        int a = rng_u32() % V, b = rng_u32() % V;
        x[r * V + a] = x[r * V + b] = 10.0f;
    }
    float* ref = (float*)malloc(N * sizeof(float));
    for (int r = 0; r < N; r++) {
        int best = 0;
        for (int j = 1; j < V; j++) if (x[r * V + j] > x[r * V + best]) best = j;
        ref[r] = (float)best;
    }
    float* d_x = to_device<float>(x, N * V);
    int* d_out = device_poisoned<int>(N);
    int block_sizes[] = {32, 64, 256};
    for (int version = 1; version <= 2; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemset(d_out, 0xFF, N * sizeof(int)));
            argmax_rows(version, d_out, d_x, N, V, bs);
            validate_result(d_out, ref, "argmax", N, 0.0f);
        }
    cudaFree(d_x); cudaFree(d_out);
    free(x); free(ref);
    write_report(report);
}
