"""The simulator's profiler against Nsight Compute, on the lesson 01-03 solution kernels at a fixed small size.

    .venv/bin/python benchmarks/profile_vs_ncu.py              (GPU machine with ncu on the PATH)
    .venv/bin/python benchmarks/profile_vs_ncu.py --speed      (any machine: profile mode vs checked mode)

Default mode: runs every case below once on the simulator with ``profile=True`` (the counters), then
runs this script again under ``ncu --metrics <list> --csv`` on the cuda backend (``--run-cuda``: each case
launched once on the GPU), and writes a markdown table (metric, kernel, simulator, ncu, agree?) to
``$OUT/profile_vs_ncu.md`` and ``results/<gpu>/profile_vs_ncu.md``. Agreement: equal for the request,
sector, wavefront and bank-conflict counts of these deterministic access patterns; within 5% otherwise.

``--speed``: wall time of each case's launcher in checked mode and in profile mode on the CPU, at the
graded sizes (median of 3 calls after a warm-up), and their ratio (the issue asks for at most 3x);
written to ``$OUT/profile_speed.txt`` and ``results/cpu/profile_speed.txt``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import cudacourse as cc  # noqa: E402
from cudacourse.profile import NCU_LIST, PROFILE_MAX_THREADS  # noqa: E402

SOL = ROOT / "solutions"

# (lesson file, launcher, kernel name, size args) at the comparison size; sizes are the launcher's int args.
CASES = [
    ("01_relu/relu.cu", "relu_v1_scalar", "relu_v1_scalar_kernel", (1 << 16,)),
    ("01_relu/relu.cu", "relu_v2_grid_stride", "relu_v2_grid_stride_kernel", (1 << 16, 32)),
    ("01_relu/relu.cu", "relu_v3_float4", "relu_v3_float4_kernel", (1 << 16,)),
    ("02_reduce/reduce.cu", "reduce_v1_interleaved", "reduce_v1_interleaved_kernel", (1 << 14,)),
    ("02_reduce/reduce.cu", "reduce_v1b_strided_index", "reduce_v1b_strided_index_kernel", (1 << 14,)),
    ("02_reduce/reduce.cu", "reduce_v2_sequential", "reduce_v2_sequential_kernel", (1 << 14,)),
    ("02_reduce/reduce.cu", "reduce_v5_warp_shuffle", "reduce_v5_warp_shuffle_kernel", (1 << 14,)),
    ("03_gemm/gemm.cu", "sgemm_v1_naive", "sgemm_v1_naive_kernel", (128, 128, 128)),
    ("03_gemm/gemm.cu", "sgemm_v2_coalesced", "sgemm_v2_coalesced_kernel", (128, 128, 128)),
    ("03_gemm/gemm.cu", "sgemm_v3_shared", "sgemm_v3_shared_kernel", (128, 128, 128)),
    ("03_gemm/transpose.cu", "transpose_naive", "transpose_naive_kernel", (256, 256)),
    ("03_gemm/transpose.cu", "transpose_tiled", "transpose_tiled_kernel", (256, 256)),
    ("03_gemm/transpose.cu", "transpose_conflict_free", "transpose_conflict_free_kernel", (256, 256)),
]
# graded sizes for the speed comparison (the largest simulator case of each lesson's tests)
SPEED_SIZES = {"01_relu": (2**20 + 3, 64), "02_reduce": (2**20 + 7,), "03_gemm/gemm.cu": (70, 150, 257),
               "03_gemm/transpose.cu": (64, 96)}
EXACT = ("requests", "sectors", "wavefronts", "bank_conflicts", "inst_executed")


def _args(la, sizes: tuple, device: str) -> list:
    """Random tensors large enough for every pointer parameter, then the sizes for the int parameters."""
    n = 1
    for s in sizes:
        n = max(n, s)
    numel = max(sizes[0] * (sizes[1] if len(sizes) > 1 else 1), n * n if len(sizes) == 3 else 0) + 64
    g = torch.Generator().manual_seed(0)
    out, ints = [], list(sizes)
    for p in la.params:
        if p.pointer:
            dt = getattr(torch, p.dtype) if p.dtype not in (None, "any") else torch.float32
            t = torch.randn(numel, generator=g).to(dt) if dt.is_floating_point else torch.zeros(numel, dtype=dt)
            out.append(t.to(device))
        else:
            out.append(ints.pop(0) if ints else 1.0)
    return out


def run_sim() -> dict:
    """The simulator's counters of every case: {kernel: {metric: value}}."""
    res: dict = {}
    for file, fn, kernel, sizes in CASES:
        m = cc.load(SOL / file, [fn], backend="sim", profile=True)
        getattr(m, fn)(*_args(m.launchers[fn], sizes, "cpu"))
        k = m.profile_report().kernel(kernel)
        res[kernel] = {name: k.metrics[name] for name in NCU_LIST}
        m.close()
    return res


def run_cuda() -> None:
    """Each case once on the GPU (the process ncu profiles)."""
    for file, fn, _kernel, sizes in CASES:
        m = cc.load(SOL / file, [fn], backend="cuda")
        getattr(m, fn)(*_args(m.launchers[fn], sizes, "cuda"))
        torch.cuda.synchronize()


