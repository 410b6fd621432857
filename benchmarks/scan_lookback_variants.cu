// ====================================================================================================
// Two changes to lesson 09's decoupled look-back scan, for benchmarks/scan_sweep.py (not a lesson file:
// the sweep appends this text to solutions/09_scan_sort/scan.cu, whose helpers it uses).
//
//   scan_wide_i32     scan_lookback_kernel with a wider look-back window: each lane reads LB_READS status
//                     words per step (tiles end - lane, end - 32 - lane, ...), so one round trip to L2
//                     covers 32 x LB_READS predecessors instead of 32. With about a thousand tiles in flight
//                     on an H200, the nearest P is often more than 32 tiles back, and each window is a
//                     dependent read.
//   scan_split_i32    the look-back taken off the data's critical path: a block of THREADS + 32 threads,
//                     warps 0..THREADS/32-1 load and sum the tile as before and the last warp does nothing
//                     but the look-back, which starts as soon as the block has its ticket, while the tile
//                     is still arriving. The data warps publish the aggregate (A) without a block barrier
//                     (each warp adds its total into shared memory with an atomic; the last to arrive,
//                     counted with another, publishes), so publishing A never waits for the look-back.
//                     (int only: atomic float additions in another order would give another total.)
// Both take their tile from a ticket or from blockIdx.x (SCAN_TICKET below).
//
// Run: python3 benchmarks/scan_sweep.py on the GPU machine (bash benchmarks/gpu_scan.sh twins runs it).
// Both run on the CPU simulator too (tests/test_benchmarks_cpu.py checks their results there).
// ====================================================================================================

#ifndef LB_READS
#define LB_READS 4
#endif
// SCAN_TICKET 1: a block's tile is a ticket from a global counter (atomicAdd), as in scan.cu, so that the tiles are
// taken in the order the blocks start; 0: the tile is blockIdx.x, as CUB's scan does (it relies on the hardware
// starting blocks in index order, so a tile's predecessors have started before it). The ticket costs each block a
// round trip to L2 before its first load.
#ifndef SCAN_TICKET
#define SCAN_TICKET 1
#endif

__device__ __forceinline__ int take_tile(unsigned long long* work) {
    return SCAN_TICKET ? (int)atomicAdd(reinterpret_cast<unsigned*>(work), 1u) : (int)blockIdx.x;
}

// The exclusive prefix of `tile` (every lane), reading LB_READS windows of 32 status words per step; no
// publishing (the caller does). Tile 0 has no predecessor.
template <typename T>
__device__ T look_back_wide(volatile unsigned long long* status, int tile) {
    const int lane = threadIdx.x & (WARP - 1);
    T exclusive = T(0);
    int end = tile - 1;
    while (end >= 0) {
        unsigned long long w[LB_READS];
#pragma unroll
        for (int r = 0; r < LB_READS; ++r) {  // independent loads: in flight together
            const int j = end - r * WARP - lane;
            w[r] = j >= 0 ? status[j] : status_word(FLAG_P, T(0));
        }
        unsigned pm[LB_READS], xm[LB_READS];
#pragma unroll
        for (int r = 0; r < LB_READS; ++r) {
            pm[r] = __ballot_sync(FULL_MASK, (unsigned)(w[r] >> 32) == 2u);
            xm[r] = __ballot_sync(FULL_MASK, (unsigned)(w[r] >> 32) == 0u);
        }
        // the nearest P: window stop_r, lane stop_lane (none: every word counts)
        int stop_r = LB_READS, stop_lane = WARP - 1;
#pragma unroll
        for (int r = LB_READS - 1; r >= 0; --r)
            if (pm[r]) { stop_r = r; stop_lane = __ffs(pm[r]) - 1; }
        bool wait = false;  // an unpublished predecessor nearer than the nearest P: read again
#pragma unroll
        for (int r = 0; r < LB_READS; ++r) {
            const unsigned upto = stop_lane == WARP - 1 ? FULL_MASK : (2u << stop_lane) - 1u;
            wait |= r < stop_r ? xm[r] != 0u : r == stop_r && (xm[r] & upto) != 0u;
        }
        if (wait) continue;
        T s = T(0);
#pragma unroll
        for (int r = 0; r < LB_READS; ++r)
            if (r < stop_r || (r == stop_r && lane <= stop_lane)) s += from_bits<T>((unsigned)w[r]);
        exclusive += warp_allreduce_sum(s);
        if (stop_r < LB_READS) break;
        end -= LB_READS * WARP;
    }
    return exclusive;
}

