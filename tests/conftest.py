"""Shared pytest setup of the course's tests: the grading plugin (options, markers, points table)."""

pytest_plugins = ["cudacourse.pytest_plugin"]


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    """Start the slow tests first (stable order otherwise): under xdist they then run beside the many short
    tests instead of forming a serial tail at the end of the suite on a 2-core machine."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
