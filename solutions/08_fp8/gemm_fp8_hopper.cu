// ====================================================================================================
// Lesson 08, part 5 (Hopper only): the block-scaled FP8 GEMM of task 8.4 on wgmma, fed by TMA.
// C (M x N, bf16) = (A sa) (W sw)^T with A (M x K) and W (N x K) in e4m3, sa the 1x128 scales of A
// (float[ceil(K/128)][M]) and sw the 128x128 scales of W (float[ceil(N/128)][ceil(K/128)]), as task 8.4.
//
// Lesson 05's gemm_wgmma with three changes. The operands are bytes: a k-tile of 128 e4m3 is one 128-byte
// swizzle row, and one wgmma consumes 32 of them (k32), so four wgmmas cover a k-tile, exactly one block of
// the scales. The tensor cores' sum over those 128 products is only a partial sum: the scales change with
// the next k-block, so after each k-tile the warpgroup waits for its MMAs, multiplies the 64 partial sums it
// holds by sa[row] * sw[block] and adds them to a second set of fp32 registers ("promotion", as
// DeepSeek-V3 and DeepGEMM do; it also keeps each tensor-core sum to 128 terms, see the README). The two
// consumer warpgroups take turns: while one promotes, the other's MMAs keep the tensor cores busy.
//
// Versions (callable from Python as m.<name>(...)):
//   gemm_fp8_wgmma   task 8.5 (GPU only)  persistent, warp-specialised: one block per SM walks the 256 x 128
//                                         block tiles; a producer warpgroup (thread 0 issues TMA) and two
//                                         consumer warpgroups, each two 64 x 128 slices; k-tiles of 128; a 4-stage
//                                         pipeline on full/empty mbarrier pairs; bf16 C stored from registers
//                                         (kFp8Waves = 1: 128 x 128 tiles, 6 stages, as fast). Launches
//                                         nothing when this build has no sm_90a code, K % 16 != 0 or the tensor
//                                         maps could not be made (then C is not written).
// Needs compute capability 9.0 and an sm_90a build (the loader makes one on such a GPU). The simulator compiles
// this file but does not run it: task 8.4 is the same computation on CUDA cores, graded on both backends.
//
// Run it (H100/H200):
//   make check T=8.5   (correctness, on a compute capability 9.0 GPU)
//   make check T=8.6   (speed against torch._scaled_mm)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

#include "cc_hopper_fp8.h"

// The graded launcher's shape: kFp8Waves 64-row slices of A per consumer warpgroup, block tiles of
// (128 kFp8Waves) x 128. The two shapes measured the same on the H200 (809.5 TFLOP/s with 1 in make bench at
// 06840a8, 815.6 with 2 at e568ca7: results/nvidia-h200/fp8/); 2 is the one graded.
constexpr int kFp8Waves = 2;
constexpr int kFThreads = 384, kFProducerRegs = 40, kFConsumerRegs = 232;

template <int kWaves> struct Fp8Tile {
    static constexpr int BM = 128 * kWaves, BN = 128, BK = 128;
    static constexpr int kStages = kWaves == 1 ? 6 : 4;
    static constexpr int kTileA = BM * BK, kTileW = BN * BK;  // bytes per stage
    static constexpr unsigned kStageBytes = kTileA + kTileW;
    static constexpr int kSmem = kStages * (int)kStageBytes + 1024 + 2 * kStages * 8;
};

// ----------------------------------------------------------------------------------------------------
// Task 8.5: one k-tile's MMAs, and the promotion of their partial sums
// ----------------------------------------------------------------------------------------------------

// acc (64 x 128 fp32, this thread's 64 registers) = this warpgroup's 64 rows of A's k-tile (as: 64 rows of 128
// bytes in shared memory, swizzled by TMA) times W's k-tile (ws: 128 rows of 128 bytes) transposed.
__device__ __forceinline__ void issue_ktile(float* acc, const uint8_t* as, const uint8_t* ws) {
    // TODO(task 8.5): (~5 lines) wgmma_fence(); then for kk < 4 (#pragma unroll): wgmma_m64n128k32_e4m3(acc,
    // wgmma_desc(as + kk * 32), wgmma_desc(ws + kk * 32), kk): each consumes 32 bytes (32 e4m3) of every row,
    // and the flag kk makes the first overwrite acc (a fresh partial sum) and the next three add to it; then
    // wgmma_commit() (the four MMAs become one group that wgmma_wait0/wgmma_wait1 wait for).
    // Worked example: the third k32 step of rows 64..127 of stage 2 (kWaves 1) reads as = a_s + 2 * 16384 + 64 *
    // 128, starting 64 bytes into each row: wgmma_desc(as + 64).
    // BEGIN SOLUTION
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n128k32_e4m3(acc, wgmma_desc(as + kk * 32), wgmma_desc(ws + kk * 32), kk);
    wgmma_commit();
    // END SOLUTION
}

