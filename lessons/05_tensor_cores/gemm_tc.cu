// ====================================================================================================
// Lesson 05, part 2: GEMM on tensor cores. C (M x N, fp32) = A (M x K) * W^T, with W stored N x K
// (row-major, as nn.Linear's weight): 16-bit inputs, fp32 accumulation.
//
// A tensor core multiplies small matrix tiles in one warp-wide instruction: the 32 lanes of a warp together
// hold the tiles in registers ("fragments") and get the product back spread over their registers. Two
// ways to reach them from CUDA C++:
//   WMMA (nvcuda::wmma, <mma.h>, fp16 from sm_70, bf16 from sm_80): 16x16x16 tiles, opaque fragment layout,
//     loaded and stored by the API. Portable and simple; the compiler picks the instructions.
//   mma.sync (PTX, bf16/fp16 m16n8k16 from sm_80): the fragment layout is documented, registers are yours,
//     ldmatrix loads fragments from shared memory, cp.async streams tiles from global to shared memory
//     while the tensor cores work. The helpers in cc_mma.h wrap each PTX instruction in a device function.
//
// Versions (callable from Python as m.<name>(...); fp16/bf16 tensors for __half*/__nv_bfloat16*):
//   wmma_gemm_naive      task 5.3  WMMA, one warp per 16x16 tile of C, tiles staged per warp (fp16)
//   wmma_gemm_tiled      task 5.4  WMMA, 128x128 block tile shared by 8 warps, 64x32 per warp, double-
//                                  buffered shared tiles (fp16)
//   mma_gemm             task 5.5  mma.sync m16n8k16 + ldmatrix, padded shared tiles (bf16), same tiling
//   mma_gemm_pipelined   task 5.6  + XOR-swizzled shared tiles (no padding, no bank conflicts), a 4-stage
//                                  cp.async pipeline, 3 blocks per SM and float2 stores of C (bf16);
//                                  K % 8 != 0 falls back to mma_gemm
// Worked helpers: store_acc_tile (a WMMA accumulator to C, through shared memory where bounds need checks),
// fetch_tile / put_tile (task 5.4: a tile's 16-byte chunks global -> registers -> padded shared memory),
// load_tile (task 5.5: a tile of rows into padded shared memory, 16-byte vectors or zero-filled scalars),
// swizzle, issue_tile and store_warp_tile (task 5.6: the XOR swizzle, the cp.async copies of a tile, the
// accumulators to C).
// Sizes: any M, N, K >= 1. Rows and columns outside the matrices are staged as zeros and never stored.
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("05_tensor_cores"); m.mma_gemm(a, w, c, M, N, K)
//   make check T=5.3                    (or T=5.4, T=5.5, T=5.6)   (graded checks)
//   make bench LESSONS=05_tensor_cores                              (timings, GPU only)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <cstdint>

#include "cc_mma.h"

using namespace nvcuda;

// ----------------------------------------------------------------------------------------------------
// Worked helpers
// ----------------------------------------------------------------------------------------------------

// One warp stores a 16x16 fp32 accumulator at rows row0.., columns col0.. of C (M x N), skipping what
// lies outside. store_matrix_sync needs a 32-byte aligned pointer and ldm % 4 == 0 (floats): a tile wholly
// inside C whose first element C + row0 * N + col0 is 32-byte aligned (N % 8 == 0 and an aligned C, for
// col0 a multiple of 16) goes straight to C. Any other tile goes to the warp's 16x16 shared `stage`
// first, then each lane copies 8 elements out with a bounds test.
__device__ inline void store_acc_tile(const wmma::fragment<wmma::accumulator, 16, 16, 16, float>& acc, float* stage,
                                      float* C, int M, int N, int row0, int col0) {
    const int lane = threadIdx.x & 31;
    float* direct = C + (long long)row0 * N + col0;
    if (row0 + 16 <= M && col0 + 16 <= N && N % 4 == 0 && reinterpret_cast<uintptr_t>(direct) % 32 == 0) {
        wmma::store_matrix_sync(direct, acc, N, wmma::mem_row_major);  // the same for every lane: no divergence
        return;
    }
    wmma::store_matrix_sync(stage, acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
        const int r = row0 + e / 16, c = col0 + e % 16;
        if (r < M && c < N) C[(long long)r * N + c] = stage[e];
    }
    __syncwarp();  // the stage is reused by the next tile
}

