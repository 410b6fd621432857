"""Graded checks of lesson 04 (transformer kernels): lessons/04_transformer/{norms,layers,attention}.cu
and the capstone in lessons/04_transformer/decoder.py.

Tasks (ids match the TODOs in the kernel files and the rows of the points table):
  4.1  softmax, one block per row, any length, stable (softmax)                          3 points
  4.2  layernorm with weight and bias, precise for rows far from zero (layernorm)        3 points
  4.3  RMSNorm (rmsnorm)                                                                 2 points
  4.4  embedding lookup, out-of-range ids flagged and rejected (embedding)               2 points
  4.5  RoPE on q and k (rope)                                                            2 points
  4.6  SwiGLU, stable for large gates (swiglu)                                           1 point
  4.7  naive attention: scores, softmax, P V (attention_naive)                           3 points
  4.8  flash attention forward, fp32, optional causal mask (attention_flash)             5 points
  4.9  capstone: a Llama decoder block and 8 greedy tokens on your kernels (decoder.py)  5 points
  4.10 speed: softmax at 32768 x 4096 reaches 0.8x PyTorch (GPU only)                    1 point
  4.11 speed: layernorm at 8192 x 16384 reaches 0.8x PyTorch (GPU only)                  1 point
  4.12 speed: attention_flash beats PyTorch's unfused math attention, TF32 off (GPU)     3 points

References are computed in float64 from the same float32 inputs. Outputs start as NaN poison, inputs
are checked unchanged, sizes are not multiples of any block or tile (rows of 1, 7, 33, 1000, 4099;
sequences of 1, 17, 100, 257; head dims 32, 64, 80), and the special values each kernel must survive
are in the cases (softmax inputs of size 1e4 and -inf; layernorm rows of mean 1000; gates of +-1e4).
Simulator sizes are small (checked mode costs microseconds per thread); ``m.backend == "cuda"`` adds
large ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

import cudacourse as cc
from cudacourse import check
from cudacourse.grading.screens import torch_answer_guard
from cudacourse.lessons import learner_python

LESSON = "04_transformer"
ROW_LENGTHS = [1, 7, 32, 33, 1000, 4099]


def _m() -> cc.Lesson:
    return cc.lesson(LESSON)


def _rows_for(cols: int, m: cc.Lesson) -> int:
    """Rows per case: about 2e4 elements on the simulator (at least 3 rows), more on a GPU."""
    budget = 20_000 if m.backend == "sim" else 2_000_000
    return max(3, min(257, budget // cols))


def _guarded(n: int, m: cc.Lesson) -> tuple[torch.Tensor, torch.Tensor]:
    """A poisoned buffer of n + check.GUARD floats and its first n as the output."""
    return check.guarded(n, m.device)


_assert_guard = check.assert_guard


def _decoder() -> ModuleType:
    """The learner's decoder.py (task 4.9), from the folder cc.lesson loads kernels from.

    Only the capstone tests import it: everything they compare with (weights, kernel wrappers, the
    PyTorch reference) is defined in this file, so an edited decoder.py cannot change the verdict.
    While grading it is hosted in a confined torch worker under the torch guard (``lessons.learner_python``),
    never imported in this process: its functions run there and call this file's kernels object back over the
    worker's channel (on a GPU the worker has a CUDA context of its own, and CUDA tensors cross through host
    memory).
    """
    path = _m().dir / "decoder.py"
    if not path.exists():
        raise AssertionError(f"task 4.9: {path} not found. The capstone is written in decoder.py, next to the "
                             "kernel files of lesson 04.")
    return learner_python(path, gpu=_m().backend == "cuda", timeout_s=60.0)


def _rope_tables(T: int, d: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, d/2), float64: angle(t, i) = t * theta^(-2i/d)."""
    freq = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
    return ang.cos(), ang.sin()


