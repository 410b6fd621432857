"""Variants of lesson 08's fused RMSNorm + 1x128 quantization around the solution's kernel (task 8.7; a GPU).

  python3 benchmarks/fp8_quant_variants.py     (prints a markdown table)

Times the solution's ``rmsnorm_quant_1x128`` (a block of 128 threads per row) and each variant of
``fp8_quant_variants.cu`` at the graded shape (65536 x 4096 bf16 -> e4m3 and 1x128 scales), against the copy
bandwidth measured in the same run (``cudacourse.bench``: median of CUDA-event samples, L2 flushed), after checking
each variant's output against the solution's on the same data. The fastest variant above the solution is the
candidate for the solution's kernel.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = ("rq_wlate_128", "rq_wlate_128_b12", "rq_wlate_64", "rq_stream_128")


def load(backend: str) -> Any:
    """The solution's fp8.cu with the variants appended (their helpers are the solution's), built for ``backend``."""
    import cudacourse as cc

    text = (ROOT / "solutions" / "08_fp8" / "fp8.cu").read_text() + "\n" + (
        Path(__file__).with_suffix(".cu").read_text())
    return cc.load(text, ["rmsnorm_quant_1x128", *VARIANTS], backend=backend)


def main() -> int:
    """Check each variant against the solution, then time all of them; print the table."""
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    import torch

    from cudacourse.bench import copy_bandwidth_gbs, time_kernel

    if not torch.cuda.is_available():
        print("fp8_quant_variants: needs an NVIDIA GPU (it times kernels); on the simulator, tests/test_08_fp8.py "
              "checks the variants", file=sys.stderr)
        return 2
    m = load("cuda")
    rows, cols = 65536, 4096
    G = cols // 128
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    nbytes = 3 * rows * cols + 4 * rows * G + 2 * cols
    copy = copy_bandwidth_gbs()
    outs = {}
    for name in ("rmsnorm_quant_1x128", *VARIANTS):
        y = torch.empty(rows, cols, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.empty(G, rows, device="cuda")
        getattr(m, name)(x, w, y, s, rows, cols, 1e-6)
        outs[name] = (y, s)
    y0, s0 = outs["rmsnorm_quant_1x128"]
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}; rmsnorm_quant_1x128 {rows}x{cols}; "
          f"copy {copy:.0f} GB/s")
    print("| version | ms | GB/s | of copy | y differs (of the solution's) | max scale rel diff |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (y, s) in outs.items():
        ms = time_kernel(lambda n=name, y=y, s=s: getattr(m, n)(x, w, y, s, rows, cols, 1e-6))
        ydiff = int((y.view(torch.uint8) != y0.view(torch.uint8)).sum())
        sdiff = float(((s - s0).abs() / s0).max())
        print(f"| {name} | {ms:.3f} | {nbytes / ms / 1e6:.0f} | {nbytes / ms / 1e6 / copy:.2f} | {ydiff} | "
              f"{sdiff:.2g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
