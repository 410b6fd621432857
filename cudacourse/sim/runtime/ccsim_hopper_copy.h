// ccsim_hopper_copy.h - the second part of ccsim_hopper_rt.h (runtime code, uninstrumented): tensor maps, TMA
// loads and stores, wgmma, setmaxnreg, elect. PTX ISA sections: see ccsim_hopper.h.
namespace {

const char* swz_name(unsigned s) { return s == 3 ? "128B" : s == 2 ? "64B" : s == 1 ? "32B" : "none"; }
unsigned swz_span(unsigned s) { return s == 3 ? 128 : s == 2 ? 64 : s == 1 ? 32 : 0; }
// The swizzled (physical) address of byte address a: the 16-byte chunk index (bits 4..) XOR the row within the
// pattern (bits 7..), 3/2/1 bits for 128B/64B/32B (cute Swizzle<3,4,3>, <2,4,3>, <1,4,3>).
inline uintptr_t swz(uintptr_t a, unsigned s) {
    if (!s) return a;
    const uintptr_t bits = s == 3 ? 7 : s == 2 ? 3 : 1;
    return a ^ (((a >> 7) & bits) << 4);
}

const TMap* tmap_of(Fiber* fb, const void* map, const char* f, int l) {
    const TMap* m = (const TMap*)map;
    if (!m || m->magic != TMAP_MAGIC) {
        RtGuard g;
        hop_fail("kernel", "passes a tensor map that cuTensorMapEncodeTiled did not make (or whose encoding failed): "
                 "check the return value of the map's creation on the host (cc_make_tmap_* returns false on bad "
                 "arguments) and pass the map as a __grid_constant__ kernel parameter.", f, l);
    }
    HB* h = hb();
    uintptr_t key = (uintptr_t)m->base ^ ((uintptr_t)m->box1 << 48);
    for (uintptr_t k : h->maps) if (k == key) return m;
    h->maps.push_back(key);
    // the whole tensor lies inside one buffer the kernel may touch (a tensor passed in, or cudaMalloc memory)
    uint64_t last = (m->dim1 - 1) * m->stride1 + m->dim0 * m->esize;
    int nb = g_nbufs.load();
    for (int i = 0; i < nb; ++i) {
        const Buffer& b = g_bufs[i];
        if (m->base >= b.base && m->base - b.base < b.bytes) {
            if (m->base - b.base + last <= b.bytes) return m;
            RtGuard g;
            hop_fail("out-of-bounds", "uses a tensor map of " + std::to_string(m->dim1) + " rows x " + std::to_string(m->dim0) +
                     " elements (row stride " + std::to_string(m->stride1) + " bytes) starting in buffer " + b.name +
                     ", but it covers " + std::to_string(m->base - b.base + last) + " bytes from the buffer's start, past "
                     "its " + std::to_string(b.bytes) + " bytes: check the rows, columns and stride given to "
                     "cuTensorMapEncodeTiled.", f, l);
        }
    }
    RtGuard g;
    hop_fail("out-of-bounds", "uses a tensor map whose global address " + hx(m->base) + " is not inside any buffer the "
             "kernel was given (a tensor argument or cudaMalloc memory).", f, l);
}

int issue_add(HB* h, const char* f, int l, int tid, int map) {
    h->issues.push_back(Issue{f, l, tid, map});
    return (int)h->issues.size() - 1;
}

// Checked mode: an async-proxy write (TMA load) of shared word i by thread `t`, issue `is`.
void async_write_check(Fiber* fb, HB* h, size_t i, unsigned t, const char* f, int l) {
    Worker* w = fb->w;
    AW& s = aw_at(h, i);
    uintptr_t a = (uintptr_t)w->arena + i * 4;
    for (int k = 0; k < 2; ++k) {
        unsigned who = k == 0 ? s.gwt : s.grt;
        if (!who) continue;
        unsigned src = who - 1;
        uint32_t stamp = k == 0 ? s.gwc : s.grc, pc = k == 0 ? s.gwpc : s.grpc;
        const char* did = k == 0 ? "wrote" : "read";
        if (!ordered(h, src, stamp, t)) {
            RtGuard g;
            hop_fail("race", "issues a TMA copy at " + lno(f, l) + " that overwrites " + smem_name(w, a) + ", which thread " +
                     std::to_string(src) + " " + did + " at " + pctok(pc) + " with nothing ordering that access before "
                     "this copy: the producer must wait until the consumers have released the stage (mbar_wait on the "
                     "barrier they arrive on when done with it) before refilling it.", f, l);
        }
        if (!fenced(h, src, stamp, t)) {
            RtGuard g;
            hop_fail("race", "issues a TMA copy at " + lno(f, l) + " that overwrites " + smem_name(w, a) + ", which thread " +
                     std::to_string(src) + " " + did + " with ordinary " + (k == 0 ? "stores" : "loads") + " at " + pctok(pc) +
                     " (the generic proxy), and that thread ran no fence.proxy.async between that access and the "
                     "synchronisation that hands the stage to this thread: the copy (the async proxy) may overtake it. "
                     "Call fence_async_smem() in every thread that touched the stage, after its last access and before "
                     "it arrives on the barrier that releases the stage. (PTX ISA: memory consistency model, proxies; "
                     "fence.proxy.async.)", f, l);
        }
    }
    if (s.tbar && !s.ark && !s.grt) {   // the previous copy's data was never read by anyone: the stage was not released
        RtGuard g;
        const Issue& is = h->issues[s.tissue];
        hop_fail("race", "issues a TMA copy at " + lno(f, l) + " that overwrites " + smem_name(w, a) + ", which the copy at " +
                 lno(is.f, is.l) + " filled for phase " + std::to_string(s.tphase) + " of " + bar_name(w, h, s.tbar - 1) +
                 " and which no thread has read yet: the producer refills a stage before its consumers have used and "
                 "released it. Wait on the barrier the consumers arrive on when they are done with the stage (mbar_wait "
                 "on 'empty', parity of the stage's previous use) before refilling it.", f, l);
    }
    if (s.ark && !async_read_done(h, s, t)) {
        RtGuard g;
        const Issue& is = h->issues[s.arissue];
        hop_fail("race", "issues a TMA copy at " + lno(f, l) + " that overwrites " + smem_name(w, a) + " while " +
                 (s.ark == 1 ? "the wgmma issued at " + lno(is.f, is.l) + " by warpgroup " + std::to_string(s.arw)
                             : "the TMA store issued at " + lno(is.f, is.l)) +
                 " may still read it: the consumer must retire that wgmma (wgmma_wait) before it releases the stage, and "
                 "the producer must wait for that release.", f, l);
    }
}

// Checked mode: an async-proxy read (TMA store source, wgmma operand) of shared word i by thread t.
void async_read_check(Fiber* fb, HB* h, size_t i, unsigned t, const char* op, const char* f, int l) {
    Worker* w = fb->w;
    AW& s = aw_at(h, i);
    uintptr_t a = (uintptr_t)w->arena + i * 4;
    if (s.tbar) {
        if (before_tma_fill(h, s, t)) {
            RtGuard g;
            hop_fail("race", before_phase_msg(w, h, s, t, std::string("reads (by ") + op + ")", smem_name(w, a), ""), f, l);
        }
        return;
    }
    if (s.gwt) {
        unsigned src = s.gwt - 1;
        if (!ordered(h, src, s.gwc, t)) {
            RtGuard g;
            hop_fail("race", "issues " + std::string(op) + " at " + lno(f, l) + " reading " + smem_name(w, a) + ", which thread " +
                     std::to_string(src) + " wrote at " + pctok(s.gwpc) + " with nothing ordering that write before this "
                     "read: put a barrier (__syncthreads(), warpgroup_sync) between the writes and the issue.", f, l);
        }
        if (!fenced(h, src, s.gwc, t)) {
            RtGuard g;
            hop_fail("race", "issues " + std::string(op) + " at " + lno(f, l) + " reading " + smem_name(w, a) + ", which thread " +
                     std::to_string(src) + " wrote with ordinary stores at " + pctok(s.gwpc) + " (the generic proxy), "
                     "without a fence.proxy.async after that store and before the barrier: the async proxy may read the "
                     "old bytes. Call fence_async_smem() in every writing thread after its stores, then the barrier. "
                     "(PTX ISA: memory consistency model, proxies; fence.proxy.async.)", f, l);
        }
        return;
    }
    const Shadow& gs = w->shadow[i];
    if (!(gs.init)) {
        RtGuard g;
        hop_fail("uninitialized-read", "issues " + std::string(op) + " at " + lno(f, l) + " reading " + smem_name(w, a) +
                 ", which nothing in this block has written (no store and no TMA copy): check the shared addresses "
                 "(descriptor start address, strides) and that the data was loaded there.", f, l);
    }
}

// Mark word i as written by a TMA copy (generic shadow: initialised, no generic writer in this interval).
void tma_mark(Fiber* fb, HB* h, size_t i, int bar1, uint32_t phase, int issue, uint32_t gy, uint32_t gx) {
    Worker* w = fb->w;
    Shadow& gs = w->shadow[i];
    if ((gs.flags & SH_WAIT) && !w->parked.empty()) {
        for (Fiber* r : w->parked) {
            if (!(word_bytes(w, i, r->park_a, r->park_size))) continue;
            RtGuard g;
            const Issue& is = h->issues[issue];
            std::string msg = "RaceError " + where(w->L, w->bidx) + ": " + thr(r) + " reads " + smem_name(w, r->park_a) +
                              " at " + pctok(r->park_pc) + " before the TMA copy that fills it (issued at " + lno(is.f, is.l) +
                              " by " + thr(fb) + ") has completed: wait for the copy's mbarrier phase (mbar_wait) "
                              "before reading the stage. (PTX ISA: mbarrier, phase completion.)";
            t_in_rt++;
            set_error("race", msg, w->L, &w->bidx, &r->v.ti, nullptr, 0, r->park_pc);
            fiber_fail(fb);
        }
    }
    gs.flags |= SH_INIT; gs.init = 0xF; gs.wm = 0; gs.w2m = 0;
    AW& s = aw_at(h, i);
    s.gwt = s.grt = 0; s.ark = 0;
    s.tbar = (uint16_t)bar1; s.tphase = phase; s.tissue = (uint32_t)issue; s.gy = gy; s.gx = gx;
}

}  // namespace

API CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* ptr,
                                    const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                    const cuuint32_t* elem_strides, CUtensorMapInterleave interleave,
                                    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill oob) {
    static const uint32_t sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
    if (!map || (unsigned)type > 12 || rank < 1 || rank > 5 || !dims || !box || !elem_strides) return CUDA_ERROR_INVALID_VALUE;
    if (rank > 2 || interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) {
        ccsim_api_set_error("unsupported", rank > 2 ? "cuTensorMapEncodeTiled: tensor maps of more than 2 dimensions are "
                            "not modelled by the CPU simulator (run this file on a GPU)" :
                            "cuTensorMapEncodeTiled: interleaved tensor maps are not modelled by the CPU simulator (run "
                            "this file on a GPU)");
        return CUDA_ERROR_INVALID_VALUE;
    }
    const uint32_t es = sizes[type];
    // the CUDA Driver API's requirements (cuTensorMapEncodeTiled): 16-byte aligned address, strides multiples of 16
    // bytes below 2^40, box sizes 1..256 with the inner box a multiple of 16 bytes, element strides 1..8
    if ((uintptr_t)ptr % 16) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < rank; ++i) {
        if (dims[i] == 0 || dims[i] > (1ull << 32)) return CUDA_ERROR_INVALID_VALUE;
        if (box[i] == 0 || box[i] > 256 || elem_strides[i] == 0 || elem_strides[i] > 8) return CUDA_ERROR_INVALID_VALUE;
    }
    if ((box[0] * es) % 16) return CUDA_ERROR_INVALID_VALUE;
    uint64_t stride1 = rank == 2 ? strides[0] : dims[0] * es;
    if (rank == 2 && (stride1 % 16 || stride1 >= (1ull << 40) || stride1 < dims[0] * es)) return CUDA_ERROR_INVALID_VALUE;
    if (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && box[0] * es > swz_span((unsigned)swizzle)) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < rank; ++i)
        if (elem_strides[i] != 1) {
            ccsim_api_set_error("unsupported", "cuTensorMapEncodeTiled: element strides other than 1 are not modelled by "
                                "the CPU simulator (run this file on a GPU)");
            return CUDA_ERROR_INVALID_VALUE;
        }
    if (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && box[0] * es != swz_span((unsigned)swizzle)) {
        ccsim_api_set_error("unsupported", "cuTensorMapEncodeTiled: a swizzled box whose inner dimension is narrower than "
                            "the swizzle span is not modelled by the CPU simulator (make boxDim[0] * element size equal "
                            "the span: 128 bytes for CU_TENSOR_MAP_SWIZZLE_128B)");
        return CUDA_ERROR_INVALID_VALUE;
    }
    TMap m{};
    m.magic = TMAP_MAGIC; m.dtype = (uint32_t)type; m.rank = rank; m.esize = es;
    m.base = (uint64_t)(uintptr_t)ptr; m.dim0 = dims[0]; m.dim1 = rank == 2 ? dims[1] : 1; m.stride1 = stride1;
    m.box0 = box[0]; m.box1 = rank == 2 ? box[1] : 1; m.swizzle = (uint32_t)swizzle; m.oob = (uint32_t)oob;
    m.isfloat = type == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ||
                type == CU_TENSOR_MAP_DATA_TYPE_FLOAT64 || type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ||
                type >= CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ;
    std::memset(map, 0, sizeof *map);
    std::memcpy(map, &m, sizeof m);
    return CUDA_SUCCESS;
}

