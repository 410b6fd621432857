"""Lesson 07, part 2 on a GPU: the caching allocator of lessons/07_host_side/allocator.cu against PyTorch's.

Two measurements, written under --out (benchmarks/gpu_alloc.sh runs it and commits the output to results/<gpu>/):

1. Fragmentation, shown (task 7.11): two traces replayed on four allocators, reserved and allocated bytes after
   every operation: the solution's CachingAllocator ("yours", alloc_tools.run_trace), allocator.cu's PlainAllocator
   ("no caching"), PyTorch's caching allocator (alloc_tools.torch_replay) and PyTorch's with
   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the same replay in a child process, where the setting is read
   at start). The traces: "fragmenting", the solution's fragmenting_trace (24 blocks of 3 MiB, one in six kept,
   then empty_cache), and "growing batch" (six tensors of 10 MiB x (1 + n/10) per step n = 0..9, all freed after
   each step: the batch-size growth that PyTorch's note on expandable segments describes).
   Output: alloc_fragmentation.md (a table), alloc_fragmentation.json (every series), alloc_<trace>.png.
2. Plugged in (task 7.10): lesson 06's capstone step in its PyTorch form (alloc_tools.train_on: capstone.gpu_config(),
   batch 16 x 256, torch_loss + AdamW) on PyTorch's allocator, yours (CUDAPluggableAllocator over cc_alloc_malloc and
   cc_alloc_free) and none (cc_plain_*), each in a fresh process. Output: alloc_plugged.md, alloc_plugged.json.

    python3 benchmarks/alloc_bench.py --out DIR [--steps 20] [--only plugged|fragmentation]
    .venv/bin/python benchmarks/alloc_bench.py --out DIR --replot DIR/alloc_fragmentation.json   (plots only)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def _tools():  # noqa: ANN202 - the lesson's given module
    import cudacourse as cc
    from cudacourse.loader import import_file

    return import_file(cc.lesson("07_host_side", impl="solution").dir / "alloc_tools.py", "cc_alloc_tools_bench")


def traces(m, tools) -> dict:  # noqa: ANN001
    """name -> Trace."""
    rows_t = torch.full((400 * 4,), -1, dtype=torch.int64, device=m.device)
    count = torch.zeros(1, dtype=torch.int32, device=m.device)
    m.fragmenting_trace(rows_t, 400, count)
    n = int(count.item())
    frag = tools.Trace([tuple(int(v) for v in rows_t[4 * i:4 * i + 4].tolist()) for i in range(n)])
    grow, ident = tools.Trace(), 0
    for step in range(10):
        ids = list(range(ident, ident + 6))
        for i in ids:
            grow.malloc(i, int(10 * MiB * (1 + step / 10)) + 4096)
        for i in ids:
            grow.free(i)
        ident += 6
    grow.empty_cache()
    return {"fragmenting": frag, "growing batch": grow}


def expandable_replays(all_traces: dict) -> dict[str, list[dict]]:
    """torch_replay of each trace in one child process started with expandable_segments:True."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import alloc_tools as t; "
            "print(json.dumps({k: t.torch_replay(t.Trace(v)).stats for k, v in json.loads(sys.argv[2]).items()}))")
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "solutions" / "07_host_side"),
                          json.dumps({k: t.rows for k, t in all_traces.items()})], capture_output=True, text=True,
                         env=env, timeout=300)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def probes() -> None:
    """What the explainer says of this torch: the hook types in its header, memory_stats' counters, and what a
    request larger than the device does to PyTorch's statistics."""
    header = Path(torch.__file__).parent / "include" / "torch" / "csrc" / "cuda" / "CUDAPluggableAllocator.h"
    lines = [ln.strip() for ln in header.read_text().splitlines() if "std::function<void" in ln and "_fn" in ln]
    print(f"torch {torch.__version__}; {header.name}: {' | '.join(lines[:2])}")
    doc = torch.cuda.memory.CUDAPluggableAllocator.__init__.__doc__ or ""
    print("CUDAPluggableAllocator docstring:", " | ".join(ln.strip() for ln in doc.splitlines() if "_fn_name(" in ln))
    torch.cuda.empty_cache()
    torch.cuda.reset_accumulated_memory_stats()
    print("memory_stats has num_device_alloc:", "num_device_alloc" in torch.cuda.memory_stats())
    keep = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    del keep  # one cached 20 MiB segment
    before = torch.cuda.memory_stats()
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        print("a 1 PiB request did not fail")
    except torch.OutOfMemoryError as e:
        after = torch.cuda.memory_stats()
        print(f"a 1 PiB request: OutOfMemoryError; num_alloc_retries +"
              f"{after['num_alloc_retries'] - before['num_alloc_retries']}, num_ooms +"
              f"{after['num_ooms'] - before['num_ooms']}, reserved {before['reserved_bytes.all.current']} -> "
              f"{after['reserved_bytes.all.current']} bytes; message: {str(e)[:160]}")


