// ====================================================================================================
// Lesson 08, parts 1-4: 8-bit floating point. The two formats by hand, scaling, the quantization layouts of an
// FP8 GEMM, and a block-scaled FP8 GEMM on CUDA cores.
//
// e4m3 (1 sign, 4 exponent bits of bias 7, 3 fraction bits) reaches 448 and has no infinity; e5m2 (5
// exponent bits of bias 15, 2 fraction bits) reaches 57344 and keeps IEEE's infinities. Either holds a value
// to 1 part in 16 (e4m3) or 8 (e5m2), so an FP8 tensor always travels with a scale: x is stored as
// q = fp8(x * inv) and read back as q * scale, scale = 1 / inv chosen from the largest |x| (its "amax") so that
// the values use the format's range. The scale can cover a whole tensor, a row ("per token"), a group of 128
// values of a row (1x128), or a 128x128 block, as in DeepSeek-V3's training recipe.
// FP8 values are stored as bytes: a __nv_fp8_e4m3* parameter takes a torch.float8_e4m3fn tensor, uint8_t*
// takes torch.uint8 (a float8 tensor viewed with .view(torch.uint8)).
//
// Versions (callable from Python as m.<name>(...)):
//   cast_from_fp8              worked    fp8 bits -> float by hand (kind 0 = e4m3, 1 = e5m2)
//   cast_to_fp8_intrinsic      worked    float -> fp8 bits with cuda_fp8.h's __nv_cvt_float_to_fp8
//   cast_to_fp8                task 8.1  float -> fp8 bits by hand: round to nearest even, saturation
//   cast_scaled_e4m3           worked    y = e4m3(x * scale), scale read from device memory
//   fp8_scale_from_amax        worked    scale = 448 / amax and its inverse, on the device
//   amax                       task 8.2  max |x| of a tensor in one pass (one atomic per block)
//   cast_scaled_e4m3_amax      task 8.2  the scaled cast and the amax of its input in the same pass (delayed
//                                        scaling: this step casts with the scale of earlier steps' amax)
//   quant_1x128                worked    per-token quantization in groups of 128 values of a row (bf16 in)
//   rmsnorm_quant_1x128        task 8.3  RMSNorm fused with that quantization: one read of x, fp8 out
//   quant_128x128              task 8.3  per-block quantization of a weight matrix, 128x128 blocks
//   rmsnorm_quant_1x128_fast_kernel, quant_128x128_fast_kernel
//                              task 8.7  the two at copy speed: 16-byte loads, the data in registers, read once;
//                                        the launchers above take them when cols % 8 == 0 (kFastQuant)
//   gemm_fp8_blockscaled       task 8.4  C = (A sa)(W sw)^T on CUDA cores, the scales applied per 128-wide
//                                        k-block (what task 8.5 does on Hopper's tensor cores)
// Scale layouts (those of DeepGEMM and of torch._scaled_mm's blockwise recipe): the 1x128 scales of a
// rows x cols matrix are float[ceil(cols/128)][rows] (column-major: the scales of one k-block of all rows
// side by side); the 128x128 scales are float[ceil(rows/128)][ceil(cols/128)] (row-major).
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("08_fp8"); m.cast_to_fp8(x, y, n, 0, 1)
//   make check T=8.1          (or T=8.2, T=8.3, T=8.4; T=08_fp8 for the lesson; 8.7 is timed on a GPU)
//   make bench LESSONS=08_fp8 (timings, GPU only)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

constexpr int kBlock = 256;
constexpr float kE4m3Max = 448.0f;
constexpr float kAmaxFloor = 1e-12f;  // a group of zeros gets this amax: a finite scale, and zeros stored

// ----------------------------------------------------------------------------------------------------
// Worked helpers: reductions over a warp and a block
// ----------------------------------------------------------------------------------------------------

__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
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
// The same for the maximum.
__device__ inline float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    v = warp_max(v);
    __syncthreads();
    return v;
}
static inline unsigned grid_for(long long n, int block, unsigned cap) {
    const long long g = (n + block - 1) / block;
    return (unsigned)(g < 1 ? 1 : (g > cap ? cap : g));
}

// ----------------------------------------------------------------------------------------------------
// Worked example: fp8 bits -> float, and the library's conversion
// ----------------------------------------------------------------------------------------------------
// Bits S EEEE MMM (e4m3) or S EEEEE MM (e5m2). A zero exponent field is subnormal: 0.M * 2^(1 - bias); else
// 1.M * 2^(E - bias). e4m3 spends its top code (S.1111.111) on NaN and has no infinity; e5m2 is the top byte
// of an IEEE half: exponent all ones is infinity (fraction 0) or NaN. Every fp8 value is exact in float.
__device__ inline float fp8_to_float(uint8_t b, int kind) {
    const int mb = kind == 0 ? 3 : 2, bias = kind == 0 ? 7 : 15;
    const unsigned mag = b & 0x7Fu, e = mag >> mb, m = mag & ((1u << mb) - 1u);
    if (kind == 0 ? mag == 0x7Fu : mag > 0x7Cu) return __uint_as_float(0x7FFFFFFFu);  // NaN (cuda_fp8.h's)
    float v;
    if (kind == 1 && mag == 0x7Cu) v = __uint_as_float(0x7F800000u);                  // e5m2 infinity
    else if (e == 0) v = ldexpf((float)m, 1 - bias - mb);                            // 0.M * 2^(1-bias)
    else v = ldexpf((float)(m | (1u << mb)), (int)e - bias - mb);                    // 1.M * 2^(E-bias)
    return (b & 0x80u) ? -v : v;
}

