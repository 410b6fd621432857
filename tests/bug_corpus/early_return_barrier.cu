// Bug: threads past the end return before the __syncthreads() the others wait at.
// EXPECT: BarrierError at line 10
// ARGS: in=1000 out=1000 n=1000
#include <cuda_runtime.h>
__global__ void shift(const float* x, float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    tile[threadIdx.x] = x[i];
    __syncthreads();  // BUG
    y[i] = tile[(threadIdx.x + 1) % blockDim.x];
}
void run(const float* in, float* out, int n) { shift<<<(n + 255) / 256, 256>>>(in, out, n); }
