"""Issue 17, branch mma19: the kernels one `ncu --set full` run profiles, each launched once on random inputs.

    wg   task 5.12's gemm_wgmma at 4096^3, then at 4000x4000x4096 (same tiles and k-tiles; only M and N ragged)
    mma  benchmarks/mma19_tma.cu's NAMES (default mma_tma_256x128) at 4096^3

    ncu --set full --clock-control none -k regex:gemm_wgmma -o OUT/ncu_wg \
        python3 benchmarks/mma19_ncu.py wg
(PYTHONPATH at the repository root, TORCH_CUDA_ARCH_LIST=9.0a.) The first call of each kernel builds nothing
that ncu counts: builds are cached by the sweep that runs first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import cudacourse as cc

ROOT = Path(__file__).resolve().parent.parent
SOL = ROOT / "solutions/05_tensor_cores"


def operands(M: int, N: int, K: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random bf16 A (M x K), W (N x K) and a NaN-filled fp32 C (M x N)."""
    a = torch.randn(M, K, device="cuda").bfloat16()
    w = torch.randn(N, K, device="cuda").bfloat16()
    return a, w, torch.full((M, N), float("nan"), device="cuda")


def main() -> None:
    """Launch the kernels of the chosen group once each."""
    if len(sys.argv) < 2 or sys.argv[1] not in ("wg", "mma"):
        raise SystemExit("usage: mma19_ncu.py wg|mma [NAMES...]")
    if sys.argv[1] == "wg":
        hop = cc.load(SOL / "gemm_hopper.cu", ["gemm_wgmma"], backend="cuda")
        for M, N, K in [(4096, 4096, 4096), (4000, 4000, 4096)]:
            a, w, c = operands(M, N, K)
            hop.gemm_wgmma(a, w, c, M, N, K)
            torch.cuda.synchronize()
            print(f"gemm_wgmma {M}x{N}x{K}: C finite {bool(torch.isfinite(c).all())}", flush=True)
    else:
        names = sys.argv[2:] or ["mma_tma_256x128"]
        src = (ROOT / "benchmarks/mma19_tma.cu").read_text()
        src = src.replace("@MMA@", str(SOL / "cc_mma.h")).replace("@HOPPER@", str(SOL / "cc_hopper.h"))
        tm = cc.load(src, names, backend="cuda")
        a, w, c = operands(4096, 4096, 4096)
        for n in names:
            getattr(tm, n)(a, w, c, 4096, 4096, 4096)
            torch.cuda.synchronize()
            print(f"{n} 4096^3: C finite {bool(torch.isfinite(c).all())}", flush=True)


if __name__ == "__main__":
    main()
