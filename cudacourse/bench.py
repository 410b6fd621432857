"""Timing kernels on a GPU, against the PyTorch/cuBLAS reference and the hardware measured in the same run.

How a number is made (see ``time_kernel``): warm-up runs first (module load, lazy init), then each timed
run is preceded by an L2 flush (writing a buffer larger than L2) and bracketed by CUDA events recorded
while the GPU is still busy with a short spin kernel, so host-side overhead (Python, argument checks,
the launch itself) is not counted; the result is the median of many runs. Bandwidth counts the minimal
bytes a case must move (each input read once, each output written once); the copy bandwidth of a large
device-to-device copy, measured in the same run, is the practical ceiling of a memory-bound kernel.

On the CPU simulator timing is meaningless: everything here raises ``NeedsGPU``.

``python -m cudacourse bench [--lessons ...] [--impl student|solution] [--quick] [--out DIR]`` runs
every lesson's ``bench.py`` cases and writes ``DIR/<gpu>/results.json``, ``results.md`` and plots.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cudacourse.course import Course, course
from cudacourse.errors import NeedsGPU


@dataclass
class Case:
    """One timed row. Rows of a ``group`` are compared with the group's ``reference=True`` row.

    A row that times a speed task names it (``task="1.7"``): its target then comes from the course model
    (``lessons/NN_topic/lesson.toml``), never from the bench file. ``target`` is for rows that are no task.

    ``own_ms``: the case times itself. When set, the row is the median of what it returns (milliseconds,
    e.g. a launcher's own host-clock timing of one phase of ``fn``'s work) over repeated calls, instead of
    CUDA events around ``fn``: for host-side costs (launch overhead, graph instantiation) that events,
    recorded while the GPU is kept busy, leave out by design.
    """

    group: str
    name: str
    fn: Callable[[], object]
    bytes: int = 0
    flops: int = 0
    reference: bool = False
    target: float | None = None
    target_of: str = "reference"  # "reference" (speed ratio) or "copy" (fraction of copy bandwidth)
    task: str | None = None
    own_ms: Callable[[], float] | None = None
    note: str = ""  # shown beside the row (a Triton twin: its autotune time and chosen config)
    extra: dict = field(default_factory=dict)  # kept in results.json (a Triton twin: autotune_s, config)


@dataclass
class Row:
    """A timed case with derived figures."""

    lesson: str
    group: str
    name: str
    ms: float
    spread: float
    gbs: float | None
    tflops: float | None
    pct_copy: float | None
    vs_reference: float | None
    reference: bool
    target: float | None
    target_of: str
    met: bool | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


def _require_gpu() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise NeedsGPU("timing needs a GPU: on the CPU simulator times say nothing about a GPU kernel. "
                       "Run this on a machine with an NVIDIA GPU (backend 'cuda').")
    return torch


_FLUSH: dict[str, Any] = {}
_SLEEP_CYCLES = 1_000_000  # ~0.5 ms at 2 GHz: covers the host's enqueue time of one timed call


def flush_l2() -> None:
    """Evict the L2 cache by writing a buffer twice its size (so timed runs start cold)."""
    torch = _require_gpu()
    if "buf" not in _FLUSH:
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)
        _FLUSH["buf"] = torch.empty(2 * l2 // 4 + 1024, dtype=torch.float32, device="cuda")
    _FLUSH["buf"].zero_()


def time_kernel(fn: Callable[[], object], *, warmup: int = 5, reps: int = 50, flush: bool = True,
                max_s: float = 5.0) -> float:
    """Median time of ``fn()`` in milliseconds, timed with CUDA events (L2 flushed before each run)."""
    return time_stats(fn, warmup=warmup, reps=reps, flush=flush, max_s=max_s)[0]


def time_stats(fn: Callable[[], object], *, warmup: int = 5, reps: int = 50, flush: bool = True,
               max_s: float = 5.0) -> tuple[float, float]:
    """(median ms, relative spread (p90-p10)/median) of ``fn()``; stops early after ``max_s`` seconds."""
    return _median_and_spread(time_samples(fn, warmup=warmup, reps=reps, flush=flush, max_s=max_s))


def time_samples(fn: Callable[[], object], *, warmup: int = 5, reps: int = 50, flush: bool = True,
                 max_s: float = 5.0, setup: Callable[[], object] | None = None, group: int = 1) -> list[float]:
    """The timed samples of ``fn()`` in milliseconds (what :func:`time_stats` takes the median of).

    ``setup()`` runs before every sample, outside the measured interval (``cudacourse.speed`` poisons the outputs
    the next calls must write). ``group``: while grading on a GPU a sample is ``k`` calls (:func:`_wall_samples`);
    ``k`` is then a multiple of ``group``, so calls that rotate over ``group`` buffer sets use each set alike."""
    torch = _require_gpu()
    from cudacourse.loader import no_sync, uses_gpu_worker

    if uses_gpu_worker("cuda"):
        return _wall_samples(fn, warmup=warmup, reps=reps, max_s=max_s, setup=setup, group=group)

    with no_sync():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times: list[float] = []
        t_end = time.monotonic() + max_s
        for _ in range(reps):
            if setup is not None:
                setup()
            if flush:
                flush_l2()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # Keep the GPU busy while the host enqueues start, launch and stop, so Python and launch
            # overhead stay out of the measured interval (it then holds only GPU execution).
            if hasattr(torch.cuda, "_sleep"):
                torch.cuda._sleep(_SLEEP_CYCLES)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
            if time.monotonic() > t_end and len(times) >= 5:
                break
    return times


def self_timed_stats(own_ms: Callable[[], float], *, warmup: int = 3, reps: int = 30,
                     max_s: float = 5.0) -> tuple[float, float]:
    """(median ms, relative spread) of the times a self-timing call reports (``Case.own_ms``).

    Launches here run outside ``loader.no_sync()``: each call is waited for (and, while grading, its buffers
    copied back) before the next, which costs nothing the call reports, since it times itself."""
    for _ in range(warmup):
        own_ms()
    times: list[float] = []
    t_end = time.monotonic() + max_s
    for _ in range(reps):
        times.append(float(own_ms()))
        if time.monotonic() > t_end and len(times) >= 5:
            break
    if not all(math.isfinite(t) and t >= 0 for t in times):
        raise ValueError(f"a self-timed case reported {times[:5]}...: not a time in ms")
    return _median_and_spread(times)


def _median_and_spread(times: list[float]) -> tuple[float, float]:
    """(median, (p90 - p10) / median) of some timings."""
    times = sorted(times)
    med = statistics.median(times)
    p10, p90 = times[len(times) // 10], times[(9 * len(times)) // 10]
    return med, (p90 - p10) / med if med else 0.0


_WALL_SAMPLES = 15  # samples of >= 20 ms each: the median and the p10-p90 spread still have 15 points


def _wall_samples(fn: Callable[[], object], *, warmup: int, reps: int, max_s: float,
                  setup: Callable[[], object] | None = None, group: int = 1) -> list[float]:
    """:func:`time_samples` while grading on a GPU, for every function timed (learner's and reference alike).

    The learner's launches then run in another process (``cudacourse/workers/gpu.py``), out of reach of this
    process's CUDA events, so a sample is the wall time of ``k`` calls closed by a synchronisation of both
    processes, with ``k`` chosen so that a sample lasts at least 20 ms: the launch messages (sent without waiting for
    an answer each: ``workers/gpu.py``) then overlap the kernels running, and the closing synchronisation costs under
    1%. The L2 cache is not flushed between calls.
    At most ``_WALL_SAMPLES`` samples are taken: each one is already a mean of ``k`` calls, and 50 of them made
    every timed function cost at least a second of a GPU grade's exclusive turn (22 speed tasks, two or more
    functions each). ``setup()`` runs before each sample and is waited for outside its interval.
    """
    import torch

    from cudacourse.loader import no_sync, synchronize_workers

    def sync() -> None:
        synchronize_workers()
        torch.cuda.synchronize()

    with no_sync():
        for _ in range(max(warmup, group)):
            fn()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        k = max(1, min(1000, int(0.02 / max(time.perf_counter() - t0, 1e-6)) + 1))
        k = -(-k // group) * group
        times: list[float] = []
        t_end = time.monotonic() + max_s
        for _ in range(min(reps, _WALL_SAMPLES)):
            if setup is not None:
                setup()
                sync()
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            sync()
            times.append((time.perf_counter() - t0) * 1e3 / k)
            if time.monotonic() > t_end and len(times) >= 5:
                break
    return times


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written), measured now."""
    torch = _require_gpu()
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = time_kernel(lambda: dst.copy_(src), reps=30, flush=False)
    return 2 * nbytes / ms / 1e6


