// ====================================================================================================
// Lesson 05, part 1: half precision on CUDA cores. bf16 storage, fp32 math.
//
// bf16 keeps fp32's 8 exponent bits (range up to ~3.4e38, like fp32) and 7 of its 23 mantissa bits
// (8 significant bits with the implicit one): half the bytes of fp32, so a memory-bound kernel that reads
// and writes bf16 moves half the data and can run up to twice as fast. Every value is converted to fp32
// as it is loaded, all arithmetic and every accumulation happens in fp32, and the result is rounded to
// bf16 once, as it is stored: the only error is that final rounding (at most 2^-8 relative).
//
// Versions (callable from Python as m.<name>(...); bf16 tensors for __nv_bfloat16*):
//   bias_gelu_bf16_scalar  worked    one element per thread: y = gelu(x + bias[col]), fp32 math
//   bias_gelu_bf16         task 5.1  two elements per thread through __nv_bfloat162 (4-byte loads/stores)
//   rmsnorm_bf16           task 5.2  one block per row, sum of squares accumulated in fp32, weight
// Worked helpers: gelu_f32, warp_sum, block_sum.
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("05_tensor_cores"); m.bias_gelu_bf16(x, b, y, rows, cols)
//   make check T=5.1                    (or T=5.2)   (graded checks)
//   make bench LESSONS=05_tensor_cores                (timings, GPU only)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cmath>

constexpr int kEltBlock = 256;

// ----------------------------------------------------------------------------------------------------
// Worked helpers
// ----------------------------------------------------------------------------------------------------

// GELU, erf form (PyTorch's default, approximate='none'), in fp32.
__device__ inline float gelu_f32(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

// Sum over the 32 lanes of a warp; every lane gets the result.
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, every thread calls it); `scratch` holds 32 floats.
__device__ inline float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();  // scratch may be reused by the caller
    return v;
}

// ----------------------------------------------------------------------------------------------------
// Worked example: bias + GELU, one bf16 element per thread
// ----------------------------------------------------------------------------------------------------

__global__ void bias_gelu_bf16_scalar_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias,
                                             __nv_bfloat16* __restrict__ y, long long n, int cols) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = __bfloat162float(x[i]) + __bfloat162float(bias[i % cols]);  // to fp32 at the load
    y[i] = __float2bfloat16_rn(gelu_f32(v));                                     // one rounding, at the store
}

// Contract: x and y hold rows * cols bf16 (row-major), bias holds cols. y = gelu(x + bias), broadcast
// over rows, computed in fp32 and rounded to bf16 once.
void bias_gelu_bf16_scalar(const __nv_bfloat16* x, const __nv_bfloat16* bias, __nv_bfloat16* y, int rows, int cols) {
    const long long n = (long long)rows * cols;
    if (n <= 0) return;
    bias_gelu_bf16_scalar_kernel<<<(unsigned)((n + kEltBlock - 1) / kEltBlock), kEltBlock>>>(x, bias, y, n, cols);
}

// ----------------------------------------------------------------------------------------------------
// Task 5.1: bias + GELU, two elements per thread through __nv_bfloat162
// ----------------------------------------------------------------------------------------------------
// Thread p handles elements 2p and 2p+1 with one 4-byte load of x and one 4-byte store of y (pairs are
// 4-byte aligned: the tensors start 16-byte aligned and 2p is even). When n is odd the last element has
// no partner: one thread handles it alone. The two elements of a pair may sit in different rows (odd cols),
// so each takes its own bias index.

__global__ void bias_gelu_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias,
                                      __nv_bfloat16* __restrict__ y, long long n, int cols) {
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    // TODO(task 5.1): for the pair at i = 2p < n - 1: load x[i], x[i+1] as one __nv_bfloat162, convert with
    // __bfloat1622float2, add bias[i % cols] and bias[(i+1) % cols] in fp32, apply gelu_f32, and store both
    // with one __floats2bfloat162_rn; a thread with i == n - 1 (n odd) does the last element alone (~12 lines).
    // Hint: reinterpret_cast<const __nv_bfloat162*>(x)[p] is the pair at 2p.
}

// Contract: as bias_gelu_bf16_scalar.
void bias_gelu_bf16(const __nv_bfloat16* x, const __nv_bfloat16* bias, __nv_bfloat16* y, int rows, int cols) {
    const long long n = (long long)rows * cols;
    if (n <= 0) return;
    const long long pairs = (n + 1) / 2;
    bias_gelu_bf16_kernel<<<(unsigned)((pairs + kEltBlock - 1) / kEltBlock), kEltBlock>>>(x, bias, y, n, cols);
}

// ----------------------------------------------------------------------------------------------------
// Task 5.2: RMSNorm in bf16 with fp32 accumulation
// ----------------------------------------------------------------------------------------------------
// y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * w[c]. One block per row. The sum of squares of a row
// of 4096 bf16 values must be accumulated in fp32: in bf16, once the sum reaches 256 times a term, adding
// that term changes nothing (8 significant bits), and the norm comes out far too small.

__global__ void rmsnorm_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                    __nv_bfloat16* __restrict__ y, int cols, float eps) {
    __shared__ float scratch[32];
    const __nv_bfloat16* xr = x + (long long)blockIdx.x * cols;
    __nv_bfloat16* yr = y + (long long)blockIdx.x * cols;
    // TODO(task 5.2): each thread sums the squares of its elements c = threadIdx.x, += blockDim.x in fp32;
    // block_sum gives the row's total; rstd = rsqrtf(total / cols + eps); then write
    // yr[c] = bf16(float(xr[c]) * rstd * float(w[c])) for the thread's elements (~8 lines).
    // Hint: convert with __bfloat162float before squaring, round with __float2bfloat16_rn only at the store.
}

// Contract: x and y hold rows * cols bf16 (row-major), w holds cols bf16; eps as torch's rms_norm.
void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int rows, int cols, float eps) {
    if (rows <= 0 || cols <= 0) return;
    int threads = (cols + 7) / 8;  // about 8 elements per thread, whole warps, at most 1024
    threads = threads < 32 ? 32 : (threads > 1024 ? 1024 : (threads + 31) / 32 * 32);
    rmsnorm_bf16_kernel<<<rows, threads>>>(x, w, y, cols, eps);
}
