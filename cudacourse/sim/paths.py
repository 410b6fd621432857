"""Where a learner's file is compiled, and how compiler output gets the learner's real path back.

Shared by the simulator's build (``build.py``), its torch route (``torch_route.py``) and its device-call check
(``devcheck.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

from cudacourse.errors import CompileError, compile_error

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"


# Every learner file is compiled under a name relative to its build folder (the ``#line`` directives name it;
# a copy of the file lies there, so the compiler can quote the learner's line under its message), so one build
# serves every folder that holds the same file: the grader's slots and submissions identical to the course's
# files build it once per run, not once per slot. The real path is put back into every message.
SRC_DIR = "ccsim-src"


def _line_path(path: str) -> str:
    """The name ``path`` is compiled under (``#line``, relative to the build folder): the same for every folder."""
    return path if path.startswith("<") else f"{SRC_DIR}/{os.path.basename(path)}"


def _copy_for_compiler(d: Path, source: str, path: str) -> None:
    """Put the learner's ``source`` where ``#line`` says it is, in build folder ``d``, for the compiler's quotes."""
    if not path.startswith("<"):
        (d / SRC_DIR).mkdir(exist_ok=True)
        (d / _line_path(path)).write_text(source)


def _real_paths(text: str, path: str) -> str:
    """``text`` (compiler output, a runtime message) with the compiled-under name replaced by ``path``."""
    return text if path.startswith("<") else text.replace(_line_path(path), path)


def _compile_error(stderr: str, path: str, runtime: Path = RUNTIME_DIR) -> CompileError:
    """A CompileError at the learner's first error line, the runtime's folder (``runtime``: the one the compile
    included, ``build.runtime_headers`` for a module) hidden from the output."""
    return compile_error(_real_paths(stderr, path), path, hide=str(runtime) + "/")