def run_ncu() -> dict:
    """Run ``--run-cuda`` under Nsight Compute; {kernel: {metric: value}} of the first launch of each case."""
    ncu = shutil.which("ncu")
    if not ncu:
        raise SystemExit("ncu is not on the PATH (Nsight Compute ships with the CUDA toolkit)")
    kernels = "|".join(k for _f, _fn, k, _s in CASES)
    cmd = [ncu, "--metrics", ",".join(NCU_LIST), "--csv", "--print-units", "base", "--target-processes", "all",
           "-k", f"regex:^({kernels})$",
           sys.executable, __file__, "--run-cuda"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    text = r.stdout[r.stdout.find('"ID"'):] if '"ID"' in r.stdout else ""
    if not text:
        raise SystemExit(f"ncu gave no CSV (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    res: dict = {}
    seen: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO(text)):
        name = row["Kernel Name"].split("(")[0].split("<")[0].strip().split(" ")[-1]
        launch = row["ID"]
        if seen.setdefault(name, launch) != launch:
            continue  # a later launch of the same kernel
        val = row["Metric Value"].replace(",", "")
        try:
            res.setdefault(name, {})[row["Metric Name"]] = float(val)
        except ValueError:
            pass
    return res


def table(sim: dict, gpu: dict, device: str) -> str:
    """Markdown: metric, kernel, simulator, ncu, agree?"""
    lines = [f"# Simulator profiler vs Nsight Compute ({device})", "",
             "Made by `benchmarks/profile_vs_ncu.py`: lesson 01-03 solution kernels at a fixed small size, each "
             "launched once. Counts must be equal (requests, sectors, wavefronts, bank conflicts); others within 5%.",
             "", "| metric | kernel | simulator | ncu | agree? |", "|---|---|---:|---:|---|"]
    agree = total = 0
    for _f, _fn, kernel, _s in CASES:
        for metric in NCU_LIST:
            s = sim.get(kernel, {}).get(metric)
            g = gpu.get(kernel, {}).get(metric)
            if s is None or g is None or (s == 0 and g == 0):
                continue
            exact = any(e in metric for e in EXACT)
            ok = s == g if exact else abs(s - g) <= 0.05 * max(abs(g), 1e-9)
            agree += ok
            total += 1
            lines.append(f"| `{metric}` | {kernel} | {s:,.0f} | {g:,.0f} | {'yes' if ok else '**no**'} |")
    lines += ["", f"{agree} of {total} compared values agree."]
    return "\n".join(lines) + "\n"


def speed() -> str:
    """Checked vs profile mode wall time per case at the graded sizes (CPU)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = [f"Profile mode against checked mode on the CPU simulator: median of 3 calls after a warm-up, graded sizes "
            f"({os.cpu_count()} cores, load average {load:.1f} at the start).",
            f"Launches above {PROFILE_MAX_THREADS} threads count a sample of blocks (the 2^20-element relu_v1, relu_v3 "
            "and reduce launches: every 3rd to 9th block); every block still runs in checked mode.", "",
            "case                         checked ms   profile ms   ratio"]
    for file, fn, _kernel, _sizes in CASES:
        sizes = SPEED_SIZES.get(file, SPEED_SIZES.get(file.split("/")[0]))
        if fn == "relu_v2_grid_stride":
            sizes = (sizes[0], 64)
        elif file.startswith("01_relu"):
            sizes = sizes[:1]
        times = []
        for profile in (False, True):
            m = cc.load(SOL / file, [fn], backend="sim", profile=profile)
            args = _args(m.launchers[fn], sizes, "cpu")
            f = getattr(m, fn)
            f(*args)  # warm-up: starts the worker
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                f(*args)
                ts.append(time.perf_counter() - t0)
            times.append(statistics.median(ts) * 1e3)
            m.close()
        rows.append(f"{fn:<28} {times[0]:10.1f} {times[1]:12.1f} {times[1] / times[0]:7.2f}x")
    return "\n".join(rows) + "\n"


def _write(name: str, text: str, folder: str) -> None:
    print(text)
    for d in ([Path(os.environ["OUT"])] if os.environ.get("OUT") else []) + [ROOT / "results" / folder]:
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
        print(f"wrote {d / name}")


def main() -> int:
    """Entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-cuda", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--speed", action="store_true", help="profile vs checked mode wall time on the CPU")
    ap.add_argument("--sim-only", action="store_true", help="print the simulator's counters as JSON and stop")
    a = ap.parse_args()
    if a.run_cuda:
        run_cuda()
        return 0
    if a.speed:
        _write("profile_speed.txt", speed(), "cpu")
        return 0
    sim = run_sim()
    if a.sim_only:
        print(json.dumps(sim, indent=1))
        return 0
    from cudacourse import bench

    device = torch.cuda.get_device_name()
    gpu = run_ncu()
    if os.environ.get("OUT"):  # the raw numbers of both sides, for a look at any disagreement
        (Path(os.environ["OUT"]) / "profile_vs_ncu.json").write_text(json.dumps({"sim": sim, "ncu": gpu}, indent=1))
    _write("profile_vs_ncu.md", table(sim, gpu, device), bench.slug(device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
