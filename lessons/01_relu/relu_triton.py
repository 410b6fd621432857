"""Lesson 01, Triton track: ReLU and the fused bias + GELU in Triton, the twins of relu.cu's kernels.

In CUDA you write what ONE thread does. In Triton you write what one PROGRAM does: a program (one instance
of a @triton.jit function, one per entry of the launch grid) loads a whole tile of BLOCK values as one tensor,
computes on the tensor, and stores it. How the tile is spread over threads and warps, and how wide each
load is (relu.cu's float4 by hand), is the compiler's decision. README: "The same kernels in Triton".

Versions (each wrapper is called like the CUDA launcher of the same name, tensors for pointers):
  scale       worked     y = a * x: the shape of every elementwise kernel in this file
  relu        task 1.T1  y = max(x, 0) for any n: the twin of relu_v1_scalar / relu_v3_float4
  bias_gelu   task 1.T2  y = gelu_tanh(x + b[col]) over a row-major (rows, cols) matrix: the twin of bias_gelu

Where it runs: on a GPU, compiled; @triton.autotune times every config of a kernel (block size x warps)
on the first call for each new size class (a power of two) and keeps the fastest (`make bench` prints
the one it kept). On a CPU, Triton's interpreter runs the same code with numpy, with one fixed config
(the course sets TRITON_INTERPRET=1). Needs the triton package: `make setup EXTRAS=triton` (Linux).
Tested with triton 3.6.0 (torch 2.11 on an H100; torch 2.13.0 CPU build for the interpreter).

Run it:
  import cudacourse as cc; t = cc.triton_twin("01_relu"); t.relu(x, y, n)
  make check T=1.T1             (one task's graded checks; run it in the course's top folder)
  make bench LESSONS=01_relu    (the Triton rows beside the CUDA ones, GPU only)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cudacourse.triton_track import check_tensors, configs, size_class

# Elementwise kernels: a tile of 1024 to 8192 floats per program, 4 or 8 warps. On the GPU the autotuner
# picks; the interpreter takes 1024 (it runs programs one after another, so a few large tiles are quicker
# there than many small ones, and 1024 still gives the tests several programs and a ragged last tile).
# The autotuner's key is n_class = size_class(n), a power of two (one class for every n up to 2^20, where all
# configs take a few microseconds): keyed on n itself, every new size would time all 8 configs again.
ELEMENTWISE = configs({"BLOCK": 1024}, BLOCK=[1024, 2048, 4096, 8192], num_warps=[4, 8])


# ----------------------------------------------------------------------------------------------------
# Worked example: scale (y = a * x)
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=ELEMENTWISE, key=["n_class"])
@triton.jit
def scale_kernel(x_ptr, y_ptr, a, n, n_class, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # this program's tile of indices
    mask = offs < n  # the last tile may stick out past the end: masked lanes neither load nor store
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, a * x, mask=mask)


def scale(x: torch.Tensor, y: torch.Tensor, a: float, n: int) -> None:
    """y[i] = a * x[i] for i < n (x, y: contiguous float32)."""
    check_tensors("scale", x=x, y=y)
    if n == 0:
        return  # a grid of 0 programs is an invalid launch
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, a, n, size_class(n))


# ----------------------------------------------------------------------------------------------------
# Task 1.T1: relu
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=ELEMENTWISE, key=["n_class"])
@triton.jit
def relu_kernel(x_ptr, y_ptr, n, n_class, BLOCK: tl.constexpr):
    # TODO(task 1.T1): load this program's tile of x (masked), store max(x, 0) into y (~4 lines).
    # Hint: scale_kernel above is the whole pattern; tl.maximum(x, 0.0) is the elementwise max. No float4
    # and no tail: the mask covers the ragged end, and the compiler picks the vector width.
    pass


def relu(x: torch.Tensor, y: torch.Tensor, n: int) -> None:
    """y[i] = max(x[i], 0) for i < n. x is not modified."""
    check_tensors("relu", x=x, y=y)
    if n == 0:
        return
    relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, size_class(n))


# ----------------------------------------------------------------------------------------------------
# Task 1.T2: bias_gelu, y = gelu_tanh(x + b[col]) in one pass
# ----------------------------------------------------------------------------------------------------

# GELU, tanh approximation: gelu(v) = 0.5 * v * (1 + tanh(sqrt(2 / pi) * (v + 0.044715 * v^3))), the formula
# of torch.nn.functional.gelu(v, approximate="tanh").


@triton.jit
def gelu_tanh(v):
    # TODO(task 1.T2, part 1 of 2): return the formula above (~5 lines).
    # Hint: 0.5 * (1 + tanh(u)) is exactly sigmoid(2u) = 1 / (1 + exp(-2u)). Take the exp of -2|u| only
    # (e = exp(-2|u|) is never above 1, so it never overflows): sigmoid(2u) is 1 / (1 + e) for u >= 0 and
    # e / (1 + e) for u < 0; tl.where(cond, a, b) picks per element, tl.abs and tl.exp are elementwise.
    return v  # placeholder so the stub runs: wrong on purpose


@triton.autotune(configs=ELEMENTWISE, key=["n_class"])
@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, rows, cols, n_class, BLOCK: tl.constexpr):
    # TODO(task 1.T2, part 2 of 2): like relu_kernel over the rows * cols elements of the flattened matrix,
    # but store gelu_tanh(x + b[column]) (~5 lines).
    # Hint: an element's column is its index modulo cols; load b with the same mask (b is tiny and is read
    # from cache). One read of x, one write of y: that is the point of fusing.
    pass


def bias_gelu(x: torch.Tensor, b: torch.Tensor, y: torch.Tensor, rows: int, cols: int) -> None:
    """y[r, c] = gelu_tanh(x[r, c] + b[c]) over a row-major (rows, cols) matrix; b holds cols floats."""
    check_tensors("bias_gelu", x=x, b=b, y=y)
    if rows * cols <= 0:
        return
    if rows * cols >= 2**31:
        raise ValueError(f"bias_gelu: rows * cols = {rows * cols} does not fit the kernel's int32 indices")
    bias_gelu_kernel[lambda meta: (triton.cdiv(rows * cols, meta["BLOCK"]),)](x, b, y, rows, cols,
                                                                                 size_class(rows * cols))
