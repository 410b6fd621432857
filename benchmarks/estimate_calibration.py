"""Calibrate and check cudacourse/estimate.py against the committed GPU bench rows (issue 39, item 2).

For every bench row of lessons 01-04 that the simulator can run (the course's CUDA kernels; not cuBLAS, Triton
or torch rows), this runs the row's calls on the simulator with profile=True at two small sizes, extrapolates
the counters linearly to the bench size (work in n, rows or n^3; grid in n, rows or n^2), estimates each launch
(cudacourse.estimate) and compares with the measured time in results/<gpu>/results.json.

The model's constants are fitted on the H100 rows only (a grid search minimising the mean |log(pred/meas)|)
with ``--fit``, leaving out the sgemm 4096/4092, linear and attention groups; those and the H200 rows are then a
check with the same constants (on the H200 only the copy bandwidth differs).

    .venv/bin/python benchmarks/estimate_calibration.py          # table with estimate.CALIBRATED (~2-4 min)
    .venv/bin/python benchmarks/estimate_calibration.py --fit    # refit, print the constants, then the table
    .venv/bin/python benchmarks/estimate_calibration.py --counters results/cpu/estimate_counters.json --fit
                                                                 # the same from the committed counters (seconds)

Writes results/cpu/estimate_calibration.md (table), .json (rows and summary) and results/cpu/estimate_counters.json
(each row's launches at the bench size, extrapolated from the simulator). tests/test_estimate.py recomputes the
table from the committed counters and reruns a sample of rows on the simulator against them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cudacourse as cc  # noqa: E402
from cudacourse import estimate as es  # noqa: E402
from cudacourse.speed_estimate import SMALL_1D, SMALL_GRID, Call, extrapolate  # noqa: E402

SOL = ROOT / "solutions"
RESULTS = {"H100": ROOT / "results/nvidia-h100-80gb-hbm3/results.json",
           "H200": ROOT / "results/nvidia-h200/results.json"}


# Rows whose committed measurement is of another kernel than today's solution: left out of the table, with why.
STALE = {("H100", "linear 4096x4096->4096 fp32", "linear"):
         "measured on 2026-11-22 (72d8492), before commit ef1431a (2026-11-25) moved task 3.5's linear onto v8: "
         "15.1 ms there against 3.18 ms for today's kernel on the H200"}


@dataclass
class Row:
    """A bench row: its group and name in results.json, its calls, its FLOPs at the bench size."""

    lesson: str
    group: str
    name: str
    calls: list[Call]
    flops: float = 0.0
    memory_bound: bool = True


def _f(n: int) -> torch.Tensor:
    return torch.randn(max(n, 1))


def rows() -> list[Row]:
    """The bench rows the simulator can run, with their calls (sizes as in lessons/*/bench.py)."""
    out: list[Row] = []
    n = 1 << 28
    relu = str(SOL / "01_relu/relu.cu")
    g = "relu 2^28 fp32"
    b2 = {"x": 4 * n, "y": 4 * n}
    out.append(Row("01_relu", g, "relu_v1_scalar", [Call(relu, "relu_v1_scalar", lambda s: [_f(s), _f(s), s], n,
                                                           SMALL_1D, b2)]))
    out.append(Row("01_relu", g, "relu_v2_grid_stride (full GPU grid)", [Call(
        relu, "relu_v2_grid_stride", lambda s: [_f(s), _f(s), s, 0], n, SMALL_GRID, b2)]))
    out.append(Row("01_relu", g, "relu_v3_float4", [Call(relu, "relu_v3_float4", lambda s: [_f(s), _f(s), s], n,
                                                           SMALL_1D, b2)]))
    out.append(Row("01_relu", "relu backward 2^28 fp32", "relu_backward", [Call(
        relu, "relu_backward", lambda s: [_f(s), _f(s), _f(s), s], n, SMALL_1D,
        {"x": 4 * n, "dy": 4 * n, "dx": 4 * n})]))
    R, C = 65536, 4096
    gb = {"x": 4 * R * C, "b": 4 * C, "y": 4 * R * C}
    for name, fn in (("bias_add (worked example, no GELU)", "bias_add"), ("bias_gelu (fused)", "bias_gelu")):
        out.append(Row("01_relu", f"bias+gelu {R}x{C} fp32", name, [Call(
            relu, fn, lambda s, C=C: [_f(s * C), _f(C), _f(s * C), s, C], R, (16, 32), gb)]))

    red = str(SOL / "02_reduce/reduce.cu")
    g = "sum 2^28 fp32"
    for fn, chunk in (("reduce_v1_interleaved", 256), ("reduce_v1b_strided_index", 256), ("reduce_v2_sequential", 256),
                      ("reduce_v3_first_add_during_load", 512), ("reduce_v4_warp_unroll_syncwarp", 512),
                      ("reduce_v5_warp_shuffle", 512)):
        sizes = [n]
        while sizes[-1] > 1:
            sizes.append(math.ceil(sizes[-1] / chunk))
        calls = [Call(red, fn, lambda s, c=chunk: [_f(s), _f(math.ceil(s / c)), s], size,
                      SMALL_1D if size > SMALL_1D[1] else (size, size),
                      {"x": 4 * size, "partial": 4 * math.ceil(size / chunk)}) for size in sizes[:-1]]
        out.append(Row("02_reduce", g, f"{fn} (multi-pass)", calls))
    out.append(Row("02_reduce", g, "reduce_v6_grid_stride_atomic", [Call(
        red, "reduce_v6_grid_stride_atomic", lambda s: [_f(s), _f(1), s], n, SMALL_GRID, {"x": 4 * n, "out": 4})]))
    out.append(Row("02_reduce", g, "reduce_v7_two_pass", [Call(
        red, "reduce_v7_two_pass", lambda s: [_f(s), _f(1024), _f(1), s], n, SMALL_GRID,
        {"x": 4 * n, "partial": 4096, "out": 4})]))
    for R, C in ((32768, 4096), (131072, 1024)):
        rb = {"x": 4 * R * C, "out": 4 * R}
        for op, fns in (("sum", (("row_sum (warp per row)", "row_sum"), ("row_sum_v1_thread_per_row",
                                                                         "row_sum_v1_thread_per_row"))),
                        ("max", (("row_max (warp per row)", "row_max"),))):
            for name, fn in fns:
                out.append(Row("02_reduce", f"row {op} {R}x{C} fp32", name, [Call(
                    red, fn, lambda s, C=C: [_f(s * C), _f(s), s, C], R, (256, 512), rb)]))
    out.append(Row("02_reduce", "argmax 2^28 fp32", "argmax (64-bit keys, atomicMax)", [Call(
        red, "argmax", lambda s: [_f(s), torch.zeros(1, dtype=torch.int64), s], n, SMALL_GRID,
        {"x": 4 * n, "out": 8})]))

    gemm = str(SOL / "03_gemm/gemm.cu")
    versions = ["sgemm_v1_naive", "sgemm_v2_coalesced", "sgemm_v3_shared", "sgemm_v4_1d", "sgemm_v5_2d", "sgemm_v6_vec",
                "sgemm_v7_tuned", "sgemm_v8_warptile"]
    # (bench size, versions, simulated sizes): the ragged group keeps its sizes off the tiles (124, 252)
    for N, vs, small, tag in ((2048, versions, (128, 256), ""), (4096, versions[2:], (128, 256), ""),
                              (4092, versions[5:], (124, 252), " ragged")):
        for v in vs:
            out.append(Row("03_gemm", f"sgemm {N}^3 fp32{tag}", v, [Call(
                gemm, v, lambda s: [_f(s * s), _f(s * s), _f(s * s), s, s, s], N, small,
                {"A": 4 * N * N, "B": 4 * N * N, "C": 4 * N * N}, work="n3", grid="n2")], flops=2.0 * N**3,
                memory_bound=False))
    N = 4096
    out.append(Row("03_gemm", f"linear {N}x{N}->{N} fp32", "linear", [Call(
        gemm, "linear", lambda s: [_f(s * s), _f(s * s), _f(s), _f(s * s), s, s, s], N, (128, 256),
        {"x": 4 * N * N, "W": 4 * N * N, "b": 4 * N, "y": 4 * N * N}, work="n3", grid="n2")], flops=2.0 * N**3,
        memory_bound=False))

    norms = str(SOL / "04_transformer/norms.cu")
    for R, C in ((32768, 4096), (8192, 16384)):
        nb = {"x": 4 * R * C, "y": 4 * R * C, "w": 4 * C, "b": 4 * C}
        for grp, name, fn, extra in (("softmax", "softmax (4.1) vs torch", "softmax", []),
                                     ("softmax", "softmax_v2_warp_per_row", "softmax_v2_warp_per_row", []),
                                     ("softmax", "softmax_v3_row_in_registers", "softmax_v3_row_in_registers", []),
                                     ("layernorm", "layernorm (4.2) vs torch", "layernorm", ["wb"]),
                                     ("rmsnorm", "rmsnorm (4.3)", "rmsnorm", ["w"])):
            def args(s: int, C: int = C, extra: list = extra) -> list:
                wb = [_f(C), _f(C)] if extra == ["wb"] else [_f(C)] if extra else []
                return [_f(s * C), *wb, _f(s * C), s, C, *([1e-5] if extra else [])]
            out.append(Row("04_transformer", f"{grp} {R}x{C} fp32", name, [Call(norms, fn, args, R, (8, 16), nb)]))
    att = str(SOL / "04_transformer/attention.cu")
    N, d, BH = 1024, 64, 8 * 16
    qb = 4 * BH * N * d
    for name, fn in (("attention_naive (4.7)", "attention_naive"), ("attention_online_v1", "attention_online_v1"),
                     ("attention_flash (4.8)", "attention_flash")):
        def aargs(h: int, fn: str = fn) -> list:  # B = 1, H = h heads: the work and the grid grow with B * H
            s = [_f(h * N * N)] if fn == "attention_naive" else []
            return [_f(N * h * d), _f(N * h * d), _f(N * h * d), *s, _f(N * h * d), 1, h, N, d, 0.125, 0]
        out.append(Row("04_transformer", f"attention B8 H16 N{N} d{d} full fp32", name, [Call(
            att, fn, aargs, BH, (1, 2), {"q": qb, "k": qb, "v": qb, "o": qb, "s": 4 * BH * N * N})],
            flops=4.0 * BH * N * N * d, memory_bound=False))
    return out


_MODULES: dict[tuple[str, str], object] = {}
_RUNS: dict[tuple, list[es.LaunchCounters]] = {}


def _shape(a: object) -> object:
    return ("tensor", a.numel(), str(a.dtype)) if isinstance(a, torch.Tensor) else a


def _counters(call: Call, size: int) -> list[es.LaunchCounters]:
    """The launches of one call at ``size`` on the simulator, run once per file, function and arguments' shapes
    (two rows that make the same call share the run; row_sum at 256 rows of 4096 columns and at 256 rows of 1024
    are two runs: a key of the size alone gave the second the first one's counters)."""
    key = (call.file, call.function, tuple(_shape(a) for a in call.args(size)))
    if key not in _RUNS:
        _RUNS[key] = _run(call, size)
    return _RUNS[key]


def _run(call: Call, size: int) -> list[es.LaunchCounters]:
    key = (call.file, call.function)
    if key not in _MODULES:
        _MODULES[key] = cc.load(call.file, [call.function], backend="sim", profile=True, timeout_s=1800.0)
    m = _MODULES[key]
    torch.manual_seed(0)
    getattr(m, call.function)(*call.args(size))
    regs = _regs(call.file)
    return [es.counters(k, regs.get(k.kernel.split("<")[0])) for k in m.profile_report().kernels]  # type: ignore[attr-defined]


_REGS: dict[str, dict[str, int]] = {}


def _regs(path: str) -> dict[str, int]:
    if path not in _REGS:
        _REGS[path] = es.registers_of(path)
    return _REGS[path]


def launches_at_full(call: Call) -> list[es.LaunchCounters]:
    """The call's launches at its bench size, extrapolated from the two small sizes."""
    return extrapolate(call, lambda size: _counters(call, size))


def measured(gpu: str) -> dict[tuple[str, str], float]:
    """Measured ms per (group, name) in the committed results of ``gpu``."""
    d = json.loads(RESULTS[gpu].read_text())
    return {(r["group"], r["name"]): r["ms"] for r in d["rows"]}


def predict(row: Row, launches: list[list[es.LaunchCounters]], gpu: str, params: dict[str, float] | None = None
            ) -> tuple[float, str]:
    """Estimated ms of a row and the bound of its longest launch."""
    total, worst = 0.0, (0.0, "")
    for call, ls in zip(row.calls, launches, strict=True):
        for c in ls:
            e = es.estimate(c, es.GPUS[gpu], call.buffers, row.flops if c is ls[0] else 0.0, params)
            total += e.seconds
            worst = max(worst, (e.seconds, e.bound))
    return 1e3 * total, worst[1]


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    den = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / den if den else 1.0


def table(rs: list[Row], counts: dict[str, list], params: dict[str, float] | None = None) -> list[dict]:
    """One dict per (gpu, row) with measured and predicted ms."""
    out = []
    for gpu in ("H100", "H200"):
        meas = measured(gpu)
        for r in rs:
            ms = meas.get((r.group, r.name))
            if ms is None or (gpu, r.group, r.name) in STALE:
                continue
            pred, bound = predict(r, counts[f"{r.group}|{r.name}"], gpu, params)
            out.append({"gpu": gpu, "lesson": r.lesson, "group": r.group, "name": r.name, "measured_ms": ms,
                        "predicted_ms": pred, "rel_error": pred / ms - 1, "bound": bound,
                        "memory_bound": r.memory_bound})
    return out


def summary(tab: list[dict], gpu: str) -> dict:
    """Median and worst relative error (all rows, memory-bound rows) and rank correlation per group."""
    t = [x for x in tab if x["gpu"] == gpu]
    err = [abs(x["rel_error"]) for x in t]
    mem = [abs(x["rel_error"]) for x in t if x["memory_bound"]]
    groups: dict[str, list[dict]] = {}
    for x in t:
        groups.setdefault(x["group"], []).append(x)
    rho = {g: spearman([x["predicted_ms"] for x in v], [x["measured_ms"] for x in v]) for g, v in groups.items()
           if len(v) >= 3}
    return {"rows": len(t), "median_all": statistics.median(err), "worst_all": max(err),
            "median_memory": statistics.median(mem), "worst_memory": max(mem), "rank": rho}


def fit(rs: list[Row], counts: dict[str, list]) -> dict[str, float]:
    """Grid search of the constants on the H100 rows (the sgemm 4096/4092/linear rows left out: a check):
    minimise the mean |log(pred / measured)|."""
    meas = measured("H100")
    held_out = ("sgemm 4096", "sgemm 4092", "linear", "attention")
    live = [r for r in rs if (r.group, r.name) in meas and not r.group.startswith(held_out)]
    grid = {"load_latency": [x / 1e9 for x in (500, 600, 700, 800)],
            "cache_latency": [x / 1e9 for x in (20, 40, 70)],
            "barrier_latency": [x / 1e9 for x in (0, 50, 100)],
            "l1_bytes_per_clk": [32.0, 48.0, 64.0],
            "shared_clk_per_wavefront": [0.5, 1.0, 1.5],
            "launch": [x / 1e6 for x in (2, 4, 6)],
            "block_overhead": [x / 1e9 for x in (50, 100, 200)],
            "serial_loads": [0.0, 0.5],
            "overlap_power": [2.0, 4.0, 8.0, math.inf]}
    best = (math.inf, {})
    for vals in itertools.product(*grid.values()):
        p = dict(zip(grid, vals, strict=True))
        loss = statistics.mean(abs(math.log(predict(r, counts[f"{r.group}|{r.name}"], "H100", p)[0]
                                            / meas[(r.group, r.name)])) for r in live)
        best = min(best, (loss, p), key=lambda t: t[0])
    print(f"fit: mean |log error| {best[0]:.3f} with {best[1]}")
    return best[1]


def markdown(tab: list[dict], params: dict[str, float]) -> str:
    """The committed error table."""
    lines = ["# Estimated vs measured GPU time (cudacourse/estimate.py)", "",
             "Made by `benchmarks/estimate_calibration.py` on the CPU machine: each row's calls run on the simulator "
             "(profile=True) at two small sizes, counters extrapolated to the bench size, estimated per launch and "
             "summed; measured: the committed `make bench` rows (results/nvidia-h100-80gb-hbm3/results.json, "
             "results/nvidia-h200/results.json). The constants were fitted (`--fit`) on the H100 rows of lessons "
             "01, 02 and 04 and of the sgemm 2048^3 group (39 rows); the sgemm 4096^3, 4092^3 ragged, linear and "
             "attention rows were added afterwards, and the H200 rows use the same constants (only the measured copy "
             "bandwidth differs): those are a check, not a fit. Each row's counters at the bench size are in "
             "`results/cpu/estimate_counters.json`; `tests/test_estimate.py` recomputes this table from them with "
             "today's model (it must be this table, no figure worse) and reruns a sample of rows on today's "
             "simulator (the table must not get worse).", "",
             f"Constants: {', '.join(f'{k} = {v:g}' for k, v in params.items())}.", "",
             "Aims (issue 39): median relative error at most 25% over memory-bound rows, at most 40% over all rows, "
             "rank correlation at least 0.9 inside each group of 3 or more versions.", ""]
    lines += ["What the model leaves out, where the table shows it (rows off by 30% or more):", "",
              "- instruction issue: the simulator counts no instructions, so `reduce_v1_interleaved`'s modulo and "
              "idle-lane work and `bias_gelu`'s `tanhf` cost nothing here "
              "(a counter of instructions executed per class would fix this);",
              "- re-reads from L2/DRAM: a buffer is charged to DRAM at most once, so `softmax_v2_warp_per_row`'s "
              "three passes over each row cost one (the GPU re-reads part of them); `row_sum_v1_thread_per_row` "
              "at 131072x1024 and `sgemm_v1_naive` are bound by sectors through L1 at a single rate for L1 hits "
              "and L2 traffic (a counter of distinct sectors per buffer, the footprint, would separate them);",
              "- the best GEMMs (`sgemm_v7_tuned`, `sgemm_v8_warptile`) reach 0.61-0.67 of the FP32 peak on the "
              "GPU; the model's ceilings (shared wavefronts, FLOPs) are reached with no issue overhead.", ""]
    lines += [f"Left out: {gpu} {group} | {name}: {why}." for (gpu, group, name), why in STALE.items()] + [""]
    for gpu in ("H100", "H200"):
        s = summary(tab, gpu)
        how = "fitted on 39 of these rows" if gpu == "H100" else "check: constants from the H100"
        lines += [f"## {gpu} ({how})", "",
                  f"- rows: {s['rows']}; median |relative error| over all rows **{100 * s['median_all']:.0f}%** (aim "
                  f"40%), worst {100 * s['worst_all']:.0f}%",
                  f"- memory-bound rows (every row but GEMM and attention): median **{100 * s['median_memory']:.0f}%** "
                  f"(aim 25%), worst {100 * s['worst_memory']:.0f}%",
                  "- rank correlation (Spearman) inside each group: " +
                  "; ".join(f"{g} **{v:.2f}**" for g, v in s["rank"].items()), "",
                  "| group | version | measured ms | estimated ms | error | bound by |", "|---|---|---:|---:|---:|---|"]
        for x in (x for x in tab if x["gpu"] == gpu):
            lines.append(f"| {x['group']} | {x['name']} | {x['measured_ms']:.3f} | {x['predicted_ms']:.3f} | "
                         f"{100 * x['rel_error']:+.0f}% | {x['bound']} |")
        lines.append("")
    return "\n".join(lines)


def collect(rs: list[Row], known: dict[str, list] | None = None) -> dict[str, list]:
    """Extrapolated launches of every row (the slow part: simulator runs), except the rows ``known`` has."""
    counts = {}
    for r in rs:
        if f"{r.group}|{r.name}" in (known or {}):
            counts[f"{r.group}|{r.name}"] = (known or {})[f"{r.group}|{r.name}"]
            continue
        counts[f"{r.group}|{r.name}"] = [launches_at_full(c) for c in r.calls]
        print(f"  simulated {r.group} | {r.name}", flush=True)
    return counts


COUNTERS = ROOT / "results/cpu/estimate_counters.json"


def read_counters(path: Path = COUNTERS) -> dict[str, list[list[es.LaunchCounters]]]:
    """Simulated counters per row (``"group|name"``: per call, its launches at the bench size) from a JSON file."""
    raw = json.loads(path.read_text())
    return {k: [[es.LaunchCounters(**c) for c in call] for call in v] for k, v in raw.items()}


def main() -> int:
    """Run the simulator on every row, optionally fit, write the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true", help="refit the constants on the H100 rows first")
    ap.add_argument("--counters", type=Path, default=None,
                    help="read the simulated counters of the rows it holds from this JSON file (as written to "
                         "results/cpu/estimate_counters.json) instead of running the simulator for them")
    a = ap.parse_args()
    rs = rows()
    known = read_counters(a.counters) if a.counters else {}
    counts = collect(rs, known)
    COUNTERS.write_text(json.dumps({k: [[vars(c) for c in call] for call in v] for k, v in counts.items()}, indent=0,
                                   sort_keys=True) + "\n")
    params = fit(rs, counts) if a.fit else dict(es.CALIBRATED)
    tab = table(rs, counts, params)
    (ROOT / "results/cpu/estimate_calibration.md").write_text(markdown(tab, params))
    (ROOT / "results/cpu/estimate_calibration.json").write_text(json.dumps(
        {"params": params, "rows": tab, "summary": {g: summary(tab, g) for g in ("H100", "H200")}}, indent=1))
    print(markdown(tab, params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
