// ====================================================================================================
// Lesson 05, part 3: flash attention forward in bf16 on tensor cores (mma.sync m16n8k16).
//
// O = softmax(scale * Q K^T [+ causal mask]) V for every (batch, head), as lesson 04's attention_flash, but
// with Q, K, V, O in bf16 and both products on tensor cores: S = Q K^T and O += P V are mma.sync, the online
// softmax (row max, rescaling, row sum) stays in fp32 registers. The N x N scores never leave registers.
//
// Versions (callable from Python as m.<name>(...); bf16 tensors for __nv_bfloat16*):
//   flash_attention_bf16   task 5.10  one block of 8 warps per 128 queries of one head; each warp owns 16
//                                     query rows; key/value tiles of 64 double-buffered in shared memory
//                                     (cp.async fills tile i+1 while tile i is computed). 128 queries per
//                                     block, not 64: each K/V tile read from memory serves twice the rows
//                                     (with 64, the blocks of a head read K and V 8 GB from L2 at N = 4096)
// Worked helpers: load_rows / issue_rows (a 64 x D tile of rows into padded shared memory, zeros past N,
// by plain loads or by cp.async), quad_max / quad_sum (the 4 lanes that hold one row of an mma
// accumulator), and the end of the kernel (the final division by the row sum and the bf16 store).
//
// Register layouts used (cc_mma.h, PTX ISA; g = lane / 4, t = lane % 4):
//   S tile n (keys 8n..8n+7): s[n][i] is query row g + 8*(i/2), key 8n + 2t + i%2 (an mma accumulator)
//   P as the A operand of P V, keys 16c..16c+15: a[0] = (s[2c][0], s[2c][1]), a[1] = (s[2c][2], s[2c][3]),
//     a[2] = (s[2c+1][0], s[2c+1][1]), a[3] = (s[2c+1][2], s[2c+1][3]) packed to bf16: the accumulator layout
//     of two n8 tiles is the A layout of one k16 chunk, so P never goes through shared memory.
//   V (keys x d, row-major) is B in the .col sense only after a transpose: ldmatrix_x4_trans gives it.
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("05_tensor_cores")
//   m.flash_attention_bf16(q, k, v, o, B, H, N, d, 1 / d**0.5, causal)      # (B, N, H, d) bf16 tensors
//   make check T=5.10                                                        (graded checks)
// ====================================================================================================

#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>

#include "cc_mma.h"

constexpr int kBQ = 128, kBKV = 64, kAttnThreads = 256;
constexpr float kLog2e = 1.4426950408889634f;

// ----------------------------------------------------------------------------------------------------
// Worked helpers
// ----------------------------------------------------------------------------------------------------

// Rows n0.. (64 of them) of one head of X (B, N, H, D) into x_s[64][D + 8], 16-byte chunks; rows >= N are
// zero. The 8 extra elements per row spread ldmatrix's rows over the banks (as lesson part 2's padding).
template <int D>
__device__ inline void load_rows(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* x_s, int b, int h, int H, int N,
                                 int n0) {
    for (int v = threadIdx.x; v < 64 * D / 8; v += blockDim.x) {
        const int r = v / (D / 8), c = v % (D / 8) * 8;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (n0 + r < N) val = *reinterpret_cast<const uint4*>(X + (((long long)b * N + n0 + r) * H + h) * D + c);
        *reinterpret_cast<uint4*>(x_s + r * (D + 8) + c) = val;
    }
}

// The same tile by cp.async (16-byte chunks, rows past N zero-filled); the caller commits and waits.
template <int D>
__device__ inline void issue_rows(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* x_s, int b, int h, int H, int N,
                                  int n0) {
    for (int v = threadIdx.x; v < 64 * D / 8; v += blockDim.x) {
        const int r = v / (D / 8), c = v % (D / 8) * 8;
        const bool inside = n0 + r < N;
        const __nv_bfloat16* src = inside ? X + (((long long)b * N + n0 + r) * H + h) * D + c : X;
        cp_async_16(x_s + r * (D + 8) + c, src, inside ? 16 : 0);
    }
}

// Max / sum over the 4 lanes (same g) that hold one row of an mma accumulator.
__device__ inline float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ----------------------------------------------------------------------------------------------------
// Task 5.10: flash attention forward, bf16, mma.sync
// ----------------------------------------------------------------------------------------------------

