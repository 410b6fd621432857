"""Report writers: JSON (the fixed schema), JUnit XML, Markdown, the batch gradebook CSV, Gradescope."""

from __future__ import annotations

import csv
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudacourse.course import is_triton_task
from cudacourse.grading.feedback import compile_error_key
from cudacourse.results import (
    NOT_STARTED,
    TaskResult,
    format_points,
    is_not_started,
    not_graded_why,
    points_table,
)

# ----------------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------------


def _confinement() -> str:
    """Which confinement the grader's workers ran under (``sandbox.describe_for_grading``; "unconfined: ..." if not)."""
    from cudacourse.sandbox import describe_for_grading

    return describe_for_grading()


@dataclass
class Report:
    """Everything written about one graded submission."""

    backend: str
    device: str
    impl: str
    tasks: list[TaskResult]
    name: str = ""
    seed: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rejected: list[str] = field(default_factory=list)  # submitted files refused before building, with why
    confinement: str = field(default_factory=_confinement)  # e.g. "landlock ABI 7 + ..." or "unconfined: <why>"

    def totals(self) -> tuple[float, float, float]:
        """(earned, possible, not graded)."""
        return (sum(t.earned for t in self.tasks), sum(t.points for t in self.tasks),
                sum(t.points for t in self.tasks if t.status == "not-graded"))

    def to_json(self) -> dict[str, Any]:
        """The report in the course's fixed JSON schema."""
        earned, possible, ng = self.totals()
        return {"backend": self.backend, "device": self.device, "impl": self.impl,
                "confinement": self.confinement, "earned": earned,
                "possible": possible, "not_graded": ng,
                "tasks": [{"id": t.id, "lesson": t.lesson, "title": t.title, "points": t.points,
                           "earned": t.earned, "status": t.status, "message": t.message} for t in self.tasks]}


def write_json(rep: Report, path: Path) -> None:
    """Write the JSON report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rep.to_json(), indent=2) + "\n")


def task_seconds(t: TaskResult) -> float:
    """Seconds a task's tests ran (the sum of their measured durations; 0 for a task that did not run)."""
    return sum(r.duration for r in t.tests)


def _seconds(s: float) -> str:
    """A JUnit ``time`` attribute: seconds as a decimal number (readers such as dorny/test-reporter parse it)."""
    return f"{max(0.0, s):.3f}"


