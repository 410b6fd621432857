"""What each kind of check in the course's own suite costs, in CPU seconds: the rows of ``--cpu-report``, grouped.

    make test                                   # writes .cudacourse-build/suite_cpu.json (the Makefile's --cpu-report)
    python benchmarks/suite_by_check.py .cudacourse-build/suite_cpu.json [--top N]

On the 2-core machine the suite is CPU-bound (``make test`` keeps both cores busy), so a check's CPU seconds over two
are about the wall seconds it adds. The groups name the promise each kind of check keeps, so that a decision to run
some of them less often (issue 35: the suite's 15 minutes) can be read off one table. A test's row counts its own CPU
and its reaped child processes' (``tests/conftest.py``): a lower bound for a test whose processes outlive it.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

MAKE_TEST_REPORT = ".cudacourse-build/suite_cpu.json"  # where the Makefile's test target writes its --cpu-report

# (group, the promise it keeps, which test ids belong to it): the first that matches takes a test
GROUPS: list[tuple[str, str, Callable[[str], bool]]] = [
    ("hostile: grader corpus", "whole broken submissions get their verdicts and reports",
     lambda i: i.startswith("tests/test_grader.py::test_corpus")),
    ("hostile: attack batch", "attacks on the grader (native code, signals, files) cost only their own tasks",
     lambda i: i.startswith("tests/test_grader_attacks.py")),
    ("hostile: speed exploits", "skipped or memoized work is not paid as speed",
     lambda i: i.startswith("tests/test_speed_exploits.py")),
    ("stub runs", "untouched stubs fail cleanly, lesson by lesson",
     lambda i: i.startswith("tests/test_stubs_fail_cleanly.py")),
    ("simulator corpora", "public-style CUDA (real-world, Hopper, bug corpus) runs or is refused as on a GPU",
     lambda i: i.startswith(("tests/sim/test_realworld.py", "tests/sim/test_hopper_corpus.py",
                             "tests/sim/test_bug_corpus.py"))),
    ("sampler chi-square tests", "the samplers' distributions (9.6 and its Triton twin 9.T2, in the interpreter)",
     lambda i: "chi_square" in i),
    ("lesson tests", "the graded tests pass the solutions (and fail wrong kernels)",
     lambda i: i.startswith("tests/test_0")),
    ("simulator unit tests", "the simulator's semantics, checks and counters",
     lambda i: i.startswith("tests/sim/")),
    ("grader, workers, sandbox", "the grader's verdicts, isolation, bad input, confinement",
     lambda i: i.startswith(("tests/test_grader", "tests/test_harness.py", "tests/test_check_cmd.py",
                             "tests/test_learner_safety.py", "tests/test_confine.py", "tests/test_torch_worker.py"))),
    ("other", "docs, estimates, SASS, templates and the rest", lambda i: True),
]


def group_of(nodeid: str) -> str:
    """The group (:data:`GROUPS`) a test id belongs to."""
    return next(name for name, _promise, match in GROUPS if match(nodeid))


def read(path: Path) -> list[dict]:
    """The rows of a ``--cpu-report`` file (``nodeid``, ``own``, ``children``); ValueError saying what to do if it
    is missing, not such a file, or holds no rows."""
    again = f"run the suite with --cpu-report {path} (make test writes {MAKE_TEST_REPORT}) and pass that file"
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; {again}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a --cpu-report file ({e}); {again}") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and {"nodeid", "own", "children"} <= set(r)
                                                         for r in rows):
        raise ValueError(f"{path}: no test rows (an interrupted run?); {again}")
    return rows


def table(rows: list[dict], top: int = 15) -> str:
    """The markdown table of CPU seconds by group, then the ``top`` costliest tests."""
    cpu: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        g = group_of(r["nodeid"])
        cpu[g] += r["own"] + r["children"]
        count[g] += 1
    total = sum(cpu.values())
    lines = [f"{len(rows)} tests, {total:.0f} CPU-s", "", "| check | promise | tests | CPU-s | share |",
             "|---|---|---:|---:|---:|"]
    promise = {name: p for name, p, _m in GROUPS}
    for g in sorted(cpu, key=lambda k: -cpu[k]):
        lines.append(f"| {g} | {promise[g]} | {count[g]} | {cpu[g]:.0f} | {100 * cpu[g] / total:.0f}% |")
    lines += ["", f"The {min(top, len(rows))} costliest tests (CPU-s, test):", ""]
    for r in sorted(rows, key=lambda r: -(r["own"] + r["children"]))[:top]:
        lines.append(f"  {r['own'] + r['children']:7.1f}  {r['nodeid']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", type=Path, help=f"a --cpu-report file (make test writes {MAKE_TEST_REPORT})")
    ap.add_argument("--top", type=int, default=15, help="how many of the costliest tests to list (default 15)")
    args = ap.parse_args(argv)
    try:
        rows = read(args.report)
    except ValueError as e:
        ap.error(str(e))  # (exits with status 2)
    print(table(rows, args.top))


if __name__ == "__main__":
    main()
