// ccsim_mma.h - tensor-core operations for the CPU simulator: nvcuda::wmma (<mma.h>) and the warp-level PTX
// operations that lesson 05's cc_mma.h wraps (mma.sync m16n8k16, ldmatrix, cp.async).
//
// Every operation is warp-collective, as on the GPU: the 32 lanes of a warp meet at a rendezvous (the runtime's
// __syncwarp with a full mask, so a missing lane, an exited lane or a partial warp is reported as for any warp
// collective), exchange their registers through a per-worker scratch area, and each lane then computes its own
// result. Products of 16-bit inputs are exact in fp32; sums are accumulated in fp32 (the order differs from the
// hardware's, so results agree within fp32 rounding, not bit for bit).
//
// Memory that the learner's code names (the matrix pointers of load/store_matrix_sync, the rows of ldmatrix, both
// sides of cp.async) is read and written by ordinary, instrumented C++ in this header, attributed to the lane
// that performs it: in checked mode such accesses are bounds-, race- and initialisation-checked like any other.
// Only the exchange scratch is private to the simulator (no_sanitize: it is neither shared nor global memory).
//
// Layouts:
// - WMMA fragments are opaque by the CUDA Programming Guide ("the mapping of matrix elements into fragment
//   internal storage is unspecified"). The simulator deliberately uses a scrambled, non-natural mapping
//   (FRAG_MAP below), so code that indexes frag.x[i] as if it knew which element it holds computes wrong
//   results here; element-wise operations over all x[i] (scaling, activation) stay valid.
// - mma.sync and ldmatrix follow the PTX ISA exactly (sections "Matrix Fragments for mma.m16n8k16 with
//   floating point type" and "Warp-level matrix load instruction: ldmatrix"), element by element.
// - cp.async copies land when the thread waits for their group (cp.async.wait_group / wait_all), not when they
//   are issued: reading the destination before the wait reads what was there before (stale or never-written
//   shared memory), which checked mode reports.
#ifndef CCSIM_MMA_H
#define CCSIM_MMA_H

#define CCSIM_NOSAN __attribute__((no_sanitize_thread, noinline))
// The functions that touch the learner's memory are inlined with the caller's debug location ("artificial"),
// so that a checked-mode report of such an access names the learner's line, not this header's.
#define CCSIM_AT_CALLER __attribute__((always_inline, artificial)) inline

extern "C" void ccsim_api_set_error(const char*, const char*);
extern "C" void ccsim_api_quiet(int);

