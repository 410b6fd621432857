"""Which backend runs a kernel file: ``cuda`` (a GPU and nvcc) or ``sim`` (the CPU simulator).

``backend_name`` resolves what a caller asks for (``auto``, ``cuda``, ``sim``; ``CUDA_COURSE_BACKEND`` through the
settings overrides ``auto``); ``uses_gpu_worker`` says whether learner libraries on it run in a GPU worker
(on cuda while grading).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from cudacourse import gpuinfo, settings

BACKENDS = settings.BACKENDS


def nvcc_path() -> str | None:
    """The nvcc that builds run with: ``$CUDA_HOME/bin/nvcc`` if set, else the one on PATH."""
    return _nvcc_path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"), os.environ.get("PATH"))


# Cached per environment: backend_name() asks on every cc.lesson() call, and a PATH search is ~0.1 ms, which a
# custom op that looks its lesson up per call (task 7.7, H100) paid on every launch.
@functools.lru_cache(maxsize=16)
def _nvcc_path(home: str | None, path: str | None) -> str | None:
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc", path=path)


@functools.lru_cache(maxsize=1)
def gpu_usable() -> bool:
    """True when torch sees a CUDA GPU (a CPU-only torch or no driver gives False).

    Asked of the driver without importing torch where that answers (``gpuinfo.torch_sees_gpu``): the grader
    and its build workers need no torch to decide."""
    if "torch" not in sys.modules and (fast := gpuinfo.torch_sees_gpu()) is not None:
        return fast
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def backend_name(requested: str = "auto") -> str:
    """Resolve ``requested`` (``auto``/``cuda``/``sim``) to the backend that will run: ``cuda`` or ``sim``."""
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {requested!r}")
    if requested == "auto":
        requested = settings.current().backend
    if requested == "auto":
        return "cuda" if gpu_usable() and nvcc_path() else "sim"
    if requested == "cuda" and not gpu_usable():
        raise RuntimeError("backend 'cuda' was asked for, but torch sees no CUDA GPU "
                           "(torch.cuda.is_available() is False). Use backend='sim' for the CPU simulator, "
                           "or run `make doctor` to see why.")
    return requested


def device_for(backend: str) -> Any:
    """The torch device that tensors for ``backend`` live on."""
    import torch

    return torch.device("cuda") if backend_name(backend) == "cuda" else torch.device("cpu")


def uses_gpu_worker(backend: str = "auto") -> bool:
    """Whether learner libraries on this backend run in a separate GPU worker: on cuda while grading
    (settings ``confine`` set), so the checking process never loads learner code."""
    return backend_name(backend) == "cuda" and settings.current().confine is not None

