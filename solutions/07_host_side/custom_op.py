"""Lesson 07, task 7.3: the swish kernels of host_side.cu as a real PyTorch custom operator.

``torch.library.custom_op`` gives the kernels what a built-in operator has, so that PyTorch's machinery
treats them as one: a schema (inferred from the type hints: ``(Tensor x) -> Tensor``), an implementation
that runs the kernel, a *fake* implementation that only says the output's shape, dtype and device (what
``torch.compile`` traces with, without running anything), and an autograd formula. An operator
registered this way goes through ``torch.compile(fullgraph=True)`` without a graph break; a plain Python
function calling ``m.swish_forward`` would break the graph (dynamo cannot trace into a ctypes call).

Use it::

    from custom_op import swish          # lessons/07_host_side/custom_op.py
    y = swish(x)                          # or torch.ops.cudacourse_l07.swish(x)
    y.sum().backward()                    # x.grad through swish_backward

The kernels run where ``cc.lesson("07_host_side")`` runs them: on the GPU, on PyTorch's current stream;
on the CPU simulator, with CPU tensors.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

import cudacourse as cc

LESSON = "07_host_side"
NAMESPACE = "cudacourse_l07"


@functools.cache
def kernels() -> Any:
    """The lesson's compiled kernels (GPU or simulator, whichever ``cc.lesson`` picks), looked up once per
    process: ``cc.lesson`` resolves the settings, the lesson's folder and the backend on every call (about
    0.2 ms of host time on a 2-core CPU), which every call of the op would pay again. The object it returns
    still rebuilds a kernel file after an edit."""
    return cc.lesson(LESSON)


def stream_handle(t: torch.Tensor) -> int:
    """The cudaStream_t of PyTorch's current stream on ``t``'s device, as an integer (0 on the CPU).

    0 too where the kernels run in a GPU worker process of their own (``cudacourse/workers/gpu.py``: the
    grader's timed task 7.7), where this process's streams do not exist, and each call there is ordered with
    this process's streams by synchronising before and after it."""
    from cudacourse.loader import uses_gpu_worker

    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda and not uses_gpu_worker() else 0


def check_tensor(t: Any, name: str, device_type: str | None) -> None:
    """Raise the error PyTorch users expect when argument ``name`` is not a contiguous float32 tensor on
    ``device_type`` (None: any device, as in the fake implementation)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"swish: argument '{name}' must be a Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TypeError(f"swish: argument '{name}' must be float32, got {t.dtype}; convert it with .float()")
    if device_type is not None and t.device.type != device_type:
        raise ValueError(f"swish: argument '{name}' is on '{t.device}', but the kernels run on '{device_type}'; "
                         f"move it with .to('{device_type}')")
    if not t.is_contiguous():
        raise ValueError(f"swish: argument '{name}' must be contiguous (the kernel indexes it as a flat array); "
                         "call .contiguous() first")


@torch.library.custom_op(f"{NAMESPACE}::swish", mutates_args=())
def swish(x: torch.Tensor) -> torch.Tensor:
    """y = x * sigmoid(x), elementwise, by swish_forward_kernel."""
    # TODO(task 7.3, part 1 of 4): check x, allocate y like x, run the forward kernel on the current
    # stream (~4 lines). Hint: check_tensor(x, "x", kernels().device.type); torch.empty_like(x);
    # kernels().swish_forward(x, y, x.numel(), stream_handle(x)).
    # BEGIN SOLUTION
    m = kernels()
    check_tensor(x, "x", m.device.type)
    y = torch.empty_like(x)
    m.swish_forward(x, y, x.numel(), stream_handle(x))
    return y
    # STUB: raise NotImplementedError("TODO(task 7.3): swish in lessons/07_host_side/custom_op.py")
    # END SOLUTION


@swish.register_fake
def _swish_fake(x: torch.Tensor) -> torch.Tensor:
    """Shape, dtype and device of swish(x), computed without running anything (torch.compile's view)."""
    # TODO(task 7.3, part 2 of 4): the same checks as the real op, minus the device; return an empty
    # tensor like x (~2 lines). Hint: check_tensor(x, "x", None).
    # BEGIN SOLUTION
    check_tensor(x, "x", None)
    return torch.empty_like(x)
    # STUB: raise NotImplementedError("TODO(task 7.3): _swish_fake in lessons/07_host_side/custom_op.py")
    # END SOLUTION


@torch.library.custom_op(f"{NAMESPACE}::swish_backward", mutates_args=())
def swish_backward(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = dy * d swish(x)/dx, by swish_backward_kernel."""
    # TODO(task 7.3, part 3 of 4): as swish, with two inputs checked (~6 lines). dy from autograd may be
    # non-contiguous (an expanded ones tensor from .sum()): make it contiguous before checking it.
    # BEGIN SOLUTION
    m = kernels()
    dy = dy.contiguous()
    check_tensor(x, "x", m.device.type)
    check_tensor(dy, "dy", m.device.type)
    dx = torch.empty_like(x)
    m.swish_backward(x, dy, dx, x.numel(), stream_handle(x))
    return dx
    # STUB: raise NotImplementedError("TODO(task 7.3): swish_backward in lessons/07_host_side/custom_op.py")
    # END SOLUTION


@swish_backward.register_fake
def _swish_backward_fake(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Shape, dtype and device of swish_backward(x, dy)."""
    check_tensor(x, "x", None)
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    """Keep what the backward needs: the input x."""
    (x,) = inputs
    ctx.save_for_backward(x)


def _backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    """The gradient of swish for its one input."""
    # TODO(task 7.3, part 4 of 4): return the gradient through the backward op (~2 lines).
    # Hint: (x,) = ctx.saved_tensors; call swish_backward (the op, so the backward also compiles).
    # BEGIN SOLUTION
    (x,) = ctx.saved_tensors
    return swish_backward(x, grad)
    # STUB: raise NotImplementedError("TODO(task 7.3): _backward in lessons/07_host_side/custom_op.py")
    # END SOLUTION


swish.register_autograd(_backward, setup_context=_setup_context)
