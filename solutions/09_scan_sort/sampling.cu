// ====================================================================================================
// Lesson 09, part 4: sampling the next token. Temperature, top-k, top-p and a counter-based generator,
// fused into one kernel that reads the logits and writes one token id per row.
//
// For each row of logits [batch, vocab] (one block per row):
//   1. temperature T: weights w_i = exp((l_i - max) / T), the softmax without its division;
//   2. top-k: keep the k largest logits (ties: the smaller index first, as a stable descending sort);
//   3. top-p (nucleus): of those, keep the smallest prefix, in that same order, whose weight reaches p of
//      their total weight (the token that crosses p is kept);
//   4. draw u in [0, 1) from Philox4x32-10 (seed, offset, row) and return the first kept index, in index
//      order, whose running kept weight exceeds u times the total kept weight.
// Nothing is sorted: top-k and top-p are radix selects (lesson's radix sort, one digit at a time, from
// the top: which 8-bit digit holds the k-th largest key, then the next 8 bits...) and step 4 is a scan.
// Weights are 2^40-scaled 64-bit integers, so every sum is exact and the same in any order.
//
// Defined results for bad input (README): a row with a NaN gets id -1; +inf logits share the whole
// weight equally; a row of -inf is uniform; temperature <= 0 is greedy (top-1: the first maximum);
// top_k <= 0 or >= vocab keeps every token; top_p >= 1 keeps every token, top_p <= 0 keeps one;
// vocab > 2^23 (the 64-bit weight sums could overflow) writes -1.
//
//   philox4x32_10             Random123's counter-based generator (worked: a batch launcher for tests)
//   select_by_mass            top-p as a radix select on weights (worked)
//   select_kth_largest        top-k as a radix select on counts (TODO task 9.6)
//   pick_token                the inverse-CDF scan in index order (TODO task 9.6)
//   sample_top_k_top_p        the launcher
//
// Run: `m = cudacourse.lesson("09_scan_sort"); m.sample_top_k_top_p(logits, ids, batch, vocab, T, k, p,
// seed, offset)`. Check: `make check T=9.6`.
// Every kernel here runs on the GPU and on the CPU simulator unchanged.
// ====================================================================================================

#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>
#include <math.h>
#include <stdint.h>

namespace cg = cooperative_groups;

constexpr int WARP = 32;
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int RADIX = 256;
constexpr int SUBHIST = 8;        // copies of each histogram: warp w counts into copy w % 8 (less contention)
constexpr int PICK_ITEMS = 16;    // elements per thread per chunk of pick_token's scan
constexpr float FIXED_SCALE = 1099511627776.0f;  // 2^40: a weight in (0, 1] becomes an integer up to 2^40
constexpr int MAX_VOCAB = 1 << 23;               // vocab * 2^40 < 2^63

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// ----------------------------------------------------------------------------------------------------
// Worked example: Philox4x32-10
// ----------------------------------------------------------------------------------------------------
// A counter-based generator (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011;
// also behind curand's Philox and PyTorch's CUDA generator): the output is a pure function of a 128-bit
// counter and a 64-bit key. No state to carry between threads or calls: any thread can compute the
// numbers for (seed, step, row) directly, and so can a test on the CPU. Ten rounds; each multiplies two
// of the four words by fixed constants, keeps both halves of the 64-bit products and mixes them with the
// other two words and the key; the key is bumped by two other constants between rounds.
__host__ __device__ inline unsigned mulhi32(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}

__host__ __device__ inline void philox4x32_10_round(unsigned (&c)[4], unsigned k0, unsigned k1) {
    const unsigned lo0 = 0xD2511F53u * c[0], hi0 = mulhi32(0xD2511F53u, c[0]);
    const unsigned lo1 = 0xCD9E8D57u * c[2], hi1 = mulhi32(0xCD9E8D57u, c[2]);
    const unsigned n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
}

