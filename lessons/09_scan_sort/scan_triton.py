"""Lesson 09, Triton track: the device-wide scan with decoupled look-back, the twin of scan.cu's scan_lookback.

In CUDA the tile's scan is the hard part (warp shuffles, the warps' totals through shared memory, a transpose for
coalesced loads) and the look-back is one warp's loop. In Triton the tile's scan is one call, tl.cumsum(x, 0),
and what stays yours is the protocol between programs: which tile a program owns (a ticket), how it publishes its
total (one 64-bit status word per tile: the flag in the high 32 bits, the value's bits in the low 32), and how it
reads its predecessors' words until it has its exclusive prefix. README: "The scan and the sampler in Triton".

Versions (each wrapper is called like the CUDA launcher of the same name, tensors for pointers):
  scan_segments_block_{i32,f32}  worked     1024-element segments, each scanned on its own: tl.cumsum per program
                                            (the twin of scan_segments_block, task 9.1)
  look_back                      task 9.T1  the exclusive prefix of a tile from its predecessors' status words
  scan_lookback_{i32,f32}        uses 9.T1  y = inclusive scan of x[0..n), one pass (the twin of task 9.3)
  look_back_probe                given      runs look_back on status words a test wrote (the CPU interpreter
                                            runs programs one after another, so a scan there only ever meets
                                            predecessors that are done; the probe gives it every other case)

Memory order. A status word is written with tl.atomic_xchg(..., sem="release") and read with
tl.atomic_add(..., 0, sem="acquire"): flag and value travel in one word, so no reader can see the new flag with
the old value, and release/acquire is not needed for the word itself; it is there because it is what a
flag-and-data protocol needs (the chained scan's), and it costs nothing measurable here. Triton has no
__threadfence(): its atomics take the memory order (sem) and scope (scope="gpu", the default) instead, as
cuda::atomic_ref does.

Where it runs: on a GPU, compiled; @triton.autotune times the tile sizes on the first call for each size class
(a power of two) and keeps the fastest. On a CPU, Triton's interpreter runs the same code with numpy, one program
after another in order of program id (so a ticket equals the program id there, and every spin ends at once).
Needs the triton package: `make setup EXTRAS=triton` (Linux). Tested with triton 3.6.0.

Run it:
  import cudacourse as cc; t = cc.triton_twin("09_scan_sort", "scan_triton.py"); t.scan_lookback_i32(x, y, n, work)
  make check T=9.T1                 (the task's graded checks; run it in the course's top folder)
  make bench LESSONS=09_scan_sort   (the Triton rows beside the CUDA ones, GPU only)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cudacourse.triton_track import check_tensors, configs, size_class

SEGMENT = 1024  # the worked example's segment (scan_segments_block's)
WINDOW = tl.constexpr(32)  # predecessors read at once by look_back (the CUDA version's warp)
# Tiles of 1024 to 8192 elements: the workspace (ceil(n / 1024) + 2 words, as the CUDA launcher's) holds the
# ticket and one status word per tile for any of them. The interpreter takes 1024: several tiles in every test.
TILES = configs({"BLOCK": 1024}, BLOCK=[2048, 4096, 8192, 1024], num_warps=[4, 8])

FLAG_A = tl.constexpr(1)  # the value is the tile's own total (its aggregate)
FLAG_P = tl.constexpr(2)  # the value is the inclusive prefix: every element up to the end of this tile


# ----------------------------------------------------------------------------------------------------
# Worked example: 1024-element segments, each scanned by one program
# ----------------------------------------------------------------------------------------------------


@triton.jit
def segment_scan_kernel(x_ptr, y_ptr, n, SEG: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * SEG + tl.arange(0, SEG)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)  # 0 past the end: the identity of +
    tl.store(y_ptr + offs, tl.cumsum(x, axis=0), mask=mask)  # the whole tile's inclusive scan in one call


def _segments(fn: str, x: torch.Tensor, y: torch.Tensor, n: int, dtype: torch.dtype) -> None:
    check_tensors(fn, x=(x, dtype), y=(y, dtype))
    if n <= 0:
        return
    segment_scan_kernel[(triton.cdiv(n, SEGMENT),)](x, y, n, SEG=SEGMENT)


def scan_segments_block_i32(x: torch.Tensor, y: torch.Tensor, n: int) -> None:
    """y = inclusive scan of each 1024-element segment of x[0..n) (int32)."""
    _segments("scan_segments_block_i32", x, y, n, torch.int32)


def scan_segments_block_f32(x: torch.Tensor, y: torch.Tensor, n: int) -> None:
    """y = inclusive scan of each 1024-element segment of x[0..n) (float32)."""
    _segments("scan_segments_block_f32", x, y, n, torch.float32)


# ----------------------------------------------------------------------------------------------------
# Status words: (flag << 32) | the value's 32 bits, stored as int64
# ----------------------------------------------------------------------------------------------------


@triton.jit
def status_word(flag: tl.constexpr, value):
    bits = value.to(tl.uint32, bitcast=True).to(tl.int64)  # the value's bits, zero-extended
    return bits | (flag << 32)


@triton.jit
def word_flag(word):
    return (word >> 32).to(tl.int32)


@triton.jit
def word_value(word, DTYPE: tl.constexpr):
    return (word & 0xFFFFFFFF).to(tl.uint32).to(DTYPE, bitcast=True)


# ----------------------------------------------------------------------------------------------------
# Task 9.T1: the look-back
# ----------------------------------------------------------------------------------------------------


@triton.jit
def look_back(status_ptr, tile, DTYPE: tl.constexpr, W: tl.constexpr):
    # Returns the sum of the values of tiles 0 .. tile-1 (0 for tile 0), reading status_ptr[0 .. tile-1]: W words
    # at a time, the window of tiles end, end-1, ..., end-W+1 (end starts at tile - 1; a tile before 0 reads as
    # P with 0). Until every word of the window is published (flag A or P) it reads the window again. Then it adds
    # the values from `end` down to the nearest P (that one included) and stops, or, with no P in the window, adds
    # all W and moves the window W tiles back.
    # TODO(task 9.T1): the loop above (~14 lines). Worked example of one read of a window and its pieces:
    #     lanes = tl.arange(0, W)
    #     j = end - lanes                                      # lane l reads tile end - l
    #     words = tl.atomic_add(status_ptr + j, tl.zeros([W], tl.int64), mask=j >= 0, sem="acquire")
    #     words = tl.where(j >= 0, words, status_word(FLAG_P, tl.zeros([W], DTYPE)))
    #     flags = word_flag(words)                             # 0 (X: not yet), 1 (A) or 2 (P)
    #     vals = word_value(words, DTYPE)
    #     nearest_p = tl.min(tl.where(flags == FLAG_P, lanes, W))   # W when the window holds no P
    # Hint: Triton has no break: write `while end >= 0:` and set end = -1 to stop. A spin is just another turn of
    # that loop with end unchanged (when tl.min(flags) == 0). Keep the loop's variables one type: start with
    # exclusive = tl.zeros([], DTYPE) and end = tile - 1 (an int32 scalar).
    return tl.zeros([], DTYPE)


# ----------------------------------------------------------------------------------------------------
# The single-pass scan (uses task 9.T1)
# ----------------------------------------------------------------------------------------------------


@triton.autotune(configs=TILES, key=["n_class"], reset_to_zero=["work_ptr"])
@triton.jit
def scan_lookback_kernel(x_ptr, y_ptr, n, work_ptr, n_class, BLOCK: tl.constexpr):
    # The tile is a ticket, not the program id: a program only waits for tiles whose programs took their
    # tickets earlier, so are running (README, "Which block owns which tile").
    tile = tl.atomic_add(work_ptr, 1, sem="relaxed").to(tl.int32)
    status_ptr = work_ptr + 1
    offs = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    inclusive = tl.cumsum(x, axis=0)           # the tile's own scan
    aggregate = tl.sum(x, axis=0)              # its total
    if tile > 0:                               # publish (A, aggregate) before looking back: others need it
        tl.atomic_xchg(status_ptr + tile, status_word(FLAG_A, aggregate), sem="release")
    exclusive = look_back(status_ptr, tile, x.dtype, WINDOW)
    tl.atomic_xchg(status_ptr + tile, status_word(FLAG_P, exclusive + aggregate), sem="release")
    tl.store(y_ptr + offs, inclusive + exclusive, mask=mask)


def _lookback(fn: str, x: torch.Tensor, y: torch.Tensor, n: int, work: torch.Tensor, dtype: torch.dtype) -> None:
    check_tensors(fn, x=(x, dtype), y=(y, dtype), work=(work, torch.int64))
    if n <= 0:
        return
    if n >= 2**31:
        raise ValueError(f"{fn}: n = {n} does not fit the int32 tile tickets")
    need = triton.cdiv(n, 1024) + 1
    if work.numel() < need:
        raise ValueError(f"{fn}: work holds {work.numel()} int64 words, the scan of {n} elements needs at least "
                         f"{need} (ceil(n / 1024) + 1: a ticket counter and one status word per tile)")
    work[:need].zero_()  # the ticket counter and every tile's status: X
    scan_lookback_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, work, size_class(n))


def scan_lookback_i32(x: torch.Tensor, y: torch.Tensor, n: int, work: torch.Tensor) -> None:
    """y = inclusive scan of x[0..n) (int32, wrapping like torch.cumsum(dtype=int32)); work: at least
    ceil(n / 1024) + 1 int64 words (ceil(n / 1024) + 2 as for the CUDA launcher is fine), set up here."""
    _lookback("scan_lookback_i32", x, y, n, work, torch.int32)


def scan_lookback_f32(x: torch.Tensor, y: torch.Tensor, n: int, work: torch.Tensor) -> None:
    """y = inclusive scan of x[0..n) (float32); work as for scan_lookback_i32."""
    _lookback("scan_lookback_f32", x, y, n, work, torch.float32)


# ----------------------------------------------------------------------------------------------------
# Given: look_back on status words written by a test (every flag A or P)
# ----------------------------------------------------------------------------------------------------


@triton.jit
def look_back_probe_kernel(status_ptr, out_ptr):
    tile = tl.program_id(0)
    tl.store(out_ptr + tile, look_back(status_ptr, tile, tl.int32, WINDOW))


def look_back_probe(status: torch.Tensor, out: torch.Tensor, tiles: int) -> None:
    """out[t] = look_back(status, t) for t < tiles, on int32 values: status holds `tiles` published words
    ((flag << 32) | value bits, flag 1 or 2), which look_back only reads."""
    check_tensors("look_back_probe", status=(status, torch.int64), out=(out, torch.int32))
    if tiles <= 0:
        return
    if status.numel() < tiles or out.numel() < tiles:
        raise ValueError(f"look_back_probe: status ({status.numel()}) and out ({out.numel()}) need {tiles} elements")
    look_back_probe_kernel[(tiles,)](status, out)
