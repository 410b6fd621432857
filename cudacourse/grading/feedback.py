"""Feedback from results, after the run: hidden-case wording, rejections, missing files, hints, sanitizer."""

from __future__ import annotations

from typing import Any

from cudacourse.grading.results import TaskResult, TestRecord, trim_message
from cudacourse.grading.staging import Submission


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
    "unwritten": "Hint: some outputs were never written: make sure the grid covers every element (round the "
                 "number of blocks up: (n + block - 1) / block) or loop with a grid stride.",
    "race": "Hint: a thread read shared memory another thread writes without a barrier in between: put "
            "__syncthreads() between the writes and the reads (and before the next overwrite).",
    "barrier": "Hint: every thread of a block must reach the same __syncthreads(); do not put one inside a branch "
               "some threads skip (e.g. after `if (i >= n) return;`): guard the work, not the barrier.",
    "timeout": "Hint: check every loop's condition and step (a grid-stride loop must add gridDim.x * blockDim.x) "
               "and that no thread waits for something that never happens.",
    "compile": "Hint: fix the first compiler error; the message names your file and line.",
    "todo": "Hint: this TODO is still the stub; implement it (see the TODO comment for the size and the hint).",
    "mutation": "Hint: inputs are read-only: write only to the output buffer.",
    "hidden": "Hint: the public tests pass but hidden cases fail: your kernel must work for every size and every "
              "input, not only the ones in tests/ (no hard-coded sizes, nothing cached between calls).",
    "crash": "Hint: a crash or illegal address usually means an index out of range in a kernel or a launcher "
             "passing the wrong size; run the task on the simulator (CUDA_COURSE_BACKEND=sim) for a diagnosis.",
}


def choose_hints(recs: list[TestRecord], message: str) -> list[str]:
    """The hints that apply to a failed task, from its failures' types, messages and sizes."""
    failed = [r for r in recs if r.outcome == "failed" and r.exc_type != "NotRun"]
    passed = [r for r in recs if r.outcome == "passed"]
    text = (message + "\n" + "\n".join(r.exc_type + " " + r.message for r in failed)).lower()
    keys: list[str] = []

    def add(k: str) -> None:
        if k not in keys:
            keys.append(k)

    if "compileerror" in text or "unsupportederror" in text or "rejected before building" in text:
        add("compile")
    if "todo(task" in text or "is the kernel body still the stub" in text:
        add("todo")
    if "outofbounds" in text or "out-of-bounds" in text or "out of bounds" in text or "only the tail is wrong" in text:
        add("bounds")
    if "raceerror" in text or " race" in text:
        add("race")
    if "barriererror" in text or "divergent" in text or "deadlock" in text:
        add("barrier")
    if "kerneltimeout" in text or "timed out" in text or "timeout" in text:
        add("timeout")
    if "was modified by the kernel" in text:
        add("mutation")
    if "never written" in text and "todo" not in keys:
        add("unwritten")
    if any(r.exc_type in ("Crash",) for r in failed):
        add("crash")
    # Size pattern: only sizes that are not a multiple of a warp fail while aligned ones pass.
    f_sizes = [s for r in failed for s in _int_sizes(r.params)]
    p_sizes = [s for r in passed for s in _int_sizes(r.params)]
    if f_sizes and p_sizes and all(s % 32 for s in f_sizes) and any(s % 32 == 0 for s in p_sizes):
        add("bounds")
    hidden_failed = [r for r in failed if "/hidden/" in r.file.replace("\\", "/")]
    public_failed = [r for r in failed if r not in hidden_failed]
    public_passed = [r for r in passed if "/hidden/" not in r.file.replace("\\", "/")]
    if hidden_failed and not public_failed and public_passed:
        add("hidden")
    return [HINTS[k] for k in keys]


def feedback(result: TaskResult, sub: Submission, hidden_feedback: str = "brief") -> str:
    """The message of a failed task, computed from its results after the run: a failed hidden case only
    named (``hidden_feedback="brief"``), rejected and missing files first, then the hints that apply."""
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
    if rej and ("REJECTED_BY_THE_GRADER" in msg or any(r.exc_type == "CompileError" for r in failed)):
        msg = "\n".join(r.text() for r in rej) + "\n" + msg
    missing = [m for m in sub.missing if f"/{result.lesson}/" in m]
    if missing and ("no launcher" in msg or "AttributeError" in msg or "No such file" in msg):
        msg = f"missing from the submission: {', '.join(missing)}\n" + msg
    hints = choose_hints(recs, msg)
    msg = trim_message(msg, lines=16, chars=2400)
    hints = [h for h in hints if h.split(":", 1)[1].strip()[:40].lower() not in msg.lower()]
    return msg + ("\n" + "\n".join(hints) if hints else "")
