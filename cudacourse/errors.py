"""The course's exception classes.

Every error a learner can meet while loading or running a kernel is one of these. Kernel errors carry
structured fields (kernel, block, thread, file, line) so graders and notebooks can show them, and their
message always says what to look at.
"""

from __future__ import annotations

import os
import re


class CourseError(Exception):
    """Base class of every error the course raises on purpose."""


class CompileError(CourseError):
    """The learner's source did not compile.

    ``file`` and ``line`` point at the learner's own file (not at generated code); ``compiler_output`` is
    the compiler's words, trimmed to the relevant part.
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 compiler_output: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.compiler_output = compiler_output


# A compiler diagnostic line: g++ `file:line[:col]: error: msg`, nvcc `file(line): error: msg`.
_DIAG_RE = re.compile(r"^(?P<file>[^\n:()]+?)(?::(?P<line>\d+)(?::\d+)?:|\((?P<pline>\d+)\):)\s*"
                      r"(?P<sev>fatal error|error)\s*:?\s*(?P<msg>.*)$", re.M)


def compile_error(output: str, path: str, *, hide: str = "", limit: int = 6000) -> CompileError:
    """A CompileError at the learner's first error line, from g++ or nvcc output.

    ``path`` is the learner's file (``#line`` directives make compilers name it); a diagnostic in it is
    preferred over one in generated or included code. ``hide`` (a folder prefix) is removed from the
    output; the output is cut to ``limit`` characters.
    """
    out = output.replace(hide, "") if hide else output
    if len(out) > limit:
        out = out[:limit] + "\n[... more compiler output cut ...]"
    diags = list(_DIAG_RE.finditer(output))
    name = os.path.basename(path)
    mine = [d for d in diags if os.path.basename(d.group("file").strip()) == name] or diags
    if not mine:
        return CompileError(f"{path}: compilation failed:\n{out}", file=path, line=None, compiler_output=out)
    d = mine[0]
    line = int(d.group("line") or d.group("pline"))
    return CompileError(f"{path}:{line}: error: {d.group('msg')}\n\n{out}", file=path, line=line,
                        compiler_output=out)


class UnsupportedError(CompileError):
    """The source uses a construct the CPU simulator cannot run (inline PTX, launches in macros, ...)."""


class KernelError(CourseError):
    """A kernel misbehaved while running.

    Fields are ``None`` when unknown. ``kind`` is a short machine-readable tag (``race``,
    ``out-of-bounds``, ``uninitialized-read``, ``barrier``, ``timeout``, ``launch``, ``assert``, ``crash``).
    """

    kind = "kernel"

    def __init__(self, message: str, *, kernel: str | None = None, block: tuple[int, ...] | None = None,
                 thread: tuple[int, ...] | None = None, file: str | None = None, line: int | None = None,
                 details: dict | None = None) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.block = block
        self.thread = thread
        self.file = file
        self.line = line
        self.details = details or {}


class RaceError(KernelError):
    """Two threads touched the same shared-memory word without a barrier or warp sync between them."""

    kind = "race"


class OutOfBoundsError(KernelError):
    """A thread accessed memory outside a shared array or outside a buffer passed to the kernel."""

    kind = "out-of-bounds"


class UninitializedReadError(KernelError):
    """A thread read shared memory that no thread had written in this block."""

    kind = "uninitialized-read"


class BarrierError(KernelError):
    """Divergent ``__syncthreads``, a deadlock, or a warp mask naming exited or absent lanes."""

    kind = "barrier"


class KernelTimeout(KernelError):
    """The kernel was still running after ``timeout_s``; it was stopped and the caller lives on."""

    kind = "timeout"


class LaunchError(KernelError):
    """A launch configuration CUDA would refuse (too many threads, zero-sized grid, too much shared memory)."""

    kind = "launch"


class NeedsGPU(CourseError):
    """Raised by GPU-only features (timing, speed tasks) when the backend is the CPU simulator."""


KERNEL_ERROR_CLASSES: dict[str, type[KernelError]] = {
    cls.kind: cls
    for cls in (KernelError, RaceError, OutOfBoundsError, UninitializedReadError, BarrierError,
                KernelTimeout, LaunchError)
}
