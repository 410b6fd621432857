"""Screens of submitted files: friendly early errors before anything is built (not the security boundary).

Kernel-only exercise files may include CUDA and C++ standard headers only (no torch, no relative paths
leaving the lesson, no file or process calls); the files a lesson declares as ``torch_files`` may include
torch but must launch the learner's kernel with ``<<<...>>>`` and call no torch operator that computes
the answer. Python exercise files may import only a few modules and reach no files or interpreter state.
Triton twins (``*_triton.py``, a lesson's ``triton_files``) are Python files with the same limits, plus
``triton`` and ``triton.language``, and their torch use is restricted to types, dtypes and data movement.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from cudacourse.answer_guard import TORCH_ALLOWED, torch_answer_guard  # noqa: F401 - lesson tests import it here
from cudacourse.source import line_of, mask

# ----------------------------------------------------------------------------------------------------
# Screening kernel files (pure-CUDA contract)
# ----------------------------------------------------------------------------------------------------

CXX_STD_HEADERS = frozenset("""
algorithm any array atomic barrier bit bitset cassert ccomplex cctype cerrno cfenv cfloat charconv chrono
cinttypes ciso646 climits clocale cmath codecvt compare complex concepts condition_variable coroutine
csetjmp csignal cstdalign cstdarg cstdbool cstddef cstdint cstdio cstdlib cstring ctgmath ctime cuchar
cwchar cwctype deque exception execution expected format forward_list functional initializer_list
iomanip ios iosfwd iostream istream iterator latch limits list locale map memory memory_resource mutex
new numbers numeric optional ostream print queue random ranges ratio regex scoped_allocator semaphore
set shared_mutex source_location span sstream stack stdexcept stop_token streambuf string string_view
system_error thread tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray
variant vector version
assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h setjmp.h
signal.h stdalign.h stdarg.h stdbool.h stddef.h stdint.h stdio.h stdlib.h string.h tgmath.h time.h
uchar.h wchar.h wctype.h
""".split())
# Standard headers whose only use in a kernel file would be touching files or processes.
CXX_BANNED_STD = frozenset({"fstream", "filesystem", "thread", "csignal", "signal.h", "future"})
CUDA_HEADERS = frozenset("""
cuda.h cuda_runtime.h cuda_runtime_api.h device_launch_parameters.h device_functions.h
cuda_fp16.h cuda_fp16.hpp cuda_bf16.h cuda_bf16.hpp cuda_fp8.h math_constants.h math_functions.h
cooperative_groups.h mma.h cuda_pipeline.h cuda_pipeline_primitives.h cuda_awbarrier.h
cuda_awbarrier_primitives.h sm_20_atomic_functions.h sm_60_atomic_functions.h vector_types.h
vector_functions.h builtin_types.h driver_types.h crt/host_defines.h
""".split())
CUDA_HEADER_PREFIXES = ("cooperative_groups/", "cuda/std/", "cuda/barrier", "cuda/pipeline", "cuda/annotated_ptr",
                        "cuda/atomic", "cuda/latch", "cuda/semaphore", "cuda/ptx")
# Host calls that read or write files, start processes or load code: never needed by a kernel file.
BANNED_CALLS = re.compile(
    r"\b(fopen|freopen|fdopen|tmpfile|ofstream|ifstream|fstream|filebuf|system|popen|execv|execve|execvp|execl|"
    r"execlp|execle|fork|vfork|dlopen|dlsym|syscall|unlink|unlinkat|rmdir|truncate|ftruncate|chmod|rename|"
    r"remove|mkdir|getenv|setenv|putenv)\s*\(")
BANNED_NAMESPACES = re.compile(r"\bstd\s*::\s*filesystem\b|\b(torch|at|c10|ATen|pybind11)\s*::")
TORCH_ANSWER_OPS = re.compile(
    r"\b(?:torch|at)\s*::\s*(?:relu_?|clamp\w*|threshold\w*|maximum|max|where|nn\b|native\b|leaky_relu|"
    r"hardtanh|gelu|_?cast|matmul|mm|sum|mul|where|abs|sign|heaviside|masked_fill)\b"
    r"|\.\s*(?:relu_?|clamp\w*|threshold_?|maximum|max|where|masked_fill_?|mul_?|abs|gelu|heaviside|sign)\s*\(")


@dataclass
class Rejection:
    """A submitted kernel file the grader refused to build."""

    lesson: str
    file: str
    reasons: list[str]

    def text(self) -> str:
        """One paragraph saying which file was rejected and why."""
        if self.file.endswith("_triton.py"):
            tail = ("A Triton twin holds @triton.jit kernels and the given wrappers: triton, triton.language and "
                    "torch for types and data movement only")
        elif self.file.endswith(".py"):
            tail = "Python exercise files use a few modules and compute with your kernels"
        else:
            tail = "Exercise files hold plain CUDA C++"
        return (f"lessons/{self.lesson}/{self.file} was rejected before building: "
                + "; ".join(r.rstrip(".") for r in self.reasons) + f". {tail} (see docs/CONTRIBUTING.md).")


def header_allowed(name: str, lesson_files: set[str]) -> str | None:
    """None if ``#include`` of ``name`` is allowed in a kernel-only file, else why not."""
    if name.startswith("/") or ".." in name.split("/") or "\\" in name:
        return f"#include \"{name}\" points outside the lesson folder"
    if "/" not in name and name in lesson_files:
        return None  # a header of this lesson (its content is screened too)
    if name in CXX_BANNED_STD:
        return f"#include <{name}>: file, thread or signal access is not allowed in a kernel file"
    if name in CXX_STD_HEADERS or name in CUDA_HEADERS or name.startswith(CUDA_HEADER_PREFIXES):
        return None
    if name.split("/")[0] in ("torch", "ATen", "c10", "pybind11", "Python.h"):
        return f"#include <{name}>: torch headers are not allowed in a kernel-only exercise file"
    return f"#include <{name}>: only CUDA and C++ standard headers may be included"


