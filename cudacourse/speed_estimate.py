"""An estimated GPU time for each speed task, on a machine without a GPU (issue 39): shown, never graded.

On the simulator a speed task is *not graded* (it needs a GPU). ``make check`` then prints, for the speed tasks
of lessons 01-04, what the calibrated model (:mod:`cudacourse.estimate`) says the learner's kernel would take on
an H100 and an H200, against the task's target::

    task 1.7: estimated on an H100: 0.718 ms = 0.99 of copy, target 0.85 (not graded: estimates are not grades)

How: the task's launcher runs on the simulator with ``profile=True`` at two small sizes (the same sizes as the
calibration, ``benchmarks/estimate_calibration.py``, which takes its calls from here); the counters are
extrapolated linearly to the task's size and each launch is estimated. The ratio is the one the GPU test judges:
the copy's time over yours for a task judged against the copy bandwidth; the reference's time over yours for
one judged against a reference, with the reference *measured* on that GPU (the committed ``make bench`` row,
``results/<gpu>/results.json``: torch and cuBLAS run no kernel the simulator could count) or, for 3.7,
estimated like yours. A kernel that fails or gives wrong results on the simulator gets no estimate, and so do the
tasks the model cannot estimate (tensor cores, cuBLAS and torch calls, host work, Triton twins): they say why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudacourse import estimate as es

NOT_GRADED = "not graded: estimates are not grades"
ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------------------------------
# One launcher call, simulated small and extrapolated to its full size
# ----------------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One launcher call: ``args(size)`` builds its arguments; ``full`` is the size to estimate, ``small`` the
    two sizes the simulator runs; ``work``/``grid``: how counts and blocks grow with the size (``"n"`` linear,
    ``"n2"``, ``"n3"``); ``buffers``: each buffer's bytes at the full size (its DRAM traffic is capped there)."""

    file: str
    function: str
    args: Callable[[int], list]
    full: int
    small: tuple[int, int]
    buffers: dict[str, int]
    work: str = "n"
    grid: str = "n"


def unit(kind: str, n: int) -> float:
    """How work grows with the size ``n``: ``"n"`` -> n, ``"n2"`` -> n^2, ``"n3"`` -> n^3."""
    return float(n) ** {"n": 1, "n2": 2, "n3": 3}[kind]


def extrapolate(call: Call, at: Callable[[int], list[es.LaunchCounters]]) -> list[es.LaunchCounters]:
    """The call's launches at its full size from ``at(size)``, the launches the simulator counted at a small size
    (run at both small sizes; the counts are extrapolated linearly in ``unit(work)``, the grid in ``unit(grid)``)."""
    s1, s2 = call.small
    c1 = at(s1)
    if s1 == s2 == call.full:
        return c1
    c2 = at(s2)
    if len(c1) != len(c2):
        raise RuntimeError(f"{call.function}: {len(c1)} launches at size {s1}, {len(c2)} at {s2}: the number of "
                           "launches must not depend on the size to be extrapolated")
    u = [unit(call.work, x) for x in (s1, s2, call.full)]
    b = [unit(call.grid, x) for x in (s1, s2, call.full)]
    return [a.scaled(c, *u[:2], u[2], *b[:2], b[2]) for a, c in zip(c1, c2, strict=True)]


def total_seconds(calls: list[Call], launches: list[list[es.LaunchCounters]], gpu: str, flops: float = 0.0
                  ) -> float:
    """Estimated seconds of a sequence of calls on ``gpu`` (``flops`` charged to the first launch)."""
    t, first = 0.0, True
    for call, ls in zip(calls, launches, strict=True):
        for c in ls:
            t += es.estimate(c, es.GPUS[gpu], call.buffers, flops if first else 0.0).seconds
            first = False
    return t


# ----------------------------------------------------------------------------------------------------
# The speed tasks
# ----------------------------------------------------------------------------------------------------


def _randn(n: int, seed: int) -> Any:
    import torch

    return torch.randn(max(n, 1), generator=torch.Generator().manual_seed(seed))


def _nan(n: int) -> Any:
    import torch

    return torch.full((max(n, 1),), float("nan"))