template <typename T>
__global__ void __launch_bounds__(THREADS, SCAN_MIN_BLOCKS)
scan_wide_kernel(const T* __restrict__ x, T* __restrict__ y, int n, unsigned long long* work) {
    __shared__ T s_warp[WARP + 1];
    __shared__ int s_tile;
    __shared__ T s_prefix;
    if (threadIdx.x == 0) s_tile = take_tile(work);
    __syncthreads();
    const int tile = s_tile;
    const long long base = (long long)tile * TILE;
    T v[ITEMS];
    load_tile(x, base, n, v);
    T total;
    const T ex = block_exclusive_scan(thread_sum(v), s_warp, &total);
    if (threadIdx.x < WARP) {
        volatile unsigned long long* status = reinterpret_cast<volatile unsigned long long*>(work + 1);
        if (threadIdx.x == 0) status[tile] = status_word(tile == 0 ? FLAG_P : FLAG_A, total);
        const T prefix = look_back_wide<T>(status, tile);
        if (threadIdx.x == 0) {
            if (tile > 0) status[tile] = status_word(FLAG_P, prefix + total);
            s_prefix = prefix;
        }
    }
    __syncthreads();
    scan_thread_items(v, s_prefix + ex);
    store_tile(y, base, n, v);
}

void scan_wide_i32(const int* x, int* y, int n, unsigned long long* work) {
    if (n <= 0) return;
    const int tiles = ceil_div(n, TILE);
    cudaMemsetAsync(work, 0, (size_t)(1 + tiles) * sizeof(unsigned long long), 0);
    scan_wide_kernel<int><<<tiles, THREADS>>>(x, y, n, work);
}

#ifndef SPLIT_MIN_BLOCKS
#define SPLIT_MIN_BLOCKS (2048 / (THREADS + WARP))
#endif
constexpr int DATA_WARPS = THREADS / WARP;

template <typename T>  // (int: see the header)
__global__ void __launch_bounds__(THREADS + WARP, SPLIT_MIN_BLOCKS)
scan_split_kernel(const T* __restrict__ x, T* __restrict__ y, int n, unsigned long long* work) {
    __shared__ T s_warp[DATA_WARPS];
    __shared__ int s_tile;
    __shared__ unsigned s_arrived;
    __shared__ T s_total, s_prefix;
    if (threadIdx.x == 0) {
        s_tile = take_tile(work);
        s_arrived = 0u;
        s_total = T(0);
    }
    __syncthreads();
    const int tile = s_tile;
    const long long base = (long long)tile * TILE;
    volatile unsigned long long* status = reinterpret_cast<volatile unsigned long long*>(work + 1);
    const int warp = threadIdx.x / WARP, lane = threadIdx.x & (WARP - 1);
    T v[ITEMS];
    T warp_ex = T(0);
    if (warp < DATA_WARPS) {
        load_tile(x, base, n, v);
        const T mine = thread_sum(v);
        const T inc = warp_inclusive_scan(mine);
        warp_ex = inc - mine;
        if (lane == WARP - 1) {
            s_warp[warp] = inc;  // (read by the other warps after the __syncthreads below)
            atomicAdd(&s_total, inc);
            __threadfence_block();  // the total's addition before the count that announces it
            if (atomicAdd(&s_arrived, 1u) == DATA_WARPS - 1) {  // the last warp in: every total is added
                __threadfence_block();
                status[tile] = status_word(tile == 0 ? FLAG_P : FLAG_A, atomicAdd(&s_total, T(0)));
            }
        }
    } else {
        const T prefix = look_back_wide<T>(status, tile);  // while the tile arrives
        if (lane == 0) s_prefix = prefix;
    }
    __syncthreads();
    if (warp == DATA_WARPS && lane == 0 && tile > 0) status[tile] = status_word(FLAG_P, s_prefix + s_total);
    if (warp < DATA_WARPS) {
        T start = s_prefix + warp_ex;
        for (int w = 0; w < warp; ++w) start += s_warp[w];
        scan_thread_items(v, start);
        store_tile(y, base, n, v);
    }
}

void scan_split_i32(const int* x, int* y, int n, unsigned long long* work) {
    if (n <= 0) return;
    const int tiles = ceil_div(n, TILE);
    cudaMemsetAsync(work, 0, (size_t)(1 + tiles) * sizeof(unsigned long long), 0);
    scan_split_kernel<int><<<tiles, THREADS + WARP>>>(x, y, n, work);
}
