// ccsim_fp8.h - the 8-bit floating-point types of <cuda_fp8.h> for the CPU simulator. Included by ccsim.h.
//
// Formats (OCP 8-bit floating point, as cuda_fp8.h names them):
//   e4m3  1 sign, 4 exponent (bias 7), 3 fraction bits. Largest finite 448 (0x7E), no infinity, NaN is
//         S.1111.111 (0x7F, 0xFF); smallest subnormal 2^-9.
//   e5m2  1 sign, 5 exponent (bias 15), 2 fraction bits: the top byte of an IEEE half. Largest finite 57344
//         (0x7B), infinity 0x7C, NaN 0x7D..0x7F; smallest subnormal 2^-16.
//
// Bit-exactness, checked against the CUDA 13.0 toolkit's own cuda_fp8.hpp compiled for the host
// (benchmarks/fp8_header_check/run.sh: every float of magnitude 2^-20 to 2^21 and every 4096th outside, every half
// and bf16, 20M random doubles, all 256 codes; results/cpu/fp8_header_check.txt; tests/sim/test_api_fp8.py runs a
// sample of it where a toolkit is installed):
// - float/double/half/bf16 -> fp8: one rounding to nearest, ties to even, from the exact value. A result past
//   the largest finite value is that value with the input's sign under __NV_SATFINITE, and under __NV_NOSAT
//   NaN (e4m3, which has no infinity) or infinity (e5m2). Infinite inputs follow the same rule.
//   A float, half or bf16 NaN becomes the positive NaN 0x7F (cuda_fp8.hpp drops the sign of a float NaN);
//   a double NaN keeps its sign and, for e5m2, fraction bits 50-51 (as cuda_fp8.hpp's double path).
// - fp8 -> half/float/double: exact; a NaN becomes the canonical half NaN 0x7FFF / float 0x7FFFFFFF.
// - The C++ types' constructors saturate (__NV_SATFINITE), integers convert through float, and the integer
//   conversion operators truncate toward zero and saturate, as cuda_fp8.hpp defines them; NaN gives 0, except
//   0x8000000000000000 for the 64-bit types (cuda_fp16.h documents that for __half2ll_rz/__half2ull_rz).
// The types carry no arithmetic operators: cuda_fp8.h has none (convert to float, compute, convert back).
//
// Left out on purpose (a use fails to compile with the name below, never a silent difference):
// - __nv_fp8_e8m0 (x2, x4) and the __nv_cvt_*e8m0* functions: the power-of-two scale format of the MX block
//   formats (Blackwell's tensor cores); Hopper's FP8 GEMMs take fp32 scales.
// - the constructors of __nv_fp8x4_* from double4: the simulator has no double4 type.
#ifndef CCSIM_FP8_H
#define CCSIM_FP8_H

#include <cmath>
#include <cstdint>
#include <cstring>

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short int __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

