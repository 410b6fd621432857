"""The Triton twins' bench rows with their CUDA and PyTorch neighbours, in one short GPU run.

``make bench`` times every group of every lesson (lesson 06's capstone and fused linear + cross-entropy alone
take minutes). This runs ``cudacourse.bench`` on the groups that hold a Triton twin, with the same timing,
reference rows, targets and table, so the twins' rows of lessons 01-06 fit in one short call of a GPU machine:

  01_relu          relu 2^28 and bias+gelu (every row but the torch::Tensor binding, whose build takes a minute)
  02_reduce        every group
  03_gemm          sgemm 2048^3, 4096^3 and 4092^3 (ragged): cuBLAS, sgemm_v3_shared .. v8 and the twin
  04_transformer   softmax, layernorm, rmsnorm (two shapes); attention N=1024 full, N=4096 full and causal
                   (the math-path reference, attention_flash, SDPA and the twin; not the slow naive versions)
  06_training      cross-entropy 8192 x 50257 and the two AdamW groups

Run it (GPU):  python benchmarks/triton_twins_bench.py --out DIR   (writes DIR/<gpu>/results.md and results.json;
no charts). Committed output: results/nvidia-h100-80gb-hbm3/triton_twins/. ``--lessons 03_gemm 04_transformer
--groups "sgemm 4096" "sgemm 4092" attention`` keeps those groups only (results/nvidia-h100-80gb-hbm3/flash21/).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ["01_relu", "02_reduce", "03_gemm", "04_transformer", "06_training"]


def selected_cases(lesson: str, bench_module: Any, groups: list[str] | None = None) -> Callable[..., list]:
    """The ``cases(m, quick)`` function of ``lesson`` restricted to the groups above, and to the groups whose name
    contains one of ``groups`` when given (``["sgemm 4092", "attention"]``)."""

    def cases(m: Any, quick: bool = False) -> list:
        out = all_cases(m, quick)
        return out if not groups else [c for c in out if any(g in c.group for g in groups)]

    b = bench_module

    def want(group: str) -> bool:  # built only when wanted: a twin's case compiles and autotunes when built
        return not groups or any(g in group for g in groups)

    def all_cases(m: Any, quick: bool = False) -> list:
        if lesson == "01_relu":
            return [c for c in b.cases(m, quick) if "binding" not in c.name]
        if lesson == "03_gemm":
            from cudacourse import triton_track

            twin = triton_track.bench_twin(m)
            small, big, ragged = (1024, 2048, 2044) if quick else (2048, 4096, 4092)
            out = []
            if want(f"sgemm {small}^3 fp32"):
                out += b.gemm_group(m, f"sgemm {small}^3 fp32", small, small, small, b.FAST_VERSIONS, twin=twin)
            if want(f"sgemm {big}^3 fp32"):
                out += b.gemm_group(m, f"sgemm {big}^3 fp32", big, big, big, b.FAST_VERSIONS,
                                    tasks={"sgemm_v8_warptile": "3.6"}, twin=twin)
            if want(f"sgemm {ragged}^3 fp32 ragged"):
                out += b.gemm_group(m, f"sgemm {ragged}^3 fp32 ragged", ragged, ragged, ragged,
                                    ["sgemm_v6_vec", "sgemm_v7_tuned", "sgemm_v8_warptile"],
                                    {"sgemm_v8_warptile": 0.75}, twin=twin)
            return out
        if lesson == "04_transformer":
            rows = [(4096, 4096)] if quick else [(32768, 4096), (8192, 16384)]
            out = [c for r, cols in rows if want(f"softmax {r}x{cols}") or want(f"layernorm {r}x{cols}")
                   or want(f"rmsnorm {r}x{cols}") for c in b._row_cases(m, r, cols)]
            att = [(2, 8, 1024, False), (2, 8, 1024, True)] if quick else [(8, 16, 1024, False), (8, 16, 4096, False),
                                                                          (8, 16, 4096, True)]
            return out + [c for B, H, N, causal in att
                          if want(f"attention B{B} H{H} N{N} d64 {'causal' if causal else 'full'} fp32")
                          for c in b._attention_cases(m, B, H, N, 64, causal, False)]
        if lesson == "06_training":
            return b._cross_entropy_cases(m, 1024 if quick else 8192, 50257) + ([] if quick else b._adamw_cases(m))
        return b.cases(m, quick)

    return cases


def main(argv: list[str] | None = None) -> int:
    """Run the selected groups through ``cudacourse.bench.main`` (timing, table, results.json)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    ap.add_argument("--lessons", nargs="*", default=LESSONS)
    ap.add_argument("--groups", nargs="*", default=None,
                    help="only the groups whose name contains one of these (e.g. 'sgemm 4092' attention)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from cudacourse import bench
    from cudacourse.loader import import_file

    original = bench.load_cases

    def load_cases(lesson: str, c: Any = None) -> Callable[..., list] | None:
        if original(lesson, c) is None:
            return None
        mod = import_file(bench.course().lessons_dir / lesson / "bench.py", f"cudacourse_bench_{lesson}")
        return selected_cases(lesson, mod, args.groups)

    bench.load_cases = load_cases
    sys.modules["cudacourse.plot"] = None  # type: ignore[assignment]  # no charts: the table is the result
    return bench.main(["--lessons", *args.lessons, "--out", args.out] + (["--quick"] if args.quick else []))


if __name__ == "__main__":
    sys.exit(main())
