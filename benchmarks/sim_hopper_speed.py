"""Speed of task 5.12 (gemm_wgmma, wgmma + TMA) on the CPU simulator: each graded case of
tests/test_05_tensor_cores.py::test_gemm_wgmma in checked mode (what a grade runs) and fast mode.

Run: ``.venv/bin/python benchmarks/sim_hopper_speed.py [--out results/cpu/sim_hopper]``. Each figure is the
median of 3 calls through the simulator's worker (tensor copies included; the build is not timed). The machine
(CPU count, load average before and after) is written beside the table: on a shared machine the load says how
many other processes took the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import cudacourse as cc  # noqa: E402
from cudacourse import check  # noqa: E402

CASES = [(37, 45, 72), (131, 129, 136), (300, 257, 520), (37, 44, 72), (300, 260, 520), (2100, 2052, 72)]


def time_case(m: cc.Lesson, M: int, N: int, K: int) -> float:
    """Median seconds of 3 calls of gemm_wgmma at M x N x K (C checked against an fp64 product once)."""
    g = check.rng(f"gemm_wgmma-{M}x{N}x{K}")
    A = check.randn((M, K), g, "cpu", dtype=torch.bfloat16)
    W = check.randn((N, K), g, "cpu", dtype=torch.bfloat16)
    C = torch.full((M, N), float("nan"))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        m.gemm_wgmma(A, W, C, M, N, K)
        times.append(time.perf_counter() - t0)
    err = float((C.double() - A.double() @ W.double().T).abs().max())
    assert err < 1e-3, f"{M}x{N}x{K}: max error {err}"
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="folder for timings.md and timings.json")
    args = ap.parse_args()
    src = str(ROOT / "solutions" / "05_tensor_cores" / "gemm_hopper.cu")
    load_before = os.getloadavg()
    rows = []
    mods = {mode: cc.load(src, ["gemm_wgmma"], backend="sim", check=mode == "checked", timeout_s=600)
            for mode in ("checked", "fast")}
    for M, N, K in CASES:
        row = {"case": f"{M}x{N}x{K}"}
        for mode, m in mods.items():
            row[mode] = round(time_case(m, M, N, K), 3)
        rows.append(row)
        print(row, flush=True)
    load_after = os.getloadavg()
    info = {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
            "workers": os.environ.get("CCSIM_WORKERS", "default (one per core)"), "rows": rows}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "timings.json").write_text(json.dumps(info, indent=1) + "\n")
        lines = ["# Task 5.12 (gemm_wgmma) on the CPU simulator", "",
                 f"Made by `benchmarks/sim_hopper_speed.py` on this machine: {info['cpus']} CPUs ({info['cpu']}), "
                 f"load average {info['load_before'][0]} before and {info['load_after'][0]} after (other processes "
                 "shared the cores). Seconds per call, median of 3, worker round trip included, build not timed.", "",
                 "| case (M x N x K) | checked mode (graded) | fast mode |", "|---|---:|---:|"]
        lines += [f"| {r['case']} | {r['checked']} | {r['fast']} |" for r in rows]
        (out / "timings.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
