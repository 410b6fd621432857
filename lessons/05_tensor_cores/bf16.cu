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
//   bias_gelu_bf16         task 5.1  8 elements per thread (16-byte loads/stores of four __nv_bfloat162
//                                    pairs), a grid sized to the GPU; the scalar kernel for ragged shapes
//   rmsnorm_bf16           task 5.2  one block per row held in registers (16-byte loads), sum of squares
//                                    accumulated in fp32; a worked two-pass kernel for ragged rows
// Worked helpers: gelu_f32, warp_sum, block_sum, full_grid, aligned16, Bf16x8.
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("05_tensor_cores"); m.bias_gelu_bf16(x, b, y, rows, cols)
//   make check T=5.1                    (or T=5.2)   (graded checks)
//   make bench LESSONS=05_tensor_cores                (timings, GPU only)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>

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
// Worked helpers: the GPU's size, 16-byte alignment, and 8 bf16 as one 16-byte value
// ----------------------------------------------------------------------------------------------------

// Blocks of kEltBlock threads that fill every SM of the current GPU (asked once: a device query costs far
// more than a launch). A grid-stride kernel launched with this many blocks keeps every SM busy.
static int full_grid() {
    static int blocks = 0;
    if (blocks == 0) {
        int dev = 0;
        cudaDeviceProp prop;
        cudaGetDevice(&dev);
        const bool ok = cudaGetDeviceProperties(&prop, dev) == cudaSuccess;
        const int sms = ok && prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
        const int per_sm = ok && prop.maxThreadsPerMultiProcessor >= kEltBlock ? prop.maxThreadsPerMultiProcessor / kEltBlock : 1;
        blocks = sms * per_sm;
    }
    return blocks;
}

// True when p may be read 16 bytes at a time: torch's allocations are 16-byte aligned, a slice may not be.
static inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Eight bf16 in one 16-byte value (a uint4): four __nv_bfloat162 pairs. Loading or storing one is one
// 16-byte memory instruction; .pair[j] unpacks to fp32 with __bfloat1622float2.
union Bf16x8 {
    uint4 raw;
    __nv_bfloat162 pair[4];
};

// ----------------------------------------------------------------------------------------------------
// Task 5.1: bias + GELU, 8 bf16 per thread through 16-byte loads and stores
// ----------------------------------------------------------------------------------------------------
// The worked kernel moves 2 bytes per load instruction. A memory-bound kernel wants the widest access a
// thread can make, 16 bytes: 8 bf16 (a Bf16x8), so 8 times fewer memory instructions for the same bytes.
// Group g is elements 8g .. 8g+7. The launcher runs this kernel only when cols is a multiple of 8 (so a
// group never straddles two rows, and its 8 bias values bias[c .. c+7], c = 8g % cols, are one 16-byte
// load too) and x, bias and y are 16-byte aligned; otherwise the worked one-element kernel runs.
// The grid is sized to the GPU (full_grid(): as many threads as the SMs hold, so enough 16-byte loads are
// in flight to hide memory latency), and each thread strides over the groups: g, g + stride, ...

__global__ void bias_gelu_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias,
                                      __nv_bfloat16* __restrict__ y, long long groups, int cols) {
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    const uint4* b8 = reinterpret_cast<const uint4*>(bias);
    uint4* y8 = reinterpret_cast<uint4*>(y);
    const long long row_groups = cols / 8;  // groups per row
    // TODO(task 5.1): a grid-stride loop over the groups g (~12 lines). For each: Bf16x8 v, b; v.raw = x8[g];
    // b.raw = b8[g % row_groups]; for the 4 pairs j: float2 f = __bfloat1622float2(v.pair[j]) (and the same
    // for b.pair[j]), apply gelu_f32 to f.x + b.x and f.y + b.y in fp32, v.pair[j] = __floats2bfloat162_rn(...);
    // then y8[g] = v.raw: one 16-byte load of x, one of bias, one 16-byte store.
    // Hint: the stride is gridDim.x * (long long)blockDim.x; index in long long (n can pass 2^31).
}

// Contract: as bias_gelu_bf16_scalar.
void bias_gelu_bf16(const __nv_bfloat16* x, const __nv_bfloat16* bias, __nv_bfloat16* y, int rows, int cols) {
    const long long n = (long long)rows * cols;
    if (n <= 0) return;
    if (cols % 8 != 0 || !aligned16(x) || !aligned16(bias) || !aligned16(y)) {  // no 16-byte groups here
        bias_gelu_bf16_scalar(x, bias, y, rows, cols);
        return;
    }
    const long long groups = n / 8;
    const long long needed = (groups + kEltBlock - 1) / kEltBlock;
    const int blocks = needed < full_grid() ? (int)needed : full_grid();
    bias_gelu_bf16_kernel<<<blocks, kEltBlock>>>(x, bias, y, groups, cols);
}