template <int D>
__global__ void __launch_bounds__(kAttnThreads, 2) flash_bf16_kernel(const __nv_bfloat16* __restrict__ q,
                                                                  const __nv_bfloat16* __restrict__ k,
                                                                  const __nv_bfloat16* __restrict__ v,
                                                                  __nv_bfloat16* __restrict__ o, int H, int N,
                                                                  float scale_log2, int causal) {
    __shared__ __align__(128) __nv_bfloat16 k_s[2][kBKV * (D + 8)];  // two buffers: tile i and tile i + 1
    __shared__ __align__(128) __nv_bfloat16 v_s[2][kBKV * (D + 8)];
    // Q's 128 rows are needed only until each warp holds its fragments in registers: they borrow both K
    // buffers (2 x 64 rows, one after the other), which keeps shared memory under the 48 KB of a static array.
    __nv_bfloat16* q_s = k_s[0];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int b = blockIdx.y / H, h = blockIdx.y % H;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kBQ;  // the longest causal rows first
    const int qr0 = q0 + warp * 16;                      // this warp's first query row
    load_rows<D>(q, k_s[0], b, h, H, N, q0);
    load_rows<D>(q, k_s[1], b, h, H, N, q0 + 64);
    __syncthreads();

    float o_acc[D / 8][4] = {};                          // O rows g, g+8; columns 8n + 2t + {0,1}
    float row_max[2] = {-INFINITY, -INFINITY};           // rows g and g+8, in log2 units (scaled)
    float row_sum[2] = {0.0f, 0.0f};
    const int kv_end = causal ? (N < q0 + kBQ ? N : q0 + kBQ) : N;
    // TODO(task 5.10): the Q fragments: qa[D/16][4] by ldmatrix_x4 from q_s + (warp*16 + lane%16) * (D+8) +
    // 16c + 8*(lane/16); __syncthreads (every warp has its Q before the K tiles overwrite q_s). issue_rows K
    // and V of tile 0 into buffer 0, cp_async_commit. Then for each key tile i (kv0 = 64 i < kv_end), with
    // ks = k_s[i % 2], vs = v_s[i % 2]:
    //   1. issue_rows K and V of tile i + 1 (if it exists) into the other buffer; commit (always);
    //      cp_async_wait<1>(); __syncthreads (tile i has landed for every thread).
    //   Causal: a tile whose first key is past the warp's last row (kv0 > qr0 + 15) is all masked for this
    //   warp: skip steps 2-4 (not 1 and 5: the barriers and copies are the whole block's).
    //   2. S: s[8][4] = 0; for c < D/16, for key tiles j = 0, 2, 4, 6: ldmatrix_x4 from ks + (8j + lane%8 +
    //      8*(lane/16)) * (D+8) + 16c + 8*((lane/8)%2), then mma_m16n8k16_bf16(s[j], qa[c], kb, s[j]) and
    //      (s[j+1], qa[c], kb + 2, s[j+1]).
    //   3. scale by scale_log2, and -INFINITY where key kv0 + 8j + 2t + i%2 is >= N or (causal and) greater than
    //      query qr0 + g + 8*(i/2) (only tiles that reach past N or past the warp's first row qr0 need the
    //      test: a warp-uniform flag skips it on all others); new row max (quad_max of the lane's max); alpha = exp2f(old - new); p =
    //      exp2f(s - new); row_sum = row_sum * alpha + quad_sum(sum of the lane's p); o_acc *= alpha (per row).
    //   4. O += P V: for key chunks c < 4: pa = pack_bf16x2 of s[2c], s[2c+1] as in the header comment; for d
    //      tiles n = 0, 2, ... < D/8: ldmatrix_x4_trans from vs + (16c + lane%8 + 8*((lane/8)%2)) * (D+8) +
    //      8n + 8*(lane/16), then mma (o_acc[n], pa, vb, o_acc[n]) and (o_acc[n+1], pa, vb + 2, o_acc[n+1]).
    //   5. __syncthreads: every warp is done with buffer i % 2 before iteration i + 1 refills it.
    // (~50 lines). Hint: a row whose new max is still -INFINITY has no valid key yet: use 0 instead of -inf in
    // the exp2f arguments so that no inf - inf = NaN appears. #pragma unroll every loop over register arrays.

    // Worked: divide by the row sums and store bf16 pairs (rows past N are not stored).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int qrow = qr0 + g + 8 * r;
        if (qrow >= N) continue;
        const float inv = row_sum[r] > 0.0f ? 1.0f / row_sum[r] : 0.0f;
        __nv_bfloat16* orow = o + (((long long)b * N + qrow) * H + h) * D;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<__nv_bfloat162*>(orow + 8 * n + 2 * t) =
                __floats2bfloat162_rn(o_acc[n][2 * r] * inv, o_acc[n][2 * r + 1] * inv);
    }
}

template <int D>
static void launch_flash_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                              int B, int H, int N, float scale, int causal) {
    dim3 grid((N + kBQ - 1) / kBQ, B * H);
    flash_bf16_kernel<D><<<grid, kAttnThreads>>>(q, k, v, o, H, N, scale * kLog2e, causal);
}

// Contract: q, k, v, o hold B * N * H * d bf16 in (B, N, H, d) layout (lesson 04's), 16-byte aligned (any fresh
// tensor is); d in {16, 32, 48, 64} (another d leaves o unwritten); causal is 0 or 1. o = softmax(scale q k^T
// [masked]) v per (batch, head), fp32 inside, rounded to bf16 once.
void flash_attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                          int B, int H, int N, int d, float scale, int causal) {
    if (B <= 0 || H <= 0 || N <= 0) return;
    switch (d) {
        case 16: launch_flash_bf16<16>(q, k, v, o, B, H, N, scale, causal); break;
        case 32: launch_flash_bf16<32>(q, k, v, o, B, H, N, scale, causal); break;
        case 48: launch_flash_bf16<48>(q, k, v, o, B, H, N, scale, causal); break;
        case 64: launch_flash_bf16<64>(q, k, v, o, B, H, N, scale, causal); break;
        default: break;
    }
}
