"""Confinement of untrusted learner code by the operating system (issue 14, DESIGN.md "Trust boundary").

Learner code (kernel libraries, host launchers, exercise Python files, and the builds of them) runs only
in worker processes started by :func:`confined_popen`. A confined worker

- can write only its ``scratch`` directory (and the ``read_write`` paths its caller names);
- can read only what it needs: the Python installation and its site-packages, system libraries, the
  compiler toolchain, its own staged build (``read_only``), and on a GPU ``/dev/nvidia*`` and the CUDA
  libraries; not the hidden tests, the instructor's files or other submissions;
- cannot open TCP connections or listen, nor reach abstract UNIX sockets outside itself;
- cannot signal processes outside its own group, and sees no grader process (its own PID namespace,
  with its own ``/proc``);
- is stopped as a whole: when the worker exits or is killed, every process it started dies too,
  ``setsid()`` or not (it is PID 1's child in its own PID namespace);
- runs under resource limits: address space, CPU time, number of processes, file size.

Mechanisms, all from the kernel, each checked by :func:`available`:

=====================  =====================================================================
Landlock (ABI >= 6)    filesystem read/write/execute allow-list, TCP bind/connect denied,
                       signal and abstract-socket scoping (via the ``landlockpy`` binding)
user namespace         lets an unprivileged grader create the others; the worker keeps no
                       capability (its uid inside is not 0, so ``execve`` drops them)
PID namespace          private process tree and ``/proc``; the whole tree dies with it
network namespace      only a loopback interface that is down
mount namespace        private ``/proc``, and empty private ``/run`` and ``/dev/shm``
rlimits                RLIMIT_AS (RLIMIT_DATA on a GPU: CUDA reserves huge address ranges),
                       RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE=0; the process
                       count by RLIMIT_NPROC, or by a ``pids`` cgroup when the grader is root
                       (the kernel never applies RLIMIT_NPROC to uid 0)
=====================  =====================================================================

When a mechanism is missing, :func:`available` says which promise is not kept and why, and
:func:`confined_popen` refuses to start the worker unless the caller passes ``allow_unconfined=True``;
reports then say "unconfined" (see ``docs/CONFINEMENT.md``). It never fails open silently.

How it works: ``confined_popen`` starts ``python -I -S confine.py --policy JSON -- ARGV`` (this file, run
as a script with light standard-library modules and ``landlockpy`` only). That launcher moves itself into the
cgroup, unshares the namespaces, and forks a small *init* (PID 1 of the new namespace) that mounts
the private ``/proc``, restricts itself with Landlock, forks the worker (which sets its rlimits and
``execve``s ``ARGV``), forwards signals to it, reaps orphans, and exits with the worker: the kernel
then kills everything left in the namespace. The launcher forwards signals to init and exits with the
worker's exact status (a worker killed by SIGSEGV shows as ``returncode == -11``), so callers treat
the returned ``Popen`` as the worker itself. Use :func:`stop_group` to stop it as a whole.
"""


from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import struct
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["Confinement", "ConfinementUnavailable", "Limits", "SourceTooLarge", "available", "check_source_size",
           "confined_popen", "describe", "has_gpu_devices", "learner_memory", "stop_group", "system_read_paths"]

# Environment knob for tests and for instructors who must rule a mechanism out (comma-separated:
# landlock, namespaces, cgroup). Switching one off is reported exactly like a kernel that lacks it.
_OFF_ENV = "CUDA_COURSE_CONFINE_OFF"


# ----------------------------------------------------------------------------------------------------
# Launcher side: this file run as a script (python -I -S: light standard-library modules and landlockpy
# only, all defined before the public API's heavier imports, to keep each worker's start short)
# ----------------------------------------------------------------------------------------------------

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 1, 32, 4096
_PR_SET_PDEATHSIG = 1
_FORWARDED = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
              signal.SIGALRM, signal.SIGCONT, signal.SIGWINCH]


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _unshare_namespaces(pid: bool = True) -> None:
    """New user, PID (unless ``pid`` is false), network and mount namespaces for this process's future children.

    Python 3.11 has no ``os.unshare`` (3.12+), hence ctypes. The worker's uid inside is not 0 (an
    unprivileged grader keeps its own uid; root becomes uid 1000 inside), so ``execve`` drops every
    capability, while files keep their real owners for the kernel's permission checks.
    """
    uid, gid = os.getuid(), os.getgid()
    _check(_libc().unshare(_CLONE_NEWUSER | (_CLONE_NEWPID if pid else 0) | _CLONE_NEWNET | _CLONE_NEWNS), "unshare")
    inside_uid = uid if uid else 1000
    inside_gid = gid if gid else 1000
    try:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{inside_uid} {uid} 1\n")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{inside_gid} {gid} 1\n")
    except PermissionError:
        # Nested use: inside a confined worker, Landlock keeps /proc read-only, so the maps cannot be
        # written. Without them the ids read as 65534 inside; the namespaces still work, and execve
        # still drops every capability (the uid inside is not 0).
        pass


