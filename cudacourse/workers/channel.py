"""The one channel to a worker process: start it in the sandbox, ask with a deadline, see it die, stop it.

Every worker that runs learner code for the checking process (the GPU worker, ``gpu.py``; the torch worker,
``torch.py``; the simulator's worker, ``cudacourse/sim/library.py``) holds one :class:`Channel`. The channel owns
what is the same for all of them:

- the worker's output log (its stdout and stderr, kernel ``printf`` included): a temporary file without a name,
  so a process that is killed leaves nothing of it behind;
- for a confined worker, a private folder (``tempfile.mkdtemp``) holding its scratch folder (its ``TMPDIR`` and
  ``HOME``), removed by :meth:`Channel.close` or at the interpreter's exit;
- the process, started by :func:`cudacourse.sandbox.confined_popen` with one end of a UNIX socket pair
  passed to it (the worker's program gets the descriptor's number on its command line); outside grading
  (``confine`` None: notebooks, the course's own tests) the simulator's worker starts as a plain child in a
  session of its own;
- :meth:`Channel.ask`: send a request and wait for the answer, at most a deadline; a worker that stays
  silent raises :class:`WorkerTimeout`, one that died (or closed its end) :class:`WorkerDied` with its exit
  status, and an answer that breaks the protocol :class:`ProtocolError`;
- :meth:`Channel.kill`: the worker and everything it started, stopped as a whole (``sandbox.stop_group``;
  an unconfined worker: its session's process group).

What travels over the socket is each worker's own business (its *payload transport*: JSON lines and file
descriptors for the GPU worker, JSON lines and a shared-memory file for the simulator's (:class:`JsonLines` reads
both), framed JSON headers and raw tensor bytes for the torch worker, ``wire.py``).
So is what a failure means to the learner: the worker's client turns the three exceptions into the course's
``KernelTimeout`` and ``KernelError``, with words that fit it, after stopping the worker; its next call
starts a fresh one (:attr:`Channel.running` says whether one runs).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from cudacourse.sandbox import Limits, confined_popen, stop_group

T = TypeVar("T")


class ProtocolError(Exception):
    """A message that does not follow the protocol (from a broken or hostile worker)."""


class WorkerTimeout(Exception):
    """The worker did not answer before the deadline."""


class WorkerDied(Exception):
    """The worker ended (or closed its end of the socket) before answering; ``status`` is its exit status."""

    def __init__(self, status: int | None) -> None:
        super().__init__(f"the worker ended (exit status {status})")
        self.status = status


class Channel:
    """One worker process at a time, in the sandbox, and the socket to it (see the module docstring)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self.private: Path | None = None  # a confined worker's folder, made at its first start
        self._remove: weakref.finalize | None = None
        # appended to by every worker this channel starts; no name, so nothing is left when this process is killed
        # (a named log in a folder of its own: 837 such folders in /tmp after a day of the course's tests, most from
        # notebook kernels that nbval stops with SIGKILL)
        self._log = tempfile.TemporaryFile(mode="a+b", prefix=prefix)
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.confined = False
        self._log_pos = 0

    def start(self, argv: Callable[[int], list[str]], *, env: Mapping[str, str], confine: str | None,
              limits: Limits, read_only: Iterable[Path] = (), read_write: Iterable[Path] = (),
              gpu: bool = False, pass_fds: Iterable[int] = ()) -> None:
        """Start the worker ``argv(fd)`` (``fd``: the number of its end of the socket) confined, its output
        appended to the log. ``confine`` is the grader's mode: ``strict`` refuses to start an unconfined
        worker, anything else runs it as confined as this machine allows (the report says so); None (not
        grading) starts it unconfined, in a session of its own (``limits`` and the paths do not apply).
        ``pass_fds``: more descriptors the worker inherits under the same numbers (the simulator's shared memory)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = (theirs.fileno(), *pass_fds)
        self.confined = confine is not None
        log = self._log
        try:
            if confine is None:
                self.proc = subprocess.Popen(argv(theirs.fileno()), env=dict(env), stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=log, pass_fds=fds, start_new_session=True)
            else:
                self.proc = confined_popen(
                    argv(theirs.fileno()), scratch=self._folder() / "scratch", env=env, read_only=read_only,
                    read_write=read_write, limits=limits, gpu=gpu, allow_unconfined=confine != "strict",
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=fds)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours

    def _folder(self) -> Path:
        """The confined worker's private folder, made once; removed by :meth:`close`, when the channel is collected,
        or at the interpreter's exit (a library still cached then has its ``__del__`` run too late or not at all)."""
        if self.private is None:
            self.private = Path(tempfile.mkdtemp(prefix=self._prefix))
            self._remove = weakref.finalize(self, shutil.rmtree, self.private, True)
        return self.private

    @property
    def running(self) -> bool:
        """A worker was started and has not ended (a crash, an exit, a kill)."""
        return self.proc is not None and self.proc.poll() is None

    def ask(self, send: Callable[[socket.socket], None], receive: Callable[[socket.socket, float], T],
            timeout: float) -> T:
        """``send(sock)`` a request, then return ``receive(sock, timeout)``, its answer. Raises
        :class:`WorkerTimeout` when either passes ``timeout`` seconds, :class:`WorkerDied` when the worker is
        gone; ``receive`` raises :class:`ProtocolError` for an answer that breaks the protocol. The caller
        decides what each means and stops the worker (:meth:`kill`)."""
        assert self.sock is not None, "the worker is not running"
        try:
            self.sock.settimeout(timeout)
            send(self.sock)
            return receive(self.sock, timeout)
        except TimeoutError:
            raise WorkerTimeout from None
        except (EOFError, OSError):
            raise WorkerDied(self.proc.wait() if self.proc is not None else None) from None

    def tell(self, send: Callable[[socket.socket], None], timeout: float) -> None:
        """``send(sock)`` a request that gets no answer of its own (the worker reports its outcome with the answer to
        the next :meth:`ask`). Raises :class:`WorkerTimeout` when the send waits ``timeout`` seconds (a worker that
        stopped reading), :class:`WorkerDied` when the worker is gone."""
        assert self.sock is not None, "the worker is not running"
        try:
            self.sock.settimeout(timeout)
            send(self.sock)
        except TimeoutError:
            raise WorkerTimeout from None
        except OSError:
            raise WorkerDied(self.proc.wait() if self.proc is not None else None) from None

    def kill(self) -> None:
        """Stop the worker and everything it started; close the socket. The folder and its log stay."""
        if self.proc is not None and self.confined:
            stop_group(self.proc)
        elif self.proc is not None:  # unconfined: its session (what it forked and did not move elsewhere)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.kill()
            self.proc.wait()
        if self.sock is not None:
            self.sock.close()
        self.proc = self.sock = None

    def _read_log(self, start: int) -> bytes:
        """The log from byte ``start`` on (``pread``: the workers append at the end whatever this reads)."""
        try:
            fd = self._log.fileno()
            return os.pread(fd, max(0, os.fstat(fd).st_size - start), start)
        except (OSError, ValueError):  # (closed)
            return b""

    def output(self, chars: int = 2000) -> str:
        """The end of what the worker printed (for an error message about its death)."""
        try:
            size = os.fstat(self._log.fileno()).st_size
        except (OSError, ValueError):
            return ""
        return self._read_log(max(0, size - 4 * chars)).decode(errors="replace")[-chars:].strip()

    def forward_output(self) -> None:
        """Copy what the worker printed since the last call (kernel printf included) to this process's stdout."""
        data = self._read_log(self._log_pos)
        if data:
            sys.stdout.write(data.decode(errors="replace"))
            sys.stdout.flush()
        self._log_pos += len(data)

    def close(self) -> None:
        """Stop the worker, remove its folder and drop its log."""
        self.kill()
        if self._remove is not None:
            self._remove()
        self._log.close()


