"""``SimLibrary``: a learner's kernel file built for the simulator, its launchers run in a worker process.

``call`` copies every tensor into a shared-memory file (64 KB gaps between them, so small overruns land outside
every buffer), the worker (``_worker.py``) registers each one as a named buffer and calls the generated
``ccsim_entry_<launcher>``, and every pointer argument is copied back. A crash, an endless loop or a wild write
never takes the caller down: the worker reports (or is stopped after ``timeout_s``) and the next call starts a
fresh one.
"""

from __future__ import annotations

import json
import mmap
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cudacourse.errors import KernelError, KernelTimeout
from cudacourse.source import SCALAR_CTYPES, Launcher

from .build import build_module, confine_mode, parse_order
from .reports import _Symbolizer, make_error, timeout_error

_WORKER = Path(__file__).resolve().parent / "_worker.py"
_GAP = 64 * 1024  # unmapped-by-any-buffer bytes between tensors, so overruns land outside every buffer


def forward_output(log: str | Path, pos: int) -> int:
    """Copy what a worker printed to ``log`` since byte ``pos`` (kernel printf included) to this process's stdout;
    returns the new position. Shared by the simulator's worker and the torch worker."""
    try:
        with open(log, "rb") as f:
            f.seek(pos)
            data = f.read()
    except OSError:
        return pos
    if data:
        sys.stdout.write(data.decode(errors="replace"))
        sys.stdout.flush()
    return pos + len(data)


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
        self._proc: subprocess.Popen | None = None
        self._req: int | None = None
        self._resp: int | None = None
        self._rbuf = b""
        self._shm_path: str | None = None
        self._shm: mmap.mmap | None = None
        self._shm_size = 0
        self._log_path: str | None = None
        self._log_pos = 0
        self._private: str | None = None  # confined worker's own folder (shared-memory files, scratch)

    # ---- building ---------------------------------------------------------------------------------

    @classmethod
    def build(cls, source: str, path: str | None, launchers: list[Launcher], *, checked: bool = True,
              timeout_s: float = 10.0, order: str | None = None, profile: bool | str = False) -> SimLibrary:
        """Rewrite and compile ``source`` (cached by content and flags) into a simulator library.

        ``profile=True``: every call records memory-traffic counters (read with ``cudacourse.profile.report``);
        it is the checked build itself (same cache entry), the counting is switched on per call.
        ``profile="branches"`` adds basic-block hooks (a build of its own) to count active lanes per branch.
        Raises ``CompileError`` (learner's file and line, compiler's words) or ``UnsupportedError``.
        """
        path = path or "<source>"
        if profile not in (False, True, "branches"):
            raise ValueError(f"profile must be False, True or 'branches', not {profile!r}")
        checked = checked or bool(profile)
        lib = build_module(source, path, list(launchers), checked=checked, profile=profile)
        return cls(lib, path, list(launchers), checked, timeout_s, parse_order(order), profile)

    # ---- the worker -------------------------------------------------------------------------------

    def _start(self) -> None:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        if self._log_path is None:
            fd, self._log_path = tempfile.mkstemp(prefix="ccsim-out-", suffix=".log")
            os.close(fd)
        log = open(self._log_path, "ab")  # noqa: SIM115 - handed to the child
        self._log_pos = os.path.getsize(self._log_path)
        env = dict(os.environ)
        argv = [sys.executable, "-S", str(_WORKER), str(self.lib), str(int(self.checked)), str(self.order[0]),
                str(self.order[1]), str(req_r), str(resp_w)]
        mode = confine_mode()
        try:
            if mode is None:
                self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                              pass_fds=(req_r, resp_w), env=env, close_fds=True)
            else:
                # Grading: the worker reads its library and _worker.py, writes only its private shm folder.
                from cudacourse.sandbox import Limits, confined_popen, learner_memory

                private = self._private_dir()
                # The learner's host code runs here: a host allocation of many GB fails here, not on the machine.
                self._proc = confined_popen(
                    argv, scratch=Path(private) / "scratch", env=env, read_only=[self.lib.parent, _WORKER],
                    read_write=[Path(private)], limits=Limits(memory=learner_memory(env), cpu_s=None),
                    allow_unconfined=mode == "best-effort", stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    pass_fds=(req_r, resp_w))
        except BaseException:
            for fd in (req_r, req_w, resp_r, resp_w):
                os.close(fd)
            raise
        finally:
            log.close()
        os.close(req_r)
        os.close(resp_w)
        self._req, self._resp = req_w, resp_r
        self._rbuf = b""
        if self._shm_path:
            self._send({"op": "map", "path": self._shm_path, "size": self._shm_size})
            self._recv(30.0)

    def _private_dir(self) -> str:
        """The confined worker's private folder (in ``/dev/shm`` where there is one), made once."""
        if self._private is None:
            d = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
            self._private = tempfile.mkdtemp(prefix="ccsim-", dir=d)
        return self._private

    def _kill(self) -> None:
        if self._proc is not None:
            if self._private is not None:  # confined: the worker and whatever it started (setsid or not)
                from cudacourse.sandbox import stop_group

                stop_group(self._proc)
            else:
                try:
                    self._proc.kill()
                except OSError:
                    pass
                self._proc.wait()
        for fd in (self._req, self._resp):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._proc = self._req = self._resp = None

    def _send(self, obj: dict) -> None:
        assert self._req is not None
        os.write(self._req, (json.dumps(obj) + "\n").encode())

    def _drain(self) -> None:
        """Drop what arrived between calls: only a child the learner's code forked writes then (its exit()
        report would otherwise be read as the answer to the next call and fail another task)."""
        if self._resp is None:
            return
        self._rbuf = b""
        while select.select([self._resp], [], [], 0)[0]:
            if not os.read(self._resp, 65536):
                break

    def _recv(self, timeout: float) -> dict | None:
        """One JSON line from the worker; None on timeout; {"eof": True} if it died silently."""
        assert self._resp is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._rbuf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self._resp], [], [], left)
            if not r:
                return None
            chunk = os.read(self._resp, 65536)
            if not chunk:
                return {"eof": True}
            self._rbuf += chunk
        line, _, self._rbuf = self._rbuf.partition(b"\n")
        return json.loads(line.decode(errors="replace"))

    def _ensure_shm(self, size: int) -> None:
        if self._shm is not None and size <= self._shm_size:
            return
        size = max(size, 1 << 20, int(self._shm_size * 1.5))
        size = (size + 4095) // 4096 * 4096
        if self._shm is not None:
            self._shm.close()
        if self._shm_path:
            os.unlink(self._shm_path)
        if confine_mode() is not None:
            d: str | None = self._private_dir()  # the one folder a confined worker may write
        else:
            d = "/dev/shm" if os.path.isdir("/dev/shm") else None
        try:
            fd, self._shm_path = tempfile.mkstemp(prefix="ccsim-", dir=d)
        except PermissionError:
            # inside a sandbox that keeps /dev/shm out (lesson 07's custom_op.py loads its kernels in the torch
            # worker, nested in the task's sandbox: Landlock refuses what access() would allow): its temp folder
            fd, self._shm_path = tempfile.mkstemp(prefix="ccsim-")
        os.ftruncate(fd, size)
        self._shm = mmap.mmap(fd, size)
        os.close(fd)
        self._shm_size = size
        if self._proc is not None:
            self._send({"op": "map", "path": self._shm_path, "size": size})
            if self._recv(30.0) is None:
                self._kill()

    def _flush_log(self) -> None:
        if self._log_path:
            self._log_pos = forward_output(self._log_path, self._log_pos)

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
                elem = a.element_size() * (2 if p.base in ("float2", "int2", "double2", "__half2") else
                                           4 if p.base in ("float4", "int4") else 1)
                params.append({"kind": "ptr", "offset": o, "nbytes": nbytes, "name": p.name, "elem": elem})
            else:
                ctype = SCALAR_CTYPES.get(p.base, "c_int")
                v = a.item() if hasattr(a, "item") else a
                v = bool(v) if ctype == "c_bool" else float(v) if ctype in ("c_float", "c_double") else int(v)
                params.append({"kind": "scalar", "ctype": ctype, "value": v})
        if self._proc is None or self._proc.poll() is not None:
            self._kill()
            self._start()
        err: KernelError | None = None
        self._drain()
        try:
            self.calls += 1
            self._send({"op": "call", "name": name, "params": params, "profile": bool(self.profile)})
        except OSError:
            self._kill()
            self._start()
            self._send({"op": "call", "name": name, "params": params, "profile": bool(self.profile)})
        self.last_profile = None
        resp = self._recv(self.timeout_s)
        if resp is not None and "profile" in resp:
            self.last_profile = resp["profile"]
        if resp is None:
            err = self._timeout(name)
        elif resp.get("eof"):
            self._kill()
            err = KernelError(f"KernelError: the simulator worker died while running launcher {name} (no report; "
                              "killed by the system, e.g. out of memory?)")
            err.kind = "crash"
        elif "error" in resp or resp.get("kind") in ("crash", "assert", "exit"):
            rec = resp.get("error", resp)
            err = make_error(rec, self._sym, name, self.path)
            if "error" not in resp:
                self._kill()  # a crash, a host assert or exit(): the worker ends after its report
        # copy every pointer argument back (even const ones: a kernel writing an input must be visible)
        for p, (o, a, nbytes) in zip(la.params, layout, strict=True):
            if p.pointer and a is not None and nbytes:
                a.copy_(shm[o:o + nbytes].view(a.dtype).view(a.shape))
        del shm
        self._flush_log()
        if err is not None:
            raise err

    def profile_trace(self) -> dict | None:
        """Profile mode: the last call's counters with the accesses the runtime recorded (for pictures);
        None when the worker that ran the call is gone."""
        if not self.profile or self._proc is None or self._proc.poll() is not None:
            return None
        self._drain()
        self._send({"op": "trace"})
        resp = self._recv(max(self.timeout_s, 30.0))
        return resp.get("profile") if resp else None

    def _timeout(self, name: str) -> KernelTimeout:
        rec: dict = {}
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.send_signal(signal.SIGUSR1)
                got = self._recv(1.0)
                if got and got.get("kind") == "timeout":
                    rec = got
            except OSError:
                pass
        self._kill()
        return timeout_error(rec, name, self.timeout_s, self._sym, self.path)

    def close(self) -> None:
        """Stop the worker and release the shared memory."""
        if self._proc is not None and self._proc.poll() is None and self._req is not None:
            try:
                self._send({"op": "exit"})
                self._proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        if self._shm is not None:
            try:
                self._shm.close()
            except BufferError:
                pass
            self._shm = None
        for p in (self._shm_path, self._log_path):
            if p:
                try:
                    os.unlink(p)
                except OSError:
                    pass
        self._shm_path = self._log_path = None
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self) -> SimLibrary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
