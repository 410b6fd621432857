"""The one model of the course: its root, its lessons, each lesson's files and graded tasks.

Each lesson folder ``lessons/NN_topic/`` holds a ``lesson.toml``; the folder name is the lesson id::

    [lesson]
    title = "ReLU: your first kernel"          # short title
    write = "ReLU (scalar, grid-stride, ...)"   # README table column "you write"
    learn = "grids, blocks, threads, ..."       # README table column "you learn"
    files = ["relu.cu"]                          # exercise files (stubs in lessons/, complete in solutions/)
    torch_files = ["relu_torch.cu"]              # exercise files that may include torch headers
    python_files = []                            # exercise Python files (lesson 04: decoder.py)
    python_allow = []                            # what they may use beyond the screen's defaults (lesson 07:
                                                 # "torch.library", "functools"; grading/screens.py)
    triton_files = ["relu_triton.py"]            # Triton twins (optional track): Python files of @triton.jit kernels
    support_files = []                           # non-exercise files the kernels include, staged as-is
    notebook = "relu.ipynb"

    [[task]]
    id = "1.1"
    title = "relu_v1_scalar: one thread per element"
    points = 2
    gpu = false                                  # true: needs a real GPU; "not graded" on the simulator
    track = "cuda"                               # "cuda" (default) or "triton": a task of the Triton twins
    target = 0.85                                # speed tasks only: the bench target ...
    target_of = "copy"                           # ... relative to "copy" bandwidth or the "reference"
    alone = false                                # a GPU task that times nothing: graded beside the others

A Triton task (``track = "triton"``, ids such as ``1.T1``) is graded by the same tests, on the CPU through
Triton's interpreter; ``cudacourse/triton_track.py`` says how its files are loaded.

The loader, ``cc.lesson``, bench, the grader, the pytest plugin, stubs, the templates and the README's
lesson table all read this model; nothing else keeps a list of lessons, points or targets. The model is
always read from the course checkout (the grader's own), never from a submission.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from cudacourse.errors import CourseError

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the checkout, for an editable install
LESSON_FILE = "lesson.toml"
_LESSON_DIR = re.compile(r"^(\d\d)_[a-z0-9_]+$")
_TASK_ID = re.compile(r"^\d+\.[0-9A-Za-z]+$")
TRITON_ID = re.compile(r"^\d+\.T\d+$")  # the ids of the optional Triton twins (1.T1), and of nothing else


def is_triton_task(task_id: str) -> bool:
    """Whether ``task_id`` is a task of the optional Triton track (reports keep its points apart)."""
    return bool(TRITON_ID.match(task_id))
_LESSON_KEYS = {"title": str, "write": str, "learn": str, "files": list, "torch_files": list,
                "python_files": list, "python_allow": list, "triton_files": list, "support_files": list,
                "notebook": str}
_TASK_KEYS = {"id": str, "title": str, "points": (int, float), "gpu": bool, "target": (int, float),
              "target_of": str, "margin": (int, float), "track": str, "files": list, "slow": bool, "alone": bool}
TRACKS = ("cuda", "triton")  # a task's track: the CUDA exercises, or the optional Triton twins


class CourseModelError(CourseError):
    """A ``lesson.toml`` is missing, malformed, or disagrees with the course tree."""


def task_sort_key(task_id: str) -> tuple[Any, ...]:
    """Sort key of a task id: ``1.2`` before ``1.10``, numbers before letters (``1.H``)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-]", task_id))


@dataclass(frozen=True)
class Task:
    """One graded task: the key shared by the TODO, the tests' ``task`` marker and the grade line."""

    id: str
    lesson: str
    title: str
    points: float
    gpu: bool = False
    target: float | None = None
    target_of: str = "reference"  # "reference" (speed ratio) or "copy" (fraction of the copy bandwidth)
    track: str = "cuda"  # "cuda" or "triton" (a Triton twin: needs the triton package, see triton_track.py)
    files: tuple[str, ...] = ()  # the exercise files its tests use, when not the default (LessonInfo.files_of)
    slow: bool = False  # its tests take many seconds even on a GPU (training, torch.compile): graded first
    alone: bool = True  # a GPU task: graded alone on the GPU with the timed ones; False for a GPU-only correctness
                        # check that may run beside other tasks (7.4: streams)
    margin: float | None = None  # speed: (the solution's measured ratio) / target - 1, on the GPU named beside it


