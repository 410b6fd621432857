"""Lesson 07, part 2: the tools around allocator.cu (given code, not an exercise).

- ``STATS``: the statistics ``alloc_op`` records after every operation, under ``torch.cuda.memory_stats()`` names
  (plus ``fragmentation`` = reserved but unallocated / reserved, which PyTorch does not report);
- ``Trace`` and ``run_trace(m, trace)``: a trace of allocator calls replayed on your allocator (either backend);
- ``torch_replay(trace)``: the same trace through PyTorch's own caching allocator (GPU), its
  ``torch.cuda.memory_stats()`` after every operation;
- ``plot_memory(results)``: reserved and allocated bytes over a trace, one colour per allocator;
- ``train_on(allocator, steps)``: lesson 06's capstone training step (its PyTorch form, ``capstone.torch_loss`` and
  AdamW at ``capstone.gpu_config()``) on PyTorch's allocator, yours (``cc_alloc_malloc``/``cc_alloc_free`` through
  ``torch.cuda.memory.CUDAPluggableAllocator``) or none (a cudaMalloc per tensor). It must run in a fresh process:
  PyTorch swaps its allocator only before the first CUDA allocation.

Use it::

    import cudacourse as cc
    from alloc_tools import Trace, run_trace      # lessons/07_host_side/alloc_tools.py
    m = cc.lesson("07_host_side")
    t = Trace().malloc(0, 1000).malloc(1, 3 << 20).free(0).empty_cache()
    r = run_trace(m, t)                           # r.stats[i]["reserved_bytes.all.current"], r.ptrs, r.status

From the course's top folder, on a GPU: ``.venv/bin/python lessons/07_host_side/alloc_tools.py train yours 20``
prints one JSON line (steps/s, peak reserved, cudaMalloc calls per step).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

LESSON = "07_host_side"
STATS = [
    "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
    "reserved_bytes.all.peak", "active_bytes.all.current", "active_bytes.all.peak", "requested_bytes.all.current",
    "allocation.all.current", "active.all.current", "segment.all.current", "inactive_split.all.current",
    "inactive_split_bytes.all.current", "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
    "num_sync_all_streams", "allocated_bytes.small_pool.current", "reserved_bytes.small_pool.current",
    "allocated_bytes.large_pool.current", "reserved_bytes.large_pool.current", "fragmentation",
]
MALLOC, FREE, RECORD_STREAM, EMPTY_CACHE, SPIN, SYNC, FREE_RAW = range(7)
OK, OUT_OF_MEMORY, DOUBLE_FREE, FOREIGN_POINTER, INTERIOR_POINTER, TOO_LARGE, BAD_ARGUMENT = range(7)
STREAMS = 8  # trace streams 0..7 (alloc_begin creates them; torch_replay makes torch.cuda.Stream()s)
MSG_BYTES = 1 << 16


class Trace:
    """Rows of (op, a, b, c) as ``alloc_op`` takes them; each method appends one and returns the trace."""

    def __init__(self, rows: list[tuple[int, int, int, int]] | None = None) -> None:
        self.rows: list[tuple[int, int, int, int]] = list(rows or [])

    def _add(self, op: int, a: int = 0, b: int = 0, c: int = 0) -> Trace:
        self.rows.append((op, int(a), int(b), int(c)))
        return self

    def malloc(self, id: int, size: int, stream: int = 0) -> Trace:  # noqa: A002 - the trace's word
        """Allocate ``size`` bytes on trace stream ``stream``, known afterwards as ``id``."""
        return self._add(MALLOC, id, size, stream)

    def free(self, id: int) -> Trace:  # noqa: A002
        """Free what ``id`` got (again, if it was freed already: a double free)."""
        return self._add(FREE, id)

    def record_stream(self, id: int, stream: int) -> Trace:  # noqa: A002
        """``tensor.record_stream(s)``: the block was used on ``stream`` too."""
        return self._add(RECORD_STREAM, id, stream)

    def empty_cache(self) -> Trace:
        """``torch.cuda.empty_cache()``."""
        return self._add(EMPTY_CACHE)

    def spin(self, stream: int, cycles: int) -> Trace:
        """A kernel that keeps ``stream`` busy for ``cycles`` clock cycles (so an event recorded after it waits)."""
        return self._add(SPIN, stream, cycles)

    def sync(self) -> Trace:
        """``cudaDeviceSynchronize()``."""
        return self._add(SYNC)

    def free_raw(self, id: int, offset: int = 0) -> Trace:  # noqa: A002
        """Free ``pointer(id) + offset`` (``id`` -1: a buffer that came from cudaMalloc, not the allocator)."""
        return self._add(FREE_RAW, id, offset)

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class TraceResult:
    """What a replay saw: ``stats[i]`` after operation ``i`` (a dict of ``STATS``), the pointer each malloc
    returned (0 otherwise), each operation's status (``OK``, ``DOUBLE_FREE``, ...) and the error lines."""

    stats: list[dict[str, float]]
    ptrs: list[int]
    status: list[int]
    messages: str = ""
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def column(self, name: str) -> list[float]:
        """One statistic over the trace."""
        return [s[name] for s in self.stats]


