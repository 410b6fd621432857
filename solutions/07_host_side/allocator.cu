// ====================================================================================================
// Lesson 07, part 2: a caching allocator of your own, with the statistics PyTorch reports, plugged into
// PyTorch.
//
// Why a framework never calls cudaMalloc per tensor: cudaMalloc and cudaFree are slow host calls, and
// cudaFree waits for the whole device. A training step makes hundreds of tensors, so PyTorch keeps the
// memory it got from cudaMalloc ("reserved") and hands out pieces of it ("allocated") again and again.
// This file is that allocator, with PyTorch's own policy (c10/cuda/CUDACachingAllocator.cpp): the same
// size classes, the same segment sizes, best fit, splitting and coalescing, one pool per stream, events
// for blocks used on other streams, empty_cache, and the statistics under torch.cuda.memory_stats() names.
// Replayed on the same trace it must agree with PyTorch byte for byte (tests/test_07_host_side.py checks it
// against a model of PyTorch's policy on the simulator and against torch.cuda.memory_stats() on a GPU).
//
// Versions (launchers callable from Python as m.<name>(...), tensors for pointers):
//   CachingAllocator        tasks 7.8 and 7.9   size classes, free lists, split/coalesce, per-stream pools
//                                               with events, empty_cache (7.8); the statistics (7.9)
//   PlainAllocator          worked              no caching: one cudaMalloc per request, cudaFree per free
//   alloc_begin/_op/_end    worked              replay a trace of allocator calls, statistics after each
//   fragmenting_trace       task 7.11           a trace that leaves most reserved memory unusable
//   cc_alloc_malloc/_free   task 7.10           the two functions torch.cuda.memory.CUDAPluggableAllocator
//                                               calls (namespace torch_hooks, extern "C"); cc_plain_* and
//                                               cc_alloc_stats beside them are given
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("07_host_side")
//   make check T=7.8                 (one task's graded checks; run it in the course's top folder)
//   .venv/bin/python lessons/07_host_side/alloc_tools.py --help   (the trace tools and task 7.10's runner)
// The allocator is host code over cudaMalloc/cudaFree and events, so tasks 7.8, 7.9 and 7.11 run on the
// CPU simulator too; task 7.10 plugs it into PyTorch and needs a GPU.
// ====================================================================================================

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// Everything but the launchers lives in namespace alloc: the course's loader offers Python every top-level
// `void name(...)` function as a launcher, and member functions defined out of their class look like that.
namespace alloc {

// PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp and c10/core/AllocatorConfig.h, torch 2.11-2.13).
constexpr size_t kMinBlockSize = 512;          // every request is rounded up to a multiple of 512 bytes
constexpr size_t kSmallSize = 1048576;         // requests up to 1 MiB go to the small pool
constexpr size_t kSmallBuffer = 2097152;       // ... which cudaMallocs 2 MiB segments
constexpr size_t kMinLargeAlloc = 10485760;    // large requests under 10 MiB ...
constexpr size_t kLargeBuffer = 20971520;      // ... get a 20 MiB segment (split among several of them)
constexpr size_t kRoundLarge = 2097152;        // larger ones a segment of their size rounded up to 2 MiB

// ----------------------------------------------------------------------------------------------------
// Statistics, as torch.cuda.memory_stats() names them (given: the counters; task 7.9 updates them)
// ----------------------------------------------------------------------------------------------------
// Each Stat keeps current, peak (the most current ever was), allocated (the sum of increases) and freed
// (the sum of decreases), for three "stat types": all pools together, the small pool, the large pool.
// memory_stats() prints them as "<name>.<all|small_pool|large_pool>.<current|peak|allocated|freed>".
struct Stat {
    long long current = 0, peak = 0, allocated = 0, freed = 0;
};
static void increase(Stat& s, long long n) {
    s.current += n;
    s.peak = std::max(s.peak, s.current);
    s.allocated += n;
}
static void decrease(Stat& s, long long n) {
    s.current -= n;
    s.freed += n;
}
enum StatType { kAll = 0, kSmallPool = 1, kLargePool = 2, kNumStatTypes = 3 };
using StatArray = Stat[kNumStatTypes];
// A change counts twice: in "all" and in the block's own pool (PyTorch's for_each_selected_stat_type).
static void increase(StatArray& a, bool small, long long n) { increase(a[kAll], n); increase(a[small ? kSmallPool : kLargePool], n); }
static void decrease(StatArray& a, bool small, long long n) { decrease(a[kAll], n); decrease(a[small ? kSmallPool : kLargePool], n); }

struct Stats {
    StatArray allocation;            // COUNT: blocks handed out and not freed
    StatArray segment;               // COUNT: segments from cudaMalloc held now
    StatArray active;                // COUNT: blocks allocated, or freed but waiting for another stream's event
    StatArray inactive_split;        // COUNT: free blocks that are pieces of a split segment
    StatArray allocated_bytes;       // SUM: bytes of the blocks handed out (after rounding)
    StatArray reserved_bytes;        // SUM: bytes of the segments held ("reserved", "cached" in older names)
    StatArray active_bytes;          // SUM: bytes of the active blocks
    StatArray inactive_split_bytes;  // SUM: bytes of the inactive split blocks
    StatArray requested_bytes;       // SUM: bytes the callers asked for (before rounding)
    long long num_alloc_retries = 0;     // cudaMalloc failed, the cache was freed and the cudaMalloc retried
    long long num_ooms = 0;              // out-of-memory errors given back to the caller
    long long num_sync_all_streams = 0;  // synchronize_and_free_events calls (empty_cache, retries)
    long long num_device_alloc = 0;      // cudaMalloc calls
    long long num_device_free = 0;       // cudaFree calls
};

// The order alloc_op records them in (one row per trace operation); alloc_tools.STATS has the same names.
constexpr int kNumStats = 22;
static void snapshot(const Stats& s, double fragmentation, double* out) {
    const double v[kNumStats] = {
        (double)s.allocated_bytes[kAll].current, (double)s.allocated_bytes[kAll].peak,
        (double)s.reserved_bytes[kAll].current, (double)s.reserved_bytes[kAll].peak,
        (double)s.active_bytes[kAll].current, (double)s.active_bytes[kAll].peak,
        (double)s.requested_bytes[kAll].current, (double)s.allocation[kAll].current,
        (double)s.active[kAll].current, (double)s.segment[kAll].current,
        (double)s.inactive_split[kAll].current, (double)s.inactive_split_bytes[kAll].current,
        (double)s.num_alloc_retries, (double)s.num_ooms, (double)s.num_device_alloc, (double)s.num_device_free,
        (double)s.num_sync_all_streams,
        (double)s.allocated_bytes[kSmallPool].current, (double)s.reserved_bytes[kSmallPool].current,
        (double)s.allocated_bytes[kLargePool].current, (double)s.reserved_bytes[kLargePool].current,
        fragmentation};
    std::memcpy(out, v, sizeof v);
}

// ----------------------------------------------------------------------------------------------------
// Blocks, pools and the allocator's state (given)
// ----------------------------------------------------------------------------------------------------
// A segment is one cudaMalloc. It is cut into blocks: consecutive address ranges linked by prev/next
// (nullptr at the segment's ends). A block is allocated (handed out), free (in its pool's free list), or
// waiting: freed by its owner but still in use by another stream until an event says that stream is past it.
struct BlockPool;
struct Block {
    char* ptr;                // first byte
    size_t size;              // bytes (a multiple of 512)
    cudaStream_t stream;      // the stream it was allocated on: its pool's free list is per stream
    BlockPool* pool;          // small or large
    Block* prev = nullptr;    // the neighbouring blocks of the same segment
    Block* next = nullptr;
    bool allocated = false;
    size_t requested = 0;     // what the caller asked for (requested_bytes)
    int event_count = 0;      // events still pending before it may be reused
    std::vector<cudaStream_t> stream_uses;  // other streams it was used on (record_stream)
    bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Free lists: one ordered set per pool, sorted by (stream, size, address). lower_bound on a key of
// (stream, size, nullptr) finds the smallest free block of this stream that is large enough ("best fit"),
// the lowest address among equal sizes, exactly as PyTorch's BlockComparatorSize orders them.
struct BlockLess {
    bool operator()(const Block* a, const Block* b) const {
        if (a->stream != b->stream) return (uintptr_t)a->stream < (uintptr_t)b->stream;
        if (a->size != b->size) return a->size < b->size;
        return (uintptr_t)a->ptr < (uintptr_t)b->ptr;
    }
};
struct BlockPool {
    explicit BlockPool(bool s) : small(s) {}
    const bool small;
    std::set<Block*, BlockLess> blocks;  // the free blocks
};

// What went wrong in a call that failed (the error's code travels to Python; the text names the culprit).
enum Status { kOk = 0, kOutOfMemory = 1, kDoubleFree = 2, kForeignPointer = 3, kInteriorPointer = 4,
              kTooLarge = 5, kBadArgument = 6 };

static std::string hex(const void* p) {
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    return b;
}
static std::string mib(double bytes) {
    char b[64];
    std::snprintf(b, sizeof b, "%.2f MiB", bytes / 1048576.0);
    return b;
}

class CachingAllocator {
  public:
    // limit: the most bytes it may hold from cudaMalloc (0: no limit), like
    // torch.cuda.set_per_process_memory_fraction; a cudaMalloc past it fails as an out-of-memory would.
    explicit CachingAllocator(size_t limit = 0) : limit_(limit) {}
    ~CachingAllocator() { release_everything(); }
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;