class JsonLines:
    """A payload transport's answers as JSON lines: one answer a line, read from the channel's socket.

    ``receive`` is :meth:`Channel.ask`'s ``receive``; what arrived past the line waits for the next one."""

    def __init__(self) -> None:
        self._buf = b""

    def clear(self) -> None:
        """Forget what arrived (a fresh worker: nothing of the old one's answers belongs to it)."""
        self._buf = b""

    def receive(self, sock: socket.socket, timeout: float) -> dict:
        """The next JSON line, waiting at most ``timeout`` seconds: ``TimeoutError`` after that, ``EOFError``
        when the worker closed its end first, :class:`ProtocolError` for a line that is not a JSON object."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                raise TimeoutError
            chunk = sock.recv(65536)
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            obj = json.loads(line.decode(errors="replace"))  # (a learner's odd bytes in a message)
        except ValueError:
            raise ProtocolError("not a JSON line") from None
        if not isinstance(obj, dict):
            raise ProtocolError("not a JSON object")
        return obj

    def drain(self, sock: socket.socket) -> None:
        """Drop what arrived unasked (between requests, only a process the learner's code forked writes)."""
        self._buf = b""
        while select.select([sock], [], [], 0)[0]:
            try:
                if not sock.recv(65536):
                    break
            except OSError:
                break


def keep_env(names: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables ``names`` of ``environ`` (default: this process's) that are set: a worker's environment
    is what its client names, nothing else."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k in set(names)}
