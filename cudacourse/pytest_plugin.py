"""The course's pytest plugin: options, grading markers, points table, per-test records for the grader.

Loaded by ``tests/conftest.py`` (``pytest_plugins = ["cudacourse.pytest_plugin"]``) or with
``-p cudacourse.pytest_plugin``. It adds:

- ``--impl=student|solution`` (default ``$CUDA_COURSE_IMPL``, else ``student``): which copy of the
  kernels ``cc.lesson`` loads (``lessons/`` or ``solutions/``); exported as ``CUDA_COURSE_IMPL``.
- ``--backend=auto|cuda|sim``: exported as ``CUDA_COURSE_BACKEND`` (``auto`` leaves it alone).
- ``--submission DIR``: exported as ``CUDA_COURSE_SUBMISSION``; ``cc.lesson`` then loads the kernel
  files from ``DIR/lessons/NN_topic/``.
- ``--seed N``: exported as ``CUDA_COURSE_SEED`` (``check.rng`` derives every input from it).
- the markers ``task(id)``, ``points(n)`` and ``gpu``.

A ``gpu`` test on the simulator is reported as a skip whose reason starts with
``not graded: needs a GPU``; the points table counts it as *not graded*, never as a pass.

At the end of a run with task-marked tests it prints a points table, one row per task: a task earns its
points only if every one of its tests passed.

Two options serve ``python -m cudacourse grade`` (``cudacourse/grade.py``) and are of no use by hand:
``--cc-task ID`` (repeatable) keeps only the tests of those tasks, and ``--cc-report FILE`` appends one
JSON line per test (a ``start`` line before it runs, a ``result`` line after), flushed at once, so the
grader knows which test was running when a process crashed or hung.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

NOT_GRADED_PREFIX = "not graded"
GPU_SKIP_REASON = "not graded: needs a GPU (this run uses the CPU simulator; speed is measured on a GPU)"
_MSG_LINES = 14
_MSG_CHARS = 1800


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
    group.addoption("--cc-task", action="append", default=[], metavar="ID",
                    help="(grader) run only the tests of this task id; repeatable")
    group.addoption("--cc-report", default=None, metavar="FILE",
                    help="(grader) append a JSON line per test to FILE")


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and export the options as environment variables for ``cc.lesson``."""
    config.addinivalue_line("markers", "task(id): graded task this test belongs to, e.g. task('1.1')")
    config.addinivalue_line("markers", "points(n): points of the whole task (repeat on each of its tests)")
    config.addinivalue_line("markers", "gpu: needs a real GPU (speed tasks); 'not graded' on the simulator")

    impl = config.getoption("impl") or os.environ.get("CUDA_COURSE_IMPL") or "student"
    if impl not in ("student", "solution"):
        raise pytest.UsageError(f"CUDA_COURSE_IMPL={impl!r}: expected 'student' or 'solution'")
    os.environ["CUDA_COURSE_IMPL"] = impl
    backend = config.getoption("backend")
    if backend and backend != "auto":
        os.environ["CUDA_COURSE_BACKEND"] = backend
    sub = config.getoption("submission")
    if sub:
        path = Path(sub).expanduser().resolve()
        if not (path / "lessons").is_dir():
            raise pytest.UsageError(f"--submission {sub}: no lessons/ folder in it")
        os.environ["CUDA_COURSE_SUBMISSION"] = str(path)
    seed = config.getoption("seed")
    if seed is not None:
        os.environ["CUDA_COURSE_SEED"] = str(seed)

    state = _State(report_path=config.getoption("cc_report"), only_tasks=set(config.getoption("cc_task")))
    config.stash[_STATE] = state


