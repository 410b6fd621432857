"""Lesson 09's Triton twins on a GPU beside the CUDA versions and PyTorch: the look-back scan (scan_triton.py, task
9.T1) on 2^28 int32 and the fused sampler (sampling_triton.py, task 9.T2) on [128, 50257] logits (T 0.8, top-k 50,
top-p 0.9). Each twin is autotuned on its first call (timed apart, with the config it kept), then all are timed with
cudacourse.bench.time_stats (median of CUDA-event samples, L2 flushed), and each twin's result is compared with the
CUDA version's: the scan exactly, the sampler's ids exactly (the same Philox stream and definition).
Run by benchmarks/gpu_scan.sh as ``python3 benchmarks/scan_twins_time.py``.
"""

from __future__ import annotations

import time

import torch

import cudacourse as cc
from cudacourse import triton_track
from cudacourse.bench import copy_bandwidth_gbs, time_stats


def _primed(fn, kernel) -> str:  # noqa: ANN001
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return f"first call {time.perf_counter() - t0:.1f} s, kept {triton_track.chosen(kernel)}"


def main() -> None:
    """Print one line per row."""
    m = cc.lesson("09_scan_sort", impl="solution", backend="cuda")
    scan = triton_track.twin("09_scan_sort", "scan_triton.py", impl="solution", backend="cuda")
    samp = triton_track.twin("09_scan_sort", "sampling_triton.py", impl="solution", backend="cuda")
    copy = copy_bandwidth_gbs()
    print(f"# {torch.cuda.get_device_name(0)}: copy {copy:.0f} GB/s")
    n = 2**28
    x = torch.randint(-4, 5, (n,), device="cuda", dtype=torch.int32)
    y, yt = torch.empty_like(x), torch.empty_like(x)
    work = torch.empty(n // 1024 + 2, dtype=torch.int64, device="cuda")
    print("triton scan:", _primed(lambda: scan.scan_lookback_i32(x, yt, n, work), scan.scan_lookback_kernel))
    m.scan_lookback_i32(x, y, n, work)
    same = bool(torch.equal(y, yt)) and bool(torch.equal(y, torch.cumsum(x, 0, dtype=torch.int32)))
    rows = [("torch.cumsum (CUB)", lambda: torch.cumsum(x, 0, dtype=torch.int32)),
            ("scan_lookback_i32 (CUDA, 9.3)", lambda: m.scan_lookback_i32(x, y, n, work)),
            ("scan_lookback_i32 (Triton twin, 9.T1)", lambda: scan.scan_lookback_i32(x, yt, n, work))]
    ref = None
    for name, fn in rows:
        ms, spread = time_stats(fn)
        ref = ref or ms
        print(f"scan 2^28 int32 | {name:40s} | {ms:7.3f} ms | {8 * n / ms / 1e6:6.0f} GB/s | "
              f"{800 * n / ms / 1e6 / copy:4.0f}% of copy | {ref / ms:5.2f}x torch | spread {spread:.2f}")
    print(f"scan results equal (CUDA, Triton, torch.cumsum): {same}")

    b, v, t, k, p = 128, 50_257, 0.8, 50, 0.9
    logits = torch.randn(b, v, device="cuda") * 2
    ids, idt = (torch.empty(b, dtype=torch.int32, device="cuda") for _ in range(2))
    print("triton sampler:", _primed(lambda: samp.sample_top_k_top_p(logits, idt, b, v, t, k, p, 77, 3),
                                     samp.sample_kernel))
    m.sample_top_k_top_p(logits, ids, b, v, t, k, p, 77, 3)
    same_ids = int((ids == idt).sum())

    def chain() -> torch.Tensor:
        probs = torch.softmax(logits / t, dim=-1)
        vals, idx = torch.topk(probs, k, dim=-1)
        c = torch.cumsum(vals, dim=-1)
        vals = vals.masked_fill(c - vals > p * c[:, -1:], 0.0)
        return idx.gather(-1, torch.multinomial(vals, 1))

    rows = [("softmax + topk + multinomial", chain),
            ("sample_top_k_top_p (CUDA, 9.6)", lambda: m.sample_top_k_top_p(logits, ids, b, v, t, k, p, 77, 3)),
            ("sample_top_k_top_p (Triton twin, 9.T2)",
             lambda: samp.sample_top_k_top_p(logits, idt, b, v, t, k, p, 77, 3))]
    ref = None
    for name, fn in rows:
        ms, spread = time_stats(fn)
        ref = ref or ms
        print(f"sample [{b}, {v}] | {name:40s} | {ms:7.3f} ms | {ref / ms:5.2f}x torch | spread {spread:.2f}")
    print(f"sampler ids equal to the CUDA sampler's (same seed and offset): {same_ids} of {b}")


if __name__ == "__main__":
    main()
