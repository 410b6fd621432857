"""Hostile submissions (issue 14) graded in ONE grader run: verdicts, untouched files, nothing left running.

Every attack of ``tests/attacks/attacks.toml`` but those in ``NOT_GRADED`` (each with its reason), built
from the current solutions by ``tests/attacks/corpus.py``, is graded with ``--batch`` against a temporary
copy of the course and of the hidden tests, next to an unchanged solution, on every task of lesson 01.
Attacks the grader does not stop yet are ``KNOWN_HOLES`` (strict xfail, with the reason). The module
fixture grades once; each test then checks one promise: each attack's verdict and its ``must_not``
effects, checksums of every file outside the grader's scratch, and that no process of the grade is left.
Runs on the simulator (``--backend sim``) on every machine, so the verdicts are the same on a GPU machine: the
attacks are native launcher code, which runs in the simulator's confined worker there and, on the cuda backend,
in the GPU worker (``cudacourse/workers/gpu.py``), whose confinement ``tests/test_confine.py`` checks on a GPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cudacourse.course import course
from cudacourse.grading import cli
from cudacourse.results import STATUSES
from cudacourse.sandbox import available, describe_for_grading
from cudacourse.settings import using
from tests.attacks.corpus import Attack, build, forgeries, load

ROOT = Path(__file__).resolve().parents[1]
HIDDEN_EXAMPLE = ROOT / "templates" / "hidden_example"
LESSON = "01_relu"
# Graded in the one batch run: every attack of the corpus except those named in NOT_GRADED.
NOT_GRADED = {
    "build-never-ends": "costs a whole --build-timeout of one job (minutes on this machine); the stopped-build path "
                        "is exercised by grade's warm-up, not in the suite",
}
# The Python attacks (decoder.py) are refused by the Python screen before they run
# (test_grader.py::test_python_exercise_files_are_screened), and a torch answer by screens.torch_answer_guard
# (test_grader.py::test_torch_answer_guard_refuses_torch_compute_from_the_learners_file, and
# ::test_the_capstone_test_refuses_a_torch_answer with this corpus's forgery). Grading them here
# would build lesson 04's kernels (and lessons 02 and 03 for the capstone) once per submission: minutes each
# on this machine, for a verdict the screen has already decided.
# While grading, decoder.py runs in a torch worker (cudacourse/workers/torch.py), where the guard and the confinement
# hold as well: tests/test_torch_worker.py::test_decoder_runs_in_the_worker_and_its_attacks_stay_there runs the
# torch answer and python-sys-modules-monkeypatch there, without building lesson 04's kernels.
NOT_GRADED.update({a.id: "a Python attack: refused by the Python screen or the torch guard (see above)"
                   for a in load() if a.base.endswith(".py")})
# Attacks graded but not stopped today: the test fails as long as the grader gives the wrong verdict.
KNOWN_HOLES: dict[str, str] = {}
ATTACKS = tuple(a.id for a in load() if a.id not in NOT_GRADED)
TASKS = [t.id for t in course().lesson(LESSON).tasks if t.track == "cuda"] + ["1.H"]  # 1.H: the hidden example's
# The tasks of lesson 01's torch-route file (1.6): graded only for the attacks on that file. An attack on relu.cu
# runs in the processes of relu.cu's tasks; beside it, 1.6 would grade the course's own relu_torch.cu again (a pytest
# process and a torch worker per submission: about 100 of the batch's 300 CPU-seconds on the 2-core machine).
TORCH_TASKS = [t.id for t in course().lesson(LESSON).tasks
               if t.track == "cuda" and "relu_torch.cu" in course().lesson(LESSON).files_of(t)]


def _tasks_of(attack: Attack | None) -> list[str]:
    """The tasks an attack (None: the unchanged solution) is graded on."""
    on_torch = attack is not None and attack.base.endswith("relu_torch.cu")
    return TASKS if on_torch else [t for t in TASKS if t not in TORCH_TASKS]
SAME_MEANING = {"timed out": ("timed out", "KernelTimeout")}
SECRET = "CCSECRET-hidden-7f3a9c"  # planted in the hidden tests: must appear in no output
SOLUTION_SECRET = "CCSECRET-solution-51d0e2"  # planted in the course copy's solutions: must appear in no output
BUILD_SECRET = "CCSECRET-buildcache-93b7e4"  # planted in the instructor's build cache (CUDA_COURSE_BUILD): likewise

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("attacks")]  # one worker runs the batch grade once


def _checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _copy_course(dst: Path) -> None:
    """The tracked files of this checkout (no build cache, no virtual environment)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def _processes_mentioning(text: str) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            out.append(f"{d.name}: {cmd[:200]}")
    return out