def run_trace(m: Any, trace: Trace | list, *, plain: bool = False, limit: int = 0) -> TraceResult:
    """Replay ``trace`` on allocator.cu's CachingAllocator (``plain``: the PlainAllocator, no caching) through the
    launchers ``alloc_begin``, ``alloc_op`` (one call per operation) and ``alloc_end`` of
    ``m = cc.lesson("07_host_side")``; ``limit``: the most bytes it may reserve (0: no limit)."""
    rows = trace.rows if isinstance(trace, Trace) else list(trace)
    n = len(rows)
    dev = m.device
    from cudacourse.loader import no_sync

    # the calls do not wait for the GPU (as an allocator's callers do not): on a GPU a SPIN then keeps the events
    # recorded behind it pending until a SYNC; on the simulator queued stream work runs when each call returns
    with no_sync():
        m.alloc_begin(1 if plain else 0, int(limit))
        for op, a, b, c in rows:
            m.alloc_op(int(op), int(a), int(b), int(c))
    stats = torch.full((max(n, 1) * len(STATS),), float("nan"), dtype=torch.float64, device=dev)
    ptrs = torch.full((max(n, 1),), -1, dtype=torch.int64, device=dev)
    status = torch.full((max(n, 1),), -1, dtype=torch.int32, device=dev)
    msg = torch.zeros(MSG_BYTES, dtype=torch.int8, device=dev)
    m.alloc_end(stats, ptrs, status, msg, n, MSG_BYTES)
    table = stats.cpu().reshape(-1, len(STATS))[:n].tolist()
    raw = bytes(msg.cpu().view(torch.uint8).tolist())
    return TraceResult([dict(zip(STATS, row, strict=True)) for row in table], ptrs.cpu()[:n].tolist(),
                       status.cpu()[:n].tolist(), raw.split(b"\0", 1)[0].decode(errors="replace"),
                       "no caching" if plain else "yours")


# ----------------------------------------------------------------------------------------------------
# The same trace through PyTorch's caching allocator (GPU)
# ----------------------------------------------------------------------------------------------------


def torch_replay(trace: Trace | list, *, limit: int = 0, label: str = "PyTorch") -> TraceResult:
    """Replay ``trace`` with ``torch.empty(size, dtype=uint8)``, ``del``, ``record_stream``, ``empty_cache``,
    ``torch.cuda._sleep`` and ``synchronize``, on fresh streams (so no block cached by earlier work is reused), and
    read ``torch.cuda.memory_stats()`` after each operation, less what it held before (after an ``empty_cache``;
    peaks and counters reset). ``limit``: as run_trace's, through ``set_per_process_memory_fraction``.
    FREE_RAW rows are skipped (PyTorch has no such call): a trace for comparison has none."""
    rows = trace.rows if isinstance(trace, Trace) else list(trace)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    base = torch.cuda.memory_stats()
    total = torch.cuda.get_device_properties(0).total_memory
    if limit:
        torch.cuda.set_per_process_memory_fraction((base.get("reserved_bytes.all.current", 0) + limit) / total)
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    live: dict[int, torch.Tensor] = {}
    out: list[dict[str, float]] = []
    ptrs: list[int] = []
    status: list[int] = []
    try:
        for op, a, b, c in rows:
            st, ptr = OK, 0
            if op == MALLOC:
                with torch.cuda.stream(streams[c]):
                    try:
                        live[a] = torch.empty(b, dtype=torch.uint8, device="cuda")  # (no other reference)
                        ptr = live[a].data_ptr()
                    except torch.OutOfMemoryError:
                        st = OUT_OF_MEMORY
            elif op == FREE:
                live.pop(a, None)
            elif op == RECORD_STREAM:
                live[a].record_stream(streams[b])
            elif op == EMPTY_CACHE:
                torch.cuda.empty_cache()
            elif op == SPIN:
                with torch.cuda.stream(streams[a]):
                    torch.cuda._sleep(b)
            elif op == SYNC:
                torch.cuda.synchronize()
            out.append(_delta(torch.cuda.memory_stats(), base))
            ptrs.append(ptr)
            status.append(st)
    finally:
        live.clear()
        torch.cuda.synchronize()
        if limit:
            torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    return TraceResult(out, ptrs, status, "", label)


