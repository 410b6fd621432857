"""Tile shapes and look-back variants of lesson 09's decoupled look-back scan on a GPU.

A row is scan.cu compiled with #defines in front (it reads SCAN_THREADS, SCAN_ITEMS, SCAN_TRANSPOSE,
SCAN_MIN_BLOCKS and SCAN_STREAMING under #ifndef): threads per block x items per thread, the tile moved through
shared memory (a warp transpose, the default) or loaded and stored directly, the blocks per SM that __launch_bounds__
asks the compiler to fit (so the registers it may use: 65536 / (threads x blocks) per thread), and the streaming cache
hint on the tile's loads and stores (__ldcs / __stcs). Two more columns:

- backoff: nanoseconds a look-back warp sleeps (__nanosleep) before it reads a window again that still holds an
  unpublished predecessor (0: it reads again at once, as scan.cu does). A benchmark-only edit of the spin line.
- kernel: ``lookback`` is scan_lookback_i32 (checked against torch.cumsum); ``no look-back`` launches the same tile
  work with no dependence between tiles (scan_tiles_from_offsets_kernel, phase 3 of the three-phase scan, with zero
  offsets): the ceiling of this tile shape, what the look-back costs is the gap to it. ``stash`` is
  benchmarks/scan_lookback_variants.cu's scan_stash_i32 (its header says what it changes); it ignores the blocks/SM
  column and runs the last field's blocks per SM (``source(..., stash_blocks=)``; default, printed "auto": as many as
  fit in shared memory).

Each row: the median time on 2^28 int32 (CUDA events, L2 flushed, cudacourse.bench.time_stats), GB/s counting 8 bytes
per element, the fraction of the copy bandwidth measured in the same run, and the ratio to torch.cumsum timed the same
way. Run by benchmarks/gpu_scan.sh as ``python3 benchmarks/scan_sweep.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import cudacourse as cc
from cudacourse.bench import copy_bandwidth_gbs, time_stats

SPIN = "if (__any_sync(FULL_MASK, flag == 0u)) continue;  // a predecessor has not published yet"
# A launcher of the tile work alone, appended to the source for the "no look-back" rows.
NO_LOOKBACK = """
void tiles_alone_i32(const int* x, int* y, int n, unsigned long long* work) {
    scan_tiles_from_offsets_kernel<int><<<ceil_div(n, TILE), THREADS>>>(x, y, n, reinterpret_cast<const int*>(work));
}
"""

# (threads, items, transpose, min blocks per SM, streaming, backoff ns, kernel[, stash blocks per SM]); the first is
# scan.cu's default.
# Measured on the H200 (results/nvidia-h200/09_scan_sort/scan_sweep_2026-11-29c.txt and -d.txt,
# closing_checks_2026-11-29c/scan_sweep.txt): the look-back rows 67-73% of copy, the tile work alone 97%, backoff no
# help, larger tiles 68-73%; a candidate that issued the next tile's loads before its look-back (commit a765769) 8-46%.
# A wider look-back window (2, 4, 8 reads per step) and a look-back warp: 54-41% and 68-59% of copy at 256 x 16
# (scan_sweep_2026-11-29e.txt); the tile from blockIdx.x instead of a ticket: no change (-f.txt); those variants are
# at commit 4ea48ba. The stash: 85% at 256 x 16 with the six blocks per SM that fit; fewer blocks, smaller tiles and
# the streaming hint are slower (-f.txt, -g.txt). This list: the last run's.
SHAPES = [(256, 16, 1, 8, 0, 0, "lookback"), (256, 16, 1, 8, 0, 0, "no look-back"),
          (256, 16, 1, 8, 0, 0, "stash"), (256, 16, 1, 8, 1, 0, "stash"),
          (256, 16, 1, 8, 0, 0, "stash", 5), (256, 16, 1, 8, 0, 0, "stash", 4),
          (256, 8, 1, 8, 0, 0, "stash"), (128, 16, 1, 8, 0, 0, "stash"),
          (128, 8, 1, 8, 0, 0, "stash"), (512, 8, 1, 4, 0, 0, "stash"),
          (64, 32, 1, 8, 0, 0, "stash"), (256, 12, 1, 8, 0, 0, "stash")]
KERNELS = {"lookback": "scan_lookback_i32", "stash": "scan_stash_i32"}
VARIANTS = Path(__file__).resolve().parent / "scan_lookback_variants.cu"


def source(threads: int, items: int, transpose: int, blocks: int, streaming: int, backoff: int,
           stash_blocks: int = 0) -> str:
    """scan.cu with this row's #defines in front, the spin line edited for a backoff, the tile-work launcher and
    scan_lookback_variants.cu after. stash_blocks: STASH_BLOCKS_PER_SM (0: the file's default)."""
    src = (Path(__file__).resolve().parent.parent / "solutions" / "09_scan_sort" / "scan.cu").read_text()
    if backoff:
        assert SPIN in src, "scan.cu's look-back spin line changed: update SPIN in benchmarks/scan_sweep.py"
        src = src.replace(SPIN, f"if (__any_sync(FULL_MASK, flag == 0u)) {{ __nanosleep({backoff}); continue; }}")
    head = (f"#define SCAN_THREADS {threads}\n#define SCAN_ITEMS {items}\n#define SCAN_TRANSPOSE {transpose}\n"
            f"#define SCAN_MIN_BLOCKS {blocks}\n#define SCAN_STREAMING {streaming}\n")
    if stash_blocks:
        head += f"#define STASH_BLOCKS_PER_SM {stash_blocks}\n"
    return head + src + NO_LOOKBACK + VARIANTS.read_text()


def main() -> None:
    """Print one row per variant."""
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("scan_sweep.py times kernels on a GPU; this machine has none (torch.cuda.is_available() "
                         "is False). Run it on the GPU machine: bash benchmarks/gpu_scan.sh")
    n = 2**28
    x = torch.randint(-4, 5, (n,), device="cuda", dtype=torch.int32)
    y = torch.empty_like(x)
    work = torch.zeros(n // 1024 + 2, dtype=torch.int64, device="cuda")
    zeros = torch.zeros(n // 1024 + 2, dtype=torch.int64, device="cuda")
    want = torch.cumsum(x, 0, dtype=torch.int32)
    copy = copy_bandwidth_gbs()
    ref_ms, ref_spread = time_stats(lambda: torch.cumsum(x, 0, dtype=torch.int32))
    print(f"# {torch.cuda.get_device_name(0)}: copy {copy:.0f} GB/s; torch.cumsum int32 2^28: {ref_ms:.3f} ms "
          f"({8 * n / ref_ms / 1e6:.0f} GB/s, spread {ref_spread:.2f})")
    print("threads  items  tile  transpose  blocks/SM  streaming  backoff  kernel            ms  "
          "   GB/s  % copy  vs torch.cumsum")
    for threads, items, transpose, blocks, streaming, backoff, kernel, *stash in SHAPES:
        m = cc.load(source(threads, items, transpose, blocks, streaming, backoff, *stash),
                    [*KERNELS.values(), "tiles_alone_i32"], backend="cuda")
        if kernel in KERNELS:
            fn = getattr(m, KERNELS[kernel])
            y.zero_()
            fn(x, y, n, work)
            note = "" if torch.equal(y, want) else "  WRONG RESULT"
            ms, _ = time_stats(lambda fn=fn: fn(x, y, n, work))
        else:
            note = "  (tile work alone: not a scan)"
            ms, _ = time_stats(lambda m=m: m.tiles_alone_i32(x, y, n, zeros))
        gbs = 8 * n / ms / 1e6
        shown = (str(stash[0]) if stash else "auto") if kernel == "stash" else str(blocks)  # (stash: its own count)
        print(f"{threads:7d} {items:6d} {threads * items:5d} {transpose:10d} {shown:>10s} {streaming:10d} "
              f"{backoff:8d}  {kernel:12s} {ms:7.3f} {gbs:7.0f} {100 * gbs / copy:6.0f}% "
              f"{ref_ms / ms:7.2f}x{note}",
              flush=True)


if __name__ == "__main__":
    main()
