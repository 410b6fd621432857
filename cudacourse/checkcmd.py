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
import functools
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cudacourse.course import Course, CourseError, LessonInfo, course
from cudacourse.exercise_state import file_states, lesson_started, untouched_reason
from cudacourse.progress import heartbeat


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


@contextmanager
def _saying_runtime_builds() -> Iterator[None]:
    """While active, the simulator's runtime build (once per machine and runtime version: most of a first
    check's time) is announced as what it is, before it starts: a learner saw "building relu.cu ... built in
    18.2 s" and could not tell why later builds of the same file took 2 s."""
    import cudacourse.sim.build as sim  # where runtime_object looks up cached

    plain = sim.cached

    what = {"sim-rt": "building the simulator's runtime", "sim-pch": "precompiling the simulator's headers"}

    def announcing(kind: str, key: str, build: Callable[[Path], None], **kw: Any) -> Path:
        if kind not in what:
            return plain(kind, key, build, **kw)

        def build_and_say(d: Path) -> None:
            print(f"cudacourse check: {what[kind]} (once: later checks reuse it) ...", end=" ", flush=True)
            t0 = time.monotonic()
            build(d)
            print(f"built in {time.monotonic() - t0:.1f} s", flush=True)

        return plain(kind, key, build_and_say, **kw)

    sim.cached = announcing  # type: ignore[assignment]
    try:
        yield
    finally:
        sim.cached = plain  # type: ignore[assignment]


def _build_saying(name: str, build: Callable[[], object]) -> None:
    """``build()`` with a line saying so: "building NAME ... built in 2.1 s" for a short build; a long one (a file
    with torch headers: tens of seconds on a CPU) prints a heartbeat line every 10 s and its verdict on a line of
    its own. A build that fails is left to the tests, which report it with the whole message."""
    print(f"cudacourse check: building {name} ...", end=" ", flush=True)
    t0 = time.monotonic()
    beats: list[str] = []

    def beat(text: str) -> None:
        print(("\n" if not beats else "") + f"cudacourse check: {text}", flush=True)
        beats.append(text)

    try:
        with heartbeat(beat, lambda: f"building {name}"):
            build()
        verdict = f"built in {time.monotonic() - t0:.1f} s"
    except Exception:  # noqa: BLE001 - the tests report a build that fails, with the whole message
        verdict = "does not build (the tests below say why)"
    print(f"cudacourse check: {name} {verdict}" if beats else verdict, flush=True)


def prebuild(lessons: list[LessonInfo], task_ids: list[str], impl: str | None) -> None:
    """Build the kernel files the checked tasks use (those holding their ``TODO(task ...)``; every file of a
    lesson checked whole) before pytest starts, a line for each, into the cache the tests then use: the first
    build (a minute for a torch-route file on a CPU) no longer looks like a hang. On the simulator its runtime
    and precompiled headers are built first, once, with a line each. A file that does not build is left to the
    tests, which report it."""
    import cudacourse as cc

    for les in lessons:
        m = cc.lesson(les.id, impl=impl)
        if m.backend == "sim":
            from cudacourse.sim import runtime_headers, runtime_object

            with _saying_runtime_builds():
                try:
                    runtime_object()
                    runtime_headers()
                except Exception:  # noqa: BLE001 - the tests report it, with the whole message
                    print("failed (the tests below say why)", flush=True)
        used = {f for t in les.tasks if not task_ids or t.id in task_ids for f in les.files_of(t)}
        for f in m.files():
            text = f.read_text(errors="replace")
            if f.name not in used or (task_ids and not any(f"TODO(task {t}" in text for t in task_ids)):
                continue
            _build_saying(f"{les.id}/{f.name}", functools.partial(m.module, f.name))


