"""The torch worker: where a learner's ``torch::Tensor`` extension (or Python module) runs while grading.

While grading (``settings.confine`` set) the process that compares outputs and records verdicts never loads
learner code (DESIGN.md "Trust boundary", docs/CONFINEMENT.md). Kernel-only files already run in the
simulator's worker (``sim.SimLibrary``) or the GPU worker (``gpu_worker.py``); this module does the same for
the two kinds of learner code that need torch itself:

- a torch-route file (a lesson's ``torch_files``, e.g. ``lessons/01_relu/relu_torch.cu``), which
  ``load_inline`` would otherwise build and ``dlopen`` into the checking process, where a static
  constructor or an ``atexit`` handler in it could append "passed" records to the grader's results;
- a Python exercise file (:meth:`TorchWorker.python`, :func:`hosted`), imported in the worker instead of the
  checker while grading: lesson 04's ``decoder.py`` and the Triton twins (under ``screens.torch_answer_guard``
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

:class:`TorchWorker` starts ``python -I torch_worker.py SOCKET_FD`` through
:func:`cudacourse.sandbox.confined_popen` (nested inside the task process when that is confined
itself). The worker reads the Python installation, the course package, the file's own folder and the build
caches; it writes only its scratch folder and the build cache (``buildcache.build_root()``). It builds and
loads the file there (``sim.build_torch_extension`` for a torch-route file), then serves calls.

The channel is a UNIX socket pair. Every message, both ways, is a 12-byte frame head (header length,
payload length), a JSON header, and raw payload bytes: tensors travel as dtype, shape, strides and the raw
bytes of the storage span they cover (so a transposed view stays non-contiguous on the other side and
``TORCH_CHECK(x.is_contiguous())`` behaves as in-process); ints, floats, bools, None, strings, dtypes,
devices, and lists, tuples and string-keyed dicts of those travel in the header. Nothing from the worker is unpickled or
executed: the checking process parses JSON and copies bytes into tensors it allocates itself, after
checking every length, shape and dtype (a worker that answers nonsense is stopped). Arguments the call
changed are copied back into the caller's tensors, and a returned tensor that is a view of an argument
comes back as the same view of the caller's tensor (``return x`` stays detectable).

Errors come back as (type name, message, fields): ``RuntimeError``, ``TypeError``, ``ValueError``,
``IndexError`` and ``NotImplementedError`` (``TORCH_CHECK`` and its variants, pybind11's argument errors)
keep their type; the course's own errors (``CompileError``, ``KernelError`` and its subclasses such as
``OutOfBoundsError``) keep their class and fields, looked up by name in a fixed table; anything else becomes
a ``KernelError`` naming the type. A worker that crashes, exits or hangs (past the module's ``timeout_s``)
costs that call only: a ``KernelError`` (``KernelTimeout``) names the file, and the next call starts a fresh
worker, which loads the cached build again.

Outside grading nothing changes: the loader builds the file in-process, as before (fast, no worker).

On the cuda backend (``gpu=True``; ``TorchWorker.extension(..., backend="cuda")`` builds the file with nvcc,
``loader.build_torch_cuda``) the worker opens the GPU and owns a CUDA context of its own, and CUDA tensors
cross the same channel through host memory: the sender copies the storage span to the host, the receiver
copies it onto its device (``"device": "cuda:0"`` in the description), so the learner's function sees a CUDA
tensor with the argument's dtype, shape and strides, and the checking process gets results on its own device.
That costs a device-host-device copy per tensor and call, which no timed call pays: the two speed tasks that
time a hosted file load its kernels in the worker itself and cross the channel only outside the timed calls
(6.12's values once, 7.7's two timings), and their workers start before the GPU is theirs (a test file's
``cc_preload``, called by the plugin).
Its CUDA contexts sleep while they wait (``gpuinfo.sleep_while_waiting``), and Triton compiles into the
build cache (:func:`triton_cache_env`), shared by the grade's workers. (Exporting VMM allocations as file
descriptors, as ``gpu_worker.py`` does, would avoid the copies; legacy CUDA IPC does not work across PID
namespaces.)

This file is also the worker's program (``python -I torch_worker.py SOCKET_FD [--gpu]``).
"""

from __future__ import annotations
import __future__

import functools
import inspect
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

_THIS = Path(__file__).resolve()
_HEAD = struct.Struct("!IQ")  # header bytes, payload bytes
_MAX_HEADER = 64 << 20
_MAX_PAYLOAD = 8 << 30
_MAX_DEPTH = 32
LOAD_TIMEOUT_S = 900.0  # building a torch-route file: ~30-70 s on a 2-core machine, minutes when it is busy
_BUILTIN_ERRORS: dict[str, type[Exception]] = {
    e.__name__: e for e in (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError)}


class ProtocolError(Exception):
    """A message that does not follow the protocol (from a broken or hostile worker)."""


# ----------------------------------------------------------------------------------------------------
# Frames: head, JSON header, payload
# ----------------------------------------------------------------------------------------------------


def send_message(sock: socket.socket, header: dict, blobs: list[Any] = ()) -> None:  # type: ignore[assignment]
    """Send one frame: ``header`` (JSON) then the concatenated ``blobs`` (objects with the buffer protocol)."""
    views = [memoryview(b).cast("B") for b in blobs]
    head = json.dumps(header).encode()
    sock.sendall(_HEAD.pack(len(head), sum(v.nbytes for v in views)) + head)
    for v in views:
        if v.nbytes:
            sock.sendall(v)


def _read_exact(sock: socket.socket, n: int, deadline: float | None) -> bytearray:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def recv_message(sock: socket.socket, deadline: float | None = None) -> tuple[dict, bytearray]:
    """One frame: (header, payload). Raises ``EOFError`` (peer gone), ``TimeoutError`` (past ``deadline``,
    a ``time.monotonic()`` value) or ``ProtocolError``."""
    hlen, plen = _HEAD.unpack(bytes(_read_exact(sock, _HEAD.size, deadline)))
    if hlen > _MAX_HEADER or plen > _MAX_PAYLOAD:
        raise ProtocolError(f"a message of {hlen} + {plen} bytes is over the limits")
    try:
        header = json.loads(bytes(_read_exact(sock, hlen, deadline)))
    except ValueError as e:
        raise ProtocolError(f"the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError("the header is not a JSON object")
    return header, _read_exact(sock, plen, deadline)


# ----------------------------------------------------------------------------------------------------
# Values: what crosses the channel (tensors as dtype/shape/strides + raw bytes, never pickle)
# ----------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _dtypes() -> dict[str, Any]:
    import torch

    return {str(d).removeprefix("torch."): d for d in (
        torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int8, torch.int16,
        torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)}


def _span(shape: list[int], strides: list[int]) -> int:
    """Elements of storage a tensor of this shape and these strides covers, from its first element."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, strides, strict=True))


class Encoder:
    """Turns Python values into JSON-able descriptions plus payload blobs; remembers the tensors it sent."""

    def __init__(self, export: Any = None, held: Any = None) -> None:
        self.blobs: list[Any] = []
        self.size = 0
        self.tensors: list[Any] = []  # in the order they were encoded (mutations and aliases refer to them)
        self.export = export  # called with an object no description fits: its handle (objects called back)
        self.held = held  # the worker's handle of an object it holds (a WorkerObject handed back), else None

    def value(self, v: Any, where: str = "value", depth: int = 0) -> Any:
        """The description of ``v``; ``TypeError`` for a value that cannot cross (naming ``where``)."""
        import torch

        if depth > _MAX_DEPTH:
            raise ValueError(f"{where}: nested more than {_MAX_DEPTH} levels deep")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, torch.Tensor):
            return {"tensor": self.tensor(v, where)}
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).removeprefix("torch.")}
        if isinstance(v, torch.device):
            return {"device": str(v)}
        if isinstance(v, (list, tuple)):
            items = [self.value(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v)]
            return items if isinstance(v, list) else {"tuple": items}
        if isinstance(v, dict) and all(isinstance(k, str) for k in v):
            return {"dict": [[k, self.value(x, f"{where}[{k!r}]", depth + 1)] for k, x in v.items()]}
        if isinstance(v, _Remote):  # an object of the checking process, handed back
            return {"remote": v._handle}
        h = self.held(v) if self.held is not None else None
        if h is not None:  # an object the worker holds (the learner's Ops, a loaded module), handed back
            return {"held": h}
        if self.export is not None:
            return self.export(v)
        raise TypeError(f"{where}: a {type(v).__name__} cannot be passed to code running in the worker; pass "
                        "tensors, numbers, bools, None, strings, dtypes, or lists, tuples and dicts of those")

    def tensor(self, t: Any, where: str) -> dict:
        """A tensor's description: its storage span's bytes go to the payload (meta tensors carry none)."""
        import torch

        grad = bool(t.requires_grad)
        t = t.detach()
        name = str(t.dtype).removeprefix("torch.")
        if name not in _dtypes():
            raise TypeError(f"{where}: tensors of dtype {t.dtype} cannot be passed to the worker")
        if t.device.type not in ("cpu", "meta", "cuda"):
            raise ValueError(f"{where}: a tensor on '{t.device.type}' cannot be passed to the worker (CPU and CUDA "
                             "tensors only)")
        es = t.element_size()
        held = t.device.type != "meta"
        d = {"dtype": name, "shape": list(t.shape), "strides": list(t.stride()), "device": str(t.device),
             "off": self.size, "n": 0, "pad": (t.data_ptr() % 64) // es if held else 0,
             "grad": grad}
        span = _span(d["shape"], d["strides"])
        if held and span:
            # a CUDA tensor's bytes travel through host memory (copied back onto the device on the other side)
            raw = t.as_strided((span,), (1,), t.storage_offset()).view(torch.uint8).cpu().numpy()
            self.blobs.append(raw)
            d["n"] = raw.nbytes
            self.size += raw.nbytes
        self.tensors.append(t)
        return d


class Decoder:
    """Rebuilds values from descriptions and a payload, checking every field (the sender may be hostile)."""

    def __init__(self, payload: bytearray, sent: list[Any] = (), remote: Any = None,  # type: ignore[assignment]
                 held: Any = None) -> None:
        self.payload = payload
        self.sent = list(sent)  # tensors this side encoded in the request (targets of aliases)
        self.remote = remote  # the object of the checking process a {"remote": handle} stands for
        self.held = held  # the object of the worker a {"held": handle} stands for
        self.tensors: list[tuple[Any, Any, int, int]] = []  # (tensor, base, pad, span) of each decoded tensor

    def value(self, d: Any, depth: int = 0) -> Any:
        """The value ``d`` describes; ``ProtocolError`` for anything malformed."""
        import torch

        if depth > _MAX_DEPTH:
            raise ProtocolError("values nested too deep")
        if d is None or isinstance(d, (bool, int, float, str)):
            return d
        if isinstance(d, list):
            return [self.value(x, depth + 1) for x in d]
        if isinstance(d, dict) and len(d) == 1:
            (kind, body), = d.items()
            if kind == "tuple" and isinstance(body, list):
                return tuple(self.value(x, depth + 1) for x in body)
            if kind == "dict" and isinstance(body, list) and all(
                    isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in body):
                return {k: self.value(x, depth + 1) for k, x in body}
            if kind == "dtype" and body in _dtypes():
                return _dtypes()[body]
            if kind == "device" and isinstance(body, str) and re.fullmatch(r"(cpu|meta|cuda)(:\d{1,2})?", body):
                return torch.device(body)
            if kind == "remote" and isinstance(body, int) and self.remote is not None:
                return self.remote(body)
            if kind == "held" and isinstance(body, int) and self.held is not None:
                return self.held(body)
            if kind == "tensor" and isinstance(body, dict):
                return self.tensor(body)
            if kind == "alias" and isinstance(body, dict):
                return self.alias(body)
        raise ProtocolError(f"not a value: {str(d)[:100]}")

    @staticmethod
    def _ints(v: Any, what: str) -> list[int]:
        if not isinstance(v, list) or len(v) > 16 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                              and 0 <= x < 1 << 40 for x in v):
            raise ProtocolError(f"bad {what}: {str(v)[:100]}")
        return v

    def tensor(self, d: dict) -> Any:
        import torch

        dtype = _dtypes().get(d.get("dtype"))  # type: ignore[arg-type]
        shape, strides = self._ints(d.get("shape"), "shape"), self._ints(d.get("strides"), "strides")
        device = d.get("device")
        if dtype is None or len(shape) != len(strides) or not isinstance(device, str) or not (
                device in ("cpu", "meta") or (re.fullmatch(r"cuda(:\d{1,2})?", device) and torch.cuda.is_available())):
            raise ProtocolError(f"bad tensor description: {str(d)[:200]}")
        if device == "meta":
            t = torch.empty_strided(shape, strides, dtype=dtype, device="meta")
            self.tensors.append((t, None, 0, 0))
            return t
        span, pad = _span(shape, strides), d.get("pad", 0)
        es = torch.empty(0, dtype=dtype).element_size()
        off, n = d.get("off"), d.get("n")
        if not (isinstance(pad, int) and 0 <= pad < 64 and isinstance(off, int) and isinstance(n, int)
                and n == span * es and 0 <= off and off + n <= len(self.payload)):
            raise ProtocolError(f"tensor bytes do not match its description: {str(d)[:200]}")
        base = torch.empty(pad + span, dtype=dtype)
        if n:
            base.view(torch.uint8)[pad * es:].copy_(torch.frombuffer(self.payload, dtype=torch.uint8, count=n,
                                                                    offset=off))
        if device != "cpu":  # a CUDA tensor: staged on the host, then one copy onto the device
            base = base.to(device)
        t = base.as_strided(shape, strides, pad)
        if d.get("grad") is True and dtype.is_floating_point:
            t.requires_grad_(True)
        self.tensors.append((t, base, pad, span))
        return t

    def alias(self, d: dict) -> Any:
        """A view of a tensor this side sent (the callee returned a view of its argument)."""
        idx = d.get("arg")
        shape, strides = self._ints(d.get("shape"), "shape"), self._ints(d.get("strides"), "strides")
        off = d.get("offset")
        if not (isinstance(idx, int) and 0 <= idx < len(self.sent) and isinstance(off, int)
                and len(shape) == len(strides)):
            raise ProtocolError(f"bad alias: {str(d)[:200]}")
        t = self.sent[idx]
        try:
            return t.as_strided(shape, strides, t.storage_offset() + off)
        except RuntimeError as e:  # out of the argument's storage
            raise ProtocolError(f"bad alias: {e}") from None


def changed_arguments(dec: Decoder, before: list[Any], enc: Encoder) -> list[list[int]]:
    """The tensors ``dec`` decoded that a call changed since ``before`` (:func:`snapshot`): each one's storage
    span goes into ``enc``'s payload, described as [argument index, payload offset, bytes]."""
    import torch

    mutated = []
    for i, ((_t, base, pad, span), old) in enumerate(zip(dec.tensors, before, strict=True)):
        if base is not None and not torch.equal(base.view(torch.uint8), old):
            raw = base[pad:pad + span].view(torch.uint8).cpu().numpy()
            enc.blobs.append(raw)
            mutated.append([i, enc.size, raw.nbytes])
            enc.size += raw.nbytes
    return mutated


def snapshot(dec: Decoder) -> list[Any]:
    """The bytes of every tensor ``dec`` decoded, before the call that may change them."""
    import torch

    return [base.view(torch.uint8).clone() if base is not None else None for _t, base, _p, _s in dec.tensors]


def copy_back(mutated: Any, payload: bytearray, sent: list[Any]) -> None:
    """Write the arguments the other side changed (``changed_arguments``' list) into the tensors this side sent;
    ``ProtocolError`` for a list that does not fit them."""
    import torch

    for item in mutated if isinstance(mutated, list) else [None]:
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, int) for x in item)):
            raise ProtocolError("bad list of changed arguments")
        i, off, n = item
        if not 0 <= i < len(sent) or sent[i].device.type not in ("cpu", "cuda"):
            raise ProtocolError("a changed argument that was not sent")
        t = sent[i]
        span = _span(list(t.shape), list(t.stride()))
        if n != span * t.element_size() or off < 0 or off + n > len(payload):
            raise ProtocolError("a changed argument of the wrong size")
        t.as_strided((span,), (1,), t.storage_offset()).view(torch.uint8).copy_(
            torch.frombuffer(payload, dtype=torch.uint8, count=n, offset=off))


