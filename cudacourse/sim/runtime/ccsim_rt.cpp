// ccsim_rt.cpp - the runtime proper of the CPU CUDA simulator.
//
// Compiled once per flags, WITHOUT instrumentation, and linked into every simulated module. It holds
// the execution model (a pool of OS worker threads running blocks; inside a block every CUDA thread is a
// fiber), the per-block scheduler (barriers, warp collectives, divergence and deadlock diagnosis), the
// shared-memory arena with its shadow, the __tsan_* access hooks of checked mode, atomics, the host API,
// and the error record the Python side turns into KernelError subclasses.
//
// Everything here has hidden visibility except the small C API the worker and the generated entry
// points use, so two loaded modules never resolve each other's hooks.
#include "ccsim.h"

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <dlfcn.h>
#include <link.h>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <algorithm>
#include <random>
#include <sys/mman.h>
#include <system_error>
#include <thread>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <deque>
#include <unordered_map>
#include <memory>
#include <string>
#include <vector>

using namespace ccsim;

#define API extern "C" __attribute__((visibility("default")))

namespace {

// ===================================================================================================
// Constants and records
// ===================================================================================================
constexpr size_t REGION = CCSIM_REGION_SIZE;    // per fiber: control block pages, guard page, stack
constexpr size_t STACK_LO = 3 * 4096;            // the stack starts above the control block and guard page
constexpr size_t PAGE = 4096;
constexpr size_t STATIC_LIMIT = 48 * 1024;       // CUDA's static shared memory limit per block (and the
                                                 // dynamic default without cudaFuncSetAttribute)
constexpr size_t OPTIN_LIMIT = 232448;           // the modelled GPU (H100): 227 KB per block with the opt-in
constexpr size_t RZ = 64;                        // red zone between shared arrays
constexpr size_t ARENA_CAP = OPTIN_LIMIT + STATIC_LIMIT + 64 * 1024;
constexpr int MAX_SITES = 4096;
constexpr int MAX_THREADS = 1024;

// F_PARKED: stopped before a shared-memory read of bytes no thread has written yet, until the barrier
// interval resolves (another thread writes them: a race; nobody can: an uninitialised read). Never resumed.
// F_HOP: waits on an mbarrier phase or a named barrier (ccsim_hopper_rt.h wakes it).
enum FState { F_READY, F_BARRIER, F_WARP, F_EXITED, F_ABORTED, F_PARKED, F_HOP };

struct Worker;
struct PSlot;

struct Fiber {
    ccsim_view v;              // must stay first: the header reads the built-ins from here
    void* sp;                  // saved stack pointer while switched out
    uintptr_t base;            // start of this fiber's region (control block, guard page, stack)
    Worker* w;
    int tid, lane, warp;
    int state;
    bool fresh;                // context must be (re)initialised before the next resume
    // what the fiber waits for
    const char* wfile; int wline; int wop; unsigned wmask; unsigned long long wval; int warg, wwidth;
    unsigned long long wres;
    int pred;
    // warp ordering for the race checker: last collective this lane took part in
    uint32_t lcs; unsigned lcm;
    uint32_t exit_seq;         // warp collective sequence when the thread exited (for __activemask)
    void* last_pc;             // last checked access (checked mode): where a hung thread was
    // F_PARKED: the read it waits to make (address, bytes, 0 read / 2 atomic, pc relative to the module)
    uintptr_t park_a, park_pc; unsigned park_size; int park_kind;
    // profile mode: up to 4 adjacent accesses of this thread not yet counted (g++ splits a float2/float4
    // copy into scalar accesses at consecutive pcs; they are counted as one vector access, as nvcc emits one)
    uintptr_t ppc[4], paddr[4]; uint8_t psz[4]; uint8_t pn, pop, pspace; int16_t pbuf;
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
};

struct Site { uintptr_t base; size_t bytes, elem, d0, d1, d2; int line; const char* name; };

// Shadow of one 4-byte shared-memory word (checked mode).
enum { SH_INIT = 1, SH_RED = 2, SH_ATOMIC = 4, SH_PEND = 8, SH_WAIT = 16 };   // SH_WAIT: a parked reader waits
// Byte masks (init, wm, r1m, r2m) keep char/short/__half arrays, whose neighbouring elements share a
// word, free of false races: two accesses conflict only if they touch a common byte.
struct Shadow {
    uint8_t flags; int16_t arr;
    uint8_t init, wm, r1m, r2m, w2m;
    uint32_t pidx;               // index into Worker::pend while SH_PEND is set
    uint32_t wold;               // the word before the last writer's first write in its epoch: a read of an
                                 // unchanged value is no race
    uint16_t w2t; uint32_t w2e, w2s; uintptr_t w2pc;   // a second writer of other bytes of the word
    uint16_t wt, r1t, r2t;
    uint32_t we, r1e, r2e;       // barrier epochs
    uint32_t ws, r1s, r2s;       // warp collective sequence at the access
    uintptr_t wpc, r1pc, r2pc;
};

// A write that conflicts with another thread's unordered write or read of the same bytes is a race only
// if it changes the value (compute-sanitizer's racecheck reports no hazard for identical stores, e.g. every
// lane of a warp storing one value to s[warp]). The hook runs before the store, so the verdict waits until
// the word is next touched, a barrier releases, or the block ends: then the bytes are compared with `old`.
struct Pending {
    size_t word; uint32_t old; uint8_t bm; bool war;
    uint16_t tid, other; uintptr_t pc, opc;
};

struct LaunchProf;

struct Launch {
    LaunchProf* prof = nullptr;     // profile mode: this launch's counters (null otherwise)
    const char* name; const char* file; int line;
    dim3 g, b; size_t smem;
    size_t smem_limit;          // static + dynamic bytes this kernel may use: 48 KB, or its opt-in
    ccsim_body_fn body; void* ctx;
    unsigned nthreads; unsigned long long nblocks;
    std::atomic<unsigned long long> next;
    std::atomic<bool> abort;
    std::vector<int> order;
    uint32_t seq;                    // launch sequence (never 0) for the global-memory shadow
    std::atomic<bool> fenced;        // a thread ran __threadfence(): cross-block reads are not judged
};

struct Worker {
    int id;
    std::vector<Fiber*> fibers;
    void* sched_sp = nullptr;
#if !defined(__x86_64__)
    ucontext_t sched_uc;
#endif
    unsigned char* arena = nullptr;  // ARENA_CAP bytes
    Shadow* shadow = nullptr;        // one per word, checked mode only
    size_t arena_used = 0, hiwater = 0, dyn_off = 0, dyn_bytes = 0, static_bytes = 0;
    uint64_t gen = 0;
    std::vector<uint64_t> site_gen;
    std::vector<int> site_idx;
    std::vector<Site> sites;         // arrays allocated in the current block; index 0 is the dynamic part
    std::vector<Pending> pend;       // conflicting writes whose values are not compared yet (checked mode)
    std::vector<Fiber*> parked;      // threads stopped before an unwritten shared read (F_PARKED), this interval
    // The global words of this worker's last plain store, locked until the store has landed (the hook runs
    // before the store): released at the worker's next access hook or when its fiber hands back control.
    static constexpr unsigned GHELD = 5;   // an unaligned 16-byte store spans 5 words; more go to gheld_more
    unsigned ngheld = 0;
    struct GShadow* gheld[GHELD];
    std::vector<struct GShadow*> gheld_more;
    // A global store that conflicts with another thread's unordered store (war false) or load (war true):
    // a race if it changed the bytes `bm` from `old`, the word as the previous access left it. Decided when
    // the store has landed (gconf), kept to report when the block ends (gpend).
    struct GPending { uintptr_t word; uint32_t old; uint8_t bm; bool war; uint32_t other; uint16_t tid; uintptr_t pc;
                      const struct Buffer* buf; };
    std::vector<GPending> gconf, gpend;
    unsigned long long blin = 0;     // linear index of the running block
    uint32_t epoch = 1;
    uint32_t wseq[MAX_THREADS / 32];
    dim3 bidx;
    Launch* L = nullptr;
    unsigned pos = 0;                // position of the running fiber in the pass order
    void* altstack = nullptr;
    bool prof_on = false;            // profile mode: the running block is counted (sampling may skip it)
    static constexpr unsigned PCACHE = 64;
    const void* prof_launch = nullptr;   // the launch whose slots `prof` holds
    uintptr_t pcache_key[PCACHE];    // a direct-mapped cache of pc -> its PSlot (cleared per block)
    struct PSlot* pcache[PCACHE];
    uint64_t prof_barriers = 0;      // __syncthreads() releases in the running block
    std::unordered_map<uintptr_t, PSlot>* prof = nullptr;   // per-pc requests of the running block
};

// [hopper hooks] Hopper's asynchronous machinery (ccsim_hopper_rt.h, included at the end of this file)
extern bool g_hop_used;
extern __thread int t_hop_watch;
void hop_block_begin(Worker* w, Launch* L);
void hop_shared_access(Fiber* f, uintptr_t a, unsigned size, int kind, uintptr_t pc);
void hop_stack_access(Fiber* f, uintptr_t a, unsigned size, int kind, uintptr_t pc);
void hop_syncthreads(Worker* w, unsigned n);
bool hop_any_ready(Worker* w, unsigned n);
bool hop_deadlock(Worker* w, unsigned n);
void hop_warp_collective(Worker* w, unsigned warp, unsigned lanes);
// [/hopper hooks]

// ===================================================================================================
// Globals
// ===================================================================================================
__thread Fiber* t_fiber __attribute__((tls_model("initial-exec"))) = nullptr;
}  // namespace
extern "C" __attribute__((visibility("hidden"))) __thread ccsim_view* ccsim_cur_view
    __attribute__((tls_model("initial-exec"))) = nullptr;