    // The public calls: the caller's mistakes are refused here, before anything changes (given).
    void* malloc(long long size, cudaStream_t stream, Status* status, std::string* error);
    void free(void* ptr, Status* status, std::string* error);
    void record_stream(void* ptr, cudaStream_t stream, Status* status, std::string* error);
    void empty_cache() { release_cached_blocks(); }
    const Stats& stats() const { return stats_; }
    double fragmentation() const;

  private:
    // task 7.8: the policy
    static size_t round_size(size_t size);
    BlockPool& get_pool(size_t size);
    static size_t allocation_size(size_t size);
    Block* get_free_block(BlockPool& pool, size_t size, cudaStream_t stream);
    bool should_split(const Block* block, size_t size) const;
    Block* alloc_found_block(Block* block, size_t size, size_t requested, bool split);
    void free_block(Block* block);
    size_t try_merge_blocks(Block* dst, Block* src, BlockPool& pool);
    void insert_events(Block* block);
    void process_events();
    void synchronize_and_free_events();
    void release_cached_blocks();
    // given
    void* allocate(size_t requested, cudaStream_t stream, Status* status, std::string* error);
    Block* alloc_block(BlockPool& pool, size_t alloc_size, cudaStream_t stream, bool is_retry);
    void release_block(Block* block);
    std::string describe_bad_pointer(void* ptr, Status* status) const;
    void release_everything();

