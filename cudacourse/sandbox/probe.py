"""What confinement this machine offers: the launcher's ``--probe`` run once per process, and judged.

:func:`available` runs ``launcher.py --probe`` in a short-lived child (what works here, tried for real) and
turns its answer into a :class:`Confinement`: the mechanisms in force and every promise of
``cudacourse.sandbox`` that cannot be kept, each naming the mechanism and why. Instructors and tests may rule a
mechanism out with ``CUDA_COURSE_CONFINE_OFF`` (read by ``settings.confine_off``); that is reported exactly
like a kernel that lacks it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudacourse import settings

LAUNCHER = Path(__file__).resolve().parent / "launcher.py"
_MIN_LANDLOCK_ABI = 6  # filesystem + TCP (ABI 4) + signal and abstract-socket scoping (ABI 6)


def launcher_command(*args: str) -> list[str]:
    """The command that runs the launcher: no site (fast start), landlockpy's folder passed."""
    spec = importlib.util.find_spec("landlockpy")
    where = ["--path", str(Path(spec.origin).parent.parent)] if spec and spec.origin else []
    return [sys.executable, "-I", "-B", "-S", str(LAUNCHER), *where, *args]


@dataclass(frozen=True)
class Confinement:
    """What confinement this machine offers to ``confined_popen`` (from :func:`available`).

    ``missing`` lists every promise of the ``cudacourse.sandbox`` docstring that cannot be kept, each naming the
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


_AVAILABLE: Confinement | None = None


def available(refresh: bool = False) -> Confinement:
    """Probe (once per process) which confinement mechanisms work here, in a short-lived child process."""
    global _AVAILABLE
    if _AVAILABLE is None or refresh:
        out = subprocess.run(launcher_command("--probe"), capture_output=True, text=True,
                             env=launcher_env(os.environ), stdin=subprocess.DEVNULL, check=False)
        try:
            probe = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            probe = {"error": f"the confinement probe failed (exit code {out.returncode}): {out.stderr[-500:]}"}
        _AVAILABLE = _judge(probe)
    return _AVAILABLE


def describe() -> str:
    """Which confinement is in force for workers started now (``available().describe()``)."""
    return available().describe()


def launcher_env(env: Mapping[str, str]) -> dict[str, str]:
    """The launcher's own environment when it probes (the worker's is the caller's ``env``)."""
    return {k: v for k, v in env.items() if k in ("PATH", "LANG", "LC_ALL", settings.CONFINE_OFF_ENV)}


def _judge(probe: dict[str, Any]) -> Confinement:
    if "error" in probe:
        return Confinement(missing=(probe["error"],), details={"probe": str(probe)})
    off = settings.confine_off()
    off_why = f"switched off by {settings.CONFINE_OFF_ENV}"
    missing: list[str] = []
    abi = int(probe.get("landlock_abi") or 0)
    if "landlock" in off:
        abi, why = 0, off_why
    else:
        why = probe.get("landlock_why", "")
    if abi and abi < _MIN_LANDLOCK_ABI:
        why = f"Landlock ABI {abi} < {_MIN_LANDLOCK_ABI} (needs Linux 6.12+ for signal scoping)"
    if not abi or abi < _MIN_LANDLOCK_ABI:
        missing.append(f"filesystem/TCP/signal confinement: Landlock unavailable ({why})")
        abi = abi if abi >= 1 and probe.get("landlockpy") else 0
    ns_ok = bool(probe.get("userns")) and "namespaces" not in off
    ns_why = off_why if "namespaces" in off else probe.get("userns_why", "")
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
            cwhy = off_why if "cgroup" in off else probe.get("cgroup_why", "")
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
