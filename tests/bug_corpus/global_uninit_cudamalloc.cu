// Bug: a cudaMalloc scratch buffer is read before anything wrote it (cudaMalloc memory is undefined).
// EXPECT: UninitializedReadError at line 12
// ARGS: in=256 out=256 n=256
#include <cuda_runtime.h>
__global__ void fill_half(const float* x, float* tmp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 2) tmp[i] = 2.0f * x[i];
}
__global__ void read_all(const float* tmp, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = tmp[i];  // BUG
}
void run(const float* in, float* out, int n) {
    float* tmp;
    cudaMalloc(&tmp, n * sizeof(float));
    fill_half<<<(n + 63) / 64, 64>>>(in, tmp, n);
    read_all<<<(n + 63) / 64, 64>>>(tmp, out, n);
    cudaFree(tmp);
}
