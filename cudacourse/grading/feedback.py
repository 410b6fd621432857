"""Feedback from results, after the run: hidden-case wording, rejections, missing files, hints, sanitizer."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cudacourse.course import course as course_model
from cudacourse.errors import REPEATED_COMPILE_ERROR, CourseError
from cudacourse.exercise_state import function_unchanged
from cudacourse.grading.staging import Submission
from cudacourse.results import TaskResult, TestRecord, trim_message

# A staged copy's folder inside the grader's work folder: /tmp/cc-grade-XXXX/slot3/ (also sub000/, collect/).
_STAGED = re.compile(r"(?:/[^\s:'\"()]*)?/cc-grade-[^/\s]+/(?:slot\d+|sub\d+|collect|harness)/")
_SIM_GUARD = ("A thread reached past the end of the data: either a thread beyond the end has no bounds check, or "
              "the index arithmetic is off (an access such as i + 1); check both.")
_SIM_GRID_EXAMPLE = re.compile(r",? e\.g\. \(n \+ \d+\) / \d+")
_OOB_AT = re.compile(r"OutOfBoundsError .*? at ([\w./-]+\.cuh?):(\d+), past the end")
_BOUNDS_CHECK = re.compile(r"\bif\s*\(.*(<|>)|\bfor\s*\(.*;.*(<|>)|\bwhile\s*\(.*(<|>)")


def _int_sizes(params: dict[str, Any]) -> list[int]:
    out = []
    for k, v in params.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, int) and k.lower() not in ("seed", "blocks", "block", "threads"):
            out.append(v)
        elif isinstance(v, list) and all(isinstance(e, int) for e in v):
            out += v
    return out


HINTS = {
    "bounds": "Hint: the last block (or tile) is only partly inside the data when the size is not a multiple of "
              "the block size; guard every access with a bounds check such as `if (i < n)`.",
    "unwritten": "Hint: some outputs were never written: every element needs a thread that writes it.",
    "index": "Hint: your kernel has a bounds check, yet it wrote past the end: check the index arithmetic (the "
             "index you access must be the one your check tests).",
    "grid": "Hint: the elements at the tail were never written, so no thread reached them: check the launcher's "
            "grid size (a number of blocks that rounds down leaves the tail without threads).",
    "short": "Hint: the elements at the tail were never written, and the launcher is the one given: the kernel "
             "stops short of them (check its loop and its bound).",
    "launch": "Hint: the launcher line named above launches an empty grid for this n: check the launcher's grid "
              "size for sizes smaller than one block.",
    "race": "Hint: a thread read shared memory another thread writes without a barrier in between: put "
            "__syncthreads() between the writes and the reads (and before the next overwrite).",
    "barrier": "Hint: every thread of a block must reach the same __syncthreads(); do not put one inside a branch "
               "some threads skip (e.g. after `if (i >= n) return;`): guard the work, not the barrier.",
    "timeout": "Hint: check every loop's condition and step (a grid-stride loop must add gridDim.x * blockDim.x) "
               "and that no thread waits for something that never happens.",
    "compile": "Hint: fix the first compiler error; the message names your file and line.",
    "stopped": "Hint: if this file built before, the machine was probably too busy: grade again (or raise "
               "--build-timeout); if it never builds, look for template or constexpr recursion or pasted data.",
    "todo": "Hint: this TODO is still the stub; implement it (see the TODO comment for the size and the hint).",
    "mutation": "Hint: inputs are read-only: write only to the output buffer.",
    "hidden": "Hint: the public tests pass but hidden cases fail: your kernel must work for every size and every "
              "input, not only the ones in tests/ (no hard-coded sizes, nothing cached between calls).",
    "crash": "Hint: a crash or illegal address usually means an index out of range in a kernel or a launcher "
             "passing the wrong size; run the task on the simulator (CUDA_COURSE_BACKEND=sim) for a diagnosis.",
}


def display_paths(text: str, sub: Submission, root: Path | None = None) -> str:
    """``text`` with the grader's staged copies (``/tmp/cc-grade-.../slot0/lessons/...``) replaced by the
    learner's own files: the submission folder, or this checkout's ``lessons/`` (``solutions/`` when the
    reference solutions are graded)."""
    base = f"{sub.source}/" if sub.source is not None else (f"{root}/" if root is not None else "")

    def repl(m: re.Match[str]) -> str:
        return base

    out = _STAGED.sub(repl, text)
    if sub.impl == "solution" and sub.source is None:
        out = out.replace(f"{base}lessons/", f"{base}solutions/")
    return out


def has_bounds_check(path: Path, line: int) -> bool:
    """Whether the kernel around ``path:line`` (from its ``__global__`` line down to ``line``) compares an
    index with a bound (an ``if``, ``for`` or ``while`` with ``<``/``>``)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return False
    start = max(0, min(line, len(lines)) - 1)
    while start > 0 and "__global__" not in lines[start]:
        start -= 1
    body = "\n".join(lines[start:line])
    body = re.sub(r"//[^\n]*", "", body)  # the TODO comment itself says "if i < n"
    return bool(_BOUNDS_CHECK.search(body))