// ----------------------------------------------------------------------------------------------------
// Task 5.3: WMMA, one warp per 16x16 tile of C
// ----------------------------------------------------------------------------------------------------
// 4 warps per block (2 x 2 tiles: 32 x 32 of C). For each k-step of 16, the warp copies its 16x16 tile of A
// (rows row0.., columns k..) and of W (rows col0.., columns k..) into its own shared tiles, zero outside
// the matrices, then multiplies them. Staging is needed anyway: load_matrix_sync wants a 32-byte aligned
// pointer and a stride that is a multiple of 8 halves, which a row of A with any K is not.
// W stored N x K row-major is W^T (K x N) in column-major order: a col_major matrix_b fragment with ldm 16.

constexpr int kNaiveWarps = 4;

__global__ void wmma_gemm_naive_kernel(const __half* __restrict__ A, const __half* __restrict__ W, float* __restrict__ C,
                                       int M, int N, int K) {
    __shared__ __align__(32) __half a_s[kNaiveWarps][16 * 16];
    __shared__ __align__(32) __half w_s[kNaiveWarps][16 * 16];
    __shared__ __align__(32) float stage[kNaiveWarps][16 * 16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row0 = (blockIdx.y * 2 + warp / 2) * 16, col0 = (blockIdx.x * 2 + warp % 2) * 16;
    // TODO(task 5.3): a fragment for A (matrix_a, row_major), for W (matrix_b, col_major) and an fp32
    // accumulator filled with 0; for k0 = 0, 16, ... < K: each lane copies elements e = lane, lane + 32, ...
    // < 256 of the two tiles (a_s[warp][e] = A[row0 + e/16][k0 + e%16], w_s[warp][e] = W[col0 + e/16][k0 + e%16],
    // zero when outside M, N or K), __syncwarp, load both fragments (ldm 16), mma_sync, __syncwarp; finally
    // store_acc_tile(acc, stage[warp], C, M, N, row0, col0) (~20 lines).
    // Hint: the warp must not refill a_s before every lane has loaded its fragment: that is the second __syncwarp.
}

// Contract: A is M x K, W is N x K (fp16, row-major), C is M x N fp32: C = A W^T. Any M, N, K >= 1.
void wmma_gemm_naive(const __half* A, const __half* W, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    dim3 grid((N + 31) / 32, (M + 31) / 32);
    wmma_gemm_naive_kernel<<<grid, 32 * kNaiveWarps>>>(A, W, C, M, N, K > 0 ? K : 0);
}

// ----------------------------------------------------------------------------------------------------
// Task 5.4: WMMA with a 128x128 block tile in shared memory, double-buffered
// ----------------------------------------------------------------------------------------------------
// 8 warps (2 along M x 4 along N); warp (wm, wn) owns the 64 x 32 sub-tile at rows 64*wm.., columns
// 32*wn..: 4 x 2 fragments of 16x16 (8 accumulators, 64 floats per lane). Per k-step of 32 the block
// stages A's 128 x 32 tile and W's 128 x 32 tile in shared memory (rows padded to 40 halves: a multiple
// of 8, and the padding spreads the rows over the banks); per k16 step a warp loads 2 W fragments and 4
// A fragments and issues 8 mma_syncs, where the naive kernel loaded two fragments for each mma_sync.
// Two buffers of each tile (double buffering, as lesson 03's sgemm_v7): while the warps multiply out of
// one, the next k-tile is already on its way from global memory into registers (fetch_tile), and is
// written to the other buffer (put_tile) after the multiplications. One __syncthreads per k-step, and the
// global-memory latency hides behind the MMAs. 256 threads of at most 128 registers and 48 KB of shared
// memory per block: 2 blocks (16 warps) per SM.

constexpr int kTB = 128, kTK = 32, kTPad = 40, kThreads = 128;  // kThreads: tasks 5.5 and 5.6
constexpr int kWThreads = 256;                                  // task 5.4: 8 warps
constexpr int kWChunks = kTB * kTK / 8 / kWThreads;             // 16-byte chunks of a tile per thread: 2

// This thread's chunks of a 128 x 32 tile of X (rows r0.. of `rows`, columns k0.. of K), into registers:
// chunk v = threadIdx.x + i * kWThreads is row v / 4, columns 8 * (v % 4) .. + 7. Vec (K % 8 == 0 and
// X 16-byte aligned): one 16-byte load, the chunk wholly inside or wholly outside; else 8 guarded scalar
// loads. Zeros outside. Worked.
template <bool Vec>
__device__ inline void fetch_tile(const __half* __restrict__ X, uint4 (&r)[kWChunks], int rows, int K, int r0, int k0) {
#pragma unroll
    for (int i = 0; i < kWChunks; ++i) {
        const int v = threadIdx.x + i * kWThreads, row = r0 + v / (kTK / 8), col = k0 + v % (kTK / 8) * 8;
        const __half* src = X + (long long)row * K + col;
        if (Vec) {
            r[i] = (row < rows && col < K) ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
        } else {
            unsigned short h[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) h[e] = (row < rows && col + e < K) ? __half_as_ushort(src[e]) : 0;
            r[i] = make_uint4(h[0] | (unsigned)h[1] << 16, h[2] | (unsigned)h[3] << 16, h[4] | (unsigned)h[5] << 16,
                              h[6] | (unsigned)h[7] << 16);
        }
    }
}

// ... and from registers into the padded shared tile x_s[128][kTPad] (one 16-byte store per chunk). Worked.
__device__ inline void put_tile(__half* x_s, const uint4 (&r)[kWChunks]) {
#pragma unroll
    for (int i = 0; i < kWChunks; ++i) {
        const int v = threadIdx.x + i * kWThreads;
        *reinterpret_cast<uint4*>(x_s + v / (kTK / 8) * kTPad + v % (kTK / 8) * 8) = r[i];
    }
}

template <bool Vec>
__global__ void __launch_bounds__(kWThreads, 2) wmma_gemm_tiled_kernel(const __half* __restrict__ A,
                                                                   const __half* __restrict__ W,
                                                                   float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(128) __half a_s[2][kTB * kTPad];
    __shared__ __align__(128) __half w_s[2][kTB * kTPad];
    __shared__ __align__(32) float stage[kWThreads / 32][16 * 16];
    const int warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
    const int row0 = blockIdx.y * kTB, col0 = blockIdx.x * kTB;
    const int n_tiles = (K + kTK - 1) / kTK;
    uint4 ra[kWChunks], rw[kWChunks];  // the next k-tile of A and of W, on its way to shared memory
    // TODO(task 5.4): acc[4][2] accumulators filled with 0. Prologue: fetch_tile<Vec> k-tile 0 of A (rows
    // row0.., M rows) into ra and of W (rows col0.., N rows) into rw, put_tile them into buffer 0,
    // __syncthreads. For t = 0 .. n_tiles - 1, on buffer cur = t % 2: if a k-tile t + 1 exists, fetch_tile it
    // (k0 = (t + 1) * kTK) into ra and rw first; then for kk = 0, 16: load the 2 W fragments (w_s[cur] +
    // (wn*32 + j*16) * kTPad + kk, col_major, ldm kTPad) and, for each of the 4 A fragments (a_s[cur] +
    // (wm*64 + i*16) * kTPad + kk, row_major), 2 mma_syncs; then put_tile ra and rw into buffer 1 - cur
    // (when fetched) and __syncthreads. Finally store_acc_tile each acc[i][j] (stage[warp]) at rows row0 +
    // wm*64 + i*16, columns col0 + wn*32 + j*16 (~35 lines).
    // Hint: buffer 1 - cur was last read in iteration t - 1, which ended with the barrier, so writing it
    // needs no second __syncthreads; the barrier at the end of iteration t makes it complete for t + 1.
}

// Contract: as wmma_gemm_naive.
void wmma_gemm_tiled(const __half* A, const __half* W, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    if (K < 0) K = 0;
    const bool vec = K % 8 == 0 && (reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(W)) % 16 == 0;
    dim3 grid((N + kTB - 1) / kTB, (M + kTB - 1) / kTB);
    if (vec)
        wmma_gemm_tiled_kernel<true><<<grid, kWThreads>>>(A, W, C, M, N, K);
    else
        wmma_gemm_tiled_kernel<false><<<grid, kWThreads>>>(A, W, C, M, N, K);
}

// ----------------------------------------------------------------------------------------------------
// Task 5.5: mma.sync m16n8k16 with ldmatrix
// ----------------------------------------------------------------------------------------------------
// The block's threads copy a 128 x 32 tile of X (rows r0.. of `rows`, columns k0.. of K) into
// x_s[128][kTPad]: 16-byte vectors (8 halves) when the row stride allows it, else element by element;
// zeros outside. Worked (used by task 5.5).
template <class T>
__device__ inline void load_tile(const T* __restrict__ X, T* x_s, int rows, int K, int r0, int k0, bool vec) {
    const T zero = T(0.0f);
    if (vec) {  // K % 8 == 0 and X 16-byte aligned: a chunk of 8 is wholly inside or wholly outside
        for (int v = threadIdx.x; v < kTB * kTK / 8; v += blockDim.x) {
            const int r = v / (kTK / 8), c = v % (kTK / 8) * 8;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (r0 + r < rows && k0 + c < K) val = *reinterpret_cast<const uint4*>(X + (long long)(r0 + r) * K + k0 + c);
            *reinterpret_cast<uint4*>(x_s + r * kTPad + c) = val;
        }
    } else {
        for (int e = threadIdx.x; e < kTB * kTK; e += blockDim.x) {
            const int r = e / kTK, c = e % kTK;
            x_s[r * kTPad + c] = (r0 + r < rows && k0 + c < K) ? X[(long long)(r0 + r) * K + k0 + c] : zero;
        }
    }
}

// A 128x128 block tile, 4 warps of 64 x 64, k-steps of 32 staged (single-buffered) in padded shared tiles
// (load_tile above). Per k16 step a warp loads its A fragments with ldmatrix_x4 (one per 16 rows) and its
// W fragments with ldmatrix_x4 (two n8 tiles per call), then issues 4 x 8 mma_m16n8k16_bf16. The accumulators (32 tiles of 16x8, 4 floats
// each: 128 registers per lane) are stored straight from the documented layout: value i of
// tile (mi, ni) is row g + 8*(i/2), column 2t + i%2 of that tile (g = lane/4, t = lane%4).
// ldmatrix rows: for A, lane l points at row l%16, column 8*(l/16) of the 16x16 block (matrices: rows 0-7 /
// 8-15 x columns 0-7 / 8-15, in the order a[0..3] needs); for W, lane l points at row (l%8) + 8*(l/16),
// column 8*((l/8)%2): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15), which are
// b[0], b[1] of the first n8 tile and b[0], b[1] of the second. The 80-byte row pitch makes the 8 rows of
// each ldmatrix matrix fall in 8 different groups of 4 banks.

__global__ void __launch_bounds__(kThreads) mma_gemm_kernel(const __nv_bfloat16* __restrict__ A,
                                                       const __nv_bfloat16* __restrict__ W, float* __restrict__ C,
                                                       int M, int N, int K, int vec) {
    __shared__ __align__(128) __nv_bfloat16 a_s[kTB * kTPad];
    __shared__ __align__(128) __nv_bfloat16 w_s[kTB * kTPad];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    const int row0 = blockIdx.y * kTB, col0 = blockIdx.x * kTB;
    float acc[4][8][4] = {};
    // TODO(task 5.5): for k0 = 0, 32, ... < K: load_tile A and W (above), __syncthreads; for kk = 0, 16:
    // a[i][4] by ldmatrix_x4 from a_s + (wm*64 + i*16 + lane%16) * kTPad + kk + 8*(lane/16) (i = 0..3);
    // for each pair of n8 tiles j = 0, 2, 4, 6: b[4] by ldmatrix_x4 from w_s + (wn*64 + j*8 + lane%8 +
    // 8*(lane/16)) * kTPad + kk + 8*((lane/8)%2), then mma_m16n8k16_bf16(acc[i][j], a[i], b, acc[i][j]) and
    // (acc[i][j+1], a[i], b + 2) for every i; __syncthreads. Then store acc[i][j][v] at row row0 + wm*64 + i*16 +
    // lane/4 + 8*(v/2), column col0 + wn*64 + j*8 + 2*(lane%4) + v%2, when inside C (~30 lines).
    // Hint: the B registers of one n8 tile are consecutive (b, then b + 2 for the next tile); put #pragma unroll
    // on the loops over i, j, v (and kk) so that acc is indexed by constants and stays in registers.
}

// Contract: A is M x K, W is N x K (bf16, row-major), C is M x N fp32: C = A W^T. Any M, N, K >= 1.
void mma_gemm(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    const bool vec = K % 8 == 0 && (reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(W)) % 16 == 0;
    dim3 grid((N + kTB - 1) / kTB, (M + kTB - 1) / kTB);
    mma_gemm_kernel<<<grid, kThreads>>>(A, W, C, M, N, K > 0 ? K : 0, vec ? 1 : 0);
}

// ----------------------------------------------------------------------------------------------------
// Task 5.6: swizzled shared memory and a 4-stage cp.async pipeline
// ----------------------------------------------------------------------------------------------------
// Rows of the k-tile are 32 bf16 = 64 bytes = four 16-byte chunks, stored without padding. Read as is, the
// 8 rows of an ldmatrix matrix (same chunk of 8 consecutive rows) would fall on only 2 distinct groups of
// banks (64-byte rows: two rows per 128-byte bank line): a 4-way conflict. Storing chunk c of row r at chunk
// c ^ ((r / 2) % 4) spreads them over all 8 groups, with no padding; writer and reader use the same swizzle.
// The pipeline: while the tensor cores work on stage s, cp.async is already filling stages s+1 .. s+3.
// Each thread issues the copies of its chunks, commits one group per stage, and cp_async_wait<kStages - 2>
// before a stage is read guarantees that the stage's own group has landed (then __syncthreads makes every
// thread's copies visible to all).
// 64 KB of shared memory and at most 168 registers per thread (__launch_bounds__(kThreads, 3)): 3 blocks,
// 12 warps, per SM. Of the other shapes measured on the H100 (benchmarks/mma_sweep.py;
// results/nvidia-h100-80gb-hbm3/mma17/): 128x256 and 256x128 block tiles, k-tiles of 64 in 3 stages, register
// double buffering of the fragments, an L2 block swizzle: none ran more than 5% faster than this one.

constexpr int kStages = 4;
constexpr int kTileElems = kTB * kTK;  // one 128 x 32 tile, no padding

// Offset (in elements) of chunk `chunk` (0..3, 8 elements each) of row `row` in a swizzled tile. Worked.
__device__ inline int swizzle(int row, int chunk) { return row * kTK + ((chunk ^ ((row >> 1) & 3)) << 3); }

// Issue the cp.async copies of one 128 x 32 tile (rows r0.. of `rows`) into a swizzled tile: 4 chunks per
// thread. Chunks outside the matrix copy 0 bytes and are zero-filled. "unroll 1": unrolled, the kernel
// needs more than the 168 registers of 3 blocks per SM and spills (nvcc 13.0, -Xptxas -v). Worked.
__device__ inline void issue_tile(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* x_s, int rows, int K, int r0, int k0) {
#pragma unroll 1
    for (int v = threadIdx.x; v < kTB * kTK / 8; v += kThreads) {
        const int r = v / (kTK / 8), ch = v % (kTK / 8);
        const bool inside = r0 + r < rows && k0 + ch * 8 < K;
        const __nv_bfloat16* src = inside ? X + (long long)(r0 + r) * K + k0 + ch * 8 : X;
        cp_async_16(x_s + swizzle(r, ch), src, inside ? 16 : 0);
    }
}

// Store the accumulators of a 64 x 64 warp tile at rows r0.., columns c0.. of C (M x N): values 0, 1 of
// tile (i, j) are two neighbouring columns, so when `pairs` (N even, C 8-byte aligned) they go out as one
// 8-byte float2 store; else one float at a time. Nothing outside C is written. Worked.
__device__ inline void store_warp_tile(const float (&acc)[4][8][4], float* __restrict__ C, int M, int N, int r0, int c0,
                                       bool pairs) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {  // h = 0: values 0, 1 (row g); h = 1: values 2, 3 (row g + 8)
                const int r = r0 + i * 16 + lane / 4 + 8 * h, c = c0 + j * 8 + 2 * (lane % 4);
                if (r >= M) continue;
                float* dst = C + (long long)r * N + c;
                if (pairs && c + 1 < N) {
                    *reinterpret_cast<float2*>(dst) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                } else {
                    if (c < N) dst[0] = acc[i][j][2 * h];
                    if (c + 1 < N) dst[1] = acc[i][j][2 * h + 1];
                }
            }
}

