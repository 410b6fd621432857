"""Lesson 01's profiler example on a GPU, with the launch cost measured with and without the profiler.

    .venv/bin/python benchmarks/profile_relu.py [REPORT]          (GPU only)

REPORT defaults to ``$OUT/profile_relu.txt`` when ``$OUT`` is set, else only prints. It holds:

1. the ``torch.profiler`` table of lesson 01's README ("Profiling a kernel"): 5 calls of
   ``relu_v3_float4`` on 2^28 float32 after a warm-up, exactly the README's code, and the two figures the
   README quotes from it (Self CUDA time per call of ``relu_v3_float4_kernel``, CPU time per
   ``cudaLaunchKernel``);
2. the same launch without the profiler: host time per call of the launcher with the loader's
   per-call synchronisation turned off (``cudacourse.loader.no_sync``), i.e. the cost of queueing one
   launch, and per call with the synchronisation (launch + wait for the kernel);
3. the kernel time from CUDA events (``cudacourse.bench.time_kernel``), with and without an L2 flush
   before each run, to compare with the profiler's kernel time and with ``make bench``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import cudacourse as cc  # noqa: E402
from cudacourse import bench  # noqa: E402
from cudacourse.loader import no_sync  # noqa: E402


def host_us_per_call(fn, calls: int = 200, sync_each: bool = False) -> float:
    """Median over 5 rounds of the host time per call (µs) of ``calls`` back-to-back calls."""
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        if sync_each:
            for _ in range(calls):
                fn()
        else:
            with no_sync():
                for _ in range(calls):
                    fn()
        rounds.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def main() -> None:
    """Profile, measure, write the report."""
    if not torch.cuda.is_available():
        raise SystemExit("profile_relu.py needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else (
        Path(os.environ["OUT"]) / "profile_relu.txt" if os.environ.get("OUT") else None)

    # ---- 1. the README's code, unchanged -----------------------------------------------------------
    m = cc.lesson("01_relu", impl="solution", backend="cuda")
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    m.relu_v3_float4(x, y, n)          # warm-up: builds the file, first launch
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            m.relu_v3_float4(x, y, n)
        torch.cuda.synchronize()
    avgs = prof.key_averages()
    table = avgs.table(sort_by="cuda_time_total", row_limit=10)
    kern = next((e for e in avgs if "relu_v3_float4_kernel" in e.key), None)
    launch = next((e for e in avgs if e.key == "cudaLaunchKernel"), None)
    if kern is None or launch is None:
        raise SystemExit("the profiler table has no relu_v3_float4_kernel or cudaLaunchKernel row:\n" + table)
    kernel_total_us = getattr(kern, "self_device_time_total", None) or kern.self_cuda_time_total
    kernel_us = kernel_total_us / kern.count
    launch_us = launch.cpu_time_total / launch.count

    # ---- 2. launch cost without the profiler ---------------------------------------------------------
    fn = lambda: m.relu_v3_float4(x, y, n)  # noqa: E731
    small_n = 1 << 10
    xs, ys = x[:small_n], y[:small_n]
    small = lambda: m.relu_v3_float4(xs, ys, small_n)  # noqa: E731
    queue_us = host_us_per_call(small)
    synced_small_us = host_us_per_call(small, sync_each=True)

    # ---- 3. kernel time from CUDA events -------------------------------------------------------------
    flush_ms = bench.time_kernel(fn)
    noflush_ms = bench.time_kernel(fn, flush=False)

    lines = [f"# benchmarks/profile_relu.py on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"CUDA {torch.version.cuda}", "",
             "## 1. torch.profiler, 5 calls of relu_v3_float4 on 2^28 fp32 (lesson 01 README code)", "",
             table, "",
             f"relu_v3_float4_kernel: {kern.count} calls, Self CUDA {kernel_total_us / 1e3:.3f} ms total, "
             f"{kernel_us:.1f} us per call",
             f"cudaLaunchKernel (under the profiler): {launch.count} calls, {launch_us:.1f} us CPU per call", "",
             "## 2. Launch cost without the profiler (relu_v3_float4 on 2^10 floats, 200 calls, median of 5)", "",
             f"host time per launch, no per-call synchronisation (queueing a launch): {queue_us:.1f} us",
             f"host time per call with the loader's synchronisation (launch + wait): {synced_small_us:.1f} us", "",
             "## 3. Kernel time from CUDA events (2^28 fp32)", "",
             f"L2 flushed before each run (as make bench): {flush_ms:.3f} ms",
             f"no flush (as the profiler loop): {noflush_ms:.3f} ms"]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


if __name__ == "__main__":
    main()