// out += acc scaled: rows r (acc[4j], acc[4j + 1]) by s0 = sa[r] * sw, rows r + 8 (acc[4j + 2], acc[4j + 3]) by
// s1 = sa[r + 8] * sw (the register layout of cc_hopper_fp8.h).
__device__ __forceinline__ void promote(float* out, const float* acc, float s0, float s1) {
    // TODO(task 8.5): (~7 lines) for j < 16 (#pragma unroll): out[4j] += s0 * acc[4j], out[4j + 1] += s0 *
    // acc[4j + 1], out[4j + 2] += s1 * acc[4j + 2], out[4j + 3] += s1 * acc[4j + 3] (fmaf).
    // Hint: task 8.4's promotion on this layout; acc must have been waited for (wgmma_wait) before it is read.
    // BEGIN SOLUTION
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        out[4 * j] = fmaf(s0, acc[4 * j], out[4 * j]);
        out[4 * j + 1] = fmaf(s0, acc[4 * j + 1], out[4 * j + 1]);
        out[4 * j + 2] = fmaf(s1, acc[4 * j + 2], out[4 * j + 2]);
        out[4 * j + 3] = fmaf(s1, acc[4 * j + 3], out[4 * j + 3]);
    }
    // END SOLUTION
}

template <int kWaves>
__global__ void __launch_bounds__(kFThreads, 1) gemm_fp8_wgmma_kernel(const __grid_constant__ CUtensorMap map_a,
                                                                     const __grid_constant__ CUtensorMap map_w,
                                                                     const float* __restrict__ sa,
                                                                     const float* __restrict__ sw,
                                                                     __nv_bfloat16* __restrict__ C, int M, int N,
                                                                     int K) {
    using T = Fp8Tile<kWaves>;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* base = smem_raw + ((1024 - (reinterpret_cast<uintptr_t>(smem_raw) & 1023)) & 1023);
    uint8_t* a_s = base;                                           // kStages tiles of A (BM x 128 bytes)
    uint8_t* w_s = a_s + T::kStages * T::kTileA;                   // kStages tiles of W (128 x 128 bytes)
    uint64_t* full = reinterpret_cast<uint64_t*>(w_s + T::kStages * T::kTileW);
    uint64_t* empty = full + T::kStages;
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x % 128) / 32;
    const int k_tiles = (K + T::BK - 1) / T::BK;
    const int tiles_n = (N + T::BN - 1) / T::BN, n_tiles = tiles_n * ((M + T::BM - 1) / T::BM);

    if (threadIdx.x == 0) {
        for (int s = 0; s < T::kStages; ++s) {
            mbar_init(&full[s], 1);   // the producer's expect_tx arrival (+ the TMA bytes)
            mbar_init(&empty[s], 8);  // lane 0 of each of the 8 consumer warps
        }
        fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {
        // Worked: the producer, as task 5.12's (k-tile it uses stage it % kStages for the (it / kStages)-th time).
        setmaxnreg_dec<kFProducerRegs>();
        if (threadIdx.x != 0) return;
        int it = 0;
        for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
            const int row0 = (tile / tiles_n) * T::BM, col0 = (tile % tiles_n) * T::BN;
            for (int t = 0; t < k_tiles; ++t, ++it) {
                const int s = it % T::kStages;
                if (it >= T::kStages) mbar_wait(&empty[s], (unsigned)((it / T::kStages - 1) & 1));
                mbar_expect_tx(&full[s], T::kStageBytes);
                tma_load_2d(a_s + s * T::kTileA, &map_a, t * T::BK, row0, &full[s]);
                tma_load_2d(w_s + s * T::kTileW, &map_w, t * T::BK, col0, &full[s]);
            }
        }
        return;
    }

    // Consumer warpgroups 1 and 2 (worked: the schedule; task 8.5 is issue_ktile and promote). In wave v, warpgroup
    // wg covers rows 128v + 64(wg - 1) .. + 63 of the tile; thread (warp w, lane) holds rows 16w + lane/4 and that
    // + 8 of it (the wgmma register layout). Per k-tile and wave: wait for the stage's bytes, issue the MMAs, wait
    // for them (wgmma_wait0), hand the stage back after the last wave, promote. Waiting for all of them before
    // promoting leaves the tensor cores to the other consumer warpgroup meanwhile; promoting one k-tile while
    // the next one's MMAs run (wgmma_wait1 and a second accumulator) makes ptxas serialize the wgmmas (its
    // warning C7514: the accumulators of an MMA in flight are read), as it did for this kernel with CUDA 13.0.
    setmaxnreg_inc<kFConsumerRegs>();
    float out[kWaves][64];        // the promoted result, fp32
    float acc[64];                // the partial sums of one k-tile, from the tensor cores
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    const int r_thread = (wg - 1) * 64 + warp_in_wg * 16 + lane / 4;  // + 128 v, + 8 h
    int it = 0;
    for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int row0 = (tile / tiles_n) * T::BM, col0 = (tile % tiles_n) * T::BN;
