// ccsim_cg.h - <cooperative_groups/reduce.h> and <cooperative_groups/scan.h> for the CPU simulator, and
// coalesced_group. Included by ccsim.h after thread_block and thread_block_tile.
//
// Every function is built from the warp collectives of ccsim.h (each lane's result computed from the CUDA
// definitions), so a group whose lanes do not all arrive is diagnosed like any bad shuffle.
// cg::reduce and the scans combine in a fixed order; for floating-point sums that order differs from the
// GPU's, so compare with a tolerance (the integer and min/max/bit operators are exact).
#ifndef CCSIM_CG_H
#define CCSIM_CG_H

namespace cooperative_groups {

// ---------------------------------------------------------------------------------------------------
// coalesced_group: the lanes of the warp that are active at the call (coalesced_threads())
// ---------------------------------------------------------------------------------------------------
struct coalesced_group {
    unsigned m;  // lane mask of the members
    unsigned lane() const { return ccsim::self()->ti.x & 31u; }  // (1-D blocks: the warp lane)
    unsigned mask() const { return m; }
    unsigned thread_rank() const { return (unsigned)__builtin_popcount(m & ((1u << lane()) - 1u)); }
    unsigned size() const { return (unsigned)__builtin_popcount(m); }
    unsigned num_threads() const { return size(); }
    unsigned meta_group_rank() const { return 0; }
    unsigned meta_group_size() const { return 1; }
    // lane of the member with rank r (r taken modulo size(), as CUDA does for shfl on coalesced groups)
    int lane_of(unsigned r) const {
        r %= size();
        unsigned mm = m;
        for (unsigned i = 0; i < r; ++i) mm &= mm - 1u;
        return __builtin_ctz(mm);
    }
    void sync(const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { ccsim_rt_warp(ccsim::W_SYNC, m, 0, 0, 32, f, l); }
    template <class T> T shfl(T v, unsigned src_rank, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const {
        return ccsim::shfl(ccsim::W_SHFL, m, v, lane_of(src_rank), 32, f, l);
    }
    // shfl_down/up by ranks: a member without a source keeps its own value (as on tiles)
    template <class T> T shfl_down(T v, unsigned d, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const {
        unsigned r = thread_rank() + d;
        int src = r < size() ? lane_of(r) : (int)lane();
        return ccsim::shfl(ccsim::W_SHFL, m, v, src, 32, f, l);
    }
    template <class T> T shfl_up(T v, unsigned d, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const {
        unsigned r = thread_rank();
        int src = r >= d ? lane_of(r - d) : (int)lane();
        return ccsim::shfl(ccsim::W_SHFL, m, v, src, 32, f, l);
    }
    unsigned ballot(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const {
        // CUDA: bit k of the result is the predicate of the member with rank k
        unsigned lanes = (unsigned)ccsim_rt_warp(ccsim::W_BALLOT, m, p != 0, 0, 32, f, l), out = 0, mm = m;
        for (unsigned k = 0; mm; ++k, mm &= mm - 1u) if (lanes & (mm & (~mm + 1u))) out |= 1u << k;
        return out;
    }
    bool any(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { return ccsim_rt_warp(ccsim::W_ANY, m, p != 0, 0, 32, f, l) != 0; }
    bool all(int p, const char* f = __builtin_FILE(), int l = __builtin_LINE()) const { return ccsim_rt_warp(ccsim::W_ALL, m, p != 0, 0, 32, f, l) != 0; }
};
static inline coalesced_group coalesced_threads(const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return coalesced_group{(unsigned)ccsim_rt_warp(ccsim::W_ACTIVE, 0, 0, 0, 32, f, l)};
}
static inline void sync(const coalesced_group& g, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { g.sync(f, l); }

// ---------------------------------------------------------------------------------------------------
// cg::reduce on coalesced groups (tiles: ccsim.h's butterfly)
// ---------------------------------------------------------------------------------------------------
template <class T, class Op>
static inline T reduce(const coalesced_group& g, T v, Op op, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    T acc = g.shfl(v, 0, f, l);  // every member folds the members' values in rank order
    for (unsigned r = 1; r < g.size(); ++r) acc = op(acc, g.shfl(v, r, f, l));
    return acc;
}

// ---------------------------------------------------------------------------------------------------
// <cooperative_groups/scan.h>: inclusive_scan / exclusive_scan (default operator: plus)
// ---------------------------------------------------------------------------------------------------
namespace ccsim_detail {
template <class G, class T, class Op> static inline T inclusive(const G& g, T v, Op op, const char* f, int l) {
    // Hillis-Steele over ranks: after step d every member holds the fold of its last 2d values
    const unsigned r = g.thread_rank(), n = g.size();
    for (unsigned d = 1; d < n; d *= 2) {
        T o = g.shfl_up(v, d, f, l);
        if (r >= d) v = op(o, v);
    }
    return v;
}
}  // namespace ccsim_detail
template <unsigned N, class T, class Op>
static inline T inclusive_scan(const thread_block_tile<N>& g, T v, Op op, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_detail::inclusive(g, v, op, f, l);
}
template <unsigned N, class T>
static inline T inclusive_scan(const thread_block_tile<N>& g, T v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_detail::inclusive(g, v, plus<T>(), f, l);
}
template <class T, class Op>
static inline T inclusive_scan(const coalesced_group& g, T v, Op op, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_detail::inclusive(g, v, op, f, l);
}
template <class T>
static inline T inclusive_scan(const coalesced_group& g, T v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_detail::inclusive(g, v, plus<T>(), f, l);
}
// exclusive: the inclusive result of the previous rank; rank 0 gets T() (CUDA: defined as 0 for plus,
// unspecified for other operators)
template <class G, class T, class Op>
static inline T ccsim_exclusive(const G& g, T v, Op op, const char* f, int l) {
    T inc = ccsim_detail::inclusive(g, v, op, f, l);
    T prev = g.shfl_up(inc, 1, f, l);
    return g.thread_rank() == 0 ? T() : prev;
}
template <unsigned N, class T, class Op>
static inline T exclusive_scan(const thread_block_tile<N>& g, T v, Op op, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_exclusive(g, v, op, f, l);
}
template <unsigned N, class T>
static inline T exclusive_scan(const thread_block_tile<N>& g, T v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_exclusive(g, v, plus<T>(), f, l);
}
template <class T, class Op>
static inline T exclusive_scan(const coalesced_group& g, T v, Op op, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_exclusive(g, v, op, f, l);
}
template <class T>
static inline T exclusive_scan(const coalesced_group& g, T v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim_exclusive(g, v, plus<T>(), f, l);
}
}  // namespace cooperative_groups

#endif  // CCSIM_CG_H
