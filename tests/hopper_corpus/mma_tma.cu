// ====================================================================================================
// Hopper corpus: benchmarks/mma19_tma.cu's TMA-fed mma.sync GEMM, made small. C (M x N, fp32) = A W^T, A (M x K)
// and W (N x K) bf16, K % 8 == 0. A producer warpgroup (thread 0 issues the TMA boxes, 128-byte swizzle) fills
// a 4-stage ring of 64 x 64 k-tiles of A and W on full/empty mbarrier pairs; one consumer warpgroup (4 warps of
// 32 x 32) reads each stage with ldmatrix (the generic proxy), runs mma.sync and hands the stage back (lane 0 of
// every warp arrives on empty).
//
// Versions (callable from Python as m.<name>(...)):
//   mma_tma_fence     the fixed kernel: fence.proxy.async in every lane before the hand-back (mma19's fix,
//                     results/nvidia-h100-80gb-hbm3/mma19 call3: 0 of 30 runs differ on the H100)
//   mma_tma_nofence   the kernel before the fix: the TMA's next write to the stage (the async proxy) is not
//                     ordered after the ldmatrix reads (generic proxy); 4 of 30 runs differed on the H100. The
//                     simulator reports it in checked mode at the producer's tma_load_2d.
//   elect_count(out)  4 warps, the elected lane of each adds 1 to out[0] (elect_one: 4 in all)
// Run it: the simulator (tests/sim/test_hopper_corpus.py), or an sm_90a build on an H100/H200
// (benchmarks/gpu_hopper_corpus.sh).
// ====================================================================================================
#include <cuda_bf16.h>
#include <cstdint>

#include "cc_mma.h"
#include "cc_hopper.h"

namespace corpus_mma {
constexpr int kBM = 64, kBN = 64, kBK = 64, kStages = 4;
constexpr unsigned kStageBytes = (kBM + kBN) * kBK * 2;
constexpr int kSmem = kStages * (int)kStageBytes + 1024 + 2 * kStages * 8;

// Byte offset of (row, 16-byte chunk) in a tile the TMA wrote with the 128-byte swizzle (1024-byte aligned).
__device__ inline int swz(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

template <bool FENCE>
__global__ void __launch_bounds__(256, 1) mma_tma_kernel(const __grid_constant__ CUtensorMap map_a,
                                                         const __grid_constant__ CUtensorMap map_w, float* C, int M,
                                                         int N, int K) {
    extern __shared__ unsigned char smem_raw[];
    unsigned char* base = smem_raw + ((1024 - (reinterpret_cast<uintptr_t>(smem_raw) & 1023)) & 1023);
    unsigned char* a_s = base;
    unsigned char* w_s = base + kStages * kBM * kBK * 2;
    uint64_t* full = reinterpret_cast<uint64_t*>(base + kStages * kStageBytes);
    uint64_t* empty = full + kStages;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int k_tiles = (K + kBK - 1) / kBK;
    const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 4);
        }
        fence_barrier_init();
    }
    __syncthreads();
    if (warp < 4) {  // producer warpgroup
        setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        for (int t = 0; t < k_tiles; ++t) {
            const int s = t % kStages;
            if (t >= kStages) mbar_wait(&empty[s], (unsigned)((t / kStages - 1) & 1));
            mbar_expect_tx(&full[s], kStageBytes);
            tma_load_2d(a_s + s * kBM * kBK * 2, &map_a, t * kBK, row0, &full[s]);
            tma_load_2d(w_s + s * kBN * kBK * 2, &map_w, t * kBK, col0, &full[s]);
        }
        return;
    }
    setmaxnreg_inc<232>();
    const int cw = warp - 4, wm = cw / 2, wn = cw % 2;  // warp tile 32 x 32
    float acc[2][4][4];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j)
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;
    for (int t = 0; t < k_tiles; ++t) {
        const int s = t % kStages;
        mbar_wait(&full[s], (unsigned)((t / kStages) & 1));
        const unsigned char* as = a_s + s * kBM * kBK * 2;
        const unsigned char* ws = w_s + s * kBN * kBK * 2;
        for (int kk = 0; kk < kBK / 16; ++kk) {
            uint32_t a[2][4], b[2][4];
            for (int i = 0; i < 2; ++i) {
                const int r = wm * 32 + 16 * i + lane % 16;
                ldmatrix_x4(a[i], as + swz(r, 2 * kk + lane / 16));
            }
            for (int j = 0; j < 2; ++j) {
                const int r = wn * 32 + 16 * j + lane % 8 + 8 * (lane / 16);
                ldmatrix_x4(b[j], ws + swz(r, 2 * kk + (lane / 8) % 2));
            }
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 4; ++j) {
                    const uint32_t bb[2] = {b[j / 2][2 * (j % 2)], b[j / 2][2 * (j % 2) + 1]};
                    mma_m16n8k16_bf16(acc[i][j], a[i], bb, acc[i][j]);
                }
        }
        if (FENCE) fence_async_smem();  // this lane's ldmatrix reads before the TMA's next writes to the stage
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j)
            for (int v = 0; v < 4; ++v) {
                const int r = row0 + wm * 32 + 16 * i + lane / 4 + 8 * (v / 2);
                const int c = col0 + wn * 32 + 8 * j + 2 * (lane % 4) + v % 2;
                if (r < M && c < N) C[(long long)r * N + c] = acc[i][j][v];
            }
}

template <bool FENCE>
void launch(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0 || K % 8 != 0 || !cc_sm90a_built()) return;
    CUtensorMap map_a, map_w;
    if (!cc_make_tmap_bf16(&map_a, A, M, K, kBM) || !cc_make_tmap_bf16(&map_w, W, N, K, kBN)) return;
    cudaFuncSetAttribute(mma_tma_kernel<FENCE>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    dim3 grid((N + kBN - 1) / kBN, (M + kBM - 1) / kBM);
    mma_tma_kernel<FENCE><<<grid, 256, kSmem>>>(map_a, map_w, C, M, N, K);
}
}  // namespace corpus_mma

void mma_tma_fence(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    corpus_mma::launch<true>(A, W, C, M, N, K);
}
void mma_tma_nofence(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    corpus_mma::launch<false>(A, W, C, M, N, K);
}

__global__ void elect_kernel(int* out) {
    if (elect_one()) atomicAdd(out, 1);
}
void elect_count(int* out) {
    if (!cc_sm90a_built()) return;
    elect_kernel<<<1, 128>>>(out);
}
