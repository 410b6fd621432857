"""The Triton track: each lesson's Triton twins (``lessons/NN_topic/*_triton.py``), graded by the same tests.

A twin is a Python file of ``@triton.jit`` kernels and given host wrappers whose signatures match the CUDA
launchers of the same lesson (``relu(x, y, n)``, ``softmax(x, y, rows, cols)``), so one test checks both
the same way: ``check.assert_close``, outputs poisoned with NaN, ragged sizes, inputs checked unchanged. Its
tasks have ids of their own (``1.T1``) and ``track = "triton"`` in lesson.toml; the lesson declares the file
in ``triton_files``; stubs are derived from ``solutions/`` like every exercise file (``# BEGIN SOLUTION``).

Where a twin runs:

- on a GPU (backend ``cuda``): compiled by Triton. Each kernel carries ``@triton.autotune`` over the
  block sizes and warp counts that :func:`configs` lists; the first call for each new *size class* times them
  all and keeps the fastest, which :func:`chosen` names. The autotuner's key is not the size itself but
  :func:`size_class` of it, an extra kernel argument the wrapper computes (a power of two, with one class for
  every size below a floor): keyed on the exact size, each ragged size of a graded test re-timed every config
  (21-30 s per twin task on an H100); keyed on the class, a test run tunes a few times, and the bench's large
  sizes (classes of their own) are still tuned for exactly their class. :func:`load` sets
  ``TRITON_PRINT_AUTOTUNING=1`` (unless set), so each autotuning prints the config it kept; ``make bench``
  prints it too, with the time it took. While grading, each kernel keeps only its first config (see
  :func:`configs`): a grade checks correctness, which needs no timing;
- on the CPU (backend ``sim``): Triton's interpreter runs the same kernels with numpy, one program after
  another. :func:`load` sets ``TRITON_INTERPRET=1`` before it imports the file, and :func:`configs` then
  keeps one fixed configuration (timing configurations on the interpreter would say nothing about a GPU);
- without the ``triton`` package (or on a platform without its wheels): the twins' tests are reported
  *not graded*, with the command that installs it (:data:`INSTALL`), never failed or silently skipped.

While grading (settings ``confine``), the learner's file is imported in the confined torch worker, as lesson
04's decoder.py is (``cudacourse/workers/torch.py``; on a GPU a worker with a CUDA context of its own, CUDA
tensors crossing through host memory); every call runs there under ``answer_guard.torch_answer_guard``, which
refuses torch arithmetic called from the learner's file.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import itertools
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from cudacourse import settings

INSTALL = "make setup EXTRAS=triton"
TESTED_VERSION = "3.6.0"  # the interpreter was checked with this triton and torch 2.13.0 (CPU build)
_INTERPRET = "TRITON_INTERPRET"
_TUNING_KEYS = ("num_warps", "num_stages")  # keys of a config that are launch options, not constexpr arguments
# Set by the course's pytest plugin in a grading task process (``--cc-report``): every autotuned kernel keeps its
# first config, so a graded correctness test compiles one config instead of timing them all.
ONE_CONFIG_ENV = settings.TRITON_ONE_CONFIG_ENV


@dataclass(frozen=True)
class Status:
    """Whether the Triton track can run in this process, and how."""

    mode: str  # "compiled" (a GPU), "interpreter" (the CPU), or "missing"
    version: str | None
    detail: str

    @property
    def available(self) -> bool:
        """True when the twins can run here (compiled or interpreted)."""
        return self.mode != "missing"


def status(gpu: bool | None = None) -> Status:
    """How the Triton twins run here: ``gpu`` says whether kernels run on a GPU (default: whether torch sees
    one). Never raises; a missing package is a ``missing`` status whose detail says how to install it."""
    if importlib.util.find_spec("triton") is None:
        if not sys.platform.startswith("linux"):
            why = (f"Triton publishes wheels for Linux only (this is {sys.platform}); the Triton track needs a Linux "
                   "machine (or a Linux container)")
        else:
            why = f"the triton package is not installed in this Python ({sys.executable}); install it with `{INSTALL}`"
        return Status("missing", None, why)
    # Not imported here: triton.language must first be imported after TRITON_INTERPRET is set (see load).
    try:
        version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    if gpu is None:
        import torch

        gpu = bool(torch.cuda.is_available())
    if gpu:
        return Status("compiled", version, f"triton {version}: kernels compiled for the GPU, autotuned on their "
                                           "first call")
    return Status("interpreter", version,
                  f"triton {version}: no GPU, so the twins run on Triton's CPU interpreter ({_INTERPRET}=1; slow, "
                  f"one program at a time; checked with triton {TESTED_VERSION})")


def not_graded_reason(st: Status) -> str:
    """The reason a twin's test is skipped with: it starts with "not graded" (the points table's word)."""
    return f"not graded: the Triton track cannot run here: {st.detail}"


def interpreting() -> bool:
    """True when ``@triton.jit`` functions defined now run on Triton's CPU interpreter."""
    return os.environ.get(_INTERPRET, "0") == "1"


