// matmul_backward_bias.cu - dbias[o] += sum over rows of dout[:, o], in the style of llm.c dev/cuda.
//
// Versions:
//   kernel1: one thread per column, serial over rows
//   kernel2: one block per column, block-stride over rows, shared-memory tree reduction
//   kernel3: one block per column, warp-shuffle reduction then one value per warp (lane-guarded)
//   kernel4: 32 columns per block, threadIdx.x the column (coalesced), a [warps][32] shared tile
// Run: pytest tests/sim/test_realworld.py -k matmul_backward_bias (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void matmul_backward_bias_kernel1(float* dbias, const float* dout, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float s = 0.0f;
    for (int i = 0; i < N; i++) s += dout[i * OC + o];
    dbias[o] += s;
}

__global__ void matmul_backward_bias_kernel2(float* dbias, const float* dout, int N, int OC) {
    extern __shared__ float shared[];
    int o = blockIdx.x, tid = threadIdx.x;
    float s = 0.0f;
    for (int i = tid; i < N; i += blockDim.x) s += dout[i * OC + o];
    shared[tid] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride >= 1; stride /= 2) {
        if (tid < stride) shared[tid] += shared[tid + stride];
        __syncthreads();
    }
    if (tid == 0) dbias[o] += shared[0];
}

__global__ void matmul_backward_bias_kernel3(float* dbias, const float* dout, int N, int OC) {
    extern __shared__ float shared[];  // one float per warp
    int o = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    float s = 0.0f;
    for (int i = tid; i < N; i += blockDim.x) s += dout[i * OC + o];
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xFFFFFFFF, s, off);
    if (lane == 0) shared[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < warps ? shared[lane] : 0.0f;
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xFFFFFFFF, s, off);
        if (lane == 0) dbias[o] += s;
    }
}

__global__ void matmul_backward_bias_kernel4(float* dbias, const float* dout, int N, int OC) {
    __shared__ float smem[32][33];  // [warp][column], padded against bank conflicts
    int col = blockIdx.x * 32 + threadIdx.x, warp = threadIdx.y, warps = blockDim.y;
    float s = 0.0f;
    if (col < OC)
        for (int i = warp; i < N; i += warps) s += dout[i * OC + col];
    smem[warp][threadIdx.x] = s;
    __syncthreads();
    if (warp == 0 && col < OC) {
        float t = 0.0f;
        for (int w = 0; w < warps; w++) t += smem[w][threadIdx.x];
        dbias[col] += t;
    }
}

// ----------------------------------------------------------------------------------------------------
// Launchers (dbias accumulates)
// ----------------------------------------------------------------------------------------------------
void matmul_backward_bias(int version, float* dbias, const float* dout, int N, int OC, int block_size) {
    if (version == 1) matmul_backward_bias_kernel1<<<ceil_div(OC, block_size), block_size>>>(dbias, dout, N, OC);
    else if (version == 2)
        matmul_backward_bias_kernel2<<<OC, block_size, block_size * sizeof(float)>>>(dbias, dout, N, OC);
    else if (version == 3)
        matmul_backward_bias_kernel3<<<OC, block_size, block_size / 32 * sizeof(float)>>>(dbias, dout, N, OC);
    else matmul_backward_bias_kernel4<<<ceil_div(OC, 32), dim3(32, block_size / 32)>>>(dbias, dout, N, OC);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int N = 77, OC = 45;
    float* dout = make_random(N * OC);
    float* dbias0 = make_random(OC);
    float* ref = (float*)malloc(OC * sizeof(float));
    for (int o = 0; o < OC; o++) {
        double s = dbias0[o];
        for (int i = 0; i < N; i++) s += dout[i * OC + o];
        ref[o] = (float)s;
    }
    float* d_dout = to_device<float>(dout, N * OC);
    float* d_dbias = device_poisoned<float>(OC);
    int block_sizes[] = {32, 128, 512};
    for (int version = 1; version <= 4; version++)
        for (int bs : block_sizes) {
            cudaCheck(cudaMemcpy(d_dbias, dbias0, OC * sizeof(float), cudaMemcpyHostToDevice));
            matmul_backward_bias(version, d_dbias, d_dout, N, OC, bs);
            validate_result(d_dbias, ref, "dbias", OC, 1e-4f);
        }
    cudaFree(d_dout); cudaFree(d_dbias);
    free(dout); free(dbias0); free(ref);
    write_report(report);
}
