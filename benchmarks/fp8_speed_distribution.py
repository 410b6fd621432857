"""Lesson 08's speed measurements (tasks 8.6 and 8.7) repeated N times in one process, with the solutions.

Each repetition runs the graded tests' own code (tests/test_08_fp8.py: test_speed_gemm_fp8_wgmma and
test_speed_quantization, which call cudacourse.speed.judge with lesson.toml's targets), so a ratio here is measured
as a test run measures it: interleaved with the reference, L2 flushed and timed with CUDA events, re-measured
when within 10% of the target. A grade (``python3 -m cudacourse grade``) times through its GPU worker by wall clock
instead; benchmarks/speed_distribution.py repeats grades (slower: fresh processes each time). The inputs of 8.6
(4096^3 e4m3 operands made on the CPU) are made once and reused: they are the same in every repetition anyway.

On the GPU machine (python3, no make)::

    CUDA_COURSE_IMPL=solution python3 benchmarks/fp8_speed_distribution.py -n 10 --out results/nvidia-h200/fp8/x.md

Writes a markdown table (min / median / max of each measurement's ratio, the failures at the current targets) and
a .json beside it with every message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10, help="repetitions (default 10)")
    ap.add_argument("--out", type=Path, required=True, help="the markdown table; its .json beside it")
    args = ap.parse_args()

    import torch
    from speed_distribution import RATIO

    from cudacourse import settings, speed
    from cudacourse.check import CheckFailure

    settings.configure(impl="solution")
    import test_08_fp8 as T

    cache: dict[tuple, Any] = {}
    make = T.gemm_inputs

    def gemm_inputs(M: int, N: int, K: int, g: torch.Generator) -> Any:
        key = (M, N, K, g.initial_seed())
        if key not in cache:
            cache[key] = make(M, N, K, g)
        return cache[key]

    T.gemm_inputs = gemm_inputs
    real_judge = speed.judge
    messages: list[tuple[str, str, bool]] = []  # (what, message, passed)

    def judge(task: tuple[str, str], what: str, *a: Any, **kw: Any) -> Any:
        try:
            v = real_judge(task, what, *a, **kw)
            messages.append((f"{task[1]} {what}", v.message, True))
            return v
        except CheckFailure as e:  # the other measurement of 8.7 still runs
            messages.append((f"{task[1]} {what}", str(e), False))
            return None

    speed.judge = judge
    runs = []
    for k in range(args.n):
        t0 = time.monotonic()
        messages.clear()
        T.test_speed_gemm_fp8_wgmma()
        T.test_speed_quantization()
        run = {}
        for what, msg, ok in messages:
            ratios = [float(m.group("r")) for m in RATIO.finditer(msg)]
            run[what] = {"pass": ok, "ratio": max(ratios) if ratios else None, "message": msg[:600]}
        runs.append(run)
        print(f"run {k}: {time.monotonic() - t0:.1f} s: " + "; ".join(f"{w}: {x['ratio']}" for w, x in run.items()),
              flush=True)
        write(args.out, runs, torch.cuda.get_device_name())
    return 0


def write(out: Path, runs: list[dict], device: str) -> None:
    """``out`` (markdown) and its .json."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"device": device, "runs": runs}, indent=1))
    lines = ["| measurement | runs | ratio min | median | max | failures |", "|---|---:|---:|---:|---:|---:|"]
    for what in runs[0]:
        rs = [r[what]["ratio"] for r in runs if r.get(what, {}).get("ratio") is not None]
        fails = sum(not r[what]["pass"] for r in runs if what in r)
        stats = f"{min(rs):.2f} | {statistics.median(rs):.2f} | {max(rs):.2f}" if rs else "- | - | -"
        lines.append(f"| {what} | {len(rs)} | {stats} | {fails} |")
    out.write_text(f"# Lesson 08's speed measurements, {len(runs)} runs in one process ({device})\n\n"
                   "`benchmarks/fp8_speed_distribution.py`: the graded tests' own measurement (cudacourse.speed.judge,"
                   " CUDA events, L2 flushed) repeated; a ratio is the reference's time over the solution's (8.6) or "
                   "the fraction of the copy bandwidth measured in the same process (8.7). Failures: at the targets "
                   "lesson.toml had for the run.\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