    size_t limit_;
    size_t total_reserved_ = 0;  // bytes held from cudaMalloc (PyTorch's total_allocated_memory)
    BlockPool small_{true}, large_{false};
    std::unordered_map<void*, Block*> allocated_;        // live blocks by address
    std::map<char*, size_t> segments_;                   // every segment held: start -> size
    std::unordered_set<void*> freed_;                    // handed out, freed, not handed out since
    // events recorded on each stream a freed block was used on, in stream order: (event, block)
    std::vector<std::pair<cudaStream_t, std::deque<std::pair<cudaEvent_t, Block*>>>> events_;
    Stats stats_;
};

// ----------------------------------------------------------------------------------------------------
// Task 7.8 (a): size classes
// ----------------------------------------------------------------------------------------------------
// PyTorch's classes are coarse on purpose: every size is a multiple of 512 bytes, and requests fall into
// two pools. A worked example of the three rules, for a request of 1000 bytes, 3 MiB and 25 MiB + 1:
//   round_size:       1000 -> 1024          3 MiB -> 3 MiB                 25 MiB + 1 -> 25 MiB + 512
//   pool:             small (<= 1 MiB)      large                          large
//   allocation_size:  2 MiB segment         20 MiB segment (< 10 MiB)      26 MiB (rounded up to 2 MiB)

size_t CachingAllocator::round_size(size_t size) {
    // TODO(task 7.8, part 1 of 6): size classes (~6 lines in the three functions). Here: sizes under 512
    // become 512, the others round UP to a multiple of kMinBlockSize (512). Then get_pool: a rounded size
    // <= kSmallSize (1 MiB) goes to small_, the rest to large_. Then allocation_size, what cudaMalloc is
    // asked for when no free block fits: kSmallBuffer (2 MiB) for a small size, kLargeBuffer (20 MiB) for a
    // size under kMinLargeAlloc (10 MiB), else the size rounded up to a multiple of kRoundLarge (2 MiB).
    // Hint: rounding n up to a multiple of k is k * ((n + k - 1) / k). Check with the table above.
    // BEGIN SOLUTION
    if (size < kMinBlockSize) return kMinBlockSize;
    return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
    // STUB: return size;
    // END SOLUTION
}

BlockPool& CachingAllocator::get_pool(size_t size) {
    // TODO(task 7.8, part 1 of 6, continued): small_ for a rounded size <= kSmallSize, else large_ (~1 line).
    // BEGIN SOLUTION
    return size <= kSmallSize ? small_ : large_;
    // STUB: (void)size;
    // STUB: return large_;
    // END SOLUTION
}

size_t CachingAllocator::allocation_size(size_t size) {
    // TODO(task 7.8, part 1 of 6, continued): the segment cudaMalloc is asked for (~3 lines, see round_size).
    // BEGIN SOLUTION
    if (size <= kSmallSize) return kSmallBuffer;
    if (size < kMinLargeAlloc) return kLargeBuffer;
    return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
    // STUB: return size;
    // END SOLUTION
}

// ----------------------------------------------------------------------------------------------------
// Task 7.8 (b): the free list, best fit, per stream
// ----------------------------------------------------------------------------------------------------
// A worked example of the ordered set: with free blocks (s1, 4096), (s1, 8192), (s2, 1024) a key
// (s1, 5000, nullptr) sits between the first two, so lower_bound returns (s1, 8192): the smallest block of
// stream s1 that holds 5000 bytes. A key (s1, 9000) lands on (s2, 1024): another stream's block, so no fit.

Block* CachingAllocator::get_free_block(BlockPool& pool, size_t size, cudaStream_t stream) {
    // TODO(task 7.8, part 2 of 6): best fit in this stream's free list (~6 lines). Build a search key
    // (Block key{}; key.stream = stream; key.size = size; key.ptr = nullptr), take
    // pool.blocks.lower_bound(&key); if it is end() or its block belongs to another stream, return nullptr;
    // else erase it from the set and return it.
    // Hint: a block of another stream must never be returned, even a perfect fit: that stream may still
    // have kernels queued that read it (this is what "per-stream pools" means).
    // BEGIN SOLUTION
    Block key{};
    key.stream = stream;
    key.size = size;
    key.ptr = nullptr;
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    Block* block = *it;
    pool.blocks.erase(it);
    return block;
    // STUB: (void)pool; (void)size; (void)stream;
    // STUB: return nullptr;
    // END SOLUTION
}

// ----------------------------------------------------------------------------------------------------
// Task 7.8 (c): splitting
// ----------------------------------------------------------------------------------------------------
// A found block larger than the request is cut: the front part is handed out, the rest stays free in the
// pool. Small blocks split whenever 512 bytes or more remain; large blocks only when more than 1 MiB
// remains (smaller slivers of a large segment are rarely reusable: PyTorch hands the whole block out).
// Example: a 20 MiB segment and a request of 3 MiB give [3 MiB allocated][17 MiB free]; a free 2 MiB
// large block and a request of 1.5 MiB is handed out whole (0.5 MiB is not more than 1 MiB).

bool CachingAllocator::should_split(const Block* block, size_t size) const {
    // TODO(task 7.8, part 3 of 6): the split rule, then the cut in alloc_found_block (~12 lines). Here:
    // remaining = block->size - size; a block of the small pool splits if remaining >= kMinBlockSize, a
    // large one if remaining > kSmallSize.
    // BEGIN SOLUTION
    const size_t remaining = block->size - size;
    return block->pool->small ? remaining >= kMinBlockSize : remaining > kSmallSize;
    // STUB: (void)block; (void)size;
    // STUB: return false;
    // END SOLUTION
}

Block* CachingAllocator::alloc_found_block(Block* block, size_t size, size_t requested, bool split) {
    const bool already_split = block->is_split();
    const size_t remainder = block->size - size;  // the free piece a cut leaves
    if (split) {
        // TODO(task 7.8, part 3 of 6, continued): cut `block` in two. Make a new Block for the front `size`
        // bytes (same ptr, stream and pool) and link it between block->prev and block; the old block becomes
        // the remainder: ptr += size, size -= size, and goes back into its pool's free list
        // (block->pool->blocks.insert). Then continue with the new block.
        // Hint: four links change: front->prev = block->prev, (block->prev)->next = front if there is one,
        // front->next = block, block->prev = front.
        // BEGIN SOLUTION
        Block* remaining = block;
        block = new Block{remaining->ptr, size, remaining->stream, remaining->pool};
        block->prev = remaining->prev;
        if (block->prev) block->prev->next = block;
        block->next = remaining;
        remaining->prev = block;
        remaining->ptr += size;
        remaining->size -= size;
        remaining->pool->blocks.insert(remaining);
        // END SOLUTION
        // TODO(task 7.9, part 1 of 5): inactive_split after a cut (~6 lines). If the found block was already
        // a piece of a split segment (already_split), the free piece shrank by `size` bytes: decrease
        // inactive_split_bytes by size. Otherwise a new free piece appeared: increase inactive_split_bytes by
        // `remainder` and inactive_split by 1. Each for the pool's stat type and "all"
        // (increase(stats_.x, small, n) does both; small = block->pool->small).
        // BEGIN SOLUTION
        if (already_split) {
            decrease(stats_.inactive_split_bytes, block->pool->small, (long long)size);
        } else {
            increase(stats_.inactive_split_bytes, block->pool->small, (long long)remainder);
            increase(stats_.inactive_split, block->pool->small, 1);
        }
        // END SOLUTION
    } else if (already_split) {
        // TODO(task 7.9, part 2 of 5): a free piece of a split segment is handed out whole (~2 lines):
        // inactive_split_bytes goes down by its size, inactive_split by 1.
        // BEGIN SOLUTION
        decrease(stats_.inactive_split_bytes, block->pool->small, (long long)block->size);
        decrease(stats_.inactive_split, block->pool->small, 1);
        // END SOLUTION
    }
    block->allocated = true;
    block->requested = requested;
    allocated_[block->ptr] = block;
    freed_.erase(block->ptr);
    // TODO(task 7.9, part 3 of 5): a block is handed out (~5 lines): increase allocation and active by 1,
    // allocated_bytes and active_bytes by the block's size, requested_bytes by what was requested.
    // BEGIN SOLUTION
    const bool small = block->pool->small;
    increase(stats_.allocation, small, 1);
    increase(stats_.allocated_bytes, small, (long long)block->size);
    increase(stats_.active, small, 1);
    increase(stats_.active_bytes, small, (long long)block->size);
    increase(stats_.requested_bytes, small, (long long)block->requested);
    // END SOLUTION
    return block;
}

// ----------------------------------------------------------------------------------------------------
// Task 7.8 (d): freeing, and coalescing with free neighbours
// ----------------------------------------------------------------------------------------------------
// A freed block merges with its neighbours in the segment when they are free (not allocated, no pending
// event, no recorded stream use): [A free][B freed][C allocated] becomes [A+B free][C allocated]. Without
// this, a segment cut into pieces could never again serve a request larger than its largest piece, and
// empty_cache could never give it back (only whole, unsplit free segments go back to cudaFree).

size_t CachingAllocator::try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
    // TODO(task 7.8, part 4 of 6): merge a free neighbour `src` into `dst` (~14 lines, with free_block's
    // loop below). Return 0 when src is nullptr, allocated, has event_count > 0 or stream_uses left. Else:
    // if src is dst's prev, dst takes src's ptr and src's prev (and that block's next becomes dst);
    // otherwise (src is dst's next) dst takes src's next (and that block's prev becomes dst). Then
    // dst->size += src->size, erase src from pool.blocks, delete src, and return the size it had.
    // Hint: erase src from the set BEFORE you change any block in it (the set is ordered by size and ptr),
    // and dst is not in the set while this runs.
    // BEGIN SOLUTION
    if (!src || src->allocated || src->event_count > 0 || !src->stream_uses.empty()) return 0;
    pool.blocks.erase(src);
    if (dst->prev == src) {
        dst->ptr = src->ptr;
        dst->prev = src->prev;
        if (dst->prev) dst->prev->next = dst;
    } else {
        dst->next = src->next;
        if (dst->next) dst->next->prev = dst;
    }
    const size_t subsumed = src->size;
    dst->size += subsumed;
    delete src;
    return subsumed;
    // STUB: (void)dst; (void)src; (void)pool;
    // STUB: return 0;
    // END SOLUTION
}

// Puts a freed block (no longer allocated, no events pending) back into its pool's free list.
void CachingAllocator::free_block(Block* block) {
    const size_t original_size = block->size;
    const bool small = block->pool->small;
    long long net_split_blocks = 0, net_split_bytes = 0;  // change of inactive_split / inactive_split_bytes
    // TODO(task 7.8, part 4 of 6, continued): try to merge block->prev, then block->next into block
    // (~4 lines); each successful merge (try_merge_blocks returned n > 0) removes a free piece:
    // net_split_blocks -= 1 and net_split_bytes -= n.
    // BEGIN SOLUTION
    for (Block* candidate : {block->prev, block->next}) {
        const size_t subsumed = try_merge_blocks(block, candidate, *block->pool);
        if (subsumed > 0) {
            net_split_blocks -= 1;
            net_split_bytes -= (long long)subsumed;
        }
    }
    // END SOLUTION
    block->pool->blocks.insert(block);
    if (block->is_split()) {
        net_split_blocks += 1;
        net_split_bytes += (long long)block->size;
    }
    // TODO(task 7.9, part 4 of 5): the block stops being active (~8 lines): apply net_split_blocks to
    // inactive_split and net_split_bytes to inactive_split_bytes (increase if > 0, decrease if < 0), then
    // decrease active by 1, active_bytes by original_size (its size before merging) and requested_bytes by
    // block->requested.
    // BEGIN SOLUTION
    if (net_split_blocks > 0) increase(stats_.inactive_split, small, net_split_blocks);
    if (net_split_blocks < 0) decrease(stats_.inactive_split, small, -net_split_blocks);
    if (net_split_bytes > 0) increase(stats_.inactive_split_bytes, small, net_split_bytes);
    if (net_split_bytes < 0) decrease(stats_.inactive_split_bytes, small, -net_split_bytes);
    decrease(stats_.active, small, 1);
    decrease(stats_.active_bytes, small, (long long)original_size);
    decrease(stats_.requested_bytes, small, (long long)block->requested);
    // STUB: (void)small; (void)original_size;
    // END SOLUTION
    block->requested = 0;
}

// ----------------------------------------------------------------------------------------------------
// Task 7.8 (e): blocks used on another stream wait for an event
// ----------------------------------------------------------------------------------------------------
// A block belongs to the stream it was allocated on; reusing it there is safe without any synchronisation
// because that stream runs its work in order. If the caller also used it on stream t (record_stream), then
// at free an event is recorded on t, and the block waits (active, in no free list) until cudaEventQuery
// says t got past it. PyTorch looks at the events at the start of every malloc, in each stream's order.
// Example: malloc(A, s1); record_stream(A, s2); kernel on s2 reads A; free(A) -> event e on s2;
// malloc(size of A, s1) -> e not done yet -> a new block; cudaDeviceSynchronize(); malloc -> A again.

void CachingAllocator::insert_events(Block* block) {
    // TODO(task 7.8, part 5 of 6): one event per recorded stream (~10 lines, with process_events). For each
    // stream t in block->stream_uses: cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
    // cudaEventRecord(e, t), block->event_count += 1, and append (e, block) to t's queue in events_ (find
    // t's entry, or push_back a new one). Then clear block->stream_uses.
    // BEGIN SOLUTION
    for (cudaStream_t t : block->stream_uses) {
        cudaEvent_t e;
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        cudaEventRecord(e, t);
        block->event_count += 1;
        auto q = std::find_if(events_.begin(), events_.end(), [t](const auto& p) { return p.first == t; });
        if (q == events_.end()) {
            events_.emplace_back(t, std::deque<std::pair<cudaEvent_t, Block*>>{});
            q = events_.end() - 1;
        }
        q->second.emplace_back(e, block);
    }
    block->stream_uses.clear();
    // STUB: (void)block;
    // END SOLUTION
}

void CachingAllocator::process_events() {
    // TODO(task 7.8, part 5 of 6, continued): for each stream's queue, from its front: cudaEventQuery(e);
    // cudaErrorNotReady stops this stream's queue (later events on it cannot be done either); otherwise
    // destroy the event, pop it, decrement its block's event_count, and free_block(block) once it reaches 0.
    // Then drop the streams whose queue is empty.
    // Hint: call cudaGetLastError() after a cudaErrorNotReady, as PyTorch does, so the error is not left
    // for the next caller of cudaGetLastError.
    // BEGIN SOLUTION
    for (auto& [stream, queue] : events_) {
        (void)stream;
        while (!queue.empty()) {
            auto [e, block] = queue.front();
            if (cudaEventQuery(e) == cudaErrorNotReady) {
                (void)cudaGetLastError();
                break;
            }
            cudaEventDestroy(e);
            queue.pop_front();
            if (--block->event_count == 0) free_block(block);
        }
    }
    events_.erase(std::remove_if(events_.begin(), events_.end(), [](const auto& p) { return p.second.empty(); }),
                  events_.end());
    // END SOLUTION
}

// Waits for every pending event and frees the blocks that waited (empty_cache and the retry do this first).
void CachingAllocator::synchronize_and_free_events() {
    // TODO(task 7.9, part 5 of 5, first line): count the call in stats_.num_sync_all_streams (~1 line).
    // BEGIN SOLUTION
    stats_.num_sync_all_streams += 1;
    // END SOLUTION
    for (auto& [stream, queue] : events_) {
        (void)stream;
        for (auto& [e, block] : queue) {
            cudaEventSynchronize(e);
            cudaEventDestroy(e);
            if (--block->event_count == 0) free_block(block);
        }
    }
    events_.clear();
}

// ----------------------------------------------------------------------------------------------------
// Task 7.8 (f): empty_cache gives whole free segments back
// ----------------------------------------------------------------------------------------------------
// Only a free block that is a whole segment (no prev, no next) can go back to cudaFree: a segment with any
// live piece must stay. This is why fragmentation hurts: a 20 MiB segment with one 512-byte tensor left in
// it keeps all 20 MiB reserved.

void CachingAllocator::release_cached_blocks() {
    // TODO(task 7.8, part 6 of 6): empty the cache (~8 lines). First synchronize_and_free_events(); then for
    // each pool (large_, then small_) release_block(b) every free block b that is a whole segment
    // (!b->is_split()).
    // Hint: release_block erases b from its set: advance the iterator before the call (it = next), or
    // collect the blocks first.
    // BEGIN SOLUTION
    synchronize_and_free_events();
    for (BlockPool* pool : {&large_, &small_}) {
        for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
            Block* b = *it++;
            if (!b->is_split()) release_block(b);
        }
    }
    // END SOLUTION
}

