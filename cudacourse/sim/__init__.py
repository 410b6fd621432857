"""The CPU simulator: learner CUDA C++ runs on the CPU with CUDA semantics, and bugs are diagnosed.

``SimLibrary.build`` rewrites a kernel file (``rewrite.py``), compiles it with g++ against the runtime
(``runtime/``) into a shared library, content-cached; ``SimLibrary.call`` runs a launcher in an isolated
worker process on shared-memory copies of the tensors, so a crash, an endless loop or a wild write never
takes the caller down. Checked mode (the default) compiles the learner's code with g++'s thread-sanitizer
instrumentation, whose hooks the runtime implements itself to diagnose races (shared and global memory),
out-of-bounds accesses and uninitialised reads (shared memory and ``cudaMalloc`` memory); fast mode skips the
instrumentation.

``build_torch_extension`` serves the classic ``torch::Tensor`` route through ``load_inline``, in-process.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cudacourse.buildcache import cached, content_key, local_headers
from cudacourse.errors import KERNEL_ERROR_CLASSES, CompileError, KernelError, KernelTimeout
from cudacourse.source import SCALAR_CTYPES, Launcher

from . import devcheck
from .paths import _compile_error, _copy_for_compiler, _line_path, _real_paths
from .rewrite import rewrite

__all__ = ["SimLibrary", "build_torch_extension", "rewrite"]

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
_WORKER = Path(__file__).resolve().parent / "_worker.py"
_GAP = 64 * 1024  # unmapped-by-any-buffer bytes between tensors, so overruns land outside every buffer

# ----------------------------------------------------------------------------------------------------
# Building
# ----------------------------------------------------------------------------------------------------

_COMMON = ["-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-fno-strict-aliasing", "-fno-finite-loops", "-pthread",
           "-w"]
_LINES = ["-g1"]  # line tables only: crash and timeout reports name the learner's line
# (issue 41) tsan-distinguish-volatile: g++ then calls __tsan_volatile_* for volatile accesses, so the runtime sees
# them as volatile (cross-block flags are not judged, as README.md says); without it they arrive as plain accesses.
_CHECKED = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0", "--param=tsan-distinguish-volatile=1"]
_BRANCHES = ["-fsanitize-coverage=trace-pc"]  # profile="branches": every basic block a CUDA thread enters
_GXX_VERSION: str | None = None


def _gxx_version() -> str:
    global _GXX_VERSION
    if _GXX_VERSION is None:
        _GXX_VERSION = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return _GXX_VERSION


def _runtime_text() -> str:
    # every header of the runtime (fp16, cooperative groups, host API, cuBLAS, torch stand-ins) and the runtime
    return "".join(p.read_text() for p in [*sorted(RUNTIME_DIR.glob("*.h")), RUNTIME_DIR / "ccsim_rt.cpp"])


def _runtime_flags_and_key() -> tuple[list[str], str]:
    flags = [*_COMMON, "-Wall"]
    return flags, content_key(_runtime_text(), " ".join(flags), _gxx_version())


def seed_runtime(into: Path) -> None:
    """Copy the compiled runtime from this user's build cache into the build root ``into`` (the checkout's own
    grade builds in a folder of its own: without this it built the runtime again, 50 s of silence in a
    learner's first ``make grade`` after ``make check``). Only for grading one's own checkout: an instructor's
    grade must not load an object from a cache its learners' code could write."""
    from cudacourse.buildcache import _DONE, build_root

    _flags, key = _runtime_flags_and_key()
    src, dst = build_root() / "sim-rt" / key, into / "sim-rt" / key
    if (src / _DONE).exists() and not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.parent / f"{key}.seed{os.getpid()}"
        shutil.copytree(src, tmp)
        try:
            tmp.rename(dst)
        except OSError:  # another grade seeded it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)


