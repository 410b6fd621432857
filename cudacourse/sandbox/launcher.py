"""The sandbox's launcher: the program that confines one worker (run as a script, never imported by the course).

``cudacourse.sandbox.confined_popen`` starts ``python -I -B -S launcher.py --policy JSON -- ARGV``; the
promises it keeps and the mechanisms behind them are listed in ``cudacourse/sandbox/__init__.py``. This file
runs with light standard-library modules and ``landlockpy`` only (found through the ``--path`` its caller
passes: it runs with ``-S``), to keep each worker's start short.

How it works: the launcher moves itself into the cgroup, unshares the namespaces, and forks a small *init*
(PID 1 of the new namespace) that mounts the private ``/proc``, restricts itself with Landlock, forks the worker
(which sets its rlimits and ``execve``s ``ARGV``), forwards signals to it, reaps orphans, and exits with the
worker: the kernel then kills everything left in the namespace. The launcher forwards signals to init and exits
with the worker's exact status (a worker killed by SIGSEGV shows as ``returncode == -11``), so callers treat the
returned ``Popen`` as the worker itself. ``--probe`` prints, as JSON, what works here (``sandbox.probe`` judges it).
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
    """True inside a sandboxed worker: PID 1 of this PID namespace is this launcher's init.
    (A worker cannot fake that: it cannot replace PID 1 of its own namespace.)"""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
    except OSError:
        return False
    return b"--policy" in cmd and any(a.endswith(b"/sandbox/launcher.py") for a in cmd)


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
    sys.stderr.write("usage: launcher.py --probe | --policy JSON -- ARGV...\n")
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

