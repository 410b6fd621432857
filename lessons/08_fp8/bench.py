"""Benchmark cases of lesson 08 for ``make bench LESSONS=08_fp8`` (GPU only).

Groups (each compared with its reference row, timed in the same run); graded targets come from lesson.toml through
the ``task`` of a row:
  gemm 4096^3 e4m3, bf16 out     torch._scaled_mm with the same 1x128 x 128x128 block scales (cuBLASLt, DeepSeek's
                                 recipe) is the reference; beside it torch._scaled_mm with per-tensor scales
                                 (cuBLASLt's plain FP8 GEMM, no promotion) and cuBLAS bf16 (torch.matmul) on the
                                 same values: what FP8 buys over bf16. gemm_fp8_wgmma (task 8.6) and the CUDA-core
                                 gemm_fp8_blockscaled (task 8.4, for scale). No gemm_fp8_wgmma row where the build
                                 has no sm_90a code; the block-scale reference falls back to per-tensor scales
                                 where this PyTorch or cuBLAS has no block scales (the row says which).
  ragged 4000 x 4000 x 4000      the same, on sizes that are not multiples of the 128 x 128 tile
  RMSNorm + 1x128 quant 32768x4096 bf16 -> e4m3   against the measured copy bandwidth (task 8.7); PyTorch's eager
                                 composition (F.rms_norm, amax, divide, cast: several kernels) as the reference; the
                                 Triton twin (fp8_triton.py, task 8.T1) beside it, autotuned on its first call
  128x128 quant 16384^2 bf16 -> e4m3               against copy (task 8.7); PyTorch's eager composition
``flops`` is 2*M*N*K. ``bytes``: the GEMMs read A and W once (1 byte each) and write C (2 bytes); the quantization
kernels read bf16 (2 bytes) and write e4m3 (1 byte) per element, plus the scales.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from cudacourse import triton_track
from cudacourse.bench import Case


def _wgmma_supported(m: Any) -> bool:
    ok = torch.zeros(1, dtype=torch.int32, device="cuda")
    m.gemm_fp8_wgmma_supported(ok)
    return int(ok.item()) == 1


def _operands(M: int, N: int, K: int) -> tuple[torch.Tensor, ...]:
    """e4m3 A and W quantized from normal bf16 values by the lesson's own scheme (1x128 for A, 128x128 for W)."""
    g = torch.Generator(device="cuda").manual_seed(8)
    a = torch.randn(M, K, device="cuda", generator=g)
    w = torch.randn(N, K, device="cuda", generator=g)

    def quant(x: torch.Tensor, rows_per_block: int) -> tuple[torch.Tensor, torch.Tensor]:
        R, C = x.shape
        Rb, Cb = -(-R // rows_per_block), -(-C // 128)
        xp = torch.zeros(Rb * rows_per_block, Cb * 128, device="cuda")
        xp[:R, :C] = x
        blocks = xp.view(Rb, rows_per_block, Cb, 128)
        amax = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-12)
        q = (blocks * (448.0 / amax)[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
        return q.view(Rb * rows_per_block, Cb * 128)[:R, :C].contiguous(), amax / 448.0

    A, sa = quant(a, 1)     # sa: [M][KB] -> the lesson's layout float[KB][M]
    W, sw = quant(w, 128)   # sw: [NB][KB], the lesson's layout
    return A, sa.T.contiguous(), W, sw.contiguous(), a.bfloat16(), w.bfloat16()


def _gemm(m: Any, group: str, M: int, N: int, K: int, cuda_cores: bool) -> list[Case]:
    A, sa, W, sw, a16, w16 = _operands(M, N, K)
    C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    flops, nbytes = 2 * M * N * K, M * K + N * K + 2 * M * N
    one = torch.ones((), device="cuda")
    rows = []
    try:
        torch._scaled_mm(A, W.t(), scale_a=sa.t(), scale_b=sw.t(), out_dtype=torch.bfloat16)
        rows.append(Case(group, "torch._scaled_mm, 1x128 x 128x128 block scales (cuBLASLt)",
                         lambda: torch._scaled_mm(A, W.t(), scale_a=sa.t(), scale_b=sw.t(), out_dtype=torch.bfloat16),
                         bytes=nbytes, flops=flops, reference=True))
        per_tensor_ref = False
    except Exception:  # noqa: BLE001 - any refusal of the block-scale recipe: fall back
        per_tensor_ref = True
    rows.append(Case(group, "torch._scaled_mm, per-tensor scales (cuBLASLt)" +
                     (" (reference: no block scales in this PyTorch)" if per_tensor_ref else ""),
                     lambda: torch._scaled_mm(A, W.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                     bytes=nbytes, flops=flops, reference=per_tensor_ref))
    rows.append(Case(group, "cuBLAS bf16 torch.matmul (same values, for comparison)", lambda: torch.matmul(a16, w16.T),
                     bytes=2 * nbytes, flops=flops))
    if _wgmma_supported(m):
        rows.append(Case(group, "gemm_fp8_wgmma (8.5)", lambda: m.gemm_fp8_wgmma(A, sa, W, sw, C, M, N, K),
                         bytes=nbytes, flops=flops, task="8.6" if M == N == K == 4096 else None))
    if cuda_cores:
        rows.append(Case(group, "gemm_fp8_blockscaled (8.4, CUDA cores)",
                         lambda: m.gemm_fp8_blockscaled(A, sa, W, sw, C, M, N, K), bytes=nbytes, flops=flops))
    return rows


def _quant(m: Any, rows: int, cols: int, R: int, C: int) -> list[Case]:
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(rows, cols, device="cuda", dtype=torch.float8_e4m3fn)
    G = cols // 128
    s = torch.empty(G, rows, device="cuda")
    nbytes = 3 * rows * cols + 4 * rows * G + 2 * cols

    def torch_rms_quant() -> object:
        v = F.rms_norm(x.float(), (cols,), w.float(), 1e-6).view(rows, G, 128)
        amax = v.abs().amax(-1, keepdim=True).clamp_min(1e-12)
        return (v * (448.0 / amax)).to(torch.float8_e4m3fn), amax / 448.0

    g1 = f"RMSNorm + 1x128 quant {rows}x{cols} bf16 -> e4m3"
    out = [Case(g1, "PyTorch eager (rms_norm, amax, scale, cast)", torch_rms_quant, bytes=nbytes, reference=True),
           Case(g1, "quant_1x128 (worked, no norm)", lambda: m.quant_1x128(x, y, s, rows, cols), bytes=nbytes),
           Case(g1, "rmsnorm_quant_1x128 (8.3, 8.7)", lambda: m.rmsnorm_quant_1x128(x, w, y, s, rows, cols, 1e-6),
                bytes=nbytes, task="8.7"),
           triton_track.bench_case(triton_track.bench_twin(m), g1, "rmsnorm_quant_1x128 (Triton twin, 8.T1)",
                                   lambda t: t.rmsnorm_quant_1x128(x, w, y, s, rows, cols, 1e-6),
                                   ["rmsnorm_quant_1x128_kernel"], bytes=nbytes)]
    wt = torch.randn(R, C, device="cuda", dtype=torch.bfloat16)
    q = torch.empty(R, C, device="cuda", dtype=torch.float8_e4m3fn)
    sb = torch.empty(R // 128, C // 128, device="cuda")
    wbytes = 3 * R * C + 4 * (R // 128) * (C // 128)

    def torch_block_quant() -> object:
        blocks = wt.float().view(R // 128, 128, C // 128, 128)
        amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-12)
        return (blocks * (448.0 / amax)).to(torch.float8_e4m3fn), amax / 448.0

    g2 = f"128x128 quant {R}x{C} bf16 -> e4m3"
    out += [Case(g2, "PyTorch eager (amax, scale, cast)", torch_block_quant, bytes=wbytes, reference=True),
            Case(g2, "quant_128x128 (8.3, 8.7)", lambda: m.quant_128x128(wt, q, sb, R, C), bytes=wbytes, task="8.7")]
    return out


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for lesson 08 on module ``m`` (``m.device`` is cuda). ``quick``: smaller sizes."""
    n = 2048 if quick else 4096
    out = _gemm(m, f"gemm {n}^3 e4m3, bf16 out", n, n, n, cuda_cores=True)
    r = n - 96
    out += _gemm(m, f"gemm {r}^3 ragged e4m3, bf16 out", r, r, r, cuda_cores=False)
    return out + _quant(m, 8192 if quick else 32768, 4096, 4096 if quick else 16384, 4096 if quick else 16384)
