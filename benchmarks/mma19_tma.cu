// ====================================================================================================
// Issue 17 (branch mma19): mma.sync fed by TMA, second round. Built by benchmarks/mma19_sweep.py (sm_90a only:
// TORCH_CUDA_ARCH_LIST=9.0a), which replaces @MMA@ and @HOPPER@ by the paths of
// solutions/05_tensor_cores/cc_mma.h and cc_hopper.h. C (M x N, fp32) = A (M x K) W^T (W: N x K), bf16 in.
// Starts from benchmarks/mma18_tma.cu (the kernel, its checks and its launchers asking cc_sm90a_built once).
//
// Versions (callable from Python as m.<name>(...)):
//   mma_tma_128x256, mma_tma_256x128   mma18's kernel as it is now (re-measured: mma18 timed a launcher that
//                     made a host round trip per call): 8 consumer warps of 64 x 64, 4 stages of 64-wide k-tiles
//                     fed by one TMA producer thread, fragments double-buffered inside a k-tile
//   mma_tma_256x128_g8  the same with a grouped persistent tile order (8 tile rows per group, column-major
//                     inside the group): the tiles running at once share fewer A and W rows in L2
//   mma_tma_256x128_pf  fragments double-buffered across k-tiles too: k-tile t+1's first k16 fragments are
//                     loaded before k-tile t's last MMAs (no ldmatrix latency at the start of a k-tile)
//   mma_tma_128x128_x2  two blocks per SM, each a producer warpgroup + 4 consumer warps on a 128 x 128 tile,
//                     3 stages each: the two blocks drift apart, so one block's epilogue overlaps the other's
//                     MMAs (setmaxnreg 40 / 216 so that two blocks fit the register file)
//   mma_tma_128x128_x2_pf  the same with the cross-k-tile prefetch
//   mma_tma_128x256_late, mma_tma_256x128_late  the first two with each consumer warp handing a stage back after
//                     the MMAs of its last k16 step have issued (so after its ldmatrix data arrived), not right
//                     after issuing its last ldmatrix: the first run's mma_tma_128x256 once gave a relative error
//                     of 2.4e-4 at 4096^3 (4.5e-6 everywhere else); suspected: a race of that early hand-back,
//                     which the sweep's repeat test (--repeat) looks for. Measured: the _late versions differ
//                     from run to run more often, not less; their SASS shows ptxas moved the hand-back
//                     (SYNCS.ARRIVE, which reads no register the ldmatrix writes) up to three instructions after
//                     the last LDSM, ahead of the MMAs.
//   mma_tma_256x128_fence  (race-free in 30 runs: results/.../mma19 section 3) mma_tma_256x128 with fence.proxy.async.shared::cta in every lane
//                     before the hand-back: the PTX memory model asks for a proxy fence between generic-proxy
//                     accesses (ldmatrix) and async-proxy ones (the TMA's next write to the stage); the candidate
//                     fix of the race
//   mma_smem_ceiling_occ(src, out, blocks, iters, blocks_per_sm)  lessons/05_tensor_cores/bench.py's ldmatrix
//                     ceiling kernel with extra dynamic shared memory so that only blocks_per_sm blocks (4 warps
//                     each) fit on an SM: the ceiling at the GEMM's own 8 MMA warps per SM (2 per scheduler)
// Needs K % 8 == 0 (TMA row strides are multiples of 16 bytes). Ragged M, N, K: TMA fills zeros, the
// epilogue checks bounds.
// ====================================================================================================
#include <cuda_bf16.h>
#include <cstdint>

#include "@MMA@"
#include "@HOPPER@"

