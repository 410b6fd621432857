// ccsim_fp16.h - __half/__half2 and __nv_bfloat16/__nv_bfloat162 for the CPU simulator
// (what <cuda_fp16.h> and <cuda_bf16.h> provide). Included by ccsim.h.
//
// Bit-exactness:
// - Conversions between the 16-bit formats and float/double/integers are bit-exact with the GPU in every
//   rounding mode (_rn nearest-even, _rz toward zero, _rd down, _ru up): one rounding from the exact value
//   (long double holds every float, double-rounded-free integer and every half/bf16 product exactly).
//   NaN becomes the canonical NaN 0x7fff on the way down and 0x7fffffff on the way up from half, as
//   cuda_fp16.hpp's own host path does; bf16 -> float is the exact 16-bit shift.
// - add, sub, mul, div, fma (and their _rn, _sat, _relu forms) round the exact result once, as the
//   hardware instructions do.
// - The math functions (hexp, hlog, hsin, hrsqrt, htanh, ...) compute in float with the host libm and
//   round to nearest: within one 16-bit ulp of the GPU's approximations, not always bit-identical.
//
// Left out on purpose (a use fails to compile with the name below, never a silent difference):
// - __shfl/__shfl_up/__shfl_down/__shfl_xor without _sync: removed from CUDA for sm_70+.
// - __ldca/__ldcv/__ldlu/__stwb/__stwt on half/bf16: cache-hint loads and stores; use a plain access.
//   (__ldg/__ldcg/__ldcs/__stcg/__stcs come from ccsim.h's generic templates.)
#ifndef CCSIM_FP16_H
#define CCSIM_FP16_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <climits>
#include <limits>

// ---------------------------------------------------------------------------------------------------
// Rounding core: one rounding of an exact value to a binary16-like format (EB exponent bits, MB
// fraction bits) in one of the four IEEE modes.
// ---------------------------------------------------------------------------------------------------
namespace ccsim {
enum RoundMode { RM_RN = 0, RM_RZ = 1, RM_RD = 2, RM_RU = 3 };

// `tail` is a value far below x's last bit whose sign breaks ties and decides directed rounding when x
// itself lands exactly on a representable value or a tie (used by fma, where x + tail is exact).
template <int EB, int MB>
static inline uint16_t round_bits(long double x, int mode, long double tail = 0.0L) {
    if (std::isnan(x)) return 0x7fffu;
    const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    const int bias = (1 << (EB - 1)) - 1, emin = 1 - bias;
    const uint16_t inf = (uint16_t)(((1u << EB) - 1u) << MB), maxf = (uint16_t)(inf - 1u);
    long double a = std::fabs(x);
    long double t = sign ? -tail : tail;  // tail relative to |x|
    // directed modes in terms of the magnitude: toward zero or away from zero
    const bool away = (mode == RM_RU && !sign) || (mode == RM_RD && sign);
    const bool tozero = mode == RM_RZ || (mode == RM_RU && sign) || (mode == RM_RD && !sign);
    if (std::isinf(a)) return (uint16_t)(sign | inf);
    if (a == 0.0L && t == 0.0L) return sign;
    int e;
    if (a == 0.0L) e = emin; else { std::frexp(a, &e); e -= 1; }  // a = 1.f * 2^e
    if (e < emin) e = emin;
    const long double q = std::ldexp(a, MB - e);  // exact: scaling by a power of two
    long double n = std::floor(q);
    long double frac = q - n;                      // in [0, 1), exact
    bool up;
    if (frac == 0.0L && t < 0.0L) {                // just below a representable value
        n -= 1.0L;
        up = !tozero;                              // nearest: the value itself (up); toward zero: below
        if (mode == RM_RN) up = true;
    } else if (frac == 0.0L) {
        up = false;
    } else if (mode == RM_RN) {
        if (frac > 0.5L) up = true;
        else if (frac < 0.5L) up = false;
        else if (t > 0.0L) up = true;
        else if (t < 0.0L) up = false;
        else up = std::fmod(n, 2.0L) != 0.0L;      // tie: to even
    } else {
        up = away;
    }
    if (up) n += 1.0L;
    unsigned long long bits;
    const long double hidden = std::ldexp(1.0L, MB);
    if (n < hidden) bits = (unsigned long long)n;  // subnormal (e == emin) or zero
    else bits = ((unsigned long long)(e + bias) << MB) + (unsigned long long)(n - hidden);
    if (bits >= inf) {                             // overflow
        if (mode == RM_RN || away) return (uint16_t)(sign | inf);
        return (uint16_t)(sign | maxf);
    }
    if (bits == 0 && a == 0.0L) return sign;
    return (uint16_t)(sign | bits);
}
static inline uint16_t f2h_bits(float f, int mode = RM_RN) { return round_bits<5, 10>((long double)f, mode); }
static inline uint16_t f2bf_bits(float f, int mode = RM_RN) { return round_bits<8, 7>((long double)f, mode); }
static inline float h2f_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 31) x = m ? 0x7fffffffu : (sign | 0x7f800000u);  // NaN: canonical, sign dropped (as cuda_fp16.hpp)
    else if (e == 0) {
        if (m == 0) x = sign;
        else { e = 127 - 15 + 1; while (!(m & 0x400u)) { m <<= 1; e--; } m &= 0x3ffu; x = sign | (e << 23) | (m << 13); }
    } else x = sign | ((e - 15 + 127) << 23) | (m << 13);
    float f; std::memcpy(&f, &x, 4); return f;
}
static inline float bf2f_bits(uint16_t b) { uint32_t x = (uint32_t)b << 16; float f; std::memcpy(&f, &x, 4); return f; }
}  // namespace ccsim