__global__ void cast_from_fp8_kernel(const uint8_t* __restrict__ y, float* __restrict__ x, int n, int kind) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = fp8_to_float(y[i], kind);
}
// Contract: y holds n fp8 bytes of kind 0 (e4m3) or 1 (e5m2); x (n floats) = their values.
void cast_from_fp8(const uint8_t* y, float* x, int n, int kind) {
    if (n <= 0) return;
    cast_from_fp8_kernel<<<grid_for(n, kBlock, 4096), kBlock>>>(y, x, n, kind);
}

__global__ void cast_to_fp8_intrinsic_kernel(const float* __restrict__ x, uint8_t* __restrict__ y, int n, int kind,
                                             int saturate) {
    const __nv_saturation_t sat = saturate ? __NV_SATFINITE : __NV_NOSAT;
    const __nv_fp8_interpretation_t fmt = kind == 0 ? __NV_E4M3 : __NV_E5M2;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = __nv_cvt_float_to_fp8(x[i], sat, fmt);
}
// Contract: y (n bytes) = x rounded to fp8 of kind 0/1 by cuda_fp8.h, saturating to the largest finite value when
// saturate != 0 (else e4m3 overflows to NaN, e5m2 to infinity).
void cast_to_fp8_intrinsic(const float* x, uint8_t* y, int n, int kind, int saturate) {
    if (n <= 0) return;
    cast_to_fp8_intrinsic_kernel<<<grid_for(n, kBlock, 4096), kBlock>>>(x, y, n, kind, saturate);
}

// ----------------------------------------------------------------------------------------------------
// Task 8.1: float -> fp8 by hand, bit for bit what __nv_cvt_float_to_fp8 gives
// ----------------------------------------------------------------------------------------------------
// Think of x as an integer significand times a power of two: a normal float is (2^23 + F) * 2^(E - 150), with
// F its 23 fraction bits and E its exponent field; a subnormal float (E = 0) is F * 2^-149. The result is a
// whole number q of fp8 "quanta", where the quantum is 2^(e - mb) for an x in [2^e, 2^(e+1)) (mb fraction bits)
// and never smaller than the subnormal quantum 2^(emin - mb), emin = 1 - bias. So q = significand >> shift with
// shift = 23 - mb + max(emin - e, 0), rounded to nearest even on the bits shifted out. Then the bits are q
// itself if x is below 2^emin (a subnormal: exponent field 0), else ((e - emin + 1) << mb) + (q - 2^mb); a q
// that rounded up to 2^(mb+1) carries into the exponent field by itself.

__device__ inline uint8_t float_to_fp8(float x, int kind, bool saturate) {
    // TODO(task 8.1): round x to fp8 of `kind` (0: e4m3, mb = 3, bias = 7; 1: e5m2, mb = 2, bias = 15)
    // (~22 lines), as the comment above says:
    //   1. NaN (|bits| > 0x7F800000) -> 0x7F, whatever its sign (cuda_fp8.h's canonical NaN).
    //   2. sign = bit 31 moved to bit 7; work on u = bits & 0x7FFFFFFF. e = (u >> 23) - 127 and the significand
    //      sig = (u & 0x7FFFFF) | 0x800000 for a normal float; a subnormal float (u < 0x800000) has sig = u and
    //      e = -126.
    //   3. shift as above; shift > 24 means less than half the smallest subnormal: the result is a signed zero.
    //   4. q = sig >> shift, rem = the shifted-out bits, half = 1 << (shift - 1); round up when rem > half, or
    //      rem == half and q is odd.
    //   5. bits as above. Past the largest finite code (e4m3 0x7E = 448, e5m2 0x7B = 57344; infinity lands
    //      there too): saturate ? that code : the overflow code (e4m3 0x7F = NaN, e5m2 0x7C = infinity).
    // Worked example (e4m3): x = 3.3 = 1.65 * 2^1, e = 1 >= emin = -6, shift = 23 - 3 = 20: sig = 0xD33333,
    // q = 0xD (13), rem = 0x33333 < half = 0x80000, so q = 13; bits = ((1 + 7) << 3) + (13 - 8) = 0x45 = 3.25.
    // Hint: __float_as_uint(x) gives the bits; compare with cast_to_fp8_intrinsic, which must agree everywhere.
    // BEGIN SOLUTION
    const int mb = kind == 0 ? 3 : 2, bias = kind == 0 ? 7 : 15, emin = 1 - bias;
    const uint32_t maxf = kind == 0 ? 0x7Eu : 0x7Bu, over = kind == 0 ? 0x7Fu : 0x7Cu;
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7Fu;
    const uint32_t sign = (u >> 24) & 0x80u;
    u &= 0x7FFFFFFFu;
    int e = (int)(u >> 23) - 127;
    uint32_t sig = (u & 0x7FFFFFu) | 0x800000u;
    if (u < 0x800000u) {  // a subnormal float (or zero)
        sig = u;
        e = -126;
    }
    const int shift = 23 - mb + (e < emin ? emin - e : 0);
    if (shift > 24) return (uint8_t)sign;
    uint32_t q = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    uint32_t bits = e < emin ? q : ((uint32_t)(e - emin + 1) << mb) + (q - (1u << mb));
    if (bits > maxf) bits = saturate ? maxf : over;
    return (uint8_t)(sign | bits);
    // STUB: return 0;
    // END SOLUTION
}

