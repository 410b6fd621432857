"""``python -m cudacourse grade``: grade the course's kernels, or learners' submissions, task by task.

What it does, in order:

1. **Stage.** Into a fresh folder it copies the instructor's harness (``cudacourse/``, the lessons'
   graded test files, ``tests/conftest.py``, the ``--hidden`` test files) and only the *kernel files*
   (``.cu``/``.cuh``) of the graded lessons: from ``DIR/lessons/NN_topic/`` for a ``--submission``, else
   from this checkout's ``lessons/`` or ``solutions/`` (``--impl``). Nothing else of a submission is
   used, so an edited ``tests/`` folder in it changes nothing.
2. **Screen.** Every submitted kernel file is checked before it is built (:func:`screen_kernel_file`):
   kernel-only exercise files may include CUDA and C++ standard headers only (no torch, no relative
   paths leaving the lesson, no file or process calls), and lesson 01's ``relu_torch.cu`` (the one file
   allowed torch) must launch the learner's kernel with ``<<<...>>>`` and call no torch operator that
   would compute the answer. A rejected file is staged so that it fails to build at once, so exactly
   the tasks that need it fail, with the reason.
3. **Collect** the tasks once (``pytest --collect-only`` with the course plugin): a task is every test
   carrying ``@pytest.mark.task(ID)``, public and hidden ones together.
4. **Run.** The tasks of a lesson share one pytest process (split over ``--jobs`` processes when
   there is room), in a private copy of the staged folder ("slot") that is restored from its pristine
   manifest before each process and compared after it. The lesson's kernel files are built first (up
   to ``--build-timeout``); then a watchdog stops a process whose current test case has run for more
   than ``--timeout`` s. A case that crashes or hangs fails its own task (the message names it) and the
   unfinished tasks go on in a fresh process; on a GPU every task that failed in company is graded
   again in a process of its own, and that verdict counts. So a crash, an endless loop, an illegal
   address or a corrupted CUDA context costs only its own task, and a file changed by the submission's code fails
   the task that changed it (the change is undone). Inputs are drawn from a seed chosen afresh for the
   run (``--seed`` replays one), so answers cached from the public tests do not survive.
5. **Report.** A points table on stdout, and ``--json``, ``--junit``, ``--markdown`` files, always
   written (a grading problem is recorded in them too). The exit code says whether grading worked (0),
   not the score; 2 means the grader itself could not grade (bad arguments, broken instructor tests).

JSON schema (fixed)::

    {"backend", "device", "impl", "earned", "possible", "not_graded",
     "tasks": [{"id", "lesson", "title", "points", "earned", "status": "pass|fail|not-graded", "message"}]}

``possible`` counts every task's points, ``not_graded`` the points of tasks that need a GPU.

``--batch PARENT`` grades every sub-folder of PARENT as one submission in one run; ``--json``,
``--junit`` and ``--markdown`` then name folders that receive ``<name>.json`` etc., and the JSON folder
also gets ``gradebook.csv``.

This isolates against accidents and naive cheating, not against hostile native code: a kernel runs as
the grading user. Grade in a throwaway container or CI runner (docs/INSTRUCTORS.md).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import csv
import hashlib
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudacourse.pytest_plugin import (
    TaskResult,
    TestRecord,
    fold_tasks,
    format_points,
    lesson_of,
    points_table,
    trim_message,
)
from cudacourse.source import mask

COURSE_ROOT = Path(__file__).resolve().parent.parent
KERNEL_SUFFIXES = (".cu", ".cuh")
TORCH_ALLOWED_FILES = {("01_relu", "relu_torch.cu")}
EXIT_OK, EXIT_GRADER_ERROR = 0, 2

# ----------------------------------------------------------------------------------------------------
# Screening kernel files (pure-CUDA contract)
# ----------------------------------------------------------------------------------------------------

CXX_STD_HEADERS = frozenset("""
algorithm any array atomic barrier bit bitset cassert ccomplex cctype cerrno cfenv cfloat charconv chrono
cinttypes ciso646 climits clocale cmath codecvt compare complex concepts condition_variable coroutine
csetjmp csignal cstdalign cstdarg cstdbool cstddef cstdint cstdio cstdlib cstring ctgmath ctime cuchar
cwchar cwctype deque exception execution expected format forward_list functional initializer_list
iomanip ios iosfwd iostream istream iterator latch limits list locale map memory memory_resource mutex
new numbers numeric optional ostream print queue random ranges ratio regex scoped_allocator semaphore
set shared_mutex source_location span sstream stack stdexcept stop_token streambuf string string_view
system_error thread tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray
variant vector version
assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h setjmp.h
signal.h stdalign.h stdarg.h stdbool.h stddef.h stdint.h stdio.h stdlib.h string.h tgmath.h time.h
uchar.h wchar.h wctype.h
""".split())
# Standard headers whose only use in a kernel file would be touching files or processes.
CXX_BANNED_STD = frozenset({"fstream", "filesystem", "thread", "csignal", "signal.h", "future"})
CUDA_HEADERS = frozenset("""
cuda.h cuda_runtime.h cuda_runtime_api.h device_launch_parameters.h device_functions.h
cuda_fp16.h cuda_fp16.hpp cuda_bf16.h cuda_bf16.hpp cuda_fp8.h math_constants.h math_functions.h
cooperative_groups.h mma.h cuda_pipeline.h cuda_pipeline_primitives.h cuda_awbarrier.h
cuda_awbarrier_primitives.h sm_20_atomic_functions.h sm_60_atomic_functions.h vector_types.h
vector_functions.h builtin_types.h driver_types.h crt/host_defines.h
""".split())
CUDA_HEADER_PREFIXES = ("cooperative_groups/", "cuda/std/", "cuda/barrier", "cuda/pipeline", "cuda/annotated_ptr",
                        "cuda/atomic", "cuda/latch", "cuda/semaphore", "cuda/ptx")
# Host calls that read or write files, start processes or load code: never needed by a kernel file.
BANNED_CALLS = re.compile(
    r"\b(fopen|freopen|fdopen|tmpfile|ofstream|ifstream|fstream|filebuf|system|popen|execv|execve|execvp|execl|"
    r"execlp|execle|fork|vfork|dlopen|dlsym|syscall|unlink|unlinkat|rmdir|truncate|ftruncate|chmod|rename|"
    r"remove|mkdir|getenv|setenv|putenv)\s*\(")
BANNED_NAMESPACES = re.compile(r"\bstd\s*::\s*filesystem\b|\b(torch|at|c10|ATen|pybind11)\s*::")
TORCH_ANSWER_OPS = re.compile(
    r"\b(?:torch|at)\s*::\s*(?:relu_?|clamp\w*|threshold\w*|maximum|max|where|nn\b|native\b|leaky_relu|"
    r"hardtanh|gelu|_?cast|matmul|mm|sum|mul|where|abs|sign|heaviside|masked_fill)\b"
    r"|\.\s*(?:relu_?|clamp\w*|threshold_?|maximum|max|where|masked_fill_?|mul_?|abs|gelu|heaviside|sign)\s*\(")


@dataclass
class Rejection:
    """A submitted kernel file the grader refused to build."""

    lesson: str
    file: str
    reasons: list[str]

    def text(self) -> str:
        """One paragraph saying which file was rejected and why."""
        return (f"lessons/{self.lesson}/{self.file} was rejected before building: " + "; ".join(self.reasons)
                + ". Exercise files hold plain CUDA C++ (see docs/CONTRIBUTING.md).")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def header_allowed(name: str, lesson_files: set[str]) -> str | None:
    """None if ``#include`` of ``name`` is allowed in a kernel-only file, else why not."""
    if name.startswith("/") or ".." in name.split("/") or "\\" in name:
        return f"#include \"{name}\" points outside the lesson folder"
    if "/" not in name and name in lesson_files:
        return None  # a header of this lesson (its content is screened too)
    if name in CXX_BANNED_STD:
        return f"#include <{name}>: file, thread or signal access is not allowed in a kernel file"
    if name in CXX_STD_HEADERS or name in CUDA_HEADERS or name.startswith(CUDA_HEADER_PREFIXES):
        return None
    if name.split("/")[0] in ("torch", "ATen", "c10", "pybind11", "Python.h"):
        return f"#include <{name}>: torch headers are not allowed in a kernel-only exercise file"
    return f"#include <{name}>: only CUDA and C++ standard headers may be included"


