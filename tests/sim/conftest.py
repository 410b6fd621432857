"""Shared fixtures of the simulator tests: build helpers that reuse the content-keyed build cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cudacourse.sim import SimLibrary  # noqa: E402
from cudacourse.source import find_launchers  # noqa: E402


def build(src: str, name: str = "test.cu", *, checked: bool = True, order: str | None = None,
          timeout_s: float = 10.0, device_calls: bool = False) -> SimLibrary:
    """Build every launcher of ``src`` for the simulator.

    Without the device-call check by default (``device_calls``): these tests are about what the simulator does
    with a kernel, and the check's second compile cost about 1.4 CPU-s per build, some 7 CPU-minutes of the suite
    on the 2-core machine. It still runs on every learner-facing build (cc.load, check, grade: the lesson tests,
    the grader corpus and the attacks), on the real-world kernels (test_realworld.py) and in its own tests
    (test_device_calls.py), which pass ``device_calls=True``."""
    return SimLibrary.build(src, name, list(find_launchers(src).values()), checked=checked, order=order,
                            timeout_s=timeout_s, device_calls=device_calls)


@pytest.fixture
def sim():
    """A factory like ``build`` whose libraries are closed after the test."""
    libs: list[SimLibrary] = []

    def make(src: str, name: str = "test.cu", **kw) -> SimLibrary:
        lib = build(src, name, **kw)
        libs.append(lib)
        return lib

    yield make
    for lib in libs:
        lib.close()


@pytest.fixture(scope="module")
def host_reads_allowed():
    """Turn the host-work check off for a module's simulator workers (``CUDA_COURSE_SIM_ALLOW_HOST_READS``): for
    tests of the copy and stream API, whose launchers copy their inputs through host memory on purpose."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDA_COURSE_SIM_ALLOW_HOST_READS", "1")
        yield