__global__ void cast_to_fp8_kernel(const float* __restrict__ x, uint8_t* __restrict__ y, int n, int kind,
                                   int saturate) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = float_to_fp8(x[i], kind, saturate != 0);
}
// Contract: as cast_to_fp8_intrinsic, with task 8.1's conversion.
void cast_to_fp8(const float* x, uint8_t* y, int n, int kind, int saturate) {
    if (n <= 0) return;
    cast_to_fp8_kernel<<<grid_for(n, kBlock, 4096), kBlock>>>(x, y, n, kind, saturate);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: the scaled cast, and a scale from an amax
// ----------------------------------------------------------------------------------------------------
// Per-tensor scaling maps the largest |x| to e4m3's largest value: inv = 448 / amax, q = e4m3(x * inv), and
// the GEMM multiplies its result by scale = 1 / inv. The scale lives in device memory, so computing it (from an
// amax that a kernel just reduced) and using it never waits for the host.

__global__ void cast_scaled_e4m3_kernel(const float* __restrict__ x, const float* __restrict__ inv,
                                        __nv_fp8_e4m3* __restrict__ y, int n) {
    const float s = *inv;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = __nv_fp8_e4m3(x[i] * s);  // the constructor rounds to nearest even and saturates at +-448
}
// Contract: y = e4m3(x * inv[0]), saturating.
void cast_scaled_e4m3(const float* x, const float* inv, __nv_fp8_e4m3* y, int n) {
    if (n <= 0) return;
    cast_scaled_e4m3_kernel<<<grid_for(n, kBlock, 4096), kBlock>>>(x, inv, y, n);
}

__global__ void fp8_scale_from_amax_kernel(const float* amax, float* inv, float* scale) {
    const float a = fmaxf(*amax, kAmaxFloor);
    *inv = kE4m3Max / a;  // multiply by this to quantize
    *scale = a / kE4m3Max;  // multiply by this to dequantize
}
// Contract: inv[0] = 448 / amax[0] and scale[0] = amax[0] / 448 (amax below 1e-12 counts as 1e-12).
void fp8_scale_from_amax(const float* amax, float* inv, float* scale) { fp8_scale_from_amax_kernel<<<1, 1>>>(amax, inv, scale); }

// ----------------------------------------------------------------------------------------------------
// Task 8.2: amax in one pass, and the cast that also measures its input (delayed scaling)
// ----------------------------------------------------------------------------------------------------
// Each thread reduces its grid-stride share of |x|, the block reduces its threads, and one atomic per block
// folds the block's maximum into *out. There is no atomicMax for float, but for v >= 0 the bits of a float,
// read as an int, grow with its value: atomicMax((int*)out, __float_as_int(v)) is a float maximum. The
// launchers zero *out first. (fmaxf drops a NaN operand: NaN inputs do not reach the amax.)

// Fold v (>= 0, every thread of the block calls it) into *out.
__device__ inline void block_max_atomic(float v, float* out) {
    __shared__ float scratch[32];
    // TODO(task 8.2): (~2 lines) reduce v over the block with block_max, then thread 0 folds it into *out
    // with the int atomicMax described above.
    // BEGIN SOLUTION
    v = block_max(v, scratch);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(out), __float_as_int(v));
    // END SOLUTION
}

__global__ void amax_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
    // TODO(task 8.2): (~3 lines) m = the max of fabsf(x[i]) over this thread's grid-stride indices (start
    // at 0.0f), then block_max_atomic(m, out). Every thread must call it, also one with no index.
    // BEGIN SOLUTION
    float m = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) m = fmaxf(m, fabsf(x[i]));
    block_max_atomic(m, out);
    // END SOLUTION
}
// Contract: out[0] = max |x[i]| over n floats (0 for n == 0).
void amax(const float* x, float* out, int n) {
    cudaMemsetAsync(out, 0, sizeof(float), 0);
    if (n <= 0) return;
    amax_kernel<<<grid_for(n, kBlock, 1024), kBlock>>>(x, out, n);
}

