// rt/profile.h - part of ccsim_rt.cpp. Profiling counters (profile mode).
//
// Warp-level memory requests assembled per block from each lane's accesses (global: distinct 32-byte sectors;
// shared: wavefronts of the 32-bank model), active lanes per basic block (profile="branches"), barriers, a
// bounded trace of accesses for pictures; ccsim_api_set_profile switches counting on, ccsim_api_profile_json
// hands the counters of the last call to the Python side (cudacourse/profile.py).
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

namespace {
// ===================================================================================================
// Profile mode: warp-level memory requests, sectors, shared-memory wavefronts, active lanes, barriers
// ===================================================================================================
// A warp-level request is what the lanes of one warp do when they execute the same instruction (pc) for
// the same n-th time: CUDA threads are fibers here, so the k-th execution of a pc by each lane of a warp
// stands for the one lock-step execution of that instruction on a GPU. Requests are assembled per block
// and counted when the block ends (global: distinct 32-byte sectors; shared: wavefronts of the 32-bank,
// 4-byte model, 64-bit accesses in two half-warp phases and 128-bit accesses in four quarter-warp phases).
// The trace-pc hook (profile builds add -fsanitize-coverage=trace-pc) counts basic blocks the same way:
// lanes active per warp-level execution is the divergence measure.
enum { SP_GLOBAL = 0, SP_SHARED = 1, SP_BRANCH = 2 };
struct PReq { uint32_t mask; uint32_t size; uintptr_t addr[32]; };
// One instruction's executions in the running block. Each thread appends to its own list (sequential
// writes; the requests are assembled from the 32 lists of a warp when the block ends).
struct PSlot {
    uint8_t space = 0, op = 0; int16_t buf = -1; uint32_t size = 0; bool used = false;
    uint32_t traced = 0;                             // accesses of this pc recorded by this worker in this launch
    std::vector<uint32_t> cnt;                       // branches: executions per thread
    uintptr_t base = 0;                              // the buffer's (or the shared arena's) start
    std::vector<std::vector<uint32_t>> addr;         // memory: offsets from base per thread, in execution order
};
struct PStat {
    uintptr_t pc; uint8_t space, op; int16_t buf; uint32_t size;
    uint64_t requests = 0, lanes = 0, bytes = 0, sectors = 0, wavefronts = 0, ideal = 0;
};
struct TraceEv { uint8_t space, op, size; int16_t buf; uint32_t block; uint16_t tid; uint64_t off; uintptr_t pc; };
struct LaunchProf {
    std::mutex mu;
    std::string name; std::string file; int line = 0;
    dim3 g, b; size_t smem = 0, static_smem = 0;
    unsigned long long nblocks = 0, stride = 1, blocks_profiled = 0, barriers = 0;
    std::unordered_map<uintptr_t, PStat> stats;      // key: prof_key(pc, buffer, space, op)
    std::vector<Site> sites;                         // shared arrays of the first profiled block (arena offsets)
    std::vector<TraceEv> trace; bool trace_full = false;
};
bool g_profile = false;
constexpr unsigned long long PROFILE_MAX_THREADS = 1ull << 17;  // threads counted per launch; beyond, blocks are sampled
constexpr size_t TRACE_CAP = 1 << 16;                           // accesses recorded for pictures, per call
constexpr uint32_t TRACE_PER_PC = 4096;                         // ... and per instruction and worker thread
std::mutex g_prof_mu;
std::vector<std::unique_ptr<LaunchProf>> g_prof_launches;
std::atomic<size_t> g_trace_n{0};

// One slot per instruction and buffer (a helper's load may serve several buffers).
inline uintptr_t prof_key(uintptr_t pc, int buf, int space, int op) {
    return pc << 12 | (uintptr_t)(buf & 0xff) << 4 | (uintptr_t)space << 2 | (uintptr_t)op;
}

void prof_emit(Fiber* f, uintptr_t pc, uintptr_t a, unsigned size, int op, int space, int buf) {
    Worker* w = f->w;
    uintptr_t key = prof_key(pc, buf, space, op);
    unsigned h = (unsigned)((key >> 4) ^ (key >> 12)) & (Worker::PCACHE - 1);
    PSlot* sp = w->pcache_key[h] == key ? w->pcache[h] : nullptr;
    if (!sp) { sp = &(*w->prof)[key]; w->pcache_key[h] = key; w->pcache[h] = sp; }   // map nodes never move
    PSlot& s = *sp;
    if (!s.used) {
        unsigned n = w->L->nthreads;
        s.used = true; s.space = (uint8_t)space; s.op = (uint8_t)op; s.buf = (int16_t)buf; s.size = 0;
        s.base = space == SP_SHARED ? (uintptr_t)w->arena : space == SP_GLOBAL ? g_bufs[buf].base : 0;
        if (space == SP_BRANCH) s.cnt.assign(n, 0);
        else if (s.addr.size() < n) s.addr.resize(n);
    }
    if (space == SP_BRANCH) { s.cnt[f->tid]++; return; }
    s.addr[f->tid].push_back((uint32_t)(a - s.base));
    if (size > s.size) s.size = size;
    if (s.traced >= TRACE_PER_PC) return;   // this instruction's share of the trace is spent
    s.traced++;
    LaunchProf* P = w->L->prof;
    if (g_trace_n.load(std::memory_order_relaxed) < TRACE_CAP && g_trace_n.fetch_add(1) < TRACE_CAP) {
        uintptr_t off = space == SP_SHARED ? a - (uintptr_t)w->arena : a - g_bufs[buf].base;
        std::lock_guard<std::mutex> lk(P->mu);
        P->trace.push_back(TraceEv{(uint8_t)space, (uint8_t)op, (uint8_t)std::min(size, 255u), (int16_t)buf,
                                   (uint32_t)w->blin, (uint16_t)f->tid, (uint64_t)off, pc});
        if (s.traced == TRACE_PER_PC) P->trace_full = true;
    } else {
        s.traced = TRACE_PER_PC;
        P->trace_full = true;
    }
}

// Count the thread's pending accesses: one vector access if they form an aligned 8- or 16-byte unit.
void prof_flush(Fiber* f) {
    unsigned n = f->pn;
    if (!n) return;
    f->pn = 0;
    unsigned total = 0;
    for (unsigned i = 0; i < n; ++i) total += f->psz[i];
    if (n > 1 && (total == 8 || total == 16) && f->paddr[0] % total == 0) {
        prof_emit(f, f->ppc[0], f->paddr[0], total, f->pop, f->pspace, f->pbuf);
        return;
    }
    for (unsigned i = 0; i < n; ++i) prof_emit(f, f->ppc[i], f->paddr[i], f->psz[i], f->pop, f->pspace, f->pbuf);
}

inline void prof_access(Fiber* f, uintptr_t a, unsigned size, int op, uintptr_t pc, int space, int buf) {
    if (!f->w->prof_on) return;
    RtGuard guard;
    unsigned n = f->pn;
    if (n) {
        uintptr_t last = f->ppc[n - 1];
        unsigned total = 0;
        for (unsigned i = 0; i < n; ++i) total += f->psz[i];
        if (n < 4 && f->pop == op && f->pspace == space && f->pbuf == buf && a == f->paddr[n - 1] + f->psz[n - 1] &&
            pc > last && pc - last <= 24 && total + size <= 16 && size == f->psz[0]) {
            f->ppc[n] = pc; f->paddr[n] = a; f->psz[n] = (uint8_t)size; f->pn = (uint8_t)(n + 1);
            return;
        }
        prof_flush(f);
    }
    if (size > 8 || (a & (size - 1))) {   // already a vector access (or an unaligned one): no merging
        f->pop = (uint8_t)op; f->pspace = (uint8_t)space; f->pbuf = (int16_t)buf;
        prof_emit(f, pc, a, size, op, space, buf);
        return;
    }
    f->ppc[0] = pc; f->paddr[0] = a; f->psz[0] = (uint8_t)size; f->pn = 1;
    f->pop = (uint8_t)op; f->pspace = (uint8_t)space; f->pbuf = (int16_t)buf;
}

// Number of distinct values, left first in v[0..n). Lanes usually ask for ascending addresses: no sort then.
template <class T> unsigned distinct(T* v, unsigned n) {
    bool sorted = true;
    for (unsigned i = 1; i < n && sorted; ++i) sorted = v[i - 1] <= v[i];
    if (!sorted) std::sort(v, v + n);
    return (unsigned)(std::unique(v, v + n) - v);
}

// Wavefronts of one shared-memory request: lanes are served in phases (32 lanes for accesses of up to 4
// bytes, 16 for 8-byte, 8 for 16-byte accesses); in a phase, every bank delivers one distinct 4-byte word
// per wavefront (lanes reading the same word share it: broadcast).
void shared_wavefronts(const PReq& r, uintptr_t arena, uint64_t* wf, uint64_t* ideal) {
    unsigned per = r.size <= 4 ? 32 : r.size <= 8 ? 16 : 8;
    for (unsigned p0 = 0; p0 < 32; p0 += per) {
        uint32_t m = r.mask >> p0 & (per == 32 ? 0xffffffffu : (1u << per) - 1u);
        if (!m) continue;
        uint32_t words[32 * 8]; unsigned nw = 0;
        for (unsigned l = 0; l < per; ++l) {
            if (!(m >> l & 1u)) continue;
            uintptr_t off = r.addr[p0 + l] - arena;
            for (uintptr_t wd = off / 4; wd <= (off + r.size - 1) / 4 && nw < 32 * 8; ++wd) words[nw++] = (uint32_t)wd;
        }
        nw = distinct(words, nw);
        unsigned bank[32] = {0}, mx = 0;
        for (unsigned i = 0; i < nw; ++i) mx = std::max(mx, ++bank[words[i] & 31]);
        *wf += mx; *ideal += 1;
    }
}

// The block ended: turn its assembled requests into per-pc counters of the launch.
void prof_end_block(Worker* w, Launch* L) {
    if (!w->prof_on) return;
    RtGuard guard;
    unsigned n = L->nthreads;
    for (unsigned i = 0; i < n; ++i) prof_flush(w->fibers[i]);
    std::vector<PStat> out;
    for (auto& kv : *w->prof) {
        PSlot& s = kv.second;
        if (!s.used) continue;
        s.used = false;
        PStat st; st.pc = kv.first >> 12; st.space = s.space; st.op = s.op; st.buf = s.buf; st.size = 0;
        for (unsigned w0 = 0; w0 < n; w0 += 32) {
            unsigned lanes_in_warp = std::min(32u, n - w0);
            if (s.space == SP_BRANCH) {   // the k-th executions of the lanes form the warp's k-th execution
                uint32_t mx = 0;
                for (unsigned l = 0; l < lanes_in_warp; ++l) { mx = std::max(mx, s.cnt[w0 + l]); st.lanes += s.cnt[w0 + l]; }
                st.requests += mx;
                continue;
            }
            size_t kmax = 0;
            for (unsigned l = 0; l < lanes_in_warp; ++l) kmax = std::max(kmax, s.addr[w0 + l].size());
            for (size_t k = 0; k < kmax; ++k) {
                PReq r; r.mask = 0; r.size = s.size;
                for (unsigned l = 0; l < lanes_in_warp; ++l)
                    if (s.addr[w0 + l].size() > k) { r.mask |= 1u << l; r.addr[l] = s.base + s.addr[w0 + l][k]; }
                st.requests++;
                unsigned lanes = (unsigned)__builtin_popcount(r.mask);
                st.lanes += lanes;
                st.bytes += (uint64_t)lanes * r.size;
                st.size = std::max(st.size, r.size);
                if (s.space == SP_GLOBAL) {
                    uintptr_t sec[64]; unsigned ns = 0;
                    for (unsigned l = 0; l < 32; ++l)
                        if (r.mask >> l & 1u)
                            for (uintptr_t x = r.addr[l] >> 5; x <= (r.addr[l] + r.size - 1) >> 5 && ns < 64; ++x) sec[ns++] = x;
                    st.sectors += distinct(sec, ns);
                } else {
                    shared_wavefronts(r, (uintptr_t)w->arena, &st.wavefronts, &st.ideal);
                }
            }
            for (unsigned l = 0; l < lanes_in_warp; ++l) s.addr[w0 + l].clear();   // keeps the capacity
        }
        out.push_back(st);
    }
    LaunchProf* P = L->prof;
    std::lock_guard<std::mutex> lk(P->mu);
    P->blocks_profiled++;
    P->barriers += w->prof_barriers;
    P->static_smem = std::max(P->static_smem, w->static_bytes);
    if (P->sites.empty())
        for (const Site& s : w->sites) { Site c = s; c.base -= (uintptr_t)w->arena; P->sites.push_back(c); }
    for (const PStat& st : out) {
        PStat& t = P->stats[prof_key(st.pc, st.buf, st.space, st.op)];
        if (!t.requests && !t.lanes) { t = st; continue; }
        t.requests += st.requests; t.lanes += st.lanes; t.bytes += st.bytes; t.sectors += st.sectors;
        t.wavefronts += st.wavefronts; t.ideal += st.ideal; t.size = std::max(t.size, st.size);
    }
    w->prof_on = false;
}

void prof_begin_block(Worker* w, Launch* L, unsigned long long bl) {
    w->prof_barriers = 0;
    if (!w->prof) w->prof = new std::unordered_map<uintptr_t, PSlot>();
    // a new launch (or a block that never reached its end): fresh slots; otherwise they are reused
    if (w->prof_launch != L->prof || w->prof_on) {
        w->prof_launch = L->prof;
        w->prof->clear();
        for (unsigned i = 0; i < Worker::PCACHE; ++i) { w->pcache_key[i] = ~(uintptr_t)0; w->pcache[i] = nullptr; }
    }
    w->prof_on = L->prof && bl % L->prof->stride == 0;
    if (w->prof_on) for (unsigned i = 0; i < L->nthreads && i < w->fibers.size(); ++i) w->fibers[i]->pn = 0;
}
}  // namespace


