// Bug: thread 0 spins on a flag that a later thread sets; threads do not run in lock step.
// EXPECT: KernelTimeout at line 12
// ARGS: in=64 out=64 n=64
#include <cuda_runtime.h>
__global__ void handshake(const float* x, float* y, int n) {
    __shared__ volatile int flag;
    int t = threadIdx.x;
    if (t == 0) flag = 0;
    __syncthreads();
    if (t == 63) flag = 1;
    if (t == 0) {
        while (flag != 1) { }  // BUG
    }
    y[t] = x[t];
}
void run(const float* in, float* out, int n) { handshake<<<1, 64>>>(in, out, n); }
