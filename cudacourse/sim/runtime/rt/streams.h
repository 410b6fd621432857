// rt/streams.h - part of ccsim_rt.cpp. Streams, events and graphs, and the copies and fills issued on them.
//
// Work on a created stream is queued and run at a synchronisation point in an adversarial order (the most
// recently issued ready operation first); the default stream runs at once after the blocking streams' work;
// captures record graphs and refuse what CUDA refuses while capturing. cudaMemcpy/cudaMemset and their async
// forms, kernel launches on streams, synchronisation, events, graphs, and the checks at the end of a call.
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

namespace {
// ---- streams, events and graphs ----------------------------------------------------------------------
// The model (ccsim_host_api.h says it for the learner): an operation on a created stream is queued; it runs
// at a synchronisation point, in an adversarial order that respects only stream order, event waits and the
// legacy default stream's implicit synchronisation: among the ready operations the most recently issued
// runs first. The default stream (0, cudaStreamLegacy, cudaStreamPerThread) runs its work at once, after
// the blocking streams' queued work (not after cudaStreamNonBlocking streams': CUDA does not order those).
// Copies follow the CUDA Runtime API's "API synchronization behavior" page: an async copy from pageable
// host memory is staged (the source is read when the call returns), an async copy into pageable memory and
// host-to-host copies are synchronous, every other async copy is queued. Pinned memory is what
// cudaMallocHost/cudaHostAlloc/cudaHostRegister return; device memory is cudaMalloc memory and the tensors
// passed in. Only the launcher's host thread calls the host API, so this state needs no lock.
}  // namespace (reopened: the stream model is file-local)
struct GraphRec;
struct Op {
    uint64_t seq = 0;
    int kind = 0;                              // OP_* below
    CUstream_st* st = nullptr;
    std::vector<std::shared_ptr<Op>> deps;     // events waited on (stream order is the queue's)
    bool done = false;
    int (*run)(void*) = nullptr; void (*drop)(void*) = nullptr; void* clo = nullptr; const char* name = "";
    void* dst = nullptr; const void* src = nullptr; size_t n = 0; int value = 0; std::vector<char> staged;
    ccsim_event* ev = nullptr;
    std::shared_ptr<GraphRec> graph;
    cudaHostFn_t hfn = nullptr; void* ud = nullptr;
    void* ra = nullptr;                        // the call that issued it (copies: for the host-work check)
    ~Op() { if (drop && clo) drop(clo); }
};
enum { OP_LAUNCH, OP_COPY, OP_SET, OP_RECORD, OP_WAIT, OP_GRAPH, OP_HOST };
struct GraphRec {                              // a captured graph: nodes in capture order, dependencies by index
    std::vector<std::shared_ptr<Op>> nodes;
    std::vector<std::vector<int>> deps;
    bool invalid = false;
    std::string why;                           // the call that invalidated the capture
    CUstream_st* origin = nullptr;
};
struct CUstream_st {
    int id; unsigned flags; int priority; bool destroyed = false;
    std::deque<std::shared_ptr<Op>> q;
    std::shared_ptr<GraphRec> cap;             // capture this stream takes part in
    std::vector<int> cap_deps;                 // the nodes its next captured operation depends on
    int cap_mode = 0;
};
struct ccsim_event {
    unsigned flags = 0;
    std::shared_ptr<Op> rec;                   // the most recent record (null: never recorded)
    double t = 0;                              // host milliseconds when the simulator ran that record
    std::shared_ptr<GraphRec> cap; std::vector<int> cap_deps;   // a record inside a capture
};
struct CUgraph_st { std::shared_ptr<GraphRec> g; };
struct CUgraphExec_st { std::shared_ptr<GraphRec> g; };
namespace {
std::vector<CUstream_st*> g_streams;           // created, not yet released
uint64_t g_op_seq = 0;
int g_stream_ids = 0;

double now_ms() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
bool is_default(cudaStream_t s) { return s == nullptr || s == (cudaStream_t)0x1 || s == (cudaStream_t)0x2; }
bool known_stream(cudaStream_t s) {
    return is_default(s) || std::find(g_streams.begin(), g_streams.end(), s) != g_streams.end();
}
std::string sname(cudaStream_t s) {
    return is_default(s) ? std::string("the default stream") : "stream " + std::to_string(s->id);
}


// A stream capturing now (not in relaxed mode: there the "potentially unsafe" calls are allowed).
CUstream_st* capturing_stream() {
    for (CUstream_st* s : g_streams)
        if (s->cap && !s->cap->invalid && s->cap_mode != cudaStreamCaptureModeRelaxed) return s;
    return nullptr;
}
// A capturing blocking stream: work on the legacy default stream would depend on it (any capture mode).
CUstream_st* capturing_blocking_stream() {
    for (CUstream_st* s : g_streams)
        if (s->cap && !s->cap->invalid && !(s->flags & cudaStreamNonBlocking)) return s;
    return nullptr;
}

// A call CUDA forbids while a capture is active: the capture is invalidated, and the simulator stops the
// launcher with a message naming the call and its line (on a GPU the call returns an error and the capture
// ends with cudaErrorStreamCaptureInvalidated).
cudaError_t capture_violation(CUstream_st* s, const char* call, const char* why, void* ra, cudaError_t code) {
    s->cap->invalid = true;
    std::string m = std::string("StreamCaptureError: ") + call + " at " + pctok(rel(ra)) + " was called while " +
                    sname(s) + " was capturing a CUDA graph (cudaStreamBeginCapture): " + why +
                    ". A graph holds only asynchronous stream work; on a GPU this call fails with " +
                    cudaGetErrorName(code) + " and invalidates the capture. Move it before cudaStreamBeginCapture "
                    "or after cudaStreamEndCapture, or use the ...Async form on the capturing stream.";
    s->cap->why = m;
    set_error("stream", m, nullptr, nullptr, nullptr, nullptr, 0, rel(ra));
    g_last_cuda_error = code;
    return code;
}

void exec_op(Op* op);

// Run the queued operations that `targets` need (themselves, their stream predecessors and the events
// they wait on), the most recently issued ready one first.
void run_needed(const std::vector<Op*>& targets) {
    static int depth = 0;
    if (depth) return;                     // a host function calling the API: CUDA forbids it; do not recurse
    depth++;
    std::vector<Op*> need, stack;
    for (Op* t : targets) if (t && !t->done) stack.push_back(t);
    while (!stack.empty()) {
        Op* op = stack.back(); stack.pop_back();
        if (op->done || std::find(need.begin(), need.end(), op) != need.end()) continue;
        need.push_back(op);
        for (auto& d : op->deps) if (!d->done) stack.push_back(d.get());
        if (op->st) for (auto& p : op->st->q) { if (p.get() == op) break; if (!p->done) stack.push_back(p.get()); }
    }
    while (!need.empty()) {
        Op* best = nullptr;
        for (CUstream_st* s : g_streams) {
            if (s->q.empty()) continue;
            Op* h = s->q.front().get();
            if (std::find(need.begin(), need.end(), h) == need.end()) continue;
            bool ready = true;
            for (auto& d : h->deps) ready = ready && d->done;
            if (ready && (!best || h->seq > best->seq)) best = h;
        }
        if (!best) break;                  // (cannot happen: waits name earlier records)
        std::shared_ptr<Op> keep = best->st->q.front();
        best->st->q.pop_front();
        exec_op(best);
        best->done = true;
        need.erase(std::find(need.begin(), need.end(), best));
    }
    // release destroyed streams whose work is done
    for (size_t i = 0; i < g_streams.size();) {
        CUstream_st* s = g_streams[i];
        if (s->destroyed && s->q.empty()) { g_streams.erase(g_streams.begin() + i); delete s; } else ++i;
    }
    depth--;
}
std::vector<Op*> all_queued(bool blocking_only) {
    std::vector<Op*> v;
    for (CUstream_st* s : g_streams)
        if (!s->q.empty() && !(blocking_only && (s->flags & cudaStreamNonBlocking))) v.push_back(s->q.back().get());
    return v;
}
void run_graph(GraphRec* g) {
    size_t n = g->nodes.size();
    std::vector<char> done(n, 0);
    for (size_t left = n; left > 0; --left) {   // adversarial topological order: the latest ready node first
        long pick = -1;
        for (long i = (long)n - 1; i >= 0 && pick < 0; --i) {
            if (done[i]) continue;
            bool ready = true;
            for (int d : g->deps[i]) ready = ready && done[d];
            if (ready) pick = i;
        }
        if (pick < 0) return;
        exec_op(g->nodes[pick].get());
        done[pick] = 1;
    }
}

void exec_op(Op* op) {
    DevOpen dev_open(op->kind == OP_COPY || op->kind == OP_SET);  // (a host function runs as host code)
    switch (op->kind) {
        case OP_LAUNCH: if (!g_has_err.load()) op->run(op->clo); break;
        case OP_COPY:
            note_copy(op->dst, op->src, op->n, op->ra, "cudaMemcpyAsync");
            if (!op->staged.empty()) std::memcpy(op->dst, op->staged.data(), op->n);
            else if (op->n) std::memmove(op->dst, op->src, op->n);
            mark_initialised(op->dst, op->n);
            break;
        case OP_SET: std::memset(op->dst, op->value, op->n); mark_initialised(op->dst, op->n); break;
        case OP_RECORD: if (op->ev && op->ev->rec.get() == op) op->ev->t = now_ms(); break;
        case OP_GRAPH: run_graph(op->graph.get()); break;
        case OP_HOST: op->hfn(op->ud); break;
        default: break;
    }
}

// Issue an operation on stream s: into the capture, the stream's queue, or (default stream) run it now
// after the blocking streams' queued work. ra: the caller, for messages.
cudaError_t issue(cudaStream_t s, std::shared_ptr<Op> op, void* ra, const char* call) {
    op->seq = ++g_op_seq;
    if (is_default(s)) {
        if (CUstream_st* c = capturing_blocking_stream())
            return capture_violation(c, call, "work on the legacy default stream waits for every blocking stream, "
                                         "the capturing one included", ra, cudaErrorStreamCaptureImplicit);
        std::vector<Op*> before = all_queued(true);
        for (auto& d : op->deps) before.push_back(d.get());   // an event wait on the default stream
        run_needed(before);
        exec_op(op.get());
        op->done = true;
        return g_has_err.load() ? cudaErrorLaunchFailure : cudaSuccess;
    }
    if (!known_stream(s)) {
        set_error("stream", std::string("InvalidStream: ") + call + " at " + pctok(rel(ra)) + " was given a stream "
                  "that cudaStreamCreate did not return or that was destroyed (an uninitialised cudaStream_t?).",
                  nullptr, nullptr, nullptr, nullptr, 0, rel(ra));
        return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    }
    if (s->cap) {
        if (s->cap->invalid) return cudaErrorStreamCaptureInvalidated;
        GraphRec* g = s->cap.get();
        op->st = nullptr;
        g->nodes.push_back(op);
        g->deps.push_back(s->cap_deps);
        s->cap_deps = {(int)g->nodes.size() - 1};
        return cudaSuccess;
    }
    op->st = s;
    s->q.push_back(std::move(op));
    return cudaSuccess;
}

cudaError_t copy_op(void* d, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s, bool async, void* ra,
                    const char* call) {
    if (g_has_err.load()) return cudaErrorLaunchFailure;
    MemKind dk = mem_kind(d), sk = mem_kind(src);
    bool h2h = dk != MEM_DEVICE && sk != MEM_DEVICE;
    CUstream_st* cap = is_default(s) ? nullptr : (s->cap ? s : nullptr);
    if (!async || h2h || dk == MEM_PAGEABLE) {
        // synchronous with the host: the stream's work first (the default stream's: every blocking stream's)
        if (CUstream_st* c = capturing_stream())
            return capture_violation(c, call, !async ? "a synchronous copy waits for the device"
                                                     : "a copy into pageable host memory (or host to host) is synchronous",
                                     ra, cudaErrorStreamCaptureUnsupported);
        if (is_default(s)) run_needed(all_queued(true));
        else if (known_stream(s) && !s->q.empty()) run_needed({s->q.back().get()});
        DevOpen dev_open;  // the copy touches device memory
        note_copy(d, src, n, ra, call);
        if (n) std::memmove(d, src, n);
        mark_initialised(d, n);
        return g_has_err.load() ? cudaErrorLaunchFailure : cudaSuccess;
    }
    auto op = std::make_shared<Op>();
    op->kind = OP_COPY; op->dst = d; op->src = src; op->n = n; op->ra = ra;
    if (sk == MEM_PAGEABLE) {          // staged: the pageable source is consumed before the call returns
        if (cap) return capture_violation(cap, call, "a copy from pageable host memory is staged through a driver "
                                          "buffer at the call, which a graph cannot replay (use pinned memory)",
                                          ra, cudaErrorStreamCaptureUnsupported);
        op->staged.assign((const char*)src, (const char*)src + n);
    }
    return issue(s, op, ra, call);
}
}  // namespace

API cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
    return copy_op(d, s, n, k, nullptr, false, __builtin_return_address(0), "cudaMemcpy");
}
API cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    return copy_op(d, s, n, k, st, true, __builtin_return_address(0), "cudaMemcpyAsync");
}
API cudaError_t cudaMemset(void* d, int v, size_t n) {
    if (CUstream_st* c = capturing_blocking_stream())
        return capture_violation(c, "cudaMemset", "it runs on the legacy default stream, which waits for the capturing "
                                 "stream", __builtin_return_address(0), cudaErrorStreamCaptureImplicit);
    auto op = std::make_shared<Op>(); op->kind = OP_SET; op->dst = d; op->value = v; op->n = n;
    return issue(nullptr, op, __builtin_return_address(0), "cudaMemset");
}
API cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st) {
    auto op = std::make_shared<Op>(); op->kind = OP_SET; op->dst = d; op->value = v; op->n = n;
    return issue(st, op, __builtin_return_address(0), "cudaMemsetAsync");
}
// A kernel launch: queued on a created stream (closure given), or on the default stream run by the caller
// right after this returns 0 (closure null: only the waits and checks happen here).
API int ccsim_rt_stream_launch(cudaStream_t s, const char* name, int (*run)(void*), void (*drop)(void*), void* clo) {
    if (g_has_err.load()) { if (drop) drop(clo); return 1; }
    void* ra = __builtin_return_address(0);
    if (!run) {
        if (CUstream_st* c = capturing_blocking_stream()) {
            capture_violation(c, (std::string("the launch of ") + name + " on the default stream").c_str(),
                              "work on the legacy default stream waits for every blocking stream, the capturing one "
                              "included", ra, cudaErrorStreamCaptureImplicit);
            return 1;
        }
        run_needed(all_queued(true));
        return g_has_err.load() ? 1 : 0;
    }
    auto op = std::make_shared<Op>();
    op->kind = OP_LAUNCH; op->run = run; op->drop = drop; op->clo = clo; op->name = name;
    return issue(s, op, ra, "a kernel launch") == cudaSuccess ? 0 : 1;
}
// A library call that runs its kernels at once (the cuBLAS subset) on stream s: s's queued work first.
API void ccsim_rt_drain(cudaStream_t s) {
    if (is_default(s)) run_needed(all_queued(true));
    else if (known_stream(s) && !s->q.empty()) run_needed({s->q.back().get()});
}
API cudaError_t cudaDeviceSynchronize(void) {
    if (CUstream_st* c = capturing_stream())
        return capture_violation(c, "cudaDeviceSynchronize", "it waits for the device", __builtin_return_address(0),
                                 cudaErrorStreamCaptureUnsupported);
    run_needed(all_queued(false));
    return g_has_err.load() ? cudaErrorLaunchFailure : cudaSuccess;
}
// cudaFree waits for the device's queued work, as CUDA's does (its pages are unmapped).
API void ccsim_rt_sync_all(void) { run_needed(all_queued(false)); }
API cudaError_t cudaDeviceReset(void) { return cudaDeviceSynchronize(); }
API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    void* ra = __builtin_return_address(0);
    if (CUstream_st* c = capturing_stream())
        if (is_default(s) || s == c || s->cap == c->cap)
            return capture_violation(c, "cudaStreamSynchronize", "it waits for the stream's work", ra,
                                     cudaErrorStreamCaptureUnsupported);
    if (is_default(s)) run_needed(all_queued(true));
    else if (!known_stream(s)) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    else if (!s->q.empty()) run_needed({s->q.back().get()});
    return g_has_err.load() ? cudaErrorLaunchFailure : cudaSuccess;
}
API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority) {
    if (!s) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    CUstream_st* st = new CUstream_st();
    g_streams_used.store(true);
    st->id = ++g_stream_ids; st->flags = flags; st->priority = priority;
    g_streams.push_back(st);
    *s = st;
    return cudaSuccess;
}
API cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }
API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned f) { return cudaStreamCreateWithPriority(s, f, 0); }
API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;   // the H100's range (CUDA reports 0 and -5); the simulator ignores priorities
    return cudaSuccess;
}
API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned* f) {
    if (!known_stream(s) || !f) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    *f = is_default(s) ? 0 : s->flags;
    return cudaSuccess;
}
// CUDA: destroying a stream with queued work returns at once; the work still completes.
API cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (is_default(s) || !known_stream(s)) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    s->destroyed = true;
    if (s->q.empty()) { g_streams.erase(std::find(g_streams.begin(), g_streams.end(), s)); delete s; }
    return cudaSuccess;
}
// Queries do not block: work not done yet makes the answer cudaErrorNotReady, and the simulator then runs
// it (time passes), so a polling loop ends on its next query.
API cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (is_default(s)) { auto v = all_queued(true); if (v.empty()) return cudaSuccess; run_needed(v); return cudaErrorNotReady; }
    if (!known_stream(s)) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    if (s->cap) return capture_violation(s, "cudaStreamQuery", "a capturing stream cannot be queried",
                                         __builtin_return_address(0), cudaErrorStreamCaptureUnsupported);
    if (s->q.empty()) return cudaSuccess;
    run_needed({s->q.back().get()});
    return cudaErrorNotReady;
}
API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* ud) {
    auto op = std::make_shared<Op>(); op->kind = OP_HOST; op->hfn = fn; op->ud = ud;
    return issue(s, op, __builtin_return_address(0), "cudaLaunchHostFunc");
}

