"""The task and result model of grading: per-test records, folded task results, the points table.

Shared by the pytest plugin (which writes records) and the grader (which folds them into verdicts).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from cudacourse.course import is_triton_task, task_sort_key

_MSG_LINES = 14
_MSG_CHARS = 1800


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


def trim_message(text: str, lines: int = _MSG_LINES, chars: int = _MSG_CHARS) -> str:
    """The first ``lines`` lines / ``chars`` characters of a failure message, marked when cut."""
    text = text.strip("\n")
    parts = text.splitlines()
    cut = len(parts) > lines
    text = "\n".join(parts[:lines])
    if len(text) > chars:
        text, cut = text[:chars], True
    return text + ("\n[...]" if cut else "")


def _value_words(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "x".join(str(e) for e in v)
    return str(v)


def case_words(nodeid: str, params: dict[str, Any] | None = None) -> str:
    """A test case in words for a learner: ``tests/test_01_relu.py::test_relu_scalar[31]`` with params
    ``{"n": 31}`` is ``relu scalar, n=31``; ``test_relu_backward_autograd[shape2]`` with ``{"shape": [17, 61]}``
    is ``relu backward autograd, shape=17x61``. (The raw id is for ``--verbose``.)"""
    name = nodeid.split("::")[-1]
    base = name.split("[", 1)[0].removeprefix("test_").replace("_", " ").strip()
    if params:
        return f"{base}, " + ", ".join(f"{k}={_value_words(v)}" for k, v in params.items())
    inside = name[len(name.split("[", 1)[0]):]
    return base + (f", case {inside.strip('[]')}" if inside else "")


@dataclass
class TaskResult:
    """One graded task: all its tests folded together."""

    id: str
    lesson: str
    title: str
    points: float
    earned: float
    status: str  # one of STATUSES: pass | fail | not-graded | interrupted
    message: str
    tests: list[TestRecord] = field(default_factory=list)


NOT_STARTED = "not started"  # the message of every task of a lesson whose exercise files are untouched
# The message of a GPU task on the simulator (pytest's skip reason too): never run there, never a pass.
GPU_SKIP_REASON = "not graded: needs a GPU (this run uses the CPU simulator; speed is measured on a GPU)"


def is_not_started(task: TaskResult) -> bool:
    """Whether ``task`` was not run because its exercise files are untouched stubs: the grader gives it status
    ``fail`` (0 points, as a failure would) with the message "not started" (a whole lesson untouched) or "not
    started: relu_torch.cu is still the stub" (one task's files, in a started lesson). Reports show it as a
    calm line, never as a failure to fix."""
    return task.message == NOT_STARTED or task.message.startswith(NOT_STARTED + ": ")


STATUSES = ("pass", "fail", "not-graded", "interrupted")  # "interrupted": the grade was stopped (SIGTERM, Ctrl-C)
INTERRUPTED_MESSAGE = "not graded: grading was stopped (SIGTERM or Ctrl-C) before this task finished"


def interrupted(task: TaskSpec) -> TaskResult:
    """The result of a task that had not finished when the grade was stopped: 0 points, status interrupted."""
    return TaskResult(task.id, task.lesson, task.title, task.points, 0.0, "interrupted", INTERRUPTED_MESSAGE)


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
            case = case_words(first.nodeid, first.params)
            text = re.sub(r"^(\w+): \1: ", r"\1: ", first.message)  # ("LaunchError: LaunchError: ..." once)
            msg = f"{case}: {text}" if text else f"{case}: failed"
            real = [r for r in failed if r.exc_type != "NotRun"]
            if len(failed) > 1:
                msg += f"\n({len(real)} of {len(recs)} cases failed" + (
                    f", {len(failed) - len(real)} not run)" if len(real) < len(failed) else ")")
        elif ungraded:
            status = "not-graded"
            msg = ungraded[0].message or "not graded"
        else:  # (a passed speed task says what was measured: cudacourse.speed's note)
            status, msg = "pass", "\n".join(r.message for r in recs if r.message)
        out.append(TaskResult(id=tid, lesson=lesson, title=recs[0].title, points=points,
                              earned=points if status == "pass" else 0.0, status=status, message=msg,
                              tests=recs))
    out.sort(key=lambda t: (t.lesson, task_sort_key(t.id)))
    return out


def format_points(value: float) -> str:
    """``2.0`` -> ``2``, ``1.5`` -> ``1.5``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _why_not_graded(t: TaskResult) -> str:
    """Why ``t`` (not graded) was not graded, in a few words, from its message (the skip reason of its tests)."""
    low = t.message.lower()
    if "triton package is not installed" in low:
        return "triton is not installed (make setup EXTRAS=triton)"
    if "triton track cannot run here" in low:
        return "the Triton track cannot run here (make doctor says why)"
    return "need a GPU"


