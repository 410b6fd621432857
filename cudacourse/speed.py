"""Speed tasks judged so that a right kernel passes and skipped work earns nothing (issue 36).

Every graded speed test of lessons 01-07 calls :func:`judge`. What it does, in order:

1. **Buffer sets.** The test hands over ``sets`` (at least 3) independent sets of buffers: inputs with different
   values, outputs of their own. Consecutive calls rotate over the sets, so a launcher that remembers its last
   pointers, or counts its calls, meets a new set on every call.
2. **Poison before each sample.** Before every timed sample (outside its interval) the outputs of the learner's
   next calls are filled with 0xFF bytes (NaN for floats, -1 for integers), in this process and in the copies a
   GPU worker holds (while grading, the learner's calls run there). A call that skips its work leaves them so.
   Work done in place (AdamW) is restored instead, and checked by one more call per set after the timing.
3. **Interleaved, same conditions.** The learner's function and the reference are timed in alternating rounds
   with :func:`cudacourse.bench.time_samples` (L2 flush and CUDA events, or the grader's wall clock through the
   GPU worker), each round on the same sets; the ratio is the reference's median over the learner's. A measurement
   stops after its first round when that ratio is already :data:`CLEAR` times the target or more.
4. **Checked after timing.** Every set's outputs are checked after the last sample: work deferred to a later
   call, or done only on some calls, fails here.
5. **Refused when impossible.** A learner rate above 1.05x the copy bandwidth measured in this process (counting
   the minimal bytes the task must move) or above the GPU's FP32 or tensor-core peak is refused:
   :data:`TOO_FAST`. Never a pass.
6. **No failure on noise.** A ratio below the target but within 10% of it is measured again, at most
   :data:`RETRIES` more times, and the best ratio is judged; the message says how many measurements were made.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cudacourse.check import CheckFailure
from cudacourse.module import staged_copies

TOO_FAST = "faster than this GPU can run it: does the launcher skip work on repeated calls?"
MIN_SETS = 3
RETRIES = 2  # more measurements when the first lands within NEAR of the target (bounded: 3 at most in all)
NEAR = 0.10
COPY_CEILING = 1.05  # x the copy bandwidth measured in the same run
ROUNDS = 3  # alternating rounds of learner and reference per measurement (at most: see CLEAR)
CLEAR = 1.25  # a measurement ends after the first round whose ratio is this far above the target (x target): the
              # H200's solution grades spent 38 s timing 21 tasks, most of them 1.4-6x above their targets
REPS = 12  # samples per function per round on the CUDA-events path
WALL_REPS = 5  # ... on the grader's wall path (each sample is >= 20 ms of calls: 15 per side, as before issue 36)


@dataclass
class Side:
    """One timed function. ``call(i)`` runs on buffer set ``i``; ``outputs(i)`` are the tensors that call must
    write (poisoned before each sample; None: nothing poisoned, e.g. torch's own reference allocating its
    result); ``check(i)`` raises when set ``i``'s outputs are wrong."""

    label: str
    call: Callable[[int], object]
    outputs: Callable[[int], Sequence[Any]] | None = None
    check: Callable[[int], None] | None = None
    reset: Callable[[int], None] | None = None  # in-place work (AdamW): restores set i's buffers (instead of poison)


@dataclass
class Measurement:
    """One interleaved measurement: medians in milliseconds and the ratio judged."""

    yours_ms: float
    ref_ms: float | None
    ratio: float


@dataclass
class Verdict:
    """What :func:`judge` measured (returned when the task passes; a failure raises with the same words)."""

    ratio: float
    target: float
    measurements: list[Measurement] = field(default_factory=list)
    copy_gbs: float | None = None
    gbs: float | None = None
    tflops: float | None = None
    message: str = ""


NOTES: list[str] = []  # the measurement of each speed judgement that passed (the pytest plugin puts it in the report)
_COPY: list[float] = []  # the copy bandwidth of this process's run (measured once, on first use)


def copy_gbs() -> float:
    """The device-to-device copy bandwidth measured in this run (``bench.copy_bandwidth_gbs``), once per process."""
    if not _COPY:
        from cudacourse.bench import copy_bandwidth_gbs

        _COPY.append(copy_bandwidth_gbs())
    return _COPY[0]


# dense FLOP per clock per SM, generous (a ceiling must never refuse a real kernel): FP32 FMA lanes x 2, and the
# 16-bit tensor-core rate of each major architecture (sm_90: 989 TFLOP/s = 132 SMs x 1.83 GHz x 4096)
_FP32_PER_SM = 256
_TENSOR_PER_SM = {7: 1024, 8: 2048, 9: 4096, 10: 8192, 12: 4096}


