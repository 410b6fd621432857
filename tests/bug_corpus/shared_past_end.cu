// Bug: the stencil reads one element past the end of its shared tile.
// EXPECT: OutOfBoundsError at line 11
// ARGS: in=256 out=256 n=256
#include <cuda_runtime.h>
__global__ void stencil(const float* x, float* y, int n) {
    __shared__ float tile[128];
    int t = threadIdx.x;
    tile[t] = x[blockIdx.x * 128 + t];
    __syncthreads();
    float left = t > 0 ? tile[t - 1] : 0.0f;
    float right = tile[t + 1];  // BUG
    y[blockIdx.x * 128 + t] = left + right;
}
void run(const float* in, float* out, int n) { stencil<<<n / 128, 128>>>(in, out, n); }
