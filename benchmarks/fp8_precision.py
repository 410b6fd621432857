"""What FP8 costs in precision: lesson 08's measured tables (task 5 of issue 40, not graded).

  .venv/bin/python benchmarks/fp8_precision.py gemm  > results/cpu/fp8_precision.md     # CPU, emulated formats
  python3 benchmarks/fp8_precision.py gpu            > $OUT/fp8_precision_gpu.md        # a Hopper GPU, real GEMMs
  python3 benchmarks/fp8_precision.py model --device cuda > $OUT/fp8_model_loss.md   # a tiny decoder (on a GPU:
                                                                                    # emulated formats are slow on CPUs)

gemm: the relative error of a product (per row of C, ||C - C64|| / ||C64||, the median over the rows) whose inputs
are stored in bf16, e4m3 or e5m2 (per-tensor scale, or DeepSeek-V3's 1x128 scales for A and 128x128 for W),
against the fp64 product of the fp32 inputs. The quantized values are multiplied in fp64, so this is the error of
storing the inputs alone (what any FP8 GEMM inherits); the gpu table adds what real GEMMs lose on top of it while
summing.
Distributions: normal (A and W ~ N(0, 1)); outlier channels (1% of A's columns, the "channels" of an activation,
50x larger, as LLM activations have); one spike (a single element of A 10^4 or 10^6 times the rest).
gpu: the same inputs through cuBLAS bf16, torch._scaled_mm (per-tensor scales with and without use_fast_accum,
block scales) and the lesson's gemm_fp8_wgmma, each against the fp64 product of the quantized inputs (so only
the summation shows) and against the fp32 inputs' product (everything).
model: lesson 04's decoder (the lesson 06 capstone's model) trained in fp32 on the lesson 06 corpus with PyTorch,
then evaluated with every linear layer's inputs and weights stored in each format (emulated); and the same
training run with FP8 forward passes (straight-through gradients), from the same start on the same batches.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FMT = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def header(command: str) -> str:
    """Machine, load, commit and command lines for a results file."""
    stamp = ROOT / "COMMIT"  # a copy of the course without its .git (the GPU machine's) names its commit here
    commit = stamp.read_text().strip() if stamp.is_file() else subprocess.run(
        ["git", "-C", str(ROOT), "log", "--oneline", "-1"], capture_output=True, text=True).stdout.strip()
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"# machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}; GPU: {gpu}; load average "
            f"{load}\n# torch {torch.__version__}; commit {commit}; "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n# command: {command}\n")


def quant(x: torch.Tensor, fmt: str, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (fp32, R x C) stored in ``fmt`` with one scale per rows x cols block (0 = the whole dimension):
    (fp8 values, scales broadcast back to R x C). Scale = amax / max finite, so the block's largest |x| maps to it."""
    dt, top = FMT[fmt]
    R, C = x.shape
    rb, cb = rows or R, cols or C
    Rb, Cb = -(-R // rb), -(-C // cb)
    xp = torch.zeros(Rb * rb, Cb * cb, dtype=torch.float32, device=x.device)
    xp[:R, :C] = x
    blocks = xp.view(Rb, rb, Cb, cb)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-12)
    q = (blocks * (top / amax)).clamp(-top, top).to(dt)
    scale = (amax / top).expand(Rb, rb, Cb, cb).reshape(Rb * rb, Cb * cb)[:R, :C]
    return q.view(Rb * rb, Cb * cb)[:R, :C], scale


def stored(x: torch.Tensor, how: str, is_weight: bool) -> torch.Tensor:
    """x as float64 after storing it as ``how``: fp32, bf16, e4m3/e5m2 per-tensor or block (1x128 for inputs,
    128x128 for weights)."""
    if how == "fp32":
        return x.double()
    if how == "bf16":
        return x.bfloat16().double()
    fmt, scaling = how.split()
    if scaling == "per-tensor":
        q, s = quant(x, fmt, 0, 0)
    else:
        q, s = quant(x, fmt, 128 if is_weight else 1, 128)
    return q.double() * s.double()


FORMATS = ["bf16", "e4m3 per-tensor", "e4m3 block", "e5m2 per-tensor", "e5m2 block"]


