"""``python -m cudacourse grade``: the command line and the driver that grades submissions."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import filelock

from cudacourse.buildcache import build_root
from cudacourse.course import Course, CourseError, Task, hidden_tasks, task_sort_key
from cudacourse.course import course as course_model
from cudacourse.exercise_state import file_states, lesson_started, untouched_reason
from cudacourse.grading import runner
from cudacourse.grading.feedback import complete_compile_errors, feedback, scrub, secret_lines
from cudacourse.grading.reports import (
    NOT_STARTED,
    Report,
    markdown_report,
    print_report,
    write_gradebook,
    write_gradescope,
    write_json,
    write_junit,
)
from cudacourse.grading.runner import (
    LIVE,
    RunSettings,
    collect_tasks,
    kill_group,
    safe_run_group,
    sanitizer_report,
    signal_name,
)
from cudacourse.grading.staging import MAX_SOURCE_BYTES, Submission, manifest, stage_harness, stage_kernels
from cudacourse.results import GPU_SKIP_REASON, GradingError, TaskResult, TaskSpec, format_points
from cudacourse.sandbox import SourceTooLarge, check_source_size
from cudacourse.settings import current

EXIT_OK, EXIT_GRADER_ERROR = 0, 2
COLLECT_TIMEOUT_S = 600.0

# ----------------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------------


def declared_tasks(course: Course, hidden: Path | None) -> dict[tuple[str, str], Task]:
    """Every task the grader may grade: the course model's and those of ``hidden/tasks.toml``."""
    out = {(t.lesson, t.id): t for t in course.tasks()}
    for t in hidden_tasks(course, hidden) if hidden is not None else []:
        out[(t.lesson, t.id)] = t
    return out




def instructor_hashes(course: Course) -> dict[str, set[str]]:
    """"lesson/file" -> sha256 of the instructor's solution and stub of every kernel file: a submission's file
    identical to one of them is built once per run in a shared cache (``runner._warm_up``)."""
    from cudacourse import stubs

    out: dict[str, set[str]] = {}
    for les in course:
        sol = course.kernel_dir(les.id, "solution")
        for f in sorted(sol.glob("*")) if sol.is_dir() else []:
            if f.suffix not in (".cu", ".cuh", ".h"):
                continue
            want = stubs.expected(f)
            out[f"{les.id}/{f.name}"] = {hashlib.sha256(f.read_bytes()).hexdigest(),
                                         hashlib.sha256(want.encode() if isinstance(want, str) else want).hexdigest()}
    return out


def not_started(course: Course, sub: Submission, lessons: list[str]) -> set[str]:
    """The lessons of ``lessons`` whose exercise files in ``sub`` are all identical to the generated stubs, or
    whose folder a submission does not hold at all (never for the reference solutions)."""
    if sub.impl == "solution":
        return set()
    out = set()
    for lid in lessons:
        folder = sub.source / "lessons" / lid if sub.source is not None else course.kernel_dir(lid, "student")
        if sub.source is not None and not folder.is_dir():
            out.add(lid)  # the submission holds no folder for this lesson: nothing submitted, nothing to run
            continue
        if not lesson_started(course, course.lesson(lid), folder):
            out.add(lid)
    return out


def untouched_tasks(course: Course, sub: Submission, declared: dict[tuple[str, str], Task],
                    lessons: list[str]) -> dict[tuple[str, str], str]:
    """(lesson, id) -> what is untouched, for the tasks of ``lessons`` that ``sub`` has not started: every task
    of a lesson not started (:func:`not_started`; ``""``), and in a started lesson each task whose files
    (``LessonInfo.files_of``) are all still the stubs (a lesson 01 learner who has not opened relu_torch.cu waits
    for no build of it), or whose TODO blocks all are (``checkcmd.untouched_todos``: a learner who had done
    1.1-1.3 got 12 lines of failure for 1.4, whose TODO in the same relu.cu they had not begun)."""
    idle_lessons = not_started(course, sub, lessons)
    out = {k: "" for k in declared if k[0] in idle_lessons}
    if sub.impl == "solution":
        return out
    for lid in lessons:
        if lid in idle_lessons:
            continue
        info = course.lesson(lid)
        folder = sub.source / "lessons" / lid if sub.source is not None else course.kernel_dir(lid, "student")
        untouched = {n for n, state in file_states(course, info, folder).items() if state == "untouched"}
        for (les, _), t in declared.items():
            if les != lid or (not set(info.files_of(t)) <= untouched
                              and _too_large([folder / f for f in info.files_of(t)])):
                continue  # refused when staged ("too large"), so not the stub; and not scanned here (a 50 MB file
                #           took the grader a minute of CPU per TODO block compared)
            if why := untouched_reason(course, info, t, folder, untouched):
                out[(lid, t.id)] = why
    return out


