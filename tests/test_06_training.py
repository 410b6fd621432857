"""Graded checks of lesson 06 (training kernels): lessons/06_training/{training,adamw}.cu and the capstone in
lessons/06_training/train.py.

Tasks (ids match the TODOs in the kernel files; titles and points live in lessons/06_training/lesson.toml):
  6.1  GELU backward and the bias backward (gelu_backward, bias_backward)
  6.2  LayerNorm backward: dx, and dw/db by a deterministic two-stage column reduction
  6.3  softmax backward; fused cross-entropy forward+backward, ignore_index, mean reduction
  6.4  embedding backward: atomic, and deterministic in sorted order (repeated ids)
  6.5  AdamW: flat buffer and multi-tensor in one launch, exactly torch.optim.AdamW
  6.6  matmul backward on the tiled GEMM, transposes read in place (matmul_backward)
  6.7  capstone: train lesson 04's decoder on your kernels, loss curve matches PyTorch's
  6.8  speed: cross-entropy fwd+bwd at 8192 x 50257 reaches 1.5x PyTorch eager (GPU only)
  6.9  speed: LayerNorm backward at 32768 x 4096 reaches 1.0x PyTorch (GPU only)
  6.10 speed: AdamW over 124M parameters reaches 0.80x torch fused=True (GPU only; target in lesson.toml)
  6.11 chunked fused linear + cross-entropy: loss, dx, dw, db without the whole logits matrix
  6.12 speed and memory: the fused linear + cross-entropy at 8192 x 768 x 50257, peak memory <= 0.3x
       PyTorch's at >= 0.8x its speed (GPU only)

Every gradient is compared with torch.autograd on the same float32 inputs promoted to float64 (the
reference), with tolerances stated per test. Outputs start as NaN poison, inputs are checked unchanged,
sizes are not multiples of any block or tile, and the special values each kernel must survive are in
the cases (logits of 1e4, NaN and +inf logits, ignored rows, every row ignored, repeated token ids).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import cudacourse as cc
from cudacourse import check
from cudacourse.course import course
from cudacourse.lessons import learner_python
from cudacourse.loader import import_file
from cudacourse.torch_worker import RemoteModule, backward, run_beside

LESSON = "06_training"


def _m() -> cc.Lesson:
    return cc.lesson(LESSON)


def _load(path: Path, what: str) -> ModuleType:
    """Import a Python file by path (cached per path)."""
    if not path.exists():
        raise AssertionError(f"{what}: {path} not found.")
    return import_file(path)


def _train() -> Any:
    """The learner's train.py (task 6.7), from the folder cc.lesson loads kernels from.

    While grading it runs in a confined torch worker (``lessons.learner_python``), with lesson 04's decoder.py
    beside it (the capstone's forward), never in this process, which compares and records verdicts: its
    functions run there, the lessons' kernels it is handed (``_Kernels``) are called back here, and what it
    makes and cannot be copied (an ``Ops``) stays there as a ``WorkerObject``. Outside grading it is imported
    here."""
    path = _m().dir / "train.py"
    if not path.exists():
        raise AssertionError(f"task 6.7: {path} not found.")
    decoder = cc.lesson("04_transformer").dir / "decoder.py"
    # timeout: the worker's share between two of its kernel calls; the capstone's steps stay far below it.
    # No torch guard: train.py's bookkeeping uses torch (the label check, cutting and joining the flat buffer), as
    # its docstring says, and so does decoder.py's given code around decoder_block (embed's id check); task 4.9
    # runs decoder_block under the guard
    return learner_python(path, gpu=_m().backend == "cuda", timeout_s=120.0, guard=False,
                          also=[decoder] if decoder.is_file() else [])


def _decoder(tr: Any) -> Any:
    """Lesson 04's decoder.py (the learner's, task 4.9) for the capstone: the one in train.py's worker while
    grading, else imported here."""
    path = cc.lesson("04_transformer").dir / "decoder.py"
    if isinstance(tr, RemoteModule):
        if not path.is_file():
            raise AssertionError(f"task 4.9 (the capstone's forward): {path} not found.")
        return tr.worker.module(path)
    return _load(path, "task 4.9 (the capstone's forward)")


def _twin_guard(impl: Any) -> Any:
    """For a Triton twin: torch may allocate and check in the twin's file, never compute the answer."""
    import contextlib

    if impl is None:
        return contextlib.nullcontext()
    from cudacourse.grading.screens import torch_answer_guard

    return torch_answer_guard([impl.__file__])


def _grads(fn: Any, inputs: list[torch.Tensor], dy: torch.Tensor) -> list[torch.Tensor]:
    """Gradients of fn(*inputs) against dy by autograd in float64 (the reference for every backward)."""
    xs = [t.detach().cpu().double().requires_grad_(True) for t in inputs]
    out = fn(*xs)
    return [g.float() for g in torch.autograd.grad(out, xs, dy.detach().cpu().double())]


class _Kernels:
    """What train.py is handed of a lesson: its launchers, whose calls are counted here (the capstone must use
    the kernels), and its device. Nothing else: while grading train.py calls it back from its worker, and a
    ``cc.Lesson`` itself has methods (``module(path)``) that would read any file here."""

    def __init__(self, mod: cc.Lesson) -> None:
        self._mod, self._names = mod, frozenset(mod.functions())
        self.device, self.backend = mod.device, mod.backend
        self.counts: Counter = Counter()

    def __getattr__(self, name: str) -> Any:
        if name not in self._names:
            raise AttributeError(f"lesson {self._mod.name} has no launcher {name!r}")
        attr = getattr(self._mod, name)

        def call(*args: Any) -> Any:
            self.counts[name] += 1
            return attr(*args)

        return call


# ----------------------------------------------------------------------------------------------------
# 6.1 GELU backward, bias backward
# ----------------------------------------------------------------------------------------------------


@pytest.mark.task("6.1")
@pytest.mark.parametrize("n", [1, 31, 33, 1000, 4099])
def test_gelu_backward(n: int) -> None:
    m = _m()
    g = check.rng(f"gelu-bwd-{n}")
    x = check.randn(n, g, m.device, scale=3.0)
    if n > 8:
        x[:4] = torch.tensor([-30.0, 30.0, 0.0, -1e4])  # saturated tails and zero
    dy = check.randn(n, g, m.device)
    full, dx = check.guarded(n, m.device)
    with check.unchanged(x, dy, names=["x", "dy"]):
        m.gelu_backward(x, dy, dx, n)
    (ref,) = _grads(F.gelu, [x], dy)
    check.assert_close(dx, ref, name=f"gelu_backward dx, n={n}", rtol=1e-5, atol=1e-6, task="6.1",
                       hint="dx = dy * (Phi(x) + x * phi(x)) with Phi the normal CDF (erf form) and phi its density.")
    check.assert_guard(full, n, "gelu_backward", "6.1")


@pytest.mark.task("6.1")
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (7, 33), (300, 257), (1000, 3)])
def test_bias_backward(rows: int, cols: int) -> None:
    m = _m()
    g = check.rng(f"bias-bwd-{rows}x{cols}")
    dy = check.randn((rows, cols), g, m.device)
    full, db = check.guarded(cols, m.device)
    with check.unchanged(dy, names=["dy"]):
        m.bias_backward(dy, db, rows, cols)
    (_, ref) = _grads(lambda x, b: x + b, [torch.zeros(rows, cols), torch.zeros(cols)], dy)
    # one running sum per column (the hint's design): its float32 error grows like rows * eps, not like
    # sqrt(rows) * eps (check.sum_tolerance's docstring); the solution once missed sum_tolerance(1000) by 1.7x on
    # the H100 (5.1e-5 against 3.0e-5, 2026-11-28). A dropped or doubled row is off by about 1.
    rtol, atol = 1e-5, 2.0 * rows * torch.finfo(torch.float32).eps
    check.assert_close(db, ref, name=f"bias_backward db, {rows}x{cols}", rtol=rtol, atol=atol, task="6.1",
                       hint="db[c] is the sum of column c of dy over all rows: one thread per column.")
    check.assert_guard(full, cols, "bias_backward", "6.1")


# ----------------------------------------------------------------------------------------------------
# 6.2 LayerNorm backward
# ----------------------------------------------------------------------------------------------------

LN_HINT = ("TODO(task 6.2): per row, with g = dy * w and xhat = (x - mean) * rstd: dx = rstd * (g - mean(g) - "
           "xhat * mean(g * xhat)); each block adds dy * xhat and dy of its rows into its own partial rows.")


