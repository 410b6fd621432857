// hostwork.cu - the cuda backend's host-work check (issue 36): results are computed by kernels, not by the
// launcher's host code. The GPU twin of the simulator's check (cudacourse/sim/runtime/rt/mem_host_work.h).
//
// Linked into every kernel-only library the cuda backend builds (cuda_backend.build_cuda), with the linker's
// --wrap for the copy calls below: the learner's calls of cudaMemcpy & co. reach __wrap_cudaMemcpy here, which
// does the copy (__real_cudaMemcpy, the static cudart's) and notes it. The learner's object may not name
// __real_*, __wrap_*, cc_hw_*, driver calls (cu*), the dl* family or the copy calls that are not wrapped: the
// build refuses such a file (cuda_backend._refused_symbols), so the copies cannot go around these wrappers.
//
// A checked call (the process that loaded the library calls cc_hw_begin with the launcher's buffers, runs the
// launcher, synchronises, then asks cc_hw_end): once a copy has brought argument data (or a device copy of it)
// into host-readable memory, every argument is snapshotted; an argument that differs when the launcher's work has
// finished was changed after the host could read its inputs (a host-to-device copy of the host's answer, or a
// kernel launched with it as a scalar): host work. Timed calls are not checked (no cc_hw_begin): the wrappers
// then cost one branch.
// Not seen (as on the simulator): a kernel that copies the input into scratch or mapped host memory that the host
// then reads; a library that finds the real copy functions by reading its own ELF symbol tables.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
cudaError_t __real_cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t __real_cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t __real_cudaMemcpy2D(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind);
cudaError_t __real_cudaMemcpy2DAsync(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t __real_cudaMemcpyToSymbol(const void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t __real_cudaMemcpyToSymbolAsync(const void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t __real_cudaMemcpyFromSymbol(void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t __real_cudaMemcpyFromSymbolAsync(void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t __real_cudaGetDriverEntryPoint(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*);
cudaError_t __real_cudaGetDriverEntryPointByVersion(const char*, void**, unsigned int, unsigned long long,
                                                    cudaDriverEntryPointQueryResult*);
}

// The index of the first byte where a and b differ, atomically the least into *first (left as is where none). The
// check's own kernel, in every library: its name has the check's reserved prefix (no learner object may define or
// name a cc_hw_ symbol), so tools that list a library's kernels can tell it from the learner's.
extern "C" __global__ void cc_hw_first_difference(const unsigned char* a, const unsigned char* b, size_t n,
                                                  unsigned long long* first) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (a[i] != b[i]) { atomicMin(first, (unsigned long long)i); return; }
}

namespace {
struct Range { uintptr_t lo, hi; };
// An argument's bytes when its data first reached host memory: a device copy (`dev`: one device-to-device copy, then
// one comparison kernel at the end) or, where the GPU has no room for it, a host copy (`data`). The host copies
// cost a checked call two device-to-host copies of every argument into fresh pageable memory: 0.7 s of each call
// of lesson 07's pipeline_stage_in on 64M floats (H200), six of which ran in task 7.5's timed turn.
struct Snap { uintptr_t base; size_t bytes; void* dev; std::vector<unsigned char> data; };

bool g_on = false;                 // inside a checked call
bool g_read = false;               // argument data reached host-readable memory in this call
std::vector<Range> g_args;         // the launcher's buffers
std::vector<Range> g_copies;       // device ranges holding copies of argument data
std::vector<Snap> g_snap;          // the arguments when their data first reached host memory
char g_what[96] = "";              // the copy that did it

bool overlaps(const std::vector<Range>& v, uintptr_t a, size_t n) {
    for (const Range& r : v)
        if (n && r.hi > r.lo && a < r.hi && a + n > r.lo) return true;
    return false;
}

// The runtime's last error is the learner's (a trampoline returns it): a query of ours that fails clears the error
// it set, but only when none was pending before it, so a failed launch of the learner's is never cleared here.
struct KeepLastError {
    bool pending = cudaPeekAtLastError() != cudaSuccess;
    void ours_failed() const { if (!pending) (void)cudaGetLastError(); }
};

bool host_readable(const void* p) {  // pageable, pinned or managed: anything but plain device memory
    KeepLastError keep;
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        keep.ours_failed();
        return true;
    }
    return at.type != cudaMemoryTypeDevice;
}

const void* symbol_address(const void* sym, size_t off) {  // a __device__ symbol's address (null if unknown)
    KeepLastError keep;
    void* addr = nullptr;
    if (cudaGetSymbolAddress(&addr, sym) != cudaSuccess) {
        keep.ours_failed();
        return nullptr;
    }
    return (const char*)addr + off;
}

// Snapshot one argument: on the device when there is room, else on the host.
Snap snapshot(const Range& r) {
    KeepLastError keep;
    Snap sn{r.lo, r.hi - r.lo, nullptr, {}};
    if (!sn.bytes) return sn;
    if (cudaMalloc(&sn.dev, sn.bytes) == cudaSuccess &&
        __real_cudaMemcpy(sn.dev, (const void*)r.lo, sn.bytes, cudaMemcpyDeviceToDevice) == cudaSuccess)
        return sn;
    keep.ours_failed();
    if (sn.dev) cudaFree(sn.dev);
    sn.dev = nullptr;
    sn.data.resize(sn.bytes);
    __real_cudaMemcpy(sn.data.data(), (const void*)r.lo, sn.bytes, cudaMemcpyDeviceToHost);
    return sn;
}

// Where a snapshot and its argument now first differ (a byte offset), or -1 where they do not.
long long first_change(const Snap& sn) {
    if (!sn.bytes) return -1;
    KeepLastError keep;
    if (sn.dev) {
        unsigned long long* first = nullptr, found = ~0ull;
        bool ok = cudaMalloc(&first, sizeof found) == cudaSuccess &&
                  __real_cudaMemcpy(first, &found, sizeof found, cudaMemcpyHostToDevice) == cudaSuccess;
        if (ok) {
            cc_hw_first_difference<<<1024, 256>>>((const unsigned char*)sn.dev, (const unsigned char*)sn.base,
                                                   sn.bytes, first);
            ok = __real_cudaMemcpy(&found, first, sizeof found, cudaMemcpyDeviceToHost) == cudaSuccess;
        }
        if (first) cudaFree(first);
        if (!ok) keep.ours_failed();
        return ok && found != ~0ull ? (long long)found : -1;
    }
    std::vector<unsigned char> now(sn.bytes);
    if (__real_cudaMemcpy(now.data(), (const void*)sn.base, sn.bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        keep.ours_failed();
        return -1;
    }
    for (size_t k = 0; k < sn.bytes; ++k)
        if (now[k] != sn.data[k]) return (long long)k;
    return -1;
}

void drop_snapshots() {
    for (Snap& sn : g_snap)
        if (sn.dev) cudaFree(sn.dev);
    g_snap.clear();
}

// A copy of n bytes (a 2-D copy: its whole span) from src to dst was issued (and, for async ones, finished).
void note(void* dst, const void* src, size_t n, const char* call) {
    if (!g_on || g_read) return;
    uintptr_t s = (uintptr_t)src, d = (uintptr_t)dst;
    if (!(overlaps(g_args, s, n) || overlaps(g_copies, s, n)) || overlaps(g_args, d, n)) return;
    if (!host_readable(dst)) { g_copies.push_back({d, d + n}); return; }
    g_read = true;
    snprintf(g_what, sizeof g_what, "%s", call);
    (void)cudaDeviceSynchronize();
    for (const Range& r : g_args) g_snap.push_back(snapshot(r));
}

size_t span2d(size_t pitch, size_t width, size_t height) { return height ? pitch * (height - 1) + width : 0; }

// Driver entry points a graded file may ask for: the tensor-map encoders (TMA, lesson 05). Any other (cuMemcpy*,
// cuLaunchKernel, ...) would reach the driver around the wrappers above.
bool allowed_entry(const char* sym) {
    static const char* ok[] = {"cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col", "cuTensorMapReplaceAddress",
                               "cuTensorMapEncodeIm2colWide", "cuGetErrorString", "cuGetErrorName"};
    for (const char* o : ok)
        if (sym && !strcmp(sym, o)) return true;
    return false;
}
}  // namespace

extern "C" {
cudaError_t __wrap_cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
    cudaError_t e = __real_cudaMemcpy(d, s, n, k);
    note(d, s, n, "cudaMemcpy");
    return e;
}
cudaError_t __wrap_cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    cudaError_t e = __real_cudaMemcpyAsync(d, s, n, k, st);
    note(d, s, n, "cudaMemcpyAsync");
    return e;
}
cudaError_t __wrap_cudaMemcpy2D(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h, cudaMemcpyKind k) {
    cudaError_t e = __real_cudaMemcpy2D(d, dp, s, sp, w, h, k);
    if (w && h) note(d, s, span2d(sp, w, h) > span2d(dp, w, h) ? span2d(sp, w, h) : span2d(dp, w, h), "cudaMemcpy2D");
    return e;
}
cudaError_t __wrap_cudaMemcpy2DAsync(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h,
                                     cudaMemcpyKind k, cudaStream_t st) {
    cudaError_t e = __real_cudaMemcpy2DAsync(d, dp, s, sp, w, h, k, st);
    if (w && h) note(d, s, span2d(sp, w, h) > span2d(dp, w, h) ? span2d(sp, w, h) : span2d(dp, w, h),
                     "cudaMemcpy2DAsync");
    return e;
}
// To and from a __device__ symbol: device memory that is not an argument. A copy of argument data into one is
// tracked like a copy into scratch memory, and a copy out of it into host memory is then a host read.
cudaError_t __wrap_cudaMemcpyToSymbol(const void* sym, const void* s, size_t n, size_t off, cudaMemcpyKind k) {
    cudaError_t e = __real_cudaMemcpyToSymbol(sym, s, n, off, k);
    if (g_on && !g_read)
        if (const void* d = symbol_address(sym, off)) note((void*)d, s, n, "cudaMemcpyToSymbol");
    return e;
}
cudaError_t __wrap_cudaMemcpyToSymbolAsync(const void* sym, const void* s, size_t n, size_t off, cudaMemcpyKind k,
                                           cudaStream_t st) {
    cudaError_t e = __real_cudaMemcpyToSymbolAsync(sym, s, n, off, k, st);
    if (g_on && !g_read)
        if (const void* d = symbol_address(sym, off)) note((void*)d, s, n, "cudaMemcpyToSymbolAsync");
    return e;
}
cudaError_t __wrap_cudaMemcpyFromSymbol(void* d, const void* sym, size_t n, size_t off, cudaMemcpyKind k) {
    cudaError_t e = __real_cudaMemcpyFromSymbol(d, sym, n, off, k);
    if (g_on && !g_read)
        if (const void* s = symbol_address(sym, off)) note(d, s, n, "cudaMemcpyFromSymbol");
    return e;
}
cudaError_t __wrap_cudaMemcpyFromSymbolAsync(void* d, const void* sym, size_t n, size_t off, cudaMemcpyKind k,
                                             cudaStream_t st) {
    cudaError_t e = __real_cudaMemcpyFromSymbolAsync(d, sym, n, off, k, st);
    if (g_on && !g_read)
        if (const void* s = symbol_address(sym, off)) note(d, s, n, "cudaMemcpyFromSymbolAsync");
    return e;
}
// (the refusal both entry-point lookups give a name outside allowed_entry)
static cudaError_t refuse_entry(const char* call, const char* sym, void** fn, cudaDriverEntryPointQueryResult* status) {
    fprintf(stderr, "cudacourse: %s(\"%s\") refused: graded code may ask the driver only for the tensor-map "
            "encoders (cuTensorMapEncode*)\n", call, sym ? sym : "(null)");
    if (fn) *fn = nullptr;
    if (status) *status = cudaDriverEntryPointSymbolNotFound;
    return cudaErrorSymbolNotFound;
}
cudaError_t __wrap_cudaGetDriverEntryPoint(const char* sym, void** fn, unsigned long long flags,
                                           cudaDriverEntryPointQueryResult* status) {
    if (!allowed_entry(sym)) return refuse_entry("cudaGetDriverEntryPoint", sym, fn, status);
    return __real_cudaGetDriverEntryPoint(sym, fn, flags, status);
}
cudaError_t __wrap_cudaGetDriverEntryPointByVersion(const char* sym, void** fn, unsigned int version,
                                                    unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
    if (!allowed_entry(sym)) return refuse_entry("cudaGetDriverEntryPointByVersion", sym, fn, status);
    return __real_cudaGetDriverEntryPointByVersion(sym, fn, version, flags, status);
}

// The checking process's side. Begin a checked call over the launcher's n buffers [base, base + bytes).
int cc_hw_begin(int n, const unsigned long long* base, const unsigned long long* bytes) {
    g_args.clear(); g_copies.clear(); g_snap.clear();  // (cc_hw_end or cc_hw_abort emptied it)
    for (int i = 0; i < n; ++i)  // (an empty buffer keeps its place, so that cc_hw_end's index is the caller's)
        g_args.push_back({(uintptr_t)base[i], (uintptr_t)(base[i] + bytes[i])});
    g_read = false; g_what[0] = 0; g_on = true;
    return 0;
}
// After the launcher's work finished: -1 if no argument changed after its data reached host memory, else the
// index (in cc_hw_begin's order) of the first buffer that did, with the byte offset of the first change in *at.
int cc_hw_end(unsigned long long* at) {
    g_on = false;
    int found = -1;
    for (size_t i = 0; i < g_snap.size() && found < 0; ++i) {
        long long k = first_change(g_snap[i]);
        if (k >= 0) { found = (int)i; *at = (unsigned long long)k; }
    }
    drop_snapshots();
    g_copies.clear();
    return found;
}
// A checked call that ended early (its launch failed, or the GPU timed out): the check stops without reading the GPU.
// Device snapshots are forgotten, not freed: after a timeout the learner's kernel may still run, and cudaFree would
// wait for it (a hung notebook instead of the timeout's message). They are lost only with a failed call.
void cc_hw_abort() {
    g_on = false;
    g_snap.clear();
    g_copies.clear();
}
// The copy call that brought argument data into host memory in the last checked call ("" if none).
const char* cc_hw_copy() { return g_what; }
}
