"""Issue 17/21 follow-up (branch flash21): candidates for lesson 04's fp32 flash attention (CUDA 4.8, Triton 4.T3)
and lesson 03's Triton sgemm at the ragged 4092^3, timed beside their references in one GPU run.

  --sweep   every candidate: the CUDA variants of benchmarks/flash_variants.cu (a shared library built with nvcc,
            called through ctypes; id -1 is solutions/04_transformer/attention.cu as it stands), the Triton kernels
            of benchmarks/flash_sweep_kernels.py at fixed configs ("main": 4.T3 before this change; "split": the
            same with the score product split over the head dim), and the sgemm twin at 4096^3 and 4092^3; each is
            checked against PyTorch first (max abs error) and timed by cudacourse.bench.time_kernel (median of CUDA
            events, L2 flushed before each run; compile and autotune before timing, not in it).

Build and run it (GPU):
  nvcc -O3 -std=c++17 -arch=sm_90a -shared -Xcompiler -fPIC benchmarks/flash_variants.cu -o flash_variants.so
  python benchmarks/flash_sweep.py --sweep --so flash_variants.so
Its H100 output (before the change; id -1 was then the 4 x 4 kernel): results/nvidia-h100-80gb-hbm3/flash21/sweep.txt.
The final measurement of the chosen versions is benchmarks/triton_twins_bench.py --groups (cudacourse.bench).
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ["rpt4 nt128 (as 4.8) minblocks 4", "rpt4 nt128 kfix minblocks 4", "rpt4 nt128 kfix fexp minblocks 4",
            "rpt4 nt256 minblocks 2", "rpt4 nt256 kfix fexp minblocks 2",
            "rpt8 nt128", "rpt8 nt128 kfix fexp", "rpt8 nt64 kfix fexp", "rpt8 nt256 kfix fexp",
            "rpt4 kpt8 nt128 kfix fexp (BK 64)", "rpt4 kpt8 nt256 kfix fexp (BQ 128, BK 64)",
            "rpt8 nt128 kfix fexp minblocks 3", "rpt4 nt128 kfix fexp (no minblocks)"]
TRITON_CFGS = [("main", 64, 64, 4, 2), ("main", 64, 32, 8, 2), ("main", 64, 32, 8, 3), ("main", 128, 32, 16, 2),
               ("main", 32, 32, 4, 2), ("split", 64, 32, 4, 2), ("split", 64, 32, 4, 3), ("split", 128, 32, 8, 2),
               ("split", 64, 64, 8, 2), ("split", 64, 64, 8, 3), ("split", 128, 64, 8, 2)]


def attention_rows(B: int, H: int, N: int, causal: bool, tm: Any, row: Any, lib: Any, split: Any) -> None:
    """References, CUDA variants and Triton configs at one attention shape (d = 64)."""
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cudacourse.triton_track import size_class

    d = 64
    group = f"att B{B} H{H} N{N} {'causal' if causal else 'full'}"
    q, k, v = (torch.randn(B * N, H * d, device="cuda") for _ in range(3))
    o = torch.empty_like(q)
    qh, kh, vh = (t.view(B, N, H, d).transpose(1, 2).contiguous() for t in (q, k, v))
    scale = 1 / math.sqrt(d)
    flops = 4 * B * H * N * N * d / (2 if causal else 1)

    def math_ref() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
    ref = math_ref().transpose(1, 2).reshape(B * N, H * d)
    ref_ms = tm(math_ref)
    sdpa_ms = tm(lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal))
    row(group, "math path (reference)", ref_ms, ref_ms, sdpa_ms, flops)
    row(group, "SDPA default", sdpa_ms, ref_ms, sdpa_ms, flops)

    def err() -> str:
        torch.cuda.synchronize()
        return f"{(o - ref).abs().max().item():.2e}"

    def cuda_fn(i: int) -> Any:
        args = [ctypes.c_void_p(t.data_ptr()) for t in (q, k, v, o)]
        return lambda: lib.flash_variant(i, *args, B, H, N, ctypes.c_float(scale), int(causal))

    for i, name in [(-1, "attention.cu attention_flash (solution)"), *enumerate(VARIANTS)]:
        fn = cuda_fn(i)
        o.zero_()
        rc = fn()
        e = err()
        row(group, f"cuda {name}", tm(fn), ref_ms, sdpa_ms, flops, f"{e} rc {rc}")

    def triton_fn(kern: Any, extra: tuple, bq: int, bk: int, nw: int, ns: int) -> Any:
        grid = (triton.cdiv(N, bq), B * H)
        return lambda: kern[grid](q, k, v, o, H, N, d, scale * 1.4426950408889634, int(causal), *extra, BQ=bq, BK=bk,
                                  BLOCK_D=64, num_warps=nw, num_stages=ns)

    for kind, bq, bk, nw, ns in TRITON_CFGS:
        kern = split.attention_trans_kernel if kind == "main" else split.attention_split_kernel
        fn = triton_fn(kern, (size_class(N, 1024),) if kind == "main" else (), bq, bk, nw, ns)
        try:
            o.zero_()
            t0 = time.time()
            fn()
            e = err()
            row(group, f"triton {kind} {bq}x{bk} w{nw} s{ns}", tm(fn), ref_ms, sdpa_ms, flops,
                f"{e} compile {time.time() - t0:.1f}s")
        except Exception as ex:  # noqa: BLE001
            print(group, kind, bq, bk, nw, ns, "FAILED", str(ex)[:200], flush=True)


def gemm_rows(n: int, tm: Any, row: Any, gem: Any) -> None:
    """cuBLAS and the sgemm twin at n^3."""
    import torch

    A, Bm = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    C = torch.empty(n, n, device="cuda")
    flops = 2 * n**3
    ref_ms = tm(lambda: torch.matmul(A, Bm))
    row(f"sgemm {n}^3", "cuBLAS (reference)", ref_ms, ref_ms, None, flops)
    t0 = time.time()
    gem.sgemm(A, Bm, C, n, n, n)
    torch.cuda.synchronize()
    e = f"{(C - A @ Bm).abs().max().item():.2e}"
    row(f"sgemm {n}^3", "triton twin (VEC=4 when n % 4 == 0)", tm(lambda: gem.sgemm(A, Bm, C, n, n, n)), ref_ms,
        None, flops, f"{e} autotune {time.time() - t0:.1f}s {gem.sgemm_kernel.best_config}")
    for cfg, t in (getattr(gem.sgemm_kernel, "configs_timings", None) or {}).items():
        print(f"   sgemm {n} config {cfg}: {t}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Time the candidates; print one table line each."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--so", default="flash_variants.so")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch
    import triton

    from cudacourse.bench import time_kernel
    from cudacourse.loader import import_file
    from cudacourse.triton_track import load

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(torch.cuda.get_device_name(), torch.__version__, "triton", triton.__version__, flush=True)
    tm = lambda fn: time_kernel(fn, warmup=3, reps=args.reps)  # noqa: E731
    lib = ctypes.CDLL(str(Path(args.so).resolve()))
    split = import_file(ROOT / "benchmarks/flash_sweep_kernels.py", "flash_sweep_kernels")
    gem = load(ROOT / "solutions/03_gemm/gemm_triton.py", backend="cuda")
    out = []

    def row(group: str, name: str, ms: float, ref_ms: float, sdpa_ms: float | None, flops: float,
            err: str = "") -> None:
        line = (f"{group:34s} {name:34s} {ms:8.3f} ms {flops / ms / 1e9:6.1f} TFLOP/s  vs ref {ref_ms / ms:5.2f}x"
                + (f"  vs sdpa {sdpa_ms / ms:5.2f}x" if sdpa_ms else "") + (f"  err {err}" if err else ""))
        print(line, flush=True)
        out.append(line)

    for B, H, N, causal in [(8, 16, 1024, False), (8, 16, 4096, False), (8, 16, 4096, True)]:
        attention_rows(B, H, N, causal, tm, row, lib, split)
    for n in (4096, 4092):
        gemm_rows(n, tm, row, gem)
    Path(os.environ.get("OUT", ".")).joinpath("sweep.txt").write_text("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
