"""Benchmark cases of lesson 01 (ReLU) for ``make bench`` (GPU only).

Groups (each compared with its PyTorch row and with the copy bandwidth measured in the same run):
  relu 2^28 fp32           torch.relu; relu_v1_scalar, relu_v2_grid_stride (a grid that just fills the GPU),
                           relu_v3_float4 (task 1.7: target in lesson.toml), relu_forward (the
                           torch::Tensor binding of task 1.6, which allocates its output) and a plain
                           ``y.copy_(x)`` for comparison: ReLU moves exactly the bytes of a copy.
  relu backward 2^28 fp32  torch's threshold_backward (what autograd runs for torch.relu); relu_backward.
  bias+gelu RxC fp32       torch's two kernels ``F.gelu(x + b, approximate="tanh")``; the fused bias_gelu
                           (target: at least as fast; it moves about half the bytes).
The Triton twins (relu_triton.py: tasks 1.T1, 1.T2) have a row beside their CUDA versions in the relu and
bias+gelu groups; each is compiled and autotuned on a first call before its timing, and its row's note gives
that time and the config the autotuner kept (cudacourse/triton_track.py, ``bench_case``).
``bytes`` counts each input read once and each output written once. ``quick`` uses 2^24 elements.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from cudacourse import triton_track
from cudacourse.bench import Case


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for lesson 01 on module ``m`` (``m.device`` is cuda). ``quick``: smaller sizes."""
    dev = m.device
    log_n = 24 if quick else 28
    n = 2**log_n
    x = torch.randn(n, device=dev)
    y = torch.empty_like(x)
    out: list[Case] = []

    g = f"relu 2^{log_n} fp32"
    rw = 2 * 4 * n  # read x, write y
    out.append(Case(g, "torch.relu", lambda: torch.relu(x), bytes=rw, reference=True))
    out.append(Case(g, "y.copy_(x) (a copy, for comparison)", lambda: y.copy_(x), bytes=rw))
    out.append(Case(g, "relu_v1_scalar", lambda: m.relu_v1_scalar(x, y, n), bytes=rw))
    out.append(Case(g, "relu_v2_grid_stride (full GPU grid)", lambda: m.relu_v2_grid_stride(x, y, n, 0), bytes=rw))
    out.append(Case(g, "relu_v3_float4", lambda: m.relu_v3_float4(x, y, n), bytes=rw, task="1.7"))
    out.append(Case(g, "relu_forward (torch::Tensor binding)", lambda: m.relu_forward(x), bytes=rw))
    twin = triton_track.bench_twin(m)
    out.append(triton_track.bench_case(twin, g, "relu (Triton twin, 1.T1)", lambda t: t.relu(x, y, n),
                                       ["relu_kernel"], bytes=rw))

    g = f"relu backward 2^{log_n} fp32"
    dy = torch.randn(n, device=dev)
    dx = torch.empty_like(x)
    rrw = 3 * 4 * n  # read x and dy, write dx
    out.append(Case(g, "torch threshold_backward", lambda: torch.ops.aten.threshold_backward(dy, x, 0.0),
                    bytes=rrw, reference=True))
    out.append(Case(g, "relu_backward", lambda: m.relu_backward(x, dy, dx, n), bytes=rrw))

    rows, cols = (4096, 4096) if quick else (65536, 4096)
    xm = torch.randn(rows, cols, device=dev)
    b = torch.randn(cols, device=dev)
    ym = torch.empty_like(xm)
    g = f"bias+gelu {rows}x{cols} fp32"
    gb = 4 * (2 * rows * cols + cols)  # read x and b, write y
    out.append(Case(g, "torch gelu(x + b) (2 kernels)", lambda: F.gelu(xm + b, approximate="tanh"), bytes=gb,
                    reference=True))
    out.append(Case(g, "bias_add (worked example, no GELU)", lambda: m.bias_add(xm, b, ym, rows, cols), bytes=gb))
    out.append(Case(g, "bias_gelu (fused)", lambda: m.bias_gelu(xm, b, ym, rows, cols), bytes=gb, target=1.0))
    out.append(triton_track.bench_case(twin, g, "bias_gelu (Triton twin, 1.T2)",
                                       lambda t: t.bias_gelu(xm, b, ym, rows, cols), ["bias_gelu_kernel"], bytes=gb))
    return out
