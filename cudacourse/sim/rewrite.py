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
from cudacourse.source import Launcher, line_of, mask

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
# Scanning helpers on the masked text
# ----------------------------------------------------------------------------------------------------

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}


def _match_forward(m: str, i: int) -> int:
    """Index of the bracket closing the one at ``i`` (``(``, ``[`` or ``{``); -1 if none."""
    stack = []
    for j in range(i, len(m)):
        c = m[j]
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c in _CLOSE:
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j
    return -1


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), [], {} and template angle brackets."""
    parts, depth, angle, cur = [], 0, 0, []
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "<" and depth == 0:
            angle += 1
        elif c == ">" and depth == 0 and angle > 0:
            angle -= 1
        if c == sep and depth == 0 and angle == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def _in_preprocessor_line(m: str, i: int) -> bool:
    """True when offset ``i`` lies on a preprocessor line (following backslash continuations)."""
    start = m.rfind("\n", 0, i) + 1
    while True:
        if m[start:].lstrip(" \t").startswith("#"):
            return True
        if start == 0:
            return False
        prev_end = start - 1
        prev_start = m.rfind("\n", 0, prev_end) + 1
        if m[prev_start:prev_end].rstrip(" \t\r").endswith("\\"):
            start = prev_start
            continue
        return False


def _kernel_expr_start(m: str, i: int) -> int:
    """Start of the kernel expression ending just before offset ``i`` (``k``, ``ns::k<T, 4>``)."""
    j = i
    while j > 0 and m[j - 1] in " \t\n":
        j -= 1
    while True:
        if j > 0 and m[j - 1] == ">":  # template arguments
            depth, k = 0, j - 1
            while k >= 0:
                if m[k] == ">":
                    depth += 1
                elif m[k] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                k -= 1
            j = k
            while j > 0 and m[j - 1] in " \t\n":
                j -= 1
        k = j
        while k > 0 and (m[k - 1].isalnum() or m[k - 1] == "_"):
            k -= 1
        if k == j:
            return -1
        j = k
        if j >= 2 and m[j - 2:j] == "::":
            j -= 2
            continue
        return j


def _token_spans(m: str, lo: int, hi: int, word: str) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into spans, each occurrence of the identifier ``word`` in masked ``m`` its own span."""
    out, last = [], lo
    for mm in re.finditer(rf"\b{word}\b", m[lo:hi]):
        out += [(last, lo + mm.start()), (lo + mm.start(), lo + mm.end())]
        last = lo + mm.end()
    return [*out, (last, hi)]


def _brace_scopes(m: str) -> list[tuple[int, int, bool]]:
    """Every ``{...}`` block as (open, close, is_namespace_like)."""
    out, stack = [], []
    for i, c in enumerate(m):
        if c == "{":
            head = m[max(0, i - 200):i]
            ns = bool(re.search(r"(\bnamespace\b[\s\w:]*|\bextern\s*\"\s*\")\s*$", head))
            stack.append((i, ns))
        elif c == "}" and stack:
            o, ns = stack.pop()
            out.append((o, i, ns))
    return out


def _at_file_scope(scopes: list[tuple[int, int, bool]], i: int) -> bool:
    return not any(o < i < c and not ns for o, c, ns in scopes)


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
        elif e.startswith("(") and _match_forward(e, 0) == len(e) - 1:
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


