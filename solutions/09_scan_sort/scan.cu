// ====================================================================================================
// Lesson 09, part 1: scans (prefix sums), from a warp to the whole device.
//
// An inclusive scan writes y[i] = x[0] + x[1] + ... + x[i]; an exclusive scan writes the sum of the
// elements BEFORE i (y[0] = 0). After the reduction (lesson 02) it is the second collective every GPU
// program needs: it turns counts into offsets (a histogram into the positions of a sort), probabilities
// into a cumulative distribution to sample from. A device-wide scan reads each element once and writes
// it once, so at best it runs like a copy: it is memory-bound, and the versions below differ in how many
// times they move the data and in how the blocks learn what the blocks before them summed to.
//
// Segment scans (each segment scanned on its own: the building blocks, checked one by one):
//   scan_segments_hillis_steele_{f32,i32}  256-element segments, Hillis-Steele in shared memory (worked)
//   warp_inclusive_scan                     a warp's scan in registers with __shfl_up_sync (TODO task 9.1)
//   scan_segments_warp_{f32,i32}            32-element segments, one warp each (uses 9.1)
//   block_exclusive_scan                    warp scans, then a scan of the warps' totals (TODO task 9.1)
//   scan_segments_block_{f32,i32}           1024-element segments: 256 threads x 4 items (uses 9.1)
// Device-wide inclusive scans of n elements (each takes a workspace `work`, see the launchers):
//   scan_three_phase_{f32,i32}   reduce the tiles, scan the tile sums, scan each tile from its offset:
//                                reads x twice (TODO task 9.2: the third phase)
//   scan_chained_{f32,i32}       one pass: each tile waits for its predecessor's inclusive prefix, a
//                                chain through every tile (worked: the flag-and-fence protocol)
//   scan_lookback_{f32,i32}      one pass with decoupled look-back: a tile publishes its own total at
//                                once and looks back over its predecessors (TODO task 9.3)
//
// Run: from Python, `m = cudacourse.lesson("09_scan_sort"); m.scan_lookback_i32(x, y, n, work)`.
// Check: `make check T=9.1` (one task; the whole lesson: `make check T=09_scan_sort`).
// Every kernel here runs on the GPU and on the CPU simulator unchanged.
// ====================================================================================================

#include <cuda_runtime.h>
#include <stdint.h>

constexpr int WARP = 32;
constexpr unsigned FULL_MASK = 0xffffffffu;

// The device-wide scans cut the input into tiles of SCAN_THREADS x SCAN_ITEMS elements, one block per
// tile, each thread holding SCAN_ITEMS consecutive elements in registers. (#ifndef: a benchmark may
// compile this file with other values, e.g. benchmarks/scan_sweep.py.)
#ifndef SCAN_THREADS
#define SCAN_THREADS 256
#endif
#ifndef SCAN_ITEMS
#define SCAN_ITEMS 16
#endif
// Blocks per SM the compiler must fit (registers): 2048 threads, a full SM, at 256 threads per block.
#ifndef SCAN_MIN_BLOCKS
#define SCAN_MIN_BLOCKS (2048 / SCAN_THREADS)
#endif
constexpr int THREADS = SCAN_THREADS;
constexpr int ITEMS = SCAN_ITEMS;
constexpr int TILE = THREADS * ITEMS;
static_assert(ITEMS % 4 == 0, "SCAN_ITEMS must be a multiple of 4 (16-byte loads)");
static_assert(THREADS % WARP == 0 && THREADS <= 1024, "SCAN_THREADS must be a multiple of 32, at most 1024");

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// ----------------------------------------------------------------------------------------------------
// Worked example: Hillis-Steele in shared memory
// ----------------------------------------------------------------------------------------------------
// Step d (d = 1, 2, 4, ..., 128): every element adds the element d places to its left. After step d each
// element holds the sum of the 2d elements ending at it, so after log2(256) = 8 steps it holds its whole
// prefix. Two buffers: a step reads one and writes the other, so no thread overwrites a value another
// thread still has to read in the same step. It does n*log2(n) additions where a serial loop does n
// (not work-efficient), and each step costs a barrier: fine inside a block, the pattern to improve on.
template <typename T>
__global__ void hillis_steele_kernel(const T* __restrict__ x, T* __restrict__ y, int n) {
    __shared__ T buf[2][256];
    const int tid = threadIdx.x;
    const long long i = (long long)blockIdx.x * 256 + tid;
    int cur = 0;
    buf[0][tid] = i < n ? x[i] : T(0);
    __syncthreads();
    for (int d = 1; d < 256; d <<= 1) {
        T v = buf[cur][tid];
        if (tid >= d) v += buf[cur][tid - d];
        buf[cur ^ 1][tid] = v;
        cur ^= 1;
        __syncthreads();
    }
    if (i < n) y[i] = buf[cur][tid];
}

