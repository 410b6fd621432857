// ====================================================================================================
// Lesson 09, part 3: LSD radix sort of 32-bit keys with values. A histogram, a scan and a stable scatter.
//
// A radix sort never compares two keys. It looks at 8 bits (a digit, 256 values) at a time, from the
// least significant digit to the most significant, and in each pass moves every (key, value) pair to the
// place its digit says: all keys with digit 0 first, then digit 1, and so on, keeping the order of keys
// with the same digit (a stable pass). After the pass on bits 24..31, the keys are sorted by all 32 bits,
// because each pass kept the order the earlier passes made among keys it sees as equal.
//
// One pass, for tiles of SORT_TILE keys (one block each):
//   1. upsweep:   each tile counts its keys per digit: counts[d * tiles + t]            (given)
//   2. offsets:   for each digit, an exclusive scan over the tiles of that digit's counts, and an
//                 exclusive scan over the 256 digits' totals: where each (digit, tile) run starts (given)
//   3. downsweep: each tile ranks its keys among those of the same digit, stably, gathers them in shared
//                 memory in digit order, then writes each run to its place in the output      (TODO 9.5)
// Every key and value is read twice and written once per pass (16 bytes per pair plus 4 for the
// upsweep), four passes. CUB's onesweep (behind torch.sort for large inputs, see the README) counts all
// four digits in one first pass and chains the tiles' offsets with decoupled look-back (scan.cu): one
// read and one write per pass.
//
//   float_sort_key            float bits -> unsigned bits with the same order (TODO task 9.5)
//   warp_rank_digit           the stable rank of a lane's key among the warp's keys with its digit
//                             (TODO task 9.5)
//   radix_sort_pairs_u32      unsigned keys with int values, ascending, stable
//   argsort_f32               like torch.sort(x, stable=True): sorted values and their int32 indices
//
// Run: `m = cudacourse.lesson("09_scan_sort"); m.argsort_f32(x, sorted, idx, n, work)` (work: at least
// 2*n + n/8 + 1024 int32 words). Check: `make check T=9.5`.
// Every kernel here runs on the GPU and on the CPU simulator unchanged.
// ====================================================================================================

#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>
#include <stdint.h>

namespace cg = cooperative_groups;

constexpr int WARP = 32;
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int RADIX_BITS = 8;
constexpr int RADIX = 1 << RADIX_BITS;     // 256 digits
constexpr int SORT_THREADS = 256;          // 8 warps
constexpr int SORT_WARPS = SORT_THREADS / WARP;
constexpr int SORT_ITEMS = 16;             // keys per thread
constexpr int SORT_TILE = SORT_THREADS * SORT_ITEMS;  // 4096 keys per tile
constexpr int WARP_KEYS = WARP * SORT_ITEMS;          // a warp's 512 consecutive keys of the tile
static_assert(SORT_THREADS == RADIX, "the downsweep gives each thread one digit");

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// ----------------------------------------------------------------------------------------------------
// Given: an exclusive sum over the block (one value per thread), from cooperative groups' warp scan
// ----------------------------------------------------------------------------------------------------
// The same three steps as block_exclusive_scan of task 9.1 (scan.cu), with CUDA's own warp scan
// (cg::inclusive_scan on a 32-thread tile). s_warp: 33 unsigned of shared memory; ends with a barrier.
__device__ unsigned block_exclusive_sum(unsigned v, unsigned* s_warp, unsigned* total) {
    cg::thread_block_tile<WARP> tile = cg::tiled_partition<WARP>(cg::this_thread_block());
    const int lane = threadIdx.x & (WARP - 1), warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    const unsigned inc = cg::inclusive_scan(tile, v);
    if (lane == WARP - 1) s_warp[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const unsigned w = lane < nwarps ? s_warp[lane] : 0u;
        const unsigned wi = cg::inclusive_scan(tile, w);
        s_warp[lane] = wi - w;
        if (lane == WARP - 1) s_warp[WARP] = wi;
    }
    __syncthreads();
    const unsigned r = s_warp[warp] + inc - v;
    *total = s_warp[WARP];
    __syncthreads();
    return r;
}

