// ====================================================================================================
// Lesson 04, part 3: attention, O = softmax(scale * Q K^T [+ causal mask]) V, fp32.
//
// Q, K, V and O are (B, N, H, d) row-major, token-major like FlashAttention's own API: the element
// (b, n, h, c) is at ((b * N + n) * H + h) * d + c, so the (B * N, H * d) output of a projection GEMM
// is already in place. Causal: query i sees keys j <= i only.
//
// Versions (each launcher below is callable from Python as m.<name>(...), tensors for pointers):
//   attention_naive      task 4.7 three kernels: S = scale Q K^T to a (B*H, N, N) buffer, a row softmax
//                                 of S in place (worked), O = P V. Reads and writes N x N floats per head.
//   attention_online_v1  worked   one thread per query row, online softmax in registers, K and V read
//                                 straight from global memory. Nothing N x N, but no data reuse.
//   attention_flash      task 4.8 a block of queries per CTA, K/V tiles in shared memory, every thread
//                                 holds an 8 x 4 tile of scores and an 8 x d/8 tile of O in registers
//                                 (4 rows when d > 64), online softmax across tiles.
//                                 Head dims d in {16, 32, 48, 64, 80, 96}.
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("04_transformer")
//   m.attention_flash(q, k, v, o, B, H, N, d, 1 / d**0.5, 1)
//   make check T=4.7         (or T=4.8)
// ====================================================================================================

#include <cmath>
#include <cstdint>

constexpr float kLog2e = 1.4426950408889634f;

// ----------------------------------------------------------------------------------------------------
// Task 4.7: attention_naive, three kernels
// ----------------------------------------------------------------------------------------------------

// S[bh, i, j] = scale * sum_c Q[b, i, h, c] * K[b, j, h, c], or -inf when causal and j > i.
// Grid: (ceil(N / 16), ceil(N / 16), B * H) blocks of 16 x 16 threads; thread (x, y) of a block
// handles j = blockIdx.x * 16 + x and i = blockIdx.y * 16 + y, head bh = blockIdx.z.
__global__ void attn_scores_kernel(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ s,
                                   int H, int N, int d, float scale, int causal) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    const int bh = blockIdx.z, b = bh / H, h = bh % H;
    // TODO(task 4.7, part 1 of 2): if i < N and j < N, write s[(bh * N + i) * N + j]: -INFINITY when
    // causal and j > i, else scale times the dot product of query row i and key row j of head (b, h)
    // (~9 lines). Hint: row n of head (b, h) starts at ((b * N + n) * H + h) * d; use size_t offsets.
}

// Worked example: the row softmax of S, in place, one warp per row (norms.cu, softmax_v2, in three
// passes). A row's -inf entries (masked keys) get probability 0.
__global__ void attn_softmax_kernel(float* __restrict__ s, int rows, int N) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    float* sr = s + (size_t)row * N;
    float m = -INFINITY;
    for (int j = lane; j < N; j += 32) m = fmaxf(m, sr[j]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int j = lane; j < N; j += 32) sum += expf(sr[j] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = 1.0f / sum;
    for (int j = lane; j < N; j += 32) sr[j] = expf(sr[j] - m) * inv;
}

// O[b, i, h, c] = sum_j P[bh, i, j] * V[b, j, h, c].
// Grid: (ceil(d / 32), ceil(N / 8), B * H) blocks of 32 x 8 threads: c = blockIdx.x * 32 + x,
// i = blockIdx.y * 8 + y, bh = blockIdx.z.
__global__ void attn_pv_kernel(const float* __restrict__ p, const float* __restrict__ v, float* __restrict__ o,
                               int H, int N, int d) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    const int bh = blockIdx.z, b = bh / H, h = bh % H;
    // TODO(task 4.7, part 2 of 2): if i < N and c < d, sum p[(bh * N + i) * N + j] * V[b, j, h, c] over
    // all keys j and write it to O[b, i, h, c] (~7 lines). Hint: V[b, j, h, c] is
    // v[((b * N + j) * H + h) * d + c]; consecutive threads take consecutive c: coalesced reads of V.
}