double CachingAllocator::fragmentation() const {
    // TODO(task 7.9, part 5 of 5): the fraction of reserved memory that is not allocated (~2 lines):
    // (reserved_bytes - allocated_bytes) / reserved_bytes, both "all" and current; 0 when nothing is reserved.
    // Example: 40 MiB reserved, 10 MiB allocated -> 0.75: three quarters of what this process holds from
    // CUDA is "reserved but unallocated" (the out-of-memory message's words).
    // BEGIN SOLUTION
    const long long reserved = stats_.reserved_bytes[kAll].current;
    return reserved == 0 ? 0.0 : double(reserved - stats_.allocated_bytes[kAll].current) / double(reserved);
    // STUB: return 0.0;
    // END SOLUTION
}

// ----------------------------------------------------------------------------------------------------
// Given: the malloc flow, cudaMalloc/cudaFree with their statistics, the checks of the caller's input
// ----------------------------------------------------------------------------------------------------

// PyTorch's DeviceCachingAllocator::malloc, without CUDA graphs, memory callbacks, garbage collection,
// max_split_size and expandable segments (the explainer lists what else it does).
void* CachingAllocator::allocate(size_t requested, cudaStream_t stream, Status* status, std::string* error) {
    process_events();  // blocks whose events are done go back to the free lists first
    const size_t size = round_size(requested);
    BlockPool& pool = get_pool(size);
    const size_t alloc_size = allocation_size(size);
    Block* block = get_free_block(pool, size, stream);
    if (!block) block = alloc_block(pool, alloc_size, stream, false);
    if (!block) {  // cudaMalloc failed: give back every cached segment, then try once more
        release_cached_blocks();
        block = alloc_block(pool, alloc_size, stream, true);
    }
    if (!block) {
        // TODO(task 7.9, part 5 of 5, second line): count the out-of-memory error in stats_.num_ooms.
        // BEGIN SOLUTION
        stats_.num_ooms += 1;
        // END SOLUTION
        const long long alloc = stats_.allocated_bytes[kAll].current, res = stats_.reserved_bytes[kAll].current;
        *status = kOutOfMemory;
        *error = "out of memory: tried to allocate " + mib((double)alloc_size) + " (a request of " +
                 std::to_string(requested) + " bytes); " + mib((double)alloc) + " is allocated and " +
                 mib((double)(res - alloc)) + " is reserved but unallocated" +
                 (limit_ ? " (limit " + mib((double)limit_) + ")" : std::string());
        return nullptr;
    }
    return alloc_found_block(block, size, requested, should_split(block, size))->ptr;
}

