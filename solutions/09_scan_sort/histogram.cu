// ====================================================================================================
// Lesson 09, part 2: histograms. Many threads adding to few counters: atomics and their contention.
//
// hist[b] = the number of i with x[i] == b, for 0 <= b < bins (int32 values; values outside [0, bins)
// are ignored, as torch.histc ignores values outside [min, max]). Every element is read once and only
// `bins` counters are written, so a histogram should run at the speed of reading x. What stops it is
// the counters: an atomicAdd on a word other threads are adding to at the same moment waits for them,
// and the more the input repeats one value, the longer that queue (skewed, e.g. Zipf-distributed data).
//
//   histogram_v1_global            one atomicAdd on global memory per element (worked)
//   histogram_v2_shared            each block counts into its own bins in shared memory, then adds
//                                  them to the global ones once (TODO task 9.4)
//   histogram_v3_warp_aggregated   v2, but the lanes of a warp holding the same value first combine
//                                  (__match_any_sync), so one atomic per distinct value per warp (worked)
//
// Run: `m = cudacourse.lesson("09_scan_sort"); m.histogram_v2_shared(x, hist, n, bins)` (x int32,
// hist int32 of `bins` counters; the launchers zero it). Check: `make check T=9.4`.
// Every kernel here runs on the GPU and on the CPU simulator unchanged.
// ====================================================================================================

#include <cuda_runtime.h>
#include <stdint.h>

constexpr int HIST_THREADS = 256;
constexpr int WARP = 32;
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int MAX_SHARED_BINS = 48 * 1024 / 4;  // the bins of v2/v3 live in shared memory (48 KB, no opt-in)

static inline int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

// Number of SMs of the current GPU (asked once): the grid-stride versions launch a few blocks per SM.
static int sm_count() {
    static int count = 0;
    if (count == 0) {
        int dev = 0;
        cudaDeviceProp prop;
        cudaGetDevice(&dev);
        count = cudaGetDeviceProperties(&prop, dev) == cudaSuccess ? prop.multiProcessorCount : 1;
        if (count <= 0) count = 1;
    }
    return count;
}

// Enough blocks of HIST_THREADS to give each thread about 4 int4 loads, at most 8 blocks per SM (2048 threads:
// a full SM, so that enough loads are in flight to keep memory busy).
static int hist_blocks(int n) {
    const int want = ceil_div((long long)n, (long long)HIST_THREADS * 16);
    const int cap = 8 * sm_count();
    return want < 1 ? 1 : (want < cap ? want : cap);
}

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// ----------------------------------------------------------------------------------------------------
// Worked example: histogram_v1_global
// ----------------------------------------------------------------------------------------------------
// A grid-stride loop over the input (16-byte int4 loads when x is aligned, then the tail), one atomicAdd
// on the global counter per element. Correct for any bins. The atomics are performed in L2: with few
// bins every SM's threads queue on the same few words, and with one repeated value all of them queue on
// one. `(unsigned)v < (unsigned)bins` tests 0 <= v < bins in one comparison (a negative v becomes huge).
__global__ void histogram_global_kernel(const int* __restrict__ x, int n, int* __restrict__ hist, int bins) {
    const int start = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = gridDim.x * blockDim.x;
    int tail = 0;
    if (aligned16(x)) {
        const int4* x4 = reinterpret_cast<const int4*>(x);
        const int n4 = n / 4;
        for (int i = start; i < n4; i += stride) {
            const int4 q = x4[i];
            if ((unsigned)q.x < (unsigned)bins) atomicAdd(&hist[q.x], 1);
            if ((unsigned)q.y < (unsigned)bins) atomicAdd(&hist[q.y], 1);
            if ((unsigned)q.z < (unsigned)bins) atomicAdd(&hist[q.z], 1);
            if ((unsigned)q.w < (unsigned)bins) atomicAdd(&hist[q.w], 1);
        }
        tail = 4 * n4;
    }
    for (int i = tail + start; i < n; i += stride) {
        const int v = x[i];
        if ((unsigned)v < (unsigned)bins) atomicAdd(&hist[v], 1);
    }
}

