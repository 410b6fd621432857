// ====================================================================================================
// Lesson 04, part 2: the small layers of a Llama-style model. Embedding lookup, rotary position
// embeddings (RoPE) on q and k, the SwiGLU gate, the residual add.
//
// Each is an elementwise or gather kernel: one thread per output element, memory-bound, no reductions.
// What makes them worth a lesson is the indexing (token, head, pair) and the input contracts: an
// embedding must refuse a token id outside the table instead of reading someone else's memory.
//
// Versions (each launcher below is callable from Python as m.<name>(...), tensors for pointers):
//   rope_tables   worked   cos/sin tables for RoPE, cos[t, i] = cos(t * theta^(-2i/d))
//   embedding     task 4.4 out[i, :] = table[ids[i], :], ids outside [0, vocab) flagged, never read
//   rope          task 4.5 rotate the pairs (x[i], x[i + d/2]) of every head of q and k by angle(t, i)
//   add           worked   out = a + b (the residual connection)
//   swiglu        task 4.6 out = silu(gate) * up, silu(g) = g * sigmoid(g), stable for |g| ~ 1e4
//
// Layout: activations are (B, T, H, d) row-major, token-major like FlashAttention's API: the element
// (b, t, h, c) is at ((b * T + t) * H + h) * d + c. A (B * T, H * d) matrix from a projection GEMM is
// already in this layout: no transpose is needed anywhere in the decoder.
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("04_transformer"); m.swiglu(g, u, out, n)
//   make check T=4.4         (or T=4.5, T=4.6)
// ====================================================================================================

#include <cmath>
#include <cstdint>

constexpr int kBlock = 256;

static inline int ceil_div(long long n, int per_block) { return (int)((n + per_block - 1) / per_block); }

// ----------------------------------------------------------------------------------------------------
// Worked example: rope_tables
// ----------------------------------------------------------------------------------------------------
// RoPE turns each pair of features (i, i + d/2) of a head at position t by the angle t * f_i with
// f_i = theta^(-2i/d): low i turn fast, high i slowly. The scores q_t . k_s then depend on t - s only.

__global__ void rope_tables_kernel(float* __restrict__ cos_t, float* __restrict__ sin_t, int T, int half,
                                   float theta) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * half) return;
    const int t = idx / half, i = idx % half;
    const float freq = powf(theta, -(float)(2 * i) / (float)(2 * half));
    const float angle = (float)t * freq;
    cos_t[idx] = cosf(angle);
    sin_t[idx] = sinf(angle);
}

// Contract: cos_t and sin_t hold T * (d / 2) floats, d even; row t, column i gets cos / sin of
// t * theta^(-2i/d). theta is 10000 in Llama 2.
void rope_tables(float* cos_t, float* sin_t, int T, int d, float theta) {
    if (T == 0 || d < 2) return;
    rope_tables_kernel<<<ceil_div((long long)T * (d / 2), kBlock), kBlock>>>(cos_t, sin_t, T, d / 2, theta);
}

// ----------------------------------------------------------------------------------------------------
// Task 4.4: embedding lookup, out-of-range ids rejected
// ----------------------------------------------------------------------------------------------------
// A kernel cannot raise an exception. The contract instead: the kernel writes bad[i] = 1 when ids[i]
// is outside [0, vocab) (and 0 otherwise), fills that output row with zeros and never reads the table
// for it; the Python wrapper (decoder.embed) checks the flags after the launch and raises IndexError
// naming the first bad position. Reading table[ids[i] * dim] for a bad id would read memory that is
// not the table: on a GPU that is silent garbage (or a crash), on the simulator an OutOfBoundsError.

__global__ void embedding_kernel(const int* __restrict__ ids, const float* __restrict__ table,
                                 float* __restrict__ out, int* __restrict__ bad, int n, int vocab, int dim) {
    // One block per token (blockIdx.x = i); its threads stride over the dim features of the row.
    const int i = blockIdx.x;
    if (i >= n) return;
    float* row = out + (size_t)i * dim;
    // TODO(task 4.4): read id = ids[i]; if it is outside [0, vocab), thread 0 writes bad[i] = 1 and the
    // threads write zeros to row; otherwise thread 0 writes bad[i] = 0 and the threads copy
    // table[id * dim + c] to row[c] for c = threadIdx.x, += blockDim.x (~10 lines).
    // Hint: compute the table offset in size_t: id * dim overflows int for large tables.
}

