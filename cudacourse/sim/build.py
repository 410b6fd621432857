"""Building for the simulator: the runtime object, a learner's module, each g++ step confined while grading.

``runtime_object`` compiles the runtime (``runtime/ccsim_rt.cpp`` and its parts, uninstrumented) once per flags
into the build cache, and ``runtime_headers`` copies its headers there with ``ccsim.h`` precompiled; ``build_module``
rewrites a learner's file (``rewrite.py``), compiles it (checked mode: with g++'s thread-sanitizer
instrumentation, whose hooks the runtime implements), checks that device code calls only device functions
(``devcheck.py``) and links it with the runtime into ``lib.so``, cached by content and flags. While grading (the
settings' ``confine``) every g++ step runs in the sandbox (``_compile``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from cudacourse.buildcache import cached, content_key, find_cached, local_headers
from cudacourse.errors import CompileError
from cudacourse.source import Launcher

from . import devcheck
from .paths import RUNTIME_DIR, _compile_error, _copy_for_compiler, _line_path
from .rewrite import rewrite

_COMMON = ["-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-fno-strict-aliasing", "-fno-finite-loops", "-pthread",
           "-w"]
_LINES = ["-g1"]  # line tables only: crash and timeout reports name the learner's line
# (issue 41) tsan-distinguish-volatile: g++ then calls __tsan_volatile_* for volatile accesses, so the runtime sees
# them as volatile (cross-block flags are not judged, as README.md says); without it they arrive as plain accesses.
_CHECKED = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0", "--param=tsan-distinguish-volatile=1"]
_BRANCHES = ["-fsanitize-coverage=trace-pc"]  # profile="branches": every basic block a CUDA thread enters
_GXX_VERSION: str | None = None


def _gxx_version() -> str:
    global _GXX_VERSION
    if _GXX_VERSION is None:
        _GXX_VERSION = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return _GXX_VERSION


def runtime_text() -> str:
    """Every header of the runtime (fp16, cooperative groups, host API, cuBLAS, torch stand-ins), the runtime and
    its parts (``rt/``): what a build's cache key covers."""
    return "".join(p.read_text() for p in [*sorted(RUNTIME_DIR.rglob("*.h")), RUNTIME_DIR / "ccsim_rt.cpp"])


def _runtime_flags_and_key() -> tuple[list[str], str]:
    flags = [*_COMMON, "-Wall"]
    return flags, content_key(runtime_text(), " ".join(flags), _gxx_version())


def seed_runtime(into: Path) -> None:
    """Copy the compiled runtime from this user's build cache into the build root ``into`` (the checkout's own
    grade builds in a folder of its own: without this it built the runtime again, 50 s of silence in a
    learner's first ``make grade`` after ``make check``). Only for grading one's own checkout: an instructor's
    grade must not load an object from a cache its learners' code could write."""
    from cudacourse.buildcache import _DONE, build_root

    _flags, key = _runtime_flags_and_key()
    src, dst = build_root() / "sim-rt" / key, into / "sim-rt" / key
    if (src / _DONE).exists() and not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.parent / f"{key}.seed{os.getpid()}"
        shutil.copytree(src, tmp)
        try:
            tmp.rename(dst)
        except OSError:  # another grade seeded it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)


