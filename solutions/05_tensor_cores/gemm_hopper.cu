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
//   gemm_wgmma   task 5.12 (5.13: speed) warp-specialised and persistent: one block per SM walks the 128x256
//                                      block tiles (the last row and column of them shifted back inside
//                                      the matrix); a producer warpgroup (thread 0 issues TMA) and two consumer
//                                      warpgroups of 64 x 256, k-tiles of 64, a 4-stage pipeline on full/empty
//                                      mbarrier pairs, one wgmma group kept in flight (wait_group 1), registers
//                                      moved to the consumers (setmaxnreg); C leaves by TMA stores through
//                                      shared memory (N % 4 == 0), else from registers. Launches nothing when
//                                      this build has no sm_90a code or the tensor maps could not be made (then
//                                      C is not written).
// Needs compute capability 9.0 and an sm_90a build (TORCH_CUDA_ARCH_LIST="9.0a"); K % 8 == 0 (TMA row strides
// are multiples of 16 bytes). The CPU simulator runs it too (its model of cc_hopper.h; checked mode
// reports a missing wait, fence or wgmma_wait at its line).
//
// Run it (H100):
//   make check T=5.12   (task 5.12: a compute capability 9.0 GPU with an sm_90a build, or the CPU simulator)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cstdint>

#include "cc_hopper.h"

// Block tile 128 x 256: two consumer warpgroups of 64 x 256 (128 fp32 accumulators per thread each), and one
// producer warpgroup whose thread 0 issues the TMA copies. k-tiles of 64 (one 128-byte swizzle row).
constexpr int kHBM = 128, kHBN = 256, kHBK = 64, kHStages = 4;
constexpr int kHConsumers = 2, kHThreads = 128 * (1 + kHConsumers);
constexpr int kHTileA = kHBM * kHBK, kHTileB = kHBN * kHBK;                 // elements per stage
constexpr unsigned kHStageBytes = (kHTileA + kHTileB) * sizeof(__nv_bfloat16);  // 48 KB
// C goes out through shared memory by TMA stores, in boxes of 64 rows x 32 fp32 columns (one 128-byte swizzle
// row), kHCBufs buffers per consumer warpgroup, so the consumers move on while the copy engine writes C.
constexpr int kHCBox = 64 * 32, kHCBufs = 2;
constexpr int kHSmem = kHStages * (int)kHStageBytes + kHConsumers * kHCBufs * kHCBox * 4 + 1024 + 2 * kHStages * 8;
// Registers per thread after the hand-over: 128 x 40 + 256 x 232 <= 65536, the register file of an SM.
constexpr int kHProducerRegs = 40, kHConsumerRegs = 232;

// First row and column of block tile `tile` (row-major over the tile grid). The last row or column of tiles,
// where M or N is not a multiple of the tile, starts M - kHBM (N - kHBN) instead: its TMA boxes then end at the
// matrix edge rather than crossing it. Measured on the H100 (results/nvidia-h100-80gb-hbm3/mma19): with boxes
// crossing the edge, 4000 x 4000 x 4096 took 12% longer than 4096^3 (its busiest SM 17% longer), shifted it takes
// the same time. The rows and columns a shifted tile shares with its neighbour are computed in the same order
// by both, so both write the same values.
__device__ inline int tile_row0(int tile, int tiles_n, int M) {
    const int r = (tile / tiles_n) * kHBM;
    return (r + kHBM > M && M >= kHBM) ? M - kHBM : r;
}
__device__ inline int tile_col0(int tile, int tiles_n, int N) {
    const int c = (tile % tiles_n) * kHBN;
    return (c + kHBN > N && N >= kHBN) ? N - kHBN : c;
}

