"""Shared pytest setup of the course's tests: the grading plugin (options, markers, points table)."""

import os
from pathlib import Path

import pytest

pytest_plugins = ["cudacourse.pytest_plugin"]


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    """Start the slow tests first (stable order otherwise): under xdist they then run beside the many short
    tests instead of forming a serial tail at the end of the suite on a 2-core machine."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def grader_build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's build cache (``--build`` of the grader's own files: the simulator's runtime, a submission's
    files identical to the instructor's) for every grade of this test session, shared by the xdist workers.

    Each grade built the runtime (about 10 CPU-s) and the corpus and attack batches each built relu_torch.cu's
    torch extension (about 35 CPU-s) again in a fresh folder. Builds there are keyed by content and written
    under a file lock (``buildcache.cached``), only by the grader's confined "course's copy" workers; a
    submission's workers read it and write their own folder, as in any grade."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    d = shared / "cc-grader-build"
    d.mkdir(exist_ok=True)
    return d
