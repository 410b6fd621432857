// rt/mem_global.h - part of ccsim_rt.cpp. Memory and checks: global memory.
//
// Checked mode's verdict on an access outside every registered buffer (global_bad: out of bounds, named by the
// nearest buffer and index, or an invalid address) and on one inside (global_access): a per-word shadow of each
// buffer for races between threads and blocks of one launch (judged by value once the store has landed) and
// uninitialised reads of cudaMalloc memory. Blocks run on several OS threads, so each word has a lock that a plain
// store holds until it has landed (global_release).
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

namespace {
// ===================================================================================================
// The access check of checked mode
// ===================================================================================================
const Buffer* nearest_buffer(uintptr_t a, long long* dist) {
    const Buffer* best = nullptr; long long bd = LLONG_MAX;
    int n = g_nbufs.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
        const Buffer& b = g_bufs[i];
        if (!b.base) continue;
        long long d = a < b.base ? (long long)(b.base - a) : (long long)(a - (b.base + b.bytes)) + 1;
        if (d < bd) { bd = d; best = &b; }
    }
    *dist = bd;
    return best;
}

void global_bad(Fiber* f, uintptr_t a, unsigned size, int kind, uintptr_t pc) {
    t_in_rt++;
    Worker* w = f->w;
    const char* verb = kind == 0 ? "reads" : kind == 1 ? "writes" : "atomically updates";
    long long dist = 0;
    const Buffer* b = nearest_buffer(a, &dist);
    if (b && dist <= (long long)(1 << 20)) {
        size_t el = b->elem ? b->elem : 1;
        long long idx = a >= b->base ? (long long)((a - b->base) / el) : -(long long)((b->base - a + el - 1) / el);
        size_t n = b->bytes / el;
        bool past = a >= b->base;
        // Which mistake it is, where the launch is 1-D: a thread whose own grid position (counted in units of
        // this access, so a float4 thread counts float4s) is past the end has no bounds check; one inside the
        // data that still reached past it computed its index wrongly (i + 1, a loop bound that lets i reach n).
        const Launch* L = w->L;
        std::string why = "A thread reached past the end of the data: either a thread beyond the end has no bounds "
                          "check, or the index arithmetic is off (an access such as i + 1); check both.";
        if (past && L->g.y == 1 && L->g.z == 1 && L->b.y == 1 && L->b.z == 1) {
            unsigned long long gid = (unsigned long long)w->bidx.x * L->b.x + f->v.ti.x;
            size_t unit = size > el ? size : el;
            unsigned long long inside = b->bytes / unit;
            char t[400];
            if (gid >= inside)
                snprintf(t, sizeof t, "This thread's position in the grid (blockIdx.x * blockDim.x + threadIdx.x = "
                         "%llu) is itself past the end: it needs a bounds check that stops it before the access.", gid);
            else
                snprintf(t, sizeof t, "This thread's position in the grid (blockIdx.x * blockDim.x + threadIdx.x = "
                         "%llu) is inside the data, but the index it used is not: the index arithmetic is off (an "
                         "access such as i + 1, or a loop that lets the index reach the end).", gid);
            why = t;
        }
        char m[900];
        snprintf(m, sizeof m,
                 "OutOfBoundsError %s: %s %s %s[%lld] at %s, %s %s (%zu element%s). %s",
                 where(w->L, w->bidx).c_str(), thr(f).c_str(), verb, b->name, idx, pctok(pc).c_str(),
                 past ? "past the end of" : "before the start of", b->name, n, n == 1 ? "" : "s",
                 past ? why.c_str() : "Check the index arithmetic (a negative index or offset).");
        fail_here("out-of-bounds", m, nullptr, 0, pc);
    }
    char m[600];
    snprintf(m, sizeof m,
             "KernelError %s: %s %s %u bytes at address 0x%lx at %s, which is not in any buffer passed to the "
             "launcher, any cudaMalloc allocation, shared memory or the thread's own locals (an invalid/wild "
             "pointer: check pointer arithmetic, uninitialised pointers and host pointers passed to a kernel).",
             where(w->L, w->bidx).c_str(), thr(f).c_str(), verb, size, (unsigned long)a, pctok(pc).c_str());
    fail_here("crash", m, nullptr, 0, pc);
}

