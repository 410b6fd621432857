// ccsim.h - the learner-facing half of the CPU CUDA simulator runtime.
//
// The rewriter includes this header at the top of every learner file. It defines what CUDA C++ code
// expects to exist (qualifiers, built-ins, vector and half types, math and bit intrinsics, warp
// collectives, cooperative groups, atomics, the host API) as thin inline wrappers over the runtime
// proper (ccsim_rt.cpp). The runtime is compiled separately and *without* instrumentation, so that in
// checked mode only the learner's own memory accesses reach the access hooks.
#ifndef CCSIM_H
#define CCSIM_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <cfloat>
#include <climits>
#include <cassert>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------------------------------------------
// Qualifiers: CUDA's execution-space and memory-space keywords mean nothing on the CPU.
// ---------------------------------------------------------------------------------------------------
#ifdef CCSIM_CALLCHECK  // the build's device-call check (devcheck.py): marks device functions by alignment
#define __global__ __attribute__((aligned(8192)))
#define __device__ __attribute__((aligned(8192)))
#else
#define __global__
#define __device__
#endif
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__  // (empty: libstdc++ spells __attribute__((__noinline__)) itself)
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __grid_constant__
#ifndef CCSIM_TORCH  // torch's own headers must not believe nvcc compiles them
#define __CUDACC__ 1
#define __CUDA_ARCH__ 800
#endif
#define CCSIM 1

// ---------------------------------------------------------------------------------------------------
// Runtime interface (implemented in ccsim_rt.cpp; plain C so both halves agree on nothing but this).
// ---------------------------------------------------------------------------------------------------
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3_dim;

#define CCSIM_REGION_SIZE (128u * 1024u)

// The first bytes of every fiber's control block: what the built-ins read.
struct ccsim_view {
    dim3 ti, bi, bd, gd;  // threadIdx, blockIdx, blockDim, gridDim
};

extern "C" {
typedef void (*ccsim_body_fn)(void*);
int ccsim_rt_launch(const char* name, const char* file, int line, const dim3* g, const dim3* b, size_t smem,
                    ccsim_body_fn body, void* ctx);
const char* ccsim_rt_error_json(void);
void* ccsim_rt_shared(int site, size_t bytes, size_t elem, size_t d0, size_t d1, size_t d2, int line,
                      const char* name);
void* ccsim_rt_dyn_shared(void);
int ccsim_rt_new_site(void);
void ccsim_rt_syncthreads(const char* file, int line);
int ccsim_rt_syncthreads_op(int op, int pred, const char* file, int line);
unsigned long long ccsim_rt_warp(int op, unsigned mask, unsigned long long value, int arg, int width,
                                 const char* file, int line);
void ccsim_rt_threadfence(void);
void ccsim_rt_trap(const char* file, int line);
void ccsim_rt_register(const void* p, size_t bytes, const char* name, size_t elem);
void ccsim_rt_note_symbol_copy(void* dst, const void* src, size_t n);
// atomics (out of line: they check their address in checked mode, then perform the real atomic)
int ccsim_atomic_i32(int op, int* p, int v, int cmp);
unsigned ccsim_atomic_u32(int op, unsigned* p, unsigned v, unsigned cmp);
unsigned long long ccsim_atomic_u64(int op, unsigned long long* p, unsigned long long v, unsigned long long cmp);
long long ccsim_atomic_i64(int op, long long* p, long long v, long long cmp);
float ccsim_atomic_f32(int op, float* p, float v);
double ccsim_atomic_f64(int op, double* p, double v);
}

// The running CUDA thread's built-ins; set by the runtime at every fiber switch. (Initial-exec TLS: one
// %fs-relative load; checked mode exempts this one slot from the access checks.)
extern "C" __thread ccsim_view* ccsim_cur_view __attribute__((tls_model("initial-exec")));
namespace ccsim {
static inline ccsim_view* self() { return ccsim_cur_view; }
}  // namespace ccsim

