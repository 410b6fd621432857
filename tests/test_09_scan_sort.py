"""Graded checks of lesson 09 (scan, histogram, sort, sampling): lessons/09_scan_sort/*.cu.

Tasks (ids match the TODOs in the kernel files and the rows of the points table):
  9.1 warp and block scans (scan.cu: warp_inclusive_scan, block_exclusive_scan)            3 points
  9.2 three-phase device scan (scan.cu: scan_tiles_from_offsets_kernel)                     2 points
  9.3 single-pass device scan with decoupled look-back (scan.cu: decoupled_look_back)       4 points
  9.4 shared-memory privatized histogram (histogram.cu: histogram_shared_kernel)            3 points
  9.5 radix sort of 32-bit keys with values (radix_sort.cu: float_sort_key, warp_rank_digit) 5 points
  9.6 fused temperature/top-k/top-p sampling (sampling.cu: select_kth_largest, pick_token)  5 points
  9.7-9.10 speed on a GPU against PyTorch (not graded on the simulator)

Scans of integers must equal ``torch.cumsum`` exactly. Scans of floats are compared with a float64 reference under
``_scan_tolerance``: a float32 prefix sum rounds at each of its additions, in an order that depends on the kernel,
so ``|y_i - exact_i| <= 8 sqrt(h_i) u (|x_0| + ... + |x_i|)`` is allowed (Higham and Mary's probabilistic bound,
h_i the roundings on the way to y_i: README, "How exact is a float scan?"); torch.cumsum's own float32 result is
checked to lie inside the same bound. Sorted keys and indices must equal ``torch.sort(stable=True)`` exactly.
Sampled ids must equal a reference of the same definition on the same float32 weights and Philox draws
(``reference_sample``, exact integer sums); where the reference lands within 1e-6 of a boundary (the GPU's expf may
differ from torch's exp in the last bit) the id on the other side is accepted too. Their frequencies must pass a
chi-square test against the exact float64 distribution.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import cudacourse as cc
from cudacourse import check

LESSON = "09_scan_sort"
EPS32 = torch.finfo(torch.float32).eps
M32 = 0xFFFFFFFF


def _m() -> Any:
    return cc.lesson(LESSON)


def _big(m: Any, sim: int, gpu: int) -> int:
    """A size for the simulator (checked mode: tens of thousands of elements) or for a GPU."""
    return gpu if m.backend == "cuda" else sim


def _ints(name: str, n: int, lo: int = -100, hi: int = 101) -> torch.Tensor:
    return torch.randint(lo, hi, (n,), generator=check.rng(name), dtype=torch.int32)


def _work_scan(n: int, m: Any, name: str) -> torch.Tensor:
    """The scans' workspace (ceil(n / 1024) + 2 int64 words), filled with garbage: the launcher must set it up."""
    w = torch.randint(-(2**62), 2**62, (math.ceil(n / 1024) + 2,), generator=check.rng(name), dtype=torch.int64)
    return w.to(m.device)


# ----------------------------------------------------------------------------------------------------
# Scan checks
# ----------------------------------------------------------------------------------------------------

def _segmented_ref(x: torch.Tensor, seg: int | None) -> torch.Tensor:
    """Inclusive scan of each ``seg``-element segment (the whole vector when seg is None), int64 or float64."""
    xc = x.detach().cpu()
    xd = xc.long() if not xc.dtype.is_floating_point else xc.double()
    if seg is None:
        return xd.cumsum(0)
    n = xd.numel()
    pad = torch.zeros(math.ceil(n / seg) * seg, dtype=xd.dtype)
    pad[:n] = xd
    return pad.view(-1, seg).cumsum(1).view(-1)[:n]


def _scan_tolerance(x: torch.Tensor, seg: int | None) -> torch.Tensor:
    """Per element, Higham and Mary's probabilistic bound for a sum: 8 sqrt(h) u (|x_0| + ... + |x_i|), u = eps/2,
    with h = 64 + i / 1024 roundings on the way to y_i (a tile's own depth, at most 64, then one addition per earlier
    tile of at least 1024 elements). It holds unless rounding errors conspire (probability about 1e-14 each)."""
    ref_abs = _segmented_ref(x.detach().cpu().double().abs(), seg)
    n = ref_abs.numel()
    i = torch.arange(n, dtype=torch.float64) if seg is None else torch.arange(n, dtype=torch.float64) % seg
    return 8 * (EPS32 / 2) * torch.sqrt(64 + i / 1024) * ref_abs + 1e-37


def _assert_scan(got: torch.Tensor, x: torch.Tensor, *, seg: int | None, name: str, task: str, hint: str) -> None:
    ref = _segmented_ref(x, seg)
    if not got.dtype.is_floating_point:
        check.assert_close(got, ref.to(torch.int32), name=name, rtol=0, atol=0, task=task, hint=hint)
        return
    tol = _scan_tolerance(x, seg)
    # first the common report (never written, all zeros, wildly off), then the per-element bound
    check.assert_close(got, ref.float(), name=name, rtol=0, atol=float(tol.max()), task=task, hint=hint)
    err = (got.detach().cpu().double() - ref).abs()
    bad = (err > tol).nonzero().flatten()
    if bad.numel():
        i = int(bad[0])
        raise check.CheckFailure(
            f"{name} (task {task}): {bad.numel()} of {got.numel()} elements are further from the exact prefix sum "
            f"than float32 rounding explains; first at {i}: yours {float(got[i]):.9g}, exact {float(ref[i]):.9g}, "
            f"allowed error {float(tol[i]):.3g} (README, \"How exact is a float scan?\").\n  Hint: {hint}")