def solution_lines(root: Path | None, lesson: str) -> set[str]:
    """Whitespace-free lines of code inside the ``BEGIN SOLUTION`` blocks of ``lesson``'s solutions (those
    long enough to give something away), to keep them out of hints."""
    folder = course_model(root).kernel_dir(lesson, "solution") if root is not None else None
    out: set[str] = set()
    if folder is None or not folder.is_dir():
        return out
    for f in sorted(folder.iterdir()):
        if f.suffix not in (".cu", ".cuh", ".py"):
            continue
        inside = False
        for ln in f.read_text(errors="replace").splitlines():
            if re.match(r"^\s*(//|#)\s*BEGIN SOLUTION", ln):
                inside = True
            elif re.match(r"^\s*(//|#)\s*END SOLUTION", ln):
                inside = False
            elif inside:
                code = re.sub(r"\s+", "", re.sub(r"//.*|#.*", "", ln))
                if len(code) >= 12:
                    out.add(code)
    return out


def never_ran(text: str) -> bool:
    """Whether the failure shows the learner's code has not run at all yet (the stub is still there)."""
    low = text.lower()
    return ("nothing was written at all" in low or "todo(task" in low or "is the kernel body still the stub" in low
            or "not implemented" in low)


def remove_answers(text: str, lesson: str, root: Path | None) -> str:
    """Drop the "Hint:" lines of ``text`` that give the answer away: any of them while the learner's code has
    not run at all, and those that quote a line of the lesson's solution at any time."""
    sol = solution_lines(root, lesson)
    stub = never_ran(text)
    out = []
    for ln in text.splitlines():
        if ln.strip().startswith("Hint:"):
            flat = re.sub(r"\s+", "", ln)
            if stub or any(code in flat for code in sol):
                continue
        out.append(ln)
    return "\n".join(out)


_WHERE = re.compile(r"([^\s:'\"()]+\.(?:cuh?|py))(?::(\d+))?")
REPEATED = REPEATED_COMPILE_ERROR  # errors.repeated (later cases)


def _compile_text(result: TaskResult) -> str | None:
    for r in result.tests:
        if r.outcome == "failed" and r.exc_type in ("CompileError", "UnsupportedError"):
            return r.message.strip() or "CompileError"
    m = re.search(r"(?:CompileError|UnsupportedError): .*", result.message)
    return m.group(0) if m else None


def compile_error_key(result: TaskResult) -> str | None:
    """Where the compiler stopped (``lessons/01_relu/relu.cu:12``) when ``result`` failed to compile, else
    ``None``: tasks with the same key are blocked by one error, shown once."""
    text = _compile_text(result)
    if text is None:
        return None
    first = _STAGED.sub("", text.splitlines()[0].split("Error:", 1)[-1]).strip()
    m = _WHERE.search(first)
    if m is None:
        return first
    return f"{m.group(1)}:{m.group(2)}" if m.group(2) else m.group(1)


def complete_compile_errors(results: list[TaskResult]) -> None:
    """Give every task blocked by a compile error the compiler's full message: in one test process only the
    first case shows it, the later ones point at it (``errors.repeated``), which means nothing in a report."""
    full: dict[str, str] = {}
    for r in results:
        key = compile_error_key(r)
        text = _compile_text(r)
        if key is not None and text is not None and REPEATED not in text:
            full.setdefault(key, text)
    for r in results:
        key = compile_error_key(r)
        if key is None or key not in full or REPEATED not in r.message:
            continue
        whole = full[key]
        r.message = re.sub(r"(?:CompileError|UnsupportedError): " + re.escape(REPEATED) + r"[^\n]*",
                           lambda _m, whole=whole: whole, r.message, count=1)