Range g_host_stack{0, 0};

inline uint32_t byte_mask32(uint8_t bm) {
    uint32_t mask = 0;
    for (int b = 0; b < 4; ++b) if ((bm >> b) & 1u) mask |= 0xffu << (8 * b);
    return mask;
}

// Element index by the buffer's element size; cudaMalloc memory is untyped: by the access size then.
std::string gname(const Buffer& b, uintptr_t a, unsigned size = 4) {
    size_t el = b.elem > 1 ? b.elem : (size ? size : 1);
    return std::string(b.name) + "[" + std::to_string((a - b.base) / el) + "]";
}

std::string gthread(const Launch* L, uint32_t thr1) {
    unsigned long long t = thr1 - 1ull;
    return "thread " + tstr(unlinear(t % L->nthreads, L->b)) + " of block " + tstr(unlinear(t / L->nthreads, L->g));
}

const char* GLOBAL_NOTE =
    " Blocks of a launch run in any order and threads of a block are only ordered by __syncthreads(): use atomics, "
    "let one thread own each element, or split the work into two launches.";

__attribute__((noinline)) void gs_lock_wait(GShadow& s) {
    for (unsigned spins = 0; __atomic_exchange_n(&s.lock, (uint8_t)1, __ATOMIC_ACQUIRE);) {
        do {
            if (++spins > 64) sched_yield();   // the holder may be descheduled (more workers than cores)
#if defined(__x86_64__)
            else __builtin_ia32_pause();
#endif
        } while (__atomic_load_n(&s.lock, __ATOMIC_RELAXED));
    }
}
inline void gs_lock(GShadow& s) {
    if (__builtin_expect(__atomic_exchange_n(&s.lock, (uint8_t)1, __ATOMIC_ACQUIRE), 0)) gs_lock_wait(s);
}
inline void gs_unlock(GShadow& s) { __atomic_store_n(&s.lock, (uint8_t)0, __ATOMIC_RELEASE); }

// The worker's held stores have landed: decide their conflicts by the bytes they stored, then unlock.
__attribute__((noinline)) void global_decide(Worker* w) {
    for (const Worker::GPending& p : w->gconf) {
        uint32_t now; std::memcpy(&now, (const void*)p.word, 4);
        if ((now ^ p.old) & byte_mask32(p.bm)) w->gpend.push_back(p);
    }
    w->gconf.clear();
}
__attribute__((noinline)) void global_unlock_more(Worker* w) {
    for (GShadow* s : w->gheld_more) gs_unlock(*s);
    w->gheld_more.clear();
}
inline void global_release(Worker* w) {
    if (__builtin_expect(!w->gconf.empty(), 0)) global_decide(w);
    for (unsigned i = 0; i < w->ngheld; ++i) gs_unlock(*w->gheld[i]);
    if (__builtin_expect(w->ngheld == Worker::GHELD, 0)) global_unlock_more(w);
    w->ngheld = 0;
}

// ---- the memory-model check: a value published with a flag ------------------------------------------------
// A flag read is a volatile or atomic load of a word that a thread of another block stored in this launch; the
// reader remembers it (Fiber::seen: the storing thread, its fence count at that store, whether the store was a
// release and the load an acquire, the reader's own fence count). A later plain load by the same reader of a word
// that the SAME storing thread wrote (the value) is then judged as the consumer side of the protocol, instead of
// by the launch-wide rule below: the storing thread must have run a fence between its store of the value and its
// store of the flag (or stored the flag with release order), and the reader must have run a fence between its
// load of the flag and its load of the value (or loaded the flag with acquire order). Fence counts are per thread
// (ccsim_rt_threadfence), so "between" is exact for one thread's program order.
const Fiber::Seen* seen_from(const Fiber* f, uint32_t self, uint32_t seq, uint32_t writer) {
    const Fiber::Seen* best = nullptr;
    for (const Fiber::Seen& o : f->seen)
        if (o.owner == self && o.seq == seq && o.writer == writer) best = &o;
    return best;
}

