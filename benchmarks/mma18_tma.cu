// ====================================================================================================
// Issue 17 (branch mma18): mma.sync fed by TMA, and gemm_wgmma's ragged-size diagnostics. Built by
// benchmarks/mma18_sweep.py (sm_90a only: TORCH_CUDA_ARCH_LIST=9.0a), which replaces @MMA@ and @HOPPER@ by
// the paths of solutions/05_tensor_cores/cc_mma.h and gemm_hopper.cu (so the wgmma kernel timed here is the
// solution's own). C (M x N, fp32) = A (M x K) W^T (W: N x K), bf16 in, as task 5.6.
//
// Versions (callable from Python as m.<name>(...)):
//   mma_tma_128x256   task 5.6's ldmatrix + mma.sync consumers (64 x 64 warp tiles) fed by TMA instead of
//                     cp.async: one producer warpgroup (thread 0 issues cp.async.bulk.tensor), 8 consumer warps,
//                     4 stages of 64-wide k-tiles, full/empty mbarriers per stage, no __syncthreads in the
//                     main loop; the tiles land 128-byte swizzled (TMA's swizzle), which ldmatrix reads
//                     without bank conflicts; persistent (one block per SM walks the block tiles).
//   mma_tma_128x256_1buf  the same with one fragment buffer (step kk's ldmatrix right before its MMAs;
//                     the others load step kk+1's fragments before step kk's MMAs)
//   mma_tma_256x128   the same with 256 x 128 block tiles (4 x 2 warps of 64 x 64)
//   wgmma_ld(A, W, C, M, N, K, lda, promo)   gemm_wgmma's kernel launched with A and W rows lda elements
//                     apart (W has the same ld) and the given L2 promotion (0 none, 1 64B, 2 128B, 3 256B:
//                     the solution uses 3): separates the cost of 8000-byte (not 128-byte aligned) rows from
//                     the ragged tiles at 4000^3.
// Found racy in results/nvidia-h100-80gb-hbm3/mma19 (mma_tma_*: C differs between runs on the same inputs in
// about 1 run of 4 at 4096^3); benchmarks/mma19_tma.cu's mma_tma_256x128_fence (a fence.proxy.async before each
// stage's hand-back) was race-free in 30 runs (results/nvidia-h100-80gb-hbm3/mma19, section 3).
// Needs K % 8 == 0 (TMA row strides are multiples of 16 bytes). Ragged M, N, K: TMA fills zeros, the
// epilogue checks bounds.
// ====================================================================================================
#include <cuda_bf16.h>
#include <cstdint>

#include "@MMA@"
#include "@HOPPER@"

namespace mma18 {

constexpr int kBK = 64;  // one 128-byte swizzle row of bf16

// Byte offset of (row, 16-byte chunk) in a tile written by TMA with the 128-byte swizzle: chunk c of row r
// sits at chunk c ^ (r % 8) (tiles 1024-byte aligned). The 8 rows one ldmatrix matrix reads are 8
// consecutive rows at one chunk: 8 different chunk positions, so 8 different bank groups.
__device__ inline uint32_t swz(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

// mbar_wait with a watchdog: a phase that has not completed after about 2^31 cycles (~1 s) traps, so a
// wrong pipeline fails its check with an error instead of hanging the sweep.
__device__ inline void wait_bounded(uint64_t* bar, unsigned parity) {
    const long long t0 = clock64();
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.b32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(cc_hopper_smem(bar)), "r"(parity) : "memory");
        if (!done && clock64() - t0 > (1ll << 31)) __trap();
    }
}

// The fragments of one k16 step (kk = 0..3 of a 64-wide k-tile) of a warp: MI m16 blocks of A and 2*NJ2 n8
// blocks of W, by ldmatrix.x4 from the swizzled stage at shared addresses as / ws.
template <int MI, int NJ2>
__device__ inline void load_frags(uint32_t (&a)[MI][4], uint32_t (&b)[NJ2][4], uint32_t as, uint32_t ws, int a_row,
                                  int a_hi, int w_row, int w_hi, int kk) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                     : "r"(as + swz(a_row + 16 * i, 2 * kk + a_hi)));
#pragma unroll
    for (int j = 0; j < NJ2; ++j)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j][2]), "=r"(b[j][3])
                     : "r"(ws + swz(w_row + 16 * j, 2 * kk + w_hi)));
}

template <int BM, int BN, int WM, int WN, int STAGES, int MINB>
struct Cfg {
    static constexpr int kConsumers = WM * WN;                       // consumer warps
    // + one producer warpgroup (thread 0 issues the copies): 9 warps would leave 3 on one of the SM's 4
    // schedulers and cap every thread at 168 registers; with warpgroups, setmaxnreg moves the producer's
    // registers to the consumers (128 x 40 + 256 x 232 <= 65536).
    static constexpr int kThreads = 32 * kConsumers + 128;
    static_assert(kConsumers % 4 == 0, "consumer warps come in warpgroups");
    static constexpr int kTM = BM / WM, kTN = BN / WN;               // warp tile
    static constexpr int kMI = kTM / 16, kNJ = kTN / 8;              // m16 and n8 blocks per warp
    static constexpr unsigned kStageBytes = (BM + BN) * kBK * 2;
    static constexpr int kSmem = STAGES * (int)kStageBytes + 1024 + 2 * STAGES * 8;
    static_assert(kTM % 16 == 0 && kTN % 16 == 0, "warp tile must be multiples of 16");
};

