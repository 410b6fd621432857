"""Tile shapes of lesson 09's decoupled look-back scan on a GPU: threads per block x items per thread, the tile
moved through shared memory (a warp transpose, the default) or loaded and stored directly, the blocks per SM that
__launch_bounds__ asks the compiler to fit (so the registers it may use: 65536 / (threads x blocks) per thread), and
the streaming cache hint on the tile's loads and stores (__ldcs / __stcs).

scan.cu reads SCAN_THREADS, SCAN_ITEMS, SCAN_TRANSPOSE, SCAN_MIN_BLOCKS and SCAN_STREAMING under #ifndef, so each
shape is the solution file compiled with #defines in front. Each row: the median time of scan_lookback_i32 on 2^28
int32 (CUDA events, L2 flushed, cudacourse.bench.time_stats), GB/s counting 8 bytes per element, and the ratio to
torch.cumsum timed the same way in the same run. Run by benchmarks/gpu_scan.sh as ``python3 benchmarks/scan_sweep.py``.
"""

from __future__ import annotations

from pathlib import Path

import torch

import cudacourse as cc
from cudacourse.bench import copy_bandwidth_gbs, time_stats

# (threads, items, transpose, min blocks per SM, streaming); the first is scan.cu's default
SHAPES = [(256, 16, 1, 8, 0), (256, 16, 1, 4, 0), (256, 16, 1, 6, 0), (256, 16, 1, 8, 1), (256, 16, 1, 4, 1),
          (256, 24, 1, 4, 0), (256, 32, 1, 2, 0), (256, 32, 1, 3, 0), (512, 16, 1, 2, 0), (128, 32, 1, 8, 0)]


def main() -> None:
    """Print one row per tile shape."""
    src = (Path(__file__).resolve().parent.parent / "solutions" / "09_scan_sort" / "scan.cu").read_text()
    n = 2**28
    x = torch.randint(-4, 5, (n,), device="cuda", dtype=torch.int32)
    y = torch.empty_like(x)
    work = torch.empty(n // 1024 + 2, dtype=torch.int64, device="cuda")
    want = torch.cumsum(x, 0, dtype=torch.int32)
    copy = copy_bandwidth_gbs()
    ref_ms, ref_spread = time_stats(lambda: torch.cumsum(x, 0, dtype=torch.int32))
    print(f"# {torch.cuda.get_device_name(0)}: copy {copy:.0f} GB/s; torch.cumsum int32 2^28: {ref_ms:.3f} ms "
          f"({8 * n / ref_ms / 1e6:.0f} GB/s, spread {ref_spread:.2f})")
    print("threads  items  tile  transpose  blocks/SM  streaming    ms     GB/s  % copy  vs torch.cumsum")
    for threads, items, transpose, blocks, streaming in SHAPES:
        head = (f"#define SCAN_THREADS {threads}\n#define SCAN_ITEMS {items}\n#define SCAN_TRANSPOSE {transpose}\n"
                f"#define SCAN_MIN_BLOCKS {blocks}\n#define SCAN_STREAMING {streaming}\n")
        m = cc.load(head + src, ["scan_lookback_i32"], backend="cuda")
        y.zero_()
        m.scan_lookback_i32(x, y, n, work)
        ok = bool(torch.equal(y, want))
        ms, _ = time_stats(lambda m=m: m.scan_lookback_i32(x, y, n, work))
        gbs = 8 * n / ms / 1e6
        print(f"{threads:7d} {items:6d} {threads * items:5d} {transpose:10d} {blocks:10d} {streaming:10d} {ms:7.3f} "
              f"{gbs:7.0f} "
              f"{100 * gbs / copy:6.0f}% {ref_ms / ms:7.2f}x{'' if ok else '  WRONG RESULT'}", flush=True)


if __name__ == "__main__":
    main()
