"""The untouched exercise stubs fail cleanly: only failures, no errors, every task at zero, useful messages.

A learner who clones the course and runs the graded checks before writing anything must see a clear
failure per task, never a crash, a build error or a collection error, and never a task that passes
without work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudacourse.backends import backend_name
from cudacourse.course import course

ROOT = Path(__file__).resolve().parent.parent
LESSON_TESTS = [les.test_file for les in course(ROOT)]
TORCH_ROUTE = {les.test_file for les in course(ROOT) if les.torch_files}  # (torch::Tensor bindings: the torch headers)

# Exceptions a stub may fail with: assertion messages from the checks, or a stub's own TODO error.
CLEAN = {"AssertionError", "Failed"}
# Lessons where no case of any task may pass on the untouched stub (see the test): a check of a given binding or
# wrapper runs after a valid call of the learner's code, never on a case of its own, and a shape that only the given
# code handles (5.1's and 5.2's ragged rows, which take worked one-element kernels) is checked after one that runs
# the task's kernel.
EVERY_CASE_FAILS = {"test_01_relu.py", "test_02_reduce.py", "test_03_gemm.py", "test_04_transformer.py",
                    "test_05_tensor_cores.py", "test_06_training.py", "test_07_host_side.py", "test_08_fp8.py",
                    "test_09_scan_sort.py"}  # (issues 40, 41)


@pytest.mark.slow  # each lesson's stubs in their own pytest run: the two workers share them out (tests/conftest.py)
@pytest.mark.parametrize("test_file", LESSON_TESTS)
def test_untouched_stubs_fail_cleanly(test_file: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if test_file in TORCH_ROUTE and backend_name() == "sim":
        # the suite's precompiled torch header first (conftest.torch_pch, in the checkout's cache, which this run
        # builds in): a stub's torch-route build then takes about 31 CPU-s instead of 76, and the header is made
        # for the grader's batches anyway
        request.getfixturevalue("torch_pch")
    report = tmp_path / "report.jsonl"
    env = {**os.environ, "CUDA_COURSE_IMPL": "student", "CUDA_COURSE_SEED": "20261122"}
    env.pop("CUDA_COURSE_SUBMISSION", None)
    # Only the graded tests (`-m task`): the worked examples are given complete, pass on the stubs by design and
    # are run by the suite itself.
    r = subprocess.run([sys.executable, "-m", "pytest", f"tests/{test_file}", "--impl=student", "-q", "-m", "task",
                        "-p", "no:cacheprovider", "-p", "no:xdist", f"--cc-report={report}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = r.stdout[-3000:]
    assert r.returncode == 1, (f"expected test failures only (exit 1), got exit {r.returncode}:\n"
                               f"{tail}{r.stderr[-2000:]}")
    assert " error" not in r.stdout.splitlines()[-1], f"errors in the stub run:\n{tail}"
    records = [json.loads(line) for line in report.read_text().splitlines()]
    results = [rec for rec in records if rec.get("event") == "result"]
    assert results, "no test results recorded"
    tasks: dict[str, list[dict]] = {}
    for rec in results:
        if rec["task"] is not None:
            tasks.setdefault(rec["task"], []).append(rec)
    for task, recs in tasks.items():
        if all(rec["gpu"] for rec in recs):
            continue  # speed tasks: not graded on the simulator, failing on a GPU
        if test_file in EVERY_CASE_FAILS:
            # A learner's first `make check T=1.1` said "6 failed, 4 passed" for an empty kernel: in these lessons
            # every case of a task fails on its stub (or is not graded), so "passed" always means work was done.
            passed = [rec["nodeid"] for rec in recs if rec["outcome"] == "passed"]
            assert not passed, f"task {task}: cases that pass on the untouched stub: {passed}"
        failed = [rec for rec in recs if rec["outcome"] == "failed"]
        assert failed, f"task {task} earns points on the untouched stub: no test of it failed"
        for rec in failed:
            assert rec["message"].strip(), f"{rec['nodeid']} failed without a message"
            clean = rec["exc_type"] in CLEAN or "TODO(task" in rec["message"]
            assert clean, (f"{rec['nodeid']} failed with {rec['exc_type']} instead of a check's message:\n"
                           f"{rec['message'][:800]}")