// ---------------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------------
struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };
struct __nv_bfloat162_raw { unsigned short x, y; };

struct __half {
    uint16_t __x;
    __half() = default;
    __half(float f) : __x(ccsim::f2h_bits(f)) {}
    __half(double f) : __x(ccsim::round_bits<5, 10>((long double)f, ccsim::RM_RN)) {}
    __half(int i) : __x(ccsim::round_bits<5, 10>((long double)i, ccsim::RM_RN)) {}
    __half(const __half_raw& r) : __x(r.x) {}
    operator __half_raw() const { return __half_raw{__x}; }
    operator float() const { return ccsim::h2f_bits(__x); }
};
struct __nv_bfloat16 {
    uint16_t __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(ccsim::f2bf_bits(f)) {}
    __nv_bfloat16(double f) : __x(ccsim::round_bits<8, 7>((long double)f, ccsim::RM_RN)) {}
    __nv_bfloat16(int i) : __x(ccsim::round_bits<8, 7>((long double)i, ccsim::RM_RN)) {}
    __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
    operator float() const { return ccsim::bf2f_bits(__x); }
};
struct alignas(4) __half2 {
    __half x, y;
    __half2() = default;
    __half2(__half a, __half b) : x(a), y(b) {}
    __half2(const __half2_raw& r) { x.__x = r.x; y.__x = r.y; }
    operator __half2_raw() const { return __half2_raw{x.__x, y.__x}; }
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
    __nv_bfloat162(const __nv_bfloat162_raw& r) { x.__x = r.x; y.__x = r.y; }
    operator __nv_bfloat162_raw() const { return __nv_bfloat162_raw{x.__x, y.__x}; }
};
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

