// rt/worker_api.h - part of ccsim_rt.cpp. The API the simulator's worker (sim/_worker.py) and the headers call.
//
// The module's image (to tell its own memory and pcs apart), crash and timeout reports written from signal
// handlers (async-signal-safe), ccsim_api_init / install_signals / begin_call / clear_buffers / error, and the
// headers' hooks (quiet, set_error, base).
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

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
// Header code that builds an error message (std::string on the heap) inside a kernel: no access checks meanwhile.
API void ccsim_api_quiet(int delta) { t_in_rt += delta; }
API void ccsim_api_set_error(const char* kind, const char* msg) { set_error(kind, msg, nullptr, nullptr, nullptr, nullptr, 0, 0); }
API unsigned long ccsim_api_base(void) { return (unsigned long)g_base; }