def backend_name() -> str:
    """``"cuda"`` or ``"sim"``: where kernels of this run execute.

    Asks ``cudacourse.backend_name()`` when the package provides it, else reads ``$CUDA_COURSE_BACKEND``
    (``sim`` when unset or ``auto``).
    """
    try:
        import cudacourse

        fn = getattr(cudacourse, "backend_name", None)
        if fn is not None:
            return str(fn())
    except Exception:  # noqa: BLE001 - a broken package must not break collection
        pass
    env = os.environ.get("CUDA_COURSE_BACKEND", "").strip().lower()
    return env if env in ("cuda", "sim") else "sim"


# ----------------------------------------------------------------------------------------------------
# Per-test bookkeeping
# ----------------------------------------------------------------------------------------------------


@dataclass
class TestRecord:
    """What the points table and the grader know about one test."""

    nodeid: str
    file: str
    lesson: str
    task: str | None
    points: float
    title: str
    gpu: bool
    params: dict[str, Any] = field(default_factory=dict)
    outcome: str = "not-run"  # passed | failed | not-graded | skipped | not-run
    message: str = ""
    exc_type: str = ""
    duration: float = 0.0

    __test__ = False  # not a pytest test class, whatever module imports it


@dataclass
class _State:
    report_path: str | None
    only_tasks: set[str]
    records: dict[str, TestRecord] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    timed_out_tasks: set[str] = field(default_factory=set)

    def emit(self, obj: dict[str, Any]) -> None:
        if not self.report_path:
            return
        with open(self.report_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(obj) + "\n")
            f.flush()
            os.fsync(f.fileno())


_STATE = pytest.StashKey[_State]()
_PROP = "cudacourse_record"
_FINISHED: dict[str, TestRecord] = {}  # nodeid -> record of every finished task test (this process)


def lesson_of(path: str | os.PathLike[str]) -> str:
    """The lesson a test file belongs to: ``tests/test_01_relu.py`` -> ``01_relu``.

    Hidden test files follow the same rule (``test_01_relu_hidden.py`` -> ``01_relu``) when a lesson
    folder with that number exists next to the tests; otherwise the file stem is returned.
    """
    p = Path(path)
    stem = p.stem
    m = re.match(r"test_(\d\d)_?(\w*)", stem)
    if not m:
        return stem
    num, rest = m.group(1), m.group(2)
    for root in _candidate_roots(p):
        for sub in ("solutions", "lessons"):
            d = root / sub
            if d.is_dir():
                names = sorted(x.name for x in d.iterdir() if x.is_dir() and x.name.startswith(num + "_"))
                if names:
                    return names[0]
    # No lesson folders around: keep the first word after the number.
    return f"{num}_{rest.split('_')[0]}" if rest else num


def _candidate_roots(p: Path) -> list[Path]:
    roots = [p.resolve().parent.parent, Path.cwd()]
    try:
        from cudacourse.buildcache import REPO_ROOT

        roots.append(REPO_ROOT)
    except Exception:  # noqa: BLE001
        pass
    return roots


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


def _title(item: pytest.Item) -> str:
    fn = getattr(item, "function", None) or getattr(item, "obj", None)
    doc = (getattr(fn, "__doc__", None) or "").strip()
    if doc:
        return doc.splitlines()[0].strip()
    return getattr(item, "originalname", None) or item.name


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