def _too_large(paths: list[Path]) -> bool:
    """Whether a file of ``paths`` is over the limit staging refuses (``staging.MAX_SOURCE_BYTES``)."""
    try:
        check_source_size([p for p in paths if p.is_file()], MAX_SOURCE_BYTES)
    except SourceTooLarge:
        return True
    return False


def cannot_grade_here(declared: dict[tuple[str, str], Task], backend: str) -> dict[tuple[str, str], str]:
    """(lesson, id) -> why, for the tasks this machine cannot grade: GPU tasks when the backend is not ``cuda``,
    Triton twins when Triton cannot run here. Each reason starts with "not graded" (the points table's word)."""
    from cudacourse import triton_track

    out = {k: GPU_SKIP_REASON for k, t in declared.items() if t.gpu and backend != "cuda"}
    twins = {k for k, t in declared.items() if t.track == "triton" and k not in out}
    if twins and (st := triton_track.status(gpu=backend == "cuda")).mode == "missing":
        out.update({k: triton_track.not_graded_reason(st) for k in twins})
    return out


def not_started_results(course: Course, declared: dict[tuple[str, str], Task], idle: dict[tuple[str, str], str],
                        idle_lessons: set[str], backend: str,
                        cannot: dict[tuple[str, str], str] | None = None) -> list[TaskResult]:
    """One result per task of ``idle`` (never run): ``fail`` with the message "not started" (a whole lesson not
    started) or what is untouched (a task of a started lesson, :func:`untouched_tasks`); ``not-graded`` for a
    task this machine cannot grade (``cannot``, :func:`cannot_grade_here`): its reason is the message when the
    task was begun, and follows "not started" when the reason is not a GPU (the total line reads it)."""
    cannot = cannot or {}
    out = []
    for key in sorted(idle):
        t = declared[key]
        why = cannot.get(key, "")
        if why and idle[key] == why:  # begun, but cannot be graded here
            msg = why
        else:
            msg = NOT_STARTED if t.lesson in idle_lessons or not idle[key] else f"{NOT_STARTED}: {idle[key]}"
            if why and why != GPU_SKIP_REASON:
                msg += f" ({why})"
        out.append(TaskResult(t.id, t.lesson, t.title, t.points, 0.0,
                              "not-graded" if why or (t.gpu and backend != "cuda") else "fail", msg))
    return out


def resolve_backend(requested: str) -> tuple[str, str]:
    """(backend name, device description) as the child processes will see them."""
    if requested == "sim":
        return "sim", "CPU simulator"
    try:
        from cudacourse.loader import backend_name

        name = backend_name(requested)
    except Exception as e:  # noqa: BLE001
        raise GradingError(f"--backend {requested}: {e}") from e
    if name == "cuda":
        from cudacourse import gpuinfo

        if (gpu := gpuinfo.probe()) is not None:  # the driver's word: no torch import before the grade starts
            return "cuda", gpu.name
        import torch

        return "cuda", torch.cuda.get_device_name(0)
    return "sim", "CPU simulator"


