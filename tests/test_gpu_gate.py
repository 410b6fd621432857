"""The GPU gate (cudacourse/gpu_gate.py) across processes: a timing loop waits for the tests running and no new
test starts while it waits or times; a nested turn; a killed holder frees the gate; no folder, no gate.

Each participant is a Python process holding a turn until the test creates its release file. Whether a process
is blocked is read from /proc/locks (a waiting flock is listed with "->"), never from how long it has waited."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudacourse import gpu_gate

ROOT = Path(__file__).resolve().parents[1]
HOLD = """
import sys, time
from pathlib import Path
from cudacourse import gpu_gate
name, alone, log, release = sys.argv[1], sys.argv[2] == "alone", Path(sys.argv[3]), Path(sys.argv[4])
with gpu_gate.turn(alone=alone):
    with open(log, "a") as f:
        f.write(name + " in\\n")
    while not release.exists():
        time.sleep(0.02)
    with open(log, "a") as f:
        f.write(name + " out\\n")
"""
PATIENCE_S = 120.0  # how long a step may take on a busy machine before the test gives up (a hang, not a time)


def _until(what: str, cond) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + PATIENCE_S
    while not cond():
        assert time.monotonic() < end, f"gave up waiting: {what}"
        time.sleep(0.02)


def _blocked(pid: int) -> bool:
    """Whether process ``pid`` waits for a flock."""
    return any("->" in ln and f" {pid} " in ln for ln in Path("/proc/locks").read_text().splitlines())


class _Party:
    def __init__(self, gate: Path, tmp: Path, name: str, alone: bool) -> None:
        self.name, self.release = name, tmp / f"release-{name}"
        env = {**os.environ, gpu_gate.GATE_ENV: str(gate), "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, name, "alone" if alone else "shared",
                                      str(tmp / "log"), str(self.release)], env=env)

    def let_go(self) -> None:
        self.release.touch()
        assert self.proc.wait(timeout=PATIENCE_S) == 0


def _log(tmp: Path) -> list[str]:
    return (tmp / "log").read_text().splitlines() if (tmp / "log").exists() else []


def test_a_timing_loop_waits_for_running_tests_and_holds_back_new_ones(tmp_path: Path) -> None:
    gate = gpu_gate.prepare(tmp_path / "gate")
    a = _Party(gate, tmp_path, "test-a", alone=False)
    _until("test a's turn", lambda: "test-a in" in _log(tmp_path))
    b = _Party(gate, tmp_path, "test-b", alone=False)  # tests share: b gets in beside a
    _until("test b's turn", lambda: "test-b in" in _log(tmp_path))
    timing = _Party(gate, tmp_path, "timing", alone=True)
    _until("the timing loop to wait", lambda: _blocked(timing.proc.pid))
    late = _Party(gate, tmp_path, "test-late", alone=False)
    _until("the late test to wait at the turnstile", lambda: _blocked(late.proc.pid))
    a.let_go()
    b.let_go()
    _until("the timing loop's turn", lambda: "timing in" in _log(tmp_path))
    assert "test-late in" not in _log(tmp_path) and _blocked(late.proc.pid), _log(tmp_path)
    timing.let_go()
    _until("the late test's turn", lambda: "test-late in" in _log(tmp_path))
    late.let_go()
    assert _log(tmp_path) == ["test-a in", "test-b in", "test-a out", "test-b out", "timing in", "timing out",
                              "test-late in", "test-late out"]


def _probe(gate: Path, mode: int) -> bool:
    """Whether another holder could take the GPU lock in ``mode`` now (a separate open file: flocks conflict)."""
    with open(gate / "gpu.lock") as f:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def test_a_timing_loop_inside_a_test_takes_the_gpu_alone_then_shares_again(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    gate = gpu_gate.prepare(tmp_path / "gate")
    monkeypatch.setenv(gpu_gate.GATE_ENV, str(gate))
    with gpu_gate.turn(alone=False):
        assert _probe(gate, fcntl.LOCK_SH) and not _probe(gate, fcntl.LOCK_EX)
        with gpu_gate.turn(alone=True):
            assert not _probe(gate, fcntl.LOCK_SH)
            with gpu_gate.turn(alone=False):  # a shared turn inside changes nothing
                assert not _probe(gate, fcntl.LOCK_SH)
        assert _probe(gate, fcntl.LOCK_SH) and not _probe(gate, fcntl.LOCK_EX)
    assert _probe(gate, fcntl.LOCK_EX)


def test_a_killed_holder_frees_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = gpu_gate.prepare(tmp_path / "gate")
    holder = _Party(gate, tmp_path, "holder", alone=True)
    _until("the holder's turn", lambda: "holder in" in _log(tmp_path))
    assert not _probe(gate, fcntl.LOCK_SH)
    holder.proc.send_signal(signal.SIGKILL)
    holder.proc.wait(timeout=PATIENCE_S)
    monkeypatch.setenv(gpu_gate.GATE_ENV, str(gate))
    with gpu_gate.turn(alone=True):
        assert not _probe(gate, fcntl.LOCK_SH)


def test_without_a_gate_folder_a_turn_is_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpu_gate.GATE_ENV, raising=False)
    with gpu_gate.turn(alone=True), gpu_gate.turn(alone=False):
        pass
    assert not any(tmp_path.iterdir())


def test_a_read_only_gate_folder_still_locks(tmp_path: Path) -> None:
    """The grader's task processes may only read the gate's folder (their confinement): reading is enough."""
    gate = gpu_gate.prepare(tmp_path / "gate")
    for f in gate.iterdir():
        f.chmod(0o444)
    gate.chmod(0o555)
    try:
        holder = _Party(gate, tmp_path, "reader", alone=True)
        _until("the holder's turn", lambda: "reader in" in _log(tmp_path))
        assert not _probe(gate, fcntl.LOCK_SH)
        holder.let_go()
    finally:
        gate.chmod(0o755)
