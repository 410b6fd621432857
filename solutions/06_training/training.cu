// ====================================================================================================
// Lesson 06: training kernels. The backward passes of a small transformer, a fused cross-entropy
// (loss and gradient in one kernel), the embedding backward, and the matmul backward.
//
// A backward kernel takes the upstream gradient dy = dL/dy of an op's output and returns dL/dx for each
// input, using what the forward saved (x, the statistics of a norm, the probabilities of a softmax).
// Elementwise ops become elementwise backward kernels; an op that broadcasts a parameter over rows
// (a bias, a norm's weight) becomes a COLUMN REDUCTION in the backward: dw[c] = sum over rows r of ....
//
// Versions (each launcher below is callable from Python as m.<name>(...), tensors for pointers):
//   gelu_forward              worked    y = x * Phi(x) (exact GELU, erf form, as F.gelu)
//   gelu_backward             task 6.1  dx = dy * (Phi(x) + x * phi(x))
//   bias_backward             task 6.1  db[c] = sum_r dy[r, c]: one thread per column, rows in order
//   swiglu_backward           worked    d gate, d up of out = silu(gate) * up (lesson 04's SwiGLU)
//   scale                     worked    y = alpha * x
//   rmsnorm_backward          worked    dx per row, dw as a two-stage column reduction (no atomics)
//   layernorm_backward        task 6.2  dx per row, dw and db by the same two-stage reduction
//   softmax_backward          task 6.3  dx = y * (dy - sum(y * dy)) per row
//   cross_entropy             task 6.3  per row: log-sum-exp, loss, and d logits in the same kernel;
//                                       ignore_index and mean reduction as F.cross_entropy
//   embedding_backward_atomic task 6.4  dtable[ids[i]] += dout[i] with atomicAdd (order varies)
//   embedding_backward_sorted task 6.4  the same sums, one thread per (row, feature), in sorted order
//   matmul_backward           task 6.6  C = A B: dA = dC B^T, dB = A^T dC, transposes read in place
//   linear_forward            worked    y = x W^T on gemm_fast_kernel (the capstone's linear layers)
//   linear_backward           worked    y = x W^T (+ b): dx = dy W, dW = dy^T x, db = column sums of dy
//   attention_backward        worked    dq, dk, dv of lesson 04's attention_naive: four batched products
//                                       and your softmax_backward
// The capstone's products run on gemm_fast_kernel (worked): task 6.6's kernel with 4 x 4 outputs per
// thread, lesson 03's register tiling; on the one-output-per-thread kernel they took most of a step.
// AdamW is in adamw.cu (task 6.5); the capstone (task 6.7) is train.py.
// Worked helpers, complete: warp_sum, block_sum, MaxSum and its combine, block_maxsum, fill,
// column_reduce (stage 2 of the deterministic column sums).
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("06_training"); m.gelu_backward(x, dy, dx, n)
//   make check T=6.1               (or T=6.2, T=6.3, T=6.4, T=6.6)   (graded checks)
//   make bench LESSONS=06_training                                    (timings, GPU only)
// ====================================================================================================

#include <cmath>
#include <cstdint>

constexpr int kBlock = 256;

static inline int ceil_div(long long n, int per_block) { return (int)((n + per_block - 1) / per_block); }

// ----------------------------------------------------------------------------------------------------
// Worked helpers: reductions
// ----------------------------------------------------------------------------------------------------

// Sum over the 32 lanes of a warp; every lane gets the result. All 32 lanes must call it.
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Sum over the whole block; every thread gets the result. blockDim.x must be a multiple of 32 and
// every thread must call it (it contains __syncthreads). `scratch` holds 32 floats.
__device__ inline float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // a previous call may still be reading scratch
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

// Online softmax state: m the largest value seen, s = sum of exp(x - m). s == 0 means "nothing seen".
// A NaN input makes s NaN, and NaN survives every combine: NaN logits propagate as in PyTorch.
struct MaxSum {
    float m;
    float s;
};

__device__ inline MaxSum maxsum_combine(MaxSum a, MaxSum b) {
    if (b.s == 0.0f) return a;  // an empty side changes nothing (and avoids exp(-inf - -inf) = NaN)
    if (a.s == 0.0f) return b;
    const float m = fmaxf(a.m, b.m);
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ inline MaxSum block_maxsum(MaxSum v, MaxSum* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) {
        MaxSum o = {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
        v = maxsum_combine(v, o);
    }
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : MaxSum{-INFINITY, 0.0f};
    for (int offset = 16; offset > 0; offset >>= 1) {
        MaxSum o = {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
        v = maxsum_combine(v, o);
    }
    return v;
}

__global__ void fill_kernel(float* __restrict__ y, float value, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = value;
}

static void fill(float* y, float value, long long n) {
    if (n <= 0) return;
    int blocks = ceil_div(n, kBlock);
    if (blocks > 4096) blocks = 4096;  // grid-stride loop: a capped grid covers any n
    fill_kernel<<<blocks, kBlock>>>(y, value, n);
}

// Sums of two values over the whole block at once (one pair of barriers for both, half of two block_sum
// calls); every thread gets both. Same rules as block_sum.
__device__ inline float2 block_sum2(float2 v, float2* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) {
        v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
        v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
    }
    __syncthreads();  // a previous call may still be reading scratch
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : make_float2(0.0f, 0.0f);
    for (int offset = 16; offset > 0; offset >>= 1) {
        v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
        v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
    }
    return v;
}

// Stage 2 of a deterministic column reduction: out[c] = sum over p of partial[p, c]. A block owns 32
// columns (threadIdx.x: consecutive threads read consecutive addresses, coalesced); the kReduceSplit
// threads of a column (threadIdx.y) add the rows p = y, y + 16, y + 32, ... in that order, then thread
// y = 0 adds their 16 sums in the order y = 0, 1, 2, .... The order is fixed, so the same inputs give the
// same bits whatever the launch order of stage 1's blocks, and 16 threads per column keep enough loads in
// flight (one thread per column, looping over 1024 partial rows, left the GPU waiting on memory).
constexpr int kReduceSplit = 16;

__global__ void column_reduce_kernel(const float* __restrict__ partial, float* __restrict__ out, int parts,
                                     int cols) {
    __shared__ float sums[kReduceSplit][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < cols)
        for (int p = threadIdx.y; p < parts; p += kReduceSplit) acc += partial[(size_t)p * cols + c];
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float total = 0.0f;
        for (int i = 0; i < kReduceSplit; ++i) total += sums[i][threadIdx.x];
        out[c] = total;
    }
}

