"""Check and time lesson 05's Hopper GEMM (task 5.12, gemm_wgmma) against cuBLAS fp16 on an H100/H200.

Builds solutions/05_tensor_cores/gemm_hopper.cu (sm_90a: run with TORCH_CUDA_ARCH_LIST=9.0a) and, with
--variants, copies of it with a few constants or lines substituted (VARIANTS below: what each one tests).
Each build is first checked against a float32 torch.matmul of the same bf16 inputs on fresh random data with
the output poisoned with NaN (ragged M/N/K, odd N for the scalar store path, and the three timed sizes), then
timed with cudacourse.bench.time_stats (CUDA events, L2 flush, median) next to cuBLAS fp16
(torch.matmul(Ah, Wh.T, out=Ch), as lessons/05_tensor_cores/bench.py does) at 4096^3, 4096x4096x1024 and
4000^3. The cuBLAS reference is timed before and after the kernels; the ratio uses the first. Prints a short
table last.

    PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=9.0a python benchmarks/wgmma_sweep.py [--variants] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import cudacourse as cc
from cudacourse.bench import time_stats

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "solutions/05_tensor_cores/gemm_hopper.cu"
HEADER = ROOT / "solutions/05_tensor_cores/cc_hopper.h"
SIZES = [("4096^3", 4096, 4096, 4096), ("4096x4096x1024", 4096, 4096, 1024), ("4000^3 ragged", 4000, 4000, 4000)]
# odd N: C stored from registers; N % 4 == 0: C stored by TMA (ragged M and N too)
CHECKS = [(37, 45, 72), (131, 129, 136), (300, 257, 520), (1000, 999, 1032), (129, 255, 8),
          (37, 44, 72), (300, 260, 520), (1000, 1004, 1032), (129, 4096, 64)]
# name: [(text in the solution, replacement)], each text must occur in the file; or the name of a file (with
# cc_hopper.h copied beside it); or "cluster", made by benchmarks/wgmma17/make_cluster_variant.py.
VARIANTS: dict[str, list[tuple[str, str]] | str] = {
    # the first warp-specialised version: one block tile per block, no persistent loop
    "v1_nonpersistent": "benchmarks/wgmma17/gemm_hopper_v1.cu",
    # v1 made persistent; C stored from registers
    "v2_persistent": "benchmarks/wgmma17/gemm_hopper_v2.cu",
    # the main loop alone: no C stores (its time minus the solution's is what the epilogue costs); not checked
    "no_epilogue": [("            if (tma_store) {", "            if (K < 0) {"),
                    ("if (r >= M) continue;", "if (r >= M || K > 0) continue;")],
    # more C buffers for fewer stages
    "stages3_cbufs5": [("kHStages = 4", "kHStages = 3"), ("kHCBufs = 2", "kHCBufs = 5")],
    "stages2_cbufs8": [("kHStages = 4", "kHStages = 2"), ("kHCBufs = 2", "kHCBufs = 8")],
    # v2 with clusters of 2 blocks along M, W tile multicast by TMA to both (last: a hang here loses nothing else)
    "cluster2_multicast": "cluster",
}
UNCHECKED = {"no_epilogue"}


def build(name: str, subs: list[tuple[str, str]] | str, tmp: Path) -> cc.Module:
    """The solution, or a copy of it with ``subs`` applied, or the variant file ``subs`` names, built for this GPU."""
    fns = ["gemm_wgmma", "gemm_wgmma_supported"]
    if not subs:
        return cc.load(SRC, fns, backend="cuda")
    d = tmp / name
    if subs == "cluster":
        subprocess.run([sys.executable, str(ROOT / "benchmarks/wgmma17/make_cluster_variant.py"), str(d)], check=True)
        return cc.load(d / SRC.name, fns, backend="cuda")
    if isinstance(subs, str):
        d.mkdir()
        shutil.copy(HEADER, d / HEADER.name)
        shutil.copy(ROOT / subs, d / SRC.name)
        return cc.load(d / SRC.name, fns, backend="cuda")
    text = SRC.read_text()
    for old, new in subs:
        if old not in text:
            raise SystemExit(f"variant {name}: {old!r} is not in {SRC.name}; update VARIANTS")
        text = text.replace(old, new)
    d.mkdir()
    shutil.copy(HEADER, d / HEADER.name)
    (d / SRC.name).write_text(text)
    return cc.load(d / SRC.name, fns, backend="cuda")


def check(m: cc.Module, M: int, N: int, K: int, g: torch.Generator) -> float:
    """Relative Frobenius error of gemm_wgmma against a float32 matmul; raises if any output was left unwritten."""
    A = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    W = torch.randn(N, K, device="cuda", generator=g).bfloat16()
    C = torch.full((M, N), float("nan"), device="cuda")
    m.gemm_wgmma(A, W, C, M, N, K)
    torch.cuda.synchronize()
    if not torch.isfinite(C).all():
        raise AssertionError(f"{M}x{N}x{K}: {int((~torch.isfinite(C)).sum())} outputs not written (NaN left)")
    ref = A.float() @ W.float().T
    return float((C - ref).norm() / ref.norm())


def main() -> None:
    """Build, check and time; print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", action="store_true", help="also the VARIANTS copies of the solution")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to DIR/wgmma_sweep.txt")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    names: dict[str, list[tuple[str, str]] | str] = {"solution": []} | (VARIANTS if args.variants else {})
    g = torch.Generator(device="cuda").manual_seed(17)
    inputs = {}
    for label, M, N, K in SIZES:
        Ah = torch.randn(M, K, device="cuda", generator=g).half()
        Wh = torch.randn(N, K, device="cuda", generator=g).half()
        inputs[label] = (Ah, Wh, Ah.bfloat16(), Wh.bfloat16(), torch.empty(M, N, device="cuda"),
                         torch.empty(M, N, device="cuda", dtype=torch.half))

    def cublas(label: str) -> tuple[float, float]:
        Ah, Wh, _, _, _, Ch = inputs[label]
        return time_stats(lambda: torch.matmul(Ah, Wh.T, out=Ch))

    ref = {label: cublas(label) for label, *_ in SIZES}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, subs in names.items():
            m = build(name, subs, Path(tmp))
            ok = torch.zeros(1, dtype=torch.int32, device="cuda")
            m.gemm_wgmma_supported(ok)
            if int(ok.item()) != 1:
                raise SystemExit("gemm_wgmma_supported says 0: build with TORCH_CUDA_ARCH_LIST=9.0a on a Hopper GPU")
            try:
                shapes = CHECKS + [s[1:] for s in SIZES]
                errs = [0.0] if name in UNCHECKED else [check(m, M, N, K, g) for M, N, K in shapes]
            except AssertionError as e:  # keep going: the other builds are still worth their numbers
                print(f"{name}: WRONG: {e}")
                rows.append((name, "check", float("nan"), 0.0, 0.0, 0.0, float("inf")))
                continue
            worst = max(errs)
            print(f"{name}: rel. errors {', '.join(f'{e:.1e}' for e in errs)}")
            for label, M, N, K in SIZES:
                _, _, A, W, C, _ = inputs[label]
                ms, spread = time_stats(lambda m=m, A=A, W=W, C=C, M=M, N=N, K=K: m.gemm_wgmma(A, W, C, M, N, K))
                rows.append((name, label, ms, spread, 2 * M * N * K / ms / 1e9, ref[label][0] / ms, worst))
                print(f"  {name} {label}: {ms:.4f} ms, {rows[-1][4]:.1f} TFLOP/s, {rows[-1][5]:.3f}x cuBLAS",
                      flush=True)
    ref2 = {label: cublas(label) for label, *_ in SIZES}
    lines = ["", "| version | size | ms | spread | TFLOP/s | vs cuBLAS fp16 | max rel. err |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for label, M, N, K in SIZES:
        for r in (ref[label], ref2[label]):
            lines.append(f"| cuBLAS fp16 | {label} | {r[0]:.4f} | {r[1]:.2f} | {2 * M * N * K / r[0] / 1e9:.1f} | | |")
    for name, label, ms, spread, tf, ratio, worst in rows:
        err = "not checked" if name in UNCHECKED else f"{worst:.1e}"
        lines.append(f"| {name} | {label} | {ms:.4f} | {spread:.2f} | {tf:.1f} | {ratio:.3f}x | {err} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "wgmma_sweep.txt").write_text(table + "\n")
    if any(r[6] > 1e-3 for r in rows):
        raise SystemExit("a build is wrong: relative error above 1e-3")


if __name__ == "__main__":
    main()