API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned f) {
    if (!e) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    *e = new ccsim_event(); (*e)->flags = f;
    return cudaSuccess;
}
API cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    if (!is_default(s) && known_stream(s) && s->cap) {   // inside a capture: the event names the capture point
        e->rec.reset(); e->cap = s->cap; e->cap_deps = s->cap_deps;
        return cudaSuccess;
    }
    auto op = std::make_shared<Op>(); op->kind = OP_RECORD; op->ev = e;
    e->rec = op; e->cap.reset();
    return issue(s, op, __builtin_return_address(0), "cudaEventRecord");
}
API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    void* ra = __builtin_return_address(0);
    if (!e) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    if (e->cap) {                                  // fork/join inside a capture: s joins it
        if (is_default(s)) return capture_violation(e->cap->origin,
                                                    "cudaStreamWaitEvent on the default stream",
                                                    "the legacy default stream cannot join a capture", ra,
                                                    cudaErrorStreamCaptureImplicit);
        if (!s->cap) { s->cap = e->cap; s->cap_deps = e->cap_deps; s->cap_mode = e->cap->origin ? e->cap->origin->cap_mode : 0; }
        else for (int d : e->cap_deps) s->cap_deps.push_back(d);
        return cudaSuccess;
    }
    if (!e->rec) return cudaSuccess;               // never recorded: nothing to wait for (CUDA's rule)
    auto op = std::make_shared<Op>(); op->kind = OP_WAIT; op->deps.push_back(e->rec);
    if (!is_default(s) && known_stream(s) && s->cap) return cudaSuccess;  // an outside event: already ordered
    return issue(s, op, ra, "cudaStreamWaitEvent");
}
API cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    if (e->cap) return capture_violation(e->cap->origin,
                                         "cudaEventSynchronize", "the event was recorded inside the capture",
                                         __builtin_return_address(0), cudaErrorStreamCaptureUnsupported);
    if (e->rec && !e->rec->done) run_needed({e->rec.get()});
    return g_has_err.load() ? cudaErrorLaunchFailure : cudaSuccess;
}
API cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    if (!e->rec || e->rec->done) return cudaSuccess;
    run_needed({e->rec.get()});
    return cudaErrorNotReady;
}
// Nominal: host milliseconds between the moments the simulator ran the two records (not a GPU timing).
API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !a || !b) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    if ((a->flags | b->flags) & cudaEventDisableTiming || !a->rec || !b->rec)
        return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    if (!a->rec->done || !b->rec->done) return cudaErrorNotReady;
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}
API cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }  // queued records keep their op

API cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    if (is_default(s)) {   // CUDA: the legacy stream cannot be captured
        set_error("stream", "StreamCaptureError: cudaStreamBeginCapture on the default stream at " +
                  pctok(rel(__builtin_return_address(0))) + ": the legacy default stream cannot be captured. Create a "
                  "stream (cudaStreamCreate) and capture that.", nullptr, nullptr, nullptr, nullptr, 0, 0);
        return (cudaError_t)(g_last_cuda_error = cudaErrorStreamCaptureUnsupported);
    }
    if (!known_stream(s)) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidResourceHandle);
    if (s->cap) return (cudaError_t)(g_last_cuda_error = cudaErrorIllegalState);
    s->cap = std::make_shared<GraphRec>(); s->cap->origin = s; s->cap_deps.clear(); s->cap_mode = mode;
    return cudaSuccess;
}
API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
    if (is_default(s) || !known_stream(s) || !s->cap || !g) return (cudaError_t)(g_last_cuda_error = cudaErrorIllegalState);
    std::shared_ptr<GraphRec> cap = s->cap;
    for (CUstream_st* o : g_streams) if (o->cap == cap) { o->cap.reset(); o->cap_deps.clear(); }
    if (cap->invalid) { *g = nullptr; return (cudaError_t)(g_last_cuda_error = cudaErrorStreamCaptureInvalidated); }
    *g = new CUgraph_st{cap};
    return cudaSuccess;
}
API cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) {
    if (!st) return cudaErrorInvalidValue;
    *st = (!is_default(s) && known_stream(s) && s->cap)
              ? (s->cap->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive)
              : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
API cudaError_t ccsim_cudaGraphInstantiate(cudaGraphExec_t* x, cudaGraph_t g) {
    if (!x || !g) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    *x = new CUgraphExec_st{g->g};
    return cudaSuccess;
}
API cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
    if (!x) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    auto op = std::make_shared<Op>(); op->kind = OP_GRAPH; op->graph = x->g;
    return issue(s, op, __builtin_return_address(0), "cudaGraphLaunch");
}
API cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* count) {
    if (!g || !count) return cudaErrorInvalidValue;
    if (nodes) for (size_t i = 0; i < *count && i < g->g->nodes.size(); ++i) nodes[i] = (cudaGraphNode_t)g->g->nodes[i].get();
    *count = g->g->nodes.size();
    return cudaSuccess;
}
API cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) { delete x; return cudaSuccess; }