def configs(interpreter: dict[str, Any], keep: Callable[[dict[str, Any]], bool] | None = None,
            **space: Sequence[Any]) -> list[Any]:
    """The ``triton.Config`` list of a kernel's ``@triton.autotune``.

    ``space`` maps each tuned name to its candidates: constexpr arguments of the kernel (``BLOCK=[1024,
    4096]``) and the launch options ``num_warps`` / ``num_stages``; every combination is one config, unless
    ``keep`` (given a combination as a dict) returns False for it. Under the interpreter only ``interpreter``
    (one fixed config, same keys) is returned: the autotuner then has nothing to time. While grading on a GPU
    (``ONE_CONFIG_ENV`` set) only the first kept combination is returned: a grade checks correctness, which
    every config must give, and timing 4-16 configs at each size class cost 17-80 s per twin task on an H100
    (2026-11-25); ``make bench`` and ``make check`` still autotune.
    ``configs({"BLOCK": 1024}, BLOCK=[1024, 4096], num_warps=[4, 8])`` is 4 configs on a GPU.
    """
    import triton

    def make(values: dict[str, Any]) -> Any:
        opts = {k: v for k, v in values.items() if k in _TUNING_KEYS}
        return triton.Config({k: v for k, v in values.items() if k not in _TUNING_KEYS}, **opts)

    if not space:
        raise ValueError("configs(): give at least one tuned name, e.g. BLOCK=[1024, 4096]")
    if interpreting():
        _fix_interpreter_index()  # (also in a worker process, which imports the twin without load())
        return [make(interpreter)]
    names = list(space)
    combos = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(space[k] for k in names))]
    kept = [make(c) for c in combos if keep is None or keep(c)]
    if not kept:
        raise ValueError("configs(): keep() refused every combination; keep at least one")
    return kept[:1] if settings.triton_one_config() else kept


def size_class(n: int, floor: int = 2**20) -> int:
    """The autotuning key of a size ``n``: the power of two at or above it, and ``floor`` for every size up to
    ``floor``. ``size_class(1000) == size_class(1) == 2**20``; ``size_class(2**20 + 3) == 2**21``.

    A twin's wrapper passes it as an extra kernel argument named in ``@triton.autotune(key=[...])``, so sizes of
    one class share one tuning (the first call of the class times the configs, later calls reuse the winner).
    The floor is where every config is about as fast (launch-bound sizes: one class). Pure Python: it does not
    import triton. Raises ``ValueError`` for a negative size or a floor that is not a power of two."""
    if n < 0:
        raise ValueError(f"size_class(): the size must be >= 0, got {n}")
    if floor < 1 or floor & (floor - 1):
        raise ValueError(f"size_class(): the floor must be a power of two, got {floor}")
    return max(floor, 1 << max(n - 1, 0).bit_length())


def chosen(kernel: Any) -> str:
    """The configuration an autotuned kernel kept, e.g. ``BLOCK=4096, num_warps=8, num_stages=3`` (after its
    first call; "not tuned yet" before)."""
    cfg = getattr(kernel, "best_config", None)
    if cfg is None:
        return "not tuned yet"
    parts = [f"{k}={v}" for k, v in cfg.kwargs.items()]
    parts += [f"{k}={getattr(cfg, k)}" for k in _TUNING_KEYS if getattr(cfg, k, None) is not None]
    return ", ".join(parts)


def check_tensors(fn: str, **tensors: Any) -> None:
    """Refuse arguments a twin's kernel cannot take, naming the parameter, before anything runs: as the
    generated binding of a CUDA launcher does (float32 tensors unless the name's dtype is given as a
    ``(tensor, dtype)`` pair, contiguous, all on one device)."""
    import torch

    device = None
    for name, value in tensors.items():
        t, dtype = value if isinstance(value, tuple) else (value, torch.float32)
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: parameter '{name}' expects a tensor, got {type(t).__name__}")
        if t.dtype != dtype:
            raise TypeError(f"{fn}: parameter '{name}' expects a {str(dtype).removeprefix('torch.')} tensor, got "
                            f"{str(t.dtype).removeprefix('torch.')}")
        if not t.is_contiguous():
            raise ValueError(f"{fn}: parameter '{name}' expects a contiguous tensor (call .contiguous() first)")
        if device is None:
            device = t.device
            want = "cpu" if interpreting() else "cuda"
            if t.device.type != want:
                why = "the interpreter reads CPU tensors" if want == "cpu" else "Triton compiles for the GPU"
                raise ValueError(f"{fn}: parameter '{name}' expects a tensor on {want}, got one on {t.device} ({why})")
        elif t.device != device:
            raise ValueError(f"{fn}: parameter '{name}' expects a tensor on {device} like the first one, got one "
                             f"on {t.device}")


