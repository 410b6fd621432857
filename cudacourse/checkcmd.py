"""``cudacourse check [TASK|LESSON]``: the learner's one way to check work, with full messages.

``cudacourse check 1.1`` runs only task 1.1's cases, ``cudacourse check 01_relu`` (or ``01``, ``1``) a
whole lesson, and ``cudacourse check`` with nothing every lesson the learner has started (an exercise file
that differs from the stub :mod:`cudacourse.stubs` derives from ``solutions/``). The cases run through
pytest in this process, on the backend this process picks (a GPU when there is one, else the CPU
simulator), so a check takes about as long as the tests themselves, not as long as the grader with its
one process per task. ``make check T=1.1`` is the same command.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from cudacourse.course import Course, CourseError, LessonInfo, course


def lesson_started(c: Course, lesson: LessonInfo, folder: Path | None = None) -> bool:
    """Whether any exercise file of ``lesson`` in ``folder`` (default: this checkout's ``lessons/<id>/``)
    differs from the stub derived from its solution. A missing file counts as started (it was changed), and
    so does a lesson none of whose stubs differ from their solutions (an untouched copy would be complete)."""
    from cudacourse import stubs

    folder = folder if folder is not None else c.kernel_dir(lesson.id, "student")
    has_exercise = False
    for name in lesson.exercise_files:
        src, dst = c.kernel_dir(lesson.id, "solution") / name, folder / name
        if not src.is_file():
            return True  # no solution to compare with: never claim the learner has not started
        want = stubs.expected(src)
        want_b = want.encode() if isinstance(want, str) else want
        has_exercise = has_exercise or want_b != src.read_bytes()
        if not dst.is_file() or dst.read_bytes() != want_b:
            return True
    return not has_exercise


def resolve(c: Course, target: str | None) -> tuple[list[LessonInfo], list[str]]:
    """(lessons, task ids) that ``target`` names: a task id (``1.1``), a lesson (``01_relu``, ``01``, ``1``),
    or ``None`` for the lessons started. Raises :class:`CourseError` listing the valid ids otherwise."""
    if target is None:
        return [les for les in c if lesson_started(c, les)], []
    for les in c:
        if any(t.id == target for t in les.tasks):
            return [les], [target]
    try:
        return [c.lesson(target)], []
    except CourseError:
        pass
    tasks = ", ".join(t.id for t in c.tasks())
    raise CourseError(f"no task or lesson {target!r}. Tasks: {tasks}. Lessons: {', '.join(c.lessons)} "
                      "(a number such as 01 works too).")


def pytest_args(c: Course, lessons: list[LessonInfo], task_ids: list[str], extra: list[str]) -> list[str]:
    """The pytest command line (without ``pytest``) that checks ``task_ids`` (all of them when empty)."""
    args = [str(c.tests_dir / les.test_file) for les in lessons]
    for t in task_ids:
        args += ["--cc-task", t]
    # --tb=short: the failing test line and the course's message, not pages of test source (extra can override);
    # --cc-brief: a course check's message without the traceback, each hint once; -rN: no closing list of raw
    # test ids (the points table names the tasks)
    return args + ["-q", "-p", "no:cacheprovider", "--tb=short", "--cc-brief", "-rN", *extra]


def prebuild(lessons: list[LessonInfo], task_ids: list[str], impl: str | None) -> None:
    """Build the kernel files the checked tasks use (those holding their ``TODO(task ...)``; every file of a
    lesson checked whole) before pytest starts, a line for each, into the cache the tests then use: the first
    build (a minute for a torch-route file on a CPU) no longer looks like a hang. A file that does not build
    is left to the tests, which report it."""
    import cudacourse as cc

    for les in lessons:
        m = cc.lesson(les.id, impl=impl)
        for f in m.files():
            text = f.read_text(errors="replace")
            if task_ids and not any(f"TODO(task {t})" in text for t in task_ids):
                continue
            print(f"cudacourse check: building {les.id}/{f.name} ...", end=" ", flush=True)
            t0 = time.monotonic()
            try:
                m.module(f.name)
                print(f"built in {time.monotonic() - t0:.1f} s", flush=True)
            except Exception:  # noqa: BLE001 - the tests report a build that fails, with the whole message
                print("does not build (the tests below say why)", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``cudacourse check``; returns pytest's exit code (0: every case passed), 2 for a bad id."""
    p = argparse.ArgumentParser(prog="cudacourse check", description=(
        "Check your work with full messages: one task (1.1), one lesson (01_relu, 01), or, with nothing, "
        "every lesson you have started. Extra options after -- go to pytest (e.g. -- -x --seed 7)."))
    p.add_argument("target", nargs="?", default=None, help="a task id (1.1) or a lesson (01_relu, 01)")
    p.add_argument("--solution", action="store_true", help="check the reference solutions instead of lessons/")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    args = p.parse_args(argv)
    try:
        c = course()
        lessons, task_ids = resolve(c, args.target)
    except CourseError as e:
        print(f"cudacourse check: {e}", file=sys.stderr)
        return 2
    if not lessons:
        print("cudacourse check: no lesson started yet (every exercise file is still its stub). Start with task "
              "1.1 in lessons/01_relu/relu.cu, then run `make check T=1.1`.")
        return 0
    if args.solution:
        extra = ["--impl=solution", *extra]
    what = f"task {task_ids[0]}" if task_ids else ", ".join(les.id for les in lessons)
    print(f"cudacourse check: {what}", flush=True)
    if not any(a.startswith("--submission") for a in extra):  # (another folder's files: the tests build those)
        prebuild(lessons, task_ids, "solution" if args.solution else None)
    import pytest

    return int(pytest.main(pytest_args(c, lessons, task_ids, extra)))
