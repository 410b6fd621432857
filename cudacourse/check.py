"""Checking kernel results: seeded inputs, poisoned outputs, unchanged inputs, tolerant comparison.

Every graded test and notebook check goes through these helpers, so their messages are the feedback a
learner reads: they show yours against the expected values at the first mismatching indices and say
what to do.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

# Integer outputs are poisoned with this value (0xA5A5A5A5 as int32: obviously not a real result).
INT_POISON = -0x5A5A5A5B

# Default tolerances per dtype: (rtol, atol). fp32 leaves room for FMA contraction and libm ulps.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (1e-5, 1e-6),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}

_BASE_SEED: int | None = None


class CheckFailure(AssertionError):
    """A course check failed: its message is the whole story (``make check`` shows it without a traceback)."""


def base_seed() -> int:
    """The run's base seed: ``$CUDA_COURSE_SEED`` if set (the grader sets a fresh one), else random once."""
    global _BASE_SEED
    if _BASE_SEED is None:
        from cudacourse.settings import current

        seed = current().seed
        _BASE_SEED = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
    return _BASE_SEED


def rng(name: str) -> torch.Generator:
    """A CPU generator seeded from the run's base seed and ``name`` (the pytest plugin prints the base seed once,
    after a failure, for replay: ``CUDA_COURSE_SEED=<seed> make check T=...``)."""
    seed = (base_seed() + zlib.crc32(name.encode())) % (1 << 63)
    return torch.Generator().manual_seed(seed)


def randn(shape: Sequence[int] | int, gen: torch.Generator, device: Any = "cpu", dtype: torch.dtype = torch.float32,
          scale: float = 1.0) -> torch.Tensor:
    """Normal random tensor drawn on the CPU (same values on every backend), then moved to ``device``."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype).to(device)


def randn_on_device(shape: Sequence[int] | int, gen: torch.Generator, device: Any, dtype: torch.dtype = torch.float32,
                    scale: float = 1.0) -> torch.Tensor:
    """Normal random tensor drawn on ``device`` itself by a generator seeded from ``gen``: for the speed tests'
    large inputs, where :func:`randn`'s CPU draw is the cost (64M floats: 3 s of a timed task on the H200). The same
    seed gives the same values on the same kind of device, not across devices."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape, generator=g, device=device) * scale).to(dtype)


def poisoned(shape: Sequence[int] | int, dtype: torch.dtype = torch.float32, device: Any = "cpu") -> torch.Tensor:
    """An output buffer filled with NaN (floats) or ``INT_POISON`` (integers): unwritten slots show."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype, device=device)
    return torch.full(shape, INT_POISON, dtype=dtype, device=device)


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill an existing tensor with poison in place and return it."""
    t.copy_(poisoned(t.shape, t.dtype, t.device))
    return t


def sum_tolerance(n: int, dtype: torch.dtype = torch.float32, magnitude: float = 1.0) -> tuple[float, float]:
    """Tolerances for a sum of ``n`` terms of typical size ``magnitude``.

    A float32 sum in any order has rounding error bounded by about ``n * eps * sum(|x|)`` in the worst
    case, but with random signs and tree or blocked orders the error grows like ``sqrt(n) * eps`` times
    the terms' size. We allow ``8 * sqrt(n) * eps * magnitude`` absolute (plus a small relative part):
    tight enough to catch a dropped or doubled element (an error of about ``magnitude``), loose enough
    for tree, blocked and atomic orders. A single running sum (one thread adding n terms in a row) has
    error growing like ``n * eps`` instead; lesson 03's dot products therefore scale with K.
    """
    eps = torch.finfo(dtype).eps
    return 1e-5 if dtype == torch.float32 else 10 * eps, 8.0 * math.sqrt(max(n, 1)) * eps * magnitude


def softmax_rtol(logits: torch.Tensor, floor: float = 1e-4) -> float:
    """Relative tolerance for ``exp(x - lse)`` (softmax, cross-entropy gradients) computed in float32.

    ``lse`` rounded to float32 carries an absolute error of about ``eps * |lse|``, which ``exp()`` turns into a
    relative error of the same size: with logits of size 1e4 that is about 1e-3, and the exact value depends on
    the machine's ``expf``. The tolerance therefore grows with the largest finite logit (``2 * eps * max|x|``)
    and never drops below ``floor``.
    """
    big = float(torch.nan_to_num(logits, 0.0, 0.0, 0.0).abs().max()) if logits.numel() else 0.0
    return max(floor, 2 * torch.finfo(torch.float32).eps * big)


@contextmanager
def unchanged(*tensors: torch.Tensor, names: Sequence[str] | None = None) -> Iterator[None]:
    """Assert the given input tensors hold the same values after the block as before it."""
    __tracebackhide__ = True  # pytest shows the learner's test line, not this harness frame
    before = [t.detach().clone() for t in tensors]
    yield
    for i, (t, b) in enumerate(zip(tensors, before, strict=True)):
        if not torch.equal(t.nan_to_num(1.2345), b.nan_to_num(1.2345)):
            name = names[i] if names else f"input {i}"
            bad = (t.nan_to_num(1.2345) != b.nan_to_num(1.2345)).flatten().nonzero().flatten()
            raise AssertionError(
                f"{name} was modified by the kernel ({bad.numel()} elements changed, first at flat index "
                f"{bad[0].item()}). Inputs are read-only: write results to the output buffer only.")


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def _fmt_err(v: float) -> str:
    return "n/a" if v != v else f"{v:.6g}"


_CHUNK = 1 << 24  # elements compared at once by _all_close: ~0.5 GB of float64 temporaries at most


