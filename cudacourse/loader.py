"""Load a learner's CUDA file and call its launchers from Python, on a GPU or on the CPU simulator.

``load(source, functions)`` is the one seam between learner code and everything else (tests, notebooks,
the grader, benchmarks). It parses the launchers' signatures, builds the file for the chosen backend,
and returns a ``Module`` whose attributes are the launchers. Calls are checked before anything runs:
pointer parameters take contiguous tensors of the matching dtype on the backend's device, scalars take
Python numbers; a mismatch raises ``TypeError``/``ValueError`` naming the parameter.

Backends
  ``cuda``  ``torch.utils.cpp_extension.load_inline`` with ``no_implicit_headers=True``: only the kernel
            file goes through nvcc (about 2 s), with a generated ``extern "C"`` trampoline per launcher that
            ctypes calls with the tensors' device pointers. No torch headers are compiled (they cost ~30 s).
  ``sim``   the CPU simulator in ``cudacourse.sim`` (checked mode by default).
  ``auto``  cuda when torch sees a GPU and nvcc is usable, else sim; ``CUDA_COURSE_BACKEND`` overrides it.

Files that include torch headers (the classic ``torch::Tensor`` route of lesson 01) are built with
``load_inline`` and a pybind11 binding on cuda, or by the simulator's torch route on the CPU; while
grading, either is built and loaded in a confined worker (``cudacourse/torch_worker.py``; on cuda one that
owns its own CUDA context), never in the checking process.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import numbers
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import types
import weakref
from pathlib import Path
from typing import Any

from cudacourse import buildcache, gpuinfo, settings
from cudacourse.course import course as course_model
from cudacourse.errors import (
    UNBUILDABLE_ENV,
    CompileError,
    CourseError,
    KernelError,
    KernelTimeout,
    LaunchError,
    build_stopped,
    compile_error,
    repeated,
)
from cudacourse.source import (
    SCALAR_CTYPES,
    VECTOR_WIDTH,
    Launcher,
    SignatureError,
    find_functions,
    find_launchers,
    launcher,
    uses_torch,
)

BACKENDS = settings.BACKENDS
# Open ``no_sync()`` blocks in this process, whatever thread opened them. A process-wide count, not a
# context variable: PyTorch runs the ``backward`` of autograd Functions on CUDA tensors in its own worker
# thread, which a context variable set by the caller does not reach. (With one, every launch of the
# capstone's backward pass waited for the GPU inside the benchmark: about 0.5 ms each, 0.34x PyTorch.)
_NO_SYNC_LOCK = threading.Lock()
_no_sync_depth = 0


_GPU_WORKERS: weakref.WeakSet = weakref.WeakSet()  # live GpuWorkers (grading on cuda)


@contextlib.contextmanager
def no_sync():  # noqa: ANN201
    """Inside this block cuda launches return without waiting for the GPU (benchmarks time with events).

    It holds for every thread of the process while the block is open, so the backward passes that PyTorch's
    autograd runs in its own thread are covered too. What changes for errors: a launch error (bad grid or
    block size) is still raised by the call that made it, but a fault while the kernel runs (an illegal
    address, a hang) is reported by whatever waits for the GPU next (``torch.cuda.synchronize()``,
    ``.cpu()``, ``float(t)``) as PyTorch's ``RuntimeError``, without the kernel's name or the timeout; run
    the same code outside the block (or on ``backend='sim'``) to find the kernel.

    On leaving it, GPU workers (grading) wait for their launches and copy their buffers back."""
    global _no_sync_depth
    with _NO_SYNC_LOCK:
        _no_sync_depth += 1
    try:
        yield
    finally:
        with _NO_SYNC_LOCK:
            _no_sync_depth -= 1
        for w in list(_GPU_WORKERS):
            w.synchronize()


def syncing() -> bool:
    """Whether cuda launches wait for the GPU now (False inside ``no_sync()``, on any thread)."""
    return _no_sync_depth == 0


def uses_gpu_worker(backend: str = "auto") -> bool:
    """Whether learner libraries on this backend run in a separate GPU worker: on cuda while grading
    (settings ``confine`` set), so the checking process never loads learner code."""
    return backend_name(backend) == "cuda" and settings.current().confine is not None


def synchronize_workers(release: bool = False) -> None:
    """Wait for the launches of every GPU worker (``release``: also copy their buffers back)."""
    for w in list(_GPU_WORKERS):
        w.synchronize(release=release)
REPO_ROOT = buildcache.REPO_ROOT


# ----------------------------------------------------------------------------------------------------
# Backend choice
# ----------------------------------------------------------------------------------------------------


def nvcc_path() -> str | None:
    """The nvcc that builds run with: ``$CUDA_HOME/bin/nvcc`` if set, else the one on PATH."""
    return _nvcc_path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"), os.environ.get("PATH"))


# Cached per environment: backend_name() asks on every cc.lesson() call, and a PATH search is ~0.1 ms, which a
# custom op that looks its lesson up per call (task 7.7, H100) paid on every launch.
@functools.lru_cache(maxsize=16)
def _nvcc_path(home: str | None, path: str | None) -> str | None:
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc", path=path)


@functools.lru_cache(maxsize=1)
def gpu_usable() -> bool:
    """True when torch sees a CUDA GPU (a CPU-only torch or no driver gives False).

    Asked of the driver without importing torch where that answers (``gpuinfo.torch_sees_gpu``): the grader
    and its build workers need no torch to decide."""
    if "torch" not in sys.modules and (fast := gpuinfo.torch_sees_gpu()) is not None:
        return fast
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def backend_name(requested: str = "auto") -> str:
    """Resolve ``requested`` (``auto``/``cuda``/``sim``) to the backend that will run: ``cuda`` or ``sim``."""
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {requested!r}")
    if requested == "auto":
        requested = settings.current().backend
    if requested == "auto":
        return "cuda" if gpu_usable() and nvcc_path() else "sim"
    if requested == "cuda" and not gpu_usable():
        raise RuntimeError("backend 'cuda' was asked for, but torch sees no CUDA GPU "
                           "(torch.cuda.is_available() is False). Use backend='sim' for the CPU simulator, "
                           "or run `make doctor` to see why.")
    return requested


def device_for(backend: str) -> Any:
    """The torch device that tensors for ``backend`` live on."""
    import torch

    return torch.device("cuda") if backend_name(backend) == "cuda" else torch.device("cpu")


# ----------------------------------------------------------------------------------------------------
# Argument checking (shared by both backends)
# ----------------------------------------------------------------------------------------------------

_INT_LIMITS = {
    "c_int": 31, "c_int32": 31, "c_uint": 32, "c_uint32": 32, "c_short": 15, "c_char": 7,
    "c_long": 63, "c_longlong": 63, "c_int64": 63, "c_ulonglong": 64, "c_uint64": 64, "c_size_t": 64,
}


def check_args(la: Launcher, args: tuple, device: Any) -> list:
    """Validate ``args`` against ``la``'s parameters; return them ready for the backend.

    Raises ``TypeError`` (wrong kind or dtype) or ``ValueError`` (count, device, layout, range), naming
    the parameter and saying what to do.
    """
    import torch

    where = f"{la.name}()"
    if len(args) != len(la.params):
        raise TypeError(f"{where} takes {len(la.params)} arguments ({la.signature()}), got {len(args)}")
    out = []
    for p, a in zip(la.params, args, strict=True):
        what = f"{where}: parameter '{p.name}' ({p.text})"
        if p.pointer:
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"{what} expects a torch tensor, got {type(a).__name__}")
            want = p.dtype
            if want != "any" and a.dtype != getattr(torch, want):
                raise TypeError(f"{what} expects a {want} tensor, got {str(a.dtype).replace('torch.', '')}; "
                                f"convert it with .to(torch.{want})")
            if a.device.type != device.type:
                raise ValueError(f"{what} expects a tensor on '{device.type}' (this module runs on the "
                                 f"{'GPU' if device.type == 'cuda' else 'CPU simulator'}), got one on "
                                 f"'{a.device.type}'; move it with .to(m.device)")
            if not a.is_contiguous():
                raise ValueError(f"{what} expects a contiguous tensor (kernels index raw memory), got strides "
                                 f"{tuple(a.stride())} for shape {tuple(a.shape)}; pass .contiguous()")
            width = VECTOR_WIDTH.get(p.base, 1)
            if width > 1:
                if a.numel() % width:
                    raise ValueError(f"{what} views the tensor as {p.base}: its numel ({a.numel()}) must be a "
                                     f"multiple of {width}")
                align = a.element_size() * width
                if a.numel() and a.data_ptr() % align:
                    raise ValueError(f"{what} needs {align}-byte alignment for {p.base} loads; this tensor "
                                     "starts at an unaligned offset (a slice?); pass .clone()")
            out.append(a)
        else:
            ctype = SCALAR_CTYPES[p.base]
            if isinstance(a, torch.Tensor):
                raise TypeError(f"{what} is a scalar; got a tensor (pass a Python number, e.g. x.numel())")
            if ctype in ("c_float", "c_double"):
                if not isinstance(a, numbers.Real):
                    raise TypeError(f"{what} expects a number, got {type(a).__name__}")
                out.append(float(a))
            elif ctype == "c_bool":
                if not isinstance(a, (bool, numbers.Integral)):
                    raise TypeError(f"{what} expects a bool, got {type(a).__name__}")
                out.append(bool(a))
            else:
                if isinstance(a, bool) or not isinstance(a, numbers.Integral):
                    raise TypeError(f"{what} expects an integer, got {type(a).__name__}")
                bits = _INT_LIMITS[ctype]
                lo = 0 if ctype.startswith(("c_u", "c_size")) else -(1 << bits)
                if not lo <= int(a) < (1 << bits):
                    raise ValueError(f"{what}: {int(a)} does not fit in {p.base}")
                out.append(int(a))
    return out


def arg_plan(la: Launcher) -> tuple:
    """What :func:`fast_check_args` checks of each parameter of ``la``, worked out once per launcher:
    ``("t", torch dtype or None for any, vector width)`` for a pointer, ``("f",)``, ``("b",)`` or
    ``("i", low, high)`` for a scalar."""
    import torch

    plan = []
    for p in la.params:
        if p.pointer:
            plan.append(("t", None if p.dtype == "any" else getattr(torch, p.dtype), VECTOR_WIDTH.get(p.base, 1)))
            continue
        ctype = SCALAR_CTYPES[p.base]
        if ctype in ("c_float", "c_double"):
            plan.append(("f",))
        elif ctype == "c_bool":
            plan.append(("b",))
        else:
            bits = _INT_LIMITS[ctype]
            plan.append(("i", 0 if ctype.startswith(("c_u", "c_size")) else -(1 << bits), 1 << bits))
    return tuple(plan)


def fast_check_args(plan: tuple, args: tuple, cuda: bool) -> list | None:
    """The checks of :func:`check_args` for the common case, from ``arg_plan``: the ready arguments, or None
    when any check fails or a value is of an unusual type (then ``check_args`` says what is wrong).

    A training step calls launchers hundreds of times: the full check with its messages prepared cost about
    4 us per argument, this one well under 1 us."""
    import torch

    if len(args) != len(plan):
        return None
    out = []
    for spec, a in zip(plan, args, strict=True):
        kind = spec[0]
        if kind == "t":
            if (not isinstance(a, torch.Tensor) or (spec[1] is not None and a.dtype != spec[1])
                    or not (a.is_cuda if cuda else a.device.type == "cpu") or not a.is_contiguous()):
                return None
            if spec[2] > 1 and (a.numel() % spec[2] or (a.numel() and a.data_ptr() % (a.element_size() * spec[2]))):
                return None
            out.append(a)
        elif kind == "i":
            if type(a) is not int or not spec[1] <= a < spec[2]:
                return None
            out.append(a)
        elif kind == "f":
            if type(a) is not float and type(a) is not int:
                return None
            out.append(float(a))
        else:
            if type(a) is not bool:
                return None
            out.append(a)
    return out


# ----------------------------------------------------------------------------------------------------
# The cuda backend
# ----------------------------------------------------------------------------------------------------


def _cuda_trampolines(launchers: list[Launcher]) -> str:
    """``extern "C"`` wrappers ctypes can call; each returns the launch's ``cudaGetLastError()``."""
    out = ["\n// ---- generated by cudacourse.loader: one C entry point per launcher ----",
           "#include <cuda_runtime.h>"]
    for la in launchers:
        params = ", ".join(f"{'const ' if p.const else ''}{p.base}{'*' if p.pointer else ''} a{i}"
                           for i, p in enumerate(la.params))
        call = ", ".join(f"a{i}" for i in range(len(la.params)))
        out.append(f'extern "C" int cc_entry_{la.name}({params}) {{\n'
                   f"    (void)cudaGetLastError();\n    {la.name}({call});\n"
                   f"    return (int)cudaGetLastError();\n}}")
    out.append('extern "C" const char* cc_error_string(int e) { return cudaGetErrorString((cudaError_t)e); }')
    # for the GPU worker (cudacourse/gpu_worker.py): buffers of the checking process through CUDA IPC
    out.append('extern "C" int cc_ipc_open(const char* h, void** p) { cudaIpcMemHandle_t m; '
               'for (int i = 0; i < 64; ++i) m.reserved[i] = h[i]; '
               'return (int)cudaIpcOpenMemHandle(p, m, cudaIpcMemLazyEnablePeerAccess); }')
    out.append('extern "C" int cc_ipc_close(void* p) { return (int)cudaIpcCloseMemHandle(p); }')
    out.append('extern "C" int cc_sync() { return (int)cudaDeviceSynchronize(); }')
    return "\n".join(out) + "\n"