namespace ccsim {
template <class H> struct Fmt;
template <> struct Fmt<__half> { static constexpr int EB = 5, MB = 10; using H2 = __half2; };
template <> struct Fmt<__nv_bfloat16> { static constexpr int EB = 8, MB = 7; using H2 = __nv_bfloat162; };
template <class H> static inline H from_bits16(uint16_t b) { H h; h.__x = b; return h; }
template <class H> static inline H rnd(long double v, int mode = RM_RN, long double tail = 0.0L) {
    return from_bits16<H>(round_bits<Fmt<H>::EB, Fmt<H>::MB>(v, mode, tail));
}
template <class H> static inline long double ld(H h) { return (long double)(float)h; }
template <class H> static inline bool isnan16(H h) { return std::isnan((float)h); }
template <class H> static inline H sat01(H h) {  // _sat: clamp to [0, 1], NaN to +0
    float f = (float)h;
    if (!(f > 0.0f)) return from_bits16<H>(0);
    return f > 1.0f ? rnd<H>(1.0L) : h;
}
template <class H> static inline H relu16(H h) { return isnan16(h) ? from_bits16<H>(0x7fffu) : ((float)h < 0.0f ? from_bits16<H>(0) : h); }
// a*b + c with one rounding: a*b is exact in long double; the sum's rounding error goes in `tail`
template <class H> static inline H fma16(H a, H b, H c) {
    long double p = ld(a) * ld(b), s = p + ld(c), bp = s - p, t = (p - (s - bp)) + (ld(c) - bp);
    if (std::isnan(s) || std::isinf(s)) return rnd<H>(s);
    return rnd<H>(s, RM_RN, t);
}
template <class H> static inline H hmax16(H a, H b, bool nan) {
    if (isnan16(a) || isnan16(b)) {
        if (nan || (isnan16(a) && isnan16(b))) return from_bits16<H>(0x7fffu);
        return isnan16(a) ? b : a;
    }
    float x = (float)a, y = (float)b;
    if (x == y) return std::signbit(x) ? b : a;  // +0 is larger than -0
    return x > y ? a : b;
}
template <class H> static inline H hmin16(H a, H b, bool nan) {
    if (isnan16(a) || isnan16(b)) {
        if (nan || (isnan16(a) && isnan16(b))) return from_bits16<H>(0x7fffu);
        return isnan16(a) ? b : a;
    }
    float x = (float)a, y = (float)b;
    if (x == y) return std::signbit(x) ? a : b;
    return x < y ? a : b;
}
// float-to-integer conversion as PTX cvt.rni/rzi/rmi/rpi.sat: NaN -> 0, saturate at the type's range
template <class I> static inline I to_int(float f, int mode) {
    if (std::isnan(f)) return 0;
    double r = mode == RM_RN ? std::nearbyint((double)f) : mode == RM_RZ ? std::trunc((double)f)
             : mode == RM_RD ? std::floor((double)f) : std::ceil((double)f);
    if (r <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (r >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)r;
}
template <class H> static inline H math16(H a, float (*fn)(float)) { return rnd<H>((long double)fn((float)a)); }
static inline float f_rsqrt(float x) { return 1.0f / std::sqrt(x); }
static inline float f_rcp(float x) { return 1.0f / x; }
static inline float f_exp10(float x) { return std::pow(10.0f, x); }
}  // namespace ccsim

// ---------------------------------------------------------------------------------------------------
// Operators (C++ operators of cuda_fp16.hpp/cuda_bf16.hpp: rounded once, as the instructions)
// ---------------------------------------------------------------------------------------------------
#define CCSIM_H16_OPS(H, H2)                                                                                   \
    static inline H operator+(H a, H b) { return ccsim::rnd<H>(ccsim::ld(a) + ccsim::ld(b)); }                 \
    static inline H operator-(H a, H b) { return ccsim::rnd<H>(ccsim::ld(a) - ccsim::ld(b)); }                 \
    static inline H operator*(H a, H b) { return ccsim::rnd<H>(ccsim::ld(a) * ccsim::ld(b)); }                 \
    static inline H operator/(H a, H b) { return ccsim::rnd<H>((long double)((float)a / (float)b)); }          \
    static inline H operator-(H a) { H r = a; r.__x ^= 0x8000u; return r; }                                   \
    static inline H operator+(H a) { return a; }                                                               \
    static inline H& operator+=(H& a, H b) { a = a + b; return a; }                                            \
    static inline H& operator-=(H& a, H b) { a = a - b; return a; }                                            \
    static inline H& operator*=(H& a, H b) { a = a * b; return a; }                                            \
    static inline H& operator/=(H& a, H b) { a = a / b; return a; }                                            \
    static inline H& operator++(H& a) { a = a + H(1.0f); return a; }                                          \
    static inline H& operator--(H& a) { a = a - H(1.0f); return a; }                                           \
    static inline H operator++(H& a, int) { H o = a; ++a; return o; }                                          \
    static inline H operator--(H& a, int) { H o = a; --a; return o; }                                          \
    static inline bool operator<(H a, H b) { return (float)a < (float)b; }                                    \
    static inline bool operator>(H a, H b) { return (float)a > (float)b; }                                    \
    static inline bool operator<=(H a, H b) { return (float)a <= (float)b; }                                  \
    static inline bool operator>=(H a, H b) { return (float)a >= (float)b; }                                  \
    static inline bool operator==(H a, H b) { return (float)a == (float)b; }                                  \
    static inline bool operator!=(H a, H b) { return (float)a != (float)b; }                                  \
    static inline H2 operator+(H2 a, H2 b) { return H2(a.x + b.x, a.y + b.y); }                                \
    static inline H2 operator-(H2 a, H2 b) { return H2(a.x - b.x, a.y - b.y); }                                \
    static inline H2 operator*(H2 a, H2 b) { return H2(a.x * b.x, a.y * b.y); }                                \
    static inline H2 operator/(H2 a, H2 b) { return H2(a.x / b.x, a.y / b.y); }                                \
    static inline H2 operator-(H2 a) { return H2(-a.x, -a.y); }                                                \
    static inline H2 operator+(H2 a) { return a; }                                                             \
    static inline H2& operator+=(H2& a, H2 b) { a = a + b; return a; }                                         \
    static inline H2& operator-=(H2& a, H2 b) { a = a - b; return a; }                                         \
    static inline H2& operator*=(H2& a, H2 b) { a = a * b; return a; }                                         \
    static inline H2& operator/=(H2& a, H2 b) { a = a / b; return a; }                                         \
    static inline bool operator==(H2 a, H2 b) { return a.x == b.x && a.y == b.y; }                             \
    static inline bool operator!=(H2 a, H2 b) { return a.x != b.x && a.y != b.y; }                             \
    static inline bool operator<(H2 a, H2 b) { return a.x < b.x && a.y < b.y; }                                \
    static inline bool operator>(H2 a, H2 b) { return a.x > b.x && a.y > b.y; }                                \
    static inline bool operator<=(H2 a, H2 b) { return a.x <= b.x && a.y <= b.y; }                             \
    static inline bool operator>=(H2 a, H2 b) { return a.x >= b.x && a.y >= b.y; }
CCSIM_H16_OPS(__half, __half2)
CCSIM_H16_OPS(__nv_bfloat16, __nv_bfloat162)
#undef CCSIM_H16_OPS

// ---------------------------------------------------------------------------------------------------
// Intrinsics shared by both formats (overloaded on the type, as in CUDA)
// ---------------------------------------------------------------------------------------------------
#define CCSIM_H16_INTRINSICS(H, H2)                                                                            \
    /* arithmetic */                                                                                           \
    static inline H __hadd(H a, H b) { return a + b; }                                                         \
    static inline H __hsub(H a, H b) { return a - b; }                                                         \
    static inline H __hmul(H a, H b) { return a * b; }                                                         \
    static inline H __hdiv(H a, H b) { return a / b; }                                                         \
    static inline H __hadd_rn(H a, H b) { return a + b; }                                                      \
    static inline H __hsub_rn(H a, H b) { return a - b; }                                                      \
    static inline H __hmul_rn(H a, H b) { return a * b; }                                                      \
    static inline H __hadd_sat(H a, H b) { return ccsim::sat01(a + b); }                                      \
    static inline H __hsub_sat(H a, H b) { return ccsim::sat01(a - b); }                                      \
    static inline H __hmul_sat(H a, H b) { return ccsim::sat01(a * b); }                                      \
    static inline H __hneg(H a) { return -a; }                                                                 \
    static inline H __habs(H a) { H r = a; r.__x &= 0x7fffu; return r; }                                      \
    static inline H __hfma(H a, H b, H c) { return ccsim::fma16(a, b, c); }                                   \
    static inline H __hfma_sat(H a, H b, H c) { return ccsim::sat01(ccsim::fma16(a, b, c)); }                 \
    static inline H __hfma_relu(H a, H b, H c) { return ccsim::relu16(ccsim::fma16(a, b, c)); }               \
    static inline H __hmax(H a, H b) { return ccsim::hmax16(a, b, false); }                                    \
    static inline H __hmin(H a, H b) { return ccsim::hmin16(a, b, false); }                                    \
    static inline H __hmax_nan(H a, H b) { return ccsim::hmax16(a, b, true); }                                 \
    static inline H __hmin_nan(H a, H b) { return ccsim::hmin16(a, b, true); }                                 \
    static inline H2 __hadd2(H2 a, H2 b) { return a + b; }                                                     \
    static inline H2 __hsub2(H2 a, H2 b) { return a - b; }                                                     \
    static inline H2 __hmul2(H2 a, H2 b) { return a * b; }                                                     \
    static inline H2 __h2div(H2 a, H2 b) { return a / b; }                                                     \
    static inline H2 __hadd2_rn(H2 a, H2 b) { return a + b; }                                                  \
    static inline H2 __hsub2_rn(H2 a, H2 b) { return a - b; }                                                  \
    static inline H2 __hmul2_rn(H2 a, H2 b) { return a * b; }                                                  \
    static inline H2 __hadd2_sat(H2 a, H2 b) { return H2(__hadd_sat(a.x, b.x), __hadd_sat(a.y, b.y)); }        \
    static inline H2 __hsub2_sat(H2 a, H2 b) { return H2(__hsub_sat(a.x, b.x), __hsub_sat(a.y, b.y)); }        \
    static inline H2 __hmul2_sat(H2 a, H2 b) { return H2(__hmul_sat(a.x, b.x), __hmul_sat(a.y, b.y)); }        \
    static inline H2 __hneg2(H2 a) { return -a; }                                                              \
    static inline H2 __habs2(H2 a) { return H2(__habs(a.x), __habs(a.y)); }                                    \
    static inline H2 __hfma2(H2 a, H2 b, H2 c) { return H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }    \
    static inline H2 __hfma2_sat(H2 a, H2 b, H2 c) { return H2(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y)); } \
    static inline H2 __hfma2_relu(H2 a, H2 b, H2 c) { return H2(__hfma_relu(a.x, b.x, c.x), __hfma_relu(a.y, b.y, c.y)); } \
    static inline H2 __hmax2(H2 a, H2 b) { return H2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }                    \
    static inline H2 __hmin2(H2 a, H2 b) { return H2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }                    \
    static inline H2 __hmax2_nan(H2 a, H2 b) { return H2(__hmax_nan(a.x, b.x), __hmax_nan(a.y, b.y)); }        \
    static inline H2 __hmin2_nan(H2 a, H2 b) { return H2(__hmin_nan(a.x, b.x), __hmin_nan(a.y, b.y)); }        \
    /* complex multiply-add: (a.x*b.x - a.y*b.y + c.x, a.x*b.y + a.y*b.x + c.y), in float, rounded once */    \
    static inline H2 __hcmadd(H2 a, H2 b, H2 c) {                                                              \
        float re = std::fma(-(float)a.y, (float)b.y, std::fma((float)a.x, (float)b.x, (float)c.x));           \
        float im = std::fma((float)a.y, (float)b.x, std::fma((float)a.x, (float)b.y, (float)c.y));            \
        return H2(H(re), H(im));                                                                               \
    }                                                                                                          \
    /* comparisons: ordered (false on NaN) and unordered (..u: true on NaN) */                                 \
    static inline bool __heq(H a, H b) { return (float)a == (float)b; }                                       \
    static inline bool __hne(H a, H b) { return (float)a < (float)b || (float)a > (float)b; }                 \
    static inline bool __hle(H a, H b) { return (float)a <= (float)b; }                                       \
    static inline bool __hge(H a, H b) { return (float)a >= (float)b; }                                       \
    static inline bool __hlt(H a, H b) { return (float)a < (float)b; }                                        \
    static inline bool __hgt(H a, H b) { return (float)a > (float)b; }                                        \
    static inline bool __hequ(H a, H b) { return !((float)a < (float)b || (float)a > (float)b); }             \
    static inline bool __hneu(H a, H b) { return !((float)a == (float)b); }                                  \
    static inline bool __hleu(H a, H b) { return !((float)a > (float)b); }                                    \
    static inline bool __hgeu(H a, H b) { return !((float)a < (float)b); }                                    \
    static inline bool __hltu(H a, H b) { return !((float)a >= (float)b); }                                   \
    static inline bool __hgtu(H a, H b) { return !((float)a <= (float)b); }                                   \
    static inline bool __hisnan(H a) { return ccsim::isnan16(a); }                                             \
    static inline int __hisinf(H a) { float f = (float)a; return std::isinf(f) ? (f < 0 ? -1 : 1) : 0; }      \
    CCSIM_H16_CMP2(H, H2, eq) CCSIM_H16_CMP2(H, H2, ne) CCSIM_H16_CMP2(H, H2, le) CCSIM_H16_CMP2(H, H2, ge)    \
    CCSIM_H16_CMP2(H, H2, lt) CCSIM_H16_CMP2(H, H2, gt) CCSIM_H16_CMP2(H, H2, equ) CCSIM_H16_CMP2(H, H2, neu)  \
    CCSIM_H16_CMP2(H, H2, leu) CCSIM_H16_CMP2(H, H2, geu) CCSIM_H16_CMP2(H, H2, ltu) CCSIM_H16_CMP2(H, H2, gtu) \
    static inline H2 __hisnan2(H2 a) { return H2(H(__hisnan(a.x) ? 1.0f : 0.0f), H(__hisnan(a.y) ? 1.0f : 0.0f)); } \
    /* math (float libm, rounded to nearest: within one ulp of the GPU's approximations) */                   \
    static inline H hexp(H a) { return ccsim::math16(a, std::exp); }                                           \
    static inline H hexp2(H a) { return ccsim::math16(a, std::exp2); }                                         \
    static inline H hexp10(H a) { return ccsim::math16(a, ccsim::f_exp10); }                                   \
    static inline H hlog(H a) { return ccsim::math16(a, std::log); }                                           \
    static inline H hlog2(H a) { return ccsim::math16(a, std::log2); }                                         \
    static inline H hlog10(H a) { return ccsim::math16(a, std::log10); }                                       \
    static inline H hsin(H a) { return ccsim::math16(a, std::sin); }                                           \
    static inline H hcos(H a) { return ccsim::math16(a, std::cos); }                                           \
    static inline H htanh(H a) { return ccsim::math16(a, std::tanh); }                                         \
    static inline H htanh_approx(H a) { return ccsim::math16(a, std::tanh); }                                  \
    static inline H hsqrt(H a) { return ccsim::rnd<H>(std::sqrt(ccsim::ld(a))); }                              \
    static inline H hrsqrt(H a) { return ccsim::math16(a, ccsim::f_rsqrt); }                                   \
    static inline H hrcp(H a) { return ccsim::math16(a, ccsim::f_rcp); }                                       \
    static inline H hceil(H a) { return ccsim::math16(a, std::ceil); }                                         \
    static inline H hfloor(H a) { return ccsim::math16(a, std::floor); }                                       \
    static inline H hrint(H a) { return ccsim::math16(a, std::nearbyint); }                                    \
    static inline H htrunc(H a) { return ccsim::math16(a, std::trunc); }                                       \
    static inline H2 h2exp(H2 a) { return H2(hexp(a.x), hexp(a.y)); }                                          \
    static inline H2 h2exp2(H2 a) { return H2(hexp2(a.x), hexp2(a.y)); }                                       \
    static inline H2 h2exp10(H2 a) { return H2(hexp10(a.x), hexp10(a.y)); }                                    \
    static inline H2 h2log(H2 a) { return H2(hlog(a.x), hlog(a.y)); }                                          \
    static inline H2 h2log2(H2 a) { return H2(hlog2(a.x), hlog2(a.y)); }                                       \
    static inline H2 h2log10(H2 a) { return H2(hlog10(a.x), hlog10(a.y)); }                                    \
    static inline H2 h2sin(H2 a) { return H2(hsin(a.x), hsin(a.y)); }                                          \
    static inline H2 h2cos(H2 a) { return H2(hcos(a.x), hcos(a.y)); }                                          \
    static inline H2 h2tanh(H2 a) { return H2(htanh(a.x), htanh(a.y)); }                                       \
    static inline H2 h2tanh_approx(H2 a) { return H2(htanh_approx(a.x), htanh_approx(a.y)); }                  \
    static inline H2 h2sqrt(H2 a) { return H2(hsqrt(a.x), hsqrt(a.y)); }                                       \
    static inline H2 h2rsqrt(H2 a) { return H2(hrsqrt(a.x), hrsqrt(a.y)); }                                    \
    static inline H2 h2rcp(H2 a) { return H2(hrcp(a.x), hrcp(a.y)); }                                          \
    static inline H2 h2ceil(H2 a) { return H2(hceil(a.x), hceil(a.y)); }                                       \
    static inline H2 h2floor(H2 a) { return H2(hfloor(a.x), hfloor(a.y)); }                                    \
    static inline H2 h2rint(H2 a) { return H2(hrint(a.x), hrint(a.y)); }                                       \
    static inline H2 h2trunc(H2 a) { return H2(htrunc(a.x), htrunc(a.y)); }                                    \
    /* atomics: a compare-and-swap loop on the 16-bit (or 32-bit pair) word; the access hooks of checked */   \
    /* mode see (and check) these builtins like any other atomic */                                            \
    static inline H atomicAdd(H* p, H v) {                                                                     \
        uint16_t* q = (uint16_t*)p; uint16_t old = __atomic_load_n(q, __ATOMIC_SEQ_CST), nb;                   \
        do { nb = (ccsim::from_bits16<H>(old) + v).__x; }                                                      \
        while (!__atomic_compare_exchange_n(q, &old, nb, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));          \
        return ccsim::from_bits16<H>(old);                                                                     \
    }                                                                                                          \
    static inline H2 atomicAdd(H2* p, H2 v) {                                                                  \
        uint32_t* q = (uint32_t*)p; uint32_t old = __atomic_load_n(q, __ATOMIC_SEQ_CST), nb;                   \
        H2 o;                                                                                                  \
        do { std::memcpy(&o, &old, 4); H2 n = o + v; std::memcpy(&nb, &n, 4); }                                \
        while (!__atomic_compare_exchange_n(q, &old, nb, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));          \
        std::memcpy(&o, &old, 4); return o;                                                                    \
    }
