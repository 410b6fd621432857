"""Lesson 08, Triton track: RMSNorm fused with 1x128 quantization in Triton, the twin of fp8.cu's task 8.3/8.7 kernel.

One program quantizes ROWS whole rows: it loads them as one (ROWS, BLOCK_N) tile (BLOCK_N, a power of two, covers
the row), takes each row's sum of squares with tl.sum, normalizes, views the tile as (ROWS, BLOCK_N / 128, 128) with
tl.reshape so that a group's amax is a tl.max over the last axis, and stores the fp8 values and the scales. Where
fp8.cu spreads a row over a warp and reduces groups with shuffles over half a warp, here the reshape says which
values form a group and the compiler places them. README: "The Triton twin".

Versions (each wrapper is called like the CUDA launcher of the same name, tensors for pointers):
  round_to_e4m3        worked    fp32 values rounded to nearest even on e4m3's grid (why: below)
  quant_1x128          worked    x (rows x cols bf16) -> e4m3 y and scales float[ceil(cols/128)][rows], bit-exact
  rmsnorm_quant_1x128  task 8.T1 v = x * rsqrt(mean(x^2) + eps) * w, quantized as quant_1x128 quantizes x

Why the rounding by hand: `t.to(tl.float8e4nv)` rounds to nearest even on the GPU (cvt.rn.satfinite), but Triton's
CPU interpreter (3.6.0, triton/runtime/interpreter.py, _convert_float) rounds half up without carrying into the
exponent (1.97 becomes 1.0). So both kernels first round the fp32 value to a multiple of e4m3's quantum at its
size, in exact fp32 arithmetic; the cast then only re-encodes a value that e4m3 holds exactly, the same on both.

Where it runs: compiled on a GPU, where @triton.autotune times ROWS x num_warps on the first call for each row
length and size class; on the CPU, Triton's interpreter runs it with one fixed config (the course sets
TRITON_INTERPRET=1). Needs the triton package: `make setup EXTRAS=triton` (Linux). Tested with triton 3.6.0.

Run it:
  import cudacourse as cc; t = cc.triton_twin("08_fp8"); t.rmsnorm_quant_1x128(x, w, y, s, rows, cols, 1e-6)
  make check T=8.T1               (the graded checks; run it in the course's top folder)
  make bench LESSONS=08_fp8       (the Triton row beside the CUDA ones, GPU only)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cudacourse.triton_track import check_tensors, configs, size_class

MAX_COLS = 16384  # a program holds ROWS whole rows: longer rows would need a loop over tiles (fp8.cu's 8.3 kernel)
AMAX_FLOOR = tl.constexpr(1e-12)  # fp8.cu's kAmaxFloor: a group of zeros gets a finite scale, and zeros are stored
# 1 to 4 rows per program, 4 or 8 warps (the interpreter: 2 rows, so the tests see several programs and a ragged
# last one). Keyed on the row length's power of two and the rows' size class.
ROWS_CONFIGS = configs({"ROWS": 2}, ROWS=[1, 2, 4], num_warps=[4, 8])


def _check(fn: str, x: torch.Tensor, y: torch.Tensor, scales: torch.Tensor, rows: int, cols: int,
           w: torch.Tensor | None = None) -> None:
    """Refuse what the kernels cannot take, naming the parameter, before anything runs."""
    tensors = {"x": (x, torch.bfloat16)}
    if w is not None:
        tensors["w"] = (w, torch.bfloat16)
    check_tensors(fn, **tensors, y=(y, torch.float8_e4m3fn), scales=scales)
    if cols > MAX_COLS:
        raise ValueError(f"{fn}: cols = {cols} is more than this twin's {MAX_COLS} (one program holds whole rows)")
    groups = (cols + 127) // 128
    for name, t, need in (("x", x, rows * cols), ("y", y, rows * cols), ("scales", scales, groups * rows),
                          ("w", w, cols)):
        if t is not None and t.numel() < need:
            raise ValueError(f"{fn}: parameter '{name}' holds {t.numel()} values, fewer than the {need} that rows = "
                             f"{rows}, cols = {cols} need")


@triton.jit
def round_to_e4m3(t):
    # Worked: t (fp32, |t| <= 448) rounded to nearest even on the e4m3 grid. e4m3 has 3 fraction bits, so a value
    # in [2^e, 2^(e+1)) is a multiple of 2^(e-3); below 2^-6 (the subnormals) the step stays 2^-9. t * 2^(3-e) is
    # exact (a power of two), (y + 1.5 * 2^23) - 1.5 * 2^23 rounds 0 <= y < 2^22 to an integer, ties to even (the
    # sum's last bit is worth 1), and * 2^(e-3) is exact again. Both powers of two are built from their bits. The
    # rounding works on |t| and the sign goes back on last, so that a tiny negative value gives -0 (0x80) as the
    # cast does, not +0.
    bits = t.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127                          # the exponent of |t| (-127 for 0)
    e = tl.maximum(e, -6)
    up = ((130 - e) << 23).to(tl.float32, bitcast=True)      # 2^(3 - e): exponent field 127 + 3 - e
    down = ((124 + e) << 23).to(tl.float32, bitcast=True)    # 2^(e - 3)
    magic = 12582912.0                                       # 1.5 * 2^23
    r = ((tl.abs(t) * up + magic) - magic) * down
    sign = (bits >> 31) << 31                                # t's sign bit alone (-0 included)
    return (r.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.autotune(configs=ROWS_CONFIGS, key=["BLOCK_N", "rows_class"])
@triton.jit
def quant_1x128_kernel(x_ptr, y_ptr, s_ptr, rows, cols, rows_class, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    # Worked: ROWS rows of x quantized in groups of 128 (no norm).
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)          # this program's rows
    c = tl.arange(0, BLOCK_N)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offs = r[:, None].to(tl.int64) * cols + c[None, :]
    v = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)   # columns past cols read as 0
    G: tl.constexpr = BLOCK_N // 128
    vg = tl.reshape(v, (ROWS, G, 128))                         # group g of row i is vg[i, g, :]
    amax = tl.maximum(tl.max(tl.abs(vg), axis=2), AMAX_FLOOR)   # (ROWS, G)
    inv = tl.math.div_rn(tl.full(amax.shape, 448.0, tl.float32), amax)  # IEEE division, as fp8.cu's 448.0f / amax
    t = tl.clamp(vg * inv[:, :, None], -448.0, 448.0)
    q = tl.reshape(round_to_e4m3(t), (ROWS, BLOCK_N)).to(tl.float8e4nv)
    tl.store(y_ptr + offs, q, mask=mask)
    g = tl.arange(0, G)
    tl.store(s_ptr + g[None, :] * rows + r[:, None], tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32)),
             mask=(r[:, None] < rows) & (g[None, :] * 128 < cols))


def quant_1x128(x: torch.Tensor, y: torch.Tensor, scales: torch.Tensor, rows: int, cols: int) -> None:
    """As fp8.cu's quant_1x128: x (rows x cols bf16) -> y (e4m3) and scales (float32 [ceil(cols/128)][rows])."""
    _check("quant_1x128", x, y, scales, rows, cols)
    if rows <= 0 or cols <= 0:
        return
    block_n = max(128, triton.next_power_of_2(cols))
    quant_1x128_kernel[lambda meta: (triton.cdiv(rows, meta["ROWS"]),)](x, y, scales, rows, cols, size_class(rows),
                                                                        BLOCK_N=block_n)