def _layernorm_case(rows: int, cols: int, m: cc.Lesson, shift: float = 0.0) -> tuple[torch.Tensor, ...]:
    g = check.rng(f"ln-bwd-{rows}x{cols}-{shift}")
    x = check.randn((rows, cols), g, m.device) + shift
    w, b = check.randn(cols, g, m.device), check.randn(cols, g, m.device)
    dy = check.randn((rows, cols), g, m.device)
    xd = x.cpu().double()
    mean = xd.mean(1).float().to(m.device)
    rstd = (1.0 / torch.sqrt(xd.var(1, unbiased=False) + 1e-5)).float().to(m.device)
    dx = check.poisoned((rows, cols), torch.float32, m.device)
    dw, db = check.poisoned(cols, torch.float32, m.device), check.poisoned(cols, torch.float32, m.device)
    partial = check.poisoned(2 * math.ceil(rows / 32) * cols, torch.float32, m.device)
    with check.unchanged(x, w, mean, rstd, dy, names=["x", "w", "mean", "rstd", "dy"]):
        m.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, partial, rows, cols)
    refs = _grads(lambda xx, ww, bb: F.layer_norm(xx, (cols,), ww, bb, 1e-5), [x, w, b], dy)
    return (dx, dw, db), refs


@pytest.mark.task("6.2")
@pytest.mark.parametrize(("rows", "cols"), [(1, 7), (3, 1000), (33, 100), (70, 257), (200, 33), (3, 4500)])
def test_layernorm_backward(rows: int, cols: int) -> None:
    m = _m()
    (dx, dw, db), (rdx, rdw, rdb) = _layernorm_case(rows, cols, m)
    check.assert_close(dx, rdx, name=f"layernorm_backward dx, {rows}x{cols}", rtol=1e-4, atol=1e-5, task="6.2",
                       hint=LN_HINT)
    rtol, atol = check.sum_tolerance(rows, magnitude=4.0)
    check.assert_close(dw, rdw, name=f"layernorm_backward dw, {rows}x{cols}", rtol=rtol, atol=atol, task="6.2",
                       hint=LN_HINT)
    check.assert_close(db, rdb, name=f"layernorm_backward db, {rows}x{cols}", rtol=rtol, atol=atol, task="6.2",
                       hint=LN_HINT)


@pytest.mark.task("6.2")
def test_layernorm_backward_far_from_zero_and_deterministic() -> None:
    """Rows of mean 1000 (xhat must come from the saved mean, not from sums of x), and two runs give the
    same bits in dw and db: no float atomics."""
    m = _m()
    (dx, dw, db), (rdx, rdw, rdb) = _layernorm_case(65, 129, m, shift=1000.0)
    check.assert_close(dx, rdx, name="layernorm_backward dx, rows of mean 1000", rtol=1e-3, atol=1e-3, task="6.2",
                       hint=LN_HINT)
    # x - mean in float32 rounds at ~1000 * 6e-8 = 6e-5 per element (the saved float32 mean too): dw
    # inherits that error summed over 65 rows, hence a tolerance of a few 1e-3 here.
    check.assert_close(dw, rdw, name="layernorm_backward dw, rows of mean 1000", rtol=1e-4, atol=3e-3,
                       task="6.2", hint=LN_HINT)
    (dx2, dw2, db2), _ = _layernorm_case(65, 129, m, shift=1000.0)
    for a, b, what in ((dw, dw2, "dw"), (db, db2, "db"), (dx, dx2, "dx")):
        assert torch.equal(a, b), (f"layernorm_backward (task 6.2): two runs on the same inputs gave different {what} "
                                   "bits. The graded version must be deterministic: per-block partial rows, then the "
                                   "fixed-order column_reduce_kernel, no atomicAdd.")


# ----------------------------------------------------------------------------------------------------
# 6.3 softmax backward, cross-entropy
# ----------------------------------------------------------------------------------------------------