namespace ccsim {
namespace fp8 {
// One rounding of a finite or infinite double to the format (NaN is handled by the callers).
static inline __nv_fp8_storage_t encode(double x, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
    const bool e4 = kind == __NV_E4M3;
    const int mb = e4 ? 3 : 2, bias = e4 ? 7 : 15, emin = 1 - bias;
    const unsigned long long maxf = e4 ? 0x7Eu : 0x7Bu;  // the largest finite value
    const unsigned long long over = e4 ? 0x7Fu : 0x7Cu;  // what an overflow gives without saturation
    const __nv_fp8_storage_t sign = std::signbit(x) ? 0x80u : 0u;
    const double a = std::fabs(x);
    if (a == 0.0) return sign;
    unsigned long long bits = over;
    if (!std::isinf(a)) {
        int e;
        std::frexp(a, &e);
        e -= 1;                                        // a = 1.f * 2^e
        if (e < emin) e = emin;                        // subnormal range: the quantum stays 2^(emin - mb)
        if (e > bias + 1) return (__nv_fp8_storage_t)(sign | (sat == __NV_SATFINITE ? maxf : over));
        const double q = std::ldexp(a, mb - e);        // exact: a power-of-two scaling, q < 2^(mb + 1)
        double n = std::floor(q);
        const double frac = q - n;                     // exact
        if (frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) != 0.0)) n += 1.0;  // nearest, ties to even
        const double hidden = std::ldexp(1.0, mb);
        // a carry out of the fraction (n == 2 hidden) moves into the exponent by itself
        bits = n < hidden ? (unsigned long long)n
                          : ((unsigned long long)(e + bias) << mb) + (unsigned long long)(n - hidden);
    }
    if (bits > maxf) bits = sat == __NV_SATFINITE ? maxf : over;  // e4m3: NaN 0x7F, e5m2: infinity 0x7C
    return (__nv_fp8_storage_t)(sign | bits);
}
// fp8 bits -> float, exact; NaN -> 0x7FFFFFFF (the canonical float NaN, sign dropped).
static inline float decode(__nv_fp8_storage_t b, __nv_fp8_interpretation_t kind) {
    const bool e4 = kind == __NV_E4M3;
    const int mb = e4 ? 3 : 2, bias = e4 ? 7 : 15;
    const unsigned mag = b & 0x7Fu, ebits = mag >> mb, m = mag & ((1u << mb) - 1u);
    float v;
    if (e4 ? mag == 0x7Fu : mag > 0x7Cu) {
        const uint32_t nan = 0x7FFFFFFFu;
        std::memcpy(&v, &nan, 4);
        return v;
    }
    if (!e4 && mag == 0x7Cu) v = INFINITY;
    else if (ebits == 0) v = std::ldexp((float)m, 1 - bias - mb);
    else v = std::ldexp((float)(m | (1u << mb)), (int)ebits - bias - mb);
    return (b & 0x80u) ? -v : v;
}
static inline __nv_fp8_storage_t from_float(float x, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
    if (std::isnan(x)) return 0x7Fu;
    return encode((double)x, sat, kind);
}
static inline __nv_fp8_storage_t from_double(double x, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
    if (std::isnan(x)) {
        uint64_t u;
        std::memcpy(&u, &x, 8);
        const __nv_fp8_storage_t sign = (u >> 63) ? 0x80u : 0u;
        return (__nv_fp8_storage_t)(sign | (kind == __NV_E4M3 ? 0x7Fu : (0x7Eu | ((u >> 50) & 3u))));
    }
    return encode(x, sat, kind);
}
static inline unsigned short to_half_bits(__nv_fp8_storage_t b, __nv_fp8_interpretation_t kind) {
    const float f = decode(b, kind);
    return std::isnan(f) ? (unsigned short)0x7FFFu : ccsim::f2h_bits(f);  // every fp8 value is a half value
}
// The unsigned/signed char conversions of cuda_fp8.hpp: NaN -> 0, saturate to the type, truncate.
template <class I> static inline I to_char(__nv_fp8_storage_t b, __nv_fp8_interpretation_t kind) {
    const float f = decode(b, kind);
    if (std::isnan(f)) return 0;
    if (f > (float)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    if (f < (float)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    return (I)f;
}
}  // namespace fp8
}  // namespace ccsim