extern "C" __attribute__((visibility("hidden"))) __thread dim3 threadIdx __attribute__((tls_model("initial-exec"))) = dim3(0, 0, 0);
extern "C" __attribute__((visibility("hidden"))) __thread dim3 blockIdx __attribute__((tls_model("initial-exec"))) = dim3(0, 0, 0);
extern "C" __attribute__((visibility("hidden"))) __thread dim3 blockDim __attribute__((tls_model("initial-exec"))) = dim3(0, 0, 0);
extern "C" __attribute__((visibility("hidden"))) __thread dim3 gridDim __attribute__((tls_model("initial-exec"))) = dim3(0, 0, 0);
namespace {
__thread Worker* t_worker __attribute__((tls_model("initial-exec"))) = nullptr;
// Set while runtime code runs on a fiber (reports, shared-memory allocation): library templates such as
// std::string may be shared (COMDAT) with the instrumented learner code, and their accesses must not be
// checked (pitfall: a report re-entered the checker through instrumented std::string code).
__thread int t_in_rt __attribute__((tls_model("initial-exec"))) = 0;
struct RtGuard { RtGuard() { t_in_rt++; } ~RtGuard() { t_in_rt--; } };

bool g_checked = false;
int g_order = 0;                   // 0 forward, 1 reverse, 2 shuffle
unsigned g_seed = 0;
int g_report_fd = 2;
// The worker's pid (ccsim_api_init): a process a launcher forks shares the report channel, and its reports
// (its exit(), a crash) would reach the checker as the answer to a later call, costing other tasks.
pid_t g_worker_pid = 0;
bool in_worker() { return g_worker_pid == 0 || getpid() == g_worker_pid; }
void report(const char* buf, size_t n) { if (in_worker() && write(g_report_fd, buf, n) < 0) {} }
uintptr_t g_base = 0;              // load address of this module (for pc -> file:line)
struct Range { uintptr_t lo, hi; };
Range g_image[16]; int g_nimage = 0;

// Shadow of one 4-byte word of a registered buffer (checked mode): the last writer and last reader
// (global thread number + 1, launch sequence, barrier epoch) for races between threads and blocks of one
// launch, the word before the writer's first store (a read of an unchanged value is no race), and which
// bytes were ever written (cudaMalloc memory only: tensors from Python count as initialised).
// Blocks run on several OS threads at once, so the shadow and the word are guarded by `lock`: an access
// takes it in its hook, and a plain store keeps it until the store has landed (see GHeld), so whoever
// takes it next sees the shadow and the word exactly as the last access left them.
struct GShadow {
    uint32_t wthr, rthr;
    uint32_t wl, rl;             // launch sequence (32 bits: cudaMalloc memory outlives many launches)
    uint16_t we, re;
    uint32_t wold;
    uint8_t init, wm, rm;
    uint8_t lock;                // 1 while a worker holds the word (atomic accesses only)
};
struct Buffer { uintptr_t base; size_t bytes; size_t elem; char name[64]; GShadow* sh; size_t shbytes; bool track_init; };
std::mutex g_buf_mu;
Buffer g_bufs[256]; std::atomic<int> g_nbufs{0};

std::mutex g_err_mu;
std::atomic<bool> g_has_err{false};
char g_err[16384];
int g_last_cuda_error = 0;
std::atomic<bool> g_streams_used{false};   // a stream was created: diagnoses mention stream ordering

Launch* volatile g_cur_launch = nullptr;
Fiber* volatile g_cur_fiber[64];
pthread_t g_thr[64];               // OS thread of each worker (a timeout report is forwarded to it)
volatile int g_thr_known[64];

// ===================================================================================================
// Small helpers
// ===================================================================================================
inline uintptr_t rel(const void* pc) { return pc ? (uintptr_t)pc - g_base : 0; }

void json_str(std::string& o, const char* s) {
    o += '"';
    for (; s && *s; ++s) {
        if (*s == '"' || *s == '\\') { o += '\\'; o += *s; }
        else if (*s == '\n') o += "\\n";
        else if ((unsigned char)*s < 0x20) o += ' ';
        else o += *s;
    }
    o += '"';
}

dim3 unlinear(unsigned long long i, dim3 d) {
    return dim3((unsigned)(i % d.x), (unsigned)((i / d.x) % d.y), (unsigned)(i / ((unsigned long long)d.x * d.y)));
}

std::string tstr(dim3 t) { char b[64]; snprintf(b, sizeof b, "(%u,%u,%u)", t.x, t.y, t.z); return b; }

// pc tokens are resolved to file:line by the Python side (addr2line on this module, cached)
std::string pctok(uintptr_t pc) { char b[48]; snprintf(b, sizeof b, "@@PC:%lx@@", (unsigned long)pc); return b; }

// Record the first error of a call. kind: race, out-of-bounds, uninitialized-read, barrier, launch,
// assert, crash. line/file are set when known directly; pc otherwise.
void set_error(const char* kind, const std::string& msg, const Launch* L, const dim3* block, const dim3* thread,
               const char* file, int line, uintptr_t pc) {
    std::lock_guard<std::mutex> lk(g_err_mu);
    if (g_has_err.load()) return;
    std::string o = "{\"kind\":";
    json_str(o, kind);
    o += ",\"kernel\":"; json_str(o, L ? L->name : "");
    if (block) o += ",\"block\":[" + std::to_string(block->x) + "," + std::to_string(block->y) + "," + std::to_string(block->z) + "]";
    if (thread) o += ",\"thread\":[" + std::to_string(thread->x) + "," + std::to_string(thread->y) + "," + std::to_string(thread->z) + "]";
    if (file) { o += ",\"file\":"; json_str(o, file); }
    o += ",\"line\":" + std::to_string(line) + ",\"pc\":" + std::to_string(pc) + ",\"message\":";
    json_str(o, msg.c_str());
    o += "}";
    snprintf(g_err, sizeof g_err, "%s", o.c_str());
    g_has_err.store(true);
    g_last_cuda_error = strcmp(kind, "launch") == 0 ? cudaErrorInvalidConfiguration : cudaErrorLaunchFailure;
}

std::string where(const Launch* L, dim3 blk) {
    return std::string("in ") + L->name + ", block " + tstr(blk);
}

// ===================================================================================================
// Fibers: a hand-written x86-64 context switch (callee-saved registers, MXCSR, x87 control word),
// ucontext elsewhere. Control blocks and stack tops are 'coloured' (offset by idx*64 bytes) so that the
// fibers of a block do not all map to the same cache set (page-aligned ones did, and thrashed L1/L2).
// ===================================================================================================
#if defined(__x86_64__)
extern "C" void ccsim_ctx_switch(void** save_sp, void* to_sp);
extern "C" void ccsim_ctx_start();
asm(R"(
    .text
    .globl ccsim_ctx_switch
    .hidden ccsim_ctx_switch
    .type ccsim_ctx_switch, @function
ccsim_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movl (%rsp), %eax        # same-size reloads: no store-forwarding stall
    movzwl 4(%rsp), %edx
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    cmpl (%rsp), %eax
    jne 1f
    cmpw 4(%rsp), %dx
    jne 1f
2:
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
1:  # the target runs with other floating-point control words: load them (loads are slow; rarely needed)
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    jmp 2b
    .size ccsim_ctx_switch, .-ccsim_ctx_switch
    .globl ccsim_ctx_start
    .hidden ccsim_ctx_start
    .type ccsim_ctx_start, @function
ccsim_ctx_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size ccsim_ctx_start, .-ccsim_ctx_start
)");
#endif

void fiber_main(Fiber* f);

void fiber_init_ctx(Fiber* f) {
    uintptr_t top = f->base + REGION - (uintptr_t)(f->tid % 64) * 64;
#if defined(__x86_64__)
    uintptr_t S = top - 16;                       // %rsp after `ret` into ccsim_ctx_start: 16-aligned
    uint64_t* sp = (uint64_t*)(S - 64);
    uint32_t csr = 0x1F80; uint16_t cw = 0x037F;
    sp[0] = 0;
    std::memcpy(&sp[0], &csr, 4); std::memcpy((char*)&sp[0] + 4, &cw, 2);
    sp[1] = 0;                                    // r15
    sp[2] = 0;                                    // r14
    sp[3] = (uint64_t)(void*)&fiber_main;         // r13: entry
    sp[4] = (uint64_t)f;                          // r12: argument
    sp[5] = 0; sp[6] = 0;                         // rbx, rbp
    sp[7] = (uint64_t)(void*)&ccsim_ctx_start;    // return address
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = (char*)f->base + STACK_LO;
    f->uc.uc_stack.ss_size = REGION - STACK_LO - 4096;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)())fiber_main, 1, f);