@pytest.mark.task("6.3")
@pytest.mark.parametrize("cols", [1, 7, 33, 1000, 4099])
def test_softmax_backward(cols: int) -> None:
    m = _m()
    rows = max(3, min(100, 20_000 // cols))
    g = check.rng(f"softmax-bwd-{rows}x{cols}")
    x = check.randn((rows, cols), g, m.device, scale=3.0)
    y = torch.softmax(x.cpu().double(), dim=1).float().to(m.device)
    dy = check.randn((rows, cols), g, m.device)
    dx = check.poisoned((rows, cols), torch.float32, m.device)
    with check.unchanged(y, dy, names=["y", "dy"]):
        m.softmax_backward(y, dy, dx, rows, cols)
    (ref,) = _grads(lambda t: torch.softmax(t, dim=1), [x], dy)
    check.assert_close(dx, ref, name=f"softmax_backward dx, {rows}x{cols}", rtol=1e-4, atol=1e-6, task="6.3",
                       hint="TODO(task 6.3, part 1): s = block_sum of y * dy over the row, then dx = y * (dy - s).")


CE_HINT = ("TODO(task 6.3, part 2): one pass of online max/sum (MaxSum), lse = m + log(s), loss = lse - x[label], "
           "dx = (exp(x - lse) - onehot) * inv_count; ignored rows get loss 0 and a zero gradient.")


def _ce(m: cc.Lesson, logits: torch.Tensor, labels: torch.Tensor, what: str, ignore_index: int = -100,
        impl: Any = None, task: str = "6.3", hint: str = CE_HINT) -> None:
    """Check ``impl.cross_entropy`` (default: the lesson's CUDA launcher; a Triton twin for task 6.T1)."""
    rows, vocab = logits.shape
    count = int((labels != ignore_index).sum())
    losses = check.poisoned(rows, torch.float32, m.device)
    dl = check.poisoned((rows, vocab), torch.float32, m.device)
    loss = check.poisoned(1, torch.float32, m.device)
    lab = labels.to(torch.int32).to(m.device)
    run = (impl or m).cross_entropy
    with check.unchanged(logits, lab, names=["logits", "labels"]), _twin_guard(impl):
        run(logits, lab, losses, dl, loss, rows, vocab, ignore_index, 1.0 / count if count else math.nan)
    x = logits.detach().cpu().double().requires_grad_(True)
    ref = F.cross_entropy(x, labels.cpu().long(), ignore_index=ignore_index)
    ref.backward()
    per_row = F.cross_entropy(x.detach(), labels.cpu().long(), ignore_index=ignore_index, reduction="none")
    fn = "cross_entropy" if impl is None else "cross_entropy (Triton)"
    check.assert_close(losses, per_row.float(), name=f"{fn} per-row losses, {what}", rtol=1e-5, atol=1e-5,
                       task=task, hint=hint)
    check.assert_close(loss, ref.reshape(1).float(), name=f"{fn} mean loss, {what}", rtol=1e-5, atol=1e-5,
                       task=task, hint=hint)
    # dlogits = exp(x - lse) - onehot: the relative tolerance grows with the largest logit (check.softmax_rtol)
    check.assert_close(dl, x.grad.float(), name=f"{fn} dlogits, {what}", rtol=check.softmax_rtol(logits),
                       atol=1e-6 / max(count, 1) + 1e-9, task=task, hint=hint)


@pytest.mark.task("6.3")
@pytest.mark.parametrize(("rows", "vocab"), [(1, 1), (7, 33), (33, 1000), (5, 4099)])
def test_cross_entropy(rows: int, vocab: int) -> None:
    m = _m()
    g = check.rng(f"ce-{rows}x{vocab}")
    logits = check.randn((rows, vocab), g, m.device, scale=4.0)
    labels = torch.randint(0, vocab, (rows,), generator=g)
    if rows > 3:
        labels[1] = labels[rows - 2] = -100  # ignored rows
    _ce(m, logits, labels, f"rows={rows}, vocab={vocab}")


@pytest.mark.task("6.3")
def test_cross_entropy_gpt2_vocab_large_logits() -> None:
    """Vocabulary 50257 (GPT-2's): longer than any block; logits of size 1e4 overflow exp() unless the
    row max is subtracted; a custom ignore_index."""
    m = _m()
    rows = 3 if m.backend == "sim" else 64
    g = check.rng("ce-50257")
    logits = check.randn((rows, 50257), g, m.device, scale=3.0)
    logits[0] *= 3000.0
    labels = torch.randint(0, 50257, (rows,), generator=g)
    labels[rows - 1] = 7
    _ce(m, logits, labels, "vocab 50257, logits up to ~1e4", ignore_index=7)


@pytest.mark.task("6.3")
def test_cross_entropy_nan_inf_and_all_ignored() -> None:
    """A NaN logit makes its row's loss and gradient NaN, +inf likewise, as in PyTorch; the other rows are
    unaffected. With every row ignored the mean is NaN (0 / 0) and every gradient 0. (An ignored row
    that holds NaN gets a zero gradient here; PyTorch's is NaN, from 0 * NaN: not part of the contract.)"""
    m = _m()
    g = check.rng("ce-special")
    logits = check.randn((6, 40), g, m.device)
    logits[1, 5] = float("nan")
    logits[3, 0] = float("inf")
    logits[4, 9] = float("-inf")
    labels = torch.tensor([0, 1, 2, 3, 9, 39])
    _ce(m, logits, labels, "NaN, +inf and -inf logits")
    _ce(m, torch.nan_to_num(logits, 0.0, 0.0, 0.0), torch.full((6,), -100), "every row ignored")


@pytest.mark.task("6.3")
@pytest.mark.parametrize("bad", [-1, 40])
def test_cross_entropy_rejects_bad_labels_before_launch(bad: int) -> None:
    """The given wrapper (train.cross_entropy) refuses an out-of-range label before launching. Checked after a
    valid call gives the right values: the refusal is the wrapper's, so on its own this case passed on the
    untouched stub, and a stub must fail every case of its task."""
    tr = _train()
    _ce(_m(), check.randn((5, 40), check.rng(f"ce-valid-{bad}"), _m().device), torch.tensor([0, 3, -100, 39, 2]),
        "the valid labels of a rejection case")
    m = _Kernels(_m())
    logits = torch.zeros(5, 40, device=m.device)
    labels = torch.tensor([0, 3, -100, bad, 2 * bad])
    with pytest.raises(IndexError) as e:
        tr.cross_entropy(m, logits, labels)
    msg = str(e.value)
    assert f"label {bad} at position 3" in msg, f"the error must name the first bad label and its position: {msg}"
    assert m.counts["cross_entropy"] == 0, "the labels must be checked before the kernel is launched"


# ----------------------------------------------------------------------------------------------------
# 6.4 embedding backward
# ----------------------------------------------------------------------------------------------------

EMB_CASES = [(1, 1, 1), (50, 10, 7), (300, 37, 33), (64, 1000, 16)]


def _emb_ref(ids: torch.Tensor, dout: torch.Tensor, vocab: int) -> torch.Tensor:
    table = torch.zeros(vocab, dout.shape[1])
    (ref,) = _grads(lambda t: F.embedding(ids.cpu().long(), t), [table], dout)
    return ref


@pytest.mark.task("6.4")
@pytest.mark.parametrize(("n", "vocab", "dim"), EMB_CASES)
def test_embedding_backward_atomic(n: int, vocab: int, dim: int) -> None:
    m = _m()
    g = check.rng(f"emb-atomic-{n}-{vocab}-{dim}")
    ids = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int32).to(m.device)
    if n > 3:
        ids[:3] = ids[-1]  # a token repeated four times
    dout = check.randn((n, dim), g, m.device)
    dt = check.poisoned((vocab, dim), torch.float32, m.device)
    with check.unchanged(ids, dout, names=["ids", "dout"]):
        m.embedding_backward_atomic(ids, dout, dt, n, vocab, dim)
    rtol, atol = check.sum_tolerance(n)
    check.assert_close(dt, _emb_ref(ids, dout, vocab), name=f"embedding_backward_atomic, n={n}, vocab={vocab}",
                       rtol=rtol, atol=atol, task="6.4",
                       hint="TODO(task 6.4, part 1): atomicAdd(&dtable[ids[i] * dim + c], dout[i * dim + c]).")


@pytest.mark.task("6.4")
@pytest.mark.parametrize(("n", "vocab", "dim"), EMB_CASES)
def test_embedding_backward_sorted(n: int, vocab: int, dim: int) -> None:
    m = _m()
    g = check.rng(f"emb-sorted-{n}-{vocab}-{dim}")
    ids = torch.randint(0, vocab, (n,), generator=g)
    if n > 3:
        ids[:3] = ids[-1]
    order = torch.sort(ids, stable=True).indices.to(torch.int32).to(m.device)
    offsets = torch.zeros(vocab + 1, dtype=torch.int32)
    offsets[1:] = torch.bincount(ids, minlength=vocab).cumsum(0)
    offsets = offsets.to(m.device)
    dout = check.randn((n, dim), g, m.device)
    dt = check.poisoned((vocab, dim), torch.float32, m.device)
    with check.unchanged(order, offsets, dout, names=["order", "offsets", "dout"]):
        m.embedding_backward_sorted(order, offsets, dout, dt, n, vocab, dim)
    ref = _emb_ref(ids, dout, vocab)
    rtol, atol = check.sum_tolerance(n)
    check.assert_close(dt, ref, name=f"embedding_backward_sorted, n={n}, vocab={vocab}", rtol=rtol, atol=atol,
                       task="6.4", hint="TODO(task 6.4, part 2): thread (v, c) sums dout[order[j], c] for j in "
                       "offsets[v] .. offsets[v+1]-1 and writes dtable[v, c], also when the range is empty.")
    # Deterministic: the sum of each row is taken in increasing position order, so it equals a float32
    # running sum in that order bit for bit.
    dt2 = check.poisoned((vocab, dim), torch.float32, m.device)
    m.embedding_backward_sorted(order, offsets, dout, dt2, n, vocab, dim)
    assert torch.equal(dt, dt2), "embedding_backward_sorted (task 6.4) gave different bits on a second run"


# ----------------------------------------------------------------------------------------------------
# 6.5 AdamW
# ----------------------------------------------------------------------------------------------------

ADAM = dict(lr=3e-3, betas=(0.85, 0.99), eps=1e-6)


def _adam_tol() -> dict[str, float]:
    return dict(rtol=1e-5, atol=1e-6)


ADAMW_HINT = "TODO(task 6.5, part 1): a grid-stride loop calling adamw_element."


def _adamw_flat_case(m: cc.Lesson, n: int, impl: Any = None, task: str = "6.5", hint: str = ADAMW_HINT) -> None:
    """Three steps of ``impl.adamw_flat`` (default: the CUDA launcher) against torch.optim.AdamW, gradients of
    growing size, weight decay 0.05."""
    g = check.rng(f"adamw-flat-{n}")
    p = check.randn(n, g, m.device)
    m1, v1 = torch.zeros(n, device=m.device), torch.zeros(n, device=m.device)
    ref = p.detach().cpu().clone().requires_grad_(True)
    opt = torch.optim.AdamW([ref], weight_decay=0.05, foreach=False, **ADAM)
    fn = "adamw_flat" if impl is None else "adamw_flat (Triton)"
    for step in range(1, 4):
        grad = check.randn(n, g, m.device, scale=10.0 ** (step - 2))
        with check.unchanged(grad, names=["grad"]), _twin_guard(impl):
            (impl or m).adamw_flat(p, grad, m1, v1, n, ADAM["lr"], *ADAM["betas"], ADAM["eps"], 0.05, step)
        ref.grad = grad.cpu().clone()
        opt.step()
        st = opt.state[ref]
        check.assert_close(p, ref.detach(), name=f"{fn} param after step {step}, n={n}", task=task, hint=hint,
                           **_adam_tol())
        check.assert_close(m1, st["exp_avg"], name=f"{fn} exp_avg after step {step}", task=task, hint=hint,
                           **_adam_tol())
        check.assert_close(v1, st["exp_avg_sq"], name=f"{fn} exp_avg_sq after step {step}", task=task, hint=hint,
                           **_adam_tol())


@pytest.mark.task("6.5")
@pytest.mark.parametrize("n", [1, 33, 4099, 70_001])
def test_adamw_flat_matches_torch(n: int) -> None:
    _adamw_flat_case(_m(), n)


def _chunk_table(offsets: list[int], chunk: int) -> tuple[list[int], list[int]]:
    tensors, starts = [], []
    for t in range(len(offsets) - 1):
        for s in range(offsets[t], offsets[t + 1], chunk):
            tensors.append(t)
            starts.append(s)
    return tensors, starts


@pytest.mark.task("6.5")
def test_adamw_multi_tensor_matches_torch_param_groups() -> None:
    """Five tensors of odd sizes in one launch, two param groups (weight decay 0.1, and 0 for the
    norm-like vectors), chunks of 1000 so that big tensors span several blocks and small ones one."""
    m = _m()
    g = check.rng("adamw-multi")
    shapes = [(37, 29), (33,), (1,), (64, 71), (1000,)]
    decay = [0.1, 0.0, 0.0, 0.1, 0.0]
    sizes = [math.prod(s) for s in shapes]
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    total, chunk = offsets[-1], 1000
    p = check.randn(total, g, m.device)
    m1, v1 = torch.zeros(total, device=m.device), torch.zeros(total, device=m.device)
    refs = [p[offsets[i]:offsets[i + 1]].detach().cpu().clone().view(shapes[i]).requires_grad_(True)
            for i in range(len(shapes))]
    opt = torch.optim.AdamW([{"params": [r for r, d in zip(refs, decay, strict=True) if d > 0], "weight_decay": 0.1},
                             {"params": [r for r, d in zip(refs, decay, strict=True) if d == 0], "weight_decay": 0.0}],
                            foreach=False, **ADAM)
    ct, cs = _chunk_table(offsets, chunk)
    dev = m.device
    off_t = torch.tensor(offsets, dtype=torch.int64, device=dev)
    dec_t = torch.tensor(decay, dtype=torch.float32, device=dev)
    ct_t, cs_t = torch.tensor(ct, dtype=torch.int32, device=dev), torch.tensor(cs, dtype=torch.int64, device=dev)
    for step in range(1, 3):
        grad = check.randn(total, g, dev)
        with check.unchanged(grad, off_t, dec_t, ct_t, cs_t):
            m.adamw_multi(p, grad, m1, v1, off_t, dec_t, ct_t, cs_t, len(ct), chunk, ADAM["lr"], *ADAM["betas"],
                          ADAM["eps"], step)
        for i, r in enumerate(refs):
            r.grad = grad[offsets[i]:offsets[i + 1]].cpu().clone().view(shapes[i])
        opt.step()
        want = torch.cat([r.detach().reshape(-1) for r in refs])
        check.assert_close(p, want, name=f"adamw_multi params after step {step}", task="6.5",
                           hint="TODO(task 6.5, part 2): block b updates chunk_start[b] up to min(+chunk, the end of "
                                "tensor chunk_tensor[b]) with that tensor's decay.", **_adam_tol())


@pytest.mark.task("6.5")
@pytest.mark.parametrize("which", ["grad", "exp_avg", "exp_avg_sq"])
def test_adamw_rejects_mismatched_shapes_before_writing(which: str) -> None:
    """The given wrapper (train.adamw_flat) refuses a buffer of the wrong shape before writing. Checked after a
    valid call gives the right values (the refusal alone passed on the untouched stub)."""
    _adamw_flat_case(_m(), 10)
    tr = _train()
    m = _Kernels(_m())
    dev = m.device
    bufs = {"param": torch.ones(10, device=dev), "grad": torch.ones(10, device=dev),
            "exp_avg": torch.zeros(10, device=dev), "exp_avg_sq": torch.zeros(10, device=dev)}
    bufs[which] = torch.zeros(11, device=dev)
    before = {k: v.clone() for k, v in bufs.items()}
    with pytest.raises(ValueError) as e:
        tr.adamw_flat(m, bufs["param"], bufs["grad"], bufs["exp_avg"], bufs["exp_avg_sq"], 1, lr=1e-3)
    assert which in str(e.value) and "(11,)" in str(e.value), f"the error must name {which} and its shape: {e.value}"
    assert m.counts["adamw_flat"] == 0 and all(torch.equal(bufs[k], before[k]) for k in bufs), (
        "nothing may be written or launched when the shapes do not match")


# ----------------------------------------------------------------------------------------------------
# 6.6 matmul backward
# ----------------------------------------------------------------------------------------------------

MM_HINT = ("TODO(task 6.6): the v3 tile loop; for TA load As[tx][ty] = A[(k0 + ty) * M + rowBase + tx], for TB "
           "Bs[tx][ty] = B[(colBase + ty) * K + k0 + tx]; zeros outside the matrices.")


@pytest.mark.task("6.6")
@pytest.mark.parametrize(("M", "N", "K"), [(1, 1, 1), (33, 17, 45), (100, 64, 31), (7, 130, 65)])
def test_matmul_backward(M: int, N: int, K: int) -> None:
    m = _m()
    g = check.rng(f"mm-bwd-{M}-{N}-{K}")
    A, B, dC = check.randn((M, K), g, m.device), check.randn((K, N), g, m.device), check.randn((M, N), g, m.device)
    fa, dA = check.guarded(M * K, m.device)
    fb, dB = check.guarded(K * N, m.device)
    with check.unchanged(A, B, dC, names=["A", "B", "dC"]):
        m.matmul_backward(A, B, dC, dA.view(M, K), dB.view(K, N), M, N, K)
    rA, rB = _grads(torch.matmul, [A, B], dC)
    check.assert_close(dA.view(M, K), rA, name=f"matmul_backward dA = dC B^T, M={M} N={N} K={K}", task="6.6",
                       rtol=1e-4, atol=1e-5 * math.sqrt(N), hint=MM_HINT)
    check.assert_close(dB.view(K, N), rB, name=f"matmul_backward dB = A^T dC, M={M} N={N} K={K}", task="6.6",
                       rtol=1e-4, atol=1e-5 * math.sqrt(M), hint=MM_HINT)
    check.assert_guard(fa, M * K, "matmul_backward dA", "6.6")
    check.assert_guard(fb, K * N, "matmul_backward dB", "6.6")


@pytest.mark.parametrize("batch", [45, 300])
def test_worked_linear_backward(batch: int) -> None:
    """linear_backward (worked, given complete) on the worked register-tiled GEMM: y = x W^T + b. A batch of 300
    takes the split-K path (dW and db summed over slices of the batch, the last one ragged). Not graded: it runs
    none of task 6.6's code (it was graded as 6.6 and passed on the untouched stub)."""
    m = _m()
    g = check.rng(f"linear-bwd-{batch}")
    fin, fout = 70, 33
    x, W, dy = check.randn((batch, fin), g, m.device), check.randn((fout, fin), g, m.device), \
        check.randn((batch, fout), g, m.device)
    dx, dW, db = (check.poisoned(s, torch.float32, m.device) for s in ((batch, fin), (fout, fin), (fout,)))
    m.linear_backward(x, W, dy, dx, dW, db, batch, fin, fout)
    rx, rW, rb = _grads(F.linear, [x, W, torch.zeros(fout)], dy)
    for got, want, what in ((dx, rx, "dx = dy W"), (dW, rW, "dW = dy^T x"), (db, rb, "db")):
        check.assert_close(got, want, name=f"linear_backward {what}", task="worked example", rtol=1e-4, atol=1e-4,
                           hint="linear_backward is given complete in training.cu; did an edit change it?")


# ----------------------------------------------------------------------------------------------------
# 6.11 chunked fused linear + cross-entropy (train.fused_linear_cross_entropy)
# ----------------------------------------------------------------------------------------------------

FLCE_HINT = ("TODO(task 6.11): per chunk, logits = x[r0:r1] @ w^T (+ b); your cross_entropy kernel with the "
             "inv_count of ALL rows; dx[r0:r1] = dlogits @ w; dw += dlogits^T x[r0:r1]; db += column sums.")


def _flce_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, labels: torch.Tensor,
              ignore_index: int) -> list[torch.Tensor]:
    """Loss, dx, dw (and db) of F.cross_entropy(F.linear(x, w, b)) by autograd in float64."""
    xs = [t.detach().cpu().double().requires_grad_(True) for t in ((x, w) if b is None else (x, w, b))]
    loss = F.cross_entropy(F.linear(*xs), labels.cpu().long(), ignore_index=ignore_index)
    return [loss.detach().reshape(1).float()] + [g.float() for g in torch.autograd.grad(loss, xs)]