namespace {
// One element's bytes for an out-of-bounds position of a load: zero, or NaN with FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA.
void oob_fill(const TMap& m, unsigned char* p) {
    std::memset(p, 0, m.esize);
    if (!(m.oob && m.isfloat)) return;
    if (m.dtype == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16) { uint16_t v = 0x7fc0; std::memcpy(p, &v, 2); }
    else if (m.esize == 2) { uint16_t v = 0x7e00; std::memcpy(p, &v, 2); }
    else if (m.esize == 4) { uint32_t v = 0x7fc00000u; std::memcpy(p, &v, 4); }
    else { uint64_t v = 0x7ff8000000000000ull; std::memcpy(p, &v, 8); }
}
void need_box_dst(Fiber* fb, const TMap& m, uintptr_t a, const char* what, const char* f, int l) {
    if (a % 128) {
        RtGuard g;
        hop_fail("misaligned", std::string(what) + " " + hx(a) + " is not 128-byte aligned: a bulk tensor copy needs a "
                 "128-byte aligned shared-memory address (with the 128-byte swizzle, align tiles to 1024 bytes so that "
                 "the swizzle pattern starts at row 0).", f, l);
    }
    need_smem(fb, a, (size_t)m.box0 * m.esize * m.box1, what, f, l);
}
}  // namespace