_CURRENT = [s for s in STATS if s.endswith(".current")]


def _delta(now: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    """memory_stats() as this trace made them: currents less the base's, a peak less the base's current (the
    peaks were reset to it), counters as they are (reset)."""
    d = {s: float(now.get(s, 0) - (base.get(s, 0) if s in _CURRENT else 0)) for s in STATS if s != "fragmentation"}
    for s in ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "active_bytes.all.peak"):
        d[s] = float(now.get(s, 0) - base.get(s.replace(".peak", ".current"), 0))
    r = d["reserved_bytes.all.current"]
    d["fragmentation"] = (r - d["allocated_bytes.all.current"]) / r if r else 0.0
    return d


def plot_memory(results: list[TraceResult], path: str | Path | None = None, title: str = "") -> Any:
    """Reserved (solid) and allocated (dashed) MiB after each operation, one colour per result; saved to
    ``path`` when given. Returns the matplotlib figure."""
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for i, r in enumerate(results):
        # the first results drawn widest and translucent: a later one that agrees lies on it, both visible
        color, width = f"C{i}", 1.2 + 2.4 * (len(results) - 1 - i)
        x = range(len(r.stats))
        ax.plot(x, [v / 2**20 for v in r.column("reserved_bytes.all.current")], color=color, linewidth=width,
                alpha=0.55, label=f"{r.label}: reserved")
        ax.plot(x, [v / 2**20 for v in r.column("allocated_bytes.all.current")], color=color, linestyle="--",
                linewidth=width, alpha=0.55, label=f"{r.label}: allocated")
    ax.set_xlabel("operation of the trace")
    ax.set_ylabel("MiB")
    ax.set_title(title or "reserved (solid) and allocated (dashed) memory")
    ax.legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


# ----------------------------------------------------------------------------------------------------
# Task 7.10: lesson 06's capstone step on PyTorch's allocator, yours, or none (a fresh process each)
# ----------------------------------------------------------------------------------------------------

HOOKS = {"yours": ("cc_alloc_malloc", "cc_alloc_free"), "none": ("cc_plain_malloc", "cc_plain_free")}


def library_path() -> str:
    """allocator.cu built for the GPU as a shared library (the course's build cache), without loading it."""
    import cudacourse as cc
    from cudacourse.cuda_backend import build_cuda
    from cudacourse.module import exposed_functions
    from cudacourse.source import launcher

    path = cc.lesson(LESSON).dir / "allocator.cu"
    text = path.read_text()
    return str(build_cuda(text, str(path), [launcher(text, f) for f in exposed_functions(text)]))


def plug(allocator: str) -> Callable[[], dict[str, float]]:
    """Make ``allocator`` PyTorch's CUDA allocator in this process and return a function that reads its statistics
    (``STATS`` names): "torch" keeps PyTorch's own (``torch.cuda.memory_stats()``), "yours" plugs in allocator.cu's
    ``cc_alloc_malloc``/``cc_alloc_free``, "none" its ``cc_plain_malloc``/``cc_plain_free`` (no caching), through
    ``torch.cuda.memory.CUDAPluggableAllocator`` and ``change_current_allocator``. PyTorch refuses the swap once its
    allocator is initialised (the first CUDA tensor, or anything else that starts torch's CUDA state): call this
    first thing in a fresh process."""
    import ctypes

    if allocator not in ("torch", *HOOKS):
        raise ValueError(f"allocator must be 'torch', 'yours' or 'none', got {allocator!r}")
    if allocator == "torch":
        def torch_stats() -> dict[str, float]:
            s = torch.cuda.memory_stats()
            return {k: float(s.get(k, 0)) for k in STATS if k != "fragmentation"}

        return torch_stats
    so = library_path()
    malloc_fn, free_fn = HOOKS[allocator]
    torch.cuda.memory.change_current_allocator(torch.cuda.memory.CUDAPluggableAllocator(so, malloc_fn, free_fn))
    lib = ctypes.CDLL(so)  # the library PyTorch loaded (dlopen returns the same one): its statistics
    lib.cc_alloc_stats.argtypes = [ctypes.c_int, ctypes.c_void_p]

    def hook_stats() -> dict[str, float]:
        buf = (ctypes.c_double * len(STATS))()
        lib.cc_alloc_stats(1 if allocator == "none" else 0, buf)
        return dict(zip(STATS, list(buf), strict=True))

    return hook_stats


