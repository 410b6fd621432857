// Bug: the legacy warp-synchronous reduction (volatile, no __syncwarp()) is a race since Volta.
// EXPECT: RaceError at line 6
// ARGS: in=256 out=1 n=256
#include <cuda_runtime.h>
__device__ void warp_reduce(volatile float* s, int t) {
    s[t] += s[t + 32];  // BUG
    s[t] += s[t + 16];
    s[t] += s[t + 8];
    s[t] += s[t + 4];
    s[t] += s[t + 2];
    s[t] += s[t + 1];
}
__global__ void reduce(const float* x, float* out, int n) {
    __shared__ float sdata[256];
    int t = threadIdx.x;
    sdata[t] = t < n ? x[t] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (t < s) sdata[t] += sdata[t + s];
        __syncthreads();
    }
    if (t < 32) warp_reduce(sdata, t);
    if (t == 0) out[0] = sdata[0];
}
void run(const float* in, float* out, int n) { reduce<<<1, 256>>>(in, out, n); }
