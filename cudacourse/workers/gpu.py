"""The GPU worker's client: a learner's kernel library, run on the cuda backend in a worker while grading.

While grading (``settings.confine`` set) the process that compares outputs and records verdicts never
loads learner code. On the simulator the learner's library runs in the simulator's worker; on a GPU it
runs in a separate process that owns its own CUDA context (``workers/gpu_serve.py``, started through the
worker channel, ``workers/channel.py``) (DESIGN.md "Trust boundary"; docs/CONFINEMENT.md).

How a call runs: the checking process copies each tensor argument into a buffer of its own (one
``cuMemCreate`` allocation per argument, so a kernel writing out of bounds cannot reach the checker's
other tensors, such as the expected result), exports it as a file descriptor
(``cuMemExportToShareableHandle``) and sends the descriptors with the scalars as one JSON line over a
UNIX socket. (Legacy CUDA IPC, ``cudaIpcGetMemHandle``, which torch.multiprocessing uses, does not work
across PID namespaces: on the H100 machine it failed with cudaErrorMapBufferObjectFailed.) The worker
maps the buffers into its own context, calls the launcher, synchronises, and answers with a JSON line;
the checking process then copies every buffer back into its tensor. Nothing the worker says is
unpickled or executed by the checker, and a worker that
dies, hangs or corrupts its context costs only that call: the next call starts a fresh worker.

Inside ``loader.no_sync()`` (benchmarks) buffers are staged once per tensor and launches return without
waiting; everything is synchronised and copied back when the block ends.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudacourse.workers.channel import Channel, JsonLines, ProtocolError, WorkerDied, WorkerTimeout, keep_env
from cudacourse.workers.gpu_serve import Vmm

_PROGRAM = Path(__file__).resolve().parent / "gpu_serve.py"



_VMM: Vmm | None = None
_ALIGN = 256  # a staged copy keeps its tensor's address modulo this (cudaMalloc's own alignment)
# Guards: bytes before (_FRONT plus the offset modulo _ALIGN) and after (at least _BACK, and the allocation's slack)
# each staged copy, filled with a byte of the buffer's own and compared after the call. A GPU does not fault on a
# store a few elements past a tensor's end (the allocation is larger), so this is how a grade on a GPU sees the
# missing bounds check that the simulator's checked mode names by thread and line.
_FRONT, _BACK = 512, 4096


@dataclass
class _Staged:
    """A tensor's copy in a buffer of its own: the buffer (id, (pointer, handle, fd, size)), the copy and its guards
    (uint8 views), the guard byte, and the launcher parameter it was staged for."""

    tensor: Any
    bid: int
    mem: tuple[int, int, int, int]
    view: Any
    guards: tuple[Any, Any]
    poison: int
    name: str


def _vmm() -> Vmm:
    """This (checking) process's driver calls, on the current torch device's primary context."""
    global _VMM
    if _VMM is None:
        import torch

        torch.zeros(1, device="cuda")  # the primary context is current on this thread from here on
        _VMM = Vmm(torch.cuda.current_device())
    return _VMM


def _as_bytes(ptr: int, nbytes: int) -> Any:
    """A uint8 torch view of device memory at ``ptr`` (no copy)."""
    import torch

    class _Mem:
        __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                    "strides": None}

    return torch.as_tensor(_Mem(), device="cuda")


class GpuWorker:
    """A learner's built kernel library, run in a confined worker process; the cuda twin of ``SimLibrary``."""

    def __init__(self, so: Path, launchers: list, timeout_s: float, confine: str) -> None:
        self.so = Path(so)
        self.launchers = {la.name: la for la in launchers}
        self.timeout_s = timeout_s
        self.confine = confine
        self._chan = Channel("ccgpu-")
        self._lines = JsonLines()
        self._next_id = 1
        # (tensor pointer, bytes) -> its staged copy; sent: the buffer ids the worker has mapped
        self._staged: dict[tuple[int, int], _Staged] = {}
        self._sent: set[int] = set()
        # buffers the worker has mapped, free for reuse (by size): a timed loop that allocates its output on each
        # call (torch.empty in a lambda) then costs a copy, not a new allocation exported and mapped each time
        self._pool: dict[int, list[tuple[int, tuple[int, int, int, int]]]] = {}
        self._last = "your launcher"  # the last launcher called (named by a stray write found at synchronize)
        self._quiet = False  # a call was sent without waiting for its answer since the last synchronisation

    def staged_view(self, ptr: int, nbytes: int) -> Any:
        """The uint8 view of this worker's staged copy of the tensor at ``ptr`` (``nbytes`` long), or None: what
        the learner's launches in this worker read and write (``cudacourse.speed`` poisons and restores it)."""
        staged = self._staged.get((ptr, nbytes))
        return None if staged is None else staged.view

    # ---- the process ------------------------------------------------------------------------------

    def _start(self) -> None:
        import torch

        from cudacourse.sandbox import Limits
        from cudacourse.source import SCALAR_CTYPES

        env = keep_env(("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LANG"))
        self._chan.start(lambda fd: [sys.executable, "-I", "-B", "-S", str(_PROGRAM), str(self.so), str(fd)],
                         env=env, read_only=[self.so.parent, _PROGRAM], limits=Limits(memory=None, cpu_s=None),
                         gpu=True, confine=self.confine)
        self._lines.clear()
        kinds = {n: ["p" if p.pointer else SCALAR_CTYPES[p.base] for p in la.params]
                 for n, la in self.launchers.items()}
        r = self._ask({"op": "declare", "launchers": kinds, "device": torch.cuda.current_device()},
                      "starting the GPU worker", 60.0)
        if not r.get("ok"):
            from cudacourse.errors import KernelError

            self._kill()
            raise KernelError(f"the GPU worker could not start: {r.get('what')}", kernel="")

    def _kill(self) -> None:
        self._chan.kill()
        self._sent.clear()
        self._release_all(copy_back=False)

    def _tell(self, msg: dict, name: str) -> None:
        """Send one request that gets no answer of its own (a quiet call: ``Channel.tell``)."""
        self._exchange(lambda sock: sock.sendall((json.dumps(msg) + "\n").encode()), None, name, self.timeout_s)

    def _ask(self, msg: dict, name: str, timeout: float, fds: list[int] = ()) -> dict:  # type: ignore[assignment]
        """Send one request (with ``fds``) and wait for its answer (the worker answers each with one line)."""
        return self._exchange(lambda sock: socket.send_fds(sock, [(json.dumps(msg) + "\n").encode()], list(fds)),
                              self._lines.receive, name, timeout)

    def _exchange(self, send: Any, receive: Any, name: str, timeout: float) -> dict:
        """One request to the worker, its answer awaited unless ``receive`` is None; a dead, stuck or silent worker
        is a course error (and is stopped)."""
        from cudacourse.errors import KernelError, KernelTimeout

        try:
            if receive is None:
                self._chan.tell(send, timeout)
                return {}
            return self._chan.ask(send, receive, timeout)
        except WorkerTimeout:
            self._kill()
            raise KernelTimeout(f"{name}(): the GPU worker was still running after {timeout:g} s (an endless "
                                "loop, or a spin-wait on another block?); it was stopped. Run the call with "
                                "backend='sim' to see where it hangs.", kernel=name) from None
        except WorkerDied as e:
            out = self._chan.output()
            self._kill()
            raise KernelError(f"{name}(): the process running your kernel library ended (exit status {e.status}) "
                              "before answering" + (f"; its output:\n{out}" if out else "."), kernel=name) from None
        except ProtocolError:
            self._kill()
            raise KernelError(f"{name}(): the GPU worker answered nonsense; it was stopped.", kernel=name) from None

    # ---- buffers ----------------------------------------------------------------------------------

    def _stage(self, t: Any, name: str) -> dict[str, int]:
        """The buffer that holds a copy of tensor ``t`` (launcher parameter ``name``), as a call names it: its id
        (0 for an empty tensor) and the offset of the copy in it, which keeps ``t``'s address modulo ``_ALIGN``: a
        view starting one float into a tensor (the misaligned case a float4 launcher must detect) stays misaligned
        in the worker. The bytes around the copy are guards (``_FRONT``, ``_BACK``)."""
        import torch

        nbytes = t.numel() * t.element_size()
        if nbytes == 0:
            return {"b": 0}
        key = (t.data_ptr(), nbytes)
        offset = _FRONT + t.data_ptr() % _ALIGN
        if key not in self._staged:
            vmm = _vmm()
            size = vmm.size(offset + nbytes + _BACK)
            if self._pool.get(size):
                bid, mem = self._pool[size].pop()
            else:
                bid, mem = self._next_id, (*vmm.create(size), size)
                self._next_id += 1
            view = _as_bytes(mem[0] + offset, nbytes)
            view.copy_(t.reshape(-1).view(torch.uint8))
            # a byte of its own per buffer: a kernel copying one buffer's guard into another's still changes it
            poison = 0xA0 | (bid & 0x0F)
            guards = (_as_bytes(mem[0], offset), _as_bytes(mem[0] + offset + nbytes, size - offset - nbytes))
            for g in guards:
                g.fill_(poison)
            self._staged[key] = _Staged(t, bid, mem, view, guards, poison, name)
            self._copies = True
        return {"b": self._staged[key].bid, "o": offset}

    def _stray_writes(self, launcher: str) -> Exception | None:
        """An ``OutOfBoundsError`` naming each staged tensor whose guards a kernel changed, or None (one
        synchronisation for all of them)."""
        import torch

        from cudacourse.errors import OutOfBoundsError

        staged = list(self._staged.values())
        if not staged:
            return None
        counts = torch.stack([(g != s.poison).sum() for s in staged for g in s.guards]).tolist()
        found = []
        for k, s in enumerate(staged):
            before, after = counts[2 * k], counts[2 * k + 1]
            if after:
                first = int((s.guards[1] != s.poison).nonzero()[0]) // s.tensor.element_size()
                found.append(f"past the end of {s.name} (from element {s.tensor.numel() + first}, "
                             f"{after} bytes changed)")
            if before:
                found.append(f"before the start of {s.name} ({before} bytes changed)")
        if not found:
            return None
        return OutOfBoundsError(f"{launcher}(): a kernel wrote outside its buffers: " + "; ".join(found) + ". A "
                                "thread whose index is outside the array still stored: check the bounds test (e.g. "
                                "if (i < n)) in each kernel this launcher starts. The simulator's checked mode "
                                "(backend='sim') names the thread and the line.", kernel=launcher)

    def _release_all(self, copy_back: bool) -> None:
        """Copy every staged buffer back into its tensor (``copy_back``) and return it to the pool; without
        ``copy_back`` (the worker is gone) free them all, pooled ones included."""
        import torch

        if copy_back:
            extra = []
            for s in self._staged.values():
                s.tensor.reshape(-1).view(torch.uint8).copy_(s.view)
                if s.bid in self._sent and len(self._pool.setdefault(s.mem[3], [])) < 16:
                    self._pool[s.mem[3]].append((s.bid, s.mem))
                else:
                    extra.append((s.bid, s.mem))
            torch.cuda.synchronize()  # the copies are done before any buffer is unmapped (else: illegal address)
            self._free(extra)
            self._staged.clear()
            return
        torch.cuda.synchronize()
        self._free([(s.bid, s.mem) for s in self._staged.values()] + [x for v in self._pool.values() for x in v])
        self._staged.clear()
        self._pool.clear()

    def _free(self, bufs: list[tuple[int, tuple[int, int, int, int]]]) -> None:
        ids = [bid for bid, _m in bufs if bid in self._sent]
        if self._chan.proc is not None and ids:
            try:
                self._ask({"op": "release", "ids": ids}, "release", 30.0)
            except Exception:  # noqa: BLE001 - a dead worker released everything by dying
                pass
        for _bid, (ptr, handle, fd, size) in bufs:
            os.close(fd)
            _vmm().free(ptr, handle, size)
        self._sent.difference_update(ids)

    # ---- calls ------------------------------------------------------------------------------------

    def call(self, la: Any, args: list, sync: bool) -> None:
        """Run one launcher on ``args`` (checked by ``loader.check_args``); with ``sync`` wait and copy back."""
        import torch

        from cudacourse.errors import KernelError, LaunchError

        if not self._chan.running:
            self._kill()
            self._start()
        if len(self._staged) >= 64:  # a timed loop that allocates its output on every call: recycle, do not grow
            self.synchronize(release=True)
        self._copies = False
        names = [p.name for p in la.params]
        wire = [self._stage(a, names[k] if k < len(names) else f"argument {k}") if isinstance(a, torch.Tensor) else a
                for k, a in enumerate(args)]
        new = [s for s in self._staged.values() if s.bid not in self._sent]
        if self._copies:
            torch.cuda.synchronize()  # the staged copies are complete before the worker reads them
        msg = {"op": "call", "name": la.name, "args": wire, "sync": sync, "new": [[s.bid, s.mem[3]] for s in new]}
        if not sync and not new:
            # A timed call on buffers the worker has mapped: sent without waiting for its answer, so that the next
            # call's message overlaps this one's kernels (waiting for each answer put a round trip between two of
            # the learner's calls, which the reference, called in this process, never pays: issue 36); the worker
            # reports the first failure with the answer to the next request that has one (synchronize)
            self._tell({**msg, "quiet": True}, la.name)
            self._last, self._quiet = la.name, True
            return
        r = self._ask(msg, la.name, self.timeout_s, fds=[s.mem[2] for s in new])
        self._sent.update(s.bid for s in new)
        if not r.get("ok") and r.get("stage") == "host-work":  # (the context is fine: the worker keeps it)
            from cudacourse.cuda_backend import host_work_message

            k, t = r["arg"], args[r["arg"]]
            self._release_all(copy_back=True)
            raise KernelError(host_work_message(la, k, (r["at"] - wire[k]["o"]) // t.element_size(), r["what"]),
                              kernel=la.name)
        if not r.get("ok"):
            self._kill()  # the context may be unusable: the next call starts a fresh worker
            if r.get("launcher", la.name) != la.name:
                r["what"] = f"{r.get('what')}, in an earlier call of {r['launcher']}()"
            if r.get("stage") == "launch":
                raise LaunchError(f"{la.name}(): a launch failed with '{r.get('what')}' (error {r.get('error')}). "
                                  "Check the grid and block sizes (at most 1024 threads per block, grid > 0) and "
                                  "the shared memory size.", kernel=la.name)
            raise KernelError(f"{la.name}(): the GPU reported '{r.get('what')}' (error {r.get('error')}). Run the "
                              "same call with backend='sim' for the file and line.", kernel=la.name)
        if sync:
            stray = self._stray_writes(la.name)
            self._release_all(copy_back=True)
            if stray:
                raise stray
        self._last = la.name

    def synchronize(self, release: bool = True) -> None:
        """Wait for every launch; with ``release`` copy the staged buffers back into their tensors and free
        them (the end of ``no_sync``), else keep them staged (between timed repetitions)."""
        if self._chan.proc is not None and (self._staged or self._quiet):
            self._quiet = False
            r = self._ask({"op": "sync"}, "synchronize", self.timeout_s)
            if not r.get("ok"):
                from cudacourse.errors import KernelError

                self._kill()
                who = r.get("launcher", "")
                what = "a launch failed" if r.get("stage") == "launch" else "the GPU reported"
                raise KernelError(f"{who + '(): ' if who else ''}{what} '{r.get('what')}' (error {r.get('error')}) "
                                  "while waiting for your kernels", kernel=who)
        if release:
            stray = self._stray_writes(self._last)
            self._release_all(copy_back=True)
            if stray:
                raise stray

    def close(self) -> None:
        """Stop the worker and free its buffers."""
        self._kill()