API void ccsim_hop_tma_load(void* dst, const void* map, int c0, int c1, void* bar, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    Worker* w = fb->w;
    const TMap& m = *tmap_of(fb, map, f, l);
    need_box_dst(fb, m, (uintptr_t)dst, "the TMA load's shared-memory destination", f, l);
    int bi = bar_index(fb, bar, f, l, false);
    need_init_visible(fb, bi, f, l);
    MBar& b = h->bars[bi];
    unsigned t = (unsigned)fb->tid;
    if (g_checked && !fenced(h, (unsigned)b.init_tid, b.init_clk, t)) {
        RtGuard g;
        hop_fail("race", "issues a TMA copy at " + lno(f, l) + " that completes on " + bar_name(w, h, bi) + ", but the "
                 "initialising thread ran no fence_barrier_init() (fence.proxy.async) after mbar_init and before the "
                 "__syncthreads(): the copy engine (the async proxy) may not see the initialised barrier. (CUDA "
                 "Programming Guide, TMA example: make the initialised barrier visible to the async proxy.)", f, l);
    }
    int is = issue_add(h, f, l, fb->tid, 0);
    const unsigned rowb = m.box0 * m.esize, chunks = rowb / 16;
    const uintptr_t d0 = (uintptr_t)dst;
    unsigned char buf[16];
    for (unsigned y = 0; y < m.box1; ++y) {
        const long long gy = (long long)c1 + y;
        for (unsigned c = 0; c < chunks; ++c) {
            for (unsigned e = 0; e < 16 / m.esize; ++e) {
                const long long gx = (long long)c0 + c * (16 / m.esize) + e;
                unsigned char* p = buf + e * m.esize;
                if (gy >= 0 && gy < (long long)m.dim1 && gx >= 0 && gx < (long long)m.dim0)
                    std::memcpy(p, (const void*)(uintptr_t)(m.base + gy * m.stride1 + gx * m.esize), m.esize);
                else
                    oob_fill(m, p);
            }
            const uintptr_t ua = d0 + y * rowb + c * 16, pa = swz(ua, m.swizzle);
            const size_t word = (pa - (uintptr_t)w->arena) / 4;
            if (g_checked && h->aw) {
                for (unsigned q = 0; q < 4; ++q) async_write_check(fb, h, word + q, t, f, l);
                for (unsigned q = 0; q < 4; ++q)
                    tma_mark(fb, h, word + q, bi + 1, b.completed, is, (uint32_t)(gy + 0x40000000ll),
                             (uint32_t)((long long)c0 * m.esize + c * 16 + q * 4 + 0x40000000ll));
            }
            std::memcpy((void*)pa, buf, 16);
        }
    }
    const int64_t bytes = (int64_t)rowb * m.box1;
    b.tx -= bytes; b.ph_delivered += bytes; b.ph_copy_f = f; b.ph_copy_l = l;
    try_complete(w, h, bi);
}