@dataclass
class TaskSpec:
    """How to estimate one speed task: its call(s) at the GPU test's size, how to tell a right result at a small
    size (``wrong(args, size)``: None, or what is wrong), and what the ratio is taken against: ``"copy"`` (with
    ``nbytes``), ``("measured", group, name)`` (a committed bench row of each GPU) or ``("estimated", Call)``."""

    lesson: str
    what: str
    call: Call
    wrong: Callable[[list, int], str | None]
    against: Any = "copy"
    nbytes: int = 0
    flops: float = 0.0
    label: str = ""  # the reference's name
    needs: str = ""  # the correctness task(s) of the kernel timed


def _close(got: Any, want: Any, what: str, rtol: float = 1e-3, atol: float = 1e-3) -> str | None:
    import torch

    if got.shape != want.shape or not torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol):
        return f"{what} differs from the expected values"
    return None


def _relu_args(s: int) -> list:
    return [_randn(s, 1), _nan(s), s]


def _sum_ok(a: list, s: int) -> str | None:
    import torch

    want = a[0][:s].double().sum()
    return None if abs(float(a[1][0]) - float(want)) <= 1e-3 * float(a[0][:s].double().abs().sum()) + 1e-3 \
        else "the sum differs from a float64 sum" if torch.isfinite(a[1][0]) else "the sum is not finite"


def _rows_args(C: int) -> Callable[[int], list]:
    return lambda s: [_randn(s * C, 2), _nan(s), s, C]


def _gemm_args(s: int) -> list:
    return [_randn(s * s, 3), _randn(s * s, 4), _nan(s * s), s, s, s]


def _gemm_ok(a: list, s: int) -> str | None:
    A, B = a[0][: s * s].view(s, s).double(), a[1][: s * s].view(s, s).double()
    return _close(a[2][: s * s].view(s, s), A @ B, "C", rtol=1e-4, atol=1e-3 * s)


def _norm_args(kind: str, C: int) -> Callable[[int], list]:
    def f(s: int) -> list:
        wb = [_randn(C, 6), _randn(C, 7)] if kind == "layernorm" else []
        return [_randn(s * C, 5), *wb, _nan(s * C), s, C, *([1e-5] if wb else [])]
    return f


def _norm_ok(kind: str, C: int) -> Callable[[list, int], str | None]:
    def f(a: list, s: int) -> str | None:
        import torch.nn.functional as F

        x = a[0][: s * C].view(s, C).double()
        if kind == "softmax":
            return _close(a[1][: s * C].view(s, C), x.softmax(-1), "y", atol=1e-6)
        want = F.layer_norm(x, (C,), a[1].double(), a[2].double(), 1e-5)
        return _close(a[3][: s * C].view(s, C), want, "y")
    return f


SMALL_1D = (1 << 16, 1 << 17)
# grid-stride launchers cap their grid at what fills the GPU (132 SMs x 8 blocks on the simulator, as on the H100):
# sizes above the cap, so that the grid stays constant and the work per thread grows, as at the full size
SMALL_GRID = (1 << 20, 1 << 21)
N28 = 1 << 28


