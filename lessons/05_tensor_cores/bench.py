"""Benchmark cases of lesson 05 for ``make bench LESSONS=05_tensor_cores`` (GPU only).

Groups (each compared with its reference row, timed in the same run). Targets are issue 17's; the graded
ones come from lesson.toml through the ``task`` of the row:
  gemm 4096^3 16-bit in, fp32 out   cuBLAS fp16 (torch.matmul, fp16 out) is the reference:
                                    wmma_gemm_naive, wmma_gemm_tiled (task 5.7, >= 0.25x), mma_gemm,
                                    mma_gemm_pipelined (task 5.8, >= 0.45x), and the mma.sync ceiling: a
                                    microbenchmark of back-to-back mma.sync m16n8k16 on registers, no memory
                                    traffic (the pipeline should be within 10% of it: compare their TFLOP/s);
                                    a second ceiling, "ldmatrix + mma.sync from shared memory": task 5.6's
                                    inner loop (64x64 warp tiles, k-tiles of 32, its swizzle, 3 blocks per SM)
                                    on random operands staged once in shared memory, no global loads
                                    gemm_wgmma (Hopper wgmma + TMA, task 5.13, >= 0.8x; no rows where the
                                    build has no sm_90a code, i.e. not on a compute capability 9.0 GPU)
  gemm 4096x4096x1024, ragged 4000x4000x4000   the mma.sync versions and gemm_wgmma against cuBLAS fp16
  bias+GELU, RMSNorm 16384x4096 bf16  against the measured copy bandwidth (task 5.9, >= 0.9 of copy), with
                                    PyTorch's bf16 F.gelu(x + b) and F.rms_norm as references
  flash attention (8, 16, 4096, 64) bf16, full and causal   against PyTorch SDPA's flash backend on the same
                                    tensors (task 5.11, full, >= 0.6x)
``flops`` is 2*M*N*K; ``bytes`` is A and W read once and C written once (fp32 C for ours, fp16 for cuBLAS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from cudacourse.bench import Case

# The ceiling: each warp keeps 8 independent accumulators and issues mma.sync back to back (no loads), so
# the tensor cores, not latency or memory, bound it. Blocks of 4 warps, 4 blocks per SM's worth of warps.
CEILING_SRC = r"""
#include "@HEADER@"
constexpr int kChains = 8;
__global__ void mma_ceiling_kernel(float* out, int iters) {
    uint32_t a[4], b[2];
    for (int r = 0; r < 4; ++r) a[r] = pack_bf16x2(0.001f * (threadIdx.x + r), 0.002f);
    for (int r = 0; r < 2; ++r) b[r] = pack_bf16x2(0.003f, 0.001f * r);
    float acc[kChains][4] = {};
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < kChains; ++c) mma_m16n8k16_bf16(acc[c], a, b, acc[c]);
    }
    float s = 0.0f;
    for (int c = 0; c < kChains; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the work alive
}
void mma_ceiling(float* out, int blocks, int iters) { mma_ceiling_kernel<<<blocks, 128>>>(out, iters); }
"""


# The second ceiling: task 5.6's inner loop with no global memory. Each block stages one random 128 x 32 tile
# of A and of W in shared memory (swizzled as task 5.6), then its 4 warps repeat the k-tile's 2 k16 steps
# (per step 4 + 4 ldmatrix_x4 and 32 mma.sync on a 64 x 64 warp tile) `iters` times, with no barrier. Random
# operands, as in a real product: the registers-only ceiling feeds constant fragments, which draw less power.
SMEM_CEILING_SRC = r"""
#include "@HEADER@"
__device__ inline int smem_swz(int row, int chunk) { return row * 32 + ((chunk ^ ((row >> 1) & 3)) << 3); }
__global__ void __launch_bounds__(128, 3) mma_smem_ceiling_kernel(const __nv_bfloat16* src, float* out, int iters) {
    __shared__ __align__(128) __nv_bfloat16 a_s[128 * 32], w_s[128 * 32];
    for (int e = threadIdx.x; e < 128 * 32; e += blockDim.x) {
        a_s[e] = src[e];
        w_s[e] = src[128 * 32 + e];
    }
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    float acc[4][8][4] = {};
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int kk = 0; kk < 32; kk += 16) {
            uint32_t a[4][4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                ldmatrix_x4(a[i], a_s + smem_swz(wm * 64 + i * 16 + lane % 16, kk / 8 + lane / 16));
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
                uint32_t b[4];
                ldmatrix_x4(b, w_s + smem_swz(wn * 64 + j * 8 + lane % 8 + 8 * (lane / 16), kk / 8 + (lane / 8) % 2));
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    mma_m16n8k16_bf16(acc[i][j], a[i], b, acc[i][j]);
                    mma_m16n8k16_bf16(acc[i][j + 1], a[i], b + 2, acc[i][j + 1]);
                }
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) s += acc[i][j][0] + acc[i][j][1] + acc[i][j][2] + acc[i][j][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the work alive
}
void mma_smem_ceiling(const __nv_bfloat16* src, float* out, int blocks, int iters) {
    mma_smem_ceiling_kernel<<<blocks, 128>>>(src, out, iters);
}
"""


def _gemm_group(m: Any, group: str, M: int, N: int, K: int, versions: list[tuple[str, str | None]],
                ceiling: Any = None) -> list[Case]:
    dev = m.device
    Ah, Wh = torch.randn(M, K, device=dev).half(), torch.randn(N, K, device=dev).half()
    Ab, Wb = Ah.bfloat16(), Wh.bfloat16()
    C, Ch = torch.empty(M, N, device=dev), torch.empty(M, N, device=dev, dtype=torch.half)
    flops = 2 * M * N * K
    ours, ref_bytes = 2 * (M * K + N * K) + 4 * M * N, 2 * (M * K + N * K + M * N)
    rows = [Case(group, "cuBLAS torch.matmul fp16", lambda: torch.matmul(Ah, Wh.T, out=Ch), bytes=ref_bytes,
                 flops=flops, reference=True)]
    for name, task in versions:
        fn = getattr(m, name)
        if name == "gemm_wgmma" and not _wgmma_supported(m):
            continue  # no sm_90a code here: no row rather than a fast one that launched nothing
        a, w = (Ah, Wh) if name.startswith("wmma") else (Ab, Wb)
        rows.append(Case(group, name, lambda fn=fn, a=a, w=w: fn(a, w, C, M, N, K), bytes=ours, flops=flops,
                         task=task))
    if ceiling is not None:
        rows.append(ceiling)
    return rows


def _wgmma_supported(m: Any) -> bool:
    """Whether this build of gemm_wgmma launches (sm_90a code on a compute capability 9.0 GPU)."""
    ok = torch.zeros(1, dtype=torch.int32, device="cuda")
    m.gemm_wgmma_supported(ok)
    return int(ok.item()) == 1


def _ceiling(m: Any, group: str) -> Case:
    import cudacourse as cc

    src = CEILING_SRC.replace("@HEADER@", str(Path(m.dir) / "cc_mma.h"))
    k = cc.load(src, ["mma_ceiling"], backend="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks, iters, chains = sms * 8, 4096, 8
    out = torch.empty(blocks * 128, device="cuda")
    flops = blocks * 4 * iters * chains * 2 * 16 * 8 * 16  # warps x mma count x flops per m16n8k16
    return Case(group, "mma.sync ceiling (registers only)", lambda: k.mma_ceiling(out, blocks, iters), flops=flops)


def _smem_ceiling(m: Any, group: str) -> Case:
    import cudacourse as cc

    src = SMEM_CEILING_SRC.replace("@HEADER@", str(Path(m.dir) / "cc_mma.h"))
    k = cc.load(src, ["mma_smem_ceiling"], backend="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks, iters = sms * 3 * 4, 1024  # 3 blocks per SM (as task 5.6), 4 waves of them
    operands = torch.randn(2 * 128 * 32, device="cuda").bfloat16()
    out = torch.empty(blocks * 128, device="cuda")
    flops = blocks * 4 * iters * 2 * 32 * 2 * 16 * 8 * 16  # warps x iters x k16 steps x 32 mma x flops per mma
    return Case(group, "mma.sync ceiling (ldmatrix from shared memory, random operands)",
                lambda: k.mma_smem_ceiling(operands, out, blocks, iters), flops=flops)


def _rowwise(m: Any, rows: int, cols: int) -> list[Case]:
    dev = m.device
    x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
    b, w = torch.randn(cols, device=dev, dtype=torch.bfloat16), torch.randn(cols, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * 2  # read x, write y
    g1, g2 = f"bias+GELU {rows}x{cols} bf16", f"RMSNorm {rows}x{cols} bf16"
    return [
        Case(g1, "PyTorch F.gelu(x + b)", lambda: F.gelu(x + b), bytes=nbytes, reference=True),
        Case(g1, "bias_gelu_bf16_scalar (worked)", lambda: m.bias_gelu_bf16_scalar(x, b, y, rows, cols), bytes=nbytes),
        Case(g1, "bias_gelu_bf16 (5.1)", lambda: m.bias_gelu_bf16(x, b, y, rows, cols), bytes=nbytes, task="5.9"),
        Case(g2, "PyTorch F.rms_norm", lambda: F.rms_norm(x, (cols,), w, 1e-6), bytes=nbytes, reference=True),
        Case(g2, "rmsnorm_bf16 (5.2)", lambda: m.rmsnorm_bf16(x, w, y, rows, cols, 1e-6), bytes=nbytes, task="5.9"),
    ]


def _attention(m: Any, B: int, H: int, N: int, d: int) -> list[Case]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = m.device
    q, k, v = (torch.randn(B, N, H, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA's (B, H, N, d) view of the same memory
    out = []
    for causal in (0, 1):
        flops = 4 * B * H * N * N * d // (2 if causal else 1)

        def sdpa(causal: int = causal) -> object:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))

        group = f"flash attention ({B}, {H}, {N}, {d}) bf16" + (" causal" if causal else "")
        out += [Case(group, "PyTorch SDPA (flash backend)", sdpa, flops=flops, reference=True),
                Case(group, "flash_attention_bf16 (5.10)",
                     lambda causal=causal: m.flash_attention_bf16(q, k, v, o, B, H, N, d, d**-0.5, causal),
                     flops=flops, task=None if causal else "5.11")]
    return out


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for lesson 05 on module ``m`` (``m.device`` is cuda). ``quick``: smaller sizes."""
    n = 2048 if quick else 4096
    allv = [("wmma_gemm_naive", None), ("wmma_gemm_tiled", "5.7"), ("mma_gemm", None), ("mma_gemm_pipelined", "5.8"),
            ("gemm_wgmma", "5.13")]
    group = f"gemm {n}^3 16-bit in, fp32 accumulate"
    out = _gemm_group(m, group, n, n, n, allv, ceiling=_ceiling(m, group)) + [_smem_ceiling(m, group)]
    mma = [("mma_gemm", None), ("mma_gemm_pipelined", None), ("gemm_wgmma", None)]
    out += _gemm_group(m, f"gemm {n}x{n}x{n // 4} 16-bit in", n, n, n // 4, mma)
    r = n - 96
    out += _gemm_group(m, f"gemm {r}^3 ragged 16-bit in", r, r, r, mma)
    out += _rowwise(m, 4096 if quick else 16384, 4096)
    return out + _attention(m, 2 if quick else 8, 16, 2048 if quick else 4096, 64)