API void ccsim_hop_tma_store(const void* map, int c0, int c1, const void* src, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    Worker* w = fb->w;
    const TMap& m = *tmap_of(fb, map, f, l);
    need_box_dst(fb, m, (uintptr_t)src, "the TMA store's shared-memory source", f, l);
    unsigned t = (unsigned)fb->tid;
    int is = issue_add(h, f, l, fb->tid, 0);
    const unsigned rowb = m.box0 * m.esize, chunks = rowb / 16;
    const uintptr_t s0 = (uintptr_t)src;
    TA& ta = h->ta[t];
    for (unsigned y = 0; y < m.box1; ++y) {
        const long long gy = (long long)c1 + y;
        for (unsigned c = 0; c < chunks; ++c) {
            const uintptr_t pa = swz(s0 + y * rowb + c * 16, m.swizzle);
            const size_t word = (pa - (uintptr_t)w->arena) / 4;
            if (g_checked && h->aw) {
                for (unsigned q = 0; q < 4; ++q) {
                    async_read_check(fb, h, word + q, t, "a TMA store", f, l);
                    AW& s = aw_at(h, word + q);
                    s.ark = 2; s.arw = (uint16_t)t; s.arg = ta.bk_committed; s.arissue = (uint32_t)is;
                }
            }
            if (gy < 0 || gy >= (long long)m.dim1) continue;
            for (unsigned e = 0; e < 16 / m.esize; ++e) {
                const long long gx = (long long)c0 + c * (16 / m.esize) + e;
                if (gx < 0 || gx >= (long long)m.dim0) continue;
                void* gp = (void*)(uintptr_t)(m.base + gy * m.stride1 + gx * m.esize);
                std::memcpy(gp, (const void*)(pa + e * m.esize), m.esize);
            }
        }
        if (g_checked && gy >= 0 && gy < (long long)m.dim1) {
            long long x0 = std::max(0ll, (long long)c0), x1 = std::min((long long)m.dim0, (long long)c0 + m.box0);
            if (x1 > x0) mark_initialised((const void*)(uintptr_t)(m.base + gy * m.stride1 + x0 * m.esize), (x1 - x0) * m.esize);
        }
    }
}

API void ccsim_hop_bulk_commit(const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    hb()->ta[fb->tid].bk_committed++;
}

API void ccsim_hop_bulk_wait(int n, int read_only, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    TA& ta = h->ta[fb->tid];
    (void)read_only;   // stores land at issue: their reads and their writes are both done
    uint32_t target = ta.bk_committed > (uint32_t)n ? ta.bk_committed - (uint32_t)n : 0;
    if (target > ta.bk_read_retired) {
        tick(h, fb->tid);
        while (ta.bk_read_retired < target) { ta.bk_retire_clk.push_back(g_checked ? clk(h, fb->tid) : 0); ta.bk_read_retired++; }
    }
}

