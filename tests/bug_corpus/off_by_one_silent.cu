// Bug: the bounds check uses n - 1, so the last element is never written. No tool reports it; only the
// NaN poison the harness puts into outputs reveals it.
// EXPECT: poison
// ARGS: in=1000 out=1000 n=1000
#include <cuda_runtime.h>
__global__ void square(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) y[i] = x[i] * x[i];  // BUG
}
void run(const float* in, float* out, int n) { square<<<(n + 255) / 256, 256>>>(in, out, n); }