// y = inclusive scan of each 256-element segment of x (the last one may be shorter).
void scan_segments_hillis_steele_f32(const float* x, float* y, int n) {
    if (n > 0) hillis_steele_kernel<float><<<ceil_div(n, 256), 256>>>(x, y, n);
}
void scan_segments_hillis_steele_i32(const int* x, int* y, int n) {
    if (n > 0) hillis_steele_kernel<int><<<ceil_div(n, 256), 256>>>(x, y, n);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: warp_inclusive_scan (task 9.1, part 1 of 2)
// ----------------------------------------------------------------------------------------------------
// The same Hillis-Steele steps, but on the 32 lanes of a warp and in registers: __shfl_up_sync(mask, v, d)
// returns the v of the lane d below (lanes below d get their own v back). No shared memory and no
// barrier: the shuffle itself exchanges the values of the lanes named in the mask.
// Worked example of a shuffle loop (lesson 02's warp sum, which ends with the total in lane 0):
//     for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(FULL_MASK, v, offset);
template <typename T>
__device__ T warp_inclusive_scan(T v) {
    // TODO(task 9.1): 5 steps, d = 1, 2, 4, 8, 16: take the value of the lane d below with
    // __shfl_up_sync, and add it only in lanes whose index is at least d (~4 lines).
    // Hint: every lane must call the shuffle (all 32 named in FULL_MASK), even those that then ignore it.
    // BEGIN SOLUTION
    const int lane = threadIdx.x & (WARP - 1);
    for (int d = 1; d < WARP; d <<= 1) {
        const T t = __shfl_up_sync(FULL_MASK, v, d);
        if (lane >= d) v += t;
    }
    // END SOLUTION
    return v;
}

template <typename T>
__global__ void warp_scan_kernel(const T* __restrict__ x, T* __restrict__ y, int n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const T v = warp_inclusive_scan(i < n ? x[i] : T(0));
    if (i < n) y[i] = v;
}

// y = inclusive scan of each 32-element segment of x.
void scan_segments_warp_f32(const float* x, float* y, int n) {
    if (n > 0) warp_scan_kernel<float><<<ceil_div(n, 256), 256>>>(x, y, n);
}
void scan_segments_warp_i32(const int* x, int* y, int n) {
    if (n > 0) warp_scan_kernel<int><<<ceil_div(n, 256), 256>>>(x, y, n);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: block_exclusive_scan (task 9.1, part 2 of 2)
// ----------------------------------------------------------------------------------------------------
// An exclusive scan of one value per thread across the whole block (blockDim.x a multiple of 32, at most
// 1024): returns the sum of the values of the lower-numbered threads (0 in thread 0) and writes the sum
// of all of them to *total in every thread. Three steps:
//   1. each warp scans its 32 values (warp_inclusive_scan); lane 31 then holds the warp's total;
//   2. warp 0 scans the warps' totals (at most 32 of them) into their exclusive prefixes;
//   3. each thread adds its warp's prefix to its own exclusive value within the warp.
// s_warp is shared scratch of 33 T (the warps' prefixes and the block total). The function ends with a
// barrier, so a caller may use it again, e.g. in a loop.
// Worked example of the same shape (lesson 02's block_reduce_sum, a reduction instead of a scan):
//     v = warp_reduce_sum(v);
//     if (lane == 0) s_warp[warp] = v;
//     __syncthreads();
//     if (warp == 0) v = warp_reduce_sum(lane < nwarps ? s_warp[lane] : 0.0f);
//     __syncthreads();
template <typename T>
__device__ T block_exclusive_scan(T v, T* s_warp, T* total) {
    const int lane = threadIdx.x & (WARP - 1), warp = threadIdx.x / WARP;
    const int nwarps = blockDim.x / WARP;
    // TODO(task 9.1): the three steps above (~15 lines, three __syncthreads()).
    // Hint: the exclusive value of a lane is the inclusive value of the lane below it (another
    // __shfl_up_sync by 1, and 0 in lane 0): subtracting v from the inclusive value would work for
    // integers but round differently for floats. Put the block total in s_warp[32].
    // BEGIN SOLUTION
    const T inc = warp_inclusive_scan(v);
    T exc = __shfl_up_sync(FULL_MASK, inc, 1);
    if (lane == 0) exc = T(0);
    if (lane == WARP - 1) s_warp[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const T w = lane < nwarps ? s_warp[lane] : T(0);
        const T wi = warp_inclusive_scan(w);
        T we = __shfl_up_sync(FULL_MASK, wi, 1);
        if (lane == 0) we = T(0);
        s_warp[lane] = we;
        if (lane == WARP - 1) s_warp[WARP] = wi;
    }
    __syncthreads();
    const T result = s_warp[warp] + exc;
    *total = s_warp[WARP];
    __syncthreads();
    return result;
    // STUB: *total = T(0);
    // STUB: return T(0);
    // END SOLUTION
}

template <typename T>
__global__ void block_scan_kernel(const T* __restrict__ x, T* __restrict__ y, int n) {
    __shared__ T s_warp[WARP + 1];
    const long long base = (long long)blockIdx.x * 1024 + threadIdx.x * 4;
    T v[4];
    T sum = T(0);
    for (int k = 0; k < 4; ++k) {
        v[k] = base + k < n ? x[base + k] : T(0);
        sum += v[k];
    }
    T total;
    T run = block_exclusive_scan(sum, s_warp, &total);
    for (int k = 0; k < 4; ++k) {
        run += v[k];
        if (base + k < n) y[base + k] = run;
    }
}

// y = inclusive scan of each 1024-element segment of x (256 threads, 4 consecutive elements each).
void scan_segments_block_f32(const float* x, float* y, int n) {
    if (n > 0) block_scan_kernel<float><<<ceil_div(n, 1024), 256>>>(x, y, n);
}
void scan_segments_block_i32(const int* x, int* y, int n) {
    if (n > 0) block_scan_kernel<int><<<ceil_div(n, 1024), 256>>>(x, y, n);
}

// ----------------------------------------------------------------------------------------------------
// Given: moving a tile between memory and registers
// ----------------------------------------------------------------------------------------------------
// Thread t of a tile holds the ITEMS consecutive elements base + t*ITEMS ... (a "blocked" arrangement:
// what a thread-local scan wants). Read straight from memory that way, lane l of a warp asks for 16 bytes
// every ITEMS * 4 bytes: a warp's 16-byte load spans 32 * 64 bytes for 512 bytes wanted. So a full tile
// goes through shared memory, one warp at a time (CUB's "warp transpose"): the warp reads its 32 * ITEMS
// elements "striped" (lane l takes the 16-byte groups l, l + 32, ...: each load instruction reads 512
// consecutive bytes), writes them to its part of shared memory, and each lane reads back its ITEMS
// consecutive elements; stores go the other way. 4 words of padding after every 32 keep the 16-byte
// shared-memory accesses free of bank conflicts in both directions. The last, partial tile and unaligned
// views go element by element, with 0 (the identity of +) past the end. (SCAN_TRANSPOSE 0: direct
// 16-byte loads and stores in the blocked arrangement, for comparison: benchmarks/scan_sweep.py.)
#ifndef SCAN_TRANSPOSE
#define SCAN_TRANSPOSE 1
#endif
// SCAN_STREAMING 1: the full tiles' 16-byte loads and stores carry the "streaming" cache hint (__ldcs, __stcs:
// evict first, the data is touched once), so that they do not push the status words out of L2 (for comparison,
// benchmarks/scan_sweep.py; the simulator runs both the same).
#ifndef SCAN_STREAMING
#define SCAN_STREAMING 0
#endif
template <typename V> __device__ __forceinline__ V tile_load16(const V* p) { return SCAN_STREAMING ? __ldcs(p) : *p; }
template <typename V> __device__ __forceinline__ void tile_store16(V* p, V v) {
    if (SCAN_STREAMING) __stcs(p, v); else *p = v;
}
template <typename T> struct Vec4;
template <> struct Vec4<float> { using type = float4; };
template <> struct Vec4<int> { using type = int4; };

constexpr int WARP_TILE = WARP * ITEMS;                    // a warp's elements
constexpr int WARP_TILE_PADDED = WARP_TILE + WARP_TILE / 8;  // + 4 words per 32
__device__ __forceinline__ int padded(int p) { return p + (p >> 5) * 4; }

// This warp's part of the block's transpose buffer (one buffer per block, shared by loads and stores).
template <typename T>
__device__ __forceinline__ T* warp_buffer() {
    __shared__ __align__(16) T buf[THREADS / WARP][WARP_TILE_PADDED];
    return buf[threadIdx.x / WARP];
}

template <typename T>
__device__ __forceinline__ void load_tile(const T* __restrict__ x, long long base, int n, T (&v)[ITEMS]) {
    using V = typename Vec4<T>::type;
    const long long first = base + (long long)threadIdx.x * ITEMS;
    if (base + TILE <= n && aligned16(x)) {
        const int lane = threadIdx.x & (WARP - 1);
        const V* p = reinterpret_cast<const V*>(x + base + (long long)(threadIdx.x / WARP) * WARP_TILE);
        if (SCAN_TRANSPOSE) {
            T* buf = warp_buffer<T>();
            V q[ITEMS / 4];
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) q[k] = tile_load16(p + k * WARP + lane);  // all loads first: in flight together
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) *reinterpret_cast<V*>(buf + padded(4 * (k * WARP + lane))) = q[k];
            __syncwarp();
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) {
                const V r = *reinterpret_cast<const V*>(buf + padded(lane * ITEMS + 4 * k));
                v[4 * k] = r.x; v[4 * k + 1] = r.y; v[4 * k + 2] = r.z; v[4 * k + 3] = r.w;
            }
            __syncwarp();  // the buffer may be written again (store_tile) once every lane has read it
        } else {
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) {
                const V q = p[lane * (ITEMS / 4) + k];
                v[4 * k] = q.x; v[4 * k + 1] = q.y; v[4 * k + 2] = q.z; v[4 * k + 3] = q.w;
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) v[k] = first + k < n ? x[first + k] : T(0);
    }
}

