"""H100 timings of the lesson 03/05 kernels changed on 2026-11-25 (linear on v8, WMMA tiled, bf16 bias+GELU), with
their references, in one process: the rows of ``make bench`` for those kernels only (the bench CLI selects lessons,
not rows). Run on the GPU machine from the course's top folder:
``CUDA_COURSE_BUILD=/tmp/b python3 benchmarks/rows_03_05.py OUT_FOLDER``; its output of that day is in
results/nvidia-h100-80gb-hbm3/rows_03_05/.

Rows (each group's reference timed in the same run, CUDA events, L2 flushed, median of up to 50 runs, the
course's cudacourse.bench.run_lesson with the lesson bench files' own case builders):
  03_gemm  sgemm 4096^3 / 4092^3 ragged: cuBLAS (TF32 off), sgemm_v8_warptile   (v8 gained the Linear flag)
           linear 4096x4096->4096: F.linear (TF32 off), linear                   issue 17 target >= 0.80x
  05       gemm 4096^3: cuBLAS fp16, wmma_gemm_naive, wmma_gemm_tiled            issue 17 target >= 0.25x
           gemm 4000^3 ragged: cuBLAS fp16, wmma_gemm_tiled                      (no target; ragged check)
           bias+GELU 16384x4096 bf16: F.gelu(x + b), scalar (worked), bias_gelu_bf16   target >= 0.90 of copy,
           and a diagnostic row: the same 2-D kernel with the old erff gelu_f32 (which change pays)
Writes results.md / results.json under the folder given as argv[1] and prints a verdict per target.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from cudacourse import bench
from cudacourse.bench import Case
from cudacourse.loader import import_file

T0 = time.monotonic()
OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
ROOT = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", flush=True)


b3 = import_file(ROOT / "lessons/03_gemm/bench.py", "perf17_bench03")
b5 = import_file(ROOT / "lessons/05_tensor_cores/bench.py", "perf17_bench05")


def cases03(m, quick: bool = False) -> list[Case]:
    n = 4096
    out = b3.gemm_group(m, f"sgemm {n}^3 fp32", n, n, n, ["sgemm_v8_warptile"], tasks={"sgemm_v8_warptile": "3.6"})
    out += b3.gemm_group(m, "sgemm 4092^3 fp32 ragged", 4092, 4092, 4092, ["sgemm_v8_warptile"],
                         {"sgemm_v8_warptile": 0.75})
    out += b3.linear_group(m, n)
    return out


def cases05(m, quick: bool = False) -> list[Case]:
    out = b5._gemm_group(m, "gemm 4096^3 16-bit in, fp32 accumulate", 4096, 4096, 4096,
                         [("wmma_gemm_naive", None), ("wmma_gemm_tiled", None)])
    out[-1].target = 0.25  # issue 17's target (the graded task 5.7 asks 0.10)
    out += b5._gemm_group(m, "gemm 4000^3 ragged 16-bit in", 4000, 4000, 4000, [("wmma_gemm_tiled", None)])
    gelu = b5._rowwise(m, 16384, 4096)[:3]  # reference, the worked scalar kernel, task 5.1 (not RMSNorm)
    gelu[2].task, gelu[2].target, gelu[2].target_of = None, 0.9, "copy"
    return out + gelu + _gelu_erff_diag(m)


def _gelu_erff_diag(m) -> list[Case]:
    """Diagnostic row: the new 2-D bias+GELU kernel with the old erff-based gelu_f32, to tell the two changes
    apart (the README blames erff's instruction count). Skipped, with a note, if it cannot be built."""
    import cudacourse as cc

    src = (ROOT / "solutions/05_tensor_cores/bf16.cu").read_text()
    i0, i1 = src.index("__device__ inline float gelu_f32(float v) {"), src.index("// Sum over the 32 lanes of a warp")
    old_gelu = "__device__ inline float gelu_f32(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }"
    header = ROOT / "solutions/05_tensor_cores/cc_mma.h"
    src = (src[:i0] + old_gelu + "\n\n" + src[i1:]).replace('#include "cc_mma.h"', f'#include "{header}"')
    rows, cols = 16384, 4096
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    group = f"bias+GELU {rows}x{cols} bf16"
    try:
        k = cc.load(src, ["bias_gelu_bf16"], backend="cuda")
    except Exception as e:  # noqa: BLE001 - a diagnostic must not cost the real rows
        log(f"erff diagnostic not built: {type(e).__name__}: {str(e)[:300]}")
        return []
    return [Case(group, "diag: bias_gelu_bf16 with erff (old gelu_f32)",
                 lambda: k.bias_gelu_bf16(x, b, y, rows, cols), bytes=2 * x.numel() * 2)]


CASES = {"03_gemm": cases03, "05_tensor_cores": cases05}
bench.load_cases = lambda lesson, c=None: CASES[lesson]  # run_lesson times exactly these rows

info = bench.machine_info()
copy_gbs = bench.copy_bandwidth_gbs()
log(f"{info['gpu']}: copy {copy_gbs:.0f} GB/s")
rows = []
for lesson in ("03_gemm", "05_tensor_cores"):
    t = time.monotonic()
    lrows = bench.run_lesson(lesson, "solution", copy_gbs)
    rows += lrows
    log(f"{lesson}: {len(lrows)} rows in {time.monotonic() - t:.1f} s (builds included)")
    for r in lrows:
        log(f"  {r.group} | {r.name} | {r.ms:.3f} ms | vs ref {r.vs_reference} | % copy {r.pct_copy} | {r.note}")
md = bench.markdown(info, copy_gbs, float("nan"), rows, {})
(OUT / "results.md").write_text(md)
(OUT / "results.json").write_text(json.dumps({"machine": info, "copy_gbs": copy_gbs,
                                              "rows": [asdict(r) for r in rows]}, indent=1, default=str))
print(md, flush=True)
verdict = {(r.group, r.name): r.met for r in rows if r.target is not None}
for (g, n), met in verdict.items():
    log(f"TARGET {'met' if met else 'MISSED'}: {g} | {n}")
log("done")