// half2 comparisons: __h<op>2 gives 1.0/0.0 per lane, __hb<op>2 true when both lanes hold, __h<op>2_mask
// 0xffff per lane
#define CCSIM_H16_CMP2(H, H2, OP)                                                                              \
    static inline H2 __h##OP##2(H2 a, H2 b) { return H2(H(__h##OP(a.x, b.x) ? 1.0f : 0.0f), H(__h##OP(a.y, b.y) ? 1.0f : 0.0f)); } \
    static inline bool __hb##OP##2(H2 a, H2 b) { return __h##OP(a.x, b.x) && __h##OP(a.y, b.y); }             \
    static inline unsigned __h##OP##2_mask(H2 a, H2 b) { return (__h##OP(a.x, b.x) ? 0xffffu : 0u) | (__h##OP(a.y, b.y) ? 0xffff0000u : 0u); }
CCSIM_H16_INTRINSICS(__half, __half2)
CCSIM_H16_INTRINSICS(__nv_bfloat16, __nv_bfloat162)
#undef CCSIM_H16_INTRINSICS
#undef CCSIM_H16_CMP2

// ---------------------------------------------------------------------------------------------------
// Conversions, named per format: P is the name part (half / bfloat16), H the scalar, H2 the pair
// ---------------------------------------------------------------------------------------------------
namespace ccsim {  // __half2ll_r*/__half2ull_r* of a NaN (cuda_fp16.h: 0x8000000000000000); bf16 keeps to_int's 0
static inline bool is_half_nan(__half h) { return std::isnan((float)h); }
static inline bool is_half_nan(__nv_bfloat16) { return false; }
}  // namespace ccsim
#define CCSIM_H16_CONV_MODE(H, P, SUF, MODE)                                                                   \
    static inline H __float2##P##SUF(float f) { return ccsim::rnd<H>((long double)f, MODE); }                  \
    static inline H __int2##P##SUF(int i) { return ccsim::rnd<H>((long double)i, MODE); }                      \
    static inline H __uint2##P##SUF(unsigned i) { return ccsim::rnd<H>((long double)i, MODE); }                \
    static inline H __short2##P##SUF(short i) { return ccsim::rnd<H>((long double)i, MODE); }                  \
    static inline H __ushort2##P##SUF(unsigned short i) { return ccsim::rnd<H>((long double)i, MODE); }        \
    static inline H __ll2##P##SUF(long long i) { return ccsim::rnd<H>((long double)i, MODE); }                 \
    static inline H __ull2##P##SUF(unsigned long long i) { return ccsim::rnd<H>((long double)i, MODE); }       \
    static inline int __##P##2int##SUF(H h) { return ccsim::to_int<int>((float)h, MODE); }                     \
    static inline unsigned __##P##2uint##SUF(H h) { return ccsim::to_int<unsigned>((float)h, MODE); }          \
    static inline short __##P##2short##SUF(H h) { return ccsim::to_int<short>((float)h, MODE); }               \
    static inline unsigned short __##P##2ushort##SUF(H h) { return ccsim::to_int<unsigned short>((float)h, MODE); } \
    static inline long long __##P##2ll##SUF(H h) { /* half NaN: 0x8000000000000000, as cuda_fp16.h documents */ \
        return ccsim::is_half_nan(h) ? LLONG_MIN : ccsim::to_int<long long>((float)h, MODE); }               \
    static inline unsigned long long __##P##2ull##SUF(H h) {                                                   \
        return ccsim::is_half_nan(h) ? 0x8000000000000000ull : ccsim::to_int<unsigned long long>((float)h, MODE); }
