"""Graded checks of lesson 02 (reductions): lessons/02_reduce/reduce.cu.

Tasks (ids match the TODOs in the kernel file and the rows of the points table):
  2.1 block tree reduction in shared memory (reduce_v2_sequential)           3 points
  2.2 warp-shuffle reduction (warp_reduce_sum: warp_sum, reduce_v5)          3 points
  2.3 whole-vector sum of any length (reduce_v6 atomic, reduce_v7 two-pass)  3 points
  2.4 row-wise sum, one warp per row (row_sum)                               2 points
  2.5 row-wise max, one warp per row (row_max)                               2 points
  2.6 argmax, first index of the maximum like torch.argmax (argmax)          4 points
  2.7-2.9 speed on a GPU against torch (not graded on the simulator)         2 points each

Sums are compared with a float64 reference under ``check.sum_tolerance(n, magnitude=scale)``, a bound
that grows like sqrt(n) (README, "How exact is a float sum?"). Maxima and indices must match exactly.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest
import torch

import cudacourse as cc
from cudacourse import check

LESSON = "02_reduce"
BLOCK = 256                      # threads per block of the block-level versions (BLOCK in reduce.cu)
BIG = 2**20 + 7                  # the largest graded length: not a multiple of any block or vector width
SIZES = [1, 31, 32, 33, 1000, BIG]
COLS = [1, 7, 1024, 4099]        # row lengths of the row-wise tasks
V7_WORKSPACE = 1024              # floats of workspace reduce_v7_two_pass needs


def _m() -> cc.Lesson:
    return cc.lesson(LESSON)


def _input(name: str, n: int, m: cc.Lesson, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    g = check.rng(name)
    x = check.randn((n,), g, "cpu", scale=scale)
    return (x + offset).to(m.device)


def _block_sums(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """Reference per-block sums (float64) of consecutive chunks, the last one zero-padded."""
    xd = x.detach().cpu().double()
    nb = math.ceil(xd.numel() / chunk)
    pad = torch.zeros(nb * chunk, dtype=torch.float64)
    pad[: xd.numel()] = xd
    return pad.view(nb, chunk).sum(1)


def _assert_sum(got: torch.Tensor, ref: torch.Tensor, terms: int, scale: float, *, name: str, task: str,
                hint: str) -> None:
    rtol, atol = check.sum_tolerance(terms, magnitude=scale)
    check.assert_close(got, ref.to(got.dtype), name=name, rtol=rtol, atol=atol, task=task, hint=hint)


# ----------------------------------------------------------------------------------------------------
# Worked examples (not graded: they are given complete; these keep them honest)
# ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version,chunk", [("reduce_v1_interleaved", BLOCK), ("reduce_v1b_strided_index", BLOCK),
                                           ("reduce_v3_first_add_during_load", 2 * BLOCK),
                                           ("reduce_v4_warp_unroll_syncwarp", 2 * BLOCK)])
@pytest.mark.parametrize("n", [1, 33, 5000])
def test_worked_block_versions(version: str, chunk: int, n: int) -> None:
    m = _m()
    x = _input(f"worked-{version}-{n}", n, m)
    partial = check.poisoned(math.ceil(n / chunk), torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        getattr(m, version)(x, partial, n)
    _assert_sum(partial, _block_sums(x, chunk), chunk, 1.0, name=f"{version} partial", task="worked example",
                hint="this kernel is given complete; did an edit change it?")


def test_worked_row_sum_thread_per_row() -> None:
    m = _m()
    rows, cols = 37, 129
    x = _input("worked-row-sum", rows * cols, m).view(rows, cols)
    out = check.poisoned(rows, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.row_sum_v1_thread_per_row(x, out, rows, cols)
    _assert_sum(out, x.cpu().double().sum(-1), cols, 1.0, name="row_sum_v1_thread_per_row", task="worked example",
                hint="this kernel is given complete; did an edit change it?")


# ----------------------------------------------------------------------------------------------------
# Task 2.1: block tree reduction in shared memory
# ----------------------------------------------------------------------------------------------------

# Hints give a direction, never the code line by line (the TODO comments hold the rest).
HINT_21 = ("reduce_v2_sequential_kernel (TODO task 2.1): v1 above with another loop: the distance between the two "
           "slots a thread adds starts at half the block and halves each step, and only the threads below that "
           "distance add; a barrier after the load and after every step.")


@pytest.mark.task("2.1")
@pytest.mark.parametrize("n", SIZES)
def test_block_tree_sequential(n: int) -> None:
    m = _m()
    x = _input(f"2.1-n{n}", n, m)
    partial = check.poisoned(math.ceil(n / BLOCK), torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.reduce_v2_sequential(x, partial, n)
    _assert_sum(partial, _block_sums(x, BLOCK), BLOCK, 1.0, name="partial", task="2.1", hint=HINT_21)


@pytest.mark.task("2.1")
def test_block_tree_sequential_large_magnitudes() -> None:
    m = _m()
    n, scale = 3000, 1e30
    x = _input("2.1-large", n, m, scale=scale)
    partial = check.poisoned(math.ceil(n / BLOCK), torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.reduce_v2_sequential(x, partial, n)
    _assert_sum(partial, _block_sums(x, BLOCK), BLOCK, scale, name="partial (values ~1e30)", task="2.1",
                hint=HINT_21)


# ----------------------------------------------------------------------------------------------------
# Task 2.2: warp-shuffle reduction
# ----------------------------------------------------------------------------------------------------

HINT_22 = ("warp_reduce_sum (TODO task 2.2): halve the distance each step, from 16 down to 1, adding the value a "
           "shuffle brings from the lane that far above; after five steps lane 0 holds the warp's sum.")


# (n = 2, not 1: one element is its own sum, so a warp_reduce_sum that adds nothing passed at n = 1 on the stub)
@pytest.mark.task("2.2")
@pytest.mark.parametrize("n", [2, 31, 32, 33, 1000, 2**16 + 7])
def test_warp_sum(n: int) -> None:
    m = _m()
    x = _input(f"2.2-warp-n{n}", n, m)
    out = check.poisoned(math.ceil(n / 32), torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.warp_sum(x, out, n)
    _assert_sum(out, _block_sums(x, 32), 32, 1.0, name="warp sums", task="2.2", hint=HINT_22)


@pytest.mark.task("2.2")
@pytest.mark.parametrize("n", [2, 33, 1000, BIG])
def test_block_reduce_warp_shuffle(n: int) -> None:
    m = _m()
    x = _input(f"2.2-v5-n{n}", n, m)
    partial = check.poisoned(math.ceil(n / (2 * BLOCK)), torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.reduce_v5_warp_shuffle(x, partial, n)
    _assert_sum(partial, _block_sums(x, 2 * BLOCK), 2 * BLOCK, 1.0, name="reduce_v5_warp_shuffle partial",
                task="2.2", hint=HINT_22 + " reduce_v5 sums each warp with it, then the warps' sums.")


# ----------------------------------------------------------------------------------------------------
# Task 2.3: the whole vector (multi-block)
# ----------------------------------------------------------------------------------------------------

HINT_23 = ("task 2.3 has two TODOs: thread_sum_grid_stride (each thread adds every element it reaches with a "
           "grid-stride loop) and, in reduce_v6's kernel, one thread per block adding the block's total to the "
           "output atomically. Both use block_reduce_sum, which needs warp_reduce_sum from task 2.2.")


def _vector_sum(m: cc.Lesson, version: str, x: torch.Tensor, n: int) -> torch.Tensor:
    out = check.poisoned(1, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        if version == "reduce_v6_grid_stride_atomic":
            m.reduce_v6_grid_stride_atomic(x, out, n)
        else:
            work = check.poisoned(V7_WORKSPACE, torch.float32, m.device)
            m.reduce_v7_two_pass(x, work, out, n)
    return out


VERSIONS_23 = ["reduce_v6_grid_stride_atomic", "reduce_v7_two_pass"]


@pytest.mark.task("2.3")
@pytest.mark.parametrize("version", VERSIONS_23)
@pytest.mark.parametrize("n", SIZES)
def test_vector_sum(version: str, n: int) -> None:
    m = _m()
    x = _input(f"2.3-{version}-n{n}", n, m)
    out = _vector_sum(m, version, x, n)
    _assert_sum(out, x.cpu().double().sum().view(1), n, 1.0, name=f"{version} sum", task="2.3", hint=HINT_23)


@pytest.mark.task("2.3")
@pytest.mark.parametrize("version", VERSIONS_23)
def test_vector_sum_special_inputs(version: str) -> None:
    m = _m()
    # All ones: the sum is an exact integer in float32 (below 2^24), whatever the order.
    n = 100_003
    ones = torch.ones(n, device=m.device)
    out = _vector_sum(m, version, ones, n)
    check.assert_close(out, torch.tensor([float(n)]), name=f"{version} sum of {n} ones", rtol=0, atol=0,
                       task="2.3", hint=HINT_23)
    # Large magnitudes, and a mean far from zero.
    for scale, offset in ((1e30, 0.0), (1.0, 100.0)):
        x = _input(f"2.3-{version}-scale{scale:g}-offset{offset:g}", 5001, m, scale=scale, offset=offset)
        out = _vector_sum(m, version, x, 5001)
        _assert_sum(out, x.cpu().double().sum().view(1), 5001, max(scale, offset),
                    name=f"{version} sum (scale {scale:g}, offset {offset:g})", task="2.3", hint=HINT_23)
    # A view that starts 4 bytes into its storage: not 16-byte aligned, so no float4 loads from it.
    buf = _input(f"2.3-{version}-unaligned", 4099, m)
    x = buf[1:]
    out = _vector_sum(m, version, x, x.numel())
    _assert_sum(out, x.cpu().double().sum().view(1), x.numel(), 1.0, name=f"{version} sum (unaligned start)",
                task="2.3", hint=HINT_23 + " Vector (float4) loads need a 16-byte aligned pointer.")


# ----------------------------------------------------------------------------------------------------
# Tasks 2.4 and 2.5: row-wise sum and max
# ----------------------------------------------------------------------------------------------------

HINT_24 = ("row_sum_kernel (TODO task 2.4): each lane sums the columns lane, lane + 32, ... of its row (all 32 lanes, "
           "also those with no column), then one warp_reduce_sum (task 2.2); one lane writes the row's result.")
HINT_25 = ("row_max_kernel (TODO task 2.5): row_sum_kernel with a maximum in place of the sum, starting from "
           "-INFINITY (from 0, an all-negative row gives 0); warp_reduce_max (also task 2.5) is warp_reduce_sum "
           "with a maximum.")


def _rows_input(name: str, rows: int, cols: int, m: cc.Lesson, *, scale: float = 1.0,
                offset: float = 0.0, unaligned: bool = False) -> torch.Tensor:
    x = _input(name, rows * cols + (1 if unaligned else 0), m, scale=scale, offset=offset)
    return (x[1:] if unaligned else x).view(rows, cols)


ROW_CASES = [(33, c) for c in COLS] + [(1000, 7), (3, 4099), (5, 4100), (40, 100)]  # 4100, 100: float4 tails


@pytest.mark.task("2.4")
@pytest.mark.parametrize("rows,cols", ROW_CASES)
def test_row_sum(rows: int, cols: int) -> None:
    m = _m()
    x = _rows_input(f"2.4-{rows}x{cols}", rows, cols, m)
    out = check.poisoned(rows, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.row_sum(x, out, rows, cols)
    _assert_sum(out, x.cpu().double().sum(-1), cols, 1.0, name=f"row sums of {rows}x{cols}", task="2.4",
                hint=HINT_24)


@pytest.mark.task("2.4")
@pytest.mark.parametrize("scale,offset,unaligned", [(1e30, 0.0, False), (1.0, 50.0, False), (1.0, 0.0, True)])
def test_row_sum_special_inputs(scale: float, offset: float, unaligned: bool) -> None:
    m = _m()
    rows, cols = 21, 1024
    x = _rows_input(f"2.4-special-{scale:g}-{offset:g}-{unaligned}", rows, cols, m, scale=scale, offset=offset,
                    unaligned=unaligned)
    out = check.poisoned(rows, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.row_sum(x, out, rows, cols)
    _assert_sum(out, x.cpu().double().sum(-1), cols, max(scale, offset),
                name=f"row sums (scale {scale:g}, offset {offset:g}, unaligned {unaligned})", task="2.4",
                hint=HINT_24)


def _check_row_max(m: cc.Lesson, x: torch.Tensor, what: str) -> None:
    rows, cols = x.shape
    out = check.poisoned(rows, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.row_max(x, out, rows, cols)
    check.assert_close(out, x.cpu().amax(-1), name=f"row maxima of {what}", rtol=0, atol=0, task="2.5",
                       hint=HINT_25)


@pytest.mark.task("2.5")
@pytest.mark.parametrize("rows,cols", ROW_CASES)
def test_row_max(rows: int, cols: int) -> None:
    m = _m()
    _check_row_max(m, _rows_input(f"2.5-{rows}x{cols}", rows, cols, m), f"{rows}x{cols}")


@pytest.mark.task("2.5")
def test_row_max_special_inputs() -> None:
    m = _m()
    rows, cols = 19, 1031
    # Every value negative: a max that starts from 0 returns 0.
    x = _rows_input("2.5-negative", rows, cols, m)
    _check_row_max(m, -(x.abs() + 1.0), "all-negative rows")
    # Huge magnitudes and infinities, and the max sitting in the last column of some rows.
    x = _rows_input("2.5-huge", rows, cols, m, scale=1e37).clone()
    x[0] = -float("inf")
    x[1, -1] = float("inf")
    x[2, -1] = 3.0e38
    _check_row_max(m, x, "rows with +-inf and values near the float32 limit")
    # Ties: values from a small set of integers.
    g = check.rng("2.5-ties")
    x = torch.randint(-3, 4, (rows, cols), generator=g).float().to(m.device)
    _check_row_max(m, x, "rows with many ties")
    # A view that is not 16-byte aligned.
    _check_row_max(m, _rows_input("2.5-unaligned", 9, 1024, m, unaligned=True), "an unaligned 9x1024 view")


# ----------------------------------------------------------------------------------------------------
# Task 2.6: argmax
# ----------------------------------------------------------------------------------------------------

HINT_26 = ("task 2.6: argmax_key must order keys like the values (NaN largest, -0.0 == +0.0) and, among equal "
           "values, rank the smaller index higher, so that one integer maximum finds both the value and the "
           "first index; the kernel then reduces keys the way the sum reduced values (thread, warp, block, one "
           "atomic per block).")


def _check_argmax(m: cc.Lesson, x: torch.Tensor, what: str) -> None:
    n = x.numel()
    out = check.poisoned(1, torch.int64, m.device)
    with check.unchanged(x, names=["x"]):
        m.argmax(x, out, n)
    got, want = int(out.item()), int(torch.argmax(x.cpu()).item())
    if got == want:
        return
    xc = x.cpu()
    lines = [f"argmax (task 2.6) of {what} (n={n}): yours {got}, expected {want} "
             f"(x[{want}] = {xc[want].item()!r}, the first index of the maximum, as torch.argmax)."]
    if got == -1:
        lines.append("  No key was ever combined into the result (it is still the launcher's 0): did argmax_kernel "
                     "call atomicMax, and does argmax_key return a nonzero key?")
    elif got == check.INT_POISON:
        lines.append("  The output was never written.")
    elif 0 <= got < n:
        v = xc[got].item()
        if v == xc[want].item() or (math.isnan(v) and math.isnan(xc[want].item())):
            lines.append(f"  x[{got}] is also a maximum, but not the first: among equal values the smaller index "
                         "must win (its key needs the larger low 32 bits). Note -0.0 == +0.0.")
        else:
            lines.append(f"  x[{got}] = {v!r} is not a maximum.")
    else:
        lines.append("  That index is outside the vector.")
    lines.append(f"  Hint: {HINT_26}")
    raise AssertionError("\n".join(lines))


@pytest.mark.task("2.6")
@pytest.mark.parametrize("n", SIZES)
def test_argmax(n: int) -> None:
    m = _m()
    _check_argmax(m, _input(f"2.6-n{n}", n, m), "random values")


@pytest.mark.task("2.6")
@pytest.mark.parametrize("n", [33, 1000, 70_001])
def test_argmax_ties(n: int) -> None:
    m = _m()
    g = check.rng(f"2.6-ties-{n}")
    x = torch.randint(-5, 6, (n,), generator=g).float()        # the max (5) occurs about n/11 times
    _check_argmax(m, x.to(m.device), "small integers (many ties)")
    _check_argmax(m, torch.full((n,), -2.5).to(m.device), "a constant vector")
    y = -(torch.rand(n, generator=g) + 1.0)
    pos = sorted(torch.randperm(n, generator=g)[:3].tolist())
    y[pos[1]] = y[pos[2]] = 0.0
    y[pos[0]] = -0.0                                           # -0.0 equals +0.0: the first zero wins
    _check_argmax(m, y.to(m.device), "negatives with three zeros, the first one -0.0")


@pytest.mark.task("2.6")
def test_argmax_special_values() -> None:
    m = _m()
    n = 4099
    g = check.rng("2.6-special")
    base = torch.randn(n, generator=g, dtype=torch.float64).float() * 1e37   # finite: |x| < 3.4e38
    x = base.clone()
    x[-1] = float("inf")
    _check_argmax(m, x.to(m.device), "values near the float32 limit, +inf last")
    x = torch.full((n,), -float("inf"))
    _check_argmax(m, x.to(m.device), "all -inf")
    x = base.clone()
    nan_at = sorted(torch.randperm(n, generator=g)[:2].tolist())
    x[nan_at] = float("nan")
    _check_argmax(m, x.to(m.device), f"values with NaN at {nan_at} (torch.argmax returns the first NaN)")
    x[nan_at[0]] = -float("nan")                               # a NaN with its sign bit set is still a NaN
    _check_argmax(m, x.to(m.device), f"values with a negative-signed NaN at {nan_at[0]} and a NaN at {nan_at[1]}")
    x = -(torch.rand(n, generator=g) + 1.0)
    x[n - 1] = -0.5
    _check_argmax(m, x.to(m.device), "negative values, the largest at the last index")
    buf = torch.randn(n + 1, generator=g)
    _check_argmax(m, buf.to(m.device)[1:], "an unaligned view (starts 4 bytes into its storage)")


# ----------------------------------------------------------------------------------------------------
# Speed (GPU only; "not graded" on the simulator). Ratios are same-run: yours against torch, timed alike.
# ----------------------------------------------------------------------------------------------------

def _speed(task: str, what: str, label: str, call: object, outs: list[torch.Tensor], ok: object, ref_label: str,
           ref: object, nbytes: int, hint: str) -> None:
    """Judge one speed task with cudacourse.speed: buffer sets, poisoned outputs, checked after timing, against
    the reference timed interleaved with yours (target in lesson.toml)."""
    from cudacourse.speed import MIN_SETS, Side, judge

    judge(("02_reduce", task), what, Side(label, call, lambda i: (outs[i],), ok), Side(ref_label, ref),  # type: ignore[arg-type]
          sets=MIN_SETS, nbytes=nbytes, hint=hint)


@pytest.mark.task("2.7")
@pytest.mark.gpu
def test_speed_sum() -> None:
    from cudacourse.speed import MIN_SETS

    m = _m()
    n = 2**28
    xs = [torch.randn(n, device=m.device) for _ in range(MIN_SETS)]
    outs = [torch.empty(1, device=m.device) for _ in xs]
    sums = [x.double().sum().view(1).cpu() for x in xs]

    def ok(i: int) -> None:
        # To within 1 (about one element), not check.sum_tolerance(n): 2^28 terms added through a thousand or more
        # atomics (the grid is the learner's choice) round at the size of the running total, about 2^14, and the
        # solution's sum once missed that tolerance by 0.03 (H200, 2026-11-29, a total of -1029: its relative part
        # was small). Task 2.3 grades the precision; this check catches skipped or deferred work (poison, or another
        # set's sum: errors in the thousands).
        check.assert_close(outs[i], sums[i].to(outs[i].dtype), name="sum of 2^28", rtol=1e-5, atol=1.0, task="2.7",
                           hint=HINT_23)

    m.reduce_v6_grid_stride_atomic(xs[0], outs[0], n)
    ok(0)  # correct first
    _speed("2.7", "reduce_v6_grid_stride_atomic on 2^28 floats", "yours",
           lambda i: m.reduce_v6_grid_stride_atomic(xs[i], outs[i], n), outs, ok, "torch.sum",
           lambda i: torch.sum(xs[i]), 4 * n,
           "Hint: few blocks (a few per SM) with a grid-stride loop, 16-byte float4 loads, several independent "
           "accumulators.")


@pytest.mark.task("2.8")
@pytest.mark.gpu
@pytest.mark.parametrize("rows,cols", [(32768, 4096), (131072, 1024)])
def test_speed_row_sum(rows: int, cols: int) -> None:
    from cudacourse.speed import MIN_SETS

    m = _m()
    xs = [torch.randn(rows, cols, device=m.device) for _ in range(MIN_SETS)]
    outs = [torch.empty(rows, device=m.device) for _ in xs]
    sums = [x.double().sum(-1).cpu() for x in xs]

    def ok(i: int) -> None:
        _assert_sum(outs[i], sums[i], cols, 1.0, name=f"row sums {rows}x{cols}", task="2.8", hint=HINT_24)

    m.row_sum(xs[0], outs[0], rows, cols)
    ok(0)
    _speed("2.8", f"row_sum {rows}x{cols}", "yours", lambda i: m.row_sum(xs[i], outs[i], rows, cols), outs, ok,
           "torch.sum(dim=-1)", lambda i: torch.sum(xs[i], dim=-1), 4 * rows * (cols + 1),
           "Hint: float4 loads when cols % 4 == 0, two loads in flight per lane.")


@pytest.mark.task("2.9")
@pytest.mark.gpu
def test_speed_argmax() -> None:
    from cudacourse.speed import MIN_SETS

    m = _m()
    n = 2**28
    xs = [torch.randn(n, device=m.device) for _ in range(MIN_SETS)]
    outs = [torch.empty(1, dtype=torch.int64, device=m.device) for _ in xs]
    want = [int(torch.argmax(x).item()) for x in xs]

    def ok(i: int) -> None:
        got = int(outs[i].item())
        assert got == want[i], f"argmax of 2^28 values: yours {got}, expected {want[i]} (see task 2.6)"

    m.argmax(xs[0], outs[0], n)
    ok(0)
    _speed("2.9", "argmax of 2^28 floats", "yours", lambda i: m.argmax(xs[i], outs[i], n), outs, ok, "torch.argmax",
           lambda i: torch.argmax(xs[i]), 4 * n,
           "Hint: one 64-bit key per element, float4 loads, one atomicMax per block.")


# ----------------------------------------------------------------------------------------------------
# Triton track (optional): tasks 2.T1 and 2.T2, the twins in reduce_triton.py, checked like their CUDA versions.
# On the CPU Triton's interpreter runs them (one program at a time: ~10^5 elements, a few hundred rows at most);
# without the triton package they are "not graded", with the command that installs it.
# ----------------------------------------------------------------------------------------------------

HINT_2T1 = ("vector_sum_kernel (TODO task 2.T1 in reduce_triton.py): each program accumulates a tile over a "
            "grid-stride loop (masked loads, 0 past the end), then adds its tile's sum to the output atomically: "
            "every program adds its part, none overwrites another's.")
HINT_2T2 = ("row_sum_kernel (TODO task 2.T2 in reduce_triton.py): row_max_kernel with 0 for -inf, + for max and "
            "tl.sum for tl.max; the row starts at x_ptr + row * cols (64-bit).")
TRITON_SIZES = [1, 31, 32, 33, 1000, 2**16 + 7]
TRITON_ROW_CASES = [(33, c) for c in COLS] + [(200, 7), (3, 4099), (5, 4100), (40, 100)]


def _twin() -> ModuleType:
    from cudacourse.triton_track import twin_or_not_graded

    return twin_or_not_graded(LESSON)


def _guard(t: ModuleType) -> object:
    """Torch may allocate and check in reduce_triton.py, never compute the answer (refused at run time)."""
    from cudacourse.grading.screens import torch_answer_guard

    return torch_answer_guard([t.__file__])


def _triton_sum(t: ModuleType, x: torch.Tensor, n: int, m: cc.Lesson) -> torch.Tensor:
    out = check.poisoned(1, torch.float32, m.device)
    with check.unchanged(x, names=["x"]), _guard(t):
        t.vector_sum(x, out, n)
    return out


@pytest.mark.task("2.T1")
@pytest.mark.parametrize("n", TRITON_SIZES)
def test_triton_vector_sum(n: int) -> None:
    """The Triton twin of the whole-vector sum, against a float64 reference."""
    t, m = _twin(), _m()
    sizes = [n] + ([2**24 + 3, 2**26 + 1] if m.backend == "cuda" and n == TRITON_SIZES[-1] else [])
    for size in sizes:
        x = _input(f"2.T1-n{size}", size, m)
        _assert_sum(_triton_sum(t, x, size, m), x.cpu().double().sum().view(1), size, 1.0,
                    name=f"vector_sum (Triton), n={size}", task="2.T1", hint=HINT_2T1)


@pytest.mark.task("2.T1")
def test_triton_vector_sum_special_inputs() -> None:
    """All ones (an exact integer whatever the order), large magnitudes, a mean far from 0, an unaligned view."""
    t, m = _twin(), _m()
    n = 100_003
    out = _triton_sum(t, torch.ones(n, device=m.device), n, m)
    check.assert_close(out, torch.tensor([float(n)]), name=f"vector_sum (Triton) of {n} ones", rtol=0, atol=0,
                       task="2.T1", hint=HINT_2T1)
    for scale, offset in ((1e30, 0.0), (1.0, 100.0)):
        x = _input(f"2.T1-scale{scale:g}-offset{offset:g}", 5001, m, scale=scale, offset=offset)
        _assert_sum(_triton_sum(t, x, 5001, m), x.cpu().double().sum().view(1), 5001, max(scale, offset),
                    name=f"vector_sum (Triton), scale {scale:g}, offset {offset:g}", task="2.T1", hint=HINT_2T1)
    x = _input("2.T1-unaligned", 4099, m)[1:]
    _assert_sum(_triton_sum(t, x, x.numel(), m), x.cpu().double().sum().view(1), x.numel(), 1.0,
                name="vector_sum (Triton) of a view at offset 1", task="2.T1", hint=HINT_2T1)


def _triton_row_sum_case(t: ModuleType, m: cc.Lesson, x: torch.Tensor, scale: float, what: str) -> None:
    rows, cols = x.shape
    out = check.poisoned(rows, torch.float32, m.device)
    with check.unchanged(x, names=["x"]), _guard(t):
        t.row_sum(x, out, rows, cols)
    _assert_sum(out, x.cpu().double().sum(-1), cols, scale, name=f"row_sum (Triton) of {what}", task="2.T2",
                hint=HINT_2T2)


@pytest.mark.task("2.T2")
@pytest.mark.parametrize("rows,cols", TRITON_ROW_CASES)
def test_triton_row_sum(rows: int, cols: int) -> None:
    """The Triton twin of the row-wise sum: rows shorter and longer than a tile, ragged last tiles."""
    t, m = _twin(), _m()
    _triton_row_sum_case(t, m, _rows_input(f"2.T2-{rows}x{cols}", rows, cols, m), 1.0, f"{rows}x{cols}")
    if m.backend == "cuda" and (rows, cols) == TRITON_ROW_CASES[-1]:
        for big in [(8192, 4099), (65537, 1024)]:
            _triton_row_sum_case(t, m, _rows_input(f"2.T2-{big}", *big, m), 1.0, f"{big[0]}x{big[1]}")


@pytest.mark.task("2.T2")
@pytest.mark.parametrize("scale,offset,unaligned", [(1e30, 0.0, False), (1.0, 50.0, False), (1.0, 0.0, True)])
def test_triton_row_sum_special_inputs(scale: float, offset: float, unaligned: bool) -> None:
    t, m = _twin(), _m()
    x = _rows_input(f"2.T2-special-{scale:g}-{offset:g}-{unaligned}", 21, 1024, m, scale=scale, offset=offset,
                    unaligned=unaligned)
    _triton_row_sum_case(t, m, x, max(scale, offset),
                         f"21x1024 (scale {scale:g}, offset {offset:g}, unaligned {unaligned})")


def test_triton_worked_row_max() -> None:
    """The worked example of reduce_triton.py (given complete; not graded)."""
    t, m = _twin(), _m()
    for rows, cols in [(33, 1), (7, 4099)]:
        x = _rows_input(f"2.T-worked-{cols}", rows, cols, m, offset=-100.0)  # all negative: max is not 0
        out = check.poisoned(rows, torch.float32, m.device)
        t.row_max(x, out, rows, cols)
        check.assert_close(out, x.cpu().amax(-1), name=f"row_max (Triton) {rows}x{cols}", rtol=0, atol=0,
                           task="worked example", hint="row_max is given complete in reduce_triton.py")


# Wrong twins, made from the solution by one edit each: every one must fail the checks the tasks use.
TRITON_MUTANTS = {
    "sum all zeros": ("tl.atomic_add(out_ptr, tl.sum(acc, axis=0))", "tl.atomic_add(out_ptr, 0.0)"),
    "sum stored, not added": ("tl.atomic_add(out_ptr, tl.sum(acc, axis=0))", "tl.store(out_ptr, tl.sum(acc, axis=0))"),
    "sum of the first stride only": ("for base in range(0, n, NPROG * BLOCK):", "for base in range(0, 1, 1):"),
    "row sum all zeros": ("tl.store(out_ptr + row, tl.sum(acc, axis=0))", "tl.store(out_ptr + row, tl.sum(acc * 0.0, "
                                                                          "axis=0))"),
    "row sum of the first tile": ("for start in range(0, cols, BLOCK):\n        acc += ",
                                  "for start in range(0, BLOCK, BLOCK):\n        acc += "),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow / NaN warnings from the wrong code
@pytest.mark.parametrize("mutant", list(TRITON_MUTANTS))
def test_triton_wrong_twins_fail_the_check(mutant: str, tmp_path: Path) -> None:
    from cudacourse.triton_track import load_mutant

    _twin()  # not graded (a skip) without triton
    m = _m()
    wrong = load_mutant(LESSON, "reduce_triton.py", TRITON_MUTANTS[mutant], tmp_path, backend=m.backend)
    with pytest.raises(AssertionError):
        if mutant.startswith("sum"):
            # several tiles per program under any config: the interpreter's (1024 x a few programs), and on a GPU
            # the largest the autotuner may pick (8192 per tile, up to 4 programs per SM: 528 on an H100)
            n = 20_000 if m.backend == "sim" else 6_000_000
            x = _input("2.T-mutant", n, m)
            _assert_sum(_triton_sum(wrong, x, n, m), x.cpu().double().sum().view(1), n, 1.0, name=mutant,
                        task="2.T1", hint="")
        else:
            _triton_row_sum_case(wrong, m, _rows_input("2.T-mutant", 5, 4099, m), 1.0, mutant)