def tensor_functions(masked: str) -> list[tuple[str, str]]:
    """(name, body) of every function returning ``torch::Tensor`` / ``at::Tensor`` in masked source."""
    out = []
    for m in re.finditer(r"^\s*(?:static\s+|inline\s+)*(?:torch|at)\s*::\s*Tensor\s+(\w+)\s*\([^;{]*?\)\s*\{",
                         masked, re.M):
        depth, i = 1, m.end()
        while i < len(masked) and depth:
            depth += {"{": 1, "}": -1}.get(masked[i], 0)
            i += 1
        out.append((m.group(1), masked[m.end():i]))
    return out


def screen_kernel_file(lesson: str, name: str, text: str, lesson_files: set[str]) -> list[str]:
    """Reasons to reject one submitted kernel file (empty when it is acceptable).

    Kernel-only files: no torch, no headers beyond CUDA and the C++ standard library (and the lesson's
    own ``.cuh`` files), no ``#include`` through a macro, no file/process/environment calls. The torch
    binding exercise (lesson 01 ``relu_torch.cu``) may include torch but must launch a kernel with
    ``<<<...>>>`` and call no torch operator that computes the answer.
    """
    reasons: list[str] = []
    masked = mask(text)
    torch_ok = (lesson, name) in TORCH_ALLOWED_FILES
    for m in re.finditer(r"^[ \t]*#[ \t]*include\b(.*)$", masked, re.M):
        raw = text[m.start(1):m.end(1)].strip()
        inc = re.match(r'[<"]([^>"]+)[>"]', raw)
        line = _line_of(text, m.start())
        if not inc:
            reasons.append(f"line {line}: #include through a macro is not allowed")
            continue
        hdr = inc.group(1).strip()
        if torch_ok and hdr.split("/")[0] in ("torch", "ATen", "c10"):
            continue
        why = header_allowed(hdr, lesson_files)
        if why:
            reasons.append(f"line {line}: {why}")
    if re.search(r"\b__has_include\b|^[ \t]*#[ \t]*(?:import|include_next)\b", masked, re.M):
        reasons.append("#include_next, #import and __has_include are not allowed")
    for m in BANNED_CALLS.finditer(masked):
        reasons.append(f"line {_line_of(text, m.start())}: calls {m.group(1)}(): kernel files may not touch "
                       "files, processes or the environment")
    if torch_ok:
        for m in TORCH_ANSWER_OPS.finditer(masked):
            reasons.append(f"line {_line_of(text, m.start())}: `{m.group(0).strip()}` computes with a torch "
                           "operator; relu_forward must launch your relu_torch_kernel")
        for name, body_text in tensor_functions(masked):
            if "<<<" not in body_text and not re.match(r"\s*(TORCH_CHECK\s*\(\s*false\b|throw\b)", body_text):
                # (a body that starts by throwing is an untouched stub: it fails at run time with its TODO)
                reasons.append(f"{name}() launches no kernel (no <<<...>>>): it must launch your kernel, not "
                               "compute with torch")
    else:
        for m in BANNED_NAMESPACES.finditer(masked):
            reasons.append(f"line {_line_of(text, m.start())}: `{m.group(0).strip()}` is not allowed in a "
                           "kernel-only exercise file (no torch, no filesystem)")
    # One reason per line is enough.
    seen: set[str] = set()
    out = []
    for r in reasons:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


# ----------------------------------------------------------------------------------------------------
# Staging
# ----------------------------------------------------------------------------------------------------


def _ignore(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("__pycache__", ".cudacourse-build", ".pytest_cache") or n.endswith(".pyc")}


def manifest(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``root``."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() or p.is_symlink():
            try:
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
            except OSError:
                out[str(p.relative_to(root))] = "unreadable"
    return out


def restore(slot: Path, pristine: Path, ref: dict[str, str]) -> list[str]:
    """Make ``slot`` identical to ``pristine`` again; returns the relative paths that differed."""
    now = manifest(slot)
    changed = sorted(set(now) ^ set(ref) | {k for k in now.keys() & ref.keys() if now[k] != ref[k]})
    for rel in changed:
        dst = slot / rel
        if dst.is_symlink() or dst.is_file():
            dst.unlink()
        elif dst.is_dir():
            shutil.rmtree(dst)
        if rel in ref:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pristine / rel, dst)
    # Remove folders the submission created.
    for d in sorted((p for p in slot.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()) and not (pristine / d.relative_to(slot)).is_dir():
            d.rmdir()
    return changed


@dataclass
class Submission:
    """One thing to grade: a learner's folder, or this checkout's lessons/ or solutions/."""

    name: str
    source: Path | None  # the submission folder, None for the checkout itself
    impl: str  # student | solution | submission
    rejections: list[Rejection] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    pristine: Path | None = None
    manifest: dict[str, str] = field(default_factory=dict)
    warm: set[tuple[str, str]] = field(default_factory=set)  # (slot, lesson) pairs built for this submission


def stage_harness(dst: Path, lessons: list[str], hidden: Path | None, course: Path) -> None:
    """Copy the instructor's package, graded tests and hidden tests into ``dst``."""
    shutil.copytree(course / "cudacourse", dst / "cudacourse", ignore=_ignore)
    (dst / "tests").mkdir()
    conftest = course / "tests" / "conftest.py"
    if conftest.exists():
        shutil.copy2(conftest, dst / "tests" / "conftest.py")
    else:
        (dst / "tests" / "conftest.py").write_text('pytest_plugins = ["cudacourse.pytest_plugin"]\n')
    for lesson in lessons:
        for f in lesson_test_files(course, lesson):
            shutil.copy2(f, dst / "tests" / f.name)
    if hidden is not None:
        public = {p.name for p in (dst / "tests").glob("*.py")} - {"conftest.py"}
        clash = sorted(p.name for p in hidden.rglob("test_*.py") if p.name in public)
        if clash:
            raise GradingError(f"--hidden {hidden}: {', '.join(clash)} has the name of a public test file; "
                               "rename it (e.g. test_01_relu_hidden.py)")
        shutil.copytree(hidden, dst / "hidden", ignore=_ignore)
        if not (dst / "hidden" / "conftest.py").exists():
            (dst / "hidden" / "conftest.py").write_text("")
    (dst / "pytest.ini").write_text(
        "[pytest]\n"
        "# Written by cudacourse.grade: the instructor's settings, whatever the submission holds.\n"
        "addopts = --strict-markers -p no:cacheprovider\n"
        "pythonpath = .\n")
    for lesson in lessons:  # empty until stage_kernels; lets lesson_of() map test files to lessons
        (dst / "lessons" / lesson).mkdir(parents=True)


def lesson_test_files(course: Path, lesson: str) -> list[Path]:
    """The graded test files of a lesson in the instructor's checkout (``tests/test_NN_*.py``)."""
    num = lesson[:2]
    return sorted(p for p in (course / "tests").glob(f"test_{num}_*.py") if lesson_of(p) == lesson)


def course_kernel_dir(course: Path, lesson: str, impl: str) -> Path:
    """Where this checkout keeps a lesson's kernels for ``impl``."""
    return course / ("solutions" if impl == "solution" else "lessons") / lesson


def exercise_py_files(course: Path, lesson: str) -> set[str]:
    """Python files a learner writes in a lesson (those with solution markers, e.g. 04's decoder.py)."""
    d = course_kernel_dir(course, lesson, "solution")
    return {p.name for p in d.glob("*.py") if "BEGIN SOLUTION" in p.read_text(errors="replace")}


# A learner's Python exercise file runs inside the test process, so it may use only these modules and
# may not reach the file system, the interpreter or other modules' attributes.
PY_ALLOWED_IMPORTS = {"__future__", "math", "typing", "dataclasses", "collections", "collections.abc", "torch",
                      "torch.nn.functional", "cudacourse", "cudacourse.check"}
PY_FORBIDDEN_NAMES = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "setattr",
                      "delattr", "breakpoint", "input", "__builtins__", "importlib", "sys", "os", "subprocess"}


