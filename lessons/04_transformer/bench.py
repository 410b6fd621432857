"""Benchmark cases of lesson 04 for ``make bench LESSONS=04_transformer`` (GPU only).

Groups compare each kernel with PyTorch in the same run: torch.softmax, F.layer_norm, F.rms_norm, and
for attention PyTorch's unfused math path (``SDPBackend.MATH``, TF32 off: true fp32 like our kernels).
The rows of speed tasks 4.10 (softmax vs torch), 4.11 (layernorm vs torch) and 4.12 (flash attention vs
the math path at N=4096, not causal) take their targets from lesson.toml; the rows against the copy
bandwidth keep their own target of 0.85.
The Triton twins (norms_triton.py: softmax 4.T1, layernorm 4.T2; attention_triton.py: flash attention 4.T3) have
a row in the softmax, layernorm and attention groups, with the issue's target of 1.0x PyTorch eager (the group's
reference); each is compiled and autotuned on a first call before its timing, and its row's note gives that time
and the config the autotuner kept (cudacourse/triton_track.py, ``bench_case``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from cudacourse import triton_track
from cudacourse.bench import Case


def _math_attention(qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, causal: bool) -> Any:
    """PyTorch's unfused attention (S = QK^T, softmax, PV as separate kernels), TF32 off."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run() -> torch.Tensor:
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    return run


def _row_cases(m: Any, rows: int, cols: int) -> list[Case]:
    dev = m.device
    x = torch.randn(rows, cols, device=dev)
    y = torch.empty_like(x)
    w, b = torch.randn(cols, device=dev), torch.randn(cols, device=dev)
    nbytes = 2 * x.numel() * 4  # read x once, write y once (w and b are negligible)
    shape = f"{rows}x{cols} fp32"
    twin = triton_track.bench_twin(m)
    out = [
        Case(f"softmax {shape}", "torch.softmax", lambda: torch.softmax(x, dim=1), nbytes, reference=True),
        Case(f"softmax {shape}", "softmax (4.1) vs torch", lambda: m.softmax(x, y, rows, cols), nbytes, task="4.10"),
        Case(f"softmax {shape}", "softmax (4.1) vs copy", lambda: m.softmax(x, y, rows, cols), nbytes, target=0.85,
             target_of="copy"),
        Case(f"softmax {shape}", "softmax_v2_warp_per_row", lambda: m.softmax_v2_warp_per_row(x, y, rows, cols),
             nbytes),
        Case(f"softmax {shape}", "softmax_v3_row_in_registers",
             lambda: m.softmax_v3_row_in_registers(x, y, rows, cols), nbytes),
        triton_track.bench_case(twin, f"softmax {shape}", "softmax (Triton twin, 4.T1)",
                                lambda t: t.softmax(x, y, rows, cols), ["softmax_kernel"], bytes=nbytes, target=1.0),
        Case(f"layernorm {shape}", "F.layer_norm", lambda: F.layer_norm(x, (cols,), w, b, 1e-5), nbytes,
             reference=True),
        Case(f"layernorm {shape}", "layernorm (4.2) vs torch", lambda: m.layernorm(x, w, b, y, rows, cols, 1e-5),
             nbytes, task="4.11"),
        Case(f"layernorm {shape}", "layernorm (4.2) vs copy", lambda: m.layernorm(x, w, b, y, rows, cols, 1e-5),
             nbytes, target=0.85, target_of="copy"),
        triton_track.bench_case(twin, f"layernorm {shape}", "layernorm (Triton twin, 4.T2)",
                                lambda t: t.layernorm(x, w, b, y, rows, cols, 1e-5), ["layernorm_kernel"],
                                bytes=nbytes, target=1.0),
    ]
    if hasattr(F, "rms_norm"):
        out.append(Case(f"rmsnorm {shape}", "F.rms_norm", lambda: F.rms_norm(x, (cols,), w, 1e-6), nbytes,
                        reference=True))
    out.append(Case(f"rmsnorm {shape}", "rmsnorm (4.3)", lambda: m.rmsnorm(x, w, y, rows, cols, 1e-6), nbytes))
    return out


def _attention_cases(m: Any, B: int, H: int, N: int, d: int, causal: bool, versions: bool) -> list[Case]:
    dev = m.device
    q, k, v = (torch.randn(B * N, H * d, device=dev) for _ in range(3))
    o = torch.empty_like(q)
    qh, kh, vh = (t.view(B, N, H, d).transpose(1, 2).contiguous() for t in (q, k, v))
    scale, c = 1.0 / math.sqrt(d), int(causal)
    flops = 4 * B * H * N * N * d // (2 if causal else 1)  # two matmuls; causal skips half
    group = f"attention B{B} H{H} N{N} d{d} {'causal' if causal else 'full'} fp32"
    out = [
        Case(group, "PyTorch math path (TF32 off)", _math_attention(qh, kh, vh, causal), flops=flops, reference=True),
        Case(group, "attention_flash (4.8)", lambda: m.attention_flash(q, k, v, o, B, H, N, d, scale, c), flops=flops,
             task="4.12" if (N >= 4096 and not causal) else None),
        triton_track.bench_case(triton_track.bench_twin(m, "attention_triton.py"), group,
                                "attention_flash (Triton twin, 4.T3)",
                                lambda t: t.attention_flash(q, k, v, o, B, H, N, d, scale, c),
                                ["attention_flash_kernel"], flops=flops, target=1.0),
        Case(group, "PyTorch SDPA default backend (fp32)",
             lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal), flops=flops),
    ]
    if versions:
        s = torch.empty(B * H * N * N, device=dev)
        out += [
            Case(group, "attention_naive (4.7)", lambda: m.attention_naive(q, k, v, s, o, B, H, N, d, scale, c),
                 flops=flops),
            Case(group, "attention_online_v1", lambda: m.attention_online_v1(q, k, v, o, B, H, N, d, scale, c),
                 flops=flops),
        ]
    return out


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for this lesson on module m (m.device is cuda). quick=True: smaller sizes."""
    if quick:
        return (_row_cases(m, 4096, 4096) + _attention_cases(m, 2, 8, 1024, 64, False, True)
                + _attention_cases(m, 2, 8, 1024, 64, True, False))
    return (_row_cases(m, 32768, 4096) + _row_cases(m, 8192, 16384)
            + _attention_cases(m, 8, 16, 1024, 64, False, True)
            + _attention_cases(m, 8, 16, 4096, 64, False, False)
            + _attention_cases(m, 8, 16, 4096, 64, True, False))
