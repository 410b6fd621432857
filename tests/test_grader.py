"""The grader's own tests: kernel-file screening, the pytest plugin, isolation, reports, the corpus.

Most tests drive ``cudacourse.grading`` on a small fake course whose "tests" act on the text of the kernel
file (pass, fail, crash, hang, edit a harness file) so the machinery is checked in seconds without
building anything. ``test_corpus`` then grades the corpus of broken lesson-01 submissions (generated into
a temporary folder by tests/grader_corpus/make_corpus.py from the current solution) on the simulator in
one run and checks every verdict.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import types
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from cudacourse.course import Course, course
from cudacourse.grading import builds, cli, plan, runner
from cudacourse.grading.screens import screen_kernel_file, screen_python_file
from cudacourse.results import TestRecord, fold_tasks
from cudacourse.settings import using
from cudacourse.source import mask

ROOT = Path(__file__).resolve().parent.parent
CORPUS_SCRIPT = ROOT / "tests" / "grader_corpus"
HIDDEN_EXAMPLE = ROOT / "templates" / "hidden_example"
SCHEMA_TOP = {"backend", "device", "impl", "confinement", "earned", "possible", "not_graded", "tasks"}
SCHEMA_TASK = {"id", "lesson", "title", "points", "earned", "status", "message"}

# ----------------------------------------------------------------------------------------------------
# Screening of submitted kernel files
# ----------------------------------------------------------------------------------------------------


def _course_kernel_files() -> list[Path]:
    return sorted(p for d in ("solutions", "lessons") for p in (ROOT / d).glob("*/*.cu*"))


# Under `make test` (xdist, --dist loadgroup) the largest groups are handed out first, one to each worker, then
# the rest as workers run low: test_corpus alone, a group of one, would start only after the attacks, torch_route
# and stubs groups, and could end last with one core idle (416 s of a 766 s suite). In one group with this file's
# screen tests (44 cases, under a second in all) it is the largest: it starts at once on one worker, the attack
# batch (22) on the other. (pytest 9.2 with pytest-xdist 3.8 makes loadgroup group nothing, pytest-xdist#1386,
# so pyproject.toml pins pytest < 9.2; ungrouped, every test is its own unit, handed out in collection order,
# where conftest puts the slow tests first: the same start.)
CORPUS_GROUP = pytest.mark.xdist_group("corpus")


@CORPUS_GROUP
@pytest.mark.parametrize("path", _course_kernel_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_screen_accepts_every_course_kernel_file(path: Path) -> None:
    names = {p.name for p in path.parent.iterdir()}  # as staging does: the exercise and the support files (cc_mma.h)
    assert screen_kernel_file(path.parent.name, path.name, path.read_text(), names) == []


KERNEL_ONLY_CHEATS = {
    "torch header": "#include <torch/extension.h>\n",
    "ATen header": "#include <ATen/ATen.h>\n",
    "relative escape": '#include "../../solutions/01_relu/relu.cu"\n',
    "absolute path": '#include "/etc/passwd"\n',
    "macro include": "#define H <cstdio>\n#include H\n",
    "non-standard header": "#include <unistd.h>\n",
    "fstream": "#include <fstream>\n",
    "fopen": '#include <cstdio>\nvoid f() { FILE* p = fopen("x", "w"); }\n',
    "system": '#include <cstdlib>\nvoid f() { system("true"); }\n',
    "getenv": '#include <cstdlib>\nvoid f() { getenv("HOME"); }\n',
    "torch call": "void f() { torch::relu; }\n",
    "filesystem": "void f() { std::filesystem::remove(\"x\"); }\n",
}


@CORPUS_GROUP
@pytest.mark.parametrize("what", sorted(KERNEL_ONLY_CHEATS))
def test_screen_rejects_kernel_only_cheats(what: str) -> None:
    src = KERNEL_ONLY_CHEATS[what] + "__global__ void k(float* y) { y[0] = 1.0f; }\n"
    reasons = screen_kernel_file("01_relu", "relu.cu", src, {"relu.cu"})
    assert reasons, f"{what} was accepted"
    assert all(r.startswith("line ") or "#include" in r for r in reasons), reasons


def test_screen_ignores_comments_and_strings() -> None:
    src = ('// #include <torch/extension.h> and fopen("x") in a comment\n'
           '/* system("rm") */\nconst char* s = "torch::relu fopen(";\n#include <cuda_runtime.h>\n#include <cmath>\n')
    assert screen_kernel_file("01_relu", "relu.cu", src, {"relu.cu"}) == []


def test_screen_allows_lesson_headers_only_by_plain_name() -> None:
    src = '#include "common.cuh"\n'
    assert screen_kernel_file("02_reduce", "reduce.cu", src, {"reduce.cu", "common.cuh"}) == []
    assert screen_kernel_file("02_reduce", "reduce.cu", src, {"reduce.cu"})


TORCH_FILE = (ROOT / "solutions" / "01_relu" / "relu_torch.cu").read_text()
LAUNCH = re.compile(r"relu_torch_kernel\s*<<<.*?>>>\s*\(.*?\);", re.S)


@pytest.mark.parametrize("replacement", [
    "y.copy_(torch::relu(x));", "y = at::clamp_min(x, 0);", "y = x.clamp_min(0);", "y.copy_(x * (x > 0));",
    "y = torch::where(x > 0, x, torch::zeros_like(x));"])
def test_screen_torch_binding_must_launch_the_kernel(replacement: str) -> None:
    assert LAUNCH.search(TORCH_FILE), "no relu_torch_kernel launch in the solution: update LAUNCH in this test"
    src = LAUNCH.sub(lambda _: replacement, TORCH_FILE)
    assert screen_kernel_file("01_relu", "relu_torch.cu", src, {"relu.cu", "relu_torch.cu"})


def test_screen_torch_allowed_only_in_the_binding_exercise() -> None:
    assert screen_kernel_file("01_relu", "relu_torch.cu", TORCH_FILE, set()) == []
    assert screen_kernel_file("02_reduce", "relu_torch.cu", TORCH_FILE, set())
    assert screen_kernel_file("01_relu", "relu.cu", TORCH_FILE, set())


def test_mask_is_what_screening_relies_on() -> None:
    assert "fopen" not in mask('// fopen(\n"fopen("')

# ----------------------------------------------------------------------------------------------------
# Task folding and the plugin
# ----------------------------------------------------------------------------------------------------


def _rec(task: str, outcome: str, points: float = 2, msg: str = "", nodeid: str = "") -> TestRecord:
    return TestRecord(nodeid=nodeid or f"t::{task}-{outcome}", file="tests/test_01_relu.py", lesson="01_relu",
                      task=task, points=points, title="T", gpu=False, outcome=outcome, message=msg)


def test_fold_tasks_all_cases_must_pass() -> None:
    tasks = {t.id: t for t in fold_tasks([
        _rec("1.1", "passed"), _rec("1.1", "passed", nodeid="b"),
        _rec("1.2", "passed"), _rec("1.2", "failed", msg="AssertionError: y differs", nodeid="c"),
        _rec("1.3", "passed"), _rec("1.3", "not-graded", msg="not graded: needs a GPU", nodeid="d"),
        _rec("1.4", "failed", msg="x", nodeid="e"), _rec("1.4", "not-graded", nodeid="f")])}
    assert (tasks["1.1"].status, tasks["1.1"].earned) == ("pass", 2)
    assert (tasks["1.2"].status, tasks["1.2"].earned) == ("fail", 0)
    assert "y differs" in tasks["1.2"].message
    assert (tasks["1.3"].status, tasks["1.3"].earned) == ("not-graded", 0)
    assert tasks["1.4"].status == "fail"


def test_lesson_of_maps_public_and_hidden_files() -> None:
    c = course()
    assert c.lesson_of_test(ROOT / "tests" / "test_01_relu.py") == "01_relu"
    assert c.lesson_of_test(HIDDEN_EXAMPLE / "test_01_relu_hidden.py") == "01_relu"
    assert c.lesson_of_test(ROOT / "tests" / "test_harness.py") is None


PLUGIN_TESTS = '''
import pytest

@pytest.mark.task("9.1")
@pytest.mark.parametrize("n", [1, 32, 33])
def test_a(n):
    """Task one."""
    assert n != 33, "tail wrong"

@pytest.mark.task("9.2")
def test_b():
    """Task two."""

@pytest.mark.task("9.3")
@pytest.mark.gpu
def test_speed():
    """Speed."""
'''


PLUGIN_LESSON = """
[lesson]
title = "Fake"
write = "nothing"
learn = "nothing"
files = []

[[task]]
id = "9.1"
title = "Task one"
points = 2

[[task]]
id = "9.2"
title = "Task two"
points = 3

