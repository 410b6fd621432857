"""Benchmark cases of lesson 06 for ``make bench LESSONS=06_training`` (GPU only).

Groups compare each kernel with PyTorch in the same run. Targets are the issue's (18):
  cross-entropy forward+backward, 8192 x 50257 fp32      >= 1.5x  F.cross_entropy + backward, eager
  LayerNorm backward, 32768 x 4096 fp32                    >= 1.0x  autograd of F.layer_norm
  AdamW over GPT-2 small's parameter list (124M fp32)      >= 0.95x torch.optim.AdamW(fused=True)
                                                           >= 2.0x  torch.optim.AdamW(foreach=False)
  capstone training step (capstone.gpu_config())              >= 1.0x  the same model in PyTorch eager
                                                           (torch.compile's figure beside it)
  fused linear + cross-entropy, 8192 rows, vocab 50257,    >= 0.8x  F.linear + F.cross_entropy + backward,
  hidden 768 and 2048 (train.fused_linear_cross_entropy)            at <= 0.3x its peak memory
The Triton twins (training_triton.py: cross_entropy 6.T1, adamw_flat 6.T2) have a row beside their CUDA versions
in the cross-entropy group and the AdamW groups; each is compiled and autotuned on a first call before its timing,
and its row's note gives that time and the config the autotuner kept (cudacourse/triton_track.py, ``bench_case``).
A time ratio is a tokens/s ratio for the training step (same tokens per step). The peak memory of the
fused linear + cross-entropy rows (``peak_memory_bytes``: torch.cuda.max_memory_allocated above what was
allocated before the call, outputs included) is measured once when the cases are built and written into
the row names.

``.venv/bin/python lessons/06_training/bench.py`` runs this lesson's bench alone and writes results.md/json
under $OUT (or results/); ``--profile`` writes the capstone step's per-kernel table instead (profile_step.py).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from cudacourse import triton_track
from cudacourse.bench import Case
from cudacourse.loader import import_file


def _cross_entropy_cases(m: Any, rows: int, vocab: int) -> list[Case]:
    dev = m.device
    logits = torch.randn(rows, vocab, device=dev)
    labels = torch.randint(0, vocab, (rows,), device=dev)
    lab = labels.to(torch.int32)
    losses, dl, loss = torch.empty(rows, device=dev), torch.empty_like(logits), torch.empty(1, device=dev)
    x = logits.clone().requires_grad_(True)

    def torch_fwd_bwd() -> None:
        x.grad = None
        F.cross_entropy(x, labels).backward()

    nbytes = 2 * logits.numel() * 4  # read the logits, write their gradient (the floor for both)
    group = f"cross-entropy fwd+bwd {rows}x{vocab} fp32"
    return [
        Case(group, "F.cross_entropy + backward (eager)", torch_fwd_bwd, nbytes, reference=True),
        Case(group, "cross_entropy (6.3)",
             lambda: m.cross_entropy(logits, lab, losses, dl, loss, rows, vocab, -100, 1.0 / rows), nbytes,
             target=1.5),
        triton_track.bench_case(triton_track.bench_twin(m), group, "cross_entropy (Triton twin, 6.T1)",
                                lambda t: t.cross_entropy(logits, lab, losses, dl, loss, rows, vocab, -100, 1.0 / rows),
                                ["cross_entropy_kernel"], bytes=nbytes),
    ]


def _layernorm_cases(m: Any, rows: int, cols: int) -> list[Case]:
    dev = m.device
    x, dy = torch.randn(rows, cols, device=dev), torch.randn(rows, cols, device=dev)
    w, b = torch.randn(cols, device=dev), torch.randn(cols, device=dev)
    mean, rstd = x.mean(1), torch.rsqrt(x.var(1, unbiased=False) + 1e-5)
    dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
    part = torch.empty(2 * math.ceil(rows / 32) * cols, device=dev)
    xr, wr, br = x.clone().requires_grad_(True), w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    y = F.layer_norm(xr, (cols,), wr, br, 1e-5)
    nbytes = 3 * x.numel() * 4  # read x and dy, write dx
    group = f"layernorm backward {rows}x{cols} fp32"
    return [
        Case(group, "autograd of F.layer_norm", lambda: torch.autograd.grad(y, (xr, wr, br), dy, retain_graph=True),
             nbytes, reference=True),
        Case(group, "layernorm_backward (6.2)",
             lambda: m.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, part, rows, cols), nbytes, target=1.0),
    ]


def peak_memory_bytes(fn: Callable[[], object]) -> int:
    """Peak CUDA memory fn() allocates (torch.cuda.max_memory_allocated above what was allocated before the
    call; what fn returns or stores, such as gradients, counts). Runs fn once after one warm-up call."""
    fn()  # warm-up: cuBLAS workspaces and the like are allocated once, for either side
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def fused_linear_ce_inputs(dev: Any, rows: int, hidden: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                  torch.Tensor]:
    """(x, w, labels) of the fused linear + cross-entropy benchmark, from a seeded generator on ``dev``: the same
    tensors in every process on the same GPU (task 6.12's test makes them both where train.py runs and where the
    verdict is computed)."""
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(rows, hidden, device=dev, generator=g)
    w = torch.randn(vocab, hidden, device=dev, generator=g) * hidden ** -0.5
    labels = torch.randint(0, vocab, (rows,), device=dev, generator=g)
    return x, w, labels


def torch_fused_linear_ce(x: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> Callable[[], object]:
    """PyTorch's F.linear + F.cross_entropy + backward on copies of the inputs, returning (loss, dx, dw)."""
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)

    def torch_fused() -> object:
        xr.grad = wr.grad = None
        loss = F.cross_entropy(F.linear(xr, wr), labels)
        loss.backward()
        return loss, xr.grad, wr.grad

    return torch_fused