def _rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of x (B, T, H, d) with tables (T, d/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


# ----------------------------------------------------------------------------------------------------
# 4.1 softmax
# ----------------------------------------------------------------------------------------------------

SOFTMAX_HINT = ("TODO(task 4.1) in norms.cu: maxsum_push must rescale the running sum when a larger value "
                "arrives and ignore -inf; the kernel pushes a strided share of the row, calls block_maxsum "
                "once, then writes expf(x - max) / sum.")


def _softmax_case(rows: int, cols: int, x: torch.Tensor, m: cc.Lesson, what: str) -> None:
    full, y = _guarded(rows * cols, m)
    with check.unchanged(x, names=["x"]):
        m.softmax(x, y, rows, cols)
    ref = torch.softmax(x.cpu().double().view(rows, cols), dim=1).float()
    check.assert_close(y.view(rows, cols), ref, name=f"softmax {what}, rows={rows}, cols={cols}", rtol=3e-5,
                       atol=1e-12, task="4.1", hint=SOFTMAX_HINT)
    _assert_guard(full, rows * cols, "softmax", "4.1")


@pytest.mark.task("4.1")
@pytest.mark.parametrize("cols", ROW_LENGTHS)
def test_softmax(cols: int) -> None:
    m = _m()
    rows = _rows_for(cols, m)
    g = check.rng(f"softmax-{cols}")
    _softmax_case(rows, cols, check.randn((rows, cols), g, m.device, scale=3.0), m, "randn * 3")
    if m.backend == "cuda" and cols == ROW_LENGTHS[-1]:  # a large shape too, on a GPU
        _softmax_case(4096, 16387, check.randn((4096, 16387), g, m.device, scale=5.0), m, "large")


@pytest.mark.task("4.1")
@pytest.mark.parametrize("cols", [33, 1000])
def test_softmax_large_and_neg_inf(cols: int) -> None:
    """Inputs of size 1e4 (exp overflows without the max subtracted) and rows with -inf entries."""
    m = _m()
    rows = _rows_for(cols, m)
    g = check.rng(f"softmax-special-{cols}")
    _softmax_case(rows, cols, check.randn((rows, cols), g, m.device, scale=1e4), m, "randn * 1e4")
    x = check.randn((rows, cols), g, "cpu", scale=2.0)
    drop = torch.rand((rows, cols), generator=g) < 0.4
    drop[:, 0] = False  # every row keeps at least one finite entry
    drop[0, 1:] = True  # row 0: a single finite entry, the rest -inf
    x[drop] = -math.inf
    _softmax_case(rows, cols, x.to(m.device), m, "with -inf entries")


@pytest.mark.task("4.1")
@pytest.mark.parametrize("cols", [16383, 16384, 16389, 16392])
def test_softmax_longest_register_rows_and_beyond(cols: int) -> None:
    """Rows at the bound of the solution's register path (16384 floats) and just past it, where the launcher
    falls back to the two-pass kernel; float4 and scalar rows on both sides."""
    m = _m()
    rows = 3 if m.backend == "sim" else 65
    g = check.rng(f"softmax-long-{cols}")
    _softmax_case(rows, cols, check.randn((rows, cols), g, m.device, scale=3.0), m, "long rows")


@pytest.mark.task("4.1")
@pytest.mark.parametrize("cols", [1000, 4096])
def test_softmax_unaligned(cols: int) -> None:
    """x and y starting one float into their buffers (views at an odd offset): no float4 access is allowed."""
    m = _m()
    rows = _rows_for(cols, m)
    g = check.rng(f"softmax-unaligned-{cols}")
    xbuf = check.randn((rows * cols + 1,), g, m.device, scale=3.0)
    x = xbuf[1:]
    full = check.poisoned(rows * cols + 1 + check.GUARD, torch.float32, m.device)
    y = full[1:rows * cols + 1]
    with check.unchanged(x, names=["x"]):
        m.softmax(x, y, rows, cols)
    ref = torch.softmax(x.cpu().double().view(rows, cols), dim=1).float()
    check.assert_close(y.view(rows, cols), ref, name=f"softmax unaligned, rows={rows}, cols={cols}", rtol=3e-5,
                       atol=1e-12, task="4.1", hint=SOFTMAX_HINT + " Read float4s only when x and y are 16-byte "
                       "aligned (aligned16) and cols % 4 == 0.")
    _assert_guard(full, rows * cols + 1, "softmax", "4.1")
    assert bool(full[0].isnan()), "softmax (task 4.1): the kernel wrote before the start of its output"


# ----------------------------------------------------------------------------------------------------
# 4.2 layernorm, 4.3 rmsnorm
# ----------------------------------------------------------------------------------------------------


def _layernorm_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.cpu().double()
    return F.layer_norm(xd, (xd.shape[1],), w.cpu().double(), b.cpu().double(), eps).float()


@pytest.mark.task("4.2")
@pytest.mark.parametrize("cols", ROW_LENGTHS)
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_layernorm(cols: int, offset: float) -> None:
    m = _m()
    rows = _rows_for(cols, m)
    g = check.rng(f"layernorm-{cols}-{offset}")
    x = (check.randn((rows, cols), g, "cpu", scale=2.0) + offset).to(m.device)
    w = check.randn(cols, g, m.device, scale=0.5) + 1.0
    b = check.randn(cols, g, m.device, scale=0.5)
    eps = 1e-5
    full, y = _guarded(rows * cols, m)
    with check.unchanged(x, w, b, names=["x", "w", "b"]):
        m.layernorm(x, w, b, y, rows, cols, eps)
    # Rows around 1000 are stored with a spacing of 6e-5 (float32), and x - mean loses up to that much:
    # 2e-4 allows it, while E[x^2] - E[x]^2 without a shift is off by ~0.1 or more.
    atol = 1e-5 if offset == 0 else 2e-4
    check.assert_close(y.view(rows, cols), _layernorm_ref(x, w, b, eps), name=f"layernorm rows of mean {offset:g}",
                       rtol=1e-5, atol=atol, task="4.2",
                       hint="TODO(task 4.2) in norms.cu. " + ("For rows far from zero, shift by K = xr[0] before "
                                                              "summing d and d*d (or use Welford): plain sums of x "
                                                              "and x*x cancel catastrophically." if offset else
                                                              "mean = K + S1/n, var = S2/n - (S1/n)^2, then "
                                                              "((x - K) - S1/n) * rsqrt(var + eps) * w + b."))
    _assert_guard(full, rows * cols, "layernorm", "4.2")


@pytest.mark.task("4.3")
@pytest.mark.parametrize("cols", ROW_LENGTHS)
def test_rmsnorm(cols: int) -> None:
    m = _m()
    rows = _rows_for(cols, m)
    g = check.rng(f"rmsnorm-{cols}")
    x = check.randn((rows, cols), g, m.device, scale=100.0 if cols == 1000 else 1.0)
    w = check.randn(cols, g, m.device, scale=0.5) + 1.0
    eps = 1e-6
    full, y = _guarded(rows * cols, m)
    with check.unchanged(x, w, names=["x", "w"]):
        m.rmsnorm(x, w, y, rows, cols, eps)
    xd = x.cpu().double()
    ref = (xd * torch.rsqrt(xd.pow(2).mean(1, keepdim=True) + eps) * w.cpu().double()).float()
    check.assert_close(y.view(rows, cols), ref, name="rmsnorm", rtol=1e-5, atol=1e-6, task="4.3",
                       hint="TODO(task 4.3) in norms.cu: r = rsqrtf(sum(x*x) / cols + eps), y = x * r * w.")
    _assert_guard(full, rows * cols, "rmsnorm", "4.3")


# ----------------------------------------------------------------------------------------------------
# 4.4 embedding
# ----------------------------------------------------------------------------------------------------

EMB_HINT = ("TODO(task 4.4) in layers.cu: bad[i] = 1 and a zero row when ids[i] is outside [0, vocab), "
            "else bad[i] = 0 and the table row ids[i].")


@pytest.mark.task("4.4")
@pytest.mark.parametrize(("n", "vocab", "dim"), [(1, 1, 1), (37, 50, 33), (300, 1000, 200)])
def test_embedding(n: int, vocab: int, dim: int) -> None:
    m = _m()
    g = check.rng(f"embedding-{n}-{vocab}-{dim}")
    ids = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int32).to(m.device)
    table = check.randn((vocab, dim), g, m.device)
    full, out = _guarded(n * dim, m)
    bad = check.poisoned(n, torch.int32, m.device)
    with check.unchanged(ids, table, names=["ids", "table"]):
        m.embedding(ids, table, out, bad, n, vocab, dim)
    check.assert_close(bad, torch.zeros(n, dtype=torch.int32), name="bad flags (all ids valid)", task="4.4",
                       hint=EMB_HINT)
    check.assert_close(out.view(n, dim), table.cpu()[ids.cpu().long()], name="embedding rows", task="4.4",
                       hint=EMB_HINT)
    _assert_guard(full, n * dim, "embedding", "4.4")


@pytest.mark.task("4.4")
def test_embedding_rejects_out_of_range_ids() -> None:
    m = _m()
    g = check.rng("embedding-bad")
    n, vocab, dim = 40, 30, 48
    ids = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int32)
    bad_pos = [3, 17, 39]
    ids[3], ids[17], ids[39] = vocab, -1, 1 << 30
    ids = ids.to(m.device)
    table = check.randn((vocab, dim), g, m.device)
    out = check.poisoned((n, dim), torch.float32, m.device)
    bad = check.poisoned(n, torch.int32, m.device)
    with check.unchanged(ids, table, names=["ids", "table"]):
        m.embedding(ids, table, out, bad, n, vocab, dim)
    want_bad = torch.zeros(n, dtype=torch.int32)
    want_bad[bad_pos] = 1
    check.assert_close(bad, want_bad, name="bad flags", task="4.4",
                       hint="bad[i] must be 1 exactly for ids < 0 or >= vocab, 0 for the others.")
    want = table.cpu()[ids.cpu().long().clamp(0, vocab - 1)]
    want[bad_pos] = 0.0
    check.assert_close(out, want, name="embedding rows (bad ids give zero rows)", task="4.4", hint=EMB_HINT)
    # The decoder's wrapper (decoder.embed, given code) turns the flags into an error; the same here.
    with pytest.raises(IndexError, match=r"token id 30 at position 3 is out of range"):
        _Kernels(m, None, None).embed(ids, table)


