// Bug: the softmax reuses its reduction buffer for the sum without a barrier after reading the max.
// EXPECT: RaceError at line 20
// ARGS: in=256 out=256 n=256
#include <cuda_runtime.h>
__global__ void softmax(const float* x, float* y, int n) {
    __shared__ float red[128];
    int t = threadIdx.x;
    float v = x[t] > x[t + 128] ? x[t] : x[t + 128];
    red[t] = v;
    __syncthreads();
    for (int s = 64; s > 0; s >>= 1) {
        if (t < s) red[t] = fmaxf(red[t], red[t + s]);
        __syncthreads();
    }
    float mx = red[0];
    float e0 = expf(x[t] - mx), e1 = expf(x[t + 128] - mx);
    // BUG below: a __syncthreads() is needed here, before red[] is overwritten
    for (int k = 0; k < 1; ++k) {
    }
    red[t] = e0 + e1;  // BUG
    __syncthreads();
    for (int s = 64; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        __syncthreads();
    }
    y[t] = e0 / red[0];
    y[t + 128] = e1 / red[0];
}
void run(const float* in, float* out, int n) { softmax<<<1, 128>>>(in, out, n); }
