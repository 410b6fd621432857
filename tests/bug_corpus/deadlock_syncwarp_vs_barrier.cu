// Bug: lanes 0..15 wait in __syncwarp() for lanes 16..31, which wait at __syncthreads(): a deadlock.
// EXPECT: BarrierError at line 9
// ARGS: in=32 out=32 n=32
#include <cuda_runtime.h>
__global__ void stuck(const float* x, float* y, int n) {
    int t = threadIdx.x;
    float v = x[t];
    if (t < 16) {
        __syncwarp();  // BUG
    } else {
        __syncthreads();
    }
    y[t] = v;
}
void run(const float* in, float* out, int n) { stuck<<<1, 32>>>(in, out, n); }