def build_cuda(source: str, path: str, launchers: list[Launcher]) -> Path:
    """Compile a kernel-only file for the GPU; return the shared library (no torch import while grading: the
    grader's build workers call this with nvcc alone)."""
    trampolines = _cuda_trampolines(launchers)
    text = f'#line 1 "{path}"\n{source}\n{trampolines}'
    arch = cuda_arch()
    # the key leaves out the file's folder: copies of a file (the grader's slots) share one build; a compile
    # error is never cached, so its message always names the file being built
    key = buildcache.content_key("cuda-v4", source, trampolines, arch, nvcc_path() or "",
                                 buildcache.local_headers(path))

    # the file's own folder for its local headers (the build runs elsewhere); cuBLAS linked where it is used
    cflags = ["-O3", "-lineinfo", *([f"-I{Path(path).parent}"] if Path(path).is_file() else []),
              # load_inline adds torch's -D__CUDA_NO_HALF_OPERATORS__ (and the conversions/bfloat16/half2 ones),
              # which only matter next to torch headers; a kernel-only file gets plain nvcc's __half/bf16 API, as
              # on the simulator and everywhere else people compile CUDA
              *(f"-U__CUDA_NO_{m}__" for m in ("HALF_OPERATORS", "HALF_CONVERSIONS", "BFLOAT16_CONVERSIONS",
                                                "HALF2_OPERATORS"))]
    ldflags = ["-lcublas"] if re.search(r'#\s*include\s*[<"]cublas', source) else []

    def build(d: Path) -> None:
        name = f"cc_{key}"
        if uses_gpu_worker("cuda"):  # load_inline would also dlopen the library here, in the checking process
            _nvcc_shared(text, d / f"{name}.so", cflags + ldflags)
            (d / "library").write_text(f"{name}.so")
            return
        from torch.utils import cpp_extension

        saved = os.environ.get("TORCH_CUDA_ARCH_LIST")
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch  # (load_inline reads the architecture from there)
        try:
            cpp_extension.load_inline(
                name=name, cpp_sources=[""], cuda_sources=[text], no_implicit_headers=True,
                is_python_module=False, build_directory=str(d), extra_cuda_cflags=cflags,
                extra_ldflags=ldflags, verbose=False)
        except TypeError:  # a torch without no_implicit_headers: call nvcc directly, same result
            _nvcc_shared(text, d / f"{name}.so", cflags + ldflags)
        except RuntimeError as e:
            log = str(e)
            for f in d.glob("*.log"):
                log += f.read_text(errors="replace")
            raise compile_error(log, path) from None
        finally:
            if saved is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = saved
        (d / "library").write_text(f"{name}.so")

    d = buildcache.cached("cuda", key, build)
    return d / (d / "library").read_text()


