"""The torch worker: where a learner's ``torch::Tensor`` extension (or Python module) runs while grading.

While grading (``settings.confine`` set) the process that compares outputs and records verdicts never loads
learner code (DESIGN.md "Trust boundary", docs/CONFINEMENT.md). Kernel-only files already run in the
simulator's worker (``sim.SimLibrary``) or the GPU worker (``workers/gpu.py``); this module does the same for
the two kinds of learner code that need torch itself:

- a torch-route file (a lesson's ``torch_files``, e.g. ``lessons/01_relu/relu_torch.cu``), which
  ``load_inline`` would otherwise build and ``dlopen`` into the checking process, where a static
  constructor or an ``atexit`` handler in it could append "passed" records to the grader's results;
- a Python exercise file (:meth:`TorchWorker.python`, :func:`hosted`), imported in the worker instead of the
  checker while grading: lesson 04's ``decoder.py`` and the Triton twins (under ``answer_guard.torch_answer_guard``
  there), lesson 06's ``train.py`` with ``decoder.py`` beside it, lesson 07's ``custom_op.py``. Objects its
  functions are given that cannot be copied (the test's kernels object, a config) cross as handles, kept for
  the worker's life: the learner's code may read their public attributes (the values are copied to it) and
  call their methods or the launchers they hand out, which run in the checking process while the call waits
  (``k.linear(...)`` is a request it serves); tensors such a call changed (a kernel's outputs, allocated by
  the learner's code) are copied back. A ``cc.Lesson`` is never handed over (its ``module(path)`` would read
  any file): tests wrap it. What the learner's code returns that cannot be copied (lesson 06's ``Ops``) stays
  in the worker as a :class:`WorkerObject`: its attributes are read there, calling it runs it there, and it
  can be passed back. :func:`backward` runs autograd there; :func:`run_beside` runs a test's own helper
  function there (sent as source), for checks that must run where the learner's module is loaded
  (``torch.library.opcheck`` and ``torch.compile`` of lesson 07's op). Code the learner's file starts in the
  worker (``custom_op.py`` calls ``cc.lesson``) runs unconfined by settings, inside the worker's sandbox.

:class:`TorchWorker` starts ``python -I workers/torch_serve.py SOCKET_FD`` (the worker's program) through the
worker channel (``workers/channel.py``: in the sandbox, nested inside the task process when that is confined
itself); what crosses the socket, and how errors come back, is ``workers/wire.py``. The worker reads the
Python installation, the course package, the file's own folder and the build caches; it writes only its
scratch folder and the build cache (``buildcache.build_root()``). It builds and loads the file there
(``sim.build_torch_extension`` for a torch-route file; ``workers/torch_serve.py``), then serves calls.

Outside grading nothing changes: the loader builds the file in-process, as before (fast, no worker).

On the cuda backend (``gpu=True``; ``TorchWorker.extension(..., backend="cuda")`` builds the file with nvcc,
``cuda_backend.build_torch_cuda``) the worker opens the GPU and owns a CUDA context of its own, and CUDA tensors
cross the same channel through host memory: the sender copies the storage span to the host, the receiver
copies it onto its device (``"device": "cuda:0"`` in the description), so the learner's function sees a CUDA
tensor with the argument's dtype, shape and strides, and the checking process gets results on its own device.
That costs a device-host-device copy per tensor and call, which no timed call pays: the two speed tasks that
time a hosted file load its kernels in the worker itself and cross the channel only outside the timed calls
(6.12's values once, 7.7's two timings), and their workers start before the GPU is theirs (a test file's
``cc_preload``, called by the plugin).
Its CUDA contexts sleep while they wait (``gpuinfo.sleep_while_waiting``), and Triton compiles into the
build cache (:func:`triton_cache_env`), shared by the grade's workers. (Exporting VMM allocations as file
descriptors, as ``workers/gpu.py`` does, would avoid the copies; legacy CUDA IPC does not work across PID
namespaces.)
"""

from __future__ import annotations

import inspect
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

from cudacourse.workers.channel import Channel, ProtocolError, WorkerDied, WorkerTimeout, keep_env
from cudacourse.workers.exports import Exports
from cudacourse.workers.wire import Decoder, Encoder, copy_back, rebuild_error, recv_message, send_message

_PROGRAM = Path(__file__).resolve().parent / "torch_serve.py"
LOAD_TIMEOUT_S = 900.0  # building a torch-route file: ~30-70 s on a 2-core machine, minutes when it is busy