@dataclass(frozen=True)
class LessonInfo:
    """What ``lessons/<id>/lesson.toml`` declares about one lesson."""

    id: str
    title: str
    write: str
    learn: str
    files: tuple[str, ...]
    torch_files: tuple[str, ...] = ()
    python_files: tuple[str, ...] = ()
    support_files: tuple[str, ...] = ()
    notebook: str | None = None
    tasks: tuple[Task, ...] = field(default_factory=tuple)
    triton_files: tuple[str, ...] = ()
    python_allow: tuple[str, ...] = ()  # modules and torch.X names its Python files may use beyond the screen's

    @property
    def number(self) -> str:
        """``"01"`` for ``01_relu``."""
        return self.id[:2]

    @property
    def kernel_files(self) -> tuple[str, ...]:
        """Exercise files built as kernels: kernel-only files, then the ones that may include torch."""
        return self.files + self.torch_files

    @property
    def exercise_files(self) -> tuple[str, ...]:
        """Every file a learner writes (kernels, Python, and the Triton twins)."""
        return self.files + self.torch_files + self.python_files + self.triton_files

    @property
    def test_file(self) -> str:
        """The graded test file's name in ``tests/``: ``test_01_relu.py``."""
        return f"test_{self.id}.py"

    def files_of(self, task: Task) -> tuple[str, ...]:
        """The exercise files ``task``'s tests use: its declared ``files``, else the lesson's ``triton_files``
        for a Triton twin and ``files`` + ``python_files`` for the others. A task that uses a torch-route file
        (slow to build) names it, so the grader starts the other tasks without waiting for that build and
        leaves the task unrun while the file is the untouched stub."""
        if task.files:
            return task.files
        return self.triton_files if task.track == "triton" else self.files + self.python_files

    def task(self, task_id: str) -> Task:
        """The declared task ``task_id`` (``KeyError`` naming the declared ones otherwise)."""
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(f"lesson {self.id} declares no task {task_id!r} (declared: "
                       f"{', '.join(t.id for t in self.tasks) or 'none'}; see lessons/{self.id}/{LESSON_FILE})")


def _check_keys(where: str, table: dict[str, Any], spec: dict[str, Any], required: set[str]) -> None:
    unknown = sorted(set(table) - set(spec))
    if unknown:
        raise CourseModelError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(spec)})")
    missing = sorted(required - set(table))
    if missing:
        raise CourseModelError(f"{where}: missing key(s) {', '.join(missing)}")
    for k, v in table.items():
        if not isinstance(v, spec[k]) or (spec[k] is list and not all(isinstance(e, str) for e in v)):
            raise CourseModelError(f"{where}: {k} = {v!r} has the wrong type")


def _parse_task(lesson_id: str, t: dict[str, Any], tw: str) -> Task:
    _check_keys(tw, t, _TASK_KEYS, {"id", "title", "points"})
    if not _TASK_ID.match(t["id"]) or int(t["id"].split(".")[0]) != int(lesson_id[:2]):
        raise CourseModelError(f"{tw}: id {t['id']!r} must look like '{int(lesson_id[:2])}.N'")
    if t.get("target_of", "reference") not in ("reference", "copy"):
        raise CourseModelError(f"{tw}: target_of must be 'reference' or 'copy', got {t['target_of']!r}")
    if t["points"] <= 0:
        raise CourseModelError(f"{tw}: points must be positive, got {t['points']}")
    if t.get("track", "cuda") not in TRACKS:
        raise CourseModelError(f"{tw}: track must be one of {', '.join(map(repr, TRACKS))}, got {t['track']!r}")
    if (t.get("track", "cuda") == "triton") != is_triton_task(t["id"]):
        raise CourseModelError(f"{tw}: id {t['id']!r}: a Triton twin's id is N.T<k> ({int(lesson_id[:2])}.T1), and "
                               "only a twin's (track = \"triton\")")
    return Task(t["id"], lesson_id, t["title"], float(t["points"]), bool(t.get("gpu", False)),
                None if t.get("target") is None else float(t["target"]), t.get("target_of", "reference"),
                t.get("track", "cuda"), tuple(t.get("files", ())), bool(t.get("slow", False)),
                bool(t.get("alone", True)), margin=None if t.get("margin") is None else float(t["margin"]))