// Delayed scaling (Transformer Engine's default recipe): the cast of this step uses `inv` from the amax of
// earlier steps (already in device memory: no wait for this tensor's amax), and records this tensor's amax for
// the steps after. One pass over x instead of two.
__global__ void cast_scaled_e4m3_amax_kernel(const float* __restrict__ x, const float* __restrict__ inv,
                                             __nv_fp8_e4m3* __restrict__ y, float* __restrict__ amax_out, int n) {
    // TODO(task 8.2): (~6 lines) as cast_scaled_e4m3_kernel, and keep the max of fabsf(x[i]) (the input's,
    // unscaled) as amax_kernel does; then block_max_atomic into amax_out.
    // BEGIN SOLUTION
    const float s = *inv;
    float m = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float v = x[i];
        y[i] = __nv_fp8_e4m3(v * s);
        m = fmaxf(m, fabsf(v));
    }
    block_max_atomic(m, amax_out);
    // END SOLUTION
}
// Contract: y = e4m3(x * inv[0]) (saturating) and amax_out[0] = max |x|.
void cast_scaled_e4m3_amax(const float* x, const float* inv, __nv_fp8_e4m3* y, float* amax_out, int n) {
    cudaMemsetAsync(amax_out, 0, sizeof(float), 0);
    if (n <= 0) return;
    cast_scaled_e4m3_amax_kernel<<<grid_for(n, kBlock, 1024), kBlock>>>(x, inv, y, amax_out, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: 1x128 quantization, one warp per group of 128 values
// ----------------------------------------------------------------------------------------------------
// Lane l of the warp owns elements 4l .. 4l+3 of the group: four bf16 in one 8-byte load, four fp8 in one
// 4-byte store (a __nv_fp8x4_e4m3) when the row allows it (cols % 4 == 0 and 8-byte aligned rows), element by
// element otherwise (and in the last, partial group). The group's amax is a warp_max: every lane gets it.
// scale = amax / 448 goes to scales[g * rows + r]; q = e4m3(v * (448 / amax)).

static inline bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7) == 0; }

// Elements c .. c+3 of a bf16 row of `cols` (zeros past the end) as float.
__device__ inline void load4(const __nv_bfloat16* row, int c, int cols, bool vec, float v[4]) {
    if (vec && c + 3 < cols) {
        const uint2 raw = *reinterpret_cast<const uint2*>(row + c);
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
        const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
        v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    } else {
        for (int j = 0; j < 4; ++j) v[j] = c + j < cols ? __bfloat162float(row[c + j]) : 0.0f;
    }
}
// e4m3(v[j] * inv) to elements c .. c+3 of an fp8 row (those before `cols`).
__device__ inline void store4(__nv_fp8_e4m3* row, int c, int cols, bool vec, const float v[4], float inv) {
    if (vec && c + 3 < cols) {
        const __nv_fp8x4_e4m3 q(make_float4(v[0] * inv, v[1] * inv, v[2] * inv, v[3] * inv));
        *reinterpret_cast<__nv_fp8x4_e4m3*>(row + c) = q;
    } else {
        for (int j = 0; j < 4; ++j)
            if (c + j < cols) row[c + j] = __nv_fp8_e4m3(v[j] * inv);
    }
}

__global__ void quant_1x128_kernel(const __nv_bfloat16* __restrict__ x, __nv_fp8_e4m3* __restrict__ y,
                                   float* __restrict__ scales, int rows, int cols, int vec) {
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5, r = blockIdx.x, groups = (cols + 127) / 128;
    const __nv_bfloat16* xr = x + (long long)r * cols;
    __nv_fp8_e4m3* yr = y + (long long)r * cols;
    for (int g = threadIdx.x >> 5; g < groups; g += warps) {
        const int c = g * 128 + 4 * lane;
        float v[4];
        load4(xr, c, cols, vec, v);
        const float amax = fmaxf(warp_max(fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])))),
                                 kAmaxFloor);
        store4(yr, c, cols, vec, v, kE4m3Max / amax);
        if (lane == 0) scales[(long long)g * rows + r] = amax / kE4m3Max;
    }
}
// Contract: x (rows x cols bf16, row-major) -> y (rows x cols e4m3) and scales (float[ceil(cols/128)][rows]):
// group g of row r (columns 128g .. 128g+127) is stored as y = e4m3(x * 448 / amax) with
// scales[g][r] = amax / 448, amax = max |x| over the group (at least 1e-12). One block of 256 threads per row.
void quant_1x128(const __nv_bfloat16* x, __nv_fp8_e4m3* y, float* scales, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const int vec = cols % 4 == 0 && aligned8(x) && aligned8(y) ? 1 : 0;
    quant_1x128_kernel<<<rows, kBlock>>>(x, y, scales, rows, cols, vec);
}

// ----------------------------------------------------------------------------------------------------
// Task 8.3: RMSNorm fused with the 1x128 quantization; 128x128 block quantization of a weight
// ----------------------------------------------------------------------------------------------------
// The input of a linear layer in a transformer block is RMSNorm(x) * w. Quantizing it in a kernel of its own
// would write the normalized row in bf16 and read it again; fused, x is read, the row's sum of squares taken,
// and the normalized values quantized group by group on their way out: 2 bytes in and 1 (+ a scale per 128)
// out per element. The row is read twice (once for the sum, once to normalize), the second time from cache.

