// ccsim_hopper_rt.h - Hopper's asynchronous machinery, the runtime half (ccsim_hopper.h has the learner-facing
// half and the PTX ISA sections followed). Included once, at the end of ccsim_rt.cpp: it is runtime code,
// compiled without instrumentation, and uses the runtime's records (Fiber, Worker, the shared arena and its
// shadow, set_error/fail_here, the registered buffers).
//
// The model, per block (all of it reset when a block starts):
// - mbarriers live in a side table keyed by their shared-memory offset (the learner's 8 bytes are not used):
//   expected count, pending arrivals, tx-count, completed phases. A phase completes when pending == 0 and
//   tx == 0; waiters whose parity then names a completed phase are woken at once (state F_HOP).
// - TMA loads copy at issue and complete their bytes on the barrier at once; the data counts as arrived only for
//   threads that have observed the completion of that phase (checked mode), which is what a GPU promises.
//   wgmma computes at issue; its accumulators count as in flight until wgmma_wait retires the group.
// - Checked mode orders threads with vector clocks (one per CUDA thread): mbarrier arrive -> phase -> wait,
//   named barriers, __syncthreads. Every shared-memory word has an async shadow (AW): the last generic writer and
//   reader (thread, clock, pc), the TMA copy that wrote it (barrier, phase, global coordinates) and the async
//   read (wgmma group, TMA store group) that may still be reading it. fence.proxy.async is a per-thread list of
//   clocks: an access is fenced towards another thread if one of its fences lies between the access and what
//   the other thread has learnt of it.
namespace {

constexpr uint32_t TMAP_MAGIC = 0x54434d43u;  // "CMCT"
struct TMap {
    uint32_t magic, dtype, rank, esize;
    uint64_t base, dim0, dim1, stride1;
    uint32_t box0, box1, swizzle, oob, isfloat;
};
static_assert(sizeof(TMap) <= sizeof(CUtensorMap), "the simulator's tensor map must fit a CUtensorMap");

struct MBar {
    size_t off; bool live;
    uint32_t expected, pending, completed;
    int64_t tx;
    int init_tid; uint32_t init_clk; const char* init_f; int init_l;
    int64_t ph_expect, ph_delivered;          // this phase: bytes announced by expect_tx, delivered by copies
    const char* ph_expect_f; int ph_expect_l; const char* ph_copy_f; int ph_copy_l;
    uint32_t ph_arrived;
    std::vector<uint32_t> cur_vc, done_vc;    // checked mode: releases of this phase, of every completed phase
    std::vector<int> waiters;
};
struct LastWait { const char* f; int l; unsigned parity; uint32_t completed; };
struct TA {                                   // per CUDA thread
    uint32_t wg_committed, wg_retired, wg_seq;
    std::vector<uint32_t> wg_retire_clk;
    uintptr_t acc_lo, acc_hi; bool acc_inflight, need_fence; const char* acc_f; int acc_l; uint32_t acc_group;
    uint32_t bk_committed, bk_read_retired;
    std::vector<uint32_t> bk_retire_clk;
    int wkind, wbar, wnb; unsigned wparity; const char* wf; int wl; uint64_t wgen;
    bool internal;                            // in the model's own warp rendezvous (no clock join needed)
    std::vector<uint32_t> obs;                // per barrier: phases whose completion this thread observed
    std::vector<LastWait> lastwait;
    std::vector<uint32_t> fences;             // clocks of this thread's fence.proxy.async
};
struct Issue { const char* f; int l; int tid; int map; };
struct AW {                                   // async shadow of one 4-byte shared word (checked mode)
    uint32_t gen;
    uint16_t gwt, grt; uint32_t gwc, grc, gwpc, grpc;   // generic writer / reader: tid + 1, clock, pc
    uint16_t tbar; uint32_t tphase, tissue, gy, gx;      // TMA load: barrier + 1, phase, issue, global row, column
    uint8_t ark; uint16_t arw; uint32_t arg, arissue;    // async read: 1 wgmma (warpgroup), 2 TMA store (thread)
};
struct NB { unsigned count, arrived; uint64_t gen; std::vector<int> who; std::vector<uint32_t> vc; };
struct WGC { uint32_t seq; uint64_t da, db; int n; bool valid; float A[64 * 16]; float B[256 * 16];
             std::vector<std::pair<int, uint32_t>> pend; };

struct HB {
    bool active = false;
    uint32_t gen = 0;
    unsigned n = 0;
    std::vector<uint32_t> vc;                 // n x n (checked mode)
    std::vector<MBar> bars;
    std::unordered_map<size_t, int> bar_of;
    std::vector<TA> ta;
    std::vector<Issue> issues;
    std::vector<uintptr_t> maps;              // tensor maps met in this block (their addresses)
    NB nb[16];
    std::vector<WGC> wgc;                     // 4 per warpgroup
    std::vector<int> regs;                    // setmaxnreg per warpgroup (0: not set)
    AW* aw = nullptr;
    std::vector<uint32_t> tmp;
};

bool g_hop_used = false;
__thread HB* t_hb __attribute__((tls_model("initial-exec"))) = nullptr;
__thread int t_hop_watch __attribute__((tls_model("initial-exec"))) = 0;

inline HB* hb() { return t_hb; }
inline uint32_t& vcat(HB* h, unsigned dst, unsigned src) { return h->vc[(size_t)dst * h->n + src]; }
inline uint32_t clk(HB* h, unsigned t) { return h->vc[(size_t)t * h->n + t]; }
inline void tick(HB* h, unsigned t) { if (g_checked) h->vc[(size_t)t * h->n + t]++; }
inline void join_into(HB* h, std::vector<uint32_t>& dst, unsigned t) {
    if (dst.size() != h->n) dst.assign(h->n, 0);
    const uint32_t* r = &h->vc[(size_t)t * h->n];
    for (unsigned i = 0; i < h->n; ++i) dst[i] = std::max(dst[i], r[i]);
}
inline void join_from(HB* h, unsigned t, const std::vector<uint32_t>& src) {
    if (src.size() != h->n) return;
    uint32_t* r = &h->vc[(size_t)t * h->n];
    for (unsigned i = 0; i < h->n; ++i) r[i] = std::max(r[i], src[i]);
}
// What thread `dst` knows of thread `src`'s clock (its own clock for itself).
inline uint32_t known(HB* h, unsigned dst, unsigned src) { return dst == src ? clk(h, src) : vcat(h, dst, src); }
inline bool ordered(HB* h, unsigned src, uint32_t stamp, unsigned dst) { return src == dst || vcat(h, dst, src) >= stamp; }
// A fence.proxy.async of thread t after its access at `stamp` and no later than what `dst` knows of t.
inline bool fenced(HB* h, unsigned t, uint32_t stamp, unsigned dst) {
    uint32_t upto = known(h, dst, t);
    for (uint32_t c : h->ta[t].fences) if (c > stamp && c <= upto) return true;
    return false;
}

inline AW& aw_at(HB* h, size_t word) {
    AW& s = h->aw[word];
    if (s.gen != h->gen) { std::memset(&s, 0, sizeof s); s.gen = h->gen; }
    return s;
}

std::string lno(const char* f, int l) { (void)f; return "line " + std::to_string(l); }
std::string hx(uint64_t v) { char b[32]; snprintf(b, sizeof b, "0x%llx", (unsigned long long)v); return b; }

// The name of the shared element at generic address a (a __shared__ array element, or a byte of the dynamic part).
std::string smem_name(Worker* w, uintptr_t a) {
    size_t off = a - (uintptr_t)w->arena;
    if (g_checked && off < ARENA_CAP) {
        const Shadow& s = w->shadow[off / 4];
        if (s.arr > 0 && s.arr < (int)w->sites.size()) return elem_name(w->sites[s.arr], a);
    }
    if (!w->sites.empty() && a >= w->sites[0].base && a < w->sites[0].base + w->sites[0].bytes)
        return "byte " + std::to_string(a - w->sites[0].base) + " of the dynamic shared memory";
    return "shared byte " + std::to_string(off);
}
std::string bar_name(Worker* w, HB* h, int bi) {
    const MBar& b = h->bars[bi];
    return "the mbarrier at " + smem_name(w, (uintptr_t)w->arena + b.off) + " (mbar_init by thread " +
           std::to_string(b.init_tid) + " at " + lno(b.init_f, b.init_l) + ", count " + std::to_string(b.expected) + ")";
}

[[noreturn]] void hop_fail(const char* kind, const std::string& what, const char* f, int l, uintptr_t pc = 0) {
    Fiber* fb = t_fiber;
    std::string head = std::string(strcmp(kind, "race") == 0 ? "RaceError " : strcmp(kind, "barrier") == 0 ? "BarrierError " :
                                   strcmp(kind, "out-of-bounds") == 0 ? "OutOfBoundsError " :
                                   strcmp(kind, "uninitialized-read") == 0 ? "UninitializedReadError " : "KernelError ") +
                       where(fb->w->L, fb->w->bidx) + ": " + thr(fb) + " ";
    fail_here(kind, head + what, f, l, pc);
}

// The shared-memory range [a, a + n) lies inside one allocation of the block (not a red zone): else a report.
void need_smem(Fiber* fb, uintptr_t a, size_t n, const char* what, const char* f, int l) {
    Worker* w = fb->w;
    size_t off = a - (uintptr_t)w->arena;
    bool ok = off < ARENA_CAP && off + n <= w->arena_used && off >= RZ;
    if (ok && g_checked)
        for (size_t i = off / 4; i < (off + n + 3) / 4; ++i) if (w->shadow[i].flags & SH_RED) { ok = false; break; }
    if (!ok) {
        RtGuard g;
        hop_fail("out-of-bounds", what + std::string(" (") + std::to_string(n) + " bytes at " + hx(a) +
                 ") is not inside the block's shared memory (a __shared__ array or the dynamic shared memory of the "
                 "launch): check the pointer and the size of the shared allocation.", f, l);
    }
}

// ---------------------------------------------------------------------------------------------------
// Block start, __syncthreads, the scheduler's questions
// ---------------------------------------------------------------------------------------------------
void hop_block_begin(Worker* w, Launch* L) {
    if (!t_hb) t_hb = new HB();
    HB* h = t_hb;
    h->active = true;
    h->gen++;
    if (h->gen == 0) h->gen = 1;
    h->n = L->nthreads;
    h->bars.clear(); h->bar_of.clear(); h->issues.clear(); h->maps.clear();
    h->ta.resize(h->n);
    for (TA& t : h->ta) {
        t.wg_committed = t.wg_retired = t.wg_seq = 0; t.wg_retire_clk.clear();
        t.acc_lo = t.acc_hi = 0; t.acc_inflight = false; t.need_fence = true; t.acc_f = nullptr; t.acc_l = 0;
        t.bk_committed = t.bk_read_retired = 0; t.bk_retire_clk.clear();
        t.wkind = 0; t.internal = false; t.obs.clear(); t.lastwait.clear(); t.fences.clear();
    }
    for (NB& b : h->nb) { b.count = 0; b.arrived = 0; b.who.clear(); b.vc.clear(); }
    h->wgc.resize(((h->n + 127) / 128) * 4);
    for (WGC& c : h->wgc) { c.valid = false; c.seq = 0; }
    h->regs.assign((h->n + 127) / 128, 0);
    t_hop_watch = 0;
    if (g_checked) {
        h->vc.assign((size_t)h->n * h->n, 0);
        for (unsigned t = 0; t < h->n; ++t) vcat(h, t, t) = 1;
        if (!h->aw) h->aw = (AW*)calloc(ARENA_CAP / 4, sizeof(AW));
    }
    (void)w;
}

void hop_syncthreads(Worker*, unsigned n) {
    HB* h = hb();
    if (!h || !h->active || !g_checked) return;
    h->tmp.assign(n, 0);
    for (unsigned t = 0; t < n; ++t)
        for (unsigned i = 0; i < n; ++i) h->tmp[i] = std::max(h->tmp[i], vcat(h, t, i));
    for (unsigned t = 0; t < n; ++t) {
        std::memcpy(&h->vc[(size_t)t * n], h->tmp.data(), n * sizeof(uint32_t));
        vcat(h, t, t) = h->tmp[t] + 1;
    }
}

// A warp collective (__syncwarp, shuffles, the rendezvous of ldmatrix/mma/wgmma) orders its lanes' earlier
// accesses before their later ones: the lanes' clocks are joined.
void hop_warp_collective(Worker*, unsigned warp, unsigned lanes) {
    HB* h = hb();
    if (!h || !h->active || !g_checked) return;
    const unsigned n = h->n;
    const unsigned first = warp * 32 + (unsigned)__builtin_ctz(lanes ? lanes : 1);
    if (first < n && h->ta[first].internal) {   // wgmma/fence/commit/wait/setmaxnreg: orders nothing the checks use
        for (unsigned l = 0; l < 32; ++l) if (((lanes >> l) & 1u) && warp * 32 + l < n) h->ta[warp * 32 + l].internal = false;
        return;
    }
    h->tmp.assign(n, 0);
    for (unsigned l = 0; l < 32; ++l)
        if ((lanes >> l) & 1u) {
            const uint32_t* r = &h->vc[(size_t)(warp * 32 + l) * n];
            for (unsigned i = 0; i < n; ++i) h->tmp[i] = std::max(h->tmp[i], r[i]);
        }
    for (unsigned l = 0; l < 32; ++l)
        if ((lanes >> l) & 1u) {
            const unsigned t = warp * 32 + l;
            std::memcpy(&h->vc[(size_t)t * n], h->tmp.data(), n * sizeof(uint32_t));
            vcat(h, t, t) = h->tmp[t] + 1;
        }
}

bool hop_any_ready(Worker* w, unsigned n) {
    HB* h = hb();
    if (!h || !h->active) return false;
    for (unsigned i = 0; i < n; ++i) if (w->fibers[i]->state == F_READY) return true;
    return false;
}

// Nothing can move and some thread waits on an mbarrier or a named barrier: a deadlock, reported with the state
// of the barrier it waits on. Returns true when reported.
bool hop_deadlock(Worker* w, unsigned n) {
    HB* h = hb();
    if (!h || !h->active) return false;
    // Whom to name, whatever the thread order: a wait on a barrier whose arrivals are complete but whose bytes do
    // not add up (expect_tx); else a wait for a phase after one this thread never observed (a wrong parity);
    // else any mbarrier wait; else a named barrier. The lowest thread number among equals.
    Fiber* who = nullptr;
    int best = -1;
    unsigned waiting = 0, atbar = 0, exited = 0;
    for (unsigned i = 0; i < n; ++i) {
        Fiber* f = w->fibers[i];
        if (f->state == F_HOP) {
            waiting++;
            const TA& q = h->ta[i];
            int rank = 0;
            if (q.wkind == 1) {
                const MBar& b = h->bars[q.wbar];
                uint32_t seen = q.wbar < (int)q.obs.size() ? q.obs[q.wbar] : 0;
                rank = (b.pending == 0 && b.tx != 0) ? 3 : (seen < b.completed) ? 2 : 1;
            }
            if (rank > best) { best = rank; who = f; }
        } else if (f->state == F_BARRIER) atbar++;
        else if (f->state == F_EXITED) exited++;
    }
    if (!who) return false;
    RtGuard g;
    const TA& ta = h->ta[who->tid];
    std::string msg = "BarrierError " + where(w->L, w->bidx) + ": deadlock. " + thr(who);
    if (ta.wkind == 1) {
        const MBar& b = h->bars[ta.wbar];
        msg += " waits at " + lno(ta.wf, ta.wl) + " (mbar_wait, parity " + std::to_string(ta.wparity) + ") for phase " +
               std::to_string(b.completed) + " of " + bar_name(w, h, ta.wbar) + ", and nothing can complete that phase: "
               "it still expects " + std::to_string(b.pending) + " of its " + std::to_string(b.expected) + " arrivals and " +
               std::to_string(b.tx) + " transaction bytes (this phase: " + std::to_string(b.ph_arrived) + " arrivals, " +
               (b.ph_expect_f ? "expect_tx announced " + std::to_string(b.ph_expect) + " bytes (last at " +
                                lno(b.ph_expect_f, b.ph_expect_l) + ")" : std::string("no expect_tx")) + ", " +
               (b.ph_copy_f ? "the TMA copies on it delivered " + std::to_string(b.ph_delivered) + " bytes (last at " +
                              lno(b.ph_copy_f, b.ph_copy_l) + ")" : std::string("no TMA copy completed on it")) + ").";
        const uint32_t seen = ta.wbar < (int)ta.obs.size() ? ta.obs[ta.wbar] : 0;
        if (b.pending != 0 && seen < b.completed)
            msg += " This thread has not waited for phase " + std::to_string(b.completed - 1) + " of this barrier, which "
                   "completed: the wait's parity (" + std::to_string(ta.wparity) + ") names the phase after the one it "
                   "needs. The k-th completion of a barrier, counting from 0, has parity k & 1 (for a stage used for the "
                   "u-th time, u counting from 0: parity u & 1).";
        else if (b.pending == 0 && b.tx > 0)
            msg += " The expect_tx byte count is larger than what the copies deliver: each tma_load_2d delivers its whole "
                   "box (box rows x box columns x element size, zero-filled past the matrix edge), so expect_tx must "
                   "announce the sum of the boxes issued on this barrier in this phase.";
        else if (b.pending == 0 && b.tx < 0)
            msg += " More bytes arrived than expect_tx announced (" + std::to_string(-b.tx) + " too many): expect_tx must "
                   "announce exactly the bytes of the boxes issued on this barrier in this phase.";
        else if (b.ph_arrived == 0 && b.ph_delivered == 0)
            msg += " Nothing has arrived on this phase yet: if the wait is meant for a phase that already completed, its "
                   "parity is wrong (the k-th completion of a barrier, counting from 0, has parity k & 1), or the "
                   "thread that should arrive (or issue the copies) is itself waiting or has exited.";
        else
            msg += " " + std::to_string(b.pending) + " arrival(s) never came: the count given to mbar_init must equal "
                   "the arrivals per phase (mbar_arrive and mbar_expect_tx calls).";
    } else {
        const NB& nb = h->nb[ta.wnb];
        msg += " waits at " + lno(ta.wf, ta.wl) + " on named barrier " + std::to_string(ta.wnb) + " (bar.sync " +
               std::to_string(ta.wnb) + ", " + std::to_string(nb.count) + "), where only " + std::to_string(nb.arrived) +
               " of the " + std::to_string(nb.count) + " threads have arrived. Every thread of the group must reach it.";
    }
    msg += " (" + std::to_string(waiting - 1) + " other thread(s) wait on mbarriers or named barriers, " +
           std::to_string(atbar) + " at __syncthreads(), " + std::to_string(exited) + " have exited.)";
    set_error("barrier", msg, w->L, &w->bidx, &who->v.ti, ta.wf, ta.wl, 0);
    return true;
}

// ---------------------------------------------------------------------------------------------------
// Checked mode: generic accesses to shared memory, and the accumulators of an in-flight wgmma
// ---------------------------------------------------------------------------------------------------
bool async_read_done(HB* h, const AW& s, unsigned t) {
    if (s.ark == 1) {
        unsigned r = (t / 128 == s.arw) ? t : s.arw * 128u;
        const TA& q = h->ta[r];
        return q.wg_retired > s.arg && (r == t || vcat(h, t, r) >= q.wg_retire_clk[s.arg]);
    }
    const TA& q = h->ta[s.arw];
    return q.bk_read_retired > s.arg && (s.arw == t || vcat(h, t, s.arw) >= q.bk_retire_clk[s.arg]);
}

// Whether thread t touches shared word s before the TMA copy that fills it has completed for t: the copy completes
// phase s.tphase of barrier s.tbar - 1, and t has seen no later phase of that barrier (checked mode).
bool before_tma_fill(const HB* h, const AW& s, unsigned t) {
    if (!s.tbar) return false;
    const TA& ta = h->ta[t];
    int bi = s.tbar - 1;
    uint32_t seen = bi < (int)ta.obs.size() ? ta.obs[bi] : 0;
    return seen <= s.tphase;
}

std::string before_phase_msg(Worker* w, HB* h, const AW& s, unsigned t, const std::string& verb,
                             const std::string& what, const std::string& at) {
    const Issue& is = h->issues[s.tissue];
    int bi = s.tbar - 1;
    unsigned par = s.tphase & 1u;
    std::string m = verb + " " + what + at + ", which the TMA copy issued at " + lno(is.f, is.l) + " (by thread " +
                    std::to_string(is.tid) + ") fills, before that copy has completed for this thread: the copy completes "
                    "phase " + std::to_string(s.tphase) + " of " + bar_name(w, h, bi) + ", the phase waited for with parity " +
                    std::to_string(par) + ", and ";
    const TA& ta = h->ta[t];
    if (bi < (int)ta.lastwait.size() && ta.lastwait[bi].f) {
        const LastWait& lw = ta.lastwait[bi];
        m += "this thread's last wait on that barrier (" + lno(lw.f, lw.l) + ", parity " + std::to_string(lw.parity) +
             ") returned when " + std::to_string(lw.completed) + " phase(s) had completed";
        if (lw.parity != par)
            m += ": the wait used the wrong parity (phase " + std::to_string(s.tphase) + " has parity " + std::to_string(par) +
                 "; a parity names the phase of that parity that completes next, and parity " + std::to_string(lw.parity) +
                 " named one that had already completed, so the wait returned at once)";
        m += ".";
    } else {
        m += "this thread never waited on that barrier (or waited before this phase).";
    }
    m += " Wait for the phase (mbar_wait(&bar, " + std::to_string(par) + ")) in this thread, or in a thread that then "
         "synchronises with it, before touching the stage. (PTX ISA: mbarrier, phase completion; cp.async.bulk.tensor "
         "writes are visible only after the phase completes.)";
    return m;
}

void hop_shared_access(Fiber* f, uintptr_t a, unsigned size, int kind, uintptr_t pc) {
    HB* h = hb();
    if (!h || !h->active || !h->aw) return;
    Worker* w = f->w;
    size_t off = a - (uintptr_t)w->arena;
    size_t w0 = off / 4, w1 = (off + size - 1) / 4;
    if (w1 >= ARENA_CAP / 4) w1 = ARENA_CAP / 4 - 1;
    unsigned t = (unsigned)f->tid;
    for (size_t i = w0; i <= w1; ++i) {
        AW& s = aw_at(h, i);
        if (before_tma_fill(h, s, t)) {
            RtGuard g;
            hop_fail("race", before_phase_msg(w, h, s, t, kind == 0 ? "reads" : "writes", smem_name(w, a),
                                              " at " + pctok(pc)), nullptr, 0, pc);
        }
        if (kind != 0 && s.ark) {
            if (!async_read_done(h, s, t)) {
                RtGuard g;
                const Issue& is = h->issues[s.arissue];
                std::string who = s.ark == 1 ? "the wgmma issued at " + lno(is.f, is.l) + " by warpgroup " + std::to_string(s.arw)
                                             : "the TMA store issued at " + lno(is.f, is.l) + " by thread " + std::to_string(s.arw);
                std::string fix = s.ark == 1 ? "wgmma_wait<N>() until that wgmma's group has retired"
                                             : "bulk_wait_read<N>() in the issuing thread until that store has read it";
                hop_fail("race", "writes " + smem_name(w, a) + " at " + pctok(pc) + " while " + who + " may still be reading "
                         "it (asynchronously): " + fix + ", and a barrier between that wait and this write, before the "
                         "buffer is written again.", nullptr, 0, pc);
            }
            s.ark = 0;
        }
        if (kind == 0) { s.grt = (uint16_t)(t + 1); s.grc = clk(h, t); s.grpc = (uint32_t)pc; }
        else { s.gwt = (uint16_t)(t + 1); s.gwc = clk(h, t); s.gwpc = (uint32_t)pc; s.tbar = 0;
               s.grt = (uint16_t)(t + 1); s.grc = s.gwc; s.grpc = s.gwpc; }
    }
}

void hop_stack_access(Fiber* f, uintptr_t a, unsigned size, int kind, uintptr_t pc) {
    HB* h = hb();
    if (!h || !h->active) return;
    TA& ta = h->ta[f->tid];
    if (a + size <= ta.acc_lo || a >= ta.acc_hi) return;
    if (ta.acc_inflight) {
        RtGuard g;
        hop_fail("race", std::string(kind == 0 ? "reads" : "writes") + " wgmma accumulator d[" +
                 std::to_string((a - ta.acc_lo) / 4) + "] at " + pctok(pc) + " while the wgmma issued at " +
                 lno(ta.acc_f, ta.acc_l) + " that writes it is still in flight: its group was not retired by a "
                 "wgmma_wait. Call wgmma_wait<0>() (wgmma_wait0, or wgmma_wait1 for all but the newest group) before "
                 "reading or writing the accumulators. (PTX ISA: wgmma.wait_group; the registers are undefined until then.)",
                 nullptr, 0, pc);
    }
    ta.need_fence = true;
}

// ---------------------------------------------------------------------------------------------------
// mbarriers
// ---------------------------------------------------------------------------------------------------
Fiber* hop_thread(const char* f, int l) {
    Fiber* fb = t_fiber;
    if (!fb) {
        fprintf(stderr, "ccsim: a Hopper device operation (%s:%d) was called outside a kernel\n", f, l);
        abort();
    }
    HB* h = hb();
    if (!h || !h->active) {
        RtGuard g;
        fail_here("kernel", "KernelError: the Hopper model is not active in this launch (internal error)", f, l, 0);
    }
    return fb;
}

int bar_index(Fiber* fb, void* bar, const char* f, int l, bool init) {
    HB* h = hb();
    Worker* w = fb->w;
    uintptr_t a = (uintptr_t)bar;
    need_smem(fb, a, 8, "the mbarrier", f, l);
    if (a % 8) {
        RtGuard g;
        hop_fail("misaligned", "uses an mbarrier at " + hx(a) + ", which is not 8-byte aligned (an mbarrier is a 64-bit "
                 "object in shared memory; PTX ISA: mbarrier).", f, l);
    }
    size_t off = a - (uintptr_t)w->arena;
    auto it = h->bar_of.find(off);
    if (it != h->bar_of.end() && h->bars[it->second].live) return it->second;
    if (!init) {
        RtGuard g;
        hop_fail("barrier", "uses the mbarrier at " + smem_name(w, a) + " before any thread initialised it with mbar_init "
                 "in this block.", f, l);
    }
    if (it != h->bar_of.end()) return it->second;
    h->bars.push_back(MBar());
    int bi = (int)h->bars.size() - 1;
    h->bars[bi].off = off; h->bars[bi].live = false;
    h->bar_of[off] = bi;
    return bi;
}

// Checked mode: the caller is ordered after the barrier's initialisation (a __syncthreads() between them).
void need_init_visible(Fiber* fb, int bi, const char* f, int l) {
    HB* h = hb();
    if (!g_checked) return;
    const MBar& b = h->bars[bi];
    if (!ordered(h, (unsigned)b.init_tid, b.init_clk, (unsigned)fb->tid)) {
        RtGuard g;
        hop_fail("race", "uses " + bar_name(fb->w, h, bi) + " with nothing ordering that initialisation before this use: "
                 "put a __syncthreads() between the mbar_init (and its fence_barrier_init) and the first use by other "
                 "threads.", f, l);
    }
}

void obs_set(HB* h, unsigned t, int bi, uint32_t c) {
    TA& ta = h->ta[t];
    if ((int)ta.obs.size() <= bi) ta.obs.resize(bi + 1, 0);
    ta.obs[bi] = std::max(ta.obs[bi], c);
}

void try_complete(Worker* w, HB* h, int bi) {
    MBar& b = h->bars[bi];
    while (b.pending == 0 && b.tx == 0) {
        b.completed++;
        b.pending = b.expected;
        b.ph_expect = b.ph_delivered = 0; b.ph_expect_f = b.ph_copy_f = nullptr; b.ph_arrived = 0;
        if (g_checked) {
            if (b.done_vc.size() != h->n) b.done_vc.assign(h->n, 0);
            for (size_t i = 0; i < b.cur_vc.size(); ++i) b.done_vc[i] = std::max(b.done_vc[i], b.cur_vc[i]);
            b.cur_vc.assign(h->n, 0);
        }
        size_t k = 0;
        for (size_t j = 0; j < b.waiters.size(); ++j) {
            int t = b.waiters[j];
            TA& ta = h->ta[t];
            if (ta.wparity != (b.completed & 1u)) {   // the phase of that parity is now the completed one
                Fiber* g = w->fibers[t];
                if (g->state == F_HOP) g->state = F_READY;
                ta.wkind = 0;
            } else {
                b.waiters[k++] = t;
            }
        }
        b.waiters.resize(k);
        if (b.expected == 0) break;
    }
}

void observe(HB* h, unsigned t, int bi, unsigned parity, const char* f, int l) {
    MBar& b = h->bars[bi];
    obs_set(h, t, bi, b.completed);
    TA& ta = h->ta[t];
    if ((int)ta.lastwait.size() <= bi) ta.lastwait.resize(bi + 1, LastWait{nullptr, 0, 0, 0});
    ta.lastwait[bi] = LastWait{f, l, parity, b.completed};
    if (g_checked) join_from(h, t, b.done_vc);
}

}  // namespace