def _first_sentence(text: str) -> str:
    """The first line of a failure message up to its first full stop or its details in parentheses."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    m = re.search(r"\. |\s\(shape ", line)
    return line[: m.start() + (1 if line[m.start()] == "." else 0)] if m else line


def _shape_of(message: str) -> str:
    """A failure message without what changes from one size to the next: its numbers, the values it lists
    ("at 3: yours nan, expected 0.37") and its hint lines (the course plugin shortens a repeated hint)."""
    lines = [ln for ln in message.splitlines()
             if not re.match(r"\s*(at .*: yours |Hint:)", ln)]
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", "\n".join(lines))


class LearnerOutput:
    """Pytest plugin of ``cudacourse check``: output for a learner, not for a pytest user.

    - each failure is headed by its task and the case in words (``task 1.1 (relu_v1_scalar: ...): relu scalar,
      n=31``), not the raw test id ``test_relu_scalar[31]``; ``-v`` keeps the raw ids;
    - a failure whose message is the same as an earlier one but for its numbers (the same mistake at another
      size) prints its first sentence and "The rest: the same as for n=1 above" (another test's case is named
      whole);
    - the closing count leaves out pytest's "68 deselected" (the other tasks' tests, never meant to run).
    """

    def __init__(self, titles: dict[str, str], estimate_impl: str | None = None, estimates: bool = True) -> None:
        self.titles = titles
        self.estimates = estimates
        self.estimate_impl = estimate_impl  # the files the estimates run: None = this process's settings
        self.not_graded_gpu: list[str] = []  # speed tasks skipped here for want of a GPU, in order
        self.shown: dict[str, str] = {}  # a message without its numbers -> the case words of its first failure
        self.texts: dict[str, str] = {}  # the same key -> the message shown in full

    @staticmethod
    def case(item: Any) -> str:
        from cudacourse.results import case_words

        cs = getattr(item, "callspec", None)
        params = dict(cs.params) if cs is not None else {}
        return case_words(item.nodeid, params)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        """Rename a failure's heading and shorten a repeated message (after the course plugin's own brief form)."""
        report = yield
        self._note_gpu_skip(item, report)
        if not report.failed or item.config.get_verbosity() >= 0:  # (make check passes -q; -v or --verbose: ids)
            return report
        mark = item.get_closest_marker("task")
        task = str(mark.args[0]) if mark is not None and mark.args else None
        case = self.case(item)
        head = f"task {task} ({self.titles[task]}): {case}" if task in self.titles else case
        fspath, lineno, _domain = report.location
        report.location = (fspath, lineno, head)
        text = report.longrepr if isinstance(report.longrepr, str) else ""
        if text.strip():
            key = _shape_of(text)  # (any test of the run: a task's other test may fail the same way)
            short = _first_sentence(text)
            if key not in self.shown:
                self.shown[key] = case
                self.texts[key] = text
            else:
                seen = self.shown[key]
                test, _, params = seen.partition(", ")
                where = params if params and case.startswith(test + ", ") else seen
                if text == self.texts[key]:
                    report.longrepr = f"The same failure as for {where} above."
                elif short.strip() != text.strip():
                    report.longrepr = f"{short}\n  The rest: the same as for {where} above."
        return report

    def _note_gpu_skip(self, item: Any, report: Any) -> None:
        """Remember a task skipped as "not graded: needs a GPU" (the simulator): its estimate is shown at the end."""
        from cudacourse.results import GPU_SKIP_REASON

        mark = item.get_closest_marker("task")
        reason = report.longrepr[2] if report.skipped and isinstance(report.longrepr, tuple) else ""
        if mark is not None and mark.args and GPU_SKIP_REASON in str(reason):
            task = str(mark.args[0])
            if task not in self.not_graded_gpu:
                self.not_graded_gpu.append(task)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Drop the count of deselected tests from the closing line (the other tasks' tests); then, for each speed
        task not graded here (no GPU), the estimated time on an H100 and an H200 (issue 39), labelled so."""
        terminalreporter.stats.pop("deselected", None)
        if not self.estimates or not self.not_graded_gpu:
            return
        from cudacourse.lessons import lesson_dir
        from cudacourse.speed_estimate import NOT_GRADED, estimate_task

        terminalreporter.write_sep("-", f"estimated GPU times of the speed tasks ({NOT_GRADED})")
        terminalreporter.write_line("A model's figures from the simulator's counters, not a measurement: "
                                    "cudacourse/estimate.py; its errors: results/cpu/estimate_calibration.md.")
        c = course()
        for tid in self.not_graded_gpu:
            task = next(t for t in c.tasks() if t.id == tid)
            try:
                folder = lesson_dir(task.lesson, self.estimate_impl)
                lines = [ln for e in estimate_task(task, folder) for ln in e.lines()]
            except Exception as e:  # noqa: BLE001 - an estimate never breaks a check: it says why it is absent
                lines = [f"task {tid}: no estimate ({type(e).__name__}: {e}) ({NOT_GRADED})"]
            for ln in lines:
                terminalreporter.write_line(ln)


def started_tasks(c: Course, lessons: list[LessonInfo]) -> tuple[list[str], list[str]]:
    """(task ids begun, task ids not begun) of ``lessons`` in this checkout (:func:`untouched_reason`); GPU tasks on
    a backend without a GPU count as begun when their files are (the tests report them not graded)."""
    begun, idle = [], []
    for les in lessons:
        untouched = {n for n, state in file_states(c, les).items() if state == "untouched"}
        for t in les.tasks:
            (idle if untouched_reason(c, les, t, untouched=untouched) else begun).append(t.id)
    return begun, idle


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``cudacourse check``; returns pytest's exit code (0: every case passed), 2 for a bad id."""
    p = argparse.ArgumentParser(prog="cudacourse check", description=(
        "Check your work with full messages: one task (1.1), one lesson (01_relu, 01), or, with nothing, "
        "every lesson you have started. Extra options after -- go to pytest (e.g. -- -x --seed 7)."))
    p.add_argument("target", nargs="?", default=None, help="a task id (1.1) or a lesson (01_relu, 01)")
    p.add_argument("--solution", action="store_true", help="check the reference solutions instead of lessons/")
    p.add_argument("--verbose", action="store_true", help="every message in full, failures named by their test ids")
    p.add_argument("--seed", type=int, default=None, help="the random inputs of an earlier run (its printed seed)")
    p.add_argument("--no-estimate", action="store_true",
                   help="on the simulator, skip the estimated GPU time of the speed tasks (a few seconds each)")
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
    if args.verbose:
        extra = ["-v", *extra]
    if args.seed is not None:
        extra = ["--seed", str(args.seed), *extra]
    what = f"task {task_ids[0]}" if task_ids else ", ".join(les.id for les in lessons)
    print(f"cudacourse check: {what}", flush=True)
    if not task_ids and not args.solution and not any(a.startswith("--submission") for a in extra):
        # A lesson check runs the tasks begun, not the others (they cannot pass, and their files would be built:
        # a learner's check of 01_relu spent 25 s of 33 building relu_torch.cu, never opened)
        task_ids, idle = started_tasks(c, lessons)
        if idle:
            print(f"cudacourse check: not checked, not started yet: {', '.join(idle)} (name one to check it anyway: "
                  f"make check T={idle[0]})", flush=True)
        if not task_ids:
            return 0
    if not any(a.startswith("--submission") for a in extra):  # (another folder's files: the tests build those)
        prebuild(lessons, task_ids, "solution" if args.solution else None)
    import pytest

    titles = {t.id: t.title for t in c.tasks()}
    out = LearnerOutput(titles, "solution" if args.solution else None, estimates=not args.no_estimate)
    return int(pytest.main(pytest_args(c, lessons, task_ids, extra), plugins=[out]))
