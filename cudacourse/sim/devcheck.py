"""Build-time check: device code calls only device functions, as nvcc enforces.

g++ compiles a kernel that calls ``std::max_element`` or a plain host helper without a word; nvcc refuses it
("calling a __host__ function from a __global__ function is not allowed": CUDA C++ Programming Guide, "Function
Execution Space Specifiers": a function without ``__device__`` is a host function, callable from the host only).
This module makes the simulator refuse it too, with the learner's file:line.

How: the rewritten file is compiled a second time at ``-O0`` (no inlining hides a call) with ``-DCCSIM_CALLCHECK``,
where ``ccsim.h`` defines ``__global__`` and ``__device__`` as ``__attribute__((aligned(MARK)))``, a marker g++
keeps on every function it is written on, through templates, static functions, member functions, lambdas and
``extern "C"``. ``-ffunction-sections`` gives each function a section whose alignment says whether it was
marked; ``-fcallgraph-info`` writes every call with its callee's declaration and the call's own ``file:line``.
From every marked function of the learner's files (its ``.cu`` and the headers beside it), each call must go to:

- a marked function (``__device__``, ``__host__ __device__``, ``__global__``);
- the simulator's runtime (``runtime/``: CUDA's built-ins, math, warp and atomic functions, cooperative groups);
- a lambda or a local class, or an implicitly defined special member (its body is then checked the same way:
  nvcc gives lambdas in device code, and implicit constructors, the execution space they are used in);
- the C library functions CUDA provides in device code (math, ``printf``, ``malloc``/``free``,
  ``memcpy``/``memset``, ``assert``, ``new``/``delete``), and ``std::move``/``std::forward``.

Anything else (``std::`` algorithms and containers, host helpers, ``rand``) is refused. ``constexpr`` host
functions (``std::min``, ``std::numeric_limits<float>::max()``) are refused too, as nvcc refuses them without
``--expt-relaxed-constexpr``, which the course's GPU build (``cuda_backend._nvcc_shared``) does not pass.
Calls through function pointers or virtual functions are not seen (nvcc checks those only partly too).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

RULES = "devcheck-3"  # in every build's cache key: a change of the rules below checks every file again
MARK = 8192  # the alignment that marks a __device__/__global__ function in the check build (ccsim.h)
FLAGS = ["-std=c++17", "-O0", "-w", "-fPIC", "-DCCSIM_CALLCHECK", "-ffunction-sections", "-fcallgraph-info"]

# C library entry points CUDA provides in device code (CUDA C++ Programming Guide: "Formatted Output",
# "Dynamic Global Memory Allocation and Operations", "Assertion"; memcpy/memset are device functions too).
DEVICE_LIBC = {"__cxa_throw_bad_array_new_length", "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort",
               "clock", "printf", "puts", "putchar", "vprintf", "malloc", "free", "memcpy", "memset", "memmove",
               "__assert_fail", "__assert_perror_fail",
               "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZnwmPv", "_ZnamPv"}
# Headers whose functions CUDA's math library provides for the device (float/double/int overloads of the C and
# std:: math functions), and <utility>'s casts, which compile to nothing.
DEVICE_HEADERS = {"mathcalls.h", "mathcalls-helper-functions.h", "mathcalls-narrow.h", "math.h", "cmath",
                  "std_abs.h", "stdlib.h", "cstdlib", "move.h", "new"}
DEVICE_STDLIB = {"abs", "labs", "llabs"}  # (stdlib.h: only these are device functions)


@dataclass
class HostCall:
    """One call from device code to a host function."""

    file: str
    line: int
    caller: str
    callee: str
    constexpr: bool


def _sections_of_marked(obj: bytes) -> set[str]:
    """Names of the functions (symbols) that lie in sections aligned to MARK in an ELF64 relocatable object."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2:
        return set()
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    marked = {i for i, s in enumerate(secs) if s[1] == 1 and s[8] == MARK}   # SHT_PROGBITS, sh_addralign
    out: set[str] = set()
    for s in secs:
        if s[1] != 2:  # SHT_SYMTAB
            continue
        strtab = secs[s[6]]
        stroff = strtab[4]
        for off in range(s[4], s[4] + s[5], 24):
            st_name, st_info, _o, st_shndx, _v, _sz = struct.unpack_from("<IBBHQQ", obj, off)
            if st_info & 0xF == 2 and st_shndx in marked:  # STT_FUNC
                end = obj.index(b"\0", stroff + st_name)
                out.add(obj[stroff + st_name:end].decode(errors="replace"))
    return out


_NODE = re.compile(r'node: \{ title: "([^"]*)" label: "((?:[^"\\]|\\.)*)"')
_EDGE = re.compile(r'edge: \{ sourcename: "([^"]*)" targetname: "([^"]*)" label: "([^"]*)"')


def _loc(label: str) -> tuple[str, int]:
    """The declaration's (file, line) from a node label ``decl\\nfile:line:col``."""
    tail = label.rsplit("\\n", 1)[-1]
    m = re.match(r"(.*):(\d+):\d+$", tail)
    return (m.group(1), int(m.group(2))) if m else ("", 0)