// ----------------------------------------------------------------------------------------------------
// Exercise: float_sort_key (task 9.5, part 1 of 2)
// ----------------------------------------------------------------------------------------------------
// Radix sort orders unsigned integers. Turn a float's bits into an unsigned whose order is the float
// order of torch.sort: -inf < negatives < -0.0 == +0.0 < positives < +inf < NaN (every NaN equal, last).
//   positive floats (sign bit 0): their bits already grow with the value; set the sign bit so that they
//                                 come after every negative;
//   negative floats (sign bit 1): a larger magnitude is a smaller float: flip all 32 bits;
//   -0.0 (0x80000000) sorts as +0.0; any NaN (exponent all ones, mantissa not 0) becomes 0xffffffff.
// The key only decides the order: the sort moves the original bits, so -0.0 stays -0.0 in the output.
// Worked example of the same idea (lesson 02's argmax_key):
//     const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
//     bits = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
__device__ __forceinline__ unsigned float_sort_key(unsigned bits) {
    // TODO(task 9.5): the mapping above, on the bits (~4 lines).
    // Hint: NaN is (bits & 0x7fffffff) > 0x7f800000; test it first.
    return bits;
}

template <bool FLOAT_KEYS>
__device__ __forceinline__ unsigned digit_of(unsigned bits, int shift) {
    const unsigned k = FLOAT_KEYS ? float_sort_key(bits) : bits;
    return (k >> shift) & (RADIX - 1);
}

// ----------------------------------------------------------------------------------------------------
// Given: 1. the upsweep (per-tile digit counts) and 2. the offsets
// ----------------------------------------------------------------------------------------------------
// The tile's keys are read in the same coalesced order the downsweep uses; shared-memory atomics count
// them (a histogram, as histogram_v2_shared). counts is digit-major, so that one digit's counts over
// all tiles are contiguous and the offsets kernel scans each digit's row with one block.
template <bool FLOAT_KEYS>
__global__ void radix_upsweep_kernel(const unsigned* __restrict__ keys, int n, int shift,
                                     unsigned* __restrict__ counts, int tiles) {
    __shared__ unsigned s_count[RADIX];
    for (int d = threadIdx.x; d < RADIX; d += blockDim.x) s_count[d] = 0u;
    __syncthreads();
    const long long base = (long long)blockIdx.x * SORT_TILE;
    for (int k = 0; k < SORT_ITEMS; ++k) {
        const long long i = base + k * SORT_THREADS + threadIdx.x;
        if (i < n) atomicAdd(&s_count[digit_of<FLOAT_KEYS>(keys[i], shift)], 1u);
    }
    __syncthreads();
    for (int d = threadIdx.x; d < RADIX; d += blockDim.x) counts[(size_t)d * tiles + blockIdx.x] = s_count[d];
}

// Block d turns row d of counts into exclusive prefixes over the tiles, and writes the row's total into
// digit_start[d]; then radix_digit_starts_kernel scans the 256 totals in place.
__global__ void radix_offsets_kernel(unsigned* counts, int tiles, unsigned* digit_start) {
    __shared__ unsigned s_warp[WARP + 1];
    unsigned* row = counts + (size_t)blockIdx.x * tiles;
    unsigned carry = 0u;
    for (int base = 0; base < tiles; base += blockDim.x) {
        const int t = base + threadIdx.x;
        const unsigned c = t < tiles ? row[t] : 0u;
        unsigned total;
        const unsigned ex = block_exclusive_sum(c, s_warp, &total);
        if (t < tiles) row[t] = carry + ex;
        carry += total;
    }
    if (threadIdx.x == 0) digit_start[blockIdx.x] = carry;
}

__global__ void radix_digit_starts_kernel(unsigned* digit_start) {
    __shared__ unsigned s_warp[WARP + 1];
    unsigned total;
    const unsigned ex = block_exclusive_sum(digit_start[threadIdx.x], s_warp, &total);
    digit_start[threadIdx.x] = ex;
}

