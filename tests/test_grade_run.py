"""How a grade runs its task processes: their torch threads, and the progress lines (issue 14, item 5).

A task's line comes as soon as its last case has reported, once. No process is started here:
``runner._announce`` reads the records a task process writes as it runs (the same JSON events
``pytest_plugin`` emits), and ``safe_run_group`` prints the verdict of record only when it differs from
what was announced.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cudacourse import sandbox
from cudacourse.grading import builds, processes, runner
from cudacourse.grading.plan import RunSettings
from cudacourse.grading.session import GradeSession
from cudacourse.grading.staging import Submission
from cudacourse.grading.verdicts import Run
from cudacourse.results import TaskResult, TaskSpec, TestRecord


def _settings(backend: str, lines: list[str]) -> GradeSession:
    return GradeSession(RunSettings(["01_relu"], 1, backend, 10.0, 10.0, Path("/nonexistent"), "brief", False,
                                    backend_name=backend, progress=lines.append))


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
    st = GradeSession(RunSettings(["01_relu"], 1, "sim", 10.0, 10.0, Path("/nonexistent"), "brief", False))
    runner._announce(Submission("", None, "solution"), TASKS, [_collected("1.1", "a"), _result("1.1", "a")], st)
    assert st.announced == {}


def test_task_processes_share_the_cores_instead_of_a_torch_thread_per_core_each(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = processes.child_env(tmp_path, 1, "cuda", tmp_path, threads=1)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the instructor's own setting wins
    assert processes.child_env(tmp_path, 1, "cuda", tmp_path, threads=1)["OMP_NUM_THREADS"] == "3"


def test_task_processes_load_no_pytest_plugin_the_machine_has_installed(tmp_path: Path) -> None:
    """A task process loads the plugins its command line names, not those installed on the machine: on the H200
    machine hypothesis's, anyio's and jaxtyping's took about a quarter of the collection's CPU-seconds (issue 35),
    and an installed plugin could change how the instructor's tests run. Here a plugin found by its entry point
    fails at import: pytest run with the task process's environment never imports it, a default pytest does."""
    dist = tmp_path / "boom_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: boom-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\nboom = boom_plugin\n")
    (tmp_path / "boom_plugin.py").write_text("raise RuntimeError('an installed plugin was loaded')\n")
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    env = processes.child_env(tmp_path, 1, "sim", tmp_path, threads=1)  # (PYTHONPATH: the slot, here tmp_path)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_x.py"]
    ran = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    del env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"]
    ran = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode != 0 and "an installed plugin was loaded" in ran.stdout + ran.stderr


def test_task_processes_get_a_memory_limit_where_no_cuda_context_needs_the_address_space(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A task process runs some learner Python itself (lesson 06's train.py, lesson 07's custom_op.py): without a
    GPU it runs under an address-space limit sized for torch and its simulator workers' threads; with one, the CUDA
    context's reservations rule any such limit out."""
    env = processes.child_env(tmp_path, 1, "sim", tmp_path, threads=3)
    monkeypatch.setattr(sandbox, "has_gpu_devices", lambda: False)
    lim = processes.task_limits(env)
    assert lim.memory == sandbox.learner_memory(env, torch=True) == (3 << 30) + 3 * (256 << 20) + (2 << 30)
    assert lim.cpu_s == processes.GRADER_CPU_S
    monkeypatch.setattr(sandbox, "has_gpu_devices", lambda: True)
    assert processes.task_limits(env).memory is None


class _WaitingProcess:
    """Stands for a task process started with ``--cc-go-file``: it runs until the grader creates that file."""

    def __init__(self, cmd: list[str]) -> None:
        self.go = Path(cmd[cmd.index("--cc-go-file") + 1])
        self.killed = False

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 60.0)
        while not (self.go.exists() or self.killed):
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("pytest", timeout or 60.0)
            time.sleep(0.01)
        return 0


@pytest.mark.parametrize("build_stopped", [False, True])
def test_a_task_process_starts_while_its_builds_run_and_its_tests_wait_for_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, build_stopped: bool) -> None:
    """Issue 14 (fast on a GPU): a task process whose kernel files are still building starts at once (python, torch
    and pytest's collection overlap the build: 5 s of the H100 machine's grade), niced below the builds, and its
    tests start only once the grader creates its go file, after the build. A build the warm-up stopped meanwhile
    means a fresh process, told so (its tests then fail at once instead of building the file again)."""
    st = _settings("cuda", [])
    st.config.task_files = {("01_relu", "1.1"): ("relu.cu",), ("01_relu", "1.2"): ("relu.cu",)}
    sub = Submission("", None, "solution", pristine=tmp_path / "sub", to_build={"01_relu": ["relu.cu"]})
    started: list[tuple[list[str], int, dict[str, float]]] = []
    procs: list[_WaitingProcess] = []

    def start(cmd: list[str], **kw: object) -> _WaitingProcess:
        started.append((cmd, kw["nice"], dict(sub.unbuildable)))  # type: ignore[arg-type]
        procs.append(_WaitingProcess(cmd))
        return procs[-1]

    monkeypatch.setattr(builds, "start_builds", lambda *a: None)
    monkeypatch.setattr(runner, "restore", lambda *a: [])
    monkeypatch.setattr(runner, "kill_group", lambda p: setattr(p, "killed", True))
    monkeypatch.setattr(runner, "start_worker", start)
    slot = tmp_path / "slot"
    slot.mkdir()
    out: list[Run] = []
    t = threading.Thread(target=lambda: out.append(runner._run_pytest(sub, slot, TASKS, st, "t")), daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started, "no process started while relu.cu was building"
    cmd, nice, _ = started[0]
    assert "--cc-go-file" in cmd and "--cc-wait-file" not in cmd and nice == runner.TASK_NICE > 0, cmd
    time.sleep(0.3)
    assert t.is_alive() and not procs[0].go.exists()  # its tests wait for the build
    if build_stopped:
        sub.unbuildable["01_relu/relu.cu"] = 10.0
    sub.builds.event("01_relu", "relu.cu").set()
    t.join(timeout=60)
    assert not t.is_alive() and out and out[0].rc == 0 and procs[-1].go.exists()
    if build_stopped:
        assert len(started) == 2 and procs[0].killed and started[1][2] == {"01_relu/relu.cu": 10.0}, started
    else:
        assert len(started) == 1, started
