// rt/mem_shared.h - part of ccsim_rt.cpp. Memory and checks: shared memory.
//
// Each OS worker thread's arena holds the running block's shared memory: the dynamic part first, then every
// static __shared__ array, red zones between them, poisoned when allocated (ccsim_rt_shared, ccsim_rt_new_site,
// ccsim_rt_dyn_shared). Checked mode keeps a shadow of every 4-byte word (shared_access): races judged by value
// (pending until the word is next touched, a barrier releases or the block ends), red-zone overruns, and reads of
// bytes no thread wrote (the reader is parked until the barrier interval resolves: a race or an uninitialised
// read, independent of thread order).
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

namespace {
// ===================================================================================================
// Shared memory
// ===================================================================================================
void shadow_mark(Worker* w, size_t off, size_t bytes, uint8_t flags, int arr) {
    if (!g_checked) return;
    size_t a = off / 4, b = (off + bytes + 3) / 4;
    for (size_t i = a; i < b && i < ARENA_CAP / 4; ++i) {
        Shadow& s = w->shadow[i];
        std::memset(&s, 0, sizeof s);
        s.flags = flags; s.arr = (int16_t)arr;
    }
    if (b * 4 > w->hiwater) w->hiwater = std::min(b * 4, ARENA_CAP);
}

void block_reset_shared(Worker* w, Launch* L) {
    w->gen++;
    w->sites.clear();
    w->pend.clear();
    w->parked.clear();
    w->epoch = 1;
    std::memset(w->wseq, 0, sizeof w->wseq);
    // dynamic part first: [RZ][dyn][RZ] then static arrays, each followed by a red zone
    w->dyn_off = RZ;
    w->dyn_bytes = L->smem;
    size_t dyn_end = RZ + ((L->smem + 15) & ~(size_t)15);
    w->arena_used = dyn_end + RZ;
    w->static_bytes = 0;
    if (L->smem) std::memset(w->arena + RZ, 0xFF, L->smem);
    Site d{(uintptr_t)(w->arena + RZ), L->smem, 1, L->smem, 0, 0, 0, "extern __shared__ (dynamic) memory"};
    w->sites.push_back(d);
    if (g_checked) {
        size_t old = w->hiwater;
        shadow_mark(w, 0, std::max(old, w->arena_used), SH_RED, -1);
        shadow_mark(w, 0, RZ, SH_RED, 0);
        shadow_mark(w, RZ, L->smem, 0, 0);
        shadow_mark(w, RZ + L->smem, w->arena_used - RZ - L->smem, SH_RED, 0);
    }
    if (g_hop_used) hop_block_begin(w, L);   // [hopper hook]
}

std::string launch_cfg(const Launch* L) {
    char b[200];
    snprintf(b, sizeof b, "<<<(%u,%u,%u), (%u,%u,%u), %zu>>>", L->g.x, L->g.y, L->g.z, L->b.x, L->b.y, L->b.z, L->smem);
    return b;
}

}  // namespace

