"""One GPU, several processes: each timing loop runs alone on it, everything else shares it.

While the grader grades on a GPU, and while the course's suite runs under pytest-xdist on one, several
processes use the same GPU. A time is right only if nothing else runs on the GPU while it is measured, so each
timing loop (``cudacourse.bench.time_stats``, ``self_timed_stats``) holds this gate alone, and each test of a
task holds it shared (``cudacourse.pytest_plugin``). A timing loop is short (at most its ``max_s``), so the
rest of a speed test (its correctness check, its reference, a ``torch.compile``) overlaps the other tasks'
work instead of waiting for all of them. Writer priority: a timing loop that waits closes a turnstile, so no
new test starts before it has had its turn.

The gate is two ``flock`` locks on two files of one folder, named by ``CUDA_COURSE_GPU_GATE`` (the grader sets
it for its task processes; under xdist the plugin points it at the build cache); without it every call here is a
no-op. The kernel drops a process's locks when it dies, so a task process that is killed cannot wedge the others.
Hand-written: ``filelock`` has no shared (reader) lock. Locking needs only a file opened for reading, so the
folder may be read-only to the processes that use it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

GATE_ENV = "CUDA_COURSE_GPU_GATE"
_NAMES = ("turnstile.lock", "gpu.lock")

_lock = threading.RLock()  # one turn per process at a time: threads of one process take it in turn
_files: dict[str, tuple[IO[str], IO[str]]] = {}
_held: list[str | None] = [None]  # what this process holds now: None, "shared" or "alone"


def prepare(folder: Path) -> Path:
    """Create the gate's files in ``folder`` (the processes that use it may then only read it)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in _NAMES:
        (folder / name).touch()
    return folder


def _open(folder: str) -> tuple[IO[str], IO[str]]:
    if folder not in _files:
        opened = []
        for name in _NAMES:
            path = Path(folder) / name
            try:
                opened.append(open(path, "a"))  # noqa: SIM115 - held for the life of the process
            except OSError:
                opened.append(open(path))  # noqa: SIM115 - a read-only folder: reading is enough to lock
        _files[folder] = (opened[0], opened[1])
    return _files[folder]


@contextlib.contextmanager
def turn(alone: bool) -> Iterator[None]:
    """Hold the GPU ``alone`` (a timing loop) or shared (a test) for the ``with`` block; nested turns are fine.

    A shared turn asked for inside a turn changes nothing; an ``alone`` turn inside a shared one gives the shared
    turn back first (two processes each holding a shared turn and each waiting for the other to leave would
    never move) and takes it again afterwards."""
    folder = os.environ.get(GATE_ENV)
    if not folder:
        yield
        return
    with _lock:
        turnstile, gpu = _open(folder)
        before = _held[0]
        want = "alone" if alone or before == "alone" else "shared"
        if want != before:
            if before is not None:
                fcntl.flock(gpu, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_EX)  # while a timing loop waits here, no new turn starts
            try:
                fcntl.flock(gpu, fcntl.LOCK_EX if want == "alone" else fcntl.LOCK_SH)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            _held[0] = want
        try:
            yield
        finally:
            if want != before:
                fcntl.flock(gpu, fcntl.LOCK_SH if before == "shared" else fcntl.LOCK_UN)
                _held[0] = before
