// ====================================================================================================
// A change to lesson 09's decoupled look-back scan, for benchmarks/scan_sweep.py (not a lesson file: the
// sweep appends this text to solutions/09_scan_sort/scan.cu, whose helpers it uses).
//
//   scan_stash_i32    a block overlaps the wait for one tile's prefix with the next tile's loads: each block
//                     (grid: as many as stay resident, STASH_BLOCKS_PER_SM per SM) scans tile after tile, taken by
//                     tickets, and holds two at a time: the OLD tile, summed and published (A), parked in shared
//                     memory (in the buffer it was transposed through: two alternate) until its prefix arrives, and
//                     the NEW tile, whose loads are issued before the old tile's first look-back step. The new tile
//                     is summed and its A published before the block waits for the old tile's prefix, so a wait
//                     never delays a successor's look-back (a variant that published the next tile's A only after
//                     its look-back chained the tiles: 8-46% of copy, commit a765769). The theory it tests: a block
//                     waiting for its prefix in scan_lookback_kernel has no load in flight, so fewer bytes are in
//                     flight than in a copy. Its look-back goes one window at a time and keeps what it accepted
//                     (the A words before the first unpublished one), so the first step can run early, without
//                     waiting, and the rest never reads those words again. 85% of the copy bandwidth on an H200 at
//                     256 x 16 (the lesson's scan: 67%); results/nvidia-h200/09_scan_sort/scan_sweep_2026-11-29g.txt.
//
// Variants measured and removed (no gain; the code is at commit 4ea48ba): a look-back reading 2, 4 or 8 windows per
// step (scan_wide_i32), a ninth warp that only looks back while the tile arrives (scan_split_i32), and the tile from
// blockIdx.x instead of a ticket (SCAN_TICKET 0).
//
// Run: python3 benchmarks/scan_sweep.py on the GPU machine. Checked against torch.cumsum on the CPU simulator by
// tests/test_scan_variants.py.
// ====================================================================================================

// ----------------------------------------------------------------------------------------------------
// scan_stash_i32 (the header says what it changes). int only in the launcher: the kernel adds the tile's prefix
// last (to the tile's own scan, parked in shared memory), which for float rounds otherwise than scan_lookback_f32.
// ----------------------------------------------------------------------------------------------------
// The stash is a transpose buffer: two of them, used in turn, each TILE + TILE / 8 words laid out as load_tile's
// (element e of a warp's part at padded(e): 16-byte accesses free of bank conflicts, thread-major or striped). A new
// tile is transposed in the free one, scanned (within the tile), and parked in place, thread-major, until its prefix
// is known; then the block reads it back striped, adds the prefix and stores it. So a waiting tile holds no
// registers and costs no copy. Buffer 0 is load_tile's (static), buffer 1 dynamic (the two pass the 48 KB of static
// shared memory at tiles of 6144 elements or more). Full tiles always go through the buffers (SCAN_TRANSPOSE does not
// apply); SCAN_STREAMING does.
// The default STASH_BLOCKS_PER_SM: as many blocks as fit in the 228 KB of an SM (H100/H200), counting the 1 KB the
// GPU reserves per block, at most 2048 threads: 6 at 256 x 16 and at 128 x 32.
constexpr int STASH_WORDS = TILE + TILE / 8;  // one buffer: padded(TILE)
constexpr int STASH_BLOCK_BYTES = 2 * STASH_WORDS * 4 + 256 + 1024;  // (int) two buffers, scratch, the reserved KB
#ifndef STASH_BLOCKS_PER_SM
#define STASH_BLOCKS_PER_SM \
    (233472 / STASH_BLOCK_BYTES < 2048 / THREADS ? 233472 / STASH_BLOCK_BYTES : 2048 / THREADS)
#endif
static_assert(STASH_BLOCKS_PER_SM >= 1 && STASH_BLOCKS_PER_SM * STASH_BLOCK_BYTES <= 233472 &&
              STASH_BLOCKS_PER_SM * THREADS <= 2048, "STASH_BLOCKS_PER_SM blocks do not fit in an SM");