def cuda_arch() -> str:
    """The architecture kernel files are built for: ``$TORCH_CUDA_ARCH_LIST`` if set, else this GPU's compute
    capability, with the ``a`` suffix from 9.0 on (``9.0a``: Hopper's wgmma and TMA exist only in sm_90a code).
    Asked of the driver (``gpuinfo.arch``), or of torch where the driver's library cannot be loaded."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if (fast := gpuinfo.arch()) is not None:
        return fast
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}{'a' if major >= 9 else ''}"


def _nvcc_shared(text: str, out: Path, flags: list[str]) -> None:
    """nvcc straight to a shared library, for :func:`cuda_arch` (nothing is loaded here)."""
    src = out.with_suffix(".cu")
    src.write_text(text)
    archs = [a.split("+")[0].replace(".", "") for a in cuda_arch().replace(";", " ").split() if a[0].isdigit()]
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    cmd = [nvcc_path() or "nvcc", *flags, "-std=c++17", *gencode, "-shared", "-Xcompiler", "-fPIC",
           str(src), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise compile_error(r.stdout + r.stderr, str(src))


class _CudaLibrary:
    """A built kernel file on the GPU, called through ctypes with device pointers."""

    def __init__(self, so: Path, launchers: list[Launcher], timeout_s: float) -> None:
        self.lib = ctypes.CDLL(str(so))
        self.timeout_s = timeout_s
        self.lib.cc_error_string.restype = ctypes.c_char_p
        self.entries = {}
        for la in launchers:
            fn = getattr(self.lib, f"cc_entry_{la.name}")
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p if p.pointer else getattr(ctypes, SCALAR_CTYPES[p.base])
                           for p in la.params]
            self.entries[la.name] = fn

    def call(self, la: Launcher, args: list, sync: bool) -> None:
        import torch

        cargs = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
        err = self.entries[la.name](*cargs)
        if err:
            msg = self.lib.cc_error_string(err).decode()
            raise LaunchError(f"{la.name}(): a launch failed with '{msg}' (error {err}). Check the grid and "
                              "block sizes (at most 1024 threads per block, grid > 0) and the shared memory "
                              "size.", kernel=la.name)
        if sync:
            _wait_gpu(la.name, self.timeout_s)


def _wait_gpu(name: str, timeout_s: float) -> None:
    """Wait for the GPU, turning a hang into KernelTimeout and a sticky error into KernelError."""
    import torch

    ev = torch.cuda.Event()
    ev.record()
    deadline = time.monotonic() + timeout_s
    # Poll at once, then back off from 20 us to 1 ms: a short kernel is seen finished within microseconds
    # (a fixed 0.5 ms sleep cost every short launch half a millisecond), a long one costs little CPU.
    pause = 0.0
    try:
        while not ev.query():
            if pause:
                time.sleep(pause)
            pause = min(max(2 * pause, 2e-5), 1e-3)
            if time.monotonic() > deadline:
                raise KernelTimeout(
                    f"{name}(): the GPU was still running after {timeout_s:g} s (an endless loop, or a "
                    "spin-wait on another block?). The kernel cannot be stopped from this process: restart "
                    "it (notebook: Kernel > Restart) and run the call on backend='sim' to see where it "
                    "hangs.", kernel=name)
        torch.cuda.synchronize()
    except RuntimeError as e:
        raise KernelError(
            f"{name}(): the GPU reported '{e}'. The CUDA context is now unusable in this process: restart it "
            "(notebook: Kernel > Restart). Run the same call with backend='sim' for the file and line.",
            kernel=name) from None


# ----------------------------------------------------------------------------------------------------
# Modules
# ----------------------------------------------------------------------------------------------------


class Module:
    """A loaded kernel file. Attributes are its launchers; ``backend`` and ``device`` say where it runs."""

    _cc_local_only = True  # never handed to a worker's code (workers/exports.py): wrap its launchers instead

    def __init__(self, source: str, path: str, functions: list[str], *, backend: str = "auto",
                 check: bool | None = None, timeout_s: float = 10.0, profile: bool | str = False) -> None:
        self.backend = backend_name(backend)
        self.profile = profile
        self.device = device_for(self.backend)
        self.path = path
        self.check = True if check is None else bool(check)
        self.timeout_s = timeout_s
        self.sync = True
        self.torch_route = uses_torch(source)
        self._fns: dict[str, Any] = {}
        if profile:
            from cudacourse.profile import require_sim

            require_sim(self.backend, path, functions, self.torch_route)
        if self.torch_route:
            self._load_torch(source, path, functions)
            return
        try:
            self.launchers = {f: launcher(source, f) for f in functions}
        except SignatureError as e:
            raise ValueError(f"{os.path.basename(path)}: {e}") from None
        las = list(self.launchers.values())
        t0 = time.perf_counter()
        if self.backend == "cuda" and uses_gpu_worker(self.backend):
            from cudacourse.workers.gpu import GpuWorker

            self._lib = GpuWorker(build_cuda(source, path, las), las, timeout_s, settings.current().confine or "")
            _GPU_WORKERS.add(self._lib)
        elif self.backend == "cuda":
            self._lib = _CudaLibrary(build_cuda(source, path, las), las, timeout_s)
        else:
            from cudacourse.sim import SimLibrary

            self._lib = SimLibrary.build(source, path, las, checked=self.check, timeout_s=timeout_s, profile=profile)
        self.build_s = time.perf_counter() - t0

    def _load_torch(self, source: str, path: str, functions: list[str]) -> None:
        t0 = time.perf_counter()
        confine = settings.current().confine
        if confine is not None:  # grading: built and loaded in a confined worker, never in this process
            from cudacourse.workers.torch import TorchWorker

            self._lib = TorchWorker.extension(source, path, functions, checked=self.check, timeout_s=self.timeout_s,
                                              confine=confine, backend=self.backend)
            self.build_s = time.perf_counter() - t0
            self._fns.update({f: self._lib.function(f) for f in functions})
            return
        if self.backend == "cuda":
            mod = build_torch_cuda(source, path, functions)
        else:
            from cudacourse.sim import build_torch_extension

            mod = build_torch_extension(source, path, functions, checked=self.check)
        self.build_s = time.perf_counter() - t0
        for f in functions:
            self._fns[f] = getattr(mod, f)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("launchers",):
            raise AttributeError(name)
        if name in self._fns:
            return self._fns[name]
        la = self.__dict__.get("launchers", {}).get(name)
        if la is None:
            raise AttributeError(f"{os.path.basename(self.path)} exposes no function '{name}' "
                                 f"(loaded: {', '.join(self.functions()) or 'none'})")

        plan, on_cuda = arg_plan(la), self.device.type == "cuda"

        def call(*args: Any) -> None:
            __tracebackhide__ = True  # pytest shows the learner's test line, not this harness frame
            checked = fast_check_args(plan, args, on_cuda)
            if checked is None:  # something is off (or unusual): the full check, with its message
                checked = check_args(la, args, self.device)
            if self.backend == "cuda":
                self._lib.call(la, checked, self.sync and _no_sync_depth == 0)
            else:
                self._lib.call(la.name, checked)

        call.__name__ = name
        call.__doc__ = f"{la.signature()}  [{os.path.basename(self.path)}:{la.line}, backend={self.backend}]"
        self._fns[name] = call
        return call

    def profile_report(self, trace: bool = False) -> Any:
        """The profile of the last call (``cc.load(..., profile=True)`` on the simulator): a ``ProfileReport``;
        ``trace=True`` also keeps the recorded accesses for ``cudacourse.plot``'s pictures."""
        from cudacourse.profile import report

        return report(self.__dict__.get("_lib"), self.path, trace)

    def functions(self) -> list[str]:
        """Names this module exposes."""
        return sorted(set(self._fns) | set(self.__dict__.get("launchers", {})))

    def close(self) -> None:
        """Release the simulator worker, if any."""
        lib = self.__dict__.get("_lib")
        if lib is not None and hasattr(lib, "close"):
            lib.close()

    def __repr__(self) -> str:
        return f"<cudacourse.Module {os.path.basename(self.path)} backend={self.backend} {self.functions()}>"


