"""The one worker channel (cudacourse/workers/channel.py): start in the sandbox, ask with a deadline, see a worker
die or stay silent, restart, stop, read its output. A small echo worker stands for the GPU and torch workers."""

from __future__ import annotations

import socket
import sys
import textwrap
from pathlib import Path

import pytest

from cudacourse.sandbox import Limits, available
from cudacourse.workers.channel import Channel, ProtocolError, WorkerDied, WorkerTimeout

MODE = "strict" if available().confined else "best-effort"

ECHO = textwrap.dedent("""
    import os, socket, sys, time
    sock = socket.socket(fileno=int(sys.argv[1]))
    print("echo worker up", flush=True)
    while True:
        line = sock.recv(1024)
        if not line:
            break
        word = line.decode().strip()
        if word == "die":
            os._exit(3)
        if word == "hang":
            time.sleep(60)
        if word == "garble":
            sock.sendall(b"not an answer\\n")
            continue
        sock.sendall(f"echo {word}\\n".encode())
""")


def receive(sock: socket.socket, timeout: float) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1024)
        if not chunk:
            raise EOFError
        data += chunk
    text = data.decode().strip()
    if not text.startswith("echo "):
        raise ProtocolError(text)
    return text


@pytest.fixture
def chan(tmp_path: Path):  # noqa: ANN201
    prog = tmp_path / "echo.py"
    prog.write_text(ECHO)
    c = Channel("cc-channel-test-")

    def start() -> None:
        c.start(lambda fd: [sys.executable, "-I", "-S", str(prog), str(fd)], env={"PATH": "/usr/bin:/bin"},
                confine=MODE, limits=Limits(cpu_s=30), read_only=[prog.parent])

    c.start_echo = start  # type: ignore[attr-defined]
    start()
    yield c
    c.close()
    assert not c.private.exists()


def ask(c: Channel, word: str, timeout: float = 10.0) -> str:
    return c.ask(lambda s: s.sendall(f"{word}\n".encode()), receive, timeout)


def test_ask_answers_and_the_worker_runs_confined_with_its_output_logged(chan: Channel) -> None:
    assert chan.running
    assert ask(chan, "hello") == "echo hello"
    assert ask(chan, "again") == "echo again"
    assert "echo worker up" in chan.output()
    assert (chan.private / "scratch").is_dir()


def test_a_dead_worker_is_seen_with_its_status_and_a_fresh_one_starts(chan: Channel) -> None:
    with pytest.raises(WorkerDied) as e:
        ask(chan, "die")
    assert e.value.status == 3
    chan.kill()
    assert not chan.running
    chan.start_echo()  # type: ignore[attr-defined]
    assert ask(chan, "back") == "echo back"


def test_a_silent_worker_times_out_and_is_stopped(chan: Channel) -> None:
    with pytest.raises(WorkerTimeout):
        ask(chan, "hang", timeout=0.5)
    proc = chan.proc
    chan.kill()
    assert proc is not None and proc.poll() is not None and chan.proc is None and chan.sock is None


def test_an_answer_that_breaks_the_protocol_is_the_callers_to_judge(chan: Channel) -> None:
    with pytest.raises(ProtocolError, match="not an answer"):
        ask(chan, "garble")
    assert chan.running  # the caller decides (the clients stop the worker)
