"""Verdicts: what a task process left behind, folded into each task's result.

Pure functions over a finished process's records (:class:`Run`); the runner (:mod:`cudacourse.grading.runner`)
decides from them which tasks run again, alone or in a fresh process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cudacourse.grading import protocol
from cudacourse.grading.processes import signal_name
from cudacourse.results import TaskResult, TaskSpec, TestRecord, fold_tasks


@dataclass
class Run:
    """What one pytest process over a group of tasks left behind (read from its report, :mod:`.protocol`)."""

    collected: dict[str, dict[str, Any]]
    results: dict[str, dict[str, Any]]
    culprit: str | None  # the test that was running when the process died or stalled
    timed_out: bool
    rc: int
    output: str
    tampered: list[str]
    limit: float
    backend: str | None = None  # where the process's kernels ran, as it resolved it (its ``backend`` record)


def sandbox_failure(run: Run) -> str:
    """The launcher's own complaint when the sandbox's launcher could not start the worker (exit 126 before any test
    was collected), else ''. A problem of the grading machine, never of the submission."""
    if run.rc != 126 or run.collected:
        return ""
    return next((ln for ln in run.output.splitlines() if ln.startswith("confine: ")), "")


def crash_note(run: Run) -> str:
    """What a task's failed cases say about how its process ended (a sandbox failure, a hang, a crash), or ''."""
    if sandbox := sandbox_failure(run):
        return (f"the grader could not start this task's sandbox ({sandbox}), twice: a problem of "
                "the grading machine, not of your code. Grade again; if it stays, tell your instructor")
    if run.timed_out:
        return (f"timed out: one case ran for more than {run.limit:g} s (an endless loop? a kernel or launcher "
                "that never returns?); the process was stopped")
    if run.rc < 0 or run.rc > 5:
        sig = signal_name(-run.rc) if run.rc < 0 else f"exit code {run.rc}"
        return (f"the test process died ({sig}): a crash, e.g. a wild pointer in host code or a corrupted "
                "CUDA context")
    if run.rc in (2, 3, 4):
        return f"pytest could not run this task's tests (exit code {run.rc}):\n" + tail(run.output, 12)
    return ""


def records_of(task: TaskSpec, run: Run) -> list[TestRecord]:
    """The records of ``task``'s cases in ``run``: reported results, ``not-run`` for those that never ended."""
    out = []
    for nodeid, c in run.collected.items():
        if c.get("task") != task.id or c.get("lesson") != task.lesson:
            continue
        r = run.results.get(nodeid, c)
        rec = protocol.record_of(r)
        if nodeid not in run.results:
            rec.outcome = "not-run"
        out.append(rec)
    return out


# Failures that only the task's own code can cause: no confirming run alone on a GPU (a corrupted CUDA context
# shows as a CUDA error in a later case, never as wrong values, a compile error, or a store into the guards the GPU
# worker lays around the call's own buffers).
_OWN_VERDICTS = frozenset({"AssertionError", "CheckFailure", "CompileError", "OutOfBoundsError"})


BUILT_ONCE = "(built once for the whole grade, before its tasks ran; every task that uses this file fails so) "


def backend_mismatch(ran: str, graded: str) -> str:
    """The message of a task whose process ran its kernels on ``ran`` in a grade on ``graded``."""
    return (f"this task's process ran its kernels on backend {ran!r}, but this grade runs on {graded!r}: a fault "
            "of the grader, not of your code (no verdict measured elsewhere is kept). Tell your instructor.")


def own_verdicts(recs: list[TestRecord]) -> bool:
    """True when every failed case of a task failed with a verdict of its own (:data:`_OWN_VERDICTS`)."""
    failed = [r for r in recs if r.outcome == "failed"]
    return bool(failed) and all(r.exc_type in _OWN_VERDICTS for r in failed)


def verdict(task: TaskSpec, recs: list[TestRecord], note: str = "",
             culprit: str | None = None, timed_out: bool = False, tampered: list[str] | None = None) -> TaskResult:
    """Fold a task's records (after its run) into a TaskResult (feedback is added after the whole run)."""
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
    return result


def task_line(lesson: str, tid: str, title: str, status: str, seconds: float) -> str:
    """The progress line of a finished task."""
    return f"{lesson} task {tid} {title}: {status} ({seconds:.1f} s)"


def tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.strip().splitlines()[-lines:])