// The launcher returned: work still queued on a non-blocking stream is a bug (nothing orders it before the
// caller reads the outputs); blocking streams' work is ordered by the caller's next default-stream use.
API void ccsim_rt_end_call(void) {
    CUstream_st* c = nullptr;
    for (CUstream_st* s : g_streams) if (s->cap) c = s;
    if (c) {
        set_error("stream", "StreamCaptureError: the launcher returned while " + sname(c) + " was still capturing "
                  "(cudaStreamBeginCapture without cudaStreamEndCapture).", nullptr, nullptr, nullptr, nullptr, 0, 0);
        for (CUstream_st* o : g_streams) { o->cap.reset(); o->cap_deps.clear(); }
    }
    for (CUstream_st* s : g_streams)
        if ((s->flags & cudaStreamNonBlocking) && !s->q.empty() && !g_has_err.load()) {
            std::string what;
            for (auto& op : s->q) {
                if (op->kind == OP_LAUNCH) { what = std::string("a launch of ") + op->name; break; }
                if (op->kind == OP_COPY) { what = "a cudaMemcpyAsync"; break; }
            }
            set_error("stream", "UnsynchronisedStream: the launcher returned while " + sname(s) + " (created with "
                      "cudaStreamNonBlocking) still had queued work (" + (what.empty() ? "an operation" : what) +
                      "). Nothing orders that work before the caller reads the results: the default stream does not "
                      "wait for non-blocking streams. Call cudaStreamSynchronize on it (or wait on an event recorded "
                      "after its last operation) before returning.", nullptr, nullptr, nullptr, nullptr, 0, 0);
        }
    run_needed(all_queued(false));
    check_host_work();
}
