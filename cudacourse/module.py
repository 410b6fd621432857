"""A loaded kernel file (``Module``) and ``load``, which builds one for the chosen backend; ``no_sync``.

``load(source, functions)`` parses the launchers' signatures, builds the file for the backend
(``backends.backend_name``) and returns a ``Module`` whose attributes are the launchers, checked before anything
runs (``arguments.py``). Where a build runs and where its code is called:

- ``cuda``: built with nvcc and called through ctypes here (``cuda_backend.py``), or in a GPU worker while
  grading (``workers/gpu.py``);
- ``sim``: built by the CPU simulator and run in its worker (``cudacourse.sim``);
- a torch-route file: built with ``load_inline`` (cuda) or the simulator's torch route, here, or in a torch
  worker while grading (``workers/torch.py``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from pathlib import Path
from typing import Any

from cudacourse import settings
from cudacourse.arguments import arg_plan, check_args, fast_check_args
from cudacourse.backends import backend_name, device_for, uses_gpu_worker
from cudacourse.cuda_backend import CudaLibrary, build_cuda, build_torch_cuda
from cudacourse.errors import CompileError, build_stopped
from cudacourse.source import SignatureError, find_functions, find_launchers, launcher, uses_torch

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


def synchronize_workers(release: bool = False) -> None:
    """Wait for the launches of every GPU worker (``release``: also copy their buffers back)."""
    for w in list(_GPU_WORKERS):
        w.synchronize(release=release)


def staged_copies(t: Any) -> list[Any]:
    """The uint8 views of the copies live GPU workers staged of tensor ``t`` (while grading, the learner's launches
    run in a worker on copies that this process's tensors reach only when a timed block ends)."""
    key = (t.data_ptr(), t.numel() * t.element_size())
    return [v for w in list(_GPU_WORKERS) if (v := w.staged_view(*key)) is not None]


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
        if self.backend == "cuda" and uses_gpu_worker(self.backend):
            from cudacourse.workers.gpu import GpuWorker

            self._lib = GpuWorker(build_cuda(source, path, las), las, timeout_s, settings.current().confine or "")
            _GPU_WORKERS.add(self._lib)
        elif self.backend == "cuda":
            self._lib = CudaLibrary(build_cuda(source, path, las), las, timeout_s)
        else:
            from cudacourse.sim import SimLibrary

            self._lib = SimLibrary.build(source, path, las, checked=self.check, timeout_s=timeout_s, profile=profile)

    def _load_torch(self, source: str, path: str, functions: list[str]) -> None:
        confine = settings.current().confine
        if confine is not None:  # grading: built and loaded in a confined worker, never in this process
            from cudacourse.workers.torch import TorchWorker

            self._lib = TorchWorker.extension(source, path, functions, checked=self.check, timeout_s=self.timeout_s,
                                              confine=confine, backend=self.backend)
            self._fns.update({f: self._lib.function(f) for f in functions})
            return
        if self.backend == "cuda":
            mod = build_torch_cuda(source, path, functions)
        else:
            from cudacourse.sim import build_torch_extension

            mod = build_torch_extension(source, path, functions, checked=self.check)
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
                self._lib.call(la, checked, _no_sync_depth == 0)
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


def exposed_functions(text: str) -> list[str]:
    """Names a file offers Python: its launchers, or for a torch-route file its top-level host functions."""
    if uses_torch(text):
        return [n for pre, n, _, _ in find_functions(text)
                if "__global__" not in pre and "__device__" not in pre and "static" not in pre]
    return list(find_launchers(text))


def _grade_verdict(p: Path) -> None:
    """Under a grade, a file whose one build the grader stopped or saw fail fails here at once, in whatever flavour a
    test asks for (a profiled build of it would take as long, or fail the same): no task process builds it again."""
    key = f"{p.parent.name}/{p.name}"
    stopped = settings.stopped_builds().get(key)
    if stopped is not None:
        raise build_stopped(str(p), stopped)
    if failed := settings.grade_build_errors().get(key):
        raise CompileError(failed, file=str(p))


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
        _grade_verdict(p)
        text, path = p.read_text(), str(p.resolve())
    else:
        text, path = str(source), "<source>.cu"
    if isinstance(functions, str):
        functions = [functions]
    if functions is None:
        functions = exposed_functions(text)
    return Module(text, path, list(functions), backend=backend, check=check, timeout_s=timeout_s, profile=profile)

