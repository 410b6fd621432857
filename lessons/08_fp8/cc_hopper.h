// ====================================================================================================
// cc_hopper.h - lesson 05's Hopper operations (compute capability 9.0, compiled for sm_90a) as device and
// host functions (given code).
//
//   cc_make_tmap_bf16(map, ptr, rows, cols, box_rows)   a TMA tensor map of a row-major bf16 matrix, boxes of
//                                                       box_rows x 64 (128-byte rows, 128-byte swizzle)
//   cc_make_tmap_f32(map, ptr, rows, cols, box_rows)    the same for a row-major fp32 matrix, boxes of box_rows x 32
//                                                       (cols % 4 == 0 and ptr 16-byte aligned, else false)
//   mbar_init / mbar_expect_tx / mbar_wait              an mbarrier in shared memory: one arrival plus the
//                                                       bytes the TMA engine will deliver; wait on a phase
//   mbar_arrive                                         one plain arrival (a consumer hands a stage back)
//   tma_load_2d(dst, map, col, row, bar)                one box from global to shared memory by the TMA engine
//   tma_store_2d(map, col, row, src) / bulk_commit /    one box from shared to global memory (out-of-range
//   bulk_wait_read<N> / bulk_wait_all                   elements are not written); wait until at most N of this
//                                                       thread's stores still read shared memory / all are done
//   fence_async_smem / warpgroup_sync(id)               order st.shared before TMA reads; a barrier of 128 threads
//   wgmma_desc(smem)                                    the 64-bit descriptor of a 128-byte-swizzled K-major tile
//   wgmma_m64n256k16_bf16(d, desc_a, desc_b, accumulate) one warpgroup MMA, D (64x256 fp32) += A B^T
//   wgmma_fence / wgmma_commit / wgmma_wait0 / wgmma_wait1  ordering of the asynchronous warpgroup MMAs
//   setmaxnreg_dec<N>() / setmaxnreg_inc<N>()           hand registers between the warpgroups of a block
//   elect_one()                                         true in one lane of the (fully converged) warp
//   cc_sm90a_built()                                    true when this file's kernels were compiled for sm_90a
//
// PTX ISA sections: "Tensor Memory Accelerator" (cp.async.bulk.tensor), "mbarrier", "Asynchronous Warpgroup
// Level Matrix Multiply-Accumulate" (wgmma.mma_async, matrix descriptors, register fragments of D).
// The instructions exist only in sm_90a code: another GPU or an sm_90 build without the 'a' compiles these
// functions as traps, and cc_sm90a_built() says so before any launch. The CPU simulator runs them (its model:
// cudacourse/sim/runtime/ccsim_hopper.h) and diagnoses their misuse in checked mode.
// ====================================================================================================
#pragma once
#include <cstdint>

