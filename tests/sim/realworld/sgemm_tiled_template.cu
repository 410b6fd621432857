// sgemm_tiled_template.cu - shared-memory tiled SGEMM with the tile size as a template parameter, one
// instantiation per launch (the CUDA samples' matrixMul<BLOCK_SIZE> pattern).
//
// C (M x N) = A (M x K) @ B (K x N), row-major.
// Versions:
//   matmul_tiled<8> and matmul_tiled<16>, each launched on its own
// Run: pytest tests/sim/test_realworld.py -k sgemm_tiled_template (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
template <int BLOCK_SIZE>
__global__ void matmul_tiled(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ float As[BLOCK_SIZE][BLOCK_SIZE];
    __shared__ float Bs[BLOCK_SIZE][BLOCK_SIZE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * BLOCK_SIZE + ty, col = blockIdx.x * BLOCK_SIZE + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += BLOCK_SIZE) {
        As[ty][tx] = row < M && t + tx < K ? A[row * K + t + tx] : 0.0f;
        Bs[ty][tx] = t + ty < K && col < N ? B[(t + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BLOCK_SIZE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void sgemm_tiled(int tile, float* C, const float* A, const float* B, int M, int N, int K) {
    if (tile == 8) {
        dim3 block(8, 8), grid(ceil_div(N, 8), ceil_div(M, 8));
        matmul_tiled<8><<<grid, block>>>(C, A, B, M, N, K);
    } else {
        dim3 block(16, 16), grid(ceil_div(N, 16), ceil_div(M, 16));
        matmul_tiled<16><<<grid, block>>>(C, A, B, M, N, K);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int M = 37, N = 29, K = 41;
    float* A = make_random(M * K);
    float* B = make_random(K * N);
    float* ref = (float*)malloc(M * N * sizeof(float));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j];
            ref[i * N + j] = (float)s;
        }
    float* d_A = to_device<float>(A, M * K);
    float* d_B = to_device<float>(B, K * N);
    float* d_C = device_poisoned<float>(M * N);
    int tiles[] = {8, 16};
    for (int tile : tiles) {
        cudaCheck(cudaMemset(d_C, 0xFF, M * N * sizeof(float)));
        sgemm_tiled(tile, d_C, d_A, d_B, M, N, K);
        validate_result(d_C, ref, "C", M * N, 1e-4f);
    }
    cudaFree(d_A); cudaFree(d_B); cudaFree(d_C);
    free(A); free(B); free(ref);
    write_report(report);
}
