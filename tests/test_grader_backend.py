"""One backend per grade (issue 36): the backend the grader resolves is the one its task processes run on.

A grade started with ``CUDA_COURSE_BACKEND=sim`` printed ``backend=sim`` while its task processes, started in a
scrubbed environment, resolved ``auto`` again and timed task 1.7 on the GPU. Here each route (the flag, the
environment, auto) grades a toy course whose one test reports what its task process resolved; the report's
``backend`` must be that. The same file runs on a GPU machine, where ``CUDA_COURSE_BACKEND=sim`` must grade on
the simulator (the speed task "not graded") and auto must grade on the GPU::

    python3 -m pytest tests/test_grader_backend.py -q -p no:cacheprovider
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from cudacourse import settings
from cudacourse.grading import cli

ROOT = Path(__file__).resolve().parents[1]

LESSON = """
[lesson]
title = "ReLU"
write = "nothing"
learn = "nothing"
files = ["relu.cu"]

[[task]]
id = "1.1"
title = "Where it ran"
points = 1

[[task]]
id = "1.3"
title = "Speed"
points = 1
gpu = true
"""

TESTS = '''
import os
import pytest
from cudacourse import settings
from cudacourse.pytest_plugin import backend_name

@pytest.mark.task("1.1")
def test_where():
    """Fails on purpose: its message carries what this task process resolved."""
    raise AssertionError(f"RAN backend={backend_name()} setting={settings.current().backend} "
                         f"env={os.environ.get('CUDA_COURSE_BACKEND')}")

@pytest.mark.task("1.3")
def test_speed():
    """A speed task: runs only on a GPU."""
'''


def _course(tmp_path: Path, conftest_extra: str = "") -> Path:
    course = tmp_path / "course"
    (course / "tests").mkdir(parents=True)
    for d in ("solutions", "lessons"):
        (course / d / "01_relu").mkdir(parents=True)
    (course / "cudacourse").symlink_to(ROOT / "cudacourse")
    (course / "lessons" / "01_relu" / "lesson.toml").write_text(LESSON)
    (course / "tests" / "conftest.py").write_text('pytest_plugins = ["cudacourse.pytest_plugin"]\n' + conftest_extra)
    (course / "tests" / "test_01_relu.py").write_text(TESTS)
    (course / "solutions" / "01_relu" / "relu.cu").write_text("// solution\n")
    (course / "lessons" / "01_relu" / "relu.cu").write_text("// stub\n")
    return course


def _grade(course: Path, out: Path, *args: str) -> dict:
    rc = cli.main(["--course", str(course), "--impl", "solution", "--json", str(out), "-q", *args])
    assert rc == 0, f"grade exit code {rc}"
    return json.loads(out.read_text())


def _auto() -> str:
    """What ``auto`` resolves to on this machine with no setting: cuda with a usable GPU and nvcc, else sim."""
    from cudacourse.loader import backend_name

    with settings.using(backend="auto"):
        return backend_name("auto")


def _gpu() -> bool:
    return _auto() == "cuda"


ROUTES = {  # route -> (grader arguments, CUDA_COURSE_BACKEND, the backend it must grade on)
    "flag sim": (["--backend", "sim"], None, lambda: "sim"),
    "env sim": ([], "sim", lambda: "sim"),
    "env sim, flag auto": (["--backend", "auto"], "sim", lambda: "sim"),
    "auto": ([], None, _auto),
    "flag cuda": (["--backend", "cuda"], None, lambda: "cuda"),
    "env cuda": ([], "cuda", lambda: "cuda"),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_report_names_what_the_task_processes_ran(route: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      grader_runtime: Path) -> None:
    args, env, want_of = ROUTES[route]
    want = want_of()
    if want == "cuda" and not _gpu():
        pytest.skip("this route needs a GPU machine (run this file there too)")
    if env is None:
        monkeypatch.delenv("CUDA_COURSE_BACKEND", raising=False)
    else:
        monkeypatch.setenv("CUDA_COURSE_BACKEND", env)
    # the session's grader cache, seeded with the simulator's runtime (conftest.grader_runtime): a fresh folder built
    # the runtime in each of these grades, about 10 of their 12 CPU-s each on the 2-core machine
    monkeypatch.setenv("CUDA_COURSE_BUILD", str(grader_runtime))
    # this test process's own setting (pytest's --backend, a fixture's ``using``) must not stand in for the route's
    saved = settings.current()
    settings.configure(backend=None)
    try:
        rep = _grade(_course(tmp_path), tmp_path / "out.json", *args)
    finally:
        settings.configure(backend=saved.backend if saved.backend != "auto" else None)
    tasks = {t["id"]: t for t in rep["tasks"]}
    ran = re.search(r"RAN backend=(\w+) setting=(\w+)", tasks["1.1"]["message"])
    assert ran, tasks["1.1"]["message"]
    # what the task process resolved, what it was told (never "auto": the grader resolves once), and the report
    assert (ran.group(1), ran.group(2), rep["backend"]) == (want, want, want), (route, tasks["1.1"]["message"])
    assert tasks["1.3"]["status"] == ("pass" if want == "cuda" else "not-graded"), tasks["1.3"]
    assert rep["not_graded"] == (0 if want == "cuda" else 1)


def test_a_task_process_on_another_backend_fails_its_tasks(tmp_path: Path, grader_runtime: Path) -> None:
    """The grader's own guard: a task process that resolves another backend than the grade's (here one that says
    cuda in a grade on the simulator) earns nothing, with a message that says so."""
    course = _course(tmp_path, "import cudacourse.pytest_plugin as p\np.backend_name = lambda: 'cuda'\n")
    old = os.environ.get("CUDA_COURSE_BUILD")
    os.environ["CUDA_COURSE_BUILD"] = str(grader_runtime)  # (the seeded runtime, as above)
    try:
        rep = _grade(course, tmp_path / "out.json", "--backend", "sim")
    finally:
        if old is None:
            os.environ.pop("CUDA_COURSE_BUILD")
        else:
            os.environ["CUDA_COURSE_BUILD"] = old
    assert rep["backend"] == "sim"
    for t in rep["tasks"]:
        if t["id"] == "1.3":  # a GPU task: on the simulator it is not graded, and never run (issue 34)
            assert t["status"] == "not-graded" and t["earned"] == 0, t
            continue
        assert t["status"] == "fail" and t["earned"] == 0, t
        assert "ran its kernels on backend 'cuda', but this grade runs on 'sim'" in t["message"], t
