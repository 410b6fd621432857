// Bug: 64 KB of static shared memory; a block may use at most 48 KB.
// EXPECT: LaunchError at line 6
// ARGS: in=256 out=256 n=256
#include <cuda_runtime.h>
__global__ void big_tile(const float* x, float* y, int n) {
    __shared__ float tile[16384];  // BUG
    int t = threadIdx.x;
    tile[t] = x[t];
    __syncthreads();
    y[t] = tile[255 - t];
}
void run(const float* in, float* out, int n) { big_tile<<<1, 256>>>(in, out, n); }
