"""The benchmark-only scan of benchmarks/scan_lookback_variants.cu, appended to lesson 09's scan.cu by
benchmarks/scan_sweep.py, gives torch.cumsum's answer on the simulator (and so does scan.cu's look-back, compiled
with it): a change to scan.cu's helpers that breaks it shows here, not in a GPU session. Small tiles (64 x 8), so
that a few thousand elements make many tiles and the look-backs cross windows; sizes that are not multiples of the
tile; int32, where a scan is exact."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import cudacourse as cc

# the benchmark script as a module, as the other tests of benchmarks/ load theirs (no change to sys.path)
_spec = importlib.util.spec_from_file_location("scan_sweep", Path(__file__).resolve().parents[1] / "benchmarks" /
                                               "scan_sweep.py")
scan_sweep = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(scan_sweep)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def variants():  # type: ignore[no-untyped-def]
    src = scan_sweep.source(64, 8, 1, 2, 0, 0)  # threads, items, transpose, blocks per SM, streaming, backoff
    return cc.load(src, list(scan_sweep.KERNELS.values()), backend="sim")


@pytest.mark.parametrize("kernel", sorted(scan_sweep.KERNELS.values()))
def test_each_variant_scans_like_torch_cumsum(variants, kernel: str) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(7)
    for n in (1, 513, 70_001):
        x = torch.randint(-50, 51, (n,), dtype=torch.int32, generator=gen)
        y = torch.full_like(x, -7)  # poison: an element left unwritten shows
        work = torch.zeros(n // 512 + 4, dtype=torch.int64)
        getattr(variants, kernel)(x, y, n, work)
        want = torch.cumsum(x, 0, dtype=torch.int32)
        wrong = (y != want).nonzero()
        assert wrong.numel() == 0, f"{kernel}, n = {n}: {wrong.numel()} elements differ, the first at {wrong[0].item()}"
