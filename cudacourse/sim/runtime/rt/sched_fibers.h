// rt/sched_fibers.h - part of ccsim_rt.cpp. Scheduling (1 of 3): fibers.
//
// Every CUDA thread of a block is a fiber with a stack of its own in one region (control block, guard page,
// stack). The context switch (hand-written on x86-64, ucontext elsewhere), handing the CPU to the next runnable
// fiber of a pass, and stopping the calling CUDA thread for good (fiber_fail, fail_here: a report, then its
// block is abandoned).
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

namespace {
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

// Save the running context in (from_sp, from_uc), a fiber's or the scheduler's, and resume the one in (to_sp, to_uc);
// x86-64 keeps only the stack pointer (the registers are on the stack), elsewhere ucontext holds it all.
#if defined(__x86_64__)
#define CCSIM_SWITCH(from_sp, from_uc, to_sp, to_uc) ccsim_ctx_switch(&(from_sp), (to_sp))
#else
#define CCSIM_SWITCH(from_sp, from_uc, to_sp, to_uc) swapcontext(&(from_uc), &(to_uc))
#endif

// CUDA thread f runs on this OS thread from now on: the built-ins read its view, a timeout report names it.
inline void make_current(Worker* w, Fiber* f) {
    t_fiber = f;
    ccsim_cur_view = &f->v;
    threadIdx = f->v.ti;
    g_cur_fiber[w->id & 63] = f;
}

inline void switch_to_fiber(Worker* w, Fiber* f) {
    make_current(w, f);
    CCSIM_SWITCH(w->sched_sp, w->sched_uc, f->sp, f->uc);
    t_fiber = nullptr;
    ccsim_cur_view = nullptr;
    g_cur_fiber[w->id & 63] = nullptr;
}

inline void yield_to_sched(Fiber* f) {
    CCSIM_SWITCH(f->sp, f->uc, f->w->sched_sp, f->w->sched_uc);
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
        make_current(w, g);
        CCSIM_SWITCH(f->sp, f->uc, g->sp, g->uc);
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
}  // namespace
