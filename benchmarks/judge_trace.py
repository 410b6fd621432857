"""Where a speed task's seconds go while grading on a GPU: a trace of cudacourse.speed's judge (issue 35).

Run it on a throwaway copy of the course only (the GPU machine's copy of the working tree): ``apply`` edits
``cudacourse/bench.py`` and ``cudacourse/speed.py`` there so that each judgement that passes adds one line to its
task's message in the grade's report (the only output of a task process that survives a pass: pytest captures
its stderr): the seconds in ``time_samples``'s warm-up, its calibration call, each sample's setup (poison or
restaging) and timed calls, the rounds' ratios, and the checks after timing. ``summary REPORT.json`` prints them.
Each GPU test's cProfile statistics go to ``test-<name>.prof`` in the grade's build folder (the task process may
write there; with ``--workdir`` that is ``$CUDA_COURSE_BUILD``): ``python3 -m pstats``.

    python3 benchmarks/judge_trace.py apply --throwaway-copy
    python3 -m cudacourse grade --impl solution --json R.json ...
    python3 benchmarks/judge_trace.py summary R.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "[judge-trace]"
_SAY = "__import__('sys').__dict__.setdefault('_judge_trace', []).append((__import__('time').monotonic(), "

# (file, text to find, text to put in its place): each must match exactly once
EDITS = [
    ("cudacourse/bench.py",
     "    with no_sync():\n        for _ in range(max(warmup, group)):\n            fn()\n        sync()\n",
     "    with no_sync():\n        " + _SAY + "'wall start'))\n"
     "        for _ in range(max(warmup, group)):\n            fn()\n        sync()\n"
     "        " + _SAY + "'warm-up'))\n"),
    ("cudacourse/bench.py", "        k = -(-k // group) * group\n",
     "        k = -(-k // group) * group\n        " + _SAY + "'calibration'))\n"),
    ("cudacourse/bench.py", "            if setup is not None:\n                setup()\n                sync()\n"
                            "            t0 = time.perf_counter()\n",
     "            if setup is not None:\n                setup()\n                sync()\n"
     "            " + _SAY + "'setup'))\n            t0 = time.perf_counter()\n"),
    ("cudacourse/bench.py", "            times.append((time.perf_counter() - t0) * 1e3 / k)\n",
     "            times.append((time.perf_counter() - t0) * 1e3 / k)\n            " + _SAY + "'samples'))\n"),
    ("cudacourse/speed.py", "    declared = course().task(*task)\n",
     "    __import__('sys').__dict__['_judge_trace'] = []  # (time_samples calls outside a judge: not its own)\n"
     "    " + _SAY + "'judge start'))\n    declared = course().task(*task)\n"),
    ("cudacourse/speed.py", "    _check_all(yours, sets, what)\n",
     "    " + _SAY + "'timed'))\n    _check_all(yours, sets, what)\n    " + _SAY + "'check after'))\n"
     "    NOTES.insert(0, __import__('cudacourse.bench').bench._judge_trace_line())\n"),
    ("cudacourse/speed.py", "        m = _medians(mine, theirs)\n",
     "        m = _medians(mine, theirs)\n        " + _SAY + "f'round {m.ratio:.3f}'))\n"),
]
# appended to the pytest plugin: each GPU test's cProfile statistics, test-<name>.prof in the build folder
PROFILE = '''

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    if item.get_closest_marker("gpu") is None:
        return (yield)
    import cProfile

    from cudacourse.buildcache import build_root

    prof = cProfile.Profile()
    prof.enable()
    try:
        return (yield)
    finally:
        prof.disable()
        prof.dump_stats(str(build_root() / f"test-{item.name}.prof"))
'''
# appended to bench.py: the events of one judgement as one line (and forgotten)
SUMMARY = f'''

def _judge_trace_line() -> str:
    import sys
    events, parts, rounds, last = sys.__dict__.pop("_judge_trace", []), {{}}, [], None
    for t, what in events:
        if what.startswith("round "):
            rounds.append(what.split()[1])
        elif last is not None and what not in ("judge start", "wall start", "timed"):
            parts[what] = parts.get(what, 0.0) + t - last
        last = t
    total = events[-1][0] - events[0][0] if events else 0.0
    return "{TAG} judge %.2f s: " % total + ", ".join("%s %.2f" % kv for kv in parts.items()) + \\
        "; rounds " + " ".join(rounds)
'''


def apply() -> None:
    """Edit the copy's bench.py, speed.py and pytest plugin (refuses a copy already edited, or one whose text moved)."""
    texts = {name: (ROOT / name).read_text() for name in {e[0] for e in EDITS}}
    if TAG in texts["cudacourse/bench.py"]:
        sys.exit("already traced")
    for name, old, new in EDITS:
        if texts[name].count(old) != 1:
            sys.exit(f"{name}: the text to trace was not found once: {old!r}")
        texts[name] = texts[name].replace(old, new)
    texts["cudacourse/bench.py"] += SUMMARY
    texts["cudacourse/pytest_plugin.py"] = (ROOT / "cudacourse/pytest_plugin.py").read_text() + PROFILE
    for name, text in texts.items():
        compile(text, name, "exec")
        (ROOT / name).write_text(text)
    print("traced:", ", ".join(sorted(texts)))


def summary(report: Path) -> None:
    """Per judged task of a grade's JSON report: its judge's trace line."""
    for task in json.loads(report.read_text())["tasks"]:
        for line in task.get("message", "").splitlines():
            if line.startswith(TAG):
                print(f"{task['id']:5} {line[len(TAG) + 1:]}")


if __name__ == "__main__":
    if sys.argv[1:] == ["apply", "--throwaway-copy"]:
        apply()
    elif sys.argv[1:2] == ["apply"]:
        sys.exit("judge_trace apply edits this checkout's cudacourse/bench.py, speed.py and pytest plugin in place: "
                 "run it only on a copy you will throw away (the GPU machine's), as `apply --throwaway-copy`")
    elif sys.argv[1:2] == ["summary"] and len(sys.argv) == 3:
        summary(Path(sys.argv[2]))
    else:
        sys.exit(__doc__)