#define CCSIM_H16_CONV(H, H2, P)                                                                               \
    CCSIM_H16_CONV_MODE(H, P, _rn, ccsim::RM_RN) CCSIM_H16_CONV_MODE(H, P, _rz, ccsim::RM_RZ)                  \
    CCSIM_H16_CONV_MODE(H, P, _rd, ccsim::RM_RD) CCSIM_H16_CONV_MODE(H, P, _ru, ccsim::RM_RU)                  \
    static inline H __float2##P(float f) { return H(f); }                                                      \
    static inline H __double2##P(double d) { return ccsim::rnd<H>((long double)d); }                           \
    static inline float __##P##2float(H h) { return (float)h; }                                                \
    static inline signed char __##P##2char_rz(H h) { return ccsim::to_int<signed char>((float)h, ccsim::RM_RZ); } \
    static inline unsigned char __##P##2uchar_rz(H h) { return ccsim::to_int<unsigned char>((float)h, ccsim::RM_RZ); } \
    static inline short __##P##_as_short(H h) { return (short)h.__x; }                                         \
    static inline unsigned short __##P##_as_ushort(H h) { return h.__x; }                                      \
    static inline H __short_as_##P(short s) { return ccsim::from_bits16<H>((uint16_t)s); }                     \
    static inline H __ushort_as_##P(unsigned short s) { return ccsim::from_bits16<H>(s); }                     \
    static inline H2 __float2##P##2_rn(float f) { return H2(H(f), H(f)); }                                     \
    static inline H2 __floats2##P##2_rn(float a, float b) { return H2(H(a), H(b)); }                           \
    static inline float __low2float(H2 h) { return (float)h.x; }                                               \
    static inline float __high2float(H2 h) { return (float)h.y; }                                              \
    static inline H __low2##P(H2 h) { return h.x; }                                                            \
    static inline H __high2##P(H2 h) { return h.y; }                                                           \
    static inline H2 __low2##P##2(H2 h) { return H2(h.x, h.x); }                                               \
    static inline H2 __high2##P##2(H2 h) { return H2(h.y, h.y); }                                              \
    static inline H2 __lows2##P##2(H2 a, H2 b) { return H2(a.x, b.x); }                                        \
    static inline H2 __highs2##P##2(H2 a, H2 b) { return H2(a.y, b.y); }                                       \
    static inline H2 __lowhigh2highlow(H2 a) { return H2(a.y, a.x); }                                          \
    static inline H2 __##P##2##P##2(H a) { return H2(a, a); }
