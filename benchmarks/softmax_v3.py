"""Lesson 04 softmax on a GPU: correctness against float64 torch, then timings of the variants.

    PYTHONPATH=$PWD python benchmarks/softmax_v3.py            (GPU only; prints a short table last)

Variants: torch.softmax; the old graded launcher (task 4.1's two-pass online kernel alone,
``softmax_two_pass``); the new ``softmax`` (rows <= 16384 floats go to softmax_v3, the row in
registers); softmax_v3 with N float4s per thread forced (``softmax_v3_cfg``); a device-to-device copy of
the same bytes. Times: cudacourse.bench.time_stats (CUDA events, L2 flushed before each run, median of
up to 50 after 5 warm-ups), each measured twice, interleaved, to show the spread.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import torch

import cudacourse as cc
from cudacourse.bench import time_stats

ROOT = Path(__file__).resolve().parent.parent
SIM = os.environ.get("SIMTEST") == "1"  # dry run of the checks on the CPU simulator (small shapes, no timing)
DEV = "cpu" if SIM else "cuda"
EXTRA = r"""
void softmax_two_pass(const float* x, float* y, int rows, int cols) {
    if (rows == 0 || cols == 0) return;
    softmax_kernel<<<rows, row_threads(cols)>>>(x, y, cols);
}
void softmax_v3_cfg(const float* x, float* y, int rows, int cols, int n) {
    switch (n) {
        case 1: launch_softmax_v3<1, true>(x, y, rows, cols); break;
        case 2: launch_softmax_v3<2, true>(x, y, rows, cols); break;
        case 4: launch_softmax_v3<4, true>(x, y, rows, cols); break;
        case 8: launch_softmax_v3<8, true>(x, y, rows, cols); break;
        case 16: launch_softmax_v3<16, false>(x, y, rows, cols); break;  // scalar items
    }
}
"""


def check_one(name: str, fn, x: torch.Tensor, rows: int, cols: int) -> str | None:
    y_full = torch.full((rows * cols + 64,), math.nan, device=DEV)
    y = y_full[: rows * cols]
    x0 = x.clone()
    fn(x, y, rows, cols)
    if not SIM:
        torch.cuda.synchronize()
    assert torch.equal(x.nan_to_num(), x0.nan_to_num()), f"{name}: x modified"
    if not torch.isnan(y_full[rows * cols:]).all():
        return f"{name} {rows}x{cols}: wrote past the end"
    ref = torch.softmax(x.double().view(rows, cols), dim=1)
    yv = y.view(rows, cols).double()
    nan_ref, nan_y = torch.isnan(ref), torch.isnan(yv)
    if not torch.equal(nan_ref, nan_y):
        return f"{name} {rows}x{cols}: NaN mismatch ({int(nan_y.sum())} vs ref {int(nan_ref.sum())})"
    ok = ~nan_ref
    err = ((yv - ref).abs()[ok] - 3e-5 * ref.abs()[ok] - 1e-12).max().item() if ok.any() else -1
    if err > 0:
        return f"{name} {rows}x{cols}: max excess error {err:.3g}"
    return None


def main() -> int:
    src = (ROOT / "solutions/04_transformer/norms.cu").read_text() + EXTRA
    m = cc.load(src, backend="sim" if SIM else "cuda", check=False)
    g = torch.Generator(device=DEV).manual_seed(int(os.environ.get("SEED", "1234")))
    variants = {
        "softmax": m.softmax,
        "v3_row_in_registers": m.softmax_v3_row_in_registers,
        "two_pass": m.softmax_two_pass,
    }
    failures = []
    shapes = [(257, 1), (257, 7), (257, 32), (257, 33), (257, 1000), (257, 1024), (257, 4096), (257, 4099),
              (129, 8192), (65, 16384), (65, 16380), (33, 16387), (33, 16388), (17, 20000), (9, 65536)]
    if SIM:
        shapes = [(5, c) for _, c in shapes[:13]]
    n_checks = 0
    for rows, cols in shapes:
        for scale in (3.0, 1e4):
            x = torch.randn(rows, cols, device=DEV, generator=g) * scale
            for name, fn in variants.items():
                n_checks += 1
                r = check_one(name, fn, x, rows, cols)
                if r:
                    failures.append(r)
        # -inf entries; row 0 a single finite entry; row 1 all -inf (NaN, as torch)
        x = torch.randn(rows, cols, device=DEV, generator=g) * 2
        drop = torch.rand(rows, cols, device=DEV, generator=g) < 0.4
        drop[:, 0] = False
        drop[0, 1:] = True
        drop[1, :] = True
        x[drop] = -math.inf
        for name, fn in variants.items():
            n_checks += 1
            r = check_one(name, fn, x, rows, cols)
            if r:
                failures.append(r)
        # unaligned views (x and y start 1 float into their buffers): scalar path
        if cols % 4 == 0:
            buf = torch.randn(rows * cols + 1, device=DEV, generator=g)
            for name, fn in variants.items():
                n_checks += 1
                r = check_one(name + "(unaligned)", fn, buf[1:], rows, cols)
                if r:
                    failures.append(r)
    for n_, cols in ((1, 1024), (2, 2048), (4, 4096), (8, 8192), (4, 16384), (8, 16384), (16, 4096),
                     (16, 16384), (1, 4096), (2, 4096), (8, 4096)):
        x = torch.randn(65, cols, device=DEV, generator=g) * 3
        n_checks += 1
        r = check_one(f"v3_cfg{n_}", lambda a, b, r_, c_, n_=n_: m.softmax_v3_cfg(a, b, r_, c_, n_), x, 65, cols)
        if r:
            failures.append(r)
    print(f"correctness: {n_checks} checks, {len(failures)} failures", flush=True)
    for f in failures:
        print("  FAIL", f, flush=True)

    if SIM:
        return 1 if failures else 0
    lines = []
    for rows, cols in ((32768, 4096), (8192, 16384)):
        x = torch.randn(rows, cols, device=DEV, generator=g)
        y = torch.full_like(x, math.nan)
        nbytes = 2 * x.numel() * 4
        cands = {
            # (default arguments bind this shape's tensors: the lambdas are timed within this iteration)
            "copy": lambda x=x, y=y: y.copy_(x),
            "torch.softmax": lambda x=x: torch.softmax(x, dim=1),
            "old softmax (two-pass 4.1)": lambda x=x, y=y, rows=rows, cols=cols: m.softmax_two_pass(x, y, rows, cols),
            "new softmax": lambda x=x, y=y, rows=rows, cols=cols: m.softmax(x, y, rows, cols),
        }
        for n_ in ((1, 2, 4, 8) if cols == 4096 else (4, 8)):
            cands[f"v3 N={n_} float4 ({cols // 4 // n_} thr)"] = (
                lambda n_=n_, x=x, y=y, rows=rows, cols=cols: m.softmax_v3_cfg(x, y, rows, cols, n_))
        if cols == 4096:
            cands["v3 N=16 scalar (256 thr)"] = (
                lambda x=x, y=y, rows=rows, cols=cols: m.softmax_v3_cfg(x, y, rows, cols, 16))
        res: dict[str, list[float]] = {k: [] for k in cands}
        spread: dict[str, float] = {}
        for _rep in range(2):
            for k, fn in cands.items():
                ms, sp = time_stats(fn)
                res[k].append(ms)
                spread[k] = max(spread.get(k, 0.0), sp)
        torch.cuda.synchronize()
        copy_ms = min(res["copy"])
        torch_ms = min(res["torch.softmax"])
        for k, v in res.items():
            ms = min(v)
            lines.append(f"{rows}x{cols:<6} {k:<30} {v[0]:.3f} {v[1]:.3f} ms  {nbytes / ms / 1e6:6.0f} GB/s  "
                         f"{copy_ms / ms * 100:5.1f}% copy  {torch_ms / ms:5.2f}x torch  (p10-p90 {spread[k]:.2f})")
    print("\nshape        variant                        run1  run2        bandwidth   of copy    vs torch")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
