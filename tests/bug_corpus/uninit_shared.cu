// Bug: only half the block fills the shared tile, but every thread reads its own slot.
// EXPECT: UninitializedReadError at line 11
// ARGS: in=256 out=256 n=256
#include <cuda_runtime.h>
__global__ void copy_half(const float* x, float* y, int n) {
    __shared__ float tile[256];
    int t = threadIdx.x;
    if (t < 128) tile[t] = x[t];
    __syncthreads();
    if (t < n)
        y[t] = tile[t];  // BUG
}
void run(const float* in, float* out, int n) { copy_half<<<1, 256>>>(in, out, n); }