// out (cols floats) = the column sums of partial (parts rows of cols floats).
static void column_reduce(const float* partial, float* out, int parts, int cols) {
    column_reduce_kernel<<<ceil_div(cols, 32), dim3(32, kReduceSplit)>>>(partial, out, parts, cols);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: gelu_forward, y = x * Phi(x)
// ----------------------------------------------------------------------------------------------------
// Phi is the standard normal CDF, Phi(x) = (1 + erf(x / sqrt 2)) / 2: F.gelu's default (approximate=
// "none"). GPT-2 used the tanh approximation; the backward below is for the exact form.

__global__ void gelu_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// Contract: x and y hold n floats; y = gelu(x).
void gelu_forward(const float* x, float* y, int n) {
    if (n <= 0) return;
    gelu_forward_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, y, n);
}

// ----------------------------------------------------------------------------------------------------
// Task 6.1: GELU backward and the bias backward
// ----------------------------------------------------------------------------------------------------
// d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) the normal density.
// The chain rule multiplies by the upstream gradient: dx = dy * (Phi(x) + x phi(x)).

__global__ void gelu_backward_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                     float* __restrict__ dx, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    // TODO(task 6.1, part 1 of 2): if i < n, dx[i] = dy[i] * (Phi(x) + x * phi(x)) (~4 lines).
    // Hint: Phi as in gelu_forward_kernel; phi(x) = 0.3989422804014327f * expf(-0.5f * x * x).
    // BEGIN SOLUTION
    if (i >= n) return;
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    const float pdf = 0.3989422804014327f * expf(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
    // END SOLUTION
}

// Contract: x, dy, dx hold n floats; dx = dL/dx of y = gelu(x) given dy = dL/dy. x, dy unchanged.
void gelu_backward(const float* x, const float* dy, float* dx, int n) {
    if (n <= 0) return;
    gelu_backward_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, dy, dx, n);
}

// y[r, c] = x[r, c] + b[c] adds the same b[c] to every row: its gradient is the sum over the rows,
// db[c] = sum_r dy[r, c]. (dx = dy: an add passes the gradient through unchanged, to both inputs;
// the residual connection's backward needs no kernel at all.)

__global__ void bias_backward_kernel(const float* __restrict__ dy, float* __restrict__ db, int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    // TODO(task 6.1, part 2 of 2): one thread per column c < cols: add dy[r, c] over r = 0 .. rows-1 in
    // order and write db[c] (~4 lines).
    // Hint: thread c and thread c + 1 read neighbouring addresses at every r: the reads are coalesced.
    // Index in size_t: r * cols overflows int for large matrices.
    // BEGIN SOLUTION
    if (c >= cols) return;
    float acc = 0.0f;
    for (int r = 0; r < rows; ++r) acc += dy[(size_t)r * cols + c];
    db[c] = acc;
    // END SOLUTION
}

// Contract: dy holds rows * cols floats, db cols floats: db[c] = sum over r of dy[r, c]. rows may be 0
// (then db = 0).
void bias_backward(const float* dy, float* db, int rows, int cols) {
    if (cols <= 0) return;
    bias_backward_kernel<<<ceil_div(cols, kBlock), kBlock>>>(dy, db, rows, cols);
}

// ----------------------------------------------------------------------------------------------------
// Worked examples: swiglu_backward and scale
// ----------------------------------------------------------------------------------------------------
// out = silu(g) * u, silu(g) = g s, s = sigmoid(g). d out / d u = silu(g);
// d out / d g = u * silu'(g) = u * (s + g s (1 - s)). For g = -1e4, s = 0 and g s (1 - s) = 0: no NaN.

__global__ void swiglu_backward_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                       const float* __restrict__ dout, float* __restrict__ dgate,
                                       float* __restrict__ dup, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i], s = 1.0f / (1.0f + expf(-g));
    dup[i] = dout[i] * g * s;
    dgate[i] = dout[i] * up[i] * (s + g * s * (1.0f - s));
}

// Contract: all five hold n floats; dgate, dup = gradients of out = silu(gate) * up given dout.
void swiglu_backward(const float* gate, const float* up, const float* dout, float* dgate, float* dup, int n) {
    if (n <= 0) return;
    swiglu_backward_kernel<<<ceil_div(n, kBlock), kBlock>>>(gate, up, dout, dgate, dup, n);
}

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float alpha, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}

// Contract: x and y hold n floats; y = alpha * x.
void scale(const float* x, float* y, float alpha, int n) {
    if (n <= 0) return;
    scale_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, y, alpha, n);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: rmsnorm_backward, dw by a two-stage column reduction
// ----------------------------------------------------------------------------------------------------
// y = x r w with r = 1 / sqrt(mean(x^2) + eps). With g = dy * w (elementwise):
//   dx = r g - x r^3 mean(g x)          (per row: one block-wide sum)
//   dw[c] = sum over rows of dy[., c] x[., c] r   (a column reduction over all rows)
// Why not atomicAdd(&dw[c], ...) from every row? Float addition is not associative: the sum's bits
// depend on the order the atomics land in, which changes from run to run on a GPU. Instead stage 1
// gives each block a fixed set of rows and a private row of partial sums (partial[block, c]); stage 2
// (column_reduce) adds the partial rows in a fixed order. Same inputs, same bits, every run.

constexpr int kNormRows = 32;  // rows per block in stage 1: partial holds ceil(rows / 32) * cols floats

