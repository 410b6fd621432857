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
//                                    pairs), a 2-D grid of one row per block row, each thread on one column
//                                    group; the scalar kernel for ragged shapes
//   rmsnorm_bf16           task 5.2  one block per row held in registers (16-byte loads), sum of squares
//                                    accumulated in fp32; a worked two-pass kernel for ragged rows
// Worked helpers: gelu_f32, warp_sum, block_sum, aligned16, Bf16x8.
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("05_tensor_cores"); m.bias_gelu_bf16(x, b, y, rows, cols)
//   make check T=5.1                    (or T=5.2)   (graded checks)
//   make bench LESSONS=05_tensor_cores                (timings, GPU only)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>

#include "cc_mma.h"  // ex2_approx, rcp_approx (gelu_f32)

constexpr int kEltBlock = 256;

// ----------------------------------------------------------------------------------------------------
// Worked helpers
// ----------------------------------------------------------------------------------------------------

// GELU, erf form (PyTorch's default, approximate='none'), in fp32: gelu(v) = v Phi(v), where
// Phi(v) = (1 + erf(v / sqrt 2)) / 2 is the normal distribution function. With h = erfc(|v| / sqrt 2) / 2,
// Phi(v) = 1 - h for v >= 0 and h for v < 0: no 1 + erf of nearly -1 that cancels in the negative tail.
// h by Abramowitz & Stegun 7.1.26 (erfc to an absolute error of 1.5e-7, where a bf16 rounding is up to
// 2^-8 = 3.9e-3 relative), with z = |v| / sqrt 2 and t = 1 / (1 + p z):
//   erfc(z) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2),   p = 0.3275911,
//   a1..a5 = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429 (halved below for h).
// One reciprocal and one exponential (cc_mma.h: one special-function instruction each), about 15
// instructions in all. erff costs about 30 (two polynomials picked by range, to fp32's last bit), and in
// bias+GELU that arithmetic, between each 16-byte load and store, took about as long as the memory traffic.
// +inf gives +inf, NaN gives NaN, and on a GPU v below about -13 gives -0 (ex2_approx flushes to zero).
__device__ inline float gelu_f32(float v) {
    constexpr float kP = 0.3275911f * 0.70710678118654752f;         // p / sqrt 2: t from |v| directly
    constexpr float kE = -0.5f * 1.4426950408889634f;               // exp(-v^2 / 2) = 2^(kE v^2)
    const float t = rcp_approx(fmaf(kP, fabsf(v), 1.0f));
    const float e = ex2_approx(kE * (v * v));
    const float poly = fmaf(t, fmaf(t, fmaf(t, fmaf(t, 0.5307027145f, -0.7265760135f), 0.7107068705f),
                                    -0.1422483680f), 0.1274147960f);  // a5/2 .. a1/2
    const float h = t * poly * e;                                    // erfc(|v| / sqrt 2) / 2
    return v * (v >= 0.0f ? 1.0f - h : h);
}

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
// Worked helpers: 16-byte alignment, and 8 bf16 as one 16-byte value
// ----------------------------------------------------------------------------------------------------

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
// Row r holds row_groups = cols / 8 groups; group c of row r is elements r*cols + 8c .. + 7, and its bias
// is bias[8c .. 8c+7], one 16-byte load too. The launcher runs this kernel only when cols is a multiple of
// 8 (a group never straddles two rows) and x, bias and y are 16-byte aligned; otherwise the worked
// one-element kernel runs.
// The grid is 2-D: x covers the groups of a row, y the rows, one row per block row (up to grid.y's limit of
// 65535; past it each thread strides over rows blockIdx.y, blockIdx.y + gridDim.y, ...). At 16384 x 4096 a
// thread makes one 16-byte load of x and one 16-byte store of y, and the block scheduler keeps every SM full
// of blocks until the last one: on the H100 this reached 95% of the copy bandwidth, where a grid sized to the
// GPU, each thread looping over about 31 rows, reached 88%, and streaming cache hints (__ldcs/__stcs) on this grid
// 93% (results/nvidia-h100-80gb-hbm3/mma17/). A thread keeps one column group c, so its bias group is loaded
// and converted once, before the row loop.

