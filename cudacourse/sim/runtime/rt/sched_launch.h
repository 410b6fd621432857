// rt/sched_launch.h - part of ccsim_rt.cpp. Scheduling (3 of 3): launches.
//
// The pool of OS worker threads that take blocks of a launch (CCSIM_WORKERS), a launch's configuration checks
// and dynamic shared-memory opt-ins (cudaFuncSetAttribute), ccsim_rt_launch, and the device-side entry points
// of barriers, warp operations, __threadfence and __trap.
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

namespace {
// ===================================================================================================
// The worker pool
// ===================================================================================================
// Never destroyed: at process exit glibc's condition-variable destructor would wait forever for the
// pool threads still waiting on it.
std::mutex& g_pool_mu = *new std::mutex;
std::mutex& g_launch_mu = *new std::mutex;
std::condition_variable& g_pool_cv = *new std::condition_variable;
std::condition_variable& g_done_cv = *new std::condition_variable;
uint64_t g_pool_gen = 0;
int g_pool_active = 0;
std::vector<std::thread> g_pool;
int g_nworkers = 0;
std::atomic<int> g_worker_ids{0};

Worker* my_worker() {
    Worker* w = t_worker;
    if (w) return w;
    w = new Worker();
    w->id = g_worker_ids.fetch_add(1);
    g_thr[w->id & 63] = pthread_self();
    g_thr_known[w->id & 63] = 1;
    w->arena = (unsigned char*)aligned_alloc(64, ARENA_CAP);
    std::memset(w->arena, 0xFF, ARENA_CAP);
    w->shadow = (Shadow*)calloc(ARENA_CAP / 4, sizeof(Shadow));
    for (size_t i = 0; i < ARENA_CAP / 4; ++i) { w->shadow[i].flags = SH_RED; w->shadow[i].arr = -1; }
    w->hiwater = 0;
    w->site_gen.assign(MAX_SITES, 0);
    w->site_idx.assign(MAX_SITES, 0);
    // an alternate signal stack so a fiber's stack overflow can still be reported
    stack_t ss; ss.ss_sp = malloc(64 * 1024); ss.ss_size = 64 * 1024; ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
    t_worker = w;
    return w;
}

void run_blocks(Worker* w, Launch* L) {
    for (;;) {
        if (L->abort.load(std::memory_order_relaxed)) break;
        unsigned long long b = L->next.fetch_add(1);
        if (b >= L->nblocks) break;
        if (!run_block(w, L, b)) break;
    }
}

void pool_main() {
    Worker* w = my_worker();
    uint64_t seen = 0;
    for (;;) {
        Launch* L;
        {
            std::unique_lock<std::mutex> lk(g_pool_mu);
            g_pool_cv.wait(lk, [&] { return g_pool_gen != seen; });
            seen = g_pool_gen;
            L = g_cur_launch;
        }
        run_blocks(w, L);
        {
            std::lock_guard<std::mutex> lk(g_pool_mu);
            if (--g_pool_active == 0) g_done_cv.notify_all();
        }
    }
}

void init_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        const char* e = getenv("CCSIM_WORKERS");
        int n = e ? atoi(e) : (int)std::thread::hardware_concurrency();
        if (n < 1) n = 1;
        if (n > 32) n = 32;
        // A thread the process may not start (a grading worker's process limit counts threads, and several
        // workers share it) leaves the simulator with fewer helpers, not a dead worker.
        for (int i = 1; i < n; ++i) {
            try { g_pool.emplace_back(pool_main); } catch (const std::system_error&) { break; }
            g_pool.back().detach();
        }
        g_nworkers = 1 + (int)g_pool.size();
    });
}

