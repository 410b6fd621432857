// rt/state.h - part of ccsim_rt.cpp: the records and the state every other part shares.
//
// The modelled GPU's limits, the record of a CUDA thread (Fiber), of an OS worker thread running blocks (Worker)
// and of a launch (Launch); the shadow records of shared memory (Shadow, Pending) and of registered buffers
// (GShadow, Buffer) that Worker and the buffer table hold; the runtime's globals (mode, thread order, report
// channel, the buffer table, the first error of a call); the built-ins' thread-local slots; small formatting
// helpers and set_error, which records the first error of a call as the JSON the Python side reads.
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

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
// Bits of an access's kind above its 0 read / 1 write / 2 atomic read-modify-write (check() in mem_hooks.h):
// ACC_SYNC a volatile or atomic load/store (a flag access), ACC_ORDERED an acquire load or release store,
// ACC_ATOMIC an atomic load/store (not a volatile one).
enum { ACC_SYNC = 8, ACC_ORDERED = 16, ACC_ATOMIC = 32 };

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
    // memory-model check (checked mode, mem_global.h): how many fences this thread has run, and the last flags
    // it read (volatile or atomic loads) that a thread of another block had stored, each with that thread's
    // fence count at the store; an entry counts only for the thread and launch in `owner` / `seq`
    uint32_t fences;
    struct Seen { uint32_t owner, seq, writer, my_fences; uint16_t wfences; uint8_t release, acquire;
                  uintptr_t word, pc; const struct Buffer* buf; } seen[4];
    uint8_t nseen;
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

// [hopper hooks] Hopper's asynchronous machinery (ccsim_hopper_rt.h, included at the end of ccsim_rt.cpp)
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
    uint16_t wfences;            // the writer's fence count at its store (memory-model check, mem_global.h)
    uint8_t wrel;                // 1: that store was a release store (__nv_atomic_store_n with a release order)
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
}  // namespace