// ---------------------------------------------------------------------------------------------------
// Built-ins
// ---------------------------------------------------------------------------------------------------
// Thread-local variables, not macros, so host code may name its own locals blockDim, gridDim, threadIdx
// (built-ins only in device code). The runtime sets threadIdx at every fiber switch and the other three
// once per block (a block's fibers all run on one OS thread).
extern "C" __thread dim3 threadIdx __attribute__((tls_model("initial-exec")));
extern "C" __thread dim3 blockIdx __attribute__((tls_model("initial-exec")));
extern "C" __thread dim3 blockDim __attribute__((tls_model("initial-exec")));
extern "C" __thread dim3 gridDim __attribute__((tls_model("initial-exec")));
static constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------------
// Vector types
// ---------------------------------------------------------------------------------------------------
#define CCSIM_VEC2(T, N, A) struct alignas(A) N { T x, y; }; \
    static inline N make_##N(T x, T y) { N r; r.x = x; r.y = y; return r; }
#define CCSIM_VEC3(T, N) struct N { T x, y, z; }; \
    static inline N make_##N(T x, T y, T z) { N r; r.x = x; r.y = y; r.z = z; return r; }
#define CCSIM_VEC4(T, N, A) struct alignas(A) N { T x, y, z, w; }; \
    static inline N make_##N(T x, T y, T z, T w) { N r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
CCSIM_VEC2(float, float2, 8) CCSIM_VEC3(float, float3) CCSIM_VEC4(float, float4, 16)
CCSIM_VEC2(int, int2, 8) CCSIM_VEC3(int, int3) CCSIM_VEC4(int, int4, 16)
CCSIM_VEC2(unsigned int, uint2, 8) CCSIM_VEC3(unsigned int, uint3) CCSIM_VEC4(unsigned int, uint4, 16)
CCSIM_VEC2(double, double2, 16) CCSIM_VEC2(long long, longlong2, 16)
CCSIM_VEC4(signed char, char4, 4) CCSIM_VEC4(unsigned char, uchar4, 4) CCSIM_VEC2(short, short2, 4)
static inline dim3 make_dim3(unsigned x, unsigned y, unsigned z) { return dim3(x, y, z); }

// ---------------------------------------------------------------------------------------------------
// Half and bfloat16 (cuda_fp16.h / cuda_bf16.h): bit-exact conversions, once-rounded arithmetic
// ---------------------------------------------------------------------------------------------------
#include "ccsim_fp16.h"
#include "ccsim_fp8.h"  // __nv_fp8_e4m3/__nv_fp8_e5m2 and their conversions (cuda_fp8.h)

// ---------------------------------------------------------------------------------------------------
// Math
// ---------------------------------------------------------------------------------------------------
// glibc declares these names itself; macros avoid clashing with its declarations.
#define __expf expf
#define __exp10f exp10f
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __powf powf
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __sincosf sincosf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x)); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
static inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
static inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }

// CUDA's min/max overloads: the same-type ones are non-templates so they win over std::min/std::max.
#define CCSIM_MINMAX(T) \
    static inline T max(T a, T b) { return a > b ? a : b; } \
    static inline T min(T a, T b) { return a < b ? a : b; }
CCSIM_MINMAX(int) CCSIM_MINMAX(unsigned int) CCSIM_MINMAX(long) CCSIM_MINMAX(unsigned long)
CCSIM_MINMAX(long long) CCSIM_MINMAX(unsigned long long)
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline float min(float a, float b) { return fminf(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value &&
                                                     !std::is_same<A, B>::value>>
static inline std::common_type_t<A, B> max(A a, B b) { using C = std::common_type_t<A, B>; return max((C)a, (C)b); }
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value &&
                                                     !std::is_same<A, B>::value>>
static inline std::common_type_t<A, B> min(A a, B b) { using C = std::common_type_t<A, B>; return min((C)a, (C)b); }

#define CUDART_INF_F __builtin_huge_valf()
#define CUDART_NAN_F __builtin_nanf("")
#define CUDART_INF __builtin_huge_val()
#define CUDART_NAN __builtin_nan("")
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931e+0
#define CUDART_SQRT_2PI_F 2.506628275f
#define CUDART_MAX_NORMAL_F 3.40282347e+38f
#define CUDART_MIN_DENORM_F 1.40129846e-45f
#define CUDART_ZERO_F 0.0f
#define CUDART_ONE_F 1.0f

// ---------------------------------------------------------------------------------------------------
// Bit intrinsics
// ---------------------------------------------------------------------------------------------------
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1); x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4); x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
    return (x >> 16) | (x << 16);
}
static inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline int __mul24(int a, int b) { return a * b; }
static inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x; unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }

