"""Lexical, line-preserving rewriter from learner CUDA C++ to simulator C++.

The rewriter never parses C++; it works on the masked source (comments and string contents blanked by
``cudacourse.source.mask``) and makes a few local edits whose replacements keep the number of lines, so
``#line`` directives map every compiler message and every report back to the learner's own line:

- ``k<<<g, b, smem, stream>>>(args)`` becomes ``::ccsim::launch(...)`` with the arguments copied once;
- ``__shared__ T a[N][M];`` becomes a reference into the per-block shared-memory arena, and
  ``extern __shared__ T x[];`` a pointer to its dynamic part;
- CUDA headers are replaced by the simulator runtime; ``#pragma unroll`` is dropped;
- inline PTX/assembly and launches inside macros are refused with ``UnsupportedError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cudacourse.errors import CompileError, UnsupportedError
from cudacourse.sim.hopper_ptx import hopper_asm_message
from cudacourse.source import Launcher, line_of, mask

from .scan import (
    at_file_scope,
    brace_scopes,
    in_preprocessor_line,
    kernel_expr_start,
    match_forward,
    split_top,
    token_spans,
)

# ----------------------------------------------------------------------------------------------------
# Headers
# ----------------------------------------------------------------------------------------------------

# Headers whose contents the simulator runtime provides.
MAPPED_HEADERS = {
    "cuda_runtime.h", "cuda.h", "cuda_runtime_api.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp16.hpp",
    "cuda_bf16.hpp", "cooperative_groups.h", "cooperative_groups/reduce.h", "cooperative_groups/scan.h",
    "device_launch_parameters.h", "math_constants.h", "device_functions.h", "vector_types.h", "vector_functions.h",
    "driver_types.h", "library_types.h", "sm_30_intrinsics.h", "sm_60_atomic_functions.h", "crt/math_functions.h",
    "helper_cuda.h", "cublas_v2.h", "cublas_api.h", "mma.h", "cuda_fp8.h", "cuda_fp8.hpp",
}
# Torch's CUDA-only headers: the classic route gets CPU stand-ins from ccsim_torch.h instead.
TORCH_CUDA_PREFIXES = ("ATen/cuda/", "c10/cuda/", "ATen/CUDAGeneratorImpl", "THC/")
# Refused by prefix (checked before MAPPED_HEADERS): the build stops naming the header and the alternative.
UNSUPPORTED_HEADERS = {
    "cuda_pipeline.h": "asynchronous copies (cp.async)",
    "cuda_pipeline_primitives.h": "asynchronous copies (cp.async)",
    "curand_kernel.h": "cuRAND device functions",
    "cuda/": "libcu++ (cuda::)",
    "cub/": "CUB",
    "thrust/": "Thrust",
    "cublasLt": "cuBLASLt (not available on the simulator: use cublasGemmEx from <cublas_v2.h>)",
    "cublasXt": "cuBLASXt (not available on the simulator)",
    "cublas.h": "the legacy cuBLAS API (not available on the simulator: use <cublas_v2.h>)",
    "cudnn": "cuDNN",
}

# Constructs g++ would reject with an unhelpful message, or the simulator could not run faithfully: refused
# at build time naming the construct, the line and what to do.
_REFUSED = [
    (r"\b(?:tex1Dfetch|tex1D|tex2D|tex3D|tex1DLayered|tex2DLayered|texCubemap|surf1Dwrite|surf2Dwrite|surf3Dwrite|"
     r"surf1Dread|surf2Dread|surf3Dread|cudaCreateTextureObject|cudaCreateSurfaceObject|cudaTextureObject_t|"
     r"cudaSurfaceObject_t|cudaBindTexture|cudaBindTexture2D)\b|\btexture\s*<", "texture and surface memory"),
    (r"\bthis_grid\s*\(|\bgrid_group\b|\bcudaLaunchCooperativeKernel\w*\b",
     "grid-wide synchronisation (cooperative launch, this_grid().sync())"),
    (r"\bthis_multi_grid\s*\(|\bcluster_group\b|\bthis_cluster\s*\(|__cluster_dims__|\bcudaLaunchKernelEx\b",
     "thread-block clusters and multi-grid groups"),
]
_REFUSED_FIX = {
    _REFUSED[1][0]: "split the kernel at the grid-wide barrier into two launches, or run this file on a GPU",
}

_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)


@dataclass
class _Edit:
    start: int
    end: int
    text: str


def _err(cls: type[CompileError], msg: str, path: str, line: int) -> CompileError:
    return cls(f"{path}:{line}: {msg}", file=path, line=line)


# ----------------------------------------------------------------------------------------------------
# The rewrite
# ----------------------------------------------------------------------------------------------------

_SHARED_DROP = re.compile(r"\b(__shared__|extern|static)\b|\b__align__\s*\([^)]*\)|\balignas\s*\([^)]*\)|"
                          r"__attribute__\s*\(\(.*?\)\)")
_DECL_RE = re.compile(r"^(?P<type>.*?)(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)(?P<init>=.*)?$", re.S)


def _kernel_key(expr: str) -> str:
    """The kernel a ``cudaFuncSetAttribute`` argument names, spelled as its launches are (no spaces, no
    leading ``&`` or pointer casts): ``(const void*)&k<64>`` -> ``k<64>``."""
    e = "".join(expr.split())
    while True:
        cast = re.match(r"^\((?:const)?(?:void|char)\*\)|^reinterpret_cast<[^<>]*>|^static_cast<[^<>]*>", e)
        if cast:
            e = e[cast.end():]
        elif e.startswith("&"):
            e = e[1:]
        elif e.startswith("(") and match_forward(e, 0) == len(e) - 1:
            e = e[1:-1]
        else:
            return e.replace('"', "'")


def _torch_prepass(source: str) -> str:
    """Classic torch route: ``x.is_cuda()`` holds for CPU tensors, and ``x.data_ptr<T>()`` registers the
    tensor's bounds for checked mode. Line-preserving; applied before the other edits (it also reaches
    launch arguments)."""
    m = mask(source)
    edits: list[tuple[int, int, str]] = []
    for mm in re.finditer(r"\.\s*is_cuda\s*\(\s*\)", m):
        edits.append((mm.start(), mm.end(), ".is_cpu()"))
    data_re = r"\b([A-Za-z_]\w*)\s*\.\s*(data_ptr|const_data_ptr|mutable_data_ptr|data)\s*<([^<>;]*)>\s*\(\s*\)"
    for mm in re.finditer(data_re, m):
        var, fn, typ = mm.group(1), mm.group(2), source[mm.start(3):mm.end(3)]
        edits.append((mm.start(), mm.end(), f'::ccsim::reg_tensor({var}, {var}.{fn}<{typ}>(), "{var}")'))
    for a, b, text in sorted(edits, reverse=True):
        source = source[:a] + text + "\n" * source.count("\n", a, b) + source[b:]
    return source


@dataclass
class _Unit:
    """What the passes of :func:`rewrite` share: the learner's ``source``, its masked twin ``m`` (comments and string
    contents blanked), the file name for messages (``path``) and for ``#line`` (``qpath``, quoted), and the edits
    so far. A pass reads ``source`` and ``m`` and adds edits, or raises naming the learner's line."""

    source: str
    m: str
    path: str
    qpath: str
    edits: list[_Edit]

    def line(self, i: int) -> int:
        """The learner's line of offset ``i``."""
        return line_of(self.source, i)


