"""Lesson 04 capstone (task 4.9): a Llama-style decoder that runs on your own kernels.

    import cudacourse as cc
    from decoder import Config, Kernels, init_weights, decoder_block, generate
    k = Kernels.from_lessons()                  # your kernels of lessons 04, 03 (linear) and 02 (argmax)
    cfg = Config.tiny()                         # sized for the CPU simulator
    weights = init_weights(cfg, seed=0, device=k.device)
    tokens = generate(k, weights, cfg, prompt=[1, 2, 3], n_new=8)

Every tensor operation of the model goes through ``Kernels``: RMSNorm (task 4.3), the linear layer of
lesson 03 (task 3.5), RoPE (task 4.5), causal flash attention (task 4.8), SwiGLU (task 4.6), the
residual add, the embedding lookup (task 4.4) and argmax (lesson 02, task 2.6). PyTorch only allocates
buffers. ``reference_*`` below is the same model in plain PyTorch (float64), what the tests compare with.

Shapes: activations are ``(B * T, dim)`` matrices, which is also the ``(B, T, H, head_dim)`` layout the
attention and RoPE kernels take: no transposes anywhere. Weights use ``torch.nn.Linear``'s layout
``(out_features, in_features)``, the layout lesson 03's ``linear`` takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

# ----------------------------------------------------------------------------------------------------
# The model's shape and weights
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """Sizes of a Llama-style decoder (no biases, RMSNorm, RoPE, SwiGLU MLP, tied nothing)."""

    vocab: int = 64
    dim: int = 32
    n_heads: int = 2
    hidden: int = 64
    n_layers: int = 2
    eps: float = 1e-5
    theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        """Features per attention head."""
        return self.dim // self.n_heads

    @classmethod
    def tiny(cls) -> Config:
        """Sized for the CPU simulator: 32 wide, 2 heads of 16, an MLP of 64, a vocabulary of 64."""
        return cls()

    @classmethod
    def gpu(cls) -> Config:
        """A realistic width for a GPU (a small Llama layer: 1024 wide, 16 heads of 64)."""
        return cls(vocab=4096, dim=1024, n_heads=16, hidden=2816, n_layers=2)


def init_weights(cfg: Config, seed: int, device: Any = "cpu") -> dict[str, Any]:
    """Random weights (seeded, drawn on the CPU in float64 then cast): the same on every backend.

    Returns ``{"tok_emb": (vocab, dim), "layers": [per-layer dicts], "norm": (dim,), "lm_head":
    (vocab, dim)}``; a layer holds ``attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down``.
    Scales keep activations of order 1 and make the logits spread out, so greedy tokens are not ties.
    """
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        t = torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift
        return t.to(torch.float32).to(device)

    d, hd = cfg.dim, cfg.hidden
    layers = []
    for _ in range(cfg.n_layers):
        layers.append({
            "attn_norm": rnd(d, scale=0.1, shift=1.0),
            "wq": rnd(d, d, scale=1 / math.sqrt(d)), "wk": rnd(d, d, scale=1 / math.sqrt(d)),
            "wv": rnd(d, d, scale=1 / math.sqrt(d)), "wo": rnd(d, d, scale=1 / math.sqrt(d)),
            "mlp_norm": rnd(d, scale=0.1, shift=1.0),
            "w_gate": rnd(hd, d, scale=1 / math.sqrt(d)), "w_up": rnd(hd, d, scale=1 / math.sqrt(d)),
            "w_down": rnd(d, hd, scale=1 / math.sqrt(hd)),
        })
    return {"tok_emb": rnd(cfg.vocab, d), "layers": layers, "norm": rnd(d, scale=0.1, shift=1.0),
            "lm_head": rnd(cfg.vocab, d, scale=3 / math.sqrt(d))}


# ----------------------------------------------------------------------------------------------------
# Your kernels, as functions of tensors
# ----------------------------------------------------------------------------------------------------


def embed(m: Any, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``table[ids]`` with the embedding kernel (task 4.4); IndexError for an id outside the table.

    The kernel cannot raise, so it flags bad positions (``bad[i] = 1``) and never reads the table for
    them; this wrapper turns the first flag into the error.
    """
    ids = ids.to(torch.int32).contiguous()
    n, (vocab, dim) = ids.numel(), table.shape
    out = torch.empty(n, dim, dtype=torch.float32, device=table.device)
    bad = torch.empty(n, dtype=torch.int32, device=table.device)
    m.embedding(ids, table, out, bad, n, vocab, dim)
    flags = bad.cpu()
    if bool((flags != 0).any()):
        i = int((flags != 0).nonzero()[0])
        raise IndexError(f"token id {int(ids.flatten()[i])} at position {i} is out of range for an embedding "
                         f"table of {vocab} rows (valid ids: 0..{vocab - 1})")
    return out


