// Bug: the tiled GEMM has no __syncthreads() after the inner product, so the next tile overwrites
// values other threads are still reading. Fast mode usually gives correct results: only checked mode sees it.
// EXPECT: RaceError at line 17
// ARGS: in=1024 out=1024 n=32
#include <cuda_runtime.h>
#define TILE 16
__global__ void matmul(const float* A, const float* B, float* C, int n) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < n / TILE; ++t) {
        As[ty][tx] = A[row * n + t * TILE + tx];
        Bs[ty][tx] = B[(t * TILE + ty) * n + col];
        __syncthreads();  // ... and a second __syncthreads() is missing after the k loop
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];  // BUG
    }
    C[row * n + col] = acc;
}
void run(const float* in, float* out, int n) {
    dim3 block(TILE, TILE), grid(n / TILE, n / TILE);
    matmul<<<grid, block>>>(in, in, out, n);
}
