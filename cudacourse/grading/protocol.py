"""The contract between the grader and its task processes: the one module both sides import.

A task process is ``pytest`` with the course plugin (:mod:`cudacourse.pytest_plugin`) over some tasks, started by
the grader (:mod:`cudacourse.grading.runner`) in a staged slot. They exchange:

- **Options** (grader -> task process): :data:`TASK_OPTION` (repeatable: keep only the tests of these task ids),
  :data:`REPORT_OPTION` (the JSONL report file), and one of two touch files the process waits for after
  collection: :data:`WAIT_OPTION` (a timed process; created once the GPU is its alone) or :data:`GO_OPTION`
  (the builds its tests use were still running when it started).
- **The report** (task process -> grader): one JSON object per line, appended and flushed as it happens, so the
  grader knows which test was running when a process crashed or hung. Events: ``backend`` (where the process's
  kernels run, as it resolved it), ``collected`` and ``result`` (a :class:`~cudacourse.results.TestRecord`'s
  fields, :data:`RECORD_KEYS`, ``result`` with its end time ``t``), ``start`` (``nodeid``, ``t``) and ``finished``
  (``exitstatus``: every test has reported). Times are CLOCK_MONOTONIC (:func:`now`), shared by the machine.
- **Environment** (grader -> task process): the run's settings as ``CUDA_COURSE_*`` variables
  (``settings.to_env``), and the builds the warm-up stopped or that failed (``settings.UNBUILDABLE_ENV``,
  ``settings.BUILD_ERRORS_ENV``), the shared and seed caches (``buildcache.SHARED_ENV``, ``SEED_ENV``); each is
  defined where it is read.

This module imports nothing of :mod:`cudacourse.grading`: the pytest side imports it alone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from cudacourse.results import TestRecord

PLUGIN = "cudacourse.pytest_plugin"
TASK_OPTION = "--cc-task"
REPORT_OPTION = "--cc-report"
WAIT_OPTION = "--cc-wait-file"
GO_OPTION = "--cc-go-file"

# The fields of a TestRecord in a ``collected`` or ``result`` event.
RECORD_KEYS = ("nodeid", "file", "lesson", "task", "points", "title", "gpu", "params", "outcome", "message",
               "exc_type", "duration")


def pytest_command(python: str, slot: Path, report: Path | None) -> list[str]:
    """The start of a task process's command line: pytest in ``slot`` with the plugin, reporting to ``report``."""
    cmd = [python, "-m", "pytest", "-q", "-c", str(slot / "pytest.ini"), "--rootdir", str(slot), "-p", PLUGIN]
    return cmd + ([REPORT_OPTION, str(report)] if report is not None else [])


def now() -> float:
    """CLOCK_MONOTONIC, which every process of the machine shares: when a case started and ended."""
    return round(time.monotonic(), 3)


def record_fields(rec: TestRecord) -> dict[str, Any]:
    """A record's fields as the report carries them (:data:`RECORD_KEYS`)."""
    return {"nodeid": rec.nodeid, "file": rec.file, "lesson": rec.lesson, "task": rec.task,
            "points": rec.points, "title": rec.title, "gpu": rec.gpu, "params": rec.params,
            "outcome": rec.outcome, "message": rec.message, "exc_type": rec.exc_type,
            "duration": round(rec.duration, 3)}


def record_of(event: dict[str, Any]) -> TestRecord:
    """The :class:`TestRecord` of a ``collected`` or ``result`` event."""
    return TestRecord(**{k: event[k] for k in RECORD_KEYS})


def emit(path: str | Path | None, event: dict[str, Any]) -> None:
    """Append one event to the report at ``path`` (nothing without one: not a grading task process)."""
    if not path:
        return
    # Not fsync'ed: the grader reads the file through the page cache, which a killed process leaves complete.
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(event) + "\n")


def read_records(path: Path) -> list[dict[str, Any]]:
    """The events a task process wrote so far (a torn last line is dropped)."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