// ----------------------------------------------------------------------------------------------------
// Task 5.2: RMSNorm in bf16 with fp32 accumulation, the row held in registers
// ----------------------------------------------------------------------------------------------------
// y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * w[c]. One block per row. The sum of squares of a row
// of 4096 bf16 values must be accumulated in fp32: in bf16, once the sum reaches 256 times a term, adding
// that term changes nothing (8 significant bits), and the norm comes out far too small.
// The row is read from memory once: each thread loads its groups of 8 (16 bytes each, group q = threadIdx.x
// + i * blockDim.x for i < G) into registers, sums their squares, and after the block's sum scales the
// values it still holds. G is a template parameter so the G groups live in registers (an array indexed
// by compile-time constants after unrolling); the launcher picks the smallest G that covers the row with
// at most 1024 threads. Rows whose length is not a multiple of 8 (or unaligned tensors, or rows longer
// than 32768) take the worked two-pass kernel below.

template <int G>
__global__ void rmsnorm_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                    __nv_bfloat16* __restrict__ y, int cols, float eps) {
    __shared__ float scratch[32];
    const uint4* xr = reinterpret_cast<const uint4*>(x + (long long)blockIdx.x * cols);
    const uint4* w8 = reinterpret_cast<const uint4*>(w);
    uint4* yr = reinterpret_cast<uint4*>(y + (long long)blockIdx.x * cols);
    const int groups = cols / 8;
    Bf16x8 v[G];
    // TODO(task 5.2): (~16 lines) for each i < G (#pragma unroll): q = threadIdx.x + i * blockDim.x; if q <
    // groups, v[i].raw = xr[q] and add the squares of its 8 values (__bfloat1622float2 on v[i].pair[j]) to a
    // float ss. block_sum(ss, scratch) gives the row's total; rstd = rsqrtf(total / cols + eps). Then for each
    // i with q < groups: load the weights Bf16x8 wv (wv.raw = w8[q]), replace each pair of v[i] by
    // __floats2bfloat162_rn(x * rstd * w, ...) in fp32, and store yr[q] = v[i].raw.
    // Hint: every thread must reach block_sum (it holds __syncthreads), also those with no group.
}

// Worked: the fallback for any row length, one element at a time in two passes over the row (the second
// pass reads the row again, mostly from the L1/L2 caches).
__global__ void rmsnorm_bf16_any_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                        __nv_bfloat16* __restrict__ y, int cols, float eps) {
    __shared__ float scratch[32];
    const __nv_bfloat16* xr = x + (long long)blockIdx.x * cols;
    __nv_bfloat16* yr = y + (long long)blockIdx.x * cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = __bfloat162float(xr[c]);
        ss += v * v;
    }
    const float rstd = rsqrtf(block_sum(ss, scratch) / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = __float2bfloat16_rn(__bfloat162float(xr[c]) * rstd * __bfloat162float(w[c]));
}

// Contract: x and y hold rows * cols bf16 (row-major), w holds cols bf16; eps as torch's rms_norm.
void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int rows, int cols, float eps) {
    if (rows <= 0 || cols <= 0) return;
    const int groups = cols / 8;
    if (cols % 8 == 0 && groups <= 4 * 1024 && aligned16(x) && aligned16(w) && aligned16(y)) {
        // G groups per thread: 1 while a row fits in 1024 threads (8192 values), else 2 or 4
        const int G = groups <= 1024 ? 1 : (groups <= 2048 ? 2 : 4);
        int threads = (groups + G - 1) / G;
        threads = (threads + 31) / 32 * 32;  // whole warps (block_sum needs them)
        if (G == 1) rmsnorm_bf16_kernel<1><<<rows, threads>>>(x, w, y, cols, eps);
        else if (G == 2) rmsnorm_bf16_kernel<2><<<rows, threads>>>(x, w, y, cols, eps);
        else rmsnorm_bf16_kernel<4><<<rows, threads>>>(x, w, y, cols, eps);
        return;
    }
    int threads = (cols + 7) / 8;  // about 8 elements per thread, whole warps, at most 1024
    threads = threads < 32 ? 32 : (threads > 1024 ? 1024 : (threads + 31) / 32 * 32);
    rmsnorm_bf16_any_kernel<<<rows, threads>>>(x, w, y, cols, eps);
}
