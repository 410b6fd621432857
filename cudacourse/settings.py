"""The run settings of one process: course root, kernels to load (impl), backend, seed, submission, build folder.

Inside a process these travel as one :class:`Settings` object (:func:`current`, changed with
:func:`configure`: the pytest plugin does that for ``--impl``/``--backend``/``--seed``/``--submission``).
Environment variables only carry them across a process boundary (a notebook kernel, a grading worker):
:func:`from_env` reads them, here and nowhere else, and :func:`to_env` writes them for a child.

===========================  ======================================================================
``CUDA_COURSE_ROOT``         course checkout whose model (``lessons/*/lesson.toml``) is read
``CUDA_COURSE_IMPL``         ``student`` (``lessons/``, default) or ``solution`` (``solutions/``)
``CUDA_COURSE_BACKEND``      ``auto`` (default), ``cuda`` or ``sim``
``CUDA_COURSE_SEED``         base seed of every random input (``check.rng``)
``CUDA_COURSE_SUBMISSION``   a learner's copy: ``cc.lesson`` loads ``DIR/lessons/NN_topic/`` files
``CUDA_COURSE_BUILD``        build cache folder (default ``.cudacourse-build/`` in the checkout)
``CUDA_COURSE_BUILD_SHARED`` set by the grader for a submission's workers: a cache of its builds of the
                             instructor's own files, looked up first and read-only to them
``CUDA_COURSE_BUILD_SEED``   set by the grader for the one worker that builds a submission's files identical to
                             the instructor's (no learner code runs there): the instructor's own cache
                             (``CUDA_COURSE_BUILD``, else the checkout's), whose builds of them are copied instead
                             of built again
``CUDA_COURSE_CONFINE``      set by the grader for its task processes: ``strict`` (learner code runs only in
                             OS-confined workers, ``cudacourse/sandbox/``) or ``best-effort`` (as confined as
                             this machine allows; the report says "unconfined"); unset: no confinement
===========================  ======================================================================

Knobs that are not run settings (they do not travel to child processes as settings do), also read only here:

=================================  ================================================================
``CUDA_COURSE_CONFINE_OFF``        rule sandbox mechanisms out (comma-separated: ``landlock``,
                                   ``namespaces``, ``cgroup``), for tests and instructors: reported
                                   exactly like a kernel that lacks them (:func:`confine_off`)
``CUDA_COURSE_UNBUILDABLE``        set by the grader for a test process: ``lesson/file=seconds;...``
                                   of files whose build it stopped (:func:`stopped_builds`)
``CUDA_COURSE_BUILD_ERRORS``       set by the grader for a test process: JSON ``{"lesson/file": error}`` of
                                   files whose one build of the grade failed (:func:`grade_build_errors`)
``CUDA_COURSE_TRITON_ONE_CONFIG``  ``1``: a Triton twin keeps one config per kernel instead of
                                   autotuning them all (set by the plugin while grading on a GPU;
                                   :func:`triton_one_config`)
``CUDA_COURSE_SIM_ORDER``          the simulator's thread order (``forward``, ``reverse``,
                                   ``shuffle[:SEED]``; :func:`sim_order`)
=================================  ================================================================

A worker keeps the last two (:data:`WORKER_KNOBS`): they change how its learner code runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_PREFIX = "CUDA_COURSE_"  # every variable of the course: a grader's child gets only those it is given (to_env)
IMPLS = ("student", "solution")
BACKENDS = ("auto", "cuda", "sim")
ENV = {"root": "CUDA_COURSE_ROOT", "impl": "CUDA_COURSE_IMPL", "backend": "CUDA_COURSE_BACKEND",
       "seed": "CUDA_COURSE_SEED", "submission": "CUDA_COURSE_SUBMISSION", "build_dir": "CUDA_COURSE_BUILD",
       "confine": "CUDA_COURSE_CONFINE", "build_shared": "CUDA_COURSE_BUILD_SHARED",
       "build_seed": "CUDA_COURSE_BUILD_SEED"}
CONFINE = ("strict", "best-effort")


@dataclass(frozen=True)
class Settings:
    """What a process runs with. ``None`` means the default (the checkout, a fresh seed, ...)."""

    root: Path | None = None
    impl: str = "student"
    backend: str = "auto"
    seed: int | None = None
    submission: Path | None = None
    build_dir: Path | None = None
    build_shared: Path | None = None  # a read-only build cache tried first (the grader's builds of its own files)
    build_seed: Path | None = None  # a read-only cache whose builds are copied into build_dir (the grader's, above)
    confine: str | None = None  # None: learner code runs unconfined (the course's own tests, notebooks)

    def __post_init__(self) -> None:
        if self.impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {self.impl!r} (CUDA_COURSE_IMPL or --impl)")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r} "
                             "(CUDA_COURSE_BACKEND or --backend)")
        if self.confine is not None and self.confine not in CONFINE:
            raise ValueError(f"confine must be one of {CONFINE} or unset, got {self.confine!r} (CUDA_COURSE_CONFINE)")


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``CUDA_COURSE_*`` variables (the only place that reads them)."""
    env = os.environ if environ is None else environ

    def get(key: str) -> str | None:
        v = env.get(ENV[key], "").strip()
        return v or None

    seed = get("seed")
    try:
        seed_val = None if seed is None else int(seed)
    except ValueError:
        raise ValueError(f"CUDA_COURSE_SEED={seed!r}: expected an integer") from None
    path = {k: (Path(v).expanduser() if (v := get(k)) else None)
            for k in ("root", "submission", "build_dir", "build_shared", "build_seed")}
    return Settings(root=path["root"], impl=(get("impl") or "student").lower(),
                    backend=(get("backend") or "auto").lower(), seed=seed_val, submission=path["submission"],
                    build_dir=path["build_dir"], build_shared=path["build_shared"], build_seed=path["build_seed"],
                    confine=(get("confine") or "").lower() or None)


