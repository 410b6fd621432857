"""Lesson 06 capstone (task 6.7): train lesson 04's decoder with your own forward and backward kernels.

    import cudacourse as cc
    import capstone, train                       # both from this folder; capstone.py holds the given data
    dec = capstone.load_decoder()                # pipeline, lesson 04's decoder and the PyTorch twin
    ops = train.Ops(cc.lesson("06_training"), cc.lesson("04_transformer"), cc.lesson("03_gemm"), dec)
    cfg = capstone.sim_config()
    weights = dec.init_weights(cfg, seed=0, device=ops.device)
    text = capstone.load_corpus(); tok = capstone.CharTokenizer(text)
    data = capstone.batches(tok.encode(text), batch=4, seq=16, steps=30, seed=0, device=ops.device)
    losses, trained = train.train(ops, weights, cfg, data, lr=1e-2)

Every op of the model runs on a course kernel, forward and backward: each is a ``torch.autograd.Function``
whose ``forward`` calls a lesson 04 kernel (the linear layers: training.cu's ``linear_forward``) and whose
``backward`` calls a lesson 06 kernel.
``Ops`` has the methods of lesson 04's ``decoder.Kernels``, so lesson 04's own ``decoder.forward`` (and
your ``decoder_block``, task 4.9) builds the graph unchanged. The loss is the fused cross-entropy (task
6.3); the optimizer is ``adamw_flat`` (task 6.5) over one flat buffer holding every parameter.

What PyTorch still does: allocating buffers, the autograd bookkeeping (cutting the flat parameter buffer
into the weights and concatenating their gradients back, and adding the gradients of a tensor that feeds two
ops, like the residual stream),
the token sort and offsets of the embedding backward, and the label check before the loss kernel.

While grading, this file runs in a confined worker process of its own, beside lesson 04's decoder.py: the kernels
objects it is given are the grader's, called back from there. It may import only math, typing, torch and
cudacourse (``make grade`` screens it). The data pipeline, the loading of lesson 04's decoder and the
same model in plain PyTorch are in capstone.py, beside this file.
"""

from __future__ import annotations

import math
from typing import Any

import torch

IGNORE_INDEX = -100

# ----------------------------------------------------------------------------------------------------
# Checked wrappers of the loss and optimizer kernels (bad input is refused before any launch)
# ----------------------------------------------------------------------------------------------------


def check_labels(labels: torch.Tensor, vocab: int, ignore_index: int = IGNORE_INDEX) -> int:
    """Raise IndexError naming the first label outside [0, vocab) that is not ignore_index; return the
    number of labels that are not ignored."""
    flat = labels.reshape(-1).cpu()
    bad = ((flat < 0) | (flat >= vocab)) & (flat != ignore_index)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise IndexError(f"label {int(flat[i])} at position {i} is out of range for {vocab} classes (valid: "
                         f"0..{vocab - 1}, or ignore_index={ignore_index}); nothing was launched")
    return int((flat != ignore_index).sum())