def _private_mounts(policy: dict[str, Any]) -> list[str]:
    """In the new mount namespace: a /proc that shows only this PID namespace, and empty private /run and
    /dev/shm (hiding sockets such as a Docker or D-Bus socket, and other processes' shared memory)."""
    libc = _libc()
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "making / private")
    _check(libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mounting /proc")
    mounted = []
    if _proc_system_read_only():
        mounted.append("/proc")  # only the worker's own processes are writable there (see _landlock)
    allowed = [*policy["ro"], *policy["rw"]]
    size = policy["limits"].get("file_size") or (64 << 20)
    for d in ("/run", "/dev/shm"):
        if os.path.isdir(d) and not os.path.islink(d) and not any(p == d or p.startswith(d + "/") for p in allowed):
            opts = f"size={size},nr_inodes=4096,mode=1777".encode()
            _check(libc.mount(b"tmpfs", d.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts), f"mounting {d}")
            mounted.append(d)
    return mounted


def _proc_system_read_only() -> bool:
    """Make everything in the fresh /proc read-only except the process directories (/proc/sys,
    /proc/sysrq-trigger, /proc/driver, ...): bind each onto itself, then remount it read-only. True when
    every one succeeded.

    Why: the CUDA driver names its threads by writing ``/proc/self/task/<tid>/comm`` and fails to start
    (error 304) when it cannot, so GPU workers need write access to /proc (measured on the H100 machine,
    docs/CONFINEMENT.md). Landlock cannot tell one /proc file from another that appears later, so the
    worker gets WRITE_FILE on /proc, and the kernel's read-only mounts keep the system files out of reach
    (the worker's uid maps to the grader's, which may be root's). The process directories show only the
    worker's own PID namespace.
    """
    libc = _libc()
    ok = True
    for name in os.listdir("/proc"):
        path = f"/proc/{name}"
        if name.isdigit() or os.path.islink(path):
            continue
        b = path.encode()
        ok &= libc.mount(b, b, None, _MS_BIND | _MS_REC, None) == 0 and libc.mount(
            None, b, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) == 0
    return bool(ok)


def _landlock(policy: dict[str, Any], private: Sequence[str] = ()) -> None:
    """Restrict this process and its future children: the read/write allow-lists, no TCP, scoped signals
    and abstract UNIX sockets. Applied by the worker's init, so nothing inside escapes it."""
    from landlockpy import AccessFS, Ruleset, Scope, fs_for_abi

    abi = int(_landlock_abi()[0])
    every = fs_for_abi(abi)
    file_rights = (AccessFS.EXECUTE | AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.TRUNCATE
                   | AccessFS.IOCTL_DEV) & every
    read = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE
    dev = AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV
    # handled_net None = every network right this kernel knows, and no port is allowed
    with Ruleset(handled_fs=every, scoped=Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) as rs:
        rules = [(p, read) for p in policy["ro"]] + [(p, every) for p in policy["rw"]]
        rules += [(p, dev) for p in policy["dev"]]
        rules += [(p, every) for p in private if p == "/dev/shm"]  # the worker's own empty tmpfs
        # CUDA writes its threads' names (_proc_system_read_only); nested, /proc is the enclosing sandbox's private one
        if policy.get("gpu") and ("/proc" in private or policy.get("nested")):
            rules.append(("/proc", read | AccessFS.WRITE_FILE | AccessFS.TRUNCATE))
        if policy.get("gpu") and policy.get("nested"):  # the driver's files in /dev/shm: the enclosing sandbox's
            rules.append(("/dev/shm", every))            # own tmpfs (a nested sandbox cannot mount its own)
        for path, access in rules:
            if not os.path.exists(path):
                continue
            if not os.path.isdir(path):
                access &= file_rights
            rs.allow_path(path, access & every)
        rs.restrict()


def _landlock_abi() -> tuple[int, str]:
    try:
        import landlockpy  # (found through the sys.path entry the caller passed: the launcher runs with -S)
        from landlockpy import _syscall
    except ImportError:
        return 0, "the landlockpy package is not installed (pip install landlockpy)"
    if getattr(_syscall, "_libc", "") is None:
        # Hand the binding the C library it would otherwise look up with ctypes.util.find_library, which
        # runs `ldconfig -p`: 200 ms per worker start here.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        libc.prctl.restype = ctypes.c_int
        _syscall._libc = libc
    try:
        return int(landlockpy.abi_version()), ""
    except OSError as e:
        return 0, f"the kernel refuses it ({e}; is 'landlock' in /sys/kernel/security/lsm?)"


def _set_rlimits(policy: dict[str, Any], inside_userns: bool) -> None:
    import resource

    lim = policy["limits"]
    pairs = [(resource.RLIMIT_DATA if policy["gpu"] else resource.RLIMIT_AS, lim["memory"]),
             (resource.RLIMIT_CPU, lim["cpu_s"]), (resource.RLIMIT_FSIZE, lim["file_size"]),
             (resource.RLIMIT_NOFILE, lim["open_files"]), (resource.RLIMIT_CORE, 0)]
    # RLIMIT_NPROC counts the uid's processes in this user namespace only (Linux 5.14+), so set inside it;
    # +2 for the launcher's init and the worker itself. Outside a user namespace it would count every
    # process of the uid, so it is set relative to what that uid runs already.
    if lim["processes"] and os.getuid() != 0 and not policy.get("cgroup"):
        base = 2 if inside_userns else _count_processes(os.getuid())
        pairs.append((resource.RLIMIT_NPROC, lim["processes"] + base))
    if lim.get("nice"):
        os.nice(lim["nice"])
    for which, value in pairs:
        if value is None:
            continue
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        # CPU: the soft limit sends SIGXCPU, the hard one a SIGKILL a second later
        resource.setrlimit(which, (value, value + 1 if which == resource.RLIMIT_CPU and hard != value else value))


def _count_processes(uid: int) -> int:
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def _cgroup_parent() -> tuple[str, str]:
    """A pids-cgroup directory under which this (root) process may create children, or ('', why)."""
    try:
        lines = _read("/proc/self/cgroup").splitlines()
    except OSError as e:
        return "", f"cannot read /proc/self/cgroup: {e}"
    for line in lines:
        _n, ctrls, path = line.split(":", 2)
        if "pids" in ctrls.split(","):  # cgroup v1 pids hierarchy
            base = os.path.join("/sys/fs/cgroup/pids", path.lstrip("/"))
            break
        if ctrls == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):  # cgroup v2
            base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
            if "pids" not in _read(os.path.join(base, "cgroup.subtree_control")).split():
                return "", f"cgroup v2: the pids controller is not enabled for children of {base}"
            break
    else:
        return "", "no pids cgroup controller is mounted"
    probe = os.path.join(base, f"cudacourse-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
        ok = os.path.exists(os.path.join(probe, "pids.max"))
        os.rmdir(probe)
    except OSError as e:
        return "", f"cannot create a cgroup under {base}: {e.strerror}"
    return (base, "") if ok else ("", f"{base} has no pids.max")


def _enter_cgroup(parent: str, processes: int) -> str:
    """Move this launcher into a fresh pids cgroup limited to ``processes`` (+3: launcher, init, slack)."""
    for name in os.listdir(parent):  # remove those of launchers that were SIGKILLed
        if name.startswith("cudacourse-") and not _launcher_alive(name):
            try:
                if not _read(os.path.join(parent, name, "cgroup.procs")).strip():
                    os.rmdir(os.path.join(parent, name))
            except OSError:
                pass
    cg = os.path.join(parent, f"cudacourse-{os.getpid()}-{os.urandom(4).hex()}")
    os.mkdir(cg)
    _write(os.path.join(cg, "pids.max"), str(processes + 3))
    _write(os.path.join(cg, "cgroup.procs"), str(os.getpid()))
    return cg


def _launcher_alive(name: str) -> bool:
    """Whether the launcher that made cgroup ``cudacourse-PID-...`` still runs. A live launcher's cgroup is
    empty between its mkdir and its move into it: removing it then made that launcher fail (exit 126), seen
    once in CI with several graders starting workers at once. A reused PID only leaves an empty cgroup."""
    try:
        os.kill(int(name.split("-")[1]), 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _leave_cgroup(cg: str) -> None:
    try:
        _write(os.path.join(os.path.dirname(cg), "cgroup.procs"), str(os.getpid()))
        os.rmdir(cg)
    except OSError:
        pass


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _forward_signals(to_pid: int) -> None:
    def fwd(sig: int, _frame: object) -> None:
        try:
            os.kill(to_pid, sig)
        except ProcessLookupError:
            pass

    for s in _FORWARDED:
        signal.signal(s, fwd)


def _die_with_parent() -> None:
    parent = os.getppid()
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(137)


def _exit_like(status: int) -> NoReturn:
    """Exit with a child's wait status: the same exit code, or death by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _exec_worker(policy: dict[str, Any], argv: list[str], inside_userns: bool) -> NoReturn:
    try:
        if policy.get("uid") is not None:  # root without namespaces: become an unprivileged user
            os.setgroups([])
            os.setresgid(policy["uid"], policy["uid"], policy["uid"])
            os.setresuid(policy["uid"], policy["uid"], policy["uid"])
        _set_rlimits(policy, inside_userns)
        for s in _FORWARDED:
            signal.signal(s, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)  # (blocked by the launcher around its forks)
        os.execv(argv[0], argv)
    except OSError as e:
        sys.stderr.write(f"confine: cannot start {argv[0]}: {e}\n")
        os._exit(127)


def _init(policy: dict[str, Any], argv: list[str], status_w: int) -> NoReturn:
    """PID 1 of the worker's namespace: start the worker, forward signals, reap, exit with it."""
    try:
        _die_with_parent()
        private = _private_mounts(policy) if policy.get("proc") else []
        if policy["landlock"]:
            _landlock(policy, private)
    except Exception as e:  # noqa: BLE001 - any failure here must stop the worker, never run it unconfined
        sys.stderr.write(f"confine: could not confine the worker: {e}\n")
        if policy["strict"]:
            os.write(status_w, struct.pack("i", 126 << 8))
            os._exit(126)
    worker = os.fork()
    if worker == 0:
        os.close(status_w)
        _exec_worker(policy, argv, inside_userns=True)
    _forward_signals(worker)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)  # what arrived meanwhile goes to the worker now
    status = 1 << 8
    while True:
        try:
            pid, st = os.wait()
        except ChildProcessError:
            break
        if pid == worker:
            status = st
            break
    # Exiting as PID 1 makes the kernel kill what the worker left (daemons, setsid() children) and wait for
    # them before this process is reaped, so the launcher exits only once the namespace is empty.
    os.write(status_w, struct.pack("i", status))
    os._exit(0)


def _launch(policy: dict[str, Any], argv: list[str]) -> NoReturn:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _die_with_parent()
    cg = _enter_cgroup(policy["cgroup"], policy["limits"]["processes"] or 1 << 20) if policy.get("cgroup") else None
    if not policy["ns"]:
        try:
            if policy["landlock"]:
                _landlock(policy)
        except Exception as e:  # noqa: BLE001
            sys.stderr.write(f"confine: could not confine the worker: {e}\n")
            if policy["strict"]:
                os._exit(126)
        _exec_worker(policy, argv, inside_userns=False)
    status_r, status_w = os.pipe()
    try:
        # A GPU worker inside a worker keeps the enclosing PID namespace: /proc (the enclosing one's, which a
        # nested sandbox cannot remount) must number its threads as gettid() does, or the CUDA driver cannot
        # name them and does not start (error 304, measured on the H100 machine). It still dies with the
        # enclosing sandbox, and Landlock's scoping keeps it from signalling or tracing the processes there.
        _unshare_namespaces(pid=not (policy.get("gpu") and policy.get("nested")))
    except OSError as e:
        sys.stderr.write(f"confine: could not create namespaces: {e}\n")
        os._exit(126)
    # Signals that arrive before the forwarding handlers exist wait (blocked) instead of killing the launcher
    # or being dropped by init (PID 1 ignores signals it has no handler for).
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    init = os.fork()
    if init == 0:
        os.close(status_r)
        _init(policy, argv, status_w)
    os.close(status_w)
    _forward_signals(init)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    while True:
        try:
            _pid, st = os.waitpid(init, 0)
            break
        except ChildProcessError:
            st = 1 << 8
            break
    data = os.read(status_r, 4)
    if len(data) == 4:
        st = struct.unpack("i", data)[0]
    if cg is not None:
        _leave_cgroup(cg)
    _exit_like(st)


def _inside_sandbox() -> bool:
    """True inside a worker of this module: PID 1 of this PID namespace is a confine.py launcher's init.
    (A worker cannot fake that: it cannot replace PID 1 of its own namespace.)"""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
    except OSError:
        return False
    return b"--policy" in cmd and any(a.endswith(b"/confine.py") for a in cmd)


def _really_root() -> bool:
    """True when this process is uid 0 of the machine, whatever its uid inside a user namespace (the kernel
    exempts that uid from RLIMIT_NPROC)."""
    if os.getuid() == 0:
        return True
    for f in ("/proc/self/uid_map", "/proc/1/uid_map"):
        try:
            rows = [ln.split() for ln in _read(f).splitlines()]
        except OSError:
            continue
        rows = [[int(x) for x in r] for r in rows if len(r) == 3]  # "inside outside count"
        if rows and f == "/proc/self/uid_map":
            uid = os.getuid()
            return any(i <= uid < i + n and o + (uid - i) == 0 for i, o, n in rows)
        if rows:  # unmapped ids in a nested sandbox: its init's single-id map says who started it
            return any(o == 0 and n == 1 for _i, o, n in rows)
    return False


def _probe() -> dict[str, Any]:
    """What works here, tried for real in short-lived children (printed as JSON by ``--probe``)."""
    out: dict[str, Any] = {"uid": os.getuid(), "nested": _inside_sandbox(), "kuid0": _really_root()}
    abi, why = _landlock_abi()
    out.update(landlock_abi=abi, landlock_why=why, landlockpy=bool(abi) or "not installed" not in why)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: try the namespaces and a private /proc, report on the pipe
        res = {"userns": False, "proc": False}
        try:
            _unshare_namespaces()
            res["userns"] = True
            inner = os.fork()
            if inner == 0:
                try:
                    _libc().mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None)
                    _check(_libc().mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None),
                           "mounting /proc")
                    os._exit(0 if os.getpid() == 1 else 3)
                except OSError as e:
                    os.write(w, json.dumps({"proc_why": str(e)}).encode() + b"\n")
                    os._exit(2)
            _p, st = os.waitpid(inner, 0)
            res["proc"] = os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
        except OSError as e:
            res["userns_why"] = f"{e} (kernel.unprivileged_userns_clone or user.max_user_namespaces?)"
        os.write(w, json.dumps(res).encode() + b"\n")
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        for line in f:
            out.update(json.loads(line))
    os.waitpid(pid, 0)
    if os.getuid() == 0:
        out["cgroup"], out["cgroup_why"] = _cgroup_parent()
    return out


