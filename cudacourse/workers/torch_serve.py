"""The torch worker's program: where a learner's torch-route file or Python exercise file runs while grading.

Started by ``workers/torch.py`` (:class:`TorchWorker`) through the worker channel, in the sandbox, as
``python -I -B torch_serve.py SOCKET_FD [--gpu]``. It builds and loads the file (``sim.build_torch_extension``
for a torch-route file on the simulator, ``cuda_backend.build_torch_cuda`` on a GPU, ``import_file`` for a Python
file), then answers requests (``wire.py`` frames) until the checking process closes the socket:

- ``call``: run a function of a loaded module or of an object held here (under ``answer_guard`` for a lesson's
  Python exercise files), copy back the arguments it changed, and answer with its result;
- ``run``: a function of the test's own file, sent as source, run here beside the learner's module;
- ``getattr``: a public attribute of an object held here.

Objects the learner's code returns that cannot be copied stay here (:class:`_Held`); objects of the checking
process it is given are :class:`wire.Remote` proxies, whose calls are requests the checking process serves
while the call waits. Every error goes back by name (``wire.error_record``).
"""

from __future__ import annotations
import __future__

import contextlib
import os
import socket
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    # Run as the worker's program (python -I: neither PYTHONPATH nor this folder on sys.path): the course package
    # this file belongs to, which is the grader's staged copy while grading, not whatever else is installed.
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from cudacourse.workers.wire import (  # noqa: E402
    MAX_DEPTH,
    Caller,
    Decoder,
    Encoder,
    changed_arguments,
    error_record,
    recv_message,
    send_message,
    snapshot,
)


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


def _call(fn: Any, header: dict, payload: bytearray, chan: Caller, guard: list[str],
          held: _Held) -> tuple[dict, list[Any]]:
    """Run one call: decode the arguments, call (under the torch guard for a lesson's Python exercise files),
    encode the result, the arguments it changed, and results that are views of arguments.

    With ``"backward"`` in the header (a gradient for the result), autograd runs here too: the result is
    (the output, detached; the gradient of each argument that requires one, else None)."""
    import torch

    dec = Decoder(payload, remote=chan.proxy, held=held.get)
    args = dec.value(header.get("args", []))
    kwargs = dec.value(header.get("kwargs", {"dict": []}))
    grad_output = dec.value(header["backward"]) if "backward" in header else None
    before = snapshot(dec)
    if guard:
        from cudacourse.answer_guard import torch_answer_guard

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
        if isinstance(v, (list, tuple)) and depth < MAX_DEPTH:
            items = [out(x, depth + 1) for x in v]
            return items if isinstance(v, list) else {"tuple": items}
        return enc.value(v, "the return value")

    return {"ok": True, "result": out(result), "mutated": mutated}, enc.blobs


def _serve(sock: socket.socket) -> None:
    """Answer requests until the checking process closes the socket."""
    held = _Held()
    chan, guard = Caller(sock), []
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
                from cudacourse.cuda_backend import build_torch_cuda

                held.hold(build_torch_cuda(header["source"], header["path"], header["functions"]))
                reply: dict = {"ok": True}
            elif op == "load-torch":
                from cudacourse.sim import build_torch_extension

                held.hold(build_torch_extension(header["source"], header["path"], header["functions"],
                                                checked=header["checked"]))
                reply = {"ok": True}
            elif op == "load-python":
                import torch  # noqa: F401  (every call needs it: imported under the load's deadline, not a call's)

                from cudacourse.lessons import import_file

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
            reply, blobs = {"ok": False, "error": error_record(e)}, []
        sys.stdout.flush()
        sys.stderr.flush()
        send_message(sock, reply, blobs)



if __name__ == "__main__":
    if "--gpu" in sys.argv[2:]:
        from cudacourse.gpuinfo import sleep_while_waiting

        sleep_while_waiting()  # none of this worker's calls is timed
    _serve(socket.socket(fileno=int(sys.argv[1])))
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: torch's and the simulator's threads may hold it up
