"""The classic ``torch::Tensor`` route on the simulator: a wrapper .cu file built with ``load_inline``, in-process.

Unlike ``SimLibrary`` there is no worker: the extension is loaded into the calling process (while grading, that
is the torch worker, ``workers/torch_serve.py``), CUDA and c10-cuda headers replaced by the runtime's stand-ins
(``runtime/ccsim_torch.h``).

Most of such a build is ``<torch/extension.h>``: a precompiled header of it (``prepare_torch_pch``, made only when
asked: 45 CPU-s and 800 MB) is used by every later build that finds one in the build caches (``_pch_flags``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from cudacourse.buildcache import cached, content_key, find_cached

from .build import _CHECKED, _LINES, _gxx_version, parse_order, runtime_object, runtime_text
from .paths import RUNTIME_DIR, _compile_error, _copy_for_compiler, _line_path
from .reports import _Symbolizer, make_error
from .rewrite import rewrite


def build_torch_extension(source: str, path: str | None, functions: list[str], *, checked: bool = True):
    """Build a ``torch::Tensor``-wrapper .cu file for the simulator with ``load_inline`` (in-process).

    CUDA and c10-cuda headers are replaced by the simulator runtime, ``x.is_cuda()`` holds for CPU
    tensors, ``data_ptr<T>()`` registers the tensor's bounds for checked mode and a failed launch raises.
    Returns a module whose functions raise the matching ``KernelError`` subclass for kernel bugs.
    """
    import types

    from torch.utils.cpp_extension import load_inline

    path = path or "<source>"
    text = rewrite(source, path, [], torch=True, entries=False, line_path=_line_path(path))
    rt = runtime_object()
    cflags = torch_cflags(checked)
    key = content_key(text, " ".join(cflags), runtime_text(), _gxx_version(), ",".join(functions))
    name = "ccsim_ext_" + key

    built: dict = {}

    def build(d: Path) -> None:
        _copy_for_compiler(d, source, path)  # (ninja compiles in d)
        pch = _link_pch(cflags, d)
        # (the same flags whether or not a precompiled header is there: torch's JIT renames a module built again
        # in this process with other flags, <name>_v1)
        flags = [*cflags, "-include", str(d / PCH_NAME)]

        def load():  # noqa: ANN202 - the extension module
            return load_inline(name=name, cpp_sources=[text], functions=list(functions), extra_cflags=flags,
                               extra_ldflags=[str(rt)], extra_include_paths=[str(RUNTIME_DIR)],
                               build_directory=str(d), verbose=False)

        try:
            try:
                built["mod"] = load()
            except RuntimeError as e:
                if pch is None or f"{PCH_NAME}.gch" not in str(e):
                    raise
                # the compiler could not read the precompiled header (a damaged one: g++ ignores a stale or foreign
                # one by itself): the plain build, the header parsed again
                (d / f"{PCH_NAME}.gch").unlink()
                built["mod"] = load()
        except RuntimeError as e:  # compiler output is in the message
            raise _compile_error(str(e), path) from None
        finally:
            (d / f"{PCH_NAME}.gch").unlink(missing_ok=True)  # (a link to the cache's: never copied with the build)

    folder = cached("sim-torch", key, build)
    mod = built.get("mod") or sys.modules.get(name)
    if mod is None:  # built earlier (or by another process): import the cached extension directly
        import importlib.util

        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.so")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[name] = mod
    import ctypes

    so = folder / f"{name}.so"  # (a fresh build was loaded from the temporary folder, since renamed)
    cdll = ctypes.CDLL(str(so))
    cdll.ccsim_api_init.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_int]
    order, seed = parse_order(None)
    cdll.ccsim_api_init(int(checked), order, seed, 2)
    sym = _Symbolizer(so, path)

    def wrap(fn_name: str):
        fn = getattr(mod, fn_name)

        def call(*a, **kw):
            cdll.ccsim_api_begin_call()
            try:
                return fn(*a, **kw)
            except RuntimeError as e:
                s = str(e)
                i = s.find("CCSIM_ERROR ")
                if i < 0:
                    raise
                rec = json.loads(s[i + len("CCSIM_ERROR "):].split("\n")[0])
                raise make_error(rec, sym, fn_name, path) from None

        call.__name__ = fn_name
        call.__doc__ = fn.__doc__
        return call

    out = types.ModuleType(name)
    out.__file__ = str(so)
    for f in functions:
        setattr(out, f, wrap(f))
    out._extension = mod
    return out


# ----------------------------------------------------------------------------------------------------
# A precompiled <torch/extension.h>: 21 of a build's ~30 CPU-s are that header (g++ 12, torch 2.13, 2-core machine)
# ----------------------------------------------------------------------------------------------------

PCH_NAME = "ccsim_torch_pch.h"  # every build includes it first (-include), the header torch's own main.cpp starts with
PCH_TEXT = "#include <torch/extension.h>\n"
PCH_KIND = "sim-torch-pch"  # its folder in a build cache


def _cxx() -> str:
    """The compiler ``load_inline`` builds with (``$CXX``, else ``c++``: torch's ``get_cxx_compiler`` off Windows)."""
    return os.environ.get("CXX", "c++")


def _pch_compile_flags(cflags: list[str]) -> list[str]:
    """The flags ``load_inline`` compiles ``main.cpp`` with (``cflags`` and ``post_cflags`` of the build.ninja torch
    writes), less the module's name (a macro torch's headers never read): what a precompiled header must be made
    with to be used. Asked of torch itself (its ninja writer, into a temporary folder): its flags change between
    versions (``-std=c++17``, then ``-std=c++20``)."""
    return list(_load_inline_flags(tuple(cflags)))


@functools.lru_cache(maxsize=8)
def _load_inline_flags(cflags: tuple[str, ...]) -> tuple[str, ...]:
    import inspect
    import shlex
    import tempfile

    from torch.utils import cpp_extension

    write = cpp_extension._write_ninja_file_to_build_library
    with tempfile.TemporaryDirectory(prefix="ccsim-pch-flags-") as t:
        ninja = Path(t) / "build.ninja"
        given = {"path": str(ninja), "name": "ccsim_pch_probe", "sources": [str(Path(t) / "main.cpp")],
                 "extra_cflags": list(cflags), "extra_include_paths": [str(RUNTIME_DIR)]}
        kw = {}
        for n, param in inspect.signature(write).parameters.items():
            if n in given:
                kw[n] = given[n]
            elif n.startswith("extra_"):
                kw[n] = []
            elif n.startswith(("with_", "is_")):
                kw[n] = False
            elif param.default is inspect.Parameter.empty:
                raise TypeError(f"torch's ninja writer has an argument this does not know: {n}")
        write(**kw)
        lines = {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in ninja.read_text().splitlines())}
    flags = shlex.split(lines["cflags"]) + shlex.split(lines.get("post_cflags", ""))
    return tuple(f for f in flags if not f.startswith("-DTORCH_EXTENSION_NAME="))


