"""Where a grade's last seconds go: a grade with its process ends, kills and slot checks stamped.

Usage (GPU machine, course installed): ``python3 benchmarks/grade_tail.py WORKDIR [grade args]``, e.g.
``python3 benchmarks/grade_tail.py $(mktemp -d) --impl solution --lessons 07_host_side``. ``TAIL_GRACE=S``: the
grader's ``_EXIT_GRACE_S`` set to S for the run; WORKDIR ``-``: the
grade's own temporary folder, removed at its end, so its removal is timed and its reports are not read.

Prints, in seconds from the start (CLOCK_MONOTONIC, which the task processes' reports share), when each task
process started and returned, how long the collection, each ``kill_group``, ``restore`` and removal took, and, from
the kept reports in WORKDIR, when each process's last test reported and when it wrote ``finished``. Measurement
only: it wraps the grader's functions, changes none.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudacourse.grading import cli, runner

T0 = time.monotonic()
WALL_OFFSET = time.time() - time.monotonic()  # a file's mtime (wall clock) to CLOCK_MONOTONIC


def stamp(what: str) -> None:
    """Print ``what`` with its time since the start."""
    print(f"[tail {time.monotonic() - T0:7.2f}] {what}", file=sys.stderr, flush=True)


def timed(module: Any, name: str, label: Callable[..., str], at_least: float = 0.0) -> None:
    """Replace ``module.name`` with a wrapper that stamps its start and its duration (when ``at_least`` seconds)."""
    fn = getattr(module, name)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            if time.monotonic() - t >= at_least:
                stamp(f"{name} {label(*args, **kwargs)}: {time.monotonic() - t:.2f} s (from {t - T0:.2f})")

    setattr(module, name, wrapper)


def main() -> int:
    """Run the grade with WORKDIR kept, then read its task reports."""
    if len(sys.argv) < 2 or (sys.argv[1].startswith("-") and sys.argv[1] != "-"):
        print(__doc__, file=sys.stderr)
        return 2
    work, rest = Path(sys.argv[1]), sys.argv[2:]
    if "TAIL_GRACE" in os.environ:
        runner._EXIT_GRACE_S = float(os.environ["TAIL_GRACE"])
    timed(runner, "_run_pytest", lambda sub, slot, tasks, gs, tag: f"{slot.name} {tag} {[t.id for t in tasks]}")
    timed(runner, "kill_group", lambda proc, *a, **k: f"pid {proc.pid}")
    timed(runner, "restore", lambda slot, *a, **k: slot.name)
    timed(cli, "secret_lines", lambda *a, **k: "")
    timed(cli, "collect_tasks", lambda *a, **k: f"{len(a[4])} lessons")
    timed(cli, "_clear", lambda work, keep: str(work))
    timed(cli.shutil, "rmtree", lambda path, *a, **k: str(path), at_least=0.05)
    rc = cli.main([*rest, *(["--workdir", str(work)] if str(work) != "-" else [])])
    stamp(f"grade returned {rc}")
    for rep in sorted(work.rglob("*.jsonl")) if str(work) != "-" else []:
        recs = [json.loads(line) for line in rep.read_text().splitlines() if line.strip()]
        ts = [r["t"] for r in recs if r.get("event") == "result" and "t" in r]
        if ts:
            written = rep.stat().st_mtime - WALL_OFFSET
            print(f"[tail] {rep.name}: last result {max(ts) - T0:.2f}, report last written {written - T0:.2f}, "
                  f"finished {any(r.get('event') == 'finished' for r in recs)}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