def _record_for(item: pytest.Item) -> TestRecord:
    task = _marker_arg(item, "task")
    pts = _marker_arg(item, "points")
    return TestRecord(
        nodeid=item.nodeid, file=str(item.path), lesson=lesson_of(item.path),
        task=None if task is None else str(task), points=float(pts) if pts is not None else 0.0,
        title=_title(item), gpu=item.get_closest_marker("gpu") is not None, params=_params(item))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Keep only the requested tasks (``--cc-task``) and remember every test's task and points."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    if state.only_tasks:
        keep, drop = [], []
        for it in items:
            t = _marker_arg(it, "task")
            (keep if t is not None and str(t) in state.only_tasks else drop).append(it)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    for it in items:
        rec = _record_for(it)
        state.records[it.nodeid] = rec
        state.order.append(it.nodeid)
        if rec.task is not None:
            state.emit({"event": "collected", **_public(rec)})


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Turn a ``gpu`` test on the simulator into a visible *not graded* skip.

    Under the grader (``--cc-report``), once a case of a task has timed out the task has failed, so its
    remaining cases are skipped instead of each waiting for the kernel timeout again.
    """
    if item.get_closest_marker("gpu") is not None and backend_name() != "cuda":
        pytest.skip(GPU_SKIP_REASON)
    state = item.config.stash.get(_STATE, None)
    if state is not None and state.report_path:
        task = _marker_arg(item, "task")
        if task is not None and str(task) in state.timed_out_tasks:
            pytest.skip(f"not run: an earlier case of task {task} timed out")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Emit the ``start`` line before the test runs (the grader reads it after a crash)."""
    state = item.config.stash.get(_STATE, None)
    if state is not None:
        state.emit({"event": "start", "nodeid": item.nodeid})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Fold each phase's report into the test's record (fail beats not-graded beats pass)."""
    report = yield
    state = item.config.stash.get(_STATE, None)
    if state is None:
        return report
    rec = state.records.get(item.nodeid) or _record_for(item)
    state.records.setdefault(item.nodeid, rec)
    rec.duration += float(getattr(report, "duration", 0.0) or 0.0)
    if report.failed:
        if rec.outcome != "failed":
            rec.outcome = "failed"
            rec.exc_type, rec.message = _failure_text(call, report)
            if rec.exc_type == "KernelTimeout" and rec.task is not None:
                state.timed_out_tasks.add(rec.task)
    elif report.skipped:
        reason = _skip_reason(report)
        if rec.outcome not in ("failed",):
            if reason.lower().startswith(NOT_GRADED_PREFIX) or rec.gpu:
                rec.outcome = "not-graded"
            else:
                rec.outcome = "skipped"
            rec.message = reason
    elif report.when == "call" and rec.outcome == "not-run":
        rec.outcome = "passed"
    if report.when == "teardown":
        if rec.outcome == "not-run":  # setup passed but call never ran: treat as failed
            rec.outcome = "failed"
            rec.message = rec.message or "the test did not run"
        state.emit({"event": "result", **_public(rec)})
        if rec.task is not None:
            # Travels with the report to the pytest-xdist controller, which prints the points table.
            report.user_properties.append((_PROP, json.dumps(_public(rec))))
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
            _FINISHED[d["nodeid"]] = TestRecord(**d)


def _public(rec: TestRecord) -> dict[str, Any]:
    return {"nodeid": rec.nodeid, "file": rec.file, "lesson": rec.lesson, "task": rec.task,
            "points": rec.points, "title": rec.title, "gpu": rec.gpu, "params": rec.params,
            "outcome": rec.outcome, "message": rec.message, "exc_type": rec.exc_type,
            "duration": round(rec.duration, 3)}


def _skip_reason(report: pytest.TestReport) -> str:
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        reason = str(lr[2])
    else:
        reason = str(lr or "")
    return reason.removeprefix("Skipped: ").strip()


def trim_message(text: str, lines: int = _MSG_LINES, chars: int = _MSG_CHARS) -> str:
    """The first ``lines`` lines / ``chars`` characters of a failure message, marked when cut."""
    text = text.strip("\n")
    parts = text.splitlines()
    cut = len(parts) > lines
    text = "\n".join(parts[:lines])
    if len(text) > chars:
        text, cut = text[:chars], True
    return text + ("\n[...]" if cut else "")


def _failure_text(call: pytest.CallInfo[None], report: pytest.TestReport) -> tuple[str, str]:
    """(exception type, first lines of its message) for a failed phase."""
    exc = call.excinfo
    if exc is not None:
        etype = exc.type.__name__
        try:
            msg = str(exc.value)
        except Exception:  # noqa: BLE001
            msg = ""
        if not msg.strip():
            msg = exc.exconly()
        else:
            msg = f"{etype}: {msg}"
        if report.when != "call":
            msg = f"(in test {report.when}) {msg}"
        return etype, trim_message(msg)
    return "", trim_message(str(report.longrepr or "failed"))


# ----------------------------------------------------------------------------------------------------
# Points table
# ----------------------------------------------------------------------------------------------------


@dataclass
class TaskResult:
    """One graded task: all its tests folded together."""

    id: str
    lesson: str
    title: str
    points: float
    earned: float
    status: str  # pass | fail | not-graded
    message: str
    tests: list[TestRecord] = field(default_factory=list)


def _task_sort_key(task_id: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-]", task_id))


def fold_tasks(records: list[TestRecord]) -> list[TaskResult]:
    """Group test records by task. A task passes only if all its tests passed; any failure fails it;
    otherwise any not-graded (or skipped) test makes it not graded. Earned = points only on pass."""
    by_task: dict[tuple[str, str], list[TestRecord]] = {}
    for r in records:
        if r.task is None:
            continue
        by_task.setdefault((r.lesson, r.task), []).append(r)
    out = []
    for (lesson, tid), recs in by_task.items():
        points = max((r.points for r in recs), default=0.0)
        failed = [r for r in recs if r.outcome in ("failed", "not-run")]
        ungraded = [r for r in recs if r.outcome in ("not-graded", "skipped")]
        if failed:
            status = "fail"
            first = failed[0]
            case = first.nodeid.split("::", 1)[-1]
            msg = f"{case}: {first.message}" if first.message else f"{case}: failed"
            real = [r for r in failed if r.exc_type != "NotRun"]
            if len(failed) > 1:
                msg += f"\n({len(real)} of {len(recs)} cases failed" + (
                    f", {len(failed) - len(real)} not run)" if len(real) < len(failed) else ")")
        elif ungraded:
            status = "not-graded"
            msg = ungraded[0].message or "not graded"
        else:
            status, msg = "pass", ""
        out.append(TaskResult(id=tid, lesson=lesson, title=recs[0].title, points=points,
                              earned=points if status == "pass" else 0.0, status=status, message=msg,
                              tests=recs))
    out.sort(key=lambda t: (t.lesson, _task_sort_key(t.id)))
    return out


def format_points(value: float) -> str:
    """``2.0`` -> ``2``, ``1.5`` -> ``1.5``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def points_table(tasks: list[TaskResult]) -> list[str]:
    """Lines of the points table (one block per lesson, a total line)."""
    if not tasks:
        return []
    w_id = max(4, *(len(t.id) for t in tasks))
    w_title = min(56, max(5, *(len(t.title) for t in tasks)))
    lines = [f"{'task':<{w_id}}  {'title':<{w_title}}  {'points':>6}  {'earned':>6}  status"]
    lesson = None
    for t in tasks:
        if t.lesson != lesson:
            lesson = t.lesson
            lines.append(f"-- {lesson} " + "-" * max(0, w_id + w_title + 24 - len(lesson)))
        title = t.title if len(t.title) <= w_title else t.title[: w_title - 3] + "..."
        lines.append(f"{t.id:<{w_id}}  {title:<{w_title}}  {format_points(t.points):>6}  "
                     f"{format_points(t.earned):>6}  {t.status}")
    earned = sum(t.earned for t in tasks)
    possible = sum(t.points for t in tasks)
    ng = sum(t.points for t in tasks if t.status == "not-graded")
    lines.append(f"total: {format_points(earned)} / {format_points(possible)} points"
                 + (f" ({format_points(ng)} not graded: need a GPU)" if ng else ""))
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the points table when the run held task-marked tests."""
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    recs = list(_FINISHED.values())
    tasks = fold_tasks(recs)
    if not tasks:
        return
    terminalreporter.write_sep("=", f"points (impl={os.environ.get('CUDA_COURSE_IMPL', 'student')}, "
                                    f"backend={backend_name()})")
    for line in points_table(tasks):
        terminalreporter.write_line(line)