// CCSIM_TEST_FLAG_READ_DELAY_US (tests only, tests/sim/test_memory_model.py): a flag read whose writer is unknown
// sleeps this long after its check, so that the writer's store lands between the check and the load every time.
const int g_flag_read_delay_us = [] { const char* e = getenv("CCSIM_TEST_FLAG_READ_DELAY_US"); return e ? atoi(e) : 0; }();

// writer 0: a flag read whose word no thread of another block had stored to when its check ran. The check runs
// just before the load, on another OS thread than the writer's: the writer's store can land in between, and the
// load then returns the flag that its check did not see (a false race on the value read next, under load: about 1
// chain in 300 with 8 workers on 2 busy cores). Such a read is kept with its word, and seen_late asks that word's
// shadow for the writer when the value is read.
void observe(Fiber* f, uint32_t self, uint32_t seq, const GShadow& s, uintptr_t word, const Buffer* b, int sync,
             uintptr_t pc, bool known = true) {
    const uint32_t writer = known ? s.wthr : 0;
    Fiber::Seen* slot = nullptr;
    for (Fiber::Seen& o : f->seen)   // the same writer (or word, writer unknown) again, a spin: the latest read counts
        if (o.owner == self && o.seq == seq && o.writer == writer && (known || o.word == word)) slot = &o;
    if (!slot) slot = &f->seen[f->nseen++ % 4];
    *slot = Fiber::Seen{self, seq, writer, f->fences, known ? s.wfences : (uint16_t)0, known ? s.wrel : (uint8_t)0,
                        (uint8_t)((sync & ACC_ORDERED) ? 1 : 0), word, pc, b};
}

// A flag read kept with its writer unknown (observe's writer 0) whose word's shadow now names `writer` as its last
// store in this launch: that store is what the load returned (the reader left its spin). Filled into `out` with the
// store's fence count and order, read without the word's lock (the caller holds another word's; the store landed
// before this reader's load of it, long before this later load of the value). Null if none.
const Fiber::Seen* seen_late(const Fiber* f, uint32_t self, uint32_t seq, uint32_t writer, Fiber::Seen* out) {
    for (const Fiber::Seen& o : f->seen) {
        if (o.owner != self || o.seq != seq || o.writer != 0 || !o.buf) continue;
        const GShadow& fs = o.buf->sh[(o.word - o.buf->base) / 4];
        if (__atomic_load_n(&fs.wl, __ATOMIC_ACQUIRE) != seq || __atomic_load_n(&fs.wthr, __ATOMIC_RELAXED) != writer)
            continue;
        *out = o;
        out->writer = writer;
        out->wfences = __atomic_load_n(&fs.wfences, __ATOMIC_RELAXED);
        out->release = __atomic_load_n(&fs.wrel, __ATOMIC_RELAXED);
        return out;
    }
    return nullptr;
}

// The consumer's load of a value that thread o.writer stored, after the flag o: "" when ordered, else the report.
std::string judge_published(const Fiber* f, const Fiber::Seen& o, const GShadow& s, const Buffer& b, uintptr_t lo,
                            unsigned size, uintptr_t pc) {
    const Launch* L = f->w->L;
    const std::string val = gname(b, lo, size), flag = gname(*o.buf, o.word);
    const std::string head = "RaceError " + where(L, f->w->bidx) + ": " + thr(f) + " reads " + val + " at " +
                             pctok(pc) + ", the value " + gthread(L, o.writer) + " published with the flag " + flag +
                             " (read at " + pctok(o.pc) + "), but ";
    const int16_t order = (int16_t)(uint16_t)(o.wfences - s.wfences);   // fences between value and flag stores
    if (order < 0)
        return head + "that thread stored the value AFTER the flag (it ran a fence between the flag's store and the "
               "value's): the flag says ready before the value exists. Store the value first, then __threadfence(), "
               "then the flag.";
    if (order == 0 && !o.release)
        return head + "the producer is missing its fence: that thread stored the value and then the flag with no "
               "__threadfence() between the two stores (and the flag's store is not a release store), so another "
               "SM may see the new flag and the old value. Put __threadfence() between the value's store and the "
               "flag's store, or store the flag with __nv_atomic_store_n(p, v, __NV_ATOMIC_RELEASE, "
               "__NV_THREAD_SCOPE_DEVICE) (cuda::atomic_ref::store with memory_order_release).";
    if (!o.acquire && f->fences == o.my_fences)
        return head + "the consumer is missing its fence: this thread loaded the flag and then the value with no "
               "__threadfence() between the two loads (and the flag's load is not an acquire load), so the value's "
               "load may be served before the flag's and see the old value. Put __threadfence() after the loop that "
               "waits for the flag, or load the flag with __nv_atomic_load_n(p, __NV_ATOMIC_ACQUIRE, "
               "__NV_THREAD_SCOPE_DEVICE) (cuda::atomic_ref::load with memory_order_acquire).";
    return "";
}

