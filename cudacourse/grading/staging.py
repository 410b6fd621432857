"""Staging: the instructor's harness and a submission's exercise files in fresh folders, and restoring them."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudacourse.course import Course
from cudacourse.grading.screens import Rejection, screen_kernel_file, screen_python_file, screen_triton_file
from cudacourse.results import GradingError
from cudacourse.sandbox import SourceTooLarge, check_source_size

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


MAX_SOURCE_BYTES = 1 << 20  # a submitted exercise file larger than this is refused unread (1 MiB)


def _rejected_stub(name: str, why: str, python: bool) -> str:
    """What is staged for a rejected file: it fails at once when built or imported, saying why."""
    if python:
        return f"raise ImportError({('rejected by the grader: ' + (why or 'see the report'))!r})\n"
    return f'#include "REJECTED_BY_THE_GRADER_see_the_report.h"  // {name}\n'


class Once:
    """Runs a job once per key; a second caller of the same key waits for it, other keys run at the same time
    (the grader's warm-up builds, shared by every slot of a submission and by every submission of a run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[object, threading.Event] = {}
        self._result: dict[object, Any] = {}

    def run(self, key: object, job: Callable[[], Any]) -> Any:
        """Run ``job`` unless ``key`` ran (or is running) already; return once it has finished, with what the
        job returned (``None`` when it raised: the exception goes to the first caller only)."""
        with self._lock:
            done = self._done.get(key)
            first = done is None
            if done is None:
                done = self._done[key] = threading.Event()
        if not first:
            done.wait()
            return self._result.get(key)
        try:
            self._result[key] = job()
            return self._result[key]
        finally:
            done.set()


class GpuGate:
    """Lets the grader's speed tasks time alone on a GPU while builds go on: a task process that times holds
    the gate exclusively, every other task process shared (builds hold nothing). Correctness comes first: a
    shared request never waits for a waiting speed task, so speed tasks fill the GPU's idle time and cannot
    hold a lesson's correctness tasks back behind every speed task of the run (they cannot starve either:
    correctness work is finite). A hand-written reader-writer lock: the standard library has none, and this
    one is a dozen lines.

    ``expect(n)``/``finished()`` count correctness work queued and not done yet (task groups not started count):
    an exclusive turn also waits for that to reach zero, so a speed task's process started early (its start-up
    overlapping the others' work) never takes the GPU in a gap between two correctness processes."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._ahead = 0

    def expect(self, n: int) -> None:
        """``n`` more groups of correctness work are queued: exclusive turns wait for them."""
        with self._cond:
            self._ahead += n

    def finished(self) -> None:
        """One group counted by :meth:`expect` is done (whatever its outcome)."""
        with self._cond:
            self._ahead -= 1
            self._cond.notify_all()

    def acquire(self, exclusive: bool) -> None:
        """Wait for the gate: ``exclusive`` for a process that times, shared for one that does not."""
        with self._cond:
            if exclusive:
                self._cond.wait_for(lambda: not self._exclusive and self._shared == 0 and self._ahead <= 0)
                self._exclusive = True
            else:
                self._cond.wait_for(lambda: not self._exclusive)
                self._shared += 1

    def release(self, exclusive: bool) -> None:
        """Give back what :meth:`acquire` took."""
        with self._cond:
            if exclusive:
                self._exclusive = False
            else:
                self._shared -= 1
            self._cond.notify_all()


# Two grades on one machine do not share a GpuGate (one per grader process). Measured on a machine of two H200s
# (results/nvidia-h200/two_grades_at_once/): two speed-only grades at once, one per GPU, took 130 s each instead of
# 66 s, and the learner's side of every speed task ran 3-11% slower (its calls cross into the GPU worker, the
# reference's do not) while the references kept their times: the reference solution failed 2.8 once (0.90x against
# 0.9x). So every grader on the machine also takes this file's lock, through flock: shared for task processes that
# do not time, exclusive for the ones that do. flock, not a lock file of our own: the kernel releases it when the
# holder dies, so a killed grade never leaves the machine locked.
HOST_LOCK = Path(tempfile.gettempdir()) / "cudacourse-gpu-turns.lock"


@contextlib.contextmanager
def host_turn(exclusive: bool, path: Path = HOST_LOCK) -> Iterator[None]:
    """Hold this machine's GPU turn (``flock`` on ``path``): exclusive to time, shared to run untimed GPU work."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:  # another user's file we may not even read, a read-only /tmp: grade as before, unlocked
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # (closing the last descriptor releases the lock)


class Builds:
    """The warm-up builds of one submission: one worker per lesson, started once, building the lesson's kernel
    files side by side; a task process waits only for the files its tasks use (``RunSettings.kernels_of``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lessons: set[str] = set()
        self._built: dict[tuple[str, str], threading.Event] = {}

    def event(self, lesson: str, name: str) -> threading.Event:
        """Set once the build of ``name`` has ended (built, failed or stopped)."""
        with self._lock:
            return self._built.setdefault((lesson, name), threading.Event())

    def claim(self, lesson: str) -> bool:
        """True for the first caller of ``lesson``: it starts that lesson's warm-up."""
        with self._lock:
            first = lesson not in self._lessons
            self._lessons.add(lesson)
            return first


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
    builds: Builds = field(default_factory=Builds, repr=False)  # the warm-up builds of its kernel files
    build_slot: Path | None = None  # the folder its warm-up builds run in (a copy of ``pristine`` no test uses)
    to_build: dict[str, list[str]] = field(default_factory=dict)  # lesson -> the kernel files its tasks use
    build_dir: Path | None = None  # its own build cache (None: the run's, for this checkout's own kernels)
    unbuildable: dict[str, float] = field(default_factory=dict)  # "lesson/file" -> build seconds when stopped
    build_errors: dict[str, str] = field(default_factory=dict)  # "lesson/file" -> the warm-up build's compile error


# The instructor's files of a lesson folder that the harness stages: the course model, and the benchmark,
# whose setup a speed test may time (task 6.12). A submission's copies of them are never used.
HARNESS_LESSON_FILES = ("lesson.toml", "bench.py")


def stage_harness(dst: Path, lessons: list[str], hidden: Path | None, course: Course) -> None:
    """Copy the instructor's package, course model, graded tests and hidden tests into ``dst``.

    Every lesson's ``lesson.toml`` comes from the instructor's checkout, so the tests in ``dst`` read the
    instructor's tasks and points whatever a submission holds.
    """
    shutil.copytree(course.root / "cudacourse", dst / "cudacourse", ignore=_ignore)
    (dst / "tests").mkdir()
    conftest = course.tests_dir / "conftest.py"
    if conftest.exists():
        shutil.copy2(conftest, dst / "tests" / "conftest.py")
    else:
        (dst / "tests" / "conftest.py").write_text('pytest_plugins = ["cudacourse.pytest_plugin"]\n')
    for lesson in lessons:
        f = course.tests_dir / course.lesson(lesson).test_file
        if not f.is_file():
            raise GradingError(f"lesson {lesson} has no graded test file {f}")
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
        "# Written by the grader: the instructor's settings, whatever the submission holds.\n"
        "addopts = --strict-markers -p no:cacheprovider -p no:nbval -p no:xdist\n"
        "pythonpath = .\n")
    for info in course:
        (dst / "lessons" / info.id).mkdir(parents=True)
        for name in HARNESS_LESSON_FILES:
            if (course.kernel_dir(info.id, "student") / name).is_file():
                shutil.copy2(course.kernel_dir(info.id, "student") / name, dst / "lessons" / info.id / name)


