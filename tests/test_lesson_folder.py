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
