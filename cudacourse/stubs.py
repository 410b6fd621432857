"""Derive the exercise stubs in ``lessons/`` from the complete files in ``solutions/``.

A solution file marks each exercise body like this::

    // TODO(task 1.1): ... (~3 lines). Hint: ...
    // BEGIN SOLUTION
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
    // END SOLUTION

Every exercise file a lesson's ``lesson.toml`` declares (``files``, ``torch_files``, ``python_files``) has
its complete copy in ``solutions/NN_topic/`` and its stub in ``lessons/NN_topic/``.

The stub keeps everything outside the markers and drops the block. A line ``// STUB: code`` inside a
block becomes ``code`` in the stub (at the same indentation): that is how a stub returns a placeholder
or raises its "not implemented" error. Python files use ``# BEGIN SOLUTION`` / ``# END SOLUTION`` /
``# STUB: ``. Files without markers are copied as they are.

``python -m cudacourse stubs`` writes the stubs (a maintainer's verb: it refuses to replace a lesson file someone
edited, see :mod:`cudacourse.generated`); ``--check`` only compares and fails when ``lessons/`` has drifted from
what the solutions derive (CI runs it).
"""

from __future__ import annotations

import re
from pathlib import Path

from cudacourse.course import PACKAGE_ROOT as REPO_ROOT
from cudacourse.course import course
from cudacourse.generated import committed, write_generated

DERIVED_SUFFIXES = {".cu", ".cuh", ".h", ".cpp", ".py"}
_BEGIN = re.compile(r"^\s*(//|#)\s*BEGIN SOLUTION\s*$")
_END = re.compile(r"^\s*(//|#)\s*END SOLUTION\s*$")
_STUB = re.compile(r"^(\s*)(//|#)\s?STUB: ?(.*)$")


class MarkerError(ValueError):
    """Solution markers are unbalanced."""


def derive(text: str, name: str = "<text>") -> str:
    """Return the stub derived from a solution file's text."""
    out: list[str] = []
    inside = False
    begin_line = 0
    for no, line in enumerate(text.splitlines(keepends=True), 1):
        if _BEGIN.match(line):
            if inside:
                raise MarkerError(f"{name}:{no}: BEGIN SOLUTION inside the block opened at line {begin_line}")
            inside, begin_line = True, no
            continue
        if _END.match(line):
            if not inside:
                raise MarkerError(f"{name}:{no}: END SOLUTION without BEGIN SOLUTION")
            inside = False
            continue
        if inside:
            m = _STUB.match(line)
            if m:
                out.append(m.group(1) + m.group(3).rstrip() + "\n")
            continue
        out.append(line)
    if inside:
        raise MarkerError(f"{name}:{begin_line}: BEGIN SOLUTION is never closed")
    return "".join(out)


def pairs(root: Path = REPO_ROOT) -> list[tuple[Path, Path]]:
    """(solution file, lesson file) for every exercise and support file the course model declares (a support
    file is given code: its lesson copy is the solution's, written by ``make stubs`` like a stub)."""
    c = course(root)
    return [(c.kernel_dir(les.id, "solution") / f, c.kernel_dir(les.id, "student") / f)
            for les in c for f in (*les.exercise_files, *les.support_files)]


def expected(src: Path) -> str | bytes:
    """What the lesson copy of ``src`` must contain."""
    if src.suffix in DERIVED_SUFFIXES:
        return derive(src.read_text(), str(src))
    return src.read_bytes()


def _committed_stub(root: Path, src: Path) -> bytes | None:
    """The stub derived from ``src`` as committed at git ``HEAD`` (what an unedited lesson file holds)."""
    text = committed(root, src)
    if text is None:
        return None
    if src.suffix not in DERIVED_SUFFIXES:
        return text
    try:
        return derive(text.decode(), str(src)).encode()
    except (UnicodeDecodeError, MarkerError):
        return None


def write_all(root: Path = REPO_ROOT, *, force: bool = False) -> list[Path]:
    """Regenerate every stub; returns the files that changed.

    Never replaces a lesson file someone edited (see :mod:`cudacourse.generated`): raises
    :class:`~cudacourse.generated.EditedFilesError` and writes nothing, unless ``force`` (which backs them up).
    """
    want: dict[Path, bytes] = {}
    source_of: dict[Path, Path] = {}
    for src, dst in pairs(root):
        data = expected(src)
        want[dst] = data.encode() if isinstance(data, str) else data
        source_of[dst] = src
    return write_generated(root, want, verb="stubs", force=force,
                           pristine=lambda dst: _committed_stub(root, source_of[dst]))


def drifted(root: Path = REPO_ROOT) -> list[Path]:
    """Lesson files that differ from what their solutions derive."""
    out = []
    for src, dst in pairs(root):
        want = expected(src)
        want_b = want.encode() if isinstance(want, str) else want
        if not dst.exists() or dst.read_bytes() != want_b:
            out.append(dst)
    return out