def _main(args: list[str]) -> NoReturn:
    if len(args) >= 2 and args[0] == "--path":  # where landlockpy is installed
        sys.path.insert(0, args[1])
        args = args[2:]
    if args[:1] == ["--probe"]:
        print(json.dumps(_probe()))
        sys.stdout.flush()
        os._exit(0)
    if len(args) >= 4 and args[0] == "--policy" and args[2] == "--":
        _launch(json.loads(args[1]), args[3:])
    sys.stderr.write("usage: confine.py --probe | --policy JSON -- ARGV...\n")
    os._exit(2)


if __name__ == "__main__":
    try:
        _main(sys.argv[1:])
    except OSError as e:
        if e.errno == errno.EPERM:
            sys.stderr.write(f"confine: not permitted: {e}\n")
        else:
            sys.stderr.write(f"confine: {e}\n")
        os._exit(126)


import importlib.util  # noqa: E402 - the launcher above needs none of these
import shutil  # noqa: E402
import site  # noqa: E402
import subprocess  # noqa: E402
from collections.abc import Iterable, Mapping  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

_THIS = Path(__file__).resolve()
_MIN_LANDLOCK_ABI = 6  # filesystem + TCP (ABI 4) + signal and abstract-socket scoping (ABI 6)


def _launcher(*args: str) -> list[str]:
    """The command that runs this file as the launcher: no site (fast start), landlockpy's folder passed."""
    spec = importlib.util.find_spec("landlockpy")
    where = ["--path", str(Path(spec.origin).parent.parent)] if spec and spec.origin else []
    return [sys.executable, "-I", "-B", "-S", str(_THIS), *where, *args]


