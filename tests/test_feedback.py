"""Feedback that fits the mistake (cudacourse/grading/feedback.py) and the learner's grade output (cli.py).

The messages below are the simulator's and cudacourse.check's own wording, captured from real runs of
task 1.1 with the mistake named in each test.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from cudacourse.course import course
from cudacourse.grading import cli, plan, reports
from cudacourse.grading.feedback import HINTS, feedback
from cudacourse.grading.reports import Report
from cudacourse.grading.staging import Submission
from cudacourse.results import TaskResult, TestRecord

ROOT = course().root
SLOT = "/tmp/cc-grade-abc123/slot0/"
SOLUTION_HINT = ("  Hint: relu_v1_scalar_kernel (TODO task 1.1): i = blockIdx.x * blockDim.x + threadIdx.x; "
                 "if (i < n) y[i] = fmaxf(x[i], 0.0f);")
OOB = ("OutOfBoundsError in relu_v1_scalar_kernel, block (0,0,0): thread (0,0,0) writes y[1] at relu.cu:{line}, "
       "past the end of y (1 element). A thread reached past the end of the data: either a thread beyond the end "
       "has no bounds check, or the index arithmetic is off (an access such as i + 1); check both.")
TAIL = ("relu_v1_scalar y (n=1000) (task 1.1): 232 of 1000 elements differ\n"
        "  at 768: yours nan, expected 0\n"
        "  232 elements were never written (still poison), first at flat index 768, last at 999: does every output "
        "element get a thread, and did you implement the TODO?\n"
        "  Only the tail is wrong (flat indices 768..999 of 1000): check the bounds or tail handling for sizes that "
        "are not a multiple of your block or vector width.\n" + SOLUTION_HINT)
ZERO_GRID = (f"LaunchError: relu_v1_scalar_kernel<<<(0,1,1), (256,1,1), 0>>> at {SLOT}lessons/01_relu/relu.cu:63: "
             "invalid configuration: a grid or block dimension is 0 (an empty launch is an error in CUDA; check the "
             "grid size arithmetic, e.g. (n + 255) / 256).")
STUB = ("relu_v1_scalar y (n=1000) (task 1.1): 1000 of 1000 elements differ\n"
        "  1000 elements were never written (still poison), first at flat index 0, last at 999: does every output "
        "element get a thread, and did you implement the TODO?\n"
        "  Nothing was written at all: is the kernel body still the stub?\n" + SOLUTION_HINT)


def _result(exc_type: str, message: str, task: str = "1.1", n: int = 1000) -> TaskResult:
    rec = TestRecord(nodeid=f"tests/test_01_relu.py::test_relu_scalar[{n}]", file=str(ROOT / "tests/test_01_relu.py"),
                     lesson="01_relu", task=task, points=2.0, title="relu", gpu=False, params={"n": n},
                     outcome="failed", message=message, exc_type=exc_type)
    return TaskResult(task, "01_relu", "relu", 2.0, 0.0, "fail", f"test_relu_scalar[{n}]: {exc_type}: {message}",
                      [rec])


def _submission(tmp_path: Path, body: str) -> tuple[Submission, int]:
    """A learner's copy whose relu_v1_scalar_kernel has ``body``; returns it and the body's line number."""
    src = (ROOT / "lessons/01_relu/relu.cu").read_text()
    marker = "    // TODO(task 1.1)"
    assert marker in src
    folder = tmp_path / "learner" / "lessons" / "01_relu"
    folder.mkdir(parents=True)
    text = src.replace(marker, body + "\n" + marker, 1)
    (folder / "relu.cu").write_text(text)
    line = text.splitlines().index(body.splitlines()[-1]) + 1
    return Submission("learner", tmp_path / "learner", "submission"), line


def test_write_past_the_end_with_a_bounds_check_points_at_the_index(tmp_path: Path) -> None:
    sub, line = _submission(tmp_path, "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                      "    if (i < n) y[i + 1] = fmaxf(x[i], 0.0f);")
    msg = feedback(_result("OutOfBoundsError", OOB.format(line=line)), sub, root=ROOT)
    assert HINTS["index"] in msg and HINTS["bounds"] not in msg
    assert "such as if (i < n)" not in msg  # the check is there: never advise adding it


def test_write_past_the_end_without_a_bounds_check_asks_for_one(tmp_path: Path) -> None:
    sub, line = _submission(tmp_path, "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                      "    y[i] = fmaxf(x[i], 0.0f);")
    msg = feedback(_result("OutOfBoundsError", OOB.format(line=line)), sub, root=ROOT)
    assert HINTS["bounds"] in msg and HINTS["index"] not in msg


def test_tail_never_written_points_at_the_grid_and_quotes_no_solution(tmp_path: Path) -> None:
    sub, _ = _submission(tmp_path, "    int i = blockIdx.x * blockDim.x + threadIdx.x;")
    msg = feedback(_result("AssertionError", TAIL), sub, root=ROOT)
    assert HINTS["grid"] in msg and HINTS["bounds"] not in msg
    assert "fmaxf(x[i], 0.0f)" not in msg and "(n + " not in msg and "never written" in msg


def test_zero_size_grid_names_the_launcher_line_in_the_learners_file(tmp_path: Path) -> None:
    sub, _ = _submission(tmp_path, "    int i = 0;")
    msg = feedback(_result("LaunchError", ZERO_GRID, n=31), sub, root=ROOT)
    assert HINTS["launch"] in msg
    assert f"{tmp_path}/learner/lessons/01_relu/relu.cu:63" in msg
    assert "cc-grade-" not in msg and "slot0" not in msg and "(n + 255) / 256" not in msg


def test_untouched_stub_gets_no_answer_giving_hint() -> None:
    sub = Submission("", None, "student")
    msg = feedback(_result("AssertionError", STUB), sub, root=ROOT)
    assert HINTS["todo"] in msg
    assert "Hint:" not in msg.replace(HINTS["todo"], "")  # no other hint, and not the test's solution hint
    assert "blockIdx.x * blockDim.x" not in msg


def test_nothing_written_at_one_small_size_is_not_called_a_stub() -> None:
    """A float4 kernel without its tail writes nothing at n = 3 and only the tail is wrong at n = 1000: a
    learner's report had "is the kernel body still the stub?" for it. Only when every case says so is it one."""
    small = _result("AssertionError", STUB.replace("1000", "3"), n=3)
    tail = _result("AssertionError", TAIL)
    both = TaskResult("1.1", "01_relu", "relu", 2.0, 0.0, "fail", small.message, [*small.tests, *tail.tests])
    msg = feedback(both, Submission("", None, "student"), root=ROOT)
    assert HINTS["todo"] not in msg and HINTS["grid"] in msg


