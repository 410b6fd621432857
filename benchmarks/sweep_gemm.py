"""Sweep of lesson 03's warp-tiled SGEMM (sgemm_v8_warptile_kernel) configurations on a GPU.

Builds solutions/03_gemm/gemm.cu once with extra launchers, one per configuration of the template
(BM, BN, BK, WM, WN, TM, TN, LR, MINB, PAD), checks each against a float64 reference (fresh random inputs,
NaN-poisoned outputs: float4 path, scalar path, unaligned views, and 4096^3 / 4092^3 spot checks), then
times each at 4096^3 and 4092^3 with cudacourse.bench.time_stats (time_kernel's CUDA events, L2 flush,
median) next to cuBLAS torch.matmul with TF32 off, v7 and v8 (those three twice). Prints a short table last.

    PYTHONPATH=$PWD python benchmarks/sweep_gemm.py [--quick] [--run2]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

import cudacourse as cc
from cudacourse.bench import time_stats

ROOT = Path(__file__).resolve().parents[1]
#        name                 BM   BN  BK  WM  WN  TM  TN LR MINB PAD
CONFIGS = [
    # Run 1 (H100 80GB HBM3): the best was c128_8x16_bk16, 0.863x cuBLAS at 4096^3 (v7: 0.795x).
    ("c128_16x8_bk8",       128, 128, 8, 64, 64, 16, 8, 4, 2, 4),
    ("c128_16x8_bk16",      128, 128, 16, 64, 64, 16, 8, 4, 2, 4),
    ("c128_8x16_bk8",       128, 128, 8, 64, 64, 8, 16, 8, 2, 4),
    ("c128_8x16_bk16",      128, 128, 16, 64, 64, 8, 16, 8, 2, 4),
    ("c256_8x8_w32x64_bk8", 128, 128, 8, 32, 64, 8, 8, 4, 2, 4),
    ("c256_8x8_w32x64_bk16", 128, 128, 16, 32, 64, 8, 8, 4, 2, 4),
    ("c256_8x8_w64x32_bk8", 128, 128, 8, 64, 32, 8, 8, 8, 2, 4),
    ("c256_8x8_w32x64_bk8_min1", 128, 128, 8, 32, 64, 8, 8, 4, 1, 4),
    ("c256_128x256_16x8_bk8", 128, 256, 8, 64, 64, 16, 8, 4, 1, 4),
    ("c256_256x128_16x8_bk8", 256, 128, 8, 64, 64, 16, 8, 4, 1, 4),
    ("c128_64x128_8x8_bk8", 64, 128, 8, 32, 64, 8, 8, 4, 3, 4),
    ("c128_64x128_8x8_bk16", 64, 128, 16, 32, 64, 8, 8, 4, 3, 4),
    # Run 2: the best was c256_128x256_8x16_bk16_p0, 0.877x at 4096^3, 0.939x at 4092^3; it is now v8.
    ("c256_256x128_8x16_bk8", 256, 128, 8, 64, 64, 8, 16, 8, 1, 4),
    ("c256_128x256_8x16_bk8", 128, 256, 8, 64, 64, 8, 16, 8, 1, 4),
    ("c256_256x128_16x8_bk16_p0", 256, 128, 16, 64, 64, 16, 8, 4, 1, 0),
    ("c256_256x128_8x16_bk16_p0", 256, 128, 16, 64, 64, 8, 16, 8, 1, 0),
    ("c256_128x256_16x8_bk16_p0", 128, 256, 16, 64, 64, 16, 8, 4, 1, 0),
    ("c256_128x256_8x16_bk16_p0", 128, 256, 16, 64, 64, 8, 16, 8, 1, 0),
    ("c128_8x16_bk16_p0", 128, 128, 16, 64, 64, 8, 16, 8, 2, 0),
    ("c128_w32x128_8x16_bk16", 128, 128, 16, 32, 128, 8, 16, 4, 2, 4),
    ("c128_w128x32_16x8_bk16", 128, 128, 16, 128, 32, 16, 8, 8, 2, 4),
]
if "--run2" in sys.argv:  # only the configurations of the second run
    CONFIGS = CONFIGS[12:]


def source() -> str:
    text = (ROOT / "solutions/03_gemm/gemm.cu").read_text()
    for name, *p in CONFIGS:
        args = ", ".join(map(str, p))
        text += (f"\nvoid sweep_{name}(const float* A, const float* B, float* C, int M, int N, int K) {{\n"
                 f"    sgemm_v8_launch<{args}>(A, B, C, M, N, K);\n}}\n")
    return text


def relerr(out: torch.Tensor, ref: torch.Tensor) -> float:
    if not bool(torch.isfinite(out).all()):
        return float("inf")
    return float((out.double() - ref).norm() / ref.norm())


def check(fn, M: int, N: int, K: int, unaligned: bool = False) -> float:
    g = torch.Generator(device="cuda").manual_seed(hash((M, N, K, unaligned, time.time_ns())) & 0xFFFFFFFF)
    if unaligned:
        A = torch.randn(M * K + 1, device="cuda", generator=g)[1:].view(M, K)
        B = torch.randn(K * N + 1, device="cuda", generator=g)[1:].view(K, N)
        C = torch.full((M * N + 1,), float("nan"), device="cuda")[1:].view(M, N)
    else:
        A = torch.randn(M, K, device="cuda", generator=g)
        B = torch.randn(K, N, device="cuda", generator=g)
        C = torch.full((M, N), float("nan"), device="cuda")
    fn(A, B, C, M, N, K)
    torch.cuda.synchronize()
    return relerr(C, A.double() @ B.double())


def main() -> None:
    quick = "--quick" in sys.argv
    torch.backends.cuda.matmul.allow_tf32 = False
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    t0 = time.time()
    m = cc.load(source(), ["sgemm_v7_tuned", "sgemm_v8_warptile"] + [f"sweep_{c[0]}" for c in CONFIGS],
                backend="cuda", timeout_s=60.0)
    names = ["sgemm_v7_tuned", "sgemm_v8_warptile"] + [f"sweep_{c[0]}" for c in CONFIGS]
    fns = {n: getattr(m, n) for n in names}
    fns["sgemm_v7_tuned"](*[torch.zeros(1, device="cuda")] * 3, 1, 1, 1)  # build
    print(f"built in {time.time() - t0:.0f} s", flush=True)

    def cublas(A, B, C, M, N, K):
        torch.matmul(A, B, out=C)

    errs: dict[str, float] = {}
    for n, fn in fns.items():
        e = max(check(fn, 1000, 1000, 260), check(fn, 513, 1025, 2049), check(fn, 77, 131, 36, unaligned=True),
                check(fn, 1, 1, 1), check(fn, 4096, 4096, 4096), check(fn, 4092, 4092, 4092))
        errs[n] = e
        print(f"check {n}: max rel err {e:.2e}", flush=True)
    errs["cuBLAS"] = max(check(cublas, 4096, 4096, 4096), check(cublas, 4092, 4092, 4092))

    sizes = [4096, 4092] if not quick else [2048]
    res: dict[tuple[str, int], tuple[float, float]] = {}
    order = ["cuBLAS"] + names + ["cuBLAS#2", "sgemm_v7_tuned#2", "sgemm_v8_warptile#2"]
    for s in sizes:
        A, B = torch.randn(s, s, device="cuda"), torch.randn(s, s, device="cuda")
        C = torch.full((s, s), float("nan"), device="cuda")
        for n in order:
            base = n.split("#")[0]
            fn = cublas if base == "cuBLAS" else fns[base]
            res[(n, s)] = time_stats(lambda fn=fn, A=A, B=B, C=C, s=s: fn(A, B, C, s, s, s), warmup=10, reps=100,
                                     max_s=3.0)
            print(f"{n} {s}: {res[(n, s)][0]:.3f} ms spread {res[(n, s)][1]:.3f}", flush=True)

    print("\n| variant | " + " | ".join(f"ms {s} | TFLOP/s | x cuBLAS" for s in sizes) + " | max rel err |")
    print("|---|" + "---:|---:|---:|" * len(sizes) + "---:|")
    for n in order:
        cells = []
        for s in sizes:
            ms = res[(n, s)][0]
            ref = (res[("cuBLAS", s)][0] + res[("cuBLAS#2", s)][0]) / 2
            cells += [f"{ms:.3f}", f"{2 * s**3 / ms / 1e9:.1f}", f"{ref / ms:.3f}"]
        print(f"| {n} | " + " | ".join(cells) + f" | {errs[n.split('#')[0]]:.1e} |")


if __name__ == "__main__":
    main()
