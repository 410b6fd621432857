"""cudacourse: load, run, check, time and grade CUDA kernels written in this course.

    import cudacourse as cc
    m = cc.lesson("01_relu")              # the learner's kernels (or the solutions: CUDA_COURSE_IMPL)
    m.relu_v1_scalar(x, y, x.numel())     # tensors for pointers, numbers for scalars
    m = cc.load("my.cu", ["my_launcher"], backend="sim", check=True)
    t = cc.triton_twin("01_relu")         # the lesson's Triton twin (optional track; needs triton)

The same source runs on a GPU (``backend="cuda"``) or on the CPU simulator (``backend="sim"``), which
also diagnoses races, out-of-bounds accesses and barrier bugs. See docs/CONTRIBUTING.md for the contract
between kernel files, tests and this package.
"""

from __future__ import annotations

from cudacourse.backends import backend_name, device_for
from cudacourse.errors import (
    BarrierError,
    CompileError,
    CourseError,
    KernelError,
    KernelTimeout,
    LaunchError,
    NeedsGPU,
    OutOfBoundsError,
    RaceError,
    UninitializedReadError,
    UnsupportedError,
)
from cudacourse.lessons import Lesson, lesson
from cudacourse.module import Module, load
from cudacourse.triton_track import twin as triton_twin

__all__ = [
    "BarrierError", "CompileError", "CourseError", "KernelError", "KernelTimeout", "LaunchError", "NeedsGPU",
    "OutOfBoundsError", "RaceError", "UninitializedReadError", "UnsupportedError",
    "Lesson", "Module", "backend_name", "device_for", "lesson", "load",
    "triton_twin",
]
__version__ = "0.1.0"
