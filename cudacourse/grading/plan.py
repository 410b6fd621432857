"""Planning a grade: which tasks run, which are idle or cannot be graded here, their groups, who times alone.

Pure functions of the course model, the submissions and the run's configuration (:class:`RunSettings`): they
start nothing and hold no live state (that is :mod:`cudacourse.grading.session`'s); ``cli.grade`` calls them in
order and hands their answers to the session that runs the grade.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cudacourse.course import Course, Task, hidden_tasks, task_sort_key
from cudacourse.course import course as course_model
from cudacourse.exercise_state import file_states, lesson_started, untouched_reason
from cudacourse.grading.staging import MAX_SOURCE_BYTES, Submission
from cudacourse.results import GPU_SKIP_REASON, NOT_STARTED, TaskResult, TaskSpec
from cudacourse.sandbox import SourceTooLarge, check_source_size

TIMED_AHEAD = 2  # timed processes started ahead of their turn: one times while the next starts up


@dataclass
class RunSettings:
    """The configuration of one grading run: what every task run needs to know (no live state: that is the
    session's, :class:`~cudacourse.grading.session.GradeSession`)."""

    lessons: list[str]
    seed: int
    backend: str | None
    timeout: float
    build_timeout: float
    build_dir: Path
    hidden_feedback: str
    sanitize: bool
    backend_name: str = "sim"
    progress: Callable[[str], None] | None = None  # prints a progress line (None: quiet, ``grade -q``)
    many: bool = False  # several submissions: progress lines name the submission
    instructor: dict[str, set[str]] = field(default_factory=dict)  # "lesson/file" -> sha256 of solution, stub
    timed: frozenset[tuple[str, str]] = frozenset()  # (lesson, id) of the tasks timed alone (speed, on a GPU)
    urgent: frozenset[tuple[str, str]] = frozenset()  # (lesson, id) of the tasks whose processes are not niced
    task_files: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (lesson, id) -> files_of
    build_jobs: int = 1  # warm-up workers at once (``GradeSession.builders``)
    build_threads: int = 1  # files one warm-up worker builds at once
    task_threads: int = 1  # CPU threads of torch in each task process (``child_env``): cores / jobs
    timed_threads: int = 1  # ... in a process that times (alone on the machine once it has the gate): cores
    build_seed: Path | None = None  # the instructor's cache: builds of its own files, copied (``_warm_up``)

    def kernels_of(self, tasks: Sequence[TaskSpec]) -> set[tuple[str, str]]:
        """(lesson, file) of the kernel files (``.cu``) the tests of ``tasks`` use (``LessonInfo.files_of``)."""
        return {(t.lesson, f) for t in tasks for f in self.task_files.get((t.lesson, t.id), ()) if f.endswith(".cu")}

    def timed_alone(self, tasks: Sequence[TaskSpec]) -> bool:
        """Whether ``tasks`` time kernels and so run alone on the GPU (the session's GPU gate, exclusive)."""
        return self.backend_name == "cuda" and all((t.lesson, t.id) in self.timed for t in tasks)


def instructor_files(sub: Submission, lesson: str, st: RunSettings) -> list[tuple[str, str]]:
    """(name, sha256) of ``sub``'s kernel files of ``lesson`` identical to the instructor's solution or stub
    (none when any header of the lesson differs: a header is compiled into every file that includes it)."""
    assert sub.pristine is not None
    folder = course_model(sub.pristine).kernel_dir(lesson, "student")  # the staged copy is a course of its own
    files = sorted(p for p in folder.iterdir() if p.suffix in (".cu", ".cuh", ".h"))
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    known = {n: h for n, h in digest.items() if h in st.instructor.get(f"{lesson}/{n}", ())}
    if any(n not in known for n in digest if not n.endswith(".cu")):
        return []
    return sorted((n, h) for n, h in known.items() if n.endswith(".cu"))


def declared_tasks(course: Course, hidden: Path | None) -> dict[tuple[str, str], Task]:
    """Every task the grader may grade: the course model's and those of ``hidden/tasks.toml``."""
    out = {(t.lesson, t.id): t for t in course.tasks()}
    for t in hidden_tasks(course, hidden) if hidden is not None else []:
        out[(t.lesson, t.id)] = t
    return out


def instructor_hashes(course: Course) -> dict[str, set[str]]:
    """"lesson/file" -> sha256 of the instructor's solution and stub of every kernel file: a submission's file
    identical to one of them is built once per run in a shared cache (``builds._warm_up``)."""
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
        folder = course.files_dir(lid, "student", sub.source)
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
    for no build of it), or whose TODO blocks all are (``exercise_state.untouched_todos``: a learner who had done
    1.1-1.3 got 12 lines of failure for 1.4, whose TODO in the same relu.cu they had not begun)."""
    idle_lessons = not_started(course, sub, lessons)
    out = {k: "" for k in declared if k[0] in idle_lessons}
    if sub.impl == "solution":
        return out
    for lid in lessons:
        if lid in idle_lessons:
            continue
        info = course.lesson(lid)
        folder = course.files_dir(lid, "student", sub.source)
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
    Those hosting a torch worker come next (``_hosts_worker``: a learner's Python file; on a GPU also a torch-route
    file), then the Triton twins (they need no build), on the simulator tasks on a torch-route file last of the
    others (the longest build), and each submission's timed tasks (``st.timed``) last of all, in one process.
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
    # torch worker (a worker's start-up on top of their tests: on the H100 machine 6.3 and 7.4, queued behind the
    # twins, ended the correctness phase at 70 s); a stable sort
    return sorted(out, key=lambda g: (all((t.lesson, t.id) in st.timed for t in g[1]),
                                      not any(_slow(course, t) for t in g[1]),
                                      not any(_hosts_worker(course, t, st) for t in g[1])))


def _hosts_worker(course: Course, t: TaskSpec, st: RunSettings) -> bool:
    """Whether ``t``'s tests start a torch worker in an ordinary (not timed) task process: they host a learner's
    Python file (``learner_python``), or, on a GPU, load a torch-route file, which runs in a worker of its own there.

    On the H200 task 1.6 (relu_torch.cu), queued last of the ordinary processes, ended the correctness phase 2-6 s
    after every other task even in a grade whose builds were all cached (2026-11-29: relu_torch.cu ready at 4 s,
    1.6 done at 52 s): its process waited for a job, then started Python, torch and the worker. Queued first, its
    start-ups overlap the build (the warm-up starts that build first, ``build_order``). On the simulator it stays
    last: there the torch-route build is the grade's longest, and a process waiting for it would hold one of a few
    jobs (2 on CI's machine; a GPU grade has 16)."""
    if (t.lesson, t.id) in st.timed:
        return False
    files = st.task_files.get((t.lesson, t.id), ())
    return learner_python(course, t.lesson, files) or _torch_route_on_gpu(course, t, st)


def _torch_route_on_gpu(course: Course, t: TaskSpec, st: RunSettings) -> bool:
    """Whether ``t``'s tests load a torch-route file on a GPU, where it runs in a torch worker of its own (1.6)."""
    files = st.task_files.get((t.lesson, t.id), ())
    return st.backend_name == "cuda" and bool(set(files) & set(course.lesson(t.lesson).torch_files))


def timed_alone(declared: dict[tuple[str, str], Task], backend: str) -> frozenset[tuple[str, str]]:
    """The tasks graded alone on the GPU, in one process per submission after the others (``st.timed``; the gate
    of ``GradeSession.gpu_turn``): on cuda, every GPU task but those lesson.toml marks ``alone = false``.

    Timed beside other task processes on the same GPU, a solution's kernel measured 0.72x where it reaches 0.9x
    alone (H100, task 2.7). That process starts up while the other tasks still run and times once they are done;
    builds go on meanwhile (they hold no turn). A GPU task that times nothing (7.4: streams) runs beside the
    others: its torch worker's start-up held the timed phase back 11 s on the H100 (2026-11-28)."""
    if backend != "cuda":
        return frozenset()
    return frozenset(k for k, t in declared.items() if t.gpu and t.alone)


def urgent_tasks(course: Course, tasks: Sequence[TaskSpec], st: RunSettings) -> frozenset[tuple[str, str]]:
    """On a GPU, the tasks whose processes run without the task niceness (``runner.TASK_NICE``), as the builds do: the
    ``slow`` ones and those that load a torch-route file (1.6). Each is a long chain of fresh processes (7.10 starts
    three torch workers, each importing torch and starting CUDA) that ended the H200 grade's correctness phase: niced
    like the twenty other task processes on a busy machine, 7.10 took 38-41 s there, 16 s in a quieter grade
    (results/nvidia-h200/grade_time_2026-11-29e/). The other processes, with time to spare, give way to them."""
    if st.backend_name != "cuda":
        return frozenset()
    return frozenset((t.lesson, t.id) for t in tasks
                     if (t.lesson, t.id) not in st.timed and (_slow(course, t) or _torch_route_on_gpu(course, t, st)))


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
    shared cache (``builds._warm_up``): no slow build of its own, so its tasks may run with the others, in one
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
        shared = {n for n, _ in instructor_files(sub, lesson, st)}
        if (set(files) & set(course.lesson(lesson).torch_files)) - shared:  # a slow build of its own
            out.update({k: v for k, v in keyed.items() if k[0] == lesson and k not in out
                        and learner_python(course, lesson, k[1]) == python})
        else:
            out[(lesson, tuple(sorted(files)))] = sorted(tasks, key=lambda t: task_sort_key(t.id))
    return out


def learner_python(course: Course, lesson: str, files: Sequence[str]) -> tuple[str, ...]:
    """The learner's Python exercise files among ``files`` (a task's ``files_of``), as "lesson/file".

    While grading, the tests of a task that uses one host it in a torch worker (``workers/torch.py``: one per
    file and task process, so tasks that share a process share its start-up); no test imports one into its task
    process. Tasks are grouped by these files for that sharing, except the timed ones, which all share one process
    (their workers start before its turn on the GPU: each test file's ``cc_preload``)."""
    python = course.lesson(lesson).python_files
    return tuple(sorted(f"{lesson}/{f}" for f in files if f in python))


def lessons_to_run(lessons: list[str], chosen: dict[tuple[str, str], Task],
                   idle: dict[int, dict[tuple[str, str], str]]) -> list[str]:
    """The lessons of ``lessons`` with a task of ``chosen`` that some submission runs (not idle for it)."""
    return [lid for lid in lessons if any((les, tid) not in idle[i] for i in idle for (les, tid) in chosen
                                          if les == lid)]


def job_count(requested: int | None, backend: str, cpus: int) -> int:
    """Task processes at a time: ``--jobs`` when given, else the CPU count, at most 8 (16 on a GPU)."""
    # On a GPU a task process mostly waits for the GPU, its worker or a compiler (Triton), not for a core: twice
    # as many run at once.
    return requested if requested and requested > 0 else (min(16, cpus) if backend == "cuda" else min(8, cpus))


def kernels_to_build(chosen: dict[tuple[str, str], Task], idle: dict[tuple[str, str], str], lesson: str,
                     task_files: dict[tuple[str, str], tuple[str, ...]]) -> list[str]:
    """The kernel files (``.cu``) of ``lesson`` that the tasks to run of one submission use (its warm-up's list)."""
    return sorted({f for (les, tid) in chosen if les == lesson and (les, tid) not in idle
                   for f in task_files[(les, tid)] if f.endswith(".cu")})


def build_order(course: Course, to_build: dict[str, list[str]]) -> list[str]:
    """The lessons of ``to_build`` in the order their warm-ups start: the slow torch-route builds first (they are
    the longest wait)."""
    return sorted(to_build, key=lambda les: not set(to_build[les]) & set(course.lesson(les).torch_files))
