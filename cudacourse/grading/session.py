"""The session of one grade: the live state that the plan's configuration (``plan.RunSettings``) is run with.

It owns what changes while a grade runs: the working folders ("slots") the jobs take turns in, the GPU gate, the
warm-up builders' turns, the shared builds, the task lines already printed, the processes running now, the tasks
collected and those finished, and whether (and by which signals) the grade is being stopped. ``cli.main`` creates
one per grade; the runner and the warm-up builds take it as an argument (``gs``).
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudacourse.grading.plan import RunSettings
from cudacourse.grading.processes import kill_group
from cudacourse.grading.staging import GpuGate, Once, Submission, host_turn
from cudacourse.results import TaskResult, TaskSpec, interrupted


class GradeInterrupted(Exception):
    """The grade is being stopped; raised instead of starting a worker."""


@dataclass
class GradeSession:
    """The live state of one grade (see the module's docstring); ``config`` is set once the grade is planned."""

    _config: RunSettings | None = None
    slots: queue.Queue[Path] = field(default_factory=queue.Queue)  # working folders, one per job
    gate: GpuGate = field(default_factory=GpuGate, repr=False)
    builders: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(1), repr=False)  # warm-ups
    shared_built: Once = field(default_factory=Once, repr=False)  # per (lesson, instructor files): the shared build
    announced: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (name, lesson, id) -> status said
    live: set[subprocess.Popen[Any]] = field(default_factory=set)  # child processes running now
    stopping: threading.Event = field(default_factory=threading.Event)  # set by stop_all(): no worker starts
    collected: list[TaskSpec] = field(default_factory=list)  # the tasks of the grade (runner.collect_tasks)
    finished: dict[str, dict[str, TaskResult]] = field(default_factory=dict)  # name -> "lesson/id" -> result
    stop_signals: list[int] = field(default_factory=list)  # the signals that stopped this grade (SIGTERM, Ctrl-C)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # progress lines, collected, finished

    def __post_init__(self) -> None:
        if self._config is not None:
            self.configure(self._config)

    @property
    def config(self) -> RunSettings:
        """The run's configuration (the plan's :class:`RunSettings`)."""
        if self._config is None:
            raise RuntimeError("the grade's session has no configuration yet (GradeSession.configure)")
        return self._config

    def configure(self, config: RunSettings) -> None:
        """Set the run's configuration, and the warm-up builders' turns it asks for (``config.build_jobs``)."""
        self._config = config
        self.builders = threading.Semaphore(max(1, config.build_jobs))

    def check_running(self) -> None:
        """Raise :class:`GradeInterrupted` once the grade is being stopped: no new worker starts then."""
        if self.stopping.is_set():
            raise GradeInterrupted("the grade was stopped; no new worker starts")

    def stop_all(self) -> None:
        """Stop the grade now: no new worker starts, every running one is stopped with all it started."""
        self.stopping.set()
        for proc in list(self.live):
            kill_group(proc)

    def interrupted_results(self, name: str) -> list[TaskResult]:
        """Every collected task of submission ``name``: its result if its group finished, else interrupted."""
        with self.lock:
            done = dict(self.finished.get(name, {}))
        return [done.get(f"{t.lesson}/{t.id}") or interrupted(t) for t in self.collected]

    @contextlib.contextmanager
    def gpu_turn(self, exclusive: bool) -> Iterator[None]:
        """On a GPU, hold the gate while a task process runs: alone for speed tasks, shared for the others."""
        if self.config.backend_name != "cuda":
            yield
            return
        self.gate.acquire(exclusive)
        try:
            with host_turn(exclusive):  # ... and beside other graders on this machine
                yield
        finally:
            self.gate.release(exclusive)

    def say(self, sub: Submission, line: str) -> None:
        """Print one progress line (thread-safe; nothing when quiet)."""
        if self.config.progress is None:
            return
        who = f"{sub.name}: " if self.config.many and sub.name else ""
        with self.lock:
            self.config.progress(who + line)