CCSIM_H16_CONV(__half, __half2, half)
CCSIM_H16_CONV(__nv_bfloat16, __nv_bfloat162, bfloat16)
#undef CCSIM_H16_CONV
#undef CCSIM_H16_CONV_MODE

// Names that do not follow the pattern above.
static inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
static inline float2 __half22float2(__half2 h) { return make_float2((float)h.x, (float)h.y); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 make_half2(__half a, __half b) { return __half2(a, b); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __nv_bfloat162(__nv_bfloat16(f.x), __nv_bfloat16(f.y)); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2((float)h.x, (float)h.y); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
static inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
// bf16 -> half and back (cuda_bf16.h: exact through float, then one rounding)
static inline __half __bfloat162half(__nv_bfloat16 b) { return __half((float)b); }

#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_NAN_FP16 __ushort_as_half((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_FP16 __ushort_as_half((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7BFFU)
#define CUDART_NEG_ZERO_FP16 __ushort_as_half((unsigned short)0x8000U)
#define CUDART_ZERO_FP16 __ushort_as_half((unsigned short)0x0000U)
#define CUDART_ONE_FP16 __ushort_as_half((unsigned short)0x3C00U)
#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7F80U)
#define CUDART_NAN_BF16 __ushort_as_bfloat16((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_BF16 __ushort_as_bfloat16((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_BF16 __ushort_as_bfloat16((unsigned short)0x7F7FU)
#define CUDART_NEG_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x8000U)
#define CUDART_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x0000U)
#define CUDART_ONE_BF16 __ushort_as_bfloat16((unsigned short)0x3F80U)

// Left-out names: a use stops the build with this name in the message.
#define CCSIM_FP16_REFUSED(name) ccsim_not_available_on_the_simulator_##name
#define __shfl(...) CCSIM_FP16_REFUSED(__shfl_without_sync_use___shfl_sync)
#define __shfl_up(...) CCSIM_FP16_REFUSED(__shfl_up_without_sync_use___shfl_up_sync)
#define __shfl_down(...) CCSIM_FP16_REFUSED(__shfl_down_without_sync_use___shfl_down_sync)
#define __shfl_xor(...) CCSIM_FP16_REFUSED(__shfl_xor_without_sync_use___shfl_xor_sync)
#define __ldca(...) CCSIM_FP16_REFUSED(__ldca)
#define __ldcv(...) CCSIM_FP16_REFUSED(__ldcv)
#define __ldlu(...) CCSIM_FP16_REFUSED(__ldlu)
#define __stwb(...) CCSIM_FP16_REFUSED(__stwb)
#define __stwt(...) CCSIM_FP16_REFUSED(__stwt)

#endif  // CCSIM_FP16_H
