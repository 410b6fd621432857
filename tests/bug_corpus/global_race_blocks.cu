// Bug: every block stores its own partial sum to out[0] (no atomicAdd): the last block to finish wins.
// EXPECT: RaceError at line 15
// ARGS: in=256 out=1 n=256
#include <cuda_runtime.h>
__global__ void block_sums(const float* x, float* out, int n) {
    __shared__ float s[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[0] = s[0];  // BUG
}
void run(const float* in, float* out, int n) { block_sums<<<(n + 63) / 64, 64>>>(in, out, n); }
