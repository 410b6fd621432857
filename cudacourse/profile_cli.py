"""``python -m cudacourse profile <lesson> <function> [--size N ...]``: one lesson function on random inputs, on the
CPU simulator, and its memory-traffic counters (``cudacourse.profile``'s report)."""

from __future__ import annotations

import re
from typing import Any

from cudacourse.backends import backend_name
from cudacourse.lessons import lesson_dir
from cudacourse.module import load
from cudacourse.profile import ncu_command


def main(argv: list[str]) -> int:
    """Profile one lesson function on random inputs and print the report."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cudacourse profile",
                                 description="Run a lesson's function on the CPU simulator with random inputs and "
                                             "print its memory-traffic counters (Nsight Compute's metric names).")
    ap.add_argument("lesson", help="lesson folder name, e.g. 01_relu")
    ap.add_argument("function", help="launcher name, e.g. relu_grid_stride")
    ap.add_argument("--size", type=int, action="append", default=None,
                    help="value of the next int parameter (repeat: --size 64 --size 64); default 4096 for n, "
                         "128 for M, N, K, rows, cols, 0 for others such as blocks")
    ap.add_argument("--impl", choices=["student", "solution"], default=None)
    a = ap.parse_args(argv)
    if backend_name("auto") == "cuda":
        print("(this counts on the CPU simulator; to measure the same metrics on this GPU with Nsight Compute:\n  " +
              ncu_command(f"python -m cudacourse check {a.lesson}") + ")")
    # issue 39: the estimated GPU time, labelled "estimate"
    from cudacourse.estimate import NOT_COUNTED, for_call, not_estimated

    folder = lesson_dir(a.lesson, a.impl)
    defines = rf"\bdef\s+{re.escape(a.function)}\s*\(|\b{re.escape(a.function)}\s*\("
    files = [p for p in sorted(folder.glob("*.cu")) if re.search(defines, p.read_text())]
    if not files:
        twins = [p.name for p in sorted(folder.glob("*_triton.py")) if re.search(defines, p.read_text())]
        print(f"no .cu file in {folder} defines a launcher {a.function!r}" +
              (f"; {a.function} is a Triton twin ({twins[0]}), not a CUDA launcher: no counters and no estimate "
               f"({NOT_COUNTED})" if twins else ""))
        return 2
    try:
        m = load(files[0], [a.function], backend="sim", profile=True)
    except ValueError as e:  # a torch::Tensor file: its launches happen inside torch's dispatch
        print(f"error: {e}\n{not_estimated(a.function)}")
        return 2
    try:
        args = random_args(m.launchers[a.function], a.size)
        m.__getattr__(a.function)(*args)
        print(m.profile_report())
        print(for_call(m.profile_report(), m.launchers[a.function], args))
    finally:
        m.close()
    return 0


def random_args(la: Any, sizes: list[int] | None) -> list:
    """Arguments for a launcher: its int parameters from ``sizes`` in order (defaults: 128 for matrix
    dimensions M, N, K, rows, cols; 4096 for the first other one, e.g. n; 0 for the rest, e.g. blocks:
    the launcher's own choice), float scalars 1.0, and random tensors large enough for every buffer."""
    import torch

    from cudacourse.source import SCALAR_KINDS

    ints = [p for p in la.params if not p.pointer and SCALAR_KINDS.get(p.base) == "int"]
    dims = [p.name for p in ints if re.fullmatch(r"[MNK]|rows|cols|height|width", p.name)]
    vals: dict[str, int] = {}
    given = list(sizes or [])
    first = True
    for p in ints:
        if given:
            vals[p.name] = given.pop(0)
        elif p.name in dims:
            vals[p.name] = 128
        else:
            vals[p.name] = 4096 if first else 0
        first = first and p.name in dims
    dv = [vals[d] for d in dims]
    numel = max([*vals.values(), *(a * b for i, a in enumerate(dv) for b in dv[i + 1:]), 1])
    g = torch.Generator().manual_seed(0)
    out: list = []
    for p in la.params:
        if p.pointer:
            dt = getattr(torch, p.dtype) if p.dtype not in (None, "any") else torch.float32
            out.append(torch.randn(numel, generator=g).to(dt) if dt.is_floating_point
                       else torch.randint(0, 100, (numel,), generator=g).to(dt))
        elif p.name in vals:
            out.append(vals[p.name])
        else:
            out.append(1.0)
    return out
