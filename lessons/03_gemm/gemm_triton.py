"""Lesson 03, Triton track: the tiled SGEMM in Triton, the twin of gemm.cu's sgemm versions.

gemm.cu climbs from one thread per output (v1) to 128x128 block tiles staged in shared memory, 8x8 register
tiles per thread, float4 loads and double buffering (v5-v8). In Triton one program owns a BLOCK_M x BLOCK_N
tile of C and writes the K loop over BLOCK_K-wide slices of A and B; tl.dot multiplies two tiles. Staging
the slices in shared memory, splitting the tile over threads (the register blocking), the vector width of
the loads and the prefetch of the next slices (num_stages) are the compiler's. README: "The same GEMM in
Triton".

Versions (each wrapper is called like the CUDA launcher of the same name, tensors for pointers):
  sgemv    worked     y = A x: one program per BLOCK_M rows, the K loop over tiles (twin of sgemv_example)
  sgemm    task 3.T1  C = A B for any M, N, K >= 1, fp32 (twin of sgemm_v3_shared .. sgemm_v8_warptile)

FP32 throughout: tl.dot(..., input_precision="ieee") multiplies in float32 with FMA instructions. Triton's
default for float32 tiles on an H100 is TF32 on the tensor cores (10-bit mantissas: errors ~1e-3, far outside
the lesson's tolerance), which is what torch.backends.cuda.matmul.allow_tf32 = True would give cuBLAS.

Where it runs: on a GPU, compiled; @triton.autotune times every config (tile shape x warps x pipeline
stages) on the first call for each new size class (M, N and K each rounded up to a power of two, 1024 at
least) and keeps the fastest (`make bench` prints the one it kept). On a CPU, Triton's interpreter runs the
same code with numpy, with one fixed config (the course sets TRITON_INTERPRET=1). Needs the triton package:
`make setup EXTRAS=triton` (Linux). Tested with triton 3.6.0 (torch 2.13.0 CPU build for the interpreter).

Run it:
  import cudacourse as cc; t = cc.triton_twin("03_gemm"); t.sgemm(A, B, C, M, N, K)
  make check T=3.T1             (one task's graded checks; run it in the course's top folder)
  make bench LESSONS=03_gemm    (the Triton rows beside the CUDA ones, GPU only)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cudacourse.triton_track import check_tensors, configs, size_class


def _fits_registers(c: dict) -> bool:
    """Tiles of at most 64 accumulators per thread (128 x 128 over 8 warps, as sgemm_v5_2d's 8 x 8): more spill
    registers in float32."""
    return c["BLOCK_M"] * c["BLOCK_N"] <= 64 * 32 * c["num_warps"]


# Tiles of 64 or 128 rows and columns, slices of 32 along K, 4 or 8 warps, 3 slices in flight (num_stages:
# shared memory for 3 x (BLOCK_M + BLOCK_N) x 32 floats, up to 96 KB). The interpreter takes 32 x 32 x 32,
# so the tests' small ragged shapes still span several programs and K slices there. The autotuner's key is the
# size class of M, N and K (cudacourse.triton_track.size_class, 1024 at least): the tests' ragged shapes
# share two tunings; 4092 and 4096 share one.
GEMM_CONFIGS = configs({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4}, keep=_fits_registers,
                       BLOCK_M=[64, 128], BLOCK_N=[64, 128], BLOCK_K=[32], num_warps=[4, 8], num_stages=[3])


# ----------------------------------------------------------------------------------------------------
# Worked example: sgemv, y = A x
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=configs({"BLOCK_M": 16, "BLOCK_K": 32}, BLOCK_M=[16, 64], BLOCK_K=[128, 256],
                                 num_warps=[4]), key=["M_class", "K_class"])
@triton.jit
def sgemv_kernel(a_ptr, x_ptr, y_ptr, M, K, M_class, K_class, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's rows of A and y
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + cols
        # a 2-D tile: rows[:, None] and ks[None, :] broadcast to BLOCK_M x BLOCK_K addresses (row-major A)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        x = tl.load(x_ptr + ks, mask=ks < K, other=0.0)
        acc += tl.sum(a * x[None, :], axis=1)  # one partial dot product per row
    tl.store(y_ptr + rows, acc, mask=rows < M)


def sgemv_example(A: torch.Tensor, x: torch.Tensor, y: torch.Tensor, M: int, K: int) -> None:
    """y[i] = sum over k of A[i, k] * x[k] for i < M (A row-major M x K)."""
    check_tensors("sgemv_example", A=A, x=x, y=y)
    if M <= 0:
        return
    sgemv_kernel[lambda meta: (triton.cdiv(M, meta["BLOCK_M"]),)](A, x, y, M, K, size_class(M, 1024),
                                                                  size_class(K, 1024))


# ----------------------------------------------------------------------------------------------------
# Task 3.T1: sgemm, one program per BLOCK_M x BLOCK_N tile of C
# ----------------------------------------------------------------------------------------------------


# VEC (given): the wrapper passes N and K divided by VEC (4 when both are multiples of 4, else 1), and the kernel
# multiplies them back. Triton specializes an integer argument only when it is a multiple of 16 (4092 is not), so
# without this it cannot tell that every row of A, B and C starts 16 bytes after a 16-byte boundary, and loads
# 4 bytes at a time; N = N4 * 4 states it (benchmarks/triton_codegen.py shows the 16-byte copies either way).
@triton.autotune(configs=GEMM_CONFIGS, key=["M_class", "N_class", "K_class"])
@triton.jit
def sgemm_kernel(a_ptr, b_ptr, c_ptr, M, N4, K4, M_class, N_class, K_class, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, VEC: tl.constexpr):
    N, K = N4 * VEC, K4 * VEC  # the sizes, known to be multiples of VEC
    # Program order (given): programs run roughly in id order, so consecutive ids take GROUP_M tiles down a
    # column of C before moving right; those tiles share their slices of B, and GROUP_M rows of A tiles are
    # reused across the group, while they are still in L2 (the Triton tutorial's "grouped ordering").
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % (GROUP_M * tiles_n)) % rows_in_group
    tile_n = (pid % (GROUP_M * tiles_n)) // rows_in_group
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)  # this tile's rows of A and C
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)  # this tile's columns of B and C
    ks = tl.arange(0, BLOCK_K)
    # TODO(task 3.T1): the K loop and the store (~9 lines):
    #   1. acc = a BLOCK_M x BLOCK_N float32 tile of zeros;
    #   2. for each k0 in range(0, K, BLOCK_K): load the BLOCK_M x BLOCK_K tile of A at rows, k0 + ks and the
    #      BLOCK_K x BLOCK_N tile of B at k0 + ks, cols (masked, 0 outside A and B: the ragged edges), and
    #      acc += tl.dot(a, b, input_precision="ieee");
    #   3. store acc into C at rows, cols, masked to rows < M and cols < N.
    # Hint: sgemv_kernel above builds 2-D addresses as ptr + r[:, None] * stride + c[None, :]; the masks
    # combine the same way with &. Zeros outside A and B add nothing to the sum, so the ragged last slice of K
    # needs no special case. Without input_precision="ieee" an H100 rounds the inputs to TF32 (tests fail).
    pass


def sgemm(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, M: int, N: int, K: int) -> None:
    """C = A B for row-major A (M x K), B (K x N), C (M x N), float32 products and sums. A, B not modified."""
    check_tensors("sgemm", A=A, B=B, C=C)
    if M <= 0 or N <= 0:
        return
    if max(M * K, K * N, M * N) >= 2**31:
        raise ValueError(f"sgemm: M={M}, N={N}, K={K}: a matrix of 2^31 or more floats does not fit the kernel's "
                         "int32 indices")
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    vec = 4 if N % 4 == 0 and K % 4 == 0 else 1  # see sgemm_kernel: rows 16-byte aligned when both are
    sgemm_kernel[grid](A, B, C, M, N // vec, K // vec, size_class(M, 1024), size_class(N, 1024), size_class(K, 1024),
                       GROUP_M=8, VEC=vec)
