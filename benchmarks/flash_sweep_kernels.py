"""Triton flash-attention candidates timed by benchmarks/flash_sweep.py (GPU sweep of branch flash21).

attention_trans_kernel is task 4.T3's kernel as it was before the change (commit 1a5a0ce): S = tl.dot(q,
tl.trans(k)), the whole head dim in one product.

attention_split_kernel is the 4.T3 kernel with the score product split along the head dim into two tl.dot calls
of BLOCK_D / 2 each (s = q_lo k_lo^T + q_hi k_hi^T): the FMA lowering of an "ieee" tl.dot keeps a whole K-wide
slice of each operand in registers, and at BQ x BK = 64 x 64 over 4 warps that spills (ptxas: 255 registers,
~2 KB of spill stores); halving the dot's K dimension halves those slices.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["H", "N"])
def attention_split_kernel(q_ptr, k_ptr, v_ptr, o_ptr, H, N, d, qk_scale, causal, BQ: tl.constexpr,
                           BK: tl.constexpr, BLOCK_D: tl.constexpr):
    DC: tl.constexpr = BLOCK_D // 2
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    stride = H * d
    head = (b.to(tl.int64) * N * H + h) * d
    qs = tl.program_id(0) * BQ + tl.arange(0, BQ)
    cs = tl.arange(0, BLOCK_D)
    lo = tl.arange(0, DC)
    hi_c = DC + tl.arange(0, DC)
    qrow = qs[:, None] < N
    q_lo = tl.load(q_ptr + head + qs[:, None] * stride + lo[None, :], mask=qrow & (lo[None, :] < d), other=0.0)
    q_hi = tl.load(q_ptr + head + qs[:, None] * stride + hi_c[None, :], mask=qrow & (hi_c[None, :] < d), other=0.0)
    q_lo = q_lo * qk_scale
    q_hi = q_hi * qk_scale
    m = tl.full([BQ], float("-inf"), tl.float32)
    l_i = tl.zeros([BQ], tl.float32)
    acc = tl.zeros([BQ, BLOCK_D], tl.float32)
    hi = tl.where(causal != 0, tl.minimum(N, (tl.program_id(0) + 1) * BQ), N)
    for j0 in range(0, hi, BK):
        js = j0 + tl.arange(0, BK)
        krow = js[:, None] < N
        k_lo = tl.load(k_ptr + head + js[:, None] * stride + lo[None, :], mask=krow & (lo[None, :] < d), other=0.0)
        k_hi = tl.load(k_ptr + head + js[:, None] * stride + hi_c[None, :], mask=krow & (hi_c[None, :] < d),
                       other=0.0)
        v = tl.load(v_ptr + head + js[:, None] * stride + cs[None, :], mask=krow & (cs[None, :] < d), other=0.0)
        s = tl.dot(q_lo, tl.trans(k_lo), input_precision="ieee")
        s = tl.dot(q_hi, tl.trans(k_hi), s, input_precision="ieee")
        keep = (js[None, :] < N) & ((causal == 0) | (js[None, :] <= qs[:, None]))
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    tl.store(o_ptr + head + qs[:, None] * stride + cs[None, :], acc / l_i[:, None], mask=qrow & (cs[None, :] < d))


@triton.jit(do_not_specialize=["H", "N"])
def attention_kt_kernel(q_ptr, kt_ptr, v_ptr, o_ptr, H, N, NP, d, qk_scale, causal, BQ: tl.constexpr,
                        BK: tl.constexpr, BLOCK_D: tl.constexpr):
    """K comes as K^T, (B, H, d, NP) with NP = N rounded up to 16: its tiles are key-contiguous."""
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    stride = H * d
    head = (b.to(tl.int64) * N * H + h) * d
    head_t = bh.to(tl.int64) * d * NP
    qs = tl.program_id(0) * BQ + tl.arange(0, BQ)
    cs = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + head + qs[:, None] * stride + cs[None, :], mask=(qs[:, None] < N) & (cs[None, :] < d),
                other=0.0)
    q = q * qk_scale
    m = tl.full([BQ], float("-inf"), tl.float32)
    l_i = tl.zeros([BQ], tl.float32)
    acc = tl.zeros([BQ, BLOCK_D], tl.float32)
    hi = tl.where(causal != 0, tl.minimum(N, (tl.program_id(0) + 1) * BQ), N)
    for j0 in range(0, hi, BK):
        js = j0 + tl.arange(0, BK)
        kt = tl.load(kt_ptr + head_t + cs[:, None] * NP + js[None, :], mask=(cs[:, None] < d) & (js[None, :] < NP),
                     other=0.0)
        v = tl.load(v_ptr + head + js[:, None] * stride + cs[None, :], mask=(js[:, None] < N) & (cs[None, :] < d),
                    other=0.0)
        s = tl.dot(q, kt, input_precision="ieee")
        keep = (js[None, :] < N) & ((causal == 0) | (js[None, :] <= qs[:, None]))
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    tl.store(o_ptr + head + qs[:, None] * stride + cs[None, :], acc / l_i[:, None],
             mask=(qs[:, None] < N) & (cs[None, :] < d))


@triton.jit(do_not_specialize=["H", "N"])
def attention_kts_kernel(q_ptr, kt_ptr, v_ptr, o_ptr, H, N, NP, d, qk_scale, causal, BQ: tl.constexpr,
                         BK: tl.constexpr, BLOCK_D: tl.constexpr):
    """attention_kt_kernel with the score product split over the two halves of the head dim."""
    DC: tl.constexpr = BLOCK_D // 2
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    stride = H * d
    head = (b.to(tl.int64) * N * H + h) * d
    head_t = bh.to(tl.int64) * d * NP
    qs = tl.program_id(0) * BQ + tl.arange(0, BQ)
    cs = tl.arange(0, BLOCK_D)
    lo = tl.arange(0, DC)
    up = DC + tl.arange(0, DC)
    qrow = qs[:, None] < N
    q_lo = tl.load(q_ptr + head + qs[:, None] * stride + lo[None, :], mask=qrow & (lo[None, :] < d), other=0.0)
    q_up = tl.load(q_ptr + head + qs[:, None] * stride + up[None, :], mask=qrow & (up[None, :] < d), other=0.0)
    q_lo = q_lo * qk_scale
    q_up = q_up * qk_scale
    m = tl.full([BQ], float("-inf"), tl.float32)
    l_i = tl.zeros([BQ], tl.float32)
    acc = tl.zeros([BQ, BLOCK_D], tl.float32)
    hi = tl.where(causal != 0, tl.minimum(N, (tl.program_id(0) + 1) * BQ), N)
    for j0 in range(0, hi, BK):
        js = j0 + tl.arange(0, BK)
        kcol = js[None, :] < NP
        kt_lo = tl.load(kt_ptr + head_t + lo[:, None] * NP + js[None, :], mask=(lo[:, None] < d) & kcol, other=0.0)
        kt_up = tl.load(kt_ptr + head_t + up[:, None] * NP + js[None, :], mask=(up[:, None] < d) & kcol, other=0.0)
        v = tl.load(v_ptr + head + js[:, None] * stride + cs[None, :], mask=(js[:, None] < N) & (cs[None, :] < d),
                    other=0.0)
        s = tl.dot(q_lo, kt_lo, input_precision="ieee")
        s = tl.dot(q_up, kt_up, s, input_precision="ieee")
        keep = (js[None, :] < N) & ((causal == 0) | (js[None, :] <= qs[:, None]))
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    tl.store(o_ptr + head + qs[:, None] * stride + cs[None, :], acc / l_i[:, None], mask=qrow & (cs[None, :] < d))


@triton.jit(do_not_specialize=["H", "N"])
def attention_trans_kernel(q_ptr, k_ptr, v_ptr, o_ptr, H, N, d, qk_scale, causal, N_class, BQ: tl.constexpr,
                           BK: tl.constexpr, BLOCK_D: tl.constexpr):
    """The 4.T3 kernel before this change (commit 1a5a0ce, no autotuner): S = tl.dot(q, tl.trans(k))."""
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    stride = H * d
    head = (b.to(tl.int64) * N * H + h) * d
    qs = tl.program_id(0) * BQ + tl.arange(0, BQ)  # this program's query rows
    cs = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + head + qs[:, None] * stride + cs[None, :], mask=(qs[:, None] < N) & (cs[None, :] < d),
                other=0.0)
    q = q * qk_scale  # scale * log2(e) folded into q once: the scores come out in log2 units
    m = tl.full([BQ], float("-inf"), tl.float32)  # per query row: running max, sum, output row
    l_i = tl.zeros([BQ], tl.float32)
    acc = tl.zeros([BQ, BLOCK_D], tl.float32)
    # causal: the keys past this program's last query are masked for every row, so the loop stops there
    hi = tl.where(causal != 0, tl.minimum(N, (tl.program_id(0) + 1) * BQ), N)
    for j0 in range(0, hi, BK):
        js = j0 + tl.arange(0, BK)
        kv_mask = (js[:, None] < N) & (cs[None, :] < d)
        k = tl.load(k_ptr + head + js[:, None] * stride + cs[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + head + js[:, None] * stride + cs[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
        keep = (js[None, :] < N) & ((causal == 0) | (js[None, :] <= qs[:, None]))
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    tl.store(o_ptr + head + qs[:, None] * stride + cs[None, :], acc / l_i[:, None],
             mask=(qs[:, None] < N) & (cs[None, :] < d))