// ---------------------------------------------------------------------------------------------------
// wgmma
// ---------------------------------------------------------------------------------------------------
namespace {
// The warp rendezvous of a .sync.aligned operation (a missing or exited lane is reported as for any warp
// collective); the model's checks do not need the lanes' clocks joined there.
void internal_sync(Fiber* fb, const char* f, int l) {
    if (g_checked) hb()->ta[fb->tid].internal = true;
    ccsim_rt_warp(W_SYNC, 0xffffffffu, 0, 0, 32, f, l);
}
struct Desc { uint32_t start, lbo, sbo, base_off, swizzle; };
Desc decode_desc(uint64_t d) {
    return Desc{(uint32_t)(d & 0x3FFF) << 4, (uint32_t)((d >> 16) & 0x3FFF) << 4, (uint32_t)((d >> 32) & 0x3FFF) << 4,
                (uint32_t)((d >> 49) & 7), (uint32_t)(d >> 62)};
}
// desc swizzle field (1 = 128B, 2 = 64B, 3 = 32B) -> the tensor map's numbering (3, 2, 1)
unsigned desc_swz(unsigned field) { return field == 1 ? 3 : field == 2 ? 2 : field == 3 ? 1 : 0; }

// Byte address (shared window) of element (row r, byte kb of the K extent) of a K-major operand
// ("Shared Memory Matrix Layout": 8-row core matrices; swizzled: rows of the swizzle span, 8-row groups SBO apart;
// no swizzle: 8 x 16-byte core matrices, LBO apart along K and SBO apart along M/N).
inline uint32_t kmajor_addr(const Desc& d, unsigned r, unsigned kb) {
    const unsigned s = desc_swz(d.swizzle);
    if (!s) return d.start + (r / 8) * d.sbo + (kb / 16) * d.lbo + (r % 8) * 16 + kb % 16;
    return d.start + (r / 8) * d.sbo + (r % 8) * swz_span(s) + kb;
}

std::string desc_text(const Desc& d) {
    return "start " + std::to_string(d.start) + ", leading byte offset " + std::to_string(d.lbo) + ", stride byte offset " +
           std::to_string(d.sbo) + ", swizzle " + swz_name(desc_swz(d.swizzle));
}

// Decode one operand (rows x 16 elements) into out (row-major floats), with the checks of checked mode.
void wg_operand(Fiber* fb, HB* h, WGC& c, uint64_t desc, unsigned rows, bool bf16, float* out, const char* name,
                int issue, unsigned G, const char* f, int l) {
    Worker* w = fb->w;
    const Desc d = decode_desc(desc);
    if (d.base_off) {
        RtGuard g;
        hop_fail("kernel", std::string("wgmma at ") + lno(f, l) + ": the " + name + " descriptor has a matrix base offset (" +
                 std::to_string(d.base_off) + "), which the CPU simulator does not model: align the tile to the swizzle "
                 "pattern (1024 bytes for 128B) so that the offset is 0.", f, l);
    }
    const unsigned s = desc_swz(d.swizzle);
    const uintptr_t base = (uintptr_t)w->arena;
    bool have_ref = false; long long ry = 0, rx = 0; uint32_t rmap_issue = 0;
    for (unsigned r = 0; r < rows; ++r) {
        for (unsigned kb = 0; kb < 32; kb += 2) {
            const uintptr_t ua = base + kmajor_addr(d, r, kb), pa = swz(ua, s);
            const size_t off = pa - base;
            if (off + 2 > w->arena_used || off < RZ || (g_checked && (w->shadow[off / 4].flags & SH_RED))) {
                RtGuard g;
                hop_fail("out-of-bounds", std::string("issues a wgmma at ") + lno(f, l) + " whose " + name + " descriptor (" +
                         desc_text(d) + ") reaches row " + std::to_string(r) + ", k " + std::to_string(kb / 2) + " at shared byte " +
                         std::to_string(off) + ", outside the block's shared memory: check the descriptor's start address "
                         "and strides.", f, l);
            }
            uint16_t v; std::memcpy(&v, (const void*)pa, 2);
            out[r * 16 + kb / 2] = bf16 ? bf2f_bits(v) : h2f_bits(v);
            if (!(g_checked && h->aw) || (kb & 2)) continue;
            const size_t word = off / 4;
            async_read_check(fb, h, word, (unsigned)fb->tid, "a wgmma", f, l);
            AW& a = aw_at(h, word);
            if (a.tbar) {
                bool seen = false;
                for (auto& p : c.pend) if (p.first == a.tbar - 1 && p.second == a.tphase) { seen = true; break; }
                if (!seen) c.pend.push_back({a.tbar - 1, a.tphase});
                // the descriptor matches the tile: element (r, k) comes from global (y0 + r, x0 + k) of one tensor
                const long long gy = (long long)a.gy - 0x40000000ll, gxb = (long long)a.gx - 0x40000000ll + (pa & 3);
                const Issue& ti = h->issues[a.tissue];
                if (!have_ref) { have_ref = true; ry = gy - r; rx = gxb - kb; rmap_issue = a.tissue; }
                else if (gy - r != ry || gxb - kb != rx) {
                    RtGuard g;
                    const Issue& ri = h->issues[rmap_issue];
                    hop_fail("kernel", std::string("issues a wgmma at ") + lno(f, l) + " whose " + name + " descriptor (" +
                             desc_text(d) + ") does not match the tile the TMA wrote there: its row " + std::to_string(r) +
                             ", k " + std::to_string(kb / 2) + " reads the element the copy at " + lno(ti.f, ti.l) +
                             " placed from global row " + std::to_string(gy) + ", byte column " + std::to_string(gxb) +
                             ", but its row 0, k 0 reads global row " + std::to_string(ry) + ", byte column " + std::to_string(rx) +
                             " (copy at " + lno(ri.f, ri.l) + "), so row " + std::to_string(r) + " should be global row " +
                             std::to_string(ry + r) + ". Check the descriptor's swizzle mode (the tensor map's), its stride "
                             "byte offset (8 rows x the swizzle span: 1024 for 128B) and its start address (the tile's "
                             "first element, + 32 bytes per k16 step).", f, l);
                }
            }
            a.ark = 1; a.arw = (uint16_t)G; a.arg = h->ta[fb->tid].wg_committed; a.arissue = (uint32_t)issue;
        }
    }
}
}  // namespace