def _pch_key(cflags: list[str]) -> str:
    """The precompiled header's cache key: its text, the compiler and its version, the flags and torch's version
    and build (g++ itself refuses one made with other flags or macros, but not one of other torch headers). The
    runtime's folder is not in it: torch's headers never read it, and a grading worker runs from a staged copy."""
    return _pch_key_of(tuple(cflags), _cxx())


@functools.lru_cache(maxsize=8)
def _pch_key_of(cflags: tuple[str, ...], cxx: str) -> str:
    import torch

    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    flags = [f.replace(str(RUNTIME_DIR), "<runtime>") for f in _pch_compile_flags(list(cflags))]
    return content_key(PCH_TEXT, cxx, version, " ".join(flags), torch.__version__, str(torch.version.git_version))


def torch_cflags(checked: bool = True) -> list[str]:
    """The extra flags of a torch-route build (``checked``: with the thread-sanitizer instrumentation)."""
    return ["-O2", "-w", "-fno-strict-aliasing", "-fno-finite-loops", *_LINES, *(_CHECKED if checked else [])]


def prepare_torch_pch(checked: bool = True) -> Path:
    """Make (once per key, under the build cache's lock, atomically) the precompiled ``<torch/extension.h>`` for
    the torch-route builds of mode ``checked``; return its folder in the build cache.

    Asked for only where many torch-route builds follow (the course's test suite): it costs about 45 CPU-s and
    800 MB, and saves about 16 CPU-s of each later build (g++ 12, torch 2.13, 2-core machine). A build that finds
    none (in the shared cache, then its own) parses the header as before."""
    cflags = torch_cflags(checked)

    def build(d: Path) -> None:
        (d / PCH_NAME).write_text(PCH_TEXT)
        r = subprocess.run([_cxx(), *_pch_compile_flags(cflags), "-x", "c++-header", str(d / PCH_NAME), "-o",
                            str(d / f"{PCH_NAME}.gch")], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("building the precompiled torch header failed:\n" + r.stderr[-3000:])
        (d / "size").write_text(str((d / f"{PCH_NAME}.gch").stat().st_size))

    return cached(PCH_KIND, _pch_key(cflags), build)


def share_torch_pch(src_root: Path, dst_root: Path) -> int:
    """Hard-link each complete precompiled torch header of the build cache ``src_root`` into ``dst_root`` (a grade's
    run cache, which its confined workers read: they may not read the instructor's cache itself); returns how many.
    Only links (atomically: a temporary folder, then a rename): where the two are on different file systems nothing
    is shared and the builds parse the header, rather than copying 800 MB into every grade. The header holds
    torch's declarations only, nothing of the course or of another submission."""
    import shutil

    from cudacourse.buildcache import _DONE

    n = 0
    for d in sorted((src_root / PCH_KIND).glob("*")) if src_root != dst_root else []:
        dst = dst_root / PCH_KIND / d.name
        if not (d / _DONE).exists() or dst.exists():
            continue
        tmp = dst.parent / f"{d.name}.link{os.getpid()}"
        try:
            tmp.mkdir(parents=True)
            for f in sorted(d.iterdir()):
                os.link(f, tmp / f.name)
            tmp.rename(dst)
            n += 1
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return n


def _link_pch(cflags: list[str], d: Path) -> Path | None:
    """Put the header every build includes first into the build folder ``d``, with a link to the precompiled one
    beside it when a complete one is in the build caches (its recorded size checked: a truncated file stops g++);
    returns the precompiled header used, or None. g++ uses ``<header>.gch`` only if it was made with the same
    compiler, flags and macros, else it reads the header itself."""
    (d / PCH_NAME).write_text(PCH_TEXT)
    try:
        folder = find_cached(PCH_KIND, _pch_key(cflags))
    except Exception:  # noqa: BLE001 - torch's private ninja writer changed: the build goes on without the header
        return None
    if folder is None:
        return None
    gch = folder / f"{PCH_NAME}.gch"
    try:
        if gch.stat().st_size != int((folder / "size").read_text()):
            return None
    except (OSError, ValueError):
        return None
    os.symlink(gch, d / f"{PCH_NAME}.gch")
    return gch
