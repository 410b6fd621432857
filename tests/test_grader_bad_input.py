"""Bad input costs one build per grade (issue 36, "Bad input").

A kernel file that does not build, or whose build outlasts ``--build-timeout``, is built once, by the grade's
warm-up (on cuda a compile error is confirmed by a second build first); every task that needs it then fails at
once with that build's message, whatever flavour of it a test loads. Before, a template-recursion bomb in
a kernel file timed out the warm-up build and then every task process compiled it again under its own limit (over
10 minutes for one lesson on a 2-core machine).

Both submissions here are graded in one ``--batch`` run on the simulator, with a short build time limit (a
setting: nothing here measures wall-clock time). Their messages show the path: the stopped build's message names
``--build-timeout`` (a task process compiling the bomb itself would have been stopped by the case timeout, "timed
out"), and the compile error carries the note of the grade's one build.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cudacourse.course import course
from cudacourse.grading import cli
from cudacourse.grading.verdicts import BUILT_ONCE
from cudacourse.sandbox import available
from cudacourse.settings import using
from tests.attacks.corpus import build, load

ROOT = Path(__file__).resolve().parents[1]
LESSON = "01_relu"
# s: the bomb's build never ends, and no good file is built under it: relu_torch.cu and the simulator's runtime come
# from the run's seeded cache (instructor_builds), the "syntax" file fails at once. (40 s before: the bomb's two
# compiles, the build and its device-call check, then held both cores and 7 GB for 80 CPU-seconds.)
BUILD_TIMEOUT = 15
SYNTAX = "    relu_v1_scalar_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, y, n)  // (the ';' is missing)"

pytestmark = [pytest.mark.slow]


def _submission(batch: Path, name: str, relu: str) -> None:
    d = batch / name / "lessons" / LESSON
    shutil.copytree(ROOT / "solutions" / LESSON, d, ignore=shutil.ignore_patterns("__pycache__"))
    (d / "relu.cu").write_text(relu)


def _uses(file: str) -> list[str]:
    les = course().lesson(LESSON)
    return [t.id for t in les.tasks if file in les.files_of(t) and t.track == "cuda" and not t.gpu]


def test_a_file_that_does_not_build_is_built_once_and_fails_its_tasks(tmp_path: Path,
                                                                       instructor_builds: Path) -> None:
    if not available().confined:
        pytest.skip(f"OS confinement unavailable here: {available().describe()}")
    solution = (ROOT / "solutions" / LESSON / "relu.cu").read_text()
    bomb = next(a for a in load() if a.id == "build-never-ends")
    batch, out = tmp_path / "batch", tmp_path / "out"
    _submission(batch, "bomb", build(bomb, course=ROOT, paths={})[f"lessons/{LESSON}/relu.cu"])
    line = next(ln for ln in solution.splitlines() if ln.strip().startswith("relu_v1_scalar_kernel<<<"))
    assert line.rstrip().endswith(";"), line
    _submission(batch, "syntax", solution.replace(line, SYNTAX, 1))
    relu_tasks = _uses("relu.cu")
    assert relu_tasks, "lesson 01 has tasks of relu.cu"
    # the tasks this test reads: relu.cu's and 1.6 (the lesson's Triton twins, graded in interpreter processes of
    # their own, are not looked at)
    with using(build_dir=instructor_builds):
        rc = cli.main(["--backend", "sim", "--batch", str(batch), "--lessons", LESSON, "--tasks", *relu_tasks, "1.6",
                       "--json", str(out), "--build-timeout", str(BUILD_TIMEOUT), "--timeout", "120", "-q"])
    assert rc == 0
    for name in ("bomb", "syntax"):
        rep = {t["id"]: t for t in json.loads((out / f"{name}.json").read_text())["tasks"]}
        for tid in relu_tasks:
            t = rep[tid]
            assert t["status"] == "fail", (name, t)
            if name == "bomb":  # stopped by --build-timeout, or stopped by the compiler's own memory limit first
                msg = t["message"]
                stopped = f"did not finish within {BUILD_TIMEOUT} s" in msg and "--build-timeout" in msg
                failed = BUILT_ONCE.strip() in t["message"] or "does not compile" in t["message"]
                assert stopped or failed, (name, t["message"])
                assert "timed out" not in t["message"], t["message"]
            else:
                assert "CompileError" in t["message"] and "relu.cu" in t["message"], t["message"]
                # the grade's one build said it, or the short repeat of it in a later case of the same process
                assert BUILT_ONCE.strip() in t["message"] or "does not compile" in t["message"], t["message"]
        if name == "syntax" or not any("did not finish" in rep[tid]["message"] for tid in relu_tasks):
            # (the first case of each task process carries the whole message, with the note)
            assert any(BUILT_ONCE.strip() in rep[tid]["message"] for tid in relu_tasks), [
                rep[tid]["message"][-300:] for tid in relu_tasks]
        # the other file of the lesson (the torch route, identical to the solution) is graded as usual
        assert rep["1.6"]["status"] == "pass", (name, rep["1.6"])


@pytest.mark.parametrize("flavour", [{}, {"profile": True}, {"check": False}])
def test_a_build_the_grade_stopped_or_saw_fail_is_not_built_again_in_any_flavour(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flavour: dict) -> None:
    """A test that loads the file itself (lesson 01's store count loads a profiled build) fails at once with the
    grade's verdict: before, it compiled a never-ending build again, for half a minute on both cores."""
    import cudacourse as cc
    from cudacourse.errors import CompileError
    from cudacourse.settings import BUILD_ERRORS_ENV, UNBUILDABLE_ENV

    f = tmp_path / LESSON / "relu.cu"
    f.parent.mkdir()
    f.write_text("#error this file must not reach a compiler\n")
    monkeypatch.setenv(UNBUILDABLE_ENV, f"{LESSON}/relu.cu=15")
    with pytest.raises(CompileError, match="did not finish within 15 s"):
        cc.load(f, backend="sim", **flavour)
    monkeypatch.delenv(UNBUILDABLE_ENV)
    monkeypatch.setenv(BUILD_ERRORS_ENV, json.dumps({f"{LESSON}/relu.cu": "relu.cu:3: error: the grade's build"}))
    with pytest.raises(CompileError, match="the grade's build") as e:
        cc.load(f, backend="sim", **flavour)
    assert "must not reach a compiler" not in str(e.value)


def test_the_first_test_a_failed_build_blocks_gets_the_whole_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timed task's process loads its modules before its first test: that load (outside any test) must not use
    up the one showing of the compiler's message, or the report says only "printed once, under another failing
    case" with no case that prints it (seen in a GPU grade, 2026-11-29)."""
    import cudacourse as cc
    from cudacourse import lessons
    from cudacourse.errors import REPEATED_COMPILE_ERROR, CompileError
    from cudacourse.settings import BUILD_ERRORS_ENV

    monkeypatch.setattr(lessons, "_FAILED_BUILDS", {})
    monkeypatch.setenv(BUILD_ERRORS_ENV, json.dumps({f"{LESSON}/relu.cu": "relu.cu:3: error: the whole message"}))
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    m = cc.lesson(LESSON)
    messages = []
    for under_test in (False, True, True):
        if under_test:
            monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_x.py::test_y (call)")
        with pytest.raises(CompileError) as e:
            m.module("relu.cu")
        messages.append(str(e.value))
    assert "the whole message" in messages[0] and "the whole message" in messages[1], messages
    assert REPEATED_COMPILE_ERROR in messages[2] and "the whole message" not in messages[2], messages


@pytest.mark.parametrize("backend, second", [("cuda", "builds"), ("cuda", "fails"), ("sim", "builds")])
def test_a_compile_error_on_cuda_counts_once_a_second_build_confirms_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], backend: str, second: str) -> None:
    """The warm-up's events for a build that fails once: on cuda a second build decides (a build that then works is
    "retried", with the first message, and "done"); on the simulator the first failure stands."""
    from cudacourse.errors import CompileError
    from cudacourse.grading import build_worker

    calls = []

    def once(f: Path, b: str) -> None:
        calls.append(b)
        if len(calls) == 1 or second == "fails":
            raise CompileError(f"nvcc failed, try {len(calls)}", file=str(f))

    monkeypatch.setattr(build_worker, "_build_once", once)
    build_worker.build(Path("bf16.cu"), backend)
    events = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()]
    if backend == "cuda" and second == "builds":
        assert calls == ["cuda", "cuda"] and events == ["start", "retried", "done"], events
    elif backend == "cuda":
        assert len(calls) == 2 and events == ["start", "error", "fail"], events
    else:
        assert calls == ["sim"] and events == ["start", "error", "fail"], events


def test_a_short_build_timeout_bounds_the_learners_files_not_the_course_copy(tmp_path: Path,
                                                                           instructor_builds: Path) -> None:
    """--build-timeout bounds what a learner's file can cost. Files identical to the instructor's are built (or
    found in the cache) by the course's copy worker, which starts Python and imports torch for the torch route:
    under a limit shorter than that, the learner's untouched files failed (seen at 15 s on a loaded machine)."""
    if not available().confined:
        pytest.skip(f"OS confinement unavailable here: {available().describe()}")
    batch, out = tmp_path / "batch", tmp_path / "out"
    _submission(batch, "untouched", (ROOT / "solutions" / LESSON / "relu.cu").read_text())
    with using(build_dir=instructor_builds):
        rc = cli.main(["--backend", "sim", "--batch", str(batch), "--lessons", LESSON, "--tasks", "1.1", "1.6",
                       "--json", str(out), "--build-timeout", "0.5", "--timeout", "120", "-q"])
    assert rc == 0
    rep = {t["id"]: t for t in json.loads((out / "untouched.json").read_text())["tasks"]}
    assert rep["1.1"]["status"] == "pass" and rep["1.6"]["status"] == "pass", rep