// Contract: q, k, v, o hold B * N * H * d floats in (B, N, H, d) layout; s holds B * H * N * N floats
// (scratch: it ends up holding the probabilities P); causal is 0 or 1. q, k, v are not modified.
void attention_naive(const float* q, const float* k, const float* v, float* s, float* o, int B, int H, int N,
                     int d, float scale, int causal) {
    if (B == 0 || H == 0 || N == 0 || d == 0) return;
    const int bh = B * H;
    attn_scores_kernel<<<dim3((N + 15) / 16, (N + 15) / 16, bh), dim3(16, 16)>>>(q, k, s, H, N, d, scale, causal);
    attn_softmax_kernel<<<(bh * N + 7) / 8, 256>>>(s, bh * N, N);
    attn_pv_kernel<<<dim3((d + 31) / 32, (N + 7) / 8, bh), dim3(32, 8)>>>(s, v, o, H, N, d);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: attention_online_v1, one thread per query row, online softmax
// ----------------------------------------------------------------------------------------------------
// For each key j in order: s = scale * q.k_j; m' = max(m, s); the old sum and the old output row are
// rescaled by exp(m - m') and the new key adds exp(s - m') to the sum and exp(s - m') * v_j to the row.
// At the end O = acc / sum. This is softmax(S) V computed in one sweep, never storing a row of S.

constexpr int kMaxHeadDim = 128;

__global__ void attention_online_v1_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                           const float* __restrict__ v, float* __restrict__ o, int H, int N,
                                           int d, float scale, int causal) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    if (i >= N) return;
    const size_t tok = (size_t)H * d;
    const float* qi = q + ((size_t)(b * N + i) * H + h) * d;
    const float* k0 = k + ((size_t)b * N * H + h) * d;  // key 0 of this head; key j is at k0 + j * tok
    const float* v0 = v + ((size_t)b * N * H + h) * d;
    float acc[kMaxHeadDim];
    for (int c = 0; c < d; ++c) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int n_keys = causal ? i + 1 : N;
    for (int j = 0; j < n_keys; ++j) {
        float s = 0.0f;
        for (int c = 0; c < d; ++c) s = fmaf(qi[c], k0[j * tok + c], s);
        s *= scale;
        const float m_new = fmaxf(m, s);
        const float alpha = expf(m - m_new);  // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l * alpha + p;
        for (int c = 0; c < d; ++c) acc[c] = acc[c] * alpha + p * v0[j * tok + c];
        m = m_new;
    }
    float* oi = o + ((size_t)(b * N + i) * H + h) * d;
    for (int c = 0; c < d; ++c) oi[c] = acc[c] / l;
}

// Contract: as attention_naive without s; d <= 128 (larger d leaves o unwritten).
void attention_online_v1(const float* q, const float* k, const float* v, float* o, int B, int H, int N, int d,
                         float scale, int causal) {
    if (B == 0 || H == 0 || N == 0 || d == 0 || d > kMaxHeadDim) return;
    attention_online_v1_kernel<<<dim3((N + 63) / 64, B * H), 64>>>(q, k, v, o, H, N, d, scale, causal);
}

// ----------------------------------------------------------------------------------------------------
// Task 4.8: attention_flash, tiled, online softmax in registers
// ----------------------------------------------------------------------------------------------------
// A CTA owns BQ queries of one head and has NT = 8 * BQ / RPT threads. Thread t works on the RPT query
// rows RPT * rg .. RPT * rg + RPT - 1 with rg = t / 8, and:
//   - for scores, the 4 keys 4 * cg .. 4 * cg + 3 of the current 32-key tile, cg = t % 8;
//   - for the output, d / 8 of the d columns (see out_col below).
// So the 8 threads of a row group (8 neighbouring lanes of one warp) share their rows: a row's max and
// sum are reduced over those 8 lanes with __shfl_xor_sync(..., 1), (..., 2), (..., 4).
// d <= 64: RPT = 8 rows per thread, BQ = 128 queries, 128 threads (an 8 x 4 tile of scores and 8 x d/8 of O
// per thread: 3 shared loads per 32 FMAs, against 2 per 16 with 4 rows; 1.2x faster on an H100, see
// results/nvidia-h100-80gb-hbm3/flash21/). d = 80, 96: RPT = 4, BQ = 64, 128 threads (8 rows would
// need more than 255 registers).
//
// Shared memory, as float offsets into one dynamic array (float4-aligned; over 48 KB at BQ = 128, d = 64,
// hence the cudaFuncSetAttribute opt-in in launch_flash):
//   Qt[c][r]  the Q tile, transposed, pre-multiplied by scale * log2(e)   d x (BQ + 4)
//   Kt[c][j]  the K tile, transposed                                      d x (BK + 4)
//   Vs[j][c]  the V tile                                                  BK x d
//   Pt[j][r]  probabilities of the tile, transposed                       BK x (BQ + 4)
// Transposed so that a thread's 4 rows (or 4 keys) at one c are one float4 load. The + 4 padding shifts
// each row by 4 banks. Scores are kept in log2 units (exp2f(s - m) == expf(s' - m') for s = s' log2 e),
// which saves a multiply per exp.
//
// One iteration per key tile, three barriers:
//   (A) the tile is in shared memory  ->  scores, online softmax, P to shared memory
//   (B) P is in shared memory          ->  O += P V
//   (C) everyone is done with Kt, Vs, Pt  ->  the next tile may overwrite them
// The next tile's K and V are loaded into registers right after (A), so the global loads are in
// flight while this tile's math runs.

