"""How a grade runs its task processes: their torch threads, and the progress lines (issue 14, item 5).

A task's line comes as soon as its last case has reported, once. No process is started here:
``runner._announce`` reads the records a task process writes as it runs (the same JSON events
``pytest_plugin`` emits), and ``safe_run_group`` prints the verdict of record only when it differs from
what was announced.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudacourse.grading import confine, runner
from cudacourse.grading.results import TaskResult, TaskSpec, TestRecord
from cudacourse.grading.staging import Submission


def _settings(backend: str, lines: list[str]) -> runner.RunSettings:
    return runner.RunSettings(["01_relu"], 1, backend, 10.0, 10.0, Path("/nonexistent"), "brief", False,
                              backend_name=backend, progress=lines.append)


def _collected(tid: str, case: str) -> dict:
    return {"event": "collected", "nodeid": f"tests/test_01_relu.py::test_{case}", "file": "tests/test_01_relu.py",
            "lesson": "01_relu", "task": tid, "points": 2.0, "title": f"task {tid}", "gpu": False, "params": {},
            "outcome": "not-run", "message": "", "exc_type": "", "duration": 0.0}


def _result(tid: str, case: str, outcome: str = "passed", exc_type: str = "", seconds: float = 0.5) -> dict:
    return {**_collected(tid, case), "event": "result", "outcome": outcome, "exc_type": exc_type,
            "message": "wrong" if outcome == "failed" else "", "duration": seconds}


TASKS = [TaskSpec("1.1", "01_relu", "relu_v1_scalar", 2.0, ["tests/test_01_relu.py"]),
         TaskSpec("1.2", "01_relu", "relu_v2_grid_stride", 2.0, ["tests/test_01_relu.py"])]


def test_a_task_is_announced_when_its_last_case_reports_and_only_once() -> None:
    lines: list[str] = []
    st, sub = _settings("sim", lines), Submission("", None, "solution")
    events = [_collected("1.1", "a"), _collected("1.1", "b"), _collected("1.2", "c"), _result("1.1", "a")]
    runner._announce(sub, TASKS, events, st)
    assert lines == []  # 1.1 has a case still to run
    events += [_result("1.1", "b", seconds=0.25)]
    runner._announce(sub, TASKS, events, st)
    runner._announce(sub, TASKS, events, st)  # the file grew again: no second line
    assert lines == ["01_relu task 1.1 relu_v1_scalar: pass (0.8 s)"]
    events += [_result("1.2", "c", "failed", "AssertionError")]
    runner._announce(sub, TASKS, events, st)
    assert lines[1:] == ["01_relu task 1.2 relu_v2_grid_stride: fail (0.5 s)"]


def test_a_gpu_failure_to_be_confirmed_alone_is_not_announced_early() -> None:
    lines: list[str] = []
    st, sub = _settings("cuda", lines), Submission("", None, "solution")
    events = [_collected("1.1", "a"), _collected("1.2", "c"), _result("1.1", "a", "failed", "RuntimeError"),
              _result("1.2", "c", "failed", "AssertionError")]
    runner._announce(sub, TASKS, events, st)
    # a CUDA error may come from another task's corrupted context: its verdict waits for the run alone; wrong
    # values are the task's own
    assert lines == ["01_relu task 1.2 relu_v2_grid_stride: fail (0.5 s)"]


def test_the_verdict_of_record_is_printed_only_where_it_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    st, sub = _settings("sim", lines), Submission("", None, "solution")
    st.announced[("", "01_relu", "1.1")] = "pass"
    st.announced[("", "01_relu", "1.2")] = "pass"
    rec = TestRecord("n", "f", "01_relu", "1.2", 2.0, "t", False, {}, "failed", "changed files", "Tamper", 1.0)
    monkeypatch.setattr(runner, "run_group", lambda s, tasks, st: [
        TaskResult("1.1", "01_relu", "relu_v1_scalar", 2.0, 2.0, "pass", ""),
        TaskResult("1.2", "01_relu", "relu_v2_grid_stride", 2.0, 0.0, "fail", "harness changed", tests=[rec])])
    runner.safe_run_group(sub, TASKS, st)
    # 1.1 was announced as it finished; 1.2's process changed harness files after its cases passed
    assert lines == ["01_relu task 1.2 relu_v2_grid_stride: fail (1.0 s)"]


def test_quiet_grades_announce_nothing() -> None:
    st = runner.RunSettings(["01_relu"], 1, "sim", 10.0, 10.0, Path("/nonexistent"), "brief", False)
    runner._announce(Submission("", None, "solution"), TASKS, [_collected("1.1", "a"), _result("1.1", "a")], st)
    assert st.announced == {}


def test_task_processes_share_the_cores_instead_of_a_torch_thread_per_core_each(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = runner.child_env(tmp_path, 1, "cuda", tmp_path, threads=1)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the instructor's own setting wins
    assert runner.child_env(tmp_path, 1, "cuda", tmp_path, threads=1)["OMP_NUM_THREADS"] == "3"


def test_task_processes_get_a_memory_limit_where_no_cuda_context_needs_the_address_space(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A task process runs some learner Python itself (lesson 06's train.py, lesson 07's custom_op.py): without a
    GPU it runs under an address-space limit sized for torch and its simulator workers' threads; with one, the CUDA
    context's reservations rule any such limit out."""
    env = runner.child_env(tmp_path, 1, "sim", tmp_path, threads=3)
    monkeypatch.setattr(confine, "has_gpu_devices", lambda: False)
    lim = runner._task_limits(env)
    assert lim.memory == confine.learner_memory(env, torch=True) == (3 << 30) + 3 * (256 << 20) + (2 << 30)
    assert lim.cpu_s == runner.GRADER_CPU_S
    monkeypatch.setattr(confine, "has_gpu_devices", lambda: True)
    assert runner._task_limits(env).memory is None
