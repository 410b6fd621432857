"""Running tasks: collecting them, one pytest process per group of tasks under a watchdog, verdicts confirmed.

Every function here runs in the grader and takes the grade's session (:class:`GradeSession`: the slots, the GPU
gate, the live processes); the configuration is ``gs.config`` (:class:`~cudacourse.grading.plan.RunSettings`).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from cudacourse.buildcache import SHARED_ENV
from cudacourse.course import Course, Task, task_sort_key
from cudacourse.grading import protocol
from cudacourse.grading.builds import build_event
from cudacourse.grading.plan import RunSettings
from cudacourse.grading.processes import (
    build_dir_of,
    bytecode_folder,
    bytecode_warmers,
    child_env,
    kill_group,
    python,
    scratch_of,
    start_worker,
    writing_bytecode,
)
from cudacourse.grading.session import GradeInterrupted, GradeSession
from cudacourse.grading.staging import Submission, restore
from cudacourse.grading.verdicts import (
    Run,
    backend_mismatch,
    crash_note,
    own_verdicts,
    records_of,
    sandbox_failure,
    tail,
    task_line,
    verdict,
)
from cudacourse.results import GradingError, TaskResult, TaskSpec, fold_tasks


def test_paths(slot: Path, course: Course, lessons: list[str], hidden: bool) -> list[str]:
    """Test files (relative to the slot) of the graded lessons, hidden ones included."""
    files = sorted((slot / "tests").glob("test_*.py"))
    if hidden and (slot / "hidden").is_dir():
        files += sorted((slot / "hidden").rglob("test_*.py"))
    return [str(p.relative_to(slot)) for p in files if course.lesson_of_test(p) in lessons]


def collect_tasks(gs: GradeSession, slot: Path, course: Course, declared: dict[tuple[str, str], Task],
                  lessons: list[str], seed: int, backend: str | None, build_dir: Path,
                  timeout: float) -> list[TaskSpec]:
    """Collect every task of the graded lessons (public and hidden tests) in one pytest process.

    Titles and points come from ``declared`` (the instructor's course model and hidden ``tasks.toml``),
    never from what a process reported.
    """
    paths = test_paths(slot, course, lessons, hidden=True)
    if not paths:
        raise GradingError(f"no graded test files for lessons {', '.join(lessons)} (expected tests/test_NN_*.py)")
    report = scratch_of(slot) / f"collect-{slot.name}.jsonl"
    report.unlink(missing_ok=True)
    cmd = [*protocol.pytest_command(python(), slot, report), "--collect-only", *paths]
    gs.check_running()
    env = child_env(slot, seed, backend, build_dir)
    # the grade's bytecode folder (processes.bytecode_cache), where there is one: this is the one process of a grade
    # that writes it, as it runs only the instructor's code
    pyc = bytecode_folder(env)
    if pyc:
        env = writing_bytecode(env)
    proc = start_worker(cmd, cwd=slot, env=env, scratch=report.parent, writable=[build_dir, *pyc],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    gs.live.add(proc)
    for warmer in bytecode_warmers(slot, env, report.parent):  # (not waited for: the grade's end stops them)
        gs.live.add(warmer)
        threading.Thread(target=lambda w=warmer: (w.wait(), gs.live.discard(w)), daemon=True).start()
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        kill_group(proc)
        raise GradingError(f"collecting the tests took more than {timeout:g} s") from e
    finally:
        gs.live.discard(proc)
    if proc.returncode != 0:
        raise GradingError("collecting the instructor's tests failed (pytest exit code "
                           f"{proc.returncode}):\n" + tail(out, 40))
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
    if not tasks:
        raise GradingError(f"no task-marked tests found in {', '.join(paths)}")
    out = sorted(tasks.values(), key=lambda t: (t.lesson, task_sort_key(t.id)))
    with gs.lock:
        gs.collected[:] = out
        gs.finished.clear()
    return out


# How long a pytest process may take to exit after it reported "finished" (every verdict is in its report by then):
# on the H100 machine a process that had run torch.compile and its GPU workers took 5-11 s to exit, holding a job
# and, for the timed process, the end of the grade. Stopping it loses nothing.
_EXIT_GRACE_S = 0.5


# The niceness of a task process that does not time: it gives way to the builds (their tasks wait for them; on the
# H100 machine the lesson 01 torch-route build took 51 s beside the task processes, 33 s alone, 42 s with this), and
# on a GPU to the processes of the longest tasks (``plan.urgent_tasks``).
TASK_NICE = 5


def task_nice(tasks: list[TaskSpec], st: RunSettings) -> int:
    """The niceness of the process of ``tasks``: 0 for the timed process (alone on the machine) and, on a GPU, for
    one holding a task of ``st.urgent``; else :data:`TASK_NICE`."""
    return 0 if st.timed_alone(tasks) or any((t.lesson, t.id) in st.urgent for t in tasks) else TASK_NICE


def _run_pytest(sub: Submission, slot: Path, tasks: list[TaskSpec], gs: GradeSession, tag: str) -> Run:
    """Run the tests of ``tasks`` in one pytest process in ``slot`` under a progress watchdog.

    The process starts at once; its first test waits for the warm-up builds of the kernel files these tasks
    use (``builds.build_event``) and, on a GPU, for its turn (``gs.gpu_turn``). The watchdog then stops the
    process when one test case runs longer than ``gs.config.timeout``.
    """
    assert sub.pristine is not None
    gs.check_running()
    restore(slot, sub.pristine, sub.manifest)
    report = scratch_of(slot) / f"{sub.pristine.name}-{slot.name}-{tag}.jsonl"
    report.unlink(missing_ok=True)
    log = slot.parent / f"{sub.pristine.name}-{slot.name}-{tag}.log"
    # only the files these tasks use: not every build of the lesson
    builds = [e for e in (build_event(sub, lesson, name, gs) for lesson, name in sorted(gs.config.kernels_of(tasks)))
              if e is not None and not e.is_set()]
    files = sorted({f for t in tasks for f in t.files})
    cmd = [*protocol.pytest_command(python(), slot, report), "--tb=short", "-p", "no:randomly"]
    for t in tasks:
        cmd += [protocol.TASK_OPTION, t.id]
    # A process that times starts up (python, torch, pytest, the CUDA context) while other task processes
    # still use the GPU, and runs its first test once it has the GPU alone: the grader then creates ``go``.
    # (A process that creates ``go`` itself only times itself beside others: slower, never faster.)
    # Any other process whose builds still run starts up meanwhile too (python, torch and pytest's collection:
    # 5 s of the H100 machine's grade went there after the lesson 01 torch-route build, on its critical path),
    # and waits for ``go`` after collection.
    alone = gs.config.timed_alone(tasks)
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
        gs.check_running()
        env = child_env(slot, gs.config.seed, gs.config.backend, build_dir_of(sub, gs.config), sub.unbuildable,
                        gs.config.timed_threads if alone else gs.config.task_threads, sub.build_errors)
        if sub.build_dir is not None:
            env[SHARED_ENV] = str(gs.config.build_dir)
        proc = start_worker(cmd, cwd=slot, env=env, scratch=report.parent, writable=[build_dir_of(sub, gs.config)],
                            readable=[gs.config.build_dir] if sub.build_dir is not None else [],
                            nice=task_nice(tasks, gs.config),
                            stdout=logf, stderr=subprocess.STDOUT)
        gs.live.add(proc)
        return proc

    with contextlib.ExitStack() as turn, open(log, "w") as logf:
        told = (dict(sub.unbuildable), dict(sub.build_errors))
        if not (alone or builds):
            turn.enter_context(gs.gpu_turn(exclusive=False))  # (runs its tests at once)
        proc = launch()
        if builds and not alone:
            for e in builds:
                e.wait()
            if (sub.unbuildable, sub.build_errors) != told:
                # a build it waited for was stopped or failed (its tests must fail at once with that build's
                # message, not build again): start afresh
                kill_group(proc)
                proc.wait()
                gs.live.discard(proc)
                proc = launch()
        if alone or builds:
            turn.enter_context(gs.gpu_turn(exclusive=alone))
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
                _announce(sub, tasks, events, gs)
                if finished_at is None and any(e.get("event") == "finished" for e in events):
                    finished_at = time.monotonic()
            if finished_at is not None and time.monotonic() - finished_at > _EXIT_GRACE_S:
                kill_group(proc)  # every test has reported: its exit is not waited for
                proc.wait()
                rc = next(int(e["exitstatus"]) for e in protocol.read_records(report) if e.get("event") == "finished")
                break
            # Before the first test starts, pytest imports torch and the tests: allow a minute for that.
            limit = gs.config.timeout + (60.0 if size <= 0 else 0.0)
            if time.monotonic() - last > limit:
                timed_out = True
                kill_group(proc)
                rc = proc.wait()
                break
    # Reap anything the tests left running in their session (a forked child of a hostile kernel).
    kill_group(proc)
    gs.live.discard(proc)
    events = protocol.read_records(report)
    collected = {e["nodeid"]: e for e in events if e.get("event") == "collected"}
    results = {e["nodeid"]: e for e in events if e.get("event") == "result"}
    started = [e["nodeid"] for e in events if e.get("event") == "start"]
    culprit = next((n for n in reversed(started) if n not in results), None)
    tampered = restore(slot, sub.pristine, sub.manifest)
    ran_on = next((str(e.get("backend")) for e in events if e.get("event") == "backend"), None)
    return Run(collected, results, culprit, timed_out, rc, log.read_text(errors="replace"), tampered, limit, ran_on)


def _announce(sub: Submission, tasks: list[TaskSpec], events: list[dict[str, Any]], gs: GradeSession) -> None:
    """Print the line of each task whose cases have all reported, while its process runs on (progress only).

    A failure that will be confirmed alone on a GPU waits for that run; the verdict of record is the one
    :func:`safe_run_group` returns, which prints again only if it differs from what was announced here."""
    if gs.config.progress is None:
        return
    run = Run({e["nodeid"]: e for e in events if e.get("event") == "collected"},
               {e["nodeid"]: e for e in events if e.get("event") == "result"}, None, False, 0, "", [], 0.0)
    for t in tasks:
        key = (sub.name, t.lesson, t.id)
        if key in gs.announced:
            continue
        recs = records_of(t, run)
        if not recs or any(r.outcome == "not-run" for r in recs):
            continue
        result = fold_tasks(recs)[0]
        if result.status == "fail" and gs.config.backend_name == "cuda" and not own_verdicts(recs):
            continue
        gs.announced[key] = result.status
        gs.say(sub, task_line(t.lesson, t.id, t.title, result.status, sum(r.duration for r in recs)))


def run_group(sub: Submission, tasks: list[TaskSpec], gs: GradeSession) -> list[TaskResult]:
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
        slot = gs.slots.get()
        try:
            run = _run_pytest(sub, slot, remaining, gs, f"{remaining[0].lesson}-{remaining[0].id}-r{round_no}")
        finally:
            gs.slots.put(slot)
        if sandbox_failure(run) and not sandbox_retried:  # a machine hiccup (exit 126): once more
            sandbox_retried = True
            continue
        if run.tampered and not alone:
            confirm += remaining
            break
        if run.backend is not None and run.backend != gs.config.backend_name:
            # Never a verdict measured elsewhere than the report says (a speed point earned on the GPU in a
            # grade that reports the simulator).
            for t in remaining:
                final[t.id] = TaskResult(t.id, t.lesson, t.title, t.points, 0.0, "fail", backend_mismatch(
                    run.backend, gs.config.backend_name))
            break
        note = crash_note(run)
        progressed = False
        nxt = []
        for t in remaining:
            recs = records_of(t, run)
            unfinished = [r for r in recs if r.outcome == "not-run"]
            holds_culprit = any(r.nodeid == run.culprit for r in recs)
            if holds_culprit or not unfinished or alone or not run.collected:
                if not recs and not alone and run.collected:
                    nxt.append(t)  # its tests were not collected in company (should not happen)
                    continue
                v = verdict(t, recs, note, run.culprit, run.timed_out, run.tampered if alone else None)
                # On a GPU a failure may come from a context an earlier case corrupted: confirm it alone,
                # unless every failed case has a verdict of its own (wrong values, a compile error), which no
                # other task can cause. The simulator runs kernels in a worker process per module, so its
                # verdicts in company stand.
                if (v.status == "fail" and not alone and gs.config.backend_name == "cuda"
                        and not (holds_culprit and run.timed_out) and not own_verdicts(recs)):
                    confirm.append(t)
                else:
                    final[t.id] = v
                progressed = True
            else:
                nxt.append(t)
        if not progressed:
            for t in nxt:
                final[t.id] = verdict(t, records_of(t, run), note, run.culprit, run.timed_out)
            break
        remaining = nxt
    for t in confirm:
        final[t.id] = run_group(sub, [t], gs)[0]
    return [final[t.id] for t in tasks if t.id in final]


def safe_run_group(sub: Submission, tasks: list[TaskSpec], gs: GradeSession) -> list[TaskResult]:
    """:func:`run_group`, turning any grader exception into failed tasks (grading goes on).

    Results are recorded in the session (``gs.finished``) as the group ends; a group still running when the
    grade is stopped (``GradeSession.stop_all``) records nothing and returns nothing (its tasks are "interrupted").
    """
    if gs.stopping.is_set():
        return []
    try:
        out = run_group(sub, tasks, gs)
    except GradeInterrupted:
        return []
    except Exception as e:  # noqa: BLE001 - one broken group must never stop the grading
        out = [TaskResult(t.id, t.lesson, t.title, t.points, 0.0, "fail",
                          f"the grader could not run this task: {type(e).__name__}: {e}") for t in tasks]
    with gs.lock:
        if gs.stopping.is_set():  # its workers may have been stopped under it: verdicts not to be trusted
            return []
        gs.finished.setdefault(sub.name, {}).update({f"{r.lesson}/{r.id}": r for r in out})
    for r in out:
        if gs.announced.get((sub.name, r.lesson, r.id)) != r.status:  # not announced as its process ran
            gs.say(sub, task_line(r.lesson, r.id, r.title, r.status, sum(t.duration for t in r.tests)))
    return out


def sanitizer_report(sub: Submission, task: TaskSpec, gs: GradeSession) -> str:
    """Run a failed task once under ``compute-sanitizer`` (GPU runners only) and return its first lines.

    Untested in the course's CI (no GPU there); off unless ``--sanitize``.
    """
    tool = shutil.which("compute-sanitizer")
    if not tool:
        return "\n(compute-sanitizer not found on PATH: no sanitizer report)"
    assert sub.pristine is not None
    slot = gs.slots.get()
    try:
        restore(slot, sub.pristine, sub.manifest)
        cmd = [tool, "--tool", "memcheck", "--print-limit", "5", *protocol.pytest_command(python(), slot, None),
               "-x", protocol.TASK_OPTION, task.id, *task.files]
        env = child_env(slot, gs.config.seed, "cuda", build_dir_of(sub, gs.config), threads=gs.config.task_threads)
        if sub.build_dir is not None:
            env[SHARED_ENV] = str(gs.config.build_dir)
        gs.check_running()
        proc = start_worker(cmd, cwd=slot, env=env, scratch=scratch_of(slot), writable=[build_dir_of(sub, gs.config)],
                            readable=[gs.config.build_dir] if sub.build_dir is not None else [], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=gs.config.timeout * 5 + gs.config.build_timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return "\n(compute-sanitizer run timed out)"
    finally:
        restore(slot, sub.pristine, sub.manifest)
        gs.slots.put(slot)
    lines = [ln for ln in out.splitlines() if ln.startswith("=========")]
    return "\ncompute-sanitizer:\n" + "\n".join(lines[:20]) if lines else "\ncompute-sanitizer: no errors reported"