def write_junit(rep: Report, path: Path) -> None:
    """Write a JUnit XML file: one testsuite per lesson, one testcase per task."""
    root = ET.Element("testsuites", name=f"cudacourse grade {rep.name}".strip(), time=_seconds(rep.seconds))
    lessons: dict[str, list[TaskResult]] = {}
    for t in rep.tasks:
        lessons.setdefault(t.lesson, []).append(t)
    if rep.errors:
        lessons.setdefault("grader", [])
    for lesson, tasks in lessons.items():
        suite = ET.SubElement(root, "testsuite", name=lesson, tests=str(len(tasks)),
                              failures=str(sum(t.status == "fail" for t in tasks)),
                              skipped=str(sum(t.status == "not-graded" for t in tasks)), errors="0",
                              time=_seconds(sum(task_seconds(t) for t in tasks)))
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="backend", value=rep.backend)
        ET.SubElement(props, "property", name="seed", value=str(rep.seed))
        ET.SubElement(props, "property", name="confinement", value=rep.confinement)
        for t in tasks:
            case = ET.SubElement(suite, "testcase", classname=lesson, name=f"task {t.id}: {t.title}",
                                 time=_seconds(task_seconds(t)))
            ET.SubElement(ET.SubElement(case, "properties"), "property", name="points",
                          value=f"{format_points(t.earned)}/{format_points(t.points)}")
            if t.status == "fail":
                first = t.message.splitlines()[0] if t.message else "failed"
                ET.SubElement(case, "failure", message=first[:300]).text = t.message
            elif t.status == "not-graded":
                ET.SubElement(case, "skipped", message=t.message or "not graded")
            elif t.status == "interrupted":
                ET.SubElement(case, "error", message="interrupted").text = t.message
        if lesson == "grader":
            for err in rep.errors:
                case = ET.SubElement(suite, "testcase", classname="grader", name="grading")
                ET.SubElement(case, "error", message=err.splitlines()[0][:300]).text = err
            suite.set("tests", str(len(rep.errors)))
            suite.set("errors", str(len(rep.errors)))
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def markdown_report(rep: Report) -> str:
    """A feedback report to post back to the learner (GitHub-flavoured Markdown)."""
    earned, possible, ng = rep.totals()
    title = f"# Grading report{': ' + rep.name if rep.name else ''}"
    lines = [title, "",
             f"**{format_points(earned)} / {format_points(possible)} points**"
             + (f" ({format_points(ng)} not graded here: {not_graded_why(rep.tasks)})" if ng else ""), "",
             f"Backend `{rep.backend}` ({rep.device}); inputs drawn with `CUDA_COURSE_SEED={rep.seed}` "
             f"(replay: `CUDA_COURSE_SEED={rep.seed} python -m pytest tests/`).", "",
             f"Confinement of the graded code: {rep.confinement}.", ""]
    if rep.rejected:
        lines += ["## Rejected files", "", *[f"- {r}" for r in rep.rejected], ""]
    if rep.errors:
        lines += ["## Grading problems", "", "The grader could not grade everything (not your fault):", ""]
        lines += ["```", *rep.errors, "```", ""]
    lines += ["| task | lesson | title | points | status |", "|---|---|---|---|---|"]
    icon = {"pass": "pass", "fail": "**fail**", "not-graded": "not graded", "interrupted": "**interrupted**"}
    for t in rep.tasks:
        status = NOT_STARTED if t.status == "fail" and is_not_started(t) else icon[t.status]
        lines.append(f"| {t.id} | {t.lesson} | {t.title.replace('|', '/')} | "
                     f"{format_points(t.earned)}/{format_points(t.points)} | {status} |")
    failed = [t for t in rep.tasks if t.status == "fail" and not is_not_started(t)]
    idle = sorted({t.lesson for t in rep.tasks if t.message == NOT_STARTED})
    idle += [f"task {t.id} ({_untouched(t)})" for t in rep.tasks
             if t.status == "fail" and is_not_started(t) and t.lesson not in idle]
    if idle:
        lines += ["", "Not started (exercise files untouched): " + ", ".join(idle) + "."]
    if failed:
        lines += ["", "## What to fix", ""]
        for t in failed:
            lines += [f"### Task {t.id}: {t.title}", "", "```", t.message.replace("```", "'''"), "```", ""]
    stopped = [t for t in rep.tasks if t.status == "interrupted"]
    if stopped:
        lines += ["", "Grading was stopped before these tasks finished (not your fault; grade again): "
                  + ", ".join(f"task {t.id}" for t in stopped) + "."]
    ungraded = [t for t in rep.tasks if t.status == "not-graded"]
    if ungraded:
        lines += ["", "Not graded on this machine: " + ", ".join(f"task {t.id}" for t in ungraded)
                  + f" ({not_graded_why(rep.tasks)})."]
    return "\n".join(lines) + "\n"


def _untouched(t: TaskResult) -> str:
    """What is untouched of a not-started task of a started lesson, from its message: "not started:
    relu_torch.cu is still the stub" is ``relu_torch.cu is still the stub``."""
    return t.message.removeprefix(NOT_STARTED).removeprefix(":").strip() or "its files are still the stubs"


def not_started_line(t: TaskResult) -> str:
    """The one calm line for a task not run because its files are untouched stubs, in the style of the lesson
    line ("02_reduce: not started, 17 points"): ``1.6 relu_forward: not started (relu_torch.cu is still the
    stub)``. The title's head (before its first ": ") names it; the task id tells twins apart."""
    name = t.title.split(": ", 1)[0].strip() if t.title else ""
    optional = "optional; " if is_triton_task(t.id) else ""  # (a learner took the twins for required work)
    return f"{t.id}{' ' + name if name else ''}: {NOT_STARTED} ({optional}{_untouched(t)})"


