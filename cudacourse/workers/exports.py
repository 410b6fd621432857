"""The checking process's objects a torch worker may call back while a call runs (the test's kernels object).

The learner's code in the worker is given objects that cannot be copied (a kernels object, a config): each
crosses as a handle, kept for the worker's life. The worker may read their public attributes (values are
copied to it; a method or a launcher comes back as another handle) and call what is callable: the call runs
here, in the checking process, while the worker's call waits, and the tensors it changed are copied back.
Nothing else of this process can be reached.
"""

from __future__ import annotations

from typing import Any

from cudacourse.workers.wire import Decoder, Encoder, ProtocolError, changed_arguments, error_record, snapshot


class Exports:
    """The objects this process exported to one torch worker, by handle (1, 2, ...)."""

    def __init__(self) -> None:
        # (obj, method) for the worker's life: the learner's code may keep them (lesson 06's Ops keeps the kernels
        # objects it is given); one handle per object and per attribute read
        self._handles: dict[int, tuple[Any, bool]] = {}
        self._handle_of: dict[int, int] = {}  # id(obj) -> handle (the object is kept alive in _handles)
        self._attr_handles: dict[tuple[int, str], int] = {}

    def export(self, obj: Any, method: bool = False) -> int:
        """The handle of ``obj`` (the same for the same object). A loaded module or lesson (their classes say
        ``_cc_local_only``) is refused: its public methods (``module(path)``, ``files()``) would let the worker make
        this process read any file."""
        if getattr(type(obj), "_cc_local_only", False) is True:
            raise TypeError(f"a {type(obj).__name__} cannot be handed to code running in the worker: wrap it in an "
                            "object that exposes its launchers only (tests/test_06_training.py: _Kernels)")
        h = self._handle_of.get(id(obj))
        if h is None:
            h = self._handle_of[id(obj)] = len(self._handles) + 1
            self._handles[h] = (obj, method)
        return h

    def get(self, h: int) -> Any:
        """An object this process exported, handed back by the worker."""
        if h not in self._handles:
            raise ProtocolError(f"no exported object {h}")
        return self._handles[h][0]

    def serve(self, req: dict, payload: bytearray) -> tuple[dict, list[Any]]:
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
                dec = Decoder(payload, remote=self.get)  # (an object of ours may come back: the config)
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
            return {"ok": False, "error": error_record(e)}, []