class TorchWorker:
    """A learner's torch-route file (or Python module) loaded in a confined worker; calls go over a socket.

    ``TorchWorker.extension(source, path, functions)`` builds and loads a ``torch::Tensor`` file for the
    simulator; ``TorchWorker.python(path)`` imports a Python file. ``function(name)`` is a callable that
    runs ``name`` in the worker. Raises what loading raises there (``CompileError`` for a file that does
    not build) at creation.
    """

    def __init__(self, load: dict, path: str, *, timeout_s: float = 10.0, confine: str = "strict",
                 reads: list[Path] = (), gpu: bool = False) -> None:  # type: ignore[assignment]
        self._load = load
        self.gpu = gpu  # the worker opens the GPU (its own CUDA context): CUDA tensors cross, through host memory
        self.path = path
        self.timeout_s = timeout_s
        self.confine = confine
        self._reads = [Path(p) for p in reads]
        self._exports = Exports()  # this process's objects the worker may call back (the test's kernels object)
        self.generation = 0  # counts worker starts: an object held by a stopped worker is gone
        self._chan = Channel("cctorch-")
        self._start()

    @classmethod
    def extension(cls, source: str, path: str, functions: list[str], *, checked: bool = True,
                  timeout_s: float = 10.0, confine: str = "strict", backend: str = "sim") -> TorchWorker:
        """A torch-route file built and loaded in the worker: for the simulator (``sim.build_torch_extension``)
        or, ``backend="cuda"``, with nvcc (``cuda_backend.build_torch_cuda``) in a worker that owns a CUDA context."""
        if backend not in ("sim", "cuda"):
            raise ValueError(f"backend must be 'sim' or 'cuda', not {backend!r}")
        load = {"op": "load-torch", "source": source, "path": path, "functions": list(functions),
                "checked": bool(checked), "backend": backend}
        return cls(load, path, timeout_s=timeout_s, confine=confine, gpu=backend == "cuda",
                   reads=[Path(path).parent] if os.path.isfile(path) else [])

    @classmethod
    def python(cls, path: str | os.PathLike[str], *, timeout_s: float = 10.0, confine: str = "strict",
               guard: bool = False, gpu: bool = False, also: list[str | os.PathLike[str]] = ()  # type: ignore[assignment]
               ) -> TorchWorker:
        """A Python file imported in the worker (its folder readable there), and the files ``also`` names after it
        (lesson 06's train.py with lesson 04's decoder.py, which its ``Ops`` is given; :meth:`module` reaches
        each). ``guard``: every call runs under ``screens.torch_answer_guard`` for these files (a lesson's Python
        exercise files). ``gpu``: the worker may use the GPU (pass it when CUDA tensors cross)."""
        paths = [str(Path(f).resolve()) for f in (path, *also)]
        return cls({"op": "load-python", "paths": paths, "guard": paths if guard else []}, paths[0],
                   timeout_s=timeout_s, confine=confine, reads=sorted({Path(f).parent for f in paths}), gpu=gpu)

    def module(self, path: str | os.PathLike[str] | None = None) -> RemoteModule:
        """A loaded module as seen from here (the first file, or ``path``, one of the ``also`` files of
        :meth:`python`): ``mod.name(...)`` calls ``name`` in the worker, and passing ``mod`` to a call there
        passes the module itself."""
        paths = self._load.get("paths", [self.path])
        key = paths[0] if path is None else str(Path(path).resolve())
        if key not in paths:
            raise ValueError(f"{path} is not loaded in this worker (loaded: {', '.join(paths)})")
        return RemoteModule(self, paths.index(key) + 1, key)

    # ---- the process ------------------------------------------------------------------------------

    def _start(self) -> None:
        from cudacourse import buildcache, settings
        from cudacourse.sandbox import Limits, learner_memory

        st = settings.current()
        # TRITON_INTERPRET: a Triton twin hosted here runs on Triton's CPU interpreter (cudacourse/triton_track.py)
        # settings.WORKER_KNOBS: the simulator's thread order, and (set by the plugin while grading on a GPU) one
        # config per kernel for a Triton twin hosted here instead of autotuning them all (which cost a solution
        # grade 30 s on the H100 while it was left out)
        env = keep_env(("PATH", "LANG", "LC_ALL", "CXX", "CC", "CUDAHOSTCXX", "CUDA_HOME", "MAX_JOBS",
                        "OMP_NUM_THREADS", "LD_LIBRARY_PATH", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES",
                        "CUDA_DEVICE_ORDER", "TORCH_CUDA_ARCH_LIST", *settings.WORKER_KNOBS))
        env.update(settings.to_env(st))
        # Inside, the worker's own sandbox is the confinement: what the learner's code starts there (lesson 07's
        # custom_op.py calls cc.lesson, which loads the kernels) inherits its Landlock domain, namespaces and
        # limits, and is stopped with it. Kept, the setting made that code start sandboxes of its own, which a
        # sandbox two levels deep cannot make (unshare: EPERM), and on a GPU a third process per call.
        env.pop(settings.ENV["confine"], None)
        if self.gpu:
            env.update(triton_cache_env())
        # (build_seed: only in the grader's worker for files identical to the instructor's, which builds them here)
        root = _PROGRAM.parents[2]  # the checkout (while grading, the staged harness): course model and package
        reads = [*self._reads, root, *(p for p in (st.build_shared, st.build_seed) if p)]
        # -X pycache_prefix: -I ignores PYTHONPYCACHEPREFIX, where a grade keeps the bytecode of packages that ship
        # none (grading.processes.bytecode_cache: on the H200 machine the grade's torch workers then used 147-148
        # CPU-s instead of 187-218, results/nvidia-h200/grade_time_2026-11-29c/)
        pyc = ["-X", f"pycache_prefix={sys.pycache_prefix}"] if sys.pycache_prefix else []
        self._chan.start(
            # -B: -I ignores PYTHONDONTWRITEBYTECODE, and a .pyc written into the staged harness fails the task
            lambda fd: [sys.executable, "-I", "-B", *pyc, str(_PROGRAM), str(fd), *(["--gpu"] if self.gpu else [])],
            env=env, read_only=[p for p in reads if p.exists()], read_write=[buildcache.build_root()],
            limits=Limits(memory=learner_memory(env, torch=True), cpu_s=None),  # (none on a GPU machine)
            gpu=self.gpu, confine=self.confine)
        self.generation += 1
        try:
            self._ask(self._load, [], "loading", LOAD_TIMEOUT_S)
        except BaseException:
            self._chan.kill()
            raise

    def _ask(self, header: dict, blobs: list[Any], what: str, timeout: float) -> tuple[dict, bytearray]:
        """Send a request and wait for its answer; a dead, silent or nonsensical worker is a course error."""
        from cudacourse.errors import KernelError, KernelTimeout

        __tracebackhide__ = True
        name = os.path.basename(self.path)

        def receive(sock: Any, timeout: float) -> tuple[dict, bytearray]:
            while True:
                reply, payload = recv_message(sock, time.monotonic() + timeout)
                if "req" not in reply:
                    return reply, payload
                # the learner's code calls back an object we exported (the test's kernels): run it here,
                # answer, and wait again (the time limit applies to the worker's own share)
                answer, extra = self._exports.serve(reply, payload)
                sock.settimeout(timeout)
                send_message(sock, answer, extra)

        try:
            reply, payload = self._chan.ask(lambda sock: send_message(sock, header, blobs), receive, timeout)
        except WorkerTimeout:
            self._chan.kill()
            self._chan.forward_output()
            raise KernelTimeout(f"{what} ({name}): the worker running your code was still busy after {timeout:g} s "
                                "(an endless loop?); it was stopped, and the next call starts a fresh one.",
                                kernel=header.get("name")) from None
        except WorkerDied as e:
            rc = e.status
            self._chan.kill()
            self._chan.forward_output()
            how = f"was killed by signal {-rc}" if isinstance(rc, int) and rc < 0 else f"ended (exit status {rc})"
            raise KernelError(f"{what} ({name}): the process running your code {how} before answering: a crash "
                              "(e.g. abort(), a wild pointer) or an exit(). The next call starts a fresh one.",
                              kernel=header.get("name")) from None
        except ProtocolError as e:
            self._chan.kill()
            raise KernelError(f"{what} ({name}): the worker answered nonsense ({e}); it was stopped.",
                              kernel=header.get("name")) from None
        self._chan.forward_output()
        if reply.get("ok") is not True:
            raise rebuild_error(reply.get("error"), f"{header.get('name') or what}()")
        return reply, payload

    def _held_handle(self, v: Any) -> int | None:
        """The worker's handle of ``v``, an object it holds (a WorkerObject, a RemoteModule of this worker)."""
        from cudacourse.errors import KernelError

        if isinstance(v, RemoteModule):
            if v.worker is not self:
                raise TypeError(f"{v.__file__} is loaded in another worker: it cannot be passed to this one")
            return v._handle
        if isinstance(v, WorkerObject):
            if v._worker is not self:
                raise TypeError(f"{v!r} lives in another worker: it cannot be passed to this one")
            if v._generation != self.generation:
                raise KernelError(f"{v!r} was made by a worker that has been stopped since (a crash or a time-out "
                                  "of an earlier call): make it again", kernel=None)
            return v._handle
        return None

    def _held_object(self, h: int) -> WorkerObject:
        return WorkerObject(self, h, self.generation)

    # ---- calls ------------------------------------------------------------------------------------

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run function ``name`` of the (first) loaded module in the worker and return its result here."""
        __tracebackhide__ = True
        return self.invoke(1, name, args, kwargs)

    def invoke(self, target: int | WorkerObject, name: str | None, args: tuple | list, kwargs: dict, *,
               backward: Any = None) -> Any:
        """Call ``target.name(*args, **kwargs)`` in the worker (``target`` itself when ``name`` is None): ``target``
        is a loaded module's handle or a :class:`WorkerObject`. Arguments are copied there and those the call
        changed are copied back; a result that cannot be copied stays there and comes back as a WorkerObject.
        ``backward``: see :func:`backward`."""
        __tracebackhide__ = True
        self._ensure_running()  # (before the target and arguments: see _held_handle)
        handle = self._held_handle(target) if isinstance(target, WorkerObject) else target
        return self._exchange({"op": "call", "name": name, "target": handle}, args, kwargs, f"{name or 'a call'}()",
                              backward)

    def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn``, a module-level function of the caller's own file (a test's helper), in the worker: its
        source is sent there and it is called with the arguments, as :meth:`invoke` calls (a RemoteModule of
        this worker passes the learner's module itself). For checks that must run where the learner's code
        is loaded: ``torch.library.opcheck`` and ``torch.compile`` of an op registered there."""
        import textwrap

        __tracebackhide__ = True
        self._ensure_running()
        header = {"op": "run", "source": textwrap.dedent(inspect.getsource(fn)), "name": fn.__name__}
        return self._exchange(header, args, kwargs, f"{fn.__name__}() (run in the worker)")

    def attribute(self, target: WorkerObject, name: str) -> Any:
        """``target.name``, read in the worker: a value comes back copied, anything else as a WorkerObject."""
        __tracebackhide__ = True
        self._ensure_running()
        header = {"op": "getattr", "target": self._held_handle(target), "name": name}
        reply, payload = self._ask(header, [], f"reading .{name}", self.timeout_s)
        return self._result(reply, payload, [], f"reading .{name}", None)

    def _ensure_running(self) -> None:
        """A fresh worker when the last one died or was stopped (a crash, a time-out)."""
        if not self._chan.running:
            self._chan.kill()
            self._start()

    def _exchange(self, header: dict, args: tuple | list, kwargs: dict, what: str, backward: Any = None) -> Any:
        """Send a call (``header`` plus the encoded arguments) and return its result here."""
        __tracebackhide__ = True
        enc = Encoder(export=lambda v: {"remote": self._exports.export(v)}, held=self._held_handle)
        header = {**header, "args": enc.value(list(args), f"{what} argument"),
                  "kwargs": enc.value(dict(kwargs), f"{what} keyword argument")}
        if backward is not None:
            header["backward"] = enc.value(backward, "the gradient of the output")
        reply, payload = self._ask(header, enc.blobs, what, self.timeout_s)
        return self._result(reply, payload, enc.tensors, what, header.get("name"))

    def _result(self, reply: dict, payload: bytearray, sent: list[Any], what: str, kernel: str | None) -> Any:
        """The answer's value, with the arguments it changed copied back into ``sent``; a worker that answers
        nonsense is stopped."""
        from cudacourse.errors import KernelError

        try:
            copy_back(reply.get("mutated", []), payload, sent)
            return Decoder(payload, sent, remote=self._exports.get, held=self._held_object).value(reply.get("result"))
        except ProtocolError as e:
            self._chan.kill()
            raise KernelError(f"{what} ({os.path.basename(self.path)}): the worker answered nonsense ({e}); it was "
                              "stopped.", kernel=kernel) from None

    def function(self, name: str) -> RemoteFunction:
        """A callable that runs ``name`` of the (first) loaded module in the worker (what the loader's module
        exposes)."""
        return RemoteFunction(self, 1, name)

    def close(self) -> None:
        """Stop the worker and remove its folder."""
        self._chan.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