def inputs(dist: str, M: int, N: int, K: int, seed: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(A M x K, W N x K) fp32 of a named distribution."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g)
    W = torch.randn(N, K, generator=g)
    if dist == "outlier channels":
        ch = torch.randperm(K, generator=g)[: max(1, K // 100)]
        A[:, ch] *= 50.0
    elif dist.startswith("one spike"):
        A[M // 2, K // 3] = 1e4 if dist == "one spike 1e4" else 1e6
    return A.to(device), W.to(device)


DISTS = ["normal", "outlier channels", "one spike 1e4", "one spike 1e6"]


def rel(c: torch.Tensor, ref: torch.Tensor) -> float:
    """The median over the rows of C of ||row error|| / ||row||: one row with a spike cannot hide the others."""
    return float(((c.double() - ref).norm(dim=1) / ref.norm(dim=1)).median())


def gemm_table() -> str:
    M = N = 256
    lines = ["| distribution | K | " + " | ".join(FORMATS) + " |", "|---|---:|" + "---:|" * len(FORMATS)]
    for dist in DISTS:
        for K in (256, 1024, 8192):
            A, W = inputs(dist, M, N, K, seed=K)
            ref = A.double() @ W.double().T
            errs = [rel(stored(A, f, False) @ stored(W, f, True).T, ref) for f in FORMATS]
            lines.append(f"| {dist} | {K} | " + " | ".join(f"{e:.2e}" for e in errs) + " |")
    return "\n".join(lines)


def gpu_table() -> str:
    import cudacourse as cc
    from cudacourse import settings

    settings.configure(impl="solution")
    m = cc.lesson("08_fp8")
    ok = torch.zeros(1, dtype=torch.int32, device="cuda")
    m.gemm_fp8_wgmma_supported(ok)
    wgmma = int(ok.item()) == 1
    M = N = 1024
    cols = ["cuBLAS bf16", "_scaled_mm per-tensor", "_scaled_mm per-tensor, fast accum", "_scaled_mm block",
            "gemm_fp8_wgmma"]
    out = ["Against the fp64 product of the same quantized (or bf16-rounded) inputs: the summation's own error.", "",
           "| distribution | K | " + " | ".join(cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    total = ["Against the fp64 product of the fp32 inputs: storage and summation together.", "",
             "| distribution | K | " + " | ".join(cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    for dist in DISTS:
        for K in (1024, 4096, 16384):
            A, W = inputs(dist, M, N, K, seed=K, device="cuda")
            ref = A.double() @ W.double().T
            a16, w16 = A.bfloat16(), W.bfloat16()
            qa_t, sa_t = quant(A, "e4m3", 0, 0)
            qw_t, sw_t = quant(W, "e4m3", 0, 0)
            qa_b, sa_b = quant(A, "e4m3", 1, 128)
            qw_b, sw_b = quant(W, "e4m3", 128, 128)
            sa_l = sa_b[:, ::128].T.contiguous()          # float[KB][M]
            sw_l = sw_b[::128, ::128].contiguous()        # float[NB][KB]
            one_a, one_w = sa_t[0, 0].reshape(()), sw_t[0, 0].reshape(())
            emu_t = (qa_t.double() * sa_t.double()) @ (qw_t.double() * sw_t.double()).T
            emu_b = (qa_b.double() * sa_b.double()) @ (qw_b.double() * sw_b.double()).T
            emu_16 = a16.double() @ w16.double().T
            res: list[tuple[torch.Tensor | None, torch.Tensor]] = [
                (a16 @ w16.T, emu_16),
                (torch._scaled_mm(qa_t, qw_t.t(), scale_a=one_a, scale_b=one_w, out_dtype=torch.bfloat16), emu_t),
                (torch._scaled_mm(qa_t, qw_t.t(), scale_a=one_a, scale_b=one_w, out_dtype=torch.bfloat16,
                                  use_fast_accum=True), emu_t)]
            try:
                res.append((torch._scaled_mm(qa_b, qw_b.t(), scale_a=sa_l.t(), scale_b=sw_l.t(),
                                             out_dtype=torch.bfloat16), emu_b))
            except Exception:  # noqa: BLE001 - any refusal of the block-scale recipe: fall back
                res.append((None, emu_b))
            if wgmma:
                C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
                m.gemm_fp8_wgmma(qa_b, sa_l, qw_b, sw_l, C, M, N, K)
                res.append((C, emu_b))
            else:
                res.append((None, emu_b))
            out.append(f"| {dist} | {K} | " + " | ".join("n/a" if c is None else f"{rel(c, e):.2e}" for c, e in res)
                       + " |")
            total.append(f"| {dist} | {K} | " + " | ".join("n/a" if c is None else f"{rel(c, ref):.2e}"
                                                          for c, _ in res) + " |")
    note = ("Every output is bf16 (as the GEMMs return it): its rounding alone moves each value by up to 2^-9 = "
            "2.0e-03 of itself.")
    return "\n".join(out) + "\n\n" + "\n".join(total) + "\n\n" + note


# ----------------------------------------------------------------------------------------------------
# The tiny model
# ----------------------------------------------------------------------------------------------------


class _STE(torch.autograd.Function):
    """Forward: x stored in a format; backward: the gradient passes unchanged (straight-through)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, how: str, is_weight: bool) -> torch.Tensor:
        return stored(x.detach().float(), how, is_weight).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return g, None, None


def model_table(steps: int, device: str, held_batches: int = 20) -> str:
    from cudacourse.loader import import_file

    cap = import_file(ROOT / "lessons" / "06_training" / "capstone.py")
    dec = cap.load_decoder("solution")
    cfg = dec.Config(vocab=64, dim=128, n_heads=4, hidden=352, n_layers=4)
    text = cap.load_corpus()
    tok = cap.CharTokenizer(text)
    ids = tok.encode(text)
    split = int(0.9 * ids.numel())
    train = cap.batches(ids[:split], batch=16, seq=64, steps=steps, seed=0, device=device)
    held = cap.batches(ids[split:], batch=16, seq=64, steps=held_batches, seed=1, device=device)
    how_now = {"how": "fp32"}
    matmul = torch.Tensor.__matmul__

    def fp8_matmul(h: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
        how = how_now["how"]
        if how == "fp32" or h.dim() != 2 or wt.dim() != 2:
            return matmul(h, wt)
        return matmul(_STE.apply(h, how, False), _STE.apply(wt.T, how, True).T)  # wt is W^T: W (out x in) blocks

    def run(W: dict, how: str, data: list) -> float:
        how_now["how"] = how
        with torch.no_grad():
            return sum(float(cap.torch_loss(W, cfg, i, t)) for i, t in data) / len(data)

    def train_run(how: str) -> tuple[dict, list[float]]:
        weights = dec.init_weights(cfg, seed=0, device=device)
        W, leaves = cap.torch_params(weights)
        opt = torch.optim.AdamW(leaves, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
        curve = []
        for i, t in train:
            how_now["how"] = how
            opt.zero_grad()
            loss = cap.torch_loss(W, cfg, i, t)
            loss.backward()
            opt.step()
            curve.append(float(loss.detach()))
        return W, curve

    torch.Tensor.__matmul__ = fp8_matmul  # every `h @ W.T` of torch_loss: the linear layers and the LM head
    try:
        torch.manual_seed(0)
        W32, c32 = train_run("fp32")
        evals = {how: run(W32, how, held) for how in ["fp32", *FORMATS]}
        W8, c8 = train_run("e4m3 block")
        e8 = run(W8, "e4m3 block", held)
        e8_32 = run(W8, "fp32", held)
    finally:
        torch.Tensor.__matmul__ = matmul
    lines = [f"Model: lesson 04's decoder, dim {cfg.dim}, {cfg.n_layers} layers, {cfg.n_heads} heads, hidden "
             f"{cfg.hidden}; {steps} AdamW steps (lr 3e-3) on batches of 16 x 64 characters of lessons/06_training/"
             "corpus.txt (its first 90%); held-out loss: the mean cross-entropy over "
             f"{held_batches} batches of the last 10%.",
             "Every `h @ W.T` of the model (attention projections, MLP, LM head) has both operands stored in the "
             "format (block: 1x128 groups of h, 128x128 blocks of W; dims below 128 make one group per row).", "",
             "| linear layers' operands | held-out loss, fp32-trained model |", "|---|---:|"]
    lines += [f"| {how} | {v:.4f} |" for how, v in evals.items()]
    lines += ["", "| training run | loss, mean of the last 20 steps | held-out loss (same format) | held-out loss "
              "(fp32 evaluation) |", "|---|---:|---:|---:|",
              f"| fp32 | {sum(c32[-20:]) / len(c32[-20:]):.4f} | {evals['fp32']:.4f} | {evals['fp32']:.4f} |",
              f"| e4m3 block forward, straight-through backward | {sum(c8[-20:]) / len(c8[-20:]):.4f} | {e8:.4f} | "
              f"{e8_32:.4f} |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the chosen table (markdown) with a header naming the machine and the command."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["gemm", "gpu", "model"])
    ap.add_argument("--steps", type=int, default=400, help="training steps of the model table")
    ap.add_argument("--device", default="cpu", help="where the model table runs (cpu or cuda)")
    ap.add_argument("--held", type=int, default=20, help="held-out batches of the model table")
    a = ap.parse_args(argv)
    cmd = "benchmarks/fp8_precision.py " + " ".join(argv if argv is not None else sys.argv[1:])
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    body: Callable[[], str] = {"gemm": gemm_table, "gpu": gpu_table,
                               "model": lambda: model_table(a.steps, a.device, a.held)}[a.what]
    print(header(cmd) + "\n" + body())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
