"""Reports of the simulator: program counters to ``file:line``, the runtime's error records to ``KernelError``s.

The runtime reports a kernel bug, a crash, a host ``assert``/``exit()`` or a timeout as a JSON record; program
counters in it (``pc``, ``@@PC:hex@@`` tokens in messages) are offsets into the built module, turned into the
learner's ``file:line`` with ``addr2line`` (cached per library). ``make_error`` picks the matching
``KernelError`` subclass and writes the message; ``timeout_error`` the ``KernelTimeout`` of a launcher that did not
finish.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from cudacourse.errors import KERNEL_ERROR_CLASSES, KernelError, KernelTimeout

from .paths import _real_paths


class _Symbolizer:
    """Maps program counters (offsets into one built module) to ``file:line``, cached."""

    def __init__(self, lib: Path, learner_path: str) -> None:
        self.lib = lib
        self.path = learner_path
        self.cache: dict[int, tuple[str, int] | None] = {}

    def resolve(self, pcs: list[int]) -> None:
        todo = sorted({p for p in pcs if p and p not in self.cache})
        if not todo:
            return
        try:
            out = subprocess.run(["addr2line", "-e", str(self.lib), "-i", "-a",
                                  *[hex(max(p - 1, 0)) for p in todo]], capture_output=True, text=True,
                                 timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        frames: dict[int, list[tuple[str, int]]] = {}
        cur = None
        for ln in out.splitlines():
            if ln.startswith("0x"):
                cur = int(ln, 16) + 1
                frames[cur] = []
            elif cur is not None:
                f, _, rest = ln.rpartition(":")
                num = re.match(r"\d+", rest)
                if f and num and f != "??":
                    frames[cur].append((f, int(num.group(0))))
        for p in todo:
            fr = frames.get(p, [])
            mine = [(self.path, ln) for f, ln in fr if os.path.basename(f) == os.path.basename(self.path)]
            self.cache[p] = (mine or fr or [None])[0]

    def where(self, pc: int) -> tuple[str, int] | None:
        self.resolve([pc])
        return self.cache.get(pc)

    def text(self, pc: int) -> str:
        w = self.where(pc)
        if not w:
            return "an unknown line"
        return f"{os.path.basename(w[0])}:{w[1]}"


_PC_TOKEN = re.compile(r"@@PC:([0-9a-f]+)@@")
_SIGNALS = {4: "SIGILL (illegal instruction)", 5: "SIGTRAP", 6: "SIGABRT (abort)", 7: "SIGBUS (bus error)",
            8: "SIGFPE (arithmetic error, e.g. integer division by zero)", 11: "SIGSEGV (invalid memory access)"}


def make_error(rec: dict, sym: _Symbolizer | None, launcher: str, path: str) -> KernelError:
    """Turn a runtime error record into the matching KernelError subclass with all fields set."""
    kind = rec.get("kind", "crash")
    msg = _real_paths(rec.get("message", ""), path)
    if sym is not None:
        sym.resolve([int(h, 16) for h in _PC_TOKEN.findall(msg)] + [int(rec.get("pc") or 0)])
        msg = _PC_TOKEN.sub(lambda mm: sym.text(int(mm.group(1), 16)), msg)
    file, line = rec.get("file") or None, int(rec.get("line") or 0) or None
    file = _real_paths(file, path) if file else file
    if line is None and rec.get("pc") and sym is not None:
        w = sym.where(int(rec["pc"]))
        if w:
            file, line = w
    if rec.get("host_device") and rec.get("fault_pc") and sym is not None:
        w = sym.where(int(rec["fault_pc"]))  # the faulting instruction, or the caller of a libc memcpy
        if w:
            file, line = w
    if file and file.startswith("<"):
        file = path if file == "<source>" else file
    kernel = rec.get("kernel") or None
    block = tuple(rec["block"]) if rec.get("block") else None
    thread = tuple(rec["thread"]) if rec.get("thread") else None
    if kind == "crash" and rec.get("host_device"):
        msg = _host_device_message(rec, launcher, file, line, path)
    elif kind == "crash" and "signal" in rec:
        sig = _SIGNALS.get(int(rec["signal"]), f"signal {rec['signal']}")
        loc = f" at {os.path.basename(file)}:{line}" if line and file else ""
        if rec.get("in_kernel"):
            head = f"KernelError in {kernel}, block {_t(block)}: thread {_t(thread)} crashed with {sig}{loc}."
            if rec.get("stack_overflow"):
                hint = (" It overflowed its stack: large local arrays or deep recursion (each simulated CUDA thread "
                        "has about 120 KB of stack).")
            else:
                hint = (f" Faulting address 0x{int(rec.get('fault_addr', 0)):x}. Look for an out-of-bounds index or "
                        "a wild pointer; checked mode (check=True) stops such accesses before they happen and names "
                        "the buffer and index.")
        else:
            head = f"KernelError: the host code of launcher {launcher} crashed with {sig}{loc}."
            hint = " Check host-side pointers (cudaMalloc results, cudaMemcpy sizes and directions)."
        msg = head + hint
    elif kind == "exit":
        loc = f" at {os.path.basename(file)}:{line}" if line and file else ""
        where = f"a kernel ({kernel})" if rec.get("in_kernel") else f"the host code of launcher {launcher}"
        msg = (f"KernelError: {where} called exit({rec.get('status')}){loc}. A launcher must return (or throw) "
               "instead of ending the process: the simulator's worker ended, and the next call starts a fresh one.")
    elif kind == "assert" and rec.get("host"):
        loc = f"{os.path.basename(file)}:{line}" if line and file else "an unknown line"
        msg = (f"KernelError: assert({rec.get('expression', '')}) failed in the host code of launcher {launcher} at "
               f"{loc} (in {rec.get('function', '?')}). Look at why the asserted condition is false for these "
               "arguments; the simulator's worker ended, and the next call starts a fresh one.")
    elif kind == "exception":
        msg = f"launcher {launcher} raised an exception: {msg}"
    if not msg:
        msg = f"KernelError ({kind}) in launcher {launcher}"
    cls = KERNEL_ERROR_CLASSES.get(kind, KernelError)
    err = cls(msg, kernel=kernel, block=block, thread=thread, file=file, line=line, details=rec)
    if cls is KernelError:
        err.kind = kind
    return err


def _host_device_message(rec: dict, launcher: str, file: str | None, line: int | None, path: str) -> str:
    """The launcher's host code read or wrote device memory (the runtime protects it outside the runtime's own
    calls, as a GPU does): name the argument and, where the symbolizer can, the learner's line."""
    verb = "wrote" if rec.get("write") else "read" if "write" in rec else "touched"
    buf = rec.get("buffer") or ""
    what = f"a {buf}" if buf.startswith("cudaMalloc") else f"argument {buf}" if buf else "outside every buffer"
    mine = bool(line and file and os.path.basename(file) == os.path.basename(path))
    loc = f" at {os.path.basename(file)}:{line}" if mine and file else ""
    return (f"KernelError: the host code of launcher {launcher} {verb} device memory ({what}){loc}: on a GPU host "
            "code cannot read or write device memory (it crashes there); do the work in a kernel, or copy with "
            "cudaMemcpy.")