// ----------------------------------------------------------------------------------------------------
// Exercise: warp_rank_digit (task 9.5, part 2 of 2)
// ----------------------------------------------------------------------------------------------------
// In the downsweep, warp w owns keys [w*512, w*512 + 512) of the tile and reads them in 16 rounds of 32
// consecutive keys (lane l holds key r*32 + l in round r). The stable rank of a key within its warp is
// the number of keys with the same digit before it in that order: those of earlier rounds (the warp's
// running count of that digit, warp_count[digit] in shared memory) plus the lanes below it in this round
// with the same digit.
// Lanes with the same digit: start from the lanes whose key is valid, and for each of the 8 bits of the
// digit keep only the lanes that agree with yours on that bit (__ballot_sync of the bit gives the lanes
// where it is 1; where yours is 0 take the complement). That set (`peers`) includes your own lane.
// Worked example of the ballot idiom (lesson 02): `unsigned active = __ballot_sync(FULL_MASK, i < n);`
//
// Returns the rank (valid lanes); afterwards warp_count[digit] has grown by the number of peers. Every
// lane of the warp calls it in every round (it is warp-collective); invalid lanes (past the end of the
// input) take no part in any set and their return value is not used.
__device__ unsigned warp_rank_digit(unsigned digit, bool valid, unsigned* warp_count) {
    const int lane = threadIdx.x & (WARP - 1);
    const unsigned below = (1u << lane) - 1u;  // the lanes below this one
    // TODO(task 9.5): (~12 lines)
    //   peers = the valid lanes with this lane's digit (9 ballots: one for `valid`, one per digit bit);
    //   before = warp_count[digit] (valid lanes read it), rank = before + the number of peers below;
    //   __syncwarp(); the lowest lane of the peers (no peer below it) stores before + __popc(peers) into
    //   warp_count[digit]; __syncwarp(); return rank.
    // Hint: without the first __syncwarp a leader may store the new count before a peer has read the old
    // one; without the second the next round may read it before it is stored.
    return ~0u;  // no rank (placeholder): the downsweep then writes nothing
}

// ----------------------------------------------------------------------------------------------------
// Given: 3. the downsweep
// ----------------------------------------------------------------------------------------------------
// a. Each warp ranks its 512 keys (warp_rank_digit), round by round, counting per digit in its own 256
//    counters. b. Per digit, an exclusive scan over the 8 warps' counts (thread d walks digit d), and an
//    exclusive scan over the digits of the tile's counts: the tile position of key = where its digit
//    starts in the tile + where its warp's run of that digit starts + its rank in the warp. c. Keys and
//    values are written to those positions in shared memory: now the tile is sorted by the digit.
//    d. Thread t writes tile positions t, t + 256, ...: a run of one digit goes to consecutive output
//    addresses from (the digit's start) + (the tile's offset within the digit), so the warp's stores
//    are coalesced runs instead of 32 scattered words.
template <bool FLOAT_KEYS, bool IOTA_VALUES>
__global__ void radix_downsweep_kernel(const unsigned* __restrict__ keys_in, const int* __restrict__ vals_in,
                                       unsigned* __restrict__ keys_out, int* __restrict__ vals_out, int n,
                                       int shift, const unsigned* __restrict__ counts,
                                       const unsigned* __restrict__ digit_start, int tiles) {
    __shared__ unsigned s_warp_count[SORT_WARPS][RADIX];
    __shared__ unsigned s_tile_start[RADIX];  // where digit d starts in the tile
    __shared__ unsigned s_out_base[RADIX];    // output index of tile position 0 of digit d's run
    __shared__ unsigned s_warp[WARP + 1];
    __shared__ unsigned s_keys[SORT_TILE];
    __shared__ int s_vals[SORT_TILE];
    const int tid = threadIdx.x, lane = tid & (WARP - 1), warp = tid / WARP;
    const long long base = (long long)blockIdx.x * SORT_TILE;
    const int tile_n = (int)(n - base < SORT_TILE ? n - base : SORT_TILE);
    for (int i = tid; i < SORT_WARPS * RADIX; i += SORT_THREADS) (&s_warp_count[0][0])[i] = 0u;
    __syncthreads();

    // a. load and rank, round by round
    unsigned key[SORT_ITEMS], rank[SORT_ITEMS];
    int val[SORT_ITEMS];
    for (int r = 0; r < SORT_ITEMS; ++r) {
        const int p = warp * WARP_KEYS + r * WARP + lane;  // position in the tile
        const bool valid = p < tile_n;
        key[r] = valid ? keys_in[base + p] : 0u;
        val[r] = valid ? (IOTA_VALUES ? (int)(base + p) : vals_in[base + p]) : 0;
        rank[r] = warp_rank_digit(digit_of<FLOAT_KEYS>(key[r], shift), valid, s_warp_count[warp]);
    }
    // A rank is below the warp's 512 keys; a tile where one is not (an unwritten warp_rank_digit) writes nothing.
    int no_rank = 0;
    for (int r = 0; r < SORT_ITEMS; ++r)
        if (warp * WARP_KEYS + r * WARP + lane < tile_n && rank[r] >= (unsigned)WARP_KEYS) no_rank = 1;
    if (__syncthreads_or(no_rank)) return;

    // b. per digit: warps' counts -> exclusive prefixes over the warps; the tile's count of the digit
    unsigned tile_count = 0u;
    for (int d = tid; d < RADIX; d += SORT_THREADS) {  // SORT_THREADS == RADIX: one digit per thread
        for (int w = 0; w < SORT_WARPS; ++w) {
            const unsigned c = s_warp_count[w][d];
            s_warp_count[w][d] = tile_count;
            tile_count += c;
        }
    }
    unsigned tile_total;
    const unsigned start = block_exclusive_sum(tile_count, s_warp, &tile_total);
    if (tid < RADIX) {
        s_tile_start[tid] = start;
        s_out_base[tid] = digit_start[tid] + counts[(size_t)tid * tiles + blockIdx.x] - start;
    }
    __syncthreads();

    // c. into shared memory, in digit order
    for (int r = 0; r < SORT_ITEMS; ++r) {
        const int p = warp * WARP_KEYS + r * WARP + lane;
        if (p < tile_n) {
            const unsigned d = digit_of<FLOAT_KEYS>(key[r], shift);
            const unsigned q = s_tile_start[d] + s_warp_count[warp][d] + rank[r];
            if (q < (unsigned)SORT_TILE) {  // always, with right ranks (a wrong rank must not write past)
                s_keys[q] = key[r];
                s_vals[q] = val[r];
            }
        }
    }
    __syncthreads();

    // d. out to global memory, coalesced runs
    for (int q = tid; q < tile_n; q += SORT_THREADS) {
        const unsigned k = s_keys[q];
        const unsigned o = s_out_base[digit_of<FLOAT_KEYS>(k, shift)] + (unsigned)q;
        if (o < (unsigned)n) {  // always, with right ranks
            keys_out[o] = k;
            vals_out[o] = s_vals[q];
        }
    }
}

