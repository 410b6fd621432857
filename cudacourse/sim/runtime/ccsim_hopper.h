// ccsim_hopper.h - Hopper's asynchronous machinery for the CPU simulator, learner-facing half: the tensor-map
// host API (cuTensorMapEncodeTiled) and the device operations that lesson 05's cc_hopper.h wraps. The model
// itself (mbarrier phases, TMA copies, the async proxy, wgmma) is runtime code, compiled without instrumentation:
// ccsim_hopper_rt.h, included by ccsim_rt.cpp. These wrappers only pass the caller's file and line along.
//
// What is modelled, element by element from the PTX ISA (sections named as in the PTX ISA 8.x manual):
// - "Parallel Synchronization and Communication Instructions: mbarrier": init with an expected arrival count,
//   arrive, arrive.expect_tx, complete_tx (by the TMA), phase completion when the pending arrival count and the
//   tx-count are both zero, try_wait.parity (true once the phase with that parity is the completed one: the
//   current phase has the other parity).
// - "Data Movement and Conversion Instructions: cp.async.bulk.tensor" (2-D, tile mode, global -> shared with
//   mbarrier::complete_tx::bytes, shared -> global as a bulk group), "cp.async.bulk.commit_group",
//   "cp.async.bulk.wait_group(.read)": a box of boxDim[1] rows x boxDim[0] elements, elements outside the tensor
//   zero-filled on loads and not written on stores, the full box's bytes counted on the mbarrier; shared memory
//   laid out with the tensor map's swizzle (CUDA Driver API cuTensorMapEncodeTiled: CU_TENSOR_MAP_SWIZZLE_32B/64B/
//   128B XOR the 16-byte chunk index, address bits 4-6, with the row within the 256/512/1024-byte pattern,
//   address bits 7-9, as cute's Swizzle<1|2|3,4,3>).
// - "Memory Consistency Model: Proxies" and "Parallel Synchronization and Communication Instructions: membar/fence"
//   (fence.proxy.async): ordinary loads and stores are the generic proxy, TMA and wgmma operand reads the async
//   proxy; an access by one proxy and a later conflicting access by the other need a fence.proxy.async between
//   them (in the thread that made the first access, before the synchronisation that orders the two).
// - "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions": wgmma.mma_async m64nNk16 (N a multiple
//   of 8 up to 256, f16/bf16 in, f32 accumulate, both operands in shared memory through "Matrix Descriptor Format"
//   descriptors: start address bits 0-13, leading byte offset 16-29, stride byte offset 32-45, base offset 49-51,
//   swizzle 62-63 with 1 = 128B, 2 = 64B, 3 = 32B, 0 = none; K-major operands), the "Register Fragments" of D
//   (warp w of the warpgroup holds rows 16w..16w+15; d[4j + i] is row 16w + lane/4 + 8(i/2), column
//   8j + 2(lane%4) + i%2), wgmma.fence, commit_group, wait_group.
// - "setmaxnreg" (a multiple of 8 in 24..256), "bar.sync" with a thread count (named barriers), "elect.sync".
// Not modelled, refused where they would be met: clusters, multicast, the 3-5-D and im2col tensor copies,
// interleaved tensor maps, transposed (MN-major) wgmma operands, register-sourced A.
//
// Checked mode diagnoses at the learner's file and line: shared memory read before the mbarrier phase that fills
// it completed (or with a wait on the wrong parity), the missing fence.proxy.async both ways, a TMA refilling a
// stage that a consumer has not released, an expect_tx count that does not match the copies (a deadlock report
// naming the barrier, its phase, the arrivals and bytes it still expects), wgmma accumulators touched before
// wgmma_wait (or written without wgmma_fence before the next wgmma), descriptors whose address, swizzle or
// stride do not match the tile the TMA wrote, and setmaxnreg out of range.
#ifndef CCSIM_HOPPER_H
#define CCSIM_HOPPER_H

