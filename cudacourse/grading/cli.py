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
from pathlib import Path

import filelock

from cudacourse.buildcache import build_root
from cudacourse.course import Course, CourseError, Task, task_sort_key
from cudacourse.course import course as course_model
from cudacourse.grading import plan
from cudacourse.grading.builds import start_builds
from cudacourse.grading.feedback import complete_compile_errors, feedback, scrub, secret_lines
from cudacourse.grading.plan import RunSettings
from cudacourse.grading.processes import kill_group, signal_name
from cudacourse.grading.reports import (
    Report,
    markdown_report,
    print_report,
    write_gradebook,
    write_gradescope,
    write_json,
    write_junit,
)
from cudacourse.grading.runner import collect_tasks, safe_run_group, sanitizer_report
from cudacourse.grading.session import GradeSession
from cudacourse.grading.staging import Submission, manifest, stage_harness, stage_kernels
from cudacourse.results import GradingError, TaskResult, TaskSpec, format_points
from cudacourse.settings import current

EXIT_OK, EXIT_GRADER_ERROR = 0, 2
COLLECT_TIMEOUT_S = 600.0

# ----------------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------------


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


def _what_to_grade(args: argparse.Namespace) -> tuple[Course, str, list[Submission], list[str],
                                                      dict[tuple[str, str], Task], dict[tuple[str, str], Task]]:
    """(course, impl, submissions, lessons, declared tasks, chosen tasks) that ``args`` names; a
    :class:`GradingError` saying what is wrong with them."""
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
    declared = plan.declared_tasks(course, args.hidden)
    if args.tasks:
        unknown = sorted(set(args.tasks) - {tid for (lid, tid) in declared if lid in lessons})
        if unknown:
            raise GradingError(f"--tasks: no task {', '.join(unknown)} in the lessons graded "
                               f"({', '.join(lessons)}); tasks: {', '.join(tid for (_, tid) in declared)}")
    # the graded lessons' tasks only: a GPU task of another lesson is no "not graded" line of this grade (it had
    # crashed the report's sort of a simulator grade of some lessons)
    chosen = {k: t for k, t in declared.items() if k[0] in lessons and (not args.tasks or t.id in args.tasks)}
    return course, impl, subs, lessons, declared, chosen


def _stage(gs: GradeSession, course: Course, subs: list[Submission], work: Path, harness: Path,
           run_lessons: list[str], chosen: dict[tuple[str, str], Task],
           idle: dict[int, dict[tuple[str, str], str]]) -> None:
    """Stage every submission beside the harness and start its warm-up builds."""
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
            if names := plan.kernels_to_build(chosen, idle[i], lid, gs.config.task_files):
                sub.to_build[lid] = names
        for lid in plan.build_order(course, sub.to_build):
            start_builds(sub, lid, sub.to_build[lid], gs)


def _run_groups(gs: GradeSession, subs: list[Submission], groups: list[tuple[int, list[TaskSpec]]], jobs: int,
                work: Path, harness: Path) -> dict[int, dict[str, TaskResult]]:
    """Run every group of tasks, ``jobs`` at a time; submission index -> "lesson/id" -> result."""
    # Working folders ("slots") belong to the jobs, not to the submissions: each run first restores
    # its slot to the submission's pristine tree. Builds are cached by content, so a kernel file that
    # several submissions share (an untouched relu_torch.cu) is built once per slot, not per learner.
    # The timed processes (one per submission, on a GPU) run beside the jobs, TIMED_AHEAD at a time from the
    # start: each starts up and loads its workers while the correctness work runs, then waits asleep for the GPU,
    # which it gets once every correctness group is done (GpuGate.expect). Queued behind that work instead, the
    # H100 machine's timed process started its workers after the last correctness task, 11 s on the grade's
    # critical path (2026-11-28).
    timed = [(i, g) for i, g in groups if gs.config.timed_alone(g)]
    others = [(i, g) for i, g in groups if not gs.config.timed_alone(g)]
    for k in range(max(1, min(jobs + plan.TIMED_AHEAD, len(groups)))):
        slot = work / f"slot{k}"
        shutil.copytree(harness, slot)
        gs.slots.put(slot)
    results: dict[int, dict[str, TaskResult]] = {i: {} for i in range(len(subs))}
    gs.gate.expect(len(others))

    def correctness(sub: Submission, g: list[TaskSpec]) -> list[TaskResult]:
        try:
            return safe_run_group(sub, g, gs)
        finally:
            gs.gate.finished()

    with cf.ThreadPoolExecutor(max_workers=jobs) as pool, cf.ThreadPoolExecutor(plan.TIMED_AHEAD) as timed_pool:
        futs = {timed_pool.submit(safe_run_group, subs[i], g, gs): i for i, g in timed}
        futs.update({pool.submit(correctness, subs[i], g): i for i, g in others})
        for fut in cf.as_completed(futs):
            for r in fut.result():
                results[futs[fut]][f"{r.lesson}/{r.id}"] = r
    return results


