"""Where the capstone's training step spends its time on a GPU: one step under ``torch.profiler``.

    .venv/bin/python lessons/06_training/profile_step.py [--out DIR] [--impl solution|student] [--steps 3]

Runs the training step of bench.py's capstone row (``capstone.gpu_config()``, 16 x 256 tokens, every op on
the course kernels, ``train.train_step``) and the same step in PyTorch eager, a few warm-up steps first, then
``--steps`` profiled steps of each, and writes to DIR (default: $OUT, else results/profile_06):

  profile_step.txt        per-kernel tables (CUDA time, calls), yours and PyTorch's, plus a summary: the step's
                          wall time, the summed kernel time, the number of launches, the GPU idle share
  profile_step.json       the same summary as JSON
  trace_course.json       a Chrome trace of one profiled step on the course kernels (chrome://tracing, Perfetto)

Launches return without waiting for the GPU here (``no_sync``, as the bench times them), so a gap between
kernels is host time: Python, autograd, argument checks, synchronisations.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

import cudacourse as cc
from cudacourse.loader import import_file, no_sync

HERE = Path(__file__).resolve().parent


def _steps(impl: str) -> tuple[Any, Any, str]:
    """(course step, PyTorch eager step, description) for bench.py's capstone configuration."""
    m6 = cc.lesson("06_training", impl=impl, backend="cuda")
    tr = import_file(m6.dir / "train.py", "cc_train_profile")
    cap = import_file(HERE / "capstone.py", "cc_capstone_profile")
    ops = tr.Ops(m6, cc.lesson("04_transformer", impl=impl, backend="cuda"),
                 cc.lesson("03_gemm", impl=impl, backend="cuda"), cap.load_decoder(impl))
    cfg = cap.gpu_config()
    B, T = 16, 256
    weights = ops.decoder.init_weights(cfg, seed=0, device=ops.device)
    text = cap.load_corpus()
    ids, targets = cap.batches(cap.CharTokenizer(text).encode(text), B, T, 1, seed=0, device=ops.device)[0]
    hp = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    st = tr.State(weights, ops.device)
    W, leaves = cap.torch_params(weights)
    opt = torch.optim.AdamW(leaves, **hp)

    def course_step() -> None:
        tr.train_step(ops, st, cfg, ids, targets, **hp)

    def torch_step() -> None:
        opt.zero_grad()
        cap.torch_loss(W, cfg, ids, targets).backward()
        opt.step()

    desc = f"dim {cfg.dim} x {cfg.n_layers} layers, {cfg.n_heads} heads, hidden {cfg.hidden}, {B}x{T} tokens"
    return course_step, torch_step, desc


def _profile(step: Any, n: int, trace: Path | None) -> tuple[str, dict]:
    """Profile n steps after 3 warm-up steps; (table, summary)."""
    from torch.profiler import ProfilerActivity, profile

    with no_sync():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3 / n
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            torch.cuda.synchronize()
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    # the CUDA-side events are kernels and memcpy/memset: their self time is GPU time
    kernel_us = sum(e.self_device_time_total for e in events) / n
    launches = sum(e.count for e in events) / n
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=40, max_name_column_width=70)
    summary = {"wall_ms_per_step": round(wall_ms, 3), "kernel_ms_per_step": round(kernel_us / 1e3, 3),
               "gpu_ops_per_step": round(launches, 1),
               "gpu_idle_share": round(max(0.0, 1 - kernel_us / 1e3 / wall_ms), 3),
               "top": [{"name": e.key, "calls_per_step": e.count / n,
                        "ms_per_step": round(e.self_device_time_total / n / 1e3, 4)}
                       for e in sorted(events, key=lambda e: -e.self_device_time_total)[:25]]}
    return table, summary


def main(argv: list[str] | None = None) -> int:
    """Profile the capstone step (yours and PyTorch eager) and write the tables under --out."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(HERE.parents[1] / "results" / "profile_06"))
    ap.add_argument("--impl", choices=("solution", "student"), default="solution")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_step: needs a GPU (on the simulator kernel times say nothing about a GPU)")
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    course_step, torch_step, desc = _steps(args.impl)
    mine, mine_sum = _profile(course_step, args.steps, out / "trace_course.json")
    ref, ref_sum = _profile(torch_step, args.steps, None)
    head = (f"capstone training step, {desc}, on {torch.cuda.get_device_name()}; per step, {args.steps} steps "
            f"profiled after 3 warm-up steps\n")
    lines = [head]
    for name, s, tab in (("course kernels (train.train_step)", mine_sum, mine), ("PyTorch eager", ref_sum, ref)):
        lines += [f"== {name}: wall {s['wall_ms_per_step']} ms/step, GPU busy {s['kernel_ms_per_step']} ms/step, "
                  f"{s['gpu_ops_per_step']} GPU ops/step, GPU idle {100 * s['gpu_idle_share']:.0f}% ==", tab, ""]
    text = "\n".join(lines)
    (out / "profile_step.txt").write_text(text)
    (out / "profile_step.json").write_text(json.dumps({"config": desc, "course": mine_sum, "pytorch": ref_sum},
                                                      indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
