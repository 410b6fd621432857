"""Block-tile variants of lesson 08's gemm_fp8_wgmma at 4096^3 (a Hopper GPU; not graded).

  python3 benchmarks/fp8_gemm_variants.py     (run by benchmarks/gpu_fp8.sh; prints a table)

The solution's kernel is a template on kWaves, the 64-row slices of A each consumer warpgroup takes: kWaves = 1
gives 128 x 128 block tiles with a 6-stage pipeline, kWaves = 2 gives 256 x 128 tiles with 4 stages (twice the
work per W tile loaded, twice the fp32 registers for the promoted sums). This script builds the solution file
with a launcher for each and times both (CUDA events, median of 20 after 3 warm-ups) against torch._scaled_mm
with the same block scales; its last line names the faster, which benchmarks/gpu_fp8.sh then makes the graded
launcher's kFp8Waves before the tests and the bench run.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SRC = r"""
#include "@FILE@"
void variant_m128(const __nv_fp8_e4m3* A, const float* sa, const __nv_fp8_e4m3* W, const float* sw,
                  __nv_bfloat16* C, int M, int N, int K) {
    launch_gemm_fp8_wgmma<1>(A, sa, W, sw, C, M, N, K);
}
void variant_m256(const __nv_fp8_e4m3* A, const float* sa, const __nv_fp8_e4m3* W, const float* sw,
                  __nv_bfloat16* C, int M, int N, int K) {
    launch_gemm_fp8_wgmma<2>(A, sa, W, sw, C, M, N, K);
}
"""


def _time(fn: object, reps: int = 20) -> float:
    for _ in range(3):
        fn()  # type: ignore[operator]
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()  # type: ignore[operator]
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main() -> int:
    """Time both tile shapes and the reference; print a markdown table."""
    import cudacourse as cc

    sys.path.insert(0, str(ROOT / "lessons" / "08_fp8"))
    import bench  # lessons/08_fp8/bench.py: the operands

    path = ROOT / "solutions" / "08_fp8" / "gemm_fp8_hopper.cu"
    m = cc.load(SRC.replace("@FILE@", str(path)), ["variant_m128", "variant_m256"], backend="cuda")
    n = 4096
    A, sa, W, sw, _a16, _w16 = bench._operands(n, n, n)
    C1, C2 = (torch.empty(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    m.variant_m128(A, sa, W, sw, C1, n, n, n)
    m.variant_m256(A, sa, W, sw, C2, n, n, n)
    ref = torch._scaled_mm(A, W.t(), scale_a=sa.t(), scale_b=sw.t(), out_dtype=torch.bfloat16)
    flops = 2 * n**3
    rows = [("torch._scaled_mm, block scales", lambda: torch._scaled_mm(A, W.t(), scale_a=sa.t(), scale_b=sw.t(),
                                                                          out_dtype=torch.bfloat16), ref),
            ("kWaves 1: 128 x 128 tiles, 6 stages", lambda: m.variant_m128(A, sa, W, sw, C1, n, n, n), C1),
            ("kWaves 2: 256 x 128 tiles, 4 stages", lambda: m.variant_m256(A, sa, W, sw, C2, n, n, n), C2)]
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}; gemm {n}^3 e4m3, bf16 out; median of 20")
    print("| version | ms | TFLOP/s | vs _scaled_mm | max abs diff vs _scaled_mm |")
    print("|---|---:|---:|---:|---:|")
    base = None
    best = (math.inf, 1)
    for waves, (name, fn, out) in enumerate(rows):
        ms = _time(fn)
        base = base or ms
        diff = float((out.float() - ref.float()).abs().max())
        print(f"| {name} | {ms:.3f} | {flops / ms / 1e9:.0f} | {base / ms:.2f}x | {diff:.3g} |")
        if waves > 0 and ms < best[0]:
            best = (ms, waves)
    print(f"\nfaster: kWaves {best[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
