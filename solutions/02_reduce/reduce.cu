// ====================================================================================================
// Lesson 02: reductions. Threads that cooperate through shared memory, barriers, warps and atomics.
//
// A reduction folds n numbers into one (a sum, a max, the index of the max). Every element is read once
// and almost nothing is written, so a good reduction runs at the speed of reading memory: it is
// memory-bound, and the versions below differ in how much of that speed they waste.
//
// Block-level versions. Each block reduces its own chunk and writes ONE partial sum: partial[blockIdx.x].
// Run them again on the partials (the notebook's full_sum() does) until one number is left.
//   reduce_v1_interleaved            tree in shared memory, `tid % (2*s) == 0`: divergent warps (worked)
//   reduce_v1b_strided_index         same tree, index = 2*s*tid: no divergence, bank conflicts (worked)
//   reduce_v2_sequential             stride halves from blockDim/2: contiguous threads (TODO task 2.1)
//   reduce_v3_first_add_during_load  each thread adds two elements while loading: half the blocks (worked)
//   reduce_v4_warp_unroll_syncwarp   the last 32 sums unrolled, ordered with __syncwarp (worked)
//   reduce_v5_warp_shuffle           warps sum in registers with __shfl_down_sync (TODO task 2.2)
// Whole-vector versions: one launch (plus a tiny one) gives the sum of x[0..n) in out[0].
//   reduce_v6_grid_stride_atomic     grid-stride loop, one atomicAdd per block (TODO task 2.3)
//   reduce_v7_two_pass               same loop, partials then a second pass: deterministic (uses 2.3)
// Row-wise and index reductions over a row-major tensor:
//   row_sum_v1_thread_per_row        one thread per row: simple, uncoalesced (worked)
//   row_sum                          one warp per row (TODO task 2.4)
//   row_max                          one warp per row, max instead of sum (TODO task 2.5)
//   argmax                           first index of the maximum, like torch.argmax (TODO task 2.6)
//
// Run: from Python, `m = cudacourse.lesson("02_reduce"); m.reduce_v2_sequential(x, partial, n)`.
// Check: `make check T=2.1` (one task; the whole lesson: `make check T=02_reduce`).
// Every kernel here runs on the GPU and on the CPU simulator unchanged.
// ====================================================================================================

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

// Threads per block of the block-level versions; every launcher below uses it.
constexpr int BLOCK = 256;
constexpr int WARP = 32;
constexpr unsigned FULL_MASK = 0xffffffffu;

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

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

