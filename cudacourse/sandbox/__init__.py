"""The sandbox: confinement of untrusted learner code by the operating system (DESIGN.md "Trust boundary").

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

The sandbox is a layer of its own, below everything that starts learner code (the simulator, the workers in
``cudacourse/workers/``, the grader's task processes), and imports nothing of theirs. Its files:

- ``launcher.py``: the program that confines one worker (run as a script: namespaces, Landlock, rlimits,
  cgroup, the namespace's init); it also answers ``--probe``;
- ``probe.py``: :func:`available`, what this machine offers, judged from the launcher's probe;
- this file: the limits, the paths a worker may read, :func:`confined_popen` and :func:`stop_group`.

``confined_popen`` returns a ``Popen`` that behaves as the worker itself (its exit status is the worker's); use
:func:`stop_group` to stop it as a whole.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cudacourse.sandbox.probe import Confinement, available, describe, launcher_command

__all__ = ["Confinement", "ConfinementUnavailable", "Limits", "SourceTooLarge", "available", "check_source_size",
           "confined_popen", "describe", "describe_for_grading", "has_gpu_devices", "learner_memory", "stop_group",
           "system_read_paths"]

_PACKAGE = Path(__file__).resolve().parent.parent  # cudacourse/: workers read the course package, nothing beside it


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


class ConfinementUnavailable(RuntimeError):
    """The worker cannot be confined as promised, and the caller did not allow running it unconfined."""


class SourceTooLarge(ValueError):
    """A submitted source file is larger than the grader accepts."""


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
    # the bytecode of Python's packages where it is kept apart from them (PYTHONPYCACHEPREFIX: a grade's task
    # processes read it there on a machine whose packages ship none, grading.processes.bytecode_cache): read-only
    if sys.pycache_prefix:
        cands.append(sys.pycache_prefix)
    # the course package itself (an editable install points into the checkout: only cudacourse/, never
    # the checkout's tests/, solutions/ or hidden folders)
    cands.append(str(_PACKAGE))
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
    cmd = launcher_command("--policy", json.dumps(policy), "--", *argv)
    return subprocess.Popen(cmd, env=env, start_new_session=True, **popen_kwargs)


def describe_for_grading() -> str:
    """What the grader's task processes run under (the same on GPU machines: GPU workers get the NVIDIA
    devices and write access to their own /proc entries, see ``launcher._proc_system_read_only``)."""
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