// ===================================================================================================
// The API called by ccsim_hopper.h's wrappers (lesson 05's cc_hopper.h under CCSIM)
// ===================================================================================================
API int ccsim_hop_enable(void) { g_hop_used = true; return 1; }

API uint32_t ccsim_hop_smem_addr(const void* p, const char* f, int l) {
    Fiber* fb = t_fiber;
    if (!fb) return 0;
    size_t off = (uintptr_t)p - (uintptr_t)fb->w->arena;
    if (off >= ARENA_CAP) {
        RtGuard g;
        fail_here("kernel", "KernelError " + where(fb->w->L, fb->w->bidx) + ": " + thr(fb) + " asks for the shared-memory "
                  "address (__cvta_generic_to_shared) of " + hx((uintptr_t)p) + ", which does not point into shared "
                  "memory.", f, l, 0);
    }
    return (uint32_t)off;
}

API void ccsim_hop_mbar_init(void* bar, unsigned count, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    if (count == 0 || count > (1u << 20) - 1) {
        RtGuard g;
        hop_fail("kernel", "calls mbar_init with count " + std::to_string(count) + ": the expected arrival count must be "
                 "between 1 and 2^20 - 1 (PTX ISA: mbarrier.init).", f, l);
    }
    int bi = bar_index(fb, bar, f, l, true);
    MBar& b = h->bars[bi];
    b.live = true; b.expected = b.pending = count; b.completed = 0; b.tx = 0;
    b.init_tid = fb->tid; b.init_f = f; b.init_l = l;
    b.ph_expect = b.ph_delivered = 0; b.ph_expect_f = b.ph_copy_f = nullptr; b.ph_arrived = 0;
    b.waiters.clear();
    if (g_checked) {
        b.init_clk = clk(h, fb->tid);
        b.cur_vc.assign(h->n, 0); b.done_vc.assign(h->n, 0);
    }
}

