// rt/sched_blocks.h - part of ccsim_rt.cpp. Scheduling (2 of 3): running one block.
//
// run_block runs the block's fibers pass after pass in the chosen thread order: it releases a barrier when every
// live thread has reached it, completes a warp collective when its lanes have arrived (complete_warp_ops), and
// diagnoses divergent barriers, mismatched warp operations, deadlocks and parked unwritten reads.
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

// ===================================================================================================
// Scheduler
// ===================================================================================================
namespace {

const char* op_name(int op) {
    static const char* n[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                              "__ballot_sync", "__any_sync", "__all_sync", "__activemask", "__reduce_add_sync",
                              "__reduce_min_sync", "__reduce_max_sync", "__match_any_sync"};
    return op >= 0 && op <= 12 ? n[op] : "warp operation";
}

std::string at_line(const char* file, int line) {
    (void)file;
    return "line " + std::to_string(line);
}

// Complete every warp collective whose lanes have all arrived. Returns 1 if any completed, -1 on error.
int complete_warp_ops(Worker* w, unsigned n) {
    Launch* L = w->L;
    int progressed = 0;
    unsigned nwarps = (n + 31) / 32;
    for (unsigned wi = 0; wi < nwarps; ++wi) {
        unsigned lanes = std::min(32u, n - wi * 32);
        for (unsigned li = 0; li < lanes; ++li) {
            Fiber* f = w->fibers[wi * 32 + li];
            if (f->state != F_WARP || f->wop == W_ACTIVE) continue;
            unsigned m = f->wmask;
            unsigned existing = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
            if (!((m >> li) & 1u)) {
                set_error("barrier", "BarrierError " + where(L, w->bidx) + ": " + thr(f) + " calls " + op_name(f->wop) +
                          " at " + at_line(f->wfile, f->wline) + " with mask 0x" + [&] { char b[16]; snprintf(b, 16, "%08x", m); return std::string(b); }() +
                          " that does not include its own lane " + std::to_string(li) + ". The mask must name every lane that "
                          "executes the call, including the caller.", L, &w->bidx, &f->v.ti, f->wfile, f->wline, 0);
                return -1;
            }
            unsigned group = m & existing;
            bool ready = true;
            for (unsigned lj = 0; lj < lanes; ++lj) {
                if (!((group >> lj) & 1u)) continue;
                Fiber* g = w->fibers[wi * 32 + lj];
                if (g->state == F_EXITED) {
                    char b[16]; snprintf(b, 16, "%08x", m);
                    set_error("barrier", "BarrierError " + where(L, w->bidx) + ": " + thr(f) + " (lane " + std::to_string(li) +
                              ") calls " + op_name(f->wop) + " at " + at_line(f->wfile, f->wline) + " with mask 0x" + b +
                              ", but lane " + std::to_string(lj) + " (" + thr(g) + ") named in the mask has already exited. "
                              "Every lane in the mask must reach the same call: use a mask of the lanes that really "
                              "take this branch (e.g. __ballot_sync/__activemask), or move the call out of the if. "
                              "(Undefined per the CUDA Programming Guide, even where a GPU seems to work.)",
                              L, &w->bidx, &f->v.ti, f->wfile, f->wline, 0);
                    return -1;
                }
                if (g->state != F_WARP || g->wop == W_ACTIVE) { ready = false; break; }
            }
            if (!ready) continue;
            // all lanes of the group wait at a warp operation: they must agree on the operation and mask
            for (unsigned lj = 0; lj < lanes; ++lj) {
                if (!((group >> lj) & 1u)) continue;
                Fiber* g = w->fibers[wi * 32 + lj];
                if (g->wop != f->wop || g->wmask != f->wmask) {
                    set_error("barrier", "BarrierError " + where(L, w->bidx) + ": lanes of warp " + std::to_string(wi) +
                              " meet at different warp operations: " + thr(f) + " at " + op_name(f->wop) + " (" +
                              at_line(f->wfile, f->wline) + "), " + thr(g) + " at " + op_name(g->wop) + " (" +
                              at_line(g->wfile, g->wline) + "). The lanes named in a mask must all execute the same call.",
                              L, &w->bidx, &f->v.ti, f->wfile, f->wline, 0);
                    return -1;
                }
            }
            uint32_t seq = ++w->wseq[wi];
            if (g_hop_used) hop_warp_collective(w, wi, group);   // [hopper hook] the lanes are ordered after it
            unsigned ballot = 0; unsigned long long sum = 0;
            for (unsigned lj = 0; lj < lanes; ++lj)
                if ((group >> lj) & 1u) {
                    Fiber* g = w->fibers[wi * 32 + lj];
                    if (g->wval) ballot |= 1u << lj;
                    sum += g->wval;
                }
            for (unsigned lj = 0; lj < lanes; ++lj) {
                if (!((group >> lj) & 1u)) continue;
                Fiber* g = w->fibers[wi * 32 + lj];
                int width = g->wwidth <= 0 || g->wwidth > 32 ? 32 : g->wwidth;
                int lane = (int)lj, seg = lane & ~(width - 1);
                int src = lane;
                switch (g->wop) {
                    case W_SHFL: src = seg + (g->warg & (width - 1)); break;
                    case W_UP: src = lane - g->warg; if (src < seg) src = lane; break;
                    case W_DOWN: src = lane + g->warg; if (src >= seg + width) src = lane; break;
                    case W_XOR: src = lane ^ g->warg; if (src >= seg + width) src = lane; break;
                    default: break;
                }
                unsigned long long res = g->wval;
                switch (g->wop) {
                    case W_SHFL: case W_UP: case W_DOWN: case W_XOR:
                        if (src >= 0 && src < (int)lanes && ((group >> src) & 1u)) { res = w->fibers[wi * 32 + src]->wval; break; }
                        if (!g_checked) { res = ~0ull; break; }  // fast mode: poison (NaN / -1), as unwritten memory
                        {   // a source lane outside the mask (or past the block's last thread): undefined on a GPU
                            char b[16]; snprintf(b, 16, "%08x", g->wmask);
                            set_error("barrier", "BarrierError " + where(L, w->bidx) + ": " + thr(g) + " (lane " + std::to_string(lj) +
                                      ") calls " + op_name(g->wop) + " at " + at_line(g->wfile, g->wline) + " with mask 0x" + b +
                                      " and reads lane " + std::to_string(src) + (src < (int)lanes ? ", which is not in the mask"
                                      : ", which does not exist (the block has fewer threads)") + ": the value it gets is undefined "
                                      "(CUDA Programming Guide). Read only lanes that take part (guard the source lane, e.g. "
                                      "if (lane + offset < n)), or let every lane of the warp take part with a full mask.",
                                      L, &w->bidx, &g->v.ti, g->wfile, g->wline, 0);
                            return -1;
                        }
                    case W_BALLOT: res = ballot; break;
                    case W_ANY: res = ballot != 0; break;
                    case W_ALL: res = ballot == group; break;
                    case W_RADD: res = (unsigned)sum; break;
                    case W_MATCH: {
                        unsigned mm = 0;
                        for (unsigned lk = 0; lk < lanes; ++lk)
                            if (((group >> lk) & 1u) && w->fibers[wi * 32 + lk]->wval == g->wval) mm |= 1u << lk;
                        res = mm; break;
                    }
                    default: res = 0; break;
                }
                g->wres = res;
                g->lcs = seq; g->lcm = group;
                g->state = F_READY;
            }
            progressed = 1;
        }
    }
    if (progressed) return progressed;
    // __activemask(): only once nothing else can move (every live lane of the block is blocked or exited)
    // are the lanes that execute one call site together known: those waiting at the same file and line.
    for (unsigned wi = 0; wi < nwarps; ++wi) {
        unsigned lanes = std::min(32u, n - wi * 32);
        for (unsigned li = 0; li < lanes; ++li) {
            Fiber* f = w->fibers[wi * 32 + li];
            if (f->state != F_WARP || f->wop != W_ACTIVE) continue;
            unsigned m = 0;
            for (unsigned lj = 0; lj < lanes; ++lj) {
                Fiber* g = w->fibers[wi * 32 + lj];
                if (g->state == F_WARP && g->wop == W_ACTIVE && g->wline == f->wline &&
                    (g->wfile == f->wfile || strcmp(g->wfile, f->wfile) == 0)) m |= 1u << lj;
            }
            for (unsigned lj = 0; lj < lanes; ++lj)
                if ((m >> lj) & 1u) { Fiber* g = w->fibers[wi * 32 + lj]; g->wres = m; g->state = F_READY; }
            progressed = 1;
        }
    }
    return progressed;
}

// Every thread of the block is blocked or exited and some are parked before a read of unwritten shared memory
// (park_unwritten): no thread can write those bytes in this barrier interval any more, so the read is of
// memory nobody wrote. The lowest-numbered parked thread is named, whatever the thread order.
void report_unwritten(Worker* w) {
    Fiber* f = w->parked[0];
    for (Fiber* g : w->parked) if (g->tid < f->tid) f = g;
    Shadow& s = w->shadow[(f->park_a - (uintptr_t)w->arena) / 4];
    const Site* st = (s.arr >= 0 && s.arr < (int)w->sites.size()) ? &w->sites[s.arr] : nullptr;
    std::string en = st ? elem_name(*st, f->park_a) : "shared memory";
    std::string others = w->parked.size() > 1 ? " (" + std::to_string(w->parked.size() - 1) +
                         " other thread(s) of the block also read unwritten elements)" : "";
    set_error("uninitialized-read",
              "UninitializedReadError " + where(w->L, w->bidx) + ": " + thr(f) +
              (f->park_kind == 2 ? " atomically updates " : " reads ") + en + " at " + pctok(f->park_pc) +
              ", but no thread of this block writes it before the read, nor later in the same barrier interval" + others +
              " (shared memory starts undefined each block; the simulator fills it with NaN/-1). Make sure every slot "
              "that is read was written first, by enough threads (check the loop bounds and the condition guarding the "
              "write), with a __syncthreads() in between.", w->L, &w->bidx, &f->v.ti, nullptr, 0, f->park_pc);
}

// The block ends early (an error was reported, or another block's aborted the launch): its fibers' contexts are
// stale and made afresh next time; `stop_launch` also stops the launch's other blocks. Returns false, run_block's
// answer.
bool abandon_block(Worker* w, Launch* L, unsigned n, bool stop_launch) {
    for (unsigned i = 0; i < n; ++i) w->fibers[i]->fresh = true;
    if (stop_launch) L->abort.store(true);
    return false;
}

bool run_block(Worker* w, Launch* L, unsigned long long bl) {
    unsigned n = L->nthreads;
    while (w->fibers.size() < n) w->fibers.push_back(fiber_new(w, (int)w->fibers.size()));
    w->L = L;
    w->bidx = unlinear(bl, L->g);
    w->blin = bl;
    w->gpend.clear();
    blockIdx = w->bidx; blockDim = L->b; gridDim = L->g;
    block_reset_shared(w, L);
    if (L->prof) prof_begin_block(w, L, bl);
    for (unsigned i = 0; i < n; ++i) {
        Fiber* f = w->fibers[i];
        if (f->fresh || f->state != F_EXITED) fiber_init_ctx(f);
        f->v.ti = unlinear(i, L->b);
        f->v.bi = w->bidx; f->v.bd = L->b; f->v.gd = L->g;
        f->tid = (int)i; f->lane = (int)(i & 31); f->warp = (int)(i >> 5);
        f->state = F_READY; f->lcs = 0; f->lcm = 0;
    }
    const int* order = L->order.data();
    for (;;) {
        // one pass: the first runnable fiber runs; each blocking fiber hands over to the next (yield_next)
        for (unsigned k = 0; k < n; ++k) {
            Fiber* f = w->fibers[order[k]];
            if (f->state != F_READY) continue;
            w->pos = k;
            switch_to_fiber(w, f);
            if (w->ngheld) global_release(w);
            break;
        }
        if (L->abort.load(std::memory_order_relaxed)) return abandon_block(w, L, n, false);
        int r = complete_warp_ops(w, n);
        if (r < 0) return abandon_block(w, L, n, true);
        if (r > 0) continue;
        if (g_hop_used && hop_any_ready(w, n)) continue;   // [hopper hook] woken by an mbarrier or named barrier
        if (!w->parked.empty()) {   // nothing can move, and no thread wrote what the parked threads wait to read
            report_unwritten(w);
            return abandon_block(w, L, n, true);
        }
        if (g_hop_used && hop_deadlock(w, n)) return abandon_block(w, L, n, true);   // [hopper hook] a wait nothing can end
        unsigned exited = 0, atbar = 0, atwarp = 0;
        Fiber *fe = nullptr, *fb = nullptr, *fw = nullptr;
        for (unsigned i = 0; i < n; ++i) {
            Fiber* f = w->fibers[i];
            if (f->state == F_EXITED) { exited++; if (!fe) fe = f; }
            else if (f->state == F_BARRIER) { atbar++; if (!fb) fb = f; }
            else if (f->state == F_WARP) { atwarp++; if (!fw) fw = f; }
        }
        if (exited == n) {
            if (!w->pend.empty() && resolve_all_pending(w)) { L->abort.store(true); return false; }
            if (!w->gpend.empty() && resolve_global_pending(w)) { L->abort.store(true); return false; }
            if (L->prof) prof_end_block(w, L);
            return true;
        }
        std::string msg;
        Fiber* who = nullptr;
        if (atwarp) {
            who = fw;
            // name a lane of its mask that is not there
            std::string other;
            unsigned lanes = std::min(32u, n - (unsigned)fw->warp * 32);
            for (unsigned lj = 0; lj < lanes; ++lj) {
                if (!((fw->wmask >> lj) & 1u)) continue;
                Fiber* g = w->fibers[fw->warp * 32 + lj];
                if (g->state == F_BARRIER) { other = thr(g) + " (lane " + std::to_string(lj) + ") waits at __syncthreads() at " + at_line(g->wfile, g->wline); break; }
            }
            msg = "BarrierError " + where(L, w->bidx) + ": deadlock. " + thr(fw) + " waits in " + op_name(fw->wop) + " at " +
                  at_line(fw->wfile, fw->wline) + " for lanes of its mask" + (other.empty() ? "" : ", but " + other) +
                  ". Warp operations and __syncthreads() must be reached by every thread they name.";
        } else if (exited) {
            who = fe;
            msg = "BarrierError " + where(L, w->bidx) + ": " + thr(fb) + " waits at __syncthreads() at " + at_line(fb->wfile, fb->wline) +
                  ", but " + std::to_string(exited) + " thread(s) of the block, e.g. " + thr(fe) + ", already exited (returned) "
                  "without reaching it. Do not return before a __syncthreads(): keep every thread running to the barrier "
                  "and guard only the memory accesses (e.g. if (i < n) ...). (Undefined per the CUDA Programming Guide; "
                  "real GPUs often seem to work, then hang or give wrong results.)";
            set_error("barrier", msg, L, &w->bidx, &fe->v.ti, fb->wfile, fb->wline, 0);
            return abandon_block(w, L, n, true);
        } else {
            // every live thread waits at a barrier: same call site, then release
            bool same = true; Fiber* odd = nullptr;
            for (unsigned i = 0; i < n; ++i) {
                Fiber* f = w->fibers[i];
                if (f->wline != fb->wline || f->wop != fb->wop || (f->wfile != fb->wfile && strcmp(f->wfile, fb->wfile))) { same = false; odd = f; break; }
            }
            if (same) {
                int cnt = 0;
                for (unsigned i = 0; i < n; ++i) cnt += w->fibers[i]->pred != 0;
                for (unsigned i = 0; i < n; ++i) {
                    Fiber* f = w->fibers[i];
                    f->wres = f->wop == 1 ? (unsigned long long)cnt : f->wop == 2 ? (cnt == (int)n) : f->wop == 3 ? (cnt > 0) : 0;
                    f->state = F_READY;
                }
                if (!w->pend.empty() && resolve_all_pending(w)) return abandon_block(w, L, n, true);
                w->epoch++;
                w->prof_barriers++;
                if (g_hop_used) hop_syncthreads(w, n);   // [hopper hook]
                continue;
            }
            who = fb;
            msg = "BarrierError " + where(L, w->bidx) + ": threads wait at different __syncthreads() calls: " + thr(fb) + " at " +
                  at_line(fb->wfile, fb->wline) + ", " + thr(odd) + " at " + at_line(odd->wfile, odd->wline) +
                  ". A __syncthreads() inside if/else branches that threads take differently is a divergent barrier: "
                  "move one __syncthreads() out of the branches so every thread reaches the same call. (Undefined per the "
                  "CUDA Programming Guide.)";
        }
        set_error("barrier", msg, L, &w->bidx, &who->v.ti, who->wfile, who->wline, 0);
        return abandon_block(w, L, n, true);
    }
}
}  // namespace
