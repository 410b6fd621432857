"""Untouched means not run (issue 34): a task whose own code is still the stub is neither built nor run by
``grade`` or ``check``, in every lesson, and the total line says what this machine can award.

A learner who has started a lesson (an exercise file differs from its stub) but not a task of it gets "not
started" for that task, never a ``fail`` with pages of messages: tasks 6.7 and 6.11 were reported ``fail``
although ``train.py`` had never been opened.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudacourse import checkcmd, exercise_state
from cudacourse.course import course
from cudacourse.results import NOT_STARTED

C = course()


def _note(path: Path) -> None:
    """A learner's note at the end of an exercise file: the lesson is started, no task's code changed."""
    comment = "#" if path.suffix == ".py" else "//"
    path.write_text(path.read_text() + f"\n{comment} my notes: read the README first\n")


@pytest.fixture(scope="module")
def noted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A submission: every lesson started by a note in every exercise file, no TODO touched."""
    sub = tmp_path_factory.mktemp("noted")
    for les in C:
        dst = sub / "lessons" / les.id
        shutil.copytree(C.kernel_dir(les.id, "student"), dst)
        for name in les.exercise_files:
            _note(dst / name)
    return sub


def test_every_untouched_task_is_reported_not_started_and_never_run(noted: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "cudacourse", "grade", "--submission", str(noted), "--backend", "sim",
                        "--json", str(report)], capture_output=True, text=True, timeout=900, check=False)
    assert report.is_file(), r.stdout + r.stderr
    tasks = json.loads(report.read_text())["tasks"]
    assert {t["id"] for t in tasks} == {t.id for t in C.tasks()}
    for t in tasks:
        if t["status"] == "not-graded":  # (a GPU task: "not graded: needs a GPU", or not started and a GPU task)
            assert t["message"].startswith(("not graded", NOT_STARTED)), t
        else:
            assert t["status"] == "fail" and t["message"].startswith(f"{NOT_STARTED}:"), t
    # nothing was built or run: no task process, no build line
    assert "building the kernel files" not in r.stdout and " task " not in r.stdout.replace("-- ", ""), r.stdout
    total = r.stdout.strip().splitlines()[-2]
    assert total.startswith("total: 0 / ") and "this machine can award" in total and "need a GPU" in total, total


@pytest.mark.parametrize("task_id", ["6.7", "6.11", "7.3", "4.9"])
def test_a_python_exercise_task_is_not_started_until_its_own_function_changes(noted: Path, task_id: str) -> None:
    les = C.lesson(next(k for k in C.lessons if k.startswith(task_id.split(".")[0].zfill(2))))
    task = les.task(task_id)
    folder = noted / "lessons" / les.id
    assert exercise_state.untouched_reason(C, les, task, folder), f"{task_id} counted as begun"
    # a change inside the function around its TODO begins it
    py = next(folder / f for f in les.files_of(task) if f.endswith(".py"))
    text = py.read_text()
    marker = f"TODO(task {task_id}"
    at = text.index("\n", text.index(marker)) + 1
    indent = text[text.rfind("\n", 0, text.index(marker)) + 1:text.index(marker)].replace("#", "")
    py.write_text(text[:at] + f"{indent}x_learner = 1\n" + text[at:])
    try:
        assert exercise_state.untouched_reason(C, les, task, folder) == "", f"{task_id} not begun after an edit"
    finally:
        py.write_text(text)


def test_a_lesson_check_builds_and_runs_only_the_tasks_begun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``make check T=01_relu`` with task 1.1 written: 1.6's relu_torch.cu (never opened) is not built."""
    folder = tmp_path / "lessons" / "01_relu"
    shutil.copytree(C.kernel_dir("01_relu", "student"), folder)
    relu = folder / "relu.cu"
    text = relu.read_text()
    at = text.index("\n", text.index("TODO(task 1.1)")) + 1
    relu.write_text(text[:at] + "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" + text[at:])
    les = C.lesson("01_relu")
    monkeypatch.setattr(C, "kernel_dir", lambda lesson, impl: folder if impl == "student" else
                        C.solutions_dir / lesson)
    begun, idle = checkcmd.started_tasks(C, [les])
    assert "1.1" in begun and "1.6" in idle and "1.2" in idle, (begun, idle)
    assert not any("relu_torch.cu" in les.files_of(les.task(t)) for t in begun)