@pytest.mark.task("6.11")
@pytest.mark.parametrize(("rows", "hidden", "vocab", "chunk", "bias"),
                         [(1, 1, 1, 1, False), (37, 20, 53, 8, True), (50, 33, 130, 16, False),
                          (5, 7, 1000, 64, True), (23, 17, 40, 1, True)])
def test_fused_linear_cross_entropy(rows: int, hidden: int, vocab: int, chunk: int, bias: bool) -> None:
    """Loss and gradients against float64 autograd; the logits are made chunk by chunk by your kernel."""
    tr, m = _train(), _Kernels(_m())
    g = check.rng(f"flce-{rows}-{hidden}-{vocab}-{chunk}-{bias}")
    x = check.randn((rows, hidden), g, m.device)
    w = check.randn((vocab, hidden), g, m.device, scale=hidden ** -0.5 * 3.0)
    b = check.randn(vocab, g, m.device) if bias else None
    labels = torch.randint(0, vocab, (rows,), generator=g)
    if rows > 3:
        labels[0] = labels[rows // 2] = -100  # ignored rows, in two different chunks
    with check.unchanged(*(t for t in (x, w, b) if t is not None)):
        loss, dx, dw, db = tr.fused_linear_cross_entropy(m, x, w, labels.to(m.device), b, chunk=chunk)
    want = _flce_ref(x, w, b, labels, -100)
    got = [loss, dx, dw] + ([db] if bias else [])
    assert bias or db is None, "fused_linear_cross_entropy: db must be None when the linear has no bias"
    what = f"rows={rows}, hidden={hidden}, vocab={vocab}, chunk={chunk}"
    for out, ref, name in zip(got, want, ("loss", "dx", "dw", "db")[:len(want)], strict=True):
        assert tuple(out.shape) == tuple(ref.shape), f"fused_linear_cross_entropy {name}: shape {tuple(out.shape)}, " \
                                                     f"expected {tuple(ref.shape)}"
        # float32 products of `hidden` terms and sums over `vocab` (dx) or `rows` (dw, db): relative 1e-4 plus
        # an absolute floor of 1e-5 of the largest reference entry (an all-zeros gradient is far outside it)
        check.assert_close(out, ref, name=f"fused_linear_cross_entropy {name}, {what}", rtol=1e-4,
                           atol=1e-5 * float(ref.abs().max()) + 1e-9, task="6.11", hint=FLCE_HINT)
    n_chunks = math.ceil(rows / chunk)
    assert m.counts["cross_entropy"] == n_chunks, (
        f"fused_linear_cross_entropy (task 6.11) must run your cross_entropy kernel once per chunk of {chunk} rows: "
        f"{n_chunks} chunks, {m.counts['cross_entropy']} calls")


@pytest.mark.task("6.11")
def test_fused_linear_cross_entropy_all_ignored_and_bad_input() -> None:
    """Every row ignored: NaN loss (0 / 0, as PyTorch) and zero gradients. A bad label is an IndexError naming
    it and its position before any launch, as for task 6.3; mismatched shapes a ValueError."""
    tr, m = _train(), _Kernels(_m())
    g = check.rng("flce-special")
    x, w, b = check.randn((9, 6), g, m.device), check.randn((11, 6), g, m.device), check.randn(11, g, m.device)
    loss, dx, dw, db = tr.fused_linear_cross_entropy(m, x, w, torch.full((9,), 5, device=m.device), b, chunk=4,
                                                     ignore_index=5)
    assert math.isnan(float(loss)), f"every row ignored: the mean loss must be NaN (as F.cross_entropy), got {loss}"
    for t, name in ((dx, "dx"), (dw, "dw"), (db, "db")):
        assert torch.equal(t, torch.zeros_like(t)), f"every row ignored: {name} must be all zeros"
    m.counts.clear()
    for bad in (-1, 11):
        with pytest.raises(IndexError) as e:
            tr.fused_linear_cross_entropy(m, x, w, torch.tensor([0, 3, -100, bad, 1, 2, 3, 4, 5]), b, chunk=4)
        assert f"label {bad} at position 3" in str(e.value), f"the error must name the label and where: {e.value}"
    with pytest.raises(ValueError, match="hidden"):
        tr.fused_linear_cross_entropy(m, x, w[:, :5].contiguous(), torch.zeros(9, dtype=torch.long), chunk=4)
    assert sum(m.counts.values()) == 0, "bad input must be refused before any kernel is launched"


# ----------------------------------------------------------------------------------------------------
# 6.7 capstone
# ----------------------------------------------------------------------------------------------------


# The instructor's side of the capstone: the model's shape, its weights and a float64 PyTorch reference,
# defined here (as in tests/test_04_transformer.py) so that the verdict needs neither the learner's files
# nor anything outside the staged tests when the grader runs it. decoder.Config has the same fields.


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


def _init_weights(cfg: _Cfg, seed: int, device: object) -> dict:
    """Lesson 04's init_weights (the same draws), float32 on ``device``."""
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


# The graded run trains on this excerpt (Genesis 1:1-8 of the World English Bible, public domain, the
# start of the lesson's corpus.txt), kept here so the test needs no data file when the grader stages it.
TEXT = (
    "In the beginning, God created the heavens and the earth. The earth was formless and empty. Darkness was "
    "on the surface of the deep and God's Spirit was hovering over the surface of the waters.\nGod said, \"Let "
    "there be light,\" and there was light. God saw the light, and saw that it was good. God divided the light "
    "from the darkness. God called the light \"day\", and the darkness he called \"night\". There was evening "
    "and there was morning, the first day.\nGod said, \"Let there be an expanse in the middle of the waters, "
    "and let it divide the waters from the waters.\" God made the expanse, and divided the waters which were "
    "under the expanse from the waters which were above the expanse; and it was so. God called the expanse "
    "\"sky\". There was evening and there was morning, a second day.\n")


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, T: int, theta: float) -> torch.Tensor:
    """Rotate-half RoPE of x (B, T, H, d) in float64."""
    d = x.shape[-1]
    freq = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
    c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def _ref_loss(W: dict, cfg: Any, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Lesson 04's decoder and the mean cross-entropy in float64 PyTorch, differentiable."""
    B, T = ids.shape
    H, hd = cfg.n_heads, cfg.head_dim
    x = W["tok_emb"][ids.reshape(-1).long()]
    for L in W["layers"]:
        h = _rms(x, L["attn_norm"], cfg.eps)
        q, k, v = (h @ L[n].T for n in ("wq", "wk", "wv"))
        q = _rope(q.reshape(B, T, H, hd), T, cfg.theta).transpose(1, 2)
        k = _rope(k.reshape(B, T, H, hd), T, cfg.theta).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v.reshape(B, T, H, hd).transpose(1, 2), is_causal=True)
        x = x + a.transpose(1, 2).reshape(B * T, cfg.dim) @ L["wo"].T
        h = _rms(x, L["mlp_norm"], cfg.eps)
        x = x + (F.silu(h @ L["w_gate"].T) * (h @ L["w_up"].T)) @ L["w_down"].T
    logits = _rms(x, W["norm"], cfg.eps) @ W["lm_head"].T
    return F.cross_entropy(logits, targets.reshape(-1).long())