// One segment from cudaMalloc, or nullptr when CUDA (or the limit) says no. The reserved statistics follow
// cudaMalloc and cudaFree one for one, so they are kept here.
Block* CachingAllocator::alloc_block(BlockPool& pool, size_t alloc_size, cudaStream_t stream, bool is_retry) {
    // TODO(task 7.9, part 5 of 5, third line): a call after the cache was emptied (is_retry) counts in
    // stats_.num_alloc_retries.
    // BEGIN SOLUTION
    if (is_retry) stats_.num_alloc_retries += 1;
    // END SOLUTION
    if (limit_ && total_reserved_ + alloc_size > limit_) return nullptr;
    char* ptr = nullptr;
    if (cudaMalloc((void**)&ptr, alloc_size) != cudaSuccess || !ptr) {
        (void)cudaGetLastError();  // an out-of-memory error is handled, not left for the next caller
        return nullptr;
    }
    total_reserved_ += alloc_size;
    segments_[ptr] = alloc_size;
    increase(stats_.segment, pool.small, 1);
    increase(stats_.reserved_bytes, pool.small, (long long)alloc_size);
    stats_.num_device_alloc += 1;
    return new Block{ptr, alloc_size, stream, &pool};
}

// Gives one whole free segment back to CUDA.
void CachingAllocator::release_block(Block* block) {
    cudaFree(block->ptr);
    total_reserved_ -= block->size;
    segments_.erase(block->ptr);
    decrease(stats_.segment, block->pool->small, 1);
    decrease(stats_.reserved_bytes, block->pool->small, (long long)block->size);
    stats_.num_device_free += 1;
    block->pool->blocks.erase(block);
    delete block;
}

std::string CachingAllocator::describe_bad_pointer(void* ptr, Status* status) const {
    if (freed_.count(ptr)) {
        *status = kDoubleFree;
        return "double free of pointer " + hex(ptr) + ": it was freed before and not allocated again since";
    }
    auto seg = segments_.upper_bound((char*)ptr);
    if (seg != segments_.begin() && (char*)ptr < std::prev(seg)->first + std::prev(seg)->second) {
        *status = kInteriorPointer;
        return "pointer " + hex(ptr) + " lies inside segment " + hex(std::prev(seg)->first) + " (" +
               mib((double)std::prev(seg)->second) + ") of this allocator but is not the start of a live "
               "allocation: free the pointer malloc returned, not an offset into it";
    }
    *status = kForeignPointer;
    return "pointer " + hex(ptr) + " was not allocated by this allocator (cudaMalloc'd elsewhere, or already "
           "returned to CUDA): nothing was freed";
}