__global__ void rmsnorm_backward_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                        const float* __restrict__ w, float* __restrict__ dx,
                                        float* __restrict__ partial, int rows, int cols, float eps) {
    __shared__ float scratch[32];
    const int r0 = blockIdx.x * kNormRows;
    const int r1 = r0 + kNormRows < rows ? r0 + kNormRows : rows;
    float* my_partial = partial + (size_t)blockIdx.x * cols;  // this block's private row of dw sums
    for (int c = threadIdx.x; c < cols; c += blockDim.x) my_partial[c] = 0.0f;
    for (int r = r0; r < r1; ++r) {
        const float* xr = x + (size_t)r * cols;
        const float* dyr = dy + (size_t)r * cols;
        float ss = 0.0f, gx = 0.0f;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            ss += xr[c] * xr[c];
            gx += dyr[c] * w[c] * xr[c];
        }
        ss = block_sum(ss, scratch);
        gx = block_sum(gx, scratch);
        const float rs = rsqrtf(ss / cols + eps);
        const float k = rs * rs * rs * gx / cols;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            dx[(size_t)r * cols + c] = rs * dyr[c] * w[c] - xr[c] * k;
            my_partial[c] += dyr[c] * xr[c] * rs;  // column c of this block: only this thread touches it
        }
    }
}

// Contract: dy, x, dx hold rows * cols floats; w and dw cols floats; partial is scratch of
// ceil(rows / 32) * cols floats. dx, dw = gradients of y = rmsnorm(x) * w given dy. Deterministic.
void rmsnorm_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* partial,
                      int rows, int cols, float eps) {
    if (cols <= 0) return;
    if (rows <= 0) { fill(dw, 0.0f, cols); return; }
    const int parts = ceil_div(rows, kNormRows);
    rmsnorm_backward_kernel<<<parts, kBlock>>>(dy, x, w, dx, partial, rows, cols, eps);
    column_reduce(partial, dw, parts, cols);
}

// ----------------------------------------------------------------------------------------------------
// Task 6.2: layernorm_backward
// ----------------------------------------------------------------------------------------------------
// y = xhat w + b, xhat = (x - mean) rstd, rstd = 1 / sqrt(var + eps) (the forward saved mean and rstd).
// With g = dy * w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))        (two sums per row, reduced together: block_sum2)
//   dw[c] = sum over rows of dy[., c] xhat[., c],  db[c] = sum over rows of dy[., c]
// dw and db: the two-stage reduction of rmsnorm_backward, with two partial rows per block.
//
// Speed (32768 x 4096 fp32 on an H100): the kernel must read x and dy once and write dx once, 1.6 GB, 0.54 ms
// at the 3 TB/s a copy reaches. A version shaped like rmsnorm_backward (256 threads, two block_sum calls
// per row, x and dy read again from memory for dx, pw[c] += in global memory on every row, one thread per
// column in stage 2) took 1.93 ms, 0.65x PyTorch. So each thread keeps its columns of the row in registers
// (at most kLnSlots of them: c = threadIdx.x + k * blockDim.x) between the sums and the dx pass, and its
// partial sums of dw and db too, stored once at the end; the launcher picks blockDim so that a row fits.

constexpr int kLnSlots = 4;  // columns per thread held in registers: rows up to 4 * 1024 = 4096 columns

__global__ void __launch_bounds__(1024) layernorm_backward_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                          const float* __restrict__ w, const float* __restrict__ mean,
                                          const float* __restrict__ rstd, float* __restrict__ dx,
                                          float* __restrict__ partial, int rows, int cols) {
    __shared__ float2 scratch[32];
    const int r0 = blockIdx.x * kNormRows;
    const int r1 = r0 + kNormRows < rows ? r0 + kNormRows : rows;
    // partial holds 2 * gridDim.x rows of cols floats: rows 0 .. gridDim.x-1 for dw, the rest for db.
    float* pw = partial + (size_t)blockIdx.x * cols;
    float* pb = partial + (size_t)(gridDim.x + blockIdx.x) * cols;
    // TODO(task 6.2): stage 1, the rows r0 .. r1-1 of this block (~35 lines). Thread t owns the columns
    // c = t + k * blockDim.x, k = 0 .. kLnSlots-1 (those < cols):
    //   1. before the rows: zero the partial sums aw[k], ab[k] (register arrays);
    //   2. per row: xhat and dy of its columns into register arrays, the sums of g = dy * w and g * xhat,
    //      one block_sum2 for both; then dx[r, c] = rstd (g - mean(g) - xhat mean(g xhat)) from the registers,
    //      and aw[k] += dy * xhat, ab[k] += dy;
    //   3. after the rows: pw[c] = aw[k], pb[c] = ab[k] (every column < cols written: stage 2 reads them all).
    // Rows wider than kLnSlots * blockDim.x (more than 4096 columns) have columns left over: loop over
    // c = t + kLnSlots * blockDim.x, += blockDim.x for them, reading x and dy again and adding into pw, pb in
    // memory (zeroed first). Stage 2 (the launcher's column_reduce) is given.
    // Hint: rmsnorm_backward_kernel above has the same shape (with one block_sum per sum, and sums in memory).
    // A loop over k with a constant bound (#pragma unroll) keeps the arrays in registers. Each column has one
    // owner thread, so no two threads ever add to the same slot: no atomics.
    // BEGIN SOLUTION
    const int t = threadIdx.x, nt = blockDim.x;
    float aw[kLnSlots], ab[kLnSlots];  // this thread's partial sums of dw and db, one per column it owns
#pragma unroll
    for (int k = 0; k < kLnSlots; ++k) aw[k] = ab[k] = 0.0f;
    for (int c = t + kLnSlots * nt; c < cols; c += nt) pw[c] = pb[c] = 0.0f;  // wide rows only
    for (int r = r0; r < r1; ++r) {
        const float* xr = x + (size_t)r * cols;
        const float* dyr = dy + (size_t)r * cols;
        float* dxr = dx + (size_t)r * cols;
        const float mu = mean[r], rs = rstd[r];
        float xh[kLnSlots], d[kLnSlots];  // this thread's columns of the row, read from memory once
        float2 s = make_float2(0.0f, 0.0f);  // (sum of g, sum of g * xhat) over this thread's columns
#pragma unroll
        for (int k = 0; k < kLnSlots; ++k) {
            const int c = t + k * nt;
            xh[k] = c < cols ? (xr[c] - mu) * rs : 0.0f;
            d[k] = c < cols ? dyr[c] : 0.0f;
            const float g = c < cols ? d[k] * w[c] : 0.0f;
            s.x += g;
            s.y += g * xh[k];
        }
        for (int c = t + kLnSlots * nt; c < cols; c += nt) {
            const float g = dyr[c] * w[c];
            s.x += g;
            s.y += g * (xr[c] - mu) * rs;
        }
        s = block_sum2(s, scratch);
        const float mg = s.x / cols, mgx = s.y / cols;
#pragma unroll
        for (int k = 0; k < kLnSlots; ++k) {
            const int c = t + k * nt;
            if (c < cols) dxr[c] = rs * (d[k] * w[c] - mg - xh[k] * mgx);  // w: 4 * cols bytes, cached
            aw[k] += d[k] * xh[k];
            ab[k] += d[k];
        }
        for (int c = t + kLnSlots * nt; c < cols; c += nt) {
            const float xv = (xr[c] - mu) * rs;
            dxr[c] = rs * (dyr[c] * w[c] - mg - xv * mgx);
            pw[c] += dyr[c] * xv;
            pb[c] += dyr[c];
        }
    }
#pragma unroll
    for (int k = 0; k < kLnSlots; ++k) {
        const int c = t + k * nt;
        if (c < cols) {
            pw[c] = aw[k];
            pb[c] = ab[k];
        }
    }
    // END SOLUTION
}

