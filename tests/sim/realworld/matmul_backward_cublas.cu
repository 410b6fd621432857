// matmul_backward_cublas.cu - the backward pass of a linear layer with cuBLAS, in the style of llm.c's
// matmul_backward: dinp = dout @ weight, dweight += dout^T @ inp, dbias += column sums of dout.
//
// inp (BT, C), weight (OC, C), dout (BT, OC), all row-major.
// Versions:
//   cublasSgemm for both products (transposes chosen for row-major data) + a bias kernel with a
//   per-block shared reduction (one block per output channel)
// Run: pytest tests/sim/test_realworld.py -k matmul_backward_cublas (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void bias_backward_kernel(float* dbias, const float* dout, int BT, int OC) {
    extern __shared__ float smem[];
    int o = blockIdx.x;
    float s = 0.0f;
    for (int i = threadIdx.x; i < BT; i += blockDim.x) s += dout[i * OC + o];
    smem[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) smem[threadIdx.x] += smem[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) dbias[o] += smem[0];
}

// ----------------------------------------------------------------------------------------------------
// Launchers (dweight and dbias accumulate; dinp is overwritten)
// ----------------------------------------------------------------------------------------------------
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int BT, int C, int OC, int block_size) {
    cublasHandle_t handle;
    cublasCreate(&handle);
    const float one = 1.0f, zero = 0.0f;
    // dinp (BT x C row-major) = dout @ weight: column-major dinp^T (C x BT) = weight^T (C x OC) @ dout^T
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, C, BT, OC, &one, weight, C, dout, OC, &zero, dinp, C);
    // dweight (OC x C row-major) += dout^T @ inp: column-major dweight^T (C x OC) = inp^T (C x BT) @ dout
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, &one, inp, C, dout, OC, &one, dweight, C);
    bias_backward_kernel<<<OC, block_size, block_size * sizeof(float)>>>(dbias, dout, BT, OC);
    cublasDestroy(handle);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int BT = 21, C = 18, OC = 30;
    float* dout = make_random(BT * OC);
    float* inp = make_random(BT * C);
    float* weight = make_random(OC * C);
    float* dweight0 = make_random(OC * C);
    float* dbias0 = make_random(OC);
    float* dinp = (float*)malloc(BT * C * sizeof(float));
    float* dweight = (float*)malloc(OC * C * sizeof(float));
    float* dbias = (float*)malloc(OC * sizeof(float));
    for (int i = 0; i < BT; i++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += (double)dout[i * OC + o] * weight[o * C + c];
            dinp[i * C + c] = (float)s;
        }
    for (int o = 0; o < OC; o++) {
        double sb = dbias0[o];
        for (int i = 0; i < BT; i++) sb += dout[i * OC + o];
        dbias[o] = (float)sb;
        for (int c = 0; c < C; c++) {
            double s = dweight0[o * C + c];
            for (int i = 0; i < BT; i++) s += (double)dout[i * OC + o] * inp[i * C + c];
            dweight[o * C + c] = (float)s;
        }
    }
    float* d_dout = to_device<float>(dout, BT * OC);
    float* d_inp = to_device<float>(inp, BT * C);
    float* d_weight = to_device<float>(weight, OC * C);
    float* d_dinp = device_poisoned<float>(BT * C);
    float* d_dweight = to_device<float>(dweight0, OC * C);
    float* d_dbias = to_device<float>(dbias0, OC);
    matmul_backward(d_dinp, d_dweight, d_dbias, d_dout, d_inp, d_weight, BT, C, OC, 64);
    validate_result(d_dinp, dinp, "dinp", BT * C, 1e-4f);
    validate_result(d_dweight, dweight, "dweight", OC * C, 1e-4f);
    validate_result(d_dbias, dbias, "dbias", OC, 1e-4f);
    cudaFree(d_dout); cudaFree(d_inp); cudaFree(d_weight); cudaFree(d_dinp); cudaFree(d_dweight); cudaFree(d_dbias);
    free(dout); free(inp); free(weight); free(dweight0); free(dbias0); free(dinp); free(dweight); free(dbias);
    write_report(report);
}