# ----------------------------------------------------------------------------------------------------
# 4.5 RoPE, 4.6 SwiGLU
# ----------------------------------------------------------------------------------------------------


@pytest.mark.task("4.5")
@pytest.mark.parametrize(("B", "T", "Hq", "Hk", "d"), [(1, 1, 1, 1, 2), (2, 17, 3, 2, 16), (1, 100, 2, 2, 64),
                                                       (2, 33, 4, 1, 80)])
def test_rope(B: int, T: int, Hq: int, Hk: int, d: int) -> None:
    m = _m()
    g = check.rng(f"rope-{B}-{T}-{Hq}-{Hk}-{d}")
    q = check.randn((B * T, Hq * d), g, m.device)
    k = check.randn((B * T, Hk * d), g, m.device)
    cos64, sin64 = _rope_tables(T, d)
    cos, sin = cos64.float().to(m.device), sin64.float().to(m.device)
    qf, qo = _guarded(q.numel(), m)
    kf, ko = _guarded(k.numel(), m)
    with check.unchanged(q, k, cos, sin, names=["q", "k", "cos", "sin"]):
        m.rope(q, k, cos, sin, qo, ko, B, T, Hq, Hk, d)
    c, s = cos.cpu().double(), sin.cpu().double()
    hint = ("TODO(task 4.5) in layers.cu: pair i with i + d/2 inside each head; the position is t = "
            "(token row) % T, the same for every head of the token; q and k may have different head counts.")
    for name, x, out, H in (("q_out", q, qo, Hq), ("k_out", k, ko, Hk)):
        ref = _rope_ref(x.cpu().double().view(B, T, H, d), c, s).reshape(B * T, H * d).float()
        check.assert_close(out.view(B * T, H * d), ref, name=f"rope {name}", rtol=1e-5, atol=1e-6, task="4.5",
                           hint=hint)
    _assert_guard(qf, q.numel(), "rope q_out", "4.5")
    _assert_guard(kf, k.numel(), "rope k_out", "4.5")


@pytest.mark.task("4.6")
@pytest.mark.parametrize("n", [1, 1000, 4099])
def test_swiglu(n: int) -> None:
    m = _m()
    g = check.rng(f"swiglu-{n}")
    gate = check.randn(n, g, "cpu", scale=3.0)
    special = torch.tensor([1e4, -1e4, 100.0, -100.0, 0.0, 88.0, -88.0, 1e-30])
    gate[: min(n, special.numel())] = special[: min(n, special.numel())]
    gate = gate.to(m.device)
    up = check.randn(n, g, m.device)
    full, out = _guarded(n, m)
    with check.unchanged(gate, up, names=["gate", "up"]):
        m.swiglu(gate, up, out, n)
    ref = (F.silu(gate.cpu().double()) * up.cpu().double()).float()
    check.assert_close(out, ref, name="swiglu", rtol=1e-5, atol=1e-6, task="4.6",
                       hint="TODO(task 4.6) in layers.cu: g / (1 + expf(-g)) * up, which stays finite for any g.")
    _assert_guard(full, n, "swiglu", "4.6")


# ----------------------------------------------------------------------------------------------------
# 4.7 naive attention, 4.8 flash attention
# ----------------------------------------------------------------------------------------------------


def _attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, B: int, H: int, N: int, d: int,
                   scale: float, causal: bool) -> torch.Tensor:
    """float64 softmax(scale q k^T [causal]) v on (B, N, H, d) tensors; returns (B * N, H * d) float32."""
    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.cpu().double().view(B, N, H, d).transpose(1, 2)

    s = heads(q) @ heads(k).transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), -math.inf)
    o = torch.softmax(s, dim=-1) @ heads(v)
    return o.transpose(1, 2).reshape(B * N, H * d).float()


def _qkv(name: str, B: int, H: int, N: int, d: int, m: cc.Lesson, q_scale: float = 1.0) -> list[torch.Tensor]:
    g = check.rng(name)
    return [check.randn((B * N, H * d), g, m.device, scale=s) for s in (q_scale, 1.0, 1.0)]


# (B, H, N, d, causal): sequences that are not multiples of the 32/64 tiles, every supported family of
# head dims the tests name (32, 64 and 80), both masks.
ATTN_CASES = [
    (1, 1, 1, 32, False), (1, 1, 1, 64, True), (2, 3, 17, 32, True), (2, 3, 17, 64, False),
    (1, 2, 100, 80, True), (1, 2, 100, 64, False), (1, 1, 257, 64, True), (1, 1, 257, 32, False),
    (1, 1, 257, 80, False), (2, 1, 130, 80, True),
]
ATTN_GPU_CASES = [(2, 4, 1000, 64, True), (1, 8, 2049, 64, False), (2, 2, 777, 80, True), (1, 4, 513, 32, False)]


# Outputs are convex combinations of v rows (size ~1); scores carry ~sqrt(d) * eps rounding, far below.
ATTN_RTOL, ATTN_ATOL = 1e-4, 2e-5


NAIVE_HINT = ("TODO(task 4.7) in attention.cu: scores s[(bh*N + i)*N + j] = scale * q_i . k_j (-inf when causal "
              "and j > i), then O[b, i, h, c] = sum_j P[bh, i, j] * v[b, j, h, c]; row n of head (b, h) starts "
              "at ((b*N + n)*H + h)*d.")
FLASH_HINT = ("TODO(task 4.8) in attention.cu: part 1 masks keys >= N (and kj > qi when causal), takes the row "
              "max over the 8 lanes, rescales l_i and acc by exp2f(m_old - m_new) and stores exp2f(s - m) to Pt; "
              "part 2 accumulates P V; part 3 sums l_i over the 8 lanes and writes acc / l for rows < N.")


def _run_naive(B: int, H: int, N: int, d: int, causal: bool, m: cc.Lesson) -> None:
    q, k, v = _qkv(f"naive-{B}-{H}-{N}-{d}-{causal}", B, H, N, d, m)
    scale = 1.0 / math.sqrt(d)
    n = B * N * H * d
    full, o = _guarded(n, m)
    s = check.poisoned(B * H * N * N, torch.float32, m.device)
    with check.unchanged(q, k, v, names=["q", "k", "v"]):
        m.attention_naive(q, k, v, s, o, B, H, N, d, scale, int(causal))
    rtol, atol = ATTN_RTOL, ATTN_ATOL
    check.assert_close(o.view(B * N, H * d), _attention_ref(q, k, v, B, H, N, d, scale, causal),
                       name=f"attention_naive B={B} H={H} N={N} d={d} causal={causal}", rtol=rtol, atol=atol,
                       task="4.7", hint=NAIVE_HINT)
    _assert_guard(full, n, "attention_naive", "4.7")