// Contract: dy, x, dx hold rows * cols floats; w, dw, db cols floats; mean and rstd rows floats (as
// the forward computed them: biased variance); partial is scratch of 2 * ceil(rows / 32) * cols
// floats. Deterministic: the same inputs give the same bits in dw and db on every run.
void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                        float* dx, float* dw, float* db, float* partial, int rows, int cols) {
    if (cols <= 0) return;
    if (rows <= 0) { fill(dw, 0.0f, cols); fill(db, 0.0f, cols); return; }
    const int parts = ceil_div(rows, kNormRows);
    // enough threads that a row fits in kLnSlots registers per thread: whole warps, 32 .. 1024
    int threads = (ceil_div(cols, kLnSlots) + 31) / 32 * 32;
    threads = threads < 32 ? 32 : (threads > 1024 ? 1024 : threads);
    layernorm_backward_kernel<<<parts, threads>>>(dy, x, w, mean, rstd, dx, partial, rows, cols);
    column_reduce(partial, dw, parts, cols);                        // the first parts rows: dw
    column_reduce(partial + (size_t)parts * cols, db, parts, cols);  // the next parts rows: db
}

// ----------------------------------------------------------------------------------------------------
// Task 6.3, part 1: softmax_backward
// ----------------------------------------------------------------------------------------------------
// y = softmax(x) per row. The Jacobian is dy_i/dx_j = y_i (delta_ij - y_j), so
//   dx_j = sum_i dy_i y_i (delta_ij - y_j) = y_j (dy_j - sum_i y_i dy_i).
// One block-wide sum per row, then one elementwise pass. It needs y (saved by the forward), not x.

__global__ void softmax_backward_kernel(const float* __restrict__ y, const float* __restrict__ dy,
                                        float* __restrict__ dx, int rows, int cols) {
    __shared__ float scratch[32];
    const int r = blockIdx.x;
    if (r >= rows) return;  // uniform over the block: no barrier is skipped by part of it
    const float* yr = y + (size_t)r * cols;
    const float* dyr = dy + (size_t)r * cols;
    float* dxr = dx + (size_t)r * cols;
    // TODO(task 6.3, part 1 of 2): s = sum over the row of yr[c] * dyr[c] (each thread a strided share,
    // then block_sum), then dxr[c] = yr[c] * (dyr[c] - s) (~6 lines).
    // Hint: every thread of the block must call block_sum, even one with no columns.
    // BEGIN SOLUTION
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += yr[c] * dyr[c];
    s = block_sum(s, scratch);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dxr[c] = yr[c] * (dyr[c] - s);
    // END SOLUTION
}

// Threads per block for a row of `cols` floats: about 8 per thread, whole warps, 32 .. 1024.
static inline int row_threads(int cols) {
    int t = (cols + 7) / 8;
    t = (t + 31) / 32 * 32;
    return t < 32 ? 32 : (t > 1024 ? 1024 : t);
}

// Contract: y, dy, dx hold rows * cols floats; dx = gradient of y = softmax(x, dim=1) given dy.
void softmax_backward(const float* y, const float* dy, float* dx, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    softmax_backward_kernel<<<rows, row_threads(cols)>>>(y, dy, dx, rows, cols);
}

// ----------------------------------------------------------------------------------------------------
// Task 6.3, part 2: cross_entropy, forward and backward in one pass over the logits
// ----------------------------------------------------------------------------------------------------
// For a row x with label t: loss = logsumexp(x) - x[t], and d loss / d x_c = softmax(x)_c - [c == t].
// Mean reduction over the N rows whose label is not ignore_index: loss = sum / N, every gradient
// times 1 / N (the launcher's inv_count); ignored rows add 0 to the loss and get a zero gradient.
// logsumexp(x) = m + log(sum exp(x - m)) with m the row max: exp never overflows, even for logits of
// 1e4, and the online MaxSum reads the row once. The gradient pass reads it a second time: the whole
// row of a 50257-word vocabulary never sits in shared memory.

