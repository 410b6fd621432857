"""The capstone's loss curve on the CPU simulator against PyTorch in float64, step by step (issue 37).

Backs the figures lessons/06_training/README.md quotes about task 6.7's graded check: how far the solutions'
curve stays from PyTorch's (float32 kernels against float64) over more steps than the check runs, how far a
planted error lands (AdamW without its weight decay), and how long one training step of the tiny model takes
on the simulator in checked mode (the default).

It reuses the graded test's own helpers (tests/test_06_training.py: the tiny model, its weights, the corpus
excerpt, the float64 reference), so it measures exactly what the check compares. Run from the course's top
folder (CPU only; a few minutes on 2 cores, most of it the first builds):

    CUDA_COURSE_IMPL=solution CUDA_COURSE_BACKEND=sim .venv/bin/python benchmarks/capstone_curve.py \
        --steps 40 --out results/cpu/capstone_curve.txt
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _test_module() -> Any:
    """tests/test_06_training.py, imported as a module (its helpers, not its tests)."""
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("capstone_test_helpers", ROOT / "tests" / "test_06_training.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _data(t: Any, steps: int, B: int, T: int, device: Any) -> tuple[list, int]:
    """The check's batches (same seed stream as the test), ``steps`` of them."""
    import torch

    from cudacourse import check

    g = check.rng("capstone")
    seed = int(torch.randint(0, 1 << 30, (1,), generator=g))
    chars = sorted(set(t.TEXT))
    ids = torch.tensor([chars.index(c) for c in t.TEXT])
    starts = torch.randint(0, ids.numel() - T - 1, (steps, B), generator=g)
    data = [(torch.stack([ids[s:s + T] for s in row]).to(torch.int32).to(device),
             torch.stack([ids[s + 1:s + T + 1] for s in row]).to(device)) for row in starts.tolist()]
    return data, seed


def run(steps: int) -> dict[str, Any]:
    """Train the tiny model ``steps`` steps on the kernels and in float64 PyTorch; the differences and timings."""
    t = _test_module()
    tr = t._train()
    ops, m6 = t._ops(tr)
    cfg = t._Cfg()
    data, seed = _data(t, steps, 4, 16, m6.device)
    weights = t._init_weights(cfg, seed, m6.device)
    hp = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    want = t._ref_train(weights, cfg, data, hp)
    out: dict[str, Any] = {"seed": seed, "ref": want}
    # one warm-up step (builds, first calls), then the timed run from the same weights
    tr.train(ops, t._init_weights(cfg, seed, m6.device), cfg, data[:1], **hp)
    t0 = time.perf_counter()
    losses, _ = tr.train(ops, t._init_weights(cfg, seed, m6.device), cfg, data, **hp)
    out["seconds_per_step"] = (time.perf_counter() - t0) / steps
    out["losses"] = losses
    out["diff"] = [abs(a - b) for a, b in zip(losses, want, strict=True)]
    planted, _ = tr.train(ops, t._init_weights(cfg, seed, m6.device), cfg, data[:4], **{**hp, "weight_decay": 0.0})
    out["no_weight_decay_diff"] = [abs(a - b) for a, b in zip(planted, want[:4], strict=True)]
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and write the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", default=str(ROOT / "results" / "cpu" / "capstone_curve.txt"))
    args = ap.parse_args(argv)
    os.environ.setdefault("CUDA_COURSE_IMPL", "solution")
    os.environ.setdefault("CUDA_COURSE_BACKEND", "sim")
    r = run(args.steps)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    load = os.getloadavg()
    lines = [
        "# The capstone's loss curve on the CPU simulator (benchmarks/capstone_curve.py)",
        f"# machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}; load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (shared machine); commit {commit.strip()}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"# command: CUDA_COURSE_IMPL={os.environ['CUDA_COURSE_IMPL']} CUDA_COURSE_BACKEND="
        f"{os.environ['CUDA_COURSE_BACKEND']} .venv/bin/python benchmarks/capstone_curve.py --steps {args.steps}",
        "# the graded check's tiny model (dim 32, 2 layers, 2 heads), batches of 4 x 16, AdamW lr 1e-2, betas (0.9, "
        "0.95), eps 1e-5, weight decay 0.1; reference: PyTorch in float64 from the same weights and batches",
        f"seed {r['seed']}",
        f"seconds per training step (checked mode, after one warm-up step): {r['seconds_per_step']:.2f}",
        f"|loss - reference| over {args.steps} steps: min {min(r['diff']):.1e}, max {max(r['diff']):.1e}",
        "planted: AdamW without weight decay, |loss - reference| at steps 0-3: "
        + ", ".join(f"{d:.1e}" for d in r["no_weight_decay_diff"]),
        "",
        "step  yours      reference  |difference|",
    ]
    lines += [f"{i:4d}  {a:.7f}  {b:.7f}  {d:.1e}" for i, (a, b, d) in enumerate(zip(r["losses"], r["ref"],
                                                                                       r["diff"], strict=True))]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:9]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