template <typename T>
__device__ __forceinline__ void store_tile(T* __restrict__ y, long long base, int n, const T (&v)[ITEMS]) {
    using V = typename Vec4<T>::type;
    const long long first = base + (long long)threadIdx.x * ITEMS;
    if (base + TILE <= n && aligned16(y)) {
        const int lane = threadIdx.x & (WARP - 1);
        V* p = reinterpret_cast<V*>(y + base + (long long)(threadIdx.x / WARP) * WARP_TILE);
        if (SCAN_TRANSPOSE) {
            T* buf = warp_buffer<T>();
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) {
                V r;
                r.x = v[4 * k]; r.y = v[4 * k + 1]; r.z = v[4 * k + 2]; r.w = v[4 * k + 3];
                *reinterpret_cast<V*>(buf + padded(lane * ITEMS + 4 * k)) = r;
            }
            __syncwarp();
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k)
                tile_store16(p + k * WARP + lane, *reinterpret_cast<const V*>(buf + padded(4 * (k * WARP + lane))));
            __syncwarp();
        } else {
#pragma unroll
            for (int k = 0; k < ITEMS / 4; ++k) {
                V q;
                q.x = v[4 * k]; q.y = v[4 * k + 1]; q.z = v[4 * k + 2]; q.w = v[4 * k + 3];
                p[lane * (ITEMS / 4) + k] = q;
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k)
            if (first + k < n) y[first + k] = v[k];
    }
}

