// rt/mem_hooks.h - part of ccsim_rt.cpp. Memory and checks: where instrumented code enters the runtime.
//
// check() sorts one access of a CUDA thread (its own stack, the built-ins, the shared arena, a registered buffer,
// the module's image, the launcher's stack, else an invalid access) and counts it in profile mode; the __tsan_*
// hooks that g++ -fsanitize=thread calls (no TSan runtime is linked) and the coverage hook of profile builds;
// device atomics (checked, then performed); assert() and exit() of the learner's code turned into reports.
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

namespace {
__attribute__((always_inline)) inline void check(uintptr_t a, unsigned size, int kind, void* pc) {
    Fiber* f = t_fiber;
    if (!f || t_in_rt) return;
    f->last_pc = pc;
    if (a - f->base < REGION) {                               // own stack and control block
        if (t_hop_watch) hop_stack_access(f, a, size, kind & 3, (uintptr_t)pc - g_base);   // [hopper hook]
        return;
    }
    if (a == (uintptr_t)&ccsim_cur_view) return;              // the built-ins' TLS slots
    if (a - (uintptr_t)&threadIdx < sizeof(dim3) || a - (uintptr_t)&blockIdx < sizeof(dim3) ||
        a - (uintptr_t)&blockDim < sizeof(dim3) || a - (uintptr_t)&gridDim < sizeof(dim3)) return;
    Worker* w = f->w;
    if (w->ngheld) global_release(w);   // the worker's last global store has landed by now
    if (a - (uintptr_t)w->arena < ARENA_CAP) {
        const int k = (kind & ACC_ATOMIC) && (kind & 3) == 1 ? 2 : kind & 3;   // an atomic store: an atomic here
        if (g_profile) prof_access(f, a, size, k, (uintptr_t)pc - g_base, SP_SHARED, -1);
        shared_access(f, a, size, k, (uintptr_t)pc - g_base);
        return;
    }
    int n = g_nbufs.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
        const Buffer& b = g_bufs[i];
        if (a - b.base < b.bytes) {
            if (a + size <= b.base + b.bytes) {
                if (g_profile) prof_access(f, a, size, kind & 3, (uintptr_t)pc - g_base, SP_GLOBAL, i);
                if (b.sh) global_access(f, b, a, size, kind & 3, kind & (ACC_SYNC | ACC_ORDERED | ACC_ATOMIC), (uintptr_t)pc - g_base);
                return;
            }
            break;
        }
    }
    for (int i = 0; i < g_nimage; ++i) if (a - g_image[i].lo < g_image[i].hi - g_image[i].lo) return;
    if (a - g_host_stack.lo < g_host_stack.hi - g_host_stack.lo) return;   // the launcher's locals and argument copies
    global_bad(f, a, size, kind, (uintptr_t)pc - g_base);
}

}  // namespace

// ===================================================================================================
// __tsan_* hooks (g++ -fsanitize=thread without the TSan runtime calls these around every access)
// ===================================================================================================
#define HOOK extern "C" __attribute__((visibility("hidden"), used))
#define RA __builtin_return_address(0)
HOOK void __tsan_init() {}
HOOK void __tsan_func_entry(void*) {}
HOOK void __tsan_func_exit() {}
HOOK void __tsan_ignore_thread_begin() {}
HOOK void __tsan_ignore_thread_end() {}
#define RW(N) \
    HOOK void __tsan_read##N(void* a) { if (t_fiber) check((uintptr_t)a, N, 0, RA); } \
    HOOK void __tsan_write##N(void* a) { if (t_fiber) check((uintptr_t)a, N, 1, RA); } \
    HOOK void __tsan_unaligned_read##N(void* a) { if (t_fiber) check((uintptr_t)a, N, 0, RA); } \
    HOOK void __tsan_unaligned_write##N(void* a) { if (t_fiber) check((uintptr_t)a, N, 1, RA); } \
    HOOK void __tsan_volatile_read##N(void* a) { if (t_fiber) check((uintptr_t)a, N, 8 | 0, RA); } \
    HOOK void __tsan_volatile_write##N(void* a) { if (t_fiber) check((uintptr_t)a, N, 8 | 1, RA); } \
    HOOK void __tsan_read##N##_pc(void* a, void* pc) { if (t_fiber) check((uintptr_t)a, N, 0, pc); } \
    HOOK void __tsan_write##N##_pc(void* a, void* pc) { if (t_fiber) check((uintptr_t)a, N, 1, pc); }
