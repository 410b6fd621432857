"""``SimLibrary``: a learner's kernel file built for the simulator, its launchers run in a worker process.

``call`` copies every tensor into a shared-memory file (64 KB gaps between them, so small overruns land outside
every buffer), the worker (``_worker.py``) registers each one as a named buffer and calls the generated
``ccsim_entry_<launcher>``, and every pointer argument is copied back. A crash, an endless loop or a wild write
never takes the caller down: the worker reports (or is stopped after ``timeout_s``) and the next call starts a
fresh one.

The worker is started, asked and stopped through the one worker channel (``cudacourse/workers/channel.py``):
in the sandbox while grading, unconfined otherwise. Its payload transport is JSON lines over the channel's
socket (:class:`~cudacourse.workers.channel.JsonLines`; the runtime's crash and timeout reports arrive there
too) and the shared memory: an anonymous file (``memfd_create``) that every worker of the library inherits by
descriptor, grown in place. It has no name, so no folder holds it and nothing is left behind when a process
is killed (named files in ``/dev/shm`` were: 7 GB of them after a day of the course's tests), and a confined
worker needs no folder it may write.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from cudacourse.errors import KernelError, KernelTimeout
from cudacourse.sandbox import Limits, learner_memory
from cudacourse.source import SCALAR_CTYPES, VECTOR_WIDTH, Launcher
from cudacourse.workers.channel import Channel, JsonLines, ProtocolError, WorkerDied, WorkerTimeout

from .build import build_module, confine_mode, parse_order
from .reports import _Symbolizer, make_error, timeout_error

_WORKER = Path(__file__).resolve().parent / "_worker.py"
_GAP = 64 * 1024  # unmapped-by-any-buffer bytes between tensors, so overruns land outside every buffer
_FAILED = (WorkerTimeout, WorkerDied, ProtocolError)  # what the channel raises when an answer does not come


class SimLibrary:
    """A learner's CUDA file built for the simulator; ``call`` runs its launchers in a worker process."""

    def __init__(self, lib: Path, path: str, launchers: list[Launcher], checked: bool, timeout_s: float,
                 order: tuple[int, int], profile: bool | str = False) -> None:
        self.lib = lib
        self.profile = profile
        self.last_profile: dict | None = None  # profile mode: the raw counters of the last call
        self.calls = 0                          # calls so far (the recorded accesses belong to the last one)
        self.path = path
        self.launchers = {la.name: la for la in launchers}
        self.checked = checked
        self.timeout_s = timeout_s
        self.order = order
        self._sym = _Symbolizer(lib, path)
        self._chan: Channel | None = None  # made at the first call (the worker's log; a folder only when confined)
        self._lines = JsonLines()
        self._shm_fd: int | None = None    # the shared memory's anonymous file (made at the first call)
        self._shm: mmap.mmap | None = None
        self._shm_size = 0

    # ---- building ---------------------------------------------------------------------------------

    @classmethod
    def build(cls, source: str, path: str | None, launchers: list[Launcher], *, checked: bool = True,
              timeout_s: float = 10.0, order: str | None = None, profile: bool | str = False,
              device_calls: bool = True) -> SimLibrary:
        """Rewrite and compile ``source`` (cached by content and flags) into a simulator library.

        ``profile=True``: every call records memory-traffic counters (read with ``cudacourse.profile.report``);
        it is the checked build itself (same cache entry), the counting is switched on per call.
        ``profile="branches"`` adds basic-block hooks (a build of its own) to count active lanes per branch.
        ``device_calls=False`` skips the check of device code calling host functions (the simulator's own unit
        tests only: see ``build.build_module``).
        Raises ``CompileError`` (learner's file and line, compiler's words) or ``UnsupportedError``.
        """
        path = path or "<source>"
        if profile not in (False, True, "branches"):
            raise ValueError(f"profile must be False, True or 'branches', not {profile!r}")
        checked = checked or bool(profile)
        lib = build_module(source, path, list(launchers), checked=checked, profile=profile, device_calls=device_calls)
        return cls(lib, path, list(launchers), checked, timeout_s, parse_order(order), profile)

    # ---- the worker ---------------------------------------------------------------------------------

    def _start(self) -> None:
        """Start a worker on this library (confined while grading) and map the shared memory there."""
        if self._chan is None:
            self._chan = Channel("ccsim-")
        env = dict(os.environ)
        mode = confine_mode()
        # Grading: the worker reads its library and _worker.py, writes only the shared memory's folder; the
        # learner's host code runs here, so a host allocation of many GB fails here, not on the machine.
        limits = Limits(memory=learner_memory(env), cpu_s=None) if mode is not None else Limits()
        self._chan.start(lambda fd: [sys.executable, "-I", "-S", str(_WORKER), str(self.lib), str(int(self.checked)),
                                     str(self.order[0]), str(self.order[1]), str(fd)],
                         env=env, confine=mode, limits=limits, read_only=[self.lib.parent, _WORKER],
                         pass_fds=[self._shm_fd] if self._shm_fd is not None else [])
        self._lines.clear()
        if self._shm_size:
            self._ask({"op": "map", "fd": self._shm_fd, "size": self._shm_size}, 30.0)

    def _kill(self) -> None:
        """Stop the worker and whatever it started (the next call starts a fresh one)."""
        if self._chan is not None:
            self._chan.kill()

    def _ask(self, obj: dict, timeout: float) -> dict:
        """Send one request and return the worker's answer (one JSON line) within ``timeout`` seconds; raises the
        channel's ``WorkerTimeout``, ``WorkerDied`` or ``ProtocolError``."""
        assert self._chan is not None
        line = (json.dumps(obj) + "\n").encode()
        return self._chan.ask(lambda sock: sock.sendall(line), self._lines.receive, timeout)

    def _running(self) -> bool:
        return self._chan is not None and self._chan.running

    def _drain(self) -> None:
        """Drop what arrived between calls: only a child the learner's code forked writes then (its exit()
        report would otherwise be read as the answer to the next call and fail another task)."""
        if self._chan is not None and self._chan.sock is not None:
            self._lines.drain(self._chan.sock)

    def _ensure_shm(self, size: int) -> None:
        if self._shm is not None and size <= self._shm_size:
            return
        size = max(size, 1 << 20, int(self._shm_size * 1.5))
        size = (size + 4095) // 4096 * 4096
        if self._shm is not None:
            self._shm.close()
        if self._shm_fd is None:
            self._shm_fd = _anonymous_file()
        os.ftruncate(self._shm_fd, size)  # grown in place: a running worker keeps its descriptor, maps it again
        self._shm = mmap.mmap(self._shm_fd, size)
        self._shm_size = size
        if self._running():
            try:
                self._ask({"op": "map", "fd": self._shm_fd, "size": size}, 30.0)
            except _FAILED:
                self._kill()

    # ---- calling ----------------------------------------------------------------------------------

    def call(self, name: str, args: list) -> None:
        """Run launcher ``name`` on ``args`` (tensors for pointers, numbers for scalars) in the worker.

        Every pointer argument is copied back into the caller's tensor afterwards. Kernel bugs raise the
        matching ``KernelError`` subclass; the library stays usable afterwards.
        """
        __tracebackhide__ = True  # pytest shows the learner's test line, not this harness frame
        import torch  # the caller already has torch; the worker never imports it

        la = self.launchers.get(name)
        if la is None:
            raise KeyError(f"launcher {name!r} was not built into this library (have: {', '.join(self.launchers)})")
        if len(args) != len(la.params):
            raise TypeError(f"{la.signature()} takes {len(la.params)} arguments, got {len(args)}")
        # layout of the pointer arguments in shared memory, with gaps between them
        layout: list[tuple[int, Any, int]] = []
        off = _GAP
        for p, a in zip(la.params, args, strict=True):
            if p.pointer and a is not None:
                if not isinstance(a, torch.Tensor):
                    raise TypeError(f"parameter '{p.text}' takes a tensor, got {type(a).__name__}")
                if not a.is_contiguous():
                    raise ValueError(f"parameter '{p.text}' needs a contiguous tensor")
                nbytes = a.numel() * a.element_size()
                # Keep the tensor's address modulo 256 (a view like x[1:] stays misaligned for float4
                # loads, as on a GPU, so alignment fallbacks are exercised here too).
                o = off + a.data_ptr() % 256
                layout.append((o, a, nbytes))
                off = (o + nbytes + _GAP + 4095) // 4096 * 4096
            else:
                layout.append((0, a, 0))
        self._ensure_shm(off + _GAP)
        assert self._shm is not None
        shm = torch.frombuffer(self._shm, dtype=torch.uint8)
        params = []
        for p, (o, a, nbytes) in zip(la.params, layout, strict=True):
            if p.pointer:
                if a is None:
                    params.append({"kind": "ptr", "null": True, "offset": 0, "nbytes": 0, "name": p.name, "elem": 1})
                    continue
                if nbytes:
                    # through a typed view of the shared memory: copy_ accepts any strides, so a strided
                    # 1-element view or an offset into a larger storage copies like a plain tensor
                    shm[o:o + nbytes].view(a.dtype).copy_(a.detach().reshape(-1))
                elem = a.element_size() * VECTOR_WIDTH.get(p.base, 1)
                params.append({"kind": "ptr", "offset": o, "nbytes": nbytes, "name": p.name, "elem": elem})
            else:
                ctype = SCALAR_CTYPES.get(p.base, "c_int")
                v = a.item() if hasattr(a, "item") else a
                v = bool(v) if ctype == "c_bool" else float(v) if ctype in ("c_float", "c_double") else int(v)
                params.append({"kind": "scalar", "ctype": ctype, "value": v})
        err: KernelError | None = None
        self.calls += 1
        self.last_profile = None
        try:
            if not self._running():
                self._kill()
                self._start()
            self._drain()
            resp = self._ask({"op": "call", "name": name, "params": params, "profile": bool(self.profile)},
                             self.timeout_s)
        except WorkerTimeout:
            err = self._timeout(name)
        except WorkerDied:
            self._kill()
            err = KernelError(f"KernelError: the simulator worker died while running launcher {name} (no report; "
                              "killed by the system, e.g. out of memory?)")
            err.kind = "crash"
        except ProtocolError as e:
            self._kill()
            err = KernelError(f"KernelError: the simulator worker answered nonsense while running launcher {name} "
                              f"({e}); it was stopped, and the next call starts a fresh one.")
            err.kind = "crash"
        else:
            if "profile" in resp:
                self.last_profile = resp["profile"]
            if "error" in resp or resp.get("kind") in ("crash", "assert", "exit"):
                rec = resp.get("error", resp)
                err = make_error(rec, self._sym, name, self.path)
                if "error" not in resp:
                    self._kill()  # a crash, a host assert or exit(): the worker ends after its report
        # copy every pointer argument back (even const ones: a kernel writing an input must be visible)
        for p, (o, a, nbytes) in zip(la.params, layout, strict=True):
            if p.pointer and a is not None and nbytes:
                a.copy_(shm[o:o + nbytes].view(a.dtype).view(a.shape))
        del shm
        assert self._chan is not None
        self._chan.forward_output()
        if err is not None:
            raise err

    def profile_trace(self) -> dict | None:
        """Profile mode: the last call's counters with the accesses the runtime recorded (for pictures);
        None when the worker that ran the call is gone."""
        if not self.profile or not self._running():
            return None
        self._drain()
        try:
            resp = self._ask({"op": "trace"}, max(self.timeout_s, 30.0))
        except _FAILED:
            self._kill()
            return None
        return resp.get("profile")

    def _timeout(self, name: str) -> KernelTimeout:
        """Ask the worker which kernel and thread were running (SIGUSR1: the runtime answers with a status line),
        stop it, and say so."""
        rec: dict = {}
        if self._running():
            assert self._chan is not None and self._chan.proc is not None
            try:
                self._chan.proc.send_signal(signal.SIGUSR1)
                got = self._chan.ask(lambda sock: None, self._lines.receive, 1.0)
                if got.get("kind") == "timeout":
                    rec = got
            except (OSError, *_FAILED):
                pass
        self._kill()
        return timeout_error(rec, name, self.timeout_s, self._sym, self.path)

    def close(self) -> None:
        """Stop the worker and release the shared memory."""
        if self._chan is not None:
            if self._running():
                assert self._chan.sock is not None and self._chan.proc is not None
                try:
                    self._chan.sock.sendall(b'{"op": "exit"}\n')
                    self._chan.proc.wait(timeout=2)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._chan.close()
            self._chan = None
        if self._shm is not None:
            try:
                self._shm.close()
            except BufferError:
                pass
            self._shm = None
        if self._shm_fd is not None:
            os.close(self._shm_fd)
        self._shm_fd = None
        self._shm_size = 0

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self) -> SimLibrary:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _anonymous_file() -> int:
    """A descriptor of a file without a name for the shared memory: ``memfd_create`` (memory, Linux), else an
    unlinked temporary file. Close-on-exec: only the workers it is passed to (``pass_fds``) inherit it."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("ccsim-shm", os.MFD_CLOEXEC)
    fd, path = tempfile.mkstemp(prefix="ccsim-shm-")
    os.unlink(path)
    return fd