class Kernels:
    """The course kernels the decoder uses, each taking and returning tensors (outputs allocated here).

    ``m4``, ``m3``, ``m2`` are the modules of lessons 04, 03 and 02 (``cc.lesson(...)``).
    """

    def __init__(self, m4: Any, m3: Any, m2: Any) -> None:
        self.m4, self.m3, self.m2 = m4, m3, m2
        self.device = m4.device
        self._zeros: dict[int, torch.Tensor] = {}

    @classmethod
    def from_lessons(cls, **kw: Any) -> Kernels:
        """Your kernels (or the solutions, per ``CUDA_COURSE_IMPL``), on the default backend."""
        import cudacourse as cc

        return cls(cc.lesson("04_transformer", **kw), cc.lesson("03_gemm", **kw), cc.lesson("02_reduce", **kw))

    def _empty(self, *shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=torch.float32, device=self.device)

    def rmsnorm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm of each row of x (rows, cols), task 4.3."""
        y = self._empty(*x.shape)
        self.m4.rmsnorm(x, w, y, x.shape[0], x.shape[1], eps)
        return y

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x (rows, in) @ w (out, in)^T, lesson 03's linear layer (task 3.5) with a zero bias."""
        out_f, in_f = w.shape
        if out_f not in self._zeros:
            self._zeros[out_f] = torch.zeros(out_f, dtype=torch.float32, device=self.device)
        y = self._empty(x.shape[0], out_f)
        self.m3.linear(x, w, self._zeros[out_f], y, x.shape[0], in_f, out_f)
        return y

    def rope_tables(self, T: int, d: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables (T, d/2) for positions 0..T-1 (worked kernel)."""
        c, s = self._empty(T, d // 2), self._empty(T, d // 2)
        self.m4.rope_tables(c, s, T, d, theta)
        return c, s

    def rope(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, B: int, T: int,
             H: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE on q and k, both (B * T, H * d), task 4.5."""
        qo, ko = self._empty(*q.shape), self._empty(*k.shape)
        self.m4.rope(q, k, cos, sin, qo, ko, B, T, H, H, d)
        return qo, ko

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, B: int, T: int, H: int,
                  d: int) -> torch.Tensor:
        """Causal attention over (B * T, H * d) inputs, scale 1/sqrt(d), task 4.8."""
        o = self._empty(*q.shape)
        self.m4.attention_flash(q, k, v, o, B, H, T, d, 1.0 / math.sqrt(d), 1)
        return o

    def swiglu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up, task 4.6."""
        out = self._empty(*gate.shape)
        self.m4.swiglu(gate, up, out, gate.numel())
        return out

    def add(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a + b, the residual connection (worked kernel)."""
        out = self._empty(*a.shape)
        self.m4.add(a, b, out, a.numel())
        return out

    def embed(self, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """Rows of the embedding table, task 4.4 (IndexError for a bad id)."""
        return embed(self.m4, ids.to(self.device), table)

    def argmax(self, x: torch.Tensor) -> int:
        """Index of the first maximum of a vector, lesson 02's argmax (task 2.6)."""
        x = x.contiguous().clone()
        out = torch.empty(1, dtype=torch.int64, device=self.device)
        self.m2.argmax(x, out, x.numel())
        return int(out.item())


# ----------------------------------------------------------------------------------------------------
# Task 4.9: the decoder block and greedy decoding
# ----------------------------------------------------------------------------------------------------


def decoder_block(k: Kernels, x: torch.Tensor, w: dict[str, torch.Tensor], cfg: Config, B: int, T: int,
                  cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """One Llama decoder block on x (B * T, dim); returns the new (B * T, dim) activations.

        h = rmsnorm(x, attn_norm)
        q, k, v = h Wq^T, h Wk^T, h Wv^T           (each (B*T, dim) = (B, T, H, head_dim))
        q, k = rope(q, k)
        x = x + attention(q, k, v, causal) Wo^T
        h = rmsnorm(x, mlp_norm)
        x = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T
    """
    # TODO(task 4.9, part 1 of 2): the six lines above with the methods of k (~10 lines). Every op
    # must be one of k's methods: the test counts the calls (2 rmsnorm, 7 linear, 1 rope, 1 attention,
    # 1 swiglu, 2 add). Hint: k.linear(h, w["wq"]) is h @ w["wq"]^T.
    raise NotImplementedError("TODO(task 4.9): decoder_block in lessons/04_transformer/decoder.py")


def forward(k: Kernels, weights: dict[str, Any], cfg: Config, ids: torch.Tensor) -> torch.Tensor:
    """Logits (B * T, vocab) for token ids (B, T): embed, the blocks, the final RMSNorm, the LM head."""
    B, T = ids.shape
    x = k.embed(ids.reshape(-1), weights["tok_emb"])
    cos, sin = k.rope_tables(T, cfg.head_dim, cfg.theta)
    for w in weights["layers"]:
        x = decoder_block(k, x, w, cfg, B, T, cos, sin)
    return k.linear(k.rmsnorm(x, weights["norm"], cfg.eps), weights["lm_head"])


def generate(k: Kernels, weights: dict[str, Any], cfg: Config, prompt: list[int], n_new: int) -> list[int]:
    """Greedy decoding: append the argmax of the last position's logits, ``n_new`` times.

    Returns only the new tokens. Each step runs the whole sequence again (no KV cache: simple, and
    cheap at these lengths).
    """
    # TODO(task 4.9, part 2 of 2): (~6 lines) loop n_new times: ids = the prompt plus the tokens so far
    # as a (1, T) int32 tensor on k.device; logits = forward(k, weights, cfg, ids); the next token is
    # k.argmax(logits[-1]). Hint: the argmax must be your kernel (k.argmax), not torch.argmax.
    raise NotImplementedError("TODO(task 4.9): generate in lessons/04_transformer/decoder.py")


# ----------------------------------------------------------------------------------------------------
# The reference: the same model in plain PyTorch, float64
# ----------------------------------------------------------------------------------------------------


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def reference_rope_tables(T: int, d: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, d/2) in float64: angle(t, i) = t * theta^(-2i/d)."""
    freq = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
    return ang.cos(), ang.sin()


def reference_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of x (B, T, H, d) with tables (T, d/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def reference_block(x: torch.Tensor, w: dict[str, torch.Tensor], cfg: Config, B: int, T: int) -> torch.Tensor:
    """decoder_block in float64 PyTorch (x is (B * T, dim); returns float64 on the CPU)."""
    w = {n: t.detach().cpu().double() for n, t in w.items()}
    x = x.detach().cpu().double()
    H, hd = cfg.n_heads, cfg.head_dim
    h = _rms(x, w["attn_norm"], cfg.eps)
    q, k, v = (h @ w[n].T for n in ("wq", "wk", "wv"))
    cos, sin = reference_rope_tables(T, hd, cfg.theta)
    q = reference_rope(q.reshape(B, T, H, hd), cos, sin).transpose(1, 2)
    k = reference_rope(k.reshape(B, T, H, hd), cos, sin).transpose(1, 2)
    v = v.reshape(B, T, H, hd).transpose(1, 2)
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a.transpose(1, 2).reshape(B * T, cfg.dim) @ w["wo"].T
    h = _rms(x, w["mlp_norm"], cfg.eps)
    return x + (torch.nn.functional.silu(h @ w["w_gate"].T) * (h @ w["w_up"].T)) @ w["w_down"].T


def reference_forward(weights: dict[str, Any], cfg: Config, ids: torch.Tensor) -> torch.Tensor:
    """Logits (B * T, vocab), float64 on the CPU."""
    B, T = ids.shape
    x = weights["tok_emb"].cpu().double()[ids.cpu().long().reshape(-1)]
    for w in weights["layers"]:
        x = reference_block(x, w, cfg, B, T)
    return _rms(x, weights["norm"].cpu().double(), cfg.eps) @ weights["lm_head"].cpu().double().T


def reference_generate(weights: dict[str, Any], cfg: Config, prompt: list[int], n_new: int) -> tuple[list[int], float]:
    """Greedy tokens of the reference, and the smallest gap between the best and second-best logit
    over the steps (how far from a tie the choices were)."""
    tokens, gap = list(prompt), math.inf
    for _ in range(n_new):
        logits = reference_forward(weights, cfg, torch.tensor([tokens]))[-1]
        top = torch.topk(logits, 2).values
        gap = min(gap, float(top[0] - top[1]))
        tokens.append(int(logits.argmax()))
    return tokens[len(prompt):], gap