__global__ void cross_entropy_kernel(const float* __restrict__ logits, const int* __restrict__ labels,
                                     float* __restrict__ losses, float* __restrict__ dlogits, int rows,
                                     int vocab, int ignore_index, float inv_count) {
    __shared__ MaxSum scratch[32];
    const int r = blockIdx.x;
    if (r >= rows) return;
    const float* xr = logits + (size_t)r * vocab;
    float* dr = dlogits + (size_t)r * vocab;
    const int t = labels[r];
    // TODO(task 6.3, part 2 of 2): (~20 lines)
    //   1. ignored row (t == ignore_index): thread 0 writes losses[r] = 0, the threads write dr[c] = 0; return.
    //   2. each thread pushes its strided share of xr into a MaxSum {m, s} (online: a new max v > m
    //      rescales s by expf(m - v); skip -inf values, they add exp(-inf) = 0), then block_maxsum.
    //   3. lse = m + logf(s); thread 0 writes losses[r] = lse - xr[t];
    //   4. dr[c] = (expf(xr[c] - lse) - (c == t ? 1 : 0)) * inv_count.
    // Hint: start from MaxSum{-INFINITY, 0.0f}. A NaN value must make s NaN (let it through the else
    // branch): NaN logits then give NaN loss and gradients for that row, as in PyTorch.
    // BEGIN SOLUTION
    if (t == ignore_index) {
        if (threadIdx.x == 0) losses[r] = 0.0f;
        for (int c = threadIdx.x; c < vocab; c += blockDim.x) dr[c] = 0.0f;
        return;
    }
    MaxSum ms = {-INFINITY, 0.0f};
    for (int c = threadIdx.x; c < vocab; c += blockDim.x) {
        const float v = xr[c];
        if (v > ms.m) {
            ms.s = ms.s * expf(ms.m - v) + 1.0f;
            ms.m = v;
        } else if (v != -INFINITY) {
            ms.s += expf(v - ms.m);
        }
    }
    ms = block_maxsum(ms, scratch);
    const float lse = ms.m + logf(ms.s);
    if (threadIdx.x == 0) losses[r] = lse - xr[t];
    for (int c = threadIdx.x; c < vocab; c += blockDim.x)
        dr[c] = (expf(xr[c] - lse) - (c == t ? 1.0f : 0.0f)) * inv_count;
    // END SOLUTION
}

// One block: loss[0] = inv_count * sum of losses[0 .. rows-1] (fixed order: deterministic).
__global__ void mean_loss_kernel(const float* __restrict__ losses, float* __restrict__ loss, int rows,
                                 float inv_count) {
    __shared__ float scratch[32];
    float s = 0.0f;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) s += losses[r];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) loss[0] = s * inv_count;
}

// Contract: logits and dlogits hold rows * vocab floats, labels and losses rows, loss 1 float. Every
// label is ignore_index or in [0, vocab) (the Python wrapper checks that before the launch: a kernel
// cannot raise). inv_count = 1 / (number of rows not ignored); NaN when there are none (PyTorch's mean
// of nothing). Writes losses (per row, 0 where ignored), loss = the mean, dlogits = d loss / d logits.
void cross_entropy(const float* logits, const int* labels, float* losses, float* dlogits, float* loss, int rows,
                   int vocab, int ignore_index, float inv_count) {
    if (rows <= 0 || vocab <= 0) return;
    const int threads = vocab >= 8192 ? 1024 : row_threads(vocab);  // long rows: the most threads per row
    cross_entropy_kernel<<<rows, threads>>>(logits, labels, losses, dlogits, rows, vocab, ignore_index, inv_count);
    mean_loss_kernel<<<1, 1024>>>(losses, loss, rows, inv_count);
}

// ----------------------------------------------------------------------------------------------------
// Task 6.4: embedding backward, atomic and deterministic
// ----------------------------------------------------------------------------------------------------
// Forward: out[i, :] = table[ids[i], :]. Backward: dtable[v, :] = sum of dout[i, :] over every i with
// ids[i] == v; rows no token used get 0. A token repeated in the batch adds several rows into one.

__global__ void embedding_backward_atomic_kernel(const int* __restrict__ ids, const float* __restrict__ dout,
                                                 float* __restrict__ dtable, int n, int dim) {
    const long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    // TODO(task 6.4, part 1 of 2): one thread per (i, c) with idx = i * dim + c < n * dim: atomicAdd
    // dout[i, c] into dtable[ids[i], c] (~4 lines). The launcher has zeroed dtable.
    // Hint: two threads with the same id add to the same address: a plain += would lose one of them.
    // BEGIN SOLUTION
    if (idx >= (long long)n * dim) return;
    const int i = (int)(idx / dim), c = (int)(idx % dim);
    atomicAdd(&dtable[(size_t)ids[i] * dim + c], dout[idx]);
    // END SOLUTION
}

// Contract: ids holds n ints in [0, vocab) (checked by the Python wrapper), dout n * dim floats, dtable
// vocab * dim floats. dtable = the gradient of the lookup. Float atomics land in whatever order the
// hardware runs them: on a GPU the low bits can differ from run to run.
void embedding_backward_atomic(const int* ids, const float* dout, float* dtable, int n, int vocab, int dim) {
    fill(dtable, 0.0f, (long long)vocab * dim);
    if (n <= 0 || dim <= 0) return;
    embedding_backward_atomic_kernel<<<ceil_div((long long)n * dim, kBlock), kBlock>>>(ids, dout, dtable, n, dim);
}

// The deterministic version: the Python wrapper sorts the positions by token id (a stable sort), so the
// positions of token v are order[offsets[v]] .. order[offsets[v + 1] - 1], in increasing position.
// One thread per (v, c) adds them in that order: no atomics, the same bits every run, and every row of
// dtable written (no zero-fill needed).

__global__ void embedding_backward_sorted_kernel(const int* __restrict__ order, const int* __restrict__ offsets,
                                                 const float* __restrict__ dout, float* __restrict__ dtable,
                                                 int vocab, int dim) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int v = blockIdx.y * blockDim.y + threadIdx.y;
    // TODO(task 6.4, part 2 of 2): if v < vocab and c < dim: sum dout[order[j], c] for j from
    // offsets[v] to offsets[v + 1] - 1, in that order, and write dtable[v, c] (~5 lines).
    // Hint: threadIdx.x runs along the features c, so a warp reads one contiguous piece of a dout row.
    // BEGIN SOLUTION
    if (v >= vocab || c >= dim) return;
    float acc = 0.0f;
    for (int j = offsets[v]; j < offsets[v + 1]; ++j) acc += dout[(size_t)order[j] * dim + c];
    dtable[(size_t)v * dim + c] = acc;
    // END SOLUTION
}

// Contract: order holds n ints (positions sorted by id, stable), offsets vocab + 1 ints (offsets[v] =
// number of ids < v), dout n * dim floats, dtable vocab * dim floats (every element written).
void embedding_backward_sorted(const int* order, const int* offsets, const float* dout, float* dtable, int n,
                               int vocab, int dim) {
    if (vocab <= 0 || dim <= 0) return;
    (void)n;
    dim3 block(32, 8);
    embedding_backward_sorted_kernel<<<dim3(ceil_div(dim, 32), ceil_div(vocab, 8)), block>>>(order, offsets, dout,
                                                                                             dtable, vocab, dim);
}

