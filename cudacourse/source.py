"""Lexical helpers over CUDA C++ source: masking comments and strings, finding host launchers.

The course never parses C++ properly; it only needs two things that a careful lexical pass gets right:
the top-level ``void name(params) {`` launchers a learner writes, and positions in the source that are
not inside comments or string literals. Both backends and the simulator's rewriter use this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# ----------------------------------------------------------------------------------------------------
# Masking
# ----------------------------------------------------------------------------------------------------


def mask(src: str) -> str:
    """Return ``src`` with comments and the insides of string/char literals replaced by spaces.

    Newlines are kept, so offsets and line numbers in the result match the input exactly.
    """
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            while i < n and src[i] != "\n":
                out[i] = " "
                i += 1
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if src[k] != "\n":
                    out[k] = " "
            i = j
        elif c == "R" and src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', src[i:])
            if m:
                end = src.find(")" + m.group(1) + '"', i + m.end())
                end = n if end < 0 else end + len(m.group(1)) + 2
                for k in range(i + 2, end - 1):
                    if src[k] != "\n":
                        out[k] = " "
                i = end
            else:
                i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def line_of(src: str, offset: int) -> int:
    """1-based line number of ``offset`` in ``src``."""
    return src.count("\n", 0, offset) + 1


# ----------------------------------------------------------------------------------------------------
# Launcher signatures
# ----------------------------------------------------------------------------------------------------

# C element type -> torch dtype name. A pointer parameter of this type takes a tensor of that dtype.
POINTER_DTYPES: dict[str, str] = {
    "float": "float32", "double": "float64",
    "int": "int32", "int32_t": "int32", "unsigned": "int32", "unsigned int": "int32", "uint32_t": "int32",
    "long long": "int64", "int64_t": "int64", "long": "int64", "unsigned long long": "int64",
    "uint64_t": "int64", "size_t": "int64",
    "short": "int16", "int16_t": "int16",
    "char": "int8", "signed char": "int8", "int8_t": "int8",
    "unsigned char": "uint8", "uint8_t": "uint8", "bool": "bool",
    "__half": "float16", "half": "float16", "__nv_bfloat16": "bfloat16",
    "__nv_fp8_e4m3": "float8_e4m3fn", "__nv_fp8_e5m2": "float8_e5m2",  # cuda_fp8.h (lesson 08)
    # Vector types: the tensor holds their scalar lanes; numel must be a multiple of the width.
    "float2": "float32", "float4": "float32", "int2": "int32", "int4": "int32",
    "__half2": "float16", "double2": "float64",
    "void": "any",
}

VECTOR_WIDTH: dict[str, int] = {"float2": 2, "float4": 4, "int2": 2, "int4": 4, "__half2": 2, "double2": 2}

SCALAR_KINDS: dict[str, str] = {
    "int": "int", "int32_t": "int", "unsigned": "int", "unsigned int": "int", "uint32_t": "int",
    "long": "int", "long long": "int", "int64_t": "int", "unsigned long long": "int", "uint64_t": "int",
    "size_t": "int", "short": "int", "char": "int",
    "float": "float", "double": "float", "bool": "bool",
}

SCALAR_CTYPES: dict[str, str] = {
    "int": "c_int", "int32_t": "c_int32", "unsigned": "c_uint", "unsigned int": "c_uint", "uint32_t": "c_uint32",
    "long": "c_long", "long long": "c_longlong", "int64_t": "c_int64", "unsigned long long": "c_ulonglong",
    "uint64_t": "c_uint64", "size_t": "c_size_t", "short": "c_short", "char": "c_char",
    "float": "c_float", "double": "c_double", "bool": "c_bool",
}

_QUALIFIERS = {"const", "__restrict__", "__restrict", "restrict", "volatile", "struct"}


@dataclass(frozen=True)
class Param:
    """One launcher parameter: ``const float* __restrict__ x`` -> base ``float``, pointer, const, ``x``."""

    name: str
    base: str
    pointer: bool
    const: bool
    text: str

    @property
    def dtype(self) -> str | None:
        """torch dtype name a pointer parameter accepts (``"any"`` for ``void*``); None for scalars."""
        return POINTER_DTYPES.get(self.base) if self.pointer else None


@dataclass(frozen=True)
class Launcher:
    """A host function the loader exposes to Python: ``void name(params)``."""

    name: str
    params: tuple[Param, ...]
    line: int
    decl: str = field(compare=False)

    def signature(self) -> str:
        """The declaration as a learner wrote it, e.g. ``relu(const float* x, float* y, int n)``."""
        return f"{self.name}({', '.join(p.text for p in self.params)})"


class SignatureError(ValueError):
    """A launcher's parameter list uses a type the loader cannot bind."""


def parse_param(text: str, index: int) -> Param:
    """Parse one parameter declaration. Raises ``SignatureError`` for unsupported forms."""
    raw = " ".join(text.split())
    if not raw:
        raise SignatureError(f"parameter {index + 1} is empty")
    if "[" in raw or "(" in raw or "&" in raw:
        raise SignatureError(
            f"parameter '{raw}': launchers exposed to Python take raw pointers and scalars only "
            "(no arrays, references or function pointers)")
    stars = raw.count("*")
    if stars > 1:
        raise SignatureError(f"parameter '{raw}': pointers to pointers cannot be passed from Python")
    tokens = raw.replace("*", " * ").split()
    const = "const" in tokens[: tokens.index("*")] if "*" in tokens else "const" in tokens
    words = [t for t in tokens if t not in _QUALIFIERS and t != "*"]
    if len(words) < 2:
        raise SignatureError(f"parameter '{raw}' needs a type and a name")
    name, base = words[-1], " ".join(words[:-1])
    if base.startswith("std::"):
        base = base[5:]
    pointer = stars == 1
    known = POINTER_DTYPES if pointer else SCALAR_KINDS
    if base not in known:
        kind = "pointer" if pointer else "scalar"
        raise SignatureError(f"parameter '{raw}': {kind} type '{base}' is not supported; "
                             f"use one of {', '.join(sorted(known))}")
    return Param(name=name, base=base, pointer=pointer, const=const, text=raw)