def not_graded_points(tasks: list[TaskResult]) -> list[tuple[str, float]]:
    """(why, points) for the not-graded tasks among ``tasks``, one entry per reason, in the order first met."""
    out: dict[str, float] = {}
    for t in tasks:
        if t.status == "not-graded":
            why = _why_not_graded(t)
            out[why] = out.get(why, 0.0) + t.points
    return list(out.items())


def not_graded_why(tasks: list[TaskResult]) -> str:
    """Why the not-graded tasks among ``tasks`` were not graded, in a few words: "need a GPU" (speed tasks on the
    simulator), "triton is not installed (make setup EXTRAS=triton)" (the Triton twins), or both."""
    return "; ".join(why for why, _ in not_graded_points(tasks))


def total_line(tasks: list[TaskResult]) -> str:
    """The points table's last line: earned of possible, what this machine can award and what would add the rest
    (a GPU, Triton), and the optional Triton track's share."""
    earned = sum(t.earned for t in tasks)
    possible = sum(t.points for t in tasks)
    missing = not_graded_points(tasks)
    here = possible - sum(p for _, p in missing)
    line = f"total: {format_points(earned)} / {format_points(possible)} points"
    if missing:
        phrase = {"need a GPU": "need a GPU (the speed tasks and the GPU-only checks)",
                  "triton is not installed (make setup EXTRAS=triton)": "need Triton (make setup EXTRAS=triton)",
                  "the Triton track cannot run here (make doctor says why)":
                      "need the Triton track, which cannot run here (make doctor says why)"}
        rest = ", ".join(f"{format_points(p)} more {phrase.get(why, why)}" for why, p in missing)
        line += f"; this machine can award {format_points(here)} of them: {rest}"
    elif tasks:
        line += " (all of them can be earned here)"
    twins = [t for t in tasks if is_triton_task(t.id)]
    if twins:  # (a learner wondered whether the optional track was required: its share is named)
        line += (f"; {format_points(sum(t.points for t in twins))} of the {format_points(possible)} are the optional "
                 f"Triton track ({format_points(sum(t.earned for t in twins))} earned)")
    return line


def points_table(tasks: list[TaskResult]) -> list[str]:
    """Lines of the points table (one block per lesson, a total line). A title longer than the column wraps
    at a space onto the next lines (never cut mid-word)."""
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
        parts = textwrap.wrap(t.title, w_title, break_long_words=False, break_on_hyphens=False) or [""]
        status = NOT_STARTED if t.status == "fail" and is_not_started(t) else t.status
        lines.append(f"{t.id:<{w_id}}  {parts[0]:<{w_title}}  {format_points(t.points):>6}  "
                     f"{format_points(t.earned):>6}  {status}")
        lines += [f"{'':<{w_id}}  {p}" for p in parts[1:]]
    lines.append(total_line(tasks))
    return lines


@dataclass
class TaskSpec:
    """One task to run: its id, lesson and the test files holding its cases."""

    id: str
    lesson: str
    title: str
    points: float
    files: list[str]


class GradingError(Exception):
    """The grader itself could not grade (not the submission's fault)."""