def fused_linear_ce_setup(m: Any, rows: int, hidden: int, vocab: int, chunk: int) -> tuple[Callable[[], object],
                                                                                           Callable[[], object]]:
    """(PyTorch's F.linear + F.cross_entropy + backward, train.fused_linear_cross_entropy on m's kernels)
    on the same random inputs, each returning its loss and gradients."""
    tr = import_file(m.dir / "train.py", "cc_train_bench")
    x, w, labels = fused_linear_ce_inputs(m.device, rows, hidden, vocab)
    return torch_fused_linear_ce(x, w, labels), lambda: tr.fused_linear_cross_entropy(m, x, w, labels, chunk=chunk)


def _fused_linear_ce_cases(m: Any, rows: int, hidden: int, vocab: int, chunks: tuple[int, ...]) -> list[Case]:
    group = f"fused linear + cross-entropy {rows}x{hidden}x{vocab} fp32"
    ref, _ = fused_linear_ce_setup(m, rows, hidden, vocab, chunks[0])
    ref_peak = peak_memory_bytes(ref)
    flops = 3 * 2 * rows * hidden * vocab  # logits, dx, dw: three GEMMs of the same size
    out = [Case(group, f"F.linear + F.cross_entropy + backward, peak {ref_peak / 2**30:.2f} GiB", ref, flops=flops,
                reference=True)]
    for chunk in chunks:
        _, mine = fused_linear_ce_setup(m, rows, hidden, vocab, chunk)
        peak = peak_memory_bytes(mine)
        out.append(Case(group, f"fused_linear_cross_entropy (6.11), chunk {chunk}, peak {peak / 2**30:.2f} GiB = "
                               f"{peak / ref_peak:.2f}x", mine, flops=flops,
                        task="6.12" if hidden == 768 and chunk == chunks[0] else None,
                        target=None if hidden == 768 and chunk == chunks[0] else 0.8))
    return out


