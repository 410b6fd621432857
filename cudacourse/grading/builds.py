"""Warm-up builds: a lesson's kernel files built before its tasks run, each by a confined build worker
(:mod:`cudacourse.grading.build_worker`), once per submission (and once per run for the instructor's own files).

Task processes wait for the builds their tasks use (:func:`build_event`); a build that failed or was stopped is
recorded on the submission, and the task processes are told so (``processes.child_env``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cudacourse.buildcache import SEED_ENV, SHARED_ENV
from cudacourse.grading.plan import instructor_files
from cudacourse.grading.processes import build_dir_of, child_env, kill_group, python, scratch_of, start_worker
from cudacourse.grading.session import GradeSession
from cudacourse.grading.staging import Submission
from cudacourse.grading.verdicts import BUILT_ONCE
from cudacourse.progress import heartbeat


def start_builds(sub: Submission, lesson: str, names: Sequence[str], gs: GradeSession) -> None:
    """Start building ``names`` (kernel files of ``lesson``) for ``sub`` in the background, unless started."""
    if not sub.builds.claim(lesson):
        return
    for n in names:
        sub.builds.event(lesson, n)
    threading.Thread(target=_warm_up, args=(sub, lesson, list(names), gs), daemon=True,
                     name=f"build-{sub.name}-{lesson}").start()


# The course's copy (a submission's files identical to the instructor's: nothing a learner wrote) is held to this
# limit when --build-timeout is shorter: --build-timeout bounds what a learner's file can cost, and a cache hit of
# the instructor's relu_torch.cu, whose worker still imports torch, outlasted a 15 s limit on a loaded machine
# (tests/test_grader_bad_input.py, 2026-11-29), failing a task the learner never touched.
COURSE_COPY_LIMIT_S = 300.0


def build_event(sub: Submission, lesson: str, name: str, gs: GradeSession) -> threading.Event | None:
    """Set once the warm-up has built ``name`` of ``lesson`` (or given up on it); starts the warm-up if not started.

    None for a file outside the lesson's warm-up list (its event would never be set): the tests build it
    themselves."""
    names = sub.to_build.get(lesson, [name])
    if name not in names:
        return None
    start_builds(sub, lesson, names, gs)
    return sub.builds.event(lesson, name)


def _warm_up(sub: Submission, lesson: str, names: list[str], gs: GradeSession) -> None:
    """Build ``names`` of ``lesson`` for ``sub`` (cold builds) before the tests that use them run.

    Runs in a thread of its own from the start of the grade, at most ``jobs`` lessons at a time
    (``gs.builders``), in ``sub.build_slot``, a copy of the staged submission that no test uses. A submission's
    files identical to the instructor's (its solution or stub) are first built into the run's shared cache by a
    worker that loads nothing else of the submission (``plan.instructor_files``); the submission's own workers
    read that cache and write only their own. Building runs none of the submission's code, so the tests'
    watchdog can then hold each case to ``--timeout`` alone. A file that does not compile is left to the
    tests, which report it. A file whose build is still running after ``gs.config.build_timeout`` is recorded in
    ``sub.unbuildable``: the tests then fail at once with that verdict instead of building it again. Every
    file's event is set in the end, whatever happened, so no task process waits for ever.
    """
    try:
        with gs.builders:
            if gs.stopping.is_set():
                return
            assert sub.build_slot is not None
            own = list(names)
            if sub.build_dir is not None:
                mine = [(n, h) for n, h in instructor_files(sub, lesson, gs.config) if n in names]
                # (with no file of the instructor's: the simulator's runtime and headers alone)
                shared = gs.shared_built.run((lesson, tuple(mine)), lambda: _build(
                    sub, sub.build_slot, lesson, gs, [n for n, _ in mine] or ["-"], gs.config.build_dir, shared=None,
                    label="the course's copy", seed=gs.config.build_seed,
                    limit=max(gs.config.build_timeout, COURSE_COPY_LIMIT_S)))
                # Files the shared build finished are in the run's cache, which the task processes read first:
                # no second worker for them (a torch-route file would cost a torch worker for a cache hit).
                done = set(shared or ()) & {n for n, _ in mine}
                for n in sorted(done):
                    sub.builds.event(lesson, n).set()
                own = [n for n in names if n not in done]
                if not own and (gs.config.backend_name != "sim" or shared is not None):
                    return  # nothing of its own to build (the simulator's runtime and headers: in the shared cache)
            _build(sub, sub.build_slot, lesson, gs, own or ["-"], build_dir_of(sub, gs.config),
                   shared=gs.config.build_dir if sub.build_dir else None,
                   on_file=lambda n: sub.builds.event(lesson, n).set())
    except Exception as e:  # noqa: BLE001 - the tasks then build (and report) the file themselves
        gs.say(sub, f"{lesson}: the warm-up build failed ({type(e).__name__}: {e}); the tests build the files")
    finally:
        for n in names:
            sub.builds.event(lesson, n).set()


def _build(sub: Submission, slot: Path, lesson: str, gs: GradeSession, only: list[str], build_dir: Path,
           shared: Path | None, label: str = "", on_file: Callable[[str], None] | None = None,
           seed: Path | None = None, limit: float | None = None) -> set[str]:
    """One warm-up worker: build ``only`` (``["-"]``: none) of ``lesson`` into ``build_dir``, reading ``shared``
    first; progress lines as files start and end, ``on_file(name)`` as each ends; stopped after ``limit`` seconds
    (default ``gs.config.build_timeout``). ``seed``: a cache whose builds are copied instead of built (only for the
    instructor's own files: the worker may read all of it). Returns the names of the files that built."""
    limit = gs.config.build_timeout if limit is None else limit
    env = child_env(slot, gs.config.seed, gs.config.backend, build_dir)
    if shared is not None:
        env[SHARED_ENV] = str(shared)
    if seed is not None and seed.is_dir():
        env[SEED_ENV] = str(seed)
    built: set[str] = set()
    gs.check_running()
    proc = start_worker([python(), "-m", "cudacourse.grading.build_worker", lesson, gs.config.backend_name,
                         str(gs.config.build_threads), *only],
                        cwd=slot, env=env,
                        scratch=scratch_of(slot), writable=[build_dir],
                        readable=[p for p in (shared, seed) if p is not None and p.is_dir()],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace")
    gs.live.add(proc)
    t0 = time.monotonic()
    what = f" ({label})" if label else ""
    gs.say(sub, f"{lesson}: building the kernel files{what} ...")
    building: list[str] = []  # the files being built now (the reader thread's view)

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            word = raw.split()
            if len(word) >= 3 and word[0] == "error":
                with contextlib.suppress(ValueError):
                    sub.build_errors[f"{lesson}/{word[1]}"] = BUILT_ONCE + str(json.loads(raw.split(None, 2)[2]))
                continue
            if len(word) >= 3 and word[0] == "retried":  # (a first failed build, not confirmed by the second)
                with contextlib.suppress(ValueError):
                    first = str(json.loads(raw.split(None, 2)[2]))
                    gs.say(sub, f"{lesson}: {word[1]} failed to build once and built on a second try; the first "
                                f"failure: {first[-1500:]}")
                continue
            if len(word) >= 2 and word[0] == "start":
                building.append(word[1])
                gs.say(sub, f"{lesson}: {word[1]} ...")
            elif len(word) >= 3 and word[0] in ("done", "fail"):
                if word[1] in building:
                    building.remove(word[1])
                if word[0] == "done":
                    built.add(word[1])
                how = "built" if word[0] == "done" else f"does not build ({' '.join(word[3:4]) or 'error'})"
                gs.say(sub, f"{lesson}: {word[1]} {how} in {word[2]} s")
                if on_file is not None:
                    on_file(word[1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        with heartbeat(lambda text: gs.say(sub, f"{lesson}: {text}"),
                       lambda: f"building {', '.join(building)}" if building else ""):
            proc.wait(timeout=limit)
        reader.join(timeout=5.0)
        gs.say(sub, f"{lesson}: builds done in {time.monotonic() - t0:.1f} s")
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.wait()
        reader.join(timeout=5.0)
        for name in list(building):
            sub.unbuildable[f"{lesson}/{name}"] = limit
        which = "--build-timeout" if limit == gs.config.build_timeout else "the course's copy's limit"
        gs.say(sub, f"{lesson}: the build{' of ' + ', '.join(building) if building else 's'} stopped after "
                    f"{limit:g} s ({which})")
    finally:
        gs.live.discard(proc)
    return built
