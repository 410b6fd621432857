"""What a recompilation costs the swish op of lesson 07 under torch.compile (backs task 7.7's explanation).

Times, in one process: an eager call of the op, a call of the compiled function that hits its cache, and a call
that makes dynamo recompile (a new input shape with ``dynamic=False``: the mistake task 7.7 guards against is a
guard that fails on every call, and a new shape is the simplest such guard). Median of a few calls each, host
clock around a synchronised call. On a GPU the op runs on CUDA; without one on the CPU simulator (the op's time
then is the simulator's, the compile time is the host's either way).

    .venv/bin/python benchmarks/recompile_cost.py [--impl solution] [--n 16777216] [--out FILE]

GPU machine (the lead runs it; writes the file named):
    CUDA_COURSE_IMPL=solution python3 benchmarks/recompile_cost.py --n 16777216 \
        --out results/nvidia-h200/recompile_cost.txt
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _timed(fn: Any, sync: Any) -> float:
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1e3


def main(argv: list[str] | None = None) -> int:
    """Measure and write the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", default=os.environ.get("CUDA_COURSE_IMPL", "solution"))
    ap.add_argument("--n", type=int, default=None, help="floats per call (default: 16M on a GPU, 4096 on the CPU)")
    ap.add_argument("--shapes", type=int, default=5, help="recompiling calls to time")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    os.environ["CUDA_COURSE_IMPL"] = args.impl
    sys.path.insert(0, str(ROOT))
    import torch

    from cudacourse.loader import import_file

    gpu = torch.cuda.is_available()
    dev = "cuda" if gpu else "cpu"
    n = args.n or (1 << 24 if gpu else 4096)
    folder = ROOT / ("solutions" if args.impl == "solution" else "lessons") / "07_host_side"
    op = import_file(folder / "custom_op.py", "cc_l07_custom_op")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * args.shapes + 8)

    def f(t: torch.Tensor) -> torch.Tensor:
        return op.swish(t)

    x = torch.randn(n, device=dev)
    f(x)
    sync()
    eager = statistics.median(_timed(lambda: f(x), sync) for _ in range(11))
    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    first = _timed(lambda: compiled(x), sync)
    hit = statistics.median(_timed(lambda: compiled(x), sync) for _ in range(11))
    recompiles = [_timed(lambda k=k: compiled(torch.randn(n + 16 * (k + 1), device=dev)), sync)
                  for k in range(args.shapes)]
    cpu = f"CPU ({platform.machine()}, {os.cpu_count()} CPUs; op on the simulator)"
    name = torch.cuda.get_device_name() if gpu else cpu
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    lines = [
        "# What a recompilation costs lesson 07's swish op under torch.compile (benchmarks/recompile_cost.py)",
        f"# device: {name}; torch {torch.__version__}; impl {args.impl}; commit {commit.strip()}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {os.getloadavg()[0]:.1f}",
        f"# command: CUDA_COURSE_IMPL={args.impl} python {' '.join(sys.argv)}",
        f"floats per call: {n}",
        f"eager call (median of 11): {eager:.3f} ms",
        f"first compiled call (compile included): {first:.1f} ms",
        f"compiled call, cache hit (median of 11): {hit:.3f} ms",
        f"compiled call that recompiles (a new shape, dynamic=False), {args.shapes} calls: "
        + ", ".join(f"{v:.1f}" for v in recompiles) + f" ms (median {statistics.median(recompiles):.1f} ms)",
        f"a recompiling call / an eager call: {statistics.median(recompiles) / eager:.0f}x",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
