// ====================================================================================================
// Lesson 09, task 9.3's scan with the next tile's loads in flight during the look-back (a candidate, not graded).
//
// benchmarks/scan_sweep.py measured on the H200 (results/nvidia-h200/09_scan_sort/scan_sweep_2026-11-29c.txt):
// scan_lookback_kernel at 67-73% of the copy bandwidth, while the same tile work without the look-back (no
// dependence between tiles) runs at 97%. While warp 0 of a block looks back, the block's other warps wait at a
// barrier and the block has no load in flight. Here a block scans several tiles in turn: once it has summed tile
// `cur` it takes its next ticket and issues the next tile's 16-byte loads into registers (`q`, the "striped" loads
// of load_tile), and only then looks back for `cur`, so the loads land while it waits. Deadlock-free for the same
// reason as the one-tile kernel: tickets are taken in increasing order by running blocks, so the lowest tile not
// yet finished is always a block's current tile, and every tile it waits for is lower (and finished or summed).
//
// Versions (m.<name>(x, y, n, work), the contract of scan_lookback_{f32,i32}):
//   scan_prefetch_i32, scan_prefetch_f32   up to PF_TILES tiles per block (grid = ceil(tiles / PF_TILES))
//
// Not a file of its own: benchmarks/scan_sweep.py appends it to solutions/09_scan_sort/scan.cu (its helpers:
// block_exclusive_scan, decoupled_look_back, store_tile, warp_buffer, padded, Vec4, thread_sum, scan_thread_items),
// with the #defines of each row; tests/test_09_scan_sort.py checks it on the simulator against torch.cumsum.
// ====================================================================================================

#ifndef PF_TILES
#define PF_TILES 8
#endif
#ifndef PF_MIN_BLOCKS
#define PF_MIN_BLOCKS 4
#endif

// The 16-byte loads of a full tile's part of this warp, striped (lane l takes groups l, l + 32, ...), into q.
template <typename T>
__device__ __forceinline__ void issue_tile_loads(const T* __restrict__ x, long long base,
                                                 typename Vec4<T>::type (&q)[ITEMS / 4]) {
    using V = typename Vec4<T>::type;
    const int lane = threadIdx.x & (WARP - 1);
    const V* p = reinterpret_cast<const V*>(x + base + (long long)(threadIdx.x / WARP) * WARP_TILE);
#pragma unroll
    for (int k = 0; k < ITEMS / 4; ++k) q[k] = p[k * WARP + lane];
}

// v = this thread's ITEMS consecutive elements of the tile at base: from q through the warp's shared buffer for a
// full tile (vec), element by element otherwise (the last, partial tile; 0 past n).
template <typename T>
__device__ __forceinline__ void tile_from_loads(const T* __restrict__ x, long long base, int n, bool vec,
                                                const typename Vec4<T>::type (&q)[ITEMS / 4], T (&v)[ITEMS]) {
    using V = typename Vec4<T>::type;
    if (vec) {
        const int lane = threadIdx.x & (WARP - 1);
        T* buf = warp_buffer<T>();
#pragma unroll
        for (int k = 0; k < ITEMS / 4; ++k) *reinterpret_cast<V*>(buf + padded(4 * (k * WARP + lane))) = q[k];
        __syncwarp();
#pragma unroll
        for (int k = 0; k < ITEMS / 4; ++k) {
            const V r = *reinterpret_cast<const V*>(buf + padded(lane * ITEMS + 4 * k));
            v[4 * k] = r.x; v[4 * k + 1] = r.y; v[4 * k + 2] = r.z; v[4 * k + 3] = r.w;
        }
        __syncwarp();
    } else {
        const long long first = base + (long long)threadIdx.x * ITEMS;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) v[k] = first + k < n ? x[first + k] : T(0);
    }
}

template <typename T>
__global__ void __launch_bounds__(THREADS, PF_MIN_BLOCKS)
scan_prefetch_kernel(const T* __restrict__ x, T* __restrict__ y, int n, unsigned long long* work, int tiles) {
    using V = typename Vec4<T>::type;
    __shared__ T s_warp[WARP + 1];
    __shared__ int s_ticket[2];  // alternate: a round writes one while a slow warp may still read the other
    __shared__ T s_prefix;
    unsigned* counter = reinterpret_cast<unsigned*>(work);
    volatile unsigned long long* status = reinterpret_cast<volatile unsigned long long*>(work + 1);
    const bool aligned = aligned16(x);
    if (threadIdx.x == 0) s_ticket[0] = (int)atomicAdd(counter, 1u);
    __syncthreads();
    int cur = s_ticket[0];
    V q[ITEMS / 4];
    const auto full = [&](int t) { return aligned && (long long)(t + 1) * TILE <= n; };
    if (cur < tiles && full(cur)) issue_tile_loads(x, (long long)cur * TILE, q);
    for (int done = 1; cur < tiles; ++done) {
        const long long base = (long long)cur * TILE;
        T v[ITEMS];
        tile_from_loads(x, base, n, full(cur), q, v);
        // the next ticket, read by every thread after the block scan's barriers
        if (threadIdx.x == 0) s_ticket[done & 1] = done < PF_TILES ? (int)atomicAdd(counter, 1u) : tiles;
        T total;
        const T ex = block_exclusive_scan(thread_sum(v), s_warp, &total);
        const int next = s_ticket[done & 1];
        if (next < tiles && full(next)) issue_tile_loads(x, (long long)next * TILE, q);  // in flight from here on
        if (threadIdx.x < WARP) {
            const T prefix = decoupled_look_back(status, cur, total);
            if (threadIdx.x == 0) s_prefix = prefix;
        }
        __syncthreads();
        scan_thread_items(v, s_prefix + ex);
        store_tile(y, base, n, v);
        cur = next;
    }
}

template <typename T>
static void scan_prefetch(const T* x, T* y, int n, unsigned long long* work) {
    if (n <= 0) return;
    const int tiles = ceil_div(n, TILE);
    cudaMemsetAsync(work, 0, (size_t)(1 + tiles) * sizeof(unsigned long long), 0);
    scan_prefetch_kernel<T><<<ceil_div(tiles, PF_TILES), THREADS>>>(x, y, n, work, tiles);
}
void scan_prefetch_f32(const float* x, float* y, int n, unsigned long long* work) { scan_prefetch(x, y, n, work); }
void scan_prefetch_i32(const int* x, int* y, int n, unsigned long long* work) { scan_prefetch(x, y, n, work); }
