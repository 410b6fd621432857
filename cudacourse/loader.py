"""Load a learner's CUDA file and call its launchers from Python, on a GPU or on the CPU simulator.

``load(source, functions)`` is the one seam between learner code and everything else (tests, notebooks,
the grader, benchmarks). It parses the launchers' signatures, builds the file for the chosen backend,
and returns a ``Module`` whose attributes are the launchers. Calls are checked before anything runs:
pointer parameters take contiguous tensors of the matching dtype on the backend's device, scalars take
Python numbers; a mismatch raises ``TypeError``/``ValueError`` naming the parameter.

Backends
  ``cuda``  ``nvcc -shared`` on the kernel file alone (about 2 s), with a generated ``extern "C"`` trampoline
            per launcher that ctypes calls with the tensors' device pointers; the same command in a notebook and
            in the grade (``cuda_backend.build_cuda``). No torch headers are compiled (they cost ~30 s).
  ``sim``   the CPU simulator in ``cudacourse.sim`` (checked mode by default).
  ``auto``  cuda when torch sees a GPU and nvcc is usable, else sim; ``CUDA_COURSE_BACKEND`` overrides it.

Files that include torch headers (the classic ``torch::Tensor`` route of lesson 01) are built with
``load_inline`` and a pybind11 binding on cuda, or by the simulator's torch route on the CPU; while
grading, either is built and loaded in a confined worker (``cudacourse/workers/torch.py``; on cuda one that
owns its own CUDA context), never in the checking process.

This file is the loader's public face; its parts, each of one concern, are

=====================  ======================================================================
``backends.py``        which backend runs (``backend_name``, ``device_for``, ``uses_gpu_worker``)
``arguments.py``       argument checks before anything runs
``cuda_backend.py``    builds with nvcc and ctypes calls on the GPU, in this process
``module.py``          ``Module``, ``load``, ``no_sync``
``lessons.py``         ``Lesson``, ``lesson``, ``lesson_dir``, ``import_file``
=====================  ======================================================================

The course's own modules import the part they need; this file re-exports them for the notebooks, tests,
lessons and benchmarks that import ``cudacourse.loader``.
"""

from __future__ import annotations

from cudacourse import buildcache
from cudacourse.arguments import arg_plan, check_args, fast_check_args
from cudacourse.backends import BACKENDS, backend_name, device_for, gpu_usable, nvcc_path, uses_gpu_worker
from cudacourse.cuda_backend import build_cuda, build_torch_cuda, cuda_arch
from cudacourse.lessons import Lesson, import_file, lesson, lesson_dir
from cudacourse.module import Module, exposed_functions, load, no_sync, synchronize_workers, syncing
from cudacourse.settings import UNBUILDABLE_ENV

REPO_ROOT = buildcache.REPO_ROOT

__all__ = ["BACKENDS", "REPO_ROOT", "UNBUILDABLE_ENV", "Lesson", "Module", "arg_plan", "backend_name", "build_cuda",
           "build_torch_cuda", "check_args", "cuda_arch", "device_for", "exposed_functions", "fast_check_args",
           "gpu_usable", "import_file", "lesson", "lesson_dir", "load", "no_sync", "nvcc_path", "synchronize_workers",
           "syncing", "uses_gpu_worker"]
