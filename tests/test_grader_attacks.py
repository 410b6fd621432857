"""Hostile submissions (issue 14) graded in ONE grader run: verdicts, untouched files, nothing left running.

A representative subset of ``tests/attacks/attacks.toml`` (built from the current solutions by
``tests/attacks/corpus.py``) is graded with ``--batch`` against a temporary copy of the course and of the
hidden tests, next to an unchanged solution. The module fixture grades once; each test then checks one
promise: each attack's verdict and its ``must_not`` effects, checksums of every file outside the
grader's scratch, and that no process of the grade is left. Runs on the simulator (``--backend sim``):
on the cuda backend learner code is loaded into the pytest process that records results, so some
forgeries are possible there (issue 14, "learner code only in confined workers", is not done for cuda).
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
from pathlib import Path
from typing import Any

import pytest

from cudacourse.grading import cli
from cudacourse.grading.confine import available, describe_for_grading
from cudacourse.grading.results import STATUSES
from cudacourse.settings import using
from tests.attacks.corpus import Attack, build, forgeries, load

ROOT = Path(__file__).resolve().parents[1]
HIDDEN_EXAMPLE = ROOT / "templates" / "hidden_example"
LESSON = "01_relu"
# The subset the brief asks for: forgery by a constructor and by atexit, killing the parent, exit(0), a
# setsid daemon, setenv of the grader's variables, reading the hidden tests, writing the course checkout
# and the hidden folder, an endless host loop.
SUBSET = ("ctor-rewrites-report", "ctor-rewrites-junit", "atexit-appends-pass-records", "kill-parent",
          "exit0-from-launcher", "setsid-daemon-edits-later", "setenv-grader-variables", "read-hidden-tests",
          "ctor-rewrites-course-tests", "ctor-rewrites-hidden-tests", "endless-host-loop")
SAME_MEANING = {"timed out": ("timed out", "KernelTimeout")}
SECRET = "CCSECRET-hidden-7f3a9c"  # planted in the hidden tests: must appear in no output

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


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Grade the subset and an unchanged solution in one ``--batch`` run; what the tests check."""
    if not available().confined:
        pytest.skip(f"OS confinement unavailable here: {available().describe()}")
    tmp = tmp_path_factory.mktemp("attacks")
    course, hidden, batch, out = tmp / "course", tmp / "hidden", tmp / "batch", tmp / "out"
    _copy_course(course)
    shutil.copytree(HIDDEN_EXAMPLE, hidden)
    hidden_test = hidden / "test_01_relu_hidden.py"
    hidden_test.write_text(f"# {SECRET}\n" + hidden_test.read_text())
    attacks = {a.id: a for a in load() if a.id in SUBSET}
    assert sorted(attacks) == sorted(SUBSET), "an attack of the subset is missing from attacks.toml"
    forged = forgeries()
    for name in ["solution", *SUBSET]:
        les = batch / name / "lessons" / LESSON
        shutil.copytree(course / "solutions" / LESSON, les)
        if name == "solution":
            continue
        paths = {"REPORT": str(out / f"{name}.json"), "JUNIT": str(out / f"{name}.xml"), "HIDDEN": str(hidden),
                 "COURSE": str(course), **forged}
        for rel, text in build(attacks[name], course=course, paths=paths).items():
            (batch / name / rel).write_text(text)
    before = {"course": _checksums(course), "hidden": _checksums(hidden), "batch": _checksums(batch)}
    t0 = time.monotonic()
    with using(build_dir=tmp / "build"):
        rc = cli.main(["--batch", str(batch), "--course", str(course), "--lessons", LESSON, "--hidden", str(hidden),
                       "--backend", "sim", "--timeout", "20", "--jobs", "2", "--workdir", str(tmp / "work"),
                       "--json", str(out), "--junit", str(out), "--markdown", str(out), "-q"])
    print(f"{len(SUBSET)} attacks and a solution graded in {time.monotonic() - t0:.0f} s")
    left_now = _processes_mentioning(str(tmp))
    reports = {n: (out / f"{n}.json").read_text() for n in ["solution", *SUBSET] if (out / f"{n}.json").exists()}
    junits = {n: (out / f"{n}.xml").read_text() for n in ["solution", *SUBSET] if (out / f"{n}.xml").exists()}
    time.sleep(3)  # a daemon that survived would rewrite the reports once a second
    return {"rc": rc, "tmp": tmp, "out": out, "attacks": attacks, "before": before, "reports": reports,
            "junits": junits, "left_now": left_now, "left_later": _processes_mentioning(str(tmp)),
            "after": {"course": _checksums(course), "hidden": _checksums(hidden), "batch": _checksums(batch)},
            "hidden_text": hidden_test.read_text() if hidden_test.exists() else ""}