namespace mma19 {

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
    // registers per consumer thread after setmaxnreg: the block's launch share (65536 / MINB) less the
    // producer warpgroup's 128 x 40, over the consumers, rounded down to a multiple of 8 (at most 232)
    static constexpr int kConsumerRegsRaw = ((65536 / MINB - 128 * 40) / (32 * WM * WN)) / 8 * 8;
    static constexpr int kConsumerRegs = kConsumerRegsRaw > 232 ? 232 : kConsumerRegsRaw;
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

// Block tile of persistent tile number `tile`: row-major over the tile grid (GROUP 0, as mma18), or in
// groups of GROUP tile rows walked column by column (the blocks running at once cover a squarer patch of C).
template <int GROUP>
__device__ inline void tile_origin(int tile, int tiles_m, int tiles_n, int BM, int BN, int& row0, int& col0) {
    if (GROUP == 0) {
        row0 = (tile / tiles_n) * BM, col0 = (tile % tiles_n) * BN;
    } else {
        const int per_group = GROUP * tiles_n, g = tile / per_group, first = g * GROUP;
        const int rows = tiles_m - first < GROUP ? tiles_m - first : GROUP, in = tile % per_group;
        row0 = (first + in % rows) * BM, col0 = (in / rows) * BN;
    }
}

template <int BM, int BN, int WM, int WN, int STAGES, int MINB, bool DB, bool PF, int GROUP, bool LATE,
          bool FENCE>
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
    const int tiles_n = (N + BN - 1) / BN, tiles_m = (M + BM - 1) / BM, n_tiles = tiles_n * tiles_m;

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
            int row0, col0;
            tile_origin<GROUP>(tile, tiles_m, tiles_n, BM, BN, row0, col0);
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
    setmaxnreg_inc<G::kConsumerRegs>();
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
        int row0, col0;
        tile_origin<GROUP>(tile, tiles_m, tiles_n, BM, BN, row0, col0);
#pragma unroll
        for (int i = 0; i < G::kMI; ++i)
#pragma unroll
            for (int j = 0; j < G::kNJ; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
        // a[b], b[b]: fragment buffer b. Step kk uses buffer kk % 2; with PF, k-tile t+1's step 0 (buffer 0)
        // is loaded during k-tile t's step 3, after waiting for that k-tile's stage.
        uint32_t a[2][G::kMI][4], b[2][G::kNJ / 2][4];
        for (int t = 0; t < k_tiles; ++t, ++it) {
            const int s = it % STAGES;
            const uint32_t as = a_base + s * BM * kBK * 2, ws = w_base + s * BN * kBK * 2;
            if (!PF || t == 0) {
                wait_bounded(&full[s], (unsigned)((it / STAGES) & 1));
                load_frags<G::kMI, G::kNJ / 2>(a[0], b[0], as, ws, a_row, a_hi, w_row, w_hi, 0);
            }
            // Fragments of k16 step kk+1 are loaded (into the other register buffer) before step kk's
            // mma.sync run, so the ldmatrix latency hides behind 32 MMAs; the stage goes back to the producer
            // as soon as its last fragments are in registers.
#pragma unroll
            for (int kk = 0; kk < kBK / 16; ++kk) {
                if (DB && kk + 1 < kBK / 16) {
                    load_frags<G::kMI, G::kNJ / 2>(a[(kk + 1) % 2], b[(kk + 1) % 2], as, ws, a_row, a_hi, w_row, w_hi,
                                                   kk + 1);
                    if (!LATE && kk + 2 == kBK / 16) {
                        if (FENCE) fence_async_smem();  // this lane's ldmatrix reads before the TMA's next writes
                        __syncwarp();
                        if (lane == 0) mbar_arrive(&empty[s]);
                    }
                }
                if (DB && PF && kk + 1 == kBK / 16 && t + 1 < k_tiles) {
                    const int s2 = (it + 1) % STAGES;
                    wait_bounded(&full[s2], (unsigned)(((it + 1) / STAGES) & 1));
                    load_frags<G::kMI, G::kNJ / 2>(a[0], b[0], a_base + s2 * BM * kBK * 2, w_base + s2 * BN * kBK * 2,
                                                   a_row, a_hi, w_row, w_hi, 0);
                }
                if (!DB) {  // one buffer: step kk's fragments just before its MMAs
                    if (kk > 0)
                        load_frags<G::kMI, G::kNJ / 2>(a[kk % 2], b[kk % 2], as, ws, a_row, a_hi, w_row, w_hi, kk);
                    if (!LATE && kk + 1 == kBK / 16) {
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
                // LATE: the stage goes back only after the MMAs that read its last fragments have issued, so every
                // ldmatrix of it has returned its data (an MMA issues only once its source registers are written).
                // Otherwise it goes back right after the last ldmatrix is issued, and the mbarrier arrival is not
                // ordered after that ldmatrix's shared-memory read by anything but its release semantics.
                if (LATE && kk + 1 == kBK / 16) {
                    __syncwarp();
                    if (lane == 0) mbar_arrive(&empty[s]);
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

template <int BM, int BN, int WM, int WN, int STAGES, int MINB, bool DB, bool PF = false, int GROUP = 0,
          bool LATE = false, bool FENCE = false>
void launch(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    using G = Cfg<BM, BN, WM, WN, STAGES, MINB>;
    // cc_sm90a_built() is a synchronous cudaMemcpyFromSymbol: asked once (not inside the timed interval)
    static const bool sm90a = cc_sm90a_built();
    if (M <= 0 || N <= 0 || K <= 0 || K % 8 != 0 || !sm90a) return;
    CUtensorMap map_a, map_w;
    if (!cc_make_tmap_bf16(&map_a, A, M, K, BM) || !cc_make_tmap_bf16(&map_w, W, N, K, BN)) return;
    auto kern = mma_tma_kernel<BM, BN, WM, WN, STAGES, MINB, DB, PF, GROUP, LATE, FENCE>;
    static bool opted_in = false;
    if (!opted_in) {
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmem);
        opted_in = true;
    }
    const long long tiles = (long long)((N + BN - 1) / BN) * ((M + BM - 1) / BM);
    const long long slots = (long long)num_sms() * MINB;
    kern<<<(int)(tiles < slots ? tiles : slots), G::kThreads, G::kSmem>>>(map_a, map_w, C, M, N, K);
}

}  // namespace mma19

void mma_tma_128x256(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<128, 256, 2, 4, 4, 1, true>(A, W, C, M, N, K);
}
void mma_tma_256x128(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<256, 128, 4, 2, 4, 1, true>(A, W, C, M, N, K);
}
void mma_tma_256x128_g8(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<256, 128, 4, 2, 4, 1, true, false, 8>(A, W, C, M, N, K);
}
void mma_tma_256x128_pf(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<256, 128, 4, 2, 4, 1, true, true>(A, W, C, M, N, K);
}
void mma_tma_128x256_late(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<128, 256, 2, 4, 4, 1, true, false, 0, true>(A, W, C, M, N, K);
}
void mma_tma_256x128_late(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<256, 128, 4, 2, 4, 1, true, false, 0, true>(A, W, C, M, N, K);
}
void mma_tma_256x128_fence(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<256, 128, 4, 2, 4, 1, true, false, 0, false, true>(A, W, C, M, N, K);
}
void mma_tma_128x128_x2(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<128, 128, 2, 2, 3, 2, true>(A, W, C, M, N, K);
}
void mma_tma_128x128_x2_pf(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    mma19::launch<128, 128, 2, 2, 3, 2, true, true>(A, W, C, M, N, K);
}

// lessons/05_tensor_cores/bench.py's SMEM_CEILING_SRC kernel (same loop: per k16 step 4 + 4 ldmatrix_x4 and
// 32 mma.sync on a 64 x 64 warp tile, random operands in shared memory), launched with extra dynamic shared
// memory so that at most blocks_per_sm blocks of 4 warps fit on an SM (1, 2 or 3).
__device__ inline int occ_swz(int row, int chunk) { return row * 32 + ((chunk ^ ((row >> 1) & 3)) << 3); }
__global__ void __launch_bounds__(128, 3) mma_smem_ceiling_occ_kernel(const __nv_bfloat16* src, float* out, int iters) {
    __shared__ __align__(128) __nv_bfloat16 a_s[128 * 32], w_s[128 * 32];
    for (int e = threadIdx.x; e < 128 * 32; e += blockDim.x) {
        a_s[e] = src[e];
        w_s[e] = src[128 * 32 + e];
    }
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    float acc[4][8][4] = {};
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int kk = 0; kk < 32; kk += 16) {
            uint32_t a[4][4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                ldmatrix_x4(a[i], a_s + occ_swz(wm * 64 + i * 16 + lane % 16, kk / 8 + lane / 16));
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
                uint32_t b[4];
                ldmatrix_x4(b, w_s + occ_swz(wn * 64 + j * 8 + lane % 8 + 8 * (lane / 16), kk / 8 + (lane / 8) % 2));
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    mma_m16n8k16_bf16(acc[i][j], a[i], b, acc[i][j]);
                    mma_m16n8k16_bf16(acc[i][j + 1], a[i], b + 2, acc[i][j + 1]);
                }
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) s += acc[i][j][0] + acc[i][j][1] + acc[i][j][2] + acc[i][j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the work alive
}
void mma_smem_ceiling_occ(const __nv_bfloat16* src, float* out, int blocks, int iters, int blocks_per_sm) {
    // 228 KB of shared memory per SM, 1 KB reserved per block, 16 KB static: 130 KB extra lets one block fit,
    // 80 KB two, none three
    const int extra = blocks_per_sm == 1 ? 130 * 1024 : blocks_per_sm == 2 ? 80 * 1024 : 0;
    cudaFuncSetAttribute(mma_smem_ceiling_occ_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, extra);
    mma_smem_ceiling_occ_kernel<<<blocks, 128, extra>>>(src, out, iters);
}
