"""The torch worker's wire format: frames, values and errors, checked field by field (the sender may be hostile).

Both sides of the torch worker import this file: the checking process (``workers/torch.py``) and the worker's
program (``workers/torch_serve.py``); the socket itself is the worker channel's (``workers/channel.py``).

Every message, both ways, is a 12-byte frame head (header length,
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
"""

from __future__ import annotations

import functools
import json
import re
import socket
import struct
import time
from typing import Any

from cudacourse.workers.channel import ProtocolError

__all__ = ["Caller", "Decoder", "Encoder", "ProtocolError", "Remote", "changed_arguments", "copy_back",
           "error_record", "rebuild_error", "recv_message", "send_message", "snapshot"]

_HEAD = struct.Struct("!IQ")  # header bytes, payload bytes
_MAX_HEADER = 64 << 20
_MAX_PAYLOAD = 8 << 30
MAX_DEPTH = 32
_BUILTIN_ERRORS: dict[str, type[Exception]] = {
    e.__name__: e for e in (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError)}


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
        torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
        torch.float8_e4m3fn, torch.float8_e5m2)}  # (lesson 08's Triton twin writes e4m3: bytes, like the others)


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

        if depth > MAX_DEPTH:
            raise ValueError(f"{where}: nested more than {MAX_DEPTH} levels deep")
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
        if isinstance(v, Remote):  # an object of the checking process, handed back
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

        if depth > MAX_DEPTH:
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
# Errors: (type name, message, fields), rebuilt from a fixed table of types
# ----------------------------------------------------------------------------------------------------


def error_record(e: BaseException) -> dict:
    """What the worker sends back for an exception: its type's name, its message and the course's fields."""
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


# ----------------------------------------------------------------------------------------------------
# Calls back: the checking process's objects as the worker's code sees them while a call runs
# ----------------------------------------------------------------------------------------------------


class Caller:
    """The checking process as the worker sees it while a call runs: requests about the objects it exported."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def request(self, header: dict, blobs: list[Any] = (), sent: list[Any] = ()) -> Any:  # type: ignore[assignment]
        """Send a request about an exported object and return the value of its answer."""
        send_message(self.sock, header, blobs)
        reply, payload = recv_message(self.sock)
        if reply.get("ok") is not True:
            raise rebuild_error(reply.get("error"), str(header.get("name") or "a call back"))
        # a kernel the call back ran wrote into tensors the learner's code allocated here (m4.rope_tables(c, s, ...))
        if "mutated" in reply:
            copy_back(reply["mutated"], payload, list(sent))
        return Decoder(payload, remote=self.proxy).value(reply.get("result"))

    def proxy(self, handle: int) -> Remote:
        """The exported object ``handle`` of the checking process."""
        return Remote(self, handle)


class Remote:
    """An object of the checking process (the test's kernels object, a config): reading a public attribute
    asks for its value, a method comes back as another ``Remote`` and calling it runs it there."""

    def __init__(self, chan: Caller, handle: int) -> None:
        self._chan, self._handle, self._methods = chan, handle, {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._methods:
            return self._methods[name]
        v = self._chan.request({"req": "getattr", "handle": self._handle, "name": name})
        if isinstance(v, Remote):
            self._methods[name] = v
        return v

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        enc = Encoder()
        return self._chan.request({"req": "invoke", "handle": self._handle, "args": enc.value(list(args), "argument"),
                                   "kwargs": enc.value(dict(kwargs), "keyword argument")}, enc.blobs, enc.tensors)