__global__ void __launch_bounds__(kHThreads, 1) gemm_wgmma_kernel(const __grid_constant__ CUtensorMap map_a,
                                                                  const __grid_constant__ CUtensorMap map_w,
                                                                  const __grid_constant__ CUtensorMap map_c,
                                                                  float* __restrict__ C, int M, int N, int K,
                                                                  int tma_store) {
    extern __shared__ unsigned char smem_raw[];
    // the 128-byte swizzle needs 1024-byte aligned tiles
    unsigned char* base = smem_raw + ((1024 - (reinterpret_cast<uintptr_t>(smem_raw) & 1023)) & 1023);
    __nv_bfloat16* a_s = reinterpret_cast<__nv_bfloat16*>(base);                 // kHStages tiles of A
    __nv_bfloat16* w_s = a_s + kHStages * kHTileA;                                // kHStages tiles of W
    float* c_s = reinterpret_cast<float*>(w_s + kHStages * kHTileB);              // C boxes on their way out
    uint64_t* full = reinterpret_cast<uint64_t*>(c_s + kHConsumers * kHCBufs * kHCBox);  // stage s loaded
    uint64_t* empty = full + kHStages;                                            // stage s read by every consumer warp
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x % 128) / 32;
    const int k_tiles = (K + kHBK - 1) / kHBK;
    const int tiles_n = (N + kHBN - 1) / kHBN, n_tiles = tiles_n * ((M + kHBM - 1) / kHBM);

    if (threadIdx.x == 0) {
        for (int s = 0; s < kHStages; ++s) {
            mbar_init(&full[s], 1);                  // the producer's expect_tx arrival (+ the TMA bytes)
            mbar_init(&empty[s], 4 * kHConsumers);   // lane 0 of every consumer warp
        }
        fence_barrier_init();
    }
    __syncthreads();  // the last block-wide barrier: from here on the warpgroups meet only on mbarriers

    // Persistent: one block per SM walks the block tiles blockIdx.x, + gridDim.x, ... (along N first, so the
    // blocks running at once share their rows of A and all of W in L2). Both roles count k-tiles over all
    // their block tiles in `it`: k-tile number it uses stage it % kHStages, for the (it / kHStages)-th time, so
    // the producer loads the next block tile while the consumers finish (and store) this one.
    if (wg == 0) {
        // Producer warpgroup: needs few registers, gives them to the consumers.
        setmaxnreg_dec<kHProducerRegs>();
        if (threadIdx.x != 0) return;
        int it = 0;
        for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
            const int row0 = tile_row0(tile, tiles_n, M), col0 = tile_col0(tile, tiles_n, N);
            // TODO(task 5.12): the producer. For every k-tile t < k_tiles (and ++it with it), into stage
            // s = it % kHStages:
            //   1. if it >= kHStages, the stage still holds k-tile it - kHStages: mbar_wait(&empty[s], parity of
            //      that use of the stage, (it / kHStages - 1) & 1) until every consumer warp has handed it back;
            //   2. mbar_expect_tx(&full[s], kHStageBytes), then tma_load_2d the A box (column t*kHBK, row row0)
            //      into a_s + s*kHTileA and the W box (column t*kHBK, row col0) into w_s + s*kHTileB, both on
            //      &full[s].
            // (~8 lines)
            // BEGIN SOLUTION
            for (int t = 0; t < k_tiles; ++t, ++it) {
                const int s = it % kHStages;
                if (it >= kHStages) mbar_wait(&empty[s], (unsigned)((it / kHStages - 1) & 1));
                mbar_expect_tx(&full[s], kHStageBytes);
                tma_load_2d(a_s + s * kHTileA, &map_a, t * kHBK, row0, &full[s]);
                tma_load_2d(w_s + s * kHTileB, &map_w, t * kHBK, col0, &full[s]);
            }
            // END SOLUTION
        }
    } else {
        // Consumer warpgroups 1 and 2: rows 64 (wg - 1) .. 64 wg - 1 of the block tile, all 256 columns.
        setmaxnreg_inc<kHConsumerRegs>();
        const __nv_bfloat16* a_wg = a_s + (wg - 1) * 64 * kHBK;  // this warpgroup's 64 rows of every A tile
        float d[128];
        int it = 0;
        for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
            const int row0 = tile_row0(tile, tiles_n, M), col0 = tile_col0(tile, tiles_n, N);
#pragma unroll
            for (int i = 0; i < 128; ++i) d[i] = 0.0f;
            // TODO(task 5.12): the consumer main loop. For every k-tile t < k_tiles (and ++it with it), stage
            // s = it % kHStages:
            //   1. mbar_wait(&full[s], (it / kHStages) & 1) until the TMA bytes of this k-tile have landed;
            //   2. wgmma_fence(); for kk < 4: wgmma_m64n256k16_bf16(d, wgmma_desc(a_wg + s*kHTileA + kk*16),
            //      wgmma_desc(w_s + s*kHTileB + kk*16), 1); wgmma_commit();
            //   3. wgmma_wait1(): this k-tile may still run, but the one before it is done with its stage, so
            //      (t > 0) lane 0 of every warp calls mbar_arrive(&empty[(it - 1) % kHStages]) to hand that stage
            //      back to the producer.
            // After the loop: wgmma_wait0(), then hand back the stage of the last k-tile the same way, before d
            // is read. (~15 lines). Hint: the accumulate flag may be 1 from the start because d was zeroed.
            // BEGIN SOLUTION
            for (int t = 0; t < k_tiles; ++t, ++it) {
                const int s = it % kHStages;
                mbar_wait(&full[s], (unsigned)((it / kHStages) & 1));
                const __nv_bfloat16* as = a_wg + s * kHTileA;
                const __nv_bfloat16* ws = w_s + s * kHTileB;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < kHBK / 16; ++kk)
                    wgmma_m64n256k16_bf16(d, wgmma_desc(as + kk * 16), wgmma_desc(ws + kk * 16), 1);
                wgmma_commit();
                wgmma_wait1();  // keeps this k-tile's MMAs in flight while the previous one's stage is released
                if (t > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kHStages]);
            }
            wgmma_wait0();
            if (lane == 0) mbar_arrive(&empty[(it - 1) % kHStages]);
            // END SOLUTION

            // Worked: the accumulator layout of wgmma (see cc_hopper.h) to C. Row r_wg of this warpgroup's 64,
            // column 8j + 2(lane % 4) of the tile: d[4j + 2h], d[4j + 2h + 1] for the rows r_wg and r_wg + 8.
            const int r_wg = warp_in_wg * 16 + lane / 4;
            if (tma_store) {
                // Box b holds columns 32b..32b+31 (j = 4b..4b+3) in a buffer laid out as TMA's 128-byte swizzle:
                // 16-byte chunk q of row r sits at chunk q ^ (r % 8), which also keeps the 8 rows a warp writes
                // at once in different banks. One thread per warpgroup issues the store.
                float* bufs = c_s + (wg - 1) * kHCBufs * kHCBox;
                const bool issuer = threadIdx.x % 128 == 0;
#pragma unroll
                for (int b = 0; b < kHBN / 32; ++b) {
                    float* buf = bufs + (b % kHCBufs) * kHCBox;
                    if (issuer) bulk_wait_read<kHCBufs - 1>();  // the store that used this buffer has read it
                    warpgroup_sync(wg);
#pragma unroll
                    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int r = r_wg + 8 * h, q = 2 * jj + (lane % 4) / 2;  // q: 16-byte chunk of the row
                            float* at = buf + r * 32 + 4 * (q ^ (r % 8)) + 2 * (lane % 2);
                            *reinterpret_cast<float2*>(at) = make_float2(d[16 * b + 4 * jj + 2 * h],
                                                                         d[16 * b + 4 * jj + 2 * h + 1]);
                        }
                    fence_async_smem();
                    warpgroup_sync(wg);
                    if (issuer) {
                        const int c = col0 + 32 * b, r = row0 + (wg - 1) * 64;
                        if (c < N && r < M) tma_store_2d(&map_c, c, r, buf);  // a box partly outside: clipped
                        bulk_commit();
                    }
                }
            } else {
                // N % 4 != 0 (or C not 16-byte aligned): no tensor map for C; bounds-checked stores from registers.
                const bool pairs = (N % 2) == 0;  // then every row starts 8-byte aligned
#pragma unroll
                for (int j = 0; j < 32; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = row0 + (wg - 1) * 64 + r_wg + 8 * h, c = col0 + 8 * j + 2 * (lane % 4);
                        const float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
                        if (r >= M) continue;
                        float* out = C + (long long)r * N + c;
                        if (pairs && c + 1 < N) {
                            *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
                        } else {
                            if (c < N) out[0] = v0;
                            if (c + 1 < N) out[1] = v1;
                        }
                    }
            }
        }
        if (threadIdx.x % 128 == 0) bulk_wait_all();  // the last stores are done before the block's memory goes
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
    CUtensorMap map_a, map_w, map_c;
    if (!cc_make_tmap_bf16(&map_a, A, M, K, kHBM) || !cc_make_tmap_bf16(&map_w, W, N, K, kHBN)) return;
    const int tma_store = cc_make_tmap_f32(&map_c, C, M, N, 64) ? 1 : 0;  // N % 4 == 0 and C 16-byte aligned
    static bool opted_in = false;
    if (!opted_in) {
        cudaFuncSetAttribute(gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kHSmem);
        opted_in = true;
    }
    static int sms = 0;  // one block per SM (the shared memory allows no second), each looping over block tiles
    if (!sms) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    const long long tiles = (long long)((N + kHBN - 1) / kHBN) * ((M + kHBM - 1) / kHBM);
    const int grid = (int)(tiles < sms ? tiles : sms);
    gemm_wgmma_kernel<<<grid, kHThreads, kHSmem>>>(map_a, map_w, map_c, C, M, N, K, tma_store);
}
