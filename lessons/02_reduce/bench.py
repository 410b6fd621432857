"""Benchmark cases of lesson 02 (reductions) for ``make bench`` (GPU only).

Groups (each compared with its PyTorch row and with the copy bandwidth measured in the same run):
  sum 2^28 fp32          torch.sum; the block-level versions v1-v5 run to one number by repeated passes
                         (Harris's scheme: a pass writes one partial per block, the next pass sums those);
                         v6 (grid-stride + one atomicAdd per block, task 2.7) and v7 (two-pass).
  row sum RxC fp32       torch.sum(dim=-1) for 32768x4096 and 131072x1024; row_sum (task 2.8) and the
                         thread-per-row worked example.
  row max RxC fp32       torch.amax(dim=-1); row_max.
  argmax 2^28 fp32       torch.argmax; argmax (task 2.9). Task targets are in lesson.toml.
The Triton twins (reduce_triton.py: vector_sum 2.T1, row_sum 2.T2) have a row in the sum and row sum groups; each
is compiled and autotuned on a first call before its timing, and its row's note gives that time and the config
the autotuner kept (cudacourse/triton_track.py, ``bench_case``).
``bytes`` counts each input read once and each output written once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from cudacourse import triton_track
from cudacourse.bench import Case

BLOCK = 256
# Elements each block of a block-level version reduces to one partial sum.
BLOCK_VERSIONS = {
    "reduce_v1_interleaved": BLOCK,
    "reduce_v1b_strided_index": BLOCK,
    "reduce_v2_sequential": BLOCK,
    "reduce_v3_first_add_during_load": 2 * BLOCK,
    "reduce_v4_warp_unroll_syncwarp": 2 * BLOCK,
    "reduce_v5_warp_shuffle": 2 * BLOCK,
}


def multipass(fn: Callable[..., None], x: torch.Tensor, chunk: int) -> tuple[Callable[[], None], torch.Tensor]:
    """A full sum by repeated block-level passes: returns (run, result), buffers allocated once, here.

    Each pass turns n values into ceil(n / chunk) partial sums; passes repeat until one value is left.
    """
    sizes = [x.numel()]
    while sizes[-1] > 1:
        sizes.append(math.ceil(sizes[-1] / chunk))
    bufs = [x] + [torch.empty(s, dtype=x.dtype, device=x.device) for s in sizes[1:]]

    def run() -> None:
        for i in range(len(sizes) - 1):
            fn(bufs[i], bufs[i + 1], sizes[i])

    return run, bufs[-1]


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for lesson 02 on module ``m`` (``m.device`` is cuda). ``quick``: smaller sizes."""
    dev = m.device
    log_n = 24 if quick else 28
    n = 2**log_n
    x = torch.randn(n, device=dev)
    nbytes = 4 * n
    out: list[Case] = []

    g = f"sum 2^{log_n} fp32"
    out.append(Case(g, "torch.sum", lambda: torch.sum(x), bytes=nbytes, reference=True))
    for name, chunk in BLOCK_VERSIONS.items():
        run, _ = multipass(getattr(m, name), x, chunk)
        out.append(Case(g, f"{name} (multi-pass)", run, bytes=nbytes))
    s = torch.empty(1, device=dev)
    work = torch.empty(1024, device=dev)
    out.append(Case(g, "reduce_v6_grid_stride_atomic", lambda: m.reduce_v6_grid_stride_atomic(x, s, n),
                    bytes=nbytes, task="2.7"))
    out.append(Case(g, "reduce_v7_two_pass", lambda: m.reduce_v7_two_pass(x, work, s, n), bytes=nbytes))
    twin = triton_track.bench_twin(m)
    out.append(triton_track.bench_case(twin, g, "vector_sum (Triton twin, 2.T1)", lambda t: t.vector_sum(x, s, n),
                                       ["vector_sum_kernel"], bytes=nbytes))

    shapes = [(2048, 4096), (8192, 1024)] if quick else [(32768, 4096), (131072, 1024)]
    for rows, cols in shapes:
        xr = torch.randn(rows, cols, device=dev)
        yr = torch.empty(rows, device=dev)
        rb = 4 * rows * cols + 4 * rows
        g = f"row sum {rows}x{cols} fp32"
        out.append(Case(g, "torch.sum(dim=-1)", lambda xr=xr: torch.sum(xr, dim=-1), bytes=rb, reference=True))
        out.append(Case(g, "row_sum (warp per row)", lambda xr=xr, yr=yr, r=rows, c=cols: m.row_sum(xr, yr, r, c),
                        bytes=rb, task="2.8"))
        out.append(Case(g, "row_sum_v1_thread_per_row",
                        lambda xr=xr, yr=yr, r=rows, c=cols: m.row_sum_v1_thread_per_row(xr, yr, r, c), bytes=rb))
        out.append(triton_track.bench_case(twin, g, "row_sum (Triton twin, 2.T2)",
                                           lambda t, xr=xr, yr=yr, r=rows, c=cols: t.row_sum(xr, yr, r, c),
                                           ["row_sum_kernel"], bytes=rb))
        g = f"row max {rows}x{cols} fp32"
        out.append(Case(g, "torch.amax(dim=-1)", lambda xr=xr: torch.amax(xr, dim=-1), bytes=rb, reference=True))
        out.append(Case(g, "row_max (warp per row)", lambda xr=xr, yr=yr, r=rows, c=cols: m.row_max(xr, yr, r, c),
                        bytes=rb))

    g = f"argmax 2^{log_n} fp32"
    idx = torch.empty(1, dtype=torch.int64, device=dev)
    out.append(Case(g, "torch.argmax", lambda: torch.argmax(x), bytes=nbytes + 8, reference=True))
    out.append(Case(g, "argmax (64-bit keys, atomicMax)", lambda: m.argmax(x, idx, n), bytes=nbytes + 8,
                    task="2.9"))
    return out