def stage_kernels(sub: Submission, dst: Path, lessons: list[str], course: Course) -> None:
    """Copy (and screen) each lesson's declared exercise files into ``dst/lessons``; support files come
    from the instructor's checkout. Nothing else of a submission is used."""
    for lesson in lessons:
        info = course.lesson(lesson)
        src_dir = course.files_dir(lesson, sub.impl, sub.source)
        out = dst / "lessons" / lesson
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*"):
            if old.name not in HARNESS_LESSON_FILES:
                old.unlink()
        for name in info.support_files:
            shutil.copy2(course.kernel_dir(lesson, "solution") / name, out / name)
        files = [src_dir / n for n in info.exercise_files
                 if (src_dir / n).is_file() and not (src_dir / n).is_symlink()]
        names = {p.name for p in files} | set(info.support_files)
        sub.missing += [f"lessons/{lesson}/{n}" for n in info.exercise_files if n not in names]
        for p in files:
            if sub.source is not None:
                try:
                    check_source_size([p], MAX_SOURCE_BYTES)
                except SourceTooLarge as e:
                    # Refused unread: building it would cost minutes and fail anyway. Only the tasks of
                    # this file fail, with the reason.
                    sub.rejections.append(Rejection(lesson, p.name, [str(e).replace(str(p), p.name)]))
                    (out / p.name).write_text(_rejected_stub(p.name, "", python=p.name.endswith(".py")))
                    continue
            text = p.read_text(errors="replace")
            if sub.source is not None and p.name in info.python_files + info.triton_files:
                reasons = (screen_triton_file(p.name, text) if p.name in info.triton_files else
                           screen_python_file(p.name, text, allow=info.python_allow))
                if reasons:
                    sub.rejections.append(Rejection(lesson, p.name, reasons))
                    text = _rejected_stub(p.name, reasons[0], python=True)
            elif sub.source is not None:
                reasons = screen_kernel_file(lesson, p.name, text, names, torch_ok=p.name in info.torch_files)
                if reasons:
                    sub.rejections.append(Rejection(lesson, p.name, reasons))
                    # The first line becomes a missing include: the build stops at once (nvcc and g++
                    # treat it as fatal) with a message that says why, and later lines keep their numbers.
                    _first, nl, rest = text.partition("\n")
                    text = _rejected_stub(p.name, "", python=False) + rest
            (out / p.name).write_text(text)