def test_checkout_paths_name_lessons_or_solutions() -> None:
    msg = feedback(_result("LaunchError", ZERO_GRID, n=31), Submission("", None, "student"), root=ROOT)
    assert f"{ROOT}/lessons/01_relu/relu.cu:63" in msg
    msg = feedback(_result("LaunchError", ZERO_GRID, n=31), Submission("", None, "solution"), root=ROOT)
    assert f"{ROOT}/solutions/01_relu/relu.cu:63" in msg


def test_compile_error_shown_once_with_the_tasks_it_blocks() -> None:
    err = (f"{SLOT}lessons/01_relu/relu.cu:54: error: expected ';' before '}}' token\n\n"
           f"{SLOT}lessons/01_relu/relu.cu:54:89: error: expected ';' before '}}' token")
    sub = Submission("", None, "student")
    tasks = []
    for tid in ("1.1", "1.2", "1.3"):
        r = _result("CompileError", err, task=tid)
        r.message = feedback(r, sub, root=ROOT)
        tasks.append(r)
    out = io.StringIO()
    reports.print_report(Report("sim", "CPU simulator", "student", tasks), out=out)
    text = out.getvalue()
    assert text.count("expected ';' before") == 2  # the one error's two lines, once
    assert "blocks tasks 1.1, 1.2, 1.3" in text and "cc-grade-" not in text


def test_a_stopped_build_is_not_called_a_compile_error_and_gets_only_its_own_hint() -> None:
    """A build the grader stopped (--build-timeout; on a busy machine even an untouched file) has no compiler
    error and ran no loop: neither hint fits, and the report says "build stopped"."""
    from cudacourse.errors import build_stopped

    err = str(build_stopped(f"{SLOT}lessons/01_relu/relu_torch.cu", 300))
    sub = Submission("", None, "student")
    r = _result("CompileError", err, task="1.6")
    r.message = feedback(r, sub, root=ROOT)
    assert HINTS["stopped"] in r.message
    assert HINTS["compile"] not in r.message and HINTS["timeout"] not in r.message
    out = io.StringIO()
    reports.print_report(Report("sim", "CPU simulator", "student", [r]), out=out)
    assert "build stopped, blocks task 1.6" in out.getvalue() and "compile error" not in out.getvalue()