__global__ void rmsnorm_quant_1x128_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                           __nv_fp8_e4m3* __restrict__ y, float* __restrict__ scales, int rows,
                                           int cols, float eps, int vec) {
    __shared__ float scratch[32];
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5, r = blockIdx.x, groups = (cols + 127) / 128;
    const __nv_bfloat16* xr = x + (long long)r * cols;
    __nv_fp8_e4m3* yr = y + (long long)r * cols;
    // TODO(task 8.3): (~16 lines) two passes over the groups g = warp, warp + warps, ... with c = g*128 + 4*lane
    // as quant_1x128_kernel walks them:
    //   1. the sum of squares of this thread's values (load4 from xr), block_sum over the block (every thread
    //      calls it), rstd = rsqrtf(total / cols + eps);
    //   2. per group: load4 x and w (w at the same columns c), v[j] = x[j] * rstd * w[j] in fp32, the group's
    //      amax = max(warp_max of |v|, kAmaxFloor), store4(yr, c, cols, vec, v, kE4m3Max / amax), and lane 0
    //      writes scales[g * rows + r] = amax / kE4m3Max.
    // Hint: quant_1x128_kernel is step 2 without the norm.
    // BEGIN SOLUTION
    float ss = 0.0f;
    for (int g = threadIdx.x >> 5; g < groups; g += warps) {
        float v[4];
        load4(xr, g * 128 + 4 * lane, cols, vec, v);
        ss += v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3];
    }
    const float rstd = rsqrtf(block_sum(ss, scratch) / (float)cols + eps);
    for (int g = threadIdx.x >> 5; g < groups; g += warps) {
        const int c = g * 128 + 4 * lane;
        float v[4], wv[4];
        load4(xr, c, cols, vec, v);
        load4(w, c, cols, vec, wv);
        float m = 0.0f;
        for (int j = 0; j < 4; ++j) {
            v[j] = v[j] * rstd * wv[j];
            m = fmaxf(m, fabsf(v[j]));
        }
        const float amax = fmaxf(warp_max(m), kAmaxFloor);
        store4(yr, c, cols, vec, v, kE4m3Max / amax);
        if (lane == 0) scales[(long long)g * rows + r] = amax / kE4m3Max;
    }
    // END SOLUTION
}
// One block of 256 threads per 128x128 block of the weight: warp k takes rows k, k + 8, ..., each lane four
// columns of the row (c = 4 * lane). Edge blocks hold fewer rows or columns.
__global__ void quant_128x128_kernel(const __nv_bfloat16* __restrict__ w, __nv_fp8_e4m3* __restrict__ q,
                                     float* __restrict__ scales, int rows, int cols, int vec) {
    __shared__ float scratch[32];
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int r0 = blockIdx.y * 128, nr = rows - r0 < 128 ? rows - r0 : 128;  // rows of this block
    const int c = blockIdx.x * 128 + 4 * lane;  // the 32 lanes cover the block's 128 columns
    // TODO(task 8.3): (~12 lines) two passes over rows rr = warp, warp + warps, ... < nr of this block:
    //   1. m = the max |value| of this thread's load4(w + (r0 + rr) * cols, c, cols, vec, v); amax =
    //      max(block_max(m, scratch), kAmaxFloor) (every thread calls it);
    //   2. store4 each of those rows to q with inv = kE4m3Max / amax; thread 0 writes
    //      scales[blockIdx.y * gridDim.x + blockIdx.x] = amax / kE4m3Max.
    // Hint: columns past the matrix read as 0 and are not stored (load4/store4 check cols).
    // BEGIN SOLUTION
    float m = 0.0f;
    for (int rr = threadIdx.x >> 5; rr < nr; rr += warps) {
        float v[4];
        load4(w + (long long)(r0 + rr) * cols, c, cols, vec, v);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))));
    }
    const float amax = fmaxf(block_max(m, scratch), kAmaxFloor);
    const float inv = kE4m3Max / amax;
    for (int rr = threadIdx.x >> 5; rr < nr; rr += warps) {
        float v[4];
        load4(w + (long long)(r0 + rr) * cols, c, cols, vec, v);
        store4(q + (long long)(r0 + rr) * cols, c, cols, vec, v, inv);
    }
    if (threadIdx.x == 0) scales[blockIdx.y * gridDim.x + blockIdx.x] = amax / kE4m3Max;
    // END SOLUTION
}
// ----------------------------------------------------------------------------------------------------
// Task 8.7: the same two kernels, toward the speed of a copy
// ----------------------------------------------------------------------------------------------------
// The kernels above read a row (or a 128x128 block) twice, 8 bytes per load, and write the scales one float per
// 32-byte sector. Three changes (on the H200, README "Measured": quant_128x128 at 99% of the copy bandwidth,
// rmsnorm_quant_1x128 at 86%, from 48%):
//  - 16-byte loads: one uint4 holds 8 bf16, and eight e4m3 leave in one 8-byte store (a warp: 512 bytes in, 256 out);
//  - everything in flight before anything is used: each thread loads ALL its 16-byte pieces of x and w into
//    registers first, then reduces, then writes; global memory is read exactly once;
//  - rmsnorm_quant: one block of 128 threads per row, few pieces per thread (4 at cols = 4096). A warp per row
//    (16 pieces per lane, 8 rows per block) reached only 53%: 128 registers of x alone, so few warps per SM to hide
//    the loads. Many threads with few values each keep more bytes in flight per SM; the price is one __syncthreads
//    to add the warps' partial sums of squares.
// Piece k of a row (elements 8k .. 8k+7) belongs to group k / 16: thread t's piece j is k = 128j + t, so the 16
// pieces of a group are held by one half of a warp, and a group's amax is a maximum over that half.
// These paths need cols % 8 == 0 and 16-byte aligned x, w (8-byte aligned y); the launchers fall back to the
// kernels above otherwise (and for rows longer than 8192 values).

