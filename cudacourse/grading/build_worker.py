"""The warm-up builder: builds a lesson's kernel files before its tasks run (``python -m`` this module).

The grader starts it through ``processes.start_worker`` (sandboxed, like a task process) in a staged copy of the
submission, and reads its stdout (:mod:`cudacourse.grading.builds`). It runs none of the submission's code: it
only compiles, into the same cache entries that ``loader.Module`` would use, so the tests then load the builds.

Command line: ``LESSON BACKEND THREADS [FILE ...]``; the files to build (default: every kernel file of the
lesson; ``-``: none, e.g. the simulator's runtime and its precompiled headers alone). One line per event on
stdout: ``start FILE``, ``done FILE SECONDS``, ``fail FILE SECONDS ERROR_TYPE``, and before a ``fail`` of a
compile error ``error FILE JSON_MESSAGE`` (the grade's one build of it: its tasks fail with this message). On the
cuda backend a compile error is confirmed by a second build before it counts: ``retried FILE JSON_MESSAGE`` says
that the first failed and the second built (the first message, for the grade's log).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cudacourse import settings
from cudacourse.course import LessonInfo
from cudacourse.course import course as course_model
from cudacourse.loader import build_cuda, build_torch_cuda, exposed_functions, lesson_dir, load
from cudacourse.source import launcher, uses_torch

_LOCK = threading.Lock()


def say(*words: str) -> None:
    """Write one event line for the grader (whole lines: builds run on several threads)."""
    with _LOCK:
        sys.stdout.write(" ".join(words) + "\n")
        sys.stdout.flush()


def build(f: Path, backend: str) -> None:
    """Build one kernel file for ``backend`` as ``loader.Module`` would (same cache entry), saying how it went."""
    say("start", f.name)
    t0 = time.monotonic()
    try:
        try:
            _build_once(f, backend)
        except Exception as first:
            # A solution's file that builds in every other grade failed once in a cold GPU grade's warm-up (nvcc,
            # 1.7 s, 2026-11-29; its message was lost): a compile error on cuda counts only if a second build
            # fails too. (A file that does not compile costs one compile more; a stopped build is not retried.)
            if backend != "cuda" or type(first).__name__ != "CompileError":
                raise
            _build_once(f, backend)
            say("retried", f.name, json.dumps(str(first)[:4000]))
        say("done", f.name, f"{time.monotonic() - t0:.1f}")
    except Exception as e:  # noqa: BLE001 - every failure is reported to the grader, which goes on
        if type(e).__name__ == "CompileError":  # the grade's one build of it: its tasks fail with this message
            say("error", f.name, json.dumps(str(e)[:8000]))
        say("fail", f.name, f"{time.monotonic() - t0:.1f}", type(e).__name__)


def _build_once(f: Path, backend: str) -> None:
    """One build of ``f`` (see :func:`build`)."""
    text = f.read_text()
    if not uses_torch(text):
        # what loader.Module builds for this file (same cache entry), without loading it: no torch import
        # here, and no simulator or GPU worker
        las = [launcher(text, fn) for fn in exposed_functions(text)]
        if backend == "sim":
            from cudacourse.sim import SimLibrary

            SimLibrary.build(text, str(f.resolve()), las, checked=True)
        else:
            build_cuda(text, str(f.resolve()), las)
    elif backend == "cuda":
        # what loader.Module builds for this file (same cache entry), here rather than in the torch worker a
        # load would start: this process is confined as that worker would be, and the build is the longest
        # wait of a grade on a GPU (a worker's start-up, seconds on a busy machine, would add to it)
        build_torch_cuda(text, str(f.resolve()), exposed_functions(text))
    else:
        load(f, None, backend=backend)


def to_build(folder: Path, info: LessonInfo, only: set[str]) -> list[Path]:
    """The kernel files of ``info`` in ``folder`` to build (``only``: these names; empty: all), longest first."""
    todo = [folder / n for n in info.kernel_files if (folder / n).is_file() and Path(n).suffix in (".cu", ".cuh")
            and (not only or n in only)]
    # the longest build (a torch-route file) starts first, on a thread of its own beside the others
    todo.sort(key=lambda f: f.name not in info.torch_files)
    return todo


def main(argv: list[str]) -> None:
    """Build the files ``argv`` names (see the module's docstring), then exit at once."""
    name, backend, threads = argv[0], argv[1], int(argv[2])
    only = set(argv[3:])  # the files to build (default: every kernel file of the lesson; "-": none)
    folder = lesson_dir(name)
    info = course_model(settings.current().root).lesson(name)
    if backend == "sim":
        from cudacourse.sim import runtime_headers, runtime_object

        runtime_object()  # the simulator's runtime: the instructor's code, built once into the cache
        runtime_headers()  # and its headers, with ccsim.h precompiled (built in place: never copied from a seed)
    todo = to_build(folder, info, only)
    extra = int(len(todo) > 1 and todo[0].name in info.torch_files)
    # the compilers run as child processes: threads suffice
    with ThreadPoolExecutor(max(1, threads) + extra) as pool:
        list(pool.map(lambda f: build(f, backend), todo))
    os._exit(0)  # never wait on a slow interpreter exit


if __name__ == "__main__":
    main(sys.argv[1:])