def runtime_object() -> Path:
    """The compiled runtime (``ccsim_rt.o``, uninstrumented, position-independent), cached."""
    flags, key = _runtime_flags_and_key()

    def build(d: Path) -> None:
        r = subprocess.run(["g++", *flags, "-I", str(RUNTIME_DIR), "-c", str(RUNTIME_DIR / "ccsim_rt.cpp"),
                            "-o", str(d / "ccsim_rt.o")], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("building the simulator runtime failed:\n" + r.stderr[-4000:])

    return cached("sim-rt", key, build) / "ccsim_rt.o"


def module_flags(checked: bool, profile: bool | str = False) -> list[str]:
    """The g++ flags a learner's module is compiled with in the given mode."""
    return [*_COMMON, *_LINES, *(_CHECKED if checked else []), *(_BRANCHES if profile == "branches" else [])]


# The runtime's headers with ccsim.h precompiled beside them: the standard and runtime headers were 0.6 of the
# 1.8 CPU-s g++ took on lesson 01's relu.cu (2-core machine, g++ 12; an empty file: 0.7 CPU-s, 0.1 with them).
# - One .gch per mode a grade compiles in, checked and the device-call check (g++ uses one only where its flags
#   fit: the folder ccsim.h.gch/ holds both, and g++ takes the first that fits, else reads ccsim.h itself, so a
#   compile in another mode costs time, never correctness). The fast mode has none: 7 of the suite's builds use
#   it, and its .gch took 2.2 CPU-s and 37 MB in each of the 19 folders a run of the suite made.
# - A .gch records the paths of the headers it read, which the device-call check (devcheck.find_host_calls), the
#   compiler's messages and the line tables then name: so the headers are copied into the cache folder and
#   precompiled there, built in place (not relocatable), and every compile includes them from there. Keyed by
#   content, not by the runtime's folder: every grade (whose workers run a staged copy of the package) and every
#   test reuses the one in its build cache.
PCH_MODES = {"checked": module_flags(True), "devcheck": devcheck.FLAGS}


def runtime_headers() -> Path:
    """The folder of the runtime's headers (a copy) with ``ccsim.h`` precompiled for each of ``PCH_MODES``, cached
    in the build cache; modules are compiled with it on the include path instead of the package's ``runtime/``."""
    from concurrent.futures import ThreadPoolExecutor

    key = content_key(runtime_text(), repr(sorted(PCH_MODES.items())), _gxx_version())

    def build(d: Path) -> None:
        hdrs = d / "runtime"
        for h in RUNTIME_DIR.rglob("*.h"):
            (hdrs / h.relative_to(RUNTIME_DIR)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(h, hdrs / h.relative_to(RUNTIME_DIR))
        (hdrs / "ccsim.h.gch").mkdir()

        def precompile(mode: str) -> subprocess.CompletedProcess:
            return subprocess.run(["g++", *PCH_MODES[mode], "-I", str(hdrs), "-x", "c++-header", str(hdrs / "ccsim.h"),
                                   "-o", str(hdrs / "ccsim.h.gch" / f"{mode}.gch")], capture_output=True, text=True)

        with ThreadPoolExecutor(len(PCH_MODES)) as pool:  # a g++ each
            for r in pool.map(precompile, PCH_MODES):
                if r.returncode:
                    raise RuntimeError("precompiling the simulator's header failed:\n" + r.stderr[-4000:])

    return cached("sim-pch", key, build, relocatable=False) / "runtime"


# ----------------------------------------------------------------------------------------------------
# Confinement while grading (settings.confine, set by the grader): builds and workers of learner code
# ----------------------------------------------------------------------------------------------------

BUILD_CPU_S = 120  # CPU seconds one confined compile may take (a never-ending template recursion stops)


def confine_mode() -> str | None:
    """The settings' ``confine`` (set by the grader): None outside grading, where nothing is confined."""
    from cudacourse.settings import current

    return current().confine


def _compile(cmd: list[str], d: Path, reads: list[Path], path: str) -> subprocess.CompletedProcess:
    """Run one g++ step in the build folder ``d``; confined (reads: runtime, lesson folder) when grading."""
    mode = confine_mode()
    if mode is None:
        return subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    from cudacourse.sandbox import Limits, confined_popen, stop_group

    scratch = d / ".confine"
    proc = confined_popen(cmd, scratch=scratch, cwd=str(d), env={"PATH": os.environ.get("PATH", os.defpath)},
                          read_only=reads, read_write=[d], limits=Limits(cpu_s=BUILD_CPU_S),
                          allow_unconfined=mode == "best-effort", stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate()
    finally:
        stop_group(proc)
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        err = (f"{path}: the build was stopped after {BUILD_CPU_S} s of CPU time (an endless template "
               "recursion or constexpr evaluation?)\n" + (err or "")[-2000:])
        raise CompileError(err, file=path, compiler_output=err)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def parse_order(order: str | None) -> tuple[int, int]:
    """The runtime's thread order (code, seed) from ``order`` or the settings' ``CUDA_COURSE_SIM_ORDER``:
    ``forward`` (default), ``reverse``, ``shuffle`` or ``shuffle:SEED``."""
    from cudacourse.settings import sim_order

    order = order or sim_order() or "forward"
    name, _, seed = order.partition(":")
    codes = {"forward": 0, "reverse": 1, "shuffle": 2}
    if name not in codes:
        raise ValueError(f"thread order must be forward, reverse, shuffle or shuffle:SEED, not {order!r}")
    return codes[name], int(seed) if seed else 1


def build_module(source: str, path: str, launchers: list[Launcher], *, checked: bool,
                 profile: bool | str, device_calls: bool = True) -> Path:
    """Rewrite and compile ``source`` (cached by content and flags); return the built ``lib.so``.

    ``checked``: with the thread-sanitizer instrumentation the runtime's checks need; ``profile="branches"``
    adds basic-block hooks. ``device_calls``: refuse device code that calls a host function (``devcheck``: a
    second compile, about 1.4 CPU-s, once per text: a clean verdict serves both modes); always on for learners'
    code (cc.load, check, grade), off only where the simulator's own unit tests build their kernels
    (tests/sim/conftest.py). Raises ``CompileError`` (learner's file and line, compiler's words) or
    ``UnsupportedError``."""
    text = rewrite(source, path, list(launchers), line_path=_line_path(path))
    rt = runtime_object()
    flags = module_flags(checked, profile)
    # a learner file may include its own headers next to it: their contents are in the key, their folder
    # is not (so that copies of the folder share the build; see SRC_DIR)
    incs = ["-I", os.path.dirname(os.path.abspath(path))] if os.path.isfile(path) else []
    # (a build without the device-call check has a key of its own: it never stands in for a checked one)
    key = content_key(text, " ".join(flags), runtime_text(), _gxx_version(), local_headers(path),
                      devcheck.RULES if device_calls else "device calls not checked")
    # The device-call check compiles the rewritten text with its own flags (devcheck.FLAGS), whatever the mode: its
    # verdict is the same for the checked and the fast build of a file, so a clean one is kept (an empty build of
    # kind "sim-devcheck") and the other mode's build compiles once instead of twice (about 1.4 CPU-s saved).
    check_key = content_key(text, runtime_text(), _gxx_version(), local_headers(path), devcheck.RULES)

    def build(d: Path) -> None:
        (d / "src.cpp").write_text(text)
        _copy_for_compiler(d, source, path)
        hdrs = runtime_headers()  # (with ccsim.h precompiled: see PCH_MODES)
        reads = [hdrs, rt, *([Path(incs[1])] if incs else [])]
        gxx = ["g++", "-I", str(hdrs), *incs]
        if device_calls and find_cached("sim-devcheck", check_key) is None:  # + device code calling host functions
            devcheck.compile_and_check(_compile, gxx, flags, d, reads, path, hdrs, incs[1:])  # refused
            cached("sim-devcheck", check_key, lambda _d: None)  # (reached only when the check found nothing)
        else:
            r = _compile([*gxx, *flags, "-c", "src.cpp", "-o", "src.o"], d, reads, path)
            if r.returncode:
                raise _compile_error(r.stderr, path, hdrs)
        r = _compile(["g++", "-shared", "-Wl,-Bsymbolic", "-o", "lib.so", "src.o", str(rt), "-pthread", "-ldl"], d,
                     reads, path)
        if r.returncode:
            raise CompileError(f"{path}: linking failed:\n{r.stderr[-3000:]}", file=path,
                               compiler_output=r.stderr)

    return cached("sim", key, build) / "lib.so"