def cross_entropy(m6: Any, logits: torch.Tensor, labels: torch.Tensor,
                  ignore_index: int = IGNORE_INDEX) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of logits (rows, vocab) and labels (rows,) and its gradient, on your kernel.

    Returns (loss (a 1-element tensor), dlogits (rows, vocab)), as ``F.cross_entropy(logits, labels,
    ignore_index=ignore_index)`` and its backward. Labels are checked before the launch.
    """
    if logits.dim() != 2 or labels.numel() != logits.shape[0]:
        raise ValueError(f"cross_entropy: logits must be (rows, vocab) and labels (rows,); got logits "
                         f"{tuple(logits.shape)} and labels {tuple(labels.shape)}")
    rows, vocab = logits.shape
    count = check_labels(labels, vocab, ignore_index)
    lab = labels.reshape(-1).to(torch.int32).contiguous()
    dev = logits.device
    losses = torch.empty(rows, dtype=torch.float32, device=dev)
    dlogits = torch.empty(rows, vocab, dtype=torch.float32, device=dev)
    loss = torch.empty(1, dtype=torch.float32, device=dev)
    m6.cross_entropy(logits.contiguous(), lab, losses, dlogits, loss, rows, vocab, ignore_index,
                     1.0 / count if count else math.nan)
    return loss, dlogits


def _flce_chunk(m6: Any, xc: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, lab: torch.Tensor,
                losses: torch.Tensor, lg: torch.Tensor, dl: torch.Tensor, part: torch.Tensor, dxc: torch.Tensor,
                dw: torch.Tensor, db: torch.Tensor | None, db_chunk: torch.Tensor | None, ignore_index: int,
                inv_count: float) -> None:
    """One chunk of ``fused_linear_cross_entropy``: the rows xc (n, hidden) with their int32 labels lab.

    Writes lg (n, vocab) = the chunk's logits, dl = their gradient, losses (n,), part (1,) = this chunk's
    share of the mean loss, dxc (n, hidden) = dl @ w; adds dl^T xc to dw and the column sums of dl to db.
    """
    # TODO(task 6.11): one chunk (~9 lines).
    #   1. lg = xc @ w^T (+ b): torch.matmul(xc, w.T, out=lg), or torch.addmm(b, xc, w.T, out=lg).
    #   2. your cross_entropy kernel on the chunk: m6.cross_entropy(lg, lab, losses, dl, part, n, vocab,
    #      ignore_index, inv_count), with n, vocab = lg.shape (dl = d loss / d lg, already scaled).
    #   3. dxc = dl @ w (torch.matmul(dl, w, out=dxc)); dw += dl^T xc (dw.addmm_(dl.T, xc));
    #      if b is not None: m6.bias_backward(dl, db_chunk, n, vocab) and db += db_chunk.
    # Hint: inv_count is 1 / (labels not ignored in ALL rows), not in this chunk: the chunks' shares then add
    # up to the mean. The matmuls run on cuBLAS through torch (lesson 03's tiled GEMM is several times slower
    # at these shapes); what this task saves is memory, not FLOPs.
    # BEGIN SOLUTION
    n, vocab = lg.shape
    if b is None:
        torch.matmul(xc, w.T, out=lg)
    else:
        torch.addmm(b, xc, w.T, out=lg)
    m6.cross_entropy(lg, lab, losses, dl, part, n, vocab, ignore_index, inv_count)
    torch.matmul(dl, w, out=dxc)
    dw.addmm_(dl.T, xc)
    if db is not None:
        m6.bias_backward(dl, db_chunk, n, vocab)
        db += db_chunk
    # STUB: raise NotImplementedError("TODO(task 6.11): _flce_chunk in lessons/06_training/train.py")
    # END SOLUTION


def fused_linear_cross_entropy(m6: Any, x: torch.Tensor, w: torch.Tensor, labels: torch.Tensor,
                               b: torch.Tensor | None = None, *, ignore_index: int = IGNORE_INDEX,
                               chunk: int = 1024) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                           torch.Tensor | None]:
    """Mean cross-entropy of ``x @ w.T (+ b)`` and labels, and its gradients, ``chunk`` rows at a time.

    x (rows, hidden), w (vocab, hidden), b (vocab,) or None, labels (rows,): float32 on one device (labels
    any integer dtype). Returns (loss (a 1-element tensor), dx, dw, db or None): the values of
    ``F.cross_entropy(F.linear(x, w, b), labels, ignore_index=ignore_index)`` and its gradients, one chunk of
    rows at a time through ``_flce_chunk`` (task 6.11). Only
    two (chunk, vocab) buffers exist at a time, never the whole (rows, vocab) logits. Labels are checked
    before any launch (IndexError naming the first bad one), shapes too (ValueError).
    """
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"fused_linear_cross_entropy: x must be (rows, hidden) and w (vocab, hidden); got x "
                         f"{tuple(x.shape)} and w {tuple(w.shape)}")
    rows, vocab = x.shape[0], w.shape[0]
    if labels.numel() != rows:
        raise ValueError(f"fused_linear_cross_entropy: labels must hold one label per row of x ({rows}); got "
                         f"shape {tuple(labels.shape)}")
    if b is not None and tuple(b.shape) != (vocab,):
        raise ValueError(f"fused_linear_cross_entropy: b must be (vocab,) = ({vocab},); got {tuple(b.shape)}")
    for name, t in (("x", x), ("w", w), ("b", b)):
        if t is not None and (t.dtype != torch.float32 or t.device != x.device):
            raise ValueError(f"fused_linear_cross_entropy: {name} must be float32 on {x.device}; got {t.dtype} "
                             f"on {t.device}")
    if chunk < 1:
        raise ValueError(f"fused_linear_cross_entropy: chunk must be >= 1 row, got {chunk}")
    count = check_labels(labels, vocab, ignore_index)  # before anything runs: a kernel cannot raise
    inv_count = 1.0 / count if count else math.nan  # every chunk scales by the mean over ALL rows
    x, w = x.contiguous(), w.contiguous()
    lab = labels.reshape(-1).to(device=x.device, dtype=torch.int32).contiguous()
    dev, c = x.device, max(1, min(chunk, rows))
    n_chunks = -(-rows // c)
    dx = torch.empty_like(x)
    dw = torch.zeros_like(w)
    db = None if b is None else torch.zeros(vocab, dtype=torch.float32, device=dev)
    logits = torch.empty(c, vocab, dtype=torch.float32, device=dev)   # the only (chunk, vocab) buffers
    dlogits = torch.empty(c, vocab, dtype=torch.float32, device=dev)
    losses = torch.empty(rows, dtype=torch.float32, device=dev)
    parts = torch.zeros(n_chunks, dtype=torch.float32, device=dev)   # each chunk's share of the mean
    db_chunk = None if b is None else torch.empty(vocab, dtype=torch.float32, device=dev)
    for k in range(n_chunks):
        r0, r1 = k * c, min((k + 1) * c, rows)
        _flce_chunk(m6, x[r0:r1], w, b, lab[r0:r1], losses[r0:r1], logits[:r1 - r0], dlogits[:r1 - r0],
                    parts[k:k + 1], dx[r0:r1], dw, db, db_chunk, ignore_index, inv_count)
    if n_chunks == 0:  # no rows at all: the mean of nothing, NaN as in PyTorch
        return torch.full((1,), math.nan, device=dev), dx, dw, db
    return parts.sum().reshape(1), dx, dw, db


def adamw_flat(m6: Any, p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int, *,
               lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 1e-2) -> None:
    """One AdamW step on flat buffers with your kernel (task 6.5), in place on p, m and v.

    All four must be float32, contiguous, on one device and of one shape; ``step`` counts from 1. A
    mismatch raises ValueError before anything is written.
    """
    names = ("param", "grad", "exp_avg", "exp_avg_sq")
    for name, t in zip(names, (p, g, m, v), strict=True):
        if t.shape != p.shape:
            raise ValueError(f"adamw: {name} has shape {tuple(t.shape)} but param has {tuple(p.shape)}; the "
                             "gradient and both moment buffers must match the parameter exactly")
        if t.dtype != torch.float32 or not t.is_contiguous() or t.device != p.device:
            raise ValueError(f"adamw: {name} must be a contiguous float32 tensor on {p.device}")
    if step < 1:
        raise ValueError(f"adamw: step must be >= 1 (the number of this update), got {step}")
    m6.adamw_flat(p, g, m, v, p.numel(), lr, betas[0], betas[1], eps, weight_decay, step)


# ----------------------------------------------------------------------------------------------------
# The ops as autograd Functions: forward on lessons 04/03, backward on lesson 06
# ----------------------------------------------------------------------------------------------------


# The Functions keep what backward needs on ctx (ctx.saved) rather than with ctx.save_for_backward: on
# the simulator every tensor argument of a kernel call is copied back after the call (an input written
# by a buggy kernel must show), which bumps the version counter that save_for_backward checks.


def _empty(*shape: int, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.float32, device=like.device)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, eps: float, ops: Ops) -> torch.Tensor:
        rows, cols = x.shape
        y = _empty(rows, cols, like=x)
        ops.m4.rmsnorm(x, w, y, rows, cols, eps)
        ctx.saved = (x, w)
        ctx.eps, ctx.ops = eps, ops
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple:
        x, w = ctx.saved
        rows, cols = x.shape
        dx, dw = _empty(rows, cols, like=x), _empty(cols, like=x)
        partial = _empty(-(-rows // 32) * cols, like=x)
        ctx.ops.m6.rmsnorm_backward(dy.contiguous(), x, w, dx, dw, partial, rows, cols, ctx.eps)
        return dx, dw, None, None


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, ops: Ops) -> torch.Tensor:
        out_f, in_f = w.shape
        y = _empty(x.shape[0], out_f, like=x)
        # training.cu's worked linear_forward, on the same register-tiled GEMM as the backward (lesson 03's
        # linear, task 3.5, computes the same with one output per thread: several times slower here)
        ops.m6.linear_forward(x, w, y, x.shape[0], in_f, out_f)
        ctx.saved = (x, w)
        ctx.ops = ops
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple:
        x, w = ctx.saved
        # TODO(task 6.7, part 1 of 2): the gradients of y = x w^T with your linear_backward (~5 lines):
        # allocate dx like x, dw like w and a db of w.shape[0] floats (unused: the decoder has no biases),
        # call ctx.ops.m6.linear_backward(x, w, dy, dx, dw, db, batch, in_features, out_features) and
        # return dx, dw, None (one entry per input of forward: ops gets None).
        # Hint: dy may arrive non-contiguous: pass dy.contiguous().
        # BEGIN SOLUTION
        out_f, in_f = w.shape
        dx, dw, db = _empty(*x.shape, like=x), _empty(out_f, in_f, like=x), _empty(out_f, like=x)
        ctx.ops.m6.linear_backward(x, w, dy.contiguous(), dx, dw, db, x.shape[0], in_f, out_f)
        return dx, dw, None
        # STUB: raise NotImplementedError("TODO(task 6.7): _Linear.backward in lessons/06_training/train.py")
        # END SOLUTION


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dims: tuple,
                ops: Ops) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, H, d = dims
        qo, ko = _empty(*q.shape, like=q), _empty(*k.shape, like=k)
        ops.m4.rope(q, k, cos, sin, qo, ko, B, T, H, H, d)
        ctx.saved = (cos, sin)
        ctx.dims, ctx.ops = dims, ops
        return qo, ko

    @staticmethod
    def backward(ctx: Any, dqo: torch.Tensor, dko: torch.Tensor) -> tuple:
        # RoPE rotates each pair by +angle; the transpose of a rotation rotates by -angle: the same kernel
        # with sin negated (cos(-a) = cos a, sin(-a) = -sin a).
        cos, sin = ctx.saved
        B, T, H, d = ctx.dims
        neg_sin = _empty(*sin.shape, like=sin)
        ctx.ops.m6.scale(sin, neg_sin, -1.0, sin.numel())
        dq, dk = _empty(*dqo.shape, like=dqo), _empty(*dko.shape, like=dko)
        ctx.ops.m4.rope(dqo.contiguous(), dko.contiguous(), cos, neg_sin, dq, dk, B, T, H, H, d)
        return dq, dk, None, None, None, None


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dims: tuple, ops: Ops) -> torch.Tensor:
        B, T, H, d = dims
        p = _empty(B * H * T * T, like=q)  # attention_naive leaves the probabilities here: saved for backward
        o = _empty(*q.shape, like=q)
        ops.m4.attention_naive(q, k, v, p, o, B, H, T, d, 1.0 / math.sqrt(d), 1)
        ctx.saved = (q, k, v, p)
        ctx.dims, ctx.ops = dims, ops
        return o

    @staticmethod
    def backward(ctx: Any, do: torch.Tensor) -> tuple:
        q, k, v, p = ctx.saved
        B, T, H, d = ctx.dims
        dq, dk, dv = (_empty(*q.shape, like=q) for _ in range(3))
        scratch = _empty(2 * B * H * T * T, like=q)
        ctx.ops.m6.attention_backward(q, k, v, p, do.contiguous(), dq, dk, dv, scratch, B, H, T, d, 1.0 / math.sqrt(d))
        return dq, dk, dv, None, None


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, ops: Ops) -> torch.Tensor:
        out = _empty(*gate.shape, like=gate)
        ops.m4.swiglu(gate, up, out, gate.numel())
        ctx.saved = (gate, up)
        ctx.ops = ops
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple:
        gate, up = ctx.saved
        dg, du = _empty(*gate.shape, like=gate), _empty(*up.shape, like=up)
        ctx.ops.m6.swiglu_backward(gate, up, dout.contiguous(), dg, du, gate.numel())
        return dg, du, None


class _Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, ops: Ops) -> torch.Tensor:
        out = _empty(*a.shape, like=a)
        ops.m4.add(a, b, out, a.numel())
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple:
        return dout, dout, None  # d(a + b)/da = d(a + b)/db = 1: the gradient passes through to both


class _Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, ids: torch.Tensor, table: torch.Tensor, ops: Ops) -> torch.Tensor:
        out = ops.decoder.embed(ops.m4, ids, table)  # lesson 04's checked lookup (IndexError for a bad id)
        ctx.saved = (ids,)
        ctx.vocab, ctx.ops = table.shape[0], ops
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple:
        (ids,) = ctx.saved
        vocab, dim = ctx.vocab, dout.shape[1]
        ids64 = ids.reshape(-1).long()
        order = torch.sort(ids64, stable=True).indices.to(torch.int32)
        # counts by scatter_add, not bincount: bincount on a GPU reads the largest id back to the host first,
        # a wait for every kernel queued so far
        counts = torch.zeros(vocab, dtype=torch.int64, device=ids.device).scatter_add_(0, ids64, torch.ones_like(ids64))
        offsets = torch.zeros(vocab + 1, dtype=torch.int32, device=ids.device)
        offsets[1:] = counts.cumsum(0)
        dtable = _empty(vocab, dim, like=dout)
        ctx.ops.m6.embedding_backward_sorted(order, offsets, dout.contiguous(), dtable, ids64.numel(), vocab, dim)
        return None, dtable, None


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor, ops: Ops) -> torch.Tensor:
        loss, dlogits = cross_entropy(ops.m6, logits, labels)  # the gradient comes out of the same kernel
        ctx.saved = (dlogits,)
        ctx.ops = ops
        return loss.reshape(())

    @staticmethod
    def backward(ctx: Any, dloss: torch.Tensor) -> tuple:
        (dlogits,) = ctx.saved
        scale = float(dloss)
        if scale != 1.0:  # loss.backward() passes 1: then the saved gradient is the answer as it is
            out = _empty(*dlogits.shape, like=dlogits)
            ctx.ops.m6.scale(dlogits, out, scale, dlogits.numel())
            dlogits = out
        return dlogits, None, None


class Ops:
    """The decoder's ops on course kernels with autograd: the interface of lesson 04's ``decoder.Kernels``.

    ``m6``, ``m4``, ``m3`` are the modules of lessons 06, 04 and 03 (``cc.lesson(...)``); ``decoder`` is
    lesson 04's decoder.py (for ``decoder.embed`` and ``decoder.forward``).
    """

    def __init__(self, m6: Any, m4: Any, m3: Any, decoder: Any) -> None:
        self.m6, self.m4, self.m3 = m6, m4, m3
        self.device = m4.device
        self.decoder = decoder  # lesson 04's decoder.py as a module (capstone.load_decoder())
        self._zeros: dict[int, torch.Tensor] = {}

    def zeros(self, n: int) -> torch.Tensor:
        """A cached zero vector of n floats (the bias of lesson 03's linear)."""
        if n not in self._zeros:
            self._zeros[n] = torch.zeros(n, dtype=torch.float32, device=self.device)
        return self._zeros[n]

    def rmsnorm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm of each row of x (rows, cols)."""
        return _RMSNorm.apply(x, w, eps, self)

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x (rows, in) @ w (out, in)^T."""
        return _Linear.apply(x, w, self)

    def rope_tables(self, T: int, d: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables (T, d/2) (constants: no gradient)."""
        c, s = _empty(T, d // 2, like=self.zeros(1)), _empty(T, d // 2, like=self.zeros(1))
        self.m4.rope_tables(c, s, T, d, theta)
        return c, s

    def rope(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, B: int, T: int,
             H: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE on q and k, both (B * T, H * d)."""
        return _Rope.apply(q, k, cos, sin, (B, T, H, d), self)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, B: int, T: int, H: int,
                  d: int) -> torch.Tensor:
        """Causal attention over (B * T, H * d) inputs (lesson 04's attention_naive: it keeps P)."""
        return _Attention.apply(q, k, v, (B, T, H, d), self)

    def swiglu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up."""
        return _SwiGLU.apply(gate, up, self)

    def add(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a + b (the residual connection)."""
        return _Add.apply(a, b, self)

    def embed(self, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """Rows of the embedding table for ids."""
        return _Embedding.apply(ids.to(self.device).to(torch.int32).contiguous(), table, self)

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy (a 0-dim tensor with a grad_fn) of logits (rows, vocab), targets (rows,)."""
        return _CrossEntropy.apply(logits, targets.reshape(-1), self)


# ----------------------------------------------------------------------------------------------------
# Parameters in one flat buffer, and the training loop
# ----------------------------------------------------------------------------------------------------


def _leaves(weights: dict[str, Any]) -> list[tuple[tuple, torch.Tensor]]:
    """(path, tensor) of every weight, in a fixed order: tok_emb, each layer's tensors, norm, lm_head."""
    out: list[tuple[tuple, torch.Tensor]] = [(("tok_emb",), weights["tok_emb"])]
    for i, layer in enumerate(weights["layers"]):
        out += [(("layers", i, n), t) for n, t in layer.items()]
    return out + [(("norm",), weights["norm"]), (("lm_head",), weights["lm_head"])]


class _Unflatten(torch.autograd.Function):
    """flat -> one tensor per weight (copies), and in the backward every weight's gradient into one flat
    gradient with a single concatenation."""

    @staticmethod
    def forward(ctx: Any, flat: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, ...]:
        ctx.sizes = sizes
        return tuple(torch.split_with_sizes_copy(flat, sizes))  # copies, one op: not views of flat

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:
        return torch.cat([torch.zeros(n, dtype=torch.float32, device=g.device) if g is None else g.reshape(-1)
                          for g, n in zip(grads, ctx.sizes, strict=True)]), None


def views(flat: torch.Tensor, like: dict[str, Any]) -> dict[str, Any]:
    """The weights dict of ``like`` cut out of ``flat`` (same order as ``flatten``).

    For a ``flat`` that requires grad the pieces are copies whose gradients all land in ``flat.grad``, written
    by one concatenation in the backward (slices ``flat[a:b]`` would be views, but the backward of each slice
    fills a zero buffer the size of ``flat`` and adds it to the others: 39 of them for the GPU capstone, 2 GB of
    memory traffic and over a hundred launches a step). Otherwise they are views of ``flat`` itself."""
    leaves = _leaves(like)
    sizes = [t.numel() for _, t in leaves]
    pieces = _Unflatten.apply(flat, sizes) if flat.requires_grad else torch.split(flat, sizes)
    out: dict[str, Any] = {"layers": [{} for _ in like["layers"]]}
    for (path, t), piece in zip(leaves, pieces, strict=True):
        v = piece.view(t.shape)
        if path[0] == "layers":
            out["layers"][path[1]][path[2]] = v
        else:
            out[path[0]] = v
    return out


def flatten(weights: dict[str, Any]) -> torch.Tensor:
    """Every weight, concatenated into one float32 buffer."""
    return torch.cat([t.detach().reshape(-1).float() for _, t in _leaves(weights)])


class State:
    """What training keeps between steps: the flat parameters (a leaf that requires grad), AdamW's two
    moment buffers, the step count, and the weights dict whose shapes the flat buffer is cut into."""

    def __init__(self, weights: dict[str, Any], device: Any) -> None:
        self.like = weights
        self.flat = flatten(weights).to(device).requires_grad_(True)
        self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)
        self.step = 0

    def weights(self) -> dict[str, Any]:
        """The current weights (views of the flat buffer, no autograd)."""
        return views(self.flat.detach(), self.like)


def train_step(ops: Ops, st: State, cfg: Any, ids: torch.Tensor, targets: torch.Tensor, *, lr: float,
               betas: tuple[float, float], eps: float, weight_decay: float) -> float:
    """One step on your kernels: forward, loss, backward, AdamW. Returns the loss before the update."""
    # TODO(task 6.7, part 2 of 2): one training step (~8 lines).
    #   st.step += 1; st.flat.grad = None
    #   logits = ops.decoder.forward(ops, views(st.flat, st.like), cfg, ids)   (lesson 04's forward)
    #   loss = ops.cross_entropy(logits, targets); loss.backward()             (fills st.flat.grad)
    #   adamw_flat(ops.m6, st.flat.data, st.flat.grad, st.exp_avg, st.exp_avg_sq, st.step, lr=lr, betas=betas,
    #              eps=eps, weight_decay=weight_decay); return the loss as a Python float.
    # Hint: st.flat.data is the same memory as st.flat without autograd tracking: the kernel updates it in
    # place. views(st.flat, ...) are cut out of st.flat, so their gradients all land in st.flat.grad.
    # BEGIN SOLUTION
    st.step += 1
    st.flat.grad = None
    logits = ops.decoder.forward(ops, views(st.flat, st.like), cfg, ids)
    loss = ops.cross_entropy(logits, targets)
    loss.backward()
    adamw_flat(ops.m6, st.flat.data, st.flat.grad, st.exp_avg, st.exp_avg_sq, st.step, lr=lr, betas=betas, eps=eps,
               weight_decay=weight_decay)
    return float(loss.detach())
    # STUB: raise NotImplementedError("TODO(task 6.7): train_step in lessons/06_training/train.py")
    # END SOLUTION


def train(ops: Ops, weights: dict[str, Any], cfg: Any, data: list[tuple[torch.Tensor, torch.Tensor]], *,
          lr: float = 1e-2, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
          weight_decay: float = 0.1) -> tuple[list[float], dict[str, Any]]:
    """Train the decoder on ``data`` (one step per (ids, targets) batch) on your kernels.

    Returns the loss of every step (before its update) and the trained weights (views of one flat
    buffer). ``weights`` itself is not modified.
    """
    st = State(weights, ops.device)
    losses = [train_step(ops, st, cfg, ids, targets, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
              for ids, targets in data]
    return losses, st.weights()
