"""Which folder holds a lesson's files for a run: one answer, the course model's ``Course.files_dir`` (issue 35),
which ``cc.lesson`` asks with the process's settings (``lessons.lesson_dir``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudacourse import settings
from cudacourse.course import course
from cudacourse.lessons import lesson_dir


def test_files_dir_is_the_checkout_or_the_submission(tmp_path: Path) -> None:
    c = course()
    assert c.files_dir("01_relu") == c.root / "lessons" / "01_relu"
    assert c.files_dir("1", "solution") == c.root / "solutions" / "01_relu"  # a number names the lesson too
    assert c.files_dir("01", "solution", tmp_path) == tmp_path / "lessons" / "01_relu"  # a submission wins


def test_lesson_dir_asks_the_course_model_with_the_settings(tmp_path: Path) -> None:
    c = course()
    with settings.using(impl="solution"):
        assert lesson_dir("01_relu") == c.files_dir("01_relu", "solution")
        assert lesson_dir("01_relu", "student") == c.files_dir("01_relu", "student")
    with settings.using(submission=tmp_path):
        assert lesson_dir("02") == tmp_path / "lessons" / "02_reduce"
    with pytest.raises(ValueError, match="no lesson 'nope'"):
        lesson_dir("nope")
    with pytest.raises(ValueError, match="impl must be"):
        lesson_dir("01_relu", "teacher")


def test_the_knobs_are_read_in_settings() -> None:
    """The CUDA_COURSE_* knobs that are not run settings are read by settings.py's functions, from any mapping."""
    env = {settings.UNBUILDABLE_ENV: "01_relu/relu.cu=12;02_reduce/reduce.cu=bad;=3;x", settings.CONFINE_OFF_ENV:
           " landlock, cgroup ,", settings.TRITON_ONE_CONFIG_ENV: "1"}
    assert settings.stopped_builds(env) == {"01_relu/relu.cu": 12.0}
    assert settings.confine_off(env) == {"landlock", "cgroup"}
    assert settings.triton_one_config(env) and not settings.triton_one_config({})
    assert settings.UNBUILDABLE_ENV in settings.__doc__ and settings.CONFINE_OFF_ENV in settings.__doc__


def test_a_build_the_grader_stopped_fails_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudacourse.errors import CompileError
    from cudacourse.lessons import Lesson

    monkeypatch.setenv(settings.UNBUILDABLE_ENV, "01_relu/relu.cu=7")
    with settings.using(impl="solution"), pytest.raises(CompileError, match="did not finish within 7 s"):
        Lesson("01_relu", backend="sim").module("relu.cu")
