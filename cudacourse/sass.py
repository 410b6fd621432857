"""What the compiler made of a kernel, without a GPU: PTX, SASS, registers, spills, shared memory, occupancy.

``make sass ARGS="01_relu relu_v3_float4"`` (in Python: ``from cudacourse import sass; sass.sass("01_relu",
"relu_v3_float4")``) compiles the lesson's kernel file with nvcc for an H100/H200 (``sm_90a``, with the cuda
backend's flags: ``-O3 -lineinfo``), finds the kernels the launcher launches, and shows for each one:

- the resources ptxas reports (``-Xptxas -v``): registers per thread, spills, stack, static shared memory, barriers;
- the theoretical occupancy those give on an H100/H200 for the launch's block size (``cudacourse.occupancy``,
  the CUDA Programming Guide's rules, cited there);
- the SASS (``nvdisasm -g``: each instruction under the source line it came from, as ``-lineinfo`` records it;
  plain ``cuobjdump -sass`` where nvdisasm is absent) and the PTX nvcc generated.

Tools: nvcc from ``$CUDA_HOME`` or the PATH, else the PyPI wheel ``nvidia-cuda-nvcc``; cuobjdump and nvdisasm
from the wheels ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` (``make setup EXTRAS=sass`` installs all
three), else the PATH. ``cuobjdump -sass`` of the cuda backend's library shows the same instructions
(benchmarks/sass_gpu_check.py compares them, kernel by kernel, on the GPU machine; tests/test_sass.py on a
library nvcc builds here the backend's way).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cudacourse.occupancy import Occupancy, occupancy
from cudacourse.source import find_functions, mask, matching

EXTRA = "sass"
SETUP_HINT = f"make setup EXTRAS={EXTRA}"
DEFAULT_ARCH = "sm_90a"  # H100 and H200 (cc 9.0); 'a': the code the cuda backend builds there (wgmma, TMA)
COMMON_BLOCKS = (128, 256, 512, 1024)


class ToolMissing(RuntimeError):
    """nvcc, cuobjdump or nvdisasm could not be found; the message names the setup command that installs it."""


# ---- Finding the tools (PyPI wheels install them under site-packages/nvidia/cu13/bin) ----------------------


def _wheel_bins() -> list[Path]:
    """The ``bin`` folders of NVIDIA's CUDA wheels installed in this Python (``nvidia/cu13/bin``, ...)."""
    try:
        import nvidia  # a namespace package the wheels share
    except ImportError:
        return []
    out = []
    for base in getattr(nvidia, "__path__", []):
        out.extend(sorted(Path(base).glob("cu*/bin"), reverse=True))  # cu13 before cu12
        out.extend(sorted(Path(base).glob("cuda_*/bin")))  # the CUDA 12 wheels' layout
    return out


def find_tool(name: str) -> str | None:
    """The path of ``nvcc``, ``cuobjdump`` or ``nvdisasm``: for nvcc the one builds use (``$CUDA_HOME``, PATH)
    first, then the wheel's; for the others the wheel's first, then ``$CUDA_HOME/bin`` and the PATH."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    system = [str(Path(home) / "bin" / name)] if home and (Path(home) / "bin" / name).exists() else []
    if shutil.which(name):
        system.append(str(shutil.which(name)))
    wheel = [str(b / name) for b in _wheel_bins() if (b / name).is_file()]
    for p in (system + wheel) if name == "nvcc" else (wheel + system):
        if os.access(p, os.X_OK):
            return p
    return None


def require_tool(name: str) -> str:
    """Like :func:`find_tool`, raising :class:`ToolMissing` with the setup command when absent."""
    p = find_tool(name)
    if p is None:
        raise ToolMissing(f"{name} not found (neither on the PATH, in $CUDA_HOME/bin, nor from the PyPI wheel "
                          f"nvidia-cuda-{name}): run `{SETUP_HINT}` to install it in the course's .venv")
    return p


# ---- Which kernels a launcher launches ------------------------------------------------------------------

_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(<[^;{}]*?>)?\s*<<<")


@dataclass
class Launch:
    """One ``kernel<<<grid, block, smem>>>`` statement of a launcher: the kernel and its configuration text."""

    kernel: str
    line: int
    config: list[str]
    threads: int | None = None   # block size, where the expression evaluates to a constant
    dynamic_smem: int | None = None


def _constants(src: str) -> dict[str, int]:
    """Integer constants of the file: ``#define NAME expr`` and ``constexpr int NAME = expr;`` (evaluated in order)."""
    m = mask(src)
    out: dict[str, int] = {}
    pat = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+([^\n]+)$|"
                     r"\b(?:static\s+)?(?:constexpr|const)\s+(?:unsigned\s+)?(?:int|long|size_t|unsigned)\s+"
                     r"([^;()]+);", re.M)
    for mm in pat.finditer(m):
        decls = [(mm.group(1), mm.group(2))] if mm.group(1) else [
            tuple(d.split("=", 1)) for d in _split_args(mm.group(3)) if "=" in d]
        for name, expr in decls:
            v = _eval(expr, out)
            if v is not None and re.fullmatch(r"[A-Za-z_]\w*", name.strip()):
                out[name.strip()] = v
    return out


