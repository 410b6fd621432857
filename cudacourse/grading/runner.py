"""Running tasks: collecting them, one pytest process per group of tasks under a watchdog, verdicts."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudacourse.buildcache import SEED_ENV, SHARED_ENV
from cudacourse.course import Course, Task, task_sort_key
from cudacourse.grading import protocol
from cudacourse.grading.staging import GpuGate, Once, Submission, restore
from cudacourse.progress import heartbeat
from cudacourse.results import GradingError, TaskResult, TaskSpec, TestRecord, fold_tasks, interrupted
from cudacourse.sandbox import (
    Confinement,
    Limits,
    available,
    confined_popen,
    has_gpu_devices,
    learner_memory,
    stop_group,
)
from cudacourse.settings import BUILD_ERRORS_ENV, UNBUILDABLE_ENV, Settings, to_env

# ----------------------------------------------------------------------------------------------------
# Worker processes: the one place where the grader starts learner code
# ----------------------------------------------------------------------------------------------------


GRADER_CPU_S = 3600  # CPU seconds one task process may use (its wall clock is the watchdog's: --timeout)


def confinement() -> Confinement:
    """What confinement the grader's workers get on this machine (probed once per process)."""
    return available()


def confine_mode() -> str:
    """``strict`` when every promise of ``confine.py`` holds here, else ``best-effort`` (reports say
    "unconfined: <why>")."""
    return "strict" if confinement().confined else "best-effort"


def worker_command(cmd: list[str]) -> list[str]:
    """The command line of a grading worker (the launcher of ``confine.py`` wraps it in :func:`start_worker`)."""
    return cmd


def start_worker(cmd: list[str], *, cwd: Path, env: dict[str, str], scratch: Path, writable: Sequence[Path] = (),
                 readable: Sequence[Path] = (), nice: int = 0, **popen: Any) -> subprocess.Popen[Any]:
    """Start one worker process (pytest over some tasks, a warm-up build), confined by the OS.

    It may write only ``cwd`` (its slot), ``scratch`` (its results file) and ``writable`` (the build
    cache); it reads the Python installation, the course package, and ``readable``; no network, no
    signals to the grader, and :func:`kill_group` stops it with everything it started. Where the machine
    cannot keep every promise it runs with what works (``allow_unconfined``), and every report says so.
    ``nice``: added to its scheduling niceness (``Limits.nice``).
    """
    if STOPPING.is_set():
        raise GradeInterrupted("the grade was stopped; no new worker starts")
    return confined_popen(worker_command(cmd), scratch=scratch, cwd=str(cwd), env=env,
                          read_only=[cwd, *readable], read_write=[cwd, *writable],
                          limits=_task_limits(env, nice), gpu=has_gpu_devices(),
                          allow_unconfined=confine_mode() != "strict", stdin=subprocess.DEVNULL, **popen)


# ----------------------------------------------------------------------------------------------------
# Stopping a grade (SIGTERM, Ctrl-C): what finished stands, everything else is "interrupted"
# ----------------------------------------------------------------------------------------------------

STOPPING = threading.Event()  # set by stop_all(): no worker starts any more
COLLECTED: list[TaskSpec] = []  # the tasks of the grade in progress (from collect_tasks)
FINISHED: dict[str, dict[str, TaskResult]] = {}  # submission name -> "lesson/id" -> result, as groups finish
_PROGRESS_LOCK = threading.Lock()


class GradeInterrupted(Exception):
    """The grade is being stopped; raised instead of starting a worker."""


def stop_all() -> None:
    """Stop the grade now: no new worker starts, every running one is stopped with all it started."""
    STOPPING.set()
    for proc in list(LIVE):
        kill_group(proc)


def interrupted_results(name: str) -> list[TaskResult]:
    """Every collected task of submission ``name``: its result if its group finished, else interrupted."""
    with _PROGRESS_LOCK:
        done = dict(FINISHED.get(name, {}))
    return [done.get(f"{t.lesson}/{t.id}") or interrupted(t) for t in COLLECTED]


def _task_limits(env: dict[str, str], nice: int = 0) -> Limits:
    """A task process's limits: CPU time, and an address-space limit where it has no CUDA context
    (``confine.learner_memory``: it runs lesson 06's ``train.py`` and lesson 07's ``custom_op.py`` itself)."""
    return Limits(memory=learner_memory(env, torch=True), cpu_s=GRADER_CPU_S, nice=nice)


def scratch_of(slot: Path) -> Path:
    """The folder beside ``slot`` where its worker writes results files (outside the staged tree)."""
    d = slot.parent / f"scratch-{slot.name}"
    d.mkdir(exist_ok=True)
    return d


def _python() -> str:
    return sys.executable