constexpr int kBK = 32;   // keys per tile
constexpr int kPad = 4;   // floats of padding per shared row

template <int D, int BQ, int RPT>
struct FlashCfg {
    static constexpr int NT = 8 * BQ / RPT;           // threads per CTA
    static constexpr int QS = BQ + kPad;              // row stride of Qt and Pt
    static constexpr int KS = kBK + kPad;             // row stride of Kt
    static constexpr int DPT = D / 8;                 // output columns per thread
    static constexpr int LPT = kBK * D / 4 / NT;      // float4s of K (and of V) each thread loads per tile
    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + D * QS;
    static constexpr int V_OFF = K_OFF + D * KS;
    static constexpr int P_OFF = V_OFF + kBK * D;
    static constexpr int FLOATS = P_OFF + kBK * QS;
    static_assert(RPT % 4 == 0 && D % 8 == 0 && (D / 4) % 2 == 0, "unsupported head dim or rows per thread");
    static_assert(kBK * D / 4 % NT == 0, "tile load must split evenly");
};

// Output column of a thread's kk-th output value (kk < D / 8), for thread column group cg.
// When d is a multiple of 32, columns come in float4 groups: 4 cg + 32 (kk / 4) + kk % 4, so a warp's
// loads of a V row are 8 distinct float4s; otherwise they are strided: cg + 8 kk.
template <int D>
__device__ inline int out_col(int cg, int kk) {
    if constexpr (D % 32 == 0) return 4 * cg + 32 * (kk / 4) + kk % 4;
    else return cg + 8 * kk;
}

// Which float4 of the K tile is a thread's e-th (e = t + NT * l): key j, columns c4 .. c4 + 3. Two
// neighbouring lanes take the two halves of a 32-byte sector of one key row, 8 lanes take 8 keys: the
// transposed stores Kt[c4 + i][j] of a warp then fall in 16 banks (2-way conflicts). The plain row order
// (j = e / (D / 4), which V uses) puts a warp's 16 lanes of one key on 2 banks: 8-way conflicts.
template <int D>
__device__ inline void k_tile_index(int e, int& j, int& c4) {
    constexpr int HALF = D / 8;  // (D / 4) / 2 sector pairs per key row
    const int hi = e >> 4;
    c4 = 4 * ((e & 1) | ((hi % HALF) << 1));
    j = ((e >> 1) & 7) + 8 * (hi / HALF);
}