_HOSTED: dict[str, RemoteModule] = {}  # learner Python files imported in a worker: one worker per file and process


def hosted(path: str | os.PathLike[str], *, confine: str, gpu: bool, timeout_s: float, guard: bool = True,
           also: list[str | os.PathLike[str]] = ()) -> RemoteModule:  # type: ignore[assignment]
    """A learner's Python exercise file imported in a confined worker, once per file (and ``also`` files) and
    process, as grading does for lesson 04's decoder.py, the Triton twins (under the torch guard) and lesson
    06's train.py (with decoder.py: ``hosted(...).worker.module(decoder_py)``): its functions run there.
    ``gpu``: on the cuda backend (the worker gets a CUDA context of its own)."""
    key = "|".join(str(Path(f).resolve()) for f in (path, *also))
    if key not in _HOSTED:
        _HOSTED[key] = TorchWorker.python(path, confine=confine, guard=guard, timeout_s=timeout_s, gpu=gpu,
                                          also=list(also)).module()
    return _HOSTED[key]


def run_beside(mod: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(mod, *args, **kwargs)`` where the learner's module ``mod`` runs: in its worker when it is hosted (a
    RemoteModule: ``fn``, a module-level function of the test file, is sent there as source,
    :meth:`TorchWorker.run`), else here."""
    __tracebackhide__ = True
    if isinstance(mod, RemoteModule):
        return mod.worker.run(fn, mod, *args, **kwargs)
    return fn(mod, *args, **kwargs)


def triton_cache_env() -> dict[str, str]:
    """Where a GPU worker's Triton keeps what it compiles: the build cache (which the worker may write), shared by
    every worker of the grade. Its default, ``~/.triton`` under the worker's fresh scratch HOME, made each worker
    compile again what the one before it had: Triton's own C helpers and a launcher per kernel signature (gcc),
    and every kernel (Triton keys its cache by the kernel's source and options, so files never mix)."""
    from cudacourse import buildcache

    return {"TRITON_CACHE_DIR": str(buildcache.build_root() / "triton")}


class RemoteModule(types.ModuleType):
    """A module loaded in a :class:`TorchWorker`: its public names are functions that run there."""

    def __init__(self, worker: TorchWorker, handle: int = 1, path: str | None = None) -> None:
        super().__init__(Path(path or worker.path).stem)
        self.__file__ = path or worker.path
        self.worker = worker
        self._handle = handle

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return RemoteFunction(self.worker, self._handle, name)


class RemoteFunction:
    """A function of a module loaded in a :class:`TorchWorker`: calling it runs it there."""

    def __init__(self, worker: TorchWorker, handle: int, name: str) -> None:
        self.worker, self._handle, self.__name__ = worker, handle, name
        self.__doc__ = f"{name}(...)  [{os.path.basename(worker.path)}, run in a confined worker]"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return self.worker.invoke(self._handle, self.__name__, args, kwargs)


class WorkerObject:
    """An object that lives in a :class:`TorchWorker`, made there by the learner's code (lesson 06's ``Ops``):
    reading an attribute reads it there (a value comes back copied, a method or another object as a
    WorkerObject), calling it runs it there, and passing it to a call there passes the object itself."""

    def __init__(self, worker: TorchWorker, handle: int, generation: int) -> None:
        self._worker, self._handle, self._generation = worker, handle, generation

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._worker.attribute(self, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return self._worker.invoke(self, None, args, kwargs)

    def __repr__(self) -> str:
        return f"<object {self._handle} in the worker of {os.path.basename(self._worker.path)}>"


def backward(fn: Any, args: tuple | list, grad_output: Any) -> tuple[Any, list[Any]]:
    """``fn(*args)``, then autograd from the output with ``grad_output``: (the output, detached; each argument's
    gradient, or None for an argument that does not require one). Set ``requires_grad`` on the arguments whose
    gradients you want. When ``fn`` runs in a worker (a WorkerObject: a method of the learner's ``Ops``; a
    RemoteFunction: lesson 07's ``swish``),
    the forward, the backward (the learner's ``autograd.Function.backward``) and autograd itself run there, and
    the gradients are copied here; otherwise here."""
    import torch

    if isinstance(fn, WorkerObject):
        return fn._worker.invoke(fn, None, args, {}, backward=grad_output)
    if isinstance(fn, RemoteFunction):
        return fn.worker.invoke(fn._handle, fn.__name__, args, {}, backward=grad_output)
    out = fn(*args)
    torch.autograd.backward(out, grad_output)
    return out.detach(), [a.grad if isinstance(a, torch.Tensor) and a.requires_grad else None for a in args]