def build_dir_of(sub: Submission, st: RunSettings) -> Path:
    """The build cache of ``sub``'s workers: its own folder for a submission (no other submission can see or
    plant a build there), the run's cache for this checkout's own kernels."""
    return sub.build_dir or st.build_dir


def child_env(slot: Path, seed: int, backend: str | None, build_dir: Path,
              unbuildable: dict[str, float] | None = None, threads: int | None = None,
              build_errors: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: the run's settings (``settings.to_env``), nothing inherited of ours.

    ``unbuildable`` ("lesson/file" -> seconds): files whose build the warm-up stopped; the loader fails
    them at once (``loader.UNBUILDABLE_ENV``) instead of building them again in every test process; likewise
    ``build_errors`` ("lesson/file" -> message): files whose warm-up build failed, with the compiler's message.
    ``threads``: the CPU threads each of torch's pools may use (unless the caller's environment sets them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_COURSE_", "PYTEST_"))}
    if threads is not None:
        # One task process per core runs at once, and each computes float64 references on the CPU: with torch's
        # default (a thread per core in every process) 16 processes ran 16 threads each on an H100 machine's 16
        # cores, and spinning OpenMP threads burnt 1311 CPU-s of a 155 s grade
        # (results/nvidia-h100-80gb-hbm3/grade_profile/).
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, str(threads))
        # The simulator's workers too (a thread per core otherwise): a task process runs several (checked,
        # profiled...), and its process limit counts threads. On the H100 machine three workers of 17 threads beside
        # pytest's filled it, and one forked daemon more (the setsid attack) killed the next worker of its process.
        env.setdefault("CCSIM_WORKERS", str(max(2, threads)))
        # torch.compile in-process: a pool of compile workers costs more to start (and to stop) than the one small
        # graph a task compiles
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    run = Settings(root=slot, impl="student", backend=backend if backend in ("cuda", "sim") else "auto", seed=seed,
                   submission=slot, build_dir=build_dir, confine=confine_mode())
    env.update(to_env(run))
    env.update({"PYTHONPATH": str(slot), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"})
    if unbuildable:
        env[UNBUILDABLE_ENV] = ";".join(f"{k}={v:g}" for k, v in sorted(unbuildable.items()))
    if build_errors:
        env[BUILD_ERRORS_ENV] = json.dumps(build_errors)
    return env


# ----------------------------------------------------------------------------------------------------
# Collecting tasks
# ----------------------------------------------------------------------------------------------------


def test_paths(slot: Path, course: Course, lessons: list[str], hidden: bool) -> list[str]:
    """Test files (relative to the slot) of the graded lessons, hidden ones included."""
    files = sorted((slot / "tests").glob("test_*.py"))
    if hidden and (slot / "hidden").is_dir():
        files += sorted((slot / "hidden").rglob("test_*.py"))
    return [str(p.relative_to(slot)) for p in files if course.lesson_of_test(p) in lessons]


def collect_tasks(slot: Path, course: Course, declared: dict[tuple[str, str], Task], lessons: list[str], seed: int,
                  backend: str | None, build_dir: Path, timeout: float) -> list[TaskSpec]:
    """Collect every task of the graded lessons (public and hidden tests) in one pytest process.

    Titles and points come from ``declared`` (the instructor's course model and hidden ``tasks.toml``),
    never from what a process reported.
    """
    paths = test_paths(slot, course, lessons, hidden=True)
    if not paths:
        raise GradingError(f"no graded test files for lessons {', '.join(lessons)} (expected tests/test_NN_*.py)")
    report = scratch_of(slot) / f"collect-{slot.name}.jsonl"
    report.unlink(missing_ok=True)
    cmd = [*protocol.pytest_command(_python(), slot, report), "--collect-only", *paths]
    proc = start_worker(cmd, cwd=slot, env=child_env(slot, seed, backend, build_dir), scratch=report.parent,
                        writable=[build_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    LIVE.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        kill_group(proc)
        raise GradingError(f"collecting the tests took more than {timeout:g} s") from e
    finally:
        LIVE.discard(proc)
    if proc.returncode != 0:
        raise GradingError("collecting the instructor's tests failed (pytest exit code "
                           f"{proc.returncode}):\n" + _tail(out, 40))
    tasks: dict[tuple[str, str], TaskSpec] = {}
    for r in protocol.read_records(report):
        if r.get("event") != "collected" or r.get("task") is None:
            continue
        key = (r["lesson"], r["task"])
        if key not in declared:
            raise GradingError(f"{r['nodeid']}: task {r['task']} of lesson {r['lesson']} is declared nowhere")
        rel = str(Path(r["file"]).resolve().relative_to(slot.resolve()))
        t = tasks.get(key)
        if t is None:
            d = declared[key]
            t = tasks[key] = TaskSpec(d.id, d.lesson, d.title, d.points, [])
        if rel not in t.files:
            t.files.append(rel)
        if rel.startswith("hidden/"):
            t.hidden_cases += 1
    if not tasks:
        raise GradingError(f"no task-marked tests found in {', '.join(paths)}")
    out = sorted(tasks.values(), key=lambda t: (t.lesson, task_sort_key(t.id)))
    with _PROGRESS_LOCK:
        COLLECTED[:] = out
        FINISHED.clear()
    return out


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ----------------------------------------------------------------------------------------------------
# Running one task
# ----------------------------------------------------------------------------------------------------

# How long a pytest process may take to exit after it reported "finished" (every verdict is in its report by then):
# on the H100 machine a process that had run torch.compile and its GPU workers took 5-11 s to exit, holding a job
# and, for the timed process, the end of the grade. Stopping it loses nothing.
_EXIT_GRACE_S = 0.5
# The niceness of a task process that does not time: it gives way to the builds (their tasks wait for them; on the
# H100 machine the lesson 01 torch-route build took 51 s beside the task processes, 33 s alone, 42 s with this).
TASK_NICE = 5


@dataclass
class RunSettings:
    """What every task run of one grading run needs to know."""

    lessons: list[str]
    seed: int
    backend: str | None
    timeout: float
    build_timeout: float
    build_dir: Path
    hidden_feedback: str
    sanitize: bool
    backend_name: str = "sim"
    slots: queue.Queue[Path] = field(default_factory=queue.Queue)  # working folders, one per job
    progress: Callable[[str], None] | None = None  # prints a progress line (None: quiet, ``grade -q``)
    many: bool = False  # several submissions: progress lines name the submission
    instructor: dict[str, set[str]] = field(default_factory=dict)  # "lesson/file" -> sha256 of solution, stub
    shared_built: Once = field(default_factory=Once, repr=False)  # per (lesson, instructor files): the shared build
    timed: frozenset[tuple[str, str]] = frozenset()  # (lesson, id) of the tasks timed alone (speed, on a GPU)
    gate: GpuGate = field(default_factory=GpuGate, repr=False)
    task_files: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (lesson, id) -> files_of
    builders: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(1), repr=False)  # warm-ups
    build_threads: int = 1  # files one warm-up worker builds at once
    announced: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (name, lesson, id) -> status said
    task_threads: int = 1  # CPU threads of torch in each task process (``child_env``): cores / jobs
    timed_threads: int = 1  # ... in a process that times (alone on the machine once it has the gate): cores
    build_seed: Path | None = None  # the instructor's cache: builds of its own files, copied (``_warm_up``)

    def kernels_of(self, tasks: Sequence[TaskSpec]) -> set[tuple[str, str]]:
        """(lesson, file) of the kernel files (``.cu``) the tests of ``tasks`` use (``LessonInfo.files_of``)."""
        return {(t.lesson, f) for t in tasks for f in self.task_files.get((t.lesson, t.id), ()) if f.endswith(".cu")}

    def timed_alone(self, tasks: Sequence[TaskSpec]) -> bool:
        """Whether ``tasks`` time kernels and so run alone on the GPU (``gate``, exclusive)."""
        return self.backend_name == "cuda" and all((t.lesson, t.id) in self.timed for t in tasks)

    @contextlib.contextmanager
    def gpu_turn(self, exclusive: bool) -> Iterator[None]:
        """On a GPU, hold the gate while a task process runs: alone for speed tasks, shared for the others."""
        if self.backend_name != "cuda":
            yield
            return
        self.gate.acquire(exclusive)
        try:
            yield
        finally:
            self.gate.release(exclusive)

    def say(self, sub: Submission, line: str) -> None:
        """Print one progress line (thread-safe; nothing when quiet)."""
        if self.progress is None:
            return
        who = f"{sub.name}: " if self.many and sub.name else ""
        with _PROGRESS_LOCK:
            self.progress(who + line)


LIVE: set[subprocess.Popen[Any]] = set()  # child processes running now (stopped if the grader is stopped)


def signal_name(num: int) -> str:
    """``SIGSEGV`` for 11 (``signal N`` for a number Python does not name)."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Stop a worker and everything it started (``confine.stop_group``: its PID namespace, setsid or not)."""
    try:
        stop_group(proc, timeout=10.0)
    except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
        pass


@dataclass
class _Run:
    """What one pytest process over a group of tasks left behind."""

    collected: dict[str, dict[str, Any]]
    results: dict[str, dict[str, Any]]
    culprit: str | None  # the test that was running when the process died or stalled
    timed_out: bool
    rc: int
    output: str
    tampered: list[str]
    limit: float
    backend: str | None = None  # where the process's kernels ran, as it resolved it (its ``backend`` record)


def _run_pytest(sub: Submission, slot: Path, tasks: list[TaskSpec], st: RunSettings, tag: str) -> _Run:
    """Run the tests of ``tasks`` in one pytest process in ``slot`` under a progress watchdog.

    The process starts at once; its first test waits for the warm-up builds of the kernel files these tasks
    use (:func:`build_event`) and, on a GPU, for its turn (``st.gpu_turn``). The watchdog then stops the
    process when one test case runs longer than ``st.timeout``.
    """
    assert sub.pristine is not None
    if STOPPING.is_set():
        raise GradeInterrupted("the grade was stopped")
    restore(slot, sub.pristine, sub.manifest)
    report = scratch_of(slot) / f"{sub.pristine.name}-{slot.name}-{tag}.jsonl"
    report.unlink(missing_ok=True)
    log = slot.parent / f"{sub.pristine.name}-{slot.name}-{tag}.log"
    # only the files these tasks use: not every build of the lesson
    builds = [e for e in (build_event(sub, lesson, name, st) for lesson, name in sorted(st.kernels_of(tasks)))
              if e is not None and not e.is_set()]
    files = sorted({f for t in tasks for f in t.files})
    cmd = [*protocol.pytest_command(_python(), slot, report), "--tb=short", "-p", "no:randomly"]
    for t in tasks:
        cmd += [protocol.TASK_OPTION, t.id]
    # A process that times starts up (python, torch, pytest, the CUDA context) while other task processes
    # still use the GPU, and runs its first test once it has the GPU alone: the grader then creates ``go``.
    # (A process that creates ``go`` itself only times itself beside others: slower, never faster.)
    # Any other process whose builds still run starts up meanwhile too (python, torch and pytest's collection:
    # 5 s of the H100 machine's grade went there after the lesson 01 torch-route build, on its critical path),
    # and waits for ``go`` after collection.
    alone = st.timed_alone(tasks)
    go = scratch_of(slot) / f"go-{sub.pristine.name}-{slot.name}-{tag}"
    go.unlink(missing_ok=True)
    if alone:
        cmd += [protocol.WAIT_OPTION, str(go)]
        for e in builds:
            e.wait()
    elif builds:
        cmd += [protocol.GO_OPTION, str(go)]
    cmd += files
    timed_out = False
    limit = 0.0

    def launch() -> subprocess.Popen[Any]:
        env = child_env(slot, st.seed, st.backend, build_dir_of(sub, st), sub.unbuildable,
                        st.timed_threads if alone else st.task_threads, sub.build_errors)
        if sub.build_dir is not None:
            env[SHARED_ENV] = str(st.build_dir)
        proc = start_worker(cmd, cwd=slot, env=env, scratch=report.parent, writable=[build_dir_of(sub, st)],
                            readable=[st.build_dir] if sub.build_dir is not None else [],
                            nice=0 if alone else TASK_NICE,
                            stdout=logf, stderr=subprocess.STDOUT)
        LIVE.add(proc)
        return proc

    with contextlib.ExitStack() as turn, open(log, "w") as logf:
        told = (dict(sub.unbuildable), dict(sub.build_errors))
        if not (alone or builds):
            turn.enter_context(st.gpu_turn(exclusive=False))  # (runs its tests at once)
        proc = launch()
        if builds and not alone:
            for e in builds:
                e.wait()
            if (sub.unbuildable, sub.build_errors) != told:
                # a build it waited for was stopped or failed (its tests must fail at once with that build's
                # message, not build again): start afresh
                kill_group(proc)
                proc.wait()
                LIVE.discard(proc)
                proc = launch()
        if alone or builds:
            turn.enter_context(st.gpu_turn(exclusive=alone))
            go.touch()
        size, last = -1, time.monotonic()
        finished_at: float | None = None
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            try:
                now_size = report.stat().st_size
            except OSError:
                now_size = 0
            if now_size != size:
                size, last = now_size, time.monotonic()
                events = protocol.read_records(report)
                _announce(sub, tasks, events, st)
                if finished_at is None and any(e.get("event") == "finished" for e in events):
                    finished_at = time.monotonic()
            if finished_at is not None and time.monotonic() - finished_at > _EXIT_GRACE_S:
                kill_group(proc)  # every test has reported: its exit is not waited for
                proc.wait()
                rc = next(int(e["exitstatus"]) for e in protocol.read_records(report) if e.get("event") == "finished")
                break
            # Before the first test starts, pytest imports torch and the tests: allow a minute for that.
            limit = st.timeout + (60.0 if size <= 0 else 0.0)
            if time.monotonic() - last > limit:
                timed_out = True
                kill_group(proc)
                rc = proc.wait()
                break
    # Reap anything the tests left running in their session (a forked child of a hostile kernel).
    kill_group(proc)
    LIVE.discard(proc)
    events = protocol.read_records(report)
    collected = {e["nodeid"]: e for e in events if e.get("event") == "collected"}
    results = {e["nodeid"]: e for e in events if e.get("event") == "result"}
    started = [e["nodeid"] for e in events if e.get("event") == "start"]
    culprit = next((n for n in reversed(started) if n not in results), None)
    tampered = restore(slot, sub.pristine, sub.manifest)
    ran_on = next((str(e.get("backend")) for e in events if e.get("event") == "backend"), None)
    return _Run(collected, results, culprit, timed_out, rc, log.read_text(errors="replace"), tampered, limit, ran_on)


def _announce(sub: Submission, tasks: list[TaskSpec], events: list[dict[str, Any]], st: RunSettings) -> None:
    """Print the line of each task whose cases have all reported, while its process runs on (progress only).

    A failure that will be confirmed alone on a GPU waits for that run; the verdict of record is the one
    :func:`safe_run_group` returns, which prints again only if it differs from what was announced here."""
    if st.progress is None:
        return
    run = _Run({e["nodeid"]: e for e in events if e.get("event") == "collected"},
               {e["nodeid"]: e for e in events if e.get("event") == "result"}, None, False, 0, "", [], 0.0)
    for t in tasks:
        key = (sub.name, t.lesson, t.id)
        if key in st.announced:
            continue
        recs = _records(t, run)
        if not recs or any(r.outcome == "not-run" for r in recs):
            continue
        result = fold_tasks(recs)[0]
        if result.status == "fail" and st.backend_name == "cuda" and not _own_verdicts(recs):
            continue
        st.announced[key] = result.status
        st.say(sub, _task_line(t.lesson, t.id, t.title, result.status, sum(r.duration for r in recs)))


def _task_line(lesson: str, tid: str, title: str, status: str, seconds: float) -> str:
    return f"{lesson} task {tid} {title}: {status} ({seconds:.1f} s)"


def start_builds(sub: Submission, lesson: str, names: Sequence[str], st: RunSettings) -> None:
    """Start building ``names`` (kernel files of ``lesson``) for ``sub`` in the background, unless started."""
    if not sub.builds.claim(lesson):
        return
    for n in names:
        sub.builds.event(lesson, n)
    threading.Thread(target=_warm_up, args=(sub, lesson, list(names), st), daemon=True,
                     name=f"build-{sub.name}-{lesson}").start()


def build_event(sub: Submission, lesson: str, name: str, st: RunSettings) -> threading.Event | None:
    """Set once the warm-up has built ``name`` of ``lesson`` (or given up on it); starts the warm-up if not started.

    None for a file outside the lesson's warm-up list (its event would never be set): the tests build it
    themselves."""
    names = sub.to_build.get(lesson, [name])
    if name not in names:
        return None
    start_builds(sub, lesson, names, st)
    return sub.builds.event(lesson, name)


def _warm_up(sub: Submission, lesson: str, names: list[str], st: RunSettings) -> None:
    """Build ``names`` of ``lesson`` for ``sub`` (cold builds) before the tests that use them run.

    Runs in a thread of its own from the start of the grade, at most ``jobs`` lessons at a time
    (``st.builders``), in ``sub.build_slot``, a copy of the staged submission that no test uses. A submission's
    files identical to the instructor's (its solution or stub) are first built into the run's shared cache by a
    worker that loads nothing else of the submission (:func:`instructor_files`); the submission's own workers
    read that cache and write only their own. Building runs none of the submission's code, so the tests'
    watchdog can then hold each case to ``--timeout`` alone. A file that does not compile is left to the
    tests, which report it. A file whose build is still running after ``st.build_timeout`` is recorded in
    ``sub.unbuildable``: the tests then fail at once with that verdict instead of building it again. Every
    file's event is set in the end, whatever happened, so no task process waits for ever.
    """
    try:
        with st.builders:
            if STOPPING.is_set():
                return
            assert sub.build_slot is not None
            own = list(names)
            if sub.build_dir is not None:
                mine = [(n, h) for n, h in instructor_files(sub, lesson, st) if n in names]
                # (with no file of the instructor's: the simulator's runtime alone)
                shared = st.shared_built.run((lesson, tuple(mine)), lambda: _build(
                    sub, sub.build_slot, lesson, st, [n for n, _ in mine] or ["-"], st.build_dir, shared=None,
                    label="the course's copy", seed=st.build_seed))
                # Files the shared build finished are in the run's cache, which the task processes read first:
                # no second worker for them (a torch-route file would cost a torch worker for a cache hit).
                done = set(shared or ()) & {n for n, _ in mine}
                for n in sorted(done):
                    sub.builds.event(lesson, n).set()
                own = [n for n in names if n not in done]
                if not own and (st.backend_name != "sim" or shared is not None):
                    return  # nothing of its own to build (the simulator's runtime is in the shared cache too)
            _build(sub, sub.build_slot, lesson, st, own or ["-"], build_dir_of(sub, st),
                   shared=st.build_dir if sub.build_dir else None,
                   on_file=lambda n: sub.builds.event(lesson, n).set())
    except Exception as e:  # noqa: BLE001 - the tasks then build (and report) the file themselves
        st.say(sub, f"{lesson}: the warm-up build failed ({type(e).__name__}: {e}); the tests build the files")
    finally:
        for n in names:
            sub.builds.event(lesson, n).set()


def instructor_files(sub: Submission, lesson: str, st: RunSettings) -> list[tuple[str, str]]:
    """(name, sha256) of ``sub``'s kernel files of ``lesson`` identical to the instructor's solution or stub
    (none when any header of the lesson differs: a header is compiled into every file that includes it)."""
    assert sub.pristine is not None
    folder = sub.pristine / "lessons" / lesson
    files = sorted(p for p in folder.iterdir() if p.suffix in (".cu", ".cuh", ".h"))
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    known = {n: h for n, h in digest.items() if h in st.instructor.get(f"{lesson}/{n}", ())}
    if any(n not in known for n in digest if not n.endswith(".cu")):
        return []
    return sorted((n, h) for n, h in known.items() if n.endswith(".cu"))


def _build(sub: Submission, slot: Path, lesson: str, st: RunSettings, only: list[str], build_dir: Path,
           shared: Path | None, label: str = "", on_file: Callable[[str], None] | None = None,
           seed: Path | None = None) -> set[str]:
    """One warm-up worker: build ``only`` (``["-"]``: none) of ``lesson`` into ``build_dir``, reading ``shared``
    first; progress lines as files start and end, ``on_file(name)`` as each ends; stopped after
    ``st.build_timeout``. ``seed``: a cache whose builds are copied instead of built (only for the instructor's
    own files: the worker may read all of it). Returns the names of the files that built."""
    env = child_env(slot, st.seed, st.backend, build_dir)
    if shared is not None:
        env[SHARED_ENV] = str(shared)
    if seed is not None and seed.is_dir():
        env[SEED_ENV] = str(seed)
    built: set[str] = set()
    proc = start_worker([_python(), "-m", "cudacourse.grading.build_worker", lesson, st.backend_name,
                         str(st.build_threads), *only],
                        cwd=slot, env=env,
                        scratch=scratch_of(slot), writable=[build_dir],
                        readable=[p for p in (shared, seed) if p is not None and p.is_dir()],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace")
    LIVE.add(proc)
    t0 = time.monotonic()
    what = f" ({label})" if label else ""
    st.say(sub, f"{lesson}: building the kernel files{what} ...")
    building: list[str] = []  # the files being built now (the reader thread's view)

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            word = raw.split()
            if len(word) >= 3 and word[0] == "error":
                with contextlib.suppress(ValueError):
                    sub.build_errors[f"{lesson}/{word[1]}"] = BUILT_ONCE + str(json.loads(raw.split(None, 2)[2]))
                continue
            if len(word) >= 2 and word[0] == "start":
                building.append(word[1])
                st.say(sub, f"{lesson}: {word[1]} ...")
            elif len(word) >= 3 and word[0] in ("done", "fail"):
                if word[1] in building:
                    building.remove(word[1])
                if word[0] == "done":
                    built.add(word[1])
                how = "built" if word[0] == "done" else f"does not build ({' '.join(word[3:4]) or 'error'})"
                st.say(sub, f"{lesson}: {word[1]} {how} in {word[2]} s")
                if on_file is not None:
                    on_file(word[1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        with heartbeat(lambda text: st.say(sub, f"{lesson}: {text}"),
                       lambda: f"building {', '.join(building)}" if building else ""):
            proc.wait(timeout=st.build_timeout)
        reader.join(timeout=5.0)
        st.say(sub, f"{lesson}: builds done in {time.monotonic() - t0:.1f} s")
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.wait()
        reader.join(timeout=5.0)
        for name in list(building):
            sub.unbuildable[f"{lesson}/{name}"] = st.build_timeout
        st.say(sub, f"{lesson}: the build{' of ' + ', '.join(building) if building else 's'} stopped after "
                    f"{st.build_timeout:g} s (--build-timeout)")
    finally:
        LIVE.discard(proc)
    return built


def _sandbox_failure(run: _Run) -> str:
    """The launcher's own complaint when ``confine.py`` could not start the worker (exit 126 before any test
    was collected), else ''. A problem of the grading machine, never of the submission."""
    if run.rc != 126 or run.collected:
        return ""
    return next((ln for ln in run.output.splitlines() if ln.startswith("confine: ")), "")


def _crash_note(run: _Run) -> str:
    if sandbox := _sandbox_failure(run):
        return (f"the grader could not start this task's sandbox ({sandbox}), twice: a problem of "
                "the grading machine, not of your code. Grade again; if it stays, tell your instructor")
    if run.timed_out:
        return (f"timed out: one case ran for more than {run.limit:g} s (an endless loop? a kernel or launcher "
                "that never returns?); the process was stopped")
    if run.rc < 0 or run.rc > 5:
        sig = signal_name(-run.rc) if run.rc < 0 else f"exit code {run.rc}"
        return (f"the test process died ({sig}): a crash, e.g. a wild pointer in host code or a corrupted "
                "CUDA context")
    if run.rc in (2, 3, 4):
        return f"pytest could not run this task's tests (exit code {run.rc}):\n" + _tail(run.output, 12)
    return ""


def _records(task: TaskSpec, run: _Run) -> list[TestRecord]:
    out = []
    for nodeid, c in run.collected.items():
        if c.get("task") != task.id or c.get("lesson") != task.lesson:
            continue
        r = run.results.get(nodeid, c)
        rec = protocol.record_of(r)
        if nodeid not in run.results:
            rec.outcome = "not-run"
        out.append(rec)
    return out


# Failures that only the task's own code can cause: no confirming run alone on a GPU (a corrupted CUDA context
# shows as a CUDA error in a later case, never as wrong values, a compile error, or a store into the guards the GPU
# worker lays around the call's own buffers).
_OWN_VERDICTS = frozenset({"AssertionError", "CheckFailure", "CompileError", "OutOfBoundsError"})


BUILT_ONCE = "(built once for the whole grade, before its tasks ran; every task that uses this file fails so) "


def backend_mismatch(ran: str, graded: str) -> str:
    """The message of a task whose process ran its kernels on ``ran`` in a grade on ``graded``."""
    return (f"this task's process ran its kernels on backend {ran!r}, but this grade runs on {graded!r}: a fault "
            "of the grader, not of your code (no verdict measured elsewhere is kept). Tell your instructor.")


def _own_verdicts(recs: list[TestRecord]) -> bool:
    """True when every failed case of a task failed with a verdict of its own (:data:`_OWN_VERDICTS`)."""
    failed = [r for r in recs if r.outcome == "failed"]
    return bool(failed) and all(r.exc_type in _OWN_VERDICTS for r in failed)


def _verdict(sub: Submission, task: TaskSpec, recs: list[TestRecord], st: RunSettings, note: str = "",
             culprit: str | None = None, timed_out: bool = False, tampered: list[str] | None = None) -> TaskResult:
    """Fold a task's records (after its run) into a TaskResult (feedback is added after the whole run)."""
    for r in recs:
        if r.outcome == "not-run":
            r.outcome = "failed"
            if r.nodeid == culprit:
                r.message, r.exc_type = note or "this case never finished", "Timeout" if timed_out else "Crash"
            else:
                r.message = "not run: an earlier case of this task " + ("hung" if timed_out else "crashed")
                r.exc_type = "NotRun"
    if not recs:
        result = TaskResult(task.id, task.lesson, task.title, task.points, 0.0, "fail",
                            note or "no test of this task ran")
    else:
        recs.sort(key=lambda r: 0 if r.nodeid == culprit else (1 if r.exc_type != "NotRun" else 2))
        result = fold_tasks(recs)[0]
        result.title, result.points = task.title, task.points
        result.earned = result.points if result.status == "pass" else 0.0
    if tampered:
        result.status, result.earned = "fail", 0.0
        shown = ", ".join(tampered[:5]) + (" ..." if len(tampered) > 5 else "")
        result.message = (f"your code changed files of the grading harness while this task ran ({shown}). "
                          "The changes were undone and the task fails: kernels and launchers must not touch "
                          "files.\n" + result.message).strip()
    return result


def run_group(sub: Submission, tasks: list[TaskSpec], st: RunSettings) -> list[TaskResult]:
    """Grade ``tasks`` of one submission: together in one process, each failure confirmed alone.

    The group runs in one pytest process. A case that crashes or stalls fails its own task; the tasks
    not finished yet run again in a fresh process. On a GPU every task that failed in company is then
    graded again in a process of its own, and that verdict counts, so a kernel that corrupts the CUDA
    context costs only its own task (the simulator runs kernels in a worker process, so its failures
    in company stand). If the group changed harness files, every task is
    graded again alone, so the change is pinned on the task that made it.
    """
    final: dict[str, TaskResult] = {}
    remaining = list(tasks)
    confirm: list[TaskSpec] = []
    round_no = 0
    sandbox_retried = False
    while remaining:
        round_no += 1
        alone = len(remaining) == 1
        slot = st.slots.get()
        try:
            run = _run_pytest(sub, slot, remaining, st, f"{remaining[0].lesson}-{remaining[0].id}-r{round_no}")
        finally:
            st.slots.put(slot)
        if _sandbox_failure(run) and not sandbox_retried:  # a machine hiccup (exit 126): once more
            sandbox_retried = True
            continue
        if run.tampered and not alone:
            confirm += remaining
            break
        if run.backend is not None and run.backend != st.backend_name:
            # Never a verdict measured elsewhere than the report says (a speed point earned on the GPU in a
            # grade that reports the simulator).
            for t in remaining:
                final[t.id] = TaskResult(t.id, t.lesson, t.title, t.points, 0.0, "fail", backend_mismatch(
                    run.backend, st.backend_name))
            break
        note = _crash_note(run)
        progressed = False
        nxt = []
        for t in remaining:
            recs = _records(t, run)
            unfinished = [r for r in recs if r.outcome == "not-run"]
            holds_culprit = any(r.nodeid == run.culprit for r in recs)
            if holds_culprit or not unfinished or alone or not run.collected:
                if not recs and not alone and run.collected:
                    nxt.append(t)  # its tests were not collected in company (should not happen)
                    continue
                v = _verdict(sub, t, recs, st, note, run.culprit, run.timed_out, run.tampered if alone else None)
                # On a GPU a failure may come from a context an earlier case corrupted: confirm it alone,
                # unless every failed case has a verdict of its own (wrong values, a compile error), which no
                # other task can cause. The simulator runs kernels in a worker process per module, so its
                # verdicts in company stand.
                if (v.status == "fail" and not alone and st.backend_name == "cuda"
                        and not (holds_culprit and run.timed_out) and not _own_verdicts(recs)):
                    confirm.append(t)
                else:
                    final[t.id] = v
                progressed = True
            else:
                nxt.append(t)
        if not progressed:
            for t in nxt:
                final[t.id] = _verdict(sub, t, _records(t, run), st, note, run.culprit, run.timed_out)
            break
        remaining = nxt
    for t in confirm:
        final[t.id] = run_group(sub, [t], st)[0]
    return [final[t.id] for t in tasks if t.id in final]


def safe_run_group(sub: Submission, tasks: list[TaskSpec], st: RunSettings) -> list[TaskResult]:
    """:func:`run_group`, turning any grader exception into failed tasks (grading goes on).

    Results are recorded in :data:`FINISHED` as the group ends; a group still running when the grade is
    stopped (:func:`stop_all`) records nothing and returns nothing (its tasks are "interrupted").
    """
    if STOPPING.is_set():
        return []
    try:
        out = run_group(sub, tasks, st)
    except GradeInterrupted:
        return []
    except Exception as e:  # noqa: BLE001 - one broken group must never stop the grading
        out = [TaskResult(t.id, t.lesson, t.title, t.points, 0.0, "fail",
                          f"the grader could not run this task: {type(e).__name__}: {e}") for t in tasks]
    with _PROGRESS_LOCK:
        if STOPPING.is_set():  # its workers may have been stopped under it: verdicts not to be trusted
            return []
        FINISHED.setdefault(sub.name, {}).update({f"{r.lesson}/{r.id}": r for r in out})
    for r in out:
        if st.announced.get((sub.name, r.lesson, r.id)) != r.status:  # not announced as its process ran
            st.say(sub, _task_line(r.lesson, r.id, r.title, r.status, sum(t.duration for t in r.tests)))
    return out


def sanitizer_report(sub: Submission, task: TaskSpec, st: RunSettings) -> str:
    """Run a failed task once under ``compute-sanitizer`` (GPU runners only) and return its first lines.

    Untested in the course's CI (no GPU there); off unless ``--sanitize``.
    """
    tool = shutil.which("compute-sanitizer")
    if not tool:
        return "\n(compute-sanitizer not found on PATH: no sanitizer report)"
    assert sub.pristine is not None
    slot = st.slots.get()
    try:
        restore(slot, sub.pristine, sub.manifest)
        cmd = [tool, "--tool", "memcheck", "--print-limit", "5", *protocol.pytest_command(_python(), slot, None),
               "-x", protocol.TASK_OPTION, task.id, *task.files]
        env = child_env(slot, st.seed, "cuda", build_dir_of(sub, st), threads=st.task_threads)
        if sub.build_dir is not None:
            env[SHARED_ENV] = str(st.build_dir)
        proc = start_worker(cmd, cwd=slot, env=env, scratch=scratch_of(slot), writable=[build_dir_of(sub, st)],
                            readable=[st.build_dir] if sub.build_dir is not None else [], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=st.timeout * 5 + st.build_timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return "\n(compute-sanitizer run timed out)"
    finally:
        restore(slot, sub.pristine, sub.manifest)
        st.slots.put(slot)
    lines = [ln for ln in out.splitlines() if ln.startswith("=========")]
    return "\ncompute-sanitizer:\n" + "\n".join(lines[:20]) if lines else "\ncompute-sanitizer: no errors reported"


