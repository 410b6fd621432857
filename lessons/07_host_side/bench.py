"""Benchmark cases of lesson 07 for ``make bench LESSONS=07_host_side`` (GPU only).

Groups and the issue's (19) targets:
  host-to-device copy of 256 MiB: pageable vs pinned (cudaMallocHost-backed) memory, both measured; the
      ratio is reported (no target). The link's nominal figure: PCIe 5.0 x16 is 64 GB/s per direction
      (H100 SXM5 hosts); NVLink-C2C (GH200) is another machine.
  pipeline_run over 64M floats (256 MiB in, 256 MiB out), d = 1024 features, 1024 iterations per element:
      8 chunks on 4 streams vs 1 chunk on 1 stream (serial)                    >= 1.6x  (task 7.5)
      1024 dependent FMAs per element are about 137 GFLOP in all: a few milliseconds at the H100's FP32
      rate, the order of one 256 MiB copy over a PCIe link of tens of GB/s, so copies and compute are
      comparable (the two rows of the group show whether they are on the machine that runs it).
  decode step (d = 256, 200 steps of 3 kernels): graph replay vs eager launches  >= 2.0x  (task 7.6)
      i.e. per-step time <= 0.5x; the graph is captured and instantiated inside each timed call.
  swish on 16M floats through torch.library: torch.compile(fullgraph=True) vs eager  >= 0.95x (task 7.7)
"""

from __future__ import annotations

from typing import Any

import torch

from cudacourse.bench import Case
from cudacourse.loader import import_file

MiB = 1 << 20


def _copy_cases(nbytes: int) -> list[Case]:
    n = nbytes // 4
    pageable = torch.randn(n)
    pinned = torch.randn(n).pin_memory()
    dst = torch.empty(n, device="cuda")
    group = f"host-to-device copy {nbytes // MiB} MiB"
    return [
        Case(group, "pageable (torch CPU tensor)", lambda: dst.copy_(pageable), nbytes, reference=True),
        Case(group, "pinned (pin_memory, non_blocking)", lambda: dst.copy_(pinned, non_blocking=True), nbytes),
    ]


def _pipeline_cases(m: Any, n: int, d: int, iters: int) -> list[Case]:
    x = torch.randn(n, device="cuda")
    coef = torch.cat([0.5 + 0.4 * torch.rand(d), 2 * torch.rand(d) - 1]).cuda()
    ms = torch.empty(1, device="cuda")
    m.pipeline_stage_in(x, coef, n, d)
    nbytes = 2 * n * 4  # in and out over the link
    group = f"pipeline {n // MiB}M floats, d={d}, {iters} iterations"
    return [
        Case(group, "serial: 1 chunk, 1 stream", lambda: m.pipeline_run(ms, n, d, 1, 1, iters), nbytes,
             reference=True),
        Case(group, "overlapped: 8 chunks, 4 streams (7.1)", lambda: m.pipeline_run(ms, n, d, 8, 4, iters), nbytes,
             task="7.5"),
    ]


def _decode_cases(m: Any, d: int, steps: int) -> list[Case]:
    x, w = torch.randn(d, device="cuda"), torch.randn(d * d, device="cuda") / d**0.5
    t, info = torch.empty(d, device="cuda"), torch.empty(1, device="cuda")
    group = f"decode step d={d}, {steps} steps x 3 kernels"
    return [
        Case(group, "eager launches", lambda: m.decode_eager(x, w, t, d, steps), reference=True),
        Case(group, "CUDA graph replay (7.2)", lambda: m.decode_graph(x, w, t, info, d, steps), task="7.6"),
    ]


def _op_cases(m: Any, n: int) -> list[Case]:
    op = import_file(m.dir / "custom_op.py", "cc_l07_custom_op")  # once per process: its op is registered once
    x = torch.randn(n, device="cuda")

    def f(t: torch.Tensor) -> torch.Tensor:
        return op.swish(t)

    compiled = torch.compile(f, fullgraph=True)
    compiled(x)  # compile outside the timing
    group = f"swish {n // MiB}M floats via torch.library"
    return [
        Case(group, "eager", lambda: f(x), 2 * n * 4, reference=True),
        Case(group, "torch.compile(fullgraph=True)", lambda: compiled(x), 2 * n * 4, task="7.7"),
    ]


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for this lesson on module m (m.device is cuda). quick=True: smaller sizes."""
    if quick:
        return (_copy_cases(16 * MiB) + _pipeline_cases(m, 4 * MiB, 1024, 1024) + _decode_cases(m, 256, 20)
                + _op_cases(m, MiB))
    return (_copy_cases(256 * MiB) + _pipeline_cases(m, 64 * MiB, 1024, 1024) + _decode_cases(m, 256, 200)
            + _op_cases(m, 16 * MiB))