# ----------------------------------------------------------------------------------------------------
# Loading a twin
# ----------------------------------------------------------------------------------------------------


def load(path: str | os.PathLike[str], *, backend: str) -> ModuleType:
    """Import the twin at ``path`` for ``backend`` (``cuda``: compiled; ``sim``: the interpreter).

    Raises ``RuntimeError`` with :func:`not_graded_reason` when Triton cannot run here, ``FileNotFoundError``
    naming the file when it is missing. While grading the file is imported in the confined torch worker
    (``workers.torch.hosted``) and the returned module's functions run there.
    """
    from cudacourse.lessons import import_file

    st = status(gpu=backend == "cuda")
    if not st.available:
        raise RuntimeError(not_graded_reason(st))
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: the Triton twin is written there (a copy of the stub in "
                                f"lessons/{p.parent.name}/ if you deleted it)")
    if backend != "cuda":
        _interpreter_on()
    elif interpreting():
        raise RuntimeError(f"{_INTERPRET}=1 is set in a run on a GPU: unset it to compile the Triton twins")
    else:
        # Triton's own knob: each autotuning prints the config it kept and how long it took (read at call time).
        os.environ.setdefault("TRITON_PRINT_AUTOTUNING", "1")
    confine = settings.current().confine
    if confine is not None:
        from cudacourse.workers.torch import hosted

        return hosted(p, confine=confine, gpu=backend == "cuda", timeout_s=120.0)
    # One module per file and mode: an edited file is imported again (its name carries the modification time).
    return import_file(p, f"cc_triton_{p.stem}_{abs(hash(str(p.resolve())))}_{p.stat().st_mtime_ns}_{backend}")


def _interpreter_on() -> None:
    """Set TRITON_INTERPRET=1 for the @triton.jit decorators still to run (the twin's, while it is imported).

    Triton's own library functions (tl.sum, tl.max, ...) are @triton.jit functions too, decorated when
    triton.language is first imported: imported before the variable was set (torch.compile imports it, even on a
    CPU), they stay compiled-mode functions that the interpreter cannot call ("Cannot call @triton.jit'd outside
    of the scope of a kernel"). Then triton's Python modules are imported afresh (its compiled core is kept).
    """
    os.environ[_INTERPRET] = "1"
    lang = sys.modules.get("triton.language")
    if lang is not None and type(getattr(lang, "sum", None)).__name__ != "InterpretedFunction":
        for name in [n for n in sys.modules if n == "triton" or n.startswith("triton.")]:
            if not name.startswith("triton._C"):
                del sys.modules[name]
    _fix_interpreter_index()


def _fix_interpreter_index() -> None:
    """Make the interpreter's ``range(0, n, BLOCK)`` work with numpy >= 2.4 (triton 3.6.0 and older).

    The interpreter turns a kernel's scalar into a Python int with ``int(array)`` on a one-element 1-D array,
    which numpy 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars"), so every loop
    bounded by a kernel argument failed. Upstream fix: triton-lang/triton#9172 (``int(data.squeeze())``), for
    issue #9171; applied here the same way when the installed interpreter still has the old line.
    """
    import inspect

    from triton.runtime import interpreter

    orig = interpreter._patch_lang_tensor
    if getattr(orig, "_cudacourse_fixed", False) or "int(self.handle.data))" not in inspect.getsource(orig):
        return

    def patched(tensor: Any, scope: Any) -> None:
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched._cudacourse_fixed = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def twin(lesson: str, file: str | None = None, *, impl: str | None = None, backend: str = "auto") -> ModuleType:
    """The Triton twin of ``lesson`` (``cc.triton_twin("01_relu")``), from the folder ``cc.lesson`` loads kernels
    from (lessons/, solutions/ or a submission being graded), for the backend ``cc.lesson`` picks here.

    ``file`` picks one of the lesson's ``triton_files`` (default: its first). Raises ``RuntimeError`` saying how
    to install Triton when it cannot run here, ``ValueError`` for a lesson without a twin.
    """
    from cudacourse.course import course as course_model
    from cudacourse.lessons import Lesson

    info = course_model(settings.current().root).lesson(lesson)
    if not info.triton_files:
        raise ValueError(f"lesson {info.id} has no Triton twin (no triton_files in lessons/{info.id}/lesson.toml)")
    name = file or info.triton_files[0]
    if name not in info.triton_files:
        raise ValueError(f"lesson {info.id}: {name!r} is not one of its triton_files ({', '.join(info.triton_files)})")
    m = Lesson(info.id, impl=impl, backend=backend)
    return load(m.dir / name, backend=m.backend)


