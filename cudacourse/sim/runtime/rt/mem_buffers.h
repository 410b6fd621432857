// rt/mem_buffers.h - part of ccsim_rt.cpp. Memory and checks: the device memory itself.
//
// Device memory is out of the host code's reach while a launcher's host code runs (the argument mapping and
// cudaMalloc pages are PROT_NONE; DevOpen opens them for kernels, copies and fills). The table of registered
// buffers (tensors from Python, cudaMalloc, pinned and managed memory) with checked mode's shadows, the marking of
// host-written cudaMalloc bytes as initialised, and which kind of memory a pointer is (pageable, pinned, device).
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

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

namespace {
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
}  // namespace