# ----------------------------------------------------------------------------------------------------
# Task 8.T1: RMSNorm fused with the 1x128 quantization
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=ROWS_CONFIGS, key=["BLOCK_N", "rows_class"])
@triton.jit
def rmsnorm_quant_1x128_kernel(x_ptr, w_ptr, y_ptr, s_ptr, rows, cols, eps, rows_class, BLOCK_N: tl.constexpr,
                               ROWS: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, BLOCK_N)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    offs = r[:, None].to(tl.int64) * cols + c[None, :]
    G: tl.constexpr = BLOCK_N // 128
    # TODO(task 8.T1): quant_1x128_kernel above with the norm in front (~7 lines): load x (as float, zeros past
    # cols) and w (the cols weights, one row: shape (BLOCK_N,)), rstd = tl.rsqrt(sum of x * x over the row / cols
    # + eps) per row (tl.sum(..., axis=1)), v = x * rstd[:, None] * w[None, :]; then quantize v exactly as
    # quant_1x128_kernel quantizes its v (vg, amax, inv, t, q, both stores).
    # Worked example: cols = 300, BLOCK_N = 512, G = 4: groups 0-2 hold columns 0-299 (group 2 only 44 of them,
    # the rest zeros that do not change its amax); group 3 is all padding, and its scale is not stored
    # (3 * 128 >= cols).
    # Hint: the padded columns must be zeros in x AND in w (other=0.0), or they would enter an amax.
    # BEGIN SOLUTION
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + c, mask=c < cols, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / cols + eps)
    v = x * rstd[:, None] * w[None, :]
    vg = tl.reshape(v, (ROWS, G, 128))
    amax = tl.maximum(tl.max(tl.abs(vg), axis=2), AMAX_FLOOR)
    inv = tl.math.div_rn(tl.full(amax.shape, 448.0, tl.float32), amax)
    t = tl.clamp(vg * inv[:, :, None], -448.0, 448.0)
    q = tl.reshape(round_to_e4m3(t), (ROWS, BLOCK_N)).to(tl.float8e4nv)
    tl.store(y_ptr + offs, q, mask=mask)
    g = tl.arange(0, G)
    tl.store(s_ptr + g[None, :] * rows + r[:, None], tl.math.div_rn(amax, tl.full(amax.shape, 448.0, tl.float32)),
             mask=(r[:, None] < rows) & (g[None, :] * 128 < cols))
    # STUB: pass
    # END SOLUTION


def rmsnorm_quant_1x128(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, scales: torch.Tensor, rows: int, cols: int,
                        eps: float) -> None:
    """As fp8.cu's rmsnorm_quant_1x128: v = x * rsqrt(mean(x^2) + eps) * w per row (x rows x cols bf16, w cols
    bf16, fp32 math) -> y (e4m3, rows x cols) and scales (float32 [ceil(cols/128)][rows])."""
    _check("rmsnorm_quant_1x128", x, y, scales, rows, cols, w)
    if rows <= 0 or cols <= 0:
        return
    block_n = max(128, triton.next_power_of_2(cols))
    rmsnorm_quant_1x128_kernel[lambda meta: (triton.cdiv(rows, meta["ROWS"]),)](
        x, w, y, scales, rows, cols, eps, size_class(rows), BLOCK_N=block_n)
