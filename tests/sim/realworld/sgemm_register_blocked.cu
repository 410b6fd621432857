// sgemm_register_blocked.cu - SGEMM with 2-D register blocking and float4 loads of the tiles (the
// "kernel 5/6" steps of the well-known SGEMM optimisation walkthroughs).
//
// C (M x N) = alpha * A (M x K) @ B (K x N) + beta * C, row-major; M, N multiples of 64 and K of 8 here.
// Versions:
//   kernel1: 64x64 block tile, 8x8 per thread (64 threads), BK = 8, float4 global loads, A stored
//            transposed in shared memory
// Run: pytest tests/sim/test_realworld.py -k sgemm_register_blocked (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include "common.h"

#define BM 64
#define BN 64
#define BK 8
#define TM 8
#define TN 8

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void __launch_bounds__((BM * BN) / (TM * TN))
sgemm_register_blocked_kernel(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    __shared__ float As[BK][BM];  // transposed: As[k][m]
    __shared__ float Bs[BK][BN];
    const int threads = (BM * BN) / (TM * TN);  // 64
    int tid = threadIdx.x;
    int thread_row = tid / (BN / TN), thread_col = tid % (BN / TN);
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;
    float acc[TM][TN] = {{0.0f}};
    float reg_m[TM], reg_n[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        // A tile BM x BK = 512 floats = 128 float4: two per thread
        for (int l = tid; l < BM * BK / 4; l += threads) {
            int r = l / (BK / 4), c4 = l % (BK / 4);
            float4 v = reinterpret_cast<const float4*>(&A[r * K + k0 + c4 * 4])[0];
            As[c4 * 4 + 0][r] = v.x; As[c4 * 4 + 1][r] = v.y; As[c4 * 4 + 2][r] = v.z; As[c4 * 4 + 3][r] = v.w;
        }
        // B tile BK x BN = 512 floats
        for (int l = tid; l < BK * BN / 4; l += threads) {
            int r = l / (BN / 4), c4 = l % (BN / 4);
            reinterpret_cast<float4*>(&Bs[r][c4 * 4])[0] = reinterpret_cast<const float4*>(&B[(k0 + r) * N + c4 * 4])[0];
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k) {
            for (int i = 0; i < TM; ++i) reg_m[i] = As[k][thread_row * TM + i];
            for (int j = 0; j < TN; ++j) reg_n[j] = Bs[k][thread_col * TN + j];
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; j += 4) {
            float4* p = reinterpret_cast<float4*>(&C[(thread_row * TM + i) * N + thread_col * TN + j]);
            float4 c = *p;
            c.x = alpha * acc[i][j + 0] + beta * c.x;
            c.y = alpha * acc[i][j + 1] + beta * c.y;
            c.z = alpha * acc[i][j + 2] + beta * c.z;
            c.w = alpha * acc[i][j + 3] + beta * c.w;
            *p = c;
        }
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void sgemm_register_blocked(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    dim3 grid(N / BN, M / BM), block((BM * BN) / (TM * TN));
    sgemm_register_blocked_kernel<<<grid, block>>>(M, N, K, alpha, A, B, beta, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int M = 128, N = 64, K = 40;
    const float alpha = 0.5f, beta = -1.5f;
    float* A = make_random(M * K);
    float* B = make_random(K * N);
    float* C0 = make_random(M * N);
    float* ref = (float*)malloc(M * N * sizeof(float));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j];
            ref[i * N + j] = (float)(alpha * s + beta * C0[i * N + j]);
        }
    float* d_A = to_device<float>(A, M * K);
    float* d_B = to_device<float>(B, K * N);
    float* d_C = to_device<float>(C0, M * N);
    sgemm_register_blocked(M, N, K, alpha, d_A, d_B, beta, d_C);
    validate_result(d_C, ref, "C", M * N, 1e-4f);
    cudaFree(d_A); cudaFree(d_B); cudaFree(d_C);
    free(A); free(B); free(C0); free(ref);
    write_report(report);
}
