"""Benchmark cases of lesson 03 (matrix multiplication) for ``make bench`` (GPU only).

Groups (each compared with its cuBLAS row, timed in the same run; FP32 rows run with TF32 off):
  sgemm 2048^3 fp32          every version v1-v8 against torch.matmul: the versions table of the README.
  sgemm 4096^3 fp32          v3-v8; sgemm_v5_2d is task 3.6 (target: lesson.toml); v8_warptile has the aim, 0.8x.
  sgemm 4092^3 fp32 ragged   not a multiple of any tile (still a multiple of 4, so the float4 paths run);
                             sgemm_v8_warptile has the target 0.75x.
  linear 4096x4096->4096     the linear layer of task 3.5 against torch.nn.functional.linear.
  gemm 4096^3 fp16/bf16 in   the WMMA tensor-core kernels of gemm_wmma.cu against torch.matmul in fp16
                             (ungraded; torch returns fp16, our kernels write fp32).
The Triton twin (gemm_triton.py: task 3.T1, float32 products with input_precision="ieee") has a row in each
sgemm group, beside the CUDA versions and cuBLAS; it is compiled and autotuned on a first call before its timing,
and its row's note gives that time and the config the autotuner kept (cudacourse/triton_track.py, ``bench_case``).
``flops`` is 2*M*N*K; ``bytes`` is A and B read once and C written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from cudacourse import triton_track
from cudacourse.bench import Case

ALL_VERSIONS = ["sgemm_v1_naive", "sgemm_v2_coalesced", "sgemm_v3_shared", "sgemm_v4_1d", "sgemm_v5_2d",
                "sgemm_v6_vec", "sgemm_v7_tuned", "sgemm_v8_warptile"]
FAST_VERSIONS = ALL_VERSIONS[2:]


def fp32_matmul(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> Callable[[], object]:
    """cuBLAS SGEMM in true FP32: TF32 tensor cores off for the duration of the call."""

    def run() -> object:
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return torch.matmul(A, B, out=C)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    return run


def linear_group(m: Any, n: int) -> list[Case]:
    """Task 3.5's ``linear`` (n x n -> n, fp32, with bias) against ``F.linear`` with TF32 off (issue 17: >= 0.8x)."""
    dev = m.device
    x, W, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev), torch.randn(n, device=dev)
    y = torch.empty(n, n, device=dev)
    flops, nbytes = 2 * n**3, 4 * (3 * n * n + n)

    def ref_linear() -> object:
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return F.linear(x, W, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    group = f"linear {n}x{n}->{n} fp32"
    return [Case(group, "F.linear (TF32 off)", ref_linear, bytes=nbytes, flops=flops, reference=True),
            Case(group, "linear", lambda: m.linear(x, W, b, y, n, n, n), bytes=nbytes, flops=flops, target=0.8)]


def gemm_group(m: Any, group: str, M: int, N: int, K: int, versions: list[str],
               targets: dict[str, float] | None = None, tasks: dict[str, str] | None = None,
               twin: tuple[Any, str] | None = None) -> list[Case]:
    """Rows of one GEMM shape: cuBLAS (reference), each version and the Triton twin (``twin``, from
    ``triton_track.bench_twin``), inputs allocated once."""
    dev = m.device
    A, B = torch.randn(M, K, device=dev), torch.randn(K, N, device=dev)
    C = torch.empty(M, N, device=dev)
    flops, nbytes = 2 * M * N * K, 4 * (M * K + K * N + M * N)
    rows = [Case(group, "cuBLAS torch.matmul (TF32 off)", fp32_matmul(A, B, C), bytes=nbytes, flops=flops,
                 reference=True)]
    for v in versions:
        fn = getattr(m, v)
        rows.append(Case(group, v, lambda fn=fn: fn(A, B, C, M, N, K), bytes=nbytes, flops=flops,
                         target=(targets or {}).get(v), task=(tasks or {}).get(v)))
    if twin is not None:
        rows.append(triton_track.bench_case(twin, group, "sgemm (Triton twin, 3.T1)",
                                            lambda t: t.sgemm(A, B, C, M, N, K), ["sgemm_kernel"], bytes=nbytes,
                                            flops=flops))
    return rows


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for lesson 03 on module ``m`` (``m.device`` is cuda). ``quick``: smaller sizes."""
    small, big, ragged = (1024, 2048, 2044) if quick else (2048, 4096, 4092)
    twin = triton_track.bench_twin(m)
    out = gemm_group(m, f"sgemm {small}^3 fp32", small, small, small, ALL_VERSIONS, twin=twin)
    # task 3.6 grades sgemm_v5_2d (the learner's 2-D register blocking); v8_warptile's 0.8x is the lesson's aim
    out += gemm_group(m, f"sgemm {big}^3 fp32", big, big, big, FAST_VERSIONS, {"sgemm_v8_warptile": 0.8},
                      tasks={"sgemm_v5_2d": "3.6"}, twin=twin)
    out += gemm_group(m, f"sgemm {ragged}^3 fp32 ragged", ragged, ragged, ragged,
                      ["sgemm_v6_vec", "sgemm_v7_tuned", "sgemm_v8_warptile"], {"sgemm_v8_warptile": 0.75}, twin=twin)

    dev, n = m.device, big
    out += linear_group(m, n)
    flops = 2 * n**3

    group = f"gemm {n}^3 fp16/bf16 in, tensor cores"
    Ah, Bh = torch.randn(n, n, device=dev).half(), torch.randn(n, n, device=dev).half()
    Ab, Bb = Ah.bfloat16(), Bh.bfloat16()
    Ch, Cf = torch.empty(n, n, device=dev, dtype=torch.half), torch.empty(n, n, device=dev)
    hbytes = 2 * 2 * n * n + 4 * n * n
    out += [Case(group, "cuBLAS torch.matmul fp16", lambda: torch.matmul(Ah, Bh, out=Ch), bytes=3 * 2 * n * n,
                 flops=flops, reference=True),
            Case(group, "gemm_wmma_fp16", lambda: m.gemm_wmma_fp16(Ah, Bh, Cf, n, n, n), bytes=hbytes, flops=flops),
            Case(group, "gemm_wmma_bf16", lambda: m.gemm_wmma_bf16(Ab, Bb, Cf, n, n, n), bytes=hbytes, flops=flops)]
    return out