def _workspace(args: argparse.Namespace, course: Course, impl: str, subs: list[Submission],
               backend: str) -> tuple[filelock.FileLock | None, Path, Path, Path | None]:
    """(the held lock of this checkout's own folder or None, the working folder, the run's build cache, the
    instructor's cache whose builds of its own files are copied, or None)."""
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
    build_dir.mkdir(parents=True, exist_ok=True)
    if backend == "sim":
        from cudacourse.sim import seed_runtime
        from cudacourse.sim.torch_route import share_torch_pch

        if own:
            seed_runtime(build_dir)  # the runtime `make check` built: not 50 s of building it again
        # a precompiled torch header made where this grade's builds come from (the course's test suite makes one):
        # linked, each torch-route build of the grade takes ~15 CPU-s instead of ~30
        share_torch_pch(build_root(), build_dir)
    return lock, work, build_dir, build_root() if submissions else None


def grade(args: argparse.Namespace, gs: GradeSession | None = None) -> list[Report]:
    """Grade what ``args`` names in session ``gs`` (a fresh one by default); returns one report per submission
    (reports are written here too)."""
    gs = gs if gs is not None else GradeSession()
    course, impl, subs, lessons, declared, chosen = _what_to_grade(args)
    backend, device = resolve_backend(args.backend)
    args.resolved_backend = backend  # (an interrupted grade's report names what its finished tasks ran on)
    # Tasks whose exercise files are all still the stubs (whole lessons, or a task's own file) are not built
    # or run: they cannot earn points.
    idle_lessons = {i: plan.not_started(course, sub, lessons) for i, sub in enumerate(subs)}
    idle = {i: plan.untouched_tasks(course, sub, chosen, lessons) for i, sub in enumerate(subs)}
    # Tasks this machine cannot grade are not run either (no task process, no build), and the total line says what
    # would add their points: a GPU task on the simulator; a Triton twin where Triton cannot run.
    cannot = plan.cannot_grade_here(chosen, backend)
    for i in idle:
        idle[i].update({k: why for k, why in cannot.items() if k not in idle[i]})
    run_lessons = plan.lessons_to_run(lessons, chosen, idle)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    cpus = os.cpu_count() or 1
    jobs = plan.job_count(args.jobs, backend, cpus)
    lock, work, build_dir, instructor_cache = _workspace(args, course, impl, subs, backend)
    # The backend resolved here (flag, CUDA_COURSE_BACKEND, else auto) is handed to every task process, build
    # worker and report explicitly: a child that resolved "auto" again in its scrubbed environment picked the GPU
    # in a grade whose report said sim (issue 36).
    gs.configure(RunSettings(lessons, seed, backend, args.timeout,
                             args.build_timeout, build_dir, args.hidden_feedback, args.sanitize, backend,
                             progress=None if args.quiet else _progress_line, many=len(subs) > 1,
                             instructor=plan.instructor_hashes(course),
                             task_files={k: course.lesson(k[0]).files_of(t) for k, t in declared.items()},
                             # at most `jobs` warm-up workers, each compiling a few files at once: about one
                             # compiler per core (nvcc and g++ run single-threaded)
                             build_jobs=jobs, build_threads=max(1, min(4, cpus // jobs)),
                             task_threads=max(1, cpus // jobs), timed_threads=cpus, build_seed=instructor_cache))
    st = gs.config
    t_start = time.monotonic()
    try:
        # the lines no message may show (solutions, hidden tests), read while the grade runs: 0.2-0.4 s at its end on
        # the H200 machine (benchmarks/grade_tail.py)
        reader = cf.ThreadPoolExecutor(1, thread_name_prefix="secret-lines")
        secrets_read = reader.submit(secret_lines, course.root, args.hidden)
        reader.shutdown(wait=False)
        harness = work / "harness"
        stage_harness(harness, lessons, args.hidden, course)
        _stage(gs, course, subs, work, harness, run_lessons, chosen, idle)
        # Collect with the checkout's own kernels staged (collection never builds).
        collect_dir = work / "collect"
        shutil.copytree(harness, collect_dir)
        # Collection imports torch and every test file but runs nothing of a submission: on a busy machine
        # that alone can take longer than one case's --timeout, so it gets a limit of its own.
        if run_lessons:
            gs.say(subs[0] if len(subs) == 1 else Submission("", None, impl),
                   f"collecting the tasks of {', '.join(run_lessons)} ...")
        tasks = collect_tasks(gs, collect_dir, course, declared, run_lessons, seed, st.backend, build_dir,
                              max(COLLECT_TIMEOUT_S, args.timeout + args.build_timeout)) if run_lessons else []
        if args.tasks:
            tasks = [t for t in tasks if t.id in args.tasks]
        st.timed = plan.timed_alone(declared, backend)
        st.urgent = plan.urgent_tasks(course, tasks, st)
        results = _run_groups(gs, subs, plan.task_groups(course, subs, tasks, idle, st, jobs), jobs, work, harness)
        reports = []
        for i, sub in enumerate(subs):
            done = [results[i][f"{t.lesson}/{t.id}"] for t in tasks if f"{t.lesson}/{t.id}" in results[i]]
            # Feedback comes from the results, after every run: hints, hidden-case wording, rejections.
            complete_compile_errors(done)
            for r in done:
                if r.status == "fail":
                    r.message = feedback(r, sub, args.hidden_feedback, course.root)
                    if args.sanitize and backend == "cuda":
                        r.message += sanitizer_report(sub, next(t for t in tasks if t.id == r.id), gs)
        # Last, over every message: no line of a hidden test or a solution, whatever the code printed or threw.
        secrets = secrets_read.result()
        for i in range(len(subs)):
            for r in results[i].values():
                r.message = scrub(r.message, secrets)
        elapsed = time.monotonic() - t_start
        for i, sub in enumerate(subs):
            done = [results[i][f"{t.lesson}/{t.id}"] for t in tasks if f"{t.lesson}/{t.id}" in results[i]]
            idle_here = {k: v for k, v in idle[i].items() if k in chosen}
            done = sorted(done + plan.not_started_results(course, chosen, idle_here, idle_lessons[i], backend, cannot),
                          key=lambda r: (lessons.index(r.lesson), task_sort_key(r.id)))
            reports.append(Report(backend, device, sub.impl, done, name=sub.name, seed=seed, seconds=elapsed,
                                  rejected=[r.text() for r in sub.rejections]))
        return reports
    finally:
        for proc in list(gs.live):  # stopped (Ctrl-C, SIGTERM from CI): leave no test process behind
            kill_group(proc)
        if lock is not None:
            _clear(work, keep="build")
            lock.release()
        elif args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


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


def _on_stop_signal(gs: GradeSession, signum: int) -> None:
    """Stop every worker at once (their watchdog threads then end quickly), then unwind like Ctrl-C."""
    gs.stop_all()
    first = not gs.stop_signals
    gs.stop_signals.append(signum)
    if first:  # a second signal while the report is being written only stops workers again
        raise KeyboardInterrupt(f"signal {signum}")


def _ran_on(args: argparse.Namespace) -> str:
    """The backend of a report written before the grade ended: the resolved one, once resolved."""
    return str(getattr(args, "resolved_backend", None) or args.backend)


def _interrupted_reports(gs: GradeSession, args: argparse.Namespace, batch: bool) -> list[tuple[str, Report]]:
    """One report per submission when the grade was stopped: finished tasks keep their verdicts, the
    others are "interrupted"."""
    if batch:
        names = [p.name for p in sorted(args.batch.iterdir()) if p.is_dir()] if args.batch.is_dir() else []
    else:
        names = [args.submission.resolve().name if args.submission else ""]
    impl = "submission" if (args.submission or batch) else (args.impl or current().impl)
    sig = signal_name(gs.stop_signals[0]) if gs.stop_signals else "SIGINT"
    why = (f"interrupted: the grade was stopped ({sig}); tasks not finished by then are marked "
           "\"interrupted\" and earn nothing. Grade again to finish them.")
    return [(n, Report(_ran_on(args), "unknown", impl, gs.interrupted_results(n), name=n, seed=args.seed or 0,
                       errors=[why])) for n in names]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m cudacourse grade``. Returns 0 when grading worked, 2 when it did not."""
    parser = build_parser()
    args = parser.parse_args(argv)
    gs = GradeSession()  # the grade's live state: what a stop signal stops, what an interrupted report reads
    if threading.current_thread() is threading.main_thread():
        # A cancelled CI job sends SIGTERM, a person Ctrl-C: stop the workers, unwind, write the reports.
        signal.signal(signal.SIGTERM, lambda signum, _frame: _on_stop_signal(gs, signum))
        signal.signal(signal.SIGINT, lambda signum, _frame: _on_stop_signal(gs, signum))
    batch = args.batch is not None
    t0 = time.monotonic()
    try:
        reports = grade(args, gs)
    except KeyboardInterrupt:
        gs.stop_all()
        done = _interrupted_reports(gs, args, batch)
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