// ---------------------------------------------------------------------------------------------------
// Synchronisation (line numbers come from __builtin_LINE(), which honours #line)
// ---------------------------------------------------------------------------------------------------
static inline void __syncthreads(const char* f = __builtin_FILE(), int l = __builtin_LINE()) { ccsim_rt_syncthreads(f, l); }
static inline int __syncthreads_count(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return ccsim_rt_syncthreads_op(1, p, f, l); }
static inline int __syncthreads_and(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return ccsim_rt_syncthreads_op(2, p, f, l); }
static inline int __syncthreads_or(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return ccsim_rt_syncthreads_op(3, p, f, l); }
static inline void __threadfence() { ccsim_rt_threadfence(); }
static inline void __threadfence_block() { ccsim_rt_threadfence(); }
static inline void __threadfence_system() { ccsim_rt_threadfence(); }
// nvcc's built-in atomic loads and stores with a memory order and a scope (__nv_atomic_load_n(p, order, scope),
// __nv_atomic_store_n(p, v, order, scope); nvcc 13.0 emits ld.acquire.gpu / st.release.gpu for them): the order
// reaches the memory-model check through the atomic hooks (rt/mem_hooks.h); the scope is not modelled.
#define __NV_ATOMIC_RELAXED __ATOMIC_RELAXED
#define __NV_ATOMIC_CONSUME __ATOMIC_CONSUME
#define __NV_ATOMIC_ACQUIRE __ATOMIC_ACQUIRE
#define __NV_ATOMIC_RELEASE __ATOMIC_RELEASE
#define __NV_ATOMIC_ACQ_REL __ATOMIC_ACQ_REL
#define __NV_ATOMIC_SEQ_CST __ATOMIC_SEQ_CST
#define __NV_THREAD_SCOPE_THREAD 0
#define __NV_THREAD_SCOPE_BLOCK 1
#define __NV_THREAD_SCOPE_CLUSTER 2
#define __NV_THREAD_SCOPE_DEVICE 3
#define __NV_THREAD_SCOPE_SYSTEM 4
#define __nv_atomic_load_n(p, order, scope) __atomic_load_n((p), (order))
#define __nv_atomic_store_n(p, v, order, scope) __atomic_store_n((p), (v), (order))
static inline void __trap(const char* f = __builtin_FILE(), int l = __builtin_LINE()) { ccsim_rt_trap(f, l); }
static inline void __nanosleep(unsigned) {}

namespace ccsim {
enum WarpOp { W_SYNC = 0, W_SHFL = 1, W_UP = 2, W_DOWN = 3, W_XOR = 4, W_BALLOT = 5, W_ANY = 6, W_ALL = 7,
              W_ACTIVE = 8, W_RADD = 9, W_RMIN = 10, W_RMAX = 11, W_MATCH = 12 };
template <class T> static inline unsigned long long to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    unsigned long long b = 0; std::memcpy(&b, &v, sizeof(T)); return b;
}
template <class T> static inline T from_bits(unsigned long long b) { T v; std::memcpy(&v, &b, sizeof(T)); return v; }
template <class T> static inline T shfl(int op, unsigned mask, T v, int arg, int width, const char* f, int l) {
    return from_bits<T>(ccsim_rt_warp(op, mask, to_bits(v), arg, width, f, l));
}
}  // namespace ccsim

