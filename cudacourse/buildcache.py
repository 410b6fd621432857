"""Content-keyed build cache with locks that recover from interrupted builds.

Every backend builds into ``<root>/<kind>/<key>/`` where ``key`` hashes everything that affects the
artifact (source text, flags, compiler versions). ``root`` is ``$CUDA_COURSE_BUILD`` or the git-ignored
``.cudacourse-build/`` folder at the top of the course checkout.

A build holds ``<dir>.lock``, a file holding the builder's host and pid. A lock whose process is gone (a
notebook kernel restarted mid-build, a Ctrl-C) is *stale*: the next build says so, removes it and goes
on. A live lock is waited for, up to ``wait_s``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_DONE = "DONE"


def build_root() -> Path:
    """Folder that holds every build (``$CUDA_COURSE_BUILD`` or ``.cudacourse-build`` in the repo)."""
    env = os.environ.get("CUDA_COURSE_BUILD")
    root = Path(env).expanduser() if env else REPO_ROOT / ".cudacourse-build"
    root.mkdir(parents=True, exist_ok=True)
    return root


def content_key(*parts: str | bytes) -> str:
    """A short stable hash of the given parts."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _lock_owner(lock: Path) -> dict | None:
    try:
        return json.loads(lock.read_text())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_is_stale(lock: Path, grace_s: float = 5.0) -> bool:
    """True when ``lock`` was left by a process on this host that no longer runs.

    A lock with unreadable contents counts as stale once it is older than ``grace_s`` (its writer had
    time to fill it in). A lock from another host is never judged stale by pid.
    """
    owner = _lock_owner(lock)
    if owner is None:
        try:
            return time.time() - lock.stat().st_mtime > grace_s
        except FileNotFoundError:
            return False
    if owner.get("host") != socket.gethostname():
        return False
    return not _pid_alive(int(owner.get("pid", -1)))


def stale_locks(root: Path | None = None) -> list[Path]:
    """Every stale lock under the build root (``doctor`` reports them)."""
    root = root or build_root()
    return [p for p in root.glob("*/*.lock") if lock_is_stale(p)]


def _acquire(lock: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    me = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()})
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if lock_is_stale(lock):
                warnings.warn(f"removed a stale build lock {lock} left by an interrupted build "
                              f"(owner {_lock_owner(lock)}); rebuilding", stacklevel=3)
                lock.unlink(missing_ok=True)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"build lock {lock} is held by a running process {_lock_owner(lock)}; if no build is "
                    f"running, delete the lock file (or run `python -m cudacourse doctor --fix`)") from None
            time.sleep(0.1)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(me)
        return


def cached(kind: str, key: str, build: Callable[[Path], None], *, wait_s: float = 600.0) -> Path:
    """Return the build folder for ``(kind, key)``, running ``build(folder)`` first if it is not complete.

    ``build`` writes its outputs into the folder it is given. A build that raises leaves nothing behind;
    a complete build is marked so that a half-written folder is never reused.
    """
    d = build_root() / kind / key
    if (d / _DONE).exists():
        return d
    d.parent.mkdir(parents=True, exist_ok=True)
    lock = d.parent / (key + ".lock")
    _acquire(lock, wait_s)
    try:
        if (d / _DONE).exists():  # someone finished it while we waited
            return d
        tmp = d.parent / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            build(tmp)
            (tmp / _DONE).write_text(str(time.time()))
            shutil.rmtree(d, ignore_errors=True)
            tmp.rename(d)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return d
    finally:
        lock.unlink(missing_ok=True)