@pytest.mark.task("4.7")
@pytest.mark.parametrize(("B", "H", "N", "d", "causal"), ATTN_CASES[:7])
def test_attention_naive(B: int, H: int, N: int, d: int, causal: bool) -> None:
    _run_naive(B, H, N, d, causal, _m())


@pytest.mark.task("4.7")
def test_attention_naive_head_dim_16_and_gpu_sizes() -> None:
    m = _m()
    _run_naive(2, 2, 40, 16, True, m)
    for case in ATTN_GPU_CASES[:2] if m.backend == "cuda" else []:
        _run_naive(*case, m)


def _run_flash(B: int, H: int, N: int, d: int, causal: bool, m: cc.Lesson, q_scale: float = 1.0) -> None:
    q, k, v = _qkv(f"flash-{B}-{H}-{N}-{d}-{causal}-{q_scale}", B, H, N, d, m, q_scale)
    scale = 1.0 / math.sqrt(d)
    n = B * N * H * d
    full, o = _guarded(n, m)
    with check.unchanged(q, k, v, names=["q", "k", "v"]):
        m.attention_flash(q, k, v, o, B, H, N, d, scale, int(causal))
    rtol, atol = ATTN_RTOL, ATTN_ATOL
    if q_scale > 1:  # scores of size ~100: each is rounded to ~1e-5, which moves weights by as much
        rtol, atol = 1e-3, 1e-3
    check.assert_close(o.view(B * N, H * d), _attention_ref(q, k, v, B, H, N, d, scale, causal),
                       name=f"attention_flash B={B} H={H} N={N} d={d} causal={causal}", rtol=rtol, atol=atol,
                       task="4.8", hint=FLASH_HINT)
    _assert_guard(full, n, "attention_flash", "4.8")


@pytest.mark.task("4.8")
@pytest.mark.parametrize(("B", "H", "N", "d", "causal"), ATTN_CASES)
def test_attention_flash(B: int, H: int, N: int, d: int, causal: bool) -> None:
    _run_flash(B, H, N, d, causal, _m())


@pytest.mark.task("4.8")
@pytest.mark.parametrize("causal", [False, True])
def test_attention_flash_large_scores(causal: bool) -> None:
    """q scaled by 30: scores of size ~200, so exp() overflows unless every tile subtracts its running max."""
    _run_flash(1, 2, 100, 64, causal, _m(), q_scale=30.0)


@pytest.mark.task("4.8")
def test_attention_flash_head_dim_16_and_gpu_sizes() -> None:
    m = _m()
    _run_flash(1, 4, 40, 16, True, m)  # the capstone's head size
    for case in ATTN_GPU_CASES if m.backend == "cuda" else []:
        _run_flash(*case, m)


# ----------------------------------------------------------------------------------------------------
# 4.9 capstone
# ----------------------------------------------------------------------------------------------------


# The instructor's side of the capstone: the model's shape, its weights, the kernel wrappers handed to
# the learner's code (they count every call) and a float64 PyTorch reference. decoder.py holds the same
# given code for the learner; these copies are what the verdict relies on.


@dataclass(frozen=True)
class _Cfg:
    vocab: int = 64
    dim: int = 32
    n_heads: int = 2
    hidden: int = 64
    n_layers: int = 2
    eps: float = 1e-5
    theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


SIM_CFG = _Cfg()
GPU_CFG = _Cfg(vocab=4096, dim=1024, n_heads=16, hidden=2816, n_layers=2)


def _init_weights(cfg: _Cfg, seed: int, device: object) -> dict:
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).float().to(device)

    d, hd = cfg.dim, cfg.hidden
    layers = [{"attn_norm": rnd(d, scale=0.1, shift=1.0),
               "wq": rnd(d, d, scale=d**-0.5), "wk": rnd(d, d, scale=d**-0.5),
               "wv": rnd(d, d, scale=d**-0.5), "wo": rnd(d, d, scale=d**-0.5),
               "mlp_norm": rnd(d, scale=0.1, shift=1.0),
               "w_gate": rnd(hd, d, scale=d**-0.5), "w_up": rnd(hd, d, scale=d**-0.5),
               "w_down": rnd(d, hd, scale=hd**-0.5)} for _ in range(cfg.n_layers)]
    return {"tok_emb": rnd(cfg.vocab, d), "layers": layers, "norm": rnd(d, scale=0.1, shift=1.0),
            "lm_head": rnd(cfg.vocab, d, scale=3 * d**-0.5)}