API void ccsim_hop_wgmma(float* d, int n, uint64_t desc_a, uint64_t desc_b, int scale_d, int bf16, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    const unsigned t = (unsigned)fb->tid, G = t / 128;
    if ((G + 1) * 128 > h->n) {
        RtGuard g;
        hop_fail("kernel", "issues a wgmma, but its warpgroup (threads " + std::to_string(G * 128) + ".." +
                 std::to_string(G * 128 + 127) + ") is not complete in a block of " + std::to_string(h->n) + " threads: "
                 "wgmma needs 4 whole warps (128 threads, a multiple of 128 per block).", f, l);
    }
    if (n < 8 || n > 256 || n % 8) {
        RtGuard g;
        hop_fail("kernel", "issues wgmma m64n" + std::to_string(n) + "k16: N must be a multiple of 8 from 8 to 256.", f, l);
    }
    internal_sync(fb, f, l);   // .sync.aligned: the whole warp executes it together
    TA& ta = h->ta[t];
    if (g_checked) {
        if (ta.need_fence) {
            RtGuard g;
            hop_fail("race", "issues a wgmma at " + lno(f, l) + " without a wgmma_fence() since " +
                     (ta.acc_f ? std::string("the accumulators were last touched by ordinary code") :
                                 std::string("the start of the kernel")) + ": call wgmma_fence() before the first wgmma "
                     "and after any other access to the accumulator registers. (PTX ISA: wgmma.fence.)", f, l);
        }
        if (!ta.acc_f) t_hop_watch++;
        ta.acc_lo = (uintptr_t)d; ta.acc_hi = (uintptr_t)(d + n / 2); ta.acc_inflight = true; ta.acc_f = f; ta.acc_l = l; ta.acc_group = ta.wg_committed;
    }
    const uint32_t seq = ++ta.wg_seq;
    WGC& c = h->wgc[G * 4 + (seq & 3)];
    if (!(c.valid && c.seq == seq && c.da == desc_a && c.db == desc_b && c.n == n)) {
        if (c.valid && c.seq == seq && g_checked) {
            RtGuard g;
            hop_fail("kernel", "issues wgmma number " + std::to_string(seq) + " of its warpgroup with descriptors A " +
                     hx(desc_a) + ", B " + hx(desc_b) + " (N " + std::to_string(n) + "), but another thread of the warpgroup "
                     "issued it with A " + hx(c.da) + ", B " + hx(c.db) + " (N " + std::to_string(c.n) + "): every thread of "
                     "a warpgroup must execute the same wgmma (.sync.aligned).", f, l);
        }
        c.valid = true; c.seq = seq; c.da = desc_a; c.db = desc_b; c.n = n; c.pend.clear();
        int is = issue_add(h, f, l, fb->tid, 0);
        wg_operand(fb, h, c, desc_a, 64, bf16 != 0, c.A, "A", is, G, f, l);
        wg_operand(fb, h, c, desc_b, (unsigned)n, bf16 != 0, c.B, "B", is, G, f, l);
    } else if (g_checked) {
        for (auto& p : c.pend) {
            uint32_t seen = p.first < (int)ta.obs.size() ? ta.obs[p.first] : 0;
            if (seen <= p.second) {
                RtGuard g;
                hop_fail("race", "issues a wgmma at " + lno(f, l) + " reading a stage that the TMA fills on phase " +
                         std::to_string(p.second) + " of " + bar_name(fb->w, h, p.first) + ", and this thread has not "
                         "waited for that phase: every thread of the warpgroup must mbar_wait before the wgmma.", f, l);
            }
        }
    }
    // this thread's fragment of D (Register Fragments of wgmma .m64nNk16)
    const unsigned wq = (t % 128) / 32, lane = t % 32;
    for (int j = 0; j < n / 8; ++j)
        for (int i = 0; i < 4; ++i) {
            const unsigned row = 16 * wq + lane / 4 + 8 * (i / 2), col = 8 * j + 2 * (lane % 4) + (i & 1);
            const float* a = c.A + row * 16;
            const float* b = c.B + col * 16;
            float acc = 0.0f;
            for (int k = 0; k < 16; ++k) acc += a[k] * b[k];
            d[4 * j + i] = scale_d ? d[4 * j + i] + acc : acc;
        }
}

