"""Lesson 06, Triton track: the fused cross-entropy and the flat AdamW step in Triton, the twins of
training.cu's cross_entropy and adamw.cu's adamw_flat.

cross_entropy in CUDA gives each row a block, pushes each thread's strided share of the logits into a MaxSum
and merges the threads' pairs with shuffles and shared memory (block_maxsum). Here a program owns a row and
walks it in tiles, one running (max, sum) per lane, merged at the end with tl.max and tl.sum: the merging
is the compiler's, the numerics (subtract the max, rescale the sum when the max grows, leave -inf alone) are
yours. adamw_flat is elementwise: a program updates a tile of p, m and v, with the step's scalars computed once
on the host, in double, as adam_scalars does in adamw.cu.

Versions (each wrapper is called like the CUDA launcher of the same name, tensors for pointers):
  mean_loss      worked     loss[0] = inv_count * sum of losses[0 .. rows-1], one program, fixed order
  cross_entropy  task 6.T1  per row: log-sum-exp, loss and d logits (twin of cross_entropy, task 6.3)
  adamw_flat     task 6.T2  one AdamW step over flat p, g, m, v, exactly as torch.optim.AdamW (twin of 6.5)

Where it runs: on a GPU, compiled; @triton.autotune times every config (tile width x warps) on the first
call for each new size class (a power of two) and keeps the fastest (`make bench` prints the one it kept).
On a CPU, Triton's interpreter runs the same code with numpy, with one fixed config (the course sets
TRITON_INTERPRET=1). Needs the triton package: `make setup EXTRAS=triton` (Linux).
Tested with triton 3.6.0 (torch 2.13.0 CPU build for the interpreter).

Run it:
  import cudacourse as cc; t = cc.triton_twin("06_training")
  t.cross_entropy(logits, labels, losses, dlogits, loss, rows, vocab, -100, 1 / rows)
  make check T=6.T1                (or T=6.T2; run it in the course's top folder)
  make bench LESSONS=06_training   (the Triton rows beside the CUDA ones, GPU only)
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from cudacourse.triton_track import check_tensors, configs, size_class

# One program per row: tiles of 1024 to 8192 logits, 4 to 16 warps, at most 32 floats per thread; the
# interpreter takes 2048, so vocabularies of 4099 and 50257 take several tiles there. The key is the size class
# of the vocabulary (a power of two, 1024 at least).
ROWWISE = configs({"BLOCK": 2048}, keep=lambda c: c["BLOCK"] <= 32 * 32 * c["num_warps"],
                  BLOCK=[1024, 2048, 4096, 8192], num_warps=[4, 8, 16])
# Elementwise: tiles of 1024 to 8192 floats, 4 or 8 warps; the interpreter takes 8192 (few programs: it runs
# them one after another). The key is the size class of n (one class up to 2^20).
ELEMENTWISE = configs({"BLOCK": 8192}, BLOCK=[1024, 2048, 4096, 8192], num_warps=[4, 8])


# ----------------------------------------------------------------------------------------------------
# Worked example: mean_loss, one program sums the per-row losses in a fixed order
# ----------------------------------------------------------------------------------------------------


@triton.jit
def mean_loss_kernel(losses_ptr, loss_ptr, rows, inv_count, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, rows, BLOCK):  # lane i adds rows i, i + BLOCK, ...: the same order on every run
        acc += tl.load(losses_ptr + start + offs, mask=start + offs < rows, other=0.0)
    tl.store(loss_ptr, tl.sum(acc, axis=0) * inv_count)  # inv_count NaN (no row counted): NaN, as PyTorch


def mean_loss(losses: torch.Tensor, loss: torch.Tensor, rows: int, inv_count: float) -> None:
    """loss[0] = inv_count * (losses[0] + ... + losses[rows - 1]), deterministic."""
    check_tensors("mean_loss", losses=losses, loss=loss)
    mean_loss_kernel[(1,)](losses, loss, rows, inv_count, BLOCK=1024)


# ----------------------------------------------------------------------------------------------------
# Task 6.T1: cross_entropy, forward and backward in one program per row
# ----------------------------------------------------------------------------------------------------
# For a row x with label t: loss = logsumexp(x) - x[t], and d loss / d x_c = softmax(x)_c - [c == t], both times
# inv_count = 1 / (rows not ignored); an ignored row (t == ignore_index) gets loss 0 and a zero gradient.


@triton.autotune(configs=ROWWISE, key=["vocab_class"])
@triton.jit
def cross_entropy_kernel(logits_ptr, labels_ptr, losses_ptr, dlogits_ptr, vocab, vocab_class, ignore_index,
                         inv_count, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64-bit: rows * vocab may pass 2^31 (8192 x 50257 does not, yet)
    x_row, d_row = logits_ptr + row * vocab, dlogits_ptr + row * vocab  # noqa: F841  (the TODO code below uses them)
    offs = tl.arange(0, BLOCK)
    t = tl.load(labels_ptr + row)
    if t == ignore_index:
        tl.store(losses_ptr + row, 0.0)
        for start in range(0, vocab, BLOCK):
            tl.store(d_row + start + offs, tl.zeros([BLOCK], tl.float32), mask=start + offs < vocab)
    else:
        # TODO(task 6.T1): the row's log-sum-exp, its loss and its gradient (~18 lines):
        #   1. per lane a running max m (from -inf) and sum s of exp(x - m) over the tiles (load with other=-inf):
        #      m_new = max(m, x); s = s * exp(m - ref) + exp(x - ref) with ref = where(m_new == -inf, 0, m_new);
        #   2. merge the lanes: mx = tl.max(m); lse = mx + log(tl.sum(s * exp(m - mx)));
        #   3. store losses[row] = lse - x[t];
        #   4. a second walk over the tiles stores dlogits = (exp(x - lse) - (column == t)) * inv_count.
        # Hint: this is lesson 04's softmax_kernel (norms_triton.py, tiled path) with a log and a one-hot. A NaN or
        # +inf logit makes s NaN, so the row's loss and gradient are NaN, as PyTorch's; -inf adds exp(-inf) = 0.
        # BEGIN SOLUTION
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, vocab, BLOCK):
            x = tl.load(x_row + start + offs, mask=start + offs < vocab, other=float("-inf"))
            m_new = tl.maximum(m, x)
            ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # finite: never -inf - -inf
            s = s * tl.exp(m - ref) + tl.exp(x - ref)
            m = m_new
        mx = tl.max(m, axis=0)
        lse = mx + tl.log(tl.sum(s * tl.exp(m - mx), axis=0))
        tl.store(losses_ptr + row, lse - tl.load(x_row + t))
        for start in range(0, vocab, BLOCK):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < vocab, other=0.0)
            grad = tl.exp(x - lse) - tl.where(cols == t, 1.0, 0.0)
            tl.store(d_row + cols, grad * inv_count, mask=cols < vocab)
        # STUB: pass
        # END SOLUTION


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, losses: torch.Tensor, dlogits: torch.Tensor,
                  loss: torch.Tensor, rows: int, vocab: int, ignore_index: int, inv_count: float) -> None:
    """losses[r] = logsumexp(logits[r]) - logits[r, labels[r]] (0 where ignored), loss[0] = their mean over the rows
    not ignored (inv_count = 1 / that count; NaN when there are none), dlogits = d loss / d logits. Every label is
    ignore_index or in [0, vocab): lesson 06's train.py checks that before the call (a kernel cannot raise)."""
    check_tensors("cross_entropy", logits=logits, labels=(labels, torch.int32), losses=losses, dlogits=dlogits,
                  loss=loss)
    if rows <= 0 or vocab <= 0:
        return
    cross_entropy_kernel[(rows,)](logits, labels, losses, dlogits, vocab, size_class(vocab, 1024), ignore_index,
                                  inv_count)
    mean_loss(losses, loss, rows, inv_count)