// The four passes, ping-ponging between the output and a scratch copy in `work`:
// keys -> scratch -> out -> scratch -> out. work layout (32-bit words): scratch keys [n], scratch values
// [n], counts [256 * tiles], digit starts [256].
template <bool FLOAT_KEYS>
static void radix_sort(const unsigned* keys, const int* vals, unsigned* keys_out, int* vals_out, int n,
                       unsigned* work) {
    if (n <= 0) return;
    const int tiles = ceil_div(n, SORT_TILE);
    unsigned* tmp_keys = work;
    int* tmp_vals = reinterpret_cast<int*>(work + n);
    unsigned* counts = work + 2 * (size_t)n;
    unsigned* digit_start = counts + (size_t)RADIX * tiles;
    // one thread per tile in the offsets kernel's chunks, a multiple of 32, at most 1024
    int offsets_threads = ceil_div(tiles, WARP) * WARP;
    if (offsets_threads > 1024) offsets_threads = 1024;
    const unsigned* src_k = keys;
    const int* src_v = vals;
    for (int pass = 0; pass < 32 / RADIX_BITS; ++pass) {
        const int shift = pass * RADIX_BITS;
        unsigned* dst_k = (pass % 2 == 0) ? tmp_keys : keys_out;
        int* dst_v = (pass % 2 == 0) ? tmp_vals : vals_out;
        radix_upsweep_kernel<FLOAT_KEYS><<<tiles, SORT_THREADS>>>(src_k, n, shift, counts, tiles);
        radix_offsets_kernel<<<RADIX, offsets_threads>>>(counts, tiles, digit_start);
        radix_digit_starts_kernel<<<1, RADIX>>>(digit_start);
        if (pass == 0 && vals == nullptr)
            radix_downsweep_kernel<FLOAT_KEYS, true><<<tiles, SORT_THREADS>>>(src_k, src_v, dst_k, dst_v, n, shift,
                                                                               counts, digit_start, tiles);
        else
            radix_downsweep_kernel<FLOAT_KEYS, false><<<tiles, SORT_THREADS>>>(src_k, src_v, dst_k, dst_v, n, shift,
                                                                                counts, digit_start, tiles);
        src_k = dst_k;
        src_v = dst_v;
    }
}

// keys_out, vals_out = the pairs (keys[i], vals[i]) sorted by key, ascending, equal keys in input order.
// work: at least 2*n + n/8 + 1024 int32 words.
void radix_sort_pairs_u32(const unsigned* keys, const int* vals, unsigned* keys_out, int* vals_out, int n,
                          unsigned* work) {
    radix_sort<false>(keys, vals, keys_out, vals_out, n, work);
}

// sorted, indices = torch.sort(x, stable=True) (indices as int32). work: as radix_sort_pairs_u32.
void argsort_f32(const float* x, float* sorted, int* indices, int n, unsigned* work) {
    radix_sort<true>(reinterpret_cast<const unsigned*>(x), nullptr, reinterpret_cast<unsigned*>(sorted), indices,
                     n, work);
}