def _specs() -> dict[str, list[TaskSpec]]:
    """The speed tasks the model estimates, with the sizes their GPU tests use (tests/test_0*.py)."""
    import torch

    relu = Call("relu.cu", "relu_v3_float4", _relu_args, N28, SMALL_1D, {"x": 4 * N28, "y": 4 * N28})
    out: dict[str, list[TaskSpec]] = {"1.7": [TaskSpec(
        "01_relu", "relu_v3_float4 on 2^28 floats", relu,
        lambda a, s: _close(a[1][:s], torch.relu(a[0][:s]), "y", 0, 0), nbytes=8 * N28, needs="1.3")]}
    out["2.7"] = [TaskSpec(
        "02_reduce", "reduce_v6_grid_stride_atomic on 2^28 floats",
        Call("reduce.cu", "reduce_v6_grid_stride_atomic", lambda s: [_randn(s, 1), _nan(1), s], N28, SMALL_GRID,
             {"x": 4 * N28, "out": 4}), _sum_ok, ("measured", "sum 2^28 fp32", "torch.sum"), label="torch.sum",
        needs="2.3")]
    out["2.8"] = [TaskSpec(
        "02_reduce", f"row_sum {R}x{C}",
        Call("reduce.cu", "row_sum", _rows_args(C), R, (256, 512), {"x": 4 * R * C, "out": 4 * R}),
        lambda a, s, C=C: _close(a[1][:s], a[0][: s * C].view(s, C).double().sum(-1), "out"),
        ("measured", f"row sum {R}x{C} fp32", "torch.sum(dim=-1)"), label="torch.sum(dim=-1)", needs="2.4")
        for R, C in ((32768, 4096), (131072, 1024))]
    out["2.9"] = [TaskSpec(
        "02_reduce", "argmax of 2^28 floats",
        Call("reduce.cu", "argmax", lambda s: [_randn(s, 1), torch.full((1,), -1, dtype=torch.int64), s], N28,
             SMALL_GRID, {"x": 4 * N28, "out": 8}),
        lambda a, s: None if int(a[1][0]) == int(a[0][:s].argmax()) else "the index differs from torch.argmax",
        ("measured", "argmax 2^28 fp32", "torch.argmax"), label="torch.argmax", needs="2.6")]
    g = {"A": 4 * 4096 * 4096, "B": 4 * 4096 * 4096, "C": 4 * 4096 * 4096}
    out["3.6"] = [TaskSpec(
        "03_gemm", "sgemm_v5_2d at 4096^3",
        Call("gemm.cu", "sgemm_v5_2d", _gemm_args, 4096, (128, 256), g, work="n3", grid="n2"), _gemm_ok,
        ("measured", "sgemm 4096^3 fp32", "cuBLAS torch.matmul (TF32 off)"), flops=2.0 * 4096**3,
        label="cuBLAS FP32 (TF32 off)", needs="3.4")]
    g2 = {k: v // 4 for k, v in g.items()}
    naive = Call("gemm.cu", "sgemm_v1_naive", _gemm_args, 2048, (128, 256), g2, work="n3", grid="n2")
    out["3.7"] = [TaskSpec(
        "03_gemm", "sgemm_v2_coalesced at 2048^3",
        Call("gemm.cu", "sgemm_v2_coalesced", _gemm_args, 2048, (128, 256), g2, work="n3", grid="n2"), _gemm_ok,
        ("estimated", naive), flops=2.0 * 2048**3, label="sgemm_v1_naive", needs="3.1 and 3.2")]
    for task, kind, R, C, ref, needs in (("4.10", "softmax", 32768, 4096, "torch.softmax", "4.1"),
                                         ("4.11", "layernorm", 8192, 16384, "F.layer_norm", "4.2")):
        nb = {"x": 4 * R * C, "y": 4 * R * C, "w": 4 * C, "b": 4 * C}
        out[task] = [TaskSpec(
            "04_transformer", f"{kind} {R}x{C}", Call("norms.cu", kind, _norm_args(kind, C), R, (8, 16), nb),
            _norm_ok(kind, C), ("measured", f"{kind} {R}x{C} fp32", ref), label=ref, needs=needs)]
    return out


GENERAL = ("the model estimates the speed tasks of lessons 01-04, whose CUDA kernels the simulator runs; cuBLAS and "
           "torch calls, Triton twins and host work are not counted, so no time is invented for them")
# Speed tasks with no estimate, and why (any other GPU task: GENERAL).
_TENSOR = ("tensor-core kernels (WMMA, mma.sync, wgmma) against cuBLAS or PyTorch's attention: the model has no "
           "tensor-core term and was calibrated on fp32 CUDA-core rows only")
_OUTSIDE = "lesson 06's kernels are outside the calibration (fitted and checked on lessons 01-04's rows only)"
WHY_NOT: dict[str, str] = {
    "4.12": "its reference, PyTorch's unfused attention (cuBLAS and torch kernels), has no committed measurement "
            "at N=2048",
    **{t: _TENSOR for t in ("5.7", "5.8", "5.11", "5.12")},
    "5.9": "bf16 kernels are outside the calibration (fitted and checked on fp32 rows only)",
    **{t: _OUTSIDE for t in ("6.8", "6.9", "6.10", "6.12")},
    "7.4": "a correctness check that needs a GPU (streams and devices), not a time",
    "7.5": "host work: copies between pinned host memory and the GPU overlapped on streams, which the simulator "
           "does not time",
    "7.6": "host work: a CUDA graph's replay against eager launches is launch overhead, which the simulator does not "
           "count",
    "7.7": "host work: torch.compile around the custom op (PyTorch's own code and dispatch), not counted",
}


# ----------------------------------------------------------------------------------------------------
# Running and saying it
# ----------------------------------------------------------------------------------------------------


@dataclass
class TaskEstimate:
    """The estimate of one speed task (one case of it): ratio per GPU, or why there is none."""

    task: str
    what: str
    target: float | None
    target_of: str
    ms: dict[str, float] = field(default_factory=dict)
    ratio: dict[str, float] = field(default_factory=dict)
    label: dict[str, str] = field(default_factory=dict)  # per GPU: what the ratio is taken against
    why_not: str = ""

    def lines(self) -> list[str]:
        """What ``make check`` prints: a head line, then one line per GPU, each labelled an estimate."""
        if self.why_not:
            return [f"task {self.task}: {self.why_not} ({NOT_GRADED})"]
        target = f", target {self.target:g}" if self.target is not None else ""
        return [f"task {self.task}, {self.what}:"] + [
            f"  estimated on an {gpu}: {self.ms[gpu]:.3g} ms = {self.ratio[gpu]:.2f} of {self.label.get(gpu, 'copy')}"
            f"{target} ({NOT_GRADED})" for gpu in self.ms]


def measured_ms(gpu: str, group: str, name: str) -> float | None:
    """The committed ``make bench`` time of a row on ``gpu`` (None where that run has no such row)."""
    path = ROOT / es.GPUS[gpu].results
    if not path.is_file():
        return None
    rows = json.loads(path.read_text())["rows"]
    return next((r["ms"] for r in rows if r["group"] == group and r["name"] == name and r["ms"] == r["ms"]), None)


def simulate(path: Path, call: Call, timeout_s: float = 10.0,
             wrong: Callable[[list, int], str | None] | None = None, needs: str = "") -> list[es.LaunchCounters]:
    """The call's launches at its full size, from two simulator runs of the file at ``path`` (checked mode,
    counters on). Raises ``ValueError`` saying what went wrong when ``wrong`` finds a wrong result."""
    import cudacourse as cc

    m = cc.load(path, [call.function], backend="sim", profile=True, timeout_s=timeout_s)
    regs = es.registers_of(str(path))
    try:
        def at(size: int) -> list[es.LaunchCounters]:
            args = call.args(size)
            getattr(m, call.function)(*args)
            if wrong is not None and (bad := wrong(args, size)):
                raise ValueError(f"{call.function} gives wrong results on the simulator ({bad}): make "
                                 f"{'task ' + needs if needs else 'its correctness task'} pass first")
            return [es.counters(k, regs.get(k.kernel.split("<")[0])) for k in m.profile_report().kernels]
        return extrapolate(call, at)
    finally:
        m.close()


def estimate_task(task: Any, folder: Path, gpus: tuple[str, ...] = ("H100", "H200")) -> list[TaskEstimate]:
    """The estimates of speed task ``task`` (a ``course.Task``) for the kernel files in ``folder``: one per case
    of the task (2.8 has two sizes), each saying why where there is none."""
    specs = _specs().get(task.id)
    if not specs:
        why = WHY_NOT.get(task.id, GENERAL)
        return [TaskEstimate(task.id, task.title, task.target, task.target_of, why_not=f"no estimate: {why}")]
    out = []
    for sp in specs:
        te = TaskEstimate(task.id, sp.what, task.target, task.target_of)
        try:
            mine = simulate(folder / sp.call.file, sp.call, wrong=sp.wrong, needs=sp.needs)
            ref = (simulate(folder / sp.against[1].file, sp.against[1], wrong=sp.wrong, needs=sp.needs)
                   if sp.against[0] == "estimated" else None)
        except Exception as e:  # noqa: BLE001 - a build error, a kernel error, a wrong result: said, not estimated
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            te.why_not = f"no estimate for {sp.what}: {first}"
            out.append(te)
            continue
        for gpu in gpus:
            t = total_seconds([sp.call], [mine], gpu, sp.flops)
            if sp.against == "copy":
                base = sp.nbytes / (es.GPUS[gpu].copy_gbs * 1e9)
            elif sp.against[0] == "measured":
                ms = measured_ms(gpu, sp.against[1], sp.against[2])
                if ms is None:
                    continue
                base = ms / 1e3
                te.label[gpu] = f"{sp.label} ({ms:.3g} ms, measured on the {gpu})"
            else:
                base = total_seconds([sp.against[1]], [ref], gpu, sp.flops)  # type: ignore[list-item]
                te.label[gpu] = f"{sp.label} ({1e3 * base:.3g} ms, estimated the same way)"
            if math.isfinite(t) and t > 0:
                te.ms[gpu], te.ratio[gpu] = 1e3 * t, base / t
        if not te.ms:
            te.why_not = f"no estimate for {sp.what}: no GPU result to compare with"
        out.append(te)
    return out


def task_lines(task_id: str, folder: str | Path | None = None) -> list[str]:
    """The lines ``make check`` prints for speed task ``task_id`` (``"1.7"``), for the kernel files in ``folder``
    (default: the lesson's folder for this process's settings, as ``cc.lesson`` loads)."""
    from cudacourse.course import course
    from cudacourse.lessons import lesson_dir

    task = next((t for t in course().tasks() if t.id == task_id), None)
    if task is None:
        raise ValueError(f"no task {task_id!r}")
    if not task.gpu:
        return [f"task {task_id} is graded here (no GPU needed): no estimate to show"]
    return [ln for e in estimate_task(task, Path(folder) if folder else lesson_dir(task.lesson)) for ln in e.lines()]


# ----------------------------------------------------------------------------------------------------
# The committed calibration, drawn for a lesson's notebook
# ----------------------------------------------------------------------------------------------------

CALIBRATION = ROOT / "results" / "cpu" / "estimate_calibration.json"


def calibration_rows(lesson: str) -> list[dict]:
    """The committed calibration rows of ``lesson`` (``01_relu``): per GPU and bench row, the time measured on
    the GPU (``make bench``) and the estimate the model makes from the simulator's counters."""
    rows = [r for r in json.loads(CALIBRATION.read_text())["rows"] if r["lesson"] == lesson]
    if not rows:
        raise ValueError(f"no calibration rows for lesson {lesson!r} in {CALIBRATION.relative_to(ROOT)}")
    return rows


def chart(lesson: str, path: str | Path | None = None) -> Any:
    """A figure of ``lesson``'s versions: the time measured on an H100 and an H200 (committed ``make bench`` runs)
    beside the model's *estimate* from the simulator's counters (``results/cpu/estimate_calibration.json``),
    log scale. Labelled as estimates; deterministic (no timing runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = calibration_rows(lesson)
    gpus = [g for g in es.GPUS if any(r["gpu"] == g for r in rows)]
    names = list(dict.fromkeys((r["group"], r["name"]) for r in rows))
    from matplotlib.ticker import LogLocator, NullFormatter

    fig, axes = plt.subplots(1, len(gpus), figsize=(11, 0.3 * len(names) + 2.0), sharey=True, squeeze=False)
    for ax, gpu in zip(axes[0], gpus, strict=True):
        by = {(r["group"], r["name"]): r for r in rows if r["gpu"] == gpu}
        ys = range(len(names))
        meas = [by[k]["measured_ms"] if k in by else 0 for k in names]
        pred = [by[k]["predicted_ms"] if k in by else 0 for k in names]
        ax.barh([y - 0.2 for y in ys], meas, height=0.4, color="#4C72B0", label="measured on the GPU (make bench)")
        ax.barh([y + 0.2 for y in ys], pred, height=0.4, color="#DD8452", hatch="//", edgecolor="white",
                label="estimate (a model, not a measurement)")
        for y, k in zip(ys, names, strict=True):
            if k not in by:
                ax.text(0.01, y, "  not in this GPU's table (see estimate_calibration.md)", va="center", fontsize=7,
                        color="#555555", transform=ax.get_yaxis_transform())
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("ms (log scale)")
        ax.set_title(f"{gpu}", fontsize=10)
        ax.grid(axis="x", which="major", lw=0.3)
    axes[0][0].set_yticks(range(len(names)), [f"{g} | {n}" for g, n in names], fontsize=7)
    axes[0][0].invert_yaxis()  # (shared: once) the lesson's order, top down
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=2)
    fig.suptitle(f"{lesson}: estimated vs measured GPU time", fontsize=10, x=0.02, ha="left")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig
