"""Lesson 04, Triton track: softmax and layernorm in Triton, the twins of norms.cu's kernels.

Both read a row, reduce it to one or two numbers, and write the row again. norms.cu spends most of its
lines on the reductions (warp_sum, block_sum, block_maxsum: shuffles, shared memory, barriers); here one
program owns a row and tl.max / tl.sum reduce a tile, the compiler writing the rest. What stays yours is
the numerics: subtract the max before exp, merge running (max, sum) pairs, shift before summing squares.

Each kernel has two paths, picked per row length at run time:
  the row fits in one tile (cols <= BLOCK): it is loaded once, kept in registers, reduced, written;
  a longer row is walked in tiles twice: once for the statistics (online, one pass), once to write.
The autotuner tries tile widths from 1024 to 16384 floats, so rows up to 16384 can take the first path
(as softmax_v3_row_in_registers does in CUDA); the interpreter's one config (1024) exercises both.

Versions (each wrapper is called like the CUDA launcher of the same name, tensors for pointers):
  rmsnorm     worked     y = x / sqrt(mean(x^2) + eps) * w, the row in tiles (two passes)
  softmax     task 4.T1  y[r, :] = softmax(x[r, :]), stable for |x| ~ 1e4 and -inf entries (twin of 4.1)
  layernorm   task 4.T2  y = (x - mean) / sqrt(var + eps) * w + b, precise for rows far from 0 (twin of 4.2)

Where it runs: on a GPU, compiled; @triton.autotune times every config of a kernel (tile width x warps)
on the first call for each new class of row length (a power of two) and keeps the fastest (`make bench`
prints the one it kept). On a CPU, Triton's interpreter runs the same code with numpy, with one fixed
config (the course sets TRITON_INTERPRET=1). Needs the triton package: `make setup EXTRAS=triton` (Linux).
Tested with triton 3.6.0 (torch 2.11 on an H100; torch 2.13.0 CPU build for the interpreter).

Run it:
  import cudacourse as cc; t = cc.triton_twin("04_transformer"); t.softmax(x, y, rows, cols)
  make check T=4.T1                   (one task's graded checks; run it in the course's top folder)
  make bench LESSONS=04_transformer   (the Triton rows beside the CUDA ones, GPU only)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cudacourse.triton_track import check_tensors, configs, size_class

# One program per row. Tile widths 1024 to 16384 floats, 4 to 16 warps; the interpreter takes 1024. The
# autotuner's key is cols_class = size_class(cols, 1024): the power of two at or above the row length (1024 for
# shorter rows), so rows of 4099 and 5000 share a tuning instead of timing every config each.
ROWWISE = configs({"BLOCK": 1024}, BLOCK=[1024, 2048, 4096, 8192, 16384], num_warps=[4, 8, 16])


def prune_tiles(configs: list, named_args: dict, **kwargs: object) -> list:
    """Configs worth timing for this row length: no tile wider than the row needs (beyond 1024), and at most 32
    floats per thread (a heuristic: a larger share per thread risks spilling registers). Always at least one."""
    need = named_args["cols_class"]  # max(1024, the power of two at or above cols): the same for the whole class
    keep = [c for c in configs if c.kwargs["BLOCK"] <= need and c.kwargs["BLOCK"] <= 32 * 32 * c.num_warps]
    return keep or configs[:1]


PRUNE = {"early_config_prune": prune_tiles}


# ----------------------------------------------------------------------------------------------------
# Worked example: rmsnorm, two passes over the row in tiles
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=ROWWISE, key=["cols_class"], prune_configs_by=PRUNE)
@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, cols, cols_class, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64-bit: rows * cols may pass 2^31
    x_row, y_row = x_ptr + row * cols, y_ptr + row * cols
    offs = tl.arange(0, BLOCK)
    ss = tl.zeros([BLOCK], tl.float32)  # per-lane sums of squares
    for start in range(0, cols, BLOCK):
        x = tl.load(x_row + start + offs, mask=start + offs < cols, other=0.0)
        ss += x * x
    r = tl.rsqrt(tl.sum(ss, axis=0) / cols + eps)
    for start in range(0, cols, BLOCK):  # second pass: the row again (from L2 on a GPU when it is recent)
        mask = start + offs < cols
        x = tl.load(x_row + start + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + offs, mask=mask, other=0.0)
        tl.store(y_row + start + offs, x * r * w, mask=mask)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, rows: int, cols: int, eps: float) -> None:
    """y[r, c] = x[r, c] / sqrt(mean over c of x[r, :]^2 + eps) * w[c]; x, y: rows * cols floats, w: cols floats."""
    check_tensors("rmsnorm", x=x, w=w, y=y)
    if rows == 0 or cols == 0:
        return
    rmsnorm_kernel[(rows,)](x, w, y, cols, size_class(cols, 1024), eps)


# ----------------------------------------------------------------------------------------------------
# Task 4.T1: softmax
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=ROWWISE, key=["cols_class"], prune_configs_by=PRUNE)
@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, cols_class, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = x_ptr + row * cols, y_ptr + row * cols  # noqa: F841  (the TODO code below uses them)
    offs = tl.arange(0, BLOCK)  # noqa: F841  (the TODO code below uses it)
    if cols <= BLOCK:
        # TODO(task 4.T1, part 1 of 2): the row fits in one tile: load it (-inf past the end, so those lanes add
        # exp(-inf) = 0), subtract its max, exp, divide by the sum, store (~5 lines).
        # Hint: tl.max(x, axis=0) and tl.sum(e, axis=0) reduce the tile; the max keeps every exp in [0, 1].
        # BEGIN SOLUTION
        mask = offs < cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_row + offs, e / tl.sum(e, axis=0), mask=mask)
        # STUB: pass
        # END SOLUTION
    else:
        # TODO(task 4.T1, part 2 of 2): a longer row, in tiles (~16 lines):
        #   1. per lane a running max m (from -inf) and sum s of exp(x - m): for each tile, m_new = max(m, x),
        #      s = s * exp(m - m_new) + exp(x - m_new), m = m_new (the online softmax, as maxsum_push in norms.cu);
        #   2. merge the lanes: mx = tl.max(m), total = tl.sum(s * exp(m - mx));
        #   3. a second walk over the tiles stores exp(x - mx) / total.
        # Hint: a lane that has seen only -inf has m_new = -inf, and -inf - -inf is NaN: subtract
        # ref = tl.where(m_new == -inf, 0.0, m_new) instead of m_new (exp(-inf - 0) = 0 leaves s at 0).
        # BEGIN SOLUTION
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, cols, BLOCK):
            x = tl.load(x_row + start + offs, mask=start + offs < cols, other=float("-inf"))
            m_new = tl.maximum(m, x)
            ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # finite: never -inf - -inf
            s = s * tl.exp(m - ref) + tl.exp(x - ref)
            m = m_new
        mx = tl.max(m, axis=0)
        inv = 1.0 / tl.sum(s * tl.exp(m - mx), axis=0)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            x = tl.load(x_row + start + offs, mask=mask, other=float("-inf"))
            tl.store(y_row + start + offs, tl.exp(x - mx) * inv, mask=mask)
        # STUB: pass
        # END SOLUTION


def softmax(x: torch.Tensor, y: torch.Tensor, rows: int, cols: int) -> None:
    """y[r, :] = softmax(x[r, :]) over a row-major (rows, cols) matrix, any cols >= 1. x is not modified."""
    check_tensors("softmax", x=x, y=y)
    if rows == 0 or cols == 0:
        return
    softmax_kernel[(rows,)](x, y, cols, size_class(cols, 1024))


# ----------------------------------------------------------------------------------------------------
# Task 4.T2: layernorm
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=ROWWISE, key=["cols_class"], prune_configs_by=PRUNE)
@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, cols, cols_class, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = x_ptr + row * cols, y_ptr + row * cols  # noqa: F841  (the TODO code below uses them)
    offs = tl.arange(0, BLOCK)  # noqa: F841  (the TODO code below uses it)
    if cols <= BLOCK:
        # TODO(task 4.T2, part 1 of 2): the row fits in one tile: xs = x - the row's first value (0 past the
        # end), mean = sum(xs) / cols, d = xs - mean (0 past the end), var = sum(d * d) / cols, store
        # d * rsqrt(var + eps) * w + b (~9 lines).
        # Hint: with the row in registers the two-pass variance costs no extra read. The shift keeps the mean
        # exact for rows of mean 1000: a plain sum of a few values near 1000 rounds by ~1e-4 on the H100, which
        # the tests catch; tl.where(mask, ..., 0.0) keeps the lanes past the end out of both sums.
        # BEGIN SOLUTION
        mask = offs < cols
        x = tl.load(x_row + offs, mask=mask, other=0.0)
        xs = tl.where(mask, x - tl.load(x_row), 0.0)
        mean = tl.sum(xs, axis=0) / cols
        d = tl.where(mask, xs - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(d * d, axis=0) / cols + eps)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        tl.store(y_row + offs, d * rstd * w + b, mask=mask)
        # STUB: pass
        # END SOLUTION
    else:
        # TODO(task 4.T2, part 2 of 2): a longer row, in tiles (~16 lines): K = the row's first value; per lane,
        # sums of d = x - K and d * d (0 past the end); dm = sum(s1) / cols, var = max(sum(s2) / cols - dm^2, 0),
        # rstd = rsqrt(var + eps); a second walk stores ((x - K) - dm) * rstd * w + b.
        # Hint: the shift K is what keeps rows of mean 1000 precise (norms.cu, task 4.2, says why): plain sums of
        # x and x * x cancel catastrophically.
        # BEGIN SOLUTION
        K = tl.load(x_row)
        s1 = tl.zeros([BLOCK], tl.float32)
        s2 = tl.zeros([BLOCK], tl.float32)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            d = tl.where(mask, tl.load(x_row + start + offs, mask=mask, other=0.0) - K, 0.0)
            s1 += d
            s2 += d * d
        dm = tl.sum(s1, axis=0) / cols
        rstd = tl.rsqrt(tl.maximum(tl.sum(s2, axis=0) / cols - dm * dm, 0.0) + eps)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            x = tl.load(x_row + start + offs, mask=mask, other=0.0)
            w = tl.load(w_ptr + start + offs, mask=mask, other=0.0)
            b = tl.load(b_ptr + start + offs, mask=mask, other=0.0)
            tl.store(y_row + start + offs, ((x - K) - dm) * rstd * w + b, mask=mask)
        # STUB: pass
        # END SOLUTION


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor, rows: int, cols: int,
              eps: float) -> None:
    """y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * w + b (biased var over the row); w, b: cols floats."""
    check_tensors("layernorm", x=x, w=w, b=b, y=y)
    if rows == 0 or cols == 0:
        return
    layernorm_kernel[(rows,)](x, w, b, y, cols, size_class(cols, 1024), eps)