void* CachingAllocator::malloc(long long size, cudaStream_t stream, Status* status, std::string* error) {
    *status = kOk;
    if (size < 0) {
        *status = kBadArgument;
        *error = "malloc of " + std::to_string(size) + " bytes: a size must be >= 0";
        return nullptr;
    }
    if (size == 0) return nullptr;  // as PyTorch: an empty tensor has no memory
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && (size_t)size > total_b) {
        *status = kTooLarge;
        *error = "malloc of " + std::to_string(size) + " bytes (" + mib((double)size) + ") is more than the "
                 "device's whole memory (" + std::to_string(total_b) + " bytes): refused before touching the pool";
        return nullptr;
    }
    return allocate((size_t)size, stream, status, error);
}

void CachingAllocator::free(void* ptr, Status* status, std::string* error) {
    *status = kOk;
    if (!ptr) return;  // free(nullptr) does nothing, as everywhere
    auto it = allocated_.find(ptr);
    if (it == allocated_.end()) {
        *error = "free: " + describe_bad_pointer(ptr, status);
        return;
    }
    Block* block = it->second;
    allocated_.erase(it);
    freed_.insert(ptr);
    block->allocated = false;
    // TODO(task 7.9, part 3 of 5, continued): the block is no longer allocated (~2 lines): decrease
    // allocation by 1 and allocated_bytes by its size (it stays active until free_block, which may wait for
    // events).
    // BEGIN SOLUTION
    decrease(stats_.allocation, block->pool->small, 1);
    decrease(stats_.allocated_bytes, block->pool->small, (long long)block->size);
    // END SOLUTION
    if (!block->stream_uses.empty()) {
        insert_events(block);
        if (block->event_count == 0) free_block(block);  // (insert_events left as a stub records none)
    } else {
        free_block(block);
    }
}

void CachingAllocator::record_stream(void* ptr, cudaStream_t stream, Status* status, std::string* error) {
    *status = kOk;
    auto it = allocated_.find(ptr);
    if (it == allocated_.end()) {
        *error = "record_stream: " + describe_bad_pointer(ptr, status);
        return;
    }
    Block* block = it->second;
    if (stream == block->stream) return;  // uses on its own stream are ordered already
    if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end())
        block->stream_uses.push_back(stream);
}

// Gives every segment back, whatever is still allocated in it (the end of a trace, or of the process).
void CachingAllocator::release_everything() {
    for (auto& [stream, queue] : events_) {
        (void)stream;
        for (auto& [e, block] : queue) {
            (void)block;
            cudaEventDestroy(e);
        }
    }
    events_.clear();
    std::unordered_set<Block*> blocks;
    for (BlockPool* pool : {&small_, &large_})
        for (Block* b : pool->blocks) blocks.insert(b);
    for (auto& [p, b] : allocated_) {
        (void)p;
        blocks.insert(b);
    }
    // (a block freed to an event that never completed is in neither: walk each listed block's segment)
    std::unordered_set<Block*> all;
    for (Block* b : blocks) {
        while (b->prev) b = b->prev;
        for (; b; b = b->next) all.insert(b);
    }
    for (Block* b : all) delete b;
    for (auto& [ptr, size] : segments_) {
        (void)size;
        cudaFree(ptr);
    }
    segments_.clear();
    small_.blocks.clear();
    large_.blocks.clear();
    allocated_.clear();
}

// ----------------------------------------------------------------------------------------------------
// Worked: no caching at all (a cudaMalloc per request, a cudaFree per free)
// ----------------------------------------------------------------------------------------------------
// What PyTorch does with PYTORCH_NO_CUDA_MEMORY_CACHING=1. Every free waits for the device (cudaFree
// synchronises), and every request pays cudaMalloc's host time. reserved == allocated at all times.
class PlainAllocator {
  public:
    ~PlainAllocator() {
        for (auto& [p, size] : live_) {
            (void)size;
            cudaFree(p);
        }
    }
    void* malloc(long long size, Status* status, std::string* error) {
        *status = kOk;
        if (size <= 0) {
            if (size < 0) { *status = kBadArgument; *error = "malloc of " + std::to_string(size) + " bytes"; }
            return nullptr;
        }
        void* p = nullptr;
        if (cudaMalloc(&p, (size_t)size) != cudaSuccess) {
            (void)cudaGetLastError();
            stats_.num_ooms += 1;
            *status = kOutOfMemory;
            *error = "out of memory: cudaMalloc of " + std::to_string(size) + " bytes failed";
            return nullptr;
        }
        live_[p] = (size_t)size;
        const bool small = (size_t)size <= kSmallSize;
        stats_.num_device_alloc += 1;
        for (StatArray* a : {&stats_.allocation, &stats_.active, &stats_.segment}) increase(*a, small, 1);
        for (StatArray* a : {&stats_.allocated_bytes, &stats_.active_bytes, &stats_.reserved_bytes,
                             &stats_.requested_bytes})
            increase(*a, small, size);
        return p;
    }
    void free(void* p, Status* status, std::string* error) {
        *status = kOk;
        if (!p) return;
        auto it = live_.find(p);
        if (it == live_.end()) {
            *status = kForeignPointer;
            *error = "free: pointer " + hex(p) + " is not a live allocation of the plain allocator";
            return;
        }
        const long long size = (long long)it->second;
        const bool small = it->second <= kSmallSize;
        live_.erase(it);
        cudaFree(p);
        stats_.num_device_free += 1;
        for (StatArray* a : {&stats_.allocation, &stats_.active, &stats_.segment}) decrease(*a, small, 1);
        for (StatArray* a : {&stats_.allocated_bytes, &stats_.active_bytes, &stats_.reserved_bytes,
                             &stats_.requested_bytes})
            decrease(*a, small, size);
    }
    const Stats& stats() const { return stats_; }

  private:
    std::unordered_map<void*, size_t> live_;
    Stats stats_;
};

}  // namespace alloc
using namespace alloc;

// ----------------------------------------------------------------------------------------------------
// Worked: replaying a trace (what the tests, the notebook and the benchmark call)
// ----------------------------------------------------------------------------------------------------
// A trace is a list of operations (op, a, b, c), the same in alloc_tools.py:
//   0 MALLOC        a = id, b = size in bytes, c = stream (0..7)
//   1 FREE          a = id (the pointer that id got, even if it was freed already: a double free)
//   2 RECORD_STREAM a = id, b = stream         (the tensor was used on that stream too)
//   3 EMPTY_CACHE
//   4 SPIN          a = stream, b = cycles     (a kernel that keeps the stream busy, so events wait)
//   5 SYNC                                     (cudaDeviceSynchronize)
//   6 FREE_RAW      a = id (-1: a buffer cudaMalloc'd outside the allocator), b = byte offset added
// Trace streams 0..7 are streams alloc_begin creates (blocking streams; none is the default stream).
constexpr int kTraceStreams = 8;