def _eval(expr: str, consts: dict[str, int]) -> int | None:
    """Value of a constant integer expression over ``consts`` (names, numbers, + - * / % ( ) << >>), else None."""
    e = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr.strip())
    names = set(re.findall(r"[A-Za-z_]\w*", e))
    if not names <= set(consts) or not re.fullmatch(r"[\w\s+\-*/%()<>]*", e) or not e:
        return None
    e = re.sub(r"(?<![/])/(?![/])", "//", e)  # C integer division
    try:
        v = eval(e, {"__builtins__": {}}, dict(consts))  # noqa: S307 - only names, digits and operators pass
    except Exception:  # noqa: BLE001 - anything not a plain constant expression is unknown
        return None
    return v if isinstance(v, int) else None


def launches(src: str, function: str) -> list[Launch]:
    """The launches of launcher ``function`` in order, following calls to other top-level functions of the file.

    Raises ``ValueError`` when no such function exists or it launches nothing.
    """
    funcs = {name: line for _, name, _, line in find_functions(src)}
    if function not in funcs:
        raise ValueError(f"no function {function!r} in this file (functions: {', '.join(sorted(funcs)) or 'none'})")
    m = mask(src)
    lines = src.split("\n")
    consts = _constants(src)
    out: list[Launch] = []
    seen: set[str] = set()

    def body(name: str) -> tuple[int, int] | None:
        start = sum(len(x) + 1 for x in lines[: funcs[name] - 1])
        brace = m.find("{", m.find(name, start))
        end = matching(m, brace, "{}") if brace >= 0 else None
        return (brace, end) if end is not None else None

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        span = body(name)
        if span is None:
            return
        text = m[span[0]:span[1]]
        local = dict(consts)
        dims: dict[str, int] = {}
        for dm in re.finditer(r"\bdim3\s+([A-Za-z_]\w*)\s*[({]([^;]*?)[)}]\s*;", text):
            parts = [_eval(p, local) for p in dm.group(2).split(",")]
            if all(p is not None for p in parts):
                dims[dm.group(1)] = 1
                for p in parts:
                    dims[dm.group(1)] *= p  # type: ignore[operator]
        for cm in re.finditer(r"\b(?:const\s+)?(?:constexpr\s+)?int\s+([A-Za-z_]\w*)\s*=\s*([^;,]+);", text):
            v = _eval(cm.group(2), local)
            if v is not None:
                local[cm.group(1)] = v
        events = [(mm.start(), "launch", mm) for mm in _LAUNCH.finditer(text)]
        events += [(cm.start(), "call", cm) for cm in re.finditer(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(", text)
                   if cm.group(1) in funcs and cm.group(1) != name]
        for _, kind, mm in sorted(events, key=lambda e: e[0]):
            if kind == "call":
                walk(mm.group(1))
                continue
            close = text.find(">>>", mm.end())
            cfg = _split_args(text[mm.end():close]) if close >= 0 else []
            line = src.count("\n", 0, span[0] + mm.start()) + 1
            threads = None
            if len(cfg) >= 2:
                b = cfg[1].strip()
                threads = dims.get(b, _eval(b, local))
            dyn = _eval(cfg[2], local) if len(cfg) >= 3 else 0
            out.append(Launch(mm.group(1), line, cfg, threads, dyn))

    walk(function)
    if not out:
        raise ValueError(f"{function!r} launches no kernel (no `kernel<<<...>>>` in it or in the functions it calls)")
    return out


def _split_args(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for c in text:
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    return [*parts, cur.strip()] if cur.strip() else parts


# ---- Building and reading what nvcc made ---------------------------------------------------------------


@dataclass
class Resources:
    """What ptxas reported for one kernel (``-Xptxas -v``)."""

    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    smem: int = 0
    barriers: int = 0


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Resources per mangled kernel name from ptxas's ``-v`` output."""
    out: dict[str, Resources] = {}
    cur: Resources | None = None
    for ln in log.splitlines():
        mm = re.search(r"Compiling entry function '(\S+)'", ln) or re.search(r"Function properties for (\S+)", ln)
        if mm:
            cur = out.setdefault(mm.group(1), Resources())
            continue
        if cur is None:
            continue
        if mm := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", ln):
            cur.stack, cur.spill_stores, cur.spill_loads = (int(g) for g in mm.groups())
        if mm := re.search(r"Used (\d+) registers", ln):
            cur.registers = int(mm.group(1))
            b = re.search(r"used (\d+) barriers", ln)
            s = re.search(r"(\d+) bytes smem", ln)
            cur.barriers = int(b.group(1)) if b else 0
            cur.smem = int(s.group(1)) if s else 0
    return out


def normalize_arch(arch: str) -> str:
    """``sm_90a``, ``90a``, ``9.0a``, ``compute_90a`` -> ``90a``."""
    a = arch.lower().replace("sm_", "").replace("compute_", "").replace(".", "")
    if not re.fullmatch(r"\d{2,3}[af]?", a):
        raise ValueError(f"unknown GPU architecture {arch!r} (for H100/H200: sm_90a or sm_90)")
    return a


def build(path: str | os.PathLike, arch: str = DEFAULT_ARCH) -> Path:
    """Compile a kernel file to a cubin and PTX for ``arch`` (cached by content); return the build folder with
    ``k.cubin``, ``k.ptx`` and ``ptxas.txt``. Raises ``cc.CompileError`` when nvcc rejects the file."""
    from cudacourse.buildcache import cached, content_key, local_headers
    from cudacourse.errors import compile_error

    path = Path(path).resolve()
    a = normalize_arch(arch)
    nvcc = require_tool("nvcc")
    key = content_key("sass-v1", path.read_text(), local_headers(path), a, nvcc, str(path))
    # the cuda backend's flags (loader.build_cuda), so this is the code that runs there
    flags = ["-O3", "-lineinfo", "-std=c++17", f"-I{path.parent}",
             *(f"-U__CUDA_NO_{m}__" for m in ("HALF_OPERATORS", "HALF_CONVERSIONS", "BFLOAT16_CONVERSIONS",
                                               "HALF2_OPERATORS")),
             f"-gencode=arch=compute_{a},code=sm_{a}"]

    def run(d: Path) -> None:
        r = subprocess.run([nvcc, *flags, "-cubin", "-Xptxas", "-v", "-keep", "-keep-dir", str(d),
                            str(path), "-o", str(d / "k.cubin")], capture_output=True, text=True, cwd=d)
        if r.returncode:
            raise compile_error(r.stdout + r.stderr, str(path))
        (d / "ptxas.txt").write_text(r.stdout + r.stderr)
        ptx = sorted(d.glob("*.ptx"))
        if ptx:
            ptx[0].rename(d / "k.ptx")
        for f in d.iterdir():  # the intermediate files -keep left (only the PTX is wanted)
            if f.name not in ("k.cubin", "k.ptx", "ptxas.txt"):
                f.unlink()

    return cached("sass", key, run)


def _demangle(names: list[str]) -> dict[str, str]:
    filt = shutil.which("c++filt")
    if not filt or not names:
        return {n: n for n in names}
    r = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True)
    got = r.stdout.splitlines()
    return dict(zip(names, got, strict=True)) if len(got) == len(names) else {n: n for n in names}


def base_name(mangled: str) -> str:
    """``_Z21relu_v3_float4_kernelPKfPfi`` -> ``relu_v3_float4_kernel`` (an unmangled ``extern "C"`` name as is)."""
    mm = re.match(r"_Z(?:N\d*\w*?)?(\d+)", mangled)
    return mangled[mm.end(): mm.end() + int(mm.group(1))] if mm else mangled


def _sass_listing(cubin: Path) -> tuple[dict[str, list[tuple[str, str, int, str]]], str]:
    """SASS per mangled kernel (:func:`parse_listing`) and the tool used: nvdisasm -g where it exists, else
    cuobjdump -sass (no source lines)."""
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm:
        text = subprocess.run([nvdisasm, "-g", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
        return parse_listing(text), "nvdisasm -g"
    text = subprocess.run([require_tool("cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    return parse_listing(text), "cuobjdump -sass (no source lines: nvdisasm is absent)"


def unpredicated(ins: str) -> str:
    """An instruction without its guard: ``@!P0 LDG.E.128 R4, ...`` -> ``LDG.E.128 R4, ...``."""
    return re.sub(r"^@!?U?P\w+\s+", "", ins)


def parse_listing(text: str) -> dict[str, list[tuple[str, str, int, str]]]:
    """``(address, instruction, source line, file)`` rows per mangled kernel of ``nvdisasm -g`` or ``cuobjdump
    -sass`` output (of a cubin or of a shared library); line 0 where no line info precedes an instruction.
    nvdisasm's branch and call targets are replaced by the address they stand for (`` BRA `(.L_x_4)`` -> ``BRA
    0x1a0``), as cuobjdump prints them: the label lines are not kept, the addresses are."""
    out: dict[str, list[tuple[str, str, int, str]]] = {}
    labels: dict[str, dict[str, str]] = {}  # per kernel: label -> address
    cur, name, line, where, pending = None, "", 0, "", []
    for ln in text.splitlines():
        if mm := re.match(r"\s*(?:\.text\.|Function : )(\S+?):?$", ln):
            name = mm.group(1)
            cur, line = out.setdefault(name, []), 0
        elif mm := re.search(r'//## File "([^"]+)", line (\d+)', ln):
            where, line = mm.group(1), int(mm.group(2))
        elif mm := re.match(r"([.$\w]+):$", ln):
            pending.append(mm.group(1))
        elif cur is not None and (mm := re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(?:/\*.*)?$", ln)):
            labels.setdefault(name, {}).update({lab: hex(int(mm.group(1), 16)) for lab in pending})
            pending = []
            cur.append((mm.group(1), mm.group(2).rstrip(" ;"), line, where))
    target = re.compile(r"`\(([^)]+)\)")
    return {k: [(a, target.sub(lambda m, k=k: labels.get(k, {}).get(m.group(1), m.group(0)), i), n, w)
                for a, i, n, w in rows] for k, rows in out.items()}


def _ptx_of(ptx: str, mangled: str) -> str:
    mm = re.search(rf"^\.(?:visible|weak) \.entry {re.escape(mangled)}\(", ptx, re.M)
    if not mm:
        return ""
    end = re.search(r"^}", ptx[mm.start():], re.M)
    return ptx[mm.start(): mm.start() + (end.end() if end else len(ptx))]


@dataclass
class KernelCode:
    """One compiled kernel: names, resources, occupancy, SASS rows and PTX."""

    mangled: str
    name: str                                   # demangled signature
    resources: Resources
    launch: Launch
    sass: list[tuple[str, str, int, str]]       # (address, instruction, line, file)
    ptx: str
    occupancy: list[Occupancy] = field(default_factory=list)

    @property
    def instructions(self) -> list[str]:
        """The SASS instructions (opcode and operands), in order."""
        return [r[1] for r in self.sass]

    def count(self, opcode: str) -> int:
        """How many SASS instructions start with ``opcode`` (``LDG.E.128``, ``SHFL.BFLY``, ``HMMA``)."""
        return sum(1 for i in self.instructions if unpredicated(i).startswith(opcode))


@dataclass
class SassReport:
    """The kernels one launcher launches, compiled for ``arch``. ``str(report)`` is the text report."""

    path: Path
    function: str
    arch: str
    tool: str
    kernels: list[KernelCode]
    show: str = "both"

    def kernel(self, name: str) -> KernelCode:
        """The kernel whose base name is ``name`` (``relu_v3_float4_kernel``)."""
        for k in self.kernels:
            if base_name(k.mangled) == name or k.mangled == name:
                return k
        raise KeyError(f"{name!r} is not launched by {self.function} (it launches "
                       f"{', '.join(base_name(k.mangled) for k in self.kernels)})")

    def __str__(self) -> str:
        src = {self.path: self.path.read_text().split("\n")}
        out = [f"{self.path.name}: {self.function} compiled for sm_{self.arch} (nvcc -O3 -lineinfo, as the cuda "
               f"backend builds it; SASS by {self.tool})"]
        for k in self.kernels:
            r = k.resources
            cfg = ", ".join(k.launch.config)
            out += ["", f"== {k.name}   launched at line {k.launch.line}: <<<{cfg}>>>",
                    f"   registers {r.registers}/thread, spills {r.spill_stores} B stored + {r.spill_loads} B loaded"
                    f"{' (registers spilled to local memory: slow)' if r.spill_stores or r.spill_loads else ''}, "
                    f"stack {r.stack} B, static shared {r.smem:,} B, barriers {r.barriers}",
                    "   occupancy on H100/H200 (cc 9.0; CUDA Programming Guide rules, see cudacourse.occupancy):"]
            out += [f"     {o.describe()}" for o in k.occupancy]
            if self.show in ("sass", "both"):
                out.append(f"   -- SASS ({len(k.sass)} instructions; source line on the left where -lineinfo "
                           "records one)")
                last = None
                for addr, ins, line, where in k.sass:
                    here = (where, line)
                    if line and here != last:
                        p = Path(where)
                        if p not in src:
                            src[p] = p.read_text().split("\n") if p.is_file() else []
                        text = src[p][line - 1].strip() if 0 < line <= len(src[p]) else ""
                        tag = f"{p.name}:{line}" if p != self.path else f"line {line}"
                        out.append(f"   {tag:>14} | {text}")
                    last = here
                    out.append(f"   {'':>14} |     /*{addr}*/ {ins}")
            if self.show in ("ptx", "both"):
                out.append("   -- PTX")
                out += [f"   {ln}" for ln in k.ptx.splitlines()]
        return "\n".join(out)

    def __repr__(self) -> str:  # a notebook cell shows the text report
        return str(self)


def kernel_file(lesson: str, function: str, impl: str | None = None) -> Path:
    """The kernel file of lesson ``lesson`` (``01_relu``) that defines ``function``; a path is taken as is."""
    p = Path(lesson)
    if p.suffix == ".cu" and p.is_file():
        return p
    from cudacourse.loader import lesson_dir

    folder = lesson_dir(lesson, impl)
    files = [f for f in sorted(folder.glob("*.cu"))
             if re.search(rf"\b{re.escape(function)}\s*\(", mask(f.read_text()))]
    if not files:
        raise ValueError(f"no .cu file in {folder} defines {function!r}")
    return files[0]


def sass(lesson: str | os.PathLike, function: str, *, arch: str = DEFAULT_ARCH, impl: str | None = None,
         threads: int | None = None, show: str = "both") -> SassReport:
    """Compile the kernel file of ``lesson`` (a lesson name such as ``"01_relu"``, or a ``.cu`` path) for
    ``arch`` and report the kernels launcher ``function`` launches (see the module's docstring).

    ``threads``: block size for the occupancy (default: the launch's, where its expression is a constant of the
    file; else 128, 256, 512 and 1024). ``show``: ``"sass"``, ``"ptx"`` or ``"both"`` in ``str(report)``.
    """
    path = kernel_file(str(lesson), function, impl).resolve()
    src = path.read_text()
    todo = launches(src, function)
    d = build(path, arch)
    res = parse_ptxas((d / "ptxas.txt").read_text())
    listing, tool = _sass_listing(d / "k.cubin")
    ptx = (d / "k.ptx").read_text() if (d / "k.ptx").exists() else ""
    names = _demangle(list(listing))
    kernels: list[KernelCode] = []
    for la in todo:
        for mangled in listing:
            if base_name(mangled) != la.kernel or any(k.mangled == mangled for k in kernels):
                continue
            r = res.get(mangled, Resources())
            sizes = [threads] if threads else ([la.threads] if la.threads else list(COMMON_BLOCKS))
            occ = [occupancy(t, r.registers, r.smem + (la.dynamic_smem or 0)) for t in sizes]
            kernels.append(KernelCode(mangled, names.get(mangled, mangled), r, la, listing[mangled],
                                      _ptx_of(ptx, mangled), occ))
    if not kernels:
        raise ValueError(f"none of the kernels {function} launches ({', '.join(la.kernel for la in todo)}) is in "
                         f"the code nvcc made for sm_{normalize_arch(arch)}")
    return SassReport(path, function, normalize_arch(arch), tool, kernels, show)


def main(argv: list[str]) -> int:
    """The ``sass`` verb."""
    import argparse

    from cudacourse.errors import CompileError

    ap = argparse.ArgumentParser(prog="python -m cudacourse sass",
                                 description="Compile a lesson's kernel file with nvcc (no GPU needed) and show "
                                             "the SASS and PTX of the kernels a launcher launches, with registers, "
                                             "spills, shared memory and the occupancy they give on an H100/H200.")
    ap.add_argument("lesson", help="lesson folder name (01_relu) or a .cu file")
    ap.add_argument("function", help="launcher name, e.g. relu_v3_float4")
    ap.add_argument("--arch", default=DEFAULT_ARCH, help=f"GPU architecture (default {DEFAULT_ARCH}: H100, H200)")
    ap.add_argument("--impl", choices=["student", "solution"], default=None)
    ap.add_argument("--threads", type=int, default=None, help="block size for the occupancy (default: the launch's)")
    ap.add_argument("--show", choices=["sass", "ptx", "both"], default="sass", help="listing to print (default sass)")
    a = ap.parse_args(argv)
    try:
        rep = sass(a.lesson, a.function, arch=a.arch, impl=a.impl, threads=a.threads, show=a.show)
    except ToolMissing as e:
        print(f"error: {e}")
        return 2
    except (ValueError, CompileError) as e:
        print(f"error: {e}")
        return 1
    print(rep)
    return 0
