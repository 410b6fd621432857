"""The CPU simulator: learner CUDA C++ runs on the CPU with CUDA semantics, and bugs are diagnosed.

``SimLibrary.build`` rewrites a kernel file (``rewrite.py``), compiles it with g++ against the runtime
(``runtime/``) into a shared library, content-cached (``build.py``); ``SimLibrary.call`` runs a launcher in an
isolated worker process on shared-memory copies of the tensors, so a crash, an endless loop or a wild write never
takes the caller down (``library.py``, the worker ``_worker.py``). Checked mode (the default) compiles the
learner's code with g++'s thread-sanitizer instrumentation, whose hooks the runtime implements itself to diagnose
races (shared and global memory), out-of-bounds accesses and uninitialised reads (shared memory and ``cudaMalloc``
memory); fast mode skips the instrumentation. The runtime's reports become ``KernelError``s in ``reports.py``.

``build_torch_extension`` serves the classic ``torch::Tensor`` route through ``load_inline``, in-process
(``torch_route.py``).
"""

from __future__ import annotations

from .build import runtime_headers, runtime_object, seed_runtime
from .library import SimLibrary
from .rewrite import rewrite
from .torch_route import build_torch_extension

__all__ = ["SimLibrary", "build_torch_extension", "rewrite", "runtime_headers", "runtime_object", "seed_runtime"]