# ----------------------------------------------------------------------------------------------------
# Public API: limits, what is available, starting and stopping a confined worker
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Resource limits of one confined worker (``None`` leaves a limit as inherited).

    ``memory`` is the address-space limit (RLIMIT_AS) in bytes; with ``gpu=True`` it becomes a data-segment
    limit (RLIMIT_DATA), because the CUDA driver reserves far more address space than it uses.
    ``cpu_s`` is CPU seconds per process (RLIMIT_CPU; SIGXCPU, then SIGKILL one second later).
    ``processes`` counts the worker's processes *and threads* (a ``pids`` cgroup when the grader is root,
    else RLIMIT_NPROC inside the worker's own user namespace; default 4 per core, at least 64, since torch
    and the simulator start a thread pool per core). ``file_size`` caps every file written
    (RLIMIT_FSIZE: SIGXFSZ); it also sizes the private ``/dev/shm``. ``open_files`` is RLIMIT_NOFILE.
    ``nice`` (0-19) is added to the worker's scheduling niceness: a worker that should give way to others.
    """

    memory: int | None = 4 << 30
    cpu_s: int | None = 120
    processes: int | None = field(default_factory=lambda: max(64, 4 * (os.cpu_count() or 1)))
    file_size: int | None = 256 << 20
    open_files: int | None = 1024
    nice: int = 0

    def __post_init__(self) -> None:
        for name in ("memory", "cpu_s", "processes", "file_size", "open_files"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ValueError(f"Limits.{name} must be a positive int or None, not {v!r}")
        if not isinstance(self.nice, int) or isinstance(self.nice, bool) or not 0 <= self.nice <= 19:
            raise ValueError(f"Limits.nice must be an int from 0 to 19, not {self.nice!r}")


@dataclass(frozen=True)
class Confinement:
    """What confinement this machine offers to :func:`confined_popen` (from :func:`available`).

    ``missing`` lists every promise of the module docstring that cannot be kept, each naming the
    mechanism and why it is unavailable; ``confined`` is true only when the list is empty.
    """

    landlock_abi: int = 0
    namespaces: tuple[str, ...] = ()
    private_proc: bool = False
    process_limit: str = ""  # "pids cgroup", "pids cgroup of the enclosing sandbox", "RLIMIT_NPROC" or ""
    worker_uid: int | None = None  # uid the worker runs as when it must leave root without namespaces
    missing: tuple[str, ...] = ()
    details: dict[str, str] = field(default_factory=dict)

    @property
    def confined(self) -> bool:
        """Every promise is kept."""
        return not self.missing

    def mechanisms(self) -> str:
        """The mechanisms in force, e.g. ``landlock ABI 7 + user/pid/net/mount namespaces + rlimits``."""
        parts = []
        if self.landlock_abi:
            parts.append(f"landlock ABI {self.landlock_abi}")
        if self.namespaces:
            parts.append("/".join(self.namespaces) + " namespaces")
        if self.process_limit.startswith("pids cgroup"):
            parts.append(self.process_limit)
        if self.worker_uid is not None:
            parts.append(f"uid {self.worker_uid}")
        parts.append("rlimits")
        return " + ".join(parts)

    def describe(self) -> str:
        """One line for reports and ``doctor``: the mechanisms, or ``unconfined: <why>``."""
        if self.confined:
            return self.mechanisms()
        return "unconfined: " + "; ".join(self.missing) + f" (in force: {self.mechanisms()})"


class ConfinementUnavailable(RuntimeError):
    """The worker cannot be confined as promised, and the caller did not allow running it unconfined."""


class SourceTooLarge(ValueError):
    """A submitted source file is larger than the grader accepts."""


_AVAILABLE: Confinement | None = None


def available(refresh: bool = False) -> Confinement:
    """Probe (once per process) which confinement mechanisms work here, in a short-lived child process."""
    global _AVAILABLE
    if _AVAILABLE is None or refresh:
        out = subprocess.run(_launcher("--probe"), capture_output=True, text=True,
                             env=_launcher_env(os.environ), stdin=subprocess.DEVNULL, check=False)
        try:
            probe = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            probe = {"error": f"the confinement probe failed (exit code {out.returncode}): {out.stderr[-500:]}"}
        _AVAILABLE = _judge(probe)
    return _AVAILABLE


def describe() -> str:
    """Which confinement is in force for workers started now (``available().describe()``)."""
    return available().describe()


def has_gpu_devices() -> bool:
    """NVIDIA device files exist on this machine (whatever backend ``auto`` picks: importing torch may touch the
    driver). Task processes then get the devices and the CUDA libraries, and no address-space limit
    (:func:`learner_memory`)."""
    return os.path.exists("/dev/nvidiactl")


# What a worker that runs learner code on the CPU may map (:func:`learner_memory`). A pool thread of the simulator
# reserves ~200 MiB: up to 1024 fiber regions of 128 KiB (a 1024-thread block), a 64 MiB malloc arena and its own
# stack. Measured (a simulator worker, one launch of 1024-thread blocks over 4M floats, this course's 2-core machine,
# 2026-11-27): VmPeak 0.49 GiB with 2 pool threads, 3.4 GiB with 16, 5.7 GiB with 32, checked mode.
_LEARNER_BASE = 3 << 30
_LEARNER_PER_THREAD = 256 << 20
_TORCH_EXTRA = 2 << 30  # torch itself (~0.7 GiB of address space on import) and its thread pools


def learner_memory(env: Mapping[str, str] | None = None, torch: bool = False) -> int | None:
    """The address-space limit (RLIMIT_AS, bytes) of a worker that runs learner code on the CPU: 3 GiB, plus 256 MiB
    for each thread of the simulator's pool (``CCSIM_WORKERS`` of ``env``, default ``os.environ``, else one per core;
    clamped to 1..32 as the runtime clamps it), plus 2 GiB for a process that imports ``torch``. A host allocation
    of many GB then fails in the worker (``malloc`` returns NULL, ``new`` throws) instead of filling the machine.
    ``None`` (no limit) for a process that imports torch on a machine with a GPU (:func:`has_gpu_devices`): its
    CUDA build maps, and a CUDA context reserves, far more address space than any such limit allows."""
    if torch and has_gpu_devices():
        return None
    env = os.environ if env is None else env
    try:
        threads = int(env.get("CCSIM_WORKERS") or 0) or os.cpu_count() or 1
    except ValueError:
        threads = os.cpu_count() or 1
    return _LEARNER_BASE + _LEARNER_PER_THREAD * min(32, max(1, threads)) + (_TORCH_EXTRA if torch else 0)


def _nvidia_devices() -> list[str]:
    """The NVIDIA device files, by name (not by listing /dev: inside a sandbox /dev cannot be listed, and a
    nested GPU worker would then get no device at all)."""
    names = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps",
             *(f"nvidia{i}" for i in range(64))]
    return [f"/dev/{n}" for n in names if os.path.exists(f"/dev/{n}")]


def system_read_paths(gpu: bool = False) -> list[Path]:
    """Paths every worker may read and execute: Python and its packages, system libraries, toolchains.

    Not included: ``/home``, ``/root``, ``/tmp``, ``/srv``, ``/work``, other users' files, and all of
    ``/etc`` except the few files the dynamic linker and the compilers read (so ``/etc/passwd`` and
    ``/etc/shadow`` stay unreadable). ``gpu`` adds the NVIDIA device files, driver and CUDA libraries.
    """
    cands: list[str] = ["/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/opt/conda",
                        "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                        "/etc/localtime", "/proc", "/sys/devices/system/cpu", "/dev/urandom", "/dev/random",
                        "/dev/zero"]
    cands += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()]
    # the course package itself (an editable install points into the checkout: only cudacourse/, never
    # the checkout's tests/, solutions/ or hidden folders)
    cands.append(str(_THIS.parent.parent))
    # the compilers torch's extension builds pick (CXX, CC; CUDAHOSTCXX for nvcc), as on a GPU machine where
    # CXX=/opt/gcc/bin/g++ was outside every other path
    named = [os.environ.get(v, "").split(" ")[0] for v in ("CXX", "CC", "CUDAHOSTCXX")]
    for tool in ("g++", "gcc", "c++", "nvcc", "addr2line", "ninja", *filter(None, named)):
        w = shutil.which(tool)
        if w:
            real = Path(w).resolve()
            cands.append(str(real.parent.parent if real.parent.name == "bin" else real.parent))
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        cands.append(cuda_home)
    if gpu:
        cands += ["/usr/local/cuda", "/usr/local/nvidia", "/sys", "/proc/driver/nvidia", "/etc/nvidia",
                  *_nvidia_devices()]
    out: list[Path] = []
    for c in cands:
        p = Path(c)
        if p.exists() and p not in out and str(p) not in ("/", "/home", "/root", "/tmp", "/work"):
            out.append(p)
    return out


def confined_popen(argv: Sequence[str | os.PathLike[str]], *, scratch: Path, env: Mapping[str, str],
                   read_only: Iterable[Path] = (), read_write: Iterable[Path] = (), limits: Limits = Limits(),
                   gpu: bool = False, allow_unconfined: bool = False, **popen_kwargs: Any) -> subprocess.Popen:
    """Start ``argv`` confined by the operating system; return its ``Popen`` (it behaves as the worker).

    ``scratch`` (created if missing) is the only directory the worker may write, besides ``read_write``;
    it is also its working directory (unless ``cwd=`` is given) and its ``TMPDIR``, ``HOME``,
    ``XDG_CACHE_HOME`` and ``CUDA_CACHE_PATH``. ``read_only`` adds paths to :func:`system_read_paths`
    (the staged build, the built library, the worker script). ``env`` is the worker's whole environment.
    ``gpu`` opens ``/dev/nvidia*`` read-write and the CUDA libraries read-only. ``popen_kwargs`` go to
    ``subprocess.Popen`` (``stdin``, ``stdout``, ``stderr``, ``pass_fds``, ``cwd``, ``text``); the worker
    always gets its own session.

    Raises ``ConfinementUnavailable`` (with :func:`describe`'s reason) when a promise cannot be kept,
    unless ``allow_unconfined``: then the worker runs with whatever mechanisms work, and the caller must
    report ``available().describe()``. Raises ``ValueError`` for bad arguments.
    """
    argv = [os.fspath(a) for a in argv]
    read_only, read_write = list(read_only), list(read_write)
    if not argv:
        raise ValueError("confined_popen needs a command (argv is empty)")
    for bad in ("start_new_session", "preexec_fn", "executable", "shell", "env"):
        if bad in popen_kwargs:
            raise ValueError(f"confined_popen sets {bad!r} itself; do not pass it")
    conf = available()
    if not conf.confined and not allow_unconfined:
        raise ConfinementUnavailable(
            f"cannot start a confined worker: {conf.describe()}. Fix what is missing (docs/CONFINEMENT.md), or "
            "pass allow_unconfined=True and report the grade as unconfined.")
    scratch = Path(scratch).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    env = dict(env)
    exe = argv[0]
    if "/" not in exe:
        found = shutil.which(exe, path=env.get("PATH", os.defpath))
        if not found:
            raise ValueError(f"{exe!r} is not on the worker's PATH ({env.get('PATH', os.defpath)})")
        argv[0] = found
    made = []
    # the worker's uid has no passwd entry (and /etc/passwd is unreadable): getpass.getuser(), which torch's
    # caches call, reads these first
    env.setdefault("USER", "cc-worker")
    env.setdefault("LOGNAME", env["USER"])
    for var, sub in (("TMPDIR", "tmp"), ("HOME", ""), ("XDG_CACHE_HOME", ".cache"), ("CUDA_CACHE_PATH", ".nv")):
        d = scratch / sub if sub else scratch
        d.mkdir(exist_ok=True)
        made.append(d)
        env[var] = str(d)
    ro = [*system_read_paths(gpu), *(Path(p).resolve() for p in read_only), Path(argv[0]).resolve()]
    rw = [scratch, *(Path(p).resolve() for p in read_write)]
    for p in [*(Path(p) for p in read_only), *ro[-1:], *rw]:
        if not p.exists():
            raise ValueError(f"path given to confined_popen does not exist: {p}")
    devices = ["/dev/null", "/dev/full"]
    if gpu:
        devices += _nvidia_devices()
    policy = {
        "ro": [str(p) for p in ro if p.exists()], "rw": [str(p) for p in rw],
        "dev": [d for d in devices if os.path.exists(d)],
        "limits": asdict(limits), "gpu": gpu,
        "landlock": conf.landlock_abi > 0, "ns": bool(conf.namespaces),
        "proc": conf.private_proc and not conf.details.get("nested"),
        "cgroup": conf.details.get("cgroup_parent", "") if conf.process_limit == "pids cgroup" else "",
        "uid": conf.worker_uid, "strict": not allow_unconfined, "nested": bool(conf.details.get("nested")),
    }
    if conf.worker_uid is not None:  # root without namespaces: the worker's uid must own its scratch
        for p in {*rw, *made}:
            os.chown(p, conf.worker_uid, conf.worker_uid)
    popen_kwargs.setdefault("cwd", str(scratch))
    popen_kwargs.setdefault("close_fds", True)
    cmd = _launcher("--policy", json.dumps(policy), "--", *argv)
    return subprocess.Popen(cmd, env=env, start_new_session=True, **popen_kwargs)


def describe_for_grading() -> str:
    """What the grader's task processes run under (the same on GPU machines: GPU workers get the NVIDIA
    devices and write access to their own /proc entries, see :func:`_proc_system_read_only`)."""
    return describe()


def stop_group(proc: subprocess.Popen, timeout: float | None = None) -> int:
    """Stop a worker from :func:`confined_popen` and everything it started; return its exit status.

    Kills the worker's init (PID 1 of its namespace), so the kernel kills every process inside before the
    launcher (``proc``) exits; ``setsid()`` escapes nothing. Without a PID namespace it kills the process
    group, which a ``setsid()`` child does escape (``available().missing`` says so).
    """
    if proc.poll() is not None:
        if not available().namespaces:  # what the worker left in its process group (setsid() escapes it)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return proc.returncode
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        kids = []
    for k in kids:
        try:
            os.kill(k, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        return proc.wait(timeout=timeout if kids else 0.5)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.kill()
    return proc.wait(timeout=timeout)


def check_source_size(paths: Iterable[Path], max_bytes: int = 1 << 20) -> None:
    """Refuse source files larger than ``max_bytes`` before anything builds them (a many-MB file would
    cost the grader minutes of compile time). Raises ``SourceTooLarge`` naming the file and the limit."""
    for p in paths:
        size = Path(p).stat().st_size
        if size > max_bytes:
            raise SourceTooLarge(
                f"{p} is too large ({size / 1e6:.1f} MB); submitted source files may be at most "
                f"{max_bytes / 1e6:.1f} MB. "
                "Remove generated or pasted data from it and submit the kernel code only.")



# ----------------------------------------------------------------------------------------------------
# Judging a probe: which promises hold
# ----------------------------------------------------------------------------------------------------


def _off() -> set[str]:
    return {w.strip() for w in os.environ.get(_OFF_ENV, "").split(",") if w.strip()}


def _launcher_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in ("PATH", "LANG", "LC_ALL", _OFF_ENV)}


def _judge(probe: dict[str, Any]) -> Confinement:
    if "error" in probe:
        return Confinement(missing=(probe["error"],), details={"probe": str(probe)})
    off = _off()
    missing: list[str] = []
    abi = int(probe.get("landlock_abi") or 0)
    if "landlock" in off:
        abi, why = 0, f"switched off by {_OFF_ENV}"
    else:
        why = probe.get("landlock_why", "")
    if abi and abi < _MIN_LANDLOCK_ABI:
        why = f"Landlock ABI {abi} < {_MIN_LANDLOCK_ABI} (needs Linux 6.12+ for signal scoping)"
    if not abi or abi < _MIN_LANDLOCK_ABI:
        missing.append(f"filesystem/TCP/signal confinement: Landlock unavailable ({why})")
        abi = abi if abi >= 1 and probe.get("landlockpy") else 0
    ns_ok = bool(probe.get("userns")) and "namespaces" not in off
    ns_why = f"switched off by {_OFF_ENV}" if "namespaces" in off else probe.get("userns_why", "")
    # Nested (a worker starting workers): Landlock forbids mounting, but /proc is already the enclosing
    # sandbox's private one, which shows no grader process.
    proc_ok = ns_ok and (bool(probe.get("proc")) or bool(probe.get("nested")))
    if not ns_ok:
        missing.append(f"private PID/network namespaces: unavailable ({ns_why}); a setsid() child escapes the group "
                       "stop and grader processes are visible")
    elif not proc_ok:
        missing.append(f"private /proc: mounting it failed ({probe.get('proc_why', '')}); grader processes are "
                       "visible in /proc")
    uid = int(probe.get("uid", os.getuid()))
    worker_uid = None
    if probe.get("kuid0") and uid != 0 and probe.get("nested"):
        # a worker of a root grader starting workers: the enclosing sandbox's pids cgroup counts them all
        plimit, cg = "pids cgroup of the enclosing sandbox", ""
    elif uid == 0 or probe.get("kuid0"):
        cg = probe.get("cgroup", "")
        if cg and "cgroup" not in off:
            plimit = "pids cgroup"
        else:
            plimit = ""
            cwhy = f"switched off by {_OFF_ENV}" if "cgroup" in off else probe.get("cgroup_why", "")
            missing.append(f"process limit: running as root, where RLIMIT_NPROC never applies, and no pids cgroup "
                           f"({cwhy})")
        if not ns_ok:
            worker_uid = 65534  # nobody: at least not root (and RLIMIT_NPROC then applies)
            plimit = "RLIMIT_NPROC"
            missing = [m for m in missing if not m.startswith("process limit")]
    else:
        plimit = "RLIMIT_NPROC"
        cg = ""
    return Confinement(landlock_abi=abi, namespaces=("user", "pid", "net", "mount") if ns_ok else (),
                       private_proc=proc_ok, process_limit=plimit, worker_uid=worker_uid, missing=tuple(missing),
                       details={"cgroup_parent": cg or "", "nested": "yes" if probe.get("nested") else "",
                                "probe": json.dumps(probe)})