def _ref_train(weights: dict, cfg: Any, data: list, hp: dict) -> list[float]:
    W = {"tok_emb": weights["tok_emb"], "norm": weights["norm"], "lm_head": weights["lm_head"],
         "layers": [dict(L) for L in weights["layers"]]}
    leaves = []

    def leaf(t: torch.Tensor) -> torch.Tensor:
        r = t.detach().cpu().double().clone().requires_grad_(True)
        leaves.append(r)
        return r

    W = {"tok_emb": leaf(W["tok_emb"]), "layers": [{n: leaf(t) for n, t in L.items()} for L in W["layers"]],
         "norm": leaf(W["norm"]), "lm_head": leaf(W["lm_head"])}
    opt = torch.optim.AdamW(leaves, foreach=False, **hp)
    losses = []
    for ids, targets in data:
        opt.zero_grad()
        loss = _ref_loss(W, cfg, ids.cpu(), targets.cpu())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _ops(tr: Any) -> tuple[Any, _Kernels]:
    """The learner's Ops on counted lesson 06 kernels, lesson 04's and 03's kernels and the learner's decoder.py
    (while grading: made in train.py's worker, and a WorkerObject here)."""
    m6 = _Kernels(_m())
    ops = tr.Ops(m6, _Kernels(cc.lesson("04_transformer")), _Kernels(cc.lesson("03_gemm")), _decoder(tr))
    return ops, m6


@pytest.mark.task("6.7")
def test_linear_function_backward() -> None:
    tr = _train()
    ops, m6 = _ops(tr)
    g = check.rng("capstone-linear")
    x = check.randn((21, 40), g, m6.device).requires_grad_(True)
    w = check.randn((33, 40), g, m6.device).requires_grad_(True)
    dy = check.randn((21, 33), g, m6.device)
    _, (dx, dw) = backward(ops.linear, (x, w), dy)  # ops.linear(x, w).backward(dy), where ops lives
    rx, rw = _grads(lambda a, b: a @ b.T, [x, w], dy)
    assert m6.counts["linear_backward"] == 1, "_Linear.backward (task 6.7) must call m6.linear_backward once"
    for got, want, what in ((dx, rx, "dx"), (dw, rw, "dw")):
        check.assert_close(got, want, name=f"_Linear.backward {what}", task="6.7", rtol=1e-4, atol=1e-4,
                           hint="TODO(task 6.7, part 1): return dx, dw, None from linear_backward's outputs.")