// Profile mode (counters per launch and pc; see "Profile mode" above): on for the calls that follow.
API void ccsim_api_set_profile(int on) { g_profile = on != 0; }

// The counters of the launches of the last call, as JSON (pcs relative to the module's load address);
// with_trace: also the recorded accesses (for pictures; fetched only when asked for).
API const char* ccsim_api_profile_json(int with_trace) {
    static std::string o;
    std::lock_guard<std::mutex> lk(g_prof_mu);
    o = "[";
    char b[512];
    for (size_t li = 0; li < g_prof_launches.size(); ++li) {
        LaunchProf& P = *g_prof_launches[li];
        if (li) o += ",";
        o += "{\"kernel\":"; json_str(o, P.name.c_str());
        o += ",\"file\":"; json_str(o, P.file.c_str());
        snprintf(b, sizeof b, ",\"line\":%d,\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"dynamic_smem\":%zu,"
                 "\"static_smem\":%zu,\"blocks\":%llu,\"blocks_profiled\":%llu,\"stride\":%llu,\"barriers\":%llu,"
                 "\"trace_full\":%s,\"stats\":[", P.line, P.g.x, P.g.y, P.g.z, P.b.x, P.b.y, P.b.z, P.smem,
                 P.static_smem, P.nblocks, P.blocks_profiled, P.stride, P.barriers, P.trace_full ? "true" : "false");
        o += b;
        bool first = true;
        for (auto& kv : P.stats) {
            const PStat& t = kv.second;
            snprintf(b, sizeof b, "%s[%lu,%d,%d,%d,%u,%llu,%llu,%llu,%llu,%llu,%llu]", first ? "" : ",",
                     (unsigned long)t.pc, t.space, t.op, t.buf, t.size, (unsigned long long)t.requests,
                     (unsigned long long)t.lanes, (unsigned long long)t.bytes, (unsigned long long)t.sectors,
                     (unsigned long long)t.wavefronts, (unsigned long long)t.ideal);
            o += b; first = false;
        }
        o += "],\"sites\":[";
        for (size_t i = 0; i < P.sites.size(); ++i) {
            const Site& s = P.sites[i];
            snprintf(b, sizeof b, "%s[%lu,%zu,%zu,%zu,%zu,", i ? "," : "", (unsigned long)s.base, s.bytes, s.elem, s.d0, s.d1);
            o += b; json_str(o, s.name ? s.name : "?"); o += "]";
        }
        o += "],\"trace\":[";
        for (size_t i = 0; with_trace && i < P.trace.size(); ++i) {
            const TraceEv& e = P.trace[i];
            snprintf(b, sizeof b, "%s[%d,%d,%d,%d,%u,%u,%llu,%lu]", i ? "," : "", e.space, e.op, e.size, e.buf, e.block,
                     e.tid, (unsigned long long)e.off, (unsigned long)e.pc);
            o += b;
        }
        o += "]}";
    }
    o += "],\"buffers\":[";
    // (closed below: the launches list and the buffer names of this call)
    o = "{\"launches\":" + o;
    int nb = g_nbufs.load();
    for (int i = 0; i < nb; ++i) {
        if (i) o += ",";
        snprintf(b, sizeof b, "[%zu,%zu,", g_bufs[i].bytes, g_bufs[i].elem);
        o += b; json_str(o, g_bufs[i].name); o += "]";
    }
    o += "]}";
    return o.c_str();
}
