// attention_forward_cublas.cu - causal self-attention forward with cuBLAS strided-batched GEMMs around
// custom kernels, in the style of llm.c dev/cuda attention_forward (its cuBLAS version).
//
// inp (B, T, 3C) holds q | k | v; NH heads of size HS = C / NH; out (B, T, C).
// Steps: permute into q, k, v (B, NH, T, HS); preatt = q @ k^T (cublasSgemmStridedBatched); causal scaled
// softmax (one warp per row); vaccum = att @ v (cublasSgemmStridedBatched); unpermute into out.
// Run: pytest tests/sim/test_realworld.py -k attention_forward_cublas (simulator), tests/test_parity.py (GPU)
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cfloat>
#include "common.h"

// ----------------------------------------------------------------------------------------------------
// CPU reference
// ----------------------------------------------------------------------------------------------------
static void attention_forward_cpu(float* out, const float* inp, int B, int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    float* att = (float*)malloc(T * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float* q = inp + (b * T + t) * 3 * C + h * HS;
                float m = -FLT_MAX;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = inp + (b * T + t2) * 3 * C + C + h * HS;
                    float s = 0.0f;
                    for (int i = 0; i < HS; i++) s += q[i] * k[i];
                    att[t2] = s * scale;
                    m = fmaxf(m, att[t2]);
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) sum += (att[t2] = expf(att[t2] - m));
                float* o = out + (b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = inp + (b * T + t2) * 3 * C + 2 * C + h * HS;
                    for (int i = 0; i < HS; i++) o[i] += att[t2] / sum * v[i];
                }
            }
    free(att);
}

// ----------------------------------------------------------------------------------------------------
// Kernels
// ----------------------------------------------------------------------------------------------------
__global__ void permute_kernel(float* q, float* k, float* v, const float* inp, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // over (b, nh, n, d)
    if (idx >= B * NH * N * d) return;
    int b = idx / (NH * N * d), rest = idx % (NH * N * d);
    int nh = rest / (N * d), n = (rest / d) % N, d_ = rest % d;
    int in_idx = b * N * 3 * NH * d + n * 3 * NH * d + nh * d + d_;
    q[idx] = __ldcs(&inp[in_idx]);
    k[idx] = __ldcs(&inp[in_idx + NH * d]);
    v[idx] = __ldcs(&inp[in_idx + 2 * NH * d]);
}

__global__ void unpermute_kernel(float* out, const float* inp, int B, int N, int NH, int d) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // inp is (B, NH, N, d)
    if (idx >= B * NH * N * d) return;
    int b = idx / (NH * N * d), rest = idx % (NH * N * d);
    int nh = rest / (N * d), n = (rest / d) % N, d_ = rest % d;
    out[b * N * NH * d + n * NH * d + nh * d + d_] = __ldcs(&inp[idx]);
}

// one warp per row of the (B*NH*T, T) score matrix; causal: columns > row's t are zero
__global__ void softmax_causal_kernel(float* att, const float* preatt, float scale, int rows, int T) {
    int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    const float* x = preatt + row * T;
    float m = -FLT_MAX;
    for (int j = lane; j <= t; j += 32) m = fmaxf(m, x[j] * scale);
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFF, m, off));
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) s += expf(x[j] * scale - m);
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xFFFFFFFF, s, off);
    for (int j = lane; j < T; j += 32) att[row * T + j] = j <= t ? expf(x[j] * scale - m) / s : 0.0f;
}

// ----------------------------------------------------------------------------------------------------
// Launchers
// ----------------------------------------------------------------------------------------------------
void attention_forward(float* out, float* qkvr, float* preatt, float* att, const float* inp, int B, int T, int C,
                       int NH, int block_size) {
    int HS = C / NH;
    float *q = qkvr, *k = qkvr + B * T * C, *v = qkvr + 2 * B * T * C;
    permute_kernel<<<ceil_div(B * NH * T * HS, block_size), block_size>>>(q, k, v, inp, B, T, NH, HS);
    cublasHandle_t handle;
    cublasCreate(&handle);
    const float alpha = 1.0f, beta = 0.0f;
    // preatt (T x T per head, row-major) = q @ k^T: column-major preatt^T = k @ q^T -> op(k)=T, op(q)=N
    cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &alpha, k, HS, T * HS, q, HS, T * HS, &beta,
                              preatt, T, T * T, B * NH);
    softmax_causal_kernel<<<ceil_div(B * NH * T * 32, block_size), block_size>>>(att, preatt, 1.0f / sqrtf((float)HS),
                                                                                  B * NH * T, T);
    float* vaccum = preatt;  // reuse: (B, NH, T, HS) fits in B*NH*T*T when HS <= T
    // vaccum (T x HS row-major) = att @ v: column-major vaccum^T = v^T @ att^T -> op N, op N
    cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &alpha, v, HS, T * HS, att, T, T * T, &beta,
                              vaccum, HS, T * HS, B * NH);
    unpermute_kernel<<<ceil_div(B * NH * T * HS, block_size), block_size>>>(out, vaccum, B, T, NH, HS);
    cublasDestroy(handle);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------------------------------
// Validation
// ----------------------------------------------------------------------------------------------------
void validate(int seed, float* report) {
    report_reset();
    rng_seed(seed);
    const int B = 2, T = 17, C = 32, NH = 4;  // HS = 8 <= T
    float* inp = make_random(B * T * 3 * C);
    float* ref = (float*)malloc(B * T * C * sizeof(float));
    attention_forward_cpu(ref, inp, B, T, C, NH);
    float* d_inp = to_device<float>(inp, B * T * 3 * C);
    float* d_qkvr = device_poisoned<float>(B * T * 3 * C);
    float* d_preatt = device_poisoned<float>(B * NH * T * T);
    float* d_att = device_poisoned<float>(B * NH * T * T);
    float* d_out = device_poisoned<float>(B * T * C);
    int block_sizes[] = {64, 256};
    for (int bs : block_sizes) {
        cudaCheck(cudaMemset(d_out, 0xFF, B * T * C * sizeof(float)));
        attention_forward(d_out, d_qkvr, d_preatt, d_att, d_inp, B, T, C, NH, bs);
        validate_result(d_out, ref, "out", B * T * C, 1e-4f);
    }
    cudaFree(d_inp); cudaFree(d_qkvr); cudaFree(d_preatt); cudaFree(d_att); cudaFree(d_out);
    free(inp); free(ref);
    write_report(report);
}