def _t(v: tuple | None) -> str:
    return "(" + ",".join(str(x) for x in v) + ")" if v else "(?)"


def timeout_error(rec: dict, launcher: str, timeout_s: float, sym: _Symbolizer, path: str) -> KernelTimeout:
    """The ``KernelTimeout`` of launcher ``launcher``, which did not finish within ``timeout_s``; ``rec`` is the
    runtime's status record (which kernel, block and thread ran, and where), or empty when none came."""
    kernel = rec.get("kernel") or None
    block = tuple(rec["block"]) if rec.get("block") else None
    thread = tuple(rec["thread"]) if rec.get("thread") else None
    running = f"; kernel {kernel} was still running" if kernel else ""
    if block:
        running += f" (block {_t(block)}, thread {_t(thread)})"
    line = int(rec.get("line") or 0) or None
    file = path if line else None
    for key in ("pc", "pc2"):  # where the running thread was interrupted, else its last checked access
        w = sym.where(int(rec[key])) if rec.get(key) else None
        if w and os.path.basename(w[0]) == os.path.basename(path):
            file, line = w
            running += f" at {os.path.basename(file)}:{line}"
            break
    msg = (f"KernelTimeout: launcher {launcher} did not finish within {timeout_s:g} s{running}. Look for an "
           "endless loop (a loop counter that never reaches its bound), a loop that does far more work than "
           "the size needs (one whose step is too small, so many threads repeat the same elements: the "
           "simulator runs each thread in turn, so that costs minutes here where a GPU takes milliseconds), "
           "or a spin-wait on a flag set by another thread or block (blocks are not guaranteed to run at the "
           "same time). The worker was stopped; the next call starts a fresh one.")
    return KernelTimeout(msg, kernel=kernel, block=block, thread=thread, file=file, line=line, details=rec)