def _torch_declarations(source: str, functions: list[str]) -> str:
    """C++ declarations of the torch-route functions, taken from their definitions in the .cu file."""
    found = {name: (prefix, params) for prefix, name, params, _ in find_functions(source)}
    decls = []
    for f in functions:
        if f not in found:
            raise ValueError(f"no function '{f}' defined at the top level of this file")
        prefix, params = found[f]
        decls.append(f"{prefix} {f}({' '.join(params.split())});")
    return "\n".join(decls)


def build_torch_cuda(source: str, path: str, functions: list[str]) -> Any:
    """Build a torch-route file with ``load_inline`` through the course's build cache; return the module.

    The same cache as every other build (content key, lock, ``DONE`` marker): an interrupted build is
    never reused, and a second process waits for the first instead of building again.
    """
    import importlib.machinery
    import importlib.util

    from torch.utils import cpp_extension

    key = buildcache.content_key("torch-cuda-v2", source, ",".join(functions), buildcache.local_headers(path))
    name = f"cc_torch_{key}"

    built: dict[str, Any] = {}

    def build(d: Path) -> None:
        try:
            built["module"] = cpp_extension.load_inline(
                name=name, cpp_sources=[_torch_declarations(source, functions)],
                cuda_sources=[f'#line 1 "{path}"\n' + source], functions=functions, build_directory=str(d),
                extra_cuda_cflags=["-O3"], verbose=False)
        except RuntimeError as e:
            raise compile_error(str(e), path) from None

    so = buildcache.cached("torch-cuda", key, build) / f"{name}.so"
    if "module" in built:  # built (and imported) by this call
        return built["module"]
    loader = importlib.machinery.ExtensionFileLoader(name, str(so))
    spec = importlib.util.spec_from_file_location(name, str(so), loader=loader)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    loader.exec_module(mod)
    return mod