// Load tile rows [k0, k0 + BK) of K and V (zeros past N) into registers: float4 number e = t + NT * l.
template <int D, int BQ, int RPT>
__device__ inline void kv_tile_load(float4* kr, float4* vr, const float* kb, const float* vb, size_t tok, int k0,
                                    int N, int tid) {
    using C = FlashCfg<D, BQ, RPT>;
#pragma unroll
    for (int l = 0; l < C::LPT; ++l) {
        const int e = tid + C::NT * l, jv = e / (D / 4), cv = (e % (D / 4)) * 4;
        int j, c4;
        k_tile_index<D>(e, j, c4);
        kr[l] = k0 + j < N ? *reinterpret_cast<const float4*>(kb + (size_t)(k0 + j) * tok + c4)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        vr[l] = k0 + jv < N ? *reinterpret_cast<const float4*>(vb + (size_t)(k0 + jv) * tok + cv)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// Store the registers of kv_tile_load into Kt (transposed) and Vs.
template <int D, int BQ, int RPT>
__device__ inline void kv_tile_store(const float4* kr, const float4* vr, float* smem, int tid) {
    using C = FlashCfg<D, BQ, RPT>;
    float* Kt = smem + C::K_OFF;
    float* Vs = smem + C::V_OFF;
#pragma unroll
    for (int l = 0; l < C::LPT; ++l) {
        const int e = tid + C::NT * l, jv = e / (D / 4), cv = (e % (D / 4)) * 4;
        int j, c4;
        k_tile_index<D>(e, j, c4);
        Kt[(c4 + 0) * C::KS + j] = kr[l].x;
        Kt[(c4 + 1) * C::KS + j] = kr[l].y;
        Kt[(c4 + 2) * C::KS + j] = kr[l].z;
        Kt[(c4 + 3) * C::KS + j] = kr[l].w;
        *reinterpret_cast<float4*>(Vs + jv * D + cv) = vr[l];
    }
}

template <int D, int BQ, int RPT>
__global__ void __launch_bounds__(8 * BQ / RPT)
attention_flash_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                       float* __restrict__ o, int H, int N, float scale_log2, int causal) {
    using C = FlashCfg<D, BQ, RPT>;
    extern __shared__ float4 smem4[];  // C::FLOATS floats (launch_flash passes the size)
    float* smem = reinterpret_cast<float*>(smem4);
    float* Qt = smem + C::Q_OFF;
    float* Kt = smem + C::K_OFF;
    float* Vs = smem + C::V_OFF;
    float* Pt = smem + C::P_OFF;

    const int tid = threadIdx.x, rg = tid / 8, cg = tid % 8;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;  // last query blocks first: with a causal mask
                                                       // they have the most work
    const size_t tok = (size_t)H * D;                  // floats from one token to the next
    const size_t head0 = ((size_t)b * N * H + h) * D;  // token 0 of head (b, h)
    const float* kb = k + head0;
    const float* vb = v + head0;

    // The Q tile, transposed and pre-scaled; rows past N are zeros (their results are never stored).
    for (int e = tid; e < BQ * D / 4; e += C::NT) {
        const int r = e / (D / 4), c4 = (e % (D / 4)) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (q0 + r < N) x = *reinterpret_cast<const float4*>(q + head0 + (size_t)(q0 + r) * tok + c4);
        Qt[(c4 + 0) * C::QS + r] = x.x * scale_log2;
        Qt[(c4 + 1) * C::QS + r] = x.y * scale_log2;
        Qt[(c4 + 2) * C::QS + r] = x.z * scale_log2;
        Qt[(c4 + 3) * C::QS + r] = x.w * scale_log2;
    }

    float m_i[RPT], l_i[RPT], acc[RPT][C::DPT];  // per row: running max (log2 units), partial sum, output
#pragma unroll
    for (int ii = 0; ii < RPT; ++ii) {
        m_i[ii] = -INFINITY;
        l_i[ii] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < C::DPT; ++kk) acc[ii][kk] = 0.0f;
    }

    const int k_end = causal ? (N < q0 + BQ ? N : q0 + BQ) : N;  // keys past the last query are all masked
    float4 kr[C::LPT], vr[C::LPT];
    kv_tile_load<D, BQ, RPT>(kr, vr, kb, vb, tok, 0, N, tid);

    for (int k0 = 0; k0 < k_end; k0 += kBK) {
        kv_tile_store<D, BQ, RPT>(kr, vr, smem, tid);
        __syncthreads();  // (A) the K/V tile (and, first time, the Q tile) is in shared memory
        if (k0 + kBK < k_end) kv_tile_load<D, BQ, RPT>(kr, vr, kb, vb, tok, k0 + kBK, N, tid);

        // Scores of rows RPT rg + ii and keys k0 + 4 cg + jj, in log2 units.
        float s[RPT][4];
#pragma unroll
        for (int ii = 0; ii < RPT; ++ii)
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) s[ii][jj] = 0.0f;
#pragma unroll 16
        for (int c = 0; c < D; ++c) {
            float av[RPT];  // this thread's RPT rows of Q at column c: RPT / 4 float4 loads
#pragma unroll
            for (int hh = 0; hh < RPT / 4; ++hh) {
                const float4 a = *reinterpret_cast<const float4*>(Qt + c * C::QS + RPT * rg + 4 * hh);
                av[4 * hh] = a.x, av[4 * hh + 1] = a.y, av[4 * hh + 2] = a.z, av[4 * hh + 3] = a.w;
            }
            const float4 kk4 = *reinterpret_cast<const float4*>(Kt + c * C::KS + 4 * cg);
            const float kv[4] = {kk4.x, kk4.y, kk4.z, kk4.w};
#pragma unroll
            for (int ii = 0; ii < RPT; ++ii)
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) s[ii][jj] = fmaf(av[ii], kv[jj], s[ii][jj]);
        }

        // TODO(task 4.8, part 1 of 3): mask, online softmax, P to shared memory (~25 lines). For each of
        // the RPT rows ii (query qi = q0 + RPT rg + ii):
        //   1. set s[ii][jj] = -INFINITY where the key kj = k0 + 4 cg + jj is >= N, or causal and kj > qi;
        //   2. the tile's row max: max over jj, then over the 8 lanes of the row group
        //      (__shfl_xor_sync(0xffffffff, x, 1), then 2, then 4; every lane must take part);
        //   3. m_new = max(m_i[ii], tile max); use mu = (m_new == -INFINITY ? 0 : m_new) in the exps;
        //      alpha = exp2f(m_i[ii] - mu) rescales l_i[ii] and acc[ii][*]; then m_i[ii] = m_new;
        //   4. p = exp2f(s[ii][jj] - mu); add the 4 p's to l_i[ii] (this lane's partial sum: the 8 lanes
        //      are summed once at the end); store p to Pt[(4 cg + jj) * C::QS + RPT rg + ii] (RPT / 4 float4
        //      stores per key: rows RPT rg + 4 hh .. + 3 are one float4).
        // Hint: attention_online_v1_kernel above does steps 3-4 for one key at a time, in e-units.
        __syncthreads();  // (B) P is in shared memory

        // TODO(task 4.8, part 2 of 3): O += P V for this tile (~15 lines): for every key j < kBK, read
        // the RPT probabilities Pt[j * C::QS + RPT rg + ii] (RPT / 4 float4s) and, for kk < C::DPT, add
        // p[ii] * Vs[j * D + out_col<D>(cg, kk)] to acc[ii][kk].
        // Hint: keys past N have p = 0 and V rows of zeros, so no bounds check is needed here.
        __syncthreads();  // (C) everyone is done with Kt, Vs and Pt of this tile
    }

    // TODO(task 4.8, part 3 of 3): finish (~10 lines). For each row ii: the row's sum is l_i[ii] summed
    // over the 8 lanes of the row group (the same three shuffles, with +); if qi = q0 + RPT rg + ii < N,
    // write acc[ii][kk] / sum to O[b, qi, h, out_col<D>(cg, kk)] = o[head0 + qi * tok + out_col<D>(cg, kk)].
    // Hint: do the shuffles outside the `if (qi < N)`: every lane of the warp must reach them.
}

