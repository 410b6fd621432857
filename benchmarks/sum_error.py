"""Rounding error of float32 sums in different orders, against the tolerances the tests use (CPU only).

    .venv/bin/python benchmarks/sum_error.py [--out results/cpu/sum_error.txt]

Backs two statements of the explainers (lesson 02 "How exact is a float sum?", lesson 03 "How exact is
a GEMM?") with a measurement, fixed seeds, no GPU:

1. Sums of 2^20 standard-normal values, 100 trials, in four orders: one running sum (a single thread
   adding every term in a row), a blocked order (1024 running sums of 1024 terms, then a tree: the
   shape of a grid-stride kernel), a pairwise tree, and numpy's own ``np.sum`` (pairwise). Each is
   compared with the float64 sum exactly as the lesson-02 tests compare (``check.assert_close`` with
   ``check.sum_tolerance(n)``: ``|got - ref| <= atol + rtol * |ref|``), and the script counts how
   many trials fail.
2. Dot products of length K of standard-normal vectors (one entry of a GEMM), added one by one in
   float32, 2000 rows per K: the standard deviation and the largest error in units of ``eps * K``
   (eps = 2^-23), with the product rounded to float32 before the add (g++ on x86-64, the simulator)
   and with a fused multiply-add (nvcc on a GPU), and how many rows exceed ``sum_tolerance(K)`` and
   lesson 03's ``4 * eps * K``.

Every number is deterministic (numpy's PCG64 with fixed seeds), so a rerun on any machine gives the
same table; the machine is named in the header anyway.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cudacourse.check import sum_tolerance  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)  # 2^-23
SEED = 20261123


def cpu_name() -> str:
    """The CPU model (from /proc/cpuinfo where there is one), for the report's header."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ----------------------------------------------------------------------------------------------------
# Summation orders, all in float32
# ----------------------------------------------------------------------------------------------------


def running_sum(x: np.ndarray) -> np.float32:
    """One accumulator, terms added left to right (``np.add.accumulate`` never reorders)."""
    return np.add.accumulate(x, dtype=np.float32)[-1]


def tree_sum(x: np.ndarray) -> np.float32:
    """Pairwise tree: add neighbours level by level (length padded with zeros to a power of two)."""
    n = 1 << max(0, (len(x) - 1).bit_length())
    v = np.zeros(n, dtype=np.float32)
    v[: len(x)] = x
    while len(v) > 1:
        v = v[0::2] + v[1::2]
    return v[0]


def blocked_sum(x: np.ndarray, threads: int = 1024) -> np.float32:
    """``threads`` running sums over a stride (a grid-stride loop), then a tree over the partial sums."""
    partial = np.add.accumulate(x.reshape(-1, threads), axis=0, dtype=np.float32)[-1]
    return tree_sum(partial)


def numpy_sum(x: np.ndarray) -> np.float32:
    """numpy's own float32 sum (pairwise in blocks of 128)."""
    return np.sum(x, dtype=np.float32)


ORDERS = {"running sum": running_sum, "blocked (1024 threads + tree)": blocked_sum, "pairwise tree": tree_sum,
          "np.sum": numpy_sum}


def fails_lesson02(got: np.float32, ref64: float, n: int) -> tuple[bool, float, float]:
    """The lesson-02 test's verdict: (fails, |error|, allowed) with sum_tolerance(n), ref cast to float32."""
    rtol, atol = sum_tolerance(n)
    ref = float(np.float32(ref64))
    err = abs(float(got) - ref)
    allowed = atol + rtol * abs(ref)
    return err > allowed, err, allowed


# ----------------------------------------------------------------------------------------------------
# Part 1: 2^20 normal values, 100 trials
# ----------------------------------------------------------------------------------------------------


