"""The course's pytest plugin: options, grading markers, points table, per-test records for the grader.

Loaded by ``tests/conftest.py`` (``pytest_plugins = ["cudacourse.pytest_plugin"]``) or with
``-p cudacourse.pytest_plugin``. It adds:

- ``--impl=student|solution`` (default: the settings, ``$CUDA_COURSE_IMPL``, else ``student``): which copy
  of the kernels ``cc.lesson`` loads (``lessons/`` or ``solutions/``).
- ``--backend=auto|cuda|sim``: where kernels run (``auto`` leaves the setting alone).
- ``--submission DIR``: ``cc.lesson`` then loads the kernel files from ``DIR/lessons/NN_topic/``.
- ``--seed N``: the base seed of every random input (``check.rng`` derives them from it).

These become this process's settings (``cudacourse.settings.configure``) and are exported as
``CUDA_COURSE_*`` variables for the processes the tests start.
- the markers ``task(id)`` and ``gpu``. A ``task`` marker must name a task declared in the lesson's
  ``lessons/NN_topic/lesson.toml`` (or, for hidden tests, in a ``tasks.toml`` beside the test file), else
  collection stops with an error that says so. Points, titles and GPU-only flags come from that model;
  a ``points`` marker is an error (points are declared once, in lesson.toml).

The course root is pytest's rootdir when it holds ``lessons/*/lesson.toml`` (the checkout, a grader's
staging folder, a toy course in a test), else the checkout this package runs from.

A ``gpu`` test on the simulator is reported as a skip whose reason starts with
``not graded: needs a GPU``; the points table counts it as *not graded*, never as a pass.

At the end of a run with task-marked tests it prints a points table, one row per task: a task earns its
points only if every one of its tests passed.

Two options serve ``python -m cudacourse grade`` (``cudacourse/grading/``) and are of no use by hand:
``--cc-task ID`` (repeatable) keeps only the tests of those tasks, and ``--cc-report FILE`` appends one
JSON line per test (a ``start`` line before it runs, a ``result`` line after), flushed at once, so the
grader knows which test was running when a process crashed or hung.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cudacourse import settings
from cudacourse.course import Course, CourseError, Task, hidden_tasks
from cudacourse.course import course as course_model
from cudacourse.errors import CompileError, KernelError
from cudacourse.failure_text import brief, course_words, failure_text, skip_reason
from cudacourse.grading import protocol
from cudacourse.results import GPU_SKIP_REASON, TestRecord, fold_tasks, points_table, trim_message

NOT_GRADED_PREFIX = "not graded"


# ----------------------------------------------------------------------------------------------------
# Options and markers
# ----------------------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the course's command-line options."""
    group = parser.getgroup("cudacourse", "CUDA course grading")
    group.addoption("--impl", choices=["student", "solution"], default=None,
                    help="kernels to test: student (lessons/, default) or solution (solutions/); "
                         "default $CUDA_COURSE_IMPL")
    group.addoption("--backend", choices=["auto", "cuda", "sim"], default=None,
                    help="where kernels run: cuda (GPU), sim (CPU simulator) or auto (default)")
    group.addoption("--submission", default=None, metavar="DIR",
                    help="grade the kernel files of a learner's copy: DIR/lessons/NN_topic/*.cu")
    group.addoption("--seed", default=None, type=int,
                    help="base seed of every random input (exported as CUDA_COURSE_SEED)")
    group.addoption(protocol.TASK_OPTION, action="append", default=[], metavar="ID",
                    help="(grader) run only the tests of this task id; repeatable")
    group.addoption("--cc-brief", action="store_true",
                    help="(make check) a course check's or kernel error's message without the Python traceback, and "
                         "each hint once")
    group.addoption(protocol.REPORT_OPTION, default=None, metavar="FILE",
                    help="(grader) append a JSON line per test to FILE")
    group.addoption(protocol.WAIT_OPTION, default=None, metavar="FILE",
                    help="(grader) after collection, wait until FILE exists before the first test (a timed task "
                         "waiting for the GPU to itself)")
    group.addoption(protocol.GO_OPTION, default=None, metavar="FILE",
                    help="(grader) after collection, wait until FILE exists before the first test (the builds "
                         "the tests use are still running)")


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers, set this process's settings from the options (exported for child processes)."""
    config.addinivalue_line("markers", "task(id): graded task this test belongs to, declared in lesson.toml")
    config.addinivalue_line("markers", "points(n): not used: points are declared in lesson.toml (an error)")
    config.addinivalue_line("markers", "gpu: needs a real GPU (speed tasks); 'not graded' on the simulator")
    config.addinivalue_line("markers", "sim_only: a case only the simulator can check (its profile counters); "
                                       "deselected on a GPU, where it neither grades nor blocks its task")

    changes: dict[str, Any] = {}
    root = Path(str(config.rootpath))
    if any(root.glob("lessons/*/lesson.toml")):
        changes["root"] = root
    if config.getoption("impl"):
        changes["impl"] = config.getoption("impl")
    backend = config.getoption("backend")
    if backend and backend != "auto":
        changes["backend"] = backend
    sub = config.getoption("submission")
    if sub:
        path = Path(sub).expanduser().resolve()
        if not (path / "lessons").is_dir():
            raise pytest.UsageError(f"--submission {sub}: no lessons/ folder in it")
        changes["submission"] = path
    if config.getoption("seed") is not None:
        changes["seed"] = config.getoption("seed")
    elif settings.current().seed is None:  # one seed for the whole run (xdist workers and subprocesses inherit it)
        changes["seed"] = random.SystemRandom().randrange(1 << 31)
    try:
        st = settings.configure(**changes)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    os.environ.update(settings.to_env(st))  # for processes the tests start (notebooks, workers)
    if config.getoption("cc_report"):  # a grading task process: twins compile one config, nothing to time
        from cudacourse.triton_track import ONE_CONFIG_ENV

        os.environ[ONE_CONFIG_ENV] = "1"

    state = _State(report_path=config.getoption("cc_report"), only_tasks=set(config.getoption("cc_task")),
                   course=course_model(st.root))
    config.stash[_STATE] = state


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Under ``--cc-wait-file`` or ``--cc-go-file``: wait for the grader's go before the first test.

    The grader starts a timed task's process while other task processes still use the GPU, so its start-up
    (Python, torch, the tests' imports, the context, the kernel modules) overlaps their work, and creates the
    ``--cc-wait-file`` once the GPU is this process's alone. It starts any other task process while the builds
    its tests use still run (``--cc-go-file``): that one loads nothing before the go (the modules are not built,
    and a CUDA context created now could disturb a timed process of another submission). A process stopped by
    the grader while it waits is simply killed.
    """
    timed = session.config.getoption("cc_wait_file")
    path = timed or session.config.getoption("cc_go_file")
    if not path or session.config.option.collectonly:
        return
    if timed:
        if backend_name() == "cuda":
            import torch

            torch.empty(1, device="cuda")  # the context and allocator, created before the turn
            # (torch.compile runs in task 7.7's torch worker, which imports it there: its cc_preload)
        _preload(session)
    elif backend_name() == "cuda":
        from cudacourse.gpuinfo import sleep_while_waiting

        sleep_while_waiting()  # a process whose tests are not timed: its waits for the GPU free a core
    while not Path(path).exists():
        time.sleep(0.05)


def _preload(session: pytest.Session) -> None:
    """Load the kernel modules the collected tests will use (their GPU workers start now, not in a timed test's
    wall time), and call each test module's ``cc_preload(task_ids)`` if it has one, with the ids of its collected
    tasks (it starts the torch workers those tasks host a learner's Python file in). Whatever does not load is left
    to the tests, which report it."""
    from cudacourse import loader

    state = session.config.stash.get(_STATE, None)
    if state is None:
        return
    wanted: set[tuple[str, str]] = set()
    hooks: dict[Any, set[str]] = {}
    for item in session.items:
        try:
            task = _declared(state, item)
            if task is not None:
                info = state.course.lesson(task.lesson)
                wanted |= {(task.lesson, f) for f in info.files_of(task) if f.endswith(".cu")}
                hook = getattr(getattr(item, "module", None), "cc_preload", None)
                if callable(hook):
                    hooks.setdefault(hook, set()).add(task.id)
        except (ValueError, CourseError, KeyError):
            continue
    for lesson, name in sorted(wanted):
        try:
            loader.lesson(lesson).module(name)
        except Exception:  # noqa: BLE001, S112 - its tests report what is wrong with it
            continue
    for hook, ids in hooks.items():
        try:
            hook(ids)
        except Exception:  # noqa: BLE001, S112 - its tests report what is wrong
            continue


def backend_name() -> str:
    """``"cuda"`` or ``"sim"``: where kernels of this run execute (``sim`` if that cannot be decided)."""
    try:
        from cudacourse.loader import backend_name as resolve

        return resolve()
    except Exception:  # noqa: BLE001 - a broken package must not break collection
        return "sim"


# ----------------------------------------------------------------------------------------------------
# Per-test bookkeeping
# ----------------------------------------------------------------------------------------------------


@dataclass
class _State:
    report_path: str | None
    only_tasks: set[str]
    course: Course
    records: dict[str, TestRecord] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    timed_out_tasks: set[str] = field(default_factory=set)

    def emit(self, obj: dict[str, Any]) -> None:
        """Append one event to the grader's report (``--cc-report``), if there is one."""
        protocol.emit(self.report_path, obj)


_STATE = pytest.StashKey[_State]()
_PROP = "cudacourse_record"
_FINISHED: dict[str, TestRecord] = {}  # nodeid -> record of every finished task test (this process)


def _marker_arg(item: pytest.Item, name: str) -> Any:
    mk = item.get_closest_marker(name)
    if mk is None:
        return None
    if mk.args:
        return mk.args[0]
    for key in ("id", "n", "points", "value"):
        if key in mk.kwargs:
            return mk.kwargs[key]
    return None


def _params(item: pytest.Item) -> dict[str, Any]:
    cs = getattr(item, "callspec", None)
    if cs is None:
        return {}
    out: dict[str, Any] = {}
    for k, v in cs.params.items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
        elif isinstance(v, (tuple, list)) and all(isinstance(e, (int, float)) for e in v):
            out[k] = list(v)
        else:
            out[k] = repr(v)[:60]
    return out


def _declared(state: _State, item: pytest.Item) -> Task | None:
    """The declared task of a test (None for a test without a ``task`` marker); raises ``ValueError``
    saying what is wrong for an undeclared task or a ``points`` marker."""
    if item.get_closest_marker("points") is not None:
        raise ValueError(f"{item.nodeid}: @pytest.mark.points is not used any more: a task's points are declared "
                         "once, in lessons/NN_topic/lesson.toml; remove the marker")
    task = _marker_arg(item, "task")
    if task is None:
        return None
    task = str(task)
    lesson = state.course.lesson_of_test(item.path)
    if lesson is None:
        raise ValueError(f"{item.nodeid}: task {task!r} in a file that belongs to no lesson (graded test files are "
                         f"named test_NN_topic*.py after a lesson folder of {state.course.lessons_dir})")
    extra = {t.id: t for t in hidden_tasks(state.course, item.path.parent) if t.lesson == lesson}
    if task in extra:
        return extra[task]
    try:
        return state.course.task(lesson, task)
    except KeyError as e:
        raise ValueError(f"{item.nodeid}: {e.args[0]}") from None


def _record_for(item: pytest.Item, task: Task | None) -> TestRecord:
    return TestRecord(
        nodeid=item.nodeid, file=str(item.path), lesson=task.lesson if task else "",
        task=task.id if task else None, points=task.points if task else 0.0,
        title=task.title if task else (getattr(item, "originalname", None) or item.name),
        gpu=item.get_closest_marker("gpu") is not None or bool(task and task.gpu), params=_params(item))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: it must see the ``gpu`` marks added here
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Check every test's task against the course model, keep only the requested tasks (``--cc-task``),
    and remember every test's task and points. A test of a timed task (``gpu = true`` in lesson.toml) gets
    the ``gpu`` mark, so ``-m gpu`` / ``-m "not gpu"`` select every timed test (``make test`` on a GPU)."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    declared: dict[str, Task | None] = {}
    problems = []
    for it in items:
        try:
            declared[it.nodeid] = _declared(state, it)
        except (ValueError, CourseError) as e:
            problems.append(str(e))
    if problems:
        raise pytest.UsageError("the tests disagree with the course model:\n  " + "\n  ".join(problems))
    on_gpu = any(it.get_closest_marker("sim_only") for it in items) and backend_name() == "cuda"
    keep, drop = [], []
    for it in items:
        t = declared[it.nodeid]
        wanted = not state.only_tasks or (t is not None and t.id in state.only_tasks)
        (keep if wanted and not (on_gpu and it.get_closest_marker("sim_only")) else drop).append(it)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    # (grader) where this process's kernels run, as it resolved it: the grader compares it with the grade's backend
    state.emit({"event": "backend", "backend": backend_name(), "setting": settings.current().backend})
    for it in items:
        t = declared[it.nodeid]
        if t is not None and t.gpu and it.get_closest_marker("gpu") is None:
            it.add_marker("gpu")
        rec = _record_for(it, declared[it.nodeid])
        state.records[it.nodeid] = rec
        state.order.append(it.nodeid)
        if rec.task is not None:
            state.emit({"event": "collected", **protocol.record_fields(rec)})


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Turn a ``gpu`` test on the simulator into a visible *not graded* skip.

    Under the grader (``--cc-report``) and in ``make check`` (``--cc-brief``), once a case of a task has timed
    out the task has failed, so its remaining cases are skipped instead of each waiting for the kernel timeout
    again.
    """
    state = item.config.stash.get(_STATE, None)
    rec = state.records.get(item.nodeid) if state is not None else None
    gpu = item.get_closest_marker("gpu") is not None or (rec is not None and rec.gpu)
    if gpu and backend_name() != "cuda":
        pytest.skip(GPU_SKIP_REASON)
    # The same in `make check` (--cc-brief): a learner's endless loop cost 9 cases x 10 s there.
    if (state is not None and (state.report_path or item.config.getoption("cc_brief")) and rec is not None
            and rec.task in state.timed_out_tasks):
        pytest.skip(f"not run: an earlier case of task {rec.task} timed out")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item):  # type: ignore[no-untyped-def]  # (pluggy: a subset of the spec)
    """Emit the ``start`` line before the test runs (the grader reads it after a crash).

    Under pytest-xdist on a GPU, a timed (``gpu``) test holds the GPU alone: it takes an exclusive lock
    that every other lesson test (a test of a task) holds shared, so no other worker's lesson kernels share
    the GPU while it times. Tests of no task (the simulator's, the grader's, which run minutes on the CPU)
    take no lock: holding one, they would stall every timed test behind them. (The grader gates its task
    processes the same way: ``GradeSession.gpu_turn``.)"""
    state = item.config.stash.get(_STATE, None)
    if state is not None:
        state.emit({"event": "start", "nodeid": item.nodeid, "t": protocol.now()})
    rec = state.records.get(item.nodeid) if state is not None else None
    if not os.environ.get("PYTEST_XDIST_WORKER") or rec is None or rec.task is None or backend_name() != "cuda":
        return (yield)
    # fcntl.flock, not filelock (4.x has a ReadWriteLock): the kernel releases a flock when its holder dies, so an
    # xdist worker killed while it holds the GPU (a hung test, a crash) never leaves the others waiting
    import fcntl

    from cudacourse.buildcache import build_root

    root = build_root()
    root.mkdir(parents=True, exist_ok=True)
    timed = item.get_closest_marker("gpu") is not None or rec.gpu
    with open(root / ".gpu-turnstile.lock", "a") as turn, open(root / ".gpu-timing.lock", "a") as gpu:
        # The turnstile keeps a waiting timed test from starving: while it waits, no new test gets in.
        fcntl.flock(turn, fcntl.LOCK_EX)
        fcntl.flock(gpu, fcntl.LOCK_EX if timed else fcntl.LOCK_SH)
        fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(gpu, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Fold each phase's report into the test's record (fail beats not-graded beats pass)."""
    report = yield
    if (report.failed and call.excinfo is not None and call.excinfo.errisinstance(CompileError)
            and item.config.get_verbosity() < 2):
        # The compiler's output is the whole story: no Python traceback through the harness (a missing `;`
        # printed 164 lines in a learner's `make check T=1.1`). `-vv` shows the traceback.
        report.longrepr = f"{call.excinfo.typename}: {call.excinfo.value}"
    elif report.failed and call.excinfo is not None and item.config.getoption("cc_brief"):
        from cudacourse.check import CheckFailure  # (torch: imported only where a test failed)

        if call.excinfo.errisinstance((CheckFailure, KernelError)):
            text = str(call.excinfo.value)  # (a kernel error's message starts with its type already)
            if not text.startswith(call.excinfo.typename) and not call.excinfo.errisinstance(CheckFailure):
                text = f"{call.excinfo.typename}: {text}"
            report.longrepr = brief(text)
        elif words := course_words(call.excinfo):
            report.longrepr = brief(words)
    state = item.config.stash.get(_STATE, None)
    if state is None:
        return report
    rec = state.records.get(item.nodeid)
    if rec is None:
        return report
    rec.duration += float(getattr(report, "duration", 0.0) or 0.0)
    if report.failed:
        if rec.outcome != "failed":
            rec.outcome = "failed"
            rec.exc_type, rec.message = failure_text(call, report)
            if rec.exc_type == "KernelTimeout" and rec.task is not None:
                state.timed_out_tasks.add(rec.task)
    elif report.skipped:
        reason = skip_reason(report)
        if rec.outcome not in ("failed",):
            if reason.lower().startswith(NOT_GRADED_PREFIX) or rec.gpu:
                rec.outcome = "not-graded"
            else:
                rec.outcome = "skipped"
            rec.message = reason
    elif report.when == "call" and rec.outcome == "not-run":
        rec.outcome = "passed"
        speed = sys.modules.get("cudacourse.speed")
        if speed is not None and speed.NOTES:  # a speed task's measurement: the report says what was measured
            rec.message = trim_message("\n".join(speed.NOTES))
    if report.when == "call" and (speed := sys.modules.get("cudacourse.speed")) is not None:
        speed.NOTES.clear()
    if report.when == "teardown":
        if rec.outcome == "not-run":  # setup passed but call never ran: treat as failed
            rec.outcome = "failed"
            rec.message = rec.message or "the test did not run"
        state.emit({"event": "result", **protocol.record_fields(rec), "t": protocol.now()})
        if rec.task is not None:
            # Travels with the report to the pytest-xdist controller, which prints the points table.
            report.user_properties.append((_PROP, json.dumps(protocol.record_fields(rec))))
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """(grader) Note that every test has reported, so a process stuck at exit can be stopped."""
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        state.emit({"event": "finished", "exitstatus": int(exitstatus)})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect finished tests' records (locally, or on the xdist controller from its workers)."""
    if report.when != "teardown":
        return
    for key, value in getattr(report, "user_properties", []):
        if key == _PROP:
            d = json.loads(value)
            _FINISHED[d["nodeid"]] = protocol.record_of(d)


# ----------------------------------------------------------------------------------------------------
# Points table
# ----------------------------------------------------------------------------------------------------


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the points table when the run held task-marked tests."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    recs = list(_FINISHED.values())
    tasks = fold_tasks(recs)
    if not tasks:
        return
    terminalreporter.write_sep("=", f"points (impl={settings.current().impl}, "
                                    f"backend={backend_name()})")
    for line in points_table(tasks):
        terminalreporter.write_line(line)
    for task in sorted(state.timed_out_tasks):  # (the closing "8 skipped" said nothing of why)
        terminalreporter.write_line(f"task {task}: a case timed out, so its other cases were skipped")
    seed = settings.current().seed
    if exitstatus != 0 and seed is not None and config.getoption("cc_brief"):  # `make check`: its own words
        terminalreporter.write_line(f"random inputs of this run: seed {seed} (add ARGS=--seed={seed} to the make "
                                    "check command to repeat them)")
    elif exitstatus != 0 and seed is not None:  # once, not once per case
        terminalreporter.write_line(f"random inputs of this run: CUDA_COURSE_SEED={seed} (put it in front of the "
                                    "command to run the same inputs again)")