// ----------------------------------------------------------------------------------------------------
// Task 6.6: matmul backward on lesson 03's tiled GEMM, transposes read in place
// ----------------------------------------------------------------------------------------------------
// C = A B with A (M, K), B (K, N). dA = dC B^T (M, N) x (N, K); dB = A^T dC (K, M) x (M, N).
// One kernel computes C = op(A) op(B) for op = identity or transpose, chosen at compile time:
//   op(A)[i, k] = TA ? A[k * M + i] : A[i * K + k]      (A stored (K, M) when TA)
//   op(B)[k, j] = TB ? B[j * K + k] : B[k * N + j]      (B stored (N, K) when TB)
// No transposed copy is ever written: the tile loads read the stored matrix with swapped indices,
// arranged so that consecutive threadIdx.x still read consecutive addresses (coalesced).
//
// Row strides: a row of a stored matrix starts lda (ldb, ldc) floats after the previous one. For a whole
// matrix that is its row length (lda = TA ? M : K, ldb = TB ? K : N, ldc = N: what gemm_tiled passes);
// for a slice, more. And a batch: block z = blockIdx.z multiplies matrix z, with b = z / H, h = z % H,
// starting b * a_b + h * a_h floats into A (b_b, b_h into B; c_b, c_h into C). attention_backward uses both:
// the matrices of one head are slices of (B, N, H, d) tensors, rows H * d floats apart.

constexpr int TG = 32;

struct GemmLayout {
    int lda, ldb, ldc;                   // row strides of the stored A, B, C
    int H;                               // batch z = (b, h) = (z / H, z % H)
    long long a_b, a_h, b_b, b_h, c_b, c_h;  // offsets of batch (b, h): b * x_b + h * x_h
};

template <bool TA, bool TB>
__global__ void gemm_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                  int M, int N, int K, GemmLayout L) {
    __shared__ float As[TG][TG + 1];  // As[r][k] = op(A)[rowBase + r, k0 + k]; +1: no bank conflicts
    __shared__ float Bs[TG][TG + 1];  // Bs[k][c] = op(B)[k0 + k, colBase + c]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int rowBase = blockIdx.y * TG, colBase = blockIdx.x * TG;
    const int row = rowBase + ty, col = colBase + tx;
    const int zb = blockIdx.z / L.H, zh = blockIdx.z % L.H;  // this block's matrix of a batch (0, 0 without)
    A += zb * L.a_b + zh * L.a_h;
    B += zb * L.b_b + zh * L.b_h;
    C += zb * L.c_b + zh * L.c_h;
    const int lda = L.lda, ldb = L.ldb, ldc = L.ldc;
    // TODO(task 6.6): lesson 03's v3 loop (k0 += 32, load a tile of op(A) and of op(B), two barriers,
    // 32 products), with the loads depending on TA and TB (~16 lines). Write C[row, col] = C[row * ldc + col].
    //   not TA: As[ty][tx] = A[row, k0 + tx]             = A[row * lda + k0 + tx]          (A stored (M, K))
    //   TA:     As[tx][ty] = A[k0 + ty, rowBase + tx]   = A[(k0 + ty) * lda + rowBase + tx] (A stored (K, M))
    //   not TB: Bs[ty][tx] = B[k0 + ty, col]            = B[(k0 + ty) * ldb + col]        (B stored (K, N))
    //   TB:     Bs[tx][ty] = B[colBase + ty, k0 + tx]   = B[(colBase + ty) * ldb + k0 + tx] (B stored (N, K))
    // Hint: `if constexpr (TA)` picks the load at compile time; in the TA load tx runs along A's stored rows.
    // Store 0.0f outside the matrix. Index in size_t: row * lda can overflow int.
    // BEGIN SOLUTION
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TG) {
        if constexpr (TA) {
            As[tx][ty] = (k0 + ty < K && rowBase + tx < M) ? A[(size_t)(k0 + ty) * lda + rowBase + tx] : 0.0f;
        } else {
            As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * lda + k0 + tx] : 0.0f;
        }
        if constexpr (TB) {
            Bs[tx][ty] = (colBase + ty < N && k0 + tx < K) ? B[(size_t)(colBase + ty) * ldb + k0 + tx] : 0.0f;
        } else {
            Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * ldb + col] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < TG; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * ldc + col] = acc;
    // END SOLUTION
}

// `batches` products C = op(A) op(B) laid out as L says (K > 0).
template <bool TA, bool TB>
static void gemm_batched(const float* A, const float* B, float* C, int M, int N, int K, GemmLayout L, int batches) {
    if (M <= 0 || N <= 0 || batches <= 0) return;
    gemm_tiled_kernel<TA, TB><<<dim3(ceil_div(N, TG), ceil_div(M, TG), batches), dim3(TG, TG)>>>(A, B, C, M, N, K, L);
}

// One product of whole matrices: C (M, N) = op(A) op(B).
template <bool TA, bool TB>
static void gemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { fill(C, 0.0f, (long long)M * N); return; }
    gemm_batched<TA, TB>(A, B, C, M, N, K, GemmLayout{TA ? M : K, TB ? K : N, N, 1, 0, 0, 0, 0, 0, 0}, 1);
}

// Contract: C = A B with A (M, K), B (K, N), dC (M, N); writes dA (M, K) = dC B^T and dB (K, N) = A^T dC.
void matmul_backward(const float* A, const float* B, const float* dC, float* dA, float* dB, int M, int N, int K) {
    gemm_tiled<false, true>(dC, B, dA, M, K, N);  // (M, N) x op(B) where B (K, N) is read as B^T (N, K)
    gemm_tiled<true, false>(A, dC, dB, K, N, M);  // op(A) = A^T (K, M) x dC (M, N)
}

