// rt/mem_host_work.h - part of ccsim_rt.cpp. Memory and checks: results are computed by kernels (issue 36).
//
// Once a copy has brought argument data into host-readable memory, the arguments are snapshotted; a change
// afterwards (the host's answer copied back, a kernel launched with it as a scalar) is reported when the
// launcher returns (check_host_work).
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

namespace {
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
}  // namespace

// The generated entry point names the launcher it calls (for the host-work report).
API void ccsim_rt_launcher_name(const char* name) { snprintf(g_launcher, sizeof g_launcher, "%s", name ? name : ""); }
// cudaMemcpyToSymbol/FromSymbol (ccsim.h): __device__ symbols are host globals on the simulator.
API void ccsim_rt_note_symbol_copy(void* dst, const void* src, size_t n) { note_copy(dst, src, n, __builtin_return_address(0), "cudaMemcpyToSymbol"); }
