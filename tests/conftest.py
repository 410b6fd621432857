"""Shared pytest setup of the course's tests: the grading plugin (options, markers, points table)."""

pytest_plugins = ["cudacourse.pytest_plugin"]