API void ccsim_hop_mbar_arrive(void* bar, unsigned tx_bytes, int expect_tx, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    int bi = bar_index(fb, bar, f, l, false);
    need_init_visible(fb, bi, f, l);
    MBar& b = h->bars[bi];
    if (expect_tx) {
        b.tx += tx_bytes; b.ph_expect += tx_bytes; b.ph_expect_f = f; b.ph_expect_l = l;
    }
    if (b.pending == 0) {
        RtGuard g;
        hop_fail("barrier", "arrives on " + bar_name(fb->w, h, bi) + " whose phase " + std::to_string(b.completed) +
                 " has already had all " + std::to_string(b.expected) + " arrivals (it waits for " + std::to_string(b.tx) +
                 " transaction bytes): more threads arrive than the count given to mbar_init.", f, l);
    }
    if (g_checked) { join_into(h, b.cur_vc, fb->tid); tick(h, fb->tid); }
    b.pending--; b.ph_arrived++;
    try_complete(fb->w, h, bi);
}

API int ccsim_hop_mbar_try_wait(void* bar, unsigned parity, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    int bi = bar_index(fb, bar, f, l, false);
    need_init_visible(fb, bi, f, l);
    parity &= 1u;
    if (parity != (h->bars[bi].completed & 1u)) { observe(h, fb->tid, bi, parity, f, l); return 1; }
    return 0;
}