// ---------------------------------------------------------------------------------------------------
// The C interface
// ---------------------------------------------------------------------------------------------------
static inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(const double x, const __nv_saturation_t saturate,
                                                        const __nv_fp8_interpretation_t fp8_interpretation) {
    return ccsim::fp8::from_double(x, saturate, fp8_interpretation);
}
static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(const float x, const __nv_saturation_t saturate,
                                                       const __nv_fp8_interpretation_t fp8_interpretation) {
    return ccsim::fp8::from_float(x, saturate, fp8_interpretation);
}
static inline __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(const __half_raw x, const __nv_saturation_t saturate,
                                                         const __nv_fp8_interpretation_t fp8_interpretation) {
    return ccsim::fp8::from_float(ccsim::h2f_bits(x.x), saturate, fp8_interpretation);
}
static inline __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(const __nv_bfloat16_raw x,
                                                             const __nv_saturation_t saturate,
                                                             const __nv_fp8_interpretation_t fp8_interpretation) {
    return ccsim::fp8::from_float(ccsim::bf2f_bits(x.x), saturate, fp8_interpretation);
}
// Pairs: element .x goes to the low byte, .y to the high byte.
static inline __nv_fp8x2_storage_t ccsim_fp8_pair(__nv_fp8_storage_t lo, __nv_fp8_storage_t hi) {
    return (__nv_fp8x2_storage_t)(((unsigned)hi << 8) | lo);
}
static inline __nv_fp8x2_storage_t __nv_cvt_double2_to_fp8x2(const double2 x, const __nv_saturation_t saturate,
                                                             const __nv_fp8_interpretation_t fp8_interpretation) {
    return ccsim_fp8_pair(__nv_cvt_double_to_fp8(x.x, saturate, fp8_interpretation),
                          __nv_cvt_double_to_fp8(x.y, saturate, fp8_interpretation));
}
static inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(const float2 x, const __nv_saturation_t saturate,
                                                            const __nv_fp8_interpretation_t fp8_interpretation) {
    return ccsim_fp8_pair(__nv_cvt_float_to_fp8(x.x, saturate, fp8_interpretation),
                          __nv_cvt_float_to_fp8(x.y, saturate, fp8_interpretation));
}
static inline __nv_fp8x2_storage_t __nv_cvt_halfraw2_to_fp8x2(const __half2_raw x, const __nv_saturation_t saturate,
                                                              const __nv_fp8_interpretation_t fp8_interpretation) {
    return ccsim_fp8_pair(__nv_cvt_halfraw_to_fp8(__half_raw{x.x}, saturate, fp8_interpretation),
                          __nv_cvt_halfraw_to_fp8(__half_raw{x.y}, saturate, fp8_interpretation));
}
static inline __nv_fp8x2_storage_t __nv_cvt_bfloat16raw2_to_fp8x2(
    const __nv_bfloat162_raw x, const __nv_saturation_t saturate, const __nv_fp8_interpretation_t fp8_interpretation) {
    return ccsim_fp8_pair(__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{x.x}, saturate, fp8_interpretation),
                          __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{x.y}, saturate, fp8_interpretation));
}
static inline __half_raw __nv_cvt_fp8_to_halfraw(const __nv_fp8_storage_t x,
                                                 const __nv_fp8_interpretation_t fp8_interpretation) {
    return __half_raw{ccsim::fp8::to_half_bits(x, fp8_interpretation)};
}
static inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(const __nv_fp8x2_storage_t x,
                                                     const __nv_fp8_interpretation_t fp8_interpretation) {
    return __half2_raw{ccsim::fp8::to_half_bits((__nv_fp8_storage_t)(x & 0xFFu), fp8_interpretation),
                       ccsim::fp8::to_half_bits((__nv_fp8_storage_t)(x >> 8), fp8_interpretation)};
}