// This warp's part of buffer `which`.
template <typename T>
__device__ __forceinline__ T* stash_buffer(int which, T* dyn) {
    return which ? dyn + (threadIdx.x / WARP) * WARP_TILE_PADDED : warp_buffer<T>();
}

// The first half of load_tile: the loads issued, nothing waits for them. A full tile (`full`: whole and x 16-byte
// aligned) lands in r striped, as it comes from memory (lane l: the 16-byte groups l, l + 32, ...); any other, the
// last partial tile or an unaligned x, element by element in the thread's own order (0 past n).
template <typename T>
__device__ __forceinline__ void stash_issue_loads(const T* __restrict__ x, long long base, int n, bool full,
                                                  T (&r)[ITEMS]) {
    using V = typename Vec4<T>::type;
    if (full) {
        const int lane = threadIdx.x & (WARP - 1);
        const V* p = reinterpret_cast<const V*>(x + base + (long long)(threadIdx.x / WARP) * WARP_TILE);
#pragma unroll
        for (int k = 0; k < ITEMS / 4; ++k) {
            const V q = tile_load16(p + k * WARP + lane);
            r[4 * k] = q.x; r[4 * k + 1] = q.y; r[4 * k + 2] = q.z; r[4 * k + 3] = q.w;
        }
    } else {
        const long long first = base + (long long)threadIdx.x * ITEMS;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) r[k] = first + k < n ? x[first + k] : T(0);
    }
}

// The second half: r becomes the thread's ITEMS consecutive elements (a full tile through the warp's part of the
// buffer wb, as load_tile does). wb must be free: every lane of the warp done with it (a barrier since).
template <typename T>
__device__ __forceinline__ void stash_arrive(T* wb, bool full, T (&r)[ITEMS]) {
    using V = typename Vec4<T>::type;
    if (!full) return;
    const int lane = threadIdx.x & (WARP - 1);
#pragma unroll
    for (int k = 0; k < ITEMS / 4; ++k) {
        V q;
        q.x = r[4 * k]; q.y = r[4 * k + 1]; q.z = r[4 * k + 2]; q.w = r[4 * k + 3];
        *reinterpret_cast<V*>(wb + padded(4 * (k * WARP + lane))) = q;
    }
    __syncwarp();  // the warp's 16-byte groups are all in the buffer before a lane reads its elements
#pragma unroll
    for (int k = 0; k < ITEMS / 4; ++k) {
        const V q = *reinterpret_cast<const V*>(wb + padded(lane * ITEMS + 4 * k));
        r[4 * k] = q.x; r[4 * k + 1] = q.y; r[4 * k + 2] = q.z; r[4 * k + 3] = q.w;
    }
    // (no __syncwarp: stash_park writes only this lane's own elements, which no other lane reads until a barrier)
}

// r parked in the thread's own elements of wb (thread-major) until the tile's prefix is known.
template <typename T>
__device__ __forceinline__ void stash_park(T* wb, const T (&r)[ITEMS]) {
    using V = typename Vec4<T>::type;
    const int lane = threadIdx.x & (WARP - 1);
#pragma unroll
    for (int k = 0; k < ITEMS / 4; ++k) {
        V q;
        q.x = r[4 * k]; q.y = r[4 * k + 1]; q.z = r[4 * k + 2]; q.w = r[4 * k + 3];
        *reinterpret_cast<V*>(wb + padded(lane * ITEMS + 4 * k)) = q;
    }
}