// Contract: ids holds n ints, table vocab * dim floats, out n * dim floats, bad n ints.
// out[i, :] = table[ids[i], :] and bad[i] = 0 when 0 <= ids[i] < vocab; otherwise out[i, :] = 0 and
// bad[i] = 1, and the table is not read for that row. ids and table are not modified.
void embedding(const int* ids, const float* table, float* out, int* bad, int n, int vocab, int dim) {
    if (n == 0) return;
    const int threads = dim >= 256 ? 256 : (dim >= 128 ? 128 : 64);
    embedding_kernel<<<n, threads>>>(ids, table, out, bad, n, vocab, dim);
}

// ----------------------------------------------------------------------------------------------------
// Task 4.5: RoPE on q and k
// ----------------------------------------------------------------------------------------------------
// For a head vector x (d floats) of the token at position t, and each pair index i < d/2, with
// c = cos_t[t, i] and s = sin_t[t, i]:
//     out[i]       = x[i] * c - x[i + d/2] * s
//     out[i + d/2] = x[i + d/2] * c + x[i] * s
// (the "rotate half" pairing of GPT-NeoX and Hugging Face Llama; Meta's original code pairs (2i, 2i+1),
// an equivalent model with permuted weights.)

__global__ void rope_kernel(const float* __restrict__ q, const float* __restrict__ k,
                            const float* __restrict__ cos_t, const float* __restrict__ sin_t,
                            float* __restrict__ q_out, float* __restrict__ k_out, int B, int T, int Hq, int Hk,
                            int d) {
    // One thread per pair: the first B*T*Hq*(d/2) threads do q, the next B*T*Hk*(d/2) do k.
    const int half = d / 2;
    const long long n_q = (long long)B * T * Hq * half, n_k = (long long)B * T * Hk * half;
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_q + n_k) return;
    const float* x = q;
    float* y = q_out;
    int H = Hq;
    if (idx >= n_q) {
        idx -= n_q;
        x = k;
        y = k_out;
        H = Hk;
    }
    // TODO(task 4.5): split idx into (token, head, i): i = idx % half, head = (idx / half) % H,
    // bt = idx / (half * H) is b * T + t, so the position is t = bt % T. The head vector starts at
    // (bt * H + head) * d. Apply the two formulas above with c = cos_t[t * half + i],
    // s = sin_t[t * half + i] (~10 lines). Hint: read both inputs before writing either output.
}

// Contract: q and q_out hold B * T * Hq * d floats, k and k_out B * T * Hk * d, layout (B, T, H, d);
// cos_t and sin_t hold T * (d / 2) floats (rope_tables); d even. Token t of every sequence is at
// position t. q, k and the tables are not modified.
void rope(const float* q, const float* k, const float* cos_t, const float* sin_t, float* q_out, float* k_out,
          int B, int T, int Hq, int Hk, int d) {
    const long long total = (long long)B * T * (Hq + Hk) * (d / 2);
    if (total == 0) return;
    rope_kernel<<<ceil_div(total, kBlock), kBlock>>>(q, k, cos_t, sin_t, q_out, k_out, B, T, Hq, Hk, d);
}

// ----------------------------------------------------------------------------------------------------
// Worked example: add, the residual connection
// ----------------------------------------------------------------------------------------------------

__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                           int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

// Contract: a, b, out hold n floats; out = a + b. out may be a or b (each element is read, then written
// by the same thread).
void add(const float* a, const float* b, float* out, int n) {
    if (n == 0) return;
    add_kernel<<<ceil_div(n, kBlock), kBlock>>>(a, b, out, n);
}

// ----------------------------------------------------------------------------------------------------
// Task 4.6: SwiGLU
// ----------------------------------------------------------------------------------------------------
// Llama's MLP is down( silu(gate(x)) * up(x) ): two projections of the same input, multiplied after a
// SiLU on one of them. silu(g) = g * sigmoid(g) = g / (1 + exp(-g)).

__global__ void swiglu_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                              float* __restrict__ out, int n) {
    // TODO(task 4.6): one thread per element: out[i] = g / (1 + expf(-g)) * up[i] with g = gate[i]
    // (~4 lines). Hint: check that g = -1e4 and g = +1e4 give finite results: exp(g) / (1 + exp(g)) is
    // inf / inf = NaN for large g, while g / (1 + exp(-g)) is never NaN.
}

// Contract: gate, up, out hold n floats; out = silu(gate) * up. gate and up are not modified.
void swiglu(const float* gate, const float* up, float* out, int n) {
    if (n == 0) return;
    swiglu_kernel<<<ceil_div(n, kBlock), kBlock>>>(gate, up, out, n);
}