// A global-memory access by a CUDA thread inside registered buffer b: initialisation (cudaMalloc memory)
// and races with other threads of the same launch. sync: the ACC_* bits of the access (state.h).
void global_access(Fiber* f, const Buffer& b, uintptr_t a, unsigned size, int kind, int sync, uintptr_t pc) {
    const bool vol = sync != 0;
    // A thread spinning on a flag never hands back control: when another block has failed (its report is set and
    // the launch is stopping), the spin's next flag read ends this thread, or the launch would wait for it forever.
    if (vol && kind == 0 && f->w->L->abort.load(std::memory_order_relaxed)) fiber_fail(f);
    Worker* w = f->w;
    Launch* L = w->L;
    uint32_t T = (uint32_t)(w->blin * L->nthreads + (unsigned)f->tid + 1);
    uint16_t E = (uint16_t)w->epoch;
    uint32_t S = L->seq;
    uintptr_t lo_w = (a - b.base) / 4, hi_w = (a + size - 1 - b.base) / 4;
    for (uintptr_t i = lo_w; i <= hi_w && i * 4 < b.bytes; ++i) {
        GShadow& s = b.sh[i];
        uintptr_t wa = b.base + i * 4;
        uintptr_t lo = std::max(wa, a), hi = std::min(wa + 4, a + size);
        uint8_t bm = (uint8_t)(((1u << (hi - lo)) - 1u) << (lo - wa));
        gs_lock(s);   // words in ascending order, nothing else held: no deadlock
        uint32_t cur; std::memcpy(&cur, (const void*)wa, 4);
        auto ordered = [&](uint32_t other, uint16_t oe) {
            return (other - 1ull) / L->nthreads == w->blin && oe != E;   // same block, separated by a barrier
        };
        if (kind != 1 && b.track_init && (s.init & bm) != bm) {
            RtGuard guard;
            gs_unlock(s);
            fail_here("uninitialized-read",
                      "UninitializedReadError " + where(L, w->bidx) + ": " + thr(f) + (kind == 0 ? " reads " : " atomically updates ") +
                      gname(b, lo, size) + " at " + pctok(pc) + ", which nothing has written since cudaMalloc (device memory starts "
                      "undefined; compute-sanitizer's initcheck reports this). Initialise it first: cudaMemset/cudaMemcpy, "
                      "or a kernel that writes every element it later reads." +
                      std::string(g_streams_used.load() ? " If an async copy or kernel on another stream writes it, this "
                      "launch's stream is not ordered after that work: record an event after it and cudaStreamWaitEvent "
                      "on it (the simulator runs unordered stream work in an adversarial order)." : ""), nullptr, 0, pc);
        }
        if (kind == 2) { s.init |= bm; gs_unlock(s); continue; }   // atomics never race with each other
        bool cross_ok = vol || L->fenced.load(std::memory_order_relaxed);
        if (kind == 0) {
            const bool other_block = s.wl == S && s.wthr && s.wthr != T && (s.wm & bm) &&
                                     (s.wthr - 1ull) / L->nthreads != w->blin;
            if (vol && other_block) observe(f, T, S, s, wa, &b, sync, pc);   // a flag read
            const bool unknown = vol && !other_block && !(s.wl == S && s.wthr);   // a flag not stored yet
            if (unknown) observe(f, T, S, s, wa, &b, sync, pc, false);
            Fiber::Seen late;
            const Fiber::Seen* o = nullptr;
            if (!vol && other_block && ((cur ^ s.wold) & byte_mask32(bm))) {
                o = seen_from(f, T, S, s.wthr);
                if (!o) o = seen_late(f, T, S, s.wthr, &late);
            }
            if (o) {   // the value of a flag this thread read: judged by the protocol, not by the launch-wide rule
                std::string why = judge_published(f, *o, s, b, lo, size, pc);
                if (!why.empty()) {
                    RtGuard guard;
                    gs_unlock(s);
                    fail_here("race", why, nullptr, 0, pc);
                }
                s.rthr = T; s.rl = S; s.re = E; s.rm = bm;
                gs_unlock(s);
                continue;
            }
            if (s.wl == S && s.wthr && s.wthr != T && (s.wm & bm) && !ordered(s.wthr, s.we) &&
                ((cur ^ s.wold) & byte_mask32(bm)) && !(cross_ok && (s.wthr - 1ull) / L->nthreads != w->blin)) {
                RtGuard guard;
                gs_unlock(s);
                fail_here("race", "RaceError " + where(L, w->bidx) + ": " + thr(f) + " reads " + gname(b, lo, size) + " at " +
                          pctok(pc) + ", which " + gthread(L, s.wthr) + " wrote (changing its value) in the same launch with "
                          "nothing ordering the two, so the read may see either value." + GLOBAL_NOTE, nullptr, 0, pc);
            }
            if (!(s.wthr == T && s.wl == S)) { s.rthr = T; s.rl = S; s.re = E; s.rm = bm; }
            gs_unlock(s);
            if (__builtin_expect(unknown && g_flag_read_delay_us != 0, 0))   // (tests: the window seen_late covers)
                usleep((useconds_t)g_flag_read_delay_us);
            continue;
        }
        // a write: its value is not known yet, so the word stays locked until the store has landed; then
        // global_release compares the bytes it stored with `cur`, the value the last access left (for a
        // conflicting store: the value that thread stored)
        if (sync & ACC_ATOMIC) {
            // an atomic store never races (as atomics never do)
        } else if (s.wl == S && s.wthr && s.wthr != T && (s.wm & bm) && !ordered(s.wthr, s.we)) {
            w->gconf.push_back({wa, cur, bm, false, s.wthr, (uint16_t)f->tid, pc, &b});
        } else if (!vol && s.rl == S && s.rthr && s.rthr != T && (s.rm & bm) && !ordered(s.rthr, s.re) &&
                   !(cross_ok && (s.rthr - 1ull) / L->nthreads != w->blin)) {
            w->gconf.push_back({wa, cur, bm, true, s.rthr, (uint16_t)f->tid, pc, &b});
        }
        if (w->ngheld < Worker::GHELD) w->gheld[w->ngheld++] = &s;
        else w->gheld_more.push_back(&s);
        if (!(s.wthr == T && s.wl == S)) { s.wold = cur; s.wm = 0; }
        s.wthr = T; s.wl = S; s.we = E; s.wm |= bm; s.init |= bm;
        s.wfences = (uint16_t)f->fences; s.wrel = (sync & ACC_ORDERED) ? 1 : 0;
    }
}

// Block end: report the first conflicting global store that changed the value.
bool resolve_global_pending(Worker* w) {
    Launch* L = w->L;
    for (const auto& p : w->gpend) {
        std::string msg = "RaceError " + where(L, w->bidx) + ": " + thr_of(w, p.tid) + " writes " + gname(*p.buf, p.word) +
                          " at " + pctok(p.pc) + (p.war ? " after " + gthread(L, p.other) + " read it" :
                                                  " after " + gthread(L, p.other) + " wrote a different value to it") +
                          " in the same launch with nothing ordering the two" +
                          (p.war ? ", so the reader may see either value." : ": which value survives depends on thread order.") +
                          GLOBAL_NOTE;
        dim3 t = unlinear(p.tid, L->b);
        set_error("race", msg, L, &w->bidx, &t, nullptr, 0, p.pc);
        w->gpend.clear();
        return true;
    }
    w->gpend.clear();
    return false;
}
}  // namespace