// True when p may be read as float4 (16-byte aligned): torch allocations are, slices may not be.
__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// ----------------------------------------------------------------------------------------------------
// Worked example: reduce_v1_interleaved
// ----------------------------------------------------------------------------------------------------
// Each block copies its BLOCK elements into shared memory, then halves the number of live partial sums
// per step. At step s, thread tid adds s_data[tid + s] into s_data[tid] when tid is a multiple of 2*s.
//   s=1: threads 0,2,4,...   s=2: threads 0,4,8,...   s=4: threads 0,8,16,...
// Correct, but the working threads are scattered: in step s=1 every warp has 16 busy and 16 idle
// lanes, and later steps keep all warps alive to do a few lanes' work (warp divergence). The `%` costs
// too. The barrier between steps is essential: step s reads what step s/2 wrote in other threads.
__global__ void reduce_v1_interleaved_kernel(const float* __restrict__ x, float* __restrict__ partial, int n) {
    __shared__ float s_data[BLOCK];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    s_data[tid] = i < n ? x[i] : 0.0f;  // pad the last block with the identity of +
    __syncthreads();
    for (int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) s_data[tid] += s_data[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = s_data[0];
}

// partial[b] = sum of x[b*256 .. b*256+256) (missing elements count as 0). partial holds ceil(n/256).
void reduce_v1_interleaved(const float* x, float* partial, int n) {
    reduce_v1_interleaved_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(x, partial, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: reduce_v1b_strided_index
// ----------------------------------------------------------------------------------------------------
// Same pairs as v1, but thread tid handles pair index = 2*s*tid: the busy threads are now contiguous
// (threads 0..BLOCK/(2s)-1), so whole warps finish early and divergence is gone. New problem: at s=16
// lanes 0,1,2,... touch s_data[0], s_data[32], s_data[64], ...: all the same shared-memory bank (32 banks
// of 4 bytes), so the warp's access is split into serial transactions (2-way at s=1, 4-way at s=2,
// 8-way for s=4..16 with 256 threads: bank conflicts).
__global__ void reduce_v1b_strided_index_kernel(const float* __restrict__ x, float* __restrict__ partial, int n) {
    __shared__ float s_data[BLOCK];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    s_data[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = 1; s < blockDim.x; s *= 2) {
        const int index = 2 * s * tid;
        if (index < blockDim.x) s_data[index] += s_data[index + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = s_data[0];
}

// Same contract as reduce_v1_interleaved: partial holds ceil(n/256).
void reduce_v1b_strided_index(const float* x, float* partial, int n) {
    reduce_v1b_strided_index_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(x, partial, n);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: reduce_v2_sequential (task 2.1)
// ----------------------------------------------------------------------------------------------------
// Sequential addressing: start with s = blockDim.x / 2 and halve it; thread tid < s adds s_data[tid + s]
// into s_data[tid]. Busy threads are contiguous (no divergence inside full warps) and a warp reads 32
// consecutive words (32 different banks: no conflict).
__global__ void reduce_v2_sequential_kernel(const float* __restrict__ x, float* __restrict__ partial, int n) {
    __shared__ float s_data[BLOCK];
    const int tid = threadIdx.x;
    // TODO(task 2.1): load x into s_data (0 past the end), then a loop `for (s = blockDim.x / 2; s > 0;
    // s >>= 1)` where threads tid < s add s_data[tid + s] into s_data[tid]; thread 0 writes
    // partial[blockIdx.x] (~10 lines).
    // Hint: copy v1 above and change only the loop. Keep a __syncthreads() after the load and after every
    // step: without them a thread reads a partner's slot before the partner wrote it (a race).
    // BEGIN SOLUTION
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    s_data[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) s_data[tid] += s_data[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = s_data[0];
    // END SOLUTION
}

// Same contract as reduce_v1_interleaved: partial holds ceil(n/256).
void reduce_v2_sequential(const float* x, float* partial, int n) {
    reduce_v2_sequential_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(x, partial, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: reduce_v3_first_add_during_load
// ----------------------------------------------------------------------------------------------------
// In v2 half the threads are idle from the first step on. Instead, each thread loads TWO elements (one
// BLOCK apart, so both loads stay coalesced) and adds them before the tree: a block now covers 2*BLOCK
// elements and the launch needs half the blocks.
__global__ void reduce_v3_first_add_during_load_kernel(const float* __restrict__ x, float* __restrict__ partial,
                                                       int n) {
    __shared__ float s_data[BLOCK];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * (2 * blockDim.x) + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    s_data[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) s_data[tid] += s_data[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = s_data[0];
}

// partial[b] = sum of x[b*512 .. b*512+512). partial holds ceil(n/512).
void reduce_v3_first_add_during_load(const float* x, float* partial, int n) {
    reduce_v3_first_add_during_load_kernel<<<ceil_div(n, 2 * BLOCK), BLOCK>>>(x, partial, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: reduce_v4_warp_unroll_syncwarp
// ----------------------------------------------------------------------------------------------------
// Once s <= 32 only the first warp works, and __syncthreads() (which waits for the whole block) is more
// than needed: the 32 lanes of one warp can be ordered with __syncwarp(). The old trick (CUDA samples
// before 2017) dropped all synchronisation in the last warp and relied on `volatile` and lanes running in
// lockstep. Since Volta (compute capability 7.0) lanes of a warp are scheduled independently, so that
// code is a race: each step must read, __syncwarp(), write, __syncwarp(). The simulator reports the
// legacy version as a race. Needs blockDim.x >= 64.
__device__ void warp_tail_sum(float* s_data, int tid) {
    // Lane tid reads its partner, the warp agrees everyone has read, then lane tid writes its own slot.
    float v = s_data[tid];
    v += s_data[tid + 32]; __syncwarp(); s_data[tid] = v; __syncwarp();
    v += s_data[tid + 16]; __syncwarp(); s_data[tid] = v; __syncwarp();
    v += s_data[tid + 8];  __syncwarp(); s_data[tid] = v; __syncwarp();
    v += s_data[tid + 4];  __syncwarp(); s_data[tid] = v; __syncwarp();
    v += s_data[tid + 2];  __syncwarp(); s_data[tid] = v; __syncwarp();
    v += s_data[tid + 1];  __syncwarp(); s_data[tid] = v;
}

__global__ void reduce_v4_warp_unroll_syncwarp_kernel(const float* __restrict__ x, float* __restrict__ partial,
                                                      int n) {
    __shared__ float s_data[BLOCK];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * (2 * blockDim.x) + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    s_data[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 32; s >>= 1) {  // block-wide steps while more than one warp works
        if (tid < s) s_data[tid] += s_data[tid + s];
        __syncthreads();
    }
    if (tid < 32) warp_tail_sum(s_data, tid);        // the last six steps inside warp 0
    if (tid == 0) partial[blockIdx.x] = s_data[0];
}

// Same contract as v3: partial holds ceil(n/512).
void reduce_v4_warp_unroll_syncwarp(const float* x, float* partial, int n) {
    reduce_v4_warp_unroll_syncwarp_kernel<<<ceil_div(n, 2 * BLOCK), BLOCK>>>(x, partial, n);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: warp_reduce_sum and reduce_v5_warp_shuffle (task 2.2)
// ----------------------------------------------------------------------------------------------------
// A shuffle lets lane i read a register of lane j directly, with no shared memory and no separate sync:
// __shfl_down_sync(FULL_MASK, v, d) returns lane (i + d)'s v (lanes i + d >= 32 get their own v back).
// Five shuffles with d = 16, 8, 4, 2, 1 leave the warp's sum in lane 0.
__device__ float warp_reduce_sum(float v) {
    // TODO(task 2.2): add the value of the lane `offset` above, for offset = 16, 8, 4, 2, 1 (~3 lines).
    // Hint: v += __shfl_down_sync(FULL_MASK, v, offset); all 32 lanes must execute it (FULL_MASK).
    // BEGIN SOLUTION
    for (int offset = WARP / 2; offset > 0; offset >>= 1) v += __shfl_down_sync(FULL_MASK, v, offset);
    // END SOLUTION
    return v;  // after the loop, lane 0 holds the sum of the 32 lanes' v (other lanes hold partial sums)
}

// out[w] = sum of x[32*w .. 32*w+32) (missing elements count as 0): one warp per 32 elements. out holds
// ceil(n/32). A direct check of warp_reduce_sum.
__global__ void warp_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    v = warp_reduce_sum(v);  // every lane calls it, also those past the end (with v = 0)
    if ((threadIdx.x & (WARP - 1)) == 0 && i < n) out[i / WARP] = v;
}

void warp_sum(const float* x, float* out, int n) {
    warp_sum_kernel<<<ceil_div(n, BLOCK), BLOCK>>>(x, out, n);
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024): each warp reduces in registers,
// lane 0 of each warp parks its sum in shared memory, warp 0 reduces those. The result is valid in
// thread 0. Worked example: it only needs warp_reduce_sum.
__device__ float block_reduce_sum(float v) {
    __shared__ float s_warp[WARP];
    const int lane = threadIdx.x & (WARP - 1), warp = threadIdx.x / WARP;
    const int nwarps = blockDim.x / WARP;
    v = warp_reduce_sum(v);
    if (lane == 0) s_warp[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? s_warp[lane] : 0.0f;
        v = warp_reduce_sum(v);
    }
    __syncthreads();  // s_warp may be reused by a later call in the same kernel
    return v;
}

// v3's load (two elements per thread), then block_reduce_sum instead of the shared-memory tree: two
// barriers instead of nine.
__global__ void reduce_v5_warp_shuffle_kernel(const float* __restrict__ x, float* __restrict__ partial, int n) {
    const int i = blockIdx.x * (2 * blockDim.x) + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    v = block_reduce_sum(v);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

// Same contract as v3: partial holds ceil(n/512).
void reduce_v5_warp_shuffle(const float* x, float* partial, int n) {
    reduce_v5_warp_shuffle_kernel<<<ceil_div(n, 2 * BLOCK), BLOCK>>>(x, partial, n);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: the whole vector in one launch, reduce_v6_grid_stride_atomic (task 2.3)
// ----------------------------------------------------------------------------------------------------
// Launch only as many blocks as the GPU runs at once (a few per SM) and let each thread loop over the
// vector in steps of the whole grid (lesson 01's grid-stride loop). Each thread accumulates in a
// register, the block reduces its threads' sums, and ONE thread per block adds the block's sum into
// out[0] with atomicAdd. Thousands of atomics instead of millions; the order in which blocks add is not
// fixed, so the last bits of the sum can change from run to run (see the README).

// The sum of x[i] for i = global thread index, + grid size, + 2 * grid size, ... < n.
__device__ float thread_sum_grid_stride(const float* __restrict__ x, int n) {
    float acc = 0.0f;
    // TODO(task 2.3): grid-stride loop adding x[i] into acc (~3 lines).
    // Hint: start at blockIdx.x * blockDim.x + threadIdx.x, step gridDim.x * blockDim.x, stop at n.
    // BEGIN SOLUTION
    const int start = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = gridDim.x * blockDim.x;
    if (aligned16(x)) {
        // Fast path: 16-byte loads (float4), four independent ones in flight per thread per iteration.
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const int n4 = n / 4;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        int i = start;
        for (; i + 3 * stride < n4; i += 4 * stride) {
            const float4 v0 = x4[i], v1 = x4[i + stride], v2 = x4[i + 2 * stride], v3 = x4[i + 3 * stride];
            a0 += (v0.x + v0.y) + (v0.z + v0.w);
            a1 += (v1.x + v1.y) + (v1.z + v1.w);
            a2 += (v2.x + v2.y) + (v2.z + v2.w);
            a3 += (v3.x + v3.y) + (v3.z + v3.w);
        }
        for (; i < n4; i += stride) {
            const float4 v = x4[i];
            a0 += (v.x + v.y) + (v.z + v.w);
        }
        for (int j = 4 * n4 + start; j < n; j += stride) a1 += x[j];  // the last n % 4 elements
        acc = (a0 + a1) + (a2 + a3);
    } else {
        for (int i = start; i < n; i += stride) acc += x[i];
    }
    // END SOLUTION
    return acc;
}

__global__ void zero_kernel(float* out) { out[0] = 0.0f; }

__global__ void reduce_v6_grid_stride_atomic_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
    const float acc = thread_sum_grid_stride(x, n);
    const float block_total = block_reduce_sum(acc);
    // TODO(task 2.3): thread 0 of the block adds block_total into out[0] atomically (~1 line).
    // Hint: atomicAdd(out, block_total). A plain `out[0] += ...` loses other blocks' updates.
    // BEGIN SOLUTION
    if (threadIdx.x == 0) atomicAdd(out, block_total);
    // END SOLUTION
}

// Blocks for the grid-stride versions: enough to fill the GPU (8 blocks of 256 threads per SM is 2048
// threads, the most an SM holds), never more than the data needs.
static int grid_stride_blocks(int n, int cap) {
    const int needed = ceil_div(n, BLOCK * 4);
    int blocks = sm_count() * 8;
    if (blocks > cap) blocks = cap;
    if (blocks > needed) blocks = needed;
    return blocks > 0 ? blocks : 1;
}

// out[0] = sum of x[0..n). out holds one float; it is zeroed first.
void reduce_v6_grid_stride_atomic(const float* x, float* out, int n) {
    zero_kernel<<<1, 1>>>(out);
    reduce_v6_grid_stride_atomic_kernel<<<grid_stride_blocks(n, 65535), BLOCK>>>(x, out, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: reduce_v7_two_pass (deterministic; uses task 2.3's thread_sum_grid_stride)
// ----------------------------------------------------------------------------------------------------
// Same first pass, but each block writes its sum to partial[blockIdx.x]; a second launch of one block
// sums the partials in a fixed order. For a given grid size the result is bitwise reproducible, at the
// cost of a second (tiny) launch and a workspace.
constexpr int V7_MAX_BLOCKS = 1024;

__global__ void reduce_v7_pass1_kernel(const float* __restrict__ x, float* __restrict__ partial, int n) {
    const float total = block_reduce_sum(thread_sum_grid_stride(x, n));
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void reduce_v7_pass2_kernel(const float* __restrict__ partial, float* __restrict__ out, int count) {
    float v = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) v += partial[i];
    v = block_reduce_sum(v);
    if (threadIdx.x == 0) out[0] = v;
}

// out[0] = sum of x[0..n). partial is a workspace of at least 1024 floats (V7_MAX_BLOCKS).
void reduce_v7_two_pass(const float* x, float* partial, float* out, int n) {
    const int blocks = grid_stride_blocks(n, V7_MAX_BLOCKS);
    reduce_v7_pass1_kernel<<<blocks, BLOCK>>>(x, partial, n);
    reduce_v7_pass2_kernel<<<1, 1024>>>(partial, out, blocks);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: row_sum_v1_thread_per_row
// ----------------------------------------------------------------------------------------------------
// x is a rows x cols row-major matrix; out[r] = sum of row r. One thread walks a whole row. Simple, and
// fine when there are many short rows; for long rows it is slow: at each step the 32 lanes of a warp read
// 32 addresses `cols` floats apart, so one warp-wide load touches 32 different memory segments instead
// of one (uncoalesced), and few threads are busy when there are few rows.
__global__ void row_sum_v1_thread_per_row_kernel(const float* __restrict__ x, float* __restrict__ out, int rows,
                                                 int cols) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (size_t)r * cols;
    float acc = 0.0f;
    for (int c = 0; c < cols; ++c) acc += row[c];
    out[r] = acc;
}

void row_sum_v1_thread_per_row(const float* x, float* out, int rows, int cols) {
    row_sum_v1_thread_per_row_kernel<<<ceil_div(rows, BLOCK), BLOCK>>>(x, out, rows, cols);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: row_sum, one warp per row (task 2.4)
// ----------------------------------------------------------------------------------------------------
// Warp w of the grid owns row w: lane l reads columns l, l + 32, l + 64, ... (consecutive lanes read
// consecutive addresses: coalesced), sums them in a register, then warp_reduce_sum (task 2.2) combines the
// 32 lanes and lane 0 writes out[row]. No shared memory and no __syncthreads.
__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    const int lane = threadIdx.x & (WARP - 1);
    if (row >= rows) return;  // the whole warp leaves together: the shuffles below see all 32 lanes
    const float* xr = x + (size_t)row * cols;
    // TODO(task 2.4): lane sums xr[lane], xr[lane + 32], ... (< cols); warp_reduce_sum; lane 0 writes
    // out[row] (~6 lines).
    // Hint: all 32 lanes must reach warp_reduce_sum, also lanes with no column (they add 0).
    // BEGIN SOLUTION
    float acc = 0.0f;
    if ((cols & 3) == 0 && aligned16(x)) {  // every row starts 16-byte aligned: float4 loads
        const float4* r4 = reinterpret_cast<const float4*>(xr);
        const int c4 = cols / 4;
        float a1 = 0.0f;
        int c = lane;
        for (; c + WARP < c4; c += 2 * WARP) {
            const float4 u = r4[c], v = r4[c + WARP];
            acc += (u.x + u.y) + (u.z + u.w);
            a1 += (v.x + v.y) + (v.z + v.w);
        }
        if (c < c4) {
            const float4 u = r4[c];
            acc += (u.x + u.y) + (u.z + u.w);
        }
        acc += a1;
    } else {
        for (int c = lane; c < cols; c += WARP) acc += xr[c];
    }
    acc = warp_reduce_sum(acc);
    if (lane == 0) out[row] = acc;
    // END SOLUTION
}

// out[r] = sum over c of x[r * cols + c], for r < rows. 8 rows per block of 256 threads.
void row_sum(const float* x, float* out, int rows, int cols) {
    row_sum_kernel<<<ceil_div(rows, BLOCK / WARP), BLOCK>>>(x, out, rows, cols);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: row_max, one warp per row (task 2.5)
// ----------------------------------------------------------------------------------------------------
// The same shape as row_sum with max instead of +. The identity of max is -INFINITY (not 0: a row of
// negative numbers has a negative max). fmaxf(a, NaN) returns a, so NaN inputs are skipped here, while
// torch.amax returns NaN for a row containing one; the tests use NaN-free rows.
__device__ float warp_reduce_max(float v) {
    // TODO(task 2.5): like warp_reduce_sum with fmaxf instead of + (~2 lines).
    // Hint: v = fmaxf(v, __shfl_down_sync(FULL_MASK, v, offset)).
    // BEGIN SOLUTION
    for (int offset = WARP / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_down_sync(FULL_MASK, v, offset));
    // END SOLUTION
    return v;
}

__global__ void row_max_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    const int lane = threadIdx.x & (WARP - 1);
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    // TODO(task 2.5): lane keeps the max of xr[lane], xr[lane + 32], ...; warp_reduce_max; lane 0 writes
    // out[row] (~5 lines).
    // Hint: start from -INFINITY.
    // BEGIN SOLUTION
    float m = -INFINITY;
    if ((cols & 3) == 0 && aligned16(x)) {
        const float4* r4 = reinterpret_cast<const float4*>(xr);
        for (int c = lane; c < cols / 4; c += WARP) {
            const float4 u = r4[c];
            m = fmaxf(m, fmaxf(fmaxf(u.x, u.y), fmaxf(u.z, u.w)));
        }
    } else {
        for (int c = lane; c < cols; c += WARP) m = fmaxf(m, xr[c]);
    }
    m = warp_reduce_max(m);
    if (lane == 0) out[row] = m;
    // END SOLUTION
}

// out[r] = max over c of x[r * cols + c], for r < rows (cols >= 1). 8 rows per block of 256 threads.
void row_max(const float* x, float* out, int rows, int cols) {
    row_max_kernel<<<ceil_div(rows, BLOCK / WARP), BLOCK>>>(x, out, rows, cols);
}

// ----------------------------------------------------------------------------------------------------
// Exercise: argmax of a whole vector (task 2.6)
// ----------------------------------------------------------------------------------------------------
// Index of the maximum, and of the FIRST maximum when it occurs more than once, as torch.argmax. NaN
// counts as larger than everything (torch.argmax returns the first NaN), and -0.0 equals +0.0.
//
// The trick: turn the pair (value, index) into ONE 64-bit key whose unsigned order is the order we want,
// then the whole problem is a max-reduction over keys, which atomicMax on unsigned long long finishes:
//   high 32 bits: the float's bits made monotonic (bigger float -> bigger unsigned)
//                 positive floats (sign bit 0): set the sign bit;  negative floats: flip all bits;
//                 NaN -> 0xffffffff (the largest);  -0.0 -> same as +0.0
//   low 32 bits:  0xffffffff - index, so among equal values the SMALLER index has the bigger key.
// Key 0 is below every real key (a float's monotonic bits are at least 0x007fffff): the launcher starts
// from it, and finds "no key" if nothing was ever combined in.
__device__ unsigned long long argmax_key(float v, int i) {
    // TODO(task 2.6): build the key described above (~6 lines).
    // Hint: __float_as_uint(v) gives the bits; isnan(v); `v == 0.0f` is true for both zeros.
    // BEGIN SOLUTION
    unsigned bits;
    if (isnan(v)) {
        bits = 0xffffffffu;
    } else {
        const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);  // -0.0 == 0.0: give both one key
        bits = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    }
    return ((unsigned long long)bits << 32) | (unsigned long long)(0xffffffffu - (unsigned)i);
    // STUB: return 0ull;
    // END SOLUTION
}

__device__ unsigned long long warp_reduce_max_key(unsigned long long k) {
    // TODO(task 2.6): max over the warp, like warp_reduce_max but for unsigned long long keys (~3 lines).
    // Hint: __shfl_down_sync works on 64-bit values too; compare with `>` (no fmaxf for integers).
    // BEGIN SOLUTION
    for (int offset = WARP / 2; offset > 0; offset >>= 1) {
        const unsigned long long other = __shfl_down_sync(FULL_MASK, k, offset);
        if (other > k) k = other;
    }
    // END SOLUTION
    return k;
}

// Worked example: the block-level combine of keys (the same shape as block_reduce_sum).
__device__ unsigned long long block_reduce_max_key(unsigned long long k) {
    __shared__ unsigned long long s_warp[WARP];
    const int lane = threadIdx.x & (WARP - 1), warp = threadIdx.x / WARP;
    k = warp_reduce_max_key(k);
    if (lane == 0) s_warp[warp] = k;
    __syncthreads();
    if (warp == 0) {
        k = lane < (int)(blockDim.x / WARP) ? s_warp[lane] : 0ull;
        k = warp_reduce_max_key(k);
    }
    __syncthreads();
    return k;
}

__global__ void argmax_kernel(const float* __restrict__ x, unsigned long long* __restrict__ best, int n) {
    unsigned long long k = 0ull;
    // TODO(task 2.6): grid-stride loop keeping the largest argmax_key(x[i], i) in k, then
    // block_reduce_max_key, then thread 0 does atomicMax(best, k) (~6 lines).
    // Hint: as in task 2.3, with max of keys in place of + and atomicMax in place of atomicAdd.
    // BEGIN SOLUTION
    const int start = blockIdx.x * blockDim.x + threadIdx.x;
    const int stride = gridDim.x * blockDim.x;
    if (aligned16(x)) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const int n4 = n / 4;
        for (int i = start; i < n4; i += stride) {
            const float4 v = x4[i];
            // Keys of one float4 in index order; ties in value keep the earlier index by construction.
            unsigned long long a = argmax_key(v.x, 4 * i), b = argmax_key(v.y, 4 * i + 1);
            unsigned long long c = argmax_key(v.z, 4 * i + 2), d = argmax_key(v.w, 4 * i + 3);
            a = a > b ? a : b;
            c = c > d ? c : d;
            a = a > c ? a : c;
            if (a > k) k = a;
        }
        for (int j = 4 * n4 + start; j < n; j += stride) {
            const unsigned long long a = argmax_key(x[j], j);
            if (a > k) k = a;
        }
    } else {
        for (int i = start; i < n; i += stride) {
            const unsigned long long a = argmax_key(x[i], i);
            if (a > k) k = a;
        }
    }
    k = block_reduce_max_key(k);
    if (threadIdx.x == 0) atomicMax(best, k);
    // END SOLUTION
}

__global__ void argmax_init_kernel(long long* out) { out[0] = 0; }

// Turns the winning key back into an index in place; -1 when no key was ever combined in (key 0).
__global__ void argmax_finish_kernel(long long* out) {
    const unsigned long long k = (unsigned long long)out[0];
    out[0] = k == 0ull ? -1 : (long long)(0xffffffffu - (unsigned)(k & 0xffffffffull));
}

// out[0] = index of the first maximum of x[0..n) (n >= 1), as torch.argmax; out is one int64.
void argmax(const float* x, long long* out, int n) {
    argmax_init_kernel<<<1, 1>>>(out);
    argmax_kernel<<<grid_stride_blocks(n, 65535), BLOCK>>>(x, reinterpret_cast<unsigned long long*>(out), n);
    argmax_finish_kernel<<<1, 1>>>(out);
}