static inline void __syncwarp(unsigned mask = 0xffffffffu, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    ccsim_rt_warp(ccsim::W_SYNC, mask, 0, 0, 32, f, l);
}
template <class T> static inline T __shfl_sync(unsigned m, T v, int src, int w = 32, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return ccsim::shfl(ccsim::W_SHFL, m, v, src, w, f, l); }
template <class T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return ccsim::shfl(ccsim::W_UP, m, v, (int)d, w, f, l); }
template <class T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return ccsim::shfl(ccsim::W_DOWN, m, v, (int)d, w, f, l); }
template <class T> static inline T __shfl_xor_sync(unsigned m, T v, int x, int w = 32, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return ccsim::shfl(ccsim::W_XOR, m, v, x, w, f, l); }
static inline unsigned __ballot_sync(unsigned m, int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return (unsigned)ccsim_rt_warp(ccsim::W_BALLOT, m, p != 0, 0, 32, f, l); }
static inline int __any_sync(unsigned m, int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return (int)ccsim_rt_warp(ccsim::W_ANY, m, p != 0, 0, 32, f, l); }
static inline int __all_sync(unsigned m, int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return (int)ccsim_rt_warp(ccsim::W_ALL, m, p != 0, 0, 32, f, l); }
static inline unsigned __activemask(const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return (unsigned)ccsim_rt_warp(ccsim::W_ACTIVE, 0, 0, 0, 32, f, l); }
static inline unsigned __reduce_add_sync(unsigned m, unsigned v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return (unsigned)ccsim_rt_warp(ccsim::W_RADD, m, v, 0, 32, f, l); }
static inline int __reduce_add_sync(unsigned m, int v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return (int)ccsim_rt_warp(ccsim::W_RADD, m, (unsigned)v, 0, 32, f, l); }
static inline unsigned __match_any_sync(unsigned m, unsigned v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return (unsigned)ccsim_rt_warp(ccsim::W_MATCH, m, v, 0, 32, f, l); }
static inline unsigned __lanemask_lt() { return (1u << (ccsim::self()->ti.x & 31)) - 1u; }

// ---------------------------------------------------------------------------------------------------
// Atomics
// ---------------------------------------------------------------------------------------------------
namespace ccsim { enum AtomOp { A_ADD, A_SUB, A_EXCH, A_MIN, A_MAX, A_AND, A_OR, A_XOR, A_INC, A_DEC, A_CAS }; }
#define CCSIM_ATOM_INT(T, FN)                                                                          \
    static inline T atomicAdd(T* p, T v) { return FN(ccsim::A_ADD, p, v, 0); }                         \
    static inline T atomicSub(T* p, T v) { return FN(ccsim::A_SUB, p, v, 0); }                         \
    static inline T atomicExch(T* p, T v) { return FN(ccsim::A_EXCH, p, v, 0); }                       \
    static inline T atomicMin(T* p, T v) { return FN(ccsim::A_MIN, p, v, 0); }                         \
    static inline T atomicMax(T* p, T v) { return FN(ccsim::A_MAX, p, v, 0); }                         \
    static inline T atomicAnd(T* p, T v) { return FN(ccsim::A_AND, p, v, 0); }                         \
    static inline T atomicOr(T* p, T v) { return FN(ccsim::A_OR, p, v, 0); }                           \
    static inline T atomicXor(T* p, T v) { return FN(ccsim::A_XOR, p, v, 0); }                         \
    static inline T atomicCAS(T* p, T c, T v) { return FN(ccsim::A_CAS, p, v, c); }