__global__ void spin_kernel(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// The replay's state lives between the calls: alloc_begin starts a fresh allocator, each alloc_op applies one
// operation and records the statistics after it, alloc_end copies what was recorded into the caller's tensors
// and frees everything. (One call per operation: the trace arrives as numbers, never as a tensor the host code
// would have to read. On the simulator queued stream work runs when a launcher returns, so an event recorded
// by one operation is complete at the next; on a GPU it waits for the kernels before it, e.g. a SPIN.)
struct Replay {
    int mode = 0;                          // 0: CachingAllocator, 1: PlainAllocator
    CachingAllocator* caching = nullptr;
    PlainAllocator* plain = nullptr;
    cudaStream_t streams[kTraceStreams] = {};
    void* foreign = nullptr;               // a cudaMalloc buffer the allocator never saw (FREE_RAW -1)
    std::unordered_map<long long, void*> ptr_of;  // trace id -> the pointer it got
    std::vector<double> stats;
    std::vector<long long> ptrs;
    std::vector<int> status;
    std::string messages;
};
static Replay* g_replay = nullptr;

static void replay_reset() {
    if (!g_replay) return;
    delete g_replay->caching;  // frees every segment
    delete g_replay->plain;
    cudaDeviceSynchronize();
    cudaFree(g_replay->foreign);
    for (cudaStream_t s : g_replay->streams)
        if (s) cudaStreamDestroy(s);
    delete g_replay;
    g_replay = nullptr;
}

// Contract: starts a replay on a fresh allocator: mode 0 the CachingAllocator (limit: the bytes it may
// reserve, 0 = no limit), mode 1 the PlainAllocator. A replay left unfinished is dropped first.
void alloc_begin(int mode, long long limit) {
    replay_reset();
    g_replay = new Replay;
    g_replay->mode = mode == 1 ? 1 : 0;
    if (g_replay->mode == 1) g_replay->plain = new PlainAllocator();
    else g_replay->caching = new CachingAllocator(limit > 0 ? (size_t)limit : 0);
    for (cudaStream_t& s : g_replay->streams) cudaStreamCreate(&s);
    cudaMalloc(&g_replay->foreign, 4096);
}

// Contract: applies one trace operation (op, a, b, c) (see above) and records its pointer, status, error
// line and the statistics after it.
void alloc_op(long long kind, long long a, long long b, long long c) {
    if (!g_replay) alloc_begin(0, 0);
    Replay& r = *g_replay;
    const int i = (int)r.ptrs.size();
    Status st = kOk;
    std::string err;
    long long ptr = 0;
    auto stream_of = [&](long long k) -> cudaStream_t {
        if (k < 0 || k >= kTraceStreams) {
            st = kBadArgument;
            err = "stream " + std::to_string(k) + " is not one of the trace's streams 0.." +
                  std::to_string(kTraceStreams - 1);
            return nullptr;
        }
        return r.streams[k];
    };
    auto id_ptr = [&](long long id) -> void* {
        auto it = r.ptr_of.find(id);
        if (it == r.ptr_of.end()) {
            st = kBadArgument;
            err = "no allocation has id " + std::to_string(id) + " in this trace";
            return nullptr;
        }
        return it->second;
    };
    auto release = [&](void* p) {
        if (r.mode == 1) r.plain->free(p, &st, &err);
        else r.caching->free(p, &st, &err);
    };
    switch (kind) {
        case 0: {  // MALLOC
            cudaStream_t s = stream_of(c);
            if (st != kOk) break;
            void* p = r.mode == 1 ? r.plain->malloc(b, &st, &err) : r.caching->malloc(b, s, &st, &err);
            if (p) r.ptr_of[a] = p;
            ptr = (long long)(uintptr_t)p;
            break;
        }
        case 1: {  // FREE
            void* p = id_ptr(a);
            if (st == kOk) release(p);
            break;
        }
        case 2: {  // RECORD_STREAM
            void* p = id_ptr(a);
            cudaStream_t s = st == kOk ? stream_of(b) : nullptr;
            if (st == kOk && r.mode == 0) r.caching->record_stream(p, s, &st, &err);
            break;
        }
        case 3:  // EMPTY_CACHE
            if (r.mode == 0) r.caching->empty_cache();
            break;
        case 4: {  // SPIN
            cudaStream_t s = stream_of(a);
            if (st == kOk) spin_kernel<<<1, 1, 0, s>>>(b);
            break;
        }
        case 5:  // SYNC
            cudaDeviceSynchronize();
            break;
        case 6: {  // FREE_RAW
            void* p = a < 0 ? r.foreign : id_ptr(a);
            if (st == kOk) release((char*)p + b);
            break;
        }
        default:
            st = kBadArgument;
            err = "unknown operation " + std::to_string(kind) + " (0..6, see the comment above alloc_begin)";
    }
    r.ptrs.push_back(ptr);
    r.status.push_back(st);
    if (st != kOk) r.messages += "op " + std::to_string(i) + ": " + err + "\n";
    r.stats.resize(r.stats.size() + kNumStats);
    double* row = &r.stats[r.stats.size() - kNumStats];
    if (r.mode == 1) snapshot(r.plain->stats(), 0.0, row);
    else snapshot(r.caching->stats(), r.caching->fragmentation(), row);
}

// Contract: copies the first nops recorded operations into stats (nops * kNumStats float64), ptrs (nops
// int64) and status (nops int32), the error lines into msg (msg_len bytes, NUL-terminated), then frees
// everything the replay holds.
void alloc_end(double* stats, long long* ptrs, int* status, char* msg, int nops, int msg_len) {
    if (!g_replay || nops < 0 || msg_len <= 0) return;
    Replay& r = *g_replay;
    const size_t n = std::min((size_t)nops, r.ptrs.size());
    std::string text = r.messages.substr(0, (size_t)msg_len - 1);
    text.push_back('\0');
    if (n) {
        cudaMemcpy(stats, r.stats.data(), n * kNumStats * sizeof(double), cudaMemcpyHostToDevice);
        cudaMemcpy(ptrs, r.ptrs.data(), n * sizeof(long long), cudaMemcpyHostToDevice);
        cudaMemcpy(status, r.status.data(), n * sizeof(int), cudaMemcpyHostToDevice);
    }
    cudaMemcpy(msg, text.data(), text.size(), cudaMemcpyHostToDevice);
    replay_reset();
}

// ----------------------------------------------------------------------------------------------------
// Task 7.11: a trace that fragments the cache
// ----------------------------------------------------------------------------------------------------
// Fragmentation is memory the allocator holds (reserved) but cannot hand out for the request in front of
// it. The worked example below does NOT fragment: it allocates 8 blocks of 4 MiB (two 20 MiB segments:
// 4 in one, 4 in the other... 20 MiB holds five 4 MiB blocks), frees them all, and empty_cache gives both
// segments back (reserved 0).

// Contract: writes at most max_ops rows of (op, a, b, c) into ops (device memory, int64), the number of rows
// into count[0]. Operations MALLOC (stream 0), FREE and EMPTY_CACHE only; sizes up to 64 MiB.
void fragmenting_trace(long long* ops, int max_ops, int* count) {
    std::vector<long long> t;
    auto add = [&t](long long kind, long long a, long long b, long long c) { t.insert(t.end(), {kind, a, b, c}); };
    const long long MiB = 1 << 20;
    // TODO(task 7.11): write a trace after which, with a final EMPTY_CACHE, at least two thirds of the
    // reserved memory is unallocated and at least 32 MiB is reserved (~10 lines). The test replays it on a
    // model of PyTorch's allocator and on yours, and appends one EMPTY_CACHE of its own.
    // Hint: empty_cache frees only whole free segments. Keep one small live block in each of several 20 MiB
    // segments: allocate many 3 MiB blocks (six per 20 MiB segment: 6 x 3 = 18, the remaining 2 MiB > 1 MiB
    // is split off), then free all but one per segment.
    // Worked example (not fragmenting):  for (int i = 0; i < 8; ++i) add(0, i, 4 * MiB, 0);
    //                                     for (int i = 0; i < 8; ++i) add(1, i, 0, 0);   add(3, 0, 0, 0);
    // BEGIN SOLUTION
    const int n = 24;  // four 20 MiB segments of six 3 MiB blocks
    for (int i = 0; i < n; ++i) add(0, i, 3 * MiB, 0);
    for (int i = 0; i < n; ++i)
        if (i % 6 != 0) add(1, i, 0, 0);
    add(3, 0, 0, 0);
    // STUB: (void)add; (void)MiB;
    // END SOLUTION
    const int rows = std::min((int)(t.size() / 4), max_ops);
    if (rows > 0) cudaMemcpy(ops, t.data(), (size_t)rows * 4 * sizeof(long long), cudaMemcpyHostToDevice);
    cudaMemcpy(count, &rows, sizeof rows, cudaMemcpyHostToDevice);
}

// ----------------------------------------------------------------------------------------------------
// Task 7.10: the functions PyTorch calls (torch.cuda.memory.CUDAPluggableAllocator)
// ----------------------------------------------------------------------------------------------------
// PyTorch's CUDAPluggableAllocator calls two C functions by name from a shared library:
//   void* alloc(size_t size, int device, cudaStream_t stream)
//   void  free(void* ptr, size_t size, int device, cudaStream_t stream)
// (torch/csrc/cuda/CUDAPluggableAllocator.h, torch 2.11-2.13: the std::function types it stores). They are
// extern "C" so their names are not mangled. They live in a namespace so that the course's loader does not
// take them for launchers (a launcher's parameters are tensors and numbers); extern "C" names ignore it.
// PyTorch may call them from several threads (autograd's device thread, for one): one mutex guards all.
// alloc_tools.py's train_on() plugs them in with torch.cuda.memory.change_current_allocator in a fresh
// process, before anything touches the GPU, and runs lesson 06's capstone training step on them.
namespace torch_hooks {
static std::mutex g_mutex;
static CachingAllocator& caching() {
    static CachingAllocator* a = new CachingAllocator();  // never destroyed: PyTorch frees tensors at exit
    return *a;
}
static PlainAllocator& plain() {
    static PlainAllocator* a = new PlainAllocator();
    return *a;
}

extern "C" void* cc_alloc_malloc(size_t size, int device, cudaStream_t stream) {
    (void)device;  // one GPU per process here
    std::lock_guard<std::mutex> lock(g_mutex);
    // TODO(task 7.10): hand the request to caching().malloc (~5 lines): Status st; std::string err;
    // void* p = caching().malloc((long long)size, stream, &st, &err); if p is nullptr and st != kOk,
    // print err to stderr (PyTorch then raises its out-of-memory error); return p.
    // Hint: cc_plain_malloc below is the same shape over the plain allocator.
    // BEGIN SOLUTION
    Status st;
    std::string err;
    void* p = caching().malloc((long long)size, stream, &st, &err);
    if (!p && st != kOk) std::fprintf(stderr, "cc_alloc_malloc: %s\n", err.c_str());
    return p;
    // STUB: (void)size; (void)stream;
    // STUB: return nullptr;
    // END SOLUTION
}

extern "C" void cc_alloc_free(void* ptr, size_t size, int device, cudaStream_t stream) {
    (void)size; (void)device; (void)stream;  // the allocator knows each block's size and stream itself
    std::lock_guard<std::mutex> lock(g_mutex);
    // TODO(task 7.10, continued): caching().free(ptr, &st, &err), printing err if st != kOk (~4 lines).
    // BEGIN SOLUTION
    Status st;
    std::string err;
    caching().free(ptr, &st, &err);
    if (st != kOk) std::fprintf(stderr, "cc_alloc_free: %s\n", err.c_str());
    // STUB: (void)ptr;
    // END SOLUTION
}

extern "C" void cc_alloc_empty_cache() {
    std::lock_guard<std::mutex> lock(g_mutex);
    caching().empty_cache();
}

// The statistics of the plugged-in allocator (which "plain" picks), in alloc_tools.STATS order (kNumStats).
extern "C" void cc_alloc_stats(int which_plain, double* out) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (which_plain) snapshot(plain().stats(), 0.0, out);
    else snapshot(caching().stats(), caching().fragmentation(), out);
}

extern "C" void* cc_plain_malloc(size_t size, int device, cudaStream_t stream) {
    (void)device; (void)stream;
    std::lock_guard<std::mutex> lock(g_mutex);
    Status st;
    std::string err;
    void* p = plain().malloc((long long)size, &st, &err);
    if (!p && st != kOk) std::fprintf(stderr, "cc_plain_malloc: %s\n", err.c_str());
    return p;
}

extern "C" void cc_plain_free(void* ptr, size_t size, int device, cudaStream_t stream) {
    (void)size; (void)device; (void)stream;
    std::lock_guard<std::mutex> lock(g_mutex);
    Status st;
    std::string err;
    plain().free(ptr, &st, &err);
    if (st != kOk) std::fprintf(stderr, "cc_plain_free: %s\n", err.c_str());
}
}  // namespace torch_hooks