def peak_tflops(kind: str) -> float:
    """The GPU's peak rate in TFLOP/s: ``"fp32"`` (CUDA cores) or ``"tensor"`` (16-bit tensor cores, dense), from
    its SM count, compute capability and boost clock (the driver's, else 2.1 GHz: an upper bound)."""
    import torch

    p = torch.cuda.get_device_properties(0)
    ghz = 2.1
    try:
        import ctypes

        from cudacourse.gpuinfo import driver

        cuda = driver()
        khz = ctypes.c_int()
        if cuda is not None and cuda.cuDeviceGetAttribute(ctypes.byref(khz), 13, 0) == 0 and khz.value > 0:
            ghz = khz.value / 1e6  # CU_DEVICE_ATTRIBUTE_CLOCK_RATE: the boost clock in kHz
    except Exception:  # noqa: BLE001, S110 - the generous default stands
        pass
    per_sm = _FP32_PER_SM if kind == "fp32" else _TENSOR_PER_SM.get(p.major, 8192)
    return p.multi_processor_count * ghz * 1e9 * per_sm / 1e12


def poison_(tensors: Sequence[Any]) -> None:
    """Fill contiguous ``tensors`` with 0xFF bytes (NaN, or -1 for integers), and their staged copies."""
    import torch

    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            t.view(-1).view(torch.uint8).fill_(0xFF)
            for c in staged_copies(t):
                c.fill_(0xFF)


def restore_(t: Any, src: Any) -> None:
    """Copy ``src`` into contiguous ``t`` and into its staged copies (a ``Side.reset`` of work done in place)."""
    import torch

    t.copy_(src)
    for c in staged_copies(t):
        c.copy_(src.reshape(-1).view(torch.uint8))


def judge(task: tuple[str, str], what: str, yours: Side, ref: Side | None, *, sets: int, nbytes: int = 0,
          flops: int = 0, peak: str = "fp32", target: float | None = None, target_of: str | None = None,
          hint: str = "") -> Verdict:
    """Time ``yours`` against ``ref`` (or against the copy bandwidth), check every set, judge the target.

    ``task``: (lesson, id); the target and what it is relative to come from lesson.toml unless given.
    ``nbytes``/``flops``: the minimal traffic and work of one call (for the rate shown and the ceiling).
    Raises :class:`CheckFailure` with a message that says what was measured and what to do."""
    from cudacourse.course import course

    declared = course().task(*task)
    target = declared.target if target is None else target
    target_of = target_of or declared.target_of
    if target is None:
        raise ValueError(f"task {task[1]} declares no speed target in lessons/{task[0]}/lesson.toml")
    if sets < MIN_SETS:
        raise ValueError(f"{what}: a speed test times at least {MIN_SETS} buffer sets, got {sets}")
    if ref is None and target_of != "copy":
        raise ValueError(f"{what}: a target relative to a reference needs the reference")
    copy = copy_gbs() if (nbytes or target_of == "copy") else None
    verdict = Verdict(0.0, target, copy_gbs=copy)
    def ratio_of(m: Measurement) -> float:
        if target_of == "copy":
            assert copy is not None and nbytes, "a copy target needs nbytes"
            return nbytes / m.yours_ms / 1e6 / copy
        return m.ratio

    for attempt in range(1 + RETRIES):
        m = _measure(yours, ref, sets, clear=lambda m: ratio_of(m) >= target * CLEAR)
        gbs = nbytes / m.yours_ms / 1e6 if nbytes else None
        tfl = flops / m.yours_ms / 1e9 if flops else None
        _refuse_impossible(what, m.yours_ms, gbs, copy, tfl, peak)
        m.ratio = ratio_of(m)
        verdict.measurements.append(m)
        if m.ratio > verdict.ratio:
            verdict.ratio, verdict.gbs, verdict.tflops = m.ratio, gbs, tfl
        if verdict.ratio >= target or verdict.ratio < target * (1 - NEAR) or attempt == RETRIES:
            break
    _check_all(yours, sets, what)
    verdict.message = _describe(what, yours, ref, verdict, target_of)
    if verdict.ratio < target:
        raise CheckFailure(verdict.message + (f" {hint}" if hint else ""))
    NOTES.append(verdict.message)
    return verdict


def _measure(yours: Side, ref: Side | None, sets: int,
             clear: Callable[[Measurement], bool] = lambda m: False) -> Measurement:
    """One measurement: up to ``ROUNDS`` alternating rounds, learner first, each on every set in turn; it ends
    after a round whose medians so far are ``clear`` of the target (far above it: more rounds cannot fail it, and
    the checks after timing do not depend on them)."""
    from cudacourse.bench import time_samples
    from cudacourse.loader import uses_gpu_worker

    reps = WALL_REPS if uses_gpu_worker("cuda") else REPS
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(ROUNDS):
        fn, setup = _rotating(yours, sets)
        mine += time_samples(fn, setup=setup, reps=reps, max_s=3.0, group=sets)
        if ref is not None:
            fn, setup = _rotating(ref, sets)
            theirs += time_samples(fn, setup=setup, reps=reps, max_s=3.0, group=sets)
        m = _medians(mine, theirs)
        if clear(m):
            break
    return m