namespace ccsim {
namespace mma {

// ---------------------------------------------------------------------------------------------------
// Warp rendezvous and the exchange scratch
// ---------------------------------------------------------------------------------------------------
// A block's fibers all run on one worker thread, one block at a time, so a per-worker area indexed by the
// warp's number inside the block is private to that warp between two rendezvous.
constexpr int kScratchWords = 512;  // per warp: a 16x16 A and a 16x16 B as floats, or 32 lanes x 16 words
struct Scratch { unsigned long long w[32][kScratchWords / 2 + 32]; };

CCSIM_NOSAN static Scratch* scratch() {
    static thread_local Scratch* s = nullptr;
    if (!s) s = (Scratch*)std::calloc(1, sizeof(Scratch));
    return s;
}
static inline unsigned rank() { dim3 t = threadIdx, b = blockDim; return (t.z * b.y + t.y) * b.x + t.x; }
static inline unsigned lane() { return rank() & 31u; }
static inline unsigned warp() { return rank() >> 5; }
static inline void rendezvous(const char* f, int l) { ccsim_rt_warp(W_SYNC, 0xffffffffu, 0, 0, 32, f, l); }

// The exchange words of this warp (32-bit view).
CCSIM_NOSAN static uint32_t* words() { return (uint32_t*)scratch()->w[warp()]; }
CCSIM_NOSAN static void put(unsigned slot, uint32_t v) { words()[slot] = v; }
CCSIM_NOSAN static uint32_t get(unsigned slot) { return words()[slot]; }
CCSIM_NOSAN static void put_ptr(unsigned slot, const void* p) { ((const void**)scratch()->w[warp()])[slot] = p; }
CCSIM_NOSAN static const char* get_ptr(unsigned slot) { return ((const char**)scratch()->w[warp()])[slot]; }

// A kernel-side error with a message of our own: the first error of a launch wins, so the trap that ends the
// thread only stops it. Each failure path first opens a Quiet: the message is built on the heap, which checked
// mode would otherwise report as a wild write (the fiber's end drops the guard: the thread never resumes).
struct Quiet {
    Quiet() { ccsim_api_quiet(1); }
    ~Quiet() { ccsim_api_quiet(-1); }
};
[[noreturn]] static inline void fail(const std::string& what, const char* f, int l) {
    dim3 t = threadIdx, b = blockIdx;
    std::string m = "KernelError at " + std::string(f) + ":" + std::to_string(l) + ": thread (" + std::to_string(t.x) +
                    "," + std::to_string(t.y) + "," + std::to_string(t.z) + ") of block (" + std::to_string(b.x) + "," +
                    std::to_string(b.y) + "," + std::to_string(b.z) + "): " + what;
    ccsim_api_set_error("misaligned", m.c_str());
    ccsim_rt_trap(f, l);
    std::abort();
}
static inline void need_aligned(const void* p, unsigned align, const char* op, const char* what, const char* f, int l) {
    if ((uintptr_t)p % align == 0) return;
    Quiet quiet;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%p", p);
    fail(std::string(op) + ": " + what + " address " + buf + " is not " + std::to_string(align) +
         "-byte aligned (it is " + std::to_string((uintptr_t)p % align) + " bytes past a multiple of " +
         std::to_string(align) + "). The instruction requires " + std::to_string(align) +
         "-byte alignment: round the row stride up (pad the shared array) or move the tile's start.", f, l);
}

static inline float b16_to_float(uint16_t v, bool bf16) { return bf16 ? bf2f_bits(v) : h2f_bits(v); }

// ---------------------------------------------------------------------------------------------------
// PTX mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (PTX ISA: "Matrix Fragments for
// mma.m16n8k16 with floating point type"). groupID = lane >> 2, tig = lane % 4:
//   A (16x16, 4 regs of 2 elements): reg r holds row groupID + 8*(r & 1), columns 2*tig + 8*(r >> 1) + {0, 1}
//   B (16x8,  2 regs): reg r holds rows (k) 2*tig + 8*r + {0, 1}, column (n) groupID
//   C, D (16x8 fp32, 4 values): value i is row groupID + 8*(i >> 1), column 2*tig + (i & 1)
// ---------------------------------------------------------------------------------------------------
static inline uint16_t half_of(uint32_t reg, int k) { return (uint16_t)(k ? reg >> 16 : reg & 0xffffu); }

CCSIM_NOSAN static void mma_compute(float d[4], const float c[4], bool bf16, unsigned ln) {
    const uint32_t* w = words();  // lanes' A regs at [lane*4 + r], B regs at [128 + lane*2 + r]
    const unsigned g = ln >> 2, t = ln & 3u;
    for (int i = 0; i < 4; ++i) {
        const unsigned row = g + 8u * (unsigned)(i >> 1), col = 2u * t + (unsigned)(i & 1);
        float acc = c[i];
        for (unsigned k = 0; k < 16; ++k) {
            const unsigned a_lane = (row & 7u) * 4u + (k & 7u) / 2u, a_reg = (row >> 3) + 2u * (k >> 3);
            const unsigned b_lane = col * 4u + (k & 7u) / 2u, b_reg = k >> 3;
            const float a = b16_to_float(half_of(w[a_lane * 4u + a_reg], (int)(k & 1u)), bf16);
            const float b = b16_to_float(half_of(w[128u + b_lane * 2u + b_reg], (int)(k & 1u)), bf16);
            acc += a * b;
        }
        d[i] = acc;
    }
}

CCSIM_AT_CALLER static void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], bool bf16,
                                const char* f, int l) {
    const unsigned ln = lane();
    for (unsigned r = 0; r < 4; ++r) put(ln * 4u + r, a[r]);
    for (unsigned r = 0; r < 2; ++r) put(128u + ln * 2u + r, b[r]);
    const float cin[4] = {c[0], c[1], c[2], c[3]};  // d may alias c
    rendezvous(f, l);
    mma_compute(d, cin, bf16, ln);
    rendezvous(f, l);  // nobody overwrites the scratch before every lane has read it
}

// ---------------------------------------------------------------------------------------------------
// PTX ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16 (PTX ISA: "Warp-level matrix load
// instruction: ldmatrix"). Lanes 8j..8j+7 give the addresses of rows 0..7 of matrix j (16 bytes each,
// 16-byte aligned). Lane l receives in register j: row l/4, elements 2*(l%4) and 2*(l%4)+1 of matrix j;
// with .trans, column l/4, rows 2*(l%4) and 2*(l%4)+1 (the matrix transposed).
// ---------------------------------------------------------------------------------------------------
CCSIM_AT_CALLER static uint32_t read_u16_pair(const char* lo, const char* hi) {
    return (uint32_t)*(const uint16_t*)lo | ((uint32_t)*(const uint16_t*)hi << 16);
}

CCSIM_AT_CALLER static void ldmatrix(uint32_t* r, int num, bool trans, const void* row_addr, const char* f, int l) {
    const unsigned ln = lane();
    if ((int)ln < 8 * num) need_aligned(row_addr, 16, trans ? "ldmatrix.trans" : "ldmatrix", "row", f, l);
    put_ptr(ln, row_addr);
    rendezvous(f, l);
    const char* rows[32];
    for (int i = 0; i < 8 * num; ++i) rows[i] = get_ptr((unsigned)i);
    rendezvous(f, l);
    const unsigned g = ln >> 2, t = ln & 3u;
    for (int j = 0; j < num; ++j) {
        if (!trans) {
            r[j] = *(const uint32_t*)(rows[8 * j + (int)g] + 4 * t);  // row g, elements 2t, 2t+1
        } else {
            r[j] = read_u16_pair(rows[8 * j + 2 * (int)t] + 2 * g, rows[8 * j + 2 * (int)t + 1] + 2 * g);
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// cp.async.cg.shared.global [dst], [src], 16, src_bytes; cp.async.commit_group; cp.async.wait_group N.
// Each CUDA thread keeps its own queue of issued copies (by thread number, per worker); a copy is performed
// by the thread when it waits for the copy's group.
// ---------------------------------------------------------------------------------------------------
constexpr int kMaxPending = 128;
struct Pending { char* dst; const char* src; int bytes; int group; };
struct Queue { unsigned long long tag; int n; int open_group; int committed; Pending p[kMaxPending]; };

CCSIM_NOSAN static Queue* queue() {
    static thread_local Queue* qs = nullptr;
    if (!qs) qs = (Queue*)std::calloc(1024, sizeof(Queue));
    Queue* q = &qs[rank() & 1023u];
    // a new block (or launch shape) reuses the slot: copies a previous block never waited for are dropped
    dim3 b = blockIdx, g = gridDim, bd = blockDim;
    unsigned long long tag = ((unsigned long long)((b.z * g.y + b.y) * g.x + b.x) << 32) ^
                             ((unsigned long long)(g.x * g.y * g.z) << 11) ^ (bd.x * bd.y * bd.z) ^ 1ull << 63;
    if (q->tag != tag) { q->tag = tag; q->n = 0; q->open_group = 0; q->committed = 0; }
    return q;
}
CCSIM_NOSAN static int cp_async_push(char* dst, const char* src, int bytes) {
    Queue* q = queue();
    if (q->n == kMaxPending) return -1;
    q->p[q->n++] = Pending{dst, src, bytes, q->committed};
    q->open_group = 1;
    return 0;
}
CCSIM_NOSAN static void cp_async_commit_group() {
    Queue* q = queue();
    q->committed++;  // the open group (possibly empty, as in PTX) is closed
    q->open_group = 0;
}
// Removes the copies of every committed group but the newest `keep` and returns them in issue order.
CCSIM_NOSAN static int cp_async_take(int keep, Pending* out) {
    Queue* q = queue();
    int n = 0, left = 0;
    for (int i = 0; i < q->n; ++i) {
        if (q->p[i].group < q->committed - keep) out[n++] = q->p[i];
        else q->p[left++] = q->p[i];
    }
    q->n = left;
    return n;
}

CCSIM_AT_CALLER static void cp_async_16(void* dst, const void* src, int src_bytes, const char* f, int l) {
    need_aligned(dst, 16, "cp.async", "shared-memory destination", f, l);
    if (src_bytes > 0) need_aligned(src, 16, "cp.async", "global source", f, l);
    if (src_bytes < 0 || src_bytes > 16) {
        Quiet quiet;
        fail("cp.async: src_bytes is " + std::to_string(src_bytes) + "; it must be between 0 and 16 (the rest of "
             "the 16 bytes is filled with zeros).", f, l);
    }
    if (cp_async_push((char*)dst, (const char*)src, src_bytes)) {
        Quiet quiet;
        fail("cp.async: more than " + std::to_string(kMaxPending) + " copies of this thread are in flight; call "
             "cp_async_wait<N>() to let earlier groups land.", f, l);
    }
}
CCSIM_AT_CALLER static void cp_async_wait(int keep) {
    Pending due[kMaxPending];
    const int n = cp_async_take(keep, due);
    for (int i = 0; i < n; ++i) {  // the copies land now: instrumented stores by this thread
        char* d = due[i].dst;
        for (int b = 0; b < 16; b += 4) {
            uint32_t v = 0;
            if (b < due[i].bytes) {
                if (due[i].bytes >= b + 4) v = *(const uint32_t*)(due[i].src + b);
                else for (int k = b; k < due[i].bytes; ++k) v |= (uint32_t)(unsigned char)due[i].src[k] << (8 * (k - b));
            }
            *(uint32_t*)(d + b) = v;
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// WMMA storage: a fragment holds 8 of the 256 elements of its 16x16 matrix in each lane. Element e of lane
// l is logical element FRAG_MAP(e*32 + l) of the matrix (row-major index), a fixed scramble.
// ---------------------------------------------------------------------------------------------------
static inline unsigned frag_map(unsigned e, unsigned ln) { return ((e * 32u + ln) * 97u + 13u) & 255u; }

}  // namespace mma
}  // namespace ccsim

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision { struct tf32 {}; }

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16,
                  "the CPU simulator implements the m16n16k16 WMMA shape only (use fragment<..., 16, 16, 16, ...>)");
    static_assert(!std::is_same<Use, accumulator>::value || std::is_void<Layout>::value,
                  "an accumulator fragment takes no layout (it is given at load/store_matrix_sync)");
    static_assert(std::is_same<Use, accumulator>::value || !std::is_void<Layout>::value,
                  "a matrix_a / matrix_b fragment needs a layout: row_major or col_major");
    using element_type = T;
    enum { num_elements = 8 };
    T x[num_elements];
};

namespace detail {
template <class L> constexpr bool is_row() { return std::is_same<L, row_major>::value; }
template <class T> static inline float to_f(T v) { return (float)v; }
template <class T> static inline T from_f(float v) { return T(v); }
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L, class V>
static inline void fill_fragment(fragment<Use, M, N, K, T, L>& a, const V& v) {
    for (int i = 0; i < a.num_elements; ++i) a.x[i] = T(v);
}

// load_matrix_sync for matrix_a / matrix_b: the layout is the fragment's. ldm is in elements and (as the
// Programming Guide requires) a multiple of 8 for 16-bit types; the pointer must be 256-bit (32-byte) aligned.
template <class Use, class T, class L, class P>
CCSIM_AT_CALLER static void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& a, const P* p, unsigned ldm,
                                    const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    static_assert(!std::is_void<L>::value, "an accumulator needs the layout argument: load_matrix_sync(c, p, ldm, mem_row_major)");
    ccsim::mma::need_aligned(p, 32, "wmma::load_matrix_sync", "matrix", f, l);
    if (ldm % (16 / sizeof(P))) {
        ccsim::mma::Quiet quiet;
        ccsim::mma::fail("wmma::load_matrix_sync: ldm = " + std::to_string(ldm) + " is not a multiple of " +
                         std::to_string(16 / sizeof(P)) + " elements (16 bytes), as the CUDA Programming Guide requires.", f, l);
    }
    ccsim::mma::rendezvous(f, l);
    const unsigned ln = ccsim::mma::lane();
    for (unsigned e = 0; e < 8; ++e) {
        const unsigned q = ccsim::mma::frag_map(e, ln), r = q / 16, c = q % 16;
        a.x[e] = p[detail::is_row<L>() ? r * ldm + c : c * ldm + r];
    }
    ccsim::mma::rendezvous(f, l);
}
template <class T, class P>
CCSIM_AT_CALLER static void load_matrix_sync(fragment<accumulator, 16, 16, 16, T, void>& a, const P* p, unsigned ldm, layout_t lay,
                                    const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    ccsim::mma::need_aligned(p, 32, "wmma::load_matrix_sync", "matrix", f, l);
    ccsim::mma::rendezvous(f, l);
    const unsigned ln = ccsim::mma::lane();
    for (unsigned e = 0; e < 8; ++e) {
        const unsigned q = ccsim::mma::frag_map(e, ln), r = q / 16, c = q % 16;
        a.x[e] = T(p[lay == mem_row_major ? r * ldm + c : c * ldm + r]);
    }
    ccsim::mma::rendezvous(f, l);
}
template <class T, class P>
CCSIM_AT_CALLER static void store_matrix_sync(P* p, const fragment<accumulator, 16, 16, 16, T, void>& a, unsigned ldm, layout_t lay,
                                     const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    ccsim::mma::need_aligned(p, 32, "wmma::store_matrix_sync", "matrix", f, l);
    if (ldm % (16 / sizeof(P))) {
        ccsim::mma::Quiet quiet;
        ccsim::mma::fail("wmma::store_matrix_sync: ldm = " + std::to_string(ldm) + " is not a multiple of " +
                         std::to_string(16 / sizeof(P)) + " elements (16 bytes), as the CUDA Programming Guide requires.", f, l);
    }
    ccsim::mma::rendezvous(f, l);
    const unsigned ln = ccsim::mma::lane();
    for (unsigned e = 0; e < 8; ++e) {
        const unsigned q = ccsim::mma::frag_map(e, ln), r = q / 16, c = q % 16;
        p[lay == mem_row_major ? r * ldm + c : c * ldm + r] = P(a.x[e]);
    }
    ccsim::mma::rendezvous(f, l);
}

namespace detail {
// scratch layout for mma_sync: A at [0, 256), B at [256, 512), as floats, row-major logical positions
CCSIM_NOSAN static void put_f(unsigned slot, float v) { float* s = (float*)ccsim::mma::words(); s[slot] = v; }
CCSIM_NOSAN static float get_f(unsigned slot) { return ((const float*)ccsim::mma::words())[slot]; }
}  // namespace detail

template <class TA, class LA, class TB, class LB, class TC, class TD>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, TD, void>& d, const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
                            const fragment<matrix_b, 16, 16, 16, TB, LB>& b, const fragment<accumulator, 16, 16, 16, TC, void>& c,
                            const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    static_assert(std::is_same<TA, TB>::value, "wmma::mma_sync: matrix_a and matrix_b must have the same element type");
    const unsigned ln = ccsim::mma::lane();
    for (unsigned e = 0; e < 8; ++e) {
        const unsigned q = ccsim::mma::frag_map(e, ln);
        detail::put_f(q, (float)a.x[e]);
        detail::put_f(256u + q, (float)b.x[e]);
    }
    float cin[8];
    for (int e = 0; e < 8; ++e) cin[e] = (float)c.x[e];
    ccsim::mma::rendezvous(f, l);
    float out[8];
    for (unsigned e = 0; e < 8; ++e) {
        const unsigned q = ccsim::mma::frag_map(e, ln), r = q / 16, col = q % 16;
        float acc = cin[e];
        for (unsigned k = 0; k < 16; ++k) acc += detail::get_f(r * 16 + k) * detail::get_f(256u + k * 16 + col);
        out[e] = acc;
    }
    ccsim::mma::rendezvous(f, l);
    for (int e = 0; e < 8; ++e) d.x[e] = TD(out[e]);
}
}  // namespace wmma
}  // namespace nvcuda

#endif  // CCSIM_MMA_H
