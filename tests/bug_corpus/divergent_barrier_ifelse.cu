// Bug: the two halves of the block wait at different __syncthreads() calls.
// EXPECT: BarrierError at line 10
// ARGS: in=64 out=64 n=64
#include <cuda_runtime.h>
__global__ void branchy(const float* x, float* y, int n) {
    __shared__ float s[64];
    int t = threadIdx.x;
    if (t < 32) {
        s[t] = x[t] * 2.0f;
        __syncthreads();  // BUG
        y[t] = s[63 - t];
    } else {
        s[t] = x[t];
        __syncthreads();
        y[t] = s[63 - t];
    }
}
void run(const float* in, float* out, int n) { branchy<<<1, 64>>>(in, out, n); }