def _medians(mine: list[float], theirs: list[float]) -> Measurement:
    y = statistics.median(mine)
    r = statistics.median(theirs) if theirs else None
    return Measurement(y, r, r / y if r is not None else 0.0)


def _rotating(side: Side, sets: int) -> tuple[Callable[[], object], Callable[[], None]]:
    """(fn, setup) for bench.time_samples: ``fn`` calls the next set each time; ``setup`` poisons the outputs the
    next sample must write: the next set's (one call per sample, CUDA events), or every set's (the grader's wall
    path: a sample is k calls, k a multiple of ``sets``). Either way every set holds what its last call wrote."""
    from cudacourse.loader import uses_gpu_worker

    state = {"i": 0}
    every = uses_gpu_worker("cuda")

    def fn() -> object:
        i = state["i"]
        state["i"] = (i + 1) % sets
        return side.call(i)

    def setup() -> None:
        chosen = range(sets) if every else (state["i"],)
        if side.reset is not None:
            for i in chosen:
                side.reset(i)
        elif side.outputs is not None:
            poison_([t for i in chosen for t in side.outputs(i)])

    return fn, setup


def note(what: str, ratio: float, target: float) -> None:
    """Record the measurement of a speed test timed without :func:`judge` that passed (the report shows it)."""
    NOTES.append(f"{what}: {ratio:.2f}x, target >= {target:g}x.")


def refuse_impossible(what: str, ms: float, *, nbytes: int = 0, flops: int = 0, peak: str = "fp32") -> None:
    """Raise :class:`CheckFailure` (:data:`TOO_FAST`) when one call of ``ms`` milliseconds moving ``nbytes`` or
    computing ``flops`` would be faster than this GPU can run it (for a test timed without :func:`judge`)."""
    _refuse_impossible(what, ms, nbytes / ms / 1e6 if nbytes else None, copy_gbs() if nbytes else None,
                       flops / ms / 1e9 if flops else None, peak)


def _refuse_impossible(what: str, ms: float, gbs: float | None, copy: float | None, tflops: float | None,
                       peak: str) -> None:
    if gbs is not None and copy and gbs > COPY_CEILING * copy:
        raise CheckFailure(f"{what}: {ms:.3f} ms = {gbs:.0f} GB/s, {gbs / copy:.2f}x the copy bandwidth measured in "
                           f"this run ({copy:.0f} GB/s; at most {COPY_CEILING}x is possible): {TOO_FAST}")
    if tflops is not None and tflops > (top := peak_tflops(peak)):
        raise CheckFailure(f"{what}: {ms:.3f} ms = {tflops:.1f} TFLOP/s, above this GPU's {peak} peak "
                           f"({top:.0f} TFLOP/s): {TOO_FAST}")


def _check_all(side: Side, sets: int, what: str) -> None:
    """Every set's outputs after the timing (work deferred or skipped leaves poison)."""
    if side.check is None:
        return
    if side.reset is not None:
        # in-place work: the timed calls' results depend on how many calls a sample made; so each set is restored
        # and called once more, and that call (a repeated call on known pointers, like the timed ones) is checked
        import torch

        for i in range(sets):
            side.reset(i)
            side.call(i)
        torch.cuda.synchronize()
    for i in range(sets):
        try:
            side.check(i)
        except AssertionError as e:
            raise CheckFailure(f"{what}: after timing, the output of buffer set {i + 1} of {sets} is wrong (each "
                               "timed call must do all its work, on the buffers it is given, before it returns; "
                               f"the outputs were poisoned before each timed sample):\n{e}") from None


def _describe(what: str, yours: Side, ref: Side | None, v: Verdict, target_of: str) -> str:
    best = max(v.measurements, key=lambda m: m.ratio)
    rate = f" ({v.gbs:.0f} GB/s)" if v.gbs else (f" ({v.tflops:.1f} TFLOP/s)" if v.tflops else "")
    if target_of == "copy":
        head = (f"{what}: {yours.label} {best.yours_ms:.3f} ms{rate}, {v.ratio:.2f} of the copy bandwidth measured "
                f"in this run ({v.copy_gbs:.0f} GB/s), target >= {v.target:g}")
    else:
        assert ref is not None and best.ref_ms is not None
        head = (f"{what}: {yours.label} {best.yours_ms:.3f} ms{rate}, {ref.label} {best.ref_ms:.3f} ms: "
                f"{v.ratio:.2f}x, target >= {v.target:g}x")
    n = len(v.measurements)
    if n > 1:
        head += (f" (measured {n} times, the first within {NEAR:.0%} of the target: "
                 f"{', '.join(f'{m.ratio:.2f}' for m in v.measurements)}; the best counts)")
    return head + "."
