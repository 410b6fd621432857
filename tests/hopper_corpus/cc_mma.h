// ====================================================================================================
// cc_mma.h - lesson 05's warp-level tensor-core operations as small device functions (given code).
//
//   mma_m16n8k16_bf16(d, a, b, c)   D(16x8 fp32) = A(16x16 bf16, row) * B(16x8 bf16, col) + C   (sm_80+)
//   mma_m16n8k16_f16(d, a, b, c)    the same with fp16 inputs                                    (sm_80+)
//   ldmatrix_x4(r, p) / ldmatrix_x2(r, p) / ldmatrix_x4_trans / ldmatrix_x2_trans
//                                   four (two) 8x8 b16 matrices from shared memory into fragments (sm_75+)
//   cp_async_16(dst, src[, src_bytes])  16 bytes global -> shared without passing through registers (sm_80+)
//   cp_async_commit()               close the group of copies issued so far
//   cp_async_wait<N>()              wait until at most N groups are still in flight (their copies landed)
//   ex2_approx(x), rcp_approx(x)    2^x and 1/x, one special-function instruction each (any GPU; bf16.cu)
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = lane / 4 and t = lane % 4; every register packs two 16-bit elements, the lower column in the low half:
//   a[r]  row g + 8*(r & 1),  columns 2t + 8*(r >> 1) + {0, 1}
//   b[r]  rows (k) 2t + 8*r + {0, 1},  column (n) g
//   c[i], d[i]  row g + 8*(i >> 1),  column 2t + (i & 1)
// ldmatrix (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): lanes 8j..8j+7 pass the addresses of
// rows 0..7 of matrix j (16-byte aligned rows of 8 elements); lane l receives row l/4, elements 2(l%4) and
// 2(l%4)+1 of matrix j in r[j] (with _trans: column l/4, rows 2(l%4) and 2(l%4)+1).
//
// On the GPU each function is one inline PTX instruction. On the CPU simulator (CCSIM defined) the same
// names call the simulator's model of the instruction (cudacourse/sim/runtime/ccsim_mma.h), which follows
// the PTX ISA layouts element by element, lands cp.async copies only at the wait, and names misaligned
// addresses.
// ====================================================================================================
#pragma once
#include <cstdint>
#ifndef CCSIM  // (the simulator provides these types itself)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#ifdef CCSIM
// ---------------------------------------------------------------------------------------------------
// CPU simulator: the instruction models (the file:line of the caller goes into every diagnosis)
// ---------------------------------------------------------------------------------------------------
#define CC_MMA_WHERE const char* cc_f = __builtin_FILE(), int cc_l = __builtin_LINE()
__device__ CCSIM_AT_CALLER void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], CC_MMA_WHERE) {
    ccsim::mma::mma_m16n8k16(d, a, b, c, true, cc_f, cc_l);
}
__device__ CCSIM_AT_CALLER void mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], CC_MMA_WHERE) {
    ccsim::mma::mma_m16n8k16(d, a, b, c, false, cc_f, cc_l);
}
__device__ CCSIM_AT_CALLER void ldmatrix_x4(uint32_t r[4], const void* row, CC_MMA_WHERE) { ccsim::mma::ldmatrix(r, 4, false, row, cc_f, cc_l); }
__device__ CCSIM_AT_CALLER void ldmatrix_x2(uint32_t r[2], const void* row, CC_MMA_WHERE) { ccsim::mma::ldmatrix(r, 2, false, row, cc_f, cc_l); }
__device__ CCSIM_AT_CALLER void ldmatrix_x4_trans(uint32_t r[4], const void* row, CC_MMA_WHERE) { ccsim::mma::ldmatrix(r, 4, true, row, cc_f, cc_l); }
__device__ CCSIM_AT_CALLER void ldmatrix_x2_trans(uint32_t r[2], const void* row, CC_MMA_WHERE) { ccsim::mma::ldmatrix(r, 2, true, row, cc_f, cc_l); }
__device__ CCSIM_AT_CALLER void cp_async_16(void* dst, const void* src, int src_bytes = 16, CC_MMA_WHERE) {
    ccsim::mma::cp_async_16(dst, src, src_bytes, cc_f, cc_l);
}
__device__ CCSIM_AT_CALLER void cp_async_commit() { ccsim::mma::cp_async_commit_group(); }
template <int N> __device__ CCSIM_AT_CALLER void cp_async_wait() { ccsim::mma::cp_async_wait(N); }
#undef CC_MMA_WHERE

#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// ---------------------------------------------------------------------------------------------------
// A GPU older than compute capability 8.0: the file still compiles (its other kernels run), and a kernel
// that reaches one of these instructions stops with a trap (the graded checks report such tasks as "not
// graded: needs compute capability 8.0" before running them).
// ---------------------------------------------------------------------------------------------------
__device__ inline void mma_m16n8k16_bf16(float*, const uint32_t*, const uint32_t*, const float*) { __trap(); }
__device__ inline void mma_m16n8k16_f16(float*, const uint32_t*, const uint32_t*, const float*) { __trap(); }
__device__ inline void ldmatrix_x4(uint32_t*, const void*) { __trap(); }
__device__ inline void ldmatrix_x2(uint32_t*, const void*) { __trap(); }
__device__ inline void ldmatrix_x4_trans(uint32_t*, const void*) { __trap(); }
__device__ inline void ldmatrix_x2_trans(uint32_t*, const void*) { __trap(); }
__device__ inline void cp_async_16(void*, const void*, int = 16) { __trap(); }
__device__ inline void cp_async_commit() {}
template <int N> __device__ inline void cp_async_wait() {}

#else
// ---------------------------------------------------------------------------------------------------
// GPU (compute capability 8.0+; the host pass of nvcc also reads this branch): one PTX instruction each
// ---------------------------------------------------------------------------------------------------
__device__ inline uint32_t cc_smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ inline void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ inline void mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ inline void ldmatrix_x4(uint32_t r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(cc_smem_addr(row)));
}
__device__ inline void ldmatrix_x2(uint32_t r[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(cc_smem_addr(row)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(cc_smem_addr(row)));
}
__device__ inline void ldmatrix_x2_trans(uint32_t r[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(cc_smem_addr(row)));
}
// src_bytes < 16 copies that many bytes and fills the rest of the 16 with zeros (ragged tile edges).
__device__ inline void cp_async_16(void* dst, const void* src, int src_bytes = 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cc_smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
#endif

// 2^x and 1/x as one instruction each of the special-function unit: PTX ex2.approx.ftz.f32 (relative error
// about 2^-22) and rcp.approx.ftz.f32 (1 ulp). "ftz": results and inputs below 2^-126 (subnormal) count as
// zero. __expf and __fdividef compiled without -ftz keep subnormals and pay 3 to 4 more instructions per
// call for it (nvcc 13.0, sm_90a). The simulator computes both exactly.
#ifdef CCSIM
__device__ inline float ex2_approx(float x) { return exp2f(x); }
__device__ inline float rcp_approx(float x) { return 1.0f / x; }
#else
__device__ inline float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ inline float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#endif

// Two floats rounded to bf16 and packed as one register (low half = first), for fragments built by hand.
__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