API void ccsim_hop_wgmma_fence(const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    internal_sync(fb, f, l);
    hb()->ta[fb->tid].need_fence = false;
}

API void ccsim_hop_wgmma_commit(const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    internal_sync(fb, f, l);
    hb()->ta[fb->tid].wg_committed++;
}

API void ccsim_hop_wgmma_wait(int n, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    internal_sync(fb, f, l);
    HB* h = hb();
    TA& ta = h->ta[fb->tid];
    uint32_t target = ta.wg_committed > (uint32_t)n ? ta.wg_committed - (uint32_t)n : 0;
    if (target > ta.wg_retired) {
        tick(h, fb->tid);
        while (ta.wg_retired < target) { ta.wg_retire_clk.push_back(g_checked ? clk(h, fb->tid) : 0); ta.wg_retired++; }
    }
    // the accumulators are no longer in flight once the group of the last wgmma that wrote them has retired
    if (ta.wg_retired > ta.acc_group) ta.acc_inflight = false;
}

API void ccsim_hop_setmaxnreg(int inc, int n, const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    HB* h = hb();
    if (n < 24 || n > 256 || n % 8) {
        RtGuard g;
        hop_fail("kernel", std::string("calls setmaxnreg.") + (inc ? "inc" : "dec") + " with " + std::to_string(n) +
                 " registers: the count must be a multiple of 8 from 24 to 256 (PTX ISA: setmaxnreg).", f, l);
    }
    internal_sync(fb, f, l);
    const unsigned G = (unsigned)fb->tid / 128;
    if (G < h->regs.size()) h->regs[G] = n;
    long long total = 0;
    for (int r : h->regs) { if (!r) return; total += 128ll * r; }
    if (total > 65536) {
        RtGuard g;
        std::string parts;
        for (size_t i = 0; i < h->regs.size(); ++i) parts += (i ? ", " : "") + std::to_string(h->regs[i]);
        hop_fail("kernel", "calls setmaxnreg at " + lno(f, l) + ": the warpgroups of the block now ask for " + parts +
                 " registers per thread, " + std::to_string(total) + " in all, more than the 65536 registers of an SM: "
                 "setmaxnreg.inc would wait forever for registers that never come free.", f, l);
    }
}

API int ccsim_hop_elect_one(const char* f, int l) {
    Fiber* fb = hop_thread(f, l);
    internal_sync(fb, f, l);
    return (fb->tid & 31) == 0;
}