def parse_params(text: str) -> tuple[Param, ...]:
    """Parse a comma-separated parameter list (``void`` or empty means none)."""
    text = text.strip()
    if text in ("", "void"):
        return ()
    return tuple(parse_param(p, i) for i, p in enumerate(text.split(",")))


_FUNC_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_NOT_LAUNCHER = {"__global__", "__device__", "static", "template", "inline", "__forceinline__", "constexpr"}


def find_functions(src: str) -> list[tuple[str, str, str, int]]:
    """Every top-level function definition: ``(return-and-specifiers, name, params, line)``.

    Top level means outside any braces, except ``namespace`` and ``extern "C"`` blocks.
    """
    m = mask(src)
    found = []
    depth_kinds: list[str] = []
    # #if/#elif/#else branches that each open a brace: every branch starts at the depth of its #if, and after
    # #endif the depth is the one the first branch left (only one branch is compiled)
    pp_stack: list[tuple[list[str], list[str] | None]] = []
    i, n = 0, len(m)
    stmt_start = 0
    while i < n:
        c = m[i]
        if c == "#":  # preprocessor line (with continuations)
            j = i
            while j < n and m[j] != "\n":
                j += 2 if m[j] == "\\" else 1
            directive = re.match(r"#\s*(\w+)", m[i:j])
            d = directive.group(1) if directive else ""
            if d in ("if", "ifdef", "ifndef"):
                pp_stack.append((list(depth_kinds), None))
            elif d in ("elif", "else") and pp_stack:
                start, first_end = pp_stack[-1]
                pp_stack[-1] = (start, first_end if first_end is not None else list(depth_kinds))
                depth_kinds = list(start)
            elif d == "endif" and pp_stack:
                _, first_end = pp_stack.pop()
                if first_end is not None:
                    depth_kinds = first_end
            i = j
            stmt_start = i
            continue
        if c == "{":
            head = m[stmt_start:i]
            # Only extern "C" blocks are transparent: a launcher inside a namespace could not be named by
            # the generated binding, so it is not offered.
            transparent = bool(re.search(r"\bextern\s+\"C\"\s*$", src[stmt_start:i]))
            if not any(k == "block" for k in depth_kinds):
                calls = list(_FUNC_RE.finditer(head))
                fm = calls[-1] if calls else None
                if fm is not None and not transparent:
                    close = matching(m, stmt_start + fm.end() - 1)
                    if close is not None and m[close + 1:i].strip() in ("", "const"):
                        prefix = " ".join(head[: fm.start()].split())
                        params = src[stmt_start + fm.end(): close]
                        found.append((prefix, fm.group(1), params, line_of(src, stmt_start + fm.start())))
            depth_kinds.append("ns" if transparent else "block")
            stmt_start = i + 1
        elif c == "}":
            if depth_kinds:
                depth_kinds.pop()
            stmt_start = i + 1
        elif c == ";":
            stmt_start = i + 1
        i += 1
    return found


def matching(code: str, open_idx: int, pair: str = "()") -> int | None:
    """The index of the bracket that closes the one at ``open_idx`` in ``code`` (``pair``: ``"()"`` or ``"{}"``;
    comments and strings masked first, :func:`mask`), or ``None`` when it is never closed."""
    opening, closing = pair
    depth = 0
    for j in range(open_idx, len(code)):
        if code[j] == opening:
            depth += 1
        elif code[j] == closing:
            depth -= 1
            if depth == 0:
                return j
    return None


def find_launchers(src: str) -> dict[str, Launcher]:
    """Host launchers in ``src``: top-level ``void name(...)`` definitions that are not kernels or helpers.

    Launchers whose parameters cannot be bound are still returned when they parse; a parameter the
    loader cannot bind raises ``SignatureError`` only when that launcher is requested.
    """
    out: dict[str, Launcher] = {}
    for prefix, name, params, line in find_functions(src):
        words = set(prefix.replace("*", " ").split())
        if "void" not in words or words & _NOT_LAUNCHER or "*" in prefix or name == "main":
            continue
        try:
            ps = parse_params(params)
        except SignatureError:
            ps = None  # reported when requested
        out[name] = Launcher(name=name, params=ps if ps is not None else (), line=line,
                             decl=" ".join(params.split()) if ps is None else "")
    return out


def launcher(src: str, name: str) -> Launcher:
    """The launcher ``name`` in ``src``, with its parameters parsed; clear errors when absent or unbindable."""
    found = find_launchers(src)
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise SignatureError(f"no host launcher 'void {name}(...)' found (launchers in this file: {known}). "
                             "A launcher is a top-level host function returning void whose parameters are "
                             "raw pointers and scalars.")
    la = found[name]
    if la.decl:  # parameters failed to parse: re-raise the precise reason
        parse_params(la.decl)
    return la


def uses_torch(src: str) -> bool:
    """True when the file includes torch or ATen headers (the classic ``torch::Tensor`` route)."""
    return bool(re.search(r"#\s*include\s*[<\"](torch|ATen|c10)/", mask_keep_includes(src)))


def mask_keep_includes(src: str) -> str:
    """Mask comments only (string contents are kept, so ``#include "x.h"`` survives)."""
    out = re.sub(r"/\*.*?\*/", lambda mm: re.sub(r"[^\n]", " ", mm.group(0)), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", out)
