// gemm_wmma.cu: lesson 03, closing section (ungraded, GPU only): tensor cores through WMMA.
//
//     C[M,N] = A[M,K] @ B[K,N]        A, B row-major fp16 (or bf16), C row-major float32
//
// Tensor cores multiply small matrix tiles in one warp-wide instruction. The WMMA API (nvcuda::wmma,
// <mma.h>) exposes them as "fragments": a warp loads a 16x16 tile of A and of B into fragments,
// mma_sync multiplies them and accumulates into a 16x16 float fragment, store_matrix_sync writes it.
// How the tile's elements are spread over the 32 lanes is unspecified: only the warp as a whole
// touches a fragment, with the *_sync calls.
//
// Versions:
//   gemm_wmma_fp16    one warp per 16x16 tile of C, fp16 inputs, fp32 accumulation
//   gemm_wmma_bf16    the same with bf16 inputs (same exponent range as fp32, fewer mantissa bits)
// Both need M, N, K to be multiples of 16 (the launcher does nothing otherwise; the notebook checks).
// This is the simplest tensor-core kernel: every fragment is loaded straight from global memory, with no
// shared-memory staging, so it is far from cuBLAS's tensor-core speed; lesson 03's README says what the
// fast versions add. The CPU simulator does not run this file.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

constexpr int WM = 16, WN = 16, WK = 16;
constexpr int WARPS_PER_BLOCK = 4;

template <typename T>
__global__ void gemm_wmma_kernel(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C,
                                 int M, int N, int K) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;  // one warp per tile of C
    const int tiles_n = N / WN;
    const int tm = warp / tiles_n, tn = warp % tiles_n;
    if (tm >= M / WM) return;  // the whole warp leaves together

    wmma::fragment<wmma::matrix_a, WM, WN, WK, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, WM, WN, WK, T, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, WM, WN, WK, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < K; k += WK) {
        wmma::load_matrix_sync(a, A + tm * WM * K + k, K);      // 16x16 tile of A at (tm*16, k), leading dim K
        wmma::load_matrix_sync(b, B + k * N + tn * WN, N);      // 16x16 tile of B at (k, tn*16), leading dim N
        wmma::mma_sync(c, a, b, c);                             // c += a @ b on the tensor cores
    }
    wmma::store_matrix_sync(C + tm * WM * N + tn * WN, c, N, wmma::mem_row_major);
}

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

template <typename T>
static void launch_wmma(const T* A, const T* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || M % WM || N % WN || K % WK) return;
    const int warps = (M / WM) * (N / WN);
    gemm_wmma_kernel<T><<<ceil_div(warps, WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK>>>(A, B, C, M, N, K);
}

// Contract: A [M,K] fp16, B [K,N] fp16, C [M,N] float32; M, N, K multiples of 16.
void gemm_wmma_fp16(const __half* A, const __half* B, float* C, int M, int N, int K) {
    launch_wmma<__half>(A, B, C, M, N, K);
}

// Contract: A [M,K] bf16, B [K,N] bf16, C [M,N] float32; M, N, K multiples of 16.
void gemm_wmma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
    launch_wmma<__nv_bfloat16>(A, B, C, M, N, K);
}
