"""Diagnose launch overhead of the cuda backend: event time vs profiler kernel time vs host time."""
import time

import torch

import cudacourse as cc
from cudacourse import bench
from cudacourse.loader import no_sync

m = cc.lesson("01_relu", impl="solution", backend="cuda")
n = 1 << 28
x = torch.randn(n, device="cuda")
y = torch.empty_like(x)
f = lambda: m.relu_v3_float4(x, y, n)  # noqa: E731
f()
torch.cuda.synchronize()
print("event ms (flush):", bench.time_kernel(f))
print("event ms (no flush):", bench.time_kernel(f, flush=False))
print("torch.relu ms:", bench.time_kernel(lambda: torch.relu(x, out=y) if False else torch.relu_(y)))
with no_sync():
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        f()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
print(f"host per call {1e3*(t1-t)/20:.3f} ms, total incl sync per call {1e3*(t2-t)/20:.3f} ms")
activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=activities) as prof:
    with no_sync():
        for _ in range(5):
            f()
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