// ---------------------------------------------------------------------------------------------------
// Host: tensor maps (CUDA Driver API types, the values of cuda.h)
// ---------------------------------------------------------------------------------------------------
typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
typedef uint64_t cuuint64_t;
typedef uint32_t cuuint32_t;
typedef enum CUtensorMapDataType_enum {
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_UINT16, CU_TENSOR_MAP_DATA_TYPE_UINT32,
    CU_TENSOR_MAP_DATA_TYPE_INT32, CU_TENSOR_MAP_DATA_TYPE_UINT64, CU_TENSOR_MAP_DATA_TYPE_INT64,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
    CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ
} CUtensorMapDataType;
typedef enum CUtensorMapInterleave_enum {
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0, CU_TENSOR_MAP_INTERLEAVE_16B, CU_TENSOR_MAP_INTERLEAVE_32B
} CUtensorMapInterleave;
typedef enum CUtensorMapSwizzle_enum {
    CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B
} CUtensorMapSwizzle;
typedef enum CUtensorMapL2promotion_enum {
    CU_TENSOR_MAP_L2_PROMOTION_NONE = 0, CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B
} CUtensorMapL2promotion;
typedef enum CUtensorMapFloatOOBfill_enum {
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
} CUtensorMapFloatOOBfill;
// 128 bytes, 64-byte aligned, as cuda.h's. The simulator keeps its own fields inside (opaque to the learner).
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };

extern "C" CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* ptr,
                                           const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                           const cuuint32_t* elem_strides, CUtensorMapInterleave interleave,
                                           CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                           CUtensorMapFloatOOBfill oob);
// The runtime's driver entry point lookup: the simulator has one driver function to give, the one above.
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1,
                                       cudaDriverEntryPointVersionNotSufficent = 2 };
#define cudaEnableDefault 0
static inline cudaError_t cudaGetDriverEntryPointByVersion(const char* sym, void** fn, unsigned, unsigned long long,
                                                           cudaDriverEntryPointQueryResult* q = nullptr) {
    const bool ok = std::strcmp(sym, "cuTensorMapEncodeTiled") == 0;
    *fn = ok ? (void*)&cuTensorMapEncodeTiled : nullptr;
    if (q) *q = ok ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return ok ? cudaSuccess : cudaErrorInvalidValue;
}
static inline cudaError_t cudaGetDriverEntryPoint(const char* sym, void** fn, unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* q = nullptr) {
    return cudaGetDriverEntryPointByVersion(sym, fn, 12000, flags, q);
}

// ---------------------------------------------------------------------------------------------------
// Device: the runtime's model (ccsim_hopper_rt.h). f/l: the learner's file and line (#line-mapped).
// ---------------------------------------------------------------------------------------------------
extern "C" {
int ccsim_hop_enable(void);
uint32_t ccsim_hop_smem_addr(const void* p, const char* f, int l);
void ccsim_hop_mbar_init(void* bar, unsigned count, const char* f, int l);
void ccsim_hop_mbar_arrive(void* bar, unsigned tx_bytes, int expect_tx, const char* f, int l);
void ccsim_hop_mbar_wait(void* bar, unsigned parity, const char* f, int l);
int ccsim_hop_mbar_try_wait(void* bar, unsigned parity, const char* f, int l);
void ccsim_hop_fence_proxy_async(const char* f, int l);
void ccsim_hop_tma_load(void* dst, const void* map, int c0, int c1, void* bar, const char* f, int l);
void ccsim_hop_tma_store(const void* map, int c0, int c1, const void* src, const char* f, int l);
void ccsim_hop_bulk_commit(const char* f, int l);
void ccsim_hop_bulk_wait(int n, int read_only, const char* f, int l);
void ccsim_hop_named_barrier(int id, int count, const char* f, int l);
void ccsim_hop_wgmma(float* d, int n, uint64_t desc_a, uint64_t desc_b, int scale_d, int bf16, const char* f, int l);
void ccsim_hop_wgmma_fence(const char* f, int l);
void ccsim_hop_wgmma_commit(const char* f, int l);
void ccsim_hop_wgmma_wait(int n, const char* f, int l);
void ccsim_hop_setmaxnreg(int inc, int n, const char* f, int l);
int ccsim_hop_elect_one(const char* f, int l);
}

// __cvta_generic_to_shared: the shared-window address of a pointer into the block's shared memory (the
// simulator's window starts at the block's arena; descriptors and swizzles use it as the GPU's).
static inline size_t __cvta_generic_to_shared(const void* p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_hop_smem_addr(p, f, l);
}

#endif  // CCSIM_HOPPER_H
