// Bug: an index computed from garbage writes far away from every buffer.
// EXPECT: KernelError at line 8
// ARGS: in=256 out=256 n=256
#include <cuda_runtime.h>
__global__ void scatter(const float* x, float* y, int n) {
    int t = threadIdx.x;
    long long far = (long long)t * 1000003LL * 4096LL;
    y[far] = x[t];  // BUG
}
void run(const float* in, float* out, int n) { scatter<<<1, 256>>>(in, out, n); }