RW(1) RW(2) RW(4) RW(8) RW(16)
HOOK void __tsan_read_range(void* a, unsigned long n) { if (t_fiber && n) check((uintptr_t)a, (unsigned)n, 0, RA); }
HOOK void __tsan_write_range(void* a, unsigned long n) { if (t_fiber && n) check((uintptr_t)a, (unsigned)n, 1, RA); }
HOOK void __tsan_vptr_update(void**, void*) {}
// profile builds (-fsanitize-coverage=trace-pc): every basic block a CUDA thread enters
HOOK void __sanitizer_cov_trace_pc(void) {
    Fiber* f = t_fiber;
    if (!f || t_in_rt || !g_profile || !f->w->prof_on) return;
    RtGuard guard;
    prof_emit(f, (uintptr_t)RA - g_base, 0, 0, 0, SP_BRANCH, -1);
}
HOOK void __tsan_vptr_read(void**) {}

// Atomic hooks must perform the atomic (instrumented code hands the whole operation to us). An atomic load or
// store (the __nv_atomic_load_n / __nv_atomic_store_n of ccsim.h, or __atomic builtins) is a flag access for the
// memory-model check, with its order: tsan's memory orders are C++'s (0 relaxed, 1 consume, 2 acquire, 3 release,
// 4 acq_rel, 5 seq_cst). Read-modify-writes stay kind 2 (never racing, never a flag: see mem_global.h).
static inline int load_kind(int mo) { return 0 | ACC_SYNC | ACC_ATOMIC | (mo == 1 || mo == 2 || mo >= 4 ? ACC_ORDERED : 0); }
static inline int store_kind(int mo) { return 1 | ACC_SYNC | ACC_ATOMIC | (mo >= 3 ? ACC_ORDERED : 0); }
#define ATOMIC_HOOKS(N, T)                                                                                    \
    HOOK T __tsan_atomic##N##_load(const volatile T* a, int mo) { if (t_fiber) check((uintptr_t)a, sizeof(T), load_kind(mo), RA); return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    HOOK void __tsan_atomic##N##_store(volatile T* a, T v, int mo) { if (t_fiber) check((uintptr_t)a, sizeof(T), store_kind(mo), RA); __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    HOOK T __tsan_atomic##N##_exchange(volatile T* a, T v, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    HOOK T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    HOOK T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    HOOK T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    HOOK T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
    HOOK T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    HOOK T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
    HOOK int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
    HOOK int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
    HOOK T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
ATOMIC_HOOKS(8, uint8_t)
ATOMIC_HOOKS(16, uint16_t)
ATOMIC_HOOKS(32, uint32_t)
ATOMIC_HOOKS(64, uint64_t)
HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// Device-side assert(): glibc's assert calls __assert_fail; inside a kernel it becomes a KernelError.
extern "C" __attribute__((visibility("hidden"), noreturn)) void __assert_fail(const char* expr, const char* file,
                                                                              unsigned int line, const char* func) noexcept {
    Fiber* f = t_fiber;
    if (f) {
        t_in_rt++;
        Worker* w = f->w;
        std::string m = "KernelError " + where(w->L, w->bidx) + ": " + thr(f) + " failed assert(" + expr + ") at " +
                        file + ":" + std::to_string(line) + ". Look at why the asserted condition is false for this thread.";
        set_error("assert", m, w->L, &w->bidx, &f->v.ti, file, (int)line, 0);
        fiber_fail(f);
    }
    // host code (a launcher): report file:line and the expression, then end the worker (assert does not return)
    std::string o = "{\"kind\":\"assert\",\"host\":true,\"file\":";
    json_str(o, file);
    o += ",\"line\":" + std::to_string(line) + ",\"expression\":";
    json_str(o, expr);
    o += ",\"function\":";
    json_str(o, func);
    o += "}\n";
    if (!in_worker()) _exit(4);  // a forked child: silent, and without flushing the worker's copied buffers
    fflush(nullptr);
    report(o.data(), o.size());
    _exit(4);
}