def to_env(s: Settings) -> dict[str, str]:
    """The ``CUDA_COURSE_*`` variables that give a child process the settings ``s``."""
    out = {}
    for key, var in ENV.items():
        v = getattr(s, key)
        if v is not None:
            out[var] = str(v)
    return out


_OVERRIDES: dict[str, object] = {}


def current() -> Settings:
    """This process's settings: the environment it was started with, then what :func:`configure` set."""
    return dataclasses.replace(from_env(), **_OVERRIDES) if _OVERRIDES else from_env()  # type: ignore[arg-type]


def configure(**changes: object) -> Settings:
    """Set some of this process's settings (``configure(impl="solution")``) and return them all.

    Passing ``None`` for a setting drops what an earlier call set for it.
    """
    unknown = set(changes) - set(ENV)
    if unknown:
        raise TypeError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(ENV)}")
    for k, v in changes.items():
        if v is None:
            _OVERRIDES.pop(k, None)
        else:
            _OVERRIDES[k] = v
    s = current()  # validates
    return s


@contextlib.contextmanager
def using(**changes: object) -> Iterator[Settings]:
    """Within the block, run with some settings changed (``with using(root=tmp): ...``); restored after."""
    saved = dict(_OVERRIDES)
    try:
        yield configure(**changes)
    finally:
        _OVERRIDES.clear()
        _OVERRIDES.update(saved)


CONFINE_OFF_ENV = "CUDA_COURSE_CONFINE_OFF"


def confine_off(environ: Mapping[str, str] | None = None) -> set[str]:
    """The sandbox mechanisms ruled out by ``CUDA_COURSE_CONFINE_OFF`` (read at each call: tests set it)."""
    env = os.environ if environ is None else environ
    return {w.strip() for w in env.get(CONFINE_OFF_ENV, "").split(",") if w.strip()}


# Set by the grader for a test process: "lesson/file=seconds;..." of files whose build it stopped after its
# --build-timeout; cc.lesson fails them at once instead of building them again (lessons.Lesson.module).
UNBUILDABLE_ENV = "CUDA_COURSE_UNBUILDABLE"
BUILD_ERRORS_ENV = "CUDA_COURSE_BUILD_ERRORS"
TRITON_ONE_CONFIG_ENV = "CUDA_COURSE_TRITON_ONE_CONFIG"
SIM_ORDER_ENV = "CUDA_COURSE_SIM_ORDER"
WORKER_KNOBS = (SIM_ORDER_ENV, TRITON_ONE_CONFIG_ENV)


def grade_build_errors(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """"lesson/file" -> compile error, of the files the grade's warm-up built once and saw fail
    (``CUDA_COURSE_BUILD_ERRORS``, JSON): a task process reports that error instead of building the file again."""
    import json

    env = os.environ if environ is None else environ
    try:
        data = json.loads(env.get(BUILD_ERRORS_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def stopped_builds(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    """"lesson/file" -> seconds, of the files whose build the grader stopped (``CUDA_COURSE_UNBUILDABLE``)."""
    env = os.environ if environ is None else environ
    out = {}
    for item in env.get(UNBUILDABLE_ENV, "").split(";"):
        name, _, secs = item.partition("=")
        if name and secs:
            with contextlib.suppress(ValueError):
                out[name] = float(secs)
    return out


def sim_order(environ: Mapping[str, str] | None = None) -> str | None:
    """The simulator's thread order (``CUDA_COURSE_SIM_ORDER``: ``forward``, ``reverse``, ``shuffle[:SEED]``), or
    None when unset (read at each build: tests set it)."""
    env = os.environ if environ is None else environ
    return env.get(SIM_ORDER_ENV) or None


def triton_one_config(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Triton twins keep one config per kernel (``CUDA_COURSE_TRITON_ONE_CONFIG=1``)."""
    env = os.environ if environ is None else environ
    return env.get(TRITON_ONE_CONFIG_ENV) == "1"
