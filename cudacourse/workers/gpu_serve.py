"""The GPU worker's program: where a learner's kernel library runs on the cuda backend while grading.

Started by ``workers/gpu.py`` (:class:`GpuWorker`) through the worker channel, in the sandbox, as
``python -I -B -S gpu_serve.py LIB SOCKET_FD``: standard library and ctypes only, so it starts in a fraction of a
second and reads nothing of the course. It owns its own CUDA context, maps the buffers the checking process
exports as file descriptors (:class:`Vmm`, the driver's virtual-memory calls, the same in both processes), calls
the launchers and answers each request with one JSON line.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import sys
from typing import Any

_CTYPES = {"p": ctypes.c_void_p, "c_float": ctypes.c_float, "c_double": ctypes.c_double,
           "c_bool": ctypes.c_bool}
_FD_HANDLE = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class Vmm:
    """The CUDA driver's virtual-memory calls, the same in both processes: create or import an allocation,
    map it read-write for ``device``, export it as a file descriptor, and undo all of it."""

    def __init__(self, device: int) -> None:
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.access = _AccessDesc(_Location(1, device), 3)  # CU_MEM_LOCATION_TYPE_DEVICE, PROT_READWRITE
        self.prop = _AllocProp(type=1, requestedHandleTypes=_FD_HANDLE, location=_Location(1, device))
        gran = ctypes.c_size_t()
        self._ok(self.cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(self.prop), 0), "granularity")
        self.granularity = gran.value

    @staticmethod
    def _ok(rc: int, what: str) -> None:
        if rc:
            raise RuntimeError(f"CUDA driver error {rc} in {what}")

    def size(self, nbytes: int) -> int:
        return max(1, -(-nbytes // self.granularity)) * self.granularity

    def _map(self, handle: int, size: int) -> int:
        ptr = ctypes.c_uint64()
        self._ok(self.cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                             ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
        self._ok(self.cu.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                                  ctypes.c_uint64(0)), "cuMemMap")
        self._ok(self.cu.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(self.access), ctypes.c_size_t(1)),
                 "cuMemSetAccess")
        return ptr.value

    def create(self, size: int) -> tuple[int, int, int]:
        """A new allocation of ``size`` bytes (a multiple of the granularity): (pointer, handle, fd)."""
        h = ctypes.c_uint64()
        self._ok(self.cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(self.prop),
                                     ctypes.c_uint64(0)), "cuMemCreate")
        fd = ctypes.c_int()
        self._ok(self.cu.cuMemExportToShareableHandle(ctypes.byref(fd), h, _FD_HANDLE, ctypes.c_uint64(0)),
                 "cuMemExportToShareableHandle")
        return self._map(h.value, size), h.value, fd.value

    def open(self, fd: int, size: int) -> tuple[int, int]:
        """Map an allocation another process exported: (pointer, handle)."""
        h = ctypes.c_uint64()
        self._ok(self.cu.cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd), _FD_HANDLE),
                 "cuMemImportFromShareableHandle")
        return self._map(h.value, size), h.value

    def free(self, ptr: int, handle: int, size: int) -> None:
        self.cu.cuMemUnmap(ctypes.c_uint64(ptr), ctypes.c_size_t(size))
        self.cu.cuMemAddressFree(ctypes.c_uint64(ptr), ctypes.c_size_t(size))
        self.cu.cuMemRelease(ctypes.c_uint64(handle))


# Libraries that do a task's work for it (a learner's file that includes their headers is refused before building;
# one that reaches them with dlopen and pasted prototypes is caught here, where they show in the process's maps)
_VENDOR = re.compile(r"/lib(cublas|cublasLt|cudnn\w*|cufft\w*|curand|cusparse\w*|cusolver\w*|nccl|nvblas|cutensor"
                     r"\w*|nvjpeg)\.so[.\d]*$")


def _vendor_libraries() -> list[str]:
    """The vendor libraries mapped into this process (the learner's library loaded them: the worker loads none)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if "/" in line}
    except OSError:
        return []
    return sorted({os.path.basename(p) for p in paths if _VENDOR.search(p)})


def _vendor_error() -> dict[str, Any] | None:
    """The reply that fails a call once a vendor library is loaded, or None."""
    found = _vendor_libraries()
    if not found:
        return None
    return {"ok": False, "error": -1, "stage": "worker",
            "what": f"your library loaded {', '.join(found)}: a task's kernels must be your own (cuBLAS, cuDNN and "
                    "the other vendor libraries are not allowed in graded work, however they are reached)"}


def hostwork_begin(lib: Any, spans: list[tuple[int, int]]) -> None:
    """Start the host-work check (``cudacourse/hostwork.cu``, linked into every kernel library) of one call over
    its arguments' buffers ``(address, bytes)``, in order (``(0, 0)`` for a scalar). Also used in-process
    (``cuda_backend.CudaLibrary``)."""
    n = len(spans)
    addrs, sizes = (ctypes.c_ulonglong * n)(*[a for a, _ in spans]), (ctypes.c_ulonglong * n)(*[b for _, b in spans])
    lib.cc_hw_begin(n, addrs, sizes)


def hostwork_end(lib: Any) -> tuple[int, int, str] | None:
    """After the call's work finished: ``(argument index, byte offset in its buffer, copy call)`` of the first
    argument that changed after its data reached host memory, or None."""
    at = ctypes.c_ulonglong(0)
    k = lib.cc_hw_end(ctypes.byref(at))
    if k < 0:
        return None
    lib.cc_hw_copy.restype = ctypes.c_char_p
    return k, at.value, lib.cc_hw_copy().decode(errors="replace")


def _hostwork_reply(lib: Any) -> dict[str, Any] | None:
    """The reply that fails a call whose launcher did host work (the checking process words it: workers/gpu.py)."""
    found = hostwork_end(lib)
    if found is None:
        return None
    return {"ok": False, "error": -1, "stage": "host-work", "arg": found[0], "at": found[1], "what": found[2]}


def _serve(lib_path: str, sock_fd: int) -> None:
    lib = ctypes.CDLL(lib_path)
    lib.cc_error_string.restype = ctypes.c_char_p
    sock = socket.socket(fileno=sock_fd)
    entries: dict[str, Any] = {}
    buffers: dict[int, tuple[int, int, int]] = {}  # id -> pointer, handle, size
    vmm: Vmm | None = None
    device = 0
    pending, fds = b"", []
    me = os.getpid()
    # The first failure of a call sent without waiting for its answer ("quiet": the timed calls between two
    # synchronisations), answered instead of the next request that expects an answer
    deferred: dict[str, Any] | None = None

    def error(code: int) -> str:
        return lib.cc_error_string(code).decode(errors="replace")

    while True:
        data, got, _flags, _addr = socket.recv_fds(sock, 1 << 16, 64)
        if not data:
            return
        pending += data
        fds += got
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            msg = json.loads(line)
            op, reply = msg["op"], {"ok": True}
            quiet = bool(msg.get("quiet"))
            if deferred is not None and (quiet or op in ("call", "sync")):
                for _ in msg.get("new", ()):  # (the descriptors sent with a request not run)
                    os.close(fds.pop(0))
                if not quiet:  # the failure is this request's answer; the request itself is not run
                    sock.sendall((json.dumps(deferred) + "\n").encode())
                    deferred = None
                continue
            try:
                if op == "declare":
                    err = lib.cc_sync()  # creates the context, current on this thread from here on
                    if err:
                        raise RuntimeError(f"the GPU did not start: {error(err)}")
                    device = msg["device"]  # (the driver's memory calls are loaded with the first buffer)
                    for name, kinds in msg["launchers"].items():
                        fn = getattr(lib, f"cc_entry_{name}")
                        fn.restype = ctypes.c_int
                        fn.argtypes = [_CTYPES.get(k) or getattr(ctypes, k) for k in kinds]
                        entries[name] = fn
                elif op == "call":
                    for bid, size in msg["new"]:
                        fd = fds.pop(0)
                        vmm = vmm or Vmm(device)
                        ptr, handle = vmm.open(fd, size)
                        os.close(fd)
                        buffers[bid] = (ptr, handle, size)
                    cargs = [(buffers[a["b"]][0] + a["o"] if a["b"] else None) if isinstance(a, dict) else a
                             for a in msg["args"]]
                    if msg["sync"]:  # a checked call: the host-work check (hostwork.cu) watches its copies
                        hostwork_begin(lib, [(buffers[a["b"]][0], buffers[a["b"]][2])
                                              if isinstance(a, dict) and a["b"] else (0, 0) for a in msg["args"]])
                    err, stage = entries[msg["name"]](*cargs), "launch"
                    if os.getpid() != me:  # a process the launcher forked returned here: not a worker
                        os._exit(0)
                    if not err and msg["sync"]:
                        err, stage = lib.cc_sync(), "run"
                    if err:
                        reply = {"ok": False, "error": err, "what": error(err), "stage": stage,
                                 "launcher": msg["name"]}
                    elif msg["sync"]:  # (an unsynchronised call of a timed block is checked at its closing sync)
                        reply = _vendor_error() or _hostwork_reply(lib) or reply
                elif op == "sync":
                    err = lib.cc_sync()
                    if err:
                        reply = {"ok": False, "error": err, "what": error(err), "stage": "run"}
                    else:
                        reply = _vendor_error() or reply
                elif op == "release":
                    for bid in msg["ids"]:
                        if bid in buffers:
                            vmm.free(*buffers.pop(bid))  # type: ignore[union-attr]
            except (RuntimeError, KeyError, AttributeError) as e:
                reply = {"ok": False, "error": -1, "what": str(e), "stage": "worker"}
            if not quiet:
                sock.sendall((json.dumps(reply) + "\n").encode())
            elif not reply.get("ok"):
                deferred = reply


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