def exposed_functions(text: str) -> list[str]:
    """Names a file offers Python: its launchers, or for a torch-route file its top-level host functions."""
    if uses_torch(text):
        return [n for pre, n, _, _ in find_functions(text)
                if "__global__" not in pre and "__device__" not in pre and "static" not in pre]
    return list(find_launchers(text))


def load(source: str | os.PathLike, functions: list[str] | str | None = None, *, backend: str = "auto",
         check: bool | None = None, timeout_s: float = 10.0, profile: bool | str = False) -> Module:
    """Build a CUDA file (a path, or the source text itself) and return its launchers as a ``Module``.

    ``functions`` names the launchers to expose (default: every launcher in the file). ``check`` selects
    the simulator's flavour (checked by default; ``False`` is the fast mode) and is ignored on cuda.
    ``profile=True`` (simulator only) records memory-traffic counters of every call, read afterwards with
    ``m.profile_report()`` (see ``cudacourse.profile``; ``profile="branches"`` also counts active lanes per
    branch); on cuda it raises with the Nsight Compute command.
    Raises ``CompileError`` for a file that does not build.
    """
    p = Path(source) if isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and source.endswith((".cu", ".cuh", ".cpp"))) else None
    if p is not None:
        if not p.exists():
            raise FileNotFoundError(f"no such CUDA file: {p}")
        text, path = p.read_text(), str(p.resolve())
    else:
        text, path = str(source), "<source>.cu"
    if isinstance(functions, str):
        functions = [functions]
    if functions is None:
        functions = exposed_functions(text)
    return Module(text, path, list(functions), backend=backend, check=check, timeout_s=timeout_s, profile=profile)


