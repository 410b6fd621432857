// Bug: 2000 threads per block; CUDA allows at most 1024.
// EXPECT: LaunchError at line 9
// ARGS: in=2000 out=2000 n=2000
#include <cuda_runtime.h>
__global__ void copy(const float* x, float* y, int n) {
    int i = threadIdx.x;
    if (i < n) y[i] = x[i];
}
void run(const float* in, float* out, int n) { copy<<<1, 2000>>>(in, out, n); }  // BUG