std::string validate(const Launch* L) {
    const dim3 &g = L->g, &b = L->b;
    char m[900];
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    const char* why = nullptr; char wb[600];
    if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) why = "a grid or block dimension is 0 (an empty launch is an error in CUDA; check the launcher's grid size arithmetic for small n)";
    else if (nt > 1024) { snprintf(wb, sizeof wb, "the block has %llu threads, more than the 1024 a block may have", nt); why = wb; }
    else if (b.x > 1024 || b.y > 1024 || b.z > 64) { snprintf(wb, sizeof wb, "block dimensions are limited to (1024, 1024, 64)"); why = wb; }
    else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) { snprintf(wb, sizeof wb, "grid dimensions are limited to (2^31-1, 65535, 65535) (a negative size converted to unsigned?)"); why = wb; }
    else if (L->smem > OPTIN_LIMIT) { snprintf(wb, sizeof wb, "the launch asks for %zu bytes of dynamic shared memory, more than the %zu bytes (227 KB) a block may use on the modelled GPU (H100), even with cudaFuncSetAttribute", L->smem, OPTIN_LIMIT); why = wb; }
    else if (L->smem > L->smem_limit) {
        if (L->smem_limit == STATIC_LIMIT)
            snprintf(wb, sizeof wb, "the launch asks for %zu bytes of dynamic shared memory, more than the 49152 bytes (48 KB) allowed without an opt-in; call cudaFuncSetAttribute(%s, cudaFuncAttributeMaxDynamicSharedMemorySize, %zu) first (at most %zu on the modelled H100)", L->smem, L->name, L->smem, OPTIN_LIMIT);
        else
            snprintf(wb, sizeof wb, "the launch asks for %zu bytes of dynamic shared memory, more than the %zu bytes this kernel opted in to with cudaFuncSetAttribute(..., cudaFuncAttributeMaxDynamicSharedMemorySize, %zu) (at most %zu on the modelled H100)", L->smem, L->smem_limit, L->smem_limit, OPTIN_LIMIT);
        why = wb;
    }
    if (!why) return "";
    snprintf(m, sizeof m, "LaunchError: %s%s at %s:%d: invalid configuration: %s.", L->name, launch_cfg(L).c_str(),
             L->file, L->line, why);
    return m;
}

// Opt-ins of cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), by the kernel's
// spelling without spaces ("k<64>"); a launch of k<64> finds its own entry, else one made for the plain name k.
std::mutex g_attr_mu;
std::vector<std::pair<std::string, size_t>> g_optin;

std::string kernel_key(const char* s) {
    std::string o;
    for (; s && *s; ++s) if (*s != ' ' && *s != '\t' && *s != '\n') o += *s;
    return o;
}

size_t optin_for(const char* name) {
    std::lock_guard<std::mutex> lk(g_attr_mu);
    std::string k = kernel_key(name);
    std::string base = k.substr(0, k.find('<'));
    size_t pos = base.rfind("::");
    if (pos != std::string::npos) base = base.substr(pos + 2);
    size_t by_base = 0;
    for (auto& e : g_optin) {
        if (e.first == k) return std::max(e.second, STATIC_LIMIT);
        std::string eb = e.first.substr(0, e.first.find('<'));
        size_t ep = eb.rfind("::");
        if (ep != std::string::npos) eb = eb.substr(ep + 2);
        if (eb == base) by_base = std::max(by_base, e.second);
    }
    return std::max(by_base, STATIC_LIMIT);
}

}  // namespace

// ===================================================================================================
// C API
// ===================================================================================================
API cudaError_t ccsim_rt_func_attr(const char* kernel, int attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        // CUDA refuses an opt-in above the device's limit (and the launch then fails against 48 KB)
        if (value < 0 || (size_t)value > OPTIN_LIMIT) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
        std::lock_guard<std::mutex> lk(g_attr_mu);
        std::string k = kernel_key(kernel);
        for (auto& e : g_optin) if (e.first == k) { e.second = (size_t)value; return cudaSuccess; }
        g_optin.emplace_back(k, (size_t)value);
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;  // a hint; nothing to model
    return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
}