def fragmentation(out: Path) -> None:
    import cudacourse as cc

    tools = _tools()
    m = cc.lesson("07_host_side", impl="solution", backend="cuda")
    table = ["| trace | allocator | peak allocated MiB | peak reserved MiB | reserved at the end MiB | "
             "fragmentation at the end | cudaMalloc calls |", "|---|---|---:|---:|---:|---:|---:|"]
    series: dict = {}
    all_traces = traces(m, tools)
    try:
        expandable = expandable_replays(all_traces)
    except (RuntimeError, subprocess.SubprocessError) as e:
        print(f"expandable_segments replays failed: {e}")
        expandable = {}
    for name, trace in all_traces.items():
        results = [tools.run_trace(m, trace), tools.run_trace(m, trace, plain=True), tools.torch_replay(trace)]
        results[0].label, results[2].label = "yours", "PyTorch"
        if name in expandable:
            results.append(tools.TraceResult(expandable[name], [], [], "", "PyTorch, expandable_segments"))
        for r in results:
            last = r.stats[-1]
            peak_a = max(r.column("allocated_bytes.all.current"))
            peak_r = max(r.column("reserved_bytes.all.current"))
            end_r = last["reserved_bytes.all.current"]
            frag = (end_r - last["allocated_bytes.all.current"]) / end_r if end_r else 0.0
            table.append(f"| {name} | {r.label} | {peak_a / MiB:.1f} | {peak_r / MiB:.1f} | {end_r / MiB:.1f} | "
                         f"{frag:.2f} | {int(last['num_device_alloc'])} |")
            series.setdefault(name, {})[r.label] = {
                "reserved": r.column("reserved_bytes.all.current"),
                "allocated": r.column("allocated_bytes.all.current"), "rows": trace.rows}
        slug = name.replace(" ", "_")
        tools.plot_memory(results, out / f"alloc_{slug}.png",
                          title=f"{name}: reserved (solid) and allocated (dashed), {torch.cuda.get_device_name(0)}")
    (out / "alloc_fragmentation.json").write_text(json.dumps(series))
    (out / "alloc_fragmentation.md").write_text(_header("benchmarks/alloc_bench.py (fragmentation)") +
                                                "\n".join(table) + "\n")
    print("\n".join(table))


def plugged(out: Path, steps: int) -> None:
    tools = _tools()
    runs = {}
    for a in ("torch", "yours", "none"):
        t0 = time.perf_counter()
        runs[a] = tools.train_in_fresh_process(a, steps, 3)
        runs[a]["process_s"] = time.perf_counter() - t0
    names = {"torch": "PyTorch's caching allocator", "yours": "yours (allocator.cu, CUDAPluggableAllocator)",
             "none": "no caching (cudaMalloc/cudaFree per tensor)"}
    for a, r in runs.items():
        print(f"{a}: torch.cuda.memory_stats() {r.get('torch_memory_stats')}")
    table = ["| allocator | steps/s | peak reserved MiB | peak allocated MiB | cudaMalloc in 3 warm-up steps | "
             "cudaMalloc per step | cudaFree per step | loss after the last step |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for a, r in runs.items():
        table.append(f"| {names[a]} | {r['steps_per_s']:.1f} | {r['peak_reserved'] / MiB:.1f} | "
                     f"{r['peak_allocated'] / MiB:.1f} | {int(r['cudamalloc_warmup'])} | "
                     f"{r['cudamalloc_per_step']:g} | {r['cudafree_per_step']:g} | {r['losses'][-1]:.4f} |")
    (out / "alloc_plugged.json").write_text(json.dumps(runs, indent=1))
    (out / "alloc_plugged.md").write_text(
        _header(f"benchmarks/alloc_bench.py (plugged, {steps} timed steps after 3 warm-up steps, each allocator in "
                "a fresh process)") + "\n".join(table) + "\n")
    print("\n".join(table))


def _header(what: str) -> str:
    # (ALLOC_BENCH_COMMIT first: a tree extracted inside another checkout would show that checkout's HEAD)
    sha = os.environ.get("ALLOC_BENCH_COMMIT") or subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True, text=True).stdout.strip()
    return (f"# {what}\n\nmachine: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\ncommit: {sha}\n\n")


def replot(path: Path, out: Path) -> None:
    """The plots again from a measured alloc_fragmentation.json (no GPU needed): plot_memory's current style."""
    tools = _tools()
    for name, by_alloc in json.loads(path.read_text()).items():
        results = [tools.TraceResult([{"reserved_bytes.all.current": r, "allocated_bytes.all.current": a}
                                      for r, a in zip(v["reserved"], v["allocated"], strict=True)], [], [], "", label)
                   for label, v in by_alloc.items()]
        tools.plot_memory(results, out / f"alloc_{name.replace(' ', '_')}.png",
                          title=f"{name}: reserved (solid), allocated (dashed), measured")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", choices=["plugged", "fragmentation"], help="one of the two measurements")
    ap.add_argument("--replot", type=Path, help="only draw the plots again from this alloc_fragmentation.json")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        replot(args.replot, args.out)
        return 0
    from cudacourse import settings

    settings.configure(impl="solution")  # (and the fresh processes: train_in_fresh_process passes it on)
    if args.only != "fragmentation":
        plugged(args.out, args.steps)
    if args.only != "plugged":
        probes()
        fragmentation(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