__global__ void bias_gelu_bf16_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias,
                                      __nv_bfloat16* __restrict__ y, int rows, int row_groups) {
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    const uint4* b8 = reinterpret_cast<const uint4*>(bias);
    uint4* y8 = reinterpret_cast<uint4*>(y);
    const int c = blockIdx.x * blockDim.x + threadIdx.x;  // this thread's column group
    if (c >= row_groups) return;
    // TODO(task 5.1): the bias group c once, then a loop over this thread's rows (~14 lines).
    // Before the loop: Bf16x8 b; b.raw = b8[c]; float2 fb[4] with fb[j] = __bfloat1622float2(b.pair[j]).
    // For r = blockIdx.y, r + gridDim.y, ... < rows: g = r * row_groups + c (in long long: n can pass 2^31);
    // Bf16x8 v; v.raw = x8[g]; for the 4 pairs j: float2 f = __bfloat1622float2(v.pair[j]), apply gelu_f32
    // to f.x + fb[j].x and f.y + fb[j].y in fp32, v.pair[j] = __floats2bfloat162_rn(...); then y8[g] = v.raw:
    // one 16-byte load and one 16-byte store per group.
    // BEGIN SOLUTION
    Bf16x8 b;
    b.raw = b8[c];
    float2 fb[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) fb[j] = __bfloat1622float2(b.pair[j]);
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const long long g = r * row_groups + c;
        Bf16x8 v;
        v.raw = x8[g];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(v.pair[j]);
            v.pair[j] = __floats2bfloat162_rn(gelu_f32(f.x + fb[j].x), gelu_f32(f.y + fb[j].y));
        }
        y8[g] = v.raw;
    }
    // END SOLUTION
}

// Contract: as bias_gelu_bf16_scalar.
void bias_gelu_bf16(const __nv_bfloat16* x, const __nv_bfloat16* bias, __nv_bfloat16* y, int rows, int cols) {
    const long long n = (long long)rows * cols;
    if (n <= 0) return;
    if (cols % 8 != 0 || !aligned16(x) || !aligned16(bias) || !aligned16(y)) {  // no 16-byte groups here
        bias_gelu_bf16_scalar(x, bias, y, rows, cols);
        return;
    }
    const int row_groups = cols / 8;
    // Narrow rows get narrower blocks (whole warps), so fewer lanes idle past the end of a row.
    const int threads = row_groups < kEltBlock ? (row_groups + 31) / 32 * 32 : kEltBlock;
    const int col_blocks = (row_groups + threads - 1) / threads;
    const int row_blocks = rows < 65535 ? rows : 65535;  // one row per block row, up to grid.y's limit
    bias_gelu_bf16_kernel<<<dim3(col_blocks, (unsigned)row_blocks), threads>>>(x, bias, y, rows, row_groups);
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
    // BEGIN SOLUTION
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < G; ++i) {
        const int q = threadIdx.x + i * blockDim.x;
        if (q < groups) {
            v[i].raw = xr[q];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(v[i].pair[j]);
                ss += f.x * f.x + f.y * f.y;
            }
        }
    }
    const float rstd = rsqrtf(block_sum(ss, scratch) / (float)cols + eps);
#pragma unroll
    for (int i = 0; i < G; ++i) {
        const int q = threadIdx.x + i * blockDim.x;
        if (q < groups) {
            Bf16x8 wv;
            wv.raw = w8[q];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(v[i].pair[j]), fw = __bfloat1622float2(wv.pair[j]);
                v[i].pair[j] = __floats2bfloat162_rn(f.x * rstd * fw.x, f.y * rstd * fw.y);
            }
            yr[q] = v[i].raw;
        }
    }
    // END SOLUTION
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