def _pretty(label: str) -> str:
    """``std::max_element`` from ``constexpr _FIter std::max_element(_FIter, _FIter) [with ...]\\nfile:l:c``."""
    decl = label.rsplit("\\n", 1)[0].split(" [with ")[0]
    if "::<lambda" in decl:
        return "a lambda in device function " + _pretty(decl.split("::<lambda")[0] + "()")
    decl = re.sub(r"\boperator\s*(\(\)|\[\]|[^\w\s(]+)", lambda m: "operator" + m.group(1).translate(_HIDE), decl)
    while True:   # template arguments out: std::vector<_Tp, _Alloc>::vector -> std::vector::vector
        shorter = re.sub(r"<[^<>]*>", "", decl)
        if shorter == decl:
            break
        decl = shorter
    m = re.search(r"([\w:~\x01-\x06]+)\s*\(", decl)
    return (m.group(1) if m else decl).translate(_SHOW).strip()


_HIDE = str.maketrans("<>()[]", "\x01\x02\x03\x04\x05\x06")   # an operator's own brackets, kept out of the parsing
_SHOW = str.maketrans("\x01\x02\x03\x04\x05\x06", "<>()[]")


def find_host_calls(ci_text: str, obj: bytes, learner_files: list[str], runtime_dir: str) -> list[HostCall]:
    """Every call from device code of ``learner_files`` to a function device code may not call."""
    marked = _sections_of_marked(obj)
    nodes: dict[str, str] = {}
    for title, label in _NODE.findall(ci_text):
        nodes[title] = label
        # a complete-object constructor or destructor (C1, D1) is an alias of the base-object one (C2, D2),
        # which alone has a node: calls name the alias
        for base, alias in (("C2E", "C1E"), ("C2I", "C1I"), ("D2E", "D1E"), ("D2I", "D1I")):
            if base in title:
                nodes.setdefault(title.replace(base, alias, 1), label)
    edges: dict[str, list[tuple[str, str]]] = {}
    for src, dst, site in _EDGE.findall(ci_text):
        edges.setdefault(src, []).append((dst, site))
    learner = {os.path.normpath(f) for f in learner_files}
    learner_dirs = {os.path.dirname(f) for f in learner if os.path.isabs(f)}
    rt = os.path.normpath(runtime_dir)

    def asm(title: str) -> str:   # local symbols are titled "file.cpp:_ZL..." in the call graph
        head, sep, rest = title.partition(":")
        return rest if sep and head.endswith((".cpp", ".cc", ".cu")) and rest else title

    def place(title: str) -> str:
        f, _ = _loc(nodes.get(title, ""))
        f = os.path.normpath(f) if f else ""
        if not f:
            return "lib"
        if f.startswith(rt + os.sep):
            return "runtime"
        if f in learner or os.path.dirname(f) in learner_dirs or not os.path.isabs(f):
            return "learner"
        return "lib"

    def device_lib(title: str) -> bool:
        name = asm(title)
        if name in DEVICE_LIBC or name.startswith("__builtin_"):
            return True
        f, _ = _loc(nodes.get(title, ""))
        base = os.path.basename(f)
        if base in ("stdlib.h", "cstdlib"):
            return name in DEVICE_STDLIB
        return base in DEVICE_HEADERS

    def inherits(title: str) -> bool:   # lambdas, local classes, implicit special members: checked in context
        name, label = asm(title), nodes.get(title, "")
        special = re.search(r"(C[123]|D[012])E|aSE", name) is not None and "::" in label
        return name.startswith("_ZZ") or "<lambda" in label or special

    context = [t for t in nodes if asm(t) in marked and place(t) == "learner"]
    seen = set(context)
    found: list[HostCall] = []
    while context:
        caller = context.pop()
        for callee, site in edges.get(caller, []):
            m = re.match(r"(.*):(\d+):\d+$", site)
            if m and os.path.normpath(m.group(1)).startswith(rt + os.sep):
                continue   # a call the runtime's own macros or templates wrote
            if asm(callee) in marked or place(callee) == "runtime" or device_lib(callee) or \
                    asm(callee).startswith("_ZN5ccsim"):
                continue
            if place(callee) == "learner" and inherits(callee):
                if callee not in seen:
                    seen.add(callee)
                    context.append(callee)
                continue
            label = nodes.get(callee, callee)
            found.append(HostCall(m.group(1) if m else "", int(m.group(2)) if m else 0,
                                  _pretty(nodes.get(caller, caller)), _pretty(label) if callee in nodes else callee,
                                  re.match(r"(?:(?:static|inline|virtual) )*constexpr ", label) is not None))
    found.sort(key=lambda h: (h.file, h.line))
    return found


_LINE = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"([^"]*)"')


