// Bug: a full-mask shuffle inside if (lane < 16): lanes 16..31 never reach it.
// EXPECT: BarrierError at line 10
// ARGS: in=32 out=32 n=32
#include <cuda_runtime.h>
__global__ void half_warp_sum(const float* x, float* y, int n) {
    int t = threadIdx.x;
    float v = x[t];
    if (t < 16) {
        for (int o = 8; o > 0; o >>= 1)
            v += __shfl_down_sync(0xffffffff, v, o);  // BUG
    }
    y[t] = v;
}
void run(const float* in, float* out, int n) { half_warp_sum<<<1, 32>>>(in, out, n); }