def rewrite(source: str, path: str | None, launchers: list[Launcher] | tuple[Launcher, ...] = (), *,
            torch: bool = False, entries: bool = True, line_path: str | None = None) -> str:
    """Rewrite learner CUDA C++ ``source`` into C++ for the simulator runtime.

    ``launchers`` get C entry points ``ccsim_entry_<name>(void** argv)`` appended (unless ``entries`` is
    False). ``torch`` selects the classic ``torch::Tensor`` route. ``line_path`` is the file name the
    ``#line`` directives give the compiler (default ``path``). Raises ``UnsupportedError`` or
    ``CompileError`` naming the learner's line (``path``).
    """
    path = path or "<source>"
    if torch:
        source = _torch_prepass(source)
    m = mask(source)
    edits: list[_Edit] = []
    qpath = (line_path or path).replace("\\", "\\\\").replace('"', '\\"')

    # --- refused constructs -------------------------------------------------------------------------
    for mm in re.finditer(r"\b(asm|__asm__|__asm)\b\s*(volatile\b|__volatile__\b)?\s*\(", m):
        raise _err(UnsupportedError, "inline PTX/assembly (asm(...)) cannot run on the CPU simulator; write the "
                   "operation in plain CUDA C++ (or run this file on a GPU)", path, line_of(source, mm.start()))
    for pattern, what in _REFUSED:
        mm = re.search(pattern, m)
        if mm:
            raise _err(UnsupportedError, f"{what} is not supported by the CPU simulator (line "
                       f"{line_of(source, mm.start())}): {_REFUSED_FIX.get(pattern, 'run this file on a GPU')}",
                       path, line_of(source, mm.start()))

    # --- includes -----------------------------------------------------------------------------------
    for mm in _INCLUDE_RE.finditer(source):
        if not m[mm.start():mm.end()].lstrip().startswith("#"):
            continue  # inside a comment
        name = mm.group(1).strip()
        for prefix, what in UNSUPPORTED_HEADERS.items():
            if name.startswith(prefix):
                raise _err(UnsupportedError, f"#include <{name}>: {what} is not supported by the CPU simulator",
                           path, line_of(source, mm.start()))
        if name in MAPPED_HEADERS or name.startswith(TORCH_CUDA_PREFIXES) or name.startswith("sm_"):
            edits.append(_Edit(mm.start(), mm.end(), ""))

    # --- #pragma unroll: dropped (g++ would warn; unrolling does not change semantics) ---------------
    for mm in re.finditer(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*", m, re.M):
        edits.append(_Edit(mm.start(), mm.end(), ""))

    # --- launches -----------------------------------------------------------------------------------
    pos = 0
    while True:
        i = m.find("<<<", pos)
        if i < 0:
            break
        line = line_of(source, i)
        if _in_preprocessor_line(m, i):
            raise _err(UnsupportedError, "a kernel launch <<<...>>> inside a macro cannot be rewritten by the CPU "
                       "simulator; write the launch in a function", path, line)
        k0 = _kernel_expr_start(m, i)
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
        close = _match_forward(m, p)
        if close < 0:
            raise _err(CompileError, "kernel launch: unbalanced parentheses in the arguments", path, line)
        # NULL is an integer in C++ (g++: __null, a long) and would stop being a null pointer constant once
        # forwarded through the launch's argument copy; nullptr converts to every pointer parameter.
        args = "".join("nullptr" if m[a:b] == "NULL" else source[a:b] for a, b in
                       _token_spans(m, p + 1, close, "NULL"))
        kexpr = " ".join(source[k0:i].split())
        cfg_parts = [c.strip() for c in _split_top(" ".join(cfg.split()))]
        if not 2 <= len(cfg_parts) <= 4 or not all(cfg_parts):
            raise _err(CompileError, f"kernel launch <<<{cfg.strip()}>>> needs 2 to 4 arguments (grid, block[, "
                       "shared bytes[, stream]])", path, line)
        args_flat = " ".join(args.split())
        kname = kexpr.replace('"', "'")
        text = (f'::ccsim::launch("{kname}", __FILE__, __LINE__, ::ccsim::LaunchCfg({", ".join(cfg_parts)}), '
                f"[&](auto... ccsim_a) {{ {kexpr}(ccsim_a...); }}" + (f", {args_flat})" if args_flat else ")"))
        nl = source.count("\n", k0, close + 1)
        edits.append(_Edit(k0, close + 1, text + "\n" * nl))
        pos = close + 1

    # --- cudaFuncSetAttribute(kernel, attr, value): keyed by the kernel's text, as launches are named ---
    for mm in re.finditer(r"\bcudaFuncSetAttribute\s*\(", m):
        if _in_preprocessor_line(m, mm.start()):
            continue
        p = mm.end() - 1
        close = _match_forward(m, p)
        if close < 0:
            continue
        parts = _split_top(source[p + 1:close])
        if len(parts) != 3:
            continue
        key = _kernel_key(parts[0])
        nl = source.count("\n", mm.start(), close + 1)
        text = f'::ccsim::func_set_attribute("{key}", {" ".join(source[p + 1:close].split())})'
        edits.append(_Edit(mm.start(), close + 1, text + "\n" * nl))

    # --- __shared__ declarations ----------------------------------------------------------------------
    scopes = _brace_scopes(m)
    site = 0
    for mm in re.finditer(r"\b__shared__\b", m):
        i = mm.start()
        if _in_preprocessor_line(m, i):
            continue
        s = i
        while s > 0 and m[s - 1] not in ";{}":
            if m[s - 1] == "\n" and _in_preprocessor_line(m, s - 2 if s >= 2 else 0) and m[s - 2] != "\n":
                break
            s -= 1
        while s < i and m[s] in " \t\r\n":
            s += 1
        e = m.find(";", i)
        if e < 0:
            raise _err(CompileError, "__shared__ declaration without ';'", path, line_of(source, i))
        stmt = m[s:e]  # masked: comments inside or before the declaration are blanks here
        line = line_of(source, i)
        extern = bool(re.search(r"\bextern\b", m[s:e]))
        body = _SHARED_DROP.sub(" ", stmt).strip()
        decls = _split_top(body)
        first = _DECL_RE.match(decls[0].strip())
        if not first or not first.group("type").strip():
            raise _err(UnsupportedError, f"cannot understand the __shared__ declaration '{' '.join(stmt.split())}'",
                       path, line)
        base_type = first.group("type").strip().rstrip("*& ").strip()
        file_scope = _at_file_scope(scopes, i)
        out, defines = [], []
        for k, d in enumerate(decls):
            dm = _DECL_RE.match(d.strip())
            if not dm:
                raise _err(UnsupportedError, f"cannot understand the __shared__ declarator '{d.strip()}'", path, line)
            typ = dm.group("type").strip() if k == 0 else (base_type + " " + dm.group("type").strip()).strip()
            name, dims = dm.group("name"), "".join(dm.group("dims").split())
            if dm.group("init"):
                raise _err(CompileError, f"__shared__ variable '{name}' cannot have an initializer (CUDA forbids it); "
                           "assign it inside the kernel, then __syncthreads()", path, line)
            if extern:
                if not dims.startswith("[]"):
                    raise _err(UnsupportedError, f"extern __shared__ '{name}' must be declared as an unsized array "
                               f"({typ} {name}[])", path, line)
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
        nl = source.count("\n", s, e + 1)
        if file_scope:
            end_line = line_of(source, e)
            text = " ".join(out) + "\n" + "\n".join(defines) + f'\n#line {end_line} "{qpath}"\n'
            edits.append(_Edit(s, e + 1, text + "\n" * nl))
        else:
            edits.append(_Edit(s, e + 1, " ".join(out) + "\n" * nl))

    # --- apply ----------------------------------------------------------------------------------------
    edits.sort(key=lambda e: e.start)
    out_parts, last = [], 0
    for ed in edits:
        if ed.start < last:
            continue  # nested in a previous edit (e.g. a launch inside a replaced region)
        out_parts.append(source[last:ed.start])
        out_parts.append(ed.text)
        last = ed.end
    out_parts.append(source[last:])
    body = "".join(out_parts)

    if torch:
        head = ('#include <torch/extension.h>\n#define CCSIM_TORCH 1\n#include "ccsim.h"\n#include "ccsim_torch.h"\n')
    else:
        head = '#include "ccsim.h"\n'
    text = head + f'#line 1 "{qpath}"\n' + body
    if entries and launchers:
        text += "\n\n// ---- entry points generated by cudacourse.sim (not part of the learner's file) ----\n"
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
