// Bug: the tree reduction has no __syncthreads() inside its loop.
// EXPECT: RaceError at line 13
// ARGS: in=1024 out=4 n=1024
#include <cuda_runtime.h>
__global__ void reduce(const float* x, float* out, int n) {
    __shared__ float sdata[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    sdata[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];  // BUG
        }
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}
void run(const float* in, float* out, int n) { reduce<<<(n + 255) / 256, 256>>>(in, out, n); }
