"""Lesson 04, Triton track: flash attention forward in Triton, the twin of attention.cu's attention_flash.

attention_flash in CUDA stages a Q tile, K and V tiles in shared memory (transposed, padded against bank
conflicts), gives each thread an 8 x 4 patch of scores and an 8 x d/8 patch of O, and reduces each row's max
and sum over 8 lanes with shuffles. Here one program owns BQ queries of one head, tl.dot calls compute the
scores S = Q K^T and the update P V, and tl.max / tl.sum reduce the rows of a tile: the staging, the split
over threads and the shuffles are the compiler's. The online softmax is yours, as in CUDA. What the compiler
does not choose for you is the layout in memory: the wrapper hands the kernel K^T (a copy, key-contiguous),
because the float32 tl.dot reads its second operand along its rows, and a transposed K tile (tl.trans(k))
puts those reads in one shared-memory bank (attention_flash_kernel's comment has the numbers).

Q, K, V and O are (B, N, H, d) row-major like attention.cu's: the element (b, n, h, c) is at
((b * N + n) * H + h) * d + c, so the rows of one head are H * d floats apart.

Versions (each wrapper is called like the CUDA launcher of the same name, tensors for pointers):
  attention_online_v1  worked     one program per query row, keys in tiles, online softmax; no tl.dot
  attention_flash      task 4.T3  BQ queries per program, S and P V by tl.dot, online softmax across key tiles,
                                  causal or full; any head dim d <= 128 (the CUDA version: d in 16..96)

FP32 throughout: tl.dot(..., input_precision="ieee") multiplies in float32 (FMA instructions); Triton's
default for float32 tiles on an H100 is TF32, as torch's own attention with TF32 on.

Where it runs: on a GPU, compiled; @triton.autotune times every config (BQ x BK tiles) on the first call for
each class of sequence length (a power of two, 1024 at least) and head-dim tile, and keeps the fastest (`make
bench` prints the one it kept). On a CPU, Triton's interpreter runs the same code with numpy, with one fixed
config (32 x 32; the course sets TRITON_INTERPRET=1). Needs the triton package: `make setup EXTRAS=triton`
(Linux). Tested with triton 3.6.0 (torch 2.13.0 CPU build for the interpreter).

Run it:
  import cudacourse as cc; t = cc.triton_twin("04_transformer", "attention_triton.py")
  t.attention_flash(q, k, v, o, B, H, N, d, 1 / d**0.5, 1)
  make check T=4.T3                   (one task's graded checks; run it in the course's top folder)
  make bench LESSONS=04_transformer   (the Triton rows beside the CUDA ones, GPU only)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cudacourse.triton_track import check_tensors, configs, size_class

LOG2E = 1.4426950408889634  # scores are kept in log2 units: exp2(s * log2(e) - m) == exp(s - m'), as in CUDA
MAX_D = 128

# BQ queries x BK keys per step and 4, 8 or 16 warps: the combinations where a thread holds 8 or 16 scores. The
# float32 ("ieee") tl.dot keeps a whole slice of each operand per thread in registers: more than 16 scores per
# thread (or the whole head dim as the product's inner size, see the kernel) spill (ptxas, sm_90, d = 64).
# The interpreter takes 32 x 32, so the tests' sequence lengths (17 to 257) are ragged against it.
_FLASH_SHAPES = {(64, 32, 4), (64, 32, 8), (64, 64, 8), (128, 32, 8), (128, 32, 16), (32, 64, 8)}
FLASH = configs({"BQ": 32, "BK": 32, "num_warps": 4},
                keep=lambda c: (c["BQ"], c["BK"], c["num_warps"]) in _FLASH_SHAPES,
                BQ=[32, 64, 128], BK=[32, 64], num_warps=[4, 8, 16], num_stages=[2])


def _check(fn: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, B: int, H: int, N: int,
           d: int) -> None:
    """Refuse what the kernels cannot take, naming it, before anything runs."""
    check_tensors(fn, q=q, k=k, v=v, o=o)
    if not 1 <= d <= MAX_D:
        raise ValueError(f"{fn}: head dim d = {d}: the Triton twin takes 1 <= d <= {MAX_D} (a head's row of q is "
                         "one tile)")
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        if t.numel() < B * N * H * d:
            raise ValueError(f"{fn}: parameter '{name}' holds {t.numel()} floats, fewer than B * N * H * d = "
                             f"{B * N * H * d}")


# ----------------------------------------------------------------------------------------------------
# Worked example: attention_online_v1, one program per query row, online softmax over key tiles
# ----------------------------------------------------------------------------------------------------


@triton.jit
def attention_online_v1_kernel(q_ptr, k_ptr, v_ptr, o_ptr, H, N, d, qk_scale, causal, BK: tl.constexpr,
                               BLOCK_D: tl.constexpr):
    i = tl.program_id(0)  # the query row
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    stride = H * d  # floats between two rows (tokens) of one head
    head = (b.to(tl.int64) * N * H + h) * d  # offset of row 0 of this head
    cs = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + head + i * stride + cs, mask=cs < d, other=0.0) * qk_scale  # [BLOCK_D], log2 units
    m = tl.full([], float("-inf"), tl.float32)  # running max of the scores seen so far
    l_i = tl.zeros([], tl.float32)  # running sum of exp2(score - m)
    acc = tl.zeros([BLOCK_D], tl.float32)  # running sum of exp2(score - m) * v_j
    hi = tl.where(causal != 0, i + 1, N)  # causal: keys j <= i only
    for j0 in range(0, hi, BK):
        js = j0 + tl.arange(0, BK)
        kv_mask = (js[:, None] < hi) & (cs[None, :] < d)
        k = tl.load(k_ptr + head + js[:, None] * stride + cs[None, :], mask=kv_mask, other=0.0)  # [BK, BLOCK_D]
        s = tl.where(js < hi, tl.sum(q[None, :] * k, axis=1), float("-inf"))  # [BK] scores of this tile
        m_new = tl.maximum(m, tl.max(s, axis=0))  # finite: key j0 is always a real key
        p = tl.exp2(s - m_new)
        alpha = tl.exp2(m - m_new)  # rescales what was summed under the old max
        v = tl.load(v_ptr + head + js[:, None] * stride + cs[None, :], mask=kv_mask, other=0.0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(o_ptr + head + i * stride + cs, acc / l_i, mask=cs < d)


def attention_online_v1(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, B: int, H: int, N: int,
                        d: int, scale: float, causal: int) -> None:
    """o = softmax(scale * q k^T [causal]) v per head, (B, N, H, d) tensors; one program per query row."""
    _check("attention_online_v1", q, k, v, o, B, H, N, d)
    if B * H * N == 0:
        return
    attention_online_v1_kernel[(N, B * H)](q, k, v, o, H, N, d, scale * LOG2E, int(causal), BK=32,
                                           BLOCK_D=max(16, triton.next_power_of_2(d)))


# ----------------------------------------------------------------------------------------------------
# Task 4.T3: attention_flash, BQ queries per program, tl.dot for S and for P V
# ----------------------------------------------------------------------------------------------------


# N and H vary from call to call; not specializing on them (N == 1, N % 16 == 0) keeps one compiled kernel per
# config and head-dim tile. d and NP stay specialized: d % 16 == 0 and NP % 16 == 0 tell the compiler each row of
# q, v and kt starts 16-byte aligned (16-byte copies).
#
# K arrives transposed, kt = K^T per head, (B, H, d, NP) with NP = N rounded up to 16 and zeros past N: a tile
# kt[c, j0:j0 + BK] is BK consecutive keys. In the float32 tl.dot(a, b) neighbouring lanes read neighbouring
# columns of b from shared memory: with b = tl.trans(k) those columns are d floats apart (the same banks at
# d = 64: 8-way conflicts on every read, 10-12 TFLOP/s on an H100); in a key-contiguous kt tile they are adjacent.
# The score product is split over the two halves of the head dim (q_lo kt_lo + q_up kt_up): the product's
# inner size is what each thread holds in registers per operand row, and the whole d spills (see FLASH).
@triton.autotune(configs=FLASH, key=["N_class", "BLOCK_D"])
@triton.jit(do_not_specialize=["H", "N"])
def attention_flash_kernel(q_ptr, kt_ptr, v_ptr, o_ptr, H, N, NP, d, qk_scale, causal, N_class, BQ: tl.constexpr,
                           BK: tl.constexpr, BLOCK_D: tl.constexpr):
    DC: tl.constexpr = BLOCK_D // 2  # half the head-dim tile (16 at least)
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    stride = H * d
    head = (b.to(tl.int64) * N * H + h) * d  # row 0 of this head in q, v and o
    head_t = bh.to(tl.int64) * d * NP  # row 0 (c = 0) of this head in kt
    qs = tl.program_id(0) * BQ + tl.arange(0, BQ)  # this program's query rows
    cs = tl.arange(0, BLOCK_D)
    lo = tl.arange(0, DC)  # the two halves of the head dim
    up = DC + tl.arange(0, DC)
    q_row = qs[:, None] < N
    # scale * log2(e) folded into q once: the scores come out in log2 units
    q_lo = tl.load(q_ptr + head + qs[:, None] * stride + lo[None, :], mask=q_row & (lo[None, :] < d), other=0.0)
    q_up = tl.load(q_ptr + head + qs[:, None] * stride + up[None, :], mask=q_row & (up[None, :] < d), other=0.0)
    q_lo = q_lo * qk_scale  # noqa: F841
    q_up = q_up * qk_scale  # noqa: F841
    m = tl.full([BQ], float("-inf"), tl.float32)  # noqa: F841  per query row: running max, sum, output row
    l_i = tl.zeros([BQ], tl.float32)
    acc = tl.zeros([BQ, BLOCK_D], tl.float32)
    # causal: the keys past this program's last query are masked for every row, so the loop stops there
    hi = tl.where(causal != 0, tl.minimum(N, (tl.program_id(0) + 1) * BQ), N)
    for j0 in range(0, hi, BK):
        js = j0 + tl.arange(0, BK)
        in_kt = js[None, :] < NP  # kt holds zeros from N to NP: a mask the compiler sees in 16-key steps
        kt_lo = tl.load(kt_ptr + head_t + lo[:, None] * NP + js[None, :], mask=(lo[:, None] < d) & in_kt,  # noqa: F841
                        other=0.0)
        kt_up = tl.load(kt_ptr + head_t + up[:, None] * NP + js[None, :], mask=(up[:, None] < d) & in_kt,  # noqa: F841
                        other=0.0)
        v = tl.load(v_ptr + head + js[:, None] * stride + cs[None, :], mask=(js[:, None] < N) & (cs[None, :] < d),  # noqa: F841
                    other=0.0)
        # TODO(task 4.T3): one step of the online softmax over this tile of keys (~11 lines):
        #   1. s = the [BQ, BK] scores: tl.dot(q_lo, kt_lo, input_precision="ieee"), then the upper half added
        #      by tl.dot(q_up, kt_up, s, input_precision="ieee") (the third argument is the accumulator);
        #   2. set s to -inf where the key does not exist (js >= N) and, when causal != 0, where js > qs;
        #   3. m_new = max(m, the row max of s); p = exp2(s - m_new[:, None]); alpha = exp2(m - m_new);
        #   4. l_i = l_i * alpha + the row sums of p; acc = acc * alpha[:, None] + tl.dot(p, v, ...); m = m_new.
        # Hint: attention_online_v1_kernel above is the same update for one row with tl.sum in place of tl.dot.
        # Key 0 is in every row's first tile and never masked (0 <= any query), so m_new is finite from the
        # first tile on: no -inf - -inf. Rows past N compute garbage that is never stored.
        pass
    tl.store(o_ptr + head + qs[:, None] * stride + cs[None, :], acc / l_i[:, None],
             mask=q_row & (cs[None, :] < d))


def attention_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, B: int, H: int, N: int,
                    d: int, scale: float, causal: int) -> None:
    """o = softmax(scale * q k^T [+ causal mask]) v per head; q, k, v, o hold B * N * H * d floats, (B, N, H, d)
    layout; causal is 0 or 1. q, k, v are not modified."""
    _check("attention_flash", q, k, v, o, B, H, N, d)
    if B * H * N == 0:
        return
    if B * N * H * d >= 2**31:
        raise ValueError(f"attention_flash: B * N * H * d = {B * N * H * d}: 2^31 floats or more do not fit the "
                         "kernel's int32 row offsets")
    # K^T per head, key-contiguous and zero-padded to NP keys (see attention_flash_kernel): one copy of K,
    # about 1% of the kernel's time at N = 4096.
    n_pad = triton.cdiv(N, 16) * 16
    kt = torch.empty((B, H, d, n_pad), dtype=k.dtype, device=k.device)
    kt[..., :N].copy_(k.reshape(-1)[: B * N * H * d].view(B, N, H, d).permute(0, 2, 3, 1))
    kt[..., N:].zero_()
    grid = lambda meta: (triton.cdiv(N, meta["BQ"]), B * H)  # noqa: E731
    attention_flash_kernel[grid](q, kt, v, o, H, N, n_pad, d, scale * LOG2E, int(causal), size_class(N, 1024),
                                 BLOCK_D=max(32, triton.next_power_of_2(d)))