def written_first(calls: list[HostCall], source: str) -> list[HostCall]:
    """``calls`` ordered for the message: first those on the learner's lines (the lines of ``source``, the rewritten
    file, whose ``#line`` directives give each line's file and number), before any the compiler places inside a
    library header (g++ 13's libstdc++ reports ``std::vector``'s allocator destructor at ``allocator.h:184``); and on
    each line, those whose function's name appears in it first: the call the learner wrote before the helpers it
    brings along (``std::vector<float> v(...)`` also calls ``std::allocator``'s constructor, and which of them the
    compiler lists first is its own affair: libstdc++ versions differ)."""
    texts: dict[tuple[str, int], str] = {}
    file, line = "", 0
    for raw in source.splitlines():
        m = _LINE.match(raw.strip())
        if m:
            file, line = m.group(2), int(m.group(1))
            continue
        texts[(file, line)] = raw
        line += 1

    def named(h: HostCall) -> bool:
        name = h.callee.split("(")[0].rsplit("::", 1)[-1].lstrip("~")
        return bool(name) and re.search(rf"\b{re.escape(name)}\b", texts.get((h.file, h.line), "")) is not None

    learners = {file for file, _ in texts}
    return sorted(calls, key=lambda h: (h.file not in learners, h.file, h.line, not named(h)))


def message(calls: list[HostCall], real_path) -> str:
    """The compile error for ``calls`` (``real_path`` maps a compiled-under path back to the learner's)."""
    lines = []
    for h in calls[:3]:
        where = f"{real_path(h.file)}:{h.line}" if h.file else "an unknown line"
        why = (f"{h.callee} is a constexpr host function: nvcc allows it in device code only with "
               "--expt-relaxed-constexpr, which the course's GPU build does not use" if h.constexpr else
               f"{h.callee} is a host function (no __device__)")
        who = h.caller if h.caller.startswith("a lambda") else f"device function {h.caller}"
        lines.append(f"{where}: error: {who} calls {h.callee}: {why}.")
    more = f" ({len(calls) - 3} more such calls.)" if len(calls) > 3 else ""
    return ("\n".join(lines) + more + "\nDevice code (a __global__ or __device__ function) can call only __device__ "
            "(or __host__ __device__) functions: nvcc refuses this file with \"calling a __host__ function from a "
            "__global__ function is not allowed\". Do the work in the kernel's own code (a loop over the elements, "
            "CUDA's min()/max()/fminf(), INFINITY/FLT_MAX instead of std::numeric_limits), or mark your own "
            "helper __device__. std:: algorithms and containers have no device versions.")


def run_check(d: Path, obj: str, ci: str, learner_files: list[str], runtime_dir: str) -> list[HostCall]:
    """Read the check build's object and call graph in ``d``; [] when either is missing (nothing checked)."""
    try:
        return find_host_calls((d / ci).read_text(errors="replace"), (d / obj).read_bytes(), learner_files,
                               runtime_dir)
    except (OSError, ValueError, struct.error):
        return []


def compile_and_check(compile_fn, gxx: list[str], flags: list[str], d: Path, reads: list[Path], path: str,
                      runtime_dir: Path, include_dirs: list[str]) -> None:
    """Compile ``src.cpp`` in ``d`` into ``src.o`` (``gxx + flags``) and, beside it on another core, the check
    build; raise the learner's compile error, else a ``CompileError`` naming the first call from device code to
    a host function. ``compile_fn`` is the simulator's (confined while grading) g++ runner. A check build that
    fails where the real one succeeded checks nothing (it differs only by the marker, which g++ accepts on
    every declaration CUDA allows ``__device__`` on)."""
    import shutil
    import threading

    from cudacourse.errors import CompileError
    from cudacourse.sim.paths import _compile_error, _line_path, _real_paths

    # a folder of its own: while grading each compile is confined to its folder, with a scratch folder there
    dc = d / "devcheck"
    dc.mkdir(exist_ok=True)
    shutil.copyfile(d / "src.cpp", dc / "src.cpp")
    check: dict = {}

    def run() -> None:
        try:
            check["r"] = compile_fn([*gxx, *FLAGS, "-c", "src.cpp", "-o", "check.o"], dc, reads, path)
        except CompileError:   # its CPU limit (a template bomb): the real compile says so itself
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        r = compile_fn([*gxx, *flags, "-c", "src.cpp", "-o", "src.o"], d, reads, path)
    finally:
        t.join()
    if r.returncode:
        shutil.rmtree(dc, ignore_errors=True)
        raise _compile_error(r.stderr, path, runtime_dir)
    ci = next(iter(sorted(dc.glob("*.ci"))), None)
    calls = [] if check.get("r") is None or check["r"].returncode or ci is None else \
        run_check(dc, "check.o", ci.name, [_line_path(path), *include_dirs], str(runtime_dir))
    if calls:
        calls = written_first(calls, (d / "src.cpp").read_text(errors="replace"))
    shutil.rmtree(dc, ignore_errors=True)
    if calls:
        msg = message(calls, lambda f: _real_paths(f, path))
        raise CompileError(msg, file=_real_paths(calls[0].file, path) if calls[0].file else path,
                           line=calls[0].line or None, compiler_output=msg)