#endif
    f->fresh = false;
}

Fiber* fiber_new(Worker* w, int idx) {
    char* raw = (char*)mmap(nullptr, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) { perror("ccsim: mmap fiber stack"); _exit(70); }
    uintptr_t a = (uintptr_t)raw;
    mprotect((void*)(a + 2 * PAGE), PAGE, PROT_NONE);   // guard page between control block and stack
    static_assert(sizeof(Fiber) + 63 * 64 <= 2 * PAGE, "fiber control block too large for its colour range");
    Fiber* f = new ((void*)(a + (uintptr_t)(idx % 64) * 64)) Fiber();
    f->base = a;
    f->w = w; f->tid = idx; f->fresh = true;
    return f;
}

inline void switch_to_fiber(Worker* w, Fiber* f) {
    t_fiber = f;
    ccsim_cur_view = &f->v;
    threadIdx = f->v.ti;
    g_cur_fiber[w->id & 63] = f;
#if defined(__x86_64__)
    ccsim_ctx_switch(&w->sched_sp, f->sp);
#else
    swapcontext(&w->sched_uc, &f->uc);
#endif
    t_fiber = nullptr;
    ccsim_cur_view = nullptr;
    g_cur_fiber[w->id & 63] = nullptr;
}

inline void yield_to_sched(Fiber* f) {
#if defined(__x86_64__)
    ccsim_ctx_switch(&f->sp, f->w->sched_sp);
#else
    swapcontext(&f->uc, &f->w->sched_uc);
#endif
}

