// Bug: the kernel has no bounds check; the grid rounds up, so the last threads read past the input.
// EXPECT: OutOfBoundsError at line 7
// ARGS: in=1000 out=1000 n=1000
#include <cuda_runtime.h>
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 2.0f * x[i];  // BUG
}
void run(const float* in, float* out, int n) { scale<<<(n + 255) / 256, 256>>>(in, out, n); }
