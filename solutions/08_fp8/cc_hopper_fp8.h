// ====================================================================================================
// cc_hopper_fp8.h - lesson 08's FP8 additions to lesson 05's Hopper operations (cc_hopper.h), given code.
//
//   cc_make_tmap_u8(map, ptr, rows, cols, box_rows)     a TMA tensor map of a row-major matrix of bytes (e4m3
//                                                       values), boxes of box_rows x 128 (one 128-byte swizzle
//                                                       row); cols % 16 == 0 and ptr 16-byte aligned, else false
//   wgmma_m64n128k32_e4m3(d, desc_a, desc_b, accumulate) one warpgroup MMA: D (64 x 128 fp32) = A (64 x 32) B^T
//                                                       (B: 128 x 32), both e4m3 and K-major in shared memory,
//                                                       plus D when accumulate != 0
// Everything else (mbarriers, TMA loads, wgmma_desc, fences, setmaxnreg, cc_sm90a_built) is cc_hopper.h's: a
// tile of 128 e4m3 per row has the byte layout of lesson 05's tile of 64 bf16, so the same descriptor describes
// it, and 32 e4m3 along K (one k32 step) are the same 32 bytes as 16 bf16 (one k16 step).
//
// PTX ISA section "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" (wgmma.mma_async): .e4m3 and .e5m2
// operands take K = 32, only K-major layouts in shared memory (no transpose immediates), and accumulate in
// .f32 or .f16. The instruction exists only in sm_90a code; elsewhere these functions trap, as cc_hopper.h's do.
// ====================================================================================================
#pragma once
#include "cc_hopper.h"

#ifdef CCSIM
static inline bool cc_make_tmap_u8(CUtensorMap*, const void*, int, int, int) { return false; }
__device__ inline void wgmma_m64n128k32_e4m3(float*, uint64_t, uint64_t, int) { CC_HOPPER_TRAP; }
#else
// Bytes (cols % 16 == 0), boxes of box_rows x 128. Elements outside the matrix arrive as zeros.
static inline bool cc_make_tmap_u8(CUtensorMap* map, const void* ptr, int rows, int cols, int box_rows) {
    return cc_make_tmap_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, ptr, rows, cols, box_rows);
}

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ inline void wgmma_m64n128k32_e4m3(float*, uint64_t, uint64_t, int) { __trap(); }
#else
// D (64 x 128 fp32, 64 registers per thread of the warpgroup): the register layout of cc_hopper.h's
// wgmma_m64n256k16_bf16 for 16 column groups: d[4j + i] is row 16w + lane/4 + 8*(i/2), column 8j + 2*(lane%4) +
// i%2 (j = 0..15) for warp w of the warpgroup.
#define CC_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
__device__ inline void wgmma_m64n128k32_e4m3(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : CC_D8(0), CC_D8(8), CC_D8(16), CC_D8(24), CC_D8(32), CC_D8(40), CC_D8(48), CC_D8(56)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
#undef CC_D8
#endif
#endif