template <int BM, int BN, int WM, int WN, int STAGES, int MINB, bool DB>
__global__ void __launch_bounds__(Cfg<BM, BN, WM, WN, STAGES, MINB>::kThreads, MINB)
    mma_tma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,
                   float* __restrict__ C, int M, int N, int K) {
    using G = Cfg<BM, BN, WM, WN, STAGES, MINB>;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* base = smem_raw + ((1024 - (reinterpret_cast<uintptr_t>(smem_raw) & 1023)) & 1023);
    unsigned char* a_s = base;                                   // STAGES tiles of BM x 64
    unsigned char* w_s = base + STAGES * BM * kBK * 2;           // STAGES tiles of BN x 64
    uint64_t* full = reinterpret_cast<uint64_t*>(base + STAGES * G::kStageBytes);
    uint64_t* empty = full + STAGES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int k_tiles = (K + kBK - 1) / kBK;
    const int tiles_n = (N + BN - 1) / BN, n_tiles = tiles_n * ((M + BM - 1) / BM);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);                 // the producer's expect_tx arrival (+ the TMA bytes)
            mbar_init(&empty[s], G::kConsumers);    // lane 0 of every consumer warp
        }
        fence_barrier_init();
    }
    __syncthreads();  // the only block-wide barrier

    if (warp < 4) {
        // Producer warpgroup: thread 0 keeps STAGES k-tiles in flight, across block tiles.
        setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        int it = 0;
        for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
            const int row0 = (tile / tiles_n) * BM, col0 = (tile % tiles_n) * BN;
            for (int t = 0; t < k_tiles; ++t, ++it) {
                const int s = it % STAGES;
                if (it >= STAGES) wait_bounded(&empty[s], (unsigned)((it / STAGES - 1) & 1));
                mbar_expect_tx(&full[s], G::kStageBytes);
                tma_load_2d(a_s + s * BM * kBK * 2, &map_a, t * kBK, row0, &full[s]);
                tma_load_2d(w_s + s * BN * kBK * 2, &map_w, t * kBK, col0, &full[s]);
            }
        }
        return;
    }

    // Consumer warp (wm, wn): rows wm*kTM.., columns wn*kTN.. of the block tile.
    setmaxnreg_inc<232>();
    const int wm = (warp - 4) / WN, wn = (warp - 4) % WN;
    // ldmatrix row addresses. A (x4): lane l gives row l % 16 of the m16 block, chunk 2kk + l / 16.
    // W (x4, two n8 blocks): lane l gives row (l % 8) + 8 (l / 16), chunk 2kk + (l / 8) % 2.
    // Every row offset is a multiple of 8 plus lane % 8, so the swizzle term is lane % 8 throughout.
    const int a_row = wm * G::kTM + lane % 16, a_hi = lane / 16;
    const int w_row = wn * G::kTN + lane % 8 + 8 * (lane / 16), w_hi = (lane / 8) % 2;
    const uint32_t a_base = cc_hopper_smem(a_s), w_base = cc_hopper_smem(w_s);
    float acc[G::kMI][G::kNJ][4];
    int it = 0;
    for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int row0 = (tile / tiles_n) * BM, col0 = (tile % tiles_n) * BN;
#pragma unroll
        for (int i = 0; i < G::kMI; ++i)
