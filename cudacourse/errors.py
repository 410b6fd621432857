"""The course's exception classes.

Every error a learner can meet while loading or running a kernel is one of these. Kernel errors carry
structured fields (kernel, block, thread, file, line) so graders and notebooks can show them, and their
message always says what to look at.
"""

from __future__ import annotations

import os
import re
import sys


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


# The start of a diagnostic block: a location (g++ `file:line[:col]:`, nvcc `file(line):`) or an include chain.
_LOC_RE = re.compile(r"^(?:In file included from |\s+from )?(?P<file>[^\s:()][^:()]*?)"
                     r"(?::\d+(?::\d+)?[:,]|\(\d+\):|:\s+(?:In|At) )")
_DROPPED = "[{n} compiler line(s) about files outside your submission not shown]"


def _outside(file: str, allowed: list[str]) -> bool:
    path = os.path.normpath(file.strip())
    return os.path.isabs(path) and not any(path == a or path.startswith(a.rstrip("/") + "/") for a in allowed)


def only_own_files(output: str, path: str, keep: tuple[str, ...] = ()) -> str:
    """The compiler output with every diagnostic about a file outside the learner's folder removed, with the
    source lines and carets that follow it.

    An ``#include`` of another file (``/etc/passwd``, a hidden test, a solution) makes the compiler quote
    that file's lines in its errors; those never reach feedback. Kept: diagnostics in the folder of
    ``path`` (the learner's files), in ``keep`` folders and in system and toolkit folders (public headers),
    and the compiler's own lines that name no file. Relative paths are the compiler's own (kept).
    """
    allowed = [os.path.dirname(os.path.normpath(path)), *(os.path.normpath(k) for k in keep),
               "/usr", "/opt", os.path.normpath(sys.prefix), os.path.normpath(sys.base_prefix)]
    out: list[str] = []
    dropped = 0
    skipping = False
    for ln in output.splitlines():
        m = _LOC_RE.match(ln)
        if m:
            skipping = _outside(m.group("file"), allowed)
        elif not ln.startswith((" ", "\t")) and ln.strip():
            skipping = False  # a new line of the compiler's own (``compilation terminated.``)
        if skipping:
            dropped += 1
        else:
            out.append(ln)
    if dropped:
        out.append(_DROPPED.format(n=dropped))
    return "\n".join(out)


def compile_error(output: str, path: str, *, hide: str = "", limit: int = 6000,
                  keep: tuple[str, ...] = ()) -> CompileError:
    """A CompileError at the learner's first error line, from g++ or nvcc output.

    ``path`` is the learner's file (``#line`` directives make compilers name it); a diagnostic in it is
    preferred over one in generated or included code. Diagnostics about files outside the learner's folder
    (and ``keep``, system and toolkit folders) are removed (:func:`only_own_files`). ``hide`` (a folder
    prefix) is removed from the output; the output is cut to ``limit`` characters.
    """
    try:  # generated code (bindings, the simulator's wrappers) is compiled from the build cache
        from cudacourse.buildcache import build_root

        keep = (*keep, str(build_root()))
    except Exception:  # noqa: BLE001 - no build cache: nothing generated to keep
        pass
    output = only_own_files(output, path, (*keep, *((hide,) if hide else ())))
    out = output.replace(hide, "") if hide else output
    if len(out) > limit:
        out = out[:limit] + "\n[... more compiler output cut ...]"
    diags = list(_DIAG_RE.finditer(output))
    name = os.path.basename(path)
    mine = [d for d in diags if os.path.basename(d.group("file").strip()) == name] or diags
    if not mine:
        inc = re.search(rf"^In file included from (?:[^\n:]*/)?{re.escape(name)}:(\d+)", output, re.M)
        if inc:  # the errors are in an included file outside the submission: point at the #include
            line = int(inc.group(1))
            return CompileError(f"{path}:{line}: error: the file included on this line does not compile (its "
                                f"errors are not shown: it is not part of your submission)\n\n{out}",
                                file=path, line=line, compiler_output=out)
        return CompileError(f"{path}: compilation failed:\n{out}", file=path, line=None, compiler_output=out)
    d = mine[0]
    line = int(d.group("line") or d.group("pline"))
    return CompileError(f"{path}:{line}: error: {d.group('msg')}\n\n{out}", file=path, line=line,
                        compiler_output=out)


def build_stopped(path: str, seconds: float) -> CompileError:
    """The error of a file whose build the grader stopped (a build that does not end: template recursion,
    a huge file)."""
    return CompileError(f"{path}: the build did not finish within {seconds:g} s and was stopped (the grader's "
                        "--build-timeout): the tasks of this file fail. Look for template or constexpr recursion, "
                        "huge generated code or pasted data.", file=path, line=None)


# The start of :func:`repeated`'s message (the grader's feedback finds it there and puts the whole message back).
REPEATED_COMPILE_ERROR = ("does not compile (the compiler's first error only; its whole message is printed once, "
                          "under another failing case of this file):")


def repeated(err: CompileError) -> CompileError:
    """The short error for the second and later uses of a file that does not compile, in one process: the
    compiler's whole output goes with one failure only, which need not be the first one printed (pytest-xdist
    reports in its own order), so this one names the place and the compiler's first error line."""
    where = f"{err.file}:{err.line}" if err.line else f"{err.file}"
    first = next((ln.strip() for ln in (err.compiler_output or "").splitlines() if "error" in ln), "")
    return CompileError(f"{REPEATED_COMPILE_ERROR} {where}"
                        + (f"\n    {first}" if first else ""), file=err.file, line=err.line,
                        compiler_output=err.compiler_output)


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