def tensor_functions(masked: str) -> list[tuple[str, str]]:
    """(name, body) of every function returning ``torch::Tensor`` / ``at::Tensor`` in masked source."""
    out = []
    for m in re.finditer(r"^\s*(?:static\s+|inline\s+)*(?:torch|at)\s*::\s*Tensor\s+(\w+)\s*\([^;{]*?\)\s*\{",
                         masked, re.M):
        depth, i = 1, m.end()
        while i < len(masked) and depth:
            depth += {"{": 1, "}": -1}.get(masked[i], 0)
            i += 1
        out.append((m.group(1), masked[m.end():i]))
    return out


def screen_kernel_file(lesson: str, name: str, text: str, lesson_files: set[str],
                       torch_ok: bool | None = None) -> list[str]:
    """Reasons to reject one submitted kernel file (empty when it is acceptable).

    Kernel-only files: no torch, no headers beyond CUDA and the C++ standard library (and the lesson's
    own ``.cuh`` files), no ``#include`` through a macro, no file/process/environment calls. The torch
    binding exercise (lesson 01 ``relu_torch.cu``) may include torch but must launch a kernel with
    ``<<<...>>>`` and call no torch operator that computes the answer. ``torch_ok``: whether the file is
    one of the lesson's ``torch_files``; ``None`` looks it up in this checkout's course model.
    """
    reasons: list[str] = []
    masked = mask(text)
    if torch_ok is None:
        from cudacourse.course import course

        les = course().lessons.get(lesson)
        torch_ok = les is not None and name in les.torch_files
    for m in re.finditer(r"^[ \t]*#[ \t]*include\b(.*)$", masked, re.M):
        raw = text[m.start(1):m.end(1)].strip()
        inc = re.match(r'[<"]([^>"]+)[>"]', raw)
        line = line_of(text, m.start())
        if not inc:
            reasons.append(f"line {line}: #include through a macro is not allowed")
            continue
        hdr = inc.group(1).strip()
        if torch_ok and hdr.split("/")[0] in ("torch", "ATen", "c10"):
            continue
        why = header_allowed(hdr, lesson_files)
        if why:
            reasons.append(f"line {line}: {why}")
    if re.search(r"\b__has_include\b|^[ \t]*#[ \t]*(?:import|include_next)\b", masked, re.M):
        reasons.append("#include_next, #import and __has_include are not allowed")
    for m in BANNED_CALLS.finditer(masked):
        reasons.append(f"line {line_of(text, m.start())}: calls {m.group(1)}(): kernel files may not touch "
                       "files, processes or the environment")
    if torch_ok:
        for m in TORCH_ANSWER_OPS.finditer(masked):
            reasons.append(f"line {line_of(text, m.start())}: `{m.group(0).strip()}` computes with a torch "
                           "operator; the binding must launch your kernel")
        for name, body_text in tensor_functions(masked):
            if "<<<" not in body_text and not re.match(r"\s*(TORCH_CHECK\s*\(\s*false\b|throw\b)", body_text):
                # (a body that starts by throwing is an untouched stub: it fails at run time with its TODO)
                reasons.append(f"{name}() launches no kernel (no <<<...>>>): it must launch your kernel, not "
                               "compute with torch")
    else:
        for m in BANNED_NAMESPACES.finditer(masked):
            reasons.append(f"line {line_of(text, m.start())}: `{m.group(0).strip()}` is not allowed in a "
                           "kernel-only exercise file (no torch, no filesystem)")
    # One reason per line is enough.
    seen: set[str] = set()
    out = []
    for r in reasons:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out



