"""Pictures and reports say what is true (issue 37, item 5).

- ``plot.access_map`` colours every element an access covers (a ``float4`` load is four floats) and its colour
  bar has one colour per warp drawn;
- Gradescope's ``results.json`` never shows a task that was not graded as passed;
- the JUnit XML carries each task's ``time`` in seconds;
- the Classroom template pins torch to the version ``setup.sh`` installs, and a Classroom step whose tests were
  all skipped (a Triton twin where triton cannot run) fails instead of earning its points.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cudacourse import templates
from cudacourse.course import course
from cudacourse.grading.reports import Report, gradescope_results, write_junit
from cudacourse.profile import KernelProfile
from cudacourse.results import TaskResult, TestRecord

ROOT = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------------------------------
# access_map
# ----------------------------------------------------------------------------------------------------


def _float4_profile(n: int = 1024, threads: int = 256) -> KernelProfile:
    """A recorded trace as relu_v3_float4 makes it: thread t loads floats 4t..4t+3 of x with one 16-byte load
    (the simulator records the element of the first byte: 4t)."""
    trace = [("global", "ld", 16, "x", 0, t, 4 * t, 10, 16 * t) for t in range(n // 4)]
    return KernelProfile(kernel="relu_v3_float4_kernel", grid=(1, 1, 1), block=(threads, 1, 1), dynamic_smem=0,
                         static_smem=0, blocks=1, blocks_profiled=1, barriers=0, lines=[], _trace=trace)


def test_access_map_colours_every_element_of_a_float4_load() -> None:
    """The old picture coloured one float in four and left the rest white; every float is read, so every float
    is coloured, by the warp whose load covers it (warp w reads floats 128w..128w+127)."""
    pytest.importorskip("matplotlib")
    import numpy as np

    from cudacourse import plot

    fig = plot.access_map(_float4_profile(), "x", shape=(16, 64), op="ld")
    im = fig.axes[0].images[0]
    grid = np.ma.getdata(im.get_array()).reshape(-1)
    assert not np.isnan(grid).any(), f"{int(np.isnan(grid).sum())} of 1024 floats left white"
    bar = fig.axes[1]
    labels = [t.get_text() for t in bar.get_yticklabels()]
    assert im.cmap.N == 8 and labels == [str(w) for w in range(8)], (im.cmap.N, labels)  # 8 warps drawn: 8 colours
    # warp w covers floats 128w .. 128w+127: the colour index of float e is e // 128
    assert list(grid.astype(int)) == [e // 128 for e in range(1024)]


def test_access_map_colour_bar_counts_only_the_warps_drawn() -> None:
    """A picture of the first 256 floats shows warps 0 and 1 only: two colours, labelled 0 and 1."""
    pytest.importorskip("matplotlib")
    from cudacourse import plot

    fig = plot.access_map(_float4_profile(), "x", shape=(4, 64), op="ld")
    assert fig.axes[0].images[0].cmap.N == 2
    assert [t.get_text() for t in fig.axes[1].get_yticklabels()] == ["0", "1"]


def test_element_size_comes_from_the_trace() -> None:
    """4-byte floats read 16 bytes at a time: the element size is 4, not the access size."""
    from cudacourse.plot import _element_size

    assert _element_size(_float4_profile().trace) == 4
    scalar = [("global", "ld", 4, "x", 0, t, t, 10, 4 * t) for t in range(64)]
    assert _element_size(scalar) == 4


# ----------------------------------------------------------------------------------------------------
# Gradescope and JUnit
# ----------------------------------------------------------------------------------------------------


def _report() -> Report:
    def task(tid: str, status: str, earned: float, secs: list[float], msg: str = "") -> TaskResult:
        recs = [TestRecord(f"tests/test_01_relu.py::t{i}", "tests/test_01_relu.py", "01_relu", tid, 2.0,
                           f"title {tid}", False, duration=s) for i, s in enumerate(secs)]
        return TaskResult(tid, "01_relu", f"title {tid}", 2.0, earned, status, msg, recs)

    return Report("sim", "cpu", "student", [
        task("1.1", "pass", 2.0, [0.5, 0.25]),
        task("1.2", "fail", 0.0, [1.0], "relu v2, n=31: yours vs expected ..."),
        task("1.7", "not-graded", 0.0, [], "not graded: needs a GPU (speed task)"),
    ], name="alice", seconds=12.5, confinement="test")


def test_gradescope_never_passes_a_task_that_was_not_graded() -> None:
    """Gradescope draws "passed" as a green tick: a task that never ran gets "failed", 0 of 0 points, and says
    in its name and output that it was not graded."""
    tests = {t["number"]: t for t in gradescope_results(_report())["tests"]}
    assert tests["1.1"]["status"] == "passed" and tests["1.2"]["status"] == "failed"
    ng = tests["1.7"]
    assert ng["status"] == "failed" and ng["max_score"] == 0 and ng["score"] == 0
    assert ng["name"].startswith("[not graded]") and "NOT GRADED" in ng["output"] and "needs a GPU" in ng["output"]
    assert "not graded here" in gradescope_results(_report())["output"]


def test_junit_testcases_carry_their_time_in_seconds(tmp_path: Path) -> None:
    """Every testcase has ``time`` = the sum of its tests' durations; suites and the root sum them."""
    write_junit(_report(), tmp_path / "r.xml")
    root = ET.parse(tmp_path / "r.xml").getroot()
    cases = {c.get("name").split(":")[0]: c for c in root.iter("testcase")}
    assert float(cases["task 1.1"].get("time")) == pytest.approx(0.75)
    assert float(cases["task 1.2"].get("time")) == pytest.approx(1.0)
    assert float(cases["task 1.7"].get("time")) == 0.0
    assert all(c.get("time") is not None for c in root.iter("testcase"))
    (suite,) = root.iter("testsuite")
    assert float(suite.get("time")) == pytest.approx(1.75) and float(root.get("time")) == pytest.approx(12.5)