// c: the counter in, the four random words out.
__host__ __device__ inline void philox4x32_10(unsigned (&c)[4], unsigned k0, unsigned k1) {
    for (int r = 0; r < 10; ++r) {
        philox4x32_10_round(c, k0, k1);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

__global__ void philox_kernel(const unsigned* __restrict__ ctr, const unsigned* __restrict__ key,
                              unsigned* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned c[4] = {ctr[4 * i], ctr[4 * i + 1], ctr[4 * i + 2], ctr[4 * i + 3]};
    philox4x32_10(c, key[2 * i], key[2 * i + 1]);
    for (int j = 0; j < 4; ++j) out[4 * i + j] = c[j];
}

// out[4i..4i+4) = Philox4x32-10(counter ctr[4i..4i+4), key key[2i..2i+2)), for i < n.
void philox4x32_10_batch(const unsigned* ctr, const unsigned* key, unsigned* out, int n) {
    if (n > 0) philox_kernel<<<ceil_div(n, 256), 256>>>(ctr, key, out, n);
}

// The uniform of (seed, offset, row): the first word of Philox(counter = (offset lo, offset hi, row, 0),
// key = (seed lo, seed hi)); u = word / 2^32.
__device__ unsigned philox_word(unsigned long long seed, unsigned long long offset, unsigned row) {
    unsigned c[4] = {(unsigned)offset, (unsigned)(offset >> 32), row, 0u};
    philox4x32_10(c, (unsigned)seed, (unsigned)(seed >> 32));
    return c[0];
}

// floor(word * total / 2^32), exactly, for total < 2^63: total = hi * 2^32 + lo.
__device__ __forceinline__ unsigned long long scale_by_word(unsigned long long total, unsigned word) {
    return (total >> 32) * word + (((total & 0xffffffffull) * word) >> 32);
}

// ----------------------------------------------------------------------------------------------------
// Given: keys, weights and block-wide helpers
// ----------------------------------------------------------------------------------------------------
// order_key: a float's bits as an unsigned with the same order (radix_sort.cu's float_sort_key, without
// the NaN case: a row with a NaN never gets this far). key_value is its inverse.
__device__ __forceinline__ unsigned order_key(float v) {
    unsigned b = __float_as_uint(v);
    if (b == 0x80000000u) b = 0u;  // -0.0 == +0.0
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_value(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// exp((l - max) / T) in (0, 1] as a 2^40-scaled integer (the maximum itself: exactly 2^40; also when
// max is +inf or -inf, where l - max would be NaN).
__device__ __forceinline__ unsigned long long fixed_weight(float l, float mx, float inv_t) {
    const float w = l == mx ? 1.0f : expf((l - mx) * inv_t);
    return (unsigned long long)(w * FIXED_SCALE);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// The block's sum (every thread gets it). s_red: 32 T of shared memory. Ends with a barrier.
template <typename T>
__device__ T block_sum(T v, T* s_red) {
    const int lane = threadIdx.x & (WARP - 1), warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    v = warp_sum(v);
    if (lane == 0) s_red[warp] = v;
    __syncthreads();
    T t = lane < nwarps ? s_red[lane] : T(0);
    t = warp_sum(t);
    __syncthreads();
    return t;
}

__device__ float block_max(float v, float* s_red) {
    const int lane = threadIdx.x & (WARP - 1), warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    if (lane == 0) s_red[warp] = v;
    __syncthreads();
    float t = lane < nwarps ? s_red[lane] : -INFINITY;
    for (int o = WARP / 2; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(FULL_MASK, t, o));
    __syncthreads();
    return t;
}

// Exclusive sum over the block with cooperative groups' warp scan (see radix_sort.cu). s_warp: 33 T.
template <typename T>
__device__ T block_exclusive_sum(T v, T* s_warp, T* total) {
    cg::thread_block_tile<WARP> tile = cg::tiled_partition<WARP>(cg::this_thread_block());
    const int lane = threadIdx.x & (WARP - 1), warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    const T inc = cg::inclusive_scan(tile, v);
    if (lane == WARP - 1) s_warp[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const T w = lane < nwarps ? s_warp[lane] : T(0);
        const T wi = cg::inclusive_scan(tile, w);
        s_warp[lane] = wi - w;
        if (lane == WARP - 1) s_warp[WARP] = wi;
    }
    __syncthreads();
    const T r = s_warp[warp] + inc - v;
    *total = s_warp[WARP];
    __syncthreads();
    return r;
}

// What a row's block shares.
struct SamplerShared {
    unsigned cnt[SUBHIST][RADIX];
    unsigned long long mass[SUBHIST][RADIX];
    unsigned warp32[WARP + 1];
    unsigned long long warp64[WARP + 1];
    unsigned long long red64[WARP];
    float red[WARP];
    unsigned digit;
    unsigned above32;
    unsigned long long above64;
    int choice;
};

template <typename T>
__device__ void zero_hist(T (&h)[SUBHIST][RADIX]) {
    for (int i = threadIdx.x; i < SUBHIST * RADIX; i += blockDim.x) (&h[0][0])[i] = T(0);
}

// Adds the SUBHIST copies into copy 0. Call between barriers.
template <typename T>
__device__ void merge_hist(T (&h)[SUBHIST][RADIX]) {
    for (int d = threadIdx.x; d < RADIX; d += blockDim.x) {
        T s = h[0][d];
        for (int c = 1; c < SUBHIST; ++c) s += h[c][d];
        h[0][d] = s;
    }
}

// Scanning the 256 bins from the top digit (255) down, finds the digit d where the running total first
// reaches `need` (1 <= need <= the sum of the bins): sum(bins[d' > d]) < need <= sum(bins[d' >= d]).
// Writes d to *digit and sum(bins[d' > d]) to *above; warp 0 does it, then a barrier.
template <typename T>
__device__ void select_from_top(const T* bins, T need, unsigned* digit, T* above) {
    if (threadIdx.x < WARP) {
        cg::thread_block_tile<WARP> tile = cg::tiled_partition<WARP>(cg::this_thread_block());
        const int lane = threadIdx.x;
        T local = T(0);
        for (int j = 0; j < RADIX / WARP; ++j) local += bins[RADIX - 1 - (RADIX / WARP) * lane - j];
        const T inc = cg::inclusive_scan(tile, local);
        T acc = inc - local;
        if (acc < need && need <= inc) {
            for (int j = 0; j < RADIX / WARP; ++j) {
                const int d = RADIX - 1 - (RADIX / WARP) * lane - j;
                if (acc + bins[d] >= need) {
                    *digit = (unsigned)d;
                    *above = acc;
                    break;
                }
                acc += bins[d];
            }
        }
    }
    __syncthreads();
}

// The kept set of a row is always a prefix of the order "larger key first, then smaller index": every
// key above tau, and the first m keys equal to tau in index order.
struct Kept {
    unsigned tau;
    unsigned m;
};

// ----------------------------------------------------------------------------------------------------
// Exercise: select_kth_largest (task 9.6, part 1 of 2)
// ----------------------------------------------------------------------------------------------------
// Top-k: finds the key tau of the k-th largest logit of the row (1 <= k <= vocab) and how many keys equal
// to tau the top k holds (m >= 1; with ties at tau it takes them in index order).
// Radix select, one 8-bit digit per pass from the top (shift = 24, 16, 8, 0). Before a pass, tau's digits
// above `shift` are known (`prefix`, the bits under `mask`); the pass counts, per digit, the keys that
// match that prefix; select_from_top finds the digit where the count from the top reaches `need` (how
// many of the top k are still to be found among the matching keys) and the count above that digit, which
// leaves `need`. After four passes prefix is tau and need is m.
// Worked example: select_by_mass below does the same with weights instead of counts.
__device__ Kept select_kth_largest(const float* row, int vocab, int k, SamplerShared& s) {
    const int c = (threadIdx.x / WARP) % SUBHIST;  // this warp's copy of the histogram
    unsigned prefix = 0u, mask = 0u, need = (unsigned)k;
    // TODO(task 9.6): four passes, shift = 24, 16, 8, 0 (~16 lines):
    //   __syncthreads(); zero_hist(s.cnt); __syncthreads();
    //   the block strides over the row (i = threadIdx.x; i < vocab; i += blockDim.x) and, for the keys
    //   (order_key(row[i])) that match the prefix, adds 1 to s.cnt[c][digit at shift] (atomicAdd);
    //   __syncthreads(); merge_hist(s.cnt); __syncthreads();
    //   select_from_top(s.cnt[0], need, &s.digit, &s.above32); every thread then updates need, prefix, mask.
    // Hint: the first __syncthreads() keeps a fast thread from zeroing the bins of the next pass while a
    // slow one still reads s.digit and s.above32 of this one.
    // BEGIN SOLUTION
    for (int shift = 24; shift >= 0; shift -= 8) {
        __syncthreads();
        zero_hist(s.cnt);
        __syncthreads();
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const unsigned key = order_key(row[i]);
            if ((key & mask) == prefix) atomicAdd(&s.cnt[c][(key >> shift) & (RADIX - 1)], 1u);
        }
        __syncthreads();
        merge_hist(s.cnt);
        __syncthreads();
        select_from_top(s.cnt[0], need, &s.digit, &s.above32);
        need -= s.above32;
        prefix |= s.digit << shift;
        mask |= (unsigned)(RADIX - 1) << shift;
    }
    // END SOLUTION
    return Kept{prefix, need};
}

// ----------------------------------------------------------------------------------------------------
// Worked example: select_by_mass (top-p)
// ----------------------------------------------------------------------------------------------------
// The same radix select over the kept set `in` (top-k's, or the whole row), with each key counting its
// weight instead of 1: finds the smallest prefix of the order whose weight reaches p of the set's total
// weight Z. The keys equal to in.tau count as one group of in.m keys (only that many are in the set),
// added by thread 0. need = ceil(p * Z) is known after the first pass (its bins hold all of Z), at
// least 1. At the end the keys at tau each weigh w(tau), so ceil(need / w(tau)) of them are kept.
__device__ Kept select_by_mass(const float* row, int vocab, float mx, float inv_t, Kept in, bool all, float p,
                               SamplerShared& s) {
    const int c = (threadIdx.x / WARP) % SUBHIST;
    const unsigned long long w_in = fixed_weight(key_value(in.tau), mx, inv_t);
    unsigned prefix = 0u, mask = 0u, group = 0u;
    unsigned long long need = 0ull;
    for (int shift = 24; shift >= 0; shift -= 8) {
        __syncthreads();
        zero_hist(s.cnt);
        zero_hist(s.mass);
        __syncthreads();
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            const float l = row[i];
            const unsigned key = order_key(l);
            if ((all || key > in.tau) && (key & mask) == prefix) {
                const unsigned d = (key >> shift) & (RADIX - 1);
                atomicAdd(&s.mass[c][d], fixed_weight(l, mx, inv_t));
                atomicAdd(&s.cnt[c][d], 1u);
            }
        }
        if (threadIdx.x == 0 && !all && (in.tau & mask) == prefix) {
            const unsigned d = (in.tau >> shift) & (RADIX - 1);
            atomicAdd(&s.mass[0][d], (unsigned long long)in.m * w_in);
            atomicAdd(&s.cnt[0][d], in.m);
        }
        __syncthreads();
        merge_hist(s.cnt);
        merge_hist(s.mass);
        __syncthreads();
        if (shift == 24) {  // the first pass saw the whole set: Z, then need = ceil(p * Z) in [1, Z]
            unsigned long long z = 0ull;
            for (int d = threadIdx.x; d < RADIX; d += blockDim.x) z += s.mass[0][d];
            z = block_sum(z, s.red64);
            const double want = ceil((double)p * (double)z);
            need = want < 1.0 ? 1ull : (want >= (double)z ? z : (unsigned long long)want);
        }
        select_from_top(s.mass[0], need, &s.digit, &s.above64);
        const unsigned d = s.digit;
        need -= s.above64;
        group = s.cnt[0][d];
        prefix |= d << shift;
        mask |= (unsigned)(RADIX - 1) << shift;
    }
    const unsigned long long w = fixed_weight(key_value(prefix), mx, inv_t);  // >= 1: need <= group * w
    unsigned long long m = (need + w - 1) / w;
    if (m > group) m = group;
    return Kept{prefix, (unsigned)m};
}

// ----------------------------------------------------------------------------------------------------
// Exercise: pick_token (task 9.6, part 2 of 2)
// ----------------------------------------------------------------------------------------------------
// Inverse-CDF sampling in index order: returns the first index i whose running kept weight (the kept
// weights of indices 0..i) exceeds `target` (0 <= target < the kept set's total weight). A key is kept
// if it is above kept.tau, or equal to it and among the first kept.m such keys in index order.
// The row is walked in chunks of blockDim.x * PICK_ITEMS; thread t takes the PICK_ITEMS consecutive
// elements first = chunk start + t * PICK_ITEMS. Per chunk:
//   1. count your elements whose key equals tau; block_exclusive_sum over the threads (+ the ties of the
//      earlier chunks) gives how many tied keys come before your first one: a tied key is kept while
//      that running count is below kept.m;
//   2. add up your kept weights (fixed_weight); block_exclusive_sum (+ the earlier chunks' weight) gives
//      the weight before your first element;
//   3. the one thread whose range [before, before + its weight) contains target walks its elements
//      again and writes the index where the running weight passes target to s.choice;
//   4. after a barrier every thread reads s.choice: stop if set, else carry the chunk's totals on.
// Worked example of a chunk loop with a carry (scan.cu's scan_tile_offsets_kernel):
//     for (int base = 0; base < tiles; base += blockDim.x) {
//         const int i = base + threadIdx.x;
//         T total;
//         const T ex = block_exclusive_scan(i < tiles ? sums[i] : T(0), s_warp, &total);
//         if (i < tiles) sums[i] = carry + ex;
//         carry += total;
//     }
__device__ int pick_token(const float* row, int vocab, float mx, float inv_t, Kept kept, unsigned long long target,
                          SamplerShared& s) {
    if (threadIdx.x == 0) s.choice = -1;
    __syncthreads();
    // TODO(task 9.6): the chunk loop above (~35 lines).
    // Hint: the tie rank is what makes the kept set exactly a prefix of the order when logits repeat
    // (integer logits, a constant row): without it every key equal to tau would be kept. The running
    // weight of the whole row fits in 64 bits (vocab * 2^40 < 2^63), and integer sums are exact, so the
    // thread that finds target does not depend on the order of the additions.
    // BEGIN SOLUTION
    unsigned tie_carry = 0u;
    unsigned long long mass_carry = 0ull;
    for (int c0 = 0; c0 < vocab; c0 += blockDim.x * PICK_ITEMS) {
        const int first = c0 + threadIdx.x * PICK_ITEMS;
        unsigned ties = 0u;
        for (int j = 0; j < PICK_ITEMS; ++j)
            if (first + j < vocab && order_key(row[first + j]) == kept.tau) ++ties;
        unsigned tie_total;
        const unsigned tie_before = tie_carry + block_exclusive_sum(ties, s.warp32, &tie_total);
        unsigned long long mine = 0ull;
        unsigned t = tie_before;
        for (int j = 0; j < PICK_ITEMS; ++j) {
            if (first + j >= vocab) break;
            const float l = row[first + j];
            const unsigned key = order_key(l);
            const bool keep = key > kept.tau || (key == kept.tau && t < kept.m);
            if (key == kept.tau) ++t;
            if (keep) mine += fixed_weight(l, mx, inv_t);
        }
        unsigned long long mass_total;
        const unsigned long long before = mass_carry + block_exclusive_sum(mine, s.warp64, &mass_total);
        if (before <= target && target < before + mine) {
            unsigned long long run = before;
            t = tie_before;
            for (int j = 0; j < PICK_ITEMS; ++j) {
                const float l = row[first + j];
                const unsigned key = order_key(l);
                const bool keep = key > kept.tau || (key == kept.tau && t < kept.m);
                if (key == kept.tau) ++t;
                if (!keep) continue;
                run += fixed_weight(l, mx, inv_t);
                if (run > target) {
                    s.choice = first + j;
                    break;
                }
            }
        }
        __syncthreads();
        if (s.choice >= 0) break;
        tie_carry += tie_total;
        mass_carry += mass_total;
    }
    // END SOLUTION
    return s.choice;
}

// ----------------------------------------------------------------------------------------------------
// The kernel and its launcher
// ----------------------------------------------------------------------------------------------------
__global__ void sample_kernel(const float* __restrict__ logits, int* __restrict__ ids, int vocab, float temperature,
                              int top_k, float top_p, unsigned long long seed, unsigned long long offset) {
    __shared__ SamplerShared s;
    const float* row = logits + (size_t)blockIdx.x * vocab;
    // the maximum, and whether the row holds a NaN
    float mx = -INFINITY;
    int nan = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float l = row[i];
        if (l != l) nan = 1;
        mx = fmaxf(mx, l);
    }
    nan = __syncthreads_or(nan);
    mx = block_max(mx, s.red);
    if (nan) {
        if (threadIdx.x == 0) ids[blockIdx.x] = -1;
        return;
    }
    const bool greedy = !(temperature > 0.0f);
    const float inv_t = greedy ? 1.0f : 1.0f / temperature;
    const int k = greedy ? 1 : (top_k > 0 && top_k < vocab ? top_k : 0);
    // the kept set: all (tau below every key), then top-k, then top-p within it
    Kept kept{0u, 0u};
    bool all = true;
    if (k > 0) {
        kept = select_kth_largest(row, vocab, k, s);
        all = false;
    }
    if (top_p < 1.0f) {
        kept = select_by_mass(row, vocab, mx, inv_t, kept, all, top_p, s);
        all = false;
    }
    // the kept set's total weight, then the target: floor(u * total), u = Philox word / 2^32
    const unsigned long long w_tau = fixed_weight(key_value(kept.tau), mx, inv_t);
    unsigned long long mine = 0ull;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float l = row[i];
        if (all || order_key(l) > kept.tau) mine += fixed_weight(l, mx, inv_t);
    }
    const unsigned long long total = block_sum(mine, s.red64) + (all ? 0ull : (unsigned long long)kept.m * w_tau);
    const unsigned long long target = scale_by_word(total, philox_word(seed, offset, blockIdx.x));
    const int id = pick_token(row, vocab, mx, inv_t, kept, target, s);
    if (threadIdx.x == 0) ids[blockIdx.x] = id;
}

// ids[r] = a token drawn from row r of logits [batch, vocab] (float32, row-major) under temperature,
// top_k and top_p, with Philox (seed, offset, r): the same arguments give the same ids.
void sample_top_k_top_p(const float* logits, int* ids, int batch, int vocab, float temperature, int top_k,
                        float top_p, unsigned long long seed, unsigned long long offset) {
    if (batch <= 0) return;
    if (vocab <= 0 || vocab > MAX_VOCAB) {
        cudaMemsetAsync(ids, 0xff, (size_t)batch * sizeof(int), 0);  // -1: no token (see the header)
        return;
    }
    // about PICK_ITEMS elements per thread, a multiple of 32 threads, at most 1024
    int threads = ceil_div(ceil_div(vocab, PICK_ITEMS), WARP) * WARP;
    threads = threads < WARP ? WARP : (threads > 1024 ? 1024 : threads);
    sample_kernel<<<batch, threads>>>(logits, ids, vocab, temperature, top_k, top_p, seed, offset);
}