def test_one_unwritten_element_is_said_in_the_singular() -> None:
    import torch

    from cudacourse import check

    want = torch.ones(5)
    got = want.clone()
    got[4] = float("nan")
    with pytest.raises(AssertionError) as e:
        check.assert_close(got, want, name="y")
    assert "1 element was never written" in str(e.value) and "elements were" not in str(e.value)


def test_not_started_lessons_summarised_and_the_table_last() -> None:
    started = _result("AssertionError", TAIL)
    idle = [TaskResult(t.id, t.lesson, t.title, t.points, 0.0, "fail", reports.NOT_STARTED)
            for t in course().lesson("02_reduce").tasks]
    out = io.StringIO()
    reports.print_report(Report("sim", "CPU simulator", "student", [started, *idle]), out=out)
    lines = out.getvalue().splitlines()
    pts = sum(t.points for t in idle)
    assert f"02_reduce: not started, {pts:g} points" in lines
    assert lines[-1].startswith("total: 0 / ") and not any(ln.startswith("2.1 ") for ln in lines)
    assert lines.index(f"02_reduce: not started, {pts:g} points") < lines.index(
        next(ln for ln in lines if ln.startswith("1.1 ")))
    out = io.StringIO()
    reports.print_report(Report("sim", "CPU simulator", "student", [started, *idle]), verbose=True, out=out)
    assert any(ln.startswith("2.1 ") for ln in out.getvalue().splitlines())


def test_an_untouched_task_of_a_started_lesson_is_one_calm_line() -> None:
    """A learner who had done 1.1-1.5 but not opened relu_torch.cu read "task 1.6 failed (...): not started: ..."
    like a failure paragraph. It is one line in the style of the lesson line, 0 points, and in no "What to fix";
    its JSON status stays "fail" (0 points, as before: JUnit, Gradescope and CI read it unchanged)."""
    c = course()
    declared = plan.declared_tasks(c, None)
    (idle,) = plan.not_started_results(c, declared, {("01_relu", "1.6"): "relu_torch.cu is still the stub"}, set(),
                                      "sim")
    assert idle.message == "not started: relu_torch.cu is still the stub"  # what the grader records
    started = _result("AssertionError", TAIL)
    rep = Report("sim", "CPU simulator", "student", [started, idle], seed=7)
    out = io.StringIO()
    reports.print_report(rep, out=out)
    text = out.getvalue()
    lines = text.splitlines()
    assert "1.6 relu_forward: not started (relu_torch.cu is still the stub)" in lines, text
    assert "task 1.6 failed" not in text and "task 1.1 failed" in text
    row = next(ln for ln in lines if ln.startswith("1.6 ") and "torch::Tensor" in ln)  # the points table's
    assert row.split()[-2:] == ["not", "started"] and " 0  not started" in row, row  # earned 0, not "fail"
    assert lines[-1].startswith("total: 0 / ")
    md = reports.markdown_report(rep)
    assert "### Task 1.6" not in md and "### Task 1.1" in md
    assert "task 1.6 (relu_torch.cu is still the stub)" in md
    assert rep.to_json()["tasks"][1]["status"] == "fail" and rep.to_json()["tasks"][1]["earned"] == 0
    # A twin's line says it is optional, and a started lesson's lines come before the lessons not started.
    twin = TaskResult("1.T1", "01_relu", "Triton twin: relu", 1.0, 0.0, "fail",
                      "not started: relu_triton.py is still the stub")
    other = TaskResult("2.1", "02_reduce", "reduce_v2", 3.0, 0.0, "fail", reports.NOT_STARTED)
    out = io.StringIO()
    reports.print_report(Report("sim", "CPU simulator", "student", [started, idle, twin, other], seed=7), out=out)
    lines = out.getvalue().splitlines()
    assert "1.T1 Triton twin: not started (optional; relu_triton.py is still the stub)" in lines
    assert lines.index("1.T1 Triton twin: not started (optional; relu_triton.py is still the stub)") < \
        lines.index("02_reduce: not started, 3 points")


def test_the_grade_header_explains_its_seed_only_when_tests_ran() -> None:
    """A learner saw 'seed=1198345699' at the head of a grade that ran nothing, different each time, unexplained."""
    started = _result("AssertionError", TAIL)
    idle = [TaskResult(t.id, t.lesson, t.title, t.points, 0.0, "fail", reports.NOT_STARTED)
            for t in course().lesson("02_reduce").tasks]
    for tasks, shown in (([started, *idle], True), (idle, False)):
        out = io.StringIO()
        reports.print_report(Report("sim", "CPU simulator", "student", tasks, seed=4242), out=out)
        head = out.getvalue().splitlines()[0]
        assert ("random inputs: seed 4242 (make grade ARGS=--seed=4242 repeats them)" in head) == shown, head
        assert "seed=4242 (" not in head and " seed=" not in head, head  # no bare "seed=N" any more


