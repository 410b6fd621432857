"""lesson 07's swish as a compiled TORCH_LIBRARY operator: ``torch.ops.cudacourse_l07_cpp.swish``.

Importing this package loads the compiled library (which registers the schemas and the CPU, Meta and, in
a CUDA build, CUDA implementations) and registers the autograd formula, so ``swish(x).backward()`` works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

_lib = next(Path(__file__).parent.glob("_C*.so"))
torch.ops.load_library(str(_lib))

swish = torch.ops.cudacourse_l07_cpp.swish.default
swish_backward = torch.ops.cudacourse_l07_cpp.swish_backward.default


def _setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])


def _backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return swish_backward(x, grad)


torch.library.register_autograd("cudacourse_l07_cpp::swish", _backward, setup_context=_setup_context)

__all__ = ["swish", "swish_backward"]