// Host exit(): a launcher that ends the process is reported (file:line from the caller's pc) before the
// worker goes; only this module's calls bind here (hidden symbol), the worker's own exit is untouched.
extern "C" __attribute__((visibility("hidden"), noreturn)) void exit(int status) noexcept {
    if (!in_worker()) _exit(status & 0xff);  // a forked child (a daemonising launcher): silent, see g_worker_pid
    uintptr_t pc = rel(__builtin_return_address(0));
    fflush(nullptr);
    char b[256];
    int n = snprintf(b, sizeof b, "{\"kind\":\"exit\",\"status\":%d,\"pc\":%lu,\"in_kernel\":%s}\n", status,
                     (unsigned long)pc, t_fiber ? "true" : "false");
    report(b, (size_t)n);
    _exit(status & 0xff);
}

// ---- atomics ---------------------------------------------------------------------------------------
template <class T> static T int_atomic(int op, T* p, T v, T cmp, void* pc) {
    if (t_fiber && g_checked) check((uintptr_t)p, sizeof(T), 2, pc);
    switch (op) {
        case A_ADD: return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
        case A_SUB: return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);
        case A_EXCH: return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
        case A_AND: return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);
        case A_OR: return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
        case A_XOR: return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);
        case A_CAS: { T c = cmp; __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
        default: break;
    }
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST), nv;
    do {
        switch (op) {
            case A_MIN: nv = v < old ? v : old; break;
            case A_MAX: nv = v > old ? v : old; break;
            case A_INC: nv = old >= v ? 0 : old + 1; break;           // CUDA: ((old >= val) ? 0 : (old+1))
            case A_DEC: nv = (old == 0 || old > v) ? v : old - 1; break;  // CUDA: ((old == 0) | (old > val)) ? val : (old-1)
            default: nv = old; break;
        }
    } while (!__atomic_compare_exchange_n(p, &old, nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
template <class F, class U> static F float_atomic(int op, F* p, F v, void* pc) {
    if (t_fiber && g_checked) check((uintptr_t)p, sizeof(F), 2, pc);
    U* q = (U*)p;
    U old = __atomic_load_n(q, __ATOMIC_SEQ_CST), nb;
    do {
        F o; std::memcpy(&o, &old, sizeof o);
        F n = op == A_ADD ? o + v : op == A_SUB ? o - v : op == A_EXCH ? v : op == A_MAX ? (v > o ? v : o) : (v < o ? v : o);
        std::memcpy(&nb, &n, sizeof nb);
    } while (!__atomic_compare_exchange_n(q, &old, nb, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    F o; std::memcpy(&o, &old, sizeof o);
    return o;
}
API int ccsim_atomic_i32(int op, int* p, int v, int c) { return int_atomic<int>(op, p, v, c, RA); }
API unsigned ccsim_atomic_u32(int op, unsigned* p, unsigned v, unsigned c) { return int_atomic<unsigned>(op, p, v, c, RA); }
API unsigned long long ccsim_atomic_u64(int op, unsigned long long* p, unsigned long long v, unsigned long long c) { return int_atomic<unsigned long long>(op, p, v, c, RA); }
API long long ccsim_atomic_i64(int op, long long* p, long long v, long long c) { return int_atomic<long long>(op, p, v, c, RA); }
API float ccsim_atomic_f32(int op, float* p, float v) { return float_atomic<float, uint32_t>(op, p, v, RA); }
API double ccsim_atomic_f64(int op, double* p, double v) { return float_atomic<double, uint64_t>(op, p, v, RA); }