def test_grade_skips_untouched_lessons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An untouched copy of the course is neither built nor run: every task 'not started' in the report."""
    sub = tmp_path / "learner"
    for les in course():
        (sub / "lessons" / les.id).mkdir(parents=True)
        for f in les.exercise_files:
            (sub / "lessons" / les.id / f).write_bytes((ROOT / "lessons" / les.id / f).read_bytes())
    out = tmp_path / "g.json"
    assert cli.main(["--submission", str(sub), "--backend", "sim", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert len(rep["tasks"]) == len(course().tasks())
    # (a task this machine cannot grade says why after "not started": a Triton twin without Triton)
    assert {t["message"].split(" (not graded")[0] for t in rep["tasks"]} == {"not started"}
    assert {t["status"] for t in rep["tasks"] if t["id"] not in {x.id for x in course().tasks() if x.gpu}} == {"fail"}
    text = capsys.readouterr().out
    points = sum(t.points for t in course().lesson("01_relu").tasks)
    assert f"01_relu: not started, {points:g} points" in text and "task 1.1 failed" not in text


def test_notebook_task_14_cell_on_the_stub_is_deterministic() -> None:
    """Lesson 01's task 1.4 cell allocates poisoned (NaN) outputs, so on the untouched stub it says "nothing
    was written" the same way every run, never showing whatever random memory torch.empty_like held."""
    import torch

    import cudacourse as cc
    from cudacourse import check

    nb = json.loads((ROOT / "lessons/01_relu/relu.ipynb").read_text())
    src = next("".join(c["source"]) for c in nb["cells"]
               if c["cell_type"] == "code" and "class ReLU(" in "".join(c["source"]))
    assert "empty_like" not in src
    m = cc.lesson("01_relu", impl="student")
    messages = []
    for _ in range(2):
        with pytest.raises(AssertionError) as e:
            exec(src, {"torch": torch, "check": check, "m": m})
        messages.append(str(e.value))
    assert "Nothing was written at all" in messages[0] and "yours nan" in messages[0]
    assert messages[0] == messages[1]


def test_compile_error_repeated_in_one_process_gets_the_full_text_in_the_report() -> None:
    """Under pytest later cases of a broken file say one line (errors.repeated); the grade report gives
    every blocked task the compiler's whole message and still shows it once."""
    from cudacourse.grading.feedback import REPEATED, complete_compile_errors

    err = f"{SLOT}lessons/01_relu/relu.cu:54: error: expected ';' before '}}' token\n  54 | y[i] = x[i]\n"
    first = _result("CompileError", err, task="1.1")
    later = [_result("CompileError", f"{REPEATED}, {SLOT}lessons/01_relu/relu.cu:54", task=t) for t in ("1.2", "1.3")]
    tasks = [first, *later]
    complete_compile_errors(tasks)
    assert all("expected ';' before" in t.message and REPEATED not in t.message for t in tasks)
    sub = Submission("", None, "student")
    for t in tasks:
        t.message = feedback(t, sub, root=ROOT)
    out = io.StringIO()
    reports.print_report(Report("sim", "CPU simulator", "student", tasks), out=out)
    assert out.getvalue().count("54 | y[i] = x[i]") == 1 and "blocks tasks 1.1, 1.2, 1.3" in out.getvalue()