// A fiber that blocks (barrier, warp operation) or exits hands the CPU straight to the next runnable
// fiber of the current pass; only at the end of a pass does control go back to the scheduler. This
// halves the number of context switches compared with returning to the scheduler every time.
inline void yield_next(Fiber* f) {
    Worker* w = f->w;
    Launch* L = w->L;
    unsigned n = L->nthreads;
    const int* order = L->order.data();
    while (++w->pos < n) {
        Fiber* g = w->fibers[order[w->pos]];
        if (g->state != F_READY) continue;
        t_fiber = g;
        ccsim_cur_view = &g->v;
        threadIdx = g->v.ti;
        g_cur_fiber[w->id & 63] = g;
#if defined(__x86_64__)
        ccsim_ctx_switch(&f->sp, g->sp);
#else
        swapcontext(&f->uc, &g->uc);
#endif
        return;
    }
    yield_to_sched(f);
}

void fiber_main(Fiber* f) {
    for (;;) {
        Launch* L = f->w->L;
        L->body(L->ctx);
        f->exit_seq = f->w->wseq[f->warp];
        f->state = F_EXITED;
        yield_next(f);
    }
}

// Stop the calling CUDA thread right here: it never resumes; its block is abandoned.
[[noreturn]] void fiber_fail(Fiber* f) {
    t_in_rt = 0;   // this fiber never resumes: drop any guard it held
    f->state = F_ABORTED;
    f->w->L->abort.store(true);
    yield_to_sched(f);
    __builtin_trap();
}

// ===================================================================================================
// Error helpers that know about the current thread
// ===================================================================================================
[[noreturn]] void fail_here(const char* kind, const std::string& msg, const char* file, int line, uintptr_t pc) {
    t_in_rt++;
    Fiber* f = t_fiber;
    Worker* w = f->w;
    set_error(kind, msg, w->L, &w->bidx, &f->v.ti, file, line, pc);
    fiber_fail(f);
}

std::string thr(const Fiber* f) { return "thread " + tstr(f->v.ti); }
std::string thr_of(Worker* w, int tid) { return "thread " + tstr(unlinear((unsigned)tid, w->L->b)); }

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

// A global-memory access by a CUDA thread inside registered buffer b: initialisation (cudaMalloc memory)
// and races with other threads of the same launch.
void global_access(Fiber* f, const Buffer& b, uintptr_t a, unsigned size, int kind, bool vol, uintptr_t pc) {
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
            continue;
        }
        // a write: its value is not known yet, so the word stays locked until the store has landed; then
        // global_release compares the bytes it stored with `cur`, the value the last access left (for a
        // conflicting store: the value that thread stored)
        if (s.wl == S && s.wthr && s.wthr != T && (s.wm & bm) && !ordered(s.wthr, s.we)) {
            w->gconf.push_back({wa, cur, bm, false, s.wthr, (uint16_t)f->tid, pc, &b});
        } else if (!vol && s.rl == S && s.rthr && s.rthr != T && (s.rm & bm) && !ordered(s.rthr, s.re) &&
                   !(cross_ok && (s.rthr - 1ull) / L->nthreads != w->blin)) {
            w->gconf.push_back({wa, cur, bm, true, s.rthr, (uint16_t)f->tid, pc, &b});
        }
        if (w->ngheld < Worker::GHELD) w->gheld[w->ngheld++] = &s;
        else w->gheld_more.push_back(&s);
        if (!(s.wthr == T && s.wl == S)) { s.wold = cur; s.wm = 0; }
        s.wthr = T; s.wl = S; s.we = E; s.wm |= bm; s.init |= bm;
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
        if (g_profile) prof_access(f, a, size, kind & 3, (uintptr_t)pc - g_base, SP_SHARED, -1);
        shared_access(f, a, size, kind & 3, (uintptr_t)pc - g_base);
        return;
    }
    int n = g_nbufs.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
        const Buffer& b = g_bufs[i];
        if (a - b.base < b.bytes) {
            if (a + size <= b.base + b.bytes) {
                if (g_profile) prof_access(f, a, size, kind & 3, (uintptr_t)pc - g_base, SP_GLOBAL, i);
                if (b.sh) global_access(f, b, a, size, kind & 3, kind & 8, (uintptr_t)pc - g_base);
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

// Atomic hooks must perform the atomic (instrumented code hands the whole operation to us).
#define ATOMIC_HOOKS(N, T)                                                                                    \
    HOOK T __tsan_atomic##N##_load(const volatile T* a, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 0, RA); return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    HOOK void __tsan_atomic##N##_store(volatile T* a, T v, int) { if (t_fiber) check((uintptr_t)a, sizeof(T), 2, RA); __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
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
        if (L->abort.load(std::memory_order_relaxed)) {
            for (unsigned i = 0; i < n; ++i) w->fibers[i]->fresh = true;
            return false;
        }
        int r = complete_warp_ops(w, n);
        if (r < 0) { for (unsigned i = 0; i < n; ++i) w->fibers[i]->fresh = true; L->abort.store(true); return false; }
        if (r > 0) continue;
        if (g_hop_used && hop_any_ready(w, n)) continue;   // [hopper hook] woken by an mbarrier or named barrier
        if (!w->parked.empty()) {   // nothing can move, and no thread wrote what the parked threads wait to read
            report_unwritten(w);
            for (unsigned i = 0; i < n; ++i) w->fibers[i]->fresh = true;
            L->abort.store(true);
            return false;
        }
        if (g_hop_used && hop_deadlock(w, n)) {   // [hopper hook] waits on an mbarrier nothing can complete
            for (unsigned i = 0; i < n; ++i) w->fibers[i]->fresh = true;
            L->abort.store(true);
            return false;
        }
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
            for (unsigned i = 0; i < n; ++i) w->fibers[i]->fresh = true;
            L->abort.store(true);
            return false;
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
                if (!w->pend.empty() && resolve_all_pending(w)) {
                    for (unsigned i = 0; i < n; ++i) w->fibers[i]->fresh = true;
                    L->abort.store(true);
                    return false;
                }
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
        for (unsigned i = 0; i < n; ++i) w->fibers[i]->fresh = true;
        L->abort.store(true);
        return false;
    }
}

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

void sig_handler(int sig, siginfo_t* si, void* uc);

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

