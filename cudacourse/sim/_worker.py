"""Isolated worker process of the CPU simulator: loads one built module and runs its launchers.

Started by ``SimLibrary`` through the worker channel (``cudacourse/workers/channel.py``) as
``python _worker.py LIB CHECKED ORDER SEED FD``, FD its end of the channel's socket. It imports nothing heavy
(no torch) so it starts in a few tens of milliseconds. Requests arrive as JSON lines on FD; every answer is one
JSON line on FD. A crash inside the module is reported on FD by the runtime's signal handler (then the process
exits), so the parent always learns what happened.

Buffers live in shared memory mapped by both processes (an anonymous file the parent passes by descriptor,
``{"op": "map", "fd": N, "size": S}``, again after it grew); the parent copies tensors in and out.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import socket
import sys


def main() -> None:
    """Serve requests until the parent closes its end of the socket (or asks the worker to exit)."""
    lib_path, checked, order, seed, fd = sys.argv[1:6]
    me = os.getpid()
    sock = socket.socket(fileno=int(fd))
    req = sock.makefile("rb")
    resp_fd_i = int(fd)  # the runtime's crash and timeout reports are written here too
    lib = ctypes.CDLL(lib_path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    lib.ccsim_api_init.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_int]
    lib.ccsim_api_init(int(checked), int(order), int(seed), resp_fd_i)
    lib.ccsim_api_install_signals()
    lib.ccsim_api_error.restype = ctypes.c_char_p
    lib.ccsim_api_profile_json.restype = ctypes.c_char_p
    lib.ccsim_api_profile_json.argtypes = [ctypes.c_int]
    lib.ccsim_rt_register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    lib.ccsim_api_host_begin.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    base_addr = 0
    map_size = 0
    mm = None

    def answer(obj: dict) -> None:
        sock.sendall((json.dumps(obj) + "\n").encode())

    for line in req:
        msg = json.loads(line)
        op = msg.get("op")
        if op == "exit":
            break
        if op == "map":
            if mm is not None:
                mm.close()
            mm = mmap.mmap(msg["fd"], msg["size"])  # the inherited descriptor stays open: a larger map comes later
            base_addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            map_size = msg["size"]
            answer({"ok": True})
            continue
        if op == "trace":  # the last call's profile with its recorded accesses (pictures)
            raw = lib.ccsim_api_profile_json(1).decode(errors="replace")
            sock.sendall(('{"profile": ' + raw + "}\n").encode())
            continue
        if op == "call":
            lib.ccsim_api_begin_call()
            lib.ccsim_api_clear_buffers()
            profile = bool(msg.get("profile"))
            lib.ccsim_api_set_profile(int(profile))
            n = len(msg["params"])
            argv = (ctypes.c_void_p * max(n, 1))()
            keep = []
            for k, p in enumerate(msg["params"]):
                if p["kind"] == "ptr":
                    addr = base_addr + p["offset"] if p["nbytes"] or p["offset"] else 0
                    if p.get("null"):
                        addr = 0
                    argv[k] = addr
                    if addr:
                        lib.ccsim_rt_register(addr, p["nbytes"], p["name"].encode(), p["elem"])
                else:
                    ct = getattr(ctypes, p["ctype"])
                    v = ct(p["value"])
                    keep.append(v)
                    argv[k] = ctypes.addressof(v)
            fn = getattr(lib, "ccsim_entry_" + msg["name"])
            fn.argtypes = [ctypes.c_void_p]
            fn.restype = ctypes.c_int
            # the mapping holds only device buffers: out of the host code's reach while the launcher runs
            # (the runtime opens it for launches, copies and fills), as host code cannot touch GPU memory
            if map_size:
                lib.ccsim_api_host_begin(base_addr, map_size)
            rc = fn(argv)
            if os.getpid() != me:  # a process the launcher forked returned here: it must not answer
                os._exit(0)       # for the worker, nor read its requests
            lib.ccsim_api_host_end()
            sys.stdout.flush()
            libc_fflush()
            out: dict = {"ok": True}
            if rc:
                err = lib.ccsim_api_error()
                out = {"error": json.loads(err.decode(errors="replace")) if err else {"kind": "crash"}}
            if profile:  # the counters of this call's launches, passed through as the runtime wrote them
                raw = lib.ccsim_api_profile_json(0).decode(errors="replace")
                sock.sendall((json.dumps(out)[:-1] + ', "profile": ' + raw + "}\n").encode())
            else:
                answer(out)
            continue
        answer({"error": {"kind": "crash", "message": f"unknown request {op!r}"}})


def libc_fflush() -> None:
    """Flush C stdio (kernel printf output) so the parent sees it after each call."""
    try:
        ctypes.CDLL(None).fflush(None)
    except OSError:
        pass


def die_with_parent() -> None:
    """Ask Linux to kill this worker when its parent dies (a killed notebook or pytest leaves no orphans)."""
    try:
        ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    die_with_parent()
    main()
    libc_fflush()
    # Skip interpreter teardown: the runtime's pool threads are blocked waiting for work, and joining them
    # from C++ static destructors can hang forever, leaving an orphan that holds the parent's pipes open.
    os._exit(0)
