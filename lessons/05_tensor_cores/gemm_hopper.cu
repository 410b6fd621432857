// ====================================================================================================
// Lesson 05, part 4 (Hopper only): GEMM with wgmma fed by the TMA copy engine. C (M x N, fp32) = A W^T with
// A (M x K) and W (N x K) in bf16, as part 2.
//
// On compute capability 9.0 the tensor cores are driven by warpgroups (4 warps, 128 threads) that issue
// asynchronous MMAs reading both operands straight from shared memory (wgmma.mma_async). The operands get
// there by TMA: one thread asks the copy engine for a whole 2-D box, which lands swizzled in shared memory
// and signals an mbarrier with its byte count. No thread copies data, no thread computes addresses per
// element, and out-of-range elements arrive as zeros.
//
// Versions (callable from Python as m.<name>(...)):
//   gemm_wgmma   task 5.12 (GPU only)  128x128 block tile, 2 consumer warpgroups of 64 x 128, k-tiles of 64,
//                                      4-stage TMA pipeline on mbarriers. Returns 0 when it launched, 1 when
//                                      this build has no sm_90a code or the tensor maps could not be made
//                                      (then C is not written).
// Needs compute capability 9.0 and an sm_90a build (TORCH_CUDA_ARCH_LIST="9.0a"); K % 8 == 0 (TMA row strides
// are multiples of 16 bytes). The simulator compiles this file but does not run it.
//
// Run it (H100):
//   make check T=5.12   (task 5.12, on a compute capability 9.0 GPU: sm_90a build)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cstdint>

#include "cc_hopper.h"

constexpr int kHBM = 128, kHBN = 128, kHBK = 64, kHStages = 4, kHThreads = 256;
constexpr int kHTileA = kHBM * kHBK, kHTileB = kHBN * kHBK;                 // elements per stage
constexpr unsigned kHStageBytes = (kHTileA + kHTileB) * sizeof(__nv_bfloat16);  // 32 KB
constexpr int kHSmem = kHStages * (int)kHStageBytes + 1024 + 64;              // + alignment slack, barriers

__global__ void __launch_bounds__(kHThreads) gemm_wgmma_kernel(const __grid_constant__ CUtensorMap map_a,
                                                               const __grid_constant__ CUtensorMap map_w,
                                                               float* __restrict__ C, int M, int N, int K) {
    extern __shared__ unsigned char smem_raw[];
    // the 128-byte swizzle needs 1024-byte aligned tiles
    unsigned char* base = smem_raw + ((1024 - (reinterpret_cast<uintptr_t>(smem_raw) & 1023)) & 1023);
    __nv_bfloat16* a_s = reinterpret_cast<__nv_bfloat16*>(base);                 // kHStages tiles of A
    __nv_bfloat16* w_s = a_s + kHStages * kHTileA;                                // kHStages tiles of W
    uint64_t* full = reinterpret_cast<uint64_t*>(w_s + kHStages * kHTileB);       // one mbarrier per stage
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x % 128) / 32;
    const int row0 = blockIdx.y * kHBM, col0 = blockIdx.x * kHBN;
    const int n_tiles = (K + kHBK - 1) / kHBK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kHStages; ++s) mbar_init(&full[s], 1);
        fence_barrier_init();
    }
    __syncthreads();
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    // TODO(task 5.12): thread 0 starts the pipeline: for s < kHStages - 1 and s < n_tiles, mbar_expect_tx(&full[s],
    // kHStageBytes), then tma_load_2d the A box (column s*kHBK, row row0) into a_s + s*kHTileA and the W box
    // (column s*kHBK, row col0) into w_s + s*kHTileB, both on &full[s]. Then for every k-tile t < n_tiles:
    //   1. thread 0 issues k-tile t + kHStages - 1 the same way (if it exists) into its stage (the stage was
    //      released by the __syncthreads that ended iteration t - 1);
    //   2. mbar_wait(&full[t % kHStages], (t / kHStages) & 1);
    //   3. wgmma_fence(); for kk < 4: wgmma_m64n128k16_bf16(d, wgmma_desc(A rows of this warpgroup, +64 wg rows,
    //      + kk*16 elements), wgmma_desc(W tile + kk*16 elements), 1); wgmma_commit(); wgmma_wait0();
    //   4. __syncthreads().
    // (~25 lines). Hint: the accumulate flag may be 1 from the start because d was zeroed.

    // Worked: the accumulator layout of wgmma (see cc_hopper.h) to C, bounds-checked.
    const int r_base = row0 + wg * 64 + warp_in_wg * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = r_base + 8 * (i / 2), c = col0 + 8 * j + 2 * (lane % 4) + i % 2;
            if (r < M && c < N) C[(long long)r * N + c] = d[4 * j + i];
        }
}

// Contract: A is M x K, W is N x K (bf16, row-major, K % 8 == 0), C is M x N fp32: C = A W^T. Launches only where
// gemm_wgmma_supported says 1 (and K % 8 == 0, and the tensor maps could be made); otherwise C is not written.
void gemm_wgmma_supported(int* ok) {
    int yes = cc_sm90a_built() ? 1 : 0;  // a property of this build: sm_90a code, on a compute capability 9.0 GPU
    cudaMemcpy(ok, &yes, sizeof yes, cudaMemcpyHostToDevice);
}

void gemm_wgmma(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    static const bool sm90a = cc_sm90a_built();  // asked once: the answer is a property of this build
    if (K % 8 != 0 || !sm90a) return;
    CUtensorMap map_a, map_w;
    if (!cc_make_tmap_bf16(&map_a, A, M, K, kHBM) || !cc_make_tmap_bf16(&map_w, W, N, K, kHBN)) return;
    static bool opted_in = false;
    if (!opted_in) {
        cudaFuncSetAttribute(gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kHSmem);
        opted_in = true;
    }
    dim3 grid((N + kHBN - 1) / kHBN, (M + kHBM - 1) / kHBM);
    gemm_wgmma_kernel<<<grid, kHThreads, kHSmem>>>(map_a, map_w, C, M, N, K);
}