// ---- device memory is out of the host code's reach ---------------------------------------------------
// On a GPU, host code that dereferences a device pointer crashes. The worker maps the arguments into one
// page-aligned shared-memory region that holds only device buffers; while the launcher's host code runs
// (ccsim_api_host_begin .. ccsim_api_host_end) that region is PROT_NONE, so a host read or write faults and
// the crash handler reports it as host code touching device memory. The runtime opens the region (one
// mprotect) for what legitimately touches device memory: a launch (kernels run only inside it: launches on
// created streams are run by the host thread at a synchronisation point, so no kernel runs while the host
// code does), cudaMemcpy/cudaMemset (and their queued forms), the cuBLAS subset's host-side reads. Only the
// launcher's host thread calls these, so the nesting count needs no lock.
// cudaMalloc memory lies on whole pages of its own (mmap) and is protected with the arguments (not managed
// memory: the host may touch it).
namespace {
struct DevPages { uintptr_t base; size_t bytes; void* raw; size_t len; };
uintptr_t g_dev_lo = 0, g_dev_hi = 0;   // the protected region (page-aligned)
std::vector<DevPages> g_dev_pages;      // cudaMalloc buffers (their pages)
bool g_dev_armed = false;               // the launcher's host code is running
int g_dev_open = 0;                     // nesting of runtime sections that touch device memory
void dev_protect(bool open) {
    int prot = open ? PROT_READ | PROT_WRITE : PROT_NONE;
    if (g_dev_hi > g_dev_lo) mprotect((void*)g_dev_lo, g_dev_hi - g_dev_lo, prot);
    for (const DevPages& d : g_dev_pages) mprotect((void*)d.base, d.bytes, prot);
}
// The fault at `addr` is host code touching protected device memory.
bool dev_fault(uintptr_t addr) {
    if (!g_dev_armed || g_dev_open) return false;
    if (addr - g_dev_lo < g_dev_hi - g_dev_lo) return true;
    for (const DevPages& d : g_dev_pages) if (addr - d.base < d.bytes) return true;
    return false;
}
// n bytes with `gap` accessible bytes on both sides: returns the start of the leading gap (null: no memory)
char* dev_pages_alloc(size_t n, size_t gap) {
    size_t body = (n + PAGE - 1) / PAGE * PAGE, len = body + 2 * gap;
    void* raw = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    g_dev_pages.push_back({(uintptr_t)raw + gap, body, raw, len});
    return (char*)raw;
}
void dev_pages_settle() {  // a new buffer, written (poison): protected now if the host code runs
    if (g_dev_armed && !g_dev_open && !g_dev_pages.empty())
        mprotect((void*)g_dev_pages.back().base, g_dev_pages.back().bytes, PROT_NONE);
}
void dev_pages_free(void* raw) {
    for (size_t i = 0; i < g_dev_pages.size(); ++i)
        if (g_dev_pages[i].raw == raw) {
            munmap(raw, g_dev_pages[i].len);
            g_dev_pages.erase(g_dev_pages.begin() + i);
            return;
        }
}
void dev_pages_unprotected(const void* base) {  // managed memory: the host may touch it
    for (size_t i = 0; i < g_dev_pages.size(); ++i)
        if (g_dev_pages[i].base == (uintptr_t)base) {
            mprotect((void*)base, g_dev_pages[i].bytes, PROT_READ | PROT_WRITE);
            g_dev_pages.erase(g_dev_pages.begin() + i);
            return;
        }
}
}  // namespace
API void ccsim_api_host_begin(void* lo, size_t n) {
    g_dev_lo = (uintptr_t)lo; g_dev_hi = (uintptr_t)lo + n; g_dev_open = 0; g_dev_armed = true;
    dev_protect(false);
}
API void ccsim_api_host_end(void) {
    if (g_dev_armed) dev_protect(true);
    g_dev_armed = false; g_dev_open = 0;
}
API void ccsim_rt_dev_open(void) { if (g_dev_open++ == 0 && g_dev_armed) dev_protect(true); }
API void ccsim_rt_dev_close(void) { if (g_dev_open > 0 && --g_dev_open == 0 && g_dev_armed) dev_protect(false); }
namespace {
struct DevOpen {
    bool on;
    explicit DevOpen(bool on_ = true) : on(on_) { if (on) ccsim_rt_dev_open(); }
    ~DevOpen() { if (on) ccsim_rt_dev_close(); }
};
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
    if (t_fiber && g_checked) t_fiber->w->L->fenced.store(true, std::memory_order_relaxed);
}

API void ccsim_rt_trap(const char* file, int line) {
    Fiber* f = t_fiber;
    if (f) fail_here("assert", "KernelError " + where(f->w->L, f->w->bidx) + ": " + thr(f) + " executed __trap() at " + file + ":" + std::to_string(line) + ".", file, line, 0);
    abort();
}

// Checked mode keeps a GShadow per word of every registered buffer (zero pages until touched).
static void shadow_free(Buffer& b) {
    if (b.sh) munmap(b.sh, b.shbytes);
    b.sh = nullptr; b.shbytes = 0;
}
static void shadow_alloc(Buffer& b) {
    shadow_free(b);
    if (!g_checked || !b.bytes) return;
    size_t sz = ((b.bytes + 3) / 4 * sizeof(GShadow) + PAGE - 1) & ~(PAGE - 1);
    void* m = mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return;   // no shadow: the buffer is still bounds-checked
    b.sh = (GShadow*)m; b.shbytes = sz;
}

static void register_buffer(const void* p, size_t bytes, const char* name, size_t elem, bool track_init) {
    if (!p) return;
    std::lock_guard<std::mutex> lk(g_buf_mu);
    int n = g_nbufs.load();
    for (int i = 0; i < n; ++i)
        if (g_bufs[i].base == (uintptr_t)p) {   // re-registration updates in place
            g_bufs[i].bytes = bytes; g_bufs[i].elem = elem;
            snprintf(g_bufs[i].name, sizeof g_bufs[i].name, "%s", name ? name : "buffer");
            g_bufs[i].track_init = track_init;
            shadow_alloc(g_bufs[i]);
            return;
        }
    int slot = n < 256 ? n : (int)(((uintptr_t)p >> 6) % 256);
    Buffer& b = g_bufs[slot];
    if (n >= 256) shadow_free(b);
    b.base = (uintptr_t)p; b.bytes = bytes; b.elem = elem ? elem : 1;
    snprintf(b.name, sizeof b.name, "%s", name ? name : "buffer");
    b.track_init = track_init;
    b.sh = nullptr; b.shbytes = 0;
    shadow_alloc(b);
    if (n < 256) g_nbufs.store(n + 1, std::memory_order_release);
}

// Tensors from Python, pinned host memory, managed memory: counted as initialised.
API void ccsim_rt_register(const void* p, size_t bytes, const char* name, size_t elem) {
    register_buffer(p, bytes, name, elem, false);
}