CCSIM_ATOM_INT(int, ccsim_atomic_i32)
CCSIM_ATOM_INT(unsigned int, ccsim_atomic_u32)
CCSIM_ATOM_INT(unsigned long long, ccsim_atomic_u64)
CCSIM_ATOM_INT(long long, ccsim_atomic_i64)
static inline unsigned atomicInc(unsigned* p, unsigned v) { return ccsim_atomic_u32(ccsim::A_INC, p, v, 0); }
static inline unsigned atomicDec(unsigned* p, unsigned v) { return ccsim_atomic_u32(ccsim::A_DEC, p, v, 0); }
static inline float atomicAdd(float* p, float v) { return ccsim_atomic_f32(ccsim::A_ADD, p, v); }
static inline float atomicSub(float* p, float v) { return ccsim_atomic_f32(ccsim::A_SUB, p, v); }
static inline float atomicExch(float* p, float v) { return ccsim_atomic_f32(ccsim::A_EXCH, p, v); }
static inline float atomicMax(float* p, float v) { return ccsim_atomic_f32(ccsim::A_MAX, p, v); }
static inline float atomicMin(float* p, float v) { return ccsim_atomic_f32(ccsim::A_MIN, p, v); }
static inline double atomicAdd(double* p, double v) { return ccsim_atomic_f64(ccsim::A_ADD, p, v); }
static inline double atomicExch(double* p, double v) { return ccsim_atomic_f64(ccsim::A_EXCH, p, v); }
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd

// ---------------------------------------------------------------------------------------------------
// Shared memory (the rewriter turns declarations into these calls)
// ---------------------------------------------------------------------------------------------------
namespace ccsim {
template <class T> static inline T* shared_alloc(int site, int line, const char* name) {
    using E = std::remove_cv_t<std::remove_all_extents_t<T>>;
    return (T*)ccsim_rt_shared(site, sizeof(T), sizeof(E), std::extent<T, 0>::value, std::extent<T, 1>::value,
                               std::extent<T, 2>::value, line, name);
}
template <class T> static inline T* dyn_shared() { return (T*)ccsim_rt_dyn_shared(); }
}  // namespace ccsim