def measure(stats: Callable[[], dict[str, float]], step: Callable[[int], float], steps: int,
            warmup: int) -> dict[str, Any]:
    """Run ``step(i)`` (one training step, returning its loss) ``warmup`` times, then ``steps`` times timed:
    steps/s, the peak reserved and allocated bytes, cudaMalloc calls in the warm-up and per timed step."""
    losses = [step(i) for i in range(warmup)]
    torch.cuda.synchronize()
    before = stats()
    t0 = time.perf_counter()
    losses += [step(warmup + i) for i in range(steps)]
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    after = stats()
    return {"steps": steps, "warmup": warmup, "steps_per_s": steps / seconds,
            "peak_reserved": after["reserved_bytes.all.peak"], "peak_allocated": after["allocated_bytes.all.peak"],
            "cudamalloc_warmup": before["num_device_alloc"],
            "cudamalloc_per_step": (after["num_device_alloc"] - before["num_device_alloc"]) / steps,
            "cudafree_per_step": (after["num_device_free"] - before["num_device_free"]) / steps,
            "losses": losses, "device": torch.cuda.get_device_name(0), "torch": torch.__version__}


def train_on(allocator: str, steps: int = 20, warmup: int = 3) -> dict[str, Any]:
    """``steps`` training steps of lesson 06's capstone model in its PyTorch form (``capstone.gpu_config()``, batch
    16 x 256 tokens of the lesson's corpus, ``capstone.torch_loss`` and ``torch.optim.AdamW``) after ``warmup``
    steps, on ``allocator`` ("torch", "yours" or "none", see :func:`plug`). Call it first thing in a fresh
    process. Returns :func:`measure`'s numbers."""
    stats = plug(allocator)

    import cudacourse as cc
    from cudacourse.loader import import_file

    cap = import_file(cc.lesson("06_training").dir / "capstone.py", "cc_capstone_alloc")
    cfg = cap.gpu_config()
    weights = cap.load_decoder().init_weights(cfg, seed=0, device="cuda")
    text = cap.load_corpus()[:200_000]
    data = cap.batches(cap.CharTokenizer(text).encode(text), 16, 256, warmup + steps, seed=0, device="cuda")
    W, leaves = cap.torch_params(weights)
    del weights
    opt = torch.optim.AdamW(leaves, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

    def step(i: int) -> float:
        opt.zero_grad()
        loss = cap.torch_loss(W, cfg, *data[i])
        loss.backward()
        opt.step()
        return float(loss.detach())

    out = {"allocator": allocator, **measure(stats, step, steps, warmup)}
    try:  # what PyTorch's own statistics say with another allocator plugged in
        torch.cuda.memory_stats()
        out["torch_memory_stats"] = "returned"
    except RuntimeError as e:
        out["torch_memory_stats"] = f"raised RuntimeError: {str(e).splitlines()[0][:200]}"
    return out


def train_in_fresh_process(allocator: str, steps: int = 20, warmup: int = 3, timeout_s: float = 600.0) -> dict:
    """:func:`train_on` in a new Python process (this process's settings passed on): the route outside grading,
    where the calling process may have used the GPU already. Raises with the child's output if it fails."""
    import os
    import subprocess

    from cudacourse import settings

    env = {**os.environ, **settings.to_env(settings.current())}
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "train", allocator, str(steps), str(warmup)],
                       capture_output=True, text=True, env=env, timeout=timeout_s)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        raise RuntimeError(f"train_on({allocator!r}) in a fresh process failed (exit {r.returncode}):\n"
                           f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return json.loads(lines[-1])


def main(argv: list[str]) -> int:
    """Command line: ``train ALLOCATOR [STEPS [WARMUP]]`` prints train_on's result as one JSON line."""
    if len(argv) < 2 or argv[0] != "train" or argv[1] not in ("torch", *HOOKS):
        print(__doc__)
        print("usage: alloc_tools.py train {torch,yours,none} [STEPS [WARMUP]]")
        return 0 if argv[:1] in (["--help"], ["-h"]) else 2
    steps = int(argv[2]) if len(argv) > 2 else 20
    warmup = int(argv[3]) if len(argv) > 3 else 3
    print(json.dumps(train_on(argv[1], steps, warmup)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