// ---------------------------------------------------------------------------------------------------
// The C++ types: one value, a pair and a quad of each kind (.x in the lowest byte)
// ---------------------------------------------------------------------------------------------------
#define CCSIM_FP8_SCALAR(T, KIND)                                                                              \
    struct alignas(1) T {                                                                                      \
        __nv_fp8_storage_t __x;                                                                                \
        T() = default;                                                                                         \
        explicit T(const __half f) : __x(__nv_cvt_halfraw_to_fp8(__half_raw{f.__x}, __NV_SATFINITE, KIND)) {}  \
        explicit T(const __nv_bfloat16 f)                                                                      \
            : __x(__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{f.__x}, __NV_SATFINITE, KIND)) {}              \
        explicit T(const float f) : __x(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, KIND)) {}                    \
        explicit T(const double f) : __x(__nv_cvt_double_to_fp8(f, __NV_SATFINITE, KIND)) {}                  \
        explicit T(const unsigned short int v) : T((float)v) {}                                                \
        explicit T(const unsigned int v) : T((float)v) {}                                                      \
        explicit T(const unsigned long int v) : T((float)v) {}                                                 \
        explicit T(const unsigned long long int v) : T((float)v) {}                                            \
        explicit T(const short int v) : T((float)v) {}                                                         \
        explicit T(const int v) : T((float)v) {}                                                               \
        explicit T(const long int v) : T((float)v) {}                                                          \
        explicit T(const long long int v) : T((float)v) {}                                                     \
        explicit operator __half() const { return __half(__nv_cvt_fp8_to_halfraw(__x, KIND)); }                \
        explicit operator float() const { return ccsim::h2f_bits(__nv_cvt_fp8_to_halfraw(__x, KIND).x); }      \
        explicit operator __nv_bfloat16() const { return __float2bfloat16_rz(float(*this)); }                  \
        explicit operator double() const { return (double)float(*this); }                                      \
        explicit operator unsigned char() const { return ccsim::fp8::to_char<unsigned char>(__x, KIND); }      \
        explicit operator signed char() const { return ccsim::fp8::to_char<signed char>(__x, KIND); }          \
        explicit operator char() const {                                                                       \
            return ((char)-1 < (char)0) ? (char)(signed char)(*this) : (char)(unsigned char)(*this);           \
        }                                                                                                      \
        explicit operator unsigned short int() const { return __half2ushort_rz(__half(*this)); }               \
        explicit operator unsigned int() const { return __half2uint_rz(__half(*this)); }                       \
        explicit operator unsigned long int() const { return (unsigned long)(unsigned long long)(*this); }      \
        explicit operator unsigned long long int() const {                                                     \
            return __half2ull_rz(__half(*this));  /* NaN: 0x8000000000000000 (ccsim_fp16.h) */                  \
        }                                                                                                      \
        explicit operator short int() const { return __half2short_rz(__half(*this)); }                         \
        explicit operator int() const { return __half2int_rz(__half(*this)); }                                 \
        explicit operator long int() const { return (long)(long long)(*this); }                                \
        explicit operator long long int() const {                                                              \
            return __half2ll_rz(__half(*this));  /* NaN: 0x8000000000000000 (ccsim_fp16.h) */                   \
        }                                                                                                      \
        explicit operator bool() const { return (__x & 0x7Fu) != 0u; }                                         \
    };
CCSIM_FP8_SCALAR(__nv_fp8_e4m3, __NV_E4M3)
CCSIM_FP8_SCALAR(__nv_fp8_e5m2, __NV_E5M2)
#undef CCSIM_FP8_SCALAR