def print_report(rep: Report, verbose: bool = False, out: Any = None) -> None:
    """The grade output for a learner: what failed and why, one line per lesson not started and per task whose
    files are untouched (never a failure paragraph: nothing of theirs ran), then the points table last, where
    the eye lands. ``verbose``: whole messages, every lesson's rows."""
    out = out or sys.stdout
    head = f"== {rep.name} ==" if rep.name else "== grade =="
    ran = any(not is_not_started(t) for t in rep.tasks)  # (a seed means nothing when no test ran)
    seed = f"; random inputs: seed {rep.seed} (make grade ARGS=--seed={rep.seed} repeats them)" if ran else ""
    print(f"{head} backend={rep.backend} impl={rep.impl} ({rep.seconds:.0f} s){seed}", file=out)
    if verbose or rep.confinement.startswith("unconfined"):
        # a learner needs no sandbox details; an instructor must see when workers were not (fully) confined
        print(f"confinement: {rep.confinement}", file=out)
    idle: dict[str, float] = {}
    for t in rep.tasks:
        if t.message == NOT_STARTED:
            idle[t.lesson] = idle.get(t.lesson, 0.0) + t.points
    # One compile error blocks every task of its file: show it once, with the tasks it blocks.
    blocked: dict[str, list[str]] = {}
    for t in rep.tasks:
        key = compile_error_key(t) if t.status == "fail" else None
        if key is not None:
            blocked.setdefault(key, []).append(t.id)
    shown: set[str] = set()
    for t in rep.tasks:
        if t.status != "fail" or t.lesson in idle or is_not_started(t):
            continue
        lines = t.message.splitlines()
        key = compile_error_key(t)
        if key is not None:
            if key in shown:
                continue
            shown.add(key)
            ids = blocked[key]
            what = "build stopped" if "the build did not finish within" in t.message else "compile error"
            print(f"{what}, blocks task{'s' if len(ids) > 1 else ''} {', '.join(ids)}:", file=out)
        body = lines if verbose else lines[:6]
        more = "" if verbose or len(lines) <= 6 else f"\n    ... ({len(lines) - 6} more lines: --verbose)"
        # headed by the task's title; the message starts with the case in words (results.case_words); the raw
        # test ids only with --verbose
        print(f"task {t.id} failed ({t.title}): " + "\n    ".join(body) + more, file=out)
        if verbose:
            ids = [r.nodeid for r in t.tests if r.outcome in ("failed", "not-run")]
            if ids:
                print("    failed test ids: " + ", ".join(ids), file=out)
    for r in rep.rejected:
        print(f"REJECTED: {r}", file=out)
    for e in rep.errors:
        print(f"GRADING PROBLEM: {e}", file=out)
    for t in rep.tasks:  # a started lesson's task whose own files are untouched (a GPU task on the sim: not graded)
        if t.lesson not in idle and t.status == "fail" and is_not_started(t):
            print(not_started_line(t), file=out)
    for lesson, pts in idle.items():  # (after the started lessons' task lines: a learner read 01's last)
        print(f"{lesson}: {NOT_STARTED}, {format_points(pts)} points", file=out)
    table = points_table(rep.tasks if verbose else [t for t in rep.tasks if t.lesson not in idle])
    for line in table[:-1]:
        print(line, file=out)
    print(points_table(rep.tasks)[-1] if rep.tasks else "total: 0 / 0 points", file=out)


def write_gradebook(reports: list[Report], path: Path) -> None:
    """One CSV row per submission (batch grading): totals, then each task's earned points."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        tasks = reports[0].tasks if reports else []
        w.writerow(["submission", "earned", "possible", "not_graded"] + [f"task {t.id}" for t in tasks])
        for rep in reports:
            e, p, ng = rep.totals()
            w.writerow([rep.name, format_points(e), format_points(p), format_points(ng)]
                       + [format_points(t.earned) for t in rep.tasks])


def gradescope_results(rep: Report) -> dict[str, Any]:
    """The report in Gradescope's autograder format (``/autograder/results/results.json``).

    One test per task with ``score``/``max_score``; a task not graded here (it needs a GPU) has
    ``max_score`` 0, so it neither earns nor costs points on a CPU autograder.

    Its ``status``: Gradescope knows only "passed" and "failed" (and, when ``status`` is left out, derives it
    from the score, which for 0 of 0 shows a pass). A task that never ran did not pass, and a green tick would
    tell the learner it did; so it is "failed", its name starts with "[not graded]" and its output says why and
    that it costs nothing. The not-graded total is in the top output too.
    """
    tests = []
    for t in rep.tasks:
        graded = t.status != "not-graded"
        output = t.message if t.status != "pass" else ""
        if not graded:
            why = t.message or "not graded: this task needs a GPU"
            output = f"NOT GRADED here, 0 of 0 points (neither earned nor lost). {why[:1].upper()}{why[1:]}"
        tests.append({"name": ("" if graded else "[not graded] ") + f"task {t.id}: {t.title}", "number": t.id,
                      "score": t.earned, "max_score": t.points if graded else 0.0,
                      "status": "passed" if t.status == "pass" else "failed",
                      "output": output, "tags": [t.lesson] + ([] if graded else ["not-graded"])})
    earned = sum(t.earned for t in rep.tasks)
    out: dict[str, Any] = {"score": earned, "output": f"backend {rep.backend} ({rep.device}), seed {rep.seed}, "
                                                      f"confinement: {rep.confinement}",
                           "tests": tests}
    ng = [t for t in rep.tasks if t.status == "not-graded"]
    if ng:
        out["output"] += (f"\n\n{len(ng)} task(s) not graded here ({format_points(sum(t.points for t in ng))} points, "
                          "shown as [not graded], 0 of 0): " + ", ".join(t.id for t in ng))
    if rep.errors:
        out["output"] += "\n\nThe grader could not grade everything:\n" + "\n".join(rep.errors)
    return out


def write_gradescope(rep: Report, path: Path) -> None:
    """Write Gradescope's ``results.json`` for one submission."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(gradescope_results(rep), indent=2) + "\n")