def _progress_line(line: str) -> None:
    """One progress line of a grade (a build started or ended, a task finished), printed at once."""
    print(line, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m cudacourse grade``."""
    p = argparse.ArgumentParser(prog="python -m cudacourse grade", description=(
        "Grade the course's kernels task by task, each task in its own process. The exit code says whether "
        "grading worked (0) or not (2), never the score."))
    src = p.add_mutually_exclusive_group()
    src.add_argument("--submission", type=Path, metavar="DIR",
                     help="a learner's copy of the course; only DIR/lessons/*/*.cu|.cuh are graded")
    src.add_argument("--batch", type=Path, metavar="PARENT",
                     help="grade every sub-folder of PARENT as one submission (outputs become folders)")
    p.add_argument("--impl", choices=["student", "solution"], default=None,
                   help="without --submission: grade this checkout's lessons/ (student) or solutions/ "
                        "(default $CUDA_COURSE_IMPL, else student)")
    p.add_argument("--lessons", nargs="+", default=None, metavar="LESSON",
                   help="lessons to grade (01_relu, 01, ...); default all")
    p.add_argument("--tasks", nargs="+", default=None, metavar="ID",
                   help="grade only these tasks of the lessons graded (1.1 4.9 ...); default all (re-grading one "
                        "task, or a test that needs one)")
    p.add_argument("--hidden", type=Path, metavar="DIR",
                   help="instructor test files merged in as extra cases and tasks (same markers)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the JSON report")
    p.add_argument("--junit", type=Path, metavar="OUT", help="write a JUnit XML report")
    p.add_argument("--markdown", type=Path, metavar="OUT", help="write a Markdown feedback report")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds one test case may run before its task fails as hung (default 120)")
    p.add_argument("--build-timeout", type=float, default=300.0,
                   help="seconds to build a lesson's kernel files before its tests run (default 300)")
    p.add_argument("--jobs", "-j", type=int, default=0,
                   help="task processes at a time (default: CPU count, at most 8; on a GPU at most 16)")
    p.add_argument("--backend", choices=["auto", "cuda", "sim"], default="auto")
    p.add_argument("--seed", type=int, default=None, help="base seed (default: fresh for every run)")
    p.add_argument("--hidden-feedback", choices=["brief", "full"], default="brief",
                   help="brief: a failed hidden case is named but its values are not shown (default)")
    p.add_argument("--sanitize", action="store_true",
                   help="GPU only: rerun a failed task once under compute-sanitizer and add its report")
    p.add_argument("--gradescope", type=Path, metavar="OUT", help="write Gradescope's results.json")
    p.add_argument("--course", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, default=None, help="keep the staging folders here (debugging)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the totals")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="print every failure's whole message and every task of the lessons not started")
    return p


def _outputs(args: argparse.Namespace, name: str, batch: bool) -> dict[str, Path | None]:
    out: dict[str, Path | None] = {}
    for key, ext in (("json", "json"), ("junit", "xml"), ("markdown", "md"), ("gradescope", "gradescope.json")):
        val = getattr(args, key)
        out[key] = None if val is None else (val / f"{name}.{ext}" if batch else val)
    return out


def _write_all(rep: Report, outs: dict[str, Path | None]) -> None:
    if outs["json"]:
        write_json(rep, outs["json"])
    if outs["junit"]:
        write_junit(rep, outs["junit"])
    if outs["markdown"]:
        outs["markdown"].parent.mkdir(parents=True, exist_ok=True)
        outs["markdown"].write_text(markdown_report(rep))
    if outs["gradescope"]:
        write_gradescope(rep, outs["gradescope"])


def grade(args: argparse.Namespace) -> list[Report]:
    """Grade what ``args`` names; returns one report per submission (reports are written here too)."""
    try:
        course = course_model(args.course)
        course.lessons  # noqa: B018 - parse every lesson.toml now: a broken model is a grading problem
    except CourseError as e:
        raise GradingError(str(e)) from e
    impl = args.impl or current().impl
    if args.batch:
        if not args.batch.is_dir():
            raise GradingError(f"--batch {args.batch}: not a folder")
        subs = [Submission(p.name, p.resolve(), "submission") for p in sorted(args.batch.iterdir()) if p.is_dir()]
        if not subs:
            raise GradingError(f"--batch {args.batch}: no sub-folders to grade")
    elif args.submission:
        if not (args.submission / "lessons").is_dir():
            raise GradingError(f"--submission {args.submission}: no lessons/ folder in it")
        subs = [Submission(args.submission.resolve().name, args.submission.resolve(), "submission")]
    else:
        subs = [Submission("", None, impl)]
    if args.hidden is not None and not args.hidden.is_dir():
        raise GradingError(f"--hidden {args.hidden}: not a folder")
    try:
        lessons = course.select(args.lessons)
    except CourseError as e:
        raise GradingError(f"--lessons: {e}") from e
    if not lessons:
        raise GradingError(f"no lessons found (lessons/NN_topic/lesson.toml under {course.root})")
    declared = declared_tasks(course, args.hidden)
    if args.tasks:
        unknown = sorted(set(args.tasks) - {tid for (lid, tid) in declared if lid in lessons})
        if unknown:
            raise GradingError(f"--tasks: no task {', '.join(unknown)} in the lessons graded "
                               f"({', '.join(lessons)}); tasks: {', '.join(tid for (_, tid) in declared)}")
    # the graded lessons' tasks only: a GPU task of another lesson is no "not graded" line of this grade (it had
    # crashed the report's sort of a simulator grade of some lessons)
    chosen = {k: t for k, t in declared.items() if k[0] in lessons and (not args.tasks or t.id in args.tasks)}
    backend, device = resolve_backend(args.backend)
    args.resolved_backend = backend  # (an interrupted grade's report names what its finished tasks ran on)
    # Tasks whose exercise files are all still the stubs (whole lessons, or a task's own file) are not built
    # or run: they cannot earn points.
    idle_lessons = {i: not_started(course, sub, lessons) for i, sub in enumerate(subs)}
    idle = {i: untouched_tasks(course, sub, chosen, lessons) for i, sub in enumerate(subs)}
    # Tasks this machine cannot grade are not run either (no task process, no build), and the total line says what
    # would add their points: a GPU task on the simulator; a Triton twin where Triton cannot run.
    cannot = cannot_grade_here(chosen, backend)
    for i in idle:
        idle[i].update({k: why for k, why in cannot.items() if k not in idle[i]})
    run_lessons = [lid for lid in lessons if any((les, tid) not in idle[i] for i in idle for (les, tid) in chosen
                                                  if les == lid)]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    cpus = os.cpu_count() or 1
    # On a GPU a task process mostly waits for the GPU, its worker or a compiler (Triton), not for a core: twice
    # as many run at once.
    jobs = args.jobs if args.jobs and args.jobs > 0 else (min(16, cpus) if backend == "cuda" else min(8, cpus))
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    own = len(subs) == 1 and subs[0].source is None and args.workdir is None  # a learner grading the checkout
    lock = _own_work_lock(course, impl) if own else None
    work = Path(lock.lock_file[:-len(".lock")]) if lock else \
        Path(tempfile.mkdtemp(prefix="cc-grade-", dir=args.workdir or None))
    # Grading the checkout builds next to its stable staged folder (kept between grades), never into a cache
    # folder that holds the staged harness: workers may write their build folder, and only that.
    # Submissions' workers read the run's cache: a fresh folder then, never the instructor's own cache
    # (CUDA_COURSE_BUILD or the checkout's: it may hold the sources of solutions built or graded there); its builds
    # of the instructor's own files are copied into the run's cache instead (``RunSettings.build_seed``).
    submissions = any(sub.source is not None for sub in subs)
    build_dir = work / "build" if own or submissions else (current().build_dir or work / "build")
    instructor_cache = build_root() if submissions else None
    build_dir.mkdir(parents=True, exist_ok=True)
    if own and backend == "sim":
        from cudacourse.sim import seed_runtime

        seed_runtime(build_dir)  # the runtime `make check` built: not 50 s of building it again
    # The backend resolved here (flag, CUDA_COURSE_BACKEND, else auto) is handed to every task process, build
    # worker and report explicitly: a child that resolved "auto" again in its scrubbed environment picked the GPU
    # in a grade whose report said sim (issue 36).
    st = RunSettings(lessons, seed, backend, args.timeout,
                     args.build_timeout, build_dir, args.hidden_feedback, args.sanitize, backend,
                     progress=None if args.quiet else _progress_line, many=len(subs) > 1,
                     instructor=instructor_hashes(course),
                     task_files={k: course.lesson(k[0]).files_of(t) for k, t in declared.items()},
                     # at most `jobs` warm-up workers, each compiling a few files at once: about one compiler
                     # per core (nvcc and g++ run single-threaded)
                     builders=threading.Semaphore(jobs), build_threads=max(1, min(4, cpus // jobs)),
                     task_threads=max(1, cpus // jobs), timed_threads=cpus, build_seed=instructor_cache)
    t_start = time.monotonic()
    try:
        harness = work / "harness"
        stage_harness(harness, lessons, args.hidden, course)
        all_lessons = list(course.lessons)
        for i, sub in enumerate(subs):
            sub.pristine = work / f"sub{i:03d}"
            if sub.source is not None:
                # A submission builds in a cache of its own: no other submission (and no later grade) can
                # see its builds or plant one for it; this checkout's own kernels share the run's cache.
                sub.build_dir = work / f"build-sub{i:03d}"
                sub.build_dir.mkdir()
            shutil.copytree(harness, sub.pristine)
            # Every lesson's files are staged, graded or not: the lesson 04 capstone runs on the learner's
            # own lesson 02 and 03 kernels.
            stage_kernels(sub, sub.pristine, all_lessons, course)
            sub.manifest = manifest(sub.pristine)
            # Builds start now, before the tasks are collected: the kernel files of every task to run, a
            # lesson's files side by side; a task process then waits only for the files its tasks use.
            sub.build_slot = work / f"bslot{i:03d}"
            shutil.copytree(sub.pristine, sub.build_slot)
            for lid in run_lessons:
                names = sorted({f for (les, tid), t in chosen.items() if les == lid and (les, tid) not in idle[i]
                                for f in st.task_files[(les, tid)] if f.endswith(".cu")})
                if names:
                    sub.to_build[lid] = names
            # the slow torch-route builds first: they are the longest wait
            for lid in sorted(sub.to_build, key=lambda les: not set(sub.to_build[les]) & set(
                    course.lesson(les).torch_files)):
                runner.start_builds(sub, lid, sub.to_build[lid], st)
        # Collect with the checkout's own kernels staged (collection never builds).
        collect_dir = work / "collect"
        shutil.copytree(harness, collect_dir)
        # Collection imports torch and every test file but runs nothing of a submission: on a busy machine
        # that alone can take longer than one case's --timeout, so it gets a limit of its own.
        if run_lessons:
            st.say(subs[0] if len(subs) == 1 else Submission("", None, impl),
                   f"collecting the tasks of {', '.join(run_lessons)} ...")
        tasks = collect_tasks(collect_dir, course, declared, run_lessons, seed, st.backend, build_dir,
                              max(COLLECT_TIMEOUT_S, args.timeout + args.build_timeout)) if run_lessons else []
        if args.tasks:
            tasks = [t for t in tasks if t.id in args.tasks]
        st.timed = timed_alone(declared, backend)
        groups = task_groups(course, subs, tasks, idle, st, jobs)
        # Working folders ("slots") belong to the jobs, not to the submissions: each run first restores
        # its slot to the submission's pristine tree. Builds are cached by content, so a kernel file that
        # several submissions share (an untouched relu_torch.cu) is built once per slot, not per learner.
        # The timed processes (one per submission, on a GPU) run beside the jobs, TIMED_AHEAD at a time from the
        # start: each starts up and loads its workers while the correctness work runs, then waits asleep for the GPU,
        # which it gets once every correctness group is done (GpuGate.expect). Queued behind that work instead, the
        # H100 machine's timed process started its workers after the last correctness task, 11 s on the grade's
        # critical path (2026-11-28).
        timed = [(i, g) for i, g in groups if st.timed_alone(g)]
        others = [(i, g) for i, g in groups if not st.timed_alone(g)]
        for k in range(max(1, min(jobs + TIMED_AHEAD, len(groups)))):
            slot = work / f"slot{k}"
            shutil.copytree(harness, slot)
            st.slots.put(slot)
        results: dict[int, dict[str, TaskResult]] = {i: {} for i in range(len(subs))}
        st.gate.expect(len(others))

        def correctness(sub: Submission, g: list[TaskSpec]) -> list[TaskResult]:
            try:
                return safe_run_group(sub, g, st)
            finally:
                st.gate.finished()

        with cf.ThreadPoolExecutor(max_workers=jobs) as pool, cf.ThreadPoolExecutor(TIMED_AHEAD) as timed_pool:
            futs = {timed_pool.submit(safe_run_group, subs[i], g, st): i for i, g in timed}
            futs.update({pool.submit(correctness, subs[i], g): i for i, g in others})
            for fut in cf.as_completed(futs):
                for r in fut.result():
                    results[futs[fut]][f"{r.lesson}/{r.id}"] = r
        reports = []
        for i, sub in enumerate(subs):
            done = [results[i][f"{t.lesson}/{t.id}"] for t in tasks if f"{t.lesson}/{t.id}" in results[i]]
            # Feedback comes from the results, after every run: hints, hidden-case wording, rejections.
            complete_compile_errors(done)
            for r in done:
                if r.status == "fail":
                    r.message = feedback(r, sub, args.hidden_feedback, course.root)
                    if args.sanitize and backend == "cuda":
                        r.message += sanitizer_report(sub, next(t for t in tasks if t.id == r.id), st)
        # Last, over every message: no line of a hidden test or a solution, whatever the code printed or threw.
        secrets = secret_lines(course.root, args.hidden)
        for i in range(len(subs)):
            for r in results[i].values():
                r.message = scrub(r.message, secrets)
        elapsed = time.monotonic() - t_start
        for i, sub in enumerate(subs):
            done = [results[i][f"{t.lesson}/{t.id}"] for t in tasks if f"{t.lesson}/{t.id}" in results[i]]
            done = sorted(done + not_started_results(course, chosen, {k: v for k, v in idle[i].items() if k in chosen},
                                                     idle_lessons[i], backend, cannot),
                          key=lambda r: (lessons.index(r.lesson), task_sort_key(r.id)))
            reports.append(Report(backend, device, sub.impl, done, name=sub.name, seed=seed, seconds=elapsed,
                                  rejected=[r.text() for r in sub.rejections]))
        return reports
    finally:
        for proc in list(LIVE):  # stopped (Ctrl-C, SIGTERM from CI): leave no test process behind
            kill_group(proc)
        if lock is not None:
            _clear(work, keep="build")
            lock.release()
        elif args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


TIMED_AHEAD = 2  # timed processes started ahead of their turn: one times while the next starts up


def task_groups(course: Course, subs: list[Submission], tasks: list[TaskSpec],
                idle: dict[int, dict[tuple[str, str], str]],
                st: RunSettings, jobs: int) -> list[tuple[int, list[TaskSpec]]]:
    """(submission index, tasks) of each task process, in the order they are queued.

    A process runs the tasks of one lesson that use the same files (so 1.6, on relu_torch.cu, does not wait
    with 1.1-1.5 for that slow build), split further into runs of consecutive tasks while there are fewer
    processes than twice the jobs. Tasks whose tests host a learner's Python file in a torch worker
    (``learner_python``) share a process only with tasks hosting the same files (one worker start each), except the
    timed tasks; with jobs to spare each ``slow`` task and each Triton twin gets a process of its own. Processes
    holding a ``slow`` task (lesson.toml) go first: a training run or a torch.compile started late ends the grade
    late (on the H100 machine task 7.3, queued behind the others, ended 8 s after every other correctness task).
    Those hosting a learner's Python file come next, then the Triton twins (they need no build),
    tasks on a torch-route file last of the others (the longest build), and each submission's timed tasks
    (``st.timed``) last of all, in one process.
    """
    out: list[tuple[int, list[TaskSpec]]] = []
    for i in range(len(subs)):
        mine = [t for t in tasks if (t.lesson, t.id) not in idle[i]]
        timed = [t for t in mine if (t.lesson, t.id) in st.timed]
        keyed: dict[tuple[str, tuple[str, ...]], list[TaskSpec]] = {}
        for t in mine:
            if (t.lesson, t.id) not in st.timed:
                keyed.setdefault((t.lesson, st.task_files.get((t.lesson, t.id), ())), []).append(t)
        merged = _merge_shared_builds(course, subs[i], keyed, st)
        if len(subs) * len(merged) >= 2 * jobs:  # still two processes per job: one process per lesson saves
            keyed = merged                         # a python, pytest and torch start-up per group
        # about two processes per job: a long task (the lesson 06 capstone) then holds up fewer others, and a
        # job that finishes early finds work left
        split = max(1, -(-2 * jobs // (len(subs) * max(1, len(keyed)))))

        def twins(key: tuple[str, tuple[str, ...]]) -> bool:  # the Triton twins' files only (no build)
            return bool(key[1]) and set(key[1]) <= set(course.lesson(key[0]).triton_files)

        def order(key: tuple[str, tuple[str, ...]]) -> tuple[int, str]:
            return (0 if twins(key) else 2 if set(key[1]) & set(course.lesson(key[0]).torch_files) else 1, key[0])

        for key in sorted(keyed, key=order):
            lt = keyed[key]
            if split > 1:
                # jobs to spare: a slow task, or a Triton twin (12-27 s each of compiling its kernels on the H100
                # machine), gets a process of its own (4.T2, queued behind 4.T1, ended the correctness phase)
                alone = [t for t in lt if twins(key) or _slow(course, t)]
                out += [(i, [t]) for t in alone]
                lt = [t for t in lt if t not in alone]
            if not lt:
                continue
            k = min(split, len(lt))
            size = -(-len(lt) // k)
            out += [(i, lt[j:j + size]) for j in range(0, len(lt), size)]
        if timed:
            out.append((i, timed))
    # every submission's ordinary processes before any timed one; the slow ones first, then those hosting a
    # learner's Python file in a torch worker (a worker's start-up on top of their tests: on the H100 machine
    # 6.3 and 7.4, queued behind the twins, ended the correctness phase at 70 s); a stable sort
    return sorted(out, key=lambda g: (all((t.lesson, t.id) in st.timed for t in g[1]),
                                      not any(_slow(course, t) for t in g[1]),
                                      not any(learner_python(course, t.lesson, st.task_files.get((t.lesson, t.id), ()))
                                              and (t.lesson, t.id) not in st.timed for t in g[1])))


def timed_alone(declared: dict[tuple[str, str], Task], backend: str) -> frozenset[tuple[str, str]]:
    """The tasks graded alone on the GPU, in one process per submission after the others (``st.timed``; the gate
    of ``RunSettings.gpu_turn``): on cuda, every GPU task but those lesson.toml marks ``alone = false``.

    Timed beside other task processes on the same GPU, a solution's kernel measured 0.72x where it reaches 0.9x
    alone (H100, task 2.7). That process starts up while the other tasks still run and times once they are done;
    builds go on meanwhile (they hold no turn). A GPU task that times nothing (7.4: streams) runs beside the
    others: its torch worker's start-up held the timed phase back 11 s on the H100 (2026-11-28)."""
    if backend != "cuda":
        return frozenset()
    return frozenset(k for k, t in declared.items() if t.gpu and t.alone)


def _slow(course: Course, t: TaskSpec) -> bool:
    """Whether lesson.toml marks ``t`` ``slow`` (a task only the --hidden folder declares is not)."""
    try:
        return course.task(t.lesson, t.id).slow
    except KeyError:
        return False


def _merge_shared_builds(course: Course, sub: Submission, keyed: dict[tuple[str, tuple[str, ...]], list[TaskSpec]],
                         st: RunSettings) -> dict[tuple[str, tuple[str, ...]], list[TaskSpec]]:
    """``keyed`` with the kernel-file groups of each lesson joined into one, where that costs no wait.

    Groups are kept apart by file so that the tasks of a quick file need not wait for a slow torch-route
    build. A submission's torch-route file identical to the instructor's is built once per run, into the
    shared cache (``runner._warm_up``): no slow build of its own, so its tasks may run with the others, in one
    process instead of two. The Triton twins (no build) and this checkout's own files stay as they are."""
    if sub.build_dir is None:
        return keyed
    out: dict[tuple[str, tuple[str, ...]], list[TaskSpec]] = {}
    # joined per lesson and learner Python file set (``learner_python``: never mixed)
    joined: dict[tuple[str, tuple[str, ...]], tuple[set[str], list[TaskSpec]]] = {}
    for (lesson, files), tasks in keyed.items():
        info = course.lesson(lesson)
        if set(files) <= set(info.triton_files):
            out[(lesson, files)] = tasks
            continue
        files_, tasks_ = joined.setdefault((lesson, learner_python(course, lesson, files)), (set(), []))
        files_.update(files)
        tasks_ += tasks
    for (lesson, python), (files, tasks) in joined.items():
        shared = {n for n, _ in runner.instructor_files(sub, lesson, st)}
        if (set(files) & set(course.lesson(lesson).torch_files)) - shared:  # a slow build of its own
            out.update({k: v for k, v in keyed.items() if k[0] == lesson and k not in out
                        and learner_python(course, lesson, k[1]) == python})
        else:
            out[(lesson, tuple(sorted(files)))] = sorted(tasks, key=lambda t: task_sort_key(t.id))
    return out


def learner_python(course: Course, lesson: str, files: Sequence[str]) -> tuple[str, ...]:
    """The learner's Python exercise files among ``files`` (a task's ``files_of``), as "lesson/file".

    While grading, the tests of a task that uses one host it in a torch worker (``torch_worker.hosted``: one per
    file and task process, so tasks that share a process share its start-up); no test imports one into its task
    process. Tasks are grouped by these files for that sharing, except the timed ones, which all share one process
    (their workers start before its turn on the GPU: each test file's ``cc_preload``)."""
    python = course.lesson(lesson).python_files
    return tuple(sorted(f"{lesson}/{f}" for f in files if f in python))


def _own_work_lock(course: Course, impl: str) -> filelock.FileLock:
    """The held lock of the working folder for grading this checkout's own files (``make grade``).

    The folder is stable (in the build cache root, one per checkout and impl), so the staged files keep their
    paths and their builds, keyed by content and path, are reused by the next grade: an unchanged file is not
    rebuilt. Its staging folders are cleared before and after each grade; a second grade of the same checkout
    waits for the first.
    """
    key = hashlib.sha256(str(course.root.resolve()).encode()).hexdigest()[:10]
    work = build_root() / f"cc-grade-{impl}-{key}"  # "cc-grade-": feedback.display_paths maps staged paths
    lock = filelock.FileLock(str(work) + ".lock")
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        print(f"waiting for another grade of this checkout to finish (lock {lock.lock_file}) ...", flush=True)
        lock.acquire()
    work.mkdir(parents=True, exist_ok=True)
    _clear(work, keep="build")
    return lock


def _clear(work: Path, keep: str) -> None:
    """Remove everything in ``work`` but the entry ``keep``."""
    for p in work.iterdir():
        if p.name != keep:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


_STOP_SIGNALS: list[int] = []  # the signals that stopped this grade (SIGTERM from CI, Ctrl-C)


def _on_stop_signal(signum: int, frame: Any) -> None:
    """Stop every worker at once (their watchdog threads then end quickly), then unwind like Ctrl-C."""
    runner.stop_all()
    first = not _STOP_SIGNALS
    _STOP_SIGNALS.append(signum)
    if first:  # a second signal while the report is being written only stops workers again
        raise KeyboardInterrupt(f"signal {signum}")


def _ran_on(args: argparse.Namespace) -> str:
    """The backend of a report written before the grade ended: the resolved one, once resolved."""
    return str(getattr(args, "resolved_backend", None) or args.backend)


def _interrupted_reports(args: argparse.Namespace, batch: bool) -> list[tuple[str, Report]]:
    """One report per submission when the grade was stopped: finished tasks keep their verdicts, the
    others are "interrupted"."""
    if batch:
        names = [p.name for p in sorted(args.batch.iterdir()) if p.is_dir()] if args.batch.is_dir() else []
    else:
        names = [args.submission.resolve().name if args.submission else ""]
    impl = "submission" if (args.submission or batch) else (args.impl or current().impl)
    sig = signal_name(_STOP_SIGNALS[0]) if _STOP_SIGNALS else "SIGINT"
    why = (f"interrupted: the grade was stopped ({sig}); tasks not finished by then are marked "
           "\"interrupted\" and earn nothing. Grade again to finish them.")
    return [(n, Report(_ran_on(args), "unknown", impl, runner.interrupted_results(n), name=n, seed=args.seed or 0,
                       errors=[why])) for n in names]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m cudacourse grade``. Returns 0 when grading worked, 2 when it did not."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # A cancelled CI job sends SIGTERM, a person Ctrl-C: stop the workers, unwind, write the reports.
        _STOP_SIGNALS.clear()
        runner.STOPPING.clear()
        signal.signal(signal.SIGTERM, _on_stop_signal)
        signal.signal(signal.SIGINT, _on_stop_signal)
    batch = args.batch is not None
    t0 = time.monotonic()
    try:
        reports = grade(args)
    except KeyboardInterrupt:
        runner.stop_all()
        done = _interrupted_reports(args, batch)
        for n, rep in done:
            _write_all(rep, _outputs(args, n or "grade", batch))
            if not args.quiet:
                print_report(rep, verbose=args.verbose)
        if batch and args.json:
            write_gradebook([r for _, r in done], args.json / "gradebook.csv")
        print("cudacourse grade: stopped; reports written with unfinished tasks marked interrupted", file=sys.stderr)
        return EXIT_GRADER_ERROR
    except GradingError as e:
        rep = Report(_ran_on(args), "unknown", "submission" if (args.submission or batch) else
                     (args.impl or current().impl), [],
                     name=args.submission.name if args.submission else "", errors=[str(e)])
        names = ([p.name for p in sorted(args.batch.iterdir()) if p.is_dir()]
                 if batch and args.batch.is_dir() else [rep.name or "grade"])
        for n in names:
            rep.name = n if batch else rep.name
            _write_all(rep, _outputs(args, n, batch))
        print(f"cudacourse grade: could not grade: {e}", file=sys.stderr)
        return EXIT_GRADER_ERROR
    except Exception as e:  # noqa: BLE001 - the report must be written whatever happens
        import traceback

        err = f"internal grader error: {type(e).__name__}: {e}\n{traceback.format_exc()}"
        rep = Report(_ran_on(args), "unknown", "submission", [], errors=[err])
        _write_all(rep, _outputs(args, rep.name or "grade", False if not batch else True))
        print(err, file=sys.stderr)
        return EXIT_GRADER_ERROR
    for rep in reports:
        _write_all(rep, _outputs(args, rep.name or "grade", batch))
        if args.quiet:
            e, p, ng = rep.totals()
            print(f"{rep.name or 'grade'}: {format_points(e)} / {format_points(p)} points"
                  + (f" ({format_points(ng)} not graded)" if ng else ""))
        else:
            print_report(rep, verbose=args.verbose)
    if batch and args.json:
        write_gradebook(reports, args.json / "gradebook.csv")
    if not args.quiet:
        what = f"{len(reports)} submissions" if batch else "grade"
        print(f"{what} done in {time.monotonic() - t0:.0f} s")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
