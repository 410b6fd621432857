"""The GPU worker's program (``workers/gpu_serve.py``) without a GPU: its requests and answers, driven over a socket
pair against a stand-in library with the entry points every kernel library has (no CUDA in it).

What it checks is the protocol of issue 36's timed calls: a call sent "quiet" (the timed calls between two
synchronisations, ``workers/gpu.py``) gets no answer of its own, and its failure is the answer to the next request
that has one, naming the launcher that failed; the requests after it are not run until that answer is given.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from cudacourse.workers import gpu_serve

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

STAND_IN = r"""
static int calls = 0;
int cc_entry_ok(int a) { calls += a; return 0; }
int cc_entry_fail(int a) { (void)a; return 7; }
int cc_entry_count(int* out) { (void)out; return 0; }
int cc_sync(void) { return 0; }
const char* cc_error_string(int e) { return e == 7 ? "a stand-in launch failure" : "no error"; }
int cc_hw_begin(int n, const unsigned long long* b, const unsigned long long* s) { return n * 0 + (b == s); }
int cc_hw_end(unsigned long long* at) { (void)at; return -1; }
const char* cc_hw_copy(void) { return ""; }
int cc_calls(void) { return calls; }
"""


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The worker's program runs in a thread of this process, which on a GPU machine has a CUDA torch and so the
    # cuBLAS libraries mapped: the vendor-library check (tested in its own process in test_speed_exploits.py) would
    # answer every call here. These tests are about the protocol; the check is told there is nothing to find.
    monkeypatch.setattr(gpu_serve, "_vendor_libraries", lambda: [])
    src = tmp_path / "stand_in.c"
    src.write_text(STAND_IN)
    lib = tmp_path / "libstand_in.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    ours, theirs = socket.socketpair()
    t = threading.Thread(target=gpu_serve._serve, args=(str(lib), theirs.fileno()), daemon=True)
    t.start()
    ours.settimeout(10.0)
    buf = b""

    def send(msg: dict) -> None:
        ours.sendall((json.dumps(msg) + "\n").encode())

    def answer() -> dict:
        nonlocal buf
        while b"\n" not in buf:
            buf += ours.recv(65536)
        line, _, buf = buf.partition(b"\n")
        return json.loads(line)

    send({"op": "declare", "launchers": {"ok": ["c_int"], "fail": ["c_int"]}, "device": 0})
    assert answer() == {"ok": True}
    yield send, answer
    ours.close()
    t.join(timeout=10.0)


def call(name: str, quiet: bool) -> dict:
    msg = {"op": "call", "name": name, "args": [1], "sync": False, "new": []}
    return {**msg, "quiet": True} if quiet else msg


def test_quiet_calls_get_no_answer_until_the_synchronisation(worker) -> None:
    send, answer = worker
    for _ in range(3):
        send(call("ok", quiet=True))
    send({"op": "sync"})
    assert answer() == {"ok": True}  # the synchronisation's
    send(call("fail", quiet=False))
    r = answer()  # the next answer is this call's (had the quiet calls been answered, it would be one of theirs)
    assert r["ok"] is False and r["launcher"] == "fail", r


def test_a_quiet_failure_is_the_next_answer_and_names_its_launcher(worker) -> None:
    send, answer = worker
    send(call("ok", quiet=True))
    send(call("fail", quiet=True))
    send(call("ok", quiet=True))  # after the failure: not run, no answer
    send({"op": "sync"})
    r = answer()
    assert r["ok"] is False and r["stage"] == "launch" and r["error"] == 7, r
    assert r["launcher"] == "fail" and r["what"] == "a stand-in launch failure", r
    send({"op": "sync"})
    assert answer() == {"ok": True}  # told once: the next request runs


def test_a_quiet_failure_answers_the_next_call_that_expects_an_answer(worker) -> None:
    send, answer = worker
    send(call("fail", quiet=True))
    send(call("ok", quiet=False))
    r = answer()
    assert r["ok"] is False and r["launcher"] == "fail", r