def screen_python_file(name: str, text: str) -> list[str]:
    """Reasons to reject a learner's Python exercise file (empty when it is acceptable)."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []  # a syntax error fails its task with Python's own message
    reasons: list[str] = []
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imported.add((a.asname or a.name).split(".")[0])
                if a.name not in PY_ALLOWED_IMPORTS:
                    reasons.append(f"{name}:{node.lineno}: import {a.name} is not allowed "
                                   f"(allowed: {', '.join(sorted(PY_ALLOWED_IMPORTS))})")
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "") not in PY_ALLOWED_IMPORTS:
                reasons.append(f"{name}:{node.lineno}: from {node.module} import ... is not allowed")
            imported.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Name) and node.id in PY_FORBIDDEN_NAMES:
            reasons.append(f"{name}:{node.lineno}: '{node.id}' is not allowed in an exercise file")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr != "__init__":
            reasons.append(f"{name}:{node.lineno}: dunder attribute '{node.attr}' is not allowed")
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            root = t
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported and root is not t:
                reasons.append(f"{name}:{node.lineno}: assigning into the imported module '{root.id}' "
                               "(monkeypatching) is not allowed")
    return reasons


def stage_kernels(sub: Submission, dst: Path, lessons: list[str], course: Path) -> None:
    """Copy (and screen) the kernel files and Python exercise files into ``dst/lessons``."""
    for lesson in lessons:
        py_files = exercise_py_files(course, lesson)
        expected = sorted(p.name for p in course_kernel_dir(course, lesson, "solution").glob("*")
                          if p.suffix in KERNEL_SUFFIXES or p.name in py_files) or sorted(
            p.name for p in course_kernel_dir(course, lesson, "student").glob("*") if p.suffix in KERNEL_SUFFIXES)
        src_dir = (sub.source / "lessons" / lesson) if sub.source else course_kernel_dir(course, lesson, sub.impl)
        out = dst / "lessons" / lesson
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*"):
            old.unlink()
        files = sorted(p for p in src_dir.glob("*") if (p.suffix in KERNEL_SUFFIXES or p.name in py_files)
                       and p.is_file() and not p.is_symlink()) if src_dir.is_dir() else []
        names = {p.name for p in files}
        sub.missing += [f"lessons/{lesson}/{n}" for n in expected if n not in names]
        for p in files:
            text = p.read_text(errors="replace")
            if sub.source is not None and p.suffix == ".py":
                reasons = screen_python_file(p.name, text)
                if reasons:
                    sub.rejections.append(Rejection(lesson, p.name, reasons))
                    text = f"raise ImportError({('rejected by the grader: ' + reasons[0])!r})\n"
            elif sub.source is not None:
                reasons = screen_kernel_file(lesson, p.name, text, names)
                if reasons:
                    rej = Rejection(lesson, p.name, reasons)
                    sub.rejections.append(rej)
                    # The first line becomes a missing include: the build stops at once (nvcc and g++
                    # treat it as fatal) with a message that says why, and later lines keep their numbers.
                    _first, nl, rest = text.partition("\n")
                    text = f'#include "REJECTED_BY_THE_GRADER_see_the_report.h"  // {p.name}{nl}{rest}'
            (out / p.name).write_text(text)


# ----------------------------------------------------------------------------------------------------
# Collecting tasks
# ----------------------------------------------------------------------------------------------------


@dataclass
class TaskSpec:
    """One task to run: its id, lesson and the test files holding its cases."""

    id: str
    lesson: str
    title: str
    points: float
    files: list[str]
    hidden_cases: int = 0


class GradingError(Exception):
    """The grader itself could not grade (not the submission's fault)."""


def _python() -> str:
    return sys.executable


def _child_env(slot: Path, seed: int, backend: str | None, build_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_COURSE_", "PYTEST_"))}
    env.update({
        "CUDA_COURSE_SUBMISSION": str(slot), "CUDA_COURSE_IMPL": "student", "CUDA_COURSE_SEED": str(seed),
        "CUDA_COURSE_BUILD": str(build_dir), "PYTHONPATH": str(slot), "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    })
    if backend and backend != "auto":
        env["CUDA_COURSE_BACKEND"] = backend
    return env


def test_paths(slot: Path, lessons: list[str], hidden: bool) -> list[str]:
    """Test files (relative to the slot) of the graded lessons, hidden ones included."""
    out = [str(p.relative_to(slot)) for p in sorted((slot / "tests").glob("test_*.py")) if lesson_of(p) in lessons]
    if hidden and (slot / "hidden").is_dir():
        out += [str(p.relative_to(slot)) for p in sorted((slot / "hidden").rglob("test_*.py"))
                if lesson_of(p) in lessons]
    return out


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines the plugin wrote (a torn last line is dropped)."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def collect_tasks(slot: Path, lessons: list[str], seed: int, backend: str | None, build_dir: Path,
                  timeout: float) -> list[TaskSpec]:
    """Collect every task of the graded lessons (public and hidden tests) in one pytest process."""
    paths = test_paths(slot, lessons, hidden=True)
    if not paths:
        raise GradingError(f"no graded test files for lessons {', '.join(lessons)} (expected tests/test_NN_*.py)")
    report = slot.parent / f"collect-{slot.name}.jsonl"
    report.unlink(missing_ok=True)
    cmd = [_python(), "-m", "pytest", "-q", "--collect-only", "-c", str(slot / "pytest.ini"), "--rootdir",
           str(slot), "-p", "cudacourse.pytest_plugin", "--cc-report", str(report), *paths]
    try:
        proc = subprocess.run(cmd, cwd=slot, env=_child_env(slot, seed, backend, build_dir), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise GradingError(f"collecting the tests took more than {timeout:g} s") from e
    if proc.returncode not in (0,):
        raise GradingError("collecting the instructor's tests failed (pytest exit code "
                           f"{proc.returncode}):\n" + _tail(proc.stdout + proc.stderr, 40))
    tasks: dict[tuple[str, str], TaskSpec] = {}
    for r in read_records(report):
        if r.get("event") != "collected" or r.get("task") is None:
            continue
        key = (r["lesson"], r["task"])
        rel = str(Path(r["file"]).resolve().relative_to(slot.resolve()))
        t = tasks.get(key)
        if t is None:
            t = tasks[key] = TaskSpec(r["task"], r["lesson"], r["title"], r["points"], [])
        if rel not in t.files:
            t.files.append(rel)
        t.points = max(t.points, r["points"])
        if rel.startswith("hidden/"):
            t.hidden_cases += 1
    if not tasks:
        raise GradingError(f"no task-marked tests found in {', '.join(paths)}")
    return sorted(tasks.values(), key=lambda t: (t.lesson, _sort_id(t.id)))


def _sort_id(tid: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-]", tid))


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ----------------------------------------------------------------------------------------------------
# Running one task
# ----------------------------------------------------------------------------------------------------

_EXIT_GRACE_S = 10.0  # how long a pytest process may take to exit after its last test reported
_SIGNALS = {getattr(signal, n): n for n in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE", "SIGKILL", "SIGTERM")
            if hasattr(signal, n)}


@dataclass
class Settings:
    """What every task run needs to know."""

    lessons: list[str]
    seed: int
    backend: str | None
    timeout: float
    build_timeout: float
    build_dir: Path
    hidden_feedback: str
    sanitize: bool
    backend_name: str = "sim"
    slots: queue.Queue[Path] = field(default_factory=queue.Queue)  # working folders, one per job


_LIVE: set[subprocess.Popen[Any]] = set()  # child processes running now (stopped if the grader is stopped)


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


@dataclass
class _Run:
    """What one pytest process over a group of tasks left behind."""

    collected: dict[str, dict[str, Any]]
    results: dict[str, dict[str, Any]]
    culprit: str | None  # the test that was running when the process died or stalled
    timed_out: bool
    rc: int
    output: str
    tampered: list[str]
    limit: float


def _run_pytest(sub: Submission, slot: Path, tasks: list[TaskSpec], st: Settings, tag: str) -> _Run:
    """Run the tests of ``tasks`` in one pytest process in ``slot`` under a progress watchdog.

    Each lesson's kernel files are built first (:func:`_warm_up`, up to ``st.build_timeout``); the
    watchdog then stops the process when one test case runs longer than ``st.timeout``.
    """
    assert sub.pristine is not None
    restore(slot, sub.pristine, sub.manifest)
    report = slot.parent / f"{sub.pristine.name}-{slot.name}-{tag}.jsonl"
    report.unlink(missing_ok=True)
    log = slot.parent / f"{sub.pristine.name}-{slot.name}-{tag}.log"
    for lesson in sorted({t.lesson for t in tasks}):
        if (slot.name, lesson) not in sub.warm:
            _warm_up(sub, slot, lesson, st)
    files = sorted({f for t in tasks for f in t.files})
    cmd = [_python(), "-m", "pytest", "-q", "-c", str(slot / "pytest.ini"), "--rootdir", str(slot),
           "-p", "cudacourse.pytest_plugin", "--cc-report", str(report), "--tb=short", "-p", "no:randomly"]
    for t in tasks:
        cmd += ["--cc-task", t.id]
    cmd += files
    timed_out = False
    limit = 0.0
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, cwd=slot, env=_child_env(slot, st.seed, st.backend, st.build_dir),
                                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        _LIVE.add(proc)
        size, last = -1, time.monotonic()
        finished_at: float | None = None
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            try:
                now_size = report.stat().st_size
            except OSError:
                now_size = 0
            if now_size != size:
                size, last = now_size, time.monotonic()
                if finished_at is None and any(e.get("event") == "finished" for e in read_records(report)):
                    finished_at = time.monotonic()
            if finished_at is not None and time.monotonic() - finished_at > _EXIT_GRACE_S:
                _kill_group(proc)  # every test has reported; only the interpreter's exit is stuck
                proc.wait()
                rc = next(int(e["exitstatus"]) for e in read_records(report) if e.get("event") == "finished")
                break
            # Before the first test starts, pytest imports torch and the tests: allow a minute for that.
            limit = st.timeout + (60.0 if size <= 0 else 0.0)
            if time.monotonic() - last > limit:
                timed_out = True
                _kill_group(proc)
                rc = proc.wait()
                break
    # Reap anything the tests left running in their session (a forked child of a hostile kernel).
    _kill_group(proc)
    _LIVE.discard(proc)
    events = read_records(report)
    collected = {e["nodeid"]: e for e in events if e.get("event") == "collected"}
    results = {e["nodeid"]: e for e in events if e.get("event") == "result"}
    started = [e["nodeid"] for e in events if e.get("event") == "start"]
    culprit = next((n for n in reversed(started) if n not in results), None)
    tampered = restore(slot, sub.pristine, sub.manifest)
    return _Run(collected, results, culprit, timed_out, rc, log.read_text(errors="replace"), tampered, limit)


_WARM_UP = """
import os
import sys
import cudacourse as cc
m = cc.lesson(sys.argv[1])
for f in m.files():
    try:
        m.module(f.name)
    except Exception as e:
        print(f"{f.name}: {type(e).__name__}")
sys.stdout.flush()
os._exit(0)  # never wait on a slow interpreter exit
"""


def _warm_up(sub: Submission, slot: Path, lesson: str, st: Settings) -> None:
    """Build every kernel file of ``lesson`` in ``slot`` (a cold build) before the tests run.

    Building runs none of the submission's code, so the tests' watchdog can then hold each case to
    ``--timeout`` alone. A file that does not compile is left to the tests, which report it.
    """
    assert sub.pristine is not None
    sub.warm.add((slot.name, lesson))
    proc = subprocess.Popen([_python(), "-c", _WARM_UP, lesson], cwd=slot,
                            env=_child_env(slot, st.seed, st.backend, st.build_dir), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _LIVE.add(proc)
    try:
        proc.wait(timeout=st.build_timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)  # the tests will build (and time out) and say so
        proc.wait()
    finally:
        _LIVE.discard(proc)


def _crash_note(run: _Run) -> str:
    if run.timed_out:
        return (f"timed out: one case ran for more than {run.limit:g} s (an endless loop? a kernel or launcher "
                "that never returns?); the process was stopped")
    if run.rc < 0 or run.rc > 5:
        sig = _SIGNALS.get(-run.rc, f"signal {-run.rc}") if run.rc < 0 else f"exit code {run.rc}"
        return (f"the test process died ({sig}): a crash, e.g. a wild pointer in host code or a corrupted "
                "CUDA context")
    if run.rc in (2, 3, 4):
        return f"pytest could not run this task's tests (exit code {run.rc}):\n" + _tail(run.output, 12)
    return ""


def _records(task: TaskSpec, run: _Run) -> list[TestRecord]:
    keys = ("nodeid", "file", "lesson", "task", "points", "title", "gpu", "params", "outcome", "message",
            "exc_type", "duration")
    out = []
    for nodeid, c in run.collected.items():
        if c.get("task") != task.id or c.get("lesson") != task.lesson:
            continue
        r = run.results.get(nodeid, c)
        rec = TestRecord(**{k: r[k] for k in keys})
        if nodeid not in run.results:
            rec.outcome = "not-run"
        out.append(rec)
    return out


def _verdict(sub: Submission, task: TaskSpec, recs: list[TestRecord], st: Settings, note: str = "",
             culprit: str | None = None, timed_out: bool = False, tampered: list[str] | None = None) -> TaskResult:
    """Fold a task's records (after its run) into a TaskResult with feedback."""
    for r in recs:
        if r.outcome == "not-run":
            r.outcome = "failed"
            if r.nodeid == culprit:
                r.message, r.exc_type = note or "this case never finished", "Timeout" if timed_out else "Crash"
            else:
                r.message = "not run: an earlier case of this task " + ("hung" if timed_out else "crashed")
                r.exc_type = "NotRun"
    if not recs:
        result = TaskResult(task.id, task.lesson, task.title, task.points, 0.0, "fail",
                            note or "no test of this task ran")
    else:
        recs.sort(key=lambda r: 0 if r.nodeid == culprit else (1 if r.exc_type != "NotRun" else 2))
        result = fold_tasks(recs)[0]
        result.title, result.points = task.title, task.points
        result.earned = result.points if result.status == "pass" else 0.0
    if tampered:
        result.status, result.earned = "fail", 0.0
        shown = ", ".join(tampered[:5]) + (" ..." if len(tampered) > 5 else "")
        result.message = (f"your code changed files of the grading harness while this task ran ({shown}). "
                          "The changes were undone and the task fails: kernels and launchers must not touch "
                          "files.\n" + result.message).strip()
    if result.status == "fail":
        result.message = _feedback(result, sub, st)
    return result


def run_group(sub: Submission, tasks: list[TaskSpec], st: Settings) -> list[TaskResult]:
    """Grade ``tasks`` of one submission: together in one process, each failure confirmed alone.

    The group runs in one pytest process. A case that crashes or stalls fails its own task; the tasks
    not finished yet run again in a fresh process. On a GPU every task that failed in company is then
    graded again in a process of its own, and that verdict counts, so a kernel that corrupts the CUDA
    context costs only its own task (the simulator runs kernels in a worker process, so its failures
    in company stand). If the group changed harness files, every task is
    graded again alone, so the change is pinned on the task that made it.
    """
    final: dict[str, TaskResult] = {}
    remaining = list(tasks)
    confirm: list[TaskSpec] = []
    round_no = 0
    while remaining:
        round_no += 1
        alone = len(remaining) == 1
        slot = st.slots.get()
        try:
            run = _run_pytest(sub, slot, remaining, st, f"{remaining[0].lesson}-{remaining[0].id}-r{round_no}")
        finally:
            st.slots.put(slot)
        if run.tampered and not alone:
            confirm += remaining
            break
        note = _crash_note(run)
        progressed = False
        nxt = []
        for t in remaining:
            recs = _records(t, run)
            unfinished = [r for r in recs if r.outcome == "not-run"]
            holds_culprit = any(r.nodeid == run.culprit for r in recs)
            if holds_culprit or not unfinished or alone or not run.collected:
                if not recs and not alone and run.collected:
                    nxt.append(t)  # its tests were not collected in company (should not happen)
                    continue
                v = _verdict(sub, t, recs, st, note, run.culprit, run.timed_out, run.tampered if alone else None)
                # On a GPU a failure may come from a context an earlier case corrupted: confirm it alone.
                # The simulator runs kernels in a worker process per module, so its verdicts in company stand.
                if (v.status == "fail" and not alone and st.backend_name == "cuda"
                        and not (holds_culprit and run.timed_out)):
                    confirm.append(t)
                else:
                    final[t.id] = v
                progressed = True
            else:
                nxt.append(t)
        if not progressed:
            for t in nxt:
                final[t.id] = _verdict(sub, t, _records(t, run), st, note, run.culprit, run.timed_out)
            break
        remaining = nxt
    for t in confirm:
        final[t.id] = run_group(sub, [t], st)[0]
    out = [final[t.id] for t in tasks if t.id in final]
    if st.sanitize and st.backend_name == "cuda":
        for r in out:
            if r.status == "fail":
                task = next(t for t in tasks if t.id == r.id)
                r.message += sanitizer_report(sub, task, st)
    return out


def safe_run_group(sub: Submission, tasks: list[TaskSpec], st: Settings) -> list[TaskResult]:
    """:func:`run_group`, turning any grader exception into failed tasks (grading goes on)."""
    try:
        return run_group(sub, tasks, st)
    except Exception as e:  # noqa: BLE001 - one broken group must never stop the grading
        return [TaskResult(t.id, t.lesson, t.title, t.points, 0.0, "fail",
                           f"the grader could not run this task: {type(e).__name__}: {e}") for t in tasks]


def _int_sizes(params: dict[str, Any]) -> list[int]:
    out = []
    for k, v in params.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, int) and k.lower() not in ("seed", "blocks", "block", "threads"):
            out.append(v)
        elif isinstance(v, list) and all(isinstance(e, int) for e in v):
            out += v
    return out


HINTS = {
    "bounds": "Hint: the last block (or tile) is only partly inside the data when the size is not a multiple of "
              "the block size; guard every access with a bounds check such as `if (i < n)`.",
    "unwritten": "Hint: some outputs were never written: make sure the grid covers every element (round the "
                 "number of blocks up: (n + block - 1) / block) or loop with a grid stride.",
    "race": "Hint: a thread read shared memory another thread writes without a barrier in between: put "
            "__syncthreads() between the writes and the reads (and before the next overwrite).",
    "barrier": "Hint: every thread of a block must reach the same __syncthreads(); do not put one inside a branch "
               "some threads skip (e.g. after `if (i >= n) return;`): guard the work, not the barrier.",
    "timeout": "Hint: check every loop's condition and step (a grid-stride loop must add gridDim.x * blockDim.x) "
               "and that no thread waits for something that never happens.",
    "compile": "Hint: fix the first compiler error; the message names your file and line.",
    "todo": "Hint: this TODO is still the stub; implement it (see the TODO comment for the size and the hint).",
    "mutation": "Hint: inputs are read-only: write only to the output buffer.",
    "hidden": "Hint: the public tests pass but hidden cases fail: your kernel must work for every size and every "
              "input, not only the ones in tests/ (no hard-coded sizes, nothing cached between calls).",
    "crash": "Hint: a crash or illegal address usually means an index out of range in a kernel or a launcher "
             "passing the wrong size; run the task on the simulator (CUDA_COURSE_BACKEND=sim) for a diagnosis.",
}


def choose_hints(recs: list[TestRecord], message: str) -> list[str]:
    """The hints that apply to a failed task, from its failures' types, messages and sizes."""
    failed = [r for r in recs if r.outcome == "failed" and r.exc_type != "NotRun"]
    passed = [r for r in recs if r.outcome == "passed"]
    text = (message + "\n" + "\n".join(r.exc_type + " " + r.message for r in failed)).lower()
    keys: list[str] = []

    def add(k: str) -> None:
        if k not in keys:
            keys.append(k)

    if "compileerror" in text or "unsupportederror" in text or "rejected before building" in text:
        add("compile")
    if "todo(task" in text or "is the kernel body still the stub" in text:
        add("todo")
    if "outofbounds" in text or "out-of-bounds" in text or "out of bounds" in text or "only the tail is wrong" in text:
        add("bounds")
    if "raceerror" in text or " race" in text:
        add("race")
    if "barriererror" in text or "divergent" in text or "deadlock" in text:
        add("barrier")
    if "kerneltimeout" in text or "timed out" in text or "timeout" in text:
        add("timeout")
    if "was modified by the kernel" in text:
        add("mutation")
    if "never written" in text and "todo" not in keys:
        add("unwritten")
    if any(r.exc_type in ("Crash",) for r in failed):
        add("crash")
    # Size pattern: only sizes that are not a multiple of a warp fail while aligned ones pass.
    f_sizes = [s for r in failed for s in _int_sizes(r.params)]
    p_sizes = [s for r in passed for s in _int_sizes(r.params)]
    if f_sizes and p_sizes and all(s % 32 for s in f_sizes) and any(s % 32 == 0 for s in p_sizes):
        add("bounds")
    hidden_failed = [r for r in failed if "/hidden/" in r.file.replace("\\", "/")]
    public_failed = [r for r in failed if r not in hidden_failed]
    public_passed = [r for r in passed if "/hidden/" not in r.file.replace("\\", "/")]
    if hidden_failed and not public_failed and public_passed:
        add("hidden")
    return [HINTS[k] for k in keys]


def _feedback(result: TaskResult, sub: Submission, st: Settings) -> str:
    msg = result.message
    recs = result.tests
    failed = [r for r in recs if r.outcome == "failed"]
    first = failed[0] if failed else None
    if first is not None and "/hidden/" in first.file.replace("\\", "/") and st.hidden_feedback == "brief":
        case = first.nodeid.split("::", 1)[-1]
        msg = f"a hidden case failed: {case} ({first.exc_type or 'assertion'})"
        if len(failed) > 1:
            msg += f"; {len(failed)} of {len(recs)} cases failed"
    rej = [r for r in sub.rejections if r.lesson == result.lesson]
    if rej and ("REJECTED_BY_THE_GRADER" in msg or any(r.exc_type == "CompileError" for r in failed)):
        msg = "\n".join(r.text() for r in rej) + "\n" + msg
    missing = [m for m in sub.missing if f"/{result.lesson}/" in m]
    if missing and ("no launcher" in msg or "AttributeError" in msg or "No such file" in msg):
        msg = f"missing from the submission: {', '.join(missing)}\n" + msg
    hints = choose_hints(recs, msg)
    msg = trim_message(msg, lines=16, chars=2400)
    hints = [h for h in hints if h.split(":", 1)[1].strip()[:40].lower() not in msg.lower()]
    return msg + ("\n" + "\n".join(hints) if hints else "")


def sanitizer_report(sub: Submission, task: TaskSpec, st: Settings) -> str:
    """Run a failed task once under ``compute-sanitizer`` (GPU runners only) and return its first lines.

    Untested in the course's CI (no GPU there); off unless ``--sanitize``.
    """
    tool = shutil.which("compute-sanitizer")
    if not tool:
        return "\n(compute-sanitizer not found on PATH: no sanitizer report)"
    assert sub.pristine is not None
    slot = st.slots.get()
    try:
        restore(slot, sub.pristine, sub.manifest)
        cmd = [tool, "--tool", "memcheck", "--print-limit", "5", _python(), "-m", "pytest", "-q", "-x",
               "-c", str(slot / "pytest.ini"), "--rootdir", str(slot), "-p", "cudacourse.pytest_plugin",
               "--cc-task", task.id, *task.files]
        proc = subprocess.run(cmd, cwd=slot, env=_child_env(slot, st.seed, "cuda", st.build_dir),
                              capture_output=True, text=True, timeout=st.timeout * 5 + st.build_timeout,
                              start_new_session=True)
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        return "\n(compute-sanitizer run timed out)"
    finally:
        restore(slot, sub.pristine, sub.manifest)
        st.slots.put(slot)
    lines = [ln for ln in out.splitlines() if ln.startswith("=========")]
    return "\ncompute-sanitizer:\n" + "\n".join(lines[:20]) if lines else "\ncompute-sanitizer: no errors reported"


# ----------------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------------


@dataclass
class Report:
    """Everything written about one graded submission."""

    backend: str
    device: str
    impl: str
    tasks: list[TaskResult]
    name: str = ""
    seed: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rejected: list[str] = field(default_factory=list)  # submitted files refused before building, with why

    def totals(self) -> tuple[float, float, float]:
        """(earned, possible, not graded)."""
        return (sum(t.earned for t in self.tasks), sum(t.points for t in self.tasks),
                sum(t.points for t in self.tasks if t.status == "not-graded"))

    def to_json(self) -> dict[str, Any]:
        """The report in the course's fixed JSON schema."""
        earned, possible, ng = self.totals()
        return {"backend": self.backend, "device": self.device, "impl": self.impl, "earned": earned,
                "possible": possible, "not_graded": ng,
                "tasks": [{"id": t.id, "lesson": t.lesson, "title": t.title, "points": t.points,
                           "earned": t.earned, "status": t.status, "message": t.message} for t in self.tasks]}


def write_json(rep: Report, path: Path) -> None:
    """Write the JSON report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rep.to_json(), indent=2) + "\n")


def write_junit(rep: Report, path: Path) -> None:
    """Write a JUnit XML file: one testsuite per lesson, one testcase per task."""
    root = ET.Element("testsuites", name=f"cudacourse grade {rep.name}".strip())
    lessons: dict[str, list[TaskResult]] = {}
    for t in rep.tasks:
        lessons.setdefault(t.lesson, []).append(t)
    if rep.errors:
        lessons.setdefault("grader", [])
    for lesson, tasks in lessons.items():
        suite = ET.SubElement(root, "testsuite", name=lesson, tests=str(len(tasks)),
                              failures=str(sum(t.status == "fail" for t in tasks)),
                              skipped=str(sum(t.status == "not-graded" for t in tasks)), errors="0")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="backend", value=rep.backend)
        ET.SubElement(props, "property", name="seed", value=str(rep.seed))
        for t in tasks:
            case = ET.SubElement(suite, "testcase", classname=lesson, name=f"task {t.id}: {t.title}")
            ET.SubElement(ET.SubElement(case, "properties"), "property", name="points",
                          value=f"{format_points(t.earned)}/{format_points(t.points)}")
            if t.status == "fail":
                first = t.message.splitlines()[0] if t.message else "failed"
                ET.SubElement(case, "failure", message=first[:300]).text = t.message
            elif t.status == "not-graded":
                ET.SubElement(case, "skipped", message=t.message or "not graded")
        if lesson == "grader":
            for err in rep.errors:
                case = ET.SubElement(suite, "testcase", classname="grader", name="grading")
                ET.SubElement(case, "error", message=err.splitlines()[0][:300]).text = err
            suite.set("tests", str(len(rep.errors)))
            suite.set("errors", str(len(rep.errors)))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def markdown_report(rep: Report) -> str:
    """A feedback report to post back to the learner (GitHub-flavoured Markdown)."""
    earned, possible, ng = rep.totals()
    title = f"# Grading report{': ' + rep.name if rep.name else ''}"
    lines = [title, "",
             f"**{format_points(earned)} / {format_points(possible)} points**"
             + (f" ({format_points(ng)} not graded here: they need a GPU)" if ng else ""), "",
             f"Backend `{rep.backend}` ({rep.device}); inputs drawn with `CUDA_COURSE_SEED={rep.seed}` "
             f"(replay: `CUDA_COURSE_SEED={rep.seed} python -m pytest tests/`).", ""]
    if rep.rejected:
        lines += ["## Rejected files", "", *[f"- {r}" for r in rep.rejected], ""]
    if rep.errors:
        lines += ["## Grading problems", "", "The grader could not grade everything (not your fault):", ""]
        lines += ["```", *rep.errors, "```", ""]
    lines += ["| task | lesson | title | points | status |", "|---|---|---|---|---|"]
    icon = {"pass": "pass", "fail": "**fail**", "not-graded": "not graded"}
    for t in rep.tasks:
        lines.append(f"| {t.id} | {t.lesson} | {t.title.replace('|', '/')} | "
                     f"{format_points(t.earned)}/{format_points(t.points)} | {icon[t.status]} |")
    failed = [t for t in rep.tasks if t.status == "fail"]
    if failed:
        lines += ["", "## What to fix", ""]
        for t in failed:
            lines += [f"### Task {t.id}: {t.title}", "", "```", t.message.replace("```", "'''"), "```", ""]
    ungraded = [t for t in rep.tasks if t.status == "not-graded"]
    if ungraded:
        lines += ["", "Not graded on this machine: " + ", ".join(f"task {t.id}" for t in ungraded)
                  + " (speed tasks need a GPU)."]
    return "\n".join(lines) + "\n"


def print_report(rep: Report, out: Any = None) -> None:
    """The points table and each failure's first lines, on stdout."""
    out = out or sys.stdout
    head = f"== {rep.name} ==" if rep.name else "== grade =="
    print(f"{head} backend={rep.backend} impl={rep.impl} seed={rep.seed} ({rep.seconds:.0f} s)", file=out)
    for line in points_table(rep.tasks):
        print(line, file=out)
    for t in rep.tasks:
        if t.status == "fail":
            first = "\n    ".join(t.message.splitlines()[:4])
            print(f"  task {t.id} failed: {first}", file=out)
    for r in rep.rejected:
        print(f"  REJECTED: {r}", file=out)
    for e in rep.errors:
        print(f"  GRADING PROBLEM: {e}", file=out)


# ----------------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------------


def parse_lessons(values: list[str] | None, course: Path) -> list[str]:
    """Lesson names from ``--lessons`` (``01``, ``1``, ``01_relu``; comma or space separated)."""
    known = sorted({lesson_of(p) for p in (course / "tests").glob("test_[0-9][0-9]_*.py")})
    if not values:
        return known
    out = []
    for v in (x for val in values for x in re.split(r"[,\s]+", val) if x):
        match = [k for k in known if k == v or k.split("_")[0] == v.zfill(2)]
        if not match:
            raise GradingError(f"--lessons: no graded lesson '{v}' (graded lessons: {', '.join(known) or 'none'})")
        out += [m for m in match if m not in out]
    return out


def resolve_backend(requested: str) -> tuple[str, str]:
    """(backend name, device description) as the child processes will see them."""
    if requested == "sim":
        return "sim", "CPU simulator"
    try:
        if requested != "auto":
            os.environ["CUDA_COURSE_BACKEND"] = requested
        from cudacourse.loader import backend_name

        name = backend_name("auto")
    except Exception as e:  # noqa: BLE001
        raise GradingError(f"--backend {requested}: {e}") from e
    if name == "cuda":
        import torch

        return "cuda", torch.cuda.get_device_name(0)
    return "sim", "CPU simulator"


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m cudacourse grade``."""
    p = argparse.ArgumentParser(prog="python -m cudacourse grade", description=(
        "Grade the course's kernels task by task, each task in its own process. The exit code says whether "
        "grading worked (0) or not (2), never the score."))
    src = p.add_mutually_exclusive_group()
    src.add_argument("--submission", type=Path, metavar="DIR",
                     help="a learner's copy of the course; only DIR/lessons/*/*.cu|.cuh are graded")
    src.add_argument("--batch", type=Path, metavar="PARENT",
                     help="grade every sub-folder of PARENT as one submission (outputs become folders)")
    p.add_argument("--impl", choices=["student", "solution"], default=None,
                   help="without --submission: grade this checkout's lessons/ (student) or solutions/ "
                        "(default $CUDA_COURSE_IMPL, else student)")
    p.add_argument("--lessons", nargs="+", default=None, metavar="LESSON",
                   help="lessons to grade (01_relu, 01, ...); default all")
    p.add_argument("--hidden", type=Path, metavar="DIR",
                   help="instructor test files merged in as extra cases and tasks (same markers)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the JSON report")
    p.add_argument("--junit", type=Path, metavar="OUT", help="write a JUnit XML report")
    p.add_argument("--markdown", type=Path, metavar="OUT", help="write a Markdown feedback report")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds one test case may run before its task fails as hung (default 120)")
    p.add_argument("--build-timeout", type=float, default=300.0,
                   help="seconds to build a lesson's kernel files before its tests run (default 300)")
    p.add_argument("--jobs", "-j", type=int, default=0, help="tasks at a time (default: CPU count, at most 8)")
    p.add_argument("--backend", choices=["auto", "cuda", "sim"], default="auto")
    p.add_argument("--seed", type=int, default=None, help="base seed (default: fresh for every run)")
    p.add_argument("--hidden-feedback", choices=["brief", "full"], default="brief",
                   help="brief: a failed hidden case is named but its values are not shown (default)")
    p.add_argument("--sanitize", action="store_true",
                   help="GPU only: rerun a failed task once under compute-sanitizer and add its report")
    p.add_argument("--course", type=Path, default=COURSE_ROOT, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, default=None, help="keep the staging folders here (debugging)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the totals")
    return p


def _outputs(args: argparse.Namespace, name: str, batch: bool) -> dict[str, Path | None]:
    out: dict[str, Path | None] = {}
    for key, ext in (("json", "json"), ("junit", "xml"), ("markdown", "md")):
        val = getattr(args, key)
        out[key] = None if val is None else (val / f"{name}.{ext}" if batch else val)
    return out


def _write_all(rep: Report, outs: dict[str, Path | None]) -> None:
    if outs["json"]:
        write_json(rep, outs["json"])
    if outs["junit"]:
        write_junit(rep, outs["junit"])
    if outs["markdown"]:
        outs["markdown"].parent.mkdir(parents=True, exist_ok=True)
        outs["markdown"].write_text(markdown_report(rep))


def grade(args: argparse.Namespace) -> list[Report]:
    """Grade what ``args`` names; returns one report per submission (reports are written here too)."""
    course = args.course.resolve()
    impl = args.impl or os.environ.get("CUDA_COURSE_IMPL") or "student"
    if args.batch:
        if not args.batch.is_dir():
            raise GradingError(f"--batch {args.batch}: not a folder")
        subs = [Submission(p.name, p.resolve(), "submission") for p in sorted(args.batch.iterdir()) if p.is_dir()]
        if not subs:
            raise GradingError(f"--batch {args.batch}: no sub-folders to grade")
    elif args.submission:
        if not (args.submission / "lessons").is_dir():
            raise GradingError(f"--submission {args.submission}: no lessons/ folder in it")
        subs = [Submission(args.submission.resolve().name, args.submission.resolve(), "submission")]
    else:
        subs = [Submission("", None, impl)]
    if args.hidden is not None and not args.hidden.is_dir():
        raise GradingError(f"--hidden {args.hidden}: not a folder")
    lessons = parse_lessons(args.lessons, course)
    if not lessons:
        raise GradingError("no graded lessons found (tests/test_NN_*.py)")
    backend, device = resolve_backend(args.backend)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    jobs = args.jobs if args.jobs and args.jobs > 0 else min(8, os.cpu_count() or 1)
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cc-grade-", dir=args.workdir)) if args.workdir else \
        Path(tempfile.mkdtemp(prefix="cc-grade-"))
    build_dir = Path(os.environ.get("CUDA_COURSE_BUILD") or (work / "build"))
    build_dir.mkdir(parents=True, exist_ok=True)
    st = Settings(lessons, seed, None if args.backend == "auto" else args.backend, args.timeout,
                  args.build_timeout, build_dir, args.hidden_feedback, args.sanitize, backend)
    t_start = time.monotonic()
    try:
        harness = work / "harness"
        stage_harness(harness, lessons, args.hidden, course)
        # Collect with the checkout's own kernels staged (collection never builds).
        collect_dir = work / "collect"
        shutil.copytree(harness, collect_dir)
        tasks = collect_tasks(collect_dir, lessons, seed, st.backend, build_dir, args.timeout + args.build_timeout)
        by_lesson: dict[str, list[TaskSpec]] = {}
        for t in tasks:
            by_lesson.setdefault(t.lesson, []).append(t)
        # Groups of tasks that share a process: one per (submission, lesson), split further while
        # there are fewer groups than jobs.
        split = max(1, -(-jobs // (len(subs) * len(by_lesson))))
        groups: list[tuple[int, list[TaskSpec]]] = []
        for i in range(len(subs)):
            for lt in by_lesson.values():
                k = min(split, len(lt))
                groups += [(i, lt[j::k]) for j in range(k)]
        # Working folders ("slots") belong to the jobs, not to the submissions: each run first restores
        # its slot to the submission's pristine tree. Builds are cached by content, so a kernel file that
        # several submissions share (an untouched relu_torch.cu) is built once per slot, not per learner.
        for k in range(max(1, min(jobs, len(groups)))):
            slot = work / f"slot{k}"
            shutil.copytree(harness, slot)
            st.slots.put(slot)
        all_lessons = sorted(set(lessons) | {p.name for p in (course / "solutions").iterdir() if p.is_dir()})
        for i, sub in enumerate(subs):
            sub.pristine = work / f"sub{i:03d}"
            shutil.copytree(harness, sub.pristine)
            # Every lesson's files are staged, graded or not: the lesson 04 capstone runs on the learner's
            # own lesson 02 and 03 kernels.
            stage_kernels(sub, sub.pristine, all_lessons, course)
            sub.manifest = manifest(sub.pristine)
        results: dict[int, dict[str, TaskResult]] = {i: {} for i in range(len(subs))}
        with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
            futs = {pool.submit(safe_run_group, subs[i], g, st): i for i, g in groups}
            for fut in cf.as_completed(futs):
                for r in fut.result():
                    results[futs[fut]][f"{r.lesson}/{r.id}"] = r
        reports = []
        elapsed = time.monotonic() - t_start
        for i, sub in enumerate(subs):
            done = [results[i][f"{t.lesson}/{t.id}"] for t in tasks if f"{t.lesson}/{t.id}" in results[i]]
            reports.append(Report(backend, device, sub.impl, done, name=sub.name, seed=seed, seconds=elapsed,
                                  rejected=[r.text() for r in sub.rejections]))
        return reports
    finally:
        for proc in list(_LIVE):  # stopped (Ctrl-C, SIGTERM from CI): leave no test process behind
            _kill_group(proc)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m cudacourse grade``. Returns 0 when grading worked, 2 when it did not."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # A cancelled CI job sends SIGTERM: unwind (kill the children, remove the work folder) like Ctrl-C.
        signal.signal(signal.SIGTERM, _on_sigterm)
    batch = args.batch is not None
    t0 = time.monotonic()
    try:
        reports = grade(args)
    except GradingError as e:
        rep = Report(args.backend, "unknown", "submission" if (args.submission or batch) else
                     (args.impl or os.environ.get("CUDA_COURSE_IMPL") or "student"), [],
                     name=args.submission.name if args.submission else "", errors=[str(e)])
        names = ([p.name for p in sorted(args.batch.iterdir()) if p.is_dir()]
                 if batch and args.batch.is_dir() else [rep.name or "grade"])
        for n in names:
            rep.name = n if batch else rep.name
            _write_all(rep, _outputs(args, n, batch))
        print(f"cudacourse grade: could not grade: {e}", file=sys.stderr)
        return EXIT_GRADER_ERROR
    except Exception as e:  # noqa: BLE001 - the report must be written whatever happens
        import traceback

        err = f"internal grader error: {type(e).__name__}: {e}\n{traceback.format_exc()}"
        rep = Report(args.backend, "unknown", "submission", [], errors=[err])
        _write_all(rep, _outputs(args, rep.name or "grade", False if not batch else True))
        print(err, file=sys.stderr)
        return EXIT_GRADER_ERROR
    for rep in reports:
        _write_all(rep, _outputs(args, rep.name or "grade", batch))
        if args.quiet:
            e, p, ng = rep.totals()
            print(f"{rep.name or 'grade'}: {format_points(e)} / {format_points(p)} points"
                  + (f" ({format_points(ng)} not graded)" if ng else ""))
        else:
            print_report(rep)
    if batch and args.json:
        with open(args.json / "gradebook.csv", "w", newline="") as f:
            w = csv.writer(f)
            tasks = reports[0].tasks if reports else []
            w.writerow(["submission", "earned", "possible", "not_graded"] + [f"task {t.id}" for t in tasks])
            for rep in reports:
                e, p, ng = rep.totals()
                w.writerow([rep.name, format_points(e), format_points(p), format_points(ng)]
                           + [format_points(t.earned) for t in rep.tasks])
    if not args.quiet:
        print(f"graded {len(reports)} submission(s) in {time.monotonic() - t0:.0f} s")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


__all__ = ["main", "grade", "screen_kernel_file", "Report", "markdown_report", "write_junit", "write_json"]