# ----------------------------------------------------------------------------------------------------
# Lessons
# ----------------------------------------------------------------------------------------------------


def import_file(path: str | os.PathLike, name: str | None = None) -> types.ModuleType:
    """Import a Python file by its path, once per process (a lesson's ``decoder.py``, ``bench.py``, ...).

    The module is kept in ``sys.modules`` under ``name`` (default: from the file's name and path) and put
    there before it runs, since dataclasses look their module up while the class is built. A file that
    raises while importing is not kept.
    """
    path = Path(path)
    name = name or f"cc_{path.stem}_{abs(hash(str(path)))}"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path} (not a Python file?)")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    return mod


def lesson_dir(name: str, impl: str | None = None) -> Path:
    """Folder whose kernel files ``lesson(name)`` loads.

    The lesson must be declared in the course model (``lessons/NAME/lesson.toml``). A submission being
    graded (settings ``submission``, set by the grader) wins: DIR/lessons/NAME. Otherwise ``impl``
    (default: the settings' impl, ``student`` unless changed) picks ``lessons/`` or ``solutions/``.
    """
    st = settings.current()
    try:
        info = course_model(st.root).lesson(name)
    except CourseError as e:
        raise ValueError(str(e)) from None
    if st.submission is not None:
        return st.submission / "lessons" / info.id
    impl = impl or st.impl
    if impl not in settings.IMPLS:
        raise ValueError(f"impl must be 'student' or 'solution', got {impl!r}")
    return course_model(st.root).kernel_dir(info.id, impl)