def _expected(task: str, fail: list[str]) -> str:
    if task in fail:
        return "fail"
    return "not-graded" if task == "1.7" else "pass"  # 1.7 is a speed task: it needs a GPU


def test_grader_survives_and_writes_every_report(graded: dict[str, Any]) -> None:
    assert graded["rc"] == cli.EXIT_OK
    assert sorted(graded["reports"]) == sorted(["solution", *SUBSET])


def test_unchanged_solution_earns_everything(graded: dict[str, Any]) -> None:
    rep = json.loads(graded["reports"]["solution"])
    assert rep["confinement"] == describe_for_grading() and not rep["confinement"].startswith("unconfined")
    assert rep["earned"] == rep["possible"] - rep["not_graded"] > 0, rep


@pytest.mark.parametrize("attack_id", SUBSET)
def test_attack_gets_its_verdict_and_changes_nothing(graded: dict[str, Any], attack_id: str) -> None:
    attack: Attack = graded["attacks"][attack_id]
    text = graded["reports"][attack_id]
    rep = json.loads(text)  # a forged or torn report fails here
    assert rep.get("confinement") == describe_for_grading(), "the report is not the grader's"
    solution = json.loads(graded["reports"]["solution"])
    assert [t["id"] for t in rep["tasks"]] == [t["id"] for t in solution["tasks"]]
    wrong = [f"task {t['id']}: {t['status']} (expected {_expected(t['id'], attack.fail)}): {t['message'][:300]}"
             for t in rep["tasks"] if t["status"] != _expected(t["id"], attack.fail)]
    assert not wrong, "\n".join(wrong)
    assert rep["earned"] == sum(t["earned"] for t in rep["tasks"]) < solution["earned"]
    for tid, words in attack.message.items():
        msg = next(t["message"] for t in rep["tasks"] if t["id"] == tid)
        # On the simulator an endless launcher is stopped by the per-call timeout (KernelTimeout), before the
        # grader's watchdog ("timed out"); a hidden case that fails first is named with its exception only.
        assert any(w in msg for w in SAME_MEANING.get(words, (words,))), msg
    junit = ET.fromstring(graded["junits"][attack_id])
    failed = {c.get("name", "").split(":")[0] for c in junit.iter("testcase") if c.find("failure") is not None}
    assert {f"task {t}" for t in attack.fail} <= failed
    assert SECRET not in text and SECRET not in (graded["out"] / f"{attack_id}.md").read_text()


def test_no_file_outside_the_scratch_changed(graded: dict[str, Any]) -> None:
    for what in ("course", "hidden", "batch"):
        before, after = graded["before"][what], graded["after"][what]
        changed = sorted(set(before) ^ set(after) | {k for k in before.keys() & after.keys() if before[k] != after[k]})
        assert not changed, f"files of the {what} copy changed: {changed[:10]}"
    assert graded["hidden_text"].startswith(f"# {SECRET}\n")


def test_no_process_is_left_and_reports_stay(graded: dict[str, Any]) -> None:
    assert not graded["left_now"], graded["left_now"]
    assert not graded["left_later"], graded["left_later"]
    for name, text in graded["reports"].items():  # nothing rewrote them after the grade
        assert (graded["out"] / f"{name}.json").read_text() == text
        assert (graded["out"] / f"{name}.xml").read_text() == graded["junits"][name]


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