#pragma unroll
            for (int j = 0; j < G::kNJ; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
        for (int t = 0; t < k_tiles; ++t, ++it) {
            const int s = it % STAGES;
            wait_bounded(&full[s], (unsigned)((it / STAGES) & 1));
            const uint32_t as = a_base + s * BM * kBK * 2, ws = w_base + s * BN * kBK * 2;
            // Fragments of k16 step kk+1 are loaded (into the other register buffer) before step kk's
            // mma.sync run, so the ldmatrix latency hides behind 32 MMAs; the stage goes back to the producer
            // as soon as its last fragments are in registers.
            uint32_t a[2][G::kMI][4], b[2][G::kNJ / 2][4];
            load_frags<G::kMI, G::kNJ / 2>(a[0], b[0], as, ws, a_row, a_hi, w_row, w_hi, 0);
#pragma unroll
            for (int kk = 0; kk < kBK / 16; ++kk) {
                if (DB && kk + 1 < kBK / 16) {
                    load_frags<G::kMI, G::kNJ / 2>(a[(kk + 1) % 2], b[(kk + 1) % 2], as, ws, a_row, a_hi, w_row, w_hi,
                                                   kk + 1);
                    if (kk + 2 == kBK / 16) {
                        __syncwarp();
                        if (lane == 0) mbar_arrive(&empty[s]);
                    }
                }
                if (!DB) {  // one buffer: step kk's fragments just before its MMAs
                    if (kk > 0)
                        load_frags<G::kMI, G::kNJ / 2>(a[kk % 2], b[kk % 2], as, ws, a_row, a_hi, w_row, w_hi, kk);
                    if (kk + 1 == kBK / 16) {
                        __syncwarp();
                        if (lane == 0) mbar_arrive(&empty[s]);
                    }
                }
#pragma unroll
                for (int i = 0; i < G::kMI; ++i)
#pragma unroll
                    for (int j = 0; j < G::kNJ / 2; ++j) {
                        mma_m16n8k16_bf16(acc[i][2 * j], a[kk % 2][i], b[kk % 2][j], acc[i][2 * j]);
                        mma_m16n8k16_bf16(acc[i][2 * j + 1], a[kk % 2][i], b[kk % 2][j] + 2, acc[i][2 * j + 1]);
                    }
            }
        }
        // C from registers: acc[i][j][r] is row 16i + lane/4 + 8(r/2), column 8j + 2(lane%4) + r%2 of the
        // warp tile; float2 stores where N is even (every row 8-byte aligned).
        const bool pairs = (N % 2) == 0;
#pragma unroll
        for (int i = 0; i < G::kMI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + wm * G::kTM + 16 * i + lane / 4 + 8 * h;
                if (r >= M) continue;
#pragma unroll
                for (int j = 0; j < G::kNJ; ++j) {
                    const int c = col0 + wn * G::kTN + 8 * j + 2 * (lane % 4);
                    const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
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
}

inline int num_sms() {
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    return sms;
}

template <int BM, int BN, int WM, int WN, int STAGES, int MINB, bool DB>
void launch(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    using G = Cfg<BM, BN, WM, WN, STAGES, MINB>;
    // cc_sm90a_built() is a synchronous cudaMemcpyFromSymbol: asked once (results/.../mma18 was measured with
    // it asked on every call, which put a host round trip inside each timed interval)
    static const bool sm90a = cc_sm90a_built();
    if (M <= 0 || N <= 0 || K <= 0 || K % 8 != 0 || !sm90a) return;
    CUtensorMap map_a, map_w;
    if (!cc_make_tmap_bf16(&map_a, A, M, K, BM) || !cc_make_tmap_bf16(&map_w, W, N, K, BN)) return;
    auto kern = mma_tma_kernel<BM, BN, WM, WN, STAGES, MINB, DB>;
    static bool opted_in = false;
    if (!opted_in) {
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmem);
        opted_in = true;
    }
    const long long tiles = (long long)((N + BN - 1) / BN) * ((M + BM - 1) / BM);
    const long long slots = (long long)num_sms() * MINB;
    kern<<<(int)(tiles < slots ? tiles : slots), G::kThreads, G::kSmem>>>(map_a, map_w, C, M, N, K);
}

// A tensor map as cc_make_tmap_2d's, with a row stride of ld elements and a chosen L2 promotion.
inline bool tmap_ld(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* ptr, int rows, int cols,
                    long long ld, int box_rows, int promo) {
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
    if (ld * elem_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(ptr) % 16 != 0 || ld < cols) return false;
    const CUtensorMapL2promotion promos[4] = {CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)(ld * elem_bytes)};
    const cuuint32_t box[2] = {(cuuint32_t)(128 / elem_bytes), (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    return encode(map, type, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, promos[promo & 3], CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace mma18

void mma_tma_128x256(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma18::launch<128, 256, 2, 4, 4, 1, true>(A, W, C, M, N, K);
}
void mma_tma_128x256_1buf(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma18::launch<128, 256, 2, 4, 4, 1, false>(A, W, C, M, N, K);
}
void mma_tma_256x128(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma18::launch<256, 128, 4, 2, 4, 1, true>(A, W, C, M, N, K);
}

// gemm_wgmma's kernel (the solution's, included above) with A and W rows ld elements apart and L2 promotion
// `promo`; C is M x N with rows N apart (stored by TMA where N % 4 == 0).
void wgmma_ld(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K, int ld, int promo) {
    static const bool sm90a = cc_sm90a_built();  // asked once, as gemm_wgmma does
    if (M <= 0 || N <= 0 || K <= 0 || K % 8 != 0 || !sm90a) return;
    CUtensorMap map_a, map_w, map_c;
    if (!mma18::tmap_ld(&map_a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, A, M, K, ld, kHBM, promo) ||
        !mma18::tmap_ld(&map_w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, W, N, K, ld, kHBN, promo))
        return;
    const int tma_store = cc_make_tmap_f32(&map_c, C, M, N, 64) ? 1 : 0;
    static bool opted_in = false;
    if (!opted_in) {
        cudaFuncSetAttribute(gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kHSmem);
        opted_in = true;
    }
    const long long tiles = (long long)((N + kHBN - 1) / kHBN) * ((M + kHBM - 1) / kHBM);
    const int sms = mma18::num_sms();
    gemm_wgmma_kernel<<<(int)(tiles < sms ? tiles : sms), kHThreads, kHSmem>>>(map_a, map_w, map_c, C, M, N, K,
                                                                              tma_store);
}