def _refuse_unsupported(u: _Unit) -> None:
    """Refuse inline PTX/assembly and the constructs of ``_REFUSED`` (textures, grid-wide sync, clusters)."""
    for mm in re.finditer(r"\b(asm|__asm__|__asm)\b\s*(volatile\b|__volatile__\b)?\s*\(", u.m):
        hopper = hopper_asm_message(u.source, mm.start())  # [hopper hook] names a Hopper instruction (issue 38)
        raise _err(UnsupportedError, hopper or "inline PTX/assembly (asm(...)) cannot run on the CPU simulator; write "
                   "the operation in plain CUDA C++ (or run this file on a GPU)", u.path, u.line(mm.start()))
    for pattern, what in _REFUSED:
        mm = re.search(pattern, u.m)
        if mm:
            raise _err(UnsupportedError, f"{what} is not supported by the CPU simulator (line "
                       f"{u.line(mm.start())}): {_REFUSED_FIX.get(pattern, 'run this file on a GPU')}",
                       u.path, u.line(mm.start()))


def _map_includes(u: _Unit) -> None:
    """Drop the includes of headers the runtime provides (CUDA's, torch's CUDA-only ones, ``sm_*``); refuse the
    headers of ``UNSUPPORTED_HEADERS`` naming what they hold."""
    for mm in _INCLUDE_RE.finditer(u.source):
        if not u.m[mm.start():mm.end()].lstrip().startswith("#"):
            continue  # inside a comment
        name = mm.group(1).strip()
        for prefix, what in UNSUPPORTED_HEADERS.items():
            if name.startswith(prefix):
                raise _err(UnsupportedError, f"#include <{name}>: {what} is not supported by the CPU simulator",
                           u.path, u.line(mm.start()))
        if name in MAPPED_HEADERS or name.startswith(TORCH_CUDA_PREFIXES) or name.startswith("sm_"):
            u.edits.append(_Edit(mm.start(), mm.end(), ""))


