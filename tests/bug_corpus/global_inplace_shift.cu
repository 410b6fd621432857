// Bug: an in-place shift: each thread reads the element its neighbour (maybe in another block) overwrites.
// EXPECT: RaceError at line 9
// ARGS: in=256 out=256 n=256
#include <cuda_runtime.h>
__global__ void copy(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }
__global__ void shift_left(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i + 1 < n)
        y[i] = y[i + 1];  // BUG
}
void run(const float* in, float* out, int n) {
    copy<<<(n + 63) / 64, 64>>>(in, out, n);
    shift_left<<<(n + 63) / 64, 64>>>(out, n);
}