def test_compiler_output_never_quotes_a_file_outside_the_submission(tmp_path: Path) -> None:
    """An #include trick the screen misses (a digraph) makes g++ quote the included file in its errors: the
    CompileError keeps the learner's own lines and the compiler's words, and points at the #include."""
    import os
    import subprocess

    from cudacourse.errors import compile_error

    secret = tmp_path / "instructor" / "hidden_notes.txt"
    secret.parent.mkdir()
    secret.write_text("CCSECRET_7f3a9c: the hidden answer is 42\n")
    learner = tmp_path / "lessons" / "01_relu" / "relu.cu"
    learner.parent.mkdir(parents=True)
    learner.write_text(f'#include <cstdio>\n%:include "{secret}"\nint f() {{ return 1 }}\n')
    out = subprocess.run(["g++", "-x", "c++", "-fsyntax-only", str(learner)], capture_output=True, text=True,
                         env={**os.environ, "LC_ALL": "C"}).stderr
    assert "CCSECRET_7f3a9c" in out  # the compiler does quote it
    e = compile_error(out, str(learner))
    assert "CCSECRET_7f3a9c" not in str(e) and "hidden answer" not in str(e) and str(secret) not in str(e)
    assert e.line == 2 and "not part of your submission" in str(e)
    # A relative climb out of the lesson folder is outside it too.
    learner.write_text('#include <cstdio>\n%:include "../../instructor/hidden_notes.txt"\n')
    out = subprocess.run(["g++", "-x", "c++", "-fsyntax-only", str(learner)], capture_output=True, text=True,
                         env={**os.environ, "LC_ALL": "C"}).stderr
    assert "CCSECRET_7f3a9c" in out and "CCSECRET_7f3a9c" not in str(compile_error(out, str(learner)))
    # The learner's own errors are kept, with the compiler's excerpt of their line.
    learner.write_text("int f() { return 1 }\n")
    out = subprocess.run(["g++", "-x", "c++", "-fsyntax-only", str(learner)], capture_output=True, text=True,
                         env={**os.environ, "LC_ALL": "C"}).stderr
    e = compile_error(out, str(learner))
    assert e.line == 1 and "expected ';'" in str(e) and "return 1 }" in str(e) and "not shown" not in str(e)


def test_messages_are_scrubbed_of_hidden_and_solution_lines(tmp_path: Path) -> None:
    """Whatever learner code printed or threw (it may read the hidden tests staged beside it), no line of a
    hidden test or of a solution that is not public reaches the report; public lines stay."""
    from cudacourse.grading.feedback import REMOVED, scrub, secret_lines

    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "test_01_relu_hidden.py").write_text("# CCSECRET-hidden-7f3a9c\nimport pytest\n"
                                                   "def test_hidden(): assert relu(1234.5) == 1234.5\n")
    secrets = secret_lines(ROOT, hidden)
    # Lines of the lesson 01 solution that appear in no public file (stub, tests, explainer) are secret.
    sol = [ln for ln in (ROOT / "solutions/01_relu/relu.cu").read_text().splitlines()
           if "".join(ln.split()) in secrets]
    assert sol and "importpytest" not in secrets
    msg = ("RuntimeError: # CCSECRET-hidden-7f3a9c\nimport pytest\n"
           f"def test_hidden(): assert relu(1234.5) == 1234.5\n  {sol[0]}\nyours nan, expected 1")
    out = scrub(msg, secrets)
    assert "CCSECRET" not in out and "1234.5" not in out and sol[0].strip() not in out
    assert out.splitlines() == ["RuntimeError: # CCSECRET-hidden-7f3a9c"[:0] + REMOVED, "import pytest", REMOVED,
                                "yours nan, expected 1"]