def parse_lesson(lesson_id: str, text: str, where: str = "") -> LessonInfo:
    """Parse the text of one ``lesson.toml`` (``where`` names it in errors)."""
    where = where or f"lessons/{lesson_id}/{LESSON_FILE}"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CourseModelError(f"{where}: not valid TOML: {e}") from e
    extra = sorted(set(doc) - {"lesson", "task"})
    if extra:
        raise CourseModelError(f"{where}: unknown table(s) {', '.join(extra)} (expected [lesson] and [[task]])")
    les = doc.get("lesson")
    if not isinstance(les, dict):
        raise CourseModelError(f"{where}: no [lesson] table")
    _check_keys(f"{where} [lesson]", les, _LESSON_KEYS, {"title", "write", "learn", "files"})
    tasks = [_parse_task(lesson_id, t, f"{where} [[task]] #{i + 1}") for i, t in enumerate(doc.get("task", []))]
    ids = [t.id for t in tasks]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise CourseModelError(f"{where}: task id(s) declared twice: {', '.join(dup)}")
    names = (les["files"] + les.get("torch_files", []) + les.get("python_files", []) + les.get("triton_files", [])
             + les.get("support_files", []))
    bad = [n for n in names if "/" in n or "\\" in n or n.startswith(".")]
    if bad:
        raise CourseModelError(f"{where}: file names must be plain names inside the lesson folder: {bad}")
    not_py = [n for n in les.get("triton_files", []) if not n.endswith(".py")]
    if not_py:
        raise CourseModelError(f"{where}: triton_files are Python files (name.py): {not_py}")
    exercise = set(names) - set(les.get("support_files", []))
    for t in tasks:
        unknown = [n for n in t.files if n not in exercise]
        if unknown:
            raise CourseModelError(f"{where}: task {t.id} names files = {unknown}, which are not exercise files of "
                                   f"the lesson (files, torch_files, python_files, triton_files): "
                                   f"{', '.join(sorted(exercise))}")
    if any(t.track == "triton" for t in tasks) and not les.get("triton_files"):
        raise CourseModelError(f"{where}: a task of track 'triton' needs the lesson's triton_files (its *_triton.py)")
    return LessonInfo(lesson_id, les["title"], les["write"], les["learn"], tuple(les["files"]),
                      tuple(les.get("torch_files", ())), tuple(les.get("python_files", ())),
                      tuple(les.get("support_files", ())), les.get("notebook"),
                      tuple(sorted(tasks, key=lambda t: task_sort_key(t.id))), tuple(les.get("triton_files", ())),
                      tuple(les.get("python_allow", ())))


class Course:
    """The course rooted at ``root``: ``root/lessons/NN_topic/lesson.toml`` for every lesson."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.lessons_dir = self.root / "lessons"
        self.solutions_dir = self.root / "solutions"
        self.tests_dir = self.root / "tests"
        self._lessons: dict[str, LessonInfo] | None = None

    @property
    def lessons(self) -> dict[str, LessonInfo]:
        """Every lesson, by id, in order."""
        if self._lessons is None:
            found: dict[str, LessonInfo] = {}
            tomls = sorted(self.lessons_dir.glob(f"*/{LESSON_FILE}")) if self.lessons_dir.is_dir() else []
            for p in tomls:
                lid = p.parent.name
                if not _LESSON_DIR.match(lid):
                    raise CourseModelError(f"{p}: a lesson folder is named NN_topic (two digits, lower case)")
                found[lid] = parse_lesson(lid, p.read_text(), str(p.relative_to(self.root)))
            nums = [lid[:2] for lid in found]
            dup = sorted({n for n in nums if nums.count(n) > 1})
            if dup:
                raise CourseModelError(f"two lesson folders share the number(s) {', '.join(dup)} in {self.lessons_dir}")
            self._lessons = found
        return self._lessons

    def __iter__(self) -> Iterator[LessonInfo]:
        return iter(self.lessons.values())

    def lesson(self, name: str) -> LessonInfo:
        """A lesson by id (``01_relu``) or number (``01``, ``1``)."""
        if name in self.lessons:
            return self.lessons[name]
        match = [v for k, v in self.lessons.items() if name.isdigit() and k[:2] == name.zfill(2)]
        if match:
            return match[0]
        raise CourseModelError(f"no lesson '{name}' in {self.lessons_dir} "
                               f"(lessons: {', '.join(self.lessons) or 'none'})")

    def select(self, names: list[str] | None) -> list[str]:
        """Lesson ids for ``names`` (ids or numbers, comma or space separated); all lessons when empty."""
        if not names:
            return list(self.lessons)
        out: list[str] = []
        for v in (x for val in names for x in re.split(r"[,\s]+", val) if x):
            lid = self.lesson(v).id
            if lid not in out:
                out.append(lid)
        return out

    def tasks(self) -> list[Task]:
        """Every task of every lesson, in order."""
        return [t for les in self for t in les.tasks]

    def task(self, lesson: str, task_id: str) -> Task:
        """The declared task ``task_id`` of ``lesson``."""
        return self.lesson(lesson).task(task_id)

    def kernel_dir(self, lesson: str, impl: str) -> Path:
        """Where this checkout keeps ``lesson``'s files for ``impl`` (``student``: lessons/, else solutions/)."""
        return (self.solutions_dir if impl == "solution" else self.lessons_dir) / lesson

    def files_dir(self, lesson: str, impl: str = "student", submission: Path | None = None) -> Path:
        """Which folder holds ``lesson``'s files for a run: a submission's copy (``submission/lessons/ID``) when
        one is graded, else this checkout's for ``impl`` (:meth:`kernel_dir`). ``lesson`` is an id or a number.
        The one answer to that question: ``cc.lesson`` asks it with the process's settings (``lessons.lesson_dir``),
        the grader with the submission it stages."""
        lid = self.lesson(lesson).id
        if submission is not None:
            return Path(submission) / "lessons" / lid
        return self.kernel_dir(lid, impl)

    def lesson_of_test(self, path: str | Path) -> str | None:
        """The lesson a test file belongs to (``test_01_relu.py``, ``test_01_relu_hidden.py`` -> ``01_relu``)."""
        m = re.match(r"test_(\d\d)", Path(path).name)
        if not m:
            return None
        return next((k for k in self.lessons if k[:2] == m.group(1)), None)

    def __repr__(self) -> str:
        return f"<cudacourse.Course {self.root} lessons={list(self.lessons)}>"