// Host-side writes into cudaMalloc memory (cudaMemcpy, cudaMemset) initialise it for initcheck.
static void mark_initialised(const void* p, size_t n) {
    if (!g_checked || !n) return;
    uintptr_t a = (uintptr_t)p;
    int nb = g_nbufs.load();
    for (int i = 0; i < nb; ++i) {
        Buffer& b = g_bufs[i];
        if (!b.sh || !b.track_init || a - b.base >= b.bytes) continue;
        uintptr_t end = std::min(a + n, b.base + b.bytes);
        for (uintptr_t x = a; x < end; ++x) b.sh[(x - b.base) / 4].init |= (uint8_t)(1u << ((x - b.base) % 4));
        return;
    }
}

// Forget a buffer; true if it was registered under a name starting with `prefix`.
static bool unregister(const void* p, const char* prefix) {
    std::lock_guard<std::mutex> lk(g_buf_mu);
    int n = g_nbufs.load();
    bool found = false;
    for (int i = 0; i < n; ++i)
        if (g_bufs[i].base == (uintptr_t)p && strncmp(g_bufs[i].name, prefix, strlen(prefix)) == 0) {
            g_bufs[i].base = 0; g_bufs[i].bytes = 0; found = true;
            shadow_free(g_bufs[i]);
        }
    return found;
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

// ---- host API --------------------------------------------------------------------------------------
API cudaError_t ccsim_cudaMalloc(void** p, size_t n, int line) {
    // a gap of unregistered memory on both sides makes small overruns land outside every buffer
    size_t gap = 4096;
    char* raw = dev_pages_alloc(n, gap);
    if (!raw) return (cudaError_t)(g_last_cuda_error = cudaErrorMemoryAllocation);
    char* base = raw + gap;
    std::memcpy(base - 16, &raw, sizeof raw);
    std::memset(base, 0xFF, n);  // like the harness's poison: unwritten outputs read as NaN
    char name[64]; snprintf(name, sizeof name, "cudaMalloc buffer (line %d)", line);
    register_buffer(base, n, name, 1, true);
    dev_pages_settle();
    *p = base;
    return cudaSuccess;
}
API cudaError_t ccsim_cudaMallocManaged(void** p, size_t n) {
    cudaError_t e = ccsim_cudaMalloc(p, n, 0);
    if (e == cudaSuccess) {  // the host may write managed memory directly: count it as initialised
        std::lock_guard<std::mutex> lk(g_buf_mu);
        for (int i = 0; i < g_nbufs.load(); ++i) if (g_bufs[i].base == (uintptr_t)*p) g_bufs[i].track_init = false;
        dev_pages_unprotected(*p);
    }
    return e;
}
extern "C" void ccsim_rt_sync_all(void);
API cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    ccsim_rt_sync_all();  // a synchronisation point (ccsim_host_api.h): queued work may still use the buffer
    // only what cudaMalloc returned (and not freed yet) may be freed: anything else is an invalid value
    if (!unregister(p, "cudaMalloc buffer")) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    char* raw; std::memcpy(&raw, (char*)p - 16, sizeof raw);
    dev_pages_free(raw);
    return cudaSuccess;
}
// Pinned host memory is mapped into the device's address space on real GPUs: kernels may use it.
API cudaError_t cudaMallocHost(void** p, size_t n) {
    *p = malloc(n ? n : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    ccsim_rt_register(*p, n, "cudaMallocHost buffer", 1);
    return cudaSuccess;
}
API cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    if (!unregister(p, "cudaMallocHost buffer")) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    free(p);
    return cudaSuccess;
}
API cudaError_t cudaGetLastError(void) { cudaError_t e = (cudaError_t)g_last_cuda_error; g_last_cuda_error = 0; return e; }
API cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)g_last_cuda_error; }
API const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorIllegalState: return "cudaErrorIllegalState";
        case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
        case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
        case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
        default: return "cudaErrorUnknown";
    }
}
API const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureUnjoined: return "capture was not joined back to the origin stream";
        case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
        case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
        default: return "unknown error";
    }
}
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