def _close(a: torch.Tensor, e: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    """Elementwise: ``a`` matches ``e`` (already ``a``'s dtype): NaN and infinities exactly, others within tolerance."""
    if not a.dtype.is_floating_point:
        return a == e
    af, ef = a.double(), e.double()
    both_nan = af.isnan() & ef.isnan()
    same_inf = af.isinf() & ef.isinf() & (af == ef)
    ok = both_nan | same_inf | ((af - ef).abs() <= atol + rtol * ef.abs())
    return ok & ~(af.isnan() ^ ef.isnan())


def _all_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> bool:
    """Whether :func:`assert_close` passes, computed where ``actual`` lives, in chunks.

    On a GPU this is the common case made cheap: the float64 comparison of a 32768x4096 output took ~10 s on
    one CPU thread of a grade's task process, and runs in milliseconds on the GPU. Only a failure moves the
    tensors to the CPU, for its report. Every operation is exactly rounded, so both places agree."""
    a = actual.detach().reshape(-1)
    e = expected.detach().to(device=a.device, dtype=a.dtype).reshape(-1)
    return all(bool(_close(a[i:i + _CHUNK], e[i:i + _CHUNK], rtol, atol).all()) for i in range(0, a.numel(), _CHUNK))


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, name: str = "output", rtol: float | None = None,
                 atol: float | None = None, task: str | None = None, hint: str | None = None,
                 max_show: int = 5, vector: int = 1, launcher_given: bool | None = None) -> None:
    """Assert ``actual`` matches ``expected`` within tolerances, with a report a learner can act on.

    The report gives shape and dtype, how many elements are wrong, the max absolute and relative error,
    the first mismatching indices (yours vs expected), and says so when outputs were never written
    (poison left) or when the answer is all zeros. NaN and infinities must match exactly.

    What the failure shows picks the diagnosis, and ``hint`` (the task's direction) is left out where the
    diagnosis already names the cause elsewhere than the task's kernel body:

    - ``vector``: the kernel handles whole groups of ``vector`` elements (4: a float4) and then a tail of
      ``n % vector`` single ones: nothing written at ``n < vector``, or exactly the tail unwritten, is the tail
      part's doing (not a stub, not the launcher);
    - ``launcher_given``: whether the launcher is the course's own, unchanged (:func:`given_unchanged`; ``None``:
      not known): an unwritten tail is then the kernel's doing (``True``) or points at the launcher (``False``).
    """
    __tracebackhide__ = True  # pytest shows the learner's test line, not this harness frame
    where = f"{name}" + (f" (task {task})" if task else "")
    if tuple(actual.shape) != tuple(expected.shape):
        raise CheckFailure(f"{where}: shape {tuple(actual.shape)} but expected {tuple(expected.shape)}")
    dflt_rtol, dflt_atol = TOLERANCES.get(actual.dtype, (0.0, 0.0))
    rtol = dflt_rtol if rtol is None else rtol
    atol = dflt_atol if atol is None else atol
    if _all_close(actual, expected, rtol, atol):
        return
    a = actual.detach().cpu()
    e = expected.detach().cpu().to(a.dtype) if a.dtype != expected.dtype else expected.detach().cpu()
    ok = _close(a, e, rtol, atol)
    if bool(ok.all()):  # (cannot differ from _all_close: every operation is exactly rounded)
        return
    af, ef = a.double(), e.double()
    diff = (af - ef).abs()
    bad = (~ok).flatten().nonzero().flatten()
    nbad, total = bad.numel(), a.numel()
    finite = ~(af.isnan() | ef.isnan() | af.isinf() | ef.isinf())
    max_abs = diff[finite & ~ok].max().item() if bool((finite & ~ok).any()) else float("nan")
    # Relative error only where the expected value is not zero (against 0 it is meaningless).
    rel_mask = finite & ~ok & (ef != 0)
    max_rel = (diff[rel_mask] / ef[rel_mask].abs()).max().item() if bool(rel_mask.any()) else float("nan")
    dt = str(a.dtype).replace("torch.", "")
    lines = [f"{where}: {nbad} of {total} elements differ (shape {tuple(a.shape)}, {dt},"
             f" rtol={rtol:g}, atol={atol:g}); max abs error {_fmt_err(max_abs)}, max rel error {_fmt_err(max_rel)}"]
    flat_a, flat_e = af.flatten(), ef.flatten()
    for k in bad[:max_show].tolist():
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), a.shape)) if a.dim() > 1 else (k,)
        lines.append(f"  at {idx if len(idx) > 1 else idx[0]}: yours {_fmt(flat_a[k].item())}, expected "
                     f"{_fmt(flat_e[k].item())}")
    poison = flat_a.isnan() & ~flat_e.isnan() if a.dtype.is_floating_point else (flat_a == INT_POISON)
    specific = False  # the diagnosis names a cause the task's hint (about the kernel body) does not cover
    whole = "float4" if vector == 4 else f"group of {vector}"
    if bool(poison.any()):
        first = poison.nonzero().flatten()
        count = int(poison.sum())
        lines.append(f"  {count} element{'s were' if count > 1 else ' was'} never written (still poison), first at "
                     f"flat index {first[0].item()}, last at {first[-1].item()}: does every output element get a "
                     "thread, and did you implement the TODO?")
        if nbad == total and vector > 1 and total < vector:
            specific = True
            lines.append(f"  Nothing was written: with n = {total} there is no whole {whole} (n / {vector} = 0), so "
                         f"only the kernel's tail part runs here, and it must write "
                         + (f"these {total} leftover elements." if total > 1 else "this leftover element."))
        elif nbad == total and total < 32:  # (a loop bound of n - 1 writes nothing at n = 1 either)
            lines.append(f"  Nothing was written at all for this small size ({total}): is the kernel body still the "
                         "stub, or do its loop or bounds stop before the first element?")
        elif nbad == total:
            lines.append("  Nothing was written at all: is the kernel body still the stub?")
    elif bool((flat_a == 0).all()) and not bool((flat_e == 0).all()):
        lines.append("  Your output is all zeros.")
    if 0 < nbad < total:
        first, last = bad[0].item(), bad[-1].item()
        if first > 0 and last == total - 1 and nbad == total - first and nbad <= max(64, total // 4):
            tail = f"  Only the tail is wrong (flat indices {first}..{last} of {total})"
            if bool(poison[first:].all()) and not bool(poison[:first].any()):
                if vector > 1 and first == total // vector * vector:
                    specific = True
                    lines.append(f"{tail}, and it was never written: the n % {vector} = {nbad} element"
                                 f"{'s' * (nbad > 1)} after the last whole {whole}. The {whole} part is right; the "
                                 f"kernel's tail part must write {'them' if nbad > 1 else 'it'}.")
                elif launcher_given is True:
                    lines.append(f"{tail}, and it was never written: no thread reached it. The launcher is the one "
                                 "given (unchanged), so the kernel stops short of these elements: check its loop or "
                                 "its bound.")
                elif launcher_given is False:
                    specific = True
                    lines.append(f"{tail}, and it was never written: no thread reached it. Your launcher differs "
                                 "from the one given: check how many threads it starts (a block count that rounds "
                                 "down leaves the tail without threads).")
                else:
                    lines.append(f"{tail}, and it was never written: no thread reached it. Check how many threads "
                                 "the launcher starts (a block count that rounds down leaves the tail without "
                                 "threads), and the kernel's loop bound or tail handling.")
            else:
                lines.append(f"{tail}: check the bounds or tail handling for sizes that are not a multiple of your "
                             "block or vector width.")
        elif first == 0 and nbad == last + 1 and nbad <= total // 4:
            lines.append("  Only the start is wrong: check the index arithmetic of the first block.")
    if hint and not specific:
        lines.append(f"  Hint: {hint}")
    raise CheckFailure("\n".join(lines))


def given_unchanged(path: Any, function: str) -> bool | None:
    """Whether ``function`` (a launcher the course gives complete) in the learner's kernel file ``path`` is still
    the course's own: the same code as in the stub derived from ``solutions/`` (comments and spacing aside).
    ``None`` where that cannot be told (no ``solutions/`` in the course root, as in a grader's worker, or no such
    function). A diagnosis then knows whether to point at the launcher or at the kernel."""
    from pathlib import Path

    from cudacourse.course import course
    from cudacourse.exercise_state import function_unchanged
    from cudacourse.settings import current

    path = Path(path)
    return function_unchanged(path, course(current().root).kernel_dir(path.parent.name, "solution") / path.name,
                              function)


# Poisoned floats placed after an output by ``guarded``: a write past the end of the output lands there.
GUARD = 64


def guarded(n: int, device: Any = "cpu", dtype: torch.dtype = torch.float32,
            guard: int = GUARD) -> tuple[torch.Tensor, torch.Tensor]:
    """A poisoned buffer of ``n + guard`` elements and its first ``n`` as the output (``(full, out)``).

    Pass ``out`` (reshaped as needed) to the kernel, then ``assert_guard(full, n, ...)``: a kernel that
    writes past the end of its output leaves a mark in the guard, even where no bounds checker runs (GPU).
    """
    full = poisoned(n + guard, dtype, device)
    return full, full[:n]


def assert_guard(full: torch.Tensor, n: int, name: str, task: str | None = None,
                 hint: str = "Check the bounds test on every store.") -> None:
    """Assert the guard after the first ``n`` elements of ``full`` is still poison."""
    __tracebackhide__ = True  # pytest shows the learner's test line, not this harness frame
    tail = full[n:].detach().cpu()
    clean = tail.isnan() if tail.dtype.is_floating_point else tail == INT_POISON
    if not bool(clean.all()):
        first = int((~clean).nonzero()[0])
        where = f"{name}" + (f" (task {task})" if task else "")
        raise CheckFailure(f"{where}: the kernel wrote past the end of its output (element {n + first}; the "
                           f"output has {n}). {hint}")