__global__ void __launch_bounds__(kThreads, 3) mma_gemm_pipelined_kernel(const __nv_bfloat16* __restrict__ A,
                                                                    const __nv_bfloat16* __restrict__ W,
                                                                    float* __restrict__ C, int M, int N, int K,
                                                                    int pairs) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16* a_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // kStages tiles of A, then kStages of W
    __nv_bfloat16* w_s = a_s + kStages * kTileElems;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    const int row0 = blockIdx.y * kTB, col0 = blockIdx.x * kTB;
    const int n_tiles = (K + kTK - 1) / kTK;
    float acc[4][8][4] = {};
    // TODO(task 5.6): prologue: for s < kStages - 1, issue_tile A and W of k-tile s into stage s (when s <
    // n_tiles) and cp_async_commit (always: empty groups keep the count right). Main loop over t < n_tiles:
    // cp_async_wait<kStages - 2>(), __syncthreads(); issue k-tile t + kStages - 1 into stage (t + kStages - 1)
    // % kStages (when it exists) and commit; compute on stage t % kStages exactly as task 5.5 but with the
    // swizzled addresses: A row (wm*64 + i*16 + lane%16), chunk kk/8 + lane/16; W row (wn*64 + j*8 +
    // lane%8 + 8*(lane/16)), chunk kk/8 + (lane/8)%2. After the loop, cp_async_wait<0>() and
    // store_warp_tile(acc, C, M, N, row0 + wm*64, col0 + wn*64, pairs != 0) (~30 lines).
    // Hint: the stage being filled in iteration t is the one computed in iteration t - 1; the __syncthreads
    // after the wait is what makes overwriting it safe.
}

// Contract: as mma_gemm. cp.async moves 16-byte chunks, so rows must start 16-byte aligned: K % 8 == 0 and
// 16-byte aligned A and W. Other shapes fall back to mma_gemm (same result, no pipeline).
void mma_gemm_pipelined(const __nv_bfloat16* A, const __nv_bfloat16* W, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || K % 8 != 0 || (reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(W)) % 16 != 0) {
        mma_gemm(A, W, C, M, N, K);
        return;
    }
    const int smem = 2 * kStages * kTileElems * (int)sizeof(__nv_bfloat16);  // 64 KB: above the default 48 KB
    static bool opted_in = false;  // the opt-in is per kernel: once per process is enough
    if (!opted_in) {
        cudaFuncSetAttribute(mma_gemm_pipelined_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        opted_in = true;
    }
    const int pairs = N % 2 == 0 && reinterpret_cast<uintptr_t>(C) % 8 == 0;  // float2 stores line up
    dim3 grid((N + kTB - 1) / kTB, (M + kTB - 1) / kTB);
    mma_gemm_pipelined_kernel<<<grid, kThreads, smem>>>(A, W, C, M, N, K, pairs ? 1 : 0);
}