def _floats(name: str, n: int, m: Any, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    return (check.randn((n,), check.rng(name), "cpu", scale=scale) + offset).to(m.device)


def test_scan_tolerance_admits_torch_cumsum_and_catches_a_dropped_element() -> None:
    """The float bound is fair (torch.cumsum's own float32 scan passes it) and strict (one element left out of
    every prefix after it fails, as does a scan that restarts at a tile boundary)."""
    n = 70_001
    x = check.randn((n,), check.rng("9-tol"), "cpu")
    x[1000] = 2.5  # the element dropped below
    _assert_scan(torch.cumsum(x, 0), x, seg=None, name="torch.cumsum (float32)", task="9.2", hint="")
    shifted = x + 100.0  # every prefix positive and growing: the hardest case for a float prefix sum
    _assert_scan(torch.cumsum(shifted, 0), shifted, seg=None, name="torch.cumsum (float32, mean 100)", task="9.2",
                 hint="")
    wrong = torch.cumsum(x, 0)
    wrong[1000:] -= x[1000]
    with pytest.raises(AssertionError):
        _assert_scan(wrong, x, seg=None, name="a dropped element", task="9.2", hint="")
    restart = torch.cat([torch.cumsum(x[:4096], 0), torch.cumsum(x[4096:], 0)])
    with pytest.raises(AssertionError):
        _assert_scan(restart, x, seg=None, name="a restart at 4096", task="9.2", hint="")


# ----------------------------------------------------------------------------------------------------
# Worked examples (not graded: given complete; these keep them honest)
# ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 255, 257, 5000])
def test_worked_hillis_steele(n: int) -> None:
    m = _m()
    x = _ints(f"worked-hs-{n}", n).to(m.device)
    y = check.poisoned(n, torch.int32, m.device)
    with check.unchanged(x, names=["x"]):
        m.scan_segments_hillis_steele_i32(x, y, n)
    _assert_scan(y, x, seg=256, name="scan_segments_hillis_steele_i32", task="worked example",
                 hint="this kernel is given complete; did an edit change it?")
    xf = _floats(f"worked-hsf-{n}", n, m)
    yf = check.poisoned(n, torch.float32, m.device)
    m.scan_segments_hillis_steele_f32(xf, yf, n)
    _assert_scan(yf, xf, seg=256, name="scan_segments_hillis_steele_f32", task="worked example",
                 hint="this kernel is given complete; did an edit change it?")


# ----------------------------------------------------------------------------------------------------
# Task 9.1: warp and block scans
# ----------------------------------------------------------------------------------------------------

HINT_91 = ("task 9.1: warp_inclusive_scan takes the value of the lane d below (d = 1, 2, 4, 8, 16) and adds it only "
           "where the lane index is at least d; block_exclusive_scan scans each warp, lets warp 0 scan the warps' "
           "totals, and adds a warp's prefix to each of its lanes' exclusive values (an exclusive value is the "
           "inclusive value of the lane below, 0 in lane 0).")
SEG_SIZES = [5, 31, 32, 33, 1000, 1023, 1024, 1025, 70_001]  # (not 1: a 1-element scan is the input itself)


@pytest.mark.task("9.1")
@pytest.mark.parametrize("dtype", ["i32", "f32"])
@pytest.mark.parametrize("n", SEG_SIZES)
def test_warp_scan(dtype: str, n: int) -> None:
    m = _m()
    x = _ints(f"9.1-w-{n}", n).to(m.device) if dtype == "i32" else _floats(f"9.1-wf-{n}", n, m)
    y = check.poisoned(n, x.dtype, m.device)
    with check.unchanged(x, names=["x"]):
        getattr(m, f"scan_segments_warp_{dtype}")(x, y, n)
    _assert_scan(y, x, seg=32, name=f"scan_segments_warp_{dtype} (32-element segments)", task="9.1", hint=HINT_91)


@pytest.mark.task("9.1")
@pytest.mark.parametrize("dtype", ["i32", "f32"])
@pytest.mark.parametrize("n", SEG_SIZES)
def test_block_scan(dtype: str, n: int) -> None:
    m = _m()
    x = _ints(f"9.1-b-{n}", n).to(m.device) if dtype == "i32" else _floats(f"9.1-bf-{n}", n, m)
    y = check.poisoned(n, x.dtype, m.device)
    with check.unchanged(x, names=["x"]):
        getattr(m, f"scan_segments_block_{dtype}")(x, y, n)
    _assert_scan(y, x, seg=1024, name=f"scan_segments_block_{dtype} (1024-element segments)", task="9.1",
                 hint=HINT_91)


@pytest.mark.task("9.1")
def test_block_scan_special_inputs() -> None:
    """Ones (every prefix an exact integer in float32), a mean far from 0, large magnitudes, an unaligned view."""
    m = _m()
    n = 5000
    ones = torch.ones(n, device=m.device)
    y = check.poisoned(n, torch.float32, m.device)
    m.scan_segments_block_f32(ones, y, n)
    _assert_scan(y, ones, seg=1024, name="block scan of ones", task="9.1", hint=HINT_91)
    for scale, offset in ((1.0, 100.0), (1e30, 0.0)):
        x = _floats(f"9.1-special-{scale:g}-{offset:g}", n, m, scale=scale, offset=offset)
        y = check.poisoned(n, torch.float32, m.device)
        m.scan_segments_block_f32(x, y, n)
        _assert_scan(y, x, seg=1024, name=f"block scan (scale {scale:g}, offset {offset:g})", task="9.1",
                     hint=HINT_91)
    buf = _ints("9.1-unaligned", n + 1).to(m.device)
    y = check.poisoned(n, torch.int32, m.device)
    m.scan_segments_block_i32(buf[1:], y, n)
    _assert_scan(y, buf[1:], seg=1024, name="block scan of a view at offset 1", task="9.1", hint=HINT_91)


# ----------------------------------------------------------------------------------------------------
# Tasks 9.2 and 9.3: device-wide scans
# ----------------------------------------------------------------------------------------------------

HINT_92 = ("scan_tiles_from_offsets_kernel (TODO task 9.2): load the tile, exclusive-scan the threads' sums across "
           "the block, then scan each thread's items starting from the tile's offset (offsets[blockIdx.x]) plus that "
           "exclusive prefix, and store them; scan_tile_sums_kernel above does the first half.")
HINT_93 = ("decoupled_look_back (TODO task 9.3): publish (A, aggregate) at once; read the 32 status words before you "
           "(lane l: tile - 1 - l), read them again while any is X, add the values of the lanes up to the nearest P "
           "(lowest lane with P: __ballot_sync, __ffs) or all 32 if none, stop at a P or move 32 further back; "
           "publish (P, exclusive + aggregate).")
DEVICE_SIZES = [1, 1000, 4095, 4096, 4097, 70_001]
LOOKBACK_SIZES = [4097, 12_289, 70_001]  # more than one tile: tile 0 has nothing to look back at


def _device_scan(m: Any, version: str, dtype: str, x: torch.Tensor, n: int, work: torch.Tensor) -> torch.Tensor:
    y = check.poisoned(n, x.dtype, m.device)
    with check.unchanged(x, names=["x"]):
        getattr(m, f"scan_{version}_{dtype}")(x, y, n, work)
    return y


@pytest.mark.task("9.2")
@pytest.mark.parametrize("dtype", ["i32", "f32"])
@pytest.mark.parametrize("n", [*DEVICE_SIZES, "big"])
def test_three_phase(dtype: str, n: int | str) -> None:
    m = _m()
    size = _big(m, 2**18 + 3, 2**24 + 7) if n == "big" else int(n)
    x = _ints(f"9.2-{size}", size).to(m.device) if dtype == "i32" else _floats(f"9.2f-{size}", size, m)
    y = _device_scan(m, "three_phase", dtype, x, size, _work_scan(size, m, f"9.2-w-{size}"))
    _assert_scan(y, x, seg=None, name=f"scan_three_phase_{dtype} (n={size})", task="9.2", hint=HINT_92)


@pytest.mark.task("9.3")
@pytest.mark.parametrize("dtype", ["i32", "f32"])
@pytest.mark.parametrize("n", [*LOOKBACK_SIZES, "big"])
def test_lookback(dtype: str, n: int | str) -> None:
    m = _m()
    size = _big(m, 2**18 + 3, 2**24 + 7) if n == "big" else int(n)
    x = _ints(f"9.3-{size}", size).to(m.device) if dtype == "i32" else _floats(f"9.3f-{size}", size, m)
    y = _device_scan(m, "lookback", dtype, x, size, _work_scan(size, m, f"9.3-w-{size}"))
    _assert_scan(y, x, seg=None, name=f"scan_lookback_{dtype} (n={size})", task="9.3", hint=HINT_93)


@pytest.mark.task("9.3")
def test_lookback_repeated_calls_and_views() -> None:
    """The same workspace for several calls (the launcher resets it each time), and a view at offset 1."""
    m = _m()
    n = 20_000
    work = _work_scan(n, m, "9.3-rep")
    for k in range(3):
        x = _ints(f"9.3-rep-{k}", n).to(m.device)
        _assert_scan(_device_scan(m, "lookback", "i32", x, n, work), x, seg=None,
                     name=f"scan_lookback_i32, call {k + 1} on one workspace", task="9.3", hint=HINT_93)
    buf = _ints("9.3-view", n + 1).to(m.device)
    _assert_scan(_device_scan(m, "lookback", "i32", buf[1:], n, work), buf[1:], seg=None,
                 name="scan_lookback_i32 of a view at offset 1 (no 16-byte loads)", task="9.3", hint=HINT_93)


def test_worked_chained_scan() -> None:
    """The chained scan is given complete, but it scans its tiles with block_exclusive_scan: it passes once task 9.1
    does (not graded)."""
    m = _m()
    for n in (1, 4097, 70_001):
        x = _ints(f"worked-chained-{n}", n).to(m.device)
        y = _device_scan(m, "chained", "i32", x, n, _work_scan(n, m, f"wc-{n}"))
        _assert_scan(y, x, seg=None, name=f"scan_chained_i32 (n={n})", task="worked example",
                     hint="scan_chained_kernel is given complete, and uses block_exclusive_scan (task 9.1): do 9.1 "
                          "first; if 9.1 passes, did an edit change the kernel?")


def test_scans_ignore_empty_input() -> None:
    """n = 0: nothing to do, nothing written (no launch: a grid of 0 blocks is an error in CUDA)."""
    m = _m()
    x = torch.zeros(4, dtype=torch.int32, device=m.device)
    y = check.poisoned(4, torch.int32, m.device)
    for v in ("three_phase", "chained", "lookback"):
        getattr(m, f"scan_{v}_i32")(x, y, 0, _work_scan(1, m, "empty"))
    assert bool((y == check.INT_POISON).all()), "a scan of 0 elements wrote its output"


@pytest.mark.task("9.3")
def test_float_scans_carry_a_nan_forward() -> None:
    """The README's defined result for a NaN in a float scan: every prefix before it is a number, every prefix from it
    on is NaN (as torch.cumsum gives), across tiles."""
    m = _m()
    n, at = 9000, 5000
    x = _floats("9.3-nan", n, m).cpu()
    x[at] = float("nan")
    for version in ("three_phase", "lookback"):
        y = _device_scan(m, version, "f32", x.to(m.device), n, _work_scan(n, m, "9.3-nan-w")).cpu()
        assert bool(y[:at].isfinite().all()) and bool(y[at:].isnan().all()), (
            f"scan_{version}_f32 with a NaN at {at} (task 9.3): prefixes before it must be numbers and every prefix "
            f"from it on NaN; got {int(y[:at].isnan().sum())} NaN before and {int((~y[at:].isnan()).sum())} numbers "
            "after. " + HINT_93)


# ----------------------------------------------------------------------------------------------------
# Task 9.4: histograms
# ----------------------------------------------------------------------------------------------------

HINT_94 = ("histogram_shared_kernel (TODO task 9.4): zero the block's shared bins, barrier, count your part of the "
           "input into them with shared atomics (values outside [0, bins) are skipped), barrier, then add each "
           "nonzero bin to the global histogram with one atomicAdd.")


def _hist_ref(x: torch.Tensor, bins: int) -> torch.Tensor:
    xc = x.detach().cpu().long()
    return torch.bincount(xc[(xc >= 0) & (xc < bins)], minlength=bins)[:bins].int()


def _check_hist(m: Any, version: str, x: torch.Tensor, bins: int, what: str, task: str, hint: str) -> None:
    hist = check.poisoned(bins, torch.int32, m.device)
    with check.unchanged(x, names=["x"]):
        getattr(m, f"histogram_{version}")(x, hist, x.numel(), bins)
    check.assert_close(hist, _hist_ref(x, bins), name=f"histogram_{version} of {what}", rtol=0, atol=0, task=task,
                       hint=hint)


def _zipf(name: str, n: int, bins: int, s: float = 1.1) -> torch.Tensor:
    """n values in [0, bins) with P(b) proportional to 1 / (b + 1)^s (bin 0 the most frequent)."""
    p = 1.0 / torch.arange(1, bins + 1, dtype=torch.float64) ** s
    cdf = torch.cumsum(p / p.sum(), 0)
    u = torch.rand(n, generator=check.rng(name), dtype=torch.float64)
    return torch.searchsorted(cdf, u).clamp_(max=bins - 1).to(torch.int32)


HIST_CASES = [(1, 5), (33, 1), (1000, 7), (70_001, 256), (5000, 3000)]
HIST_GLOBAL_ONLY = (5000, 20_000)  # more bins than shared memory holds: v2 and v3 run v1 (ungraded)


@pytest.mark.task("9.4")
@pytest.mark.parametrize("n,bins", HIST_CASES)
def test_histogram_shared(n: int, bins: int) -> None:
    m = _m()
    x = _ints(f"9.4-{n}-{bins}", n, -3, bins + 3)  # some values outside [0, bins)
    x[0] = bins // 2  # and at least one inside: an all-zero histogram never passes
    _check_hist(m, "v2_shared", x.to(m.device), bins, f"{n} values in {bins} bins", "9.4", HINT_94)


@pytest.mark.task("9.4")
def test_histogram_shared_special_inputs() -> None:
    """All values equal (every atomic on one bin), Zipf-distributed, a view at offset 1, n not a multiple of 4,
    and n = 0 (the launcher zeroes the bins)."""
    m = _m()
    n = _big(m, 40_003, 2**22 + 3)
    _check_hist(m, "v2_shared", torch.full((n,), 3, dtype=torch.int32, device=m.device), 8, "one repeated value",
                "9.4", HINT_94)
    _check_hist(m, "v2_shared", _zipf("9.4-zipf", n, 256).to(m.device), 256, "Zipf-distributed values", "9.4",
                HINT_94)
    buf = _ints("9.4-view", 10_002, 0, 64).to(m.device)
    _check_hist(m, "v2_shared", buf[1:], 64, "a view at offset 1", "9.4", HINT_94)
    hist = check.poisoned(16, torch.int32, m.device)
    m.histogram_v2_shared(buf, hist, 0, 16)
    check.assert_close(hist, torch.zeros(16, dtype=torch.int32), name="histogram of 0 values", rtol=0, atol=0,
                       task="9.4", hint="the launcher zeroes the bins before counting")


def test_histogram_v2_falls_back_to_global_for_many_bins() -> None:
    """More bins than fit in 48 KB of shared memory: the given launcher runs the global version (not graded)."""
    m = _m()
    n, bins = HIST_GLOBAL_ONLY
    x = _ints("v2-many-bins", n, -3, bins + 3).to(m.device)
    _check_hist(m, "v2_shared", x, bins, f"{n} values in {bins} bins", "given launcher",
                "histogram_v2_shared's launcher is given complete; did an edit change it?")


@pytest.mark.parametrize("version", ["v1_global", "v3_warp_aggregated"])
def test_worked_histograms(version: str) -> None:
    m = _m()
    for n, bins in [*HIST_CASES, HIST_GLOBAL_ONLY]:
        x = _ints(f"worked-{version}-{n}-{bins}", n, -3, bins + 3).to(m.device)
        _check_hist(m, version, x, bins, f"{n} values in {bins} bins", "worked example",
                    "this kernel is given complete; did an edit change it?")
    _check_hist(m, version, _zipf("worked-zipf", 20_001, 256).to(m.device), 256, "Zipf values", "worked example",
                "this kernel is given complete; did an edit change it?")


# ----------------------------------------------------------------------------------------------------
# Task 9.5: radix sort
# ----------------------------------------------------------------------------------------------------

HINT_95 = ("task 9.5: float_sort_key sets the sign bit of positive floats and flips every bit of negative ones (NaN "
           "-> 0xffffffff, -0.0 as +0.0); warp_rank_digit finds the lanes with the same digit (one __ballot_sync per "
           "digit bit, and one for `valid`), ranks a key by the warp's running count of its digit plus the peers "
           "below it, and lets the lowest peer add the peers to the count, between two __syncwarp().")


def _work_sort(n: int, m: Any, name: str) -> torch.Tensor:
    """The sort's workspace (2n + n/8 + 1024 int32 words), filled with garbage."""
    w = torch.randint(-(2**31), 2**31 - 1, (2 * n + n // 8 + 1024,), generator=check.rng(name), dtype=torch.int32)
    return w.to(m.device)


def _check_argsort(m: Any, x: torch.Tensor, what: str) -> None:
    n = x.numel()
    out = check.poisoned(n, torch.float32, m.device)
    idx = check.poisoned(n, torch.int32, m.device)
    with check.unchanged(x, names=["x"]):
        m.argsort_f32(x, out, idx, n, _work_sort(n, m, f"9.5-w-{what}-{n}"))
    want_v, want_i = torch.sort(x.detach().cpu(), stable=True)
    check.assert_close(idx, want_i.int(), name=f"argsort_f32 indices of {what} (n={n})", rtol=0, atol=0, task="9.5",
                       hint=HINT_95 + " Equal keys keep their input order (a stable sort), as torch.sort(stable=True).")
    got_bits = out.detach().cpu().view(torch.int32)
    want_bits = want_v.view(torch.int32)
    same = (got_bits == want_bits) | (out.detach().cpu().isnan() & want_v.isnan())
    if not bool(same.all()):
        i = int((~same).nonzero()[0])
        raise check.CheckFailure(f"argsort_f32 sorted values of {what} (task 9.5): at {i} yours "
                                 f"{float(out[i])!r}, expected {float(want_v[i])!r} (the bits of the input float, "
                                 f"moved: -0.0 stays -0.0).\n  Hint: {HINT_95}")


@pytest.mark.task("9.5")
@pytest.mark.parametrize("n", [2, 33, 4095, 4097, 20_001, "big"])
def test_argsort(n: int | str) -> None:
    m = _m()
    size = _big(m, 50_001, 2**22 + 5) if n == "big" else int(n)
    _check_argsort(m, _floats(f"9.5-{size}", size, m), "random floats")


@pytest.mark.task("9.5")
def test_argsort_special_values() -> None:
    """Ties (small integers), both zeros, +-inf, NaN of both signs, all-equal keys, denormals."""
    m = _m()
    n = 9000
    g = check.rng("9.5-special")
    x = torch.randint(-3, 4, (n,), generator=g).float()
    pos = torch.randperm(n, generator=g)[:12]
    x[pos[0:3]] = -0.0
    x[pos[3:5]] = float("inf")
    x[pos[5:7]] = -float("inf")
    x[pos[7]] = float("nan")
    x[pos[8]] = -float("nan")
    x[pos[9]] = 1e-40   # a denormal
    x[pos[10]] = -1e-40
    x[pos[11]] = 3.0e38
    _check_argsort(m, x.to(m.device), "small integers with +-0, +-inf, NaN and denormals")
    _check_argsort(m, torch.full((n,), -1.5, device=m.device), "a constant vector")


def test_sorts_of_nothing_write_nothing() -> None:
    """n = 0: the sort's launcher returns without a launch (not graded: the launcher is given)."""
    m = _m()
    x = torch.zeros(4, device=m.device)
    out, idx = check.poisoned(4, torch.float32, m.device), check.poisoned(4, torch.int32, m.device)
    m.argsort_f32(x, out, idx, 0, _work_sort(4, m, "9.5-empty"))
    assert bool(out.isnan().all()) and bool((idx == check.INT_POISON).all()), "a sort of 0 keys wrote its output"


@pytest.mark.task("9.5")
@pytest.mark.parametrize("case", ["random", "repeated", "few-bits"])
def test_radix_sort_pairs(case: str) -> None:
    m = _m()
    n = 20_003
    g = check.rng(f"9.5-pairs-{case}")
    keys = torch.randint(-(2**31), 2**31 - 1, (n,), generator=g, dtype=torch.int64)
    if case == "repeated":
        keys[::2] = 0x7FFFFFFF      # half the keys one value
    elif case == "few-bits":
        keys &= 0x00FF00F0          # most digits constant in every key
    k32 = keys.to(torch.int32)      # the bits; the kernel reads them as unsigned
    vals = torch.randint(0, 2**30, (n,), generator=g, dtype=torch.int32)
    ko = check.poisoned(n, torch.int32, m.device)
    vo = check.poisoned(n, torch.int32, m.device)
    k_dev, v_dev = k32.to(m.device), vals.to(m.device)
    with check.unchanged(k_dev, v_dev, names=["keys", "vals"]):
        m.radix_sort_pairs_u32(k_dev, v_dev, ko, vo, n, _work_sort(n, m, f"9.5-wp-{case}"))
    want_k, order = torch.sort(k32.long() & M32, stable=True)
    check.assert_close(ko.cpu().long() & M32, want_k, name=f"radix_sort_pairs_u32 keys ({case})", rtol=0, atol=0,
                       task="9.5", hint=HINT_95)
    check.assert_close(vo, vals[order], name=f"radix_sort_pairs_u32 values ({case})", rtol=0, atol=0, task="9.5",
                       hint=HINT_95 + " Values travel with their keys; equal keys keep their input order.")


# ----------------------------------------------------------------------------------------------------
# Task 9.6: sampling
# ----------------------------------------------------------------------------------------------------

HINT_96 = ("task 9.6: select_kth_largest counts, per pass, the keys matching the digits found so far and picks the "
           "digit where the count from the top reaches what is still needed (select_by_mass is the worked example "
           "on weights); pick_token walks the row in index order, keeps a key above tau or among the first m equal "
           "to tau (the tie rank is a block scan of tie counts), and returns the index where the running kept "
           "weight first exceeds the target.")


def philox4x32_10(ctr: list[int], key: list[int]) -> list[int]:
    """Philox4x32-10 (Salmon et al. 2011) in Python integers: the same function as sampling.cu's."""
    c = [int(v) & M32 for v in ctr]
    k0, k1 = int(key[0]) & M32, int(key[1]) & M32
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k1) & M32, p0 & M32]
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c


def _order_key(x: torch.Tensor) -> torch.Tensor:
    """sampling.cu's order_key: float bits -> int64 keys with the float order (-0.0 == +0.0)."""
    b = x.float().contiguous().view(torch.int32).long() & M32
    b = torch.where(b == 0x80000000, torch.zeros_like(b), b)
    return torch.where((b & 0x80000000) != 0, (~b) & M32, b | 0x80000000)


def kept_weights(row: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The float64 weight of each token of one row after temperature, top-k and top-p (0 outside the kept set),
    by the lesson's definition: order by logit (ties: smaller index first), keep the first k, then the shortest
    prefix of those whose weight reaches top_p of theirs. (Exact arithmetic: the distribution to test against.)"""
    v = row.numel()
    k = top_k
    if not temperature > 0:
        k, temperature = 1, 1.0
    if not 0 < k < v:
        k = v
    ld = row.double()
    mx = ld.max()
    w = torch.where(ld == mx, torch.ones_like(ld), torch.exp((ld - mx) / temperature))
    order = torch.sort(-_order_key(row), stable=True).indices[:k]
    keep = k
    if top_p < 1.0:
        cum = torch.cumsum(w[order], 0)
        keep = min(int(torch.searchsorted(cum, top_p * cum[-1])), k - 1) + 1
    out = torch.zeros_like(w)
    out[order[:keep]] = w[order[:keep]]
    return out


def fixed_weights(row: torch.Tensor, temperature: float) -> torch.Tensor:
    """sampling.cu's weights: exp((row - max) * (1 / T)) in float32 (1 for the maximum), times 2^40, truncated to
    int64. Only exp may differ from the GPU's expf, in the last bit."""
    lf = row.float()
    mx = lf.max()
    inv_t = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(temperature, dtype=torch.float32)
    w = torch.exp((lf - mx) * inv_t)
    w = torch.where(lf == mx, torch.ones_like(w), w)
    return (w * 2.0**40).long()  # exact scaling by a power of 2, then truncation as the kernel's conversion


SLACK = 1e-6  # relative: how far a last-bit difference of exp (about 2.4e-7 of a sum) is allowed to move a boundary


def reference_sample(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, seed: int,
                     offset: int) -> tuple[list[int], list[set[int]]]:
    """(ids, allowed): sampling.cu's definition in exact integer arithmetic on the same float32 weights (the top-k
    prefix, the top-p prefix reaching ceil(p * Z), the first index whose running kept weight exceeds
    floor(word * total / 2^32)), and per row the ids a kernel may return when its weights differ from these in the
    last bit of exp: the top-p cut one token either way and the draw one boundary either way, wherever the reference
    lands within SLACK (relative) of them. Most rows allow one id only."""
    ids, allowed = [], []
    for r in range(logits.shape[0]):
        row = logits[r].detach().cpu().float()
        v = row.numel()
        if bool(row.isnan().any()):
            ids.append(-1)
            allowed.append({-1})
            continue
        t, k = temperature, top_k
        if not t > 0:
            t, k = 1.0, 1
        if not 0 < k < v:
            k = v
        w = fixed_weights(row, t)
        order = torch.sort(-_order_key(row), stable=True).indices[:k]
        cuts = [k - 1]
        p = float(torch.tensor(top_p, dtype=torch.float32))
        if p < 1.0:
            cum = torch.cumsum(w[order], 0)
            z = int(cum[-1])
            need = min(max(math.ceil(p * z), 1), z)
            cut = int(torch.searchsorted(cum, torch.tensor(need), right=False))
            cuts = [cut]
            if cut > 0 and need - int(cum[cut - 1]) < SLACK * z:
                cuts.append(cut - 1)
            if cut + 1 < k and int(cum[cut]) - need < SLACK * z:
                cuts.append(cut + 1)
        word = philox4x32_10([offset & M32, offset >> 32, r, 0], [seed & M32, seed >> 32])[0]
        ok: set[int] = set()
        for j, cut in enumerate(cuts):
            kept = torch.zeros(v, dtype=torch.int64)
            kept[order[:cut + 1]] = w[order[:cut + 1]]
            total = int(kept.sum())
            target = (total >> 32) * word + (((total & M32) * word) >> 32)  # floor(word * total / 2^32)
            cdf = torch.cumsum(kept, 0)
            slack = int(SLACK * total)
            for tgt in (target, max(target - slack, 0), min(target + slack, total - 1)):
                i = int(torch.searchsorted(cdf, torch.tensor(tgt), right=True))
                ok.add(i)
                if j == 0 and tgt == target:
                    ids.append(i)
        allowed.append(ok)
    return ids, allowed


def _sample(m: Any, logits: torch.Tensor, temperature: float, top_k: int, top_p: float, seed: int,
            offset: int) -> torch.Tensor:
    b, v = logits.shape
    ids = check.poisoned(b, torch.int32, m.device)
    with check.unchanged(logits, names=["logits"]):
        m.sample_top_k_top_p(logits, ids, b, v, temperature, top_k, top_p, seed, offset)
    return ids.cpu()


def _check_ids(m: Any, logits: torch.Tensor, temperature: float, top_k: int, top_p: float, what: str,
               seed: int = 1234, offset: int = 7) -> None:
    got = _sample(m, logits, temperature, top_k, top_p, seed, offset)
    want, allowed = reference_sample(logits, temperature, top_k, top_p, seed, offset)
    bad = [(r, g, w) for r, (g, w, ok) in enumerate(zip(got.tolist(), want, allowed, strict=True)) if g not in ok]
    if bad:
        r, g, w = bad[0]
        never = " (never written)" if g == check.INT_POISON else ""
        raise check.CheckFailure(
            f"sample_top_k_top_p on {what} (T={temperature}, top_k={top_k}, top_p={top_p}, seed={seed}, "
            f"offset={offset}) (task 9.6): {len(bad)} of {logits.shape[0]} rows drew another token; row {r}: yours "
            f"{g}{never}, expected {w}.\n  Hint: {HINT_96}")


def test_worked_philox_known_answers() -> None:
    """Random123's known-answer vectors for Philox4x32-10 (tests/kat_vectors), and random counters and keys against
    the Python version above."""
    m = _m()
    kat = [([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
           ([M32] * 4, [M32] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
           ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])]
    g = check.rng("philox")
    rand = torch.randint(0, 2**32, (8, 6), generator=g, dtype=torch.int64).tolist()
    cases = [(c, k) for c, k, _ in kat] + [(r[:4], r[4:]) for r in rand]
    ctr = torch.tensor([v for c, _ in cases for v in c], dtype=torch.int64).to(torch.int32)
    key = torch.tensor([v for _, k in cases for v in k], dtype=torch.int64).to(torch.int32)
    out = check.poisoned(4 * len(cases), torch.int32, m.device)
    m.philox4x32_10_batch(ctr.to(m.device), key.to(m.device), out, len(cases))
    got = [v & M32 for v in out.cpu().tolist()]
    for i, (c, k) in enumerate(cases):
        want = kat[i][2] if i < len(kat) else philox4x32_10(c, k)
        assert got[4 * i:4 * i + 4] == want, f"Philox case {i}: {[hex(v) for v in got[4 * i:4 * i + 4]]}"


SAMPLE_CASES = [  # (batch, vocab, temperature, top_k, top_p)
    (6, 100, 1.0, 0, 1.0),
    (6, 1000, 0.7, 10, 1.0),
    (6, 1000, 1.3, 0, 0.5),
    (6, 3000, 0.8, 50, 0.9),
    (3, 50_257, 0.8, 50, 0.9),   # a GPT-2 vocabulary: many chunks of the scan, more than one block's width
    (3, 50_257, 1.0, 0, 0.95),
]


@pytest.mark.task("9.6")
@pytest.mark.parametrize("case", SAMPLE_CASES, ids=lambda c: "b{}-v{}-T{}-k{}-p{}".format(*c))
def test_sample_ids_match_the_reference(case: tuple[int, int, float, int, float]) -> None:
    m = _m()
    b, v, t, k, p = case
    # scale 4: a drawn token's probability is rarely below 1e-3, so a draw within 1e-6 of a boundary is rare
    logits = check.randn((b, v), check.rng(f"9.6-{case}"), m.device, scale=4.0)
    _check_ids(m, logits, t, k, p, f"random logits [{b}, {v}]")


@pytest.mark.task("9.6")
def test_sample_ties_and_special_rows() -> None:
    """Integer logits (ties at the top-k and top-p cuts), greedy (T = 0: the first maximum), a NaN row (-1), +inf
    logits (they share the weight), a row of -inf (uniform), top_k >= vocab, vocab 1."""
    m = _m()
    g = check.rng("9.6-special")
    ties = torch.randint(-2, 3, (8, 40), generator=g).float().to(m.device)
    _check_ids(m, ties, 0.9, 7, 0.6, "integer logits (ties)")
    _check_ids(m, ties, 1.0, 3, 1.0, "integer logits, top-3")
    greedy = _sample(m, ties, 0.0, 0, 1.0, 5, 0)
    first_max = torch.argmax(ties.cpu(), dim=1).int()
    check.assert_close(greedy, first_max, name="greedy sampling (temperature 0)", rtol=0, atol=0, task="9.6",
                       hint="temperature <= 0 keeps only the first maximum (top-1)")
    special = check.randn((4, 300), g, "cpu")
    special[0, 17] = float("nan")
    special[1, [5, 250]] = float("inf")
    special[2] = -float("inf")
    ids = _sample(m, special.to(m.device), 1.0, 0, 1.0, 99, 3)
    assert int(ids[0]) == -1, f"a row with a NaN must give -1, got {int(ids[0])}"
    assert int(ids[1]) in (5, 250), f"with +inf logits only those may be drawn, got {int(ids[1])}"
    assert 0 <= int(ids[2]) < 300, f"a row of -inf draws uniformly, got {int(ids[2])}"
    _check_ids(m, special[1:].to(m.device), 1.0, 0, 1.0, "+inf and -inf rows", seed=99, offset=3)
    _check_ids(m, check.randn((3, 64), g, m.device), 1.0, 500, 1.0, "top_k larger than the vocabulary")
    one = check.randn((5, 1), g, m.device)
    check.assert_close(_sample(m, one, 1.0, 0, 0.5, 1, 1), torch.zeros(5, dtype=torch.int32), name="vocab 1",
                       rtol=0, atol=0, task="9.6", hint="one token: always 0")
    flat = torch.full((16, 300), 0.25, device=m.device)  # every logit equal: top-3 is tokens 0, 1, 2 (index order)
    _check_ids(m, flat, 1.0, 3, 1.0, "a constant row, top-3")
    assert set(_sample(m, flat, 1.0, 3, 1.0, 8, 2).tolist()) <= {0, 1, 2}, "equal logits: top-3 keeps tokens 0, 1, 2"


def test_sampler_empty_and_vocab_zero() -> None:
    """batch 0: nothing written; vocab 0: -1 in every row (the given launcher, not graded)."""
    m = _m()
    logits = torch.zeros(4, device=m.device)
    ids = check.poisoned(3, torch.int32, m.device)
    m.sample_top_k_top_p(logits, ids, 0, 4, 1.0, 0, 1.0, 1, 0)
    assert bool((ids == check.INT_POISON).all()), "a batch of 0 rows wrote ids"
    m.sample_top_k_top_p(logits, ids, 3, 0, 1.0, 0, 1.0, 1, 0)
    assert ids.cpu().tolist() == [-1, -1, -1], f"vocab 0 must give -1 in every row, got {ids.cpu().tolist()}"


@pytest.mark.task("9.6")
def test_sample_is_reproducible_and_moves_with_the_offset() -> None:
    m = _m()
    logits = check.randn((16, 500), check.rng("9.6-repro"), m.device)
    a = _sample(m, logits, 1.0, 40, 0.9, 2024, 11)
    b = _sample(m, logits, 1.0, 40, 0.9, 2024, 11)
    c = _sample(m, logits, 1.0, 40, 0.9, 2024, 12)
    assert torch.equal(a, b), "the same seed and offset must give the same ids"
    assert not torch.equal(a, c), "another offset (the next decoding step) must draw again"


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    """(statistic, p-value) of observed counts against probabilities (categories with probability 0 excluded:
    a count there fails separately)."""
    n = float(counts.sum())
    keep = probs > 0
    exp = probs[keep] * n
    stat = float(((counts[keep].double() - exp) ** 2 / exp).sum())
    dof = int(keep.sum()) - 1
    if dof == 0:  # one token kept: every draw is that token (checked apart), nothing to test here
        return stat, 1.0
    p = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                      torch.tensor(stat / 2, dtype=torch.float64)))
    return stat, p


@pytest.mark.task("9.6")
@pytest.mark.parametrize("config,rows", [((1.0, 0, 1.0), 2400), ((0.8, 4, 0.7), 1200)], ids=["softmax", "top4-p0.7"])
def test_sample_distribution_chi_square(config: tuple[float, int, float], rows: int) -> None:
    """Thousands of rows with the same logits draw independently (Philox's counter holds the row): the counts per
    token must fit the exact distribution (chi-square p-value above 1e-6), and no token outside the kept set."""
    m = _m()
    t, k, p = config
    vocab, rows = 12, _big(m, rows, 100 * rows)
    base = check.randn((vocab,), check.rng(f"9.6-chi-{config}"), "cpu", scale=0.5)  # flat: several tokens kept
    probs = kept_weights(base, t, k, p)
    probs = probs / probs.sum()
    seed = check.base_seed() & 0xFFFFFFFF
    chunk = min(rows, 600)  # (one launch per chunk: the simulator runs a launcher for at most 10 s)
    batch = base.expand(chunk, vocab).contiguous().to(m.device)
    ids = torch.cat([_sample(m, batch, t, k, p, seed, c) for c in range(rows // chunk)]).long()
    rows = ids.numel()
    assert bool(((ids >= 0) & (ids < vocab)).all()), f"ids outside [0, {vocab}): {ids[(ids < 0) | (ids >= vocab)][:5]}"
    counts = torch.bincount(ids, minlength=vocab)
    outside = counts[probs == 0]
    assert int(outside.sum()) == 0, (f"(task 9.6) tokens outside the kept set were drawn: counts {counts.tolist()}, "
                                     f"probabilities {[round(float(q), 4) for q in probs]}. Hint: {HINT_96}")
    stat, pval = _chi_square(counts, probs)
    assert pval > 1e-6, (f"(task 9.6) the draws do not follow the distribution: chi-square {stat:.1f}, p = {pval:.2g} "
                         f"(counts {counts.tolist()}, expected {[round(float(q) * rows, 1) for q in probs]}). "
                         f"Hint: {HINT_96}")


# ----------------------------------------------------------------------------------------------------
# Speed (GPU only; "not graded" on the simulator): cudacourse.speed.judge times yours against PyTorch
# interleaved, on 3 buffer sets, outputs poisoned before each sample and checked after the timing.
# ----------------------------------------------------------------------------------------------------

def _judge(task: str, what: str, label: str, call: Any, outs: Any, ok: Any, ref_label: str, ref: Any,
           nbytes: int, hint: str) -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    judge((LESSON, task), what, Side(label, call, outs, ok), Side(ref_label, ref), sets=MIN_SETS, nbytes=nbytes,
          hint=hint)


@pytest.mark.task("9.7")
@pytest.mark.gpu
def test_speed_scan() -> None:
    from cudacourse.speed import MIN_SETS

    m = _m()
    n = 2**28
    g = torch.Generator(device=m.device).manual_seed(check.base_seed())
    xs = [torch.randint(-4, 5, (n,), device=m.device, dtype=torch.int32, generator=g) for _ in range(MIN_SETS)]
    ys = [torch.empty_like(x) for x in xs]
    works = [torch.empty(n // 1024 + 2, dtype=torch.int64, device=m.device) for _ in xs]
    wants = [torch.cumsum(x, 0, dtype=torch.int32) for x in xs]  # |prefix| <= 4 * 2^28 < 2^31: exact

    def ok(i: int) -> None:
        assert torch.equal(ys[i], wants[i]), "scan_lookback_i32 of 2^28 int32: wrong result (see task 9.3)"

    m.scan_lookback_i32(xs[0], ys[0], n, works[0])
    ok(0)
    _judge("9.7", "scan_lookback_i32 on 2^28 int32", "yours", lambda i: m.scan_lookback_i32(xs[i], ys[i], n, works[i]),
           lambda i: (ys[i],), ok, "torch.cumsum (CUB)", lambda i: torch.cumsum(xs[i], 0, dtype=torch.int32), 8 * n,
           "Hint: 16 elements per thread in registers, 16-byte loads and stores, the look-back done by one warp.")


@pytest.mark.task("9.8")
@pytest.mark.gpu
def test_speed_histogram() -> None:
    from cudacourse.speed import MIN_SETS

    m = _m()
    n, bins = 2**26, 256
    g = torch.Generator(device=m.device).manual_seed(check.base_seed())
    xs = [torch.randint(0, bins, (n,), device=m.device, dtype=torch.int32, generator=g) for _ in range(MIN_SETS)]
    xfs = [x.float() for x in xs]
    hs = [torch.empty(bins, dtype=torch.int32, device=m.device) for _ in xs]
    wants = [torch.bincount(x, minlength=bins).int() for x in xs]

    def ok(i: int) -> None:
        assert torch.equal(hs[i], wants[i]), "histogram_v2_shared of 2^26 values: wrong counts (see task 9.4)"

    m.histogram_v2_shared(xs[0], hs[0], n, bins)
    ok(0)
    _judge("9.8", "histogram_v2_shared, 2^26 values in 256 bins", "yours",
           lambda i: m.histogram_v2_shared(xs[i], hs[i], n, bins), lambda i: (hs[i],), ok,
           "torch.histc (same values as float32)", lambda i: torch.histc(xfs[i], bins, 0, bins), 4 * n,
           "Hint: a few blocks per SM, 16-byte loads, the bins in shared memory.")


@pytest.mark.task("9.9")
@pytest.mark.gpu
def test_speed_sort() -> None:
    from cudacourse.speed import MIN_SETS

    m = _m()
    n = 2**26
    g = torch.Generator(device=m.device).manual_seed(check.base_seed())
    xs = [torch.randn(n, device=m.device, generator=g) for _ in range(MIN_SETS)]
    outs = [(torch.empty_like(x), torch.empty(n, dtype=torch.int32, device=m.device)) for x in xs]
    works = [torch.empty(2 * n + n // 8 + 1024, dtype=torch.int32, device=m.device) for _ in xs]
    wants = [torch.sort(x, stable=True) for x in xs]

    def ok(i: int) -> None:
        assert torch.equal(outs[i][0], wants[i].values) and torch.equal(outs[i][1].long(), wants[i].indices), (
            "argsort_f32 of 2^26 floats: wrong result (see task 9.5)")

    m.argsort_f32(xs[0], *outs[0], n, works[0])
    ok(0)
    _judge("9.9", "argsort_f32 of 2^26 float keys", "yours", lambda i: m.argsort_f32(xs[i], *outs[i], n, works[i]),
           lambda i: outs[i], ok, "torch.sort(stable=True) (CUB radix sort)",
           lambda i: torch.sort(xs[i], stable=True), 12 * n,
           "Hint: the sort is 4 passes of (upsweep, offsets, downsweep); the downsweep's gather in shared memory "
           "makes the writes coalesced.")


def torch_sampler(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """PyTorch's chain: softmax over the vocabulary, top-k, the nucleus cut on the sorted top-k, multinomial."""
    probs = torch.softmax(logits / temperature, dim=-1)
    v, i = torch.topk(probs, top_k, dim=-1)
    c = torch.cumsum(v, dim=-1)
    v = v.masked_fill(c - v > top_p * c[:, -1:], 0.0)
    s = torch.multinomial(v, 1)
    return i.gather(-1, s)


@pytest.mark.task("9.10")
@pytest.mark.gpu
def test_speed_sampler() -> None:
    from cudacourse.speed import MIN_SETS

    m = _m()
    b, v, t, k, p = 128, 50_257, 0.8, 50, 0.9
    g = torch.Generator(device=m.device).manual_seed(check.base_seed())
    ls = [torch.randn(b, v, device=m.device, generator=g) * 2 for _ in range(MIN_SETS)]
    ids = [torch.empty(b, dtype=torch.int32, device=m.device) for _ in ls]
    wants = [reference_sample(lg.cpu(), t, k, p, 77, i) for i, lg in enumerate(ls)]

    def ok(i: int) -> None:
        _, allowed = wants[i]
        got = ids[i].cpu().tolist()
        wrong = [r for r in range(b) if got[r] not in allowed[r]]
        assert not wrong, f"sample_top_k_top_p: {len(wrong)} rows drew another token than the reference (task 9.6)"

    m.sample_top_k_top_p(ls[0], ids[0], b, v, t, k, p, 77, 0)
    ok(0)
    _judge("9.10", f"sample_top_k_top_p on [{b}, {v}] (T={t}, top_k={k}, top_p={p})", "yours",
           lambda i: m.sample_top_k_top_p(ls[i], ids[i], b, v, t, k, p, 77, i), lambda i: (ids[i],), ok,
           "softmax + topk + multinomial", lambda i: torch_sampler(ls[i], t, k, p), 4 * b * v,
           "Hint: one block per row; each radix pass is one read of the row (L2-resident after the first).")


# ----------------------------------------------------------------------------------------------------
# Triton track (optional): tasks 9.T1 (scan_triton.py) and 9.T2 (sampling_triton.py), checked like their CUDA
# versions, by the same reference functions. On the CPU Triton's interpreter runs them one program at a time, in
# order of program id: a scan there never meets an unpublished predecessor, so look_back is also checked alone, on
# status words this test writes (look_back_probe). Without the triton package they are "not graded".
# ----------------------------------------------------------------------------------------------------

HINT_9T1 = ("look_back (TODO task 9.T1 in scan_triton.py): read the window of W status words before the tile, read it "
            "again while any flag is 0, add the values from the nearest predecessor down to the nearest P (that one "
            "included), stop there, or add all W and move the window W tiles back.")
HINT_9T2 = ("select_kth_largest and pick_token (TODO task 9.T2 in sampling_triton.py): the k-th largest key is built 4 "
            "bits per pass from the top (the largest digit whose count of keys >= the candidate still reaches k); the "
            "pick keeps keys above tau and the first m keys equal to tau (tie rank: an exclusive scan of the ties) "
            "and returns the first index whose running kept weight exceeds the target.")


def _twin(file: str) -> Any:
    from cudacourse.triton_track import twin_or_not_graded

    return twin_or_not_graded(LESSON, file)


def _guard(t: Any) -> Any:
    """Torch may allocate and check in the twin, never compute the answer (refused at run time)."""
    from cudacourse.grading.screens import torch_answer_guard

    return torch_answer_guard([t.__file__])


def _triton_scan(t: Any, m: Any, x: torch.Tensor, n: int, name: str) -> torch.Tensor:
    y = check.poisoned(n, x.dtype, m.device)
    fn = getattr(t, f"scan_lookback_{'i32' if x.dtype == torch.int32 else 'f32'}")
    with check.unchanged(x, names=["x"]), _guard(t):
        fn(x, y, n, _work_scan(n, m, name))
    return y


@pytest.mark.task("9.T1")
@pytest.mark.parametrize("dtype", ["i32", "f32"])
@pytest.mark.parametrize("n", [9000, 70_001, "big"])  # more than one tile of every BLOCK the configs try
def test_triton_scan_lookback(dtype: str, n: int | str) -> None:
    t, m = _twin("scan_triton.py"), _m()
    size = _big(m, 2**17 + 3, 2**24 + 7) if n == "big" else int(n)
    x = _ints(f"9.T1-{size}", size).to(m.device) if dtype == "i32" else _floats(f"9.T1f-{size}", size, m)
    y = _triton_scan(t, m, x, size, f"9.T1-w-{size}")
    _assert_scan(y, x, seg=None, name=f"scan_lookback_{dtype} (Triton, n={size})", task="9.T1", hint=HINT_9T1)


@pytest.mark.task("9.T1")
def test_triton_scan_views_and_repeats() -> None:
    """A view at offset 1 (no 16-byte alignment), the same workspace twice, n = 0 (nothing written)."""
    t, m = _twin("scan_triton.py"), _m()
    n = 9000
    buf = _ints("9.T1-view", n + 1).to(m.device)
    for k in range(2):
        _assert_scan(_triton_scan(t, m, buf[1:], n, "9.T1-view-w"), buf[1:], seg=None,
                     name=f"scan_lookback_i32 (Triton) of a view at offset 1, call {k + 1}", task="9.T1", hint=HINT_9T1)
    y = check.poisoned(4, torch.int32, m.device)
    t.scan_lookback_i32(buf, y, 0, _work_scan(1, m, "9.T1-empty"))
    assert bool((y == check.INT_POISON).all()), "a scan of 0 elements (Triton) wrote its output"
    with pytest.raises(ValueError, match="work holds"):
        t.scan_lookback_i32(buf, check.poisoned(n, torch.int32, m.device), n, torch.zeros(3, dtype=torch.int64,
                                                                                           device=m.device))


def _probe_words(tiles: int, p_every: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Published status words for `tiles` tiles (tile 0 and about one in p_every others P, the rest A) and the exact
    exclusive prefix of each tile."""
    g = check.rng(name)
    agg = torch.randint(-1000, 1000, (tiles,), generator=g, dtype=torch.int64)
    is_p = torch.rand(tiles, generator=g) < 1.0 / p_every
    is_p[0] = True
    incl = torch.cumsum(agg, 0)
    value = torch.where(is_p, incl, agg) & M32
    words = (torch.where(is_p, 2, 1).long() << 32) | value
    return words, incl - agg


@pytest.mark.task("9.T1")
@pytest.mark.parametrize("p_every", [1, 5, 40, 1000], ids=lambda p: f"P-every-{p}")
def test_triton_look_back_on_published_words(p_every: int) -> None:
    """look_back alone, on A and P words as a running GPU scan leaves them: runs of A longer than the window (32)
    make it move back, a P ends it (and the A values before it must not be added)."""
    t, m = _twin("scan_triton.py"), _m()
    tiles = 150
    words, want = _probe_words(tiles, p_every, f"9.T1-probe-{p_every}")
    out = check.poisoned(tiles, torch.int32, m.device)
    status = words.to(m.device)
    with check.unchanged(status, names=["status"]):
        t.look_back_probe(status, out, tiles)
    check.assert_close(out, want.to(torch.int32), name=f"look_back on status words (a P about every {p_every})",
                       rtol=0, atol=0, task="9.T1", hint=HINT_9T1)


def test_triton_worked_segment_scan() -> None:
    """The worked example of scan_triton.py (given complete; not graded)."""
    t, m = _twin("scan_triton.py"), _m()
    for n in (1, 1023, 5000):
        x = _ints(f"9.T-worked-{n}", n).to(m.device)
        y = check.poisoned(n, torch.int32, m.device)
        t.scan_segments_block_i32(x, y, n)
        _assert_scan(y, x, seg=1024, name="scan_segments_block_i32 (Triton)", task="worked example",
                     hint="scan_segments_block is given complete in scan_triton.py; did an edit change it?")


def _triton_sample(t: Any, m: Any, logits: torch.Tensor, temperature: float, top_k: int, top_p: float, seed: int,
                   offset: int) -> torch.Tensor:
    b, v = logits.shape
    ids = check.poisoned(b, torch.int32, m.device)
    with check.unchanged(logits, names=["logits"]), _guard(t):
        t.sample_top_k_top_p(logits, ids, b, v, temperature, top_k, top_p, seed, offset)
    return ids.cpu()


def _check_triton_ids(t: Any, m: Any, logits: torch.Tensor, temperature: float, top_k: int, top_p: float, what: str,
                      seed: int = 1234, offset: int = 7) -> None:
    got = _triton_sample(t, m, logits, temperature, top_k, top_p, seed, offset)
    want, allowed = reference_sample(logits, temperature, top_k, top_p, seed, offset)
    bad = [(r, g, w) for r, (g, w, ok) in enumerate(zip(got.tolist(), want, allowed, strict=True)) if g not in ok]
    if bad:
        r, g, w = bad[0]
        raise check.CheckFailure(
            f"sample_top_k_top_p (Triton) on {what} (T={temperature}, top_k={top_k}, top_p={top_p}, seed={seed}, "
            f"offset={offset}) (task 9.T2): {len(bad)} of {logits.shape[0]} rows drew another token; row {r}: yours "
            f"{g}, expected {w} (the CUDA sampler's id for the same seed and offset).\n  Hint: {HINT_9T2}")


TRITON_SAMPLE_CASES = [  # (batch, vocab, temperature, top_k, top_p): the CUDA cases, fewer rows on the interpreter
    (4, 100, 1.0, 0, 1.0),
    (4, 1000, 0.7, 10, 1.0),
    (4, 1000, 1.3, 0, 0.5),
    (4, 3000, 0.8, 50, 0.9),
    (1, 50_257, 0.8, 50, 0.9),  # a GPT-2 vocabulary: 13 tiles of the row
]


@pytest.mark.task("9.T2")
@pytest.mark.parametrize("case", TRITON_SAMPLE_CASES, ids=lambda c: "b{}-v{}-T{}-k{}-p{}".format(*c))
def test_triton_sample_ids_match_the_reference(case: tuple[int, int, float, int, float]) -> None:
    t, m = _twin("sampling_triton.py"), _m()
    b, v, temp, k, p = case
    b = _big(m, b, 32)
    logits = check.randn((b, v), check.rng(f"9.T2-{case}"), m.device, scale=4.0)
    _check_triton_ids(t, m, logits, temp, k, p, f"random logits [{b}, {v}]")


@pytest.mark.task("9.T2")
def test_triton_sample_ties_and_special_rows() -> None:
    """The CUDA sampler's special rows: ties at the cuts, greedy, NaN (-1), +-inf, top_k >= vocab, vocab 1, and a
    vocabulary over the limit (-1 everywhere)."""
    t, m = _twin("sampling_triton.py"), _m()
    g = check.rng("9.T2-special")
    ties = torch.randint(-2, 3, (6, 40), generator=g).float().to(m.device)
    _check_triton_ids(t, m, ties, 0.9, 7, 0.6, "integer logits (ties)")
    _check_triton_ids(t, m, ties, 1.0, 10, 1.0, "integer logits, top-10 (ties at the cut)")
    cut = torch.tensor([1.0] * 8 + [2.0, 2.0]).expand(16, 10).contiguous().to(m.device)
    _check_triton_ids(t, m, cut, 1.0, 3, 1.0, "eight ties at the cut before the two kept maxima")
    greedy = _triton_sample(t, m, ties, 0.0, 0, 1.0, 5, 0)
    check.assert_close(greedy, torch.argmax(ties.cpu(), dim=1).int(), name="greedy sampling (Triton, T = 0)", rtol=0,
                       atol=0, task="9.T2", hint="temperature <= 0 keeps only the first maximum (top-1)")
    special = check.randn((4, 300), g, "cpu")
    special[0, 17] = float("nan")
    special[1, [5, 250]] = float("inf")
    special[2] = -float("inf")
    ids = _triton_sample(t, m, special.to(m.device), 1.0, 0, 1.0, 99, 3)
    assert int(ids[0]) == -1, f"a row with a NaN must give -1 (Triton), got {int(ids[0])}"
    assert int(ids[1]) in (5, 250), f"with +inf logits only those may be drawn (Triton), got {int(ids[1])}"
    _check_triton_ids(t, m, special[1:].to(m.device), 1.0, 0, 1.0, "+inf and -inf rows", seed=99, offset=3)
    _check_triton_ids(t, m, check.randn((3, 64), g, m.device), 1.0, 500, 0.8, "top_k larger than the vocabulary")
    one = check.randn((3, 1), g, m.device)
    check.assert_close(_triton_sample(t, m, one, 1.0, 0, 0.5, 1, 1), torch.zeros(3, dtype=torch.int32),
                       name="vocab 1 (Triton)", rtol=0, atol=0, task="9.T2", hint="one token: always 0")
    ids = check.poisoned(2, torch.int32, m.device)
    t.sample_top_k_top_p(one, ids, 2, 0, 1.0, 0, 1.0, 1, 1)
    assert ids.cpu().tolist() == [-1, -1], f"vocab 0 must give -1 in every row (Triton), got {ids.cpu().tolist()}"


@pytest.mark.task("9.T2")
def test_triton_sample_same_stream_as_cuda() -> None:
    """Seeds and offsets above 2^32 (both halves of Philox's key and counter) and another offset draws again: the
    ids are the CUDA sampler's for the same (seed, offset, row), by reference_sample."""
    t, m = _twin("sampling_triton.py"), _m()
    logits = check.randn((8, 500), check.rng("9.T2-stream"), m.device, scale=3.0)
    for seed, offset in ((2024, 11), (2**40 + 3, 2**33 + 5), (2**64 - 1, 2**64 - 1)):
        _check_triton_ids(t, m, logits, 1.0, 40, 0.9, "random logits [8, 500]", seed=seed, offset=offset)
    a = _triton_sample(t, m, logits, 1.0, 0, 1.0, 2024, 11)
    b = _triton_sample(t, m, logits, 1.0, 0, 1.0, 2024, 12)
    assert not torch.equal(a, b), "another offset (the next decoding step) must draw again (Triton)"


@pytest.mark.task("9.T2")
def test_triton_sample_distribution_chi_square() -> None:
    """Rows of the same logits draw independently: the counts must fit the exact distribution (p > 1e-6) and no
    token outside the kept set (top-4, top-p 0.7 of a flat row of 12)."""
    t, m = _twin("sampling_triton.py"), _m()
    temp, k, p, vocab = 0.8, 4, 0.7, 12
    rows, parts = _big(m, 400, 20_000), _big(m, 8, 1)
    base = check.randn((vocab,), check.rng("9.T2-chi"), "cpu", scale=0.5)
    probs = kept_weights(base, temp, k, p)
    probs = probs / probs.sum()
    logits = base.expand(rows // parts, vocab).contiguous().to(m.device)
    counts = torch.zeros(vocab, dtype=torch.long)
    # In parts, each a decoding step of its own (another offset: independent draws), judged as they come: on the
    # interpreter (seconds a row) a twin far off the distribution fails after the first part, not after all of them.
    # (Eight looks at p > 1e-6 each: a right twin fails one with probability 8e-6 at most.)
    for part in range(parts):
        ids = _triton_sample(t, m, logits, temp, k, p, check.base_seed() & 0xFFFFFFFF, 1 + part).long()
        counts += torch.bincount(ids.clamp(0, vocab - 1), minlength=vocab)
        assert bool(((ids >= 0) & (ids < vocab)).all()) and int(counts[probs == 0].sum()) == 0, (
            f"(task 9.T2) tokens outside the kept set were drawn: counts {counts.tolist()}. Hint: {HINT_9T2}")
        stat, pval = _chi_square(counts, probs)
        assert pval > 1e-6, (f"(task 9.T2) the draws do not follow the distribution: chi-square {stat:.1f}, p = "
                             f"{pval:.2g} (counts {counts.tolist()}, {part + 1} of {parts} parts drawn). "
                             f"Hint: {HINT_9T2}")


# Wrong twins, made from the solutions by one edit each: every one must fail the checks its task uses.
TRITON_MUTANTS = {
    "look-back ignores A values": ("exclusive += tl.sum(tl.where(lanes <= nearest_p, vals, 0), axis=0)",
                                   "exclusive += tl.sum(tl.where(lanes == nearest_p, vals, 0), axis=0)"),
    "look-back adds past the P": ("exclusive += tl.sum(tl.where(lanes <= nearest_p, vals, 0), axis=0)",
                                  "exclusive += tl.sum(tl.where(lanes <= nearest_p + 1, vals, 0), axis=0)"),
    "look-back never moves back": ("end = tl.where(nearest_p < W, -1, end - W)", "end = -1 + 0 * end"),
    "top-k takes the smallest digit": ("prefix += tl.max(tl.where(cnt >= k, digits, 0), axis=0) << shift",
                                       "prefix += tl.min(tl.where(cnt >= k, digits, 15), axis=0) << shift"),
    "pick keeps every tie": ("kept = (key > tau) | ((ties > 0) & (rank < m))", "kept = (key > tau) | (ties > 0)"),
    "pick forgets the earlier tiles' weight": ("run = mass_carry + tl.cumsum(w, axis=0)", "run = tl.cumsum(w, axis=0)"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow warnings from the wrong code
@pytest.mark.parametrize("mutant", list(TRITON_MUTANTS))
def test_triton_wrong_twins_fail_the_check(mutant: str, tmp_path: Any) -> None:
    from cudacourse.triton_track import load_mutant

    m = _m()
    scan = mutant.startswith("look-back")
    _twin("scan_triton.py" if scan else "sampling_triton.py")  # not graded (a skip) without triton
    wrong = load_mutant(LESSON, "scan_triton.py" if scan else "sampling_triton.py", TRITON_MUTANTS[mutant], tmp_path,
                        backend=m.backend)
    with pytest.raises(AssertionError):
        if scan:
            for p_every in (5, 1000):  # (P words close together; then runs of A longer than the window)
                words, want = _probe_words(150, p_every, f"9.T1-mutant-{p_every}")
                out = check.poisoned(150, torch.int32, m.device)
                wrong.look_back_probe(words.to(m.device), out, 150)
                check.assert_close(out, want.to(torch.int32), name=mutant, rtol=0, atol=0, task="9.T1", hint="")
        else:
            g = check.rng("9.T2-mutant")
            ties = torch.randint(-2, 3, (6, 40), generator=g).float().to(m.device)
            _check_triton_ids(wrong, m, ties, 0.9, 7, 0.6, "integer logits (ties)")
            _check_triton_ids(wrong, m, ties, 1.0, 10, 1.0, "integer logits, top-10 (ties at the cut)")
            cut = torch.tensor([1.0] * 8 + [2.0, 2.0]).expand(16, 10).contiguous().to(m.device)
            _check_triton_ids(wrong, m, cut, 1.0, 3, 1.0, "eight ties at the cut before the two kept maxima")
            _check_triton_ids(wrong, m, check.randn((4, 1000), g, m.device, scale=4.0), 0.7, 10, 1.0,
                              "random logits")
            _check_triton_ids(wrong, m, check.randn((2, 9000), g, m.device), 1.0, 0, 1.0, "random logits, 9000")