# A learner's Python exercise file runs inside the test process, so it may use only these modules and
# may not reach the file system, the interpreter or other modules' attributes.
PY_ALLOWED_IMPORTS = {"__future__", "math", "typing", "dataclasses", "collections", "collections.abc", "torch",
                      "torch.nn.functional", "cudacourse", "cudacourse.check"}
PY_FORBIDDEN_NAMES = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "setattr",
                      "delattr", "breakpoint", "input", "__builtins__", "importlib", "sys", "os", "subprocess",
                      "getattr", "hasattr", "memoryview"}
# Attributes of an imported module that reach files, processes, the interpreter or code below torch's Python
# API (torch.os.system, torch.sys.modules, torch.load running a pickle, torch.ops.aten.mm). Torch arithmetic
# itself stays legal in the file (its given reference code uses it); torch_answer_guard refuses it at run time
# where the learner's functions are graded.
PY_HARMLESS_DUNDERS = {"__init__", "__name__"}  # type(t).__name__ in an error message reaches nothing
PY_FORBIDDEN_MODULE_ATTRS = {"os", "sys", "ops", "load", "save", "_C", "hub", "jit", "library", "package", "classes",
                             "multiprocessing", "distributed", "utils", "compile", "overrides", "_dynamo"}


def screen_python_file(name: str, text: str, allowed_imports: set[str] | frozenset[str] = frozenset(PY_ALLOWED_IMPORTS),
                       module_api: dict[str, frozenset[str] | None] | None = None,
                       allow: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Reasons to reject a learner's Python exercise file (empty when it is acceptable).

    ``allowed_imports``: the modules it may import. ``module_api``: for an imported module (by its top-level name,
    e.g. ``triton``, or ``triton.language`` when imported ``as tl``) the only attributes the file may use of it, or
    None for any public one; such a module is
    exempt from :data:`PY_FORBIDDEN_MODULE_ATTRS` (``triton.jit`` is its decorator, not ``torch.jit``).
    ``allow``: the lesson's ``python_allow`` (lesson.toml): more modules to import, and ``module.attr`` names of
    :data:`PY_FORBIDDEN_MODULE_ATTRS` the file may use (``torch.library`` for lesson 07's custom operator).
    """
    torch_names = {a for a in allow if a.startswith("torch.")}
    allowed_imports = frozenset(allowed_imports) | (set(allow) - torch_names)
    allowed_attrs = {tuple(a.split(".", 1)) for a in torch_names}

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []  # a syntax error fails its task with Python's own message
    reasons: list[str] = []
    imported: set[str] = set()
    module_of: dict[str, str] = {}  # local name -> the module it is (import triton.language as tl: triton.language)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imported.add((a.asname or a.name).split(".")[0])
                module_of[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                if a.name not in allowed_imports:
                    reasons.append(f"{name}:{node.lineno}: import {a.name} is not allowed "
                                   f"(allowed: {', '.join(sorted(allowed_imports))})")
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "") not in allowed_imports:
                reasons.append(f"{name}:{node.lineno}: from {node.module} import ... is not allowed "
                               f"(allowed: {', '.join(sorted(allowed_imports))})")
            imported.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Name) and node.id in PY_FORBIDDEN_NAMES:
            reasons.append(f"{name}:{node.lineno}: '{node.id}' is not allowed in an exercise file")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr not in PY_HARMLESS_DUNDERS:
            reasons.append(f"{name}:{node.lineno}: dunder attribute '{node.attr}' is not allowed")

    api = module_api or {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in imported):
                continue
            top = module_of.get(root.id, root.id)
            if top in api:
                allowed = api[top]
                first = node if node.value is root else None
                if node.attr.startswith("_") or (first is not None and allowed is not None and
                                                 node.attr not in allowed):
                    reasons.append(f"{name}:{node.lineno}: '{ast.unparse(node)}' is not allowed in an exercise file "
                                   f"(of {top}, use only: {', '.join(sorted(allowed or ()))} and public names)")
            elif node.attr in PY_FORBIDDEN_MODULE_ATTRS and (top, node.attr) not in allowed_attrs:
                reasons.append(f"{name}:{node.lineno}: '{ast.unparse(node)}' is not allowed in an exercise file "
                               "(no files, processes or interpreter internals)")
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            root = t
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported and root is not t:
                reasons.append(f"{name}:{node.lineno}: assigning into the imported module '{root.id}' "
                               "(monkeypatching) is not allowed")
    return reasons



# ----------------------------------------------------------------------------------------------------
# Screening Triton twins (*_triton.py): Python, plus triton; torch for types and data movement only
# ----------------------------------------------------------------------------------------------------

TRITON_ALLOWED_IMPORTS = frozenset({"__future__", "math", "typing", "dataclasses", "collections", "collections.abc",
                                    "torch", "triton", "triton.language", "cudacourse",
                                    "cudacourse.triton_track"})
# What a twin may use of the triton package itself (triton.language, usually imported as tl, is open: its public
# names are the kernel language).
TRITON_API = frozenset({"jit", "autotune", "Config", "heuristics", "cdiv", "next_power_of_2", "language"})
# Torch names a twin's given wrapper code uses beyond TORCH_ALLOWED: type hints, dtypes, the GPU's properties.
TORCH_TWIN_NAMES = frozenset({"Tensor", "float32", "float64", "float16", "bfloat16", "int32", "int64", "int8",
                              "uint8", "float8_e4m3fn", "dtype", "device", "get_device_properties", "is_available",
                              "current_device", "multi_processor_count"})
# Methods that compute: called on a tensor in a twin, they would be the answer instead of the kernels.
TORCH_COMPUTE_METHODS = frozenset("""
softmax log_softmax sum mean max min amax amin argmax argmin exp exp_ log log_ relu relu_ gelu silu sigmoid tanh
matmul mm bmm addmm addmm_ baddbmm add add_ sub sub_ mul mul_ div div_ pow pow_ sqrt sqrt_ rsqrt rsqrt_ cumsum
clamp clamp_ clamp_min clamp_max where var std norm layer_norm rms_norm cross_entropy maximum minimum abs abs_
lerp lerp_ addcdiv addcdiv_ addcmul addcmul_ logsumexp linear scaled_dot_product_attention masked_fill
masked_fill_ copysign nan_to_num dot outer einsum
""".split())


def screen_triton_file(name: str, text: str) -> list[str]:
    """Reasons to reject a learner's Triton twin (empty when it is acceptable).

    What :func:`screen_python_file` refuses (files, processes, interpreter internals, other modules), except that
    ``import triton`` / ``import triton.language as tl`` and ``from cudacourse.triton_track import ...`` are
    allowed, and ``triton.jit`` / ``triton.autotune`` / ``triton.Config`` / ``triton.cdiv`` and every public
    ``tl.*`` name with them. Torch answers are refused as written: ``torch.X(...)`` for an X that computes
    (``torch.softmax``, ``torch.nn.functional``), and computing methods called on tensors (``x.softmax()``,
    ``a @ b``). The torch guard refuses the same at run time; this is the early, friendly message.
    """
    reasons = screen_python_file(name, text, TRITON_ALLOWED_IMPORTS, {"triton": TRITON_API, "triton.language": None})
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return reasons
    torch_names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                   if a.name == "torch"}
    kernel_modules = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                      for a in n.names if a.name.split(".")[0] in ("triton", "math")}
    torch_ok = TORCH_ALLOWED | TORCH_TWIN_NAMES | {"cuda"}
    why = "a Triton twin computes with its @triton.jit kernels; torch may only allocate, view, copy and move data"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, root = [node.attr], node.value
            while isinstance(root, ast.Attribute):
                chain.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in torch_names:
                bad = [a for a in chain if a not in torch_ok]
                if bad:
                    reasons.append(f"{name}:{node.lineno}: '{ast.unparse(node)}' is not allowed ({why})")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            root = node.func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            on_module = isinstance(root, ast.Name) and (root.id in kernel_modules or root.id in torch_names)
            if not on_module and node.func.attr in TORCH_COMPUTE_METHODS:
                reasons.append(f"{name}:{node.lineno}: '.{node.func.attr}(...)' computes with torch ({why})")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            reasons.append(f"{name}:{node.lineno}: '@' multiplies with torch ({why}; inside a kernel use tl.dot)")
    seen: set[str] = set()
    return [r for r in reasons if not (r in seen or seen.add(r))]