class Lesson:
    """The launchers of every kernel file of a lesson, built lazily, rebuilt when a file changes.

    ``m.relu_v1_scalar(...)`` finds the file that defines it, builds it on first use (so a broken file
    costs only the functions in it) and rebuilds it after an edit, which makes the notebook loop
    edit -> re-run cell.
    """

    _cc_local_only = True  # never handed to a worker's code: its module(path) would read any file (workers/exports.py)

    def __init__(self, name: str, *, impl: str | None = None, backend: str = "auto", check: bool | None = None,
                 timeout_s: float = 10.0) -> None:
        self.name = name
        self.dir = lesson_dir(name, impl)
        self.backend = backend_name(backend)
        self.device = device_for(self.backend)
        self._opts = dict(backend=self.backend, check=check, timeout_s=timeout_s)
        self._modules: dict[Path, tuple[str, Module]] = {}
        self._bound: dict[str, tuple[Path, tuple[int, int] | None, Any]] = {}
        self._names: dict[Path, tuple[tuple[int, int] | None, list[str]]] = {}

    def files(self) -> list[Path]:
        """The lesson's kernel files (``files`` and ``torch_files`` of its lesson.toml) that exist."""
        info = course_model(settings.current().root).lesson(self.name)
        return [self.dir / f for f in info.kernel_files if (self.dir / f).is_file()]

    def _index(self) -> dict[str, Path]:
        idx: dict[str, Path] = {}
        for f in self.files():
            stamp = _stamp(f)
            cached = self._names.get(f)
            if cached is None or cached[0] != stamp:
                self._names[f] = cached = (stamp, exposed_functions(f.read_text()))
            for n in cached[1]:
                idx.setdefault(n, f)
        return idx

    def module(self, file: str | Path) -> Module:
        """The built module of one kernel file (rebuilt if its content changed)."""
        f = self.dir / file if not Path(file).is_absolute() else Path(file)
        text = f.read_text()
        cached = self._modules.get(f)
        if cached and cached[0] == text:
            return cached[1]
        if cached:
            cached[1].close()
        failed = _FAILED_BUILDS.get(str(f))
        if failed is not None and failed[0] == text:
            # Shown in full once per process; under pytest every later case it blocks says one line.
            raise (repeated(failed[1]) if "PYTEST_CURRENT_TEST" in os.environ else failed[1]) from None
        stopped = _stopped_builds().get(f"{self.name}/{f.name}")
        try:
            if stopped is not None:
                raise build_stopped(str(f), stopped)
            mod = load(f, None, **self._opts)
        except CompileError as e:
            _FAILED_BUILDS[str(f)] = (text, e)
            raise
        self._modules[f] = (text, mod)
        return mod

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        # Fast path: the bound function, still valid while its file is unchanged (one stat per call, so a
        # benchmark loop pays microseconds, and an edit in the notebook is picked up on the next call).
        hit = self._bound.get(name)
        if hit is not None:
            f, stamp, fn = hit
            if _stamp(f) == stamp:
                return fn
        idx = self._index()
        if name not in idx:
            raise AttributeError(f"lesson {self.name} ({self.dir}) has no launcher '{name}' "
                                 f"(found: {', '.join(sorted(idx)) or 'none'})")
        f = idx[name]
        stamp = _stamp(f)
        fn = getattr(self.module(f), name)
        self._bound[name] = (f, stamp, fn)
        return fn

    def functions(self) -> list[str]:
        """Every launcher of the lesson."""
        return sorted(self._index())

    def __repr__(self) -> str:
        return f"<cudacourse.Lesson {self.name} from {self.dir} backend={self.backend}>"