def _passwd_line() -> str:
    try:
        return Path("/etc/passwd").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "root:x:0:0:"


@pytest.fixture(scope="session")
def graded(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The batch grade, run once per test session: under xdist the suite twice graded it (390 s each) as
    its tests landed on two workers, so the first worker to get here grades and the others read its result
    (a file lock in the session's shared temporary folder)."""
    import pickle

    import filelock

    if not available().confined:
        pytest.skip(f"OS confinement unavailable here: {available().describe()}")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with filelock.FileLock(str(shared / "cc-attacks.lock")):
        done = shared / "cc-attacks.pickle"
        if done.exists():
            return pickle.loads(done.read_bytes())
        # (the seeded cache is asked for here: no build for a skipped batch or a worker that reads the result; the
        # torch builds only before the batch that needs them)
        result = _grade_attacks(tmp_path_factory, request.getfixturevalue("grader_runtime"),
                                lambda: request.getfixturevalue("instructor_builds"))
        done.write_bytes(pickle.dumps(result))
        return result


def _grade_attacks(tmp_path_factory: pytest.TempPathFactory, run_cache: Path,
                   torch_builds: Callable[[], Path]) -> dict[str, Any]:
    """Grade the attacks and an unchanged solution in one ``--batch`` run; what the tests check.

    ``run_cache``: the run's build cache (the session's, ``conftest.grader_runtime``: seeded with the checkout's
    build of the simulator's runtime), written by the grader's confined course's-copy workers; each submission
    builds in a folder of its own, as always. ``torch_builds`` seeds it with the precompiled torch header and the
    solution's relu_torch.cu (``conftest.instructor_builds``) before the batch of the attacks on that file: the
    corpus's worker, grading at the same time, waits for the runtime alone."""
    tmp = tmp_path_factory.mktemp("attacks")
    course, hidden, batch, out = tmp / "course", tmp / "hidden", tmp / "batch", tmp / "out"
    _copy_course(course)
    shutil.copytree(HIDDEN_EXAMPLE, hidden)
    hidden_test = hidden / "test_01_relu_hidden.py"
    hidden_test.write_text(f"# {SECRET}\n" + hidden_test.read_text())
    # (in a file no submission of this batch builds: the lesson 01 solutions stay identical to the checkout's)
    target = course / "solutions" / "02_reduce" / "reduce.cu"
    target.write_text(f"// {SOLUTION_SECRET}\n" + target.read_text())
    # A copy of a solution in the instructor's cache (graded with it as CUDA_COURSE_BUILD), as a solution built or
    # graded there leaves one; a line in no file of the course, so only confinement keeps it out of the feedback
    planted = run_cache / "planted" / "solution_copy.cu"
    planted.parent.mkdir(exist_ok=True)
    planted.write_text(f"// {BUILD_SECRET}\n")
    attacks = {a.id: a for a in load() if a.id in ATTACKS}
    forged = forgeries()
    # two batches: the attacks on relu.cu beside the unchanged solution (their neighbour), and those on relu_torch.cu
    part = {name: "torch" if _tasks_of(attacks.get(name)) == TASKS else "kernel" for name in ["solution", *ATTACKS]}
    neighbour = batch / "kernel" / "solution"
    for name in ["solution", *ATTACKS]:
        shutil.copytree(ROOT / "solutions" / LESSON, batch / part[name] / name / "lessons" / LESSON)
        if name == "solution":
            continue
        paths = {"REPORT": str(out / f"{name}.json"), "JUNIT": str(out / f"{name}.xml"), "HIDDEN": str(hidden),
                 "COURSE": str(course), "NEIGHBOUR": str(neighbour), "BUILD": str(run_cache), **forged}
        for rel, text in build(attacks[name], course=ROOT, paths=paths).items():
            (batch / part[name] / name / rel).write_text(text)
    before = {"course": _checksums(course), "hidden": _checksums(hidden), "batch": _checksums(batch)}
    t0 = time.monotonic()
    rc = cli.EXIT_OK
    # The CUDA tasks only: every attack edits a .cu file, and the Triton twins (the solution's file in every
    # submission) cost an interpreter process per submission for verdicts no attack can change.
    for sub, tasks in (("kernel", _tasks_of(None)), ("torch", TASKS)):
        if not (batch / sub).is_dir():
            continue
        if sub == "torch":  # (outside `using` below: the checkout's builds, seeded into the run cache)
            assert torch_builds() == run_cache
        with using(build_dir=run_cache):
            rc = max(rc, cli.main(["--batch", str(batch / sub), "--course", str(course), "--lessons", LESSON,
                                   "--tasks", *tasks, "--hidden", str(hidden), "--backend", "sim", "--timeout", "20",
                                   "--jobs", "2", "--workdir", str(tmp / f"work-{sub}"), "--json", str(out),
                                   "--junit", str(out), "--markdown", str(out), "-q"]))
    print(f"{len(ATTACKS)} attacks and a solution graded in {time.monotonic() - t0:.0f} s")
    left_now = _processes_mentioning(str(tmp))
    names = ["solution", *ATTACKS]
    reports = {n: (out / f"{n}.json").read_text() for n in names if (out / f"{n}.json").exists()}
    junits = {n: (out / f"{n}.xml").read_text() for n in names if (out / f"{n}.xml").exists()}
    time.sleep(3)  # a daemon that survived would rewrite the reports once a second
    return {"rc": rc, "tmp": tmp, "out": out, "attacks": attacks, "before": before, "reports": reports,
            "junits": junits, "left_now": left_now, "left_later": _processes_mentioning(str(tmp)),
            "after": {"course": _checksums(course), "hidden": _checksums(hidden), "batch": _checksums(batch)},
            "hidden_text": hidden_test.read_text() if hidden_test.exists() else ""}


def _expected(task: str, fail: list[str]) -> str:
    if task in fail:
        return "fail"
    return "not-graded" if task == "1.7" else "pass"  # 1.7 is a speed task: it needs a GPU


def test_corpus_is_graded_but_for_named_reasons() -> None:
    """At least 15 attacks are graded (issue 14); each one left out has its reason."""
    ids = {a.id for a in load()}
    assert len(ATTACKS) >= 15 and set(NOT_GRADED) <= ids and set(KNOWN_HOLES) <= set(ATTACKS)
    assert all(a.base.startswith(LESSON + "/") and a.base.endswith(".cu") for a in load() if a.id in ATTACKS)


def test_grader_survives_and_writes_every_report(graded: dict[str, Any]) -> None:
    assert graded["rc"] == cli.EXIT_OK
    assert sorted(graded["reports"]) == sorted(["solution", *ATTACKS])


def test_the_grade_changes_nothing_outside_and_leaves_nothing_running(graded: dict[str, Any]) -> None:
    """The course copy, the hidden tests and every submission folder are as they were before the grade (the
    grader stages copies; an attack that writes into them is stopped by the confinement), and no process of the
    grade outlives it, then or three seconds later."""
    for what in ("course", "hidden", "batch"):
        changed = {k for k in graded["before"][what].keys() | graded["after"][what].keys()
                   if graded["before"][what].get(k) != graded["after"][what].get(k)}
        assert not changed, (what, sorted(changed)[:10])
    assert not graded["left_now"] and not graded["left_later"], graded["left_now"] + graded["left_later"]


def test_the_torch_attacks_build_with_the_precompiled_header(graded: dict[str, Any]) -> None:
    """Each attack on relu_torch.cu is built in its submission's own cache by a confined worker, which reads the
    run's cache: the suite's precompiled torch header there is used (ninja's record of the compile's inputs
    lists the header itself only when g++ read it instead), ~15 CPU-s of each such build's ~30."""
    from cudacourse.sim.torch_route import PCH_NAME

    folders = sorted(graded["tmp"].glob("work-torch/*/build-sub*/sim-torch/*/build.ninja"))
    assert len(folders) == len([a for a in ATTACKS if _tasks_of(graded["attacks"][a]) == TASKS]), folders
    for f in folders:
        deps = subprocess.run([sys.executable, "-m", "ninja", "-C", str(f.parent), "-t", "deps"],
                              capture_output=True, text=True, check=True).stdout
        assert "main.o" in deps and PCH_NAME not in deps, (f, deps[:2000])


def test_the_submissions_compile_with_the_runs_precompiled_headers(graded: dict[str, Any]) -> None:
    """The grade's build worker precompiles the runtime's headers (``sim.build.runtime_headers``) once, into the
    run's shared cache, where every submission's compiles find them: none makes its own (about 4.4 CPU-s each on the
    2-core machine), and the submissions' builds did compile (the glob finds them)."""
    from cudacourse.sim.build import PCH_MODES

    work = [w for w in graded["tmp"].glob("work-kernel/*") if (w / "build").is_dir()]
    assert len(work) == 1, work
    shared = sorted((work[0] / "build" / "sim-pch").glob("*/runtime/ccsim.h.gch/*.gch"))
    assert sorted(p.stem for p in shared) == sorted(PCH_MODES), shared
    assert sorted(work[0].glob("build-sub*/sim/*/src.o")), "no submission compiled a file of its own"
    assert not sorted(work[0].glob("build-sub*/sim-pch/*")), "a submission made its own precompiled header"


def test_unchanged_solution_earns_everything(graded: dict[str, Any]) -> None:
    rep = json.loads(graded["reports"]["solution"])
    assert rep["confinement"] == describe_for_grading() and not rep["confinement"].startswith("unconfined")
    assert rep["earned"] == rep["possible"] - rep["not_graded"] > 0, rep


@pytest.mark.parametrize("attack_id", [pytest.param(a, marks=pytest.mark.xfail(strict=True, reason=KNOWN_HOLES[a]))
                                       if a in KNOWN_HOLES else a for a in ATTACKS])
def test_attack_gets_its_verdict_and_changes_nothing(graded: dict[str, Any], attack_id: str) -> None:
    attack: Attack = graded["attacks"][attack_id]
    lesson = attack.base.split("/")[0]
    text = graded["reports"][attack_id]
    rep = json.loads(text)  # a forged or torn report fails here
    assert rep.get("confinement") == describe_for_grading(), "the report is not the grader's"
    solution = json.loads(graded["reports"]["solution"])
    mine = [t for t in rep["tasks"] if t["lesson"] == lesson]
    assert [t["id"] for t in mine] == _tasks_of(attack)
    assert [t["id"] for t in solution["tasks"]] == _tasks_of(None)
    wrong = [f"task {t['id']}: {t['status']} (expected {_expected(t['id'], attack.fail)}): {t['message'][:300]}"
             for t in mine if t["status"] != _expected(t["id"], attack.fail)]
    assert not wrong, "\n".join(wrong)
    # what the unchanged solution earns on the same tasks (its 1.6 is graded in test_01_relu and the corpus)
    les = course().lesson(LESSON)
    whole = solution["earned"] + sum(t.points for t in les.tasks if t.id in TORCH_TASKS and t.id in _tasks_of(attack))
    assert rep["earned"] == sum(t["earned"] for t in rep["tasks"]) < whole
    for tid, words in attack.message.items():
        msg = next(t["message"] for t in rep["tasks"] if t["id"] == tid)
        # On the simulator an endless launcher is stopped by the per-call timeout (KernelTimeout), before the
        # grader's watchdog ("timed out"); a hidden case that fails first is named with its exception only.
        assert any(w in msg for w in SAME_MEANING.get(words, (words,))), msg
    junit = ET.fromstring(graded["junits"][attack_id])
    failed = {c.get("name", "").split(":")[0] for c in junit.iter("testcase") if c.find("failure") is not None}
    assert {f"task {t}" for t in attack.fail} <= failed
    feedback = (graded["out"] / f"{attack_id}.md").read_text()
    # leak:hidden, leak:solution, leak:build-cache, leak:passwd
    for secret in (SECRET, SOLUTION_SECRET, BUILD_SECRET, _passwd_line()):
        assert secret not in text and secret not in feedback and secret not in graded["junits"][attack_id]


# ----------------------------------------------------------------------------------------------------
# SIGTERM (a cancelled CI job): the report is written, unfinished tasks are "interrupted", nothing is left
# ----------------------------------------------------------------------------------------------------


def test_sigterm_writes_the_report_with_interrupted_tasks(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CUDA_COURSE_SEED", None)
    proc = subprocess.Popen([sys.executable, "-m", "cudacourse", "grade", "--impl", "solution", "--lessons", LESSON,
                             "--backend", "sim", "--jobs", "1", "--workdir", str(work), "--json",
                             str(out / "r.json"), "--junit", str(out / "r.xml"), "--markdown", str(out / "r.md")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Wait until the tasks' stage begins (a slot's scratch folder exists: collection is over, the lesson
    # builds or its tests run).
    while not list(work.glob("cc-grade-*/scratch-slot*")) and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "the grade ended before a task started:\n" + proc.communicate()[0]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate()
    print(f"stopped {time.monotonic() - t0:.1f} s after SIGTERM (issue 14 asks for at most 5 s)")
    assert proc.returncode == cli.EXIT_GRADER_ERROR, output
    rep = json.loads((out / "r.json").read_text())
    statuses = [t["status"] for t in rep["tasks"]]
    assert statuses and set(statuses) <= set(STATUSES), rep
    assert "interrupted" in statuses and rep["earned"] == sum(t["earned"] for t in rep["tasks"]), rep
    assert rep["confinement"] == describe_for_grading()
    assert "interrupted" in (out / "r.md").read_text()
    junit = ET.parse(out / "r.xml").getroot()
    assert sum(c.find("error") is not None for c in junit.iter("testcase")) >= statuses.count("interrupted")
    assert not _processes_mentioning(str(work)), _processes_mentioning(str(work))