// Worked helpers: 8 bf16 in one uint4 -> float; e4m3(v[j] * inv) for 8 values -> one uint2; a maximum over
// each half of the warp.
__device__ inline void bf16x8_to_float(const uint4& raw, float f[8]) {
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
    for (int i = 0; i < 4; ++i) {
        const float2 p = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u[i]));
        f[2 * i] = p.x, f[2 * i + 1] = p.y;
    }
}
__device__ inline uint2 e4m3x8(const float v[8], float inv) {
    const __nv_fp8x4_e4m3 lo(make_float4(v[0] * inv, v[1] * inv, v[2] * inv, v[3] * inv));
    const __nv_fp8x4_e4m3 hi(make_float4(v[4] * inv, v[5] * inv, v[6] * inv, v[7] * inv));
    return make_uint2(lo.__x, hi.__x);
}
__device__ inline float halfwarp_max(float v) {
    for (int offset = 8; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
static inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

constexpr int kRowThreads = 128;  // threads per row of the fast rmsnorm_quant (one block each)

// NP: 16-byte pieces per thread (cols <= 8 * kRowThreads * NP).
template <int NP>
__global__ void __launch_bounds__(kRowThreads) rmsnorm_quant_1x128_fast_kernel(
        const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w, __nv_fp8_e4m3* __restrict__ y,
        float* __restrict__ scales, int rows, int cols, float eps) {
    __shared__ float s_part[kRowThreads / 32];  // each warp's sum of squares
    const int r = blockIdx.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, pieces = cols / 8;
    // TODO(task 8.7): (~40 lines) row r of x, one block:
    //   1. raw[j] = piece k = kRowThreads * j + t of the row and wraw[j] = piece k of w, as uint4 (zeros for
    //      k >= pieces), for all j < NP first (#pragma unroll: the arrays stay in registers);
    //   2. the sum of squares of raw's values, warp_sum, lane 0 puts it in s_part[warp], __syncthreads, every
    //      thread adds the kRowThreads / 32 partial sums: rstd = rsqrtf(total / cols + eps);
    //   3. per j (stop once kRowThreads * j >= pieces: the same for the whole block): the piece's 8 values
    //      v = x * rstd * w, the group's amax = max(halfwarp_max(max |v|), kAmaxFloor), and when k < pieces the
    //      8 bytes e4m3x8(v, kE4m3Max / amax) to y + r * cols + 8 * k (as a uint2); the first lane of each half
    //      of the warp (lane % 16 == 0) writes scales[(k / 16) * rows + r] = amax / kE4m3Max.
    // Worked example: cols = 4096 (NP = 4, 512 pieces, 32 groups), thread 85 (warp 2, lane 21), j = 3: piece
    // k = 469, elements 3752 .. 3759, group 469 / 16 = 29, whose 16 pieces 464 .. 479 are held by threads 80-95
    // (lanes 16-31 of warp 2) at j = 3; thread 80 writes its scale.
    // BEGIN SOLUTION
    const uint4* xr = reinterpret_cast<const uint4*>(x + (long long)r * cols);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    uint4 raw[NP], wraw[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        const int k = kRowThreads * j + t;
        raw[j] = k < pieces ? xr[k] : make_uint4(0u, 0u, 0u, 0u);
        wraw[j] = k < pieces ? wv[k] : make_uint4(0u, 0u, 0u, 0u);
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        float f[8];
        bf16x8_to_float(raw[j], f);
        for (int i = 0; i < 8; ++i) ss = fmaf(f[i], f[i], ss);
    }
    ss = warp_sum(ss);
    if (lane == 0) s_part[warp] = ss;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowThreads / 32; ++i) total += s_part[i];
    const float rstd = rsqrtf(total / (float)cols + eps);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        if (kRowThreads * j >= pieces) break;  // the same for the whole block: no piece of this j exists
        const int k = kRowThreads * j + t;
        float v[8], wf[8];
        bf16x8_to_float(raw[j], v);
        bf16x8_to_float(wraw[j], wf);
        float m = 0.0f;
        for (int i = 0; i < 8; ++i) {
            v[i] = v[i] * rstd * wf[i];
            m = fmaxf(m, fabsf(v[i]));
        }
        const float amax = fmaxf(halfwarp_max(m), kAmaxFloor);
        if (k < pieces) {
            *reinterpret_cast<uint2*>(y + (long long)r * cols + 8 * k) = e4m3x8(v, kE4m3Max / amax);
            if ((lane & 15) == 0) scales[(long long)(k / 16) * rows + r] = amax / kE4m3Max;
        }
    }
    // END SOLUTION
}