_FAILED_BUILDS: dict[str, tuple[str, CompileError]] = {}  # path -> (text, error) of files that did not build


def _stopped_builds() -> dict[str, float]:
    """"lesson/file" -> seconds, of the files whose build the grader stopped (``UNBUILDABLE_ENV``)."""
    out = {}
    for item in os.environ.get(UNBUILDABLE_ENV, "").split(";"):
        name, _, secs = item.partition("=")
        if name and secs:
            with contextlib.suppress(ValueError):
                out[name] = float(secs)
    return out


def _stamp(f: Path) -> tuple[int, int] | None:
    try:
        st = f.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


_LESSONS: dict[tuple, Lesson] = {}


def lesson(name: str, *, impl: str | None = None, backend: str = "auto", check: bool | None = None,
           timeout_s: float = 10.0) -> Lesson:
    """The lesson's kernels: ``cc.lesson("02_reduce").reduce_v1_interleaved(x, out, n)``.

    Files come from ``lessons/`` or ``solutions/`` (``impl`` or ``$CUDA_COURSE_IMPL``), or from a
    submission being graded (``$CUDA_COURSE_SUBMISSION``). Instances are shared per settings, so built
    modules are reused across calls in one process.
    """
    key = (name, str(lesson_dir(name, impl)), backend_name(backend), check, timeout_s)
    if key not in _LESSONS:
        _LESSONS[key] = Lesson(name, impl=impl, backend=backend, check=check, timeout_s=timeout_s)
    return _LESSONS[key]