API void ccsim_hop_mbar_wait(void* bar, unsigned parity, const char* f, int l) {
    if (ccsim_hop_mbar_try_wait(bar, parity, f, l)) return;
    Fiber* fb = t_fiber;
    HB* h = hb();
    int bi = bar_index(fb, bar, f, l, false);
    TA& ta = h->ta[fb->tid];
    ta.wkind = 1; ta.wbar = bi; ta.wparity = parity & 1u; ta.wf = f; ta.wl = l;
    h->bars[bi].waiters.push_back(fb->tid);
    fb->wfile = f; fb->wline = l;
    fb->state = F_HOP;
    yield_next(fb);
    observe(h, fb->tid, bi, parity & 1u, f, l);
}

API void ccsim_hop_fence_proxy_async(const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    if (!g_checked) return;
    tick(h, fb->tid);
    h->ta[fb->tid].fences.push_back(clk(h, fb->tid));
}

API void ccsim_hop_named_barrier(int id, int count, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    if (id < 0 || id > 15 || count <= 0 || count % 32 || (unsigned)count > h->n) {
        RtGuard g;
        hop_fail("barrier", "calls a named barrier (bar.sync " + std::to_string(id) + ", " + std::to_string(count) + "): the "
                 "barrier number must be 0..15 and the thread count a positive multiple of 32 (warp size), at most the "
                 "block's " + std::to_string(h->n) + " threads (PTX ISA: bar.sync).", f, l);
    }
    NB& nb = h->nb[id];
    if (nb.arrived == 0) { nb.count = (unsigned)count; nb.who.clear(); nb.vc.clear(); }
    else if (nb.count != (unsigned)count) {
        RtGuard g;
        hop_fail("barrier", "calls named barrier " + std::to_string(id) + " with " + std::to_string(count) + " threads while "
                 "other threads wait there with " + std::to_string(nb.count) + ".", f, l);
    }
    if (g_checked) { join_into(h, nb.vc, fb->tid); tick(h, fb->tid); }
    nb.who.push_back(fb->tid);
    if (++nb.arrived == nb.count) {
        for (int t : nb.who) {
            if (g_checked) join_from(h, (unsigned)t, nb.vc);
            Fiber* g = fb->w->fibers[t];
            if (t != fb->tid && g->state == F_HOP) { g->state = F_READY; h->ta[t].wkind = 0; }
        }
        nb.arrived = 0; nb.gen++; nb.who.clear();
        return;
    }
    TA& ta = h->ta[fb->tid];
    ta.wkind = 2; ta.wnb = id; ta.wf = f; ta.wl = l;
    fb->wfile = f; fb->wline = l;
    fb->state = F_HOP;
    yield_next(fb);
}

#include "ccsim_hopper_copy.h"   // tensor maps, TMA loads and stores, wgmma, setmaxnreg, elect