def _drop_pragma_unroll(u: _Unit) -> None:
    """Drop ``#pragma unroll`` (g++ would warn; unrolling does not change semantics)."""
    for mm in re.finditer(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*", u.m, re.M):
        u.edits.append(_Edit(mm.start(), mm.end(), ""))


def _launch(u: _Unit, i: int) -> _Edit:
    """The edit for the launch whose ``<<<`` is at offset ``i``: ``k<<<cfg>>>(args)`` from the kernel's name to
    the closing parenthesis becomes ``::ccsim::launch(...)``, its lines kept."""
    m, source, path = u.m, u.source, u.path
    line = u.line(i)
    if in_preprocessor_line(m, i):
        raise _err(UnsupportedError, "a kernel launch <<<...>>> inside a macro cannot be rewritten by the CPU "
                   "simulator; write the launch in a function", path, line)
    k0 = kernel_expr_start(m, i)
    if k0 < 0:
        raise _err(CompileError, "cannot find the kernel name before <<<", path, line)
    # configuration up to the matching >>>
    j, depth = i + 3, 0
    while j < len(m):
        c = m[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and m.startswith(">>>", j):
            break
        j += 1
    if j >= len(m):
        raise _err(CompileError, "kernel launch: no closing >>>", path, line)
    cfg = source[i + 3:j]
    p = j + 3
    while p < len(m) and m[p] in " \t\n":
        p += 1
    if p >= len(m) or m[p] != "(":
        raise _err(CompileError, "kernel launch: expected '(' with the kernel's arguments after >>>", path, line)
    close = match_forward(m, p)
    if close < 0:
        raise _err(CompileError, "kernel launch: unbalanced parentheses in the arguments", path, line)
    # NULL is an integer in C++ (g++: __null, a long) and would stop being a null pointer constant once
    # forwarded through the launch's argument copy; nullptr converts to every pointer parameter.
    args = "".join("nullptr" if m[a:b] == "NULL" else source[a:b] for a, b in
                   token_spans(m, p + 1, close, "NULL"))
    kexpr = " ".join(source[k0:i].split())
    cfg_parts = [c.strip() for c in split_top(" ".join(cfg.split()))]
    if not 2 <= len(cfg_parts) <= 4 or not all(cfg_parts):
        raise _err(CompileError, f"kernel launch <<<{cfg.strip()}>>> needs 2 to 4 arguments (grid, block[, "
                   "shared bytes[, stream]])", path, line)
    args_flat = " ".join(args.split())
    kname = kexpr.replace('"', "'")
    text = (f'::ccsim::launch("{kname}", __FILE__, __LINE__, ::ccsim::LaunchCfg({", ".join(cfg_parts)}), '
            f"[&](auto... ccsim_a) {{ {kexpr}(ccsim_a...); }}" + (f", {args_flat})" if args_flat else ")"))
    nl = source.count("\n", k0, close + 1)
    return _Edit(k0, close + 1, text + "\n" * nl)


def _rewrite_launches(u: _Unit) -> None:
    """``k<<<g, b, smem, stream>>>(args)`` becomes ``::ccsim::launch(...)`` with the arguments copied once (see
    :func:`_launch`); a launch inside a macro is refused."""
    pos = 0
    while True:
        i = u.m.find("<<<", pos)
        if i < 0:
            break
        edit = _launch(u, i)
        u.edits.append(edit)
        pos = edit.end


def _rewrite_func_attributes(u: _Unit) -> None:
    """``cudaFuncSetAttribute(kernel, attr, value)`` is keyed by the kernel's text, as launches are named."""
    m, source = u.m, u.source
    for mm in re.finditer(r"\bcudaFuncSetAttribute\s*\(", m):
        if in_preprocessor_line(m, mm.start()):
            continue
        p = mm.end() - 1
        close = match_forward(m, p)
        if close < 0:
            continue
        parts = split_top(source[p + 1:close])
        if len(parts) != 3:
            continue
        key = _kernel_key(parts[0])
        nl = source.count("\n", mm.start(), close + 1)
        text = f'::ccsim::func_set_attribute("{key}", {" ".join(source[p + 1:close].split())})'
        u.edits.append(_Edit(mm.start(), close + 1, text + "\n" * nl))


def _statement_start(m: str, i: int) -> int:
    """Where the statement holding offset ``i`` starts (after the previous ``;``, ``{`` or ``}``, or the end of a
    preprocessor line), white space skipped."""
    s = i
    while s > 0 and m[s - 1] not in ";{}":
        if m[s - 1] == "\n" and in_preprocessor_line(m, s - 2 if s >= 2 else 0) and m[s - 2] != "\n":
            break
        s -= 1
    while s < i and m[s] in " \t\r\n":
        s += 1
    return s


def _shared_declarators(u: _Unit, stmt: str, extern: bool, line: int, site: int,
                        file_scope: bool) -> tuple[list[str], list[str], int]:
    """The replacement of each declarator of the ``__shared__`` statement ``stmt`` (masked): the declarations (at
    file scope, accessor functions) and, at file scope, the ``#define`` of each name; returns them with the next
    site number."""
    body = _SHARED_DROP.sub(" ", stmt).strip()
    decls = split_top(body)
    first = _DECL_RE.match(decls[0].strip())
    if not first or not first.group("type").strip():
        raise _err(UnsupportedError, f"cannot understand the __shared__ declaration '{' '.join(stmt.split())}'",
                   u.path, line)
    base_type = first.group("type").strip().rstrip("*& ").strip()
    out, defines = [], []
    for k, d in enumerate(decls):
        dm = _DECL_RE.match(d.strip())
        if not dm:
            raise _err(UnsupportedError, f"cannot understand the __shared__ declarator '{d.strip()}'", u.path, line)
        typ = dm.group("type").strip() if k == 0 else (base_type + " " + dm.group("type").strip()).strip()
        name, dims = dm.group("name"), "".join(dm.group("dims").split())
        if dm.group("init"):
            raise _err(CompileError, f"__shared__ variable '{name}' cannot have an initializer (CUDA forbids it); "
                       "assign it inside the kernel, then __syncthreads()", u.path, line)
        if extern:
            if not dims.startswith("[]"):
                raise _err(UnsupportedError, f"extern __shared__ '{name}' must be declared as an unsized array "
                           f"({typ} {name}[])", u.path, line)
            rest = dims[2:]
            if rest:
                expr = f"(({typ}(*){rest})::ccsim::dyn_shared<char>())"
                decl = f"{typ} (*const {name}){rest} = {expr};"
            else:
                expr = f"(::ccsim::dyn_shared<{typ}>())"
                decl = f"{typ}* const {name} = {expr};"
        else:
            # The site number lives in a function-local static, so every instantiation of a template
            # (static storage per specialization, as on the GPU) gets its own array.
            sv = f"ccsim_site_{site}"
            expr = f'(*::ccsim::shared_alloc<{typ}{dims}>({sv}, __LINE__, "{name}"))'
            decl = f"static const int {sv} = ::ccsim_rt_new_site(); auto& {name} = {expr};"
            site += 1
        if file_scope:
            out.append(f"static inline auto& ccsim_fs_{name}() {{ static const int {sv} = ::ccsim_rt_new_site(); "
                       f"return {expr}; }}" if not extern else
                       f"static inline auto ccsim_fs_{name}() {{ return {expr}; }}")
            defines.append(f"#define {name} (ccsim_fs_{name}())")
        else:
            out.append(decl)
    return out, defines, site


def _rewrite_shared(u: _Unit) -> None:
    """``__shared__ T a[N][M];`` becomes a reference into the per-block shared-memory arena, and
    ``extern __shared__ T x[];`` a pointer to its dynamic part (:func:`_shared_declarators`). At file scope each
    name becomes an accessor function and a ``#define``, followed by a ``#line`` that restores the numbering."""
    m, source = u.m, u.source
    scopes = brace_scopes(m)
    site = 0
    for mm in re.finditer(r"\b__shared__\b", m):
        i = mm.start()
        if in_preprocessor_line(m, i):
            continue
        s = _statement_start(m, i)
        e = m.find(";", i)
        if e < 0:
            raise _err(CompileError, "__shared__ declaration without ';'", u.path, u.line(i))
        stmt = m[s:e]  # masked: comments inside or before the declaration are blanks here
        extern = bool(re.search(r"\bextern\b", m[s:e]))
        file_scope = at_file_scope(scopes, i)
        out, defines, site = _shared_declarators(u, stmt, extern, u.line(i), site, file_scope)
        nl = source.count("\n", s, e + 1)
        if file_scope:
            end_line = u.line(e)
            text = " ".join(out) + "\n" + "\n".join(defines) + f'\n#line {end_line} "{u.qpath}"\n'
            u.edits.append(_Edit(s, e + 1, text + "\n" * nl))
        else:
            u.edits.append(_Edit(s, e + 1, " ".join(out) + "\n" * nl))


# The passes of rewrite(), in order: each reads the unit and adds edits (or raises for the learner's line).
_PASSES = [_refuse_unsupported, _map_includes, _drop_pragma_unroll, _rewrite_launches, _rewrite_func_attributes,
           _rewrite_shared]


def _apply(source: str, edits: list[_Edit]) -> str:
    """``source`` with ``edits`` made, in order of position; an edit inside an earlier one is skipped (a launch
    inside a replaced region)."""
    out_parts, last = [], 0
    for ed in sorted(edits, key=lambda e: e.start):
        if ed.start < last:
            continue
        out_parts.append(source[last:ed.start])
        out_parts.append(ed.text)
        last = ed.end
    out_parts.append(source[last:])
    return "".join(out_parts)


def _entry_points(launchers: list[Launcher] | tuple[Launcher, ...]) -> str:
    """The C entry point ``ccsim_entry_<name>(void** argv)`` of each launcher, appended after the learner's file:
    it names the launcher (host-work report), calls it, ends the call (queued stream work, checks) and turns a
    kernel failure or a C++ exception into the call's error."""
    text = "\n\n// ---- entry points generated by cudacourse.sim (not part of the learner's file) ----\n"
    text += '#line 1 "<cudacourse generated entry points>"\n'
    text += 'extern "C" void ccsim_api_set_error(const char*, const char*);\n'
    text += 'extern "C" void ccsim_rt_end_call(void);\nextern "C" void ccsim_rt_launcher_name(const char*);\n'
    for la in launchers:
        argv = []
        for k, p in enumerate(la.params):
            if p.pointer:
                argv.append(f"({p.base}*)a[{k}]")
            else:
                argv.append(f"*({p.base}*)a[{k}]")
        text += (f'extern "C" __attribute__((visibility("default"))) int ccsim_entry_{la.name}(void** a) {{\n'
                 f"    (void)a;\n"
                 f'    try {{ ccsim_rt_launcher_name("{la.name}"); {la.name}({", ".join(argv)}); '
                 f"ccsim_rt_end_call(); ::ccsim::launch_check(); }}\n"
                 f"    catch (const ::ccsim::KernelFailure&) {{ return 1; }}\n"
                 f'    catch (const std::exception& e) {{ ccsim_api_set_error("crash", e.what()); return 1; }}\n'
                 f'    catch (...) {{ ccsim_api_set_error("crash", "the launcher threw a C++ exception"); '
                 f"return 1; }}\n"
                 f"    return 0;\n}}\n")
    return text


def rewrite(source: str, path: str | None, launchers: list[Launcher] | tuple[Launcher, ...] = (), *,
            torch: bool = False, entries: bool = True, line_path: str | None = None) -> str:
    """Rewrite learner CUDA C++ ``source`` into C++ for the simulator runtime.

    ``launchers`` get C entry points ``ccsim_entry_<name>(void** argv)`` appended (unless ``entries`` is
    False). ``torch`` selects the classic ``torch::Tensor`` route. ``line_path`` is the file name the
    ``#line`` directives give the compiler (default ``path``). Raises ``UnsupportedError`` or
    ``CompileError`` naming the learner's line (``path``).

    The work is done by the passes of ``_PASSES`` in turn, on the masked source, each adding line-preserving
    edits that are made at the end; the torch route's pre-pass edits the source itself first.
    """
    path = path or "<source>"
    if torch:
        source = _torch_prepass(source)
    u = _Unit(source, mask(source), path, (line_path or path).replace("\\", "\\\\").replace('"', '\\"'), [])
    for run_pass in _PASSES:
        run_pass(u)
    if torch:
        head = ('#include <torch/extension.h>\n#define CCSIM_TORCH 1\n#include "ccsim.h"\n#include "ccsim_torch.h"\n')
    else:
        head = '#include "ccsim.h"\n'
    text = head + f'#line 1 "{u.qpath}"\n' + _apply(source, u.edits)
    if entries and launchers:
        text += _entry_points(launchers)
    return text
