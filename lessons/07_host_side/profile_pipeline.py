"""Profile lesson 07's pipeline with torch.profiler and write a Chrome/Perfetto trace (GPU only).

    .venv/bin/python lessons/07_host_side/profile_pipeline.py [--out DIR] [--impl solution|student]

Runs pipeline_run twice (serial: 1 chunk on 1 stream; overlapped: 8 chunks on 4 streams) inside one
profile and writes DIR/pipeline_trace.json (open it in https://ui.perfetto.dev or chrome://tracing) and
DIR/pipeline_overlap.txt: for each run, the GPU time during which a copy and a kernel were both running.
DIR defaults to $OUT, else the current folder. The notebook draws the trace file if it exists.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import cudacourse as cc
from cudacourse import settings


def overlap_us(events: list[dict], t0: float, t1: float) -> tuple[float, float, float]:
    """(copy us, kernel us, us where both ran) among GPU trace events inside [t0, t1]."""
    copies = [(e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("cat") == "gpu_memcpy" and t0 <= e["ts"] <= t1]
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "kernel" and t0 <= e["ts"] <= t1]
    both = 0.0
    for a0, a1 in copies:
        for b0, b1 in kernels:
            both += max(0.0, min(a1, b1) - max(a0, b0))
    return sum(b - a for a, b in copies), sum(b - a for a, b in kernels), both


def main() -> None:
    """Profile the serial and the overlapped pipeline; write the trace and the overlap summary."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--impl", default="solution", choices=["solution", "student"])
    ap.add_argument("--n", type=int, default=1 << 26)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_pipeline.py needs a CUDA GPU (the simulator has no GPU timeline to trace)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with settings.using(impl=args.impl):
        m = cc.lesson("07_host_side")
        n, d, iters = args.n, 1024, 1024
        x = torch.randn(n, device="cuda")
        coef = torch.cat([0.5 + 0.4 * torch.rand(d), 2 * torch.rand(d) - 1]).cuda()
        ms = torch.empty(1, device="cuda")
        m.pipeline_stage_in(x, coef, n, d)
        for _ in range(2):  # warm up both variants
            m.pipeline_run(ms, n, d, 1, 1, iters)
            m.pipeline_run(ms, n, d, 8, 4, iters)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with record_function("serial: 1 chunk, 1 stream"):
                m.pipeline_run(ms, n, d, 1, 1, iters)
                torch.cuda.synchronize()
            with record_function("overlapped: 8 chunks, 4 streams"):
                m.pipeline_run(ms, n, d, 8, 4, iters)
                torch.cuda.synchronize()
    trace = out / "pipeline_trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text()).get("traceEvents", [])
    lines = [f"{torch.cuda.get_device_name()}, pipeline_run n={n} floats, d={d}, iters={iters}"]
    for label in ("serial: 1 chunk, 1 stream", "overlapped: 8 chunks, 4 streams"):
        spans = [e for e in events if e.get("name") == label and "dur" in e]
        if not spans:
            continue
        # GPU events of a range start after its host span begins and end before the next range: use the
        # host span's start and the end of the last GPU event before the next range
        t0 = spans[0]["ts"]
        t1 = t0 + spans[0]["dur"]
        c, k, b = overlap_us(events, t0, t1)
        lines.append(f"{label}: copies {c:.0f} us, kernels {k:.0f} us, copy and kernel at once {b:.0f} us")
    (out / "pipeline_overlap.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"trace: {trace}")


if __name__ == "__main__":
    main()