// y[base ...] = the parked tile + prefix. A full tile (whole, y aligned) is read back striped, so each store
// instruction writes 512 consecutive bytes (adding a constant does not care about the order); other tiles: each
// thread its own elements, up to n. Needs a barrier since the park (another lane's elements are read).
template <typename T>
__device__ __forceinline__ void stash_store(T* __restrict__ y, long long base, int n, bool full, const T* wb,
                                            T prefix) {
    using V = typename Vec4<T>::type;
    const int lane = threadIdx.x & (WARP - 1);
    if (full) {
        V* p = reinterpret_cast<V*>(y + base + (long long)(threadIdx.x / WARP) * WARP_TILE);
#pragma unroll
        for (int k = 0; k < ITEMS / 4; ++k) {
            V q = *reinterpret_cast<const V*>(wb + padded(4 * (k * WARP + lane)));
            q.x += prefix; q.y += prefix; q.z += prefix; q.w += prefix;
            tile_store16(p + k * WARP + lane, q);
        }
    } else {
        const long long first = base + (long long)threadIdx.x * ITEMS;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k)
            if (first + k < n) y[first + k] = wb[padded(lane * ITEMS + k)] + prefix;
    }
}

// One step of a look-back, by the 32 lanes of a warp: lane l reads the status word of tile end - l (a tile before
// 0 counts as P with 0), as decoupled_look_back does, but the step never waits. It accepts the window's words up to
// and including the nearest P or, without a P before the first unpublished word (X), those before that X (all A),
// adds their values to `exclusive` and moves `end` past them, so no word is read again once accepted (an A is a
// tile's final total: it stays right even if that tile has published P since). Returns whether a P was accepted,
// i.e. `exclusive` is the prefix. end and exclusive stay the same in every lane (ballots and an all-reduce).
template <typename T>
__device__ __forceinline__ bool look_back_step(volatile unsigned long long* status, int& end, T& exclusive) {
    const int lane = threadIdx.x & (WARP - 1);
    const int j = end - lane;
    const unsigned long long word = j >= 0 ? status[j] : status_word(FLAG_P, T(0));  // one 64-bit load
    const unsigned flag = (unsigned)(word >> 32);
    const unsigned xm = __ballot_sync(FULL_MASK, flag == 0u), pm = __ballot_sync(FULL_MASK, flag == 2u);
    const int first_x = xm ? __ffs(xm) - 1 : WARP, first_p = pm ? __ffs(pm) - 1 : WARP;
    const bool found = first_p < first_x;
    const int take = found ? first_p + 1 : first_x;  // lanes 0..take-1
    if (take > 0) exclusive += warp_allreduce_sum(lane < take ? from_bits<T>((unsigned)word) : T(0));
    end -= take;
    return found;
}