API void* ccsim_rt_shared(int site, size_t bytes, size_t elem, size_t d0, size_t d1, size_t d2, int line,
                          const char* name) {
    Fiber* f = t_fiber;
    if (!f) { fprintf(stderr, "ccsim: __shared__ variable '%s' used outside a kernel\n", name); abort(); }
    Worker* w = f->w;
    if (site < 0 || site >= MAX_SITES) abort();
    if (w->site_gen[site] == w->gen) return (void*)w->sites[w->site_idx[site]].base;
    RtGuard guard;
    size_t off = (w->arena_used + 15) & ~(size_t)15;
    if (w->static_bytes + bytes > STATIC_LIMIT || w->static_bytes + bytes + w->dyn_bytes > w->L->smem_limit ||
        off + bytes + RZ > ARENA_CAP) {
        char b[600];
        if (w->static_bytes + bytes > STATIC_LIMIT)
            snprintf(b, sizeof b,
                     "LaunchError: %s %s needs %zu bytes of static shared memory (__shared__ %s at line %d, %zu bytes), "
                     "more than the 48 KB (49152 bytes) of static shared memory a block may declare. Use smaller tiles, "
                     "or fewer/smaller __shared__ arrays (above 48 KB only dynamic shared memory works, with "
                     "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)).",
                     w->L->name, launch_cfg(w->L).c_str(), w->static_bytes + bytes, name, line, bytes);
        else
            snprintf(b, sizeof b,
                     "LaunchError: %s %s needs %zu bytes of static shared memory (__shared__ %s at line %d, %zu bytes) "
                     "plus %zu bytes of dynamic shared memory, more than the %zu bytes this kernel may use (48 KB, or "
                     "its cudaFuncSetAttribute opt-in; at most %zu on the modelled H100). Use smaller tiles, or "
                     "fewer/smaller __shared__ arrays.",
                     w->L->name, launch_cfg(w->L).c_str(), w->static_bytes + bytes, name, line, bytes, w->dyn_bytes,
                     w->L->smem_limit, OPTIN_LIMIT);
        fail_here("launch", b, nullptr, line, 0);
    }
    w->static_bytes += bytes;
    std::memset(w->arena + off, 0xFF, bytes);   // poison: floats read NaN, ints -1
    Site s{(uintptr_t)(w->arena + off), bytes, elem ? elem : 1, d0, d1, d2, line, name};
    int idx = (int)w->sites.size();
    w->sites.push_back(s);
    w->site_gen[site] = w->gen; w->site_idx[site] = idx;
    shadow_mark(w, off, bytes, 0, idx);
    shadow_mark(w, off + bytes, ((off + bytes + 3) & ~(size_t)3) - (off + bytes) + RZ, SH_RED, idx);
    w->arena_used = off + bytes + RZ;
    return (void*)s.base;
}

// One number per __shared__ declaration *per instantiation*: the rewriter keeps it in a function-local
// static, which C++ gives every template specialization separately.
API int ccsim_rt_new_site(void) {
    static std::atomic<int> next{0};
    int s = next.fetch_add(1);
    if (s >= MAX_SITES) {
        fprintf(stderr, "ccsim: more than %d __shared__ declarations (counting template instantiations)\n", MAX_SITES);
        abort();
    }
    return s;
}

API void* ccsim_rt_dyn_shared(void) {
    Fiber* f = t_fiber;
    if (!f) abort();
    return f->w->arena + f->w->dyn_off;
}