#define CCSIM_FP8_VECTORS(T2, T4, KIND)                                                                        \
    struct alignas(2) T2 {                                                                                     \
        __nv_fp8x2_storage_t __x;                                                                              \
        T2() = default;                                                                                        \
        explicit T2(const __half2 f)                                                                           \
            : __x(__nv_cvt_halfraw2_to_fp8x2(__half2_raw{f.x.__x, f.y.__x}, __NV_SATFINITE, KIND)) {}          \
        explicit T2(const __nv_bfloat162 f)                                                                    \
            : __x(__nv_cvt_bfloat16raw2_to_fp8x2(__nv_bfloat162_raw{f.x.__x, f.y.__x}, __NV_SATFINITE, KIND)) {} \
        explicit T2(const float2 f) : __x(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, KIND)) {}                \
        explicit T2(const double2 f) : __x(__nv_cvt_double2_to_fp8x2(f, __NV_SATFINITE, KIND)) {}             \
        explicit operator __half2() const { return __half2(__nv_cvt_fp8x2_to_halfraw2(__x, KIND)); }           \
        explicit operator float2() const {                                                                     \
            const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__x, KIND);                                       \
            return make_float2(ccsim::h2f_bits(h.x), ccsim::h2f_bits(h.y));                                    \
        }                                                                                                      \
    };                                                                                                         \
    struct alignas(4) T4 {                                                                                     \
        __nv_fp8x4_storage_t __x;                                                                              \
        T4() = default;                                                                                        \
        explicit T4(const __half2 lo, const __half2 hi)                                                        \
            : __x((__nv_fp8x4_storage_t)T2(lo).__x | ((__nv_fp8x4_storage_t)T2(hi).__x << 16)) {}              \
        explicit T4(const __nv_bfloat162 lo, const __nv_bfloat162 hi)                                          \
            : __x((__nv_fp8x4_storage_t)T2(lo).__x | ((__nv_fp8x4_storage_t)T2(hi).__x << 16)) {}              \
        explicit T4(const float4 f)                                                                            \
            : __x((__nv_fp8x4_storage_t)T2(make_float2(f.x, f.y)).__x |                                        \
                  ((__nv_fp8x4_storage_t)T2(make_float2(f.z, f.w)).__x << 16)) {}                              \
        explicit operator float4() const {                                                                     \
            const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(__x & 0xFFFFu), KIND);    \
            const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(__x >> 16), KIND);        \
            return make_float4(ccsim::h2f_bits(lo.x), ccsim::h2f_bits(lo.y), ccsim::h2f_bits(hi.x),            \
                               ccsim::h2f_bits(hi.y));                                                         \
        }                                                                                                      \
    };
CCSIM_FP8_VECTORS(__nv_fp8x2_e4m3, __nv_fp8x4_e4m3, __NV_E4M3)
CCSIM_FP8_VECTORS(__nv_fp8x2_e5m2, __nv_fp8x4_e5m2, __NV_E5M2)
#undef CCSIM_FP8_VECTORS

// ---------------------------------------------------------------------------------------------------
// Refused names (see the header comment): a use fails to compile with the name in the message
// ---------------------------------------------------------------------------------------------------
#define CCSIM_FP8_REFUSED(name) ccsim_not_available_on_the_simulator_##name
#define __nv_fp8_e8m0 CCSIM_FP8_REFUSED(__nv_fp8_e8m0_the_MX_scale_format)
#define __nv_fp8x2_e8m0 CCSIM_FP8_REFUSED(__nv_fp8x2_e8m0_the_MX_scale_format)
#define __nv_fp8x4_e8m0 CCSIM_FP8_REFUSED(__nv_fp8x4_e8m0_the_MX_scale_format)
#define __nv_cvt_float_to_e8m0(...) CCSIM_FP8_REFUSED(__nv_cvt_float_to_e8m0)
#define __nv_cvt_float2_to_e8m0x2(...) CCSIM_FP8_REFUSED(__nv_cvt_float2_to_e8m0x2)
#define __nv_cvt_double_to_e8m0(...) CCSIM_FP8_REFUSED(__nv_cvt_double_to_e8m0)
#define __nv_cvt_double2_to_e8m0x2(...) CCSIM_FP8_REFUSED(__nv_cvt_double2_to_e8m0x2)
#define __nv_cvt_bfloat16raw_to_e8m0(...) CCSIM_FP8_REFUSED(__nv_cvt_bfloat16raw_to_e8m0)
#define __nv_cvt_bfloat162raw_to_e8m0x2(...) CCSIM_FP8_REFUSED(__nv_cvt_bfloat162raw_to_e8m0x2)
#define __nv_cvt_e8m0_to_bf16raw(...) CCSIM_FP8_REFUSED(__nv_cvt_e8m0_to_bf16raw)
#define __nv_cvt_e8m0x2_to_bf162raw(...) CCSIM_FP8_REFUSED(__nv_cvt_e8m0x2_to_bf162raw)

#endif  // CCSIM_FP8_H