def choose_hints(recs: list[TestRecord], message: str, bounds_checked: bool = False,
                 launcher_given: bool | None = None) -> list[str]:
    """The hints that apply to a failed task, from its failures' types, messages and sizes.

    ``bounds_checked``: the kernel that wrote out of bounds already has a bounds check, so the hint is about
    the index arithmetic, not about adding a check. ``launcher_given``: the failing launcher is the course's own,
    unchanged (``True``), changed (``False``) or not known: an unwritten tail then points at the kernel, not at
    the launcher's grid."""
    failed = [r for r in recs if r.outcome == "failed" and r.exc_type != "NotRun"]
    passed = [r for r in recs if r.outcome == "passed"]
    text = (message + "\n" + "\n".join(r.exc_type + " " + r.message for r in failed)).lower()
    keys: list[str] = []

    def add(k: str) -> None:
        if k not in keys:
            keys.append(k)

    if "the build did not finish within" in text:  # errors.build_stopped: no compiler error, no loop ran
        return [HINTS["stopped"]]
    if "compileerror" in text or "unsupportederror" in text or "rejected before building" in text:
        add("compile")
    # the learner's code has not run yet only when EVERY failure says so: a float4 kernel without its tail
    # writes nothing at n = 3 but is not a stub (its other sizes fail on the tail alone)
    stub = all(never_ran(r.exc_type + " " + r.message) for r in failed) if failed else never_ran(text)
    if "todo(task" in text or stub:
        add("todo")
    oob = "outofbounds" in text or "out-of-bounds" in text or "out of bounds" in text
    if oob:
        add("index" if bounds_checked else "bounds")
    if "a grid or block dimension is 0" in text:
        add("launch")
    # check.assert_close(vector=4) said the float4 part is right and named the tail part: no launcher or bounds hint
    vector_tail = "after the last whole" in text or "there is no whole" in text
    tail_unwritten = "never written" in text and "only the tail is wrong" in text and not stub
    if vector_tail:
        pass
    elif tail_unwritten and not oob:
        add("short" if launcher_given else "grid")
    elif "only the tail is wrong" in text and not oob:
        add("bounds")
    if "raceerror" in text or " race" in text:
        add("race")
    if "barriererror" in text or "divergent" in text or "deadlock" in text:
        add("barrier")
    if "kerneltimeout" in text or "timed out" in text or "timeout" in text:
        add("timeout")
    if "was modified by the kernel" in text:
        add("mutation")
    if "never written" in text and not stub and not tail_unwritten and not oob and not vector_tail:
        add("unwritten")
    if any(r.exc_type in ("Crash",) for r in failed):
        add("crash")
    # Size pattern: only sizes that are not a multiple of a warp fail while aligned ones pass.
    f_sizes = [s for r in failed for s in _int_sizes(r.params)]
    p_sizes = [s for r in passed for s in _int_sizes(r.params)]
    if (f_sizes and p_sizes and all(s % 32 for s in f_sizes) and any(s % 32 == 0 for s in p_sizes)
            and not stub and not vector_tail and not {"index", "grid", "launch", "short"} & set(keys)):
        add("bounds")
    hidden_failed = [r for r in failed if "/hidden/" in r.file.replace("\\", "/")]
    public_failed = [r for r in failed if r not in hidden_failed]
    public_passed = [r for r in passed if "/hidden/" not in r.file.replace("\\", "/")]
    if hidden_failed and not public_failed and public_passed:
        add("hidden")
    if stub:  # the learner's code has not run yet: say only that, nothing that gives the answer
        keys = [k for k in keys if k in ("todo", "compile", "hidden")] or ["todo"]
    return [HINTS[k] for k in keys]


def _oob_bounds_checked(msg: str, lesson: str, sub: Submission, root: Path | None) -> bool:
    m = _OOB_AT.search(msg)
    if not m:
        return False
    name, line = Path(m.group(1)).name, int(m.group(2))
    base = sub.source if sub.source is not None else root
    if base is None:
        return False
    folder = course_model(root).files_dir(lesson, sub.impl, sub.source)
    return has_bounds_check(folder / name, line)


_LAUNCHER_TAIL = ("Check how many threads the launcher starts (a block count that rounds down leaves the tail without "
                  "threads), and the kernel's loop bound or tail handling.")  # check.assert_close, launcher not known


def _launcher_given(recs: list[TestRecord], lesson: str, sub: Submission, root: Path | None) -> bool | None:
    """Whether the launcher a failed case called (the first word of its check's message, e.g. ``relu_v1_scalar``)
    is the course's own, unchanged, in the learner's files; ``None`` when that cannot be told."""
    if root is None:
        return None
    try:
        folder = course_model(root).files_dir(lesson, sub.impl, sub.source)
    except CourseError:  # a lesson the model does not declare: nothing to tell
        return None
    for r in recs:
        if r.outcome != "failed":
            continue
        m = re.match(r"(?:\w+: )?([A-Za-z_]\w*) ", r.message)
        if m is None:
            continue
        for f in sorted(folder.glob("*.cu")):
            known = function_unchanged(f, course_model(root).kernel_dir(lesson, "solution") / f.name, m.group(1))
            if known is not None:
                return known
    return None