template <int D, int BQ, int RPT>
static void launch_flash(const float* q, const float* k, const float* v, float* o, int B, int H, int N,
                         float scale, int causal) {
    using C = FlashCfg<D, BQ, RPT>;
    const int bytes = C::FLOATS * (int)sizeof(float);
    // Over 48 KB of dynamic shared memory needs this opt-in (up to 227 KB per block on an H100).
    if (bytes > 48 * 1024)
        cudaFuncSetAttribute(attention_flash_kernel<D, BQ, RPT>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    const dim3 grid((N + BQ - 1) / BQ, B * H);
    attention_flash_kernel<D, BQ, RPT><<<grid, C::NT, bytes>>>(q, k, v, o, H, N, scale * kLog2e, causal);
}

// Contract: q, k, v, o hold B * N * H * d floats in (B, N, H, d) layout, 16-byte aligned (any fresh
// tensor is); d in {16, 32, 48, 64, 80, 96} (another d leaves o unwritten); causal is 0 or 1;
// o = softmax(scale * q k^T [masked]) v per head. q, k, v are not modified.
void attention_flash(const float* q, const float* k, const float* v, float* o, int B, int H, int N, int d,
                     float scale, int causal) {
    if (B == 0 || H == 0 || N == 0) return;
    switch (d) {
        case 16: launch_flash<16, 128, 8>(q, k, v, o, B, H, N, scale, causal); break;
        case 32: launch_flash<32, 128, 8>(q, k, v, o, B, H, N, scale, causal); break;
        case 48: launch_flash<48, 128, 8>(q, k, v, o, B, H, N, scale, causal); break;
        case 64: launch_flash<64, 128, 8>(q, k, v, o, B, H, N, scale, causal); break;
        case 80: launch_flash<80, 64, 4>(q, k, v, o, B, H, N, scale, causal); break;
        case 96: launch_flash<96, 64, 4>(q, k, v, o, B, H, N, scale, causal); break;
        default: break;
    }
}
