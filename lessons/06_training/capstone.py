"""Lesson 06 capstone, the given half: data, lesson 04's decoder, and the same model in plain PyTorch.

    import cudacourse as cc
    import capstone, train                       # both from this folder
    dec = capstone.load_decoder()                # lesson 04's decoder.py (Config, init_weights, forward)
    ops = train.Ops(cc.lesson("06_training"), cc.lesson("04_transformer"), cc.lesson("03_gemm"), dec)
    cfg = capstone.sim_config()                  # or capstone.gpu_config() on a GPU
    weights = dec.init_weights(cfg, seed=0, device=ops.device)
    text = capstone.load_corpus(); tok = capstone.CharTokenizer(text)
    data = capstone.batches(tok.encode(text), batch=4, seq=16, steps=30, seed=0, device=ops.device)
    losses, trained = train.train(ops, weights, cfg, data, lr=1e-2)        # your kernels (task 6.7)
    reference = capstone.torch_train(weights, cfg, data, lr=1e-2)           # PyTorch, same everything

Your half is train.py (the autograd Functions and the training step). This file is not an exercise.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch

import cudacourse as cc
from cudacourse.loader import REPO_ROOT, import_file

LESSON = "06_training"

# ----------------------------------------------------------------------------------------------------
# Data: a character-level corpus shipped with the lesson
# ----------------------------------------------------------------------------------------------------


def corpus_path() -> Path:
    """The lesson's text, ``lessons/06_training/corpus.txt`` (the same file for lessons/ and solutions/)."""
    return REPO_ROOT / "lessons" / LESSON / "corpus.txt"


def load_corpus(path: Path | None = None) -> str:
    """The corpus text without its first line (the line that names the source and licence)."""
    text = (path or corpus_path()).read_text(encoding="ascii")
    return text.split("\n", 1)[1]


class CharTokenizer:
    """One token per distinct character of a text, ids in sorted character order."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab(self) -> int:
        """Number of distinct characters."""
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """int64 ids of the characters (KeyError for a character the corpus does not contain)."""
        return torch.tensor([self.index[c] for c in text], dtype=torch.int64)

    def decode(self, ids: list[int]) -> str:
        """Text of a list of ids."""
        return "".join(self.chars[i] for i in ids)


def batches(data: torch.Tensor, batch: int, seq: int, steps: int, seed: int,
            device: Any = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` random batches of (ids (batch, seq) int32, targets (batch, seq) int64: the next characters)."""
    if data.numel() <= seq + 1:
        raise ValueError(f"the data has {data.numel()} tokens: need more than seq + 1 = {seq + 1}")
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        start = torch.randint(0, data.numel() - seq - 1, (batch,), generator=g)
        ids = torch.stack([data[s:s + seq] for s in start.tolist()])
        tgt = torch.stack([data[s + 1:s + seq + 1] for s in start.tolist()])
        out.append((ids.to(torch.int32).to(device), tgt.to(device)))
    return out


def load_decoder(impl: str | None = None) -> ModuleType:
    """Lesson 04's ``decoder.py`` (from lessons/ or solutions/, as ``cc.lesson`` picks)."""
    return import_file(cc.lesson("04_transformer", impl=impl).dir / "decoder.py")


def sim_config() -> Any:
    """Lesson 04's tiny decoder (vocabulary 64 = the corpus's characters): trains on the simulator."""
    return load_decoder().Config.tiny()


def gpu_config() -> Any:
    """A larger character model for a GPU: 256 wide, 4 layers, 8 heads of 32."""
    return load_decoder().Config(vocab=64, dim=256, n_heads=8, hidden=704, n_layers=4)


# ----------------------------------------------------------------------------------------------------
# The same model and training in plain PyTorch (the curve to compare with, and the benchmark's baseline)
# ----------------------------------------------------------------------------------------------------


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, T: int, theta: float) -> torch.Tensor:
    d = x.shape[-1]
    freq = theta ** (-torch.arange(0, d // 2, dtype=x.dtype, device=x.device) * 2 / d)
    ang = torch.arange(T, dtype=x.dtype, device=x.device)[:, None] * freq[None, :]
    c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def torch_loss(W: dict[str, Any], cfg: Any, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Lesson 04's decoder and the mean cross-entropy in PyTorch ops (differentiable, any dtype/device)."""
    B, T = ids.shape
    H, hd = cfg.n_heads, cfg.head_dim
    x = W["tok_emb"][ids.reshape(-1).long()]
    for L in W["layers"]:
        h = _rms(x, L["attn_norm"], cfg.eps)
        q, k, v = (h @ L[n].T for n in ("wq", "wk", "wv"))
        q = _rope(q.reshape(B, T, H, hd), T, cfg.theta).transpose(1, 2)
        k = _rope(k.reshape(B, T, H, hd), T, cfg.theta).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v.reshape(B, T, H, hd).transpose(1, 2),
                                                             is_causal=True)
        x = x + a.transpose(1, 2).reshape(B * T, cfg.dim) @ L["wo"].T
        h = _rms(x, L["mlp_norm"], cfg.eps)
        x = x + (torch.nn.functional.silu(h @ L["w_gate"].T) * (h @ L["w_up"].T)) @ L["w_down"].T
    logits = _rms(x, W["norm"], cfg.eps) @ W["lm_head"].T
    return torch.nn.functional.cross_entropy(logits, targets.reshape(-1).long())


def torch_params(weights: dict[str, Any], dtype: torch.dtype = torch.float32) -> tuple[dict[str, Any], list]:
    """A copy of the weights as PyTorch leaves (requires_grad), and the list of them for an optimizer."""
    leaves: list[torch.Tensor] = []

    def leaf(t: torch.Tensor) -> torch.Tensor:
        r = t.detach().to(dtype).clone().requires_grad_(True)
        leaves.append(r)
        return r

    W = {"tok_emb": leaf(weights["tok_emb"]),
         "layers": [{n: leaf(t) for n, t in layer.items()} for layer in weights["layers"]],
         "norm": leaf(weights["norm"]), "lm_head": leaf(weights["lm_head"])}
    return W, leaves


def torch_train(weights: dict[str, Any], cfg: Any, data: list[tuple[torch.Tensor, torch.Tensor]], *,
                lr: float = 1e-2, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                weight_decay: float = 0.1, dtype: torch.dtype = torch.float32) -> list[float]:
    """The same training in PyTorch (torch ops, autograd, torch.optim.AdamW): the loss of every step."""
    W, leaves = torch_params(weights, dtype)
    opt = torch.optim.AdamW(leaves, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    losses = []
    for ids, targets in data:
        opt.zero_grad()
        loss = torch_loss(W, cfg, ids, targets)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses
