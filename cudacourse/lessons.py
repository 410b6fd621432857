"""A lesson's kernels: ``cc.lesson("02_reduce")``, built lazily, rebuilt when a file changes; and ``import_file``.

Which folder the files come from is the course model's answer (``Course.files_dir``), asked with this process's
settings (:func:`lesson_dir`): a submission being graded, else ``lessons/`` or ``solutions/``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudacourse import settings
from cudacourse.backends import backend_name, device_for
from cudacourse.course import course as course_model
from cudacourse.errors import CompileError, CourseError, repeated
from cudacourse.module import Module, exposed_functions, load


def import_file(path: str | os.PathLike, name: str | None = None) -> types.ModuleType:
    """Import a Python file by its path, once per process (a lesson's ``decoder.py``, ``bench.py``, ...).

    The module is kept in ``sys.modules`` under ``name`` (default: from the file's name and path) and put
    there before it runs, since dataclasses look their module up while the class is built. A file that
    raises while importing is not kept.
    """
    path = Path(path)
    name = name or f"cc_{path.stem}_{abs(hash(str(path)))}"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path} (not a Python file?)")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    return mod


def learner_python(path: str | os.PathLike, *, gpu: bool, timeout_s: float, guard: bool = True,
                   also: Sequence[Path] = (), module_name: str | None = None) -> Any:
    """A learner's Python exercise file (decoder.py, train.py, custom_op.py) for a lesson test to call: the one
    place that decides where it runs.

    While grading (the settings' ``confine`` is set) it is hosted in a confined torch worker
    (``workers.torch.hosted``: its functions run there, under the torch answer guard unless ``guard`` is False,
    with the ``also`` files beside it; ``gpu``: on the cuda backend; ``timeout_s``: the worker's share between two
    of its kernel calls), never imported in the process that compares; else it is imported here
    (:func:`import_file`, as ``module_name`` when given)."""
    confine = settings.current().confine
    if confine is not None:
        from cudacourse.workers.torch import hosted

        return hosted(path, confine=confine, gpu=gpu, timeout_s=timeout_s, guard=guard, also=list(also))
    return import_file(path, module_name)


def lesson_dir(name: str, impl: str | None = None) -> Path:
    """Folder whose kernel files ``lesson(name)`` loads: the course model's ``files_dir`` for this process's
    settings.

    The lesson must be declared in the course model (``lessons/NAME/lesson.toml``). A submission being
    graded (settings ``submission``, set by the grader) wins: DIR/lessons/NAME. Otherwise ``impl``
    (default: the settings' impl, ``student`` unless changed) picks ``lessons/`` or ``solutions/``.
    """
    st = settings.current()
    try:
        info = course_model(st.root).lesson(name)
    except CourseError as e:
        raise ValueError(str(e)) from None
    impl = impl or st.impl
    if st.submission is None and impl not in settings.IMPLS:
        raise ValueError(f"impl must be 'student' or 'solution', got {impl!r}")
    return course_model(st.root).files_dir(info.id, impl, st.submission)


class Lesson:
    """The launchers of every kernel file of a lesson, built lazily, rebuilt when a file changes.

    ``m.relu_v1_scalar(...)`` finds the file that defines it, builds it on first use (so a broken file
    costs only the functions in it) and rebuilds it after an edit, which makes the notebook loop
    edit -> re-run cell.
    """

    _cc_local_only = True  # never handed to a worker's code: its module(path) would read any file (workers/exports.py)

    def __init__(self, name: str, *, impl: str | None = None, backend: str = "auto", check: bool | None = None,
                 timeout_s: float = 10.0) -> None:
        self.name = name
        self.dir = lesson_dir(name, impl)
        self.backend = backend_name(backend)
        self.device = device_for(self.backend)
        self._opts = dict(backend=self.backend, check=check, timeout_s=timeout_s)
        self._modules: dict[Path, tuple[str, Module]] = {}
        self._bound: dict[str, tuple[Path, tuple[int, int] | None, Any]] = {}
        self._names: dict[Path, tuple[tuple[int, int] | None, list[str]]] = {}

    def files(self) -> list[Path]:
        """The lesson's kernel files (``files`` and ``torch_files`` of its lesson.toml) that exist."""
        info = course_model(settings.current().root).lesson(self.name)
        return [self.dir / f for f in info.kernel_files if (self.dir / f).is_file()]

    def _index(self) -> dict[str, Path]:
        idx: dict[str, Path] = {}
        for f in self.files():
            stamp = _stamp(f)
            cached = self._names.get(f)
            if cached is None or cached[0] != stamp:
                self._names[f] = cached = (stamp, exposed_functions(f.read_text()))
            for n in cached[1]:
                idx.setdefault(n, f)
        return idx

    def module(self, file: str | Path) -> Module:
        """The built module of one kernel file (rebuilt if its content changed)."""
        f = self.dir / file if not Path(file).is_absolute() else Path(file)
        text = f.read_text()
        cached = self._modules.get(f)
        if cached and cached[0] == text:
            return cached[1]
        if cached:
            cached[1].close()
        under_test = "PYTEST_CURRENT_TEST" in os.environ
        failed = _FAILED_BUILDS.get(str(f))
        if failed is not None and failed[0] == text:
            # Shown in full once per process, to the first test it blocks; every later case says one line. (A timed
            # task's process loads its modules before its first test, outside any: that load is not a showing.)
            shown = failed[2]
            _FAILED_BUILDS[str(f)] = (text, failed[1], shown or under_test)
            raise (repeated(failed[1]) if shown and under_test else failed[1]) from None
        try:
            mod = load(f, None, **self._opts)  # (a build the grade stopped or saw fail raises at once)
        except CompileError as e:
            _FAILED_BUILDS[str(f)] = (text, e, under_test)
            raise
        self._modules[f] = (text, mod)
        return mod

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        # Fast path: the bound function, still valid while its file is unchanged (one stat per call, so a
        # benchmark loop pays microseconds, and an edit in the notebook is picked up on the next call).
        hit = self._bound.get(name)
        if hit is not None:
            f, stamp, fn = hit
            if _stamp(f) == stamp:
                return fn
        idx = self._index()
        if name not in idx:
            raise AttributeError(f"lesson {self.name} ({self.dir}) has no launcher '{name}' "
                                 f"(found: {', '.join(sorted(idx)) or 'none'})")
        f = idx[name]
        stamp = _stamp(f)
        fn = getattr(self.module(f), name)
        self._bound[name] = (f, stamp, fn)
        return fn

    def functions(self) -> list[str]:
        """Every launcher of the lesson."""
        return sorted(self._index())

    def __repr__(self) -> str:
        return f"<cudacourse.Lesson {self.name} from {self.dir} backend={self.backend}>"


# path -> (text, error, shown to a test yet) of the files that did not build
_FAILED_BUILDS: dict[str, tuple[str, CompileError, bool]] = {}


def _stamp(f: Path) -> tuple[int, int] | None:
    try:
        st = f.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


_LESSONS: dict[tuple, Lesson] = {}


def lesson(name: str, *, impl: str | None = None, backend: str = "auto", check: bool | None = None,
           timeout_s: float = 10.0) -> Lesson:
    """The lesson's kernels: ``cc.lesson("02_reduce").reduce_v1_interleaved(x, out, n)``.

    Files come from ``lessons/`` or ``solutions/`` (``impl`` or ``$CUDA_COURSE_IMPL``), or from a
    submission being graded (``$CUDA_COURSE_SUBMISSION``). Instances are shared per settings, so built
    modules are reused across calls in one process.
    """
    key = (name, str(lesson_dir(name, impl)), backend_name(backend), check, timeout_s)
    if key not in _LESSONS:
        _LESSONS[key] = Lesson(name, impl=impl, backend=backend, check=check, timeout_s=timeout_s)
    return _LESSONS[key]
