"""How a failed or skipped test reads in the course's words: the pytest plugin's message helpers.

Used by :mod:`cudacourse.pytest_plugin` for ``make check``'s brief failures (``--cc-brief``) and for the records
it writes for the grader (:mod:`cudacourse.grading.protocol`).
"""

from __future__ import annotations

import re

import pytest

from cudacourse.results import trim_message


def course_words(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    """A failure already in the course's words, without the traceback through the course's own test code (task
    1.6's stub printed one): a stub's "TODO(task N.M) not implemented" error, whatever its type (TORCH_CHECK
    raises RuntimeError, a Python stub NotImplementedError), or a test's assertion message. '' otherwise."""
    text = str(excinfo.value)
    todo = re.search(r"TODO\(task ([\w.]+)\)[^\n]*not implemented[^\n]*"
                     r"|not implemented[^\n]*TODO\(task ([\w.]+)\)[^\n]*", text)
    if todo is None and excinfo.errisinstance(NotImplementedError):
        todo = re.search(r"TODO\(task ([\w.]+)[,)][^\n]*()", text)
    if todo:
        return f"task {todo.group(1) or todo.group(2)} is not written yet (the stub says: {todo.group(0).strip()})"
    if excinfo.errisinstance(AssertionError) and text.strip():
        words = text.split("\nassert ", 1)[0].strip()  # (pytest's rewritten comparison follows the message)
        return words if words and not words.startswith("assert ") else ""
    return ""


_HINTS_SHOWN: set[str] = set()


def brief(text: str) -> str:
    """``text`` with each "Hint:" line it repeats from an earlier failure of this run shortened (a learner's
    report: the same hint paragraph once per failing size)."""
    out = []
    for line in text.splitlines():
        hint = line.strip()
        if hint.startswith("Hint:"):
            if hint in _HINTS_SHOWN:
                line = line[:len(line) - len(line.lstrip())] + "Hint: the same as above."
            _HINTS_SHOWN.add(hint)
        out.append(line)
    return "\n".join(out)


def skip_reason(report: pytest.TestReport) -> str:
    """The reason of a skipped phase, without pytest's "Skipped: " prefix."""
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        reason = str(lr[2])
    else:
        reason = str(lr or "")
    return reason.removeprefix("Skipped: ").strip()


def failure_text(call: pytest.CallInfo[None], report: pytest.TestReport) -> tuple[str, str]:
    """(exception type, first lines of its message) for a failed phase."""
    exc = call.excinfo
    if exc is not None:
        # a course check's failure reads as the AssertionError it is (CheckFailure only marks it as complete)
        etype = "AssertionError" if exc.type.__name__ == "CheckFailure" else exc.type.__name__
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