@pytest.mark.task("6.7")
def test_attention_backward_matches_autograd() -> None:
    """attention_backward (given; it runs your GEMM kernel of task 6.6 on strided, batched heads and your
    softmax_backward_kernel) against autograd of causal attention, with N and d not multiples of a tile."""
    m = _m()
    g = check.rng("attn-bwd")
    B, H, N, d = 2, 3, 37, 9
    q, k, v, do = (check.randn((B, N, H, d), g, m.device) for _ in range(4))
    scale = 1.0 / math.sqrt(d)

    def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = torch.einsum("bihc,bjhc->bhij", q, k) * scale
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
        return torch.einsum("bhij,bjhc->bihc", torch.softmax(s, dim=-1), v)

    with torch.no_grad():
        s = torch.einsum("bihc,bjhc->bhij", q.cpu().double(), k.cpu().double()) * scale
        p = torch.softmax(s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf")), dim=-1)
    p = p.float().contiguous().to(m.device)
    dq, dk, dv = (check.poisoned((B, N, H, d), torch.float32, m.device) for _ in range(3))
    scratch = check.poisoned(2 * B * H * N * N, torch.float32, m.device)
    with check.unchanged(q, k, v, p, do, names=["q", "k", "v", "p", "dout"]):
        m.attention_backward(q, k, v, p, do, dq, dk, dv, scratch, B, H, N, d, scale)
    for got, want, what in zip((dq, dk, dv), _grads(attn, [q, k, v], do), ("dq", "dk", "dv"), strict=True):
        check.assert_close(got, want, name=f"attention_backward {what}, B={B} H={H} N={N} d={d}", task="6.7",
                           rtol=1e-4, atol=1e-5, hint=MM_HINT)


# The loss of every step must be within this of PyTorch's (float64, same weights, batches and AdamW
# settings). Measured on the simulator with the solutions: differences of 1e-8 to 6e-7 over 40 steps
# (float32 kernels against float64; training does not amplify them at these settings); on the H100 at most half
# the tolerance (AdamW's eps, below). Planted errors move it far more: no weight decay in AdamW 5e-3 at step 1
# and 1e-2 by step 2 (simulator, eps 1e-5); RMSNorm's dw zeroed 4e-2 at step 2 (measured with eps 1e-8).
CURVE_ATOL, CURVE_RTOL = 1e-4, 1e-4


@pytest.mark.task("6.7")
def test_capstone_loss_curve_matches_pytorch() -> None:
    tr = _train()
    ops, m6 = _ops(tr)
    sim = m6.device.type != "cuda"
    cfg = _Cfg() if sim else _Cfg(dim=128, n_heads=4, hidden=352)
    # float32 training drifts from the float64 reference as steps go on (on the H100, 60 steps left the
    # 1e-4 band at step 29): both configurations stay well inside it
    steps, B, T = (10, 4, 16) if sim else (16, 8, 64)
    g = check.rng("capstone")
    seed = int(torch.randint(0, 1 << 30, (1,), generator=g))
    chars = sorted(set(TEXT))  # 36 characters: ids below the model's vocabulary of 64
    data_ids = torch.tensor([chars.index(c) for c in TEXT])
    starts = torch.randint(0, data_ids.numel() - T - 1, (steps, B), generator=g)
    data = [(torch.stack([data_ids[s:s + T] for s in row]).to(torch.int32).to(m6.device),
             torch.stack([data_ids[s + 1:s + T + 1] for s in row]).to(m6.device)) for row in starts.tolist()]
    weights = _init_weights(cfg, seed, m6.device)
    # eps 1e-5, not 1e-8: Adam's first steps move every weight by about lr * g / (|g| + eps), so with eps 1e-8 a
    # gradient near zero whose float32 value differs from the float64 one moved a weight by up to lr (1e-2) more
    # or less than the reference did. On the H100 (GPU sizes below) that left the tolerance for 7 seeds of 250,
    # one by 8x (its curve 3e-4 off at step 1); with eps 1e-5 none of about 280 seeds, those 4 included, came
    # within half of it, while a planted AdamW without weight decay stays 77-88x over it (2026-11-27).
    hp = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    losses, _ = tr.train(ops, weights, cfg, data, **hp)
    want = _ref_train(weights, cfg, data, hp)
    print(f"[capstone] seed {seed}; yours {[round(x, 4) for x in losses]}; PyTorch {[round(x, 4) for x in want]}")
    assert len(losses) == steps, (f"train (task 6.7) must return one loss per batch: {steps} batches, "
                                  f"{len(losses)} losses")
    got, ref = torch.tensor(losses, dtype=torch.float64), torch.tensor(want, dtype=torch.float64)
    err = (got - ref).abs()
    worst = int(err.argmax())
    off = (err > CURVE_ATOL + CURVE_RTOL * ref.abs()).nonzero().flatten()
    assert off.numel() == 0, (
        f"capstone (task 6.7): the loss curve leaves PyTorch's at step {int(off[0]) if off.numel() else -1} "
        f"(worst step {worst}: yours {losses[worst]:.5f}, PyTorch {want[worst]:.5f}; tolerance {CURVE_ATOL} + "
        f"{CURVE_RTOL} x loss). If step 0 differs the forward or the loss is wrong; if only later steps, a gradient "
        "or the AdamW update (run the tests of tasks 6.1-6.6 first).")
    assert ref[-1] < ref[0] - 1.0, "the reference did not learn: the test's settings are wrong"
    L = cfg.n_layers
    want_calls = {"cross_entropy": steps, "adamw_flat": steps, "linear_backward": (7 * L + 1) * steps,
                  "attention_backward": L * steps, "rmsnorm_backward": (2 * L + 1) * steps,
                  "swiglu_backward": L * steps, "embedding_backward_sorted": steps}
    got_calls = {k: m6.counts[k] for k in want_calls}
    assert got_calls == want_calls, (
        f"train (task 6.7) must run every step on the kernels: expected lesson 06 calls {want_calls}, got {got_calls}. "
        "One forward through ops.decoder.forward, ops.cross_entropy, loss.backward() and adamw_flat per batch.")


# ----------------------------------------------------------------------------------------------------
# Speed (GPU only; "not graded" on the simulator). Same-run ratios against PyTorch.
# ----------------------------------------------------------------------------------------------------


def _time(fn: Any) -> float:
    from cudacourse.bench import time_kernel

    return time_kernel(fn)


def cc_preload(tasks: set[str]) -> None:
    """Called by the grader's plugin in a process that times, before its turn on the GPU (``pytest_plugin._preload``):
    task 6.12's torch worker starts now (Python, torch, a CUDA context, the learner's file, its kernels), not inside
    the timed test."""
    if "6.12" in tasks:
        _train()


def _target(task_id: str) -> float:
    """A speed task's target, declared once in lessons/06_training/lesson.toml (bench reads the same)."""
    target = course().task("06_training", task_id).target
    assert target is not None, f"task {task_id} declares no speed target in lesson.toml"
    return target


@pytest.mark.task("6.8")
@pytest.mark.gpu
def test_speed_cross_entropy() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    rows, vocab = 8192, 50257
    sets = []
    for _ in range(MIN_SETS):
        logits = torch.randn(rows, vocab, device=m.device)
        labels = torch.randint(0, vocab, (rows,), device=m.device)
        sets.append((logits, labels.to(torch.int32), torch.empty(rows, device=m.device), torch.empty_like(logits),
                     torch.empty(1, device=m.device), labels, logits.clone().requires_grad_(True)))
    _ce(m, sets[0][0][:64].contiguous(), sets[0][5][:64].cpu(), "64 rows (checked before timing)")

    def ok(i: int) -> None:
        logits, _, losses, dl, loss, labels, _ = sets[i]
        per_row = F.cross_entropy(logits, labels.long(), reduction="none")
        check.assert_close(losses, per_row, name="cross_entropy per-row losses", rtol=1e-4, atol=1e-4, task="6.8")
        check.assert_close(loss, per_row.mean().reshape(1), name="cross_entropy mean loss", rtol=1e-4, atol=1e-4,
                           task="6.8")
        want = torch.softmax(logits, dim=1)
        want[torch.arange(rows, device=logits.device), labels.long()] -= 1.0
        check.assert_close(dl, want / rows, name="cross_entropy dlogits", rtol=check.softmax_rtol(logits),
                           atol=1e-6 / rows + 1e-9, task="6.8")

    def torch_fwd_bwd(i: int) -> None:
        x = sets[i][6]
        x.grad = None
        F.cross_entropy(x, sets[i][5]).backward()

    judge(("06_training", "6.8"), f"cross_entropy {rows}x{vocab}",
          Side("yours", lambda i: m.cross_entropy(*sets[i][:5], rows, vocab, -100, 1.0 / rows),
               lambda i: sets[i][2:5], ok),
          Side("PyTorch eager forward+backward", torch_fwd_bwd), sets=MIN_SETS, nbytes=2 * rows * vocab * 4,
          hint="Read the logits twice at most (online max/sum, then the gradient pass) and write the gradient once.")


@pytest.mark.task("6.9")
@pytest.mark.gpu
def test_speed_layernorm_backward() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    rows, cols = 32768, 4096
    (dx, dw, db), (rdx, _, _) = _layernorm_case(33, 100, m)
    check.assert_close(dx, rdx, name="layernorm_backward (checked before timing)", rtol=1e-4, atol=1e-5, task="6.9")
    sets, refs, graphs = [], [], []
    for _ in range(MIN_SETS):
        x, dy = torch.randn(rows, cols, device=m.device), torch.randn(rows, cols, device=m.device)
        w, b = torch.randn(cols, device=m.device), torch.randn(cols, device=m.device)
        mean, rstd = x.mean(1), torch.rsqrt(x.var(1, unbiased=False) + 1e-5)
        sets.append((dy, x, w, mean, rstd, torch.empty_like(x), torch.empty_like(w), torch.empty_like(w),
                     torch.empty(2 * math.ceil(rows / 32) * cols, device=m.device)))
        xr, wr, br = x.clone().requires_grad_(True), w.clone().requires_grad_(True), b.clone().requires_grad_(True)
        y = F.layer_norm(xr, (cols,), wr, br, 1e-5)
        graphs.append((y, (xr, wr, br), dy))
        refs.append([t.detach().clone() for t in torch.autograd.grad(y, (xr, wr, br), dy, retain_graph=True)])

    def ok(i: int) -> None:
        for got, want, what in zip(sets[i][5:8], refs[i], ("dx", "dw", "db"), strict=True):
            # (against torch's fp32 gradients: dw and db are sums over 32768 rows in two orders; task 6.2 grades
            # the values, this checks that every timed call did the work)
            rtol, atol = (1e-4, 1e-4) if what == "dx" else (1e-3, 1e-3 * float(want.abs().max()))
            check.assert_close(got, want, name=f"layernorm_backward {what}", rtol=rtol, atol=atol, task="6.9")

    judge(("06_training", "6.9"), f"layernorm_backward {rows}x{cols}",
          Side("yours", lambda i: m.layernorm_backward(*sets[i], rows, cols), lambda i: sets[i][5:8], ok),
          Side("PyTorch", lambda i: torch.autograd.grad(graphs[i][0], graphs[i][1], graphs[i][2], retain_graph=True)),
          sets=MIN_SETS, nbytes=3 * rows * cols * 4)


@pytest.mark.task("6.10")
@pytest.mark.gpu
def test_speed_adamw() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge, restore_

    m = _m()
    n = 124_439_808
    lr, b1, b2, eps, wd = 1e-4, 0.9, 0.999, 1e-8, 0.1
    sets, starts, refs = [], [], []
    for _ in range(MIN_SETS):
        p0, g = torch.randn(n, device=m.device), torch.randn(n, device=m.device)
        m0, v0 = torch.randn(n, device=m.device) * 0.1, torch.rand(n, device=m.device) * 0.01
        starts.append((p0, m0, v0))
        sets.append((p0.clone(), g, m0.clone(), v0.clone()))
        # one step (step count 2: the bias corrections are not 1) from the start, as torch's AdamW computes it
        m1, v1 = b1 * m0 + (1 - b1) * g, b2 * v0 + (1 - b2) * g * g
        p1 = p0 * (1 - lr * wd) - lr * (m1 / (1 - b1**2)) / ((v1 / (1 - b2**2)).sqrt() + eps)
        refs.append((p1, m1, v1))
    ref_ps = []
    for p0, g, *_ in sets:
        rp = p0.clone().requires_grad_(True)
        rp.grad = g.clone()
        ref_ps.append(torch.optim.AdamW([rp], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, fused=True))

    def reset(i: int) -> None:
        for t, src in zip((sets[i][0], sets[i][2], sets[i][3]), starts[i], strict=True):
            restore_(t, src)

    def ok(i: int) -> None:
        for got, want, what in zip((sets[i][0], sets[i][2], sets[i][3]), refs[i], ("p", "m", "v"), strict=True):
            check.assert_close(got, want, name=f"adamw_flat {what} after one step", rtol=1e-5, atol=1e-6, task="6.10")

    judge(("06_training", "6.10"), f"adamw_flat over {n} parameters",
          Side("yours", lambda i: m.adamw_flat(*sets[i], n, lr, b1, b2, eps, wd, 2), check=ok, reset=reset),
          Side("torch AdamW(fused=True)", lambda i: ref_ps[i].step()), sets=MIN_SETS, nbytes=7 * n * 4,
          hint="One pass: read p, g, m, v once, write p, m, v once.")


# Issue 18: the fused linear + cross-entropy must reach this fraction of PyTorch's peak memory, or less (the
# speed half of task 6.12 is its lesson.toml target)
FLCE_MEMORY_TARGET = 0.3


def _flce_where_train_runs(tr: Any, rows: int, hidden: int, vocab: int, chunk: int) -> tuple[Any, int]:
    """Task 6.12's half that runs where train.py is loaded (its torch worker while grading, run_beside): the lesson's
    kernels loaded there, the benchmark's seeded inputs made there, and ``run(keep=False)``, one call of the
    learner's fused_linear_cross_entropy on them, finished on the GPU before it returns (so the caller's clock
    times it), its (loss, dx, dw) returned when ``keep``. Returns (run, the call's peak memory in bytes)."""
    import torch

    import cudacourse as cc
    from cudacourse.course import course
    from cudacourse.loader import import_file

    m = cc.lesson("06_training")
    bench = import_file(course().lessons_dir / "06_training" / "bench.py", "cc_bench_06_test")
    x, w, labels = bench.fused_linear_ce_inputs(m.device, rows, hidden, vocab)

    def run(keep: bool = False) -> Any:
        out = tr.fused_linear_cross_entropy(m, x, w, labels, chunk=chunk)
        torch.cuda.synchronize()
        return out if keep else None

    return run, bench.peak_memory_bytes(lambda: run(True))


@pytest.mark.task("6.12")
@pytest.mark.gpu
def test_speed_and_memory_fused_linear_cross_entropy() -> None:
    """The learner's fused_linear_cross_entropy against PyTorch's F.linear + F.cross_entropy + backward: the same
    values, at most 0.3x PyTorch's peak memory, at least the target's share of its speed.

    While grading train.py runs in its torch worker, where its kernels are loaded too (no other process inside the
    timed call); the values come here once and are compared here, PyTorch's side runs and is timed here, and the
    learner's side is timed by this process's clock around ``run()`` (one small message each way, ~0.1 ms of a
    ~45 ms call), so neither the comparison nor the clock is the worker's word. The peak memory of the learner's
    call is: it is read from the allocator of the process that runs it."""
    m = _m()
    rows, hidden, vocab, chunk, target = 8192, 768, 50257, 1024, _target("6.12")
    bench = import_file(course().lessons_dir / LESSON / "bench.py", "cc_bench_06_test")
    run, peak = run_beside(_train(), _flce_where_train_runs, rows, hidden, vocab, chunk)
    ref_fn = bench.torch_fused_linear_ce(*bench.fused_linear_ce_inputs(m.device, rows, hidden, vocab))
    got_all, want_all = run(True)[:3], [t.detach() for t in ref_fn()]  # (loss, dx, dw, the learner's 4th value)
    for got, want, what in zip(got_all, (want_all[0].reshape(1), *want_all[1:]), ("loss", "dx", "dw"), strict=True):
        check.assert_close(got, want, name=f"fused_linear_cross_entropy {what} (checked before timing)", task="6.12",
                           rtol=1e-3, atol=1e-3 * float(want.abs().max()), hint=FLCE_HINT)
    del got_all, want_all, got, want
    ref_peak = bench.peak_memory_bytes(ref_fn)
    ms, ref = _time(run), _time(ref_fn)
    from cudacourse.speed import note, refuse_impossible

    # (one set of inputs, made where train.py runs; a cached or skipped call shows as an impossible rate)
    refuse_impossible(f"fused_linear_cross_entropy {rows}x{hidden}x{vocab}", ms, flops=6 * rows * hidden * vocab)
    assert peak <= FLCE_MEMORY_TARGET * ref_peak, (
        f"fused_linear_cross_entropy {rows}x{hidden}x{vocab}, chunk {chunk}: peak {peak / 2**20:.0f} MiB, PyTorch "
        f"{ref_peak / 2**20:.0f} MiB: {peak / ref_peak:.2f}x, target <= {FLCE_MEMORY_TARGET}x. Allocate the two "
        "(chunk, vocab) buffers once, outside the loop, and write into slices of them.")
    if ref / ms >= target:
        note(f"fused_linear_cross_entropy {rows}x{hidden}x{vocab}: {ms:.3f} ms, PyTorch {ref:.3f} ms", ref / ms, target)
    assert ref / ms >= target, (f"fused_linear_cross_entropy {rows}x{hidden}x{vocab}: {ms:.3f} ms, PyTorch {ref:.3f} "
                                f"ms: {ref / ms:.2f}x, target {target}x. Run the matmuls on cuBLAS (torch.matmul with "
                                "out=, addmm_) and launch your cross_entropy kernel once per chunk.")


# ----------------------------------------------------------------------------------------------------
# Triton track (optional): tasks 6.T1 and 6.T2, the twins in training_triton.py, checked by the same helpers
# and tolerances as tasks 6.3 and 6.5. On the CPU Triton's interpreter runs them (tiles of 2048 logits, 8192
# parameters); without the triton package they are "not graded", with the command that installs it.
# ----------------------------------------------------------------------------------------------------

HINT_6T1 = ("cross_entropy_kernel (TODO task 6.T1 in training_triton.py): per lane online (max, sum) over the tiles "
            "with ref = where(m_new == -inf, 0, m_new); lse = max + log(sum(s * exp(m - max))); loss = lse - x[t]; "
            "then dlogits = (exp(x - lse) - (col == t)) * inv_count in a second walk.")
HINT_6T2 = ("adamw_flat_kernel (TODO task 6.T2 in training_triton.py): m += (1 - beta1) (g - m); v = beta2 v + "
            "(1 - beta2) g^2; p *= 1 - lr wd; p -= step_size m / (sqrt(v) inv_bc2_sqrt + eps); store p, m, v.")


def _training_twin() -> ModuleType:
    from cudacourse.triton_track import twin_or_not_graded

    return twin_or_not_graded(LESSON)


def _twin_ce(t: ModuleType, m: cc.Lesson, logits: torch.Tensor, labels: torch.Tensor, what: str,
             ignore_index: int = -100) -> None:
    _ce(m, logits, labels, what, ignore_index, impl=t, task="6.T1", hint=HINT_6T1)


@pytest.mark.task("6.T1")
@pytest.mark.parametrize(("rows", "vocab"), [(1, 1), (7, 33), (33, 1000), (5, 4099)])
def test_triton_cross_entropy(rows: int, vocab: int) -> None:
    """The Triton twin of the fused cross-entropy: ragged vocabularies, ignored rows."""
    t, m = _training_twin(), _m()
    g = check.rng(f"6.T1-{rows}x{vocab}")
    logits = check.randn((rows, vocab), g, m.device, scale=4.0)
    labels = torch.randint(0, vocab, (rows,), generator=g)
    if rows > 3:
        labels[1] = labels[rows - 2] = -100  # ignored rows
    _twin_ce(t, m, logits, labels, f"rows={rows}, vocab={vocab}")


@pytest.mark.task("6.T1")
def test_triton_cross_entropy_gpt2_vocab_large_logits() -> None:
    """Vocabulary 50257 (many tiles), logits of size 1e4 (exp overflows without the max), a custom ignore_index."""
    t, m = _training_twin(), _m()
    rows = 3 if m.backend == "sim" else 64
    g = check.rng("6.T1-50257")
    logits = check.randn((rows, 50257), g, m.device, scale=3.0)
    logits[0] *= 3000.0
    labels = torch.randint(0, 50257, (rows,), generator=g)
    labels[rows - 1] = 7
    _twin_ce(t, m, logits, labels, "vocab 50257, logits up to ~1e4", ignore_index=7)


@pytest.mark.task("6.T1")
def test_triton_cross_entropy_nan_inf_and_all_ignored() -> None:
    """NaN and +inf logits make their row NaN, as PyTorch; -inf is a probability of 0; every row ignored: NaN mean."""
    t, m = _training_twin(), _m()
    g = check.rng("6.T1-special")
    logits = check.randn((6, 40), g, m.device)
    logits[1, 5] = float("nan")
    logits[3, 0] = float("inf")
    logits[4, 9] = float("-inf")
    labels = torch.tensor([0, 1, 2, 3, 9, 39])
    _twin_ce(t, m, logits, labels, "NaN, +inf and -inf logits")
    _twin_ce(t, m, torch.nan_to_num(logits, 0.0, 0.0, 0.0), torch.full((6,), -100), "every row ignored")


@pytest.mark.task("6.T2")
@pytest.mark.parametrize("n", [1, 33, 4099, 70_001])
def test_triton_adamw_flat_matches_torch(n: int) -> None:
    """The Triton twin of adamw_flat: three steps against torch.optim.AdamW, ragged sizes."""
    _adamw_flat_case(_m(), n, impl=_training_twin(), task="6.T2", hint=HINT_6T2)


@pytest.mark.task("6.T2")
def test_triton_adamw_flat_rejects_bad_inputs() -> None:
    """The given wrapper refuses a float64 moment and a step number of 0, before anything is written. Checked
    after a valid call gives the right values (the refusals alone passed on the untouched stub)."""
    t, m = _training_twin(), _m()
    _adamw_flat_case(m, 10, impl=t, task="6.T2", hint=HINT_6T2)
    p = torch.ones(10, device=m.device)
    before = p.clone()
    with pytest.raises(TypeError, match=r"parameter 'v'.*float32"):
        t.adamw_flat(p, p.clone(), torch.zeros_like(p), torch.zeros(10, dtype=torch.float64, device=m.device), 10,
                     1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    with pytest.raises(ValueError, match=r"step = 0"):
        t.adamw_flat(p, p.clone(), torch.zeros_like(p), torch.zeros_like(p), 10, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0)
    assert torch.equal(p, before), "a rejected call must not write p"


def test_triton_worked_mean_loss() -> None:
    """The worked example of training_triton.py (given complete; not graded)."""
    t, m = _training_twin(), _m()
    for rows in (1, 2500):
        losses = check.randn(rows, check.rng(f"6.T-mean-{rows}"), m.device)
        loss = check.poisoned(1, torch.float32, m.device)
        t.mean_loss(losses, loss, rows, 1.0 / rows)
        check.assert_close(loss, losses.cpu().double().mean().reshape(1).float(), name=f"mean_loss (Triton) {rows}",
                           rtol=1e-5, atol=1e-6, task="worked example",
                           hint="mean_loss is given complete in training_triton.py; did an edit change it?")


# Wrong twins, made from the solution by one edit each: every one must fail the checks the tasks use.
TRITON_MUTANTS = {
    "cross_entropy without the max": ("ref = tl.where(m_new == float(\"-inf\"), 0.0, m_new)", "ref = 0.0"),
    "cross_entropy gradient all zeros": ("tl.store(d_row + cols, grad * inv_count,",
                                         "tl.store(d_row + cols, grad * 0.0,"),
    "cross_entropy no one-hot": ("grad = tl.exp(x - lse) - tl.where(cols == t, 1.0, 0.0)", "grad = tl.exp(x - lse)"),
    "cross_entropy unscaled gradient": ("grad * inv_count, mask", "grad, mask"),
    "adamw without bias correction": ("tl.div_rn(step_size * m,", "tl.div_rn(lr * m,"),
    "adamw without weight decay": ("p = p * (1.0 - lr * weight_decay)", "p = p * 1.0"),
    "adamw all zeros": ("tl.store(p_ptr + offs, p, mask=mask)", "tl.store(p_ptr + offs, p * 0.0, mask=mask)"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow / NaN warnings from the wrong code
@pytest.mark.parametrize("mutant", list(TRITON_MUTANTS))
def test_triton_wrong_twins_fail_the_check(mutant: str, tmp_path: Path) -> None:
    from cudacourse.triton_track import load_mutant

    _training_twin()  # not graded (a skip) without triton
    m = _m()
    wrong = load_mutant(LESSON, "training_triton.py", TRITON_MUTANTS[mutant], tmp_path, backend=m.backend)
    with pytest.raises(AssertionError):
        if mutant.startswith("adamw"):
            _adamw_flat_case(m, 4099, impl=wrong, task="6.T2", hint=HINT_6T2)
        else:
            g = check.rng("6.T-mutant")
            logits = check.randn((5, 3000), g, m.device, scale=4.0)
            logits[0] *= 3000.0  # logits of ~1e4: exp overflows without the max
            _twin_ce(wrong, m, logits, torch.randint(0, 3000, (5,), generator=g), mutant)