// hist[0..bins) = counts of the values 0..bins-1 in x[0..n) (zeroed here first).
void histogram_v1_global(const int* x, int* hist, int n, int bins) {
    if (bins <= 0) return;
    cudaMemsetAsync(hist, 0, (size_t)bins * sizeof(int), 0);
    if (n > 0) histogram_global_kernel<<<hist_blocks(n), HIST_THREADS>>>(x, n, hist, bins);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: histogram_v2_shared (task 9.4)
// ----------------------------------------------------------------------------------------------------
// Privatization: each block keeps its own copy of the bins in shared memory (dynamic: `bins` ints, at
// most MAX_SHARED_BINS), counts its part of the input there with shared-memory atomics (performed in
// the SM, next to the threads), and at the end adds each of its nonzero counts to the global histogram:
// `bins` global atomics per block instead of one per element, and contention only inside a block.
__global__ void histogram_shared_kernel(const int* __restrict__ x, int n, int* __restrict__ hist, int bins) {
    extern __shared__ int s_hist[];
    // TODO(task 9.4): (~20 lines)
    //   1. zero s_hist[0..bins) (the block's threads stride over it), then __syncthreads();
    //   2. the grid-stride loop of histogram_global_kernel above, with atomicAdd(&s_hist[v], 1);
    //   3. __syncthreads(), then the block's threads stride over the bins again and add each nonzero
    //      s_hist[b] to hist[b] with one atomicAdd.
    // Hint: without the first barrier a fast thread counts into a bin a slow one has not zeroed yet;
    // without the second the flush reads counts other threads are still adding to.
    // BEGIN SOLUTION
    for (int b = threadIdx.x; b < bins; b += blockDim.x) s_hist[b] = 0;
    __syncthreads();
    const int start = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = gridDim.x * blockDim.x;
    int tail = 0;
    if (aligned16(x)) {
        const int4* x4 = reinterpret_cast<const int4*>(x);
        const int n4 = n / 4;
        for (int i = start; i < n4; i += stride) {
            const int4 q = x4[i];
            if ((unsigned)q.x < (unsigned)bins) atomicAdd(&s_hist[q.x], 1);
            if ((unsigned)q.y < (unsigned)bins) atomicAdd(&s_hist[q.y], 1);
            if ((unsigned)q.z < (unsigned)bins) atomicAdd(&s_hist[q.z], 1);
            if ((unsigned)q.w < (unsigned)bins) atomicAdd(&s_hist[q.w], 1);
        }
        tail = 4 * n4;
    }
    for (int i = tail + start; i < n; i += stride) {
        const int v = x[i];
        if ((unsigned)v < (unsigned)bins) atomicAdd(&s_hist[v], 1);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        const int c = s_hist[b];
        if (c) atomicAdd(&hist[b], c);
    }
    // END SOLUTION
}

// Same contract as histogram_v1_global. More than MAX_SHARED_BINS bins do not fit in shared memory:
// then the global version runs.
void histogram_v2_shared(const int* x, int* hist, int n, int bins) {
    if (bins <= 0) return;
    cudaMemsetAsync(hist, 0, (size_t)bins * sizeof(int), 0);
    if (n <= 0) return;
    if (bins > MAX_SHARED_BINS) {
        histogram_global_kernel<<<hist_blocks(n), HIST_THREADS>>>(x, n, hist, bins);
        return;
    }
    histogram_shared_kernel<<<hist_blocks(n), HIST_THREADS, (size_t)bins * sizeof(int)>>>(x, n, hist, bins);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: histogram_v3_warp_aggregated
// ----------------------------------------------------------------------------------------------------
// When the input repeats a value, the 32 lanes of a warp often hold the same one and their 32 shared
// atomics on one word are performed one after another. __match_any_sync(mask, v) gives each lane the set
// of lanes holding the same v; the lowest of them (the leader) adds the set's size (__popc) for all of
// them: one atomic per distinct value per warp. The warp's lanes must all reach the match (it is a warp
// collective), so the loop runs the same number of times in every lane and lanes past the end hold the
// value -1, which no bin counts. It costs the match itself on every element, so on uniform data over
// many bins, where lanes rarely agree, it can be slower than v2: bench.py measures both inputs.
__global__ void histogram_warp_aggregated_kernel(const int* __restrict__ x, int n, int* __restrict__ hist, int bins) {
    extern __shared__ int s_hist[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) s_hist[b] = 0;
    __syncthreads();
    const int lane = threadIdx.x & (WARP - 1);
    const int warp_start = blockIdx.x * blockDim.x + (threadIdx.x & ~(WARP - 1));
    const int stride = gridDim.x * blockDim.x;
    const bool vec = aligned16(x);
    const int n4 = vec ? n / 4 : 0;
    // the int4 part: 4 values per lane per step
    for (int base = warp_start; base < n4; base += stride) {
        const int i = base + lane;
        int4 q = make_int4(-1, -1, -1, -1);
        if (i < n4) q = reinterpret_cast<const int4*>(x)[i];
        const int vals[4] = {q.x, q.y, q.z, q.w};
        for (int k = 0; k < 4; ++k) {
            const int v = (unsigned)vals[k] < (unsigned)bins ? vals[k] : -1;
            const unsigned peers = __match_any_sync(FULL_MASK, (unsigned)v);
            if (v >= 0 && lane == __ffs(peers) - 1) atomicAdd(&s_hist[v], __popc(peers));
        }
    }
    // the rest, one value per lane per step
    for (int base = 4 * n4 + warp_start; base < n; base += stride) {
        const int i = base + lane;
        const int raw = i < n ? x[i] : -1;
        const int v = (unsigned)raw < (unsigned)bins ? raw : -1;
        const unsigned peers = __match_any_sync(FULL_MASK, (unsigned)v);
        if (v >= 0 && lane == __ffs(peers) - 1) atomicAdd(&s_hist[v], __popc(peers));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        const int c = s_hist[b];
        if (c) atomicAdd(&hist[b], c);
    }
}

// Same contract as histogram_v2_shared.
void histogram_v3_warp_aggregated(const int* x, int* hist, int n, int bins) {
    if (bins <= 0) return;
    cudaMemsetAsync(hist, 0, (size_t)bins * sizeof(int), 0);
    if (n <= 0) return;
    if (bins > MAX_SHARED_BINS) {
        histogram_global_kernel<<<hist_blocks(n), HIST_THREADS>>>(x, n, hist, bins);
        return;
    }
    histogram_warp_aggregated_kernel<<<hist_blocks(n), HIST_THREADS, (size_t)bins * sizeof(int)>>>(x, n, hist, bins);
}