def test_a_many_mb_file_is_refused_unread_costing_only_its_tasks(tmp_path: Path) -> None:
    """Issue 14: a kernel file padded to many MB is rejected at staging (no build), with its size and the
    limit; the lesson's other files are staged as they are."""
    from cudacourse.grading.staging import MAX_SOURCE_BYTES, stage_kernels

    c = course()
    learner = tmp_path / "learner" / "lessons" / "01_relu"
    learner.parent.mkdir(parents=True)
    import shutil

    shutil.copytree(c.kernel_dir("01_relu", "solution"), learner)
    with open(learner / "relu.cu", "a") as f:
        f.write(("// padding " + "x" * 100 + "\n") * (MAX_SOURCE_BYTES // 100 + 10))
    sub = Submission("learner", tmp_path / "learner", "submission")
    dst = tmp_path / "staged"
    stage_kernels(sub, dst, ["01_relu"], c)
    assert [r.file for r in sub.rejections] == ["relu.cu"]
    why = sub.rejections[0].text()
    size = (learner / "relu.cu").stat().st_size
    assert f"relu.cu is too large ({size / 1e6:.1f} MB)" in why and "at most 1.0 MB" in why and str(learner) not in why
    assert (dst / "lessons/01_relu/relu.cu").stat().st_size < 200
    assert (dst / "lessons/01_relu/relu_torch.cu").read_text() == (learner / "relu_torch.cu").read_text()


def test_the_staged_lesson_keeps_the_instructors_bench_not_the_submissions(tmp_path: Path) -> None:
    """Task 6.12's test times bench.py's own setup: the grader stages the instructor's bench.py next to
    lesson.toml (it was deleted with the submission's files, and 6.12 failed with FileNotFoundError on the
    H100); a bench.py in the submission is never used."""
    import shutil

    from cudacourse.grading.staging import stage_harness, stage_kernels

    c = course()
    learner = tmp_path / "learner" / "lessons" / "06_training"
    shutil.copytree(c.kernel_dir("06_training", "solution"), learner)
    (learner / "bench.py").write_text("raise SystemExit('the learner bench')\n")
    dst = tmp_path / "staged"
    stage_harness(dst, ["06_training"], None, c)
    stage_kernels(Submission("learner", tmp_path / "learner", "submission"), dst, ["06_training"], c)
    staged = dst / "lessons" / "06_training"
    assert (staged / "bench.py").read_text() == (c.lessons_dir / "06_training" / "bench.py").read_text()
    assert (staged / "lesson.toml").is_file() and (staged / "training.cu").is_file()


def test_a_rejected_file_is_named_in_its_tasks_feedback_even_for_a_hidden_case() -> None:
    """A file refused at staging has no launchers left: its tasks fail with AttributeError (hidden cases first
    in brief mode); the feedback still leads with why the file was refused."""
    from cudacourse.grading.screens import Rejection

    sub = Submission("learner", ROOT, "submission")
    sub.rejections.append(Rejection("01_relu", "relu.cu", ["relu.cu is too large (52.4 MB); the limit is 1.0 MB"]))
    r = _result("AttributeError", "lesson 01_relu has no launcher 'relu_v1_scalar' (found: relu_torch_forward)")
    r.tests[0].file = "/tmp/cc-grade-x/slot0/hidden/test_01_relu_hidden.py"
    text = feedback(r, sub, root=ROOT)
    assert text.startswith("lessons/01_relu/relu.cu was rejected before building: relu.cu is too large"), text
    assert "a hidden case failed" in text


# ----------------------------------------------------------------------------------------------------
# Issue 15, a learner's second walkthrough: headings, titles, reasons, hints that fit what the failure shows
# ----------------------------------------------------------------------------------------------------


def test_points_table_wraps_titles_at_spaces_never_mid_word() -> None:
    """Titles such as 'relu_v1_scalar: one thread per element, with a bounds check' were cut to '... a bounds...'."""
    from cudacourse.results import points_table

    tasks = [TaskResult(t.id, t.lesson, t.title, t.points, 0.0, "fail", "x") for t in course().tasks()]
    lines = points_table(tasks)
    text = "\n".join(lines)
    assert "..." not in text
    assert any(len(t.title) > 56 for t in tasks)  # (else the test proves nothing)
    words = " ".join(" ".join(ln.split()) for ln in lines).split()
    for t in tasks:
        row = next(i for i, ln in enumerate(lines) if ln.startswith(f"{t.id} "))
        title = " ".join(lines[row].split()[1:-3])
        k = row + 1
        while k < len(lines) and lines[k].startswith(" "):
            title += " " + lines[k].strip()
            k += 1
        assert title == t.title, (title, t.title)
    assert all(w in words for w in "bounds check".split())


def test_not_graded_total_says_why_triton_or_gpu() -> None:
    """Triton twins not graded because triton is missing were counted as 'need a GPU'."""
    from cudacourse.results import points_table
    from cudacourse.triton_track import Status, not_graded_reason

    why = not_graded_reason(Status("missing", None, "the triton package is not installed in this Python (x); "
                                                    "install it with `make setup EXTRAS=triton`"))
    twin = TaskResult("1.T1", "01_relu", "twin", 1.0, 0.0, "not-graded", why)
    speed = TaskResult("1.7", "01_relu", "speed", 2.0, 0.0, "not-graded",
                       "not graded: needs a GPU (this run uses the CPU simulator; speed is measured on a GPU)")
    assert points_table([twin])[-1] == "total: 0 / 1 points; this machine can award 0 of them: 1 more need Triton " \
                                       "(make setup EXTRAS=triton); 1 of the 1 are the optional Triton track (0 earned)"
    assert points_table([speed])[-1] == "total: 0 / 2 points; this machine can award 0 of them: 2 more need a GPU " \
                                        "(the speed tasks and the GPU-only checks)"
    # issue 34: the learner no longer works out what this machine can award, and Triton is not "need a GPU"
    both = points_table([speed, twin, TaskResult("1.1", "01_relu", "scalar", 2.0, 2.0, "pass", "")])[-1]
    assert both.startswith("total: 2 / 5 points; this machine can award 2 of them: 2 more need a GPU"), both
    assert "1 more need Triton (make setup EXTRAS=triton)" in both
    # A learner wondered whether the optional track was required: the total names its share.
    done = TaskResult("1.1", "01_relu", "scalar", 2.0, 2.0, "pass", "")
    started = TaskResult("1.T2", "01_relu", "twin", 3.0, 3.0, "pass", "")
    assert points_table([done, started, twin])[-1].endswith("; 4 of the 6 are the optional Triton track (3 earned)")
    assert "Triton" not in points_table([done, speed])[-1]


def test_grade_failure_is_headed_by_title_and_case_in_words() -> None:
    """'task 1.4 failed: test_relu_backward_kernel[1]: ...' named a raw test id; now the title and the case in
    words, the raw ids only with --verbose."""
    from cudacourse.results import fold_tasks

    rec = TestRecord(nodeid="tests/test_01_relu.py::test_relu_backward_kernel[1]", file="t.py", lesson="01_relu",
                     task="1.4", points=2.0, title="relu_backward: the backward kernel of an autograd.Function",
                     gpu=False, params={"n": 1}, outcome="failed", exc_type="AssertionError",
                     message="AssertionError: relu_backward dx (n=1) (task 1.4): 1 of 1 elements differ")
    (task,) = fold_tasks([rec])
    assert task.message.startswith("relu backward kernel, n=1: AssertionError: relu_backward dx (n=1)")
    rec.message = "LaunchError: LaunchError: relu_v1_scalar_kernel<<<(0,1,1), (256,1,1), 0>>> at relu.cu:63"
    assert fold_tasks([rec])[0].message.startswith("relu backward kernel, n=1: LaunchError: relu_v1_scalar_kernel")
    out = io.StringIO()
    reports.print_report(Report("sim", "CPU simulator", "student", [task]), out=out)
    text = out.getvalue()
    assert ("task 1.4 failed (relu_backward: the backward kernel of an autograd.Function): relu backward kernel, "
            "n=1:") in text
    assert "test_relu_backward_kernel" not in text
    out = io.StringIO()
    reports.print_report(Report("sim", "CPU simulator", "student", [task]), verbose=True, out=out)
    assert "failed test ids: tests/test_01_relu.py::test_relu_backward_kernel[1]" in out.getvalue()


LAUNCHER_TAIL = ("relu_v1_scalar y (n=1000) (task 1.1): 232 of 1000 elements differ\n"
                 "  232 elements were never written (still poison), first at flat index 768, last at 999: does every "
                 "output element get a thread, and did you implement the TODO?\n"
                 "  Only the tail is wrong (flat indices 768..999 of 1000), and it was never written: no thread "
                 "reached it. Check how many threads the launcher starts (a block count that rounds down leaves the "
                 "tail without threads), and the kernel's loop bound or tail handling.\n"
                 "  Hint: relu_v1_scalar_kernel (TODO task 1.1): each thread computes its global index")


def test_unwritten_tail_blames_a_changed_launcher_not_the_kernel(tmp_path: Path) -> None:
    """A learner's right kernel with a launcher of n / 256 blocks got the kernel's hint after 'Only the tail is
    wrong'; an untouched launcher got 'check how many threads the launcher starts'."""
    body = "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = fmaxf(x[i], 0.0f);"
    sub, _ = _submission(tmp_path, body)
    f = tmp_path / "learner/lessons/01_relu/relu.cu"
    text = f.read_text()
    given = "relu_v1_scalar_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, y, n);"
    assert text.count(given) == 2  # the launcher of 1.1 and the misaligned fallback of 1.3
    i = text.index("void relu_v1_scalar(")
    f.write_text(text[:i] + text[i:].replace(given, "relu_v1_scalar_kernel<<<n / kBlock, kBlock>>>(x, y, n);", 1))
    msg = feedback(_result("AssertionError", "AssertionError: " + LAUNCHER_TAIL), sub, root=ROOT)
    assert "Your launcher differs from the one given" in msg and HINTS["grid"] in msg
    assert "relu_v1_scalar_kernel (TODO task 1.1)" not in msg and "kernel's loop bound" not in msg
    # the same failure with the launcher as given: the kernel stops short
    f.write_text(text)
    msg = feedback(_result("AssertionError", "AssertionError: " + LAUNCHER_TAIL), sub, root=ROOT)
    assert "The launcher is the one given (unchanged)" in msg and HINTS["short"] in msg
    assert HINTS["grid"] not in msg and "Check how many threads the launcher starts" not in msg
    # the task's message shows another case first (nothing written at n = 33): the tail case still decides the hint
    other = _result("AssertionError", "AssertionError: " + STUB.replace("1000", "33"), n=33)
    both = TaskResult("1.1", "01_relu", "relu", 2.0, 0.0, "fail", other.message,
                      [*other.tests, *_result("AssertionError", "AssertionError: " + LAUNCHER_TAIL).tests])
    msg = feedback(both, sub, root=ROOT)
    assert HINTS["short"] in msg and HINTS["grid"] not in msg


def test_function_unchanged_ignores_comments_and_spacing(tmp_path: Path) -> None:
    from cudacourse.exercise_state import function_unchanged

    sol = ROOT / "solutions/01_relu/relu.cu"
    mine = tmp_path / "relu.cu"
    text = (ROOT / "lessons/01_relu/relu.cu").read_text()
    mine.write_text(text.replace("void relu_v1_scalar(const float* x, float* y, int n) {",
                                 "void relu_v1_scalar(const float*  x, float* y, int n)   // mine\n{"))
    assert function_unchanged(mine, sol, "relu_v1_scalar") is True
    mine.write_text(text.replace("if (n == 0) return;\n    relu_v1_scalar_kernel", "relu_v1_scalar_kernel", 1))
    assert function_unchanged(mine, sol, "relu_v1_scalar") is False
    assert function_unchanged(mine, sol, "no_such_launcher") is None
    assert function_unchanged(mine, tmp_path / "missing.cu", "relu_v1_scalar") is None


def _close_message(got: Any, want: Any, **kw: Any) -> str:
    from cudacourse import check

    with pytest.raises(AssertionError) as e:
        check.assert_close(got, want, name="y", task="1.3", hint="THE TASK HINT", rtol=0.0, atol=0.0, **kw)
    return str(e.value)


def test_float4_kernel_without_its_tail_is_told_so() -> None:
    """n < 4 with nothing written was 'is the kernel body still the stub?'; the tail-only failure printed the launcher
    advice and the float4 hint for a kernel whose float4 part was right."""
    import torch

    from cudacourse.grading.feedback import choose_hints

    want = torch.arange(1.0, 4.0)
    msg = _close_message(torch.full((3,), float("nan")), want, vector=4)
    assert "no whole float4" in msg and "still the stub" not in msg and "THE TASK HINT" not in msg
    assert "Nothing was written at all" not in msg
    want = torch.arange(1.0, 1002.0)
    got = want.clone()
    got[1000:] = float("nan")
    msg = _close_message(got, want, vector=4)
    assert "after the last whole float4" in msg and "The float4 part is right" in msg
    assert "THE TASK HINT" not in msg and "launcher" not in msg
    rec = TestRecord("t::test_relu_float4[1001]", "t.py", "01_relu", "1.3", 3.0, "t", False, {"n": 1001}, "failed",
                     msg, "AssertionError")
    hints = choose_hints([rec], msg)
    assert HINTS["grid"] not in hints and HINTS["unwritten"] not in hints and HINTS["bounds"] not in hints
    # nor from the sizes' pattern (n = 32 and 1000 pass, the odd sizes fail): the diagnosis named the tail part
    ok = [TestRecord(f"t::test_relu_float4[{n}]", "t.py", "01_relu", "1.3", 3.0, "t", False, {"n": n}, "passed")
          for n in (32, 1000)]
    assert HINTS["bounds"] not in choose_hints([rec, *ok], msg)
    # without vector= (another kernel), the same tail keeps the general advice and the hint
    msg = _close_message(got, want)
    assert "Check how many threads the launcher starts" in msg and "THE TASK HINT" in msg
    # a changed launcher: its diagnosis, not the kernel's hint
    msg = _close_message(got, want, launcher_given=False)
    assert "Your launcher differs" in msg and "THE TASK HINT" not in msg
    msg = _close_message(got, want, launcher_given=True)
    assert "kernel stops short" in msg and "Check how many threads" not in msg


def test_lesson_01_hints_are_directions_not_code() -> None:
    """The 1.3 hint spelled the solution line by line (reinterpret_cast, fmaxf on .x .y .z .w)."""
    import test_01_relu as t
    import test_02_reduce as r

    for hint in (t.HINT_13, t.HINT_16, t.HINT_1T1, t.HINT_1T2, r.HINT_21, r.HINT_24, r.HINT_25, r.HINT_2T1):
        for code in ("reinterpret_cast", ".x .y", "empty_like", "getCurrentCUDAStream", "tl.maximum", "arange",
                     "exp(-2", "i % cols", "+=", "s_data[", "out[row] =", "fmaxf", "tl.atomic_add", "range(0,"):
            assert code not in hint, (code, hint)