# ----------------------------------------------------------------------------------------------------
# Task 6.T2: adamw_flat, one AdamW step over flat buffers
# ----------------------------------------------------------------------------------------------------
# For every element, with the scalars of step t (step_size = lr / (1 - beta1^t), inv_bc2_sqrt = 1 / sqrt(1 -
# beta2^t), computed by the wrapper in double):
#   m = m + (1 - beta1) (g - m);  v = beta2 v + (1 - beta2) g^2;  p = p (1 - lr weight_decay)
#   p = p - step_size * m / (sqrt(v) * inv_bc2_sqrt + eps)


# restore_value: the autotuner runs the kernel once per config to time it, and this kernel updates its
# buffers in place; without it the first call for a size class would apply many AdamW steps, not one.
@triton.autotune(configs=ELEMENTWISE, key=["n_class"], restore_value=["p_ptr", "m_ptr", "v_ptr"])
@triton.jit
def adamw_flat_kernel(p_ptr, g_ptr, m_ptr, v_ptr, n, n_class, lr, beta1, beta2, eps, weight_decay, step_size,
                      inv_bc2_sqrt, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # noqa: F841  (the TODO code below uses it)
    # TODO(task 6.T2): load this tile of p, g, m and v (masked), apply the four lines above in that order, store
    # p, m and v (~12 lines).
    # Hint: the same formulas as adamw_element in adamw.cu, on tiles. tl.sqrt_rn and tl.div_rn round as CUDA's
    # sqrtf and / do; Triton's plain tl.sqrt and / are faster approximations (tests pass either way).
    # BEGIN SOLUTION
    p = tl.load(p_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask)
    m = tl.load(m_ptr + offs, mask=mask)
    v = tl.load(v_ptr + offs, mask=mask)
    m = m + (1.0 - beta1) * (g - m)
    v = beta2 * v + (1.0 - beta2) * g * g
    p = p * (1.0 - lr * weight_decay)
    p = p - tl.div_rn(step_size * m, tl.sqrt_rn(v) * inv_bc2_sqrt + eps)
    tl.store(p_ptr + offs, p, mask=mask)
    tl.store(m_ptr + offs, m, mask=mask)
    tl.store(v_ptr + offs, v, mask=mask)
    # STUB: pass
    # END SOLUTION


def adamw_flat(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, n: int, lr: float, beta1: float,
               beta2: float, eps: float, weight_decay: float, step: int) -> None:
    """Updates p, m, v (n floats each) in place as one step of torch.optim.AdamW(lr, betas=(beta1, beta2), eps,
    weight_decay); step >= 1 is the step number after this update (torch's state "step"). g is not modified."""
    check_tensors("adamw_flat", p=p, g=g, m=m, v=v)
    if n <= 0:
        return
    if step < 1:
        raise ValueError(f"adamw_flat: step = {step}: the step number after this update starts at 1")
    step_size = lr / (1.0 - beta1**step)  # in double, as adam_scalars in adamw.cu
    inv_bc2_sqrt = 1.0 / math.sqrt(1.0 - beta2**step)
    adamw_flat_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](p, g, m, v, n, size_class(n), lr, beta1, beta2,
                                                                      eps, weight_decay, step_size, inv_bc2_sqrt)