class _Kernels:
    """The interface decoder.py's code calls (same methods as decoder.Kernels), counting each call."""

    def __init__(self, m4: object, m3: object, m2: object) -> None:
        self.m4, self.m3, self.m2 = m4, m3, m2
        self.device = m4.device  # type: ignore[attr-defined]
        self.counts: dict[str, int] = {}

    def _n(self, op: str) -> None:
        self.counts[op] = self.counts.get(op, 0) + 1

    def _empty(self, *shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=torch.float32, device=self.device)

    def rmsnorm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        self._n("rmsnorm")
        y = self._empty(*x.shape)
        self.m4.rmsnorm(x, w, y, x.shape[0], x.shape[1], eps)
        return y

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        self._n("linear")
        y = self._empty(x.shape[0], w.shape[0])
        self.m3.linear(x, w, torch.zeros(w.shape[0], device=self.device), y, x.shape[0], w.shape[1], w.shape[0])
        return y

    def rope_tables(self, T: int, d: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
        self._n("rope_tables")
        c, s = self._empty(T, d // 2), self._empty(T, d // 2)
        self.m4.rope_tables(c, s, T, d, theta)
        return c, s

    def rope(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, B: int, T: int,
             H: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        self._n("rope")
        qo, ko = self._empty(*q.shape), self._empty(*k.shape)
        self.m4.rope(q, k, cos, sin, qo, ko, B, T, H, H, d)
        return qo, ko

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, B: int, T: int, H: int,
                  d: int) -> torch.Tensor:
        self._n("attention")
        o = self._empty(*q.shape)
        self.m4.attention_flash(q, k, v, o, B, H, T, d, 1.0 / math.sqrt(d), 1)
        return o

    def swiglu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        self._n("swiglu")
        out = self._empty(*gate.shape)
        self.m4.swiglu(gate, up, out, gate.numel())
        return out

    def add(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self._n("add")
        out = self._empty(*a.shape)
        self.m4.add(a, b, out, a.numel())
        return out

    def embed(self, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        self._n("embed")
        ids = ids.to(torch.int32).to(self.device).contiguous()
        n, (vocab, dim) = ids.numel(), table.shape
        out, bad = self._empty(n, dim), torch.empty(n, dtype=torch.int32, device=self.device)
        self.m4.embedding(ids, table, out, bad, n, vocab, dim)
        flags = bad.cpu()
        if bool((flags != 0).any()):
            i = int((flags != 0).nonzero()[0])
            raise IndexError(f"token id {int(ids.flatten()[i])} at position {i} is out of range for an embedding "
                             f"table of {vocab} rows (valid ids: 0..{vocab - 1})")
        return out

    def argmax(self, x: torch.Tensor) -> int:
        self._n("argmax")
        x = x.contiguous().clone()
        out = torch.empty(1, dtype=torch.int64, device=self.device)
        self.m2.argmax(x, out, x.numel())
        return int(out.item())


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _block_ref(x: torch.Tensor, w: dict, cfg: _Cfg, B: int, T: int) -> torch.Tensor:
    w = {n: t.cpu().double() for n, t in w.items()}
    x = x.cpu().double()
    H, hd = cfg.n_heads, cfg.head_dim
    h = _rms(x, w["attn_norm"], cfg.eps)
    q, k, v = (h @ w[n].T for n in ("wq", "wk", "wv"))
    cos, sin = _rope_tables(T, hd, cfg.theta)
    q = _rope_ref(q.reshape(B, T, H, hd), cos, sin).transpose(1, 2)
    k = _rope_ref(k.reshape(B, T, H, hd), cos, sin).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, k, v.reshape(B, T, H, hd).transpose(1, 2), is_causal=True)
    x = x + a.transpose(1, 2).reshape(B * T, cfg.dim) @ w["wo"].T
    h = _rms(x, w["mlp_norm"], cfg.eps)
    return x + (F.silu(h @ w["w_gate"].T) * (h @ w["w_up"].T)) @ w["w_down"].T


def _generate_ref(weights: dict, cfg: _Cfg, prompt: list[int], n_new: int) -> tuple[list[int], float]:
    """Greedy tokens of the float64 reference, and the smallest top-2 logit gap over the steps."""
    tokens, gap = list(prompt), math.inf
    for _ in range(n_new):
        x = weights["tok_emb"].cpu().double()[torch.tensor(tokens)]
        for w in weights["layers"]:
            x = _block_ref(x, w, cfg, 1, len(tokens))
        logits = (_rms(x, weights["norm"].cpu().double(), cfg.eps) @ weights["lm_head"].cpu().double().T)[-1]
        top = torch.topk(logits, 2).values
        gap = min(gap, float(top[0] - top[1]))
        tokens.append(int(logits.argmax()))
    return tokens[len(prompt):], gap


def _capstone(m: cc.Lesson) -> tuple[ModuleType, _Cfg, _Kernels]:
    dec = _decoder()
    k = _Kernels(m, cc.lesson("03_gemm"), cc.lesson("02_reduce"))
    return dec, (SIM_CFG if m.backend == "sim" else GPU_CFG), k


BLOCK_CALLS = {"rmsnorm": 2, "linear": 7, "rope": 1, "attention": 1, "swiglu": 1, "add": 2}


@pytest.mark.task("4.9")
def test_decoder_block_matches_pytorch() -> None:
    m = _m()
    dec, cfg, k = _capstone(m)
    g = check.rng("decoder-block")
    weights = _init_weights(cfg, int(torch.randint(0, 1 << 30, (1,), generator=g)), m.device)
    B, T = (2, 13) if m.backend == "sim" else (4, 200)
    x = check.randn((B * T, cfg.dim), g, m.device)
    cos, sin = k.rope_tables(T, cfg.head_dim, cfg.theta)
    k.counts.clear()
    # torch may allocate, view and copy in decoder.py, not compute: a torch answer is refused at run time.
    with check.unchanged(x, names=["x"]), torch_answer_guard([dec.__file__]):
        y = dec.decoder_block(k, x, weights["layers"][0], cfg, B, T, cos, sin)
    got = {op: k.counts.get(op, 0) for op in BLOCK_CALLS}
    assert got == BLOCK_CALLS, (
        f"decoder_block (task 4.9) must be built from the kernels of k: expected calls {BLOCK_CALLS}, got {got}. "
        "Use k.rmsnorm, k.linear, k.rope, k.attention, k.swiglu and k.add for every step, no torch arithmetic.")
    ref = _block_ref(x, weights["layers"][0], cfg, B, T).float()
    check.assert_close(torch.as_tensor(y).reshape(B * T, cfg.dim), ref,
                       name="decoder block output", rtol=1e-4, atol=1e-4, task="4.9",
                       hint="Follow the docstring of decoder_block step by step; compare each intermediate with "
                            "the matching line of reference_block in decoder.py.")


@pytest.mark.task("4.9")
def test_greedy_tokens_match_pytorch() -> None:
    m = _m()
    dec, cfg, k = _capstone(m)
    g = check.rng("decoder-generate")
    prompt = [int(t) for t in torch.randint(0, cfg.vocab, (5,), generator=g)]
    seed0 = int(torch.randint(0, 1 << 30, (1,), generator=g))
    # Greedy decoding is only well defined when no step is a near-tie: move to the next seed if the
    # reference's best and second-best logits are ever closer than 1e-3 (float32 error is ~1e-5).
    for seed in range(seed0, seed0 + 20):  # noqa: B007 (the seed found is used below)
        weights = _init_weights(cfg, seed, m.device)
        want, gap = _generate_ref(weights, cfg, prompt, 8)
        if gap > 1e-3:
            break
    print(f"[capstone] model seed {seed}, prompt {prompt}, reference tokens {want}, smallest top-2 gap {gap:.3g}")
    with torch_answer_guard([dec.__file__]):
        got = [int(t) for t in dec.generate(k, weights, cfg, prompt, 8)]
    assert got == want, (f"greedy tokens (task 4.9): yours {got}, PyTorch {want} (prompt {prompt}, model seed {seed}). "
                         "If test_decoder_block_matches_pytorch passes, check generate: feed the prompt plus every "
                         "new token, take the logits of the LAST position.")
    per_step = {op: n * cfg.n_layers for op, n in BLOCK_CALLS.items()}
    per_step.update(linear=7 * cfg.n_layers + 1, rmsnorm=2 * cfg.n_layers + 1, embed=1, argmax=1)
    want_calls = {op: 8 * n for op, n in per_step.items()}
    got_calls = {op: k.counts.get(op, 0) for op in want_calls}
    assert got_calls == want_calls, (
        f"generate (task 4.9) must run every step on your kernels, one forward pass per new token, and pick each "
        f"token with k.argmax (lesson 02): expected calls {want_calls}, got {got_calls}.")


# ----------------------------------------------------------------------------------------------------
# Speed (GPU only; "not graded" on the simulator). Same-run ratios against PyTorch.
# ----------------------------------------------------------------------------------------------------


def _sets(make: object) -> list:
    """``MIN_SETS`` buffer sets made by ``make()`` (fresh random inputs each: different values per set)."""
    from cudacourse.speed import MIN_SETS

    return [make() for _ in range(MIN_SETS)]  # type: ignore[operator]


@pytest.mark.task("4.10")
@pytest.mark.gpu
def test_speed_softmax() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    rows, cols = 32768, 4096
    sets = _sets(lambda: (torch.randn(rows, cols, device=m.device),
                          check.poisoned((rows, cols), torch.float32, m.device)))

    def ok(i: int) -> None:
        x, y = sets[i]
        check.assert_close(y, torch.softmax(x.double(), dim=1).float(), name="softmax", rtol=1e-4, atol=1e-6,
                           task="4.10")

    m.softmax(*sets[0], rows, cols)
    ok(0)  # correct first: a fast wrong kernel earns no speed points
    judge(("04_transformer", "4.10"), f"softmax {rows}x{cols}",
          Side("yours", lambda i: m.softmax(*sets[i], rows, cols), lambda i: (sets[i][1],), ok),
          Side("torch.softmax", lambda i: torch.softmax(sets[i][0], dim=1)),
          sets=MIN_SETS, nbytes=2 * rows * cols * 4,
          hint="Read the row twice at most (online max/sum, then the write pass), use enough threads per row (the "
               "launcher's row_threads) and float4 loads when cols % 4 == 0.")


@pytest.mark.task("4.11")
@pytest.mark.gpu
def test_speed_layernorm() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    rows, cols = 8192, 16384
    sets = _sets(lambda: (torch.randn(rows, cols, device=m.device), torch.randn(cols, device=m.device),
                          torch.randn(cols, device=m.device), check.poisoned((rows, cols), torch.float32, m.device)))

    def ok(i: int) -> None:
        x, w, b, y = sets[i]
        check.assert_close(y, F.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5).float(),
                           name="layernorm", rtol=1e-4, atol=1e-4, task="4.11")

    m.layernorm(*sets[0], rows, cols, 1e-5)
    ok(0)  # correct first
    judge(("04_transformer", "4.11"), f"layernorm {rows}x{cols}",
          Side("yours", lambda i: m.layernorm(*sets[i], rows, cols, 1e-5), lambda i: (sets[i][3],), ok),
          Side("F.layer_norm", lambda i: F.layer_norm(sets[i][0], (cols,), sets[i][1], sets[i][2], 1e-5)),
          sets=MIN_SETS, nbytes=2 * rows * cols * 4,
          hint="One pass for the statistics (shifted sums or Welford), one pass to write: never three reads.")


@pytest.mark.task("4.12")
@pytest.mark.gpu
def test_speed_flash_vs_unfused() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    B, H, N, d = 4, 16, 2048, 64
    scale = 1.0 / math.sqrt(d)

    def make() -> tuple[torch.Tensor, ...]:
        q, k, v = (torch.randn(B * N, H * d, device=m.device) for _ in range(3))
        heads = tuple(t.view(B, N, H, d).transpose(1, 2).contiguous() for t in (q, k, v))
        return (q, k, v, check.poisoned((B * N, H * d), torch.float32, m.device), *heads)

    sets = _sets(make)

    def ok(i: int) -> None:
        qh, kh, vh = (t.double() for t in sets[i][4:])
        want = F.scaled_dot_product_attention(qh, kh, vh).transpose(1, 2).reshape(B * N, H * d)
        check.assert_close(sets[i][3], want.float(), name="attention_flash", rtol=1e-3, atol=1e-4, task="4.12")

    m.attention_flash(*sets[0][:4], B, H, N, d, scale, 0)
    ok(0)  # correct first

    def unfused(i: int) -> object:
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with sdpa_kernel(SDPBackend.MATH):
                return F.scaled_dot_product_attention(*sets[i][4:])
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    judge(("04_transformer", "4.12"), f"attention_flash B={B} H={H} N={N} d={d}",
          Side("yours", lambda i: m.attention_flash(*sets[i][:4], B, H, N, d, scale, 0), lambda i: (sets[i][3],), ok),
          Side("PyTorch math path (TF32 off)", unfused),
          sets=MIN_SETS, flops=4 * B * H * N * N * d, peak="fp32",
          hint="The given structure is fast: check that part 2 keeps acc in registers (constant loop bounds, "
               "#pragma unroll) and reads Pt and Vs as float4s.")


# ----------------------------------------------------------------------------------------------------
# Triton track (optional): tasks 4.T1 and 4.T2, the twins in norms_triton.py, checked like their CUDA versions.
# On the CPU Triton's interpreter runs them with one tile width (1024), so rows up to 1000 take the one-tile path
# and longer rows the tiled one; without the triton package they are "not graded", with the install command.
# ----------------------------------------------------------------------------------------------------

HINT_4T1 = ("softmax_kernel (TODO task 4.T1 in norms_triton.py): one tile: load with other=-inf, e = exp(x - max), "
            "store e / sum(e); tiled: per-lane online (max, sum) with ref = where(m_new == -inf, 0, m_new), merge the "
            "lanes with exp(m - mx), then a second walk storing exp(x - mx) / total.")
HINT_4T2 = ("layernorm_kernel (TODO task 4.T2 in norms_triton.py): one tile: shift by the row's first value, then "
            "mean, d = where(mask, xs - mean, 0), var = sum(d*d) / cols; tiled: shift by K = the row's first value "
            "before summing d and d*d, then ((x - K) - dm) * rsqrt(var + eps) * w + b.")
TRITON_LONG_ROWS = [16383, 16389]  # past the interpreter's tile: the tiled path; on a GPU, around the widest tile


def _twin() -> ModuleType:
    from cudacourse.triton_track import twin_or_not_graded

    return twin_or_not_graded(LESSON)


def _triton_rows(cols: int, m: cc.Lesson) -> int:
    """Rows per twin case: the interpreter runs one program (row) at a time, a few ms each: at most 41 rows there."""
    return _rows_for(cols, m) if m.backend == "cuda" else max(3, min(41, 20_000 // cols))


def _triton_softmax_case(t: ModuleType, rows: int, cols: int, x: torch.Tensor, m: cc.Lesson, what: str) -> None:
    full, y = _guarded(rows * cols, m)
    with check.unchanged(x, names=["x"]), torch_answer_guard([t.__file__]):
        t.softmax(x, y, rows, cols)
    ref = torch.softmax(x.cpu().double().view(rows, cols), dim=1).float()
    check.assert_close(y.view(rows, cols), ref, name=f"softmax (Triton) {what}, rows={rows}, cols={cols}", rtol=3e-5,
                       atol=1e-12, task="4.T1", hint=HINT_4T1)
    _assert_guard(full, rows * cols, "softmax (Triton)", "4.T1")


@pytest.mark.task("4.T1")
@pytest.mark.parametrize("cols", ROW_LENGTHS + TRITON_LONG_ROWS)
def test_triton_softmax(cols: int) -> None:
    """The Triton twin of softmax: every row length, both paths, against a float64 reference."""
    t, m = _twin(), _m()
    rows = _triton_rows(cols, m)
    g = check.rng(f"4.T1-{cols}")
    _triton_softmax_case(t, rows, cols, check.randn((rows, cols), g, m.device, scale=3.0), m, "randn * 3")
    if m.backend == "cuda" and cols == ROW_LENGTHS[-1]:
        _triton_softmax_case(t, 4096, 32771, check.randn((4096, 32771), g, m.device, scale=5.0), m, "large")


@pytest.mark.task("4.T1")
@pytest.mark.parametrize("cols", [33, 1000, 4099])
def test_triton_softmax_large_and_neg_inf(cols: int) -> None:
    """Inputs of size 1e4 (exp overflows without the max subtracted) and rows with -inf entries (also whole tiles of
    -inf in the tiled path: row 0 has one finite entry)."""
    t, m = _twin(), _m()
    rows = _triton_rows(cols, m)
    g = check.rng(f"4.T1-special-{cols}")
    _triton_softmax_case(t, rows, cols, check.randn((rows, cols), g, m.device, scale=1e4), m, "randn * 1e4")
    x = check.randn((rows, cols), g, "cpu", scale=2.0)
    drop = torch.rand((rows, cols), generator=g) < 0.4
    drop[:, -1] = False  # every row keeps a finite entry; row 0 only its last one, after tiles of -inf
    drop[0, :-1] = True
    x[drop] = -math.inf
    _triton_softmax_case(t, rows, cols, x.to(m.device), m, "with -inf entries")


@pytest.mark.task("4.T1")
def test_triton_softmax_unaligned() -> None:
    """x and y one float into their buffers: Triton loads narrower; the answer must not change."""
    t, m = _twin(), _m()
    rows, cols = 5, 1000
    xbuf = check.randn((rows * cols + 1,), check.rng("4.T1-unaligned"), m.device, scale=3.0)
    full = check.poisoned(rows * cols + 1 + check.GUARD, torch.float32, m.device)
    x, y = xbuf[1:], full[1:rows * cols + 1]
    with check.unchanged(x, names=["x"]), torch_answer_guard([t.__file__]):
        t.softmax(x, y, rows, cols)
    check.assert_close(y.view(rows, cols), torch.softmax(x.cpu().double().view(rows, cols), dim=1).float(),
                       name="softmax (Triton) of views at offset 1", rtol=3e-5, atol=1e-12, task="4.T1", hint=HINT_4T1)
    _assert_guard(full, rows * cols + 1, "softmax (Triton)", "4.T1")
    assert bool(full[0].isnan()), "softmax (Triton, task 4.T1) wrote before the start of its output"


def _triton_layernorm_case(t: ModuleType, m: cc.Lesson, rows: int, cols: int, offset: float, name: str) -> None:
    g = check.rng(name)
    x = (check.randn((rows, cols), g, "cpu", scale=2.0) + offset).to(m.device)
    w = check.randn(cols, g, m.device, scale=0.5) + 1.0
    b = check.randn(cols, g, m.device, scale=0.5)
    eps = 1e-5
    full, y = _guarded(rows * cols, m)
    with check.unchanged(x, w, b, names=["x", "w", "b"]), torch_answer_guard([t.__file__]):
        t.layernorm(x, w, b, y, rows, cols, eps)
    atol = 1e-5 if offset == 0 else 2e-4  # as task 4.2: rows around 1000 are stored with a spacing of 6e-5
    check.assert_close(y.view(rows, cols), _layernorm_ref(x, w, b, eps), rtol=1e-5, atol=atol, task="4.T2",
                       name=f"layernorm (Triton) rows of mean {offset:g}, {rows}x{cols}", hint=HINT_4T2)
    _assert_guard(full, rows * cols, "layernorm (Triton)", "4.T2")


@pytest.mark.task("4.T2")
@pytest.mark.parametrize("cols", ROW_LENGTHS + TRITON_LONG_ROWS[1:])
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_triton_layernorm(cols: int, offset: float) -> None:
    """The Triton twin of layernorm: both paths, rows far from zero included."""
    t, m = _twin(), _m()
    rows = _triton_rows(cols, m)
    _triton_layernorm_case(t, m, rows, cols, offset, f"4.T2-{cols}-{offset}")
    if m.backend == "cuda" and cols == ROW_LENGTHS[-1]:
        _triton_layernorm_case(t, m, 2048, 32771, offset, f"4.T2-large-{offset}")


def test_triton_worked_rmsnorm() -> None:
    """The worked example of norms_triton.py (given complete; not graded)."""
    t, m = _twin(), _m()
    for rows, cols in [(5, 7), (3, 4099)]:
        g = check.rng(f"4.T-worked-{cols}")
        x, w = check.randn((rows, cols), g, m.device), check.randn(cols, g, m.device)
        y = check.poisoned((rows, cols), torch.float32, m.device)
        t.rmsnorm(x, w, y, rows, cols, 1e-6)
        xd = x.cpu().double()
        ref = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.cpu().double()).float()
        check.assert_close(y, ref, name=f"rmsnorm (Triton) {rows}x{cols}", rtol=1e-5, atol=1e-5, task="worked example",
                           hint="rmsnorm is given complete in norms_triton.py; did an edit change it?")


# Wrong twins, made from the solution by one edit each: every one must fail the checks the tasks use.
TRITON_MUTANTS = {
    "softmax all zeros": ("tl.store(y_row + offs, e / tl.sum(e, axis=0), mask=mask)",
                          "tl.store(y_row + offs, e * 0.0, mask=mask)"),
    "softmax without the max": ("e = tl.exp(x - tl.max(x, axis=0))", "e = tl.exp(x)"),
    "softmax tiled, NaN after -inf tiles": ("ref = tl.where(m_new == float(\"-inf\"), 0.0, m_new)", "ref = m_new"),
    "layernorm unshifted sums": ("K = tl.load(x_row)", "K = 0.0"),
    "layernorm all zeros": ("tl.store(y_row + offs, d * rstd * w + b, mask=mask)",
                            "tl.store(y_row + offs, d * 0.0, mask=mask)"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow / NaN warnings from the wrong code
@pytest.mark.parametrize("mutant", list(TRITON_MUTANTS))
def test_triton_wrong_twins_fail_the_check(mutant: str, tmp_path: Path) -> None:
    from cudacourse.triton_track import load_mutant

    _twin()  # not graded (a skip) without triton
    m = _m()
    wrong = load_mutant(LESSON, "norms_triton.py", TRITON_MUTANTS[mutant], tmp_path, backend=m.backend)
    with pytest.raises(AssertionError):
        if mutant == "softmax all zeros":
            _triton_softmax_case(wrong, 5, 33, check.randn((5, 33), check.rng("4.T-m"), m.device), m, mutant)
        elif mutant == "softmax without the max":
            _triton_softmax_case(wrong, 5, 33, check.randn((5, 33), check.rng("4.T-m"), m.device, scale=1e4), m,
                                 mutant)
        elif mutant.startswith("softmax tiled"):
            # past every tile width (the GPU autotuner may pick 16384), with whole tiles of -inf under any of them
            cols, inf = (16389, 16384) if m.backend == "cuda" else (4099, 2048)
            x = check.randn((3, cols), check.rng("4.T-m"), "cpu")
            x[:, :inf] = -math.inf
            _triton_softmax_case(wrong, 3, cols, x.to(m.device), m, mutant)
        elif mutant == "layernorm unshifted sums":
            cols = 16389 if m.backend == "cuda" else 4099  # past every tile width: the tiled path
            _triton_layernorm_case(wrong, m, 3, cols, 1000.0, mutant)
        else:
            _triton_layernorm_case(wrong, m, 5, 33, 0.0, mutant)


# ----------------------------------------------------------------------------------------------------
# Triton track: task 4.T3, flash attention in attention_triton.py, against the same float64 reference and
# tolerances as task 4.8. The interpreter runs one 32 x 32 tile pair at a time (tens of ms each), so its cases
# are few and short (still ragged against the tiles, both masks, head dims that are not powers of two); a GPU
# adds the large ones.
# ----------------------------------------------------------------------------------------------------

HINT_4T3 = ("attention_flash_kernel (TODO task 4.T3 in attention_triton.py): s = tl.dot(q_lo, kt_lo, "
            "input_precision=\"ieee\") then s = tl.dot(q_up, kt_up, s, ...); -inf where js >= N or (causal and "
            "js > qs); m_new = max(m, row max); "
            "p = exp2(s - m_new); alpha = exp2(m - m_new); l_i = l_i * alpha + row sums of p; "
            "acc = acc * alpha + tl.dot(p, v, ...); m = m_new.")
TRITON_ATTN_CASES = [(1, 1, 1, 32, False), (2, 3, 17, 64, True), (1, 2, 100, 80, True), (1, 1, 130, 48, False)]
TRITON_ATTN_GPU_CASES = [(2, 4, 1000, 64, True), (2, 2, 777, 80, True), (1, 4, 513, 32, False), (1, 2, 300, 128, True)]


def _attention_twin() -> ModuleType:
    from cudacourse.triton_track import twin_or_not_graded

    return twin_or_not_graded(LESSON, "attention_triton.py")


def _triton_flash_case(t: ModuleType, B: int, H: int, N: int, d: int, causal: bool, m: cc.Lesson,
                       q_scale: float = 1.0, fn: str = "attention_flash") -> None:
    q, k, v = _qkv(f"4.T3-{B}-{H}-{N}-{d}-{causal}-{q_scale}", B, H, N, d, m, q_scale)
    scale = 1.0 / math.sqrt(d)
    n = B * N * H * d
    full, o = _guarded(n, m)
    with check.unchanged(q, k, v, names=["q", "k", "v"]), torch_answer_guard([t.__file__]):
        getattr(t, fn)(q, k, v, o, B, H, N, d, scale, int(causal))
    rtol, atol = (1e-3, 1e-3) if q_scale > 1 else (ATTN_RTOL, ATTN_ATOL)  # as task 4.8
    task = "4.T3" if fn == "attention_flash" else "worked example"
    check.assert_close(o.view(B * N, H * d), _attention_ref(q, k, v, B, H, N, d, scale, causal),
                       name=f"{fn} (Triton) B={B} H={H} N={N} d={d} causal={causal}", rtol=rtol, atol=atol,
                       task=task, hint=HINT_4T3 if task == "4.T3" else "given complete; did an edit change it?")
    _assert_guard(full, n, f"{fn} (Triton)", task)


@pytest.mark.task("4.T3")
@pytest.mark.parametrize(("B", "H", "N", "d", "causal"), TRITON_ATTN_CASES)
def test_triton_attention_flash(B: int, H: int, N: int, d: int, causal: bool) -> None:
    """The Triton twin of flash attention: ragged sequence lengths, both masks, head dims 32 to 80."""
    t, m = _attention_twin(), _m()
    _triton_flash_case(t, B, H, N, d, causal, m)
    if m.backend == "cuda" and (B, H, N, d, causal) == TRITON_ATTN_CASES[-1]:
        for case in TRITON_ATTN_GPU_CASES:
            _triton_flash_case(t, *case, m)


@pytest.mark.task("4.T3")
@pytest.mark.parametrize("causal", [False, True])
def test_triton_attention_flash_large_scores(causal: bool) -> None:
    """q scaled by 30: scores of size ~200, so exp2 overflows unless every tile subtracts its running max."""
    _triton_flash_case(_attention_twin(), 1, 1, 70, 64, causal, _m(), q_scale=30.0)


@pytest.mark.task("4.T3")
def test_triton_attention_flash_head_dim_16_and_bad_inputs() -> None:
    """The capstone's head size, and the given wrapper's refusals (a head dim past one tile, a float64 tensor)."""
    t, m = _attention_twin(), _m()
    _triton_flash_case(t, 1, 2, 40, 16, True, m)
    q = check.randn((4, 2 * 160), check.rng("4.T3-bad"), m.device)
    o = check.poisoned((4, 2 * 160), torch.float32, m.device)
    with pytest.raises(ValueError, match=r"head dim d = 160"):
        t.attention_flash(q, q, q, o, 1, 2, 4, 160, 0.1, 0)
    with pytest.raises(TypeError, match=r"parameter 'k'.*float32"):
        t.attention_flash(q, q.double(), q, o, 1, 2, 4, 160, 0.1, 0)
    assert bool(o.isnan().all()), "a rejected call must not run the kernel"


def test_triton_worked_attention_online_v1() -> None:
    """The worked example of attention_triton.py (given complete; not graded): small, one program per row."""
    t, m = _attention_twin(), _m()
    _triton_flash_case(t, 1, 1, 20, 16, True, m, fn="attention_online_v1")
    _triton_flash_case(t, 1, 1, 5, 48, False, m, fn="attention_online_v1")


TRITON_ATTN_MUTANTS = {
    "all zeros": ("acc / l_i[:, None],", "acc * 0.0,"),
    "no causal mask": ("keep = (js[None, :] < N) & ((causal == 0) | (js[None, :] <= qs[:, None]))",
                       "keep = js[None, :] < N"),
    "no rescale of acc": ("acc = acc * alpha[:, None] + tl.dot(p, v, input_precision",
                          "acc = acc + tl.dot(p, v, input_precision"),
    "keys past N kept": ("keep = (js[None, :] < N) & (", "keep = (js[None, :] >= 0) & ("),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow / NaN warnings from the wrong code
@pytest.mark.parametrize("mutant", list(TRITON_ATTN_MUTANTS))
def test_triton_wrong_attention_twins_fail_the_check(mutant: str, tmp_path: Path) -> None:
    from cudacourse.triton_track import load_mutant

    _attention_twin()  # not graded (a skip) without triton
    m = _m()
    wrong = load_mutant(LESSON, "attention_triton.py", TRITON_ATTN_MUTANTS[mutant], tmp_path, backend=m.backend)
    with pytest.raises(AssertionError):
        # 100 keys: several key tiles of 32 or 64 (a rescale happens), a ragged last tile; full attention, so that
        # keys past N reach the rows (causal rows never see them), except for the causal mutant
        _triton_flash_case(wrong, 1, 1, 100, 16, mutant == "no causal mask", m, q_scale=3.0)