// ----------------------------------------------------------------------------------------------------
// Worked: a faster GEMM for the capstone, 64 x 64 tiles with a 4 x 4 patch of outputs per thread
// ----------------------------------------------------------------------------------------------------
// gemm_tiled_kernel (task 6.6) computes one output per thread: every multiply-add reads two values from
// shared memory, so shared memory, not arithmetic, sets its pace (lesson 03's v3). This kernel is lesson
// 03's register tiling (v5) with the interface of gemm_tiled_kernel (op(A), op(B), strides and batches
// as GemmLayout says): a block of 256 threads computes a 64 x 64 tile of C, each thread a 4 x 4 patch,
// so each value read from shared memory feeds 4 multiply-adds from a register, and the 4 values a thread
// reads per row of a tile sit side by side (one 16-byte shared-memory load). The capstone's linear layers
// and attention backward run on it: on gemm_tiled_kernel they took more than half of a training step.

constexpr int FM = 64, FN = 64, FK = 16;  // the block's tile of C, and the slice of k loaded per step

// Split-K (k_split > 0): block z computes the k range [z k_split, (z + 1) k_split) of one product (no
// batches) and writes its partial C at C + z M ldc; splitk_reduce adds the partials in a fixed order.
template <bool TA, bool TB>
__global__ void __launch_bounds__(256) gemm_fast_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                        float* __restrict__ C, int M, int N, int K, GemmLayout L,
                                                        int k_split) {
    // +4 floats per row: rows stay 16-byte aligned, and the transposing stores below hit 2 banks at most
    __shared__ __align__(16) float As[FK][FM + 4];  // As[k][r] = op(A)[rowBase + r, k0 + k]
    __shared__ __align__(16) float Bs[FK][FN + 4];  // Bs[k][c] = op(B)[k0 + k, colBase + c]
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;  // this thread's patch: rows ty*4.., cols tx*4..
    const int rowBase = blockIdx.y * FM, colBase = blockIdx.x * FN;
    const int lda = L.lda, ldb = L.ldb, ldc = L.ldc;
    int k_begin = 0, k_end = K;
    if (k_split > 0) {
        k_begin = blockIdx.z * k_split;
        k_end = min(K, k_begin + k_split);
        C += (size_t)blockIdx.z * M * ldc;
    } else {
        const int zb = blockIdx.z / L.H, zh = blockIdx.z % L.H;
        A += zb * L.a_b + zh * L.a_h;
        B += zb * L.b_b + zh * L.b_h;
        C += zb * L.c_b + zh * L.c_h;
    }
    float acc[4][4] = {};
    for (int k0 = k_begin; k0 < k_end; k0 += FK) {
        // 64 x 16 values of each operand, 4 per thread; consecutive threads read consecutive addresses of the
        // stored matrix (along k when it is stored k-minor, else along rows / columns); 0 outside the matrix
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            const int idx = tid + 256 * l;
            if constexpr (TA) {  // A stored (K, M)
                const int k = idx / FM, r = idx % FM;
                As[k][r] = (k0 + k < k_end && rowBase + r < M) ? A[(size_t)(k0 + k) * lda + rowBase + r] : 0.0f;
            } else {  // A stored (M, K)
                const int r = idx / FK, k = idx % FK;
                As[k][r] = (rowBase + r < M && k0 + k < k_end) ? A[(size_t)(rowBase + r) * lda + k0 + k] : 0.0f;
            }
            if constexpr (TB) {  // B stored (N, K)
                const int c = idx / FK, k = idx % FK;
                Bs[k][c] = (colBase + c < N && k0 + k < k_end) ? B[(size_t)(colBase + c) * ldb + k0 + k] : 0.0f;
            } else {  // B stored (K, N)
                const int k = idx / FN, c = idx % FN;
                Bs[k][c] = (k0 + k < k_end && colBase + c < N) ? B[(size_t)(k0 + k) * ldb + colBase + c] : 0.0f;
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < FK; ++k) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                a[i] = As[k][ty * 4 + i];
                b[i] = Bs[k][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = rowBase + ty * 4 + i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = colBase + tx * 4 + j;
            if (r < M && c < N) C[(size_t)r * ldc + c] = acc[i][j];
        }
    }
}

// `batches` products C = op(A) op(B) on gemm_fast_kernel, laid out as L says (K = 0 writes zeros).
template <bool TA, bool TB>
static void gemm_fast_batched(const float* A, const float* B, float* C, int M, int N, int K, GemmLayout L,
                              int batches) {
    if (M <= 0 || N <= 0 || batches <= 0) return;
    gemm_fast_kernel<TA, TB><<<dim3(ceil_div(N, FN), ceil_div(M, FM), batches), 256>>>(A, B, C, M, N, K, L, 0);
}

// One product of whole matrices on gemm_fast_kernel: C (M, N) = op(A) op(B).
template <bool TA, bool TB>
static void gemm_fast(const float* A, const float* B, float* C, int M, int N, int K) {
    gemm_fast_batched<TA, TB>(A, B, C, M, N, K, GemmLayout{TA ? M : K, TB ? K : N, N, 1, 0, 0, 0, 0, 0, 0}, 1);
}

// out[i] = sum over p of partial[p n + i], p in order (deterministic): the end of a split-K product.
__global__ void splitk_reduce_kernel(const float* __restrict__ partial, float* __restrict__ out, int parts, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int p = 0; p < parts; ++p) acc += partial[(size_t)p * n + i];
        out[i] = acc;
    }
}

// partial[s, c] = sum of x[r, c] over the rows r of slice s ([s rows_per, (s + 1) rows_per)), in row order:
// block (bx, s) owns 32 columns of slice s; its 8 rows of threads add every 8th row, then row 0 adds the 8.
__global__ void column_partial_kernel(const float* __restrict__ x, float* __restrict__ partial, int rows, int cols,
                                      int rows_per) {
    __shared__ float sums[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * rows_per;
    const int r1 = min(rows, r0 + rows_per);
    float acc = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) acc += x[(size_t)r * cols + c];
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float total = 0.0f;
        for (int i = 0; i < 8; ++i) total += sums[i][threadIdx.x];
        partial[(size_t)blockIdx.y * cols + c] = total;
    }
}

// A device buffer of at least n floats, kept between calls (grown when a larger one is needed).
static float* scratch_floats(size_t n) {
    static float* buf = nullptr;
    static size_t have = 0;
    if (n > have) {
        if (buf != nullptr) cudaFree(buf);
        buf = nullptr;
        have = 0;
        if (cudaMalloc(&buf, n * sizeof(float)) != cudaSuccess) return nullptr;
        have = n;
    }
    return buf;
}

