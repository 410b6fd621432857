"""The classic ``torch::Tensor`` route on the simulator: a wrapper .cu file built with ``load_inline``, in-process.

Unlike ``SimLibrary`` there is no worker: the extension is loaded into the calling process (while grading, that
is the torch worker, ``workers/torch_serve.py``), CUDA and c10-cuda headers replaced by the runtime's stand-ins
(``runtime/ccsim_torch.h``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cudacourse.buildcache import cached, content_key

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
    cflags = ["-O2", "-w", "-fno-strict-aliasing", "-fno-finite-loops", *_LINES, *(_CHECKED if checked else [])]
    key = content_key(text, " ".join(cflags), runtime_text(), _gxx_version(), ",".join(functions))
    name = "ccsim_ext_" + key

    built: dict = {}

    def build(d: Path) -> None:
        _copy_for_compiler(d, source, path)  # (ninja compiles in d)
        try:
            built["mod"] = load_inline(name=name, cpp_sources=[text], functions=list(functions), extra_cflags=cflags,
                                       extra_ldflags=[str(rt)], extra_include_paths=[str(RUNTIME_DIR)],
                                       build_directory=str(d), verbose=False)
        except RuntimeError as e:  # compiler output is in the message
            raise _compile_error(str(e), path) from None

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