[[task]]
id = "9.3"
title = "Speed"
points = 1
gpu = true
"""


def _toy_lesson(root: Path, lesson: str, toml: str) -> None:
    (root / "lessons" / lesson).mkdir(parents=True, exist_ok=True)
    (root / "lessons" / lesson / "lesson.toml").write_text(toml)


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_COURSE_BACKEND": "sim", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "cudacourse.pytest_plugin", "-q", "-rs",
                           "-p", "no:cacheprovider", *args, str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def test_plugin_task_markers_must_match_the_model(tmp_path: Path) -> None:
    """An undeclared task id and a leftover points marker are collection errors that say what to do."""
    _toy_lesson(tmp_path, "09_fake", PLUGIN_LESSON)
    (tmp_path / "test_09_fake.py").write_text(PLUGIN_TESTS.replace('task("9.2")', 'task("9.5")'))
    proc = _pytest(tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "declares no task '9.5'" in proc.stderr and "lesson.toml" in proc.stderr, proc.stderr
    (tmp_path / "test_09_fake.py").write_text(PLUGIN_TESTS.replace('@pytest.mark.gpu', '@pytest.mark.points(1)'))
    proc = _pytest(tmp_path)
    assert proc.returncode == 4 and "points are declared once" in proc.stderr, proc.stdout + proc.stderr


def test_plugin_points_table_and_not_graded(tmp_path: Path) -> None:
    _toy_lesson(tmp_path, "09_fake", PLUGIN_LESSON)
    (tmp_path / "test_09_fake.py").write_text(PLUGIN_TESTS)
    report = tmp_path / "r.jsonl"
    env = {**os.environ, "CUDA_COURSE_BACKEND": "sim", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "cudacourse.pytest_plugin", "-q", "-rs",
                           "-p", "no:cacheprovider", "--cc-report", str(report), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "not graded: needs a GPU" in out
    lines = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln[:2] == "9."}
    assert lines["9.1"][-3:] == ["2", "0", "fail"], out
    assert lines["9.2"][-3:] == ["3", "3", "pass"], out
    assert lines["9.3"][-3:] == ["1", "0", "not-graded"], out
    assert "total: 3 / 6 points" in out
    events = [json.loads(ln) for ln in report.read_text().splitlines()]
    results = {e["nodeid"].split("::")[1]: e for e in events if e["event"] == "result"}
    assert events[-1] == {"event": "finished", "exitstatus": 1}
    assert results["test_a[33]"]["outcome"] == "failed" and "tail wrong" in results["test_a[33]"]["message"]
    assert results["test_speed"]["outcome"] == "not-graded"
    # --cc-task keeps only the named task
    report.unlink()
    subprocess.run([sys.executable, "-m", "pytest", "-p", "cudacourse.pytest_plugin", "-q", "-p", "no:cacheprovider",
                    "--cc-task", "9.2", "--cc-report", str(report), str(tmp_path)], cwd=tmp_path, env=env,
                   capture_output=True, text=True, timeout=120, check=True)
    ran = {json.loads(ln).get("nodeid") for ln in report.read_text().splitlines()} - {None}
    assert ran == {"test_09_fake.py::test_b"}

def test_every_timed_test_carries_the_gpu_mark(tmp_path: Path) -> None:
    """``make test`` on a GPU runs ``-m "not gpu"`` in parallel, then ``-m gpu`` alone (timed beside other
    tests, flash bf16 measured 0.38x on the H100): a test of a ``gpu = true`` task is marked even when its
    author forgot ``@pytest.mark.gpu``, so no timed test lands in the parallel pass."""
    _toy_lesson(tmp_path, "09_fake", PLUGIN_LESSON)
    (tmp_path / "test_09_fake.py").write_text(PLUGIN_TESTS.replace("@pytest.mark.gpu\n", ""))
    parallel = _pytest(tmp_path, "-m", "not gpu")
    assert "4 passed" not in parallel.stdout and "1 deselected" in parallel.stdout, parallel.stdout
    alone = _pytest(tmp_path, "-m", "gpu")
    assert "4 deselected" in alone.stdout and "1 skipped" in alone.stdout, alone.stdout


def test_check_skips_the_rest_of_a_task_after_a_timeout(tmp_path: Path) -> None:
    """A learner's endless loop in `make check T=1.2` waited out the 10 s kernel timeout in each of 9 cases: after
    one case of a task timed out, its other cases are skipped (as under the grader); other tasks still run."""
    _toy_lesson(tmp_path, "09_fake", PLUGIN_LESSON)
    hang = ('    from cudacourse.errors import KernelTimeout\n'
            '    raise KernelTimeout(f"n={n}: still running")')
    (tmp_path / "test_09_fake.py").write_text(PLUGIN_TESTS.replace('    assert n != 33, "tail wrong"', hang))
    brief = _pytest(tmp_path, "--cc-brief")
    assert "1 failed" in brief.stdout and "n=1: still running" in brief.stdout, brief.stdout
    assert "n=32" not in brief.stdout and "an earlier case of task 9.1 timed out" in brief.stdout, brief.stdout
    assert "1 passed" in brief.stdout  # task 9.2
    assert "task 9.1: a case timed out, so its other cases were skipped" in brief.stdout
    plain = _pytest(tmp_path)  # plain pytest (the course's own suite) runs every case
    assert "3 failed" in plain.stdout, plain.stdout


def test_plugin_sim_only_cases_leave_a_gpu_grade_alone(tmp_path: Path) -> None:
    """A ``sim_only`` case (the simulator's store count of task 1.2) is deselected on a GPU, so the task is
    graded by its other cases there, not marked "not graded" by a skip (task 1.2 lost its points on the H100
    that way); on the simulator it runs and can fail its task."""
    _toy_lesson(tmp_path, "09_fake", PLUGIN_LESSON)
    (tmp_path / "test_09_fake.py").write_text(PLUGIN_TESTS + '''
@pytest.mark.task("9.2")
@pytest.mark.sim_only
def test_b_counters():
    """Task two, the simulator's counters."""
    assert False, "counted too many stores"
''')
    sim = _pytest(tmp_path)
    rows = {ln.split()[0]: ln.split()[-3:] for ln in sim.stdout.splitlines() if ln[:2] == "9."}
    assert rows["9.2"] == ["3", "0", "fail"] and "counted too many stores" in sim.stdout, sim.stdout
    # the GPU's view: the plugin's backend says cuda (and the speed case runs, as on a GPU)
    (tmp_path / "conftest.py").write_text("import cudacourse.pytest_plugin as p\np.backend_name = lambda: 'cuda'\n")
    gpu = _pytest(tmp_path)
    rows = {ln.split()[0]: ln.split()[-3:] for ln in gpu.stdout.splitlines() if ln[:2] == "9."}
    assert rows["9.2"] == ["3", "3", "pass"] and rows["9.3"] == ["1", "1", "pass"], gpu.stdout
    assert "1 deselected" in gpu.stdout, gpu.stdout


# ----------------------------------------------------------------------------------------------------
# The grader on a fake course (no kernels are built: the "tests" act on the kernel file's text)
# ----------------------------------------------------------------------------------------------------

FAKE_TESTS = '''
"""Fake lesson tests: behaviour chosen by words in the kernel file."""
import os, signal, time
from pathlib import Path
import pytest

def kernel() -> str:
    return (Path(os.environ["CUDA_COURSE_SUBMISSION"]) / "lessons" / "01_relu" / "relu.cu").read_text()

def act(tag: str) -> None:
    k = kernel()
    if f"HANG_{tag}" in k:
        while True:
            time.sleep(0.05)
    if f"SEGV_{tag}" in k:
        os.kill(os.getpid(), signal.SIGSEGV)
    if f"EDIT_{tag}" in k:
        Path("tests/test_01_relu.py").write_text("def test_x():\\n    pass\\n")
    if f"FAIL_{tag}" in k:
        raise AssertionError("y (task %s): 3 of 1000 elements differ; yours nan, expected 1" % tag)

@pytest.mark.task("1.1")
@pytest.mark.parametrize("n", [1, 32, 33, 64])
def test_a(n):
    """Scalar ReLU."""
    act("1.1")
    if "PARTIAL" in kernel():
        assert n % 32 == 0, "mismatch at the last elements"

@pytest.mark.task("1.2")
def test_b():
    """Grid stride."""
    act("1.2")

@pytest.mark.task("1.3")
@pytest.mark.gpu
def test_speed():
    """Speed."""
'''

FAKE_HIDDEN = '''
import os
from pathlib import Path
import pytest

def kernel() -> str:
    return (Path(os.environ["CUDA_COURSE_SUBMISSION"]) / "lessons" / "01_relu" / "relu.cu").read_text()

@pytest.mark.task("1.2")
def test_b_hidden():
    assert "HARDCODED" not in kernel(), "secret hidden values 1234"

@pytest.mark.task("1.H")
def test_hidden_task():
    """Hidden task."""
    assert os.environ.get("CUDA_COURSE_SEED")
'''

FAKE_CASES = {  # name -> (kernel text, {task: status})
    "ok": ("// fine", {"1.1": "pass", "1.2": "pass", "1.3": "not-graded"}),
    "fail": ("// FAIL_1.2", {"1.1": "pass", "1.2": "fail"}),
    "hang": ("// HANG_1.1", {"1.1": "fail", "1.2": "pass"}),
    "segv": ("// SEGV_1.1", {"1.1": "fail", "1.2": "pass"}),
    "edit": ("// EDIT_1.1", {"1.1": "fail", "1.2": "pass"}),
    "partial": ("// PARTIAL", {"1.1": "fail", "1.2": "pass"}),
    "rejected": ("#include <torch/extension.h>\n// FAIL_1.1", {"1.1": "fail", "1.2": "pass"}),
}


FAKE_LESSON = """
[lesson]
title = "Fake ReLU"
write = "nothing"
learn = "nothing"
files = ["relu.cu"]

[[task]]
id = "1.1"
title = "Scalar ReLU"
points = 2

[[task]]
id = "1.2"
title = "Grid stride"
points = 3

[[task]]
id = "1.3"
title = "Speed"
points = 1
gpu = true
"""

FAKE_HIDDEN_TASKS = """
[[task]]
id = "1.H"
title = "Hidden task"
points = 1
"""


@pytest.fixture()
def fake_course(tmp_path: Path) -> Path:
    course = tmp_path / "course"
    (course / "tests").mkdir(parents=True)
    (course / "solutions" / "01_relu").mkdir(parents=True)
    (course / "lessons" / "01_relu").mkdir(parents=True)
    (course / "cudacourse").symlink_to(ROOT / "cudacourse")
    (course / "lessons" / "01_relu" / "lesson.toml").write_text(FAKE_LESSON)
    (course / "tests" / "conftest.py").write_text('pytest_plugins = ["cudacourse.pytest_plugin"]\n')
    (course / "tests" / "test_01_relu.py").write_text(FAKE_TESTS)
    (course / "solutions" / "01_relu" / "relu.cu").write_text("// fine\n")
    (course / "lessons" / "01_relu" / "relu.cu").write_text("// FAIL_1.1 FAIL_1.2\n")
    return course


_SHARED_BUILD: list[Path] = []  # the session's grader build cache (conftest.grader_build_cache), once known


@pytest.fixture(autouse=True)
def _shared_grader_build(grader_build_cache: Path) -> None:
    _SHARED_BUILD[:] = [grader_build_cache]


def _grade(course: Path, *args: str) -> int:
    """Grade on the simulator, with the session's shared run cache (unless the test set CUDA_COURSE_BUILD)."""
    # The default --build-timeout: with 2 s, a loaded 2-core machine stopped the warm-up (torch import and the
    # simulator's runtime) and every task failed as unbuildable.
    argv = ["--course", str(course), "--backend", "sim", *args]
    if os.environ.get("CUDA_COURSE_BUILD") or not _SHARED_BUILD:
        return cli.main(argv)
    with using(build_dir=_SHARED_BUILD[0]):
        return cli.main(argv)


def test_grader_verdicts_isolation_and_reports(fake_course: Path, tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    for name, (text, _) in FAKE_CASES.items():
        d = batch / name / "lessons" / "01_relu"
        d.mkdir(parents=True)
        (d / "relu.cu").write_text(text + "\n")
        # An edited tests/ folder in the submission must change nothing.
        (batch / name / "tests").mkdir()
        (batch / name / "tests" / "test_01_relu.py").write_text("def test_pass():\n    pass\n")
    (batch / "missing" / "lessons" / "01_relu").mkdir(parents=True)
    out = tmp_path / "out"
    rc = _grade(fake_course, "--batch", str(batch), "--json", str(out), "--junit", str(out), "--markdown", str(out),
                "--timeout", "6", "-j", "2", "-q")
    assert rc == 0
    for name, (_, want) in {**FAKE_CASES, "missing": ("", {"1.1": "fail", "1.2": "fail"})}.items():
        rep = json.loads((out / f"{name}.json").read_text())
        assert set(rep) == SCHEMA_TOP and all(set(t) == SCHEMA_TASK for t in rep["tasks"])
        got = {t["id"]: t for t in rep["tasks"]}
        for tid, status in want.items():
            assert got[tid]["status"] == status, (name, tid, got[tid])
        assert got["1.3"]["status"] == "not-graded"
        assert rep["earned"] == sum(t["earned"] for t in rep["tasks"])
        assert rep["possible"] == 6 and rep["not_graded"] == 1
        ET.parse(out / f"{name}.xml")
        assert (out / f"{name}.md").read_text().startswith("# Grading report")
    msg = {n: {t["id"]: t["message"] for t in json.loads((out / f"{n}.json").read_text())["tasks"]}
           for n in FAKE_CASES}
    assert "timed out" in msg["hang"]["1.1"] and msg["hang"]["1.1"].startswith("a, n=1: ")  # the case in words
    assert "SIGSEGV" in msg["segv"]["1.1"]
    assert "changed files of the grading harness" in msg["edit"]["1.1"]
    assert "tests/test_01_relu.py" in msg["edit"]["1.1"]
    assert "bounds check" in msg["partial"]["1.1"]
    assert "torch headers are not allowed" in (out / "rejected.md").read_text()
    assert "elements differ" in msg["fail"]["1.2"]
    assert (fake_course / "tests" / "test_01_relu.py").read_text() == FAKE_TESTS
    book = (out / "gradebook.csv").read_text().splitlines()
    assert book[0].startswith("submission,earned,possible,not_graded") and len(book) == len(FAKE_CASES) + 2


def test_grader_grades_the_checkout_and_hidden_tests(fake_course: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "test_01_relu_hidden.py").write_text(FAKE_HIDDEN)
    (hidden / "tasks.toml").write_text(FAKE_HIDDEN_TASKS)
    out = tmp_path / "sol.json"
    capsys.readouterr()
    assert _grade(fake_course, "--impl", "solution", "--hidden", str(hidden), "--json", str(out)) == 0
    rep = json.loads(out.read_text())
    got = {t["id"]: t["status"] for t in rep["tasks"]}
    assert got == {"1.1": "pass", "1.2": "pass", "1.3": "not-graded", "1.H": "pass"}
    assert rep["earned"] == rep["possible"] - rep["not_graded"] == 6
    # Progress (issue 14 item 5): the build in progress, then a line per task as it finishes; the table last.
    printed = capsys.readouterr().out.splitlines()
    assert "01_relu: building the kernel files ..." in printed, printed
    assert any(re.match(r"01_relu: (builds done in|the build.* stopped after) ", ln) for ln in printed), printed
    done = {ln.split(":")[0]: ln for ln in printed if re.match(r"01_relu task 1\.\w+ .*: \S+ \(\d+\.\d s\)$", ln)}
    # (1.3, a GPU task, is not run on the simulator: no process, no line; issue 34)
    assert sorted(done) == ["01_relu task 1.1 Scalar ReLU", "01_relu task 1.2 Grid stride",
                            "01_relu task 1.H Hidden task"], printed
    assert ": pass (" in done["01_relu task 1.1 Scalar ReLU"]
    last_progress = max(printed.index(ln) for ln in done.values())
    assert printed.index(next(ln for ln in printed if ln.startswith("task "))) > last_progress
    assert printed[-2].startswith("total: 6 / 7 points")
    # The stubs fail, with the failing case named; -q prints no progress.
    assert _grade(fake_course, "--impl", "student", "--json", str(out), "-q") == 0
    rep = json.loads(out.read_text())
    assert {t["id"]: t["status"] for t in rep["tasks"]} == {"1.1": "fail", "1.2": "fail", "1.3": "not-graded"}
    quiet = capsys.readouterr().out
    assert quiet.splitlines() == ["grade: 0 / 6 points (1 not graded)"], quiet
    # A submission failing only a hidden case: brief feedback (no hidden values) and the hidden-case hint.
    sub = tmp_path / "sub" / "lessons" / "01_relu"
    sub.mkdir(parents=True)
    (sub / "relu.cu").write_text("// HARDCODED\n")
    assert _grade(fake_course, "--submission", str(sub.parent.parent), "--hidden", str(hidden), "--json",
                  str(out), "-q") == 0
    t12 = next(t for t in json.loads(out.read_text())["tasks"] if t["id"] == "1.2")
    assert t12["status"] == "fail" and "hidden case" in t12["message"] and "1234" not in t12["message"]


def test_grading_the_checkout_again_reuses_its_builds(fake_course: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15: `make grade` staged into a fresh temporary folder each time, and builds were keyed by the staged
    path, so every grade rebuilt every file (relu_torch.cu: minutes on a CPU). The checkout's own grade now
    stages into one stable folder under the build root, its builds in a folder beside the staged files (never
    around them: workers may write there): the second grade finds every build of the first. The first grade
    starts from the simulator runtime `make check` built (a learner's first grade built it again, 50 s)."""
    from cudacourse.sim import runtime_object

    made_by_check = runtime_object().parent  # (in this user's cache: the suite's other tests build it too)
    monkeypatch.setenv("CUDA_COURSE_BUILD", str(tmp_path / "builds"))
    shutil.copytree(made_by_check, tmp_path / "builds" / "sim-rt" / made_by_check.name)
    (tmp_path / "builds" / "sim-rt" / made_by_check.name / "from-check").touch()

    def builds() -> set[Path]:
        return {p.parent for p in (tmp_path / "builds").rglob("DONE")}

    out = tmp_path / "r.json"
    assert _grade(fake_course, "--impl", "solution", "--json", str(out), "-q") == 0
    first = builds()
    assert first, "the first grade built nothing into the build root"
    (work,) = (tmp_path / "builds").glob("cc-grade-solution-*[!k]")  # the stable staging folder (not its .lock)
    assert [p.name for p in work.iterdir()] == ["build"], "the staging folders are cleared after a grade"
    assert (work / "build" / "sim-rt" / made_by_check.name / "from-check").exists(), "the runtime was built again"
    from cudacourse.grading.feedback import display_paths
    from cudacourse.grading.staging import Submission

    staged = f"error at {work}/slot0/lessons/01_relu/relu.cu:5"  # messages name the learner's own file
    assert display_paths(staged, Submission("", None, "student"), fake_course) == \
        f"error at {fake_course}/lessons/01_relu/relu.cu:5"
    assert _grade(fake_course, "--impl", "solution", "--json", str(out), "-q") == 0
    assert builds() == first
    rep = json.loads(out.read_text())
    assert rep["earned"] == rep["possible"] - rep["not_graded"] > 0, rep["tasks"]


@pytest.mark.parametrize("option", ["--cc-wait-file", "--cc-go-file"])
def test_plugin_waits_for_the_go_file_before_the_first_test(tmp_path: Path, option: str) -> None:
    """Issue 14: the grader starts a timed task's process while others still use the GPU and lets its tests run
    only once the GPU is free, by creating the ``--cc-wait-file``; it starts any other task process while the
    builds it needs still run, and creates the ``--cc-go-file`` once they are done. The process collects first,
    and no test starts before the file exists."""
    _toy_lesson(tmp_path, "09_fake", PLUGIN_LESSON)
    (tmp_path / "test_09_fake.py").write_text(PLUGIN_TESTS)
    report, go = tmp_path / "r.jsonl", tmp_path / "go"
    env = {**os.environ, "CUDA_COURSE_BACKEND": "sim", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "cudacourse.pytest_plugin", "-q",
                             "-p", "no:cacheprovider", "--cc-task", "9.2", "--cc-report", str(report),
                             option, str(go), str(tmp_path)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def events() -> list[str]:
        return [json.loads(ln)["event"] for ln in report.read_text().splitlines()] if report.exists() else []

    try:
        while "collected" not in events():
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.1)
        time.sleep(1.0)  # time to start a test if it were not waiting (it must not, however long this takes)
        assert "start" not in events() and proc.poll() is None, events()
        go.touch()
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert events()[-3:] == ["start", "result", "finished"], events()


@pytest.mark.parametrize("backend", ["sim", "cuda"])
def test_task_groups_twins_first_torch_files_last_speed_in_one_process(backend: str) -> None:
    """Issue 14: a lesson's tasks share a process only with tasks on the same files, in runs of consecutive ids
    (progress lines come out in order); the Triton twins (no build) are queued first, a task on a torch-route
    file (the slowest build) last on the simulator, and all timed tasks of a submission together in one process
    after the rest. On a GPU the torch-route file runs in a torch worker, and its process is queued first (issue
    35: queued last there, 1.6 ended the H200's correctness phase late even with every build cached)."""

    from cudacourse.grading.plan import RunSettings
    from cudacourse.grading.staging import Submission
    from cudacourse.results import TaskSpec

    c = course(ROOT)
    declared = {(t.lesson, t.id): t for t in c.tasks()}
    tasks = [TaskSpec(t.id, t.lesson, t.title, t.points, []) for t in c.tasks() if t.lesson in ("01_relu", "02_reduce")]
    st = RunSettings(["01_relu", "02_reduce"], 1, backend, 60.0, 300.0, ROOT, "brief", False, backend,
                     task_files={k: c.lesson(k[0]).files_of(t) for k, t in declared.items()})
    st.timed = plan.timed_alone(declared, backend)
    sub = Submission("", None, "solution")
    groups = plan.task_groups(c, [sub], tasks, {0: {("01_relu", "1.5")}}, st, jobs=4)
    ids = [[t.id for t in g] for _, g in groups]
    timed = ["1.7", "2.7", "2.8", "2.9"]
    if backend == "cuda":
        assert ids[-1] == timed, ids  # every timed task, one process, last
        assert ids[0] == ["1.6"], ids  # relu_torch.cu alone, first: its worker's start-ups overlap the build
        ids = ids[1:-1]
    else:  # nothing is timed alone (speed tasks are not graded on the simulator: they are left out before this)
        assert ids[-1] == ["1.6"], ids  # relu_torch.cu alone, last
        ids = [[i for i in g if i not in timed] for g in ids[:-1]]
    flat = [i for g in ids for i in g] + ["1.6"] + timed
    assert "1.5" not in flat and sorted(flat) == sorted(t.id for t in tasks if t.id != "1.5"), ids
    twins = [n for n, g in enumerate(ids) if all(".T" in i for i in g)]
    assert twins == list(range(len(twins))) and twins, ids  # the twins first of the rest
    order = [t.id for t in c.tasks()]
    for g in ids[:-1]:
        assert len({i.split(".")[0] for i in g}) == 1 and not any(i in ("1.7", "2.7") for i in g), ids
        at = [order.index(i) for i in g]
        assert at == list(range(at[0], at[0] + len(at))) or at == sorted(at), ids  # consecutive, in order


def test_task_groups_start_slow_tasks_first() -> None:
    """A process holding a task lesson.toml marks ``slow`` (a training run, torch.compile) is queued before every
    other, twins included: started last, such a task ended the H100 machine's grade late. The rest keep their
    order, and ``slow`` must be a boolean."""

    from cudacourse.course import CourseModelError, parse_lesson
    from cudacourse.grading.plan import RunSettings
    from cudacourse.grading.staging import Submission
    from cudacourse.results import TaskSpec

    c = course(ROOT)
    lessons = ["01_relu", "06_training", "07_host_side"]
    slow = {t.id for t in c.tasks() if t.slow}
    assert {"6.7", "7.3"} <= slow, slow
    declared = {(t.lesson, t.id): t for t in c.tasks()}
    tasks = [TaskSpec(t.id, t.lesson, t.title, t.points, []) for t in c.tasks() if t.lesson in lessons]
    st = RunSettings(lessons, 1, "cuda", 60.0, 300.0, ROOT, "brief", False, "cuda",
                     task_files={k: c.lesson(k[0]).files_of(t) for k, t in declared.items()})
    st.timed = plan.timed_alone(declared, "cuda")
    ids = [[t.id for t in g] for _, g in plan.task_groups(c, [Submission("", None, "solution")], tasks,
                                                           {0: set()}, st, jobs=4)]
    holds = [any(i in slow for i in g) for g in ids]
    first = sum(holds)  # every process holding a slow task (6.7, 7.3, 7.10 ...), and no other, comes first
    assert first >= 2 and holds[:first] == [True] * first, ids
    assert ids[first] == ["1.6"], ids  # then relu_torch.cu's, on a GPU loaded in a torch worker
    assert all(".T" in i for i in ids[first + 1]), ids  # then the twins
    # the timed tasks last, in one process: 6.12 and 7.7 host train.py and custom_op.py in torch workers
    assert ids[-1][0] == "1.7" and {"6.12", "7.7"} <= set(ids[-1]), ids
    text = (ROOT / "lessons" / "07_host_side" / "lesson.toml").read_text().replace("slow = true", 'slow = "yes"')
    with pytest.raises(CourseModelError, match="slow"):
        parse_lesson("07_host_side", text)


@pytest.mark.parametrize("backend", ["cuda", "sim"])
def test_on_a_gpu_the_processes_of_the_longest_tasks_are_not_niced(backend: str) -> None:
    """On a GPU the slow tasks and the torch-route one (1.6) run without the task niceness (plan.urgent_tasks): 7.10's
    three fresh torch workers, niced like twenty other processes, ended the H200 grade's correctness phase. Timed
    tasks are not among them (they run alone anyway), and on the simulator nothing changes."""
    from cudacourse.grading.plan import RunSettings
    from cudacourse.results import TaskSpec

    c = course(ROOT)
    declared = {(t.lesson, t.id): t for t in c.tasks()}
    tasks = [TaskSpec(t.id, t.lesson, t.title, t.points, []) for t in c.tasks()]
    st = RunSettings(list(c.lessons), 1, backend, 60.0, 300.0, ROOT, "brief", False, backend,
                     task_files={k: c.lesson(k[0]).files_of(t) for k, t in declared.items()})
    st.timed = plan.timed_alone(declared, backend)
    urgent = {tid for _, tid in plan.urgent_tasks(c, tasks, st)}
    if backend == "sim":
        assert urgent == set()
        return
    slow = {t.id for t in c.tasks() if t.slow and (t.lesson, t.id) not in st.timed}
    assert urgent == slow | {"1.6"}, urgent
    assert {"7.10", "6.7"} <= urgent and not urgent & {tid for _, tid in st.timed}
    st.urgent = plan.urgent_tasks(c, tasks, st)
    by_id = {t.id: t for t in tasks}
    assert runner.task_nice([by_id["7.10"]], st) == 0 and runner.task_nice([by_id["1.6"]], st) == 0
    assert runner.task_nice([by_id["1.1"], by_id["1.2"]], st) == runner.TASK_NICE > 0
    assert runner.task_nice([by_id["1.7"], by_id["7.5"]], st) == 0  # the timed process, alone on the machine


def test_task_groups_with_jobs_to_spare_long_tasks_start_first_each_alone() -> None:
    """With jobs to spare (the H100 machine's 16 for one grade) a slow task and each Triton twin get a process of
    their own, queued first: the slow ones, then those hosting a learner's Python file in a torch worker, then the
    twins (4.T2, behind 4.T1 in one process, and 6.3 and 7.4, queued behind the twins, each ended that machine's
    correctness phase late). With few jobs (CI's 2) nothing is split out: a process each costs a torch start-up."""

    from cudacourse.grading.plan import RunSettings
    from cudacourse.grading.staging import Submission
    from cudacourse.results import TaskSpec

    c = course(ROOT)
    declared = {(t.lesson, t.id): t for t in c.tasks()}
    tasks = [TaskSpec(t.id, t.lesson, t.title, t.points, []) for t in c.tasks()]
    st = RunSettings(list(c.lessons), 1, "cuda", 60.0, 300.0, ROOT, "brief", False, "cuda",
                     task_files={k: c.lesson(k[0]).files_of(t) for k, t in declared.items()})
    st.timed = plan.timed_alone(declared, "cuda")
    slow = {t.id for t in c.tasks() if t.slow}
    twins = {t.id for t in c.tasks() if ".T" in t.id}
    hosting = {t.id for t in c.tasks() if plan.learner_python(c, t.lesson, st.task_files[(t.lesson, t.id)])
               or set(st.task_files[(t.lesson, t.id)]) & set(c.lesson(t.lesson).torch_files)}  # (on a GPU)
    ids = [[t.id for t in g] for _, g in plan.task_groups(c, [Submission("", None, "solution")], tasks, {0: set()},
                                                          st, jobs=16)]
    assert all(g == [i] for g in ids for i in g if i in slow | twins), ids
    timed = {tid for _, tid in st.timed}
    kind = [0 if g[0] in slow else 1 if set(g) & hosting and not set(g) & timed else 2 if g[0] in twins
            else 3 for g in ids]
    assert kind == sorted(kind) and kind.count(0) == len(slow) and kind.count(2) == len(twins), (ids, kind)
    few = [[t.id for t in g] for _, g in plan.task_groups(c, [Submission("", None, "solution")], tasks, {0: set()},
                                                          st, jobs=2)]
    assert len(few) < len(ids) and any(len(g) > 1 and set(g) <= twins for g in few), few


@pytest.mark.parametrize("batch", [1, 12])
def test_processes_group_tasks_by_the_learner_python_they_host(batch: int) -> None:
    """While grading a learner's Python exercise file (train.py, custom_op.py, decoder.py) runs in a torch worker,
    one per file and task process: tasks that host one share a process only with tasks hosting the same files (one
    worker start), in a single grade and in a batch (where a lesson's groups are joined). The timed tasks all share
    one process, 6.12 (train.py) and 7.7 (custom_op.py) included: none of them imports the learner's Python."""

    from cudacourse.grading.plan import RunSettings
    from cudacourse.grading.staging import Submission
    from cudacourse.results import TaskSpec

    c = course(ROOT)
    lessons = ["01_relu", "04_transformer", "06_training", "07_host_side"]
    declared = {(t.lesson, t.id): t for t in c.tasks()}
    files = {k: c.lesson(k[0]).files_of(t) for k, t in declared.items()}
    tasks = [TaskSpec(t.id, t.lesson, t.title, t.points, []) for t in c.tasks() if t.lesson in lessons]
    st = RunSettings(lessons, 1, "cuda", 60.0, 300.0, ROOT, "brief", False, "cuda", task_files=files)
    st.timed = plan.timed_alone(declared, "cuda")
    if batch == 1:
        subs = [Submission("", None, "solution")]
    else:  # submissions of their own (own build caches): a big batch joins each lesson's groups
        subs = [Submission(f"s{i}", ROOT, "submission", pristine=ROOT, build_dir=ROOT / "nonexistent")
                for i in range(batch)]
    groups = plan.task_groups(c, subs, tasks, {i: set() for i in range(batch)}, st, jobs=2)
    python = {t.id: plan.learner_python(c, t.lesson, files[(t.lesson, t.id)]) for t in tasks}
    assert python["6.7"] == ("06_training/train.py",) and python["6.1"] == () and python["7.4"] == (
        "07_host_side/custom_op.py",) and python["4.9"] == ("04_transformer/decoder.py",) and python["4.1"] == ()
    for _, g in groups:
        if not all((t.lesson, t.id) in st.timed for t in g):
            assert len({python[t.id] for t in g}) == 1, [t.id for t in g]
    ids = [[t.id for t in g] for i, g in groups if i == 0]
    assert python["6.12"] == ("06_training/train.py",) and python["7.7"] == ("07_host_side/custom_op.py",)
    assert any({"1.7", "7.5", "6.12", "7.7"} <= set(g) for g in ids), ids
    # 7.4 times nothing (lesson.toml: alone = false): graded with 7.3 (one torch worker for custom_op.py), not in
    # the GPU's timed phase
    assert ("07_host_side", "7.4") not in st.timed and ("07_host_side", "7.7") in st.timed
    assert any("7.4" in g and "7.3" in g for g in ids) if batch == 1 else True, ids
    assert any(set(g) >= {"6.1", "6.2"} for g in ids) and not any("6.7" in g and "6.1" in g for g in ids), ids


def test_a_lesson_runs_in_one_process_when_its_torch_route_file_is_the_instructors(tmp_path: Path) -> None:
    """A batch's submission whose relu_torch.cu is the instructor's (built once per run, in the shared cache) runs
    lesson 01's CUDA tasks in one process; one with its own relu_torch.cu (a slow build) keeps 1.6 apart, and so
    does every submission of a batch too small to keep each job busy with two processes."""

    from cudacourse.grading.plan import RunSettings
    from cudacourse.grading.staging import Submission
    from cudacourse.results import TaskSpec

    c = course(ROOT)
    declared = {(t.lesson, t.id): t for t in c.tasks()}
    cuda = [t for t in c.tasks() if t.lesson == "01_relu" and t.track == "cuda" and not t.gpu]
    tasks = [TaskSpec(t.id, t.lesson, t.title, t.points, []) for t in cuda]
    st = RunSettings(["01_relu"], 1, "sim", 60.0, 300.0, tmp_path / "build", "brief", False, "sim",
                     task_files={k: c.lesson(k[0]).files_of(t) for k, t in declared.items()},
                     instructor=plan.instructor_hashes(c))
    subs = []
    for name in ("same", "own", "same2", "own2"):
        sub = Submission(name, tmp_path / name, "submission", pristine=tmp_path / name, build_dir=tmp_path / "b")
        d = sub.pristine / "lessons" / "01_relu"  # type: ignore[operator]
        d.mkdir(parents=True)
        (d / "relu.cu").write_text("// the learner's relu.cu\n")
        torch_file = (ROOT / "solutions" / "01_relu" / "relu_torch.cu").read_text()
        (d / "relu_torch.cu").write_text(torch_file if name.startswith("same") else torch_file + "// edited\n")
        subs.append(sub)
    ids = sorted(t.id for t in cuda)

    def groups(n: int) -> dict[str, list[list[str]]]:
        out: dict[str, list[list[str]]] = {}
        for i, g in plan.task_groups(c, subs[:n], tasks, {k: set() for k in range(n)}, st, jobs=2):
            out.setdefault(subs[i].name, []).append([t.id for t in g])
        return out

    many = groups(4)
    assert many["same"] == [ids] and many["same2"] == [ids], many  # one process, tasks in order
    assert many["own"] == [[i for i in ids if i != "1.6"], ["1.6"]] == many["own2"], many
    few = groups(1)  # one submission, two jobs: 1.6 apart (and the rest split to fill the jobs)
    assert ["1.6"] in few["same"] and len(few["same"]) >= 2, few


def test_the_warm_up_builds_a_kernel_only_file_without_torch(tmp_path: Path,
                                                             seed_sim_runtime: Callable[[Path], None]) -> None:
    """The warm-up worker builds a kernel-only file for the simulator as loader.Module would (same cache entry)
    without importing torch (2 CPU-s per submission and lesson in a batch) or starting a simulator worker."""
    from cudacourse.settings import Settings, to_env

    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_COURSE_")}
    env.update(to_env(Settings(impl="solution", backend="sim", build_dir=tmp_path / "own")))
    shared = tmp_path / "shared"  # the session's runtime (its other builds would hide this one)
    seed_sim_runtime(shared)
    env["CUDA_COURSE_BUILD_SHARED"] = str(shared)
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "cudacourse.grading.build_worker", "01_relu",
                        "sim", "1", "relu.cu"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.stdout.split()[:1] == ["start"] and r.stdout.split("\n")[1].split()[:2] == ["done", "relu.cu"], r.stdout
    imported = {ln.split("|")[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    assert "cudacourse.sim" in imported and "torch" not in imported, sorted(imported)
    assert "sim" in {p.name for p in (tmp_path / "own").iterdir()}, "relu.cu was not built into the cache"
    # the tests' build of the same file is a cache hit (with the grade's shared cache, as the grader's task processes)
    with using(build_dir=tmp_path / "own", build_shared=shared):
        from cudacourse.loader import load

        before = {p.name for p in (tmp_path / "own" / "sim").iterdir()}
        load(ROOT / "solutions" / "01_relu" / "relu.cu", backend="sim", check=None)
        assert {p.name for p in (tmp_path / "own" / "sim").iterdir()} == before


def test_a_task_on_an_untouched_file_is_neither_built_nor_run(fake_course: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15 (stumble 13): a learner who had not opened relu_torch.cu waited 63 s for its build in every
    grade. A task that names its files in lesson.toml is "not started" while they are all still the stubs: not
    built, not run, and its lesson's other tasks are graded as usual."""
    lesson = fake_course / "lessons" / "01_relu"
    toml = FAKE_LESSON.replace('files = ["relu.cu"]', 'files = ["relu.cu"]\ntorch_files = ["bind.cu"]')
    (lesson / "lesson.toml").write_text(toml + '\n[[task]]\nid = "1.4"\ntitle = "Binding"\npoints = 2\n'
                                          'files = ["bind.cu"]\n')
    (fake_course / "tests" / "test_01_relu.py").write_text(FAKE_TESTS + '''
@pytest.mark.task("1.4")
def test_binding():
    """Binding."""
    text = (Path(os.environ["CUDA_COURSE_SUBMISSION"]) / "lessons" / "01_relu" / "bind.cu").read_text()
    assert "bound" in text, "bind.cu is not written"
''')
    solution = "// given\n// TODO(task 1.4): bind\n// BEGIN SOLUTION\n// bound\n// END SOLUTION\n"
    (fake_course / "solutions" / "01_relu" / "bind.cu").write_text(solution)
    from cudacourse import stubs

    (lesson / "bind.cu").write_text(stubs.derive(solution))
    (lesson / "relu.cu").write_text("// fine, my own\n")  # the learner's work: relu.cu only
    out = tmp_path / "r.json"
    capsys.readouterr()
    assert _grade(fake_course, "--impl", "student", "--json", str(out)) == 0
    got = {t["id"]: t for t in json.loads(out.read_text())["tasks"]}
    assert {i: t["status"] for i, t in got.items()} == {"1.1": "pass", "1.2": "pass", "1.3": "not-graded",
                                                         "1.4": "fail"}, got
    assert got["1.4"]["message"] == "not started: bind.cu is still the stub", got["1.4"]
    printed = capsys.readouterr().out
    assert "relu.cu built in" in printed and "bind.cu" not in printed.split("== grade ==")[0], printed
    # Written, the task is built and graded like any other.
    (lesson / "bind.cu").write_text(solution)
    assert _grade(fake_course, "--impl", "student", "--tasks", "1.4", "--json", str(out), "-q") == 0
    got = {t["id"]: t["status"] for t in json.loads(out.read_text())["tasks"]}
    assert got == {"1.4": "pass"}, got


def test_a_gpu_failure_with_its_own_verdict_is_not_graded_again_alone() -> None:
    """Issue 14 (failed-fast): on a GPU a task that failed in company is graded again alone only when the failure
    could come from another task (a crash, a CUDA error); wrong values or a compile error are its own."""
    from cudacourse.grading.verdicts import own_verdicts

    def rec(exc: str, outcome: str = "failed") -> TestRecord:
        r = _rec("1.1", outcome)
        r.exc_type = exc
        return r

    assert own_verdicts([rec("CheckFailure"), rec("", "passed"), rec("AssertionError")])
    assert own_verdicts([rec("CompileError")])
    assert not own_verdicts([rec("CheckFailure"), rec("KernelError")])
    assert not own_verdicts([rec("RuntimeError")]) and not own_verdicts([rec("", "passed")])


def test_a_sandbox_that_could_not_start_is_tried_again_and_never_blamed_on_the_code(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CI once failed a task with "the test process died (exit code 126): a crash": the sandbox's launcher had
    found a second launcher's new cgroup still empty and removed it. Such a cgroup is now kept while its
    launcher lives; a worker that still cannot start (exit 126 and a "confine:" line, nothing collected) is
    started once more, and a second failure names the machine, not the learner's code."""

    from cudacourse.grading.plan import RunSettings
    from cudacourse.grading.session import GradeSession
    from cudacourse.grading.verdicts import Run, crash_note
    from cudacourse.results import TaskSpec
    from cudacourse.sandbox.launcher import _launcher_alive

    assert _launcher_alive(f"cudacourse-{os.getpid()}-0a1b")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not _launcher_alive(f"cudacourse-{child.pid}-0a1b") and not _launcher_alive("cudacourse-probe")

    failed = Run({}, {}, None, False, 126, "confine: could not create namespaces: [Errno 28]\n", [], 0.0)
    good = Run({"t::a": {"task": "1.1", "lesson": "01_relu", "nodeid": "t::a"}},
               {"t::a": {"nodeid": "t::a", "file": "t", "lesson": "01_relu", "task": "1.1", "points": 2,
                                 "title": "A", "gpu": False, "params": "", "outcome": "passed", "message": "",
                                 "exc_type": "", "duration": 0.1}}, None, False, 0, "", [], 0.0)
    task = TaskSpec("1.1", "01_relu", "A", 2, ["t"])
    st = GradeSession(RunSettings(["01_relu"], 0, None, 1.0, 1.0, Path("."), "brief", False))
    st.slots.put(Path("slot0"))
    runs = [failed, good]
    monkeypatch.setattr(runner, "_run_pytest", lambda *a: runs.pop(0))
    assert [r.status for r in runner.run_group(object(), [task], st)] == ["pass"] and not runs  # type: ignore[arg-type]
    runs = [failed, failed]
    (res,) = runner.run_group(object(), [task], st)  # type: ignore[arg-type]
    assert res.status == "fail" and "sandbox" in res.message and "not of your code" in res.message
    assert "crash" not in res.message and not runs
    # A worker that exits 126 itself after its tests were collected is the code's own crash.
    own = Run(good.collected, {}, "t::a", False, 126, "confine: forged\n", [], 0.0)
    assert "crash" in crash_note(own)


def test_warm_ups_run_once_per_key_and_other_keys_at_the_same_time() -> None:
    """The grader builds a lesson once per submission (every slot shares the build) while other lessons build at
    the same time: one lock for all lessons had made a many-job grade warm its lessons up one after another."""
    import threading

    from cudacourse.grading.staging import Once

    once, ran, both_inside = Once(), [], threading.Barrier(2, timeout=30)

    def job(key: str) -> None:
        both_inside.wait()  # passes only when the other lesson's job is running too (else it breaks: no append)
        ran.append(key)

    threads = [threading.Thread(target=once.run, args=(k, lambda k=k: job(k))) for k in ("01", "02")]
    threads += [threading.Thread(target=once.run, args=("01", lambda: job("01 again")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(r.split()[0] for r in ran) == ["01", "02"], ran  # each key once, and the two at the same time


def test_a_file_outside_the_warm_up_list_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """``build_event`` gives the build event of a file; one the lesson's warm-up never builds would have no
    event set, and its task would wait for ever: none is given for it (the tests build such a file themselves)."""
    from cudacourse.grading.staging import Submission

    started: list[list[str]] = []
    monkeypatch.setattr(builds, "start_builds", lambda sub, lesson, names, st: started.append(list(names)))
    sub = Submission("s", None, "student", to_build={"01_relu": ["relu.cu"]})
    assert builds.build_event(sub, "01_relu", "other.cu", None) is None  # type: ignore[arg-type]
    assert started == []
    event = builds.build_event(sub, "01_relu", "relu.cu", None)  # type: ignore[arg-type]
    assert event is sub.builds.event("01_relu", "relu.cu") and not event.is_set()
    assert started == [["relu.cu"]]


def test_gpu_gate_times_speed_tasks_alone_and_correctness_first() -> None:
    """On a GPU a speed task's process runs with no other task process: it waits for the correctness processes
    running, and none starts while it times. A correctness process asking while a speed task waits goes first
    (a lesson's correctness tasks, late after a slow build, must not queue behind every speed task)."""
    import threading

    from cudacourse.grading.staging import GpuGate

    gate, order, timing = GpuGate(), [], threading.Event()
    gate.acquire(exclusive=False)  # a correctness task is running

    def speed() -> None:
        gate.acquire(True)
        order.append("speed")
        timing.set()
        threading.Event().wait(0.3)  # while it times, a correctness request must wait
        order.append("speed done")
        gate.release(True)

    timed = threading.Thread(target=speed)
    timed.start()
    threading.Event().wait(0.2)
    assert order == [], "a speed task started beside a running correctness task"
    first = threading.Thread(target=lambda: (gate.acquire(False), order.append("first"), gate.release(False)))
    first.start()  # a late correctness task is not held back by the waiting speed task
    first.join(timeout=30)
    assert order == ["first"], order
    gate.release(exclusive=False)
    assert timing.wait(30)
    late = threading.Thread(target=lambda: (gate.acquire(False), order.append("late"), gate.release(False)))
    late.start()
    timed.join(timeout=30)
    late.join(timeout=30)
    assert order == ["first", "speed", "speed done", "late"], order


def test_gpu_gate_holds_speed_tasks_until_every_correctness_group_is_done() -> None:
    """A speed task's process starts early (its start-up overlaps the correctness work) but gets the GPU only once
    every correctness group counted by ``expect`` has finished, started or not: not in a gap between two of them.
    Correctness groups are never held back by it."""
    import threading

    from cudacourse.grading.staging import GpuGate

    gate, got = GpuGate(), threading.Event()
    gate.expect(2)  # two correctness groups queued, none running: the gate is idle, yet a speed task must wait
    speed = threading.Thread(target=lambda: (gate.acquire(True), got.set(), gate.release(True)))
    speed.start()
    assert not got.wait(0.3), "a speed task took the GPU before the queued correctness work"
    gate.acquire(False)  # the first group runs beside the waiting speed task
    gate.release(False)
    gate.finished()
    assert not got.wait(0.3), "a speed task took the GPU with a correctness group still to run"
    gate.finished()
    assert got.wait(30), "the speed task never got the GPU after the correctness work"
    speed.join(timeout=30)


def test_host_turn_keeps_another_graders_timing_alone(tmp_path: Path) -> None:
    """Two graders on one machine: while one holds the machine's exclusive turn (it times), the other's task
    processes wait, shared or exclusive; shared turns go side by side; a killed holder frees the machine."""
    import subprocess
    import threading

    from cudacourse.grading.staging import host_turn

    lock = tmp_path / "turns.lock"
    hold = ("import sys, time; from pathlib import Path; from cudacourse.grading.staging import host_turn\n"
            "with host_turn(sys.argv[1] == 'x', Path(sys.argv[2])):\n    print('held', flush=True); time.sleep(600)")
    other = subprocess.Popen([sys.executable, "-c", hold, "x", str(lock)], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        got = threading.Event()

        def shared_turn() -> None:
            with host_turn(False, lock):
                got.set()

        t = threading.Thread(target=shared_turn, daemon=True)
        t.start()
        assert not got.wait(0.5), "a task process ran while another grader timed on this machine"
        other.kill()  # the holder dies: the kernel releases its flock
        assert got.wait(60), "a dead grader's turn was never released"
    finally:
        other.kill()
        other.wait()
    sharer = subprocess.Popen([sys.executable, "-c", hold, "s", str(lock)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert sharer.stdout is not None and sharer.stdout.readline().strip() == "held"
        done = threading.Event()

        def second_shared() -> None:
            with host_turn(False, lock):
                done.set()

        threading.Thread(target=second_shared, daemon=True).start()
        assert done.wait(60), "two shared turns did not run side by side"
    finally:
        sharer.kill()
        sharer.wait()


def test_bytecode_of_packages_that_ship_none_is_written_by_the_collection_and_read_by_the_rest(
        fake_course: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        seed_sim_runtime: Callable[[Path], None]) -> None:
    """Issue 35: on a machine whose Python packages ship no bytecode (the H200 machine's), every process of a grade
    compiled torch's modules again. There the grade keeps bytecode in a folder of the build root: the collection
    (the instructor's code only) writes it, and the task processes read it, never write it (a pyc planted by
    learner code would run in later grades). Where packages have bytecode nothing changes."""
    from cudacourse.grading import processes

    if processes._packages_have_bytecode() and not sys.pycache_prefix:  # (the 2-core machine; not the H200's)
        assert processes.child_env(tmp_path, 1, "sim", tmp_path).get("PYTHONPYCACHEPREFIX") is None
    monkeypatch.setattr(processes, "_packages_have_bytecode", lambda: False)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(processes, "WARM_IMPORTS", ())  # (the warmer: the next test)
    build = tmp_path / "build"
    seed_sim_runtime(build)  # (the grade of the checkout seeds its own cache from this one)
    with using(build_dir=build):
        pyc = processes.bytecode_cache()
        assert pyc == build / "pycache" and pyc.is_dir()
        env = processes.child_env(tmp_path, 1, "sim", tmp_path)
        assert env["PYTHONPYCACHEPREFIX"] == str(pyc) and env["PYTHONDONTWRITEBYTECODE"] == "1"
        # a task process (start_worker, as the grader starts one) may read the folder, not write it
        probe = ("import pathlib, sys\n"
                 "p = pathlib.Path(sys.argv[1])\n"
                 "print('readable', sorted(p.iterdir()) is not None)\n"
                 "try:\n    (p / 'planted.pyc').write_bytes(b'x')\n    print('written')\n"
                 "except OSError as e:\n    print('refused', e.errno)\n")
        slot = tmp_path / "slot"
        slot.mkdir()
        proc = processes.start_worker([sys.executable, "-c", probe, str(pyc)], cwd=slot, env=env,
                                      scratch=tmp_path / "scratch", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
        out, _ = proc.communicate(timeout=120)
        assert "readable True" in out, out
        if processes.confinement().landlock_abi > 0:
            assert "refused" in out and not (pyc / "planted.pyc").exists(), out
        out_json = tmp_path / "r.json"
        assert cli.main(["--course", str(fake_course), "--backend", "sim", "--impl", "solution",
                         "--json", str(out_json), "-q"]) == cli.EXIT_OK
    assert json.loads(out_json.read_text())["earned"] > 0
    # the collection wrote the bytecode of what it imported (pytest's modules among them) into the folder
    written = [p.name for p in pyc.rglob("*.pyc")]
    assert any(n.startswith("python.") for n in written) and len(written) > 50, written[:20]


def test_processes_beside_the_collection_write_the_bytecode_of_what_tests_import_only_while_they_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35: modules that torch imports only inside a test (sympy, dynamo, inductor: processes.WARM_IMPORTS) were
    compiled from source by every process that reached them, since only the collection writes bytecode. The warmers
    (one per module) write theirs into the grade's folder (two light modules of the standard library here), and none
    starts again for a module already there."""
    from cudacourse.grading import processes

    monkeypatch.setattr(processes, "WARM_IMPORTS", ("json.decoder", "email.mime.text"))
    pyc = tmp_path / "pycache"
    pyc.mkdir()
    env = {**processes.child_env(tmp_path, 1, "sim", tmp_path), "PYTHONPYCACHEPREFIX": str(pyc)}
    no_folder = {k: v for k, v in env.items() if k != "PYTHONPYCACHEPREFIX"}
    assert processes.bytecode_warmers(tmp_path, no_folder, tmp_path / "scratch") == []  # nothing to warm
    assert not any(processes._warmed(pyc, m) for m in processes.WARM_IMPORTS)
    procs = processes.bytecode_warmers(tmp_path, env, tmp_path / "scratch")
    assert len(procs) == 2 and [p.wait(timeout=300) for p in procs] == [0, 0]
    assert all(processes._warmed(pyc, m) for m in processes.WARM_IMPORTS), sorted(pyc.rglob("*.pyc"))[:20]
    assert processes.bytecode_warmers(tmp_path, env, tmp_path / "scratch") == []


def test_grader_problem_exit_code_and_report(fake_course: Path, tmp_path: Path) -> None:
    (fake_course / "tests" / "test_01_relu.py").write_text("this is not python\n")
    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    assert _grade(fake_course, "--impl", "solution", "--json", str(out), "--markdown", str(md)) == 2
    rep = json.loads(out.read_text())
    assert set(rep) == SCHEMA_TOP and rep["tasks"] == []
    assert "Grading problems" in md.read_text()
    assert _grade(fake_course, "--submission", str(tmp_path / "nowhere"), "--json", str(out)) == 2
    assert json.loads(out.read_text())["tasks"] == []

# ----------------------------------------------------------------------------------------------------
# The corpus of broken lesson-01 submissions, graded on the simulator in one run
# ----------------------------------------------------------------------------------------------------


def _make_corpus() -> object:
    sys.path.insert(0, str(CORPUS_SCRIPT))
    try:
        import make_corpus  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    return make_corpus


@pytest.mark.slow
@CORPUS_GROUP
def test_corpus(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Every corpus case gets the expected verdict on every task, in one grading run."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    expected = _make_corpus().write(corpus)  # type: ignore[attr-defined]
    cases = sorted(p.name for p in corpus.iterdir() if p.is_dir())
    assert sorted(expected) == cases
    assert len(cases) >= 20
    out = tmp_path / "out"
    env_backend = os.environ.get("CUDA_COURSE_BACKEND", "sim")
    if env_backend not in ("sim", "cuda"):
        env_backend = "sim"
    if env_backend == "sim":  # the runtime: the checkout's build, once a run (the torch builds: below)
        request.getfixturevalue("grader_runtime")
    t0 = time.monotonic()
    les01 = course().lesson("01_relu")
    cuda_tasks = [t.id for t in les01.tasks if t.track == "cuda"] + ["1.H"]
    torch_tasks = {t.id for t in les01.tasks if t.track == "cuda" and "relu_torch.cu" in les01.files_of(t)}
    # Two batches: the cases that hand in the course's own relu_torch.cu are graded without its task (1.6: a pytest
    # process and a torch worker per case, about 130 of the corpus's CPU-seconds on the 2-core machine, for the
    # solution's verdict again); the others with every task.
    solution_torch = (ROOT / "solutions" / "01_relu" / "relu_torch.cu").read_text()
    for case in cases:
        f = corpus / case / "lessons" / "01_relu" / "relu_torch.cu"
        part = "kernel-batch" if f.is_file() and f.read_text() == solution_torch else "torch-batch"
        (corpus / part).mkdir(exist_ok=True)
        (corpus / case).rename(corpus / part / case)
    rc = cli.EXIT_OK
    for part, tasks in (("kernel-batch", [t for t in cuda_tasks if t not in torch_tasks]), ("torch-batch", cuda_tasks)):
        if not (corpus / part).is_dir():
            continue
        if part == "torch-batch" and env_backend == "sim":
            # the precompiled torch header and relu_torch.cu's extension, once a run: asked for only now, so that
            # the attack batch's worker, grading at the same time, did not wait for them at the start
            request.getfixturevalue("instructor_builds")
        with using(build_dir=_SHARED_BUILD[0]):  # the session's run cache: the runtime and the torch builds above
            rc = max(rc, cli.main(["--batch", str(corpus / part), "--lessons", "01_relu", "--hidden",
                                   str(HIDDEN_EXAMPLE), "--tasks", *tasks, "--backend", env_backend,
                                   # 60 s per case: at 20 s a loaded 2-core machine once timed out the torch-route
                                   # case of a correct relu_torch.cu (fresh clone, 2026-11-23). The endless-loop
                                   # cases do not wait it out: the simulator's per-call timeout (10 s,
                                   # KernelTimeout) ends each, and the task's other cases are skipped (measured
                                   # 10.5-10.9 s per task, 2-core machine, 2026-11-25)
                                   "--timeout", "60", "--jobs", "2", "--json", str(out), "--markdown", str(out),
                                   "--gradescope", str(out), "-q"]))
    seconds = time.monotonic() - t0
    print(f"corpus of {len(cases)} submissions graded in {seconds:.0f} s")
    assert rc == 0
    model = course()
    wrong = []
    for case in cases:
        rep = json.loads((out / f"{case}.json").read_text())
        assert (out / f"{case}.md").exists()
        gs = json.loads((out / f"{case}.gradescope.json").read_text())
        assert gs["score"] == rep["earned"] and len(gs["tests"]) == len(rep["tasks"])
        must_fail = set(expected[case]["fail"])
        if rep["backend"] == "cuda":
            must_fail |= set(expected[case]["also_fail_on_cuda"])
        blind = set(expected[case]["fail"]) if rep["backend"] == "cuda" and expected[case]["gpu_blind"] else set()
        graded_ids = [t["id"] for t in rep["tasks"]]
        assert set(graded_ids) | torch_tasks == set(cuda_tasks), (case, graded_ids)
        assert not (must_fail & torch_tasks) or torch_tasks <= set(graded_ids), (case, graded_ids)
        for t in rep["tasks"]:
            if t["id"] in blind:  # a bug a GPU cannot see (make_corpus.py says why): its verdict there is not asserted
                continue
            want = "fail" if t["id"] in must_fail else ("not-graded" if t["id"] == "1.7" and rep["backend"] == "sim"
                                                         else "pass")
            if t["status"] != want:
                wrong.append(f"{case} task {t['id']}: {t['status']} (expected {want}): {t['message'][:300]}")
            if t["status"] == "fail":
                assert t["message"].strip(), f"{case} task {t['id']} failed without a message"
            if t["id"] != "1.H":  # points and titles are the instructor's, whatever the submission's lesson.toml says
                assert (t["points"], t["title"]) == (model.task("01_relu", t["id"]).points,
                                                     model.task("01_relu", t["id"]).title)
        if case == "solution":
            assert rep["earned"] == rep["possible"] - rep["not_graded"] > 0
    assert not wrong, "\n".join(wrong)


def test_templates_are_valid() -> None:
    for name in ("github-actions-grade.yml", "github-actions-grade-gpu.yml", "classroom.yml"):
        text = (ROOT / "templates" / name).read_text()
        assert "\t" not in text and "runs-on:" in text, name
        try:
            import yaml
        except ImportError:  # PyYAML is not a course dependency; the text checks above still ran
            continue
        doc = yaml.safe_load(text)
        steps = [s for job in doc["jobs"].values() for s in job["steps"]]
        if name == "classroom.yml":
            uses = "classroom-resources/autograding-"
            graders = [s for s in steps if s.get("uses", "").startswith(uses + "command-grader")]
            reporter = next(s for s in steps if s.get("uses", "").startswith(uses + "grading-reporter"))
            ids = [s["id"] for s in graders]
            assert reporter["with"]["runners"].split(",") == ids
            assert set(reporter["env"]) == {f"{i.upper()}_RESULTS" for i in ids}
            assert sum(s["with"]["max-score"] for s in graders) == sum(t.points for t in course().tasks() if not t.gpu)
        else:
            assert any("cudacourse grade" in s.get("run", "") for s in steps), name


# ----------------------------------------------------------------------------------------------------
# Python exercise files (lesson 04's decoder.py) are staged with the kernels, and screened
# ----------------------------------------------------------------------------------------------------


def test_python_exercise_files_are_screened() -> None:
    sol = (ROOT / "solutions" / "04_transformer" / "decoder.py").read_text()
    assert screen_python_file("decoder.py", sol) == []
    assert course().lesson("04_transformer").python_files == ("decoder.py",)
    cheats = {
        "import os\n": "import os",
        "import cudacourse.check as c\nc.assert_close = lambda *a, **k: None\n": "monkeypatching",
        "x = open('tests/test_04_transformer.py').read()\n": "'open'",
        "import torch\ntorch.allclose = lambda *a, **k: True\n": "monkeypatching",
        "y = ().__class__.__bases__\n": "dunder",
    }
    for src, why in cheats.items():
        reasons = screen_python_file("decoder.py", src)
        assert any(why in r for r in reasons), (src, reasons)
    # The corpus's Python bypasses (issue 14: getattr on builtins, __subclasses__, importlib, torch.os, torch.sys,
    # torch.load/save, torch.ops) are refused before they run; the OS confinement stays the guarantee behind
    # this early error. A torch answer (F.linear) is legal text: screens.torch_answer_guard refuses it at run time.
    from tests.attacks.corpus import build, load

    py_attacks = [a for a in load() if a.base.endswith(".py") and a.id != "python-answers-with-torch"]
    assert len(py_attacks) >= 7
    for a in py_attacks:
        text = build(a, course=ROOT, paths={})[a.target]
        assert screen_python_file("decoder.py", text), a.id
    # Every lesson's Python files, stub and solution, pass the screen as a submission's are screened (with their
    # lesson's python_allow): lesson 07's custom_op.py was refused for its given code (torch.library, functools),
    # which failed task 7.3 for every submission, the solution's included.
    for les in course():
        for f in les.python_files:
            for side in ("lessons", "solutions"):
                text = (ROOT / side / les.id / f).read_text()
                assert screen_python_file(f, text, allow=les.python_allow) == [], (side, les.id, f)
    assert course().lesson("07_host_side").python_allow and screen_python_file(
        "custom_op.py", (ROOT / "solutions" / "07_host_side" / "custom_op.py").read_text()), \
        "without python_allow, custom_op.py's torch.library is refused (the default screen)"
    assert screen_python_file("train.py", "import torch\ntorch.library.impl('aten::allclose', 'CPU')\n",
                              allow=("functools",)), "torch.library stays refused where a lesson does not allow it"


def test_capstone_is_graded_with_the_other_lessons_staged(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Grading lesson 04 alone still stages lessons 02 and 03, whose kernels the capstone calls (the capstone
    task alone: ``--tasks``; tests/test_04_transformer.py checks the other tasks)."""
    from cudacourse.buildcache import build_root

    out = tmp_path / "g.json"
    # Built into the checkout's cache, where the suite's own tests build the same solution files (lessons 02-04:
    # ~20 CPU-s), not a folder of this grade's own: --workdir makes it an instructor's grade of the checkout.
    with using(build_dir=build_root()):
        rc = cli.main(["--impl", "solution", "--lessons", "04_transformer", "--tasks", "4.9", "--backend", "sim",
                       "--json", str(out), "-q", "--timeout", "60", "--workdir", str(tmp_path / "work")])
    assert rc == 0
    rep = json.loads(out.read_text())
    status = {t["id"]: t["status"] for t in rep["tasks"]}
    assert status == {"4.9": "pass"}, [t["message"] for t in rep["tasks"] if t["id"] == "4.9"]
    assert cli.main(["--impl", "solution", "--lessons", "04_transformer", "--tasks", "1.1", "--json", str(out)]) == 2
    assert "--tasks: no task 1.1 in the lessons graded" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------
# Adding a lesson is adding one folder (and its test file): a toy lesson picked up with no other edit
# ----------------------------------------------------------------------------------------------------

TOY_LESSON = """
[lesson]
title = "Toy: doubling"
write = "a doubling kernel"
learn = "nothing new"
files = ["toy.cu"]

[[task]]
id = "5.1"
title = "double_it: y = 2x"
points = 2

[[task]]
id = "5.2"
title = "speed: double_it against the copy bandwidth"
points = 1
gpu = true
target = 0.5
target_of = "copy"
"""

TOY_SOLUTION = """// toy.cu: a toy lesson for the course's own tests.
#include <cuda_runtime.h>

__global__ void double_kernel(const float* x, float* y, int n) {
    // TODO(task 5.1): y[i] = 2 * x[i] for every i < n (~2 lines)
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
    // END SOLUTION
}

void double_it(const float* x, float* y, int n) { double_kernel<<<(n + 127) / 128, 128>>>(x, y, n); }
"""

TOY_TESTS = '''
import pytest

import cudacourse as cc
from cudacourse import check


@pytest.mark.task("5.1")
@pytest.mark.parametrize("n", [1, 33, 1000])
def test_double(n):
    m = cc.lesson("05_toy")
    x = check.randn((n,), check.rng(f"toy-{n}"), m.device)
    y = check.poisoned(n, device=m.device)
    m.double_it(x, y, n)
    check.assert_close(y, 2 * x, name="y", task="5.1")


@pytest.mark.task("5.2")
def test_speed():
    """Speed (GPU only: the model says so)."""
'''

TOY_BENCH = '''
from cudacourse.bench import Case


def cases(m, quick=False):
    return [Case("double", "double_it", lambda: None, bytes=8, task="5.2")]
'''


def test_a_new_lesson_is_one_folder(tmp_path: Path, seed_sim_runtime: Callable[[Path], None]) -> None:
    """A toy lesson 05 (lesson.toml, a solution, its test file, a bench.py) in a fresh course tree is picked up by
    stubs, the pytest plugin, grade, bench and the templates with no other edit."""
    from cudacourse import bench, stubs, templates

    root = tmp_path / "course"
    (root / "tests").mkdir(parents=True)
    (root / "cudacourse").symlink_to(ROOT / "cudacourse")
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = \"--strict-markers\"\n")
    shutil.copy2(ROOT / "tests" / "conftest.py", root / "tests" / "conftest.py")
    shutil.copy2(ROOT / "setup.sh", root / "setup.sh")  # (the templates pin the torch version it installs)
    _toy_lesson(root, "05_toy", TOY_LESSON)
    (root / "lessons" / "05_toy" / "bench.py").write_text(TOY_BENCH)
    (root / "solutions" / "05_toy").mkdir(parents=True)
    (root / "solutions" / "05_toy" / "toy.cu").write_text(TOY_SOLUTION)
    (root / "tests" / "test_05_toy.py").write_text(TOY_TESTS)
    seed_sim_runtime(root / ".cudacourse-build")  # (the course's own cache: building the runtime is not this test's)
    toy = Course(root)
    # stubs: the stub is derived, then nothing has drifted
    assert stubs.drifted(root) == [root / "lessons" / "05_toy" / "toy.cu"]
    stubs.write_all(root)
    assert stubs.drifted(root) == [] and "BEGIN SOLUTION" not in (root / "lessons" / "05_toy" / "toy.cu").read_text()
    # bench: the lesson's cases are found, the task's target comes from lesson.toml
    assert bench.lessons_with_cases(toy) == ["05_toy"]
    (case,) = bench.load_cases("05_toy", toy)(object())
    assert case.task == "5.2" and toy.task("05_toy", "5.2").target == 0.5
    # templates: one Classroom step for the CPU-gradable task
    text = templates.render(toy)["classroom.yml"]
    assert "--cc-task 5.1" in text and "--cc-task 5.2" not in text and "max-score: 2" in text
    # the plugin: points and GPU-only from the model
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_COURSE_")}
    env.update({"CUDA_COURSE_BACKEND": "sim", "PYTHONPATH": str(root)})
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/test_05_toy.py", "--impl=solution", "-q",
                           "-p", "no:cacheprovider", "-p", "no:xdist"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900)
    rows = {ln.split()[0]: ln.split() for ln in proc.stdout.splitlines() if ln[:2] == "5."}
    assert rows["5.1"][-3:] == ["2", "2", "pass"] and rows["5.2"][-3:] == ["1", "0", "not-graded"], proc.stdout
    # grade: the solution earns the task, the stub does not
    out = tmp_path / "g.json"
    for impl, want in (("solution", "pass"), ("student", "fail")):
        assert cli.main(["--course", str(root), "--impl", impl, "--backend", "sim", "--json", str(out), "-q"]) == 0
        rep = json.loads(out.read_text())
        assert {t["id"]: t["status"] for t in rep["tasks"]} == {"5.1": want, "5.2": "not-graded"}, rep
        assert (rep["possible"], rep["not_graded"]) == (3, 1)


def test_torch_answer_guard_refuses_torch_compute_from_the_learners_file(tmp_path: Path) -> None:
    """Issue 14: a Python exercise file that answers with torch (F.linear, @, torch.ops) is refused by the
    guard around the learner's Python; allocation and views from it, and torch used by other code, are not."""
    import importlib.util

    import torch

    from cudacourse.grading.screens import torch_answer_guard

    learner = tmp_path / "decoder.py"
    learner.write_text(
        "import torch\n"
        "def with_f(x, w):\n    return torch.nn.functional.linear(x, w)\n"
        "def with_op(x, w):\n    return x @ w.t()\n"
        "def with_ops(x, w):\n    return torch.ops.aten.mm.default(x, w.t())\n"
        "def with_method(x, w):\n    return x.matmul(w.t())\n"
        "def shaping(x, k):\n    y = torch.empty(x.shape[0], 4)\n    return k(x.reshape(-1, 4).contiguous(), y)\n")
    spec = importlib.util.spec_from_file_location("cc_guard_learner", learner)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    x, w = torch.randn(3, 4), torch.randn(5, 4)

    def kernel(a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:  # stands for a course kernel wrapper
        out.copy_(a * 2.0 + torch.ones_like(a))
        return out

    with torch_answer_guard([str(learner)]):
        for fn, line in (("with_f", 3), ("with_op", 5), ("with_ops", 7), ("with_method", 9)):
            with pytest.raises(RuntimeError, match=rf"decoder.py:{line}: calls torch's \w+\(\)"):
                getattr(mod, fn)(x, w)
        out = mod.shaping(x, kernel)
        assert torch.equal(out, x * 2.0 + 1.0)
        assert torch.equal(x @ w.t(), torch.nn.functional.linear(x, w))  # the test's own torch: allowed


def test_the_capstone_test_refuses_a_torch_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Task 4.9's graded test runs decoder.py under torch_answer_guard: a decoder_block that keeps every kernel
    call count but takes the attention output projection from torch (F.linear) fails at the learner's line."""
    from cudacourse.loader import import_file
    from tests.attacks.corpus import PLACEHOLDERS, build, load

    t04 = import_file(ROOT / "tests" / "test_04_transformer.py")
    attack = next(a for a in load() if a.id == "python-answers-with-torch")  # the attack corpus's forgery
    (text,) = build(attack, course=ROOT, paths=dict.fromkeys(PLACEHOLDERS, str(tmp_path))).values()
    (tmp_path / "decoder.py").write_text(text)
    monkeypatch.setattr(t04, "_decoder", lambda: import_file(tmp_path / "decoder.py"))
    with pytest.raises(RuntimeError, match=r"decoder\.py:\d+: calls torch's \w*linear\w*\(\)"):
        t04.test_decoder_block_matches_pytorch()


# A train.py that disarms the checker where it runs (check.assert_close made a no-op, which the screen refuses
# as text; the worker is the guarantee behind it), calls the kernel once per chunk as counted, and answers zeros.
DISARMING_TRAIN_PY = """

import cudacourse.check as _check

_check.assert_close = lambda *a, **k: None


def fused_linear_cross_entropy(m6, x, w, labels, b=None, *, chunk=1024, ignore_index=-100):
    rows, vocab = x.shape[0], w.shape[0]
    for r0 in range(0, rows, chunk):
        n = min(chunk, rows - r0)
        lg = torch.zeros(n, vocab, device=x.device)
        lab = labels[r0:r0 + n].to(torch.int32).contiguous()
        m6.cross_entropy(lg, lab, torch.empty(n, device=x.device), torch.empty(n, vocab, device=x.device),
                         torch.empty(1, device=x.device), n, vocab, ignore_index, 1.0)
    return (torch.zeros(1, device=x.device), torch.zeros_like(x), torch.zeros_like(w),
            None if b is None else torch.zeros_like(b))
"""


def _test_06_with_a_forged_train_py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    backend: str) -> tuple[types.ModuleType, Path]:
    """Lesson 06's test module, its ``_m`` giving the solution's kernels on ``backend`` with a forged train.py
    (the solution's plus DISARMING_TRAIN_PY) beside them: (the module, the forged file)."""
    import cudacourse as cc
    from cudacourse.loader import import_file

    t06 = import_file(ROOT / "tests" / "test_06_training.py")
    forged = tmp_path / "train.py"
    forged.write_text((ROOT / "solutions" / "06_training" / "train.py").read_text() + DISARMING_TRAIN_PY)
    solution = cc.lesson("06_training", impl="solution", backend=backend)

    class Moved:  # the solution's kernels, with the forged train.py beside them
        dir = tmp_path

        def __getattr__(self, name: str) -> object:
            return getattr(solution, name)

    monkeypatch.setattr(t06, "_m", Moved)
    return t06, forged


def test_train_py_runs_outside_the_checking_process_while_grading(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """While grading, lesson 06's train.py runs in a confined torch worker (tests/test_06_training.py ``_train``):
    a train.py that disarms the checker in its own process and answers zeros fails task 6.11 there, and is never
    imported into the checking process. Imported here instead (as outside grading), the same file passes, which
    shows that it is a forgery the worker stops."""
    import cudacourse as cc
    from cudacourse import check
    from cudacourse.sandbox import available
    from cudacourse.workers.torch import RemoteModule, WorkerObject

    t06, forged = _test_06_with_a_forged_train_py(tmp_path, monkeypatch, "sim")
    monkeypatch.setattr(check, "assert_close", check.assert_close)  # restored after the in-process half
    case = (37, 20, 53, 8, True)
    with using(confine="strict" if available().confined else "best-effort"):
        tr = t06._train()
        try:
            assert isinstance(tr, RemoteModule)
            with pytest.raises(AssertionError, match="fused_linear_cross_entropy loss"):
                t06.test_fused_linear_cross_entropy(*case)
            ops, _ = t06._ops(tr)  # the learner's Ops is made and kept in the worker
            # (Ops takes its device from lesson 04's kernels: cc.lesson's own backend, the GPU where there is one)
            assert isinstance(ops, WorkerObject) and ops.device == cc.lesson("04_transformer").device
        finally:
            tr.worker.close()
    assert not [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(forged)]
    t06.test_fused_linear_cross_entropy(*case)  # in-process: the forgery disarms this process's checker


@pytest.mark.gpu
def test_train_py_of_the_timed_task_runs_outside_the_checking_process_while_grading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Task 6.12 (GPU, timed) runs train.py in its torch worker too, its kernels loaded there: the same forged
    train.py (it disarms check.assert_close where it runs and answers zeros) fails 6.12's value check, made in the
    checking process, and is never imported into it."""
    from cudacourse.sandbox import available
    from cudacourse.workers.torch import RemoteModule

    t06, forged = _test_06_with_a_forged_train_py(tmp_path, monkeypatch, "cuda")
    with using(confine="strict" if available().confined else "best-effort"):
        tr = t06._train()
        try:
            assert isinstance(tr, RemoteModule)
            with pytest.raises(AssertionError, match="fused_linear_cross_entropy loss"):
                t06.test_speed_and_memory_fused_linear_cross_entropy()
        finally:
            tr.worker.close()
    assert not [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(forged)]


def test_custom_op_py_runs_outside_the_checking_process_while_grading(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """While grading, lesson 07's custom_op.py runs in a confined torch worker with kernels of its own
    (tests/test_07_host_side.py ``_op``): one that disarms check.assert_close where it runs and answers zeros
    fails task 7.3's value check, and is never imported into the checking process."""
    import cudacourse as cc
    from cudacourse.loader import import_file
    from cudacourse.sandbox import available
    from cudacourse.workers.torch import RemoteModule

    t07 = import_file(ROOT / "tests" / "test_07_host_side.py")
    forged = tmp_path / "custom_op.py"
    text = (ROOT / "solutions" / "07_host_side" / "custom_op.py").read_text()
    launch = "    m.swish_forward(x, y, x.numel(), stream_handle(x))\n"
    assert launch in text
    forged.write_text(text.replace(launch, "    y.zero_()\n") + "\nimport cudacourse.check as _check\n\n"
                      "_check.assert_close = lambda *a, **k: None\n")
    solution = cc.lesson("07_host_side", impl="solution", backend="sim")

    class Moved:  # the solution's kernels, with the forged custom_op.py beside them
        dir, backend, device = tmp_path, solution.backend, solution.device

    monkeypatch.setattr(t07, "_m", Moved)
    with using(confine="strict" if available().confined else "best-effort"):
        op = t07._op()
        try:
            assert isinstance(op, RemoteModule)
            with pytest.raises(AssertionError, match=r"swish\(x\)"):
                t07.test_op_values_and_gradient(1000)
        finally:
            op.worker.close()
    assert not [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(forged)]


def test_an_oversized_file_is_not_scanned_for_untouched_todos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A submission's file over the size limit (refused "too large" when staged) is never compared block by block
    with the stub: the 50 MB attack cost the grader a minute of CPU there. Its tasks are graded (and fail)."""
    from cudacourse.grading.staging import MAX_SOURCE_BYTES, Submission

    folder = tmp_path / "sub" / "lessons" / "01_relu"
    shutil.copytree(ROOT / "lessons" / "01_relu", folder)
    relu = folder / "relu.cu"
    relu.write_text(relu.read_text() + "//" + "x" * MAX_SOURCE_BYTES + "\n")
    scanned: list[str] = []
    from cudacourse import exercise_state

    monkeypatch.setattr(exercise_state, "untouched_todos", lambda c, info, t, f: scanned.append(t.id) or [])
    c = course()
    declared = plan.declared_tasks(c, None)
    idle = plan.untouched_tasks(c, Submission("sub", tmp_path / "sub", "submission"), declared, ["01_relu"])
    on_relu = {t.id for t in c.lesson("01_relu").tasks if "relu.cu" in c.lesson("01_relu").files_of(t)}
    assert on_relu and not on_relu & {tid for (_, tid) in idle}, idle
    assert not on_relu & set(scanned), scanned