def feedback(result: TaskResult, sub: Submission, hidden_feedback: str = "brief", root: Path | None = None) -> str:
    """The message of a failed task, computed from its results after the run: a failed hidden case only
    named (``hidden_feedback="brief"``), rejected and missing files first, then the hints that apply.

    ``root`` is the course checkout: paths name the learner's own files (the submission's, or the checkout's
    ``lessons/``), and no hint quotes the solutions in ``root/solutions/``."""
    msg = result.message
    recs = result.tests
    failed = [r for r in recs if r.outcome == "failed"]
    first = failed[0] if failed else None
    if first is not None and "/hidden/" in first.file.replace("\\", "/") and hidden_feedback == "brief":
        case = first.nodeid.split("::", 1)[-1]
        msg = f"a hidden case failed: {case} ({first.exc_type or 'assertion'})"
        if len(failed) > 1:
            msg += f"; {len(failed)} of {len(recs)} cases failed"
    rej = [r for r in sub.rejections if r.lesson == result.lesson]
    # A rejected file is staged as one failing #include (no launchers): its tasks fail to build or to find
    # their launcher, hidden cases included.
    if rej and ("REJECTED_BY_THE_GRADER" in msg or any(r.exc_type in ("CompileError", "AttributeError")
                                                       or "REJECTED_BY_THE_GRADER" in r.message for r in failed)):
        msg = "\n".join(r.text() for r in rej) + "\n" + msg
    missing = [m for m in sub.missing if f"/{result.lesson}/" in m]
    if missing and ("no launcher" in msg or "AttributeError" in msg or "No such file" in msg):
        msg = f"missing from the submission: {', '.join(missing)}\n" + msg
    checked = _oob_bounds_checked(msg, result.lesson, sub, root)
    if checked:
        msg = msg.replace(_SIM_GUARD, "Your kernel has a bounds check: check the index arithmetic.")
    msg = _SIM_GRID_EXAMPLE.sub("", msg)
    # (any failed case's message: the first failure shown may be another size's, e.g. an empty grid at n = 1)
    told = "\n".join([msg, *(r.message for r in failed)])
    given = _launcher_given(recs, result.lesson, sub, root) if _LAUNCHER_TAIL in told else None
    if given is True:
        msg = msg.replace(_LAUNCHER_TAIL, "The launcher is the one given (unchanged), so the kernel stops short of "
                                          "these elements: check its loop or its bound.")
    elif given is False:  # the launcher it is: the task's hint (about the kernel body) does not fit
        msg = msg.replace(_LAUNCHER_TAIL, "Your launcher differs from the one given: check how many threads it "
                                          "starts (a block count that rounds down leaves the tail without threads).")
        msg = "\n".join(ln for ln in msg.splitlines() if not ln.strip().startswith("Hint:"))
    hints = choose_hints(recs, msg, bounds_checked=checked, launcher_given=given)
    msg = remove_answers(display_paths(msg, sub, root), result.lesson, root)
    msg = trim_message(msg, lines=16, chars=2400)
    hints = [h for h in hints if h.split(":", 1)[1].strip()[:40].lower() not in msg.lower()]
    return msg + ("\n" + "\n".join(hints) if hints else "")


# ----------------------------------------------------------------------------------------------------
# Secrets: no line of a hidden test or a solution reaches a learner, whatever their code printed or threw
# ----------------------------------------------------------------------------------------------------

_SECRET_MIN = 16  # shorter lines (``import pytest``, ``}``) give nothing away and occur everywhere
REMOVED = "[a line quoting a file you cannot see was removed]"


def _flat_lines(files: list[Path]) -> set[str]:
    out: set[str] = set()
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        out.update(flat for ln in text.splitlines() if len(flat := re.sub(r"\s+", "", ln)) >= _SECRET_MIN)
    return out


def secret_lines(root: Path, hidden: Path | None) -> set[str]:
    """Whitespace-free lines of the hidden tests and of the solutions that appear in no public file of the
    course (lessons/, tests/, cudacourse/): a message quoting one comes from code that read a file it must
    not see (the confinement's second line: the slot a worker reads holds the hidden tests)."""
    secret = _flat_lines([p for p in course_model(root).solutions_dir.rglob("*") if p.suffix in (".cu", ".cuh", ".py")])
    if hidden is not None:
        secret |= _flat_lines([p for p in hidden.rglob("*") if p.is_file()])
    public = _flat_lines([p for d in ("lessons", "tests", "cudacourse") for p in (root / d).rglob("*")
                          if p.suffix in (".cu", ".cuh", ".py", ".toml", ".md")])
    return secret - public


def scrub(text: str, secrets: set[str]) -> str:
    """``text`` without the lines that quote a secret line (see :func:`secret_lines`)."""
    if not secrets or not text:
        return text
    out = []
    for ln in text.splitlines():
        flat = re.sub(r"\s+", "", ln)
        hit = len(flat) >= _SECRET_MIN and any(sec in flat for sec in secrets)
        if not hit or not out or out[-1] != REMOVED:
            out.append(REMOVED if hit else ln)
    return "\n".join(out)