template <typename T>  // (int launcher only: see above)
__global__ void __launch_bounds__(THREADS, STASH_BLOCKS_PER_SM)
scan_stash_kernel(const T* __restrict__ x, T* __restrict__ y, int n, unsigned long long* work, int tiles) {
    extern __shared__ __align__(16) unsigned char stash_bytes[];  // buffer 1: STASH_WORDS of T
    __shared__ T s_warp[WARP + 1];
    __shared__ int s_tile;
    __shared__ T s_prefix;
    T* dyn = reinterpret_cast<T*>(stash_bytes);
    unsigned* counter = reinterpret_cast<unsigned*>(work);
    volatile unsigned long long* status = reinterpret_cast<volatile unsigned long long*>(work + 1);
    const int warp = threadIdx.x / WARP, lane = threadIdx.x & (WARP - 1);
    const bool x_aligned = aligned16(x), y_aligned = aligned16(y);

    // Prologue: the first tile loaded, scanned within the tile, its A published and parked, with no wait.
    if (threadIdx.x == 0) s_tile = (int)atomicAdd(counter, 1u);
    __syncthreads();  // the ticket, to every thread
    int t0 = s_tile;
    if (t0 >= tiles) return;  // (block-uniform) more blocks than tiles left
    int cur = 0;              // t0's buffer
    T v[ITEMS];               // the only tile in registers: the one arriving
    T total0;
    {
        const bool full = (long long)(t0 + 1) * TILE <= n && x_aligned;
        stash_issue_loads(x, (long long)t0 * TILE, n, full, v);
        stash_arrive(stash_buffer(cur, dyn), full, v);
        scan_thread_items(v, block_exclusive_scan(thread_sum(v), s_warp, &total0));
        if (threadIdx.x == 0) status[t0] = status_word(t0 == 0 ? FLAG_P : FLAG_A, total0);
        stash_park(stash_buffer(cur, dyn), v);
    }

    for (;;) {
        // t0 is parked in buffer cur and its A published. The next ticket: s_tile's readers of the last round have
        // all passed a barrier since (block_exclusive_scan's, or the prefix's below), so thread 0 may overwrite it.
        if (threadIdx.x == 0) s_tile = (int)atomicAdd(counter, 1u);
        __syncthreads();  // the ticket, to every thread; also every warp's last read of buffer cur ^ 1 (the store
                          // of the last round) comes before the arrival below writes it
        const int t1 = s_tile;
        const bool next = t1 < tiles;  // (block-uniform)
        const bool full1 = (long long)(t1 + 1) * TILE <= n && x_aligned;
        if (next) stash_issue_loads(x, (long long)t1 * TILE, n, full1, v);  // in flight from here
        // One look-back step for t0 while the loads are in flight (the status loads do not wait for them).
        int end = t0 - 1;
        T exclusive = T(0);
        bool found = false;
        if (warp == 0) found = look_back_step(status, end, exclusive);
        T total1 = T(0);
        if (next) {
            // t1 summed and its A published without waiting for t0's prefix: a successor's look-back must never
            // wait for this block's wait (that chains the tiles).
            T* wb = stash_buffer(cur ^ 1, dyn);
            stash_arrive(wb, full1, v);
            scan_thread_items(v, block_exclusive_scan(thread_sum(v), s_warp, &total1));
            if (threadIdx.x == 0) status[t1] = status_word(FLAG_A, total1);  // (t1 > t0 >= 0: never tile 0)
            stash_park(wb, v);
        }
        if (warp == 0) {
            // The rest of t0's look-back, waiting where a predecessor has not published yet. No deadlock: such a
            // predecessor holds a ticket below t0, taken by a running block that publishes its A without waiting
            // for anything (above), so the lowest unfinished tile is always resolvable.
            while (!found) found = look_back_step(status, end, exclusive);
            if (lane == 0) {
                if (t0 > 0) status[t0] = status_word(FLAG_P, exclusive + total0);
                s_prefix = exclusive;
            }
        }
        __syncthreads();  // s_prefix, to every thread (its next write is after the next round's ticket barrier);
                          // and every lane's park of t0 (a round ago) before other lanes read it back striped
        const bool full0 = (long long)(t0 + 1) * TILE <= n && y_aligned;
        stash_store(y, (long long)t0 * TILE, n, full0, stash_buffer(cur, dyn), s_prefix);
        if (!next) break;
        t0 = t1;
        total0 = total1;
        cur ^= 1;
    }
}

void scan_stash_i32(const int* x, int* y, int n, unsigned long long* work) {
    static int sms = 0;  // the SM count, asked once
    if (sms == 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        // Buffer 1 is dynamic shared memory: with the static part above 48 KB it needs the opt-in. The carveout
        // hint asks for the largest shared memory, so that STASH_BLOCKS_PER_SM blocks are resident at once.
        cudaFuncSetAttribute(scan_stash_kernel<int>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)(STASH_WORDS * sizeof(int)));
        cudaFuncSetAttribute(scan_stash_kernel<int>, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    }
    if (n <= 0) return;
    const int tiles = ceil_div(n, TILE);
    cudaMemsetAsync(work, 0, (size_t)(1 + tiles) * sizeof(unsigned long long), 0);
    // Every block resident, so no block waits behind a waiting one for an SM. (Not needed for correctness, which
    // the tickets give: a block that has not started holds no ticket.)
    const int grid = tiles < sms * STASH_BLOCKS_PER_SM ? tiles : sms * STASH_BLOCKS_PER_SM;
    scan_stash_kernel<int><<<grid, THREADS, STASH_WORDS * sizeof(int)>>>(x, y, n, work, tiles);
}
