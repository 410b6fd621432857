"""Where a speed task's seconds go while grading on a GPU: a trace of cudacourse.speed's judge (issue 35).

Run it on a throwaway copy of the course only (the GPU machine's copy of the working tree): ``apply`` edits
``cudacourse/bench.py`` and ``cudacourse/speed.py`` there so that the judge prints a line per step to the task
process's own stderr (which the grader keeps in its work folder's ``*.log`` files, since pytest's capture is
bypassed); ``summary WORKDIR`` reads those logs back and prints, per judged task, its time in the test before the
judge, each ``time_samples`` call (warm-up, the calibration call, each sample's setup and its timed calls), the
rounds, and the checks after timing.

    python3 benchmarks/judge_trace.py apply
    python3 -m cudacourse grade --impl solution --workdir W ...
    python3 benchmarks/judge_trace.py summary W
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "[judge-trace]"
_SAY = f"__import__('sys').__stderr__.write('{TAG} %.4f ' % __import__('time').monotonic() + "

# (file, text to find, text to put in its place): each must match exactly once
EDITS = [
    ("cudacourse/bench.py",
     "    with no_sync():\n        for _ in range(max(warmup, group)):\n            fn()\n        sync()\n",
     "    with no_sync():\n        " + _SAY + "'wall start\\n')\n"
     "        for _ in range(max(warmup, group)):\n            fn()\n        sync()\n"
     "        " + _SAY + "'wall warmed\\n')\n"),
    ("cudacourse/bench.py", "        k = -(-k // group) * group\n",
     "        k = -(-k // group) * group\n        " + _SAY + "f'wall k {k}\\n')\n"),
    ("cudacourse/bench.py", "            if setup is not None:\n                setup()\n                sync()\n"
                            "            t0 = time.perf_counter()\n",
     "            if setup is not None:\n                setup()\n                sync()\n"
     "            " + _SAY + "'wall setup done\\n')\n            t0 = time.perf_counter()\n"),
    ("cudacourse/bench.py", "            times.append((time.perf_counter() - t0) * 1e3 / k)\n",
     "            times.append((time.perf_counter() - t0) * 1e3 / k)\n"
     "            " + _SAY + "f'wall sample {times[-1]:.3f} ms\\n')\n"),
    ("cudacourse/speed.py", "    declared = course().task(*task)\n",
     "    " + _SAY + "f'judge start {task[1]}\\n')\n    declared = course().task(*task)\n"),
    ("cudacourse/speed.py", "    _check_all(yours, sets, what)\n",
     "    " + _SAY + "'judge timed\\n')\n    _check_all(yours, sets, what)\n    " + _SAY + "'judge checked\\n')\n"),
    ("cudacourse/speed.py", "        m = _medians(mine, theirs)\n",
     "        m = _medians(mine, theirs)\n        " + _SAY + "f'round ratio {m.ratio:.3f}\\n')\n"),
]


def apply() -> None:
    """Edit the copy's bench.py and speed.py (refuses a copy already edited, or one whose text moved)."""
    texts = {name: (ROOT / name).read_text() for name in {e[0] for e in EDITS}}
    for name, old, new in EDITS:
        if TAG in texts[name] and old not in texts[name]:
            sys.exit(f"{name}: already traced")
        if texts[name].count(old) != 1:
            sys.exit(f"{name}: the text to trace was not found once: {old!r}")
        texts[name] = texts[name].replace(old, new)
    for name, text in texts.items():
        compile(text, name, "exec")
        (ROOT / name).write_text(text)
    print("traced:", ", ".join(sorted(texts)))


def summary(workdir: Path) -> None:
    """Per judged task: seconds in warm-ups, setups (poison/restage), timed samples, checks, and the rounds."""
    line = re.compile(rf"{re.escape(TAG)} (\d+\.\d+) (.*)")
    for log in sorted(workdir.rglob("*.log")):
        events = [(float(m.group(1)), m.group(2)) for m in map(line.search, log.read_text(errors="replace")
                                                                 .splitlines()) if m]
        if not events:
            continue
        print(f"# {log.relative_to(workdir)}")
        task, t_start, last = "", 0.0, 0.0
        parts: dict[str, float] = defaultdict(float)
        rounds: list[str] = []
        for t, what in events:
            gap = t - last if last else 0.0
            if what.startswith("judge start"):
                task, t_start, parts, rounds = what.split()[-1], t, defaultdict(float), []
            elif what == "wall warmed":
                parts["warm-up"] += gap
            elif what.startswith("wall k"):
                parts["calibration"] += gap
            elif what == "wall setup done":
                parts["setup"] += gap
            elif what.startswith("wall sample"):
                parts["samples"] += gap
            elif what.startswith("round ratio"):
                rounds.append(what.split()[-1])
            elif what == "judge checked":
                parts["check after"] += gap
                shown = ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
                print(f"{task}: judge {t - t_start:.2f} s: {shown}; rounds {' '.join(rounds)}")
            last = t


if __name__ == "__main__":
    if sys.argv[1:2] == ["apply"]:
        apply()
    elif sys.argv[1:2] == ["summary"] and len(sys.argv) == 3:
        summary(Path(sys.argv[2]))
    else:
        sys.exit(__doc__)