def runtime_object() -> Path:
    """The compiled runtime (``ccsim_rt.o``, uninstrumented, position-independent), cached."""
    flags, key = _runtime_flags_and_key()

    def build(d: Path) -> None:
        r = subprocess.run(["g++", *flags, "-I", str(RUNTIME_DIR), "-c", str(RUNTIME_DIR / "ccsim_rt.cpp"),
                            "-o", str(d / "ccsim_rt.o")], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("building the simulator runtime failed:\n" + r.stderr[-4000:])

    return cached("sim-rt", key, build) / "ccsim_rt.o"


# ----------------------------------------------------------------------------------------------------
# Confinement while grading (settings.confine, set by the grader): builds and workers of learner code
# ----------------------------------------------------------------------------------------------------

BUILD_CPU_S = 120  # CPU seconds one confined compile may take (a never-ending template recursion stops)


def _confine_mode() -> str | None:
    from cudacourse.settings import current

    return current().confine


def _compile(cmd: list[str], d: Path, reads: list[Path], path: str) -> subprocess.CompletedProcess:
    """Run one g++ step in the build folder ``d``; confined (reads: runtime, lesson folder) when grading."""
    mode = _confine_mode()
    if mode is None:
        return subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    from cudacourse.sandbox import Limits, confined_popen, stop_group

    scratch = d / ".confine"
    proc = confined_popen(cmd, scratch=scratch, cwd=str(d), env={"PATH": os.environ.get("PATH", os.defpath)},
                          read_only=reads, read_write=[d], limits=Limits(cpu_s=BUILD_CPU_S),
                          allow_unconfined=mode == "best-effort", stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate()
    finally:
        stop_group(proc)
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        err = (f"{path}: the build was stopped after {BUILD_CPU_S} s of CPU time (an endless template "
               "recursion or constexpr evaluation?)\n" + (err or "")[-2000:])
        raise CompileError(err, file=path, compiler_output=err)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _parse_order(order: str | None) -> tuple[int, int]:
    order = order or os.environ.get("CUDA_COURSE_SIM_ORDER") or "forward"
    name, _, seed = order.partition(":")
    codes = {"forward": 0, "reverse": 1, "shuffle": 2}
    if name not in codes:
        raise ValueError(f"thread order must be forward, reverse, shuffle or shuffle:SEED, not {order!r}")
    return codes[name], int(seed) if seed else 1


# ----------------------------------------------------------------------------------------------------
# Reports: pc -> file:line, error records -> exceptions
# ----------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------
# The library and its worker
# ----------------------------------------------------------------------------------------------------


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
        text = rewrite(source, path, list(launchers), line_path=_line_path(path))
        rt = runtime_object()
        if profile not in (False, True, "branches"):
            raise ValueError(f"profile must be False, True or 'branches', not {profile!r}")
        checked = checked or bool(profile)
        flags = [*_COMMON, *_LINES, *(_CHECKED if checked else []), *(_BRANCHES if profile == "branches" else [])]
        # a learner file may include its own headers next to it: their contents are in the key, their folder
        # is not (so that copies of the folder share the build; see SRC_DIR)
        incs = ["-I", os.path.dirname(os.path.abspath(path))] if os.path.isfile(path) else []
        key = content_key(text, " ".join(flags), _runtime_text(), _gxx_version(), local_headers(path), devcheck.RULES)

        def build(d: Path) -> None:
            (d / "src.cpp").write_text(text)
            _copy_for_compiler(d, source, path)
            reads = [RUNTIME_DIR, rt, *([Path(incs[1])] if incs else [])]
            devcheck.compile_and_check(_compile, ["g++", "-I", str(RUNTIME_DIR), *incs], flags, d, reads, path,
                                       RUNTIME_DIR, incs[1:])  # + device code calling host functions refused
            r = _compile(["g++", "-shared", "-Wl,-Bsymbolic", "-o", "lib.so", "src.o", str(rt), "-pthread", "-ldl"], d,
                         reads, path)
            if r.returncode:
                raise CompileError(f"{path}: linking failed:\n{r.stderr[-3000:]}", file=path,
                                   compiler_output=r.stderr)

        folder = cached("sim", key, build)
        return cls(folder / "lib.so", path, list(launchers), checked, timeout_s, _parse_order(order), profile)

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
        mode = _confine_mode()
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
        if _confine_mode() is not None:
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
        kernel = rec.get("kernel") or None
        block = tuple(rec["block"]) if rec.get("block") else None
        thread = tuple(rec["thread"]) if rec.get("thread") else None
        running = f"; kernel {kernel} was still running" if kernel else ""
        if block:
            running += f" (block {_t(block)}, thread {_t(thread)})"
        line = int(rec.get("line") or 0) or None
        file = self.path if line else None
        for key in ("pc", "pc2"):  # where the running thread was interrupted, else its last checked access
            w = self._sym.where(int(rec[key])) if rec.get(key) else None
            if w and os.path.basename(w[0]) == os.path.basename(self.path):
                file, line = w
                running += f" at {os.path.basename(file)}:{line}"
                break
        msg = (f"KernelTimeout: launcher {name} did not finish within {self.timeout_s:g} s{running}. Look for an "
               "endless loop (a loop counter that never reaches its bound), a loop that does far more work than "
               "the size needs (one whose step is too small, so many threads repeat the same elements: the "
               "simulator runs each thread in turn, so that costs minutes here where a GPU takes milliseconds), "
               "or a spin-wait on a flag set by another thread or block (blocks are not guaranteed to run at the "
               "same time). The worker was stopped; the next call starts a fresh one.")
        return KernelTimeout(msg, kernel=kernel, block=block, thread=thread, file=file, line=line, details=rec)

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


# ----------------------------------------------------------------------------------------------------
# The classic torch route
# ----------------------------------------------------------------------------------------------------


def build_torch_extension(source: str, path: str | None, functions: list[str], *, checked: bool = True):
    """Build a ``torch::Tensor``-wrapper .cu file for the simulator with ``load_inline`` (in-process).

    CUDA and c10-cuda headers are replaced by the simulator runtime, ``x.is_cuda()`` holds for CPU
    tensors, ``data_ptr<T>()`` registers the tensor's bounds for checked mode and a failed launch raises.
    Returns a module whose functions raise the matching ``KernelError`` subclass for kernel bugs.
    """
    import types

    from torch.utils.cpp_extension import load_inline

    path = path or "<source>"
    text = rewrite(source, path, [], torch=True, entries=False, line_path=_line_path(path))
    rt = runtime_object()
    cflags = ["-O2", "-w", "-fno-strict-aliasing", "-fno-finite-loops", *_LINES, *(_CHECKED if checked else [])]
    key = content_key(text, " ".join(cflags), _runtime_text(), _gxx_version(), ",".join(functions))
    name = "ccsim_ext_" + key

    built: dict = {}

    def build(d: Path) -> None:
        _copy_for_compiler(d, source, path)  # (ninja compiles in d)
        try:
            built["mod"] = load_inline(name=name, cpp_sources=[text], functions=list(functions), extra_cflags=cflags,
                                       extra_ldflags=[str(rt)], extra_include_paths=[str(RUNTIME_DIR)],
                                       build_directory=str(d), verbose=False)
        except RuntimeError as e:  # compiler output is in the message
            raise _compile_error(str(e), path) from None

    folder = cached("sim-torch", key, build)
    mod = built.get("mod") or sys.modules.get(name)
    if mod is None:  # built earlier (or by another process): import the cached extension directly
        import importlib.util

        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.so")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[name] = mod
    import ctypes

    so = folder / f"{name}.so"  # (a fresh build was loaded from the temporary folder, since renamed)
    cdll = ctypes.CDLL(str(so))
    cdll.ccsim_api_init.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_int]
    order, seed = _parse_order(None)
    cdll.ccsim_api_init(int(checked), order, seed, 2)
    sym = _Symbolizer(so, path)

    def wrap(fn_name: str):
        fn = getattr(mod, fn_name)

        def call(*a, **kw):
            cdll.ccsim_api_begin_call()
            try:
                return fn(*a, **kw)
            except RuntimeError as e:
                s = str(e)
                i = s.find("CCSIM_ERROR ")
                if i < 0:
                    raise
                rec = json.loads(s[i + len("CCSIM_ERROR "):].split("\n")[0])
                raise make_error(rec, sym, fn_name, path) from None

        call.__name__ = fn_name
        call.__doc__ = fn.__doc__
        return call

    out = types.ModuleType(name)
    out.__file__ = str(so)
    for f in functions:
        setattr(out, f, wrap(f))
    out._extension = mod
    return out