// Worked: the capstone's linear layer without bias, y = x W^T (x (batch, in), W (out, in), y (batch, out)),
// on gemm_fast_kernel: W is read as op(B) = W^T in place, as lesson 03's linear reads it.
void linear_forward(const float* x, const float* W, float* y, int batch, int in_features, int out_features) {
    gemm_fast<false, true>(x, W, y, batch, out_features, in_features);
}

// Worked: the linear layer y = x W^T + b of lesson 03 (x (batch, in), W (out, in), b (out)).
// Contract: dy (batch, out); writes dx (batch, in) = dy W, dW (out, in) = dy^T x, db (out) = sum of dy rows.
//
// dW and db sum over the batch: for a batch of 4096 and a 256 x 256 weight, dW = dy^T x is a product with a
// long k (4096) and a small result (16 tiles of 64 x 64: 16 blocks for 132 SMs). So the batch is cut into
// slices (split-K): slice s computes its own partial dW (and partial column sums of dy for db) and a second
// kernel adds the partials in slice order, so the result does not depend on which block finished first.
void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db, int batch,
                     int in_features, int out_features) {
    if (in_features <= 0 || out_features <= 0) return;
    if (batch > 0) gemm_fast<false, false>(dy, W, dx, batch, in_features, out_features);
    const int M = out_features, N = in_features;
    const int tiles = ceil_div(M, FM) * ceil_div(N, FN);
    int slices = batch / 128;                          // at least 128 rows per slice
    const int wanted = ceil_div(2 * 132, tiles);       // about two blocks per SM of an H100
    if (slices > wanted) slices = wanted;
    const long long mn = (long long)M * N;
    float* partial = slices > 1 ? scratch_floats((size_t)slices * (mn + M)) : nullptr;
    if (partial == nullptr) {  // one slice (or no scratch memory): the product straight into dW
        if (batch <= 0) {
            fill(dW, 0.0f, mn);
            fill(db, 0.0f, M);
            return;
        }
        gemm_fast<true, false>(dy, x, dW, M, N, batch);
        column_reduce(dy, db, batch, M);
        return;
    }
    const int rows_per = (ceil_div(batch, slices) + FK - 1) / FK * FK;  // whole k-steps per slice
    slices = ceil_div(batch, rows_per);
    gemm_fast_kernel<true, false><<<dim3(ceil_div(N, FN), ceil_div(M, FM), slices), 256>>>(
        dy, x, partial, M, N, batch, GemmLayout{M, N, N, 1, 0, 0, 0, 0, 0, 0}, rows_per);
    column_partial_kernel<<<dim3(ceil_div(M, 32), slices), dim3(32, 8)>>>(dy, partial + slices * mn, batch, M,
                                                                          rows_per);
    const int blocks = ceil_div(mn, kBlock) < 4096 ? ceil_div(mn, kBlock) : 4096;
    splitk_reduce_kernel<<<blocks, kBlock>>>(partial, dW, slices, mn);
    splitk_reduce_kernel<<<ceil_div(M, kBlock), kBlock>>>(partial + slices * mn, db, slices, M);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: attention_backward (for lesson 04's attention_naive, which saves P)
// ----------------------------------------------------------------------------------------------------
// Forward per (batch b, head h): S = scale Q K^T, P = softmax(S) per row (causal: masked entries 0),
// O = P V. Backward with dO:
//   dV = P^T dO      dP = dO V^T      dS = softmax_backward(P, dP)      dQ = scale dS K      dK = scale dS^T Q
// Four matrix products per head, all on gemm_fast_kernel (task 6.6's interface, register-tiled) as batched
// calls, one launch each for all B * H heads; the transposes are read in place, as in matmul_backward.
// Layout as in lesson 04:
// q, k, v, o and their gradients are (B, N, H, d), so a head's N x d matrix starts at b * N * H * d + h * d
// with rows H * d floats apart; P is (B, H, N, N). Masked entries have P = 0, so their dS is 0 too: no mask
// is needed in the backward. (A first version with one thread per output looping over N read V with a
// stride of H * d floats between neighbouring threads: 32 memory transactions per warp load.)

// Contract: q, k, v, dout, dq, dk, dv hold B * N * H * d floats ((B, N, H, d)); p holds the B * H * N * N
// probabilities that attention_naive left in its s buffer; scratch holds 2 * B * H * N * N floats.
void attention_backward(const float* q, const float* k, const float* v, const float* p, const float* dout,
                        float* dq, float* dk, float* dv, float* scratch, int B, int H, int N, int d, float scale) {
    if (B <= 0 || H <= 0 || N <= 0 || d <= 0) return;
    const int bh = B * H, hd = H * d;
    const long long nn = (long long)N * N, seq = (long long)N * hd;  // one (N, N) matrix; one batch of (N, H, d)
    float* dp = scratch;
    float* ds = scratch + (size_t)bh * nn;
    // operands: an (N, N) matrix of (B, H, N, N) is at b * H * nn + h * nn, rows N apart; an (N, d) head of
    // (B, N, H, d) at b * seq + h * d, rows hd apart
    gemm_fast_batched<true, false>(p, dout, dv, N, d, N, GemmLayout{N, hd, hd, H, H * nn, nn, seq, d, seq, d}, bh);
    gemm_fast_batched<false, true>(dout, v, dp, N, N, d, GemmLayout{hd, hd, N, H, seq, d, seq, d, H * nn, nn}, bh);
    softmax_backward_kernel<<<bh * N, row_threads(N)>>>(p, dp, ds, bh * N, N);  // your kernel, task 6.3
    const int n_s = (int)(bh * nn);
    scale_kernel<<<ceil_div(n_s, kBlock), kBlock>>>(ds, dp, scale, n_s);         // dS * scale, into dp's space
    gemm_fast_batched<false, false>(dp, k, dq, N, d, N, GemmLayout{N, hd, hd, H, H * nn, nn, seq, d, seq, d}, bh);
    gemm_fast_batched<true, false>(dp, q, dk, N, d, N, GemmLayout{N, hd, hd, H, H * nn, nn, seq, d, seq, d}, bh);
}