def part1(n: int = 1 << 20, trials: int = 100) -> list[str]:
    """Count the trials in which each order exceeds the lesson-02 tolerance."""
    rng = np.random.default_rng(SEED)
    fails = {k: 0 for k in ORDERS}
    errs: dict[str, list[float]] = {k: [] for k in ORDERS}
    allowed_all = []
    for _ in range(trials):
        x = rng.standard_normal(n).astype(np.float32)
        ref = float(np.sum(x.astype(np.float64)))
        for name, fn in ORDERS.items():
            bad, err, allowed = fails_lesson02(fn(x), ref, n)
            fails[name] += bad
            errs[name].append(err)
        allowed_all.append(allowed)
    rtol, atol = sum_tolerance(n)
    out = [f"## Sums of n = 2^20 standard-normal float32 values, {trials} trials (seed {SEED})",
           "",
           f"Lesson-02 tolerance: check.sum_tolerance(2^20) = atol {atol:.3g} (8 sqrt(n) eps) + rtol {rtol:g} * |sum|;"
           f" allowed error over the trials: median {np.median(allowed_all):.3g}, "
           f"min {min(allowed_all):.3g}.",
           f"eps * n = {EPS32 * n:.3g}; sqrt(n) * eps = {EPS32 * n ** 0.5:.3g}.",
           "",
           "| order | trials over the tolerance | median abs error | max abs error | max error / (eps n) |",
           "|---|---:|---:|---:|---:|"]
    for name in ORDERS:
        e = np.array(errs[name])
        out.append(f"| {name} | {fails[name]} of {trials} | {np.median(e):.3g} | {e.max():.3g} | "
                   f"{e.max() / (EPS32 * n):.3f} |")
    return out


# ----------------------------------------------------------------------------------------------------
# Part 2: dot products of length K, added one by one
# ----------------------------------------------------------------------------------------------------


def running_dots(a: np.ndarray, b: np.ndarray, fma: bool) -> np.ndarray:
    """Row-wise float32 running sums of a[r, k] * b[r, k] over k, with or without a fused multiply-add."""
    acc = np.zeros(a.shape[0], dtype=np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for k in range(a.shape[1]):
        if fma:  # the float32 product is exact in float64: one rounding per step, as fmaf
            acc = (acc.astype(np.float64) + a64[:, k] * b64[:, k]).astype(np.float32)
        else:  # product rounded to float32, then the add rounded
            acc = acc + (a[:, k] * b[:, k])
    return acc


def part2(ks: tuple[int, ...] = (65, 256, 1024, 4096), rows: int = 2000) -> list[str]:
    """Error of one running dot product, in units of eps * K."""
    out = [f"## Dot products of length K, float32 running sum, {rows} rows per K (seed {SEED + 1})",
           "",
           "Error against the float64 dot product, in units of eps * K. 'over sum_tolerance' counts rows",
           "outside check.sum_tolerance(K) (lesson 02's bound, grows like sqrt(K)); 'over 4 eps K' rows outside",
           "lesson 03's gemm_tolerance (4 eps K + 1e-6 absolute, 1e-5 relative).",
           "",
           "| K | add | std / (eps K) | max / (eps K) | over sum_tolerance | over 4 eps K |",
           "|---:|---|---:|---:|---:|---:|"]
    rng = np.random.default_rng(SEED + 1)
    for k in ks:
        a = rng.standard_normal((rows, k)).astype(np.float32)
        b = rng.standard_normal((rows, k)).astype(np.float32)
        ref = np.einsum("rk,rk->r", a.astype(np.float64), b.astype(np.float64))
        ref32 = ref.astype(np.float32).astype(np.float64)
        rtol, atol = sum_tolerance(k)
        for fma in (False, True):
            got = running_dots(a, b, fma).astype(np.float64)
            err = got - ref
            diff = np.abs(got - ref32)
            over_sum = int(np.sum(diff > atol + rtol * np.abs(ref32)))
            over_gemm = int(np.sum(diff > 4 * EPS32 * k + 1e-6 + 1e-5 * np.abs(ref32)))
            out.append(f"| {k} | {'fma' if fma else 'mul, add'} | {err.std() / (EPS32 * k):.3f} | "
                       f"{np.abs(err).max() / (EPS32 * k):.3f} | {over_sum} of {rows} | {over_gemm} of {rows} |")
    return out


def main() -> None:
    """Run both parts, print the report and write it to ``--out`` if given."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="also write the report here (e.g. results/cpu/sum_error.txt)")
    args = ap.parse_args()
    head = [f"# benchmarks/sum_error.py on {cpu_name()} ({platform.machine()}, {os.cpu_count()} cores), Python "
            f"{platform.python_version()}, numpy {np.__version__}", ""]
    text = "\n".join(head + part1() + [""] + part2()) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