def gpt2_small_shapes() -> list[tuple[int, ...]]:
    """Parameter shapes of GPT-2 small (124,439,808 parameters), in its state_dict order."""
    d, v, ctx, layers = 768, 50257, 1024, 12
    per_layer = [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    return [(v, d), (ctx, d)] + per_layer * layers + [(d,), (d,)]


def _adamw_cases(m: Any) -> list[Case]:
    dev = m.device
    shapes = gpt2_small_shapes()
    sizes = [math.prod(s) for s in shapes]
    n = sum(sizes)
    p, g = torch.randn(n, device=dev), torch.randn(n, device=dev) * 1e-3
    m1, v1 = torch.zeros_like(p), torch.zeros_like(p)
    # the list version: per-tensor weight decay (none on vectors, as GPT-2 training does), chunks of 64K
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    chunk = 65536
    ct = [t for t in range(len(sizes)) for _ in range(offsets[t], offsets[t + 1], chunk)]
    cs = [s for t in range(len(sizes)) for s in range(offsets[t], offsets[t + 1], chunk)]
    off_t = torch.tensor(offsets, dtype=torch.int64, device=dev)
    dec_t = torch.tensor([0.1 if len(s) == 2 else 0.0 for s in shapes], dtype=torch.float32, device=dev)
    ct_t, cs_t = torch.tensor(ct, dtype=torch.int32, device=dev), torch.tensor(cs, dtype=torch.int64, device=dev)

    def torch_opt(**kw: Any) -> Any:
        params = [torch.randn(s, device=dev, requires_grad=True) for s in shapes]
        for t in params:
            t.grad = torch.randn_like(t) * 1e-3
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, **kw).step

    nbytes = 7 * n * 4  # read p, g, m, v; write p, m, v
    flat = lambda: m.adamw_flat(p, g, m1, v1, n, 1e-4, 0.9, 0.999, 1e-8, 0.1, 10)  # noqa: E731
    multi = lambda: m.adamw_multi(p, g, m1, v1, off_t, dec_t, ct_t, cs_t, len(ct), chunk, 1e-4, 0.9, 0.999,  # noqa: E731
                                  1e-8, 10)
    twin = triton_track.bench_twin(m)
    out = []
    for ref_name, kw, target in (("fused=True", {"fused": True}, 0.95), ("foreach=False", {"foreach": False}, 2.0)):
        group = f"AdamW GPT-2 small ({n / 1e6:.1f}M fp32) vs {ref_name}"
        out += [Case(group, f"torch AdamW({ref_name})", torch_opt(**kw), nbytes, reference=True),
                Case(group, "adamw_flat (6.5)", flat, nbytes, target=target),
                Case(group, "adamw_multi (6.5)", multi, nbytes),
                triton_track.bench_case(twin, group, "adamw_flat (Triton twin, 6.T2)",
                                        lambda t: t.adamw_flat(p, g, m1, v1, n, 1e-4, 0.9, 0.999, 1e-8, 0.1, 10),
                                        ["adamw_flat_kernel"], bytes=nbytes)]
    return out


def _capstone_cases(m: Any) -> list[Case]:
    import cudacourse as cc

    tr, cap = import_file(m.dir / "train.py", "cc_train_bench"), import_file(m.dir / "capstone.py", "cc_capstone_bench")
    impl = "solution" if m.dir.parent.name == "solutions" else "student"  # lessons 04 and 03 from the same side
    ops = tr.Ops(m, cc.lesson("04_transformer", impl=impl, backend="cuda"), cc.lesson("03_gemm", impl=impl,
                 backend="cuda"), cap.load_decoder(impl))
    cfg = cap.gpu_config()
    B, T = 16, 256
    weights = ops.decoder.init_weights(cfg, seed=0, device=ops.device)
    text = cap.load_corpus()
    ids, targets = cap.batches(cap.CharTokenizer(text).encode(text), B, T, 1, seed=0, device=ops.device)[0]
    hp = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    st = tr.State(weights, ops.device)

    def torch_step(compiled: bool) -> Any:
        W, leaves = cap.torch_params(weights)
        opt = torch.optim.AdamW(leaves, **hp)
        loss_fn = torch.compile(cap.torch_loss) if compiled else cap.torch_loss

        def step() -> None:
            opt.zero_grad()
            loss_fn(W, cfg, ids, targets).backward()
            opt.step()

        return step

    group = f"capstone train step dim {cfg.dim} x {cfg.n_layers} layers, {B}x{T} tokens"
    return [
        Case(group, "PyTorch eager", torch_step(False), reference=True),
        Case(group, "train_step on your kernels (6.7)",
             lambda: tr.train_step(ops, st, cfg, ids, targets, **hp), target=1.0),
        Case(group, "torch.compile", torch_step(True)),
    ]


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for this lesson on module m (m.device is cuda). quick=True: smaller sizes."""
    if quick:
        return (_cross_entropy_cases(m, 1024, 50257) + _layernorm_cases(m, 4096, 4096) + _capstone_cases(m)
                + _fused_linear_ce_cases(m, 1024, 768, 50257, (256,)))
    return (_cross_entropy_cases(m, 8192, 50257) + _layernorm_cases(m, 32768, 4096) + _adamw_cases(m)
            + _capstone_cases(m) + _fused_linear_ce_cases(m, 8192, 768, 50257, (1024, 2048))
            + _fused_linear_ce_cases(m, 8192, 2048, 50257, (1024,)))


if __name__ == "__main__":
    # this lesson's bench alone, results under $OUT (a GPU machine's output folder) or results/
    out_dir = os.environ.get("OUT") or str(Path(__file__).resolve().parents[2] / "results")
    if "--profile" in sys.argv[1:]:
        prof = import_file(Path(__file__).with_name("profile_step.py"), "cc_profile_step")
        sys.exit(prof.main(["--out", out_dir]))
    from cudacourse.bench import main

    sys.exit(main(["--lessons", "06_training", "--out", out_dir, *sys.argv[1:]]))