def load_mutant(lesson: str, file: str, edit: tuple[str, str], into: str | os.PathLike[str], *,
                backend: str) -> ModuleType:
    """A wrong twin for the course's own tests: the solution ``solutions/<lesson>/<file>`` with one edit, written
    into the folder ``into`` (a test's ``tmp_path``) and loaded with :func:`load` for ``backend``. A test then
    expects the checks its task uses to raise ``AssertionError`` on it (each lesson's ``TRITON_MUTANTS``).

    ``edit`` is (old text, new text); the old text must occur exactly once in the solution, else ``ValueError``
    says so (the solution changed and the mutant no longer tests anything).
    """
    from cudacourse.course import course as course_model

    src = course_model(settings.current().root).kernel_dir(lesson, "solution") / file
    old, new = edit
    text = src.read_text()
    if text.count(old) != 1:
        raise ValueError(f"the edit {old!r} -> {new!r} no longer applies to {src} (its old text occurs "
                         f"{text.count(old)} times, not once): update the test's mutants")
    out = Path(into) / file
    out.write_text(text.replace(old, new))
    return load(out, backend=backend)


def twin_or_not_graded(lesson: str, file: str | None = None) -> ModuleType:
    """:func:`twin` for a graded test: when Triton cannot run here the test is skipped with a reason that starts
    with "not graded" and says how to install it (the points table then counts the task as not graded)."""
    import pytest

    from cudacourse.backends import backend_name

    st = status(gpu=backend_name() == "cuda")
    if not st.available:
        pytest.skip(not_graded_reason(st))
    return twin(lesson, file)


# ----------------------------------------------------------------------------------------------------
# Bench rows (GPU)
# ----------------------------------------------------------------------------------------------------


def bench_twin(m: Any, file: str | None = None) -> tuple[ModuleType | None, str]:
    """(the Triton twin of the lesson module ``m`` that ``make bench`` times, compiled; or None and why not).

    The twin comes from the folder ``m`` was loaded from (``solutions/`` for ``make bench``); ``file`` picks one
    of the lesson's ``triton_files`` (default: its first)."""
    from cudacourse.course import course as course_model

    info = course_model(settings.current().root).lesson(m.name)
    if not info.triton_files:
        return None, f"lesson {info.id} has no Triton twin"
    if file is not None and file not in info.triton_files:
        return None, f"lesson {info.id}: {file!r} is not one of its triton_files ({', '.join(info.triton_files)})"
    try:
        return load(m.dir / (file or info.triton_files[0]), backend=m.backend), ""
    except Exception as e:  # noqa: BLE001 - the bench keeps its other rows and says why these are missing
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def bench_case(twin: tuple[ModuleType | None, str], group: str, name: str, call: Callable[[ModuleType], object],
               kernels: Sequence[str], **case: Any) -> Any:
    """A ``bench.Case`` timing ``call(twin module)``, primed first: the first call compiles the kernels and
    autotunes them (every config timed), which is measured here, apart from the kernel time ``make bench``
    measures later. The row's note and ``extra`` hold that time and the configs ``kernels`` (names of the
    twin's autotuned kernels) kept; the same line is printed. Without a twin, the row says why it is missing."""
    from cudacourse.bench import Case

    mod, why = twin
    if mod is None:
        def missing() -> None:
            raise RuntimeError(why)

        return Case(group, name, missing, **case)
    fn = lambda: call(mod)  # noqa: E731
    try:
        seconds, picked = bench_prime(fn, {k: getattr(mod, k) for k in kernels})
    except Exception as e:  # noqa: BLE001 - the row reports it (the timing raises it again)
        return Case(group, name, fn, note=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}", **case)
    note = f"first call (compile + autotune) {seconds:.2f} s; {picked}"
    print(f"triton: {group}: {name}: {note}", flush=True)
    return Case(group, name, fn, note=note, extra={"autotune_s": round(seconds, 3), "config": picked}, **case)


def bench_prime(fn: Callable[[], object], kernels: dict[str, Any]) -> tuple[float, str]:
    """Run ``fn`` once and wait for it: the first call compiles and autotunes. Returns (seconds it took,
    the configurations ``kernels`` (name -> autotuned kernel) kept). Kernel times measured afterwards exclude
    this."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, "; ".join(f"{name}: {chosen(k)}" for name, k in kernels.items())