#ifdef CCSIM
// ---------------------------------------------------------------------------------------------------
// CPU simulator: the same functions call the simulator's model of each instruction
// (cudacourse/sim/runtime/ccsim_hopper.h: mbarrier phases and transaction counts, TMA boxes with their swizzle,
// the async proxy, wgmma with its descriptors). In checked mode a missing wait, fence or wgmma_wait is
// reported at the caller's line. The file:line of the caller goes into every diagnosis.
// ---------------------------------------------------------------------------------------------------
#define CC_HOP_WHERE const char* cc_f = __builtin_FILE(), int cc_l = __builtin_LINE()
static const int cc_hopper_model_on = ccsim_hop_enable();  // the simulator tracks Hopper state in this module
static inline bool cc_make_tmap_2d(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* ptr,
                                   int rows, int cols, int box_rows) {
    if ((long long)cols * elem_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * elem_bytes};
    const cuuint32_t box[2] = {(cuuint32_t)(128 / elem_bytes), (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    return cuTensorMapEncodeTiled(map, type, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
static inline bool cc_make_tmap_bf16(CUtensorMap* map, const void* ptr, int rows, int cols, int box_rows) {
    return cc_make_tmap_2d(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr, rows, cols, box_rows);
}
static inline bool cc_make_tmap_f32(CUtensorMap* map, const void* ptr, int rows, int cols, int box_rows) {
    return cc_make_tmap_2d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, ptr, rows, cols, box_rows);
}
static inline bool cc_sm90a_built() { return true; }  // the simulator runs the sm_90a code path
__device__ inline uint32_t cc_hopper_smem(const void* p, CC_HOP_WHERE) { return ccsim_hop_smem_addr(p, cc_f, cc_l); }
__device__ inline void mbar_init(uint64_t* bar, unsigned count, CC_HOP_WHERE) { ccsim_hop_mbar_init(bar, count, cc_f, cc_l); }
__device__ inline void fence_barrier_init(CC_HOP_WHERE) { ccsim_hop_fence_proxy_async(cc_f, cc_l); }
__device__ inline void mbar_expect_tx(uint64_t* bar, unsigned bytes, CC_HOP_WHERE) { ccsim_hop_mbar_arrive(bar, bytes, 1, cc_f, cc_l); }
__device__ inline void mbar_arrive(uint64_t* bar, CC_HOP_WHERE) { ccsim_hop_mbar_arrive(bar, 0, 0, cc_f, cc_l); }
__device__ inline void mbar_wait(uint64_t* bar, unsigned parity, CC_HOP_WHERE) { ccsim_hop_mbar_wait(bar, parity, cc_f, cc_l); }
__device__ inline void tma_load_2d(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar, CC_HOP_WHERE) {
    ccsim_hop_tma_load(dst, map, col, row, bar, cc_f, cc_l);
}
__device__ inline void tma_store_2d(const CUtensorMap* map, int col, int row, const void* src, CC_HOP_WHERE) {
    ccsim_hop_tma_store(map, col, row, src, cc_f, cc_l);
}
__device__ inline void bulk_commit(CC_HOP_WHERE) { ccsim_hop_bulk_commit(cc_f, cc_l); }
template <int N> __device__ inline void bulk_wait_read(CC_HOP_WHERE) { ccsim_hop_bulk_wait(N, 1, cc_f, cc_l); }
__device__ inline void bulk_wait_all(CC_HOP_WHERE) { ccsim_hop_bulk_wait(0, 0, cc_f, cc_l); }
__device__ inline void fence_async_smem(CC_HOP_WHERE) { ccsim_hop_fence_proxy_async(cc_f, cc_l); }
__device__ inline void warpgroup_sync(int id, CC_HOP_WHERE) { ccsim_hop_named_barrier(id, 128, cc_f, cc_l); }
__device__ inline bool elect_one(CC_HOP_WHERE) { return ccsim_hop_elect_one(cc_f, cc_l) != 0; }
__device__ inline uint64_t wgmma_desc(const void* smem, CC_HOP_WHERE) {
    const uint64_t addr = ccsim_hop_smem_addr(smem, cc_f, cc_l);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ inline void wgmma_fence(CC_HOP_WHERE) { ccsim_hop_wgmma_fence(cc_f, cc_l); }
__device__ inline void wgmma_commit(CC_HOP_WHERE) { ccsim_hop_wgmma_commit(cc_f, cc_l); }
__device__ inline void wgmma_wait0(CC_HOP_WHERE) { ccsim_hop_wgmma_wait(0, cc_f, cc_l); }
__device__ inline void wgmma_wait1(CC_HOP_WHERE) { ccsim_hop_wgmma_wait(1, cc_f, cc_l); }
template <int N> __device__ inline void setmaxnreg_dec(CC_HOP_WHERE) { ccsim_hop_setmaxnreg(0, N, cc_f, cc_l); }
template <int N> __device__ inline void setmaxnreg_inc(CC_HOP_WHERE) { ccsim_hop_setmaxnreg(1, N, cc_f, cc_l); }
__device__ inline void wgmma_m64n256k16_bf16(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate, CC_HOP_WHERE) {
    ccsim_hop_wgmma(d, 256, desc_a, desc_b, accumulate, 1, cc_f, cc_l);
}
#undef CC_HOP_WHERE
#else
#include <cuda.h>
#include <cuda_runtime.h>

// ---------------------------------------------------------------------------------------------------
// Host: the tensor map (driver API, reached through the runtime so no -lcuda is needed)
// ---------------------------------------------------------------------------------------------------
// A row-major matrix of rows x cols elements of elem_bytes (bf16 or fp32) cut into boxes of box_rows x
// box_cols, box_cols * elem_bytes = 128 (one 128-byte swizzle row). The row stride must be a multiple of 16 bytes.
static inline bool cc_make_tmap_2d(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* ptr,
                                   int rows, int cols, int box_rows) {
    using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static Encode encode = nullptr;
    if (!encode) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) !=
                cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
            return false;
        encode = reinterpret_cast<Encode>(fn);
    }
    if ((long long)cols * elem_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};           // innermost first
    const cuuint64_t strides[1] = {(cuuint64_t)cols * elem_bytes};               // bytes between rows
    const cuuint32_t box[2] = {(cuuint32_t)(128 / elem_bytes), (cuuint32_t)box_rows};  // one 128-byte row
    const cuuint32_t elem_strides[2] = {1, 1};
    return encode(map, type, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
// bf16 (cols % 8 == 0), boxes of box_rows x 64. Elements outside the matrix arrive as zeros (ragged edges for free).
static inline bool cc_make_tmap_bf16(CUtensorMap* map, const void* ptr, int rows, int cols, int box_rows) {
    return cc_make_tmap_2d(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr, rows, cols, box_rows);
}
// fp32 (cols % 4 == 0), boxes of box_rows x 32. A store writes only the elements inside the matrix.
static inline bool cc_make_tmap_f32(CUtensorMap* map, const void* ptr, int rows, int cols, int box_rows) {
    return cc_make_tmap_2d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, ptr, rows, cols, box_rows);
}

// Set by the device code of an sm_90a build only (read back by cc_sm90a_built()).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CC_SM90A 1
#else
#define CC_SM90A 0
#endif
__device__ int cc_sm90a_flag = CC_SM90A;
static inline bool cc_sm90a_built() {
    int flag = 0;
    return cudaMemcpyFromSymbol(&flag, cc_sm90a_flag, sizeof(int)) == cudaSuccess && flag == 1;
}

__device__ inline uint32_t cc_hopper_smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Device code for anything but sm_90a: the Hopper instructions are not available.
__device__ inline void mbar_init(uint64_t*, unsigned) { __trap(); }
__device__ inline void mbar_expect_tx(uint64_t*, unsigned) { __trap(); }
__device__ inline void mbar_wait(uint64_t*, unsigned) { __trap(); }
__device__ inline void tma_load_2d(void*, const CUtensorMap*, int, int, uint64_t*) { __trap(); }
__device__ inline uint64_t wgmma_desc(const void*) { __trap(); return 0; }
__device__ inline void mbar_arrive(uint64_t*) { __trap(); }
__device__ inline void tma_store_2d(const CUtensorMap*, int, int, const void*) { __trap(); }
__device__ inline void bulk_commit() {}
template <int N> __device__ inline void bulk_wait_read() {}
__device__ inline void bulk_wait_all() {}
__device__ inline void fence_async_smem() {}
__device__ inline void warpgroup_sync(int) {}
__device__ inline void wgmma_m64n256k16_bf16(float*, uint64_t, uint64_t, int) { __trap(); }
__device__ inline void wgmma_fence() {}
__device__ inline void wgmma_commit() {}
__device__ inline void wgmma_wait0() {}
__device__ inline void wgmma_wait1() {}
template <int N> __device__ inline void setmaxnreg_dec() {}
template <int N> __device__ inline void setmaxnreg_inc() {}
__device__ inline void fence_barrier_init() {}
__device__ inline bool elect_one() { __trap(); return false; }
#else
// ---------------------------------------------------------------------------------------------------
// sm_90a (the host pass of nvcc reads this branch too)
// ---------------------------------------------------------------------------------------------------
__device__ inline void mbar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(cc_hopper_smem(bar)), "r"(count));
}
// Make the initialised barriers visible to the TMA engine (the async proxy) before it signals them.
__device__ inline void fence_barrier_init() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// One arrival, and `bytes` more to be delivered by TMA before the phase completes.
__device__ inline void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(cc_hopper_smem(bar)), "r"(bytes)
                 : "memory");
}
// One arrival without bytes: with count arrivals expected, the phase completes when all have arrived.
__device__ inline void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(cc_hopper_smem(bar)) : "memory");
}
// Wait until the phase with parity `parity` (0, 1, 0, ... for the barrier's 1st, 2nd, 3rd use) has completed.
__device__ inline void mbar_wait(uint64_t* bar, unsigned parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.b32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(cc_hopper_smem(bar)), "r"(parity) : "memory");
    }
}
// The box at (col, row) of the map into dst (1024-byte aligned for the 128-byte swizzle); completes on bar.
__device__ inline void tma_load_2d(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(cc_hopper_smem(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row),
                 "r"(cc_hopper_smem(bar)) : "memory");
}
// The box at (col, row) of the map from src (1024-byte aligned, 128-byte swizzled) to global memory, as one
// bulk group of this thread once bulk_commit() is called. src may be reused after bulk_wait_read.
__device__ inline void tma_store_2d(const CUtensorMap* map, int col, int row, const void* src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(cc_hopper_smem(src)) : "memory");
}
__device__ inline void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> __device__ inline void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ inline void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Shared memory written by ordinary stores, read next by the TMA engine (the async proxy): fence in every
// writing thread, then a barrier.
__device__ inline void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// A barrier of the 128 threads of one warpgroup (named barrier id, 1..15: 0 is __syncthreads).
__device__ inline void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
// Matrix descriptor of a K-major tile written by TMA with the 128-byte swizzle: start address >> 4 (bits 0-13),
// leading byte offset (unused for swizzled K-major, 1), stride byte offset 1024 >> 4 (8 rows of 128 bytes,
// bits 32-45), swizzle mode 1 = 128B (bits 62-63). Moving 16 elements along K is start + 32 bytes.
__device__ inline uint64_t wgmma_desc(const void* smem) {
    const uint64_t addr = cc_hopper_smem(smem);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Wait until at most one committed group is still running: the newest may go on while this thread carries on.
__device__ inline void wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// Registers per thread of this warpgroup (a multiple of 8, 24..256): the producer gives its spare registers up
// (dec), the consumers take them (inc). Needs a register cap at entry: __launch_bounds__(threads, 1).
template <int N> __device__ inline void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ inline void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
// One lane of the warp (all 32 lanes must execute it together): the elected lane gets true.
__device__ inline bool elect_one() {
    uint32_t pred = 0;
    asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n" : "=r"(pred));
    return pred != 0;
}

// D (64 x 256 fp32, 128 registers per thread of the warpgroup) = A (64 x 16) B^T (B: 256 x 16), both K-major
// bf16 in shared memory, plus D when accumulate != 0. Register layout of D: warp w of the warpgroup holds rows
// 16w..16w+15; d[4j + i] is row 16w + lane/4 + 8*(i/2), column 8j + 2*(lane%4) + i%2 (j = 0..31).
#define CC_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
__device__ inline void wgmma_m64n256k16_bf16(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 0;\n}\n"
        : CC_D8(0), CC_D8(8), CC_D8(16), CC_D8(24), CC_D8(32), CC_D8(40), CC_D8(48), CC_D8(56),
          CC_D8(64), CC_D8(72), CC_D8(80), CC_D8(88), CC_D8(96), CC_D8(104), CC_D8(112), CC_D8(120)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
#undef CC_D8
#endif
#endif