@functools.cache
def _course_at(root: Path) -> Course:
    return Course(root)


def course(root: str | Path | None = None) -> Course:
    """The course at ``root``; cached per root.

    The default root is ``CUDA_COURSE_ROOT`` when set (a checkout named explicitly), else the checkout this
    package runs from (an editable install). Raises :class:`CourseModelError`, saying what to do, when that
    folder holds no lessons: what an installed (non-editable) package sees without ``CUDA_COURSE_ROOT``.
    """
    if root is not None:
        return _course_at(Path(root).resolve())
    from cudacourse import settings

    named = settings.current().root
    c = _course_at((named or PACKAGE_ROOT).resolve())
    if c.lessons:
        return c
    if named is not None:
        raise CourseModelError(
            f"CUDA_COURSE_ROOT={named} holds no lessons (no {c.lessons_dir}/NN_topic/lesson.toml): point it at the "
            "top folder of a clone of the course (the folder with README.md, lessons/ and solutions/).")
    raise CourseModelError(
        f"no lessons found under {c.lessons_dir}: this cudacourse is installed as a package, and the course's lessons "
        "live in a clone of its repository. Either set CUDA_COURSE_ROOT to the top folder of a clone (export "
        "CUDA_COURSE_ROOT=/path/to/the/clone), or install it editable from the clone (`pip install -e .`, which "
        "./setup.sh and `make` do).")


HIDDEN_TASKS_FILE = "tasks.toml"


def hidden_tasks(c: Course, folder: str | Path) -> list[Task]:
    """Extra tasks an instructor's hidden test folder declares in ``folder/tasks.toml`` ([[task]] tables).

    A task's lesson is the course lesson whose number starts its id (``1.H`` -> ``01_relu``). A missing
    file declares nothing; hidden tests may also use the lessons' own tasks.
    """
    path = Path(folder) / HIDDEN_TASKS_FILE
    if not path.is_file():
        return []
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise CourseModelError(f"{path}: not valid TOML: {e}") from e
    if set(doc) - {"task"}:
        raise CourseModelError(f"{path}: only [[task]] tables are allowed, found {sorted(set(doc) - {'task'})}")
    out = []
    for i, t in enumerate(doc.get("task", [])):
        num = str(t.get("id", "")).split(".")[0]
        if not num.isdigit():
            raise CourseModelError(f"{path}: task id {t.get('id')!r} must look like 'N.X'")
        out.append(_parse_task(c.lesson(num.zfill(2)).id, t, f"{path} [[task]] #{i + 1}"))
    return out