namespace {

std::string elem_name(const Site& s, uintptr_t a) {
    long long idx = ((long long)a - (long long)s.base);
    idx = idx >= 0 ? idx / (long long)s.elem : -((-idx + (long long)s.elem - 1) / (long long)s.elem);
    char b[160];
    if (s.d0 == 0 && s.bytes == s.elem && idx == 0) return s.name;  // a scalar __shared__ variable
    if (s.d1 && s.d0 && idx >= 0) {
        long long inner = (long long)s.d1 * (s.d2 ? (long long)s.d2 : 1);
        if (s.d2) snprintf(b, sizeof b, "%s[%lld][%lld][%lld]", s.name, idx / inner, (idx % inner) / (long long)s.d2, idx % (long long)s.d2);
        else snprintf(b, sizeof b, "%s[%lld][%lld]", s.name, idx / inner, idx % inner);
    } else {
        snprintf(b, sizeof b, "%s[%lld]", s.name[0] == 'e' && strncmp(s.name, "extern", 6) == 0 ? "extern_shared" : s.name, idx);
    }
    return b;
}

inline bool warp_ordered(Worker* w, int prev_tid, uint32_t prev_seq, const Fiber* f) {
    if (prev_tid / 32 != f->tid / 32) return false;
    return f->lcs > prev_seq && ((f->lcm >> (prev_tid & 31)) & 1u);
    (void)w;
}

const char* GUIDE_NOTE =
    " (Per the CUDA Programming Guide threads of a block are only ordered by __syncthreads(), or within a warp "
    "by __syncwarp()/warp collectives; a real GPU may happen to give the expected value, but the result is undefined.)";

// The report for a pending conflict whose bytes did change; empty if they did not (then it is forgotten).
std::string pending_verdict(Worker* w, const Pending& p) {
    Shadow& s = w->shadow[p.word];
    s.flags &= (uint8_t)~SH_PEND;
    uint32_t now; std::memcpy(&now, w->arena + p.word * 4, 4);
    uint32_t mask = 0;
    for (int b = 0; b < 4; ++b) if ((p.bm >> b) & 1u) mask |= 0xffu << (8 * b);
    if (((now ^ p.old) & mask) == 0) return "";
    const Site* st = (s.arr >= 0 && s.arr < (int)w->sites.size()) ? &w->sites[s.arr] : nullptr;
    uintptr_t wa = (uintptr_t)w->arena + p.word * 4 + (uintptr_t)__builtin_ctz(p.bm ? p.bm : 1);
    std::string en = st ? elem_name(*st, wa) : "shared memory";
    if (p.war)
        return "RaceError " + where(w->L, w->bidx) + ": " + thr_of(w, p.tid) + " writes " + en + " at " + pctok(p.pc) +
               " after " + thr_of(w, p.other) + " read it at " + pctok(p.opc) + " with no __syncthreads() between them, "
               "and the write changes the value, so the reader may see either value. Put a __syncthreads() between the "
               "read and the write (a buffer reused for a second reduction needs one before it is overwritten)." + GUIDE_NOTE;
    return "RaceError " + where(w->L, w->bidx) + ": " + thr_of(w, p.tid) + " writes " + en + " at " + pctok(p.pc) +
           " after " + thr_of(w, p.other) + " wrote a different value to it at " + pctok(p.opc) +
           " with no __syncthreads() between them: which value survives depends on thread order. Separate the writes "
           "with a __syncthreads(), or let only one thread write (identical values would be harmless)." + GUIDE_NOTE;
}

inline bool word_changed(Worker* w, size_t word, uint32_t old, uint8_t bm) {
    uint32_t now; std::memcpy(&now, w->arena + word * 4, 4);
    uint32_t mask = 0;
    for (int b = 0; b < 4; ++b) if ((bm >> b) & 1u) mask |= 0xffu << (8 * b);
    return ((now ^ old) & mask) != 0;
}

// Scheduler side (barrier release, block end): true if a pending conflict turned out to be a race (reported).
bool resolve_all_pending(Worker* w) {
    for (const Pending& p : w->pend) {
        if (!(w->shadow[p.word].flags & SH_PEND) || w->shadow[p.word].pidx != (uint32_t)(&p - w->pend.data())) continue;
        std::string msg = pending_verdict(w, p);
        if (!msg.empty()) {
            dim3 t = unlinear(p.tid, w->L->b);
            set_error("race", msg, w->L, &w->bidx, &t, nullptr, 0, p.pc);
            w->pend.clear();
            return true;
        }
    }
    w->pend.clear();
    return false;
}

// The bytes of word i that [a, a + size) covers.
inline uint8_t word_bytes(const Worker* w, size_t i, uintptr_t a, unsigned size) {
    uintptr_t wa = (uintptr_t)w->arena + i * 4;
    uintptr_t lo = std::max(wa, a), hi = std::min(wa + 4, a + size);
    return lo < hi ? (uint8_t)(((1u << (hi - lo)) - 1u) << (lo - wa)) : 0;
}

// A read (or atomic) of shared bytes no thread of the block has written. Reporting it at once would make the
// diagnosis depend on thread order: in a kernel missing the __syncthreads() between filling a tile and reading
// it, the thread that runs first finds its neighbour's element unwritten, while in another order it finds it
// written (a race). Shared memory has no defined value until a thread of the block writes it (CUDA Programming
// Guide, "Shared Memory"; only __syncthreads() orders one thread's write before another's read, "Synchronization
// Functions"). So the thread is stopped before the access and parked until the barrier interval resolves:
// - another thread writes those bytes in the same interval: the read was unordered with that write, a race,
//   reported by the writer's hook (parked_race) before its store, naming both lines;
// - every thread that could still write them has reached the barrier, exited, or parked too: the scheduler
//   reports the uninitialised read of the lowest-numbered parked thread (run_block), independent of order.
// A parked thread never resumes (its block ends with a report), so no bad value is ever read.
[[noreturn]] void park_unwritten(Fiber* f, uintptr_t a, unsigned size, int kind, uintptr_t pc, size_t w0, size_t w1) {
    Worker* w = f->w;
    for (size_t i = w0; i <= w1; ++i) {
        uint8_t bm = word_bytes(w, i, a, size);
        if ((w->shadow[i].init & bm) != bm) w->shadow[i].flags |= SH_WAIT;
    }
    f->park_a = a; f->park_size = size; f->park_kind = kind; f->park_pc = pc;
    f->state = F_PARKED;
    w->parked.push_back(f);
    t_in_rt = 0;     // this fiber's hook never returns: drop its guard so the other fibers are checked
    yield_next(f);
    __builtin_trap();
}

// A write into bytes that a parked thread waits to read, in the same barrier interval: report the race
// (reader's and writer's lines) and stop the writer before its store.
void parked_race(Fiber* f, size_t i, uint8_t bm, uintptr_t pc) {
    Worker* w = f->w;
    Shadow& s = w->shadow[i];
    uint8_t fresh = (uint8_t)(bm & ~s.init);
    if (!fresh) return;
    for (Fiber* r : w->parked) {
        if (!(word_bytes(w, i, r->park_a, r->park_size) & fresh)) continue;
        const Site* st = (s.arr >= 0 && s.arr < (int)w->sites.size()) ? &w->sites[s.arr] : nullptr;
        uintptr_t wa = (uintptr_t)w->arena + i * 4;
        std::string en = st ? elem_name(*st, std::max(wa, r->park_a)) : "shared memory";
        std::string msg =
            "RaceError " + where(w->L, w->bidx) + ": missing __syncthreads(). " + thr(r) +
            (r->park_kind == 2 ? " atomically updates " : " reads ") + en + " at " + pctok(r->park_pc) + " and " + thr(f) +
            " writes it at " + pctok(pc) + " in the same barrier interval, with no __syncthreads() between them, so "
            "the read may see the element before or after the write. Put a __syncthreads() between the code that "
            "writes shared memory and the code that reads what other threads wrote (after filling a tile, before "
            "using it; in a loop, also before the next iteration overwrites it). (In the simulator's thread order "
            "the read came first and found the element not yet written.)" + GUIDE_NOTE;
        t_in_rt++;
        set_error("race", msg, w->L, &w->bidx, &r->v.ti, nullptr, 0, r->park_pc);
        fiber_fail(f);
    }
}

void shared_access(Fiber* f, uintptr_t a, unsigned size, int kind, uintptr_t pc) {
    RtGuard guard;
    if (g_hop_used) hop_shared_access(f, a, size, kind, pc);   // [hopper hook]
    Worker* w = f->w;
    size_t off = a - (uintptr_t)w->arena;
    size_t w0 = off / 4, w1 = (off + size - 1) / 4;
    if (w1 >= ARENA_CAP / 4) w1 = ARENA_CAP / 4 - 1;
    for (size_t i = w0; i <= w1; ++i) {   // the word's earlier conflicting write is decided before it is touched again
        Shadow& s = w->shadow[i];
        if (!(s.flags & SH_PEND)) continue;
        const Pending p = w->pend[s.pidx];
        std::string msg = pending_verdict(w, p);
        if (!msg.empty()) {
            dim3 t = unlinear(p.tid, w->L->b);
            set_error("race", msg, w->L, &w->bidx, &t, nullptr, 0, p.pc);
            fiber_fail(f);
        }
    }
    const char* verb = kind == 0 ? "reads" : kind == 1 ? "writes" : "atomically updates";
    for (size_t i = w0; i <= w1; ++i) {
        Shadow& s = w->shadow[i];
        if (s.flags & SH_RED) {
            std::string msg;
            if (s.arr >= 0 && s.arr < (int)w->sites.size()) {
                const Site& st = w->sites[s.arr];
                bool before = a < st.base;
                size_t n = st.bytes / st.elem;
                msg = "OutOfBoundsError " + where(w->L, w->bidx) + ": " + thr(f) + " " + verb + " " + elem_name(st, a) +
                      " at " + pctok(pc) + ", " + (before ? "before the start of " : "past the end of ") +
                      (s.arr == 0 ? std::string("the dynamic shared memory (") + std::to_string(st.bytes) + " bytes, the launch's third <<<>>> argument)"
                                  : std::string("__shared__ ") + st.name + " (" + std::to_string(n) + " elements, declared at line " + std::to_string(st.line) + ")") +
                      ". Check the index arithmetic and the array size.";
            } else {
                msg = "OutOfBoundsError " + where(w->L, w->bidx) + ": " + thr(f) + " " + verb +
                      " shared memory outside every __shared__ array at " + pctok(pc) + ". Check the index arithmetic.";
            }
            fail_here("out-of-bounds", msg, nullptr, 0, pc);
        }
    }
    if (kind != 1) {  // a read of bytes nobody wrote: decided when the barrier interval resolves (park_unwritten)
        for (size_t i = w0; i <= w1; ++i) {
            uint8_t bm = word_bytes(w, i, a, size);
            if ((w->shadow[i].init & bm) != bm) park_unwritten(f, a, size, kind, pc, w0, w1);
        }
    }
    if (!w->parked.empty()) {   // a write into bytes a parked thread waits to read
        for (size_t i = w0; i <= w1; ++i)
            if (w->shadow[i].flags & SH_WAIT) parked_race(f, i, word_bytes(w, i, a, size), pc);
    }
    for (size_t i = w0; i <= w1; ++i) {
        Shadow& s = w->shadow[i];
        const Site* st = (s.arr >= 0 && s.arr < (int)w->sites.size()) ? &w->sites[s.arr] : nullptr;
        uintptr_t wa = (uintptr_t)w->arena + i * 4;
        // names are only built for a report (building them per access made checked mode crawl)
        auto ename_of = [&]() -> std::string { return st ? elem_name(*st, std::max(wa, a)) : "shared memory"; };
#define ename ename_of()
        uint32_t E = w->epoch, seq = w->wseq[f->tid / 32];
        uintptr_t lo = std::max(wa, a), hi = std::min(wa + 4, a + size);
        uint8_t bm = (uint8_t)(((1u << (hi - lo)) - 1u) << (lo - wa));
        if (kind != 1) {  // read (or atomic read-modify-write); its bytes are initialised (checked above)
            for (int k = 0; k < 2 && kind == 0; ++k) {
                uint16_t wt = k ? s.w2t : s.wt; uint32_t we = k ? s.w2e : s.we, ws = k ? s.w2s : s.ws;
                uint8_t wm = k ? s.w2m : s.wm; uintptr_t wpc = k ? s.w2pc : s.wpc;
                if (we == E && wt != f->tid && (wm & bm) && !warp_ordered(w, wt, ws, f) &&
                    (k || word_changed(w, i, s.wold, bm))) {
                    fail_here("race", "RaceError " + where(w->L, w->bidx) + ": " + thr(f) + " reads " + ename + " at " +
                              pctok(pc) + " after " + thr_of(w, wt) + (!k && (s.flags & SH_ATOMIC) ? " atomically updated" : " wrote") +
                              " it at " + pctok(wpc) + " with no __syncthreads() between them. Put a __syncthreads() "
                              "between the write and the read." + GUIDE_NOTE, nullptr, 0, pc);
                }
            }
        }
        if (kind != 0) {  // write (or atomic)
            bool prev_atomic = (s.flags & SH_ATOMIC) != 0;
            uint16_t pwt = s.wt; uintptr_t pwpc = s.wpc;
            bool waw = (s.wm & bm) && s.we == E && s.wt != f->tid && !(kind == 2 && prev_atomic) &&
                       !warp_ordered(w, s.wt, s.ws, f);
            if (!waw && (s.w2m & bm) && s.w2e == E && s.w2t != f->tid && !warp_ordered(w, s.w2t, s.w2s, f)) {
                waw = true; pwt = s.w2t; pwpc = s.w2pc;
            }
            bool pending = false;
            auto defer = [&](bool war, uint16_t other, uintptr_t opc) {
                uint32_t old; std::memcpy(&old, w->arena + i * 4, 4);
                s.pidx = (uint32_t)w->pend.size();
                w->pend.push_back(Pending{i, old, bm, war, (uint16_t)f->tid, other, pc, opc});
                s.flags |= SH_PEND;
                pending = true;
            };
            if (waw && kind == 1) { defer(false, pwt, pwpc); waw = false; }
            if (waw) {
                fail_here("race", "RaceError " + where(w->L, w->bidx) + ": " + thr(f) + " " + verb + " " + ename + " at " +
                          pctok(pc) + " after " + thr_of(w, pwt) + " wrote it at " + pctok(pwpc) +
                          " with no __syncthreads() between them: which value survives depends on thread order. "
                          "Separate the writes with a __syncthreads(), or let only one thread write." + GUIDE_NOTE, nullptr, 0, pc);
            }
            if (kind == 1 && !pending) {
                for (int r = 0; r < 2; ++r) {
                    uint16_t rt = r ? s.r2t : s.r1t; uint32_t re = r ? s.r2e : s.r1e, rs = r ? s.r2s : s.r1s;
                    uintptr_t rpc = r ? s.r2pc : s.r1pc;
                    uint8_t rm = r ? s.r2m : s.r1m;
                    if (re == E && rt != f->tid && (rm & bm) && !warp_ordered(w, rt, rs, f)) { defer(true, rt, rpc); break; }
                }
            }
            s.flags = (uint8_t)((s.flags | SH_INIT) & ~SH_ATOMIC) | (kind == 2 ? SH_ATOMIC : 0);  // keeps SH_PEND
            s.init |= bm;
            if (!(s.wt == f->tid && s.we == E)) std::memcpy(&s.wold, w->arena + i * 4, 4);
            if (s.wt == f->tid && s.we == E) {
                s.wm |= bm;
            } else {
                if (s.we == E && !(s.wm & bm)) {  // another thread's bytes of this word stay recorded
                    s.w2t = s.wt; s.w2e = s.we; s.w2s = s.ws; s.w2pc = s.wpc; s.w2m = s.wm;
                } else if (s.w2e == E) {
                    s.w2m &= (uint8_t)~bm;
                }
                s.wm = bm;
            }
            s.wt = (uint16_t)f->tid; s.we = E; s.ws = seq; s.wpc = pc;
        } else {
            if (s.r1e != E || s.r1t == f->tid) {
                s.r1m = (s.r1e == E && s.r1t == f->tid) ? (uint8_t)(s.r1m | bm) : bm;
                s.r1t = (uint16_t)f->tid; s.r1e = E; s.r1s = seq; s.r1pc = pc;
            } else {
                s.r2m = (s.r2e == E && s.r2t == f->tid) ? (uint8_t)(s.r2m | bm) : bm;
                s.r2t = (uint16_t)f->tid; s.r2e = E; s.r2s = seq; s.r2pc = pc;
            }
        }
    }
#undef ename
}
}  // namespace