// One block of 256 threads per 128x128 block: thread t takes the 8 columns 8 * (t % 16) .. of rows t / 16,
// t / 16 + 16, ..., t / 16 + 112 of the block: 8 uint4, the whole block (32 KB of bf16) in registers.
__global__ void __launch_bounds__(256) quant_128x128_fast_kernel(const __nv_bfloat16* __restrict__ w,
                                                                 __nv_fp8_e4m3* __restrict__ q,
                                                                 float* __restrict__ scales, int rows, int cols) {
    __shared__ float scratch[32];
    const int r0 = blockIdx.y * 128 + threadIdx.x / 16, c = blockIdx.x * 128 + 8 * (threadIdx.x % 16);
    // TODO(task 8.7): (~16 lines) raw[i] = the uint4 at row r0 + 16 * i, column c (zeros where the row is past
    // rows or c past cols), all 8 loaded first; m = the max |value| of the 64; amax = max(block_max(m, scratch),
    // kAmaxFloor) (every thread calls it); then each existing piece's 8 bytes e4m3x8(values, kE4m3Max / amax)
    // to q + row * cols + c as a uint2; thread 0 writes scales[blockIdx.y * gridDim.x + blockIdx.x].
    // Worked example: thread 37 of block (2, 1): rows 128 + 2 + 16i, columns 256 + 40 .. 256 + 47.
    // BEGIN SOLUTION
    uint4 raw[8];
    const bool cin = c < cols;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = r0 + 16 * i;
        raw[i] = cin && r < rows ? *reinterpret_cast<const uint4*>(w + (long long)r * cols + c)
                                 : make_uint4(0u, 0u, 0u, 0u);
    }
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        float f[8];
        bf16x8_to_float(raw[i], f);
        for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(f[k]));
    }
    const float amax = fmaxf(block_max(m, scratch), kAmaxFloor), inv = kE4m3Max / amax;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = r0 + 16 * i;
        if (!cin || r >= rows) continue;
        float f[8];
        bf16x8_to_float(raw[i], f);
        *reinterpret_cast<uint2*>(q + (long long)r * cols + c) = e4m3x8(f, inv);
    }
    if (threadIdx.x == 0) scales[blockIdx.y * gridDim.x + blockIdx.x] = amax / kE4m3Max;
    // END SOLUTION
}

// Whether the launchers take the fast kernels when the shapes allow (task 8.7 sets it once they are written).
// BEGIN SOLUTION
constexpr bool kFastQuant = true;
// STUB: constexpr bool kFastQuant = false;  // TODO(task 8.7): true once the two kernels above are written
// END SOLUTION

// Contract: v = x * rsqrt(mean(x^2) + eps) * w per row (x rows x cols bf16, w cols bf16, fp32 math), quantized
// as quant_1x128 quantizes x: y (e4m3, rows x cols) and scales (float[ceil(cols/128)][rows]).
void rmsnorm_quant_1x128(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_fp8_e4m3* y, float* scales, int rows,
                         int cols, float eps) {
    if (rows <= 0 || cols <= 0) return;
    const bool fast = kFastQuant && cols % 8 == 0 && cols <= 8192 && aligned16(x) && aligned16(w) && aligned8(y);
    if (fast) {
        if (cols <= 1024) rmsnorm_quant_1x128_fast_kernel<1><<<rows, kRowThreads>>>(x, w, y, scales, rows, cols, eps);
        else if (cols <= 4096) rmsnorm_quant_1x128_fast_kernel<4><<<rows, kRowThreads>>>(x, w, y, scales, rows, cols, eps);
        else rmsnorm_quant_1x128_fast_kernel<8><<<rows, kRowThreads>>>(x, w, y, scales, rows, cols, eps);
        return;
    }
    const int vec = cols % 4 == 0 && aligned8(x) && aligned8(w) && aligned8(y) ? 1 : 0;
    rmsnorm_quant_1x128_kernel<<<rows, kBlock>>>(x, w, y, scales, rows, cols, eps, vec);
}