enum MemKind { MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE };
MemKind mem_kind(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int nb = g_nbufs.load();
    for (int i = 0; i < nb; ++i) {
        const Buffer& b = g_bufs[i];
        if (!b.base || a - b.base >= (b.bytes ? b.bytes : 1)) continue;
        if (!strncmp(b.name, "cudaMallocHost", 14) || !strncmp(b.name, "cudaHostRegister", 16)) return MEM_PINNED;
        return MEM_DEVICE;
    }
    return MEM_PAGEABLE;
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
// ---- host work (issue 36): results are computed by kernels, not by the launcher's host code --------------
// On a GPU the host code of a launcher can read the tensors it is given only by copying them into host memory
// (cudaMemcpy D2H and its async, 2-D and symbol forms); on the simulator the arguments are out of the host code's
// reach (PROT_NONE) outside those calls too. So once such a copy has brought argument data (or a device copy of
// it) into host-readable memory, whatever changes an argument afterwards may have been computed by the host: a
// host-to-device copy of its answer, or a kernel launched with it as a scalar. The arguments are snapshotted at
// that moment and compared when the launcher returns (check_host_work); a changed byte is reported.
// Not seen: a kernel that first copies the input into scratch or pinned memory, which the host then reads.
struct ArgSnap { uintptr_t base; size_t bytes, elem; std::string name; std::vector<unsigned char> data; };
std::vector<ArgSnap> g_snap;                // the arguments when their data first reached host memory (this call)
std::vector<Range> g_arg_copies;            // device ranges that hold copies of argument data (D2D copies)
bool g_host_read = false;
bool g_allow_host_reads = false;            // CUDA_COURSE_SIM_ALLOW_HOST_READS=1: the check is off (API tests)
uintptr_t g_host_read_pc = 0;
const char* g_host_read_call = "";
char g_launcher[128] = "";

bool in_args(uintptr_t a, size_t n) {      // the worker's mapping holds the launcher's arguments, nothing else
    return g_dev_hi > g_dev_lo && n && a < g_dev_hi && a + n > g_dev_lo;
}
bool host_readable(const void* p) {         // pageable, pinned or managed memory (and __device__ symbols)
    if (mem_kind(p) != MEM_DEVICE) return true;
    int nb = g_nbufs.load();
    for (int i = 0; i < nb; ++i) {
        const Buffer& b = g_bufs[i];
        if (b.base && (uintptr_t)p - b.base < (b.bytes ? b.bytes : 1))
            return !strncmp(b.name, "cudaMalloc buffer (line 0)", 26);   // cudaMallocManaged's
    }
    return false;
}
void note_copy(void* dst, const void* src, size_t n, void* ra, const char* call) {
    uintptr_t s = (uintptr_t)src, d = (uintptr_t)dst;
    bool from_args = in_args(s, n);
    for (const Range& r : g_arg_copies) from_args = from_args || (n && s < r.hi && s + n > r.lo);
    if (!from_args || in_args(d, n)) return;
    if (!host_readable(dst)) { g_arg_copies.push_back({d, d + n}); return; }
    if (g_host_read) return;
    g_host_read = true; g_host_read_pc = rel(ra); g_host_read_call = call;
    DevOpen open;
    int nb = g_nbufs.load();
    for (int i = 0; i < nb; ++i) {
        const Buffer& b = g_bufs[i];
        if (!b.base || !in_args(b.base, b.bytes)) continue;
        g_snap.push_back({b.base, b.bytes, b.elem ? b.elem : 1, b.name,
                          std::vector<unsigned char>((const unsigned char*)b.base, (const unsigned char*)b.base + b.bytes)});
    }
}
// The launcher returned and its queued work ran: did an argument change after its data reached host memory?
void check_host_work() {
    if (!g_host_read || g_has_err.load() || g_allow_host_reads) return;
    DevOpen open;
    for (const ArgSnap& a : g_snap) {
        const unsigned char* now = (const unsigned char*)a.base;
        for (size_t k = 0; k < a.bytes; ++k) {
            if (now[k] == a.data[k]) continue;
            std::string msg = std::string("KernelError: launcher ") + (g_launcher[0] ? g_launcher : "(unknown)") +
                " changed its argument " + a.name + " (element " + std::to_string(k / a.elem) + ") after its host code "
                "copied input data into host memory (" + g_host_read_call + " at " + pctok(g_host_read_pc) + "): the "
                "result was computed on the host, not by a kernel (whatever changes an argument after that point, a "
                "host-to-device copy of the host's answer or a kernel launched with it, counts as host work). Compute "
                "the result in a kernel that reads the input on the device; a launcher must not copy its inputs to "
                "the host to work on them.";
            set_error("host-work", msg, nullptr, nullptr, nullptr, nullptr, 0, g_host_read_pc);
            return;
        }
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

// Pinned memory registered from an existing host allocation (cudaHostRegister) counts as pinned.
API cudaError_t cudaHostRegister(void* p, size_t n, unsigned) {
    if (!p || !n) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    ccsim_rt_register(p, n, "cudaHostRegister buffer", 1);
    return cudaSuccess;
}
API cudaError_t cudaHostUnregister(void* p) {
    return unregister(p, "cudaHostRegister buffer") ? cudaSuccess : (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
}
// Mapped pinned memory: on the simulator the device address is the host address (as under UVA).
API cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned) {
    if (!dev || mem_kind(host) != MEM_PINNED) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    *dev = host;
    return cudaSuccess;
}

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

API cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
API cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
API cudaError_t cudaSetDevice(int) { return cudaSuccess; }
API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    ccsim::h100_properties(p);  // the modelled GPU's numbers (ccsim_host_api.h cites each)
    return cudaSuccess;
}

API cudaError_t cudaDeviceGetAttribute(int* v, enum cudaDeviceAttr a, int d) {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, d);
    switch (a) {
        case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: *v = 1024; break;
        case cudaDevAttrMaxBlockDimY: *v = 1024; break;
        case cudaDevAttrMaxBlockDimZ: *v = 64; break;
        case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
        case cudaDevAttrMaxGridDimY: *v = 65535; break;
        case cudaDevAttrMaxGridDimZ: *v = 65535; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrWarpSize: *v = 32; break;
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
        default: *v = 0; return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

// ---- worker-facing API -----------------------------------------------------------------------------
namespace {
int phdr_cb(struct dl_phdr_info* info, size_t, void*) {
    if (info->dlpi_addr != g_base) return 0;
    for (int i = 0; i < info->dlpi_phnum && g_nimage < 16; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        g_image[g_nimage].lo = g_base + ph.p_vaddr;
        g_image[g_nimage].hi = g_base + ph.p_vaddr + ph.p_memsz;
        g_nimage++;
    }
    return 1;
}

void append_num(char*& p, unsigned long long v) {
    char t[24]; int n = 0;
    do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = t[--n];
}
void append_raw(char*& p, const char* s, char* end) { while (s && *s && p < end - 8) *p++ = *s++; }
void append_str(char*& p, const char* s, char* end) { while (s && *s && p < end - 8) { char c = *s++; if (c == '"' || c == '\\' || (unsigned char)c < 0x20) c = '\''; *p++ = c; } }

// Crash and status reports are written from signal handlers: async-signal-safe formatting only.
void write_where(char*& p, char* end, Fiber* f) {
    Launch* L = f ? f->w->L : g_cur_launch;
    append_raw(p, ",\"kernel\":\"", end); append_str(p, L ? L->name : "", end); append_raw(p, "\"", end);
    if (f) {
        append_raw(p, ",\"block\":[", end); append_num(p, f->w->bidx.x); *p++ = ','; append_num(p, f->w->bidx.y); *p++ = ','; append_num(p, f->w->bidx.z);
        append_raw(p, "],\"thread\":[", end); append_num(p, f->v.ti.x); *p++ = ','; append_num(p, f->v.ti.y); *p++ = ','; append_num(p, f->v.ti.z);
        *p++ = ']';
    }
}

// Host code touched protected device memory (see "device memory is out of the host code's reach"): say so,
// whether it wrote (x86-64 page-fault error code, bit 1), the argument it hit, and, when the fault is in a
// function outside the module (libc's memcpy), the module's caller from the top of the stack.
void dev_fault_report(char*& p, char* end, uintptr_t addr, void* ucv) {
    append_raw(p, ",\"host_device\":true", end);
#if defined(__x86_64__)
    const greg_t* gr = ((ucontext_t*)ucv)->uc_mcontext.gregs;
    append_raw(p, ",\"write\":", end); append_str(p, (gr[REG_ERR] & 2) ? "true" : "false", end);
    uintptr_t pc = (uintptr_t)gr[REG_RIP], ra = *(const uintptr_t*)gr[REG_RSP];
    bool in_module = false, ra_in_module = false;
    for (int i = 0; i < g_nimage; ++i) {
        in_module = in_module || pc - g_image[i].lo < g_image[i].hi - g_image[i].lo;
        ra_in_module = ra_in_module || ra - g_image[i].lo < g_image[i].hi - g_image[i].lo;
    }
    // (+1: the symbolizer takes pcs as return addresses and looks up the byte before; this one faulted itself)
    if (in_module) { append_raw(p, ",\"fault_pc\":", end); append_num(p, pc - g_base + 1); }
    else if (ra_in_module) { append_raw(p, ",\"fault_pc\":", end); append_num(p, ra - g_base); }
#else
    (void)ucv;
#endif
    int nb = g_nbufs.load();
    for (int i = 0; i < nb; ++i) {
        const Buffer& b = g_bufs[i];
        if (b.base && addr - b.base < (b.bytes ? b.bytes : 1)) {
            append_raw(p, ",\"buffer\":\"", end); append_str(p, b.name, end); append_raw(p, "\"", end);
            break;
        }
    }
}

void sig_handler(int sig, siginfo_t* si, void* ucv) {
    char buf[2048]; char* p = buf; char* end = buf + sizeof buf;
    Fiber* f = t_fiber;
    uintptr_t pc = 0;
#if defined(__x86_64__)
    pc = (uintptr_t)((ucontext_t*)ucv)->uc_mcontext.gregs[REG_RIP];
#endif
    (void)ucv;
    uintptr_t addr = (uintptr_t)si->si_addr;
    bool overflow = f && addr >= f->base + 2 * PAGE && addr < f->base + STACK_LO;
#if defined(__x86_64__)
    // a frame larger than the guard page skips it: the stack pointer itself has left the stack
    uintptr_t rsp = (uintptr_t)((ucontext_t*)ucv)->uc_mcontext.gregs[REG_RSP];
    if (f && (rsp < f->base + STACK_LO || rsp > f->base + REGION)) overflow = true;
#endif
    append_raw(p, "{\"kind\":\"crash\",\"signal\":", end); append_num(p, (unsigned)sig);
    append_raw(p, ",\"fault_addr\":", end); append_num(p, addr);
    append_raw(p, ",\"pc\":", end); append_num(p, pc >= g_base ? pc - g_base : 0);
    append_raw(p, ",\"in_kernel\":", end); append_str(p, f ? "true" : "false", end);
    append_raw(p, ",\"stack_overflow\":", end); append_str(p, overflow ? "true" : "false", end);
    write_where(p, end, f);
    if (!f && dev_fault(addr)) dev_fault_report(p, end, addr, ucv);
    append_raw(p, "}\n", end);
    report(buf, (size_t)(p - buf));
    _exit(3);
}

void status_handler(int sig, siginfo_t*, void* ucv) {
    // timeout: say which kernel and which CUDA thread was running, and where
    Fiber* f = t_fiber;
    if (!f) {  // forward to a worker thread that runs a fiber, so its program counter can be read
        for (int i = 0; i < 64; ++i)
            if (g_cur_fiber[i] && g_thr_known[i]) { pthread_kill(g_thr[i], sig); return; }
    }
    char buf[2048]; char* p = buf; char* end = buf + sizeof buf;
    append_raw(p, "{\"kind\":\"timeout\"", end);
#if defined(__x86_64__)
    if (f) {
        uintptr_t pc = (uintptr_t)((ucontext_t*)ucv)->uc_mcontext.gregs[REG_RIP];
        append_raw(p, ",\"pc\":", end); append_num(p, pc >= g_base ? pc - g_base + 1 : 0);
        uintptr_t lp = (uintptr_t)f->last_pc;
        append_raw(p, ",\"pc2\":", end); append_num(p, lp >= g_base ? lp - g_base : 0);
    }
#endif
    (void)ucv;
    write_where(p, end, f);
    if (f && (f->state == F_BARRIER || f->state == F_WARP)) { append_raw(p, ",\"line\":", end); append_num(p, (unsigned)f->wline); }
    append_raw(p, "}\n", end);
    report(buf, (size_t)(p - buf));
}
}  // namespace

API void ccsim_api_init(int checked, int order, unsigned seed, int report_fd) {
    g_checked = checked != 0;
    g_order = order; g_seed = seed;
    if (report_fd >= 0) g_report_fd = report_fd;
    g_worker_pid = getpid();
    const char* ahr = getenv("CUDA_COURSE_SIM_ALLOW_HOST_READS");
    g_allow_host_reads = ahr && *ahr && strcmp(ahr, "0") != 0;
    Dl_info di;
    if (dladdr((void*)&ccsim_api_init, &di)) g_base = (uintptr_t)di.dli_fbase;
    g_nimage = 0;
    dl_iterate_phdr(phdr_cb, nullptr);
    setvbuf(stdout, nullptr, _IOLBF, 0);
    init_once();
}

API void ccsim_api_install_signals(void) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sig_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr); sigaction(SIGBUS, &sa, nullptr); sigaction(SIGFPE, &sa, nullptr);
    sigaction(SIGILL, &sa, nullptr); sigaction(SIGABRT, &sa, nullptr); sigaction(SIGTRAP, &sa, nullptr);
    struct sigaction su;
    std::memset(&su, 0, sizeof su);
    su.sa_sigaction = status_handler;
    su.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigaction(SIGUSR1, &su, nullptr);
    my_worker();  // alternate signal stack on the calling thread
}

API void ccsim_api_begin_call(void) {
    {
        std::lock_guard<std::mutex> lk(g_prof_mu);
        g_prof_launches.clear();
        g_trace_n.store(0);
    }
    std::lock_guard<std::mutex> lk(g_err_mu);
    g_has_err.store(false);
    g_err[0] = 0;
    g_last_cuda_error = 0;
    g_host_read = false; g_snap.clear(); g_arg_copies.clear(); g_launcher[0] = 0;
}
// The generated entry point names the launcher it calls (for the host-work report).
API void ccsim_rt_launcher_name(const char* name) { snprintf(g_launcher, sizeof g_launcher, "%s", name ? name : ""); }
// cudaMemcpyToSymbol/FromSymbol (ccsim.h): __device__ symbols are host globals on the simulator.
API void ccsim_rt_note_symbol_copy(void* dst, const void* src, size_t n) { note_copy(dst, src, n, __builtin_return_address(0), "cudaMemcpyToSymbol"); }

API void ccsim_api_clear_buffers(void) {
    std::lock_guard<std::mutex> lk(g_buf_mu);
    int n = g_nbufs.load();
    int keep = 0;
    for (int i = 0; i < n; ++i) {  // cudaMalloc allocations outlive a call; the tensors passed in do not
        if (g_bufs[i].base && strncmp(g_bufs[i].name, "cudaMalloc", 10) == 0) g_bufs[keep++] = g_bufs[i];
        else shadow_free(g_bufs[i]);
    }
    g_nbufs.store(keep);
}

API const char* ccsim_api_error(void) { return ccsim_rt_error_json(); }

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
// Header code that builds an error message (std::string on the heap) inside a kernel: no access checks meanwhile.
API void ccsim_api_quiet(int delta) { t_in_rt += delta; }
API void ccsim_api_set_error(const char* kind, const char* msg) { set_error(kind, msg, nullptr, nullptr, nullptr, nullptr, 0, 0); }
API unsigned long ccsim_api_base(void) { return (unsigned long)g_base; }

#include "ccsim_hopper_rt.h"  // [hopper hook] Hopper's asynchronous machinery (mbarrier, TMA, wgmma)
