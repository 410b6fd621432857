"""The suite's own tools in tests/conftest.py: --cpu-durations (the tests that used the most CPU)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = "tests/test_markdown_tables.py::test_the_check_sees_tables"  # a quick test of its own


def test_cpu_durations_reach_the_summary_through_xdist() -> None:
    """Under xdist (as make test runs) each test's CPU seconds travel from the worker to the controller's summary."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    r = subprocess.run([sys.executable, "-m", "pytest", PROBE, "-q", "-n", "1", "-p", "no:cacheprovider",
                        "--impl=solution", "--cpu-durations=5"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert re.search(r"most CPU time: 1 of 1 tests \(\d+ CPU-s in all\)", r.stdout), r.stdout[-2000:]
    row = re.search(r"^ +(\d+\.\d) CPU-s \( *(\d+\.\d) own, +(\d+\.\d) child processes\)  (\S+)$", r.stdout, re.M)
    assert row, r.stdout[-2000:]
    total, own, kids, nodeid = float(row[1]), float(row[2]), float(row[3]), row[4]
    assert nodeid == PROBE and abs(total - own - kids) <= 0.11 and own > 0, row[0]