template <typename T>
__device__ __forceinline__ T thread_sum(const T (&v)[ITEMS]) {
    T s = T(0);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) s += v[k];
    return s;
}

// v[k] becomes start + v[0] + ... + v[k]: the thread's part of an inclusive scan.
template <typename T>
__device__ __forceinline__ void scan_thread_items(T (&v)[ITEMS], T start) {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        start += v[k];
        v[k] = start;
    }
}

// ----------------------------------------------------------------------------------------------------
// Worked example + exercise: the three-phase scan (task 9.2)
// ----------------------------------------------------------------------------------------------------
// Phase 1: each block sums its tile into sums[b]. Phase 2: one block scans sums[] into exclusive tile
// offsets, in place. Phase 3: each block scans its tile again, starting from its offset. Correct whatever
// order the blocks run in, because the kernel boundaries order the phases; the price is that x is read
// twice (phases 1 and 3): 12 bytes per int32 element instead of 8.
template <typename T>
__global__ void scan_tile_sums_kernel(const T* __restrict__ x, int n, T* __restrict__ sums) {
    __shared__ T s_warp[WARP + 1];
    T v[ITEMS];
    load_tile(x, (long long)blockIdx.x * TILE, n, v);
    T total;
    block_exclusive_scan(thread_sum(v), s_warp, &total);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// One block of 1024 threads walks the tile sums in chunks of 1024, carrying the running total.
template <typename T>
__global__ void scan_tile_offsets_kernel(T* sums, int tiles) {
    __shared__ T s_warp[WARP + 1];
    T carry = T(0);
    for (int base = 0; base < tiles; base += blockDim.x) {
        const int i = base + threadIdx.x;
        const T v = i < tiles ? sums[i] : T(0);
        T total;
        const T ex = block_exclusive_scan(v, s_warp, &total);
        if (i < tiles) sums[i] = carry + ex;
        carry += total;
    }
}

template <typename T>
__global__ void __launch_bounds__(THREADS, SCAN_MIN_BLOCKS)
scan_tiles_from_offsets_kernel(const T* __restrict__ x, T* __restrict__ y, int n, const T* __restrict__ offsets) {
    __shared__ T s_warp[WARP + 1];
    T v[ITEMS];
    // TODO(task 9.2): load this block's tile (load_tile, base blockIdx.x * TILE), exclusive-scan the
    // threads' sums across the block (thread_sum, block_exclusive_scan), turn the items into the
    // inclusive scan starting from offsets[blockIdx.x] plus the thread's exclusive prefix
    // (scan_thread_items), and store them (store_tile) (~6 lines).
    // Hint: scan_tile_sums_kernel above does the first half; only the tile's offset is new.
    // BEGIN SOLUTION
    const long long base = (long long)blockIdx.x * TILE;
    load_tile(x, base, n, v);
    T total;
    const T ex = block_exclusive_scan(thread_sum(v), s_warp, &total);
    scan_thread_items(v, offsets[blockIdx.x] + ex);
    store_tile(y, base, n, v);
    // END SOLUTION
}

// work: at least ceil(n / 1024) + 2 int64 words (the tile sums live there).
template <typename T>
static void scan_three_phase(const T* x, T* y, int n, unsigned long long* work) {
    if (n <= 0) return;
    const int tiles = ceil_div(n, TILE);
    T* sums = reinterpret_cast<T*>(work);
    scan_tile_sums_kernel<T><<<tiles, THREADS>>>(x, n, sums);
    scan_tile_offsets_kernel<T><<<1, 1024>>>(sums, tiles);
    scan_tiles_from_offsets_kernel<T><<<tiles, THREADS>>>(x, y, n, sums);
}

// y = inclusive scan of x[0..n); work: at least ceil(n / 1024) + 2 int64 words.
void scan_three_phase_f32(const float* x, float* y, int n, unsigned long long* work) { scan_three_phase(x, y, n, work); }
void scan_three_phase_i32(const int* x, int* y, int n, unsigned long long* work) { scan_three_phase(x, y, n, work); }

// ----------------------------------------------------------------------------------------------------
// Worked example: the chained scan (one pass, a flag and a fence per tile)
// ----------------------------------------------------------------------------------------------------
// One kernel, each element read once. Tile t needs the inclusive prefix of tile t-1 (everything before
// it); once it has it, it publishes its own (that prefix + its total) for tile t+1.
//
// Two problems every single-pass scan must solve:
// - Which blocks are running? CUDA promises nothing about the order in which blocks start, nor that a
//   block which has not started will ever start while others wait for it: a block that spins on a tile
//   whose block is not yet resident can wait forever. So the tile is NOT blockIdx.x: each block takes a
//   ticket from a counter (atomicAdd), and tiles are handed out in the order blocks actually start.
//   Whoever waits for tile t-1 waits for a block that has started, and so will finish.
// - Publishing. The value and the flag are two stores, and another SM may see them in either order
//   unless told otherwise. The writer stores the value, runs __threadfence() (everything it wrote before
//   the fence is seen by the device before anything it writes after), then sets the flag. The reader
//   spins on the flag through a volatile pointer (each iteration really loads it, the compiler may not
//   keep it in a register), then runs __threadfence() before reading the value, so that read is not
//   served before, or older than, the flag it saw; and it reads the value with __ldcg (cache global: from
//   L2, where the writer's value is, and not from this SM's L1, which is not kept coherent with other SMs'
//   writes). With libcu++ the same protocol is a store with memory_order_release on a cuda::atomic_ref
//   to the flag and a load with memory_order_acquire (the simulator does not provide libcu++).
//   On the simulator (checked mode), delete the two fences and the value's read is reported as a race.
// The catch: tile t waits for tile t-1, which waited for tile t-2...: a chain of 65536 waits for 2^28
// elements, each costing a trip through L2. The tiles run in parallel except for that chain.
//
// work layout: work[0] the ticket counter; then `tiles` 32-bit flags; then `tiles` values of T.
template <typename T>
__global__ void scan_chained_kernel(const T* __restrict__ x, T* __restrict__ y, int n,
                                    unsigned long long* work, int tiles) {
    __shared__ T s_warp[WARP + 1];
    __shared__ int s_tile;
    __shared__ T s_prefix;
    volatile unsigned* flags = reinterpret_cast<volatile unsigned*>(work + 1);
    T* prefixes = reinterpret_cast<T*>(work + 1 + (tiles + 1) / 2);
    if (threadIdx.x == 0) s_tile = (int)atomicAdd(reinterpret_cast<unsigned*>(work), 1u);
    __syncthreads();
    const int tile = s_tile;
    const long long base = (long long)tile * TILE;
    T v[ITEMS];
    load_tile(x, base, n, v);
    T total;
    const T ex = block_exclusive_scan(thread_sum(v), s_warp, &total);
    if (threadIdx.x == 0) {
        T prefix = T(0);
        if (tile > 0) {
            while (flags[tile - 1] == 0) {
            }
            __threadfence();  // acquire side: the value read next is at least as new as the flag seen
            prefix = __ldcg(prefixes + tile - 1);  // .cg: from L2, not from this SM's (incoherent) L1
        }
        __stcg(prefixes + tile, prefix + total);
        __threadfence();  // release side: the value is visible to the device before the flag is
        flags[tile] = 1u;
        s_prefix = prefix;
    }
    __syncthreads();
    scan_thread_items(v, s_prefix + ex);
    store_tile(y, base, n, v);
}

// y = inclusive scan of x[0..n); work: at least ceil(n / 1024) + 2 int64 words (zeroed here).
template <typename T>
static void scan_chained(const T* x, T* y, int n, unsigned long long* work) {
    if (n <= 0) return;
    const int tiles = ceil_div(n, TILE);
    cudaMemsetAsync(work, 0, (size_t)(1 + (tiles + 1) / 2) * sizeof(unsigned long long), 0);
    scan_chained_kernel<T><<<tiles, THREADS>>>(x, y, n, work, tiles);
}
void scan_chained_f32(const float* x, float* y, int n, unsigned long long* work) { scan_chained(x, y, n, work); }
void scan_chained_i32(const int* x, int* y, int n, unsigned long long* work) { scan_chained(x, y, n, work); }

// ----------------------------------------------------------------------------------------------------
// Exercise: decoupled look-back (task 9.3)
// ----------------------------------------------------------------------------------------------------
// Merrill and Garland's single-pass scan (2016), what CUB runs behind torch.cumsum. Each tile has one
// 64-bit status word: the flag in the high 32 bits, the value's bits in the low 32:
//   X (0)  nothing published yet
//   A (1)  the value is the tile's own total (its aggregate): published as soon as the tile is summed
//   P (2)  the value is the inclusive prefix: everything up to and including this tile
// A tile publishes A at once, then looks back at its predecessors t-1, t-2, ...: it adds their values
// while they say A and stops at the first P (adding that one too). It does not wait for t-1 to finish
// its own look-back, only for t-1 to have summed its tile, so the chain of the chained scan is gone.
// Flag and value share one aligned 64-bit word, written and read with single 64-bit accesses: a reader
// sees either the old word or the new one, never the new flag with the old value, so no fence is needed
// between them (CUB does the same for values of at most 8 bytes; larger ones need the fence protocol of
// the chained scan). volatile keeps every spin iteration a real load.
constexpr unsigned long long FLAG_A = 1ull << 32;
constexpr unsigned long long FLAG_P = 2ull << 32;

__device__ __forceinline__ unsigned to_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned to_bits(int v) { return (unsigned)v; }
template <typename T> __device__ __forceinline__ T from_bits(unsigned b);
template <> __device__ __forceinline__ float from_bits<float>(unsigned b) { return __uint_as_float(b); }
template <> __device__ __forceinline__ int from_bits<int>(unsigned b) { return (int)b; }

template <typename T>
__device__ __forceinline__ unsigned long long status_word(unsigned long long flag, T v) {
    return flag | (unsigned long long)to_bits(v);
}

// Given: the sum over the warp, in every lane.
template <typename T>
__device__ __forceinline__ T warp_allreduce_sum(T v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Called by the 32 lanes of warp 0 of the block that owns `tile`, each with the tile's total
// (`aggregate`). Publishes (A, aggregate), looks back until a P, publishes (P, prefix + aggregate) and
// returns the exclusive prefix (the sum of all earlier tiles) in every lane. Tile 0 has no predecessor.
template <typename T>
__device__ T decoupled_look_back(volatile unsigned long long* status, int tile, T aggregate) {
    const int lane = threadIdx.x & (WARP - 1);
    // TODO(task 9.3): (~20 lines)
    //   tile 0: lane 0 publishes (P, aggregate); return 0.
    //   else: lane 0 publishes (A, aggregate); then, over windows of 32 predecessors (lane l reads the
    //   status word of tile `end - l`, where end starts at tile - 1; a tile before 0 counts as P with 0):
    //     - while any lane still reads X, read the window again (__any_sync);
    //     - find the nearest P: the lowest lane whose flag is P (__ballot_sync, __ffs);
    //     - add up the values of the lanes up to and including that one (all 32 if none is P), with
    //       warp_allreduce_sum; stop if there was a P, else move the window 32 tiles further back;
    //   lane 0 publishes (P, exclusive + aggregate); return exclusive.
    // Hint: status_word(FLAG_A, v) builds a word; (word >> 32) is its flag, from_bits<T>((unsigned)word)
    // its value. Worked example of the publish-then-wait pattern: scan_chained_kernel above.
    // BEGIN SOLUTION
    if (tile == 0) {
        if (lane == 0) status[0] = status_word(FLAG_P, aggregate);
        return T(0);
    }
    if (lane == 0) status[tile] = status_word(FLAG_A, aggregate);
    T exclusive = T(0);
    int end = tile - 1;
    for (;;) {
        const int j = end - lane;
        const unsigned long long word = j >= 0 ? status[j] : status_word(FLAG_P, T(0));
        const unsigned flag = (unsigned)(word >> 32);
        if (__any_sync(FULL_MASK, flag == 0u)) continue;  // a predecessor has not published yet
        const unsigned has_p = __ballot_sync(FULL_MASK, flag == 2u);
        const int last = has_p ? __ffs(has_p) - 1 : WARP - 1;
        exclusive += warp_allreduce_sum(lane <= last ? from_bits<T>((unsigned)word) : T(0));
        if (has_p) break;
        end -= WARP;
    }
    if (lane == 0) status[tile] = status_word(FLAG_P, exclusive + aggregate);
    return exclusive;
    // STUB: return T(0);
    // END SOLUTION
}

template <typename T>
__global__ void __launch_bounds__(THREADS, SCAN_MIN_BLOCKS)
scan_lookback_kernel(const T* __restrict__ x, T* __restrict__ y, int n, unsigned long long* work) {
    __shared__ T s_warp[WARP + 1];
    __shared__ int s_tile;
    __shared__ T s_prefix;
    if (threadIdx.x == 0) s_tile = (int)atomicAdd(reinterpret_cast<unsigned*>(work), 1u);  // the ticket
    __syncthreads();
    const int tile = s_tile;
    const long long base = (long long)tile * TILE;
    T v[ITEMS];
    load_tile(x, base, n, v);
    T total;
    const T ex = block_exclusive_scan(thread_sum(v), s_warp, &total);
    if (threadIdx.x < WARP) {
        const T prefix = decoupled_look_back(reinterpret_cast<volatile unsigned long long*>(work + 1), tile, total);
        if (threadIdx.x == 0) s_prefix = prefix;
    }
    __syncthreads();
    scan_thread_items(v, s_prefix + ex);
    store_tile(y, base, n, v);
}

// y = inclusive scan of x[0..n); work: at least ceil(n / 1024) + 2 int64 words (zeroed here: the ticket
// counter and one status word per tile).
template <typename T>
static void scan_lookback(const T* x, T* y, int n, unsigned long long* work) {
    if (n <= 0) return;
    const int tiles = ceil_div(n, TILE);
    cudaMemsetAsync(work, 0, (size_t)(1 + tiles) * sizeof(unsigned long long), 0);
    scan_lookback_kernel<T><<<tiles, THREADS>>>(x, y, n, work);
}
void scan_lookback_f32(const float* x, float* y, int n, unsigned long long* work) { scan_lookback(x, y, n, work); }
void scan_lookback_i32(const int* x, int* y, int n, unsigned long long* work) { scan_lookback(x, y, n, work); }
