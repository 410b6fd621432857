"""Content-keyed build cache with OS file locks (``filelock``).

Every backend builds into ``<root>/<kind>/<key>/`` where ``key`` hashes everything that affects the
artifact (source text, flags, compiler versions). ``root`` is ``$CUDA_COURSE_BUILD`` or the git-ignored
``.cudacourse-build/`` folder at the top of the course checkout.

A build holds an OS lock on ``<dir>.lock`` (``filelock``): the operating system drops it when its process
dies (a notebook kernel restarted mid-build, a Ctrl-C), so an interrupted build never blocks the next one.
A lock held by a live build is waited for, up to ``wait_s``. A build is complete only when its ``DONE``
marker exists, so a half-written folder is never reused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import filelock

from cudacourse.settings import ENV

REPO_ROOT = Path(__file__).resolve().parent.parent
# Set by the grader for a submission's workers: a cache of builds of the instructor's own files (identical
# solution or stub files), looked up first, read-only to them; their own builds go to their own cache.
SHARED_ENV = ENV["build_shared"]
# Set by the grader for the worker that builds a submission's files identical to the instructor's: the instructor's
# cache, from which builds are copied into the run's cache (read only by that worker, never by learner code).
SEED_ENV = ENV["build_seed"]
_DONE = "DONE"


def build_root() -> Path:
    """Folder that holds every build (``$CUDA_COURSE_BUILD`` or ``.cudacourse-build`` in the repo)."""
    from cudacourse.settings import current

    root = current().build_dir or (current().root or REPO_ROOT) / ".cudacourse-build"
    root.mkdir(parents=True, exist_ok=True)
    return root


def content_key(*parts: str | bytes) -> str:
    """A short stable hash of the given parts."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def local_headers(path: str | os.PathLike[str]) -> str:
    """The headers next to a kernel file (``*.h``, ``*.cuh``, ``*.hpp``), names and contents, for its cache key:
    a file that includes ``cc_mma.h`` from its folder is rebuilt when that header changes."""
    d = Path(path).parent
    if not Path(path).is_file():
        return ""
    parts = [f"{h.name}\n{h.read_text(errors='replace')}" for ext in ("*.h", "*.cuh", "*.hpp")
             for h in sorted(d.glob(ext))]
    return "\n".join(parts)


def find_cached(kind: str, key: str) -> Path | None:
    """The complete build ``(kind, key)`` in the shared cache (``Settings.build_shared``) or this process's own, or
    None; builds nothing."""
    from cudacourse.settings import current

    shared = current().build_shared
    for root in ([Path(shared)] if shared else []) + [build_root()]:
        if (root / kind / key / _DONE).exists():
            return root / kind / key
    return None


def cached(kind: str, key: str, build: Callable[[Path], None], *, wait_s: float = 600.0,
           relocatable: bool = True) -> Path:
    """Return the build folder for ``(kind, key)``, running ``build(folder)`` first if it is not complete.

    ``build`` writes its outputs into the folder it is given; a complete build of the same key in the seed cache
    (``Settings.build_seed``) is copied instead. A build that raises leaves nothing behind;
    a complete build is marked so that a half-written folder is never reused. The lock file itself stays
    (unlocked): deleting it would race with a process already waiting on it.

    ``relocatable=False``: the build records its own folder's path (a precompiled header names the headers it
    read), so it is made in its final folder rather than renamed there, and never copied from the seed cache.
    """
    from cudacourse.settings import current

    shared, seed = current().build_shared, current().build_seed
    if shared and (Path(shared) / kind / key / _DONE).exists():
        return Path(shared) / kind / key  # a build of the instructor's own files (read-only to this process)
    d = build_root() / kind / key
    if (d / _DONE).exists():
        return d
    d.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(d.parent / (key + ".lock")))
    try:
        lock.acquire(timeout=wait_s)
    except filelock.Timeout:
        raise TimeoutError(f"another build of {d} has held its lock for more than {wait_s:g} s; wait for it to "
                           "finish (a build whose process died releases its lock by itself)") from None
    try:
        if (d / _DONE).exists():  # someone finished it while we waited
            return d
        if not relocatable:  # (the lock is held: no one else writes d, and without DONE no one reads it)
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            try:
                build(d)
                (d / _DONE).write_text(str(time.time()))
            except BaseException:
                shutil.rmtree(d, ignore_errors=True)
                raise
            return d
        tmp = d.parent / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            if seed and (Path(seed) / kind / key / _DONE).exists():
                shutil.copytree(Path(seed) / kind / key, tmp)  # the grader's copy of the instructor's build
            else:
                tmp.mkdir()
                build(tmp)
            (tmp / _DONE).write_text(str(time.time()))
            shutil.rmtree(d, ignore_errors=True)
            tmp.rename(d)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return d
    finally:
        lock.release()