#pragma unroll
        for (int v = 0; v < kWaves; ++v)
#pragma unroll
            for (int i = 0; i < 64; ++i) out[v][i] = 0.0f;
        // This k-block's scale products for rows r and r + 8 of wave v (rows past M read row M - 1; they are not
        // stored). Loaded before the wait for the stage, so their latency hides behind it.
        auto scales = [&](int t, int v, float& s0, float& s1) {
            const float sb = __ldg(sw + (long long)(col0 / 128) * k_tiles + t);
            const int r = row0 + 128 * v + r_thread;
            s0 = __ldg(sa + (long long)t * M + (r < M ? r : M - 1)) * sb;
            s1 = __ldg(sa + (long long)t * M + (r + 8 < M ? r + 8 : M - 1)) * sb;
        };
        const uint8_t* a_wg = a_s + 64 * (wg - 1) * T::BK;  // this warpgroup's rows of every A tile
        for (int t = 0; t < k_tiles; ++t, ++it) {
            const int s = it % T::kStages;
            float s0[kWaves], s1[kWaves];
#pragma unroll
            for (int v = 0; v < kWaves; ++v) scales(t, v, s0[v], s1[v]);
            mbar_wait(&full[s], (unsigned)((it / T::kStages) & 1));
#pragma unroll
            for (int v = 0; v < kWaves; ++v) {
                issue_ktile(acc, a_wg + s * T::kTileA + 128 * v * T::BK, w_s + s * T::kTileW);
                wgmma_wait0();  // the partial sums are needed now
                if (v == kWaves - 1 && lane == 0) mbar_arrive(&empty[s]);  // the stage goes back
                promote(out[v], acc, s0[v], s1[v]);
            }
        }
        // Worked: the epilogue. Columns 8j + 2(lane % 4) and + 1 of rows r and r + 8, as bf16 pairs where they
        // fit (N even: every row starts 4-byte aligned), one value at a time at the edges.
        const bool pairs = (N % 2) == 0;
#pragma unroll
        for (int v = 0; v < kWaves; ++v)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + 128 * v + r_thread + 8 * h;
                if (r >= M) continue;
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    const int c = col0 + 8 * j + 2 * (lane % 4);
                    const float v0 = out[v][4 * j + 2 * h], v1 = out[v][4 * j + 2 * h + 1];
                    __nv_bfloat16* o = C + (long long)r * N + c;
                    if (pairs && c + 1 < N) {
                        *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(v0, v1);
                    } else {
                        if (c < N) o[0] = __float2bfloat16_rn(v0);
                        if (c + 1 < N) o[1] = __float2bfloat16_rn(v1);
                    }
                }
            }
    }
}

// Whether this build of gemm_fp8_wgmma launches: sm_90a code, on a compute capability 9.0 GPU (ok[0] = 1).
void gemm_fp8_wgmma_supported(int* ok) {
    int yes = cc_sm90a_built() ? 1 : 0;
    cudaMemcpy(ok, &yes, sizeof yes, cudaMemcpyHostToDevice);
}

template <int kWaves>
static void launch_gemm_fp8_wgmma(const __nv_fp8_e4m3* A, const float* sa, const __nv_fp8_e4m3* W, const float* sw,
                                  __nv_bfloat16* C, int M, int N, int K) {
    using T = Fp8Tile<kWaves>;
    if (M <= 0 || N <= 0 || K <= 0) return;
    static const bool sm90a = cc_sm90a_built();
    if (K % 16 != 0 || !sm90a) return;
    CUtensorMap map_a, map_w;
    if (!cc_make_tmap_u8(&map_a, A, M, K, T::BM) || !cc_make_tmap_u8(&map_w, W, N, K, T::BN)) return;
    static bool opted_in = false;
    if (!opted_in) {
        cudaFuncSetAttribute(gemm_fp8_wgmma_kernel<kWaves>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem);
        opted_in = true;
    }
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    const long long tiles = (long long)((N + T::BN - 1) / T::BN) * ((M + T::BM - 1) / T::BM);
    const int grid = (int)(tiles < sms ? tiles : sms);
    gemm_fp8_wgmma_kernel<kWaves><<<grid, kFThreads, T::kSmem>>>(map_a, map_w, sa, sw, C, M, N, K);
}

// Contract: A (M x K e4m3, row-major, K % 16 == 0), sa (float[ceil(K/128)][M]), W (N x K e4m3), sw
// (float[ceil(N/128)][ceil(K/128)]), C (M x N bf16) = (A sa)(W sw)^T, fp32 promotion per 128-wide k-block.
// Launches only where gemm_fp8_wgmma_supported says 1; otherwise C is not written.
void gemm_fp8_wgmma(const __nv_fp8_e4m3* A, const float* sa, const __nv_fp8_e4m3* W, const float* sw,
                    __nv_bfloat16* C, int M, int N, int K) {
    launch_gemm_fp8_wgmma<kFp8Waves>(A, sa, W, sw, C, M, N, K);
}