# ----------------------------------------------------------------------------------------------------
# Classroom template
# ----------------------------------------------------------------------------------------------------


def test_classroom_pins_torch_to_setup_sh() -> None:
    """The Classroom and CPU-grading workflows install torch==<setup.sh's version> from the CPU index."""
    version = re.search(r"TORCH_VERSION:-([0-9.]+)", (ROOT / "setup.sh").read_text()).group(1)
    rendered = templates.render(course())
    for name in ("classroom.yml", "github-actions-grade.yml"):
        installs = re.findall(r"pip install torch\S*", rendered[name])
        assert installs == [f"pip install torch=={version}"], (name, installs)


def test_every_classroom_step_loads_the_no_skip_plugin() -> None:
    """Each command-grader step runs pytest with ``-p cudacourse.classroom``."""
    text = templates.render(course())["classroom.yml"]
    commands = re.findall(r'command: "(python -m pytest [^"]*)"', text)
    assert commands and all(c.endswith("-p cudacourse.classroom") for c in commands)


def _pytest_with_plugin(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    test = tmp_path / "test_x.py"
    test.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider",
                           "-p", "cudacourse.classroom", "-c", str(tmp_path / "none.ini")],
                          cwd=tmp_path, capture_output=True, text=True)


def test_a_step_whose_tests_all_skip_fails(tmp_path: Path) -> None:
    """An untouched Triton twin without triton: every test skips "not graded"; plain pytest exits 0 (Classroom
    would award the points), with the plugin the step fails and says why."""
    (tmp_path / "none.ini").write_text("[pytest]\n")
    r = _pytest_with_plugin(tmp_path, """
        import pytest
        def test_twin():
            pytest.skip("not graded: the Triton track cannot run here: triton is not installed")
        """)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NOT GRADED here, so no points" in r.stdout and "triton is not installed" in r.stdout
    plain = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path / "test_x.py"), "-q", "-p",
                            "no:cacheprovider", "-c", str(tmp_path / "none.ini")], cwd=tmp_path, capture_output=True)
    assert plain.returncode == 0  # why the plugin is needed


def test_a_step_with_a_passing_test_still_passes(tmp_path: Path) -> None:
    """The plugin changes nothing when a test passed (nor when one failed: pytest's own non-zero code stays)."""
    (tmp_path / "none.ini").write_text("[pytest]\n")
    assert _pytest_with_plugin(tmp_path, "def test_ok():\n    assert True\n").returncode == 0
    assert _pytest_with_plugin(tmp_path, "def test_bad():\n    assert False\n").returncode == 1


def test_gradescope_output_is_json_serialisable() -> None:
    """The results stay plain JSON."""
    json.dumps(gradescope_results(_report()))