API int ccsim_rt_launch(const char* name, const char* file, int line, const dim3* g, const dim3* b, size_t smem,
                        ccsim_body_fn body, void* ctx) {
    if (g_has_err.load()) return 1;  // errors are sticky until the call ends
    if (t_fiber) {
        Fiber* f = t_fiber;
        fail_here("launch", std::string("LaunchError: kernel ") + name + " launched from inside a kernel (dynamic parallelism) is not supported by the simulator.", file, line, 0);
        (void)f;
    }
    init_once();
    DevOpen dev_open;  // kernels may touch device memory
    std::lock_guard<std::mutex> guard(g_launch_mu);
    Launch L;
    L.name = name; L.file = file; L.line = line; L.g = *g; L.b = *b; L.smem = smem; L.body = body; L.ctx = ctx;
    L.nthreads = b->x * b->y * b->z;
    L.smem_limit = optin_for(name);
    L.nblocks = (unsigned long long)g->x * g->y * g->z;
    L.next.store(0); L.abort.store(false); L.fenced.store(false);
    {
        static uint32_t seq = 0;
        if (++seq == 0) ++seq;
        L.seq = seq;
    }
    std::string bad = validate(&L);
    if (!bad.empty()) { set_error("launch", bad, &L, nullptr, nullptr, file, line, 0); return 1; }
    L.order.resize(L.nthreads);
    for (unsigned i = 0; i < L.nthreads; ++i) L.order[i] = g_order == 1 ? (int)(L.nthreads - 1 - i) : (int)i;
    if (g_order == 2) { std::mt19937 rng(g_seed); std::shuffle(L.order.begin(), L.order.end(), rng); }
    // the launcher's stack holds the argument copies the kernel reads
    {
        static __thread uintptr_t lo = 0, hi = 0;
        if (!hi) {
            pthread_attr_t at; void* a; size_t s;
            if (pthread_getattr_np(pthread_self(), &at) == 0) {
                pthread_attr_getstack(&at, &a, &s); lo = (uintptr_t)a; hi = lo + s; pthread_attr_destroy(&at);
            }
        }
        g_host_stack.lo = lo; g_host_stack.hi = hi;
    }
    LaunchProf* prof = nullptr;
    if (g_profile) {
        std::unique_ptr<LaunchProf> P(new LaunchProf());
        P->name = name; P->file = file ? file : ""; P->line = line; P->g = *g; P->b = *b; P->smem = smem;
        P->nblocks = L.nblocks;
        unsigned long long allowed = std::max(1ull, PROFILE_MAX_THREADS / L.nthreads);
        P->stride = (L.nblocks + allowed - 1) / allowed;
        prof = P.get();
        std::lock_guard<std::mutex> lk(g_prof_mu);
        g_prof_launches.push_back(std::move(P));
    }
    L.prof = prof;
    Worker* w = my_worker();
    int helpers = L.nblocks > 1 ? g_nworkers - 1 : 0;
    g_cur_launch = &L;
    if (helpers) {
        std::lock_guard<std::mutex> lk(g_pool_mu);
        g_pool_active = helpers;
        g_pool_gen++;
        g_pool_cv.notify_all();
    }
    run_blocks(w, &L);
    if (helpers) {
        std::unique_lock<std::mutex> lk(g_pool_mu);
        g_done_cv.wait(lk, [] { return g_pool_active == 0; });
    }
    g_cur_launch = nullptr;
    fflush(stdout);
    return g_has_err.load() ? 1 : 0;
}

API const char* ccsim_rt_error_json(void) { return g_has_err.load() ? g_err : ""; }

API void ccsim_rt_syncthreads(const char* file, int line) {
    Fiber* f = t_fiber;
    if (!f) return;
    f->wfile = file; f->wline = line; f->wop = 0; f->pred = 0;
    f->state = F_BARRIER;
    yield_next(f);
}

API int ccsim_rt_syncthreads_op(int op, int pred, const char* file, int line) {
    Fiber* f = t_fiber;
    if (!f) return pred;
    f->wfile = file; f->wline = line; f->wop = op; f->pred = pred;
    f->state = F_BARRIER;
    yield_next(f);
    return (int)f->wres;
}

API unsigned long long ccsim_rt_warp(int op, unsigned mask, unsigned long long value, int arg, int width,
                                     const char* file, int line) {
    Fiber* f = t_fiber;
    if (!f) return value;
    if (op == W_ACTIVE) {
        // exact in the simulator's model: wait until every live lane of the block is blocked or exited, then
        // the answer is the lanes of this warp waiting at this same call site (complete_warp_ops)
        f->wfile = file; f->wline = line; f->wop = op; f->wmask = 0; f->wval = 0; f->warg = 0; f->wwidth = 32;
        f->state = F_WARP;
        yield_next(f);
        return f->wres;
    }
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        fail_here("barrier", "BarrierError " + where(f->w->L, f->w->bidx) + ": " + thr(f) + " calls " + op_name(op) +
                  " with width " + std::to_string(width) + "; width must be a power of two between 1 and 32.", file, line, 0);
    }
    f->wfile = file; f->wline = line; f->wop = op; f->wmask = mask; f->wval = value; f->warg = arg; f->wwidth = width;
    f->state = F_WARP;
    yield_next(f);
    return f->wres;
}

API void ccsim_rt_threadfence(void) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    // the publish-then-signal pattern (threadFenceReduction): reads across blocks are not judged afterwards
    if (t_fiber && g_checked) {
        t_fiber->w->L->fenced.store(true, std::memory_order_relaxed);
        t_fiber->fences++;   // orders this thread's accesses before and after it (mem_global.h, judge_published)
    }
}

API void ccsim_rt_trap(const char* file, int line) {
    Fiber* f = t_fiber;
    if (f) fail_here("assert", "KernelError " + where(f->w->L, f->w->bidx) + ": " + thr(f) + " executed __trap() at " + file + ":" + std::to_string(line) + ".", file, line, 0);
    abort();
}