# ----------------------------------------------------------------------------------------------------
# The worker's side (runs in the confined process)
# ----------------------------------------------------------------------------------------------------


def _error_record(e: BaseException) -> dict:
    rec: dict[str, Any] = {"type": type(e).__name__, "message": str(e)[:20000]}
    for k in ("kernel", "file", "line", "compiler_output", "kind"):
        v = getattr(e, k, None)
        if isinstance(v, (str, int)) and not isinstance(v, bool):
            rec[k] = v if not isinstance(v, str) else v[:20000]
    for k in ("block", "thread"):
        v = getattr(e, k, None)
        if isinstance(v, tuple) and all(isinstance(x, int) for x in v):
            rec[k] = list(v)
    return rec


class _Channel:
    """The worker's end of the socket while a call runs: requests about objects the checking process exported."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def request(self, header: dict, blobs: list[Any] = (), sent: list[Any] = ()) -> Any:  # type: ignore[assignment]
        send_message(self.sock, header, blobs)
        reply, payload = recv_message(self.sock)
        if reply.get("ok") is not True:
            raise rebuild_error(reply.get("error"), str(header.get("name") or "a call back"))
        # a kernel the call back ran wrote into tensors the learner's code allocated here (m4.rope_tables(c, s, ...))
        if "mutated" in reply:
            copy_back(reply["mutated"], payload, list(sent))
        return Decoder(payload, remote=self.proxy).value(reply.get("result"))

    def proxy(self, handle: int) -> _Remote:
        return _Remote(self, handle)


class _Remote:
    """An object of the checking process (the test's kernels object, a config): reading a public attribute
    asks for its value, a method comes back as another ``_Remote`` and calling it runs it there."""

    def __init__(self, chan: _Channel, handle: int) -> None:
        self._chan, self._handle, self._methods = chan, handle, {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._methods:
            return self._methods[name]
        v = self._chan.request({"req": "getattr", "handle": self._handle, "name": name})
        if isinstance(v, _Remote):
            self._methods[name] = v
        return v

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        enc = Encoder()
        return self._chan.request({"req": "invoke", "handle": self._handle, "args": enc.value(list(args), "argument"),
                                   "kwargs": enc.value(dict(kwargs), "keyword argument")}, enc.blobs, enc.tensors)


class _Held:
    """The worker's table of objects the checking process may refer to: the loaded modules (handles 1, 2, ...),
    then whatever the learner's code returned that cannot be copied (an ``Ops`` object, a bound method)."""

    def __init__(self) -> None:
        self.objects: dict[int, Any] = {}

    def hold(self, v: Any) -> dict:
        h = len(self.objects) + 1
        self.objects[h] = v
        return {"held": h}

    def get(self, h: int) -> Any:
        if h not in self.objects:
            raise ValueError(f"this worker holds no object {h}")
        return self.objects[h]


def _call(fn: Any, header: dict, payload: bytearray, chan: _Channel, guard: list[str],
          held: _Held) -> tuple[dict, list[Any]]:
    """Run one call: decode the arguments, call (under the torch guard for a lesson's Python exercise files),
    encode the result, the arguments it changed, and results that are views of arguments.

    With ``"backward"`` in the header (a gradient for the result), autograd runs here too: the result is
    (the output, detached; the gradient of each argument that requires one, else None)."""
    import contextlib

    import torch

    dec = Decoder(payload, remote=chan.proxy, held=held.get)
    args = dec.value(header.get("args", []))
    kwargs = dec.value(header.get("kwargs", {"dict": []}))
    grad_output = dec.value(header["backward"]) if "backward" in header else None
    before = snapshot(dec)
    if guard:
        from cudacourse.grading.screens import torch_answer_guard

        ctx: Any = torch_answer_guard(guard)
    else:
        ctx = contextlib.nullcontext()
    with ctx:
        result = fn(*args, **kwargs)
        if grad_output is not None:
            torch.autograd.backward(result, grad_output)
            result = (result.detach() if isinstance(result, torch.Tensor) else result,
                      [a.grad if isinstance(a, torch.Tensor) and a.requires_grad else None for a in args])
    enc = Encoder(export=held.hold)
    mutated = changed_arguments(dec, before, enc)
    storages = {base.untyped_storage().data_ptr(): (i, pad, t) for i, (t, base, pad, _s) in enumerate(dec.tensors)
                if base is not None and base.numel()}

    def out(v: Any, depth: int = 0) -> Any:
        if isinstance(v, torch.Tensor) and v.device.type in ("cpu", "cuda") and v.numel():
            hit = storages.get(v.untyped_storage().data_ptr())
            if hit is not None and hit[2].dtype == v.dtype:
                return {"alias": {"arg": hit[0], "shape": list(v.shape), "strides": list(v.stride()),
                                  "offset": v.storage_offset() - hit[1]}}
        if isinstance(v, (list, tuple)) and depth < _MAX_DEPTH:
            items = [out(x, depth + 1) for x in v]
            return items if isinstance(v, list) else {"tuple": items}
        return enc.value(v, "the return value")

    return {"ok": True, "result": out(result), "mutated": mutated}, enc.blobs


def _serve(sock: socket.socket) -> None:
    """Answer requests until the checking process closes the socket."""
    held = _Held()
    chan, guard = _Channel(sock), []
    helpers: dict[tuple[str, str], Any] = {}
    while True:
        try:
            header, payload = recv_message(sock)
        except EOFError:
            return
        blobs: list[Any] = []
        try:
            op = header.get("op")
            if op == "load-torch" and header.get("backend") == "cuda":
                from cudacourse.loader import build_torch_cuda

                held.hold(build_torch_cuda(header["source"], header["path"], header["functions"]))
                reply: dict = {"ok": True}
            elif op == "load-torch":
                from cudacourse.sim import build_torch_extension

                held.hold(build_torch_extension(header["source"], header["path"], header["functions"],
                                                checked=header["checked"]))
                reply = {"ok": True}
            elif op == "load-python":
                from cudacourse.loader import import_file

                for path in header["paths"]:
                    held.hold(import_file(path))
                guard = list(header.get("guard") or [])
                reply = {"ok": True}
            elif op == "call":
                target, name = held.get(header.get("target", 1)), header.get("name")
                fn = target if name is None else getattr(target, name, None)
                if not callable(fn):
                    raise AttributeError(f"the loaded module has no function {name!r}" if name else
                                         f"a {type(fn).__name__} is not callable")
                reply, blobs = _call(fn, header, payload, chan, guard, held)
            elif op == "run":
                # a function of the test's own file, sent as source (the checking process runs nothing the worker
                # sends; the reverse is what this worker is for): it runs here, beside the learner's module
                key = (header["source"], header["name"])
                if key not in helpers:
                    ns: dict = {"__name__": "cc_test_helper"}
                    # (annotations unevaluated, as in the test file: its type hints name what it imported)
                    code = compile(header["source"], f"<test helper {header['name']}>", "exec",
                                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
                    exec(code, ns)  # noqa: S102
                    helpers[key] = ns[header["name"]]
                reply, blobs = _call(helpers[key], header, payload, chan, [], held)
            elif op == "getattr":
                name = header.get("name")
                if not isinstance(name, str) or name.startswith("_"):
                    raise AttributeError(f"{str(name)[:100]!r}: public attributes only")
                enc = Encoder(export=held.hold)
                reply, blobs = {"ok": True, "result": enc.value(getattr(held.get(header.get("target")), name),
                                                                f"attribute {name}")}, enc.blobs
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as e:  # noqa: BLE001 - every error goes back to the caller, by name
            reply, blobs = {"ok": False, "error": _error_record(e)}, []
        sys.stdout.flush()
        sys.stderr.flush()
        send_message(sock, reply, blobs)


# ----------------------------------------------------------------------------------------------------
# The checking process's side
# ----------------------------------------------------------------------------------------------------


def _course_errors() -> dict[str, type[Exception]]:
    from cudacourse import errors

    return {c.__name__: c for c in (errors.CompileError, errors.UnsupportedError, errors.KernelError,
                                    errors.RaceError, errors.OutOfBoundsError, errors.UninitializedReadError,
                                    errors.BarrierError, errors.KernelTimeout, errors.LaunchError)}


def _int_tuple(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, list) and len(v) <= 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(v)
    return None


def rebuild_error(rec: Any, name: str) -> Exception:
    """The exception a worker's error record stands for (a fixed table of types; ``name`` for the rest)."""
    from cudacourse.errors import CompileError, KernelError

    if not isinstance(rec, dict) or not isinstance(rec.get("type"), str) or not isinstance(rec.get("message"), str):
        return KernelError(f"{name}: the worker reported an error it could not describe", kernel=name)
    kind, msg = rec["type"], rec["message"]
    text = {k: rec[k] if isinstance(rec.get(k), str) else None for k in ("kernel", "file", "compiler_output")}
    line = rec.get("line") if isinstance(rec.get("line"), int) and not isinstance(rec.get("line"), bool) else None
    cls = _course_errors().get(kind)
    if cls is not None and issubclass(cls, CompileError):
        return cls(msg, file=text["file"], line=line, compiler_output=text["compiler_output"] or "")
    if cls is not None:
        err = cls(msg, kernel=text["kernel"], block=_int_tuple(rec.get("block")),
                  thread=_int_tuple(rec.get("thread")), file=text["file"], line=line)
        if cls is KernelError and isinstance(rec.get("kind"), str):
            err.kind = rec["kind"]
        return err
    if kind in _BUILTIN_ERRORS:
        return _BUILTIN_ERRORS[kind](msg)
    err = KernelError(f"{name} raised {kind}: {msg}", kernel=name)
    err.kind = "exception"
    return err


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
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        # objects this process exported, (obj, method), for the worker's life: the learner's code may keep them
        # (lesson 06's Ops keeps the kernels objects it is given); one handle per object and per attribute read
        self._handles: dict[int, tuple[Any, bool]] = {}
        self._handle_of: dict[int, int] = {}  # id(obj) -> handle (the object is kept alive in _handles)
        self._attr_handles: dict[tuple[int, str], int] = {}
        self.generation = 0  # counts worker starts: an object held by a stopped worker is gone
        self._private = Path(tempfile.mkdtemp(prefix="cctorch-"))
        self._log = self._private / "output.log"
        self._log_pos = 0
        self._start()

    @classmethod
    def extension(cls, source: str, path: str, functions: list[str], *, checked: bool = True,
                  timeout_s: float = 10.0, confine: str = "strict", backend: str = "sim") -> TorchWorker:
        """A torch-route file built and loaded in the worker: for the simulator (``sim.build_torch_extension``)
        or, ``backend="cuda"``, with nvcc (``loader.build_torch_cuda``) in a worker that owns a CUDA context."""
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
        from cudacourse.sandbox import Limits, confined_popen, learner_memory

        st = settings.current()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # TRITON_INTERPRET: a Triton twin hosted here runs on Triton's CPU interpreter (cudacourse/triton_track.py)
        keep = ("PATH", "LANG", "LC_ALL", "CXX", "CC", "CUDAHOSTCXX", "CUDA_HOME", "MAX_JOBS", "OMP_NUM_THREADS",
                "LD_LIBRARY_PATH", "CUDA_COURSE_SIM_ORDER", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES",
                "CUDA_DEVICE_ORDER", "TORCH_CUDA_ARCH_LIST",
                # set by the plugin while grading on a GPU: a Triton twin hosted here keeps one config per kernel
                # instead of autotuning them all (which cost a solution grade 30 s on the H100 while it was left out)
                "CUDA_COURSE_TRITON_ONE_CONFIG")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env.update(settings.to_env(st))
        # Inside, the worker's own sandbox is the confinement: what the learner's code starts there (lesson 07's
        # custom_op.py calls cc.lesson, which loads the kernels) inherits its Landlock domain, namespaces and
        # limits, and is stopped with it. Kept, the setting made that code start sandboxes of its own, which a
        # sandbox two levels deep cannot make (unshare: EPERM), and on a GPU a third process per call.
        env.pop(settings.ENV["confine"], None)
        if self.gpu:
            env.update(triton_cache_env())
        # (build_seed: only in the grader's worker for files identical to the instructor's, which builds them here)
        reads = [*self._reads, _THIS.parent.parent, *(p for p in (st.build_shared, st.build_seed) if p)]
        with open(self._log, "ab") as log:
            try:
                self._proc = confined_popen(
                    # -B: -I ignores PYTHONDONTWRITEBYTECODE, and a .pyc written into the staged harness fails the task
                    [sys.executable, "-I", "-B", str(_THIS), str(theirs.fileno()), *(["--gpu"] if self.gpu else [])],
                    scratch=self._private / "scratch",
                    env=env, read_only=[p for p in reads if p.exists()], read_write=[buildcache.build_root()],
                    limits=Limits(memory=learner_memory(env, torch=True), cpu_s=None),  # (none on a GPU machine)
                    gpu=self.gpu, allow_unconfined=self.confine != "strict",
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(theirs.fileno(),))
            finally:
                theirs.close()
        self._sock = ours
        self.generation += 1
        try:
            self._ask(self._load, [], "loading", LOAD_TIMEOUT_S)
        except BaseException:
            self._kill()
            raise

    def _kill(self) -> None:
        from cudacourse.sandbox import stop_group

        if self._proc is not None:
            stop_group(self._proc)
        if self._sock is not None:
            self._sock.close()
        self._proc = self._sock = None

    def _flush_log(self) -> None:
        """What the learner's code printed (kernel printf included) goes to this process's stdout."""
        from cudacourse.sim import forward_output

        self._log_pos = forward_output(self._log, self._log_pos)

    def _ask(self, header: dict, blobs: list[Any], what: str, timeout: float) -> tuple[dict, bytearray]:
        """Send a request and wait for its answer; a dead, silent or nonsensical worker is a course error."""
        from cudacourse.errors import KernelError, KernelTimeout

        __tracebackhide__ = True
        assert self._sock is not None
        name = os.path.basename(self.path)
        try:
            self._sock.settimeout(timeout)
            send_message(self._sock, header, blobs)
            while True:
                reply, payload = recv_message(self._sock, time.monotonic() + timeout)
                if "req" not in reply:
                    break
                # the learner's code calls back an object we exported (the test's kernels): run it here,
                # answer, and wait again (the time limit applies to the worker's own share)
                answer, extra = self._serve_request(reply, payload)
                self._sock.settimeout(timeout)
                send_message(self._sock, answer, extra)
        except TimeoutError:
            self._kill()
            self._flush_log()
            raise KernelTimeout(f"{what} ({name}): the worker running your code was still busy after {timeout:g} s "
                                "(an endless loop?); it was stopped, and the next call starts a fresh one.",
                                kernel=header.get("name")) from None
        except (EOFError, OSError):
            rc = self._proc.wait() if self._proc is not None else None
            self._kill()
            self._flush_log()
            how = f"was killed by signal {-rc}" if isinstance(rc, int) and rc < 0 else f"ended (exit status {rc})"
            raise KernelError(f"{what} ({name}): the process running your code {how} before answering: a crash "
                              "(e.g. abort(), a wild pointer) or an exit(). The next call starts a fresh one.",
                              kernel=header.get("name")) from None
        except ProtocolError as e:
            self._kill()
            raise KernelError(f"{what} ({name}): the worker answered nonsense ({e}); it was stopped.",
                              kernel=header.get("name")) from None
        self._flush_log()
        if reply.get("ok") is not True:
            raise rebuild_error(reply.get("error"), f"{header.get('name') or what}()")
        return reply, payload

    # ---- objects the worker calls back ------------------------------------------------------------

    def _export(self, obj: Any, method: bool = False) -> int:
        from cudacourse.loader import Lesson, Module

        if isinstance(obj, (Lesson, Module)):
            # their public methods (module(path), files()) would let the worker make this process read any file
            raise TypeError(f"a {type(obj).__name__} cannot be handed to code running in the worker: wrap it in an "
                            "object that exposes its launchers only (tests/test_06_training.py: _Kernels)")
        h = self._handle_of.get(id(obj))
        if h is None:
            h = self._handle_of[id(obj)] = len(self._handles) + 1
            self._handles[h] = (obj, method)
        return h

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

    def _exported(self, h: int) -> Any:
        """An object this process exported, handed back by the worker."""
        if h not in self._handles:
            raise ProtocolError(f"no exported object {h}")
        return self._handles[h][0]

    def _serve_request(self, req: dict, payload: bytearray) -> tuple[dict, list[Any]]:
        """Answer the worker about an exported object: a public attribute's value (a method comes back as a
        handle), or a call of an exported callable. Nothing else of this process can be reached."""
        h = req.get("handle")
        obj, method = self._handles.get(h, (None, False)) if isinstance(h, int) else (None, False)
        try:
            if obj is None:
                raise ProtocolError(f"no exported object {str(h)[:20]}")
            if req.get("req") == "getattr":
                name = req.get("name")
                if not isinstance(name, str) or name.startswith("_") or method:
                    raise AttributeError(f"{str(name)[:100]!r} cannot be read from the worker (public attributes "
                                         "of the objects passed to the call only)")
                h_attr = self._attr_handles.get((h, name))
                if h_attr is not None:
                    return {"ok": True, "result": {"remote": h_attr}}, []
                v = getattr(obj, name)
                if callable(v) and not isinstance(v, type):
                    # a method, or a launcher a kernels object hands out (a counting wrapper): callable only
                    h_attr = self._attr_handles[(h, name)] = len(self._handles) + 1
                    self._handles[h_attr] = (v, True)
                    return {"ok": True, "result": {"remote": h_attr}}, []
                enc = Encoder()  # values only: an object no description fits is not handed out
                return {"ok": True, "result": enc.value(v, f"attribute {name}")}, enc.blobs
            if req.get("req") == "invoke":
                if not callable(obj):
                    raise TypeError(f"a {type(obj).__name__} is not callable")
                dec = Decoder(payload, remote=self._exported)  # (an object of ours may come back: the config)
                args, kwargs = dec.value(req.get("args", [])), dec.value(req.get("kwargs", {"dict": []}))
                if not isinstance(args, list) or not isinstance(kwargs, dict):
                    raise ProtocolError("bad arguments of a call back")
                before = snapshot(dec)
                import torch

                # as in-process, where the learner's autograd.Function.forward/backward call the kernels with
                # autograd off (an argument may require grad, and a launcher may write into its storage)
                with torch.no_grad():
                    result = obj(*args, **kwargs)
                enc = Encoder()
                # the kernel wrote into the worker's tensors (outputs the learner allocated there): copied back
                mutated = changed_arguments(dec, before, enc)
                return {"ok": True, "result": enc.value(result, "the result"), "mutated": mutated}, enc.blobs
            raise ProtocolError(f"unknown request {str(req.get('req'))[:50]}")
        except ProtocolError:
            raise
        except Exception as e:  # noqa: BLE001 - the learner's code sees the error (a kernel bug, a bad argument)
            return {"ok": False, "error": _error_record(e)}, []

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
        if self._proc is None or self._proc.poll() is not None:
            self._kill()
            self._start()

    def _exchange(self, header: dict, args: tuple | list, kwargs: dict, what: str, backward: Any = None) -> Any:
        """Send a call (``header`` plus the encoded arguments) and return its result here."""
        __tracebackhide__ = True
        enc = Encoder(export=lambda v: {"remote": self._export(v)}, held=self._held_handle)
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
            return Decoder(payload, sent, remote=self._exported, held=self._held_object).value(reply.get("result"))
        except ProtocolError as e:
            self._kill()
            raise KernelError(f"{what} ({os.path.basename(self.path)}): the worker answered nonsense ({e}); it was "
                              "stopped.", kernel=kernel) from None

    def function(self, name: str) -> RemoteFunction:
        """A callable that runs ``name`` of the (first) loaded module in the worker (what the loader's module
        exposes)."""
        return RemoteFunction(self, 1, name)

    def close(self) -> None:
        """Stop the worker and remove its folder."""
        import shutil

        self._kill()
        shutil.rmtree(self._private, ignore_errors=True)

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


if __name__ == "__main__":
    sys.path[0] = str(_THIS.parent.parent)  # the course package this file belongs to, not its folder
    if "--gpu" in sys.argv[2:]:
        from cudacourse.gpuinfo import sleep_while_waiting

        sleep_while_waiting()  # none of this worker's calls is timed
    _serve(socket.socket(fileno=int(sys.argv[1])))
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: torch's and the simulator's threads may hold it up
