"""The suite's own tools: --cpu-durations (the tests that used the most CPU) and --cpu-report (every test's CPU, in
tests/conftest.py), and benchmarks/suite_by_check.py, which groups that report by the promise each check keeps."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = "tests/test_markdown_tables.py::test_the_check_sees_tables"  # a quick test of its own


def _suite_by_check():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("suite_by_check", ROOT / "benchmarks" / "suite_by_check.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cpu_durations_reach_the_summary_through_xdist(tmp_path: Path) -> None:
    """Under xdist (as make test runs) each test's CPU seconds travel from the worker to the controller's summary,
    and --cpu-report writes the same row, once (the controller writes it, not the worker); an earlier run's report
    does not outlive a run that writes none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    report = tmp_path / "sub" / "cpu.json"
    report.parent.mkdir()
    report.write_text('[{"nodeid": "an earlier run", "own": 1, "children": 0}]')
    # a run in which no test runs (here: collection only) removes the earlier run's report and writes none
    r = subprocess.run([sys.executable, "-m", "pytest", PROBE, "-q", "--co", "-p", "no:cacheprovider",
                        "--impl=solution", f"--cpu-report={report}"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and not report.exists(), r.stdout[-2000:] + r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "pytest", PROBE, "-q", "-n", "1", "-p", "no:cacheprovider",
                        "--impl=solution", "--cpu-durations=5", f"--cpu-report={report}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert re.search(r"most CPU time: 1 of 1 tests \(\d+ CPU-s in all\)", r.stdout), r.stdout[-2000:]
    row = re.search(r"^ +(\d+\.\d) CPU-s \( *(\d+\.\d) own, +(\d+\.\d) child processes\)  (\S+)$", r.stdout, re.M)
    assert row, r.stdout[-2000:]
    total, own, kids, nodeid = float(row[1]), float(row[2]), float(row[3]), row[4]
    assert nodeid == PROBE and abs(total - own - kids) <= 0.11 and own > 0, row[0]
    rows = json.loads(report.read_text())
    assert [r["nodeid"] for r in rows] == [PROBE] and abs(rows[0]["own"] - own) <= 0.06, rows
    text = _suite_by_check().table(rows)
    assert "1 tests," in text and "| other |" in text and PROBE in text, text


def test_suite_by_check_groups_every_test_once_and_refuses_a_file_without_rows(tmp_path: Path) -> None:
    """Each test id falls in the group of the promise it keeps; the group rows add up to the total; a missing,
    malformed or empty report is refused with what to do."""
    sbc = _suite_by_check()
    assert sbc.group_of("tests/test_grader.py::test_corpus@corpus") == "hostile: grader corpus"
    assert sbc.group_of("tests/test_grader.py::test_grader_verdicts") == "grader, workers, sandbox"
    chi = "tests/test_09_scan_sort.py::test_triton_sample_distribution_chi_square"
    assert sbc.group_of(chi) == "sampler chi-square tests"
    assert sbc.group_of("tests/test_09_scan_sort.py::test_scan[7]") == "lesson tests"
    assert sbc.group_of("tests/sim/test_realworld.py::test_x") == "simulator corpora"
    assert sbc.group_of("tests/sim/test_api_fp8.py::test_x") == "simulator unit tests"
    rows = [{"nodeid": "tests/test_01_relu.py::a", "own": 1.0, "children": 2.0},
            {"nodeid": "tests/test_01_relu.py::b", "own": 0.5, "children": 0.0},
            {"nodeid": "tests/test_docs_truth.py::c", "own": 0.25, "children": 0.25}]
    text = sbc.table(rows)
    assert text.startswith("3 tests, 4 CPU-s")
    assert "| lesson tests | " in text and "| 2 | 4 | 88% |" in text
    assert "| other | " in text and "| 1 | 0 | 12% |" in text
    bad = tmp_path / "bad.json"
    for content, says in ((None, "no such file"), ("{not json", "not a --cpu-report file"), ("[]", "no test rows"),
                          ('[{"nodeid": "x"}]', "no test rows")):
        if content is not None:
            bad.write_text(content)
        with pytest.raises(ValueError, match=says) as e:
            sbc.read(bad)
        assert "--cpu-report" in str(e.value)

