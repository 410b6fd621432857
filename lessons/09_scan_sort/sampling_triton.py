"""Lesson 09, Triton track: the fused top-k / top-p sampler with Philox, the twin of sampling.cu's sample_top_k_top_p.

Same definition as the CUDA kernel, bit for bit: weights exp((l - max) / T) as 2^40-scaled int64 (every sum exact,
in any order), top-k and top-p as radix selects on the order keys of the logits (no sort), the draw as the first
index, in index order, whose running kept weight exceeds floor(word * total / 2^32), with word the first output of
Philox4x32-10 at counter (offset lo, offset hi, row, 0) and key (seed lo, seed hi). Triton's tl.philox is that
generator (its rounds and constants are Random123's), so for the same seed and offset this file draws the ids the
CUDA sampler draws; the tests check both against the same reference (tests/test_09_scan_sort.py, reference_sample).

One program per row, reading the row in tiles of BLOCK logits, one pass over the row per step. A radix select here
takes 4 bits per pass (8 passes for a 32-bit key): a pass compares each key with the 16 candidate thresholds at
once, a [16, BLOCK] tensor, and reduces along the row; the CUDA version takes 8 bits per pass with a shared-memory
histogram, which Triton does not give a program. README: "The scan and the sampler in Triton".

Versions (each wrapper is called like the CUDA launcher of the same name, tensors for pointers):
  select_by_mass        worked     top-p: the smallest prefix of the order whose weight reaches p of the total
  select_kth_largest    task 9.T2  top-k: the key of the k-th largest logit
  pick_token            task 9.T2  the inverse-CDF walk in index order, ties at the cut kept in index order
  sample_top_k_top_p    uses 9.T2  ids[r] = the token drawn from row r (-1 for a row with a NaN)

Defined results for bad input: those of sampling.cu (README, "Bad input"): a NaN row gets -1, temperature <= 0
(or NaN) is greedy, top_k <= 0 or >= vocab keeps all, top_p >= 1 keeps all, top_p <= 0 keeps one, vocab <= 0 or
> 2^23 writes -1 in every row.

Where it runs: on a GPU, compiled; on a CPU, Triton's interpreter (numpy). exp is tl.exp: on the GPU Triton emits
ex2.approx.f32 after a multiplication by log2(e), which is not CUDA's expf; a weight may differ from the CUDA
kernel's in its last bits, so a draw that lands within about 1e-6 (relative) of a boundary may fall on the other
side, which the tests allow (as they allow it between torch's exp and CUDA's expf). Needs the triton package:
`make setup EXTRAS=triton` (Linux). Tested with triton 3.6.0.

Run it:
  import cudacourse as cc; t = cc.triton_twin("09_scan_sort", "sampling_triton.py")
  t.sample_top_k_top_p(logits, ids, batch, vocab, T, top_k, top_p, seed, offset)
  make check T=9.T2                 (the task's graded checks)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cudacourse.triton_track import check_tensors, configs, size_class

MAX_VOCAB = 1 << 23  # vocab * 2^40 < 2^63: the int64 sums cannot overflow
BITS = tl.constexpr(4)     # bits of the key decided per radix pass,
DIGITS = tl.constexpr(16)  # so 16 candidate thresholds at once,
PASSES = tl.constexpr(8)   # and 8 passes for a 32-bit key
# A row in tiles of 512 or 1024 logits (the [16, BLOCK] comparisons of a pass bound the tile); the interpreter
# takes 4096 (a 50257-token row is 13 tiles there: its time goes with the number of operations, not their width).
ROWS = configs({"BLOCK": 4096}, BLOCK=[1024, 512], num_warps=[8, 4])


# ----------------------------------------------------------------------------------------------------
# Given: keys and weights
# ----------------------------------------------------------------------------------------------------


@triton.jit
def order_key(lg):
    # A float's order as an int64 in [0, 2^32): sampling.cu's order_key (-0.0 == +0.0; never called on NaN).
    b = lg.to(tl.int32, bitcast=True)
    b = tl.where(b == -2147483648, 0, b)         # -0.0 -> +0.0
    s = tl.where(b < 0, b ^ 0x7FFFFFFF, b)       # negative floats: the larger the magnitude, the smaller
    return s.to(tl.int64) + 2147483648


@triton.jit
def fixed_weight(lg, mx, inv_t, valid):
    # exp((lg - max) * (1 / T)) in (0, 1] as a 2^40-scaled int64; exactly 2^40 for the maximum (also +-inf);
    # 0 where not valid (past the end of the row).
    w = tl.where(lg == mx, 1.0, tl.exp((lg - mx) * inv_t))
    return tl.where(valid, (w * 1099511627776.0).to(tl.int64), 0)


@triton.jit
def load_tile(row, start, vocab, BLOCK: tl.constexpr):
    offs = start + tl.arange(0, BLOCK)
    valid = offs < vocab
    return tl.load(row + offs, mask=valid, other=0.0), offs, valid


# ----------------------------------------------------------------------------------------------------
# Task 9.T2, part 1 of 2: top-k as a radix select on counts
# ----------------------------------------------------------------------------------------------------


@triton.jit
def select_kth_largest(row, vocab, k, BLOCK: tl.constexpr):
    # The key tau of the k-th largest logit of the row (1 <= k <= vocab): the largest t with
    # count(key >= t) >= k. It is built 4 bits at a time from the top: before a pass, tau's bits above `shift`
    # are known (prefix); the pass counts, for each digit d in 0..15, the keys >= prefix + (d << shift), and
    # keeps the largest d whose count still reaches k (d = 0 always does).
    # TODO(task 9.T2): eight passes, shift = 28, 24, ..., 0 (~12 lines). select_by_mass below is the same loop
    # with weights instead of counts; one pass over the row, for the candidates `cand` ([16] int64):
    #     cnt = tl.zeros([16], tl.int32)
    #     for start in range(0, vocab, BLOCK):
    #         lg, offs, valid = load_tile(row, start, vocab, BLOCK)
    #         ge = (order_key(lg)[None, :] >= cand[:, None]) & valid[None, :]      # [16, BLOCK]
    #         cnt += tl.sum(ge.to(tl.int32), axis=1)
    # Hint: `for i in tl.static_range(8): shift = 28 - 4 * i` unrolls the passes; the largest digit whose count
    # reaches k is tl.max(tl.where(cnt >= k, digits, 0)) with digits = tl.arange(0, 16).to(tl.int64).
    return tl.zeros([], tl.int64)  # placeholder so the stub runs: wrong on purpose


# ----------------------------------------------------------------------------------------------------
# Worked example: top-p as a radix select on weights
# ----------------------------------------------------------------------------------------------------
# The kept set so far is (tau, m): the keys above tau, and the first m keys equal to tau in index order (all
# keys when ALL). S(t) = the set's weight at keys >= t. With need = ceil(p * S(0)), at least 1, the top-p cut is
# the largest key t with S(t) >= need; the keys above it weigh less than need, and of the keys equal to it (each
# weighing w(t)) the first ceil((need - S(above)) / w(t)) are kept. The m keys at tau are one group of known
# weight m * w(tau): only keys above tau are summed from the row.


@triton.jit
def set_mass_at_least(row, vocab, mx, inv_t, tau, m, w_tau, ALL: tl.constexpr, cand, BLOCK: tl.constexpr):
    # S(cand[d]) for each candidate threshold cand[d] (an int64 tensor [16]).
    s = tl.zeros(cand.shape, tl.int64)
    for start in range(0, vocab, BLOCK):
        lg, offs, valid = load_tile(row, start, vocab, BLOCK)
        key = order_key(lg)
        w = fixed_weight(lg, mx, inv_t, valid)
        if not ALL:
            w = tl.where(key > tau, w, 0)  # the keys at tau come in as one group below
        s += tl.sum(tl.where(key[None, :] >= cand[:, None], w[None, :], 0), axis=1)
    if not ALL:
        s += tl.where(cand <= tau, m * w_tau, 0)
    return s


@triton.jit
def select_by_mass(row, vocab, mx, inv_t, tau, m, w_tau, p, ALL: tl.constexpr, BLOCK: tl.constexpr):
    digits = tl.arange(0, DIGITS).to(tl.int64)
    z = tl.max(set_mass_at_least(row, vocab, mx, inv_t, tau, m, w_tau, ALL, digits * 0, BLOCK), axis=0)
    want = tl.ceil(tl.full([], p, tl.float32).to(tl.float64) * z.to(tl.float64))  # ceil((double)p * (double)Z)
    need = tl.where(want < 1.0, 1, tl.where(want >= z.to(tl.float64), z, want.to(tl.int64)))
    prefix = tl.zeros([], tl.int64)
    for i in tl.static_range(PASSES):
        shift = 32 - BITS * (i + 1)
        cand = prefix + (digits << shift)
        s = set_mass_at_least(row, vocab, mx, inv_t, tau, m, w_tau, ALL, cand, BLOCK)
        prefix += tl.max(tl.where(s >= need, digits, 0), axis=0) << shift
    # the cut is key `prefix`: the set's weight above it, how many of the set's keys equal it, and their weight
    above = tl.zeros([], tl.int64)
    group = tl.zeros([], tl.int64)
    w_cut = tl.zeros([], tl.int64)
    for start in range(0, vocab, BLOCK):
        lg, offs, valid = load_tile(row, start, vocab, BLOCK)
        key = order_key(lg)
        w = fixed_weight(lg, mx, inv_t, valid)
        in_set = valid
        if not ALL:
            in_set = valid & (key > tau)
        above += tl.sum(tl.where(in_set & (key > prefix), w, 0), axis=0)
        group += tl.sum((in_set & (key == prefix)).to(tl.int64), axis=0)
        w_cut = tl.maximum(w_cut, tl.max(tl.where(valid & (key == prefix), w, 0), axis=0))
    if not ALL:
        above += tl.where(tau > prefix, m * w_tau, 0)
        group += tl.where(tau == prefix, m, 0)
    keep = (need - above + w_cut - 1) // tl.maximum(w_cut, 1)  # w_cut >= 1 here: the group reaches need
    return prefix, tl.minimum(keep, group)


# ----------------------------------------------------------------------------------------------------
# Task 9.T2, part 2 of 2: the inverse-CDF walk
# ----------------------------------------------------------------------------------------------------


@triton.jit
def pick_token(row, vocab, mx, inv_t, tau, m, target, BLOCK: tl.constexpr):
    # The first index i whose running kept weight (the kept weights of indices 0..i) exceeds target
    # (0 <= target < the kept set's total). A key is kept if it is above tau, or equal to tau and among the first
    # m such keys in index order. Walk the row in tiles, carrying two totals from tile to tile: the keys equal to
    # tau seen so far, and the kept weight so far.
    # TODO(task 9.T2): the tile loop (~14 lines). Per tile, with lg, offs, valid = load_tile(...), key = order_key(lg):
    #   tie rank: ties = (valid & (key == tau)).to(tl.int64); rank = tie_carry + tl.cumsum(ties, axis=0) - ties
    #   kept weight: w = tl.where((key > tau) | ((ties > 0) & (rank < m)), fixed_weight(...), 0)
    #   running weight: run = the weight carried from earlier tiles + tl.cumsum(w, axis=0); the answer is the
    #   smallest offs where
    #   run > target (tl.min over tl.where(valid & (run > target), offs, vocab)), the smallest over all tiles.
    # Hint: tl.cumsum is an inclusive scan (scan_triton.py's worked example); an exclusive one is it minus the
    # element. Triton has no break: walk every tile and keep the minimum (`best = tl.minimum(best, ...)`).
    return tl.zeros([], tl.int32)  # placeholder so the stub runs: wrong on purpose


# ----------------------------------------------------------------------------------------------------
# The kernel and its wrapper
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=ROWS, key=["vocab_class"])
@triton.jit
def sample_kernel(logits_ptr, ids_ptr, vocab, temperature, k, p, seed, off_lo, off_hi, vocab_class,
                  USE_P: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    # 1 / T rounded once in float32, as the CUDA kernel's 1.0f / temperature (div_rn: Triton's / is approximate)
    inv_t = tl.math.div_rn(tl.full([], 1.0, tl.float32), tl.full([], temperature, tl.float32))
    row = logits_ptr + r.to(tl.int64) * vocab
    # the maximum, and whether the row holds a NaN
    mx = tl.full([], float("-inf"), tl.float32)
    nans = tl.zeros([], tl.int32)
    for start in range(0, vocab, BLOCK):
        lg, offs, valid = load_tile(row, start, vocab, BLOCK)
        isnan = valid & (lg != lg)
        nans += tl.sum(isnan.to(tl.int32), axis=0)
        mx = tl.maximum(mx, tl.max(tl.where(valid & ~isnan, lg, float("-inf")), axis=0))
    # the kept set (tau, m): all (tau below every key), then top-k, then top-p within it
    tau = tl.full([], -1, tl.int64)
    m = tl.zeros([], tl.int64)
    if k > 0:
        tau = select_kth_largest(row, vocab, k, BLOCK)
        above = tl.zeros([], tl.int64)
        for start in range(0, vocab, BLOCK):
            lg, offs, valid = load_tile(row, start, vocab, BLOCK)
            above += tl.sum((valid & (order_key(lg) > tau)).to(tl.int64), axis=0)
        m = k - above
    if USE_P:
        w_tau = tl.zeros([], tl.int64)
        if k > 0:
            for start in range(0, vocab, BLOCK):
                lg, offs, valid = load_tile(row, start, vocab, BLOCK)
                w = fixed_weight(lg, mx, inv_t, valid)
                w_tau = tl.maximum(w_tau, tl.max(tl.where(valid & (order_key(lg) == tau), w, 0), axis=0))
            tau, m = select_by_mass(row, vocab, mx, inv_t, tau, m, w_tau, p, False, BLOCK)
        else:
            tau, m = select_by_mass(row, vocab, mx, inv_t, tau, m, w_tau, p, True, BLOCK)
    # the kept set's total weight, then the target floor(word * total / 2^32), word from Philox
    total = tl.zeros([], tl.int64)
    w_tau = tl.zeros([], tl.int64)
    for start in range(0, vocab, BLOCK):
        lg, offs, valid = load_tile(row, start, vocab, BLOCK)
        key = order_key(lg)
        w = fixed_weight(lg, mx, inv_t, valid)
        total += tl.sum(tl.where(key > tau, w, 0), axis=0)
        w_tau = tl.maximum(w_tau, tl.max(tl.where(valid & (key == tau), w, 0), axis=0))
    total += m * w_tau
    zero = tl.zeros([1], tl.uint32)
    # (tl.cast, not .to(): Triton passes an argument equal to 1 as a constexpr, which has no .to())
    word, _, _, _ = tl.philox(seed, zero + tl.cast(off_lo, tl.uint32), zero + tl.cast(off_hi, tl.uint32),
                              zero + r.to(tl.uint32), zero)
    word = tl.max(word.to(tl.uint64), axis=0)
    t64 = total.to(tl.uint64)
    target = ((t64 >> 32) * word + (((t64 & 0xFFFFFFFF) * word) >> 32)).to(tl.int64)
    idx = pick_token(row, vocab, mx, inv_t, tau, m, target, BLOCK)
    tl.store(ids_ptr + r, tl.where(nans > 0, -1, idx))


def sample_top_k_top_p(logits: torch.Tensor, ids: torch.Tensor, batch: int, vocab: int, temperature: float,
                       top_k: int, top_p: float, seed: int, offset: int) -> None:
    """ids[r] = a token drawn from row r of logits [batch, vocab] (float32, row-major) under temperature, top_k and
    top_p, with Philox (seed, offset, r): the same arguments give the ids sampling.cu's sampler gives."""
    check_tensors("sample_top_k_top_p", logits=logits, ids=(ids, torch.int32))
    if batch <= 0:
        return
    if logits.numel() < batch * max(vocab, 0) or ids.numel() < batch:
        raise ValueError(f"sample_top_k_top_p: logits ({logits.numel()}) and ids ({ids.numel()}) are smaller than "
                         f"[batch={batch}, vocab={vocab}] and [batch]")
    if vocab <= 0 or vocab > MAX_VOCAB:
        ids[:batch].fill_(-1)  # no token (sampling.cu's launcher does the same)
        return
    if not 0 <= seed < 2**64 or not 0 <= offset < 2**64:
        raise ValueError(f"sample_top_k_top_p: seed ({seed}) and offset ({offset}) are unsigned 64-bit integers")
    # The scalars as the CUDA kernel sees them (float32 arguments): a temperature that rounds to 0 (or NaN, or <= 0) is
    # greedy; a top_p that rounds to 1.0 (from 1 - 2^-25 up) or NaN keeps every token.
    greedy = not temperature > 2.0**-150
    k = 1 if greedy else (top_k if 0 < top_k < vocab else 0)
    use_p = top_p < 1.0 - 2.0**-25
    sample_kernel[(batch,)](logits, ids, vocab, 1.0 if greedy else temperature, k, top_p, seed, offset & 0xFFFFFFFF,
                            offset >> 32, size_class(vocab, 1024), USE_P=use_p)