def matmul_tflops(n: int = 8192) -> float:
    """FP32 (TF32 off) cuBLAS matmul rate in TFLOP/s, measured now."""
    torch = _require_gpu()
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        c = torch.empty(n, n, device="cuda")
        ms = time_kernel(lambda: torch.matmul(a, b, out=c), reps=10, flush=False)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n**3 / ms / 1e9


def machine_info() -> dict[str, str]:
    """GPU, driver, torch and CUDA versions for a results header."""
    torch = _require_gpu()
    p = torch.cuda.get_device_properties(0)
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        drv = "unknown"
    return {"gpu": p.name, "compute_capability": f"{p.major}.{p.minor}", "sms": str(p.multi_processor_count),
            "driver": drv, "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "python": platform.python_version()}


def lessons_with_cases(c: Course) -> list[str]:
    """The lessons of the course that have a ``bench.py`` (every lesson folder may add one)."""
    return [les.id for les in c if (c.kernel_dir(les.id, "student") / "bench.py").is_file()]


def load_cases(lesson: str, c: Course | None = None) -> Callable[..., list[Case]] | None:
    """The ``cases(m, quick=False)`` function of ``lessons/<lesson>/bench.py`` (None when there is none)."""
    c = c or course()
    path = c.kernel_dir(lesson, "student") / "bench.py"
    if not path.exists():
        return None
    from cudacourse.loader import import_file

    return import_file(path, f"cudacourse_bench_{lesson}").cases


def run_lesson(lesson: str, impl: str, copy_gbs: float, quick: bool = False) -> list[Row]:
    """Time every case of one lesson; a case that fails is kept as a row with its error."""
    from cudacourse import lessons

    cases_fn = load_cases(lesson)
    if cases_fn is None:
        return []
    info = course().lesson(lesson)
    m = lessons.lesson(lesson, impl=impl, backend="cuda")
    rows: list[Row] = []
    for case in cases_fn(m, quick=quick):
        if case.task is not None:
            task = info.task(case.task)
            case.target, case.target_of = task.target, task.target_of
        try:
            ms, spread = self_timed_stats(case.own_ms) if case.own_ms else time_stats(case.fn)
            note = case.note
        except Exception as e:  # noqa: BLE001 - a broken version must not hide the others
            ms, spread, note = math.nan, math.nan, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        gbs = case.bytes / ms / 1e6 if case.bytes and ms == ms else None
        tfl = case.flops / ms / 1e9 if case.flops and ms == ms else None
        rows.append(Row(lesson, case.group, case.name, ms, spread, gbs, tfl,
                        100 * gbs / copy_gbs if gbs else None, None, case.reference, case.target,
                        case.target_of, note=note, extra=dict(case.extra)))
    refs = {r.group: r.ms for r in rows if r.reference}
    for r in rows:
        if r.group in refs and not r.reference and r.ms == r.ms:
            r.vs_reference = refs[r.group] / r.ms
        if r.target is not None:
            have = r.vs_reference if r.target_of == "reference" else (r.pct_copy or 0) / 100
            r.met = None if have is None else have >= r.target
    return rows


def build_times(backend: str = "auto") -> dict[str, float]:
    """Cold build and edit-reload times of lesson 01's kernel file, in this process, in seconds."""
    from cudacourse.module import load

    src = (course().kernel_dir("01_relu", "solution") / "relu.cu").read_text()
    stamp = f"{time.time_ns()}"
    t0 = time.perf_counter()
    load(src + f"\n// bench build {stamp}\n", backend=backend)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    load(src.replace("{", "{ /* edited */", 1) + f"\n// bench reload {stamp}\n", backend=backend)
    return {"first_build_s": cold, "reload_after_edit_s": time.perf_counter() - t0}


def _fmt(v: float | None, spec: str) -> str:
    return "" if v is None or v != v else format(v, spec)


def markdown(info: dict, copy_gbs: float, mm_tflops: float, rows: list[Row], builds: dict) -> str:
    """The results as a markdown report."""
    out = [f"# Benchmark results: {info['gpu']}", "",
           f"{info['gpu']} (compute capability {info['compute_capability']}, {info['sms']} SMs), driver "
           f"{info['driver']}, torch {info['torch']}, CUDA {info['cuda']}.", "",
           f"Measured in this run: device-to-device copy **{copy_gbs:.0f} GB/s** (read + write, 1 GiB); "
           f"cuBLAS FP32 matmul (TF32 off, 8192^3) **{mm_tflops:.1f} TFLOP/s**.", "",
           f"Build: first build {builds.get('first_build_s', float('nan')):.1f} s, reload after an edit "
           f"{builds.get('reload_after_edit_s', float('nan')):.1f} s (lesson 01 kernel file, same process).", "",
           "Each time is the median of up to 50 runs with an L2 flush before each, timed with CUDA events; rows "
           "marked (host clock) report the launcher's own host-clock timing instead (median of up to 30).",
           "A Triton twin is compiled and autotuned on a first call before its timing; that time and the config "
           "it kept are in its row's last column.", ""]
    for lesson in dict.fromkeys(r.lesson for r in rows):
        out += [f"## {lesson}", "", "| group | version | ms | GB/s | % copy | TFLOP/s | vs reference | target |",
                "|---|---|---:|---:|---:|---:|---:|---|"]
        for r in (r for r in rows if r.lesson == lesson):
            tgt = ""
            if r.target is not None:
                what = "x ref" if r.target_of == "reference" else " of copy"
                tgt = f"{'met' if r.met else 'MISSED'} (>= {r.target:g}{what})"
            name = f"**{r.name}** (reference)" if r.reference else r.name
            note = f"{'; ' if tgt and r.note else ''}{r.note}"
            out.append(f"| {r.group} | {name} | {_fmt(r.ms, '.3f')} | {_fmt(r.gbs, '.0f')} | "
                       f"{_fmt(r.pct_copy, '.0f')} | {_fmt(r.tflops, '.1f')} | "
                       f"{_fmt(r.vs_reference, '.2f')}{'x' if r.vs_reference else ''} | {tgt}{note} |")
        out.append("")
    return "\n".join(out)


def slug(name: str) -> str:
    """A folder name for a GPU name: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def main(argv: list[str] | None = None) -> int:
    """``python -m cudacourse bench``."""
    ap = argparse.ArgumentParser(prog="python -m cudacourse bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lessons", nargs="*", default=None,
                    help="lessons to time (default: every lesson with a bench.py)")
    ap.add_argument("--impl", choices=("student", "solution"), default="solution")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    ap.add_argument("--out", default=str(course().root / "results"))
    args = ap.parse_args(argv)
    lessons = course().select(args.lessons) if args.lessons else lessons_with_cases(course())
    try:
        _require_gpu()
    except NeedsGPU as e:
        print(f"bench: {e}")
        return 2
    info = machine_info()
    copy_gbs, mm = copy_bandwidth_gbs(), matmul_tflops()
    print(f"{info['gpu']}: copy {copy_gbs:.0f} GB/s, FP32 matmul {mm:.1f} TFLOP/s", flush=True)
    rows: list[Row] = []
    for lesson in lessons:
        lrows = run_lesson(lesson, args.impl, copy_gbs, args.quick)
        rows += lrows
        print(f"{lesson}: {len(lrows)} rows", flush=True)
    builds = build_times("cuda")
    out = Path(args.out) / (slug(info["gpu"]) + ("-student" if args.impl == "student" else ""))
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(info, copy_gbs, mm, rows, builds)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps(
        {"machine": info, "copy_gbs": copy_gbs, "matmul_tflops": mm, "builds": builds,
         "rows": [asdict(r) for r in rows]}, indent=1, default=str))
    try:
        from cudacourse import plot

        plot.results_charts(rows, copy_gbs, out)
    except Exception as e:  # noqa: BLE001 - plots are a bonus; the table is the result
        print(f"plots skipped: {e}", file=sys.stderr)
    print(md)
    return 0