// ---------------------------------------------------------------------------------------------------
// Cooperative groups
// ---------------------------------------------------------------------------------------------------
namespace cooperative_groups {
struct thread_block {
    void sync(const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { ccsim_rt_syncthreads(f, l); }
    unsigned thread_rank() const { dim3 t = threadIdx, b = blockDim; return (t.z * b.y + t.y) * b.x + t.x; }
    unsigned size() const { dim3 b = blockDim; return b.x * b.y * b.z; }
    unsigned num_threads() const { return size(); }
    dim3 group_index() const { return blockIdx; }
    dim3 thread_index() const { return threadIdx; }
    dim3 dim_threads() const { return blockDim; }
    dim3 group_dim() const { return blockDim; }
};
static inline thread_block this_thread_block() { return thread_block(); }
static inline void sync(const thread_block& b, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { b.sync(f, l); }

template <unsigned N> struct thread_block_tile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiled_partition<N>: N must be a power of two <= 32");
    unsigned rank_in_block;
    unsigned lane() const { return rank_in_block & 31u; }
    unsigned mask() const { unsigned m = N == 32 ? 0xffffffffu : ((1u << N) - 1u); return m << (lane() / N * N); }
    unsigned thread_rank() const { return rank_in_block % N; }
    static constexpr unsigned size() { return N; }
    static constexpr unsigned num_threads() { return N; }
    unsigned meta_group_rank() const { return rank_in_block / N; }
    unsigned meta_group_size() const { dim3 b = blockDim; return (b.x * b.y * b.z + N - 1) / N; }
    void sync(const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { ccsim_rt_warp(ccsim::W_SYNC, mask(), 0, 0, 32, f, l); }
    template <class T> T shfl(T v, int src, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { return ccsim::shfl(ccsim::W_SHFL, mask(), v, src, N, f, l); }
    template <class T> T shfl_down(T v, unsigned d, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { return ccsim::shfl(ccsim::W_DOWN, mask(), v, (int)d, N, f, l); }
    template <class T> T shfl_up(T v, unsigned d, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { return ccsim::shfl(ccsim::W_UP, mask(), v, (int)d, N, f, l); }
    template <class T> T shfl_xor(T v, int x, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { return ccsim::shfl(ccsim::W_XOR, mask(), v, x, N, f, l); }
    unsigned ballot(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const {
        return (unsigned)ccsim_rt_warp(ccsim::W_BALLOT, mask(), p != 0, 0, 32, f, l) >> (lane() / N * N);
    }
    bool any(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { return ccsim_rt_warp(ccsim::W_ANY, mask(), p != 0, 0, 32, f, l) != 0; }
    bool all(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { return ccsim_rt_warp(ccsim::W_ALL, mask(), p != 0, 0, 32, f, l) != 0; }
};
template <unsigned N, class P> static inline thread_block_tile<N> tiled_partition(const P&) {
    return thread_block_tile<N>{thread_block().thread_rank()};
}
template <unsigned N> static inline void sync(const thread_block_tile<N>& t, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { t.sync(f, l); }

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return a < b ? a : b; } };     // cg::less reduces to the minimum
template <class T> struct greater { T operator()(T a, T b) const { return a > b ? a : b; } };  // cg::greater reduces to the maximum
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
template <unsigned N, class T, class Op>
static inline T reduce(const thread_block_tile<N>& g, T v, Op op, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    for (unsigned o = N / 2; o > 0; o /= 2) v = op(v, g.shfl_xor(v, (int)o, f, l));
    return v;
}
}  // namespace cooperative_groups
#include "ccsim_cg.h"  // coalesced_group, cg::reduce on it, <cooperative_groups/scan.h>

// ---------------------------------------------------------------------------------------------------
// Host API
// ---------------------------------------------------------------------------------------------------
typedef enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9, cudaErrorInvalidDevicePointer = 17, cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidSymbol = 13, cudaErrorNoDevice = 100, cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719, cudaErrorNotReady = 600, cudaErrorInvalidResourceHandle = 400,
    cudaErrorStreamCaptureUnsupported = 900, cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnjoined = 904, cudaErrorStreamCaptureIsolation = 905, cudaErrorStreamCaptureImplicit = 906,
    cudaErrorIllegalState = 401,
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4,
} cudaMemcpyKind;
enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxBlockDimX = 2, cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4, cudaDevAttrMaxGridDimX = 5, cudaDevAttrMaxGridDimY = 6, cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrWarpSize = 10, cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxThreadsPerMultiProcessor = 39,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
struct CUstream_st; typedef CUstream_st* cudaStream_t;
struct ccsim_event; typedef ccsim_event* cudaEvent_t;  // streams and events: rt/streams.h, ccsim_host_api.h
struct cudaDeviceProp {
    char name[256]; size_t totalGlobalMem; size_t sharedMemPerBlock; int regsPerBlock; int warpSize;
    int maxThreadsPerBlock; int maxThreadsDim[3]; int maxGridSize[3]; int multiProcessorCount;
    int major; int minor; int clockRate; int memoryClockRate; int memoryBusWidth; size_t sharedMemPerMultiprocessor;
    int maxThreadsPerMultiProcessor; size_t totalConstMem; int l2CacheSize;
    size_t sharedMemPerBlockOptin; int regsPerMultiprocessor; int maxBlocksPerMultiProcessor;  // (ccsim_host_api.h)
};
#define cudaStreamDefault 0
#define cudaStreamNonBlocking 1

extern "C" {
cudaError_t ccsim_cudaMalloc(void** p, size_t n, int line);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t n);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemset(void* d, int v, size_t n);
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st = 0);  // the toolkit's default stream
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned f);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned f);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceGetAttribute(int* v, enum cudaDeviceAttr a, int d);
}
static inline cudaError_t cudaEventRecord(cudaEvent_t e) { return cudaEventRecord(e, nullptr); }
template <class T> static inline cudaError_t cudaMalloc(T** p, size_t n, int line = __builtin_LINE()) { return ccsim_cudaMalloc((void**)p, n, line); }
static inline cudaError_t cudaMalloc(void** p, size_t n, int line = __builtin_LINE()) { return ccsim_cudaMalloc(p, n, line); }
template <class T> static inline cudaError_t cudaMallocHost(T** p, size_t n) { return cudaMallocHost((void**)p, n); }
template <class T> static inline cudaError_t cudaHostAlloc(T** p, size_t n, unsigned = 0) { return cudaMallocHost((void**)p, n); }
extern "C" cudaError_t ccsim_cudaMallocManaged(void** p, size_t n);
template <class T> static inline cudaError_t cudaMallocManaged(T** p, size_t n, unsigned = 0) { return ccsim_cudaMallocManaged((void**)p, n); }
// Device memory is protected from host code while a launcher's host code runs (rt/mem_buffers.h, "device memory
// is out of the host code's reach"); the runtime's own host-side accesses open it for their duration.
extern "C" void ccsim_rt_dev_open(void);
extern "C" void ccsim_rt_dev_close(void);
namespace ccsim {
struct DevAccess {
    DevAccess() { ccsim_rt_dev_open(); }
    ~DevAccess() { ccsim_rt_dev_close(); }
    DevAccess(const DevAccess&) = delete;
    DevAccess& operator=(const DevAccess&) = delete;
};
}  // namespace ccsim
template <class T, class S> static inline cudaError_t cudaMemcpyToSymbol(T& sym, const S* src, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyHostToDevice) {
    ::ccsim::DevAccess open;  // (the source may be device memory: then its data reaches a host-readable global)
    ccsim_rt_note_symbol_copy((char*)&sym + off, (const void*)src, n);
    std::memcpy((char*)&sym + off, (const void*)src, n); return cudaSuccess;
}
template <class T, class D> static inline cudaError_t cudaMemcpyFromSymbol(D* dst, const T& sym, size_t n, size_t off = 0, cudaMemcpyKind = cudaMemcpyDeviceToHost) {
    ::ccsim::DevAccess open;  // (the destination may be device memory)
    std::memcpy((void*)dst, (const char*)&sym + off, n); return cudaSuccess;
}
// The rewriter turns cudaFuncSetAttribute(kernel, attr, v) into func_set_attribute("kernel", ...): the opt-in
// above 48 KB of dynamic shared memory is remembered by kernel name and checked at its launches.
extern "C" cudaError_t ccsim_rt_func_attr(const char* kernel, int attr, int value);
namespace ccsim {
template <class F> static inline cudaError_t func_set_attribute(const char* kernel, F, cudaFuncAttribute a, int v) {
    return ccsim_rt_func_attr(kernel, (int)a, v);
}
}  // namespace ccsim
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
// CUDA's own handle values: 0 and cudaStreamLegacy name the legacy default stream (ccsim_host_api.h)
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

// ---------------------------------------------------------------------------------------------------
// Launches: k<<<g, b, smem, stream>>>(args) becomes ccsim::launch(...). The arguments are copied once
// (CUDA passes them by value); every CUDA thread then calls the kernel with its own copy on its stack.
// ---------------------------------------------------------------------------------------------------
namespace ccsim {
struct LaunchCfg {
    dim3 g, b; size_t smem; cudaStream_t s;
    LaunchCfg(dim3 g_, dim3 b_, size_t sm = 0, cudaStream_t st = nullptr) : g(g_), b(b_), smem(sm), s(st) {}
};
struct KernelFailure : std::runtime_error { using std::runtime_error::runtime_error; };
[[noreturn]] static inline void raise_error() { throw KernelFailure(std::string("CCSIM_ERROR ") + ccsim_rt_error_json()); }
// A launch on a created stream is queued (ccsim_host_api.h): the closure keeps the kernel and a copy of the
// arguments until the stream runs it, and the arguments are copied again onto the running host stack.
template <class F, class... A> struct DeferredLaunch {
    const char* name; const char* file; int line; dim3 g, b; size_t smem; F f; std::tuple<A...> args;
};
template <class F, class... A>
static inline int launch_tuple(const char* name, const char* file, int line, dim3 g, dim3 b, size_t smem, F& f,
                               std::tuple<A...>& args) {
    using Ctx = std::pair<F*, std::tuple<A...>*>;
    Ctx ctx(&f, &args);
    ccsim_body_fn body = [](void* p) { Ctx* c2 = (Ctx*)p; std::apply(*c2->first, *c2->second); };
    return ccsim_rt_launch(name, file, line, &g, &b, smem, body, &ctx);
}
template <class F, class... A> static int run_deferred(void* p) {
    auto* d = (DeferredLaunch<F, A...>*)p;
    F f = d->f;
    std::tuple<A...> args(d->args);
    return launch_tuple(d->name, d->file, d->line, d->g, d->b, d->smem, f, args);
}
template <class F, class... A> static void drop_deferred(void* p) { delete (DeferredLaunch<F, A...>*)p; }
}  // namespace ccsim
extern "C" int ccsim_rt_stream_launch(cudaStream_t s, const char* name, int (*run)(void*), void (*drop)(void*),
                                      void* closure);
namespace ccsim {
template <class F, class... A>
static inline void launch(const char* name, const char* file, int line, LaunchCfg c, F f, A... a) {
    if (c.s != nullptr && c.s != (cudaStream_t)0x1 && c.s != (cudaStream_t)0x2) {
        auto* d = new DeferredLaunch<F, A...>{name, file, line, c.g, c.b, c.smem, f, std::tuple<A...>(a...)};
        if (ccsim_rt_stream_launch(c.s, name, &run_deferred<F, A...>, &drop_deferred<F, A...>, d)) raise_error();
        return;
    }
    if (ccsim_rt_stream_launch(c.s, name, nullptr, nullptr, nullptr)) raise_error();  // the default stream's waits
    std::tuple<A...> args(a...);
    if (launch_tuple(name, file, line, c.g, c.b, c.smem, f, args)) raise_error();
}
static inline void launch_check() { const char* e = ccsim_rt_error_json(); if (e && *e) raise_error(); }
template <class... P, size_t... I>
static inline void launch_argv(void (*k)(P...), const char* file, int line, LaunchCfg c, void** args,
                               std::index_sequence<I...>) {
    launch("kernel launched with cudaLaunchKernel", file, line, c, [k](auto... a) { k(a...); },
           *(std::remove_cv_t<std::remove_reference_t<P>>*)args[I]...);
}
}  // namespace ccsim

// cudaLaunchKernel with the kernel's own (typed) pointer: the argument array is unpacked by its parameter
// types. A type-erased (void*) kernel cannot be called on the CPU: refused at the call, naming the line.
template <class... P>
static inline cudaError_t cudaLaunchKernel(void (*k)(P...), dim3 g, dim3 b, void** args, size_t smem = 0,
                                           cudaStream_t s = nullptr, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    ::ccsim::launch_argv(k, f, l, ::ccsim::LaunchCfg(g, b, smem, s), args, std::index_sequence_for<P...>{});
    return cudaSuccess;
}
extern "C" void ccsim_api_set_error(const char*, const char*);
static inline cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t = 0, cudaStream_t = nullptr,
                                           const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    std::string m = std::string("cudaLaunchKernel with a kernel cast to void* is not supported by the CPU simulator (") +
                    f + ":" + std::to_string(l) + "): pass the kernel itself (cudaLaunchKernel(my_kernel, ...)) or use "
                    "my_kernel<<<grid, block, smem, stream>>>(args...).";
    ccsim_api_set_error("launch", m.c_str());
    ::ccsim::raise_error();
}

// Classic torch route helpers (only meaningful when the file also includes torch).
#define C10_CUDA_KERNEL_LAUNCH_CHECK() ::ccsim::launch_check()
#define C10_CUDA_CHECK(e) do { (void)(e); ::ccsim::launch_check(); } while (0)
#define AT_CUDA_CHECK(e) C10_CUDA_CHECK(e)

#include "ccsim_host_api.h"  // cudaMemcpy2D, cudaMemGetInfo, the modelled GPU, clock64
#include "ccsim_cublas.h"    // the cuBLAS subset (<cublas_v2.h>)
#include "ccsim_mma.h"       // nvcuda::wmma (<mma.h>); mma.sync, ldmatrix, cp.async for lesson 05's cc_mma.h
#include "ccsim_hopper.h"    // [hopper hook] tensor maps, mbarrier, TMA, wgmma for lesson 05's cc_hopper.h

#endif  // CCSIM_H
