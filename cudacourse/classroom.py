"""A pytest plugin for GitHub Classroom's per-task steps (``-p cudacourse.classroom``; the templates in
``templates/`` load it).

A step whose tests were all skipped (a Triton twin where triton cannot run, a task whose tests were not
collected) exits non-zero, so Classroom awards no points for a task that never ran: pytest itself exits 0 when
everything was skipped, and Classroom reads exit 0 as a pass. Not graded is never a pass.
"""

from __future__ import annotations

from typing import Any

_SEEN: dict[str, Any] = {"passed": 0, "skipped": []}


def pytest_configure(config: Any) -> None:
    """Start counting the passed tests of this run."""
    _SEEN.update(passed=0, skipped=[])


def pytest_runtest_logreport(report: Any) -> None:
    """Count a passed test; remember why a test was skipped."""
    if report.when == "call" and report.passed:
        _SEEN["passed"] += 1
    elif report.skipped:
        _SEEN["skipped"].append(str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else "skipped")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """Turn "every test skipped, none passed" into a failed step: not graded is never a pass."""
    if int(exitstatus) == 0 and _SEEN["passed"] == 0:
        why = _SEEN["skipped"][0] if _SEEN["skipped"] else "no test of this task ran"
        print(f"\nNOT GRADED here, so no points: no test of this task passed ({why}).")
        session.exitstatus = 1
