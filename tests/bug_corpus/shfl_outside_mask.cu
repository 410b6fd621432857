// Bug: a half-warp shuffle with mask 0xffff reads lane t + 8, which is outside the mask for t >= 8,
// and every lane keeps the (undefined) result.
// EXPECT: BarrierError at line 10
// ARGS: in=32 out=32 n=32
#include <cuda_runtime.h>
__global__ void pair_sums(const float* x, float* y, int n) {
    int t = threadIdx.x;
    float v = x[t];
    if (t < 16)
        v += __shfl_down_sync(0x0000ffff, v, 8);  // BUG
    y[t] = v;
}
void run(const float* in, float* out, int n) { pair_sums<<<1, 32>>>(in, out, n); }