// Contract: w (rows x cols bf16) -> q (e4m3) and scales (float[ceil(rows/128)][ceil(cols/128)]): block (i, j)
// (rows 128i.., columns 128j..) is stored as q = e4m3(w * 448 / amax), scales[i][j] = amax / 448.
void quant_128x128(const __nv_bfloat16* w, __nv_fp8_e4m3* q, float* scales, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    const dim3 grid((cols + 127) / 128, (rows + 127) / 128);
    if (kFastQuant && cols % 8 == 0 && aligned16(w) && aligned8(q)) {
        quant_128x128_fast_kernel<<<grid, 256>>>(w, q, scales, rows, cols);
        return;
    }
    const int vec = cols % 4 == 0 && aligned8(w) && aligned8(q) ? 1 : 0;
    quant_128x128_kernel<<<grid, kBlock>>>(w, q, scales, rows, cols, vec);
}
// ----------------------------------------------------------------------------------------------------
// Task 8.4: a block-scaled FP8 GEMM on CUDA cores
// ----------------------------------------------------------------------------------------------------
// C (M x N, bf16) = sum over k-blocks kb of sa[kb][m] * sw[n / 128][kb] * (sum over k in kb of a[m][k] w[n][k]),
// with A (M x K) and W (N x K) in e4m3, row-major (both K-major, as the tensor cores want them). The scales
// change every 128 values of k, so they cannot wait for the end: the products of one k-block are summed
// first ("partial"), then that sum is scaled and added to the running result ("promotion"), as task 8.5 does
// with the tensor cores' partial sums.
// Block tile 64 x 64, 256 threads of 4 x 4 outputs each; the k-block is staged 32 columns at a time, decoded to
// float in shared memory (fp8 -> float is exact, so the products are exact in fp32). A tile's 64 columns lie in
// one 128-wide block of W: one sw per k-block for the whole tile.
constexpr int kGT = 64, kGK = 32;

__global__ void gemm_fp8_blockscaled_kernel(const __nv_fp8_e4m3* __restrict__ A, const float* __restrict__ sa,
                                            const __nv_fp8_e4m3* __restrict__ W, const float* __restrict__ sw,
                                            __nv_bfloat16* __restrict__ C, int M, int N, int K) {
    __shared__ float As[kGT][kGK + 1], Ws[kGT][kGK + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // 16 x 16 threads, 4 x 4 outputs each
    const int row0 = blockIdx.y * kGT, col0 = blockIdx.x * kGT;
    const int kblocks = (K + 127) / 128;
    float out[4][4] = {};
    for (int kb = 0; kb < kblocks; ++kb) {
        float part[4][4] = {};
        const int kend = (kb + 1) * 128 < K ? (kb + 1) * 128 : K;
        for (int k0 = kb * 128; k0 < kend; k0 += kGK) {
            // Worked: stage A[row0.., k0..] and W[col0.., k0..] (64 x 32 each), zeros outside, decoded to float.
            for (int e = threadIdx.x; e < kGT * kGK; e += blockDim.x) {
                const int r = e / kGK, k = e % kGK;
                const bool kin = k0 + k < kend;
                As[r][k] = row0 + r < M && kin ? float(A[(long long)(row0 + r) * K + k0 + k]) : 0.0f;
                Ws[r][k] = col0 + r < N && kin ? float(W[(long long)(col0 + r) * K + k0 + k]) : 0.0f;
            }
            __syncthreads();
            for (int k = 0; k < kGK; ++k) {
                float a[4], b[4];
                for (int i = 0; i < 4; ++i) a[i] = As[ty * 4 + i][k];
                for (int j = 0; j < 4; ++j) b[j] = Ws[tx * 4 + j][k];
                for (int i = 0; i < 4; ++i)
                    for (int j = 0; j < 4; ++j) part[i][j] = fmaf(a[i], b[j], part[i][j]);
            }
            __syncthreads();
        }
        // TODO(task 8.4): the promotion (~6 lines): out[i][j] += part[i][j] * sa_i * sb, with
        // sa_i = sa[kb * M + row] for this thread's row ty*4 + i of the tile (rows past M: any valid row, e.g.
        // M - 1, their results are not stored) and sb = sw[(col0 / 128) * kblocks + kb] for the whole tile.
        // Worked example: kb = 1, M = 200, row0 = 64, ty = 2, i = 3: row 64 + 11 = 75, sa_i = sa[200 + 75].
        // BEGIN SOLUTION
        const float sb = sw[(col0 / 128) * kblocks + kb];
        for (int i = 0; i < 4; ++i) {
            const int r = row0 + ty * 4 + i;
            const float s = sa[(long long)kb * M + (r < M ? r : M - 1)] * sb;
            for (int j = 0; j < 4; ++j) out[i][j] = fmaf(part[i][j], s, out[i][j]);
        }
        // END SOLUTION
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
            if (r < M && c < N) C[(long long)r * N + c] = __float2bfloat16_rn(out[i][j]);
        }
}
// Contract: A (M x K e4m3), sa (float[ceil(K/128)][M]), W (N x K e4m3), sw (float[ceil(N/128)][ceil(K/128)]),
// C (M x N bf16) = (A * sa) (W * sw)^T with fp32 accumulation, rounded to bf16 once.
void gemm_fp8_blockscaled(const __nv_fp8_e4m3* A, const float* sa, const __nv_fp8_e4m3* W, const float* sw,
                          __nv_bfloat16* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    const dim3 grid((N + kGT - 1) / kGT, (M + kGT - 1) / kGT);
    gemm_fp8_blockscaled_kernel<<<grid, 256>>>(A, sa, W, sw, C, M, N, K);
}
