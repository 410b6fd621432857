"""Benchmark cases of lesson 09 (scan, histogram, sort, sampling) for ``make bench`` (GPU only).

Groups (each compared with its PyTorch row and with the copy bandwidth measured in the same run):
  scan 2^28 int32 / fp32      torch.cumsum (CUB's single-pass scan, README "What PyTorch runs"); the three-phase,
                              chained and decoupled look-back scans (task 9.7: look-back, int32).
  histogram 2^26, 256 bins    torch.histc on the same values as float32 (PyTorch's own kernel); torch.bincount
  (uniform / Zipf / one value)  (the same kernel after two host synchronisations); v1 global atomics, v2 shared
                              privatization (task 9.8, uniform), v3 warp aggregation. Zipf: P(b) ~ 1 / (b + 1)^1.1.
  sort 2^26 fp32              torch.sort(stable=True) (CUB radix sort, int64 indices); argsort_f32 (task 9.9).
  sample [B, 50257]           softmax + topk + cumsum/mask + multinomial (tests/test_09_scan_sort.py's torch_sampler);
                              the fused sampler (task 9.10 at B = 128), T = 0.8, top-k 50, top-p 0.9.
The Triton twins (scan_triton.py: scan_lookback 9.T1 in both scan groups; sampling_triton.py: the sampler 9.T2 in
both sample groups) are compiled and autotuned on a first call before their timing; the row's note gives that time
and the config the autotuner kept (cudacourse/triton_track.py, ``bench_case``).
``bytes`` counts each input read once and each output written once (the sort: keys in, keys and int32 indices
out; the sampler: the logits).
"""

from __future__ import annotations

from typing import Any

import torch

from cudacourse import triton_track
from cudacourse.bench import Case


def _zipf(n: int, bins: int, dev: Any, s: float = 1.1) -> torch.Tensor:
    p = 1.0 / torch.arange(1, bins + 1, dtype=torch.float64, device=dev) ** s
    cdf = torch.cumsum(p / p.sum(), 0)
    return torch.searchsorted(cdf, torch.rand(n, dtype=torch.float64, device=dev)).clamp_(max=bins - 1).int()


def torch_sampler(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """PyTorch's chain: softmax over the vocabulary, top-k, the nucleus cut on the sorted top-k, multinomial."""
    probs = torch.softmax(logits / temperature, dim=-1)
    v, i = torch.topk(probs, top_k, dim=-1)
    c = torch.cumsum(v, dim=-1)
    v = v.masked_fill(c - v > top_p * c[:, -1:], 0.0)
    return i.gather(-1, torch.multinomial(v, 1))


def cases(m: Any, quick: bool = False) -> list[Case]:
    """Benchmark cases for lesson 09 on module ``m`` (``m.device`` is cuda). ``quick``: smaller sizes."""
    dev = m.device
    out: list[Case] = []

    # scans
    log_n = 24 if quick else 28
    n = 2**log_n
    work = torch.empty(n // 1024 + 2, dtype=torch.int64, device=dev)
    scan_twin = triton_track.bench_twin(m, "scan_triton.py")
    for dtype, suffix in ((torch.int32, "i32"), (torch.float32, "f32")):
        x = (torch.randint(-4, 5, (n,), device=dev, dtype=torch.int32) if dtype == torch.int32
             else torch.randn(n, device=dev))
        y = torch.empty_like(x)
        g = f"scan 2^{log_n} {'int32' if suffix == 'i32' else 'fp32'}"
        out.append(Case(g, "torch.cumsum (CUB)", lambda x=x: torch.cumsum(x, 0, dtype=x.dtype), bytes=8 * n,
                        reference=True))
        for version in ("three_phase", "chained", "lookback"):
            fn = getattr(m, f"scan_{version}_{suffix}")
            task = "9.7" if (version, suffix) == ("lookback", "i32") else None
            out.append(Case(g, f"scan_{version}_{suffix}", lambda fn=fn, x=x, y=y: fn(x, y, n, work), bytes=8 * n,
                            task=task))
        out.append(triton_track.bench_case(scan_twin, g, f"scan_lookback_{suffix} (Triton twin, 9.T1)",
                                           lambda t, x=x, y=y, s=suffix: getattr(t, f"scan_lookback_{s}")(x, y, n,
                                                                                                         work),
                                           ["scan_lookback_kernel"], bytes=8 * n))

    # histograms
    log_h = 22 if quick else 26
    nh, bins = 2**log_h, 256
    hist = torch.empty(bins, dtype=torch.int32, device=dev)
    inputs = {"uniform": torch.randint(0, bins, (nh,), device=dev, dtype=torch.int32),
              "Zipf 1.1": _zipf(nh, bins, dev),
              "one value": torch.full((nh,), 7, device=dev, dtype=torch.int32)}
    for what, x in inputs.items():
        xf = x.float()
        g = f"histogram 2^{log_h} {what}, {bins} bins"
        out.append(Case(g, "torch.histc (float32 copy)", lambda xf=xf: torch.histc(xf, bins, 0, bins), bytes=4 * nh,
                        reference=True))
        out.append(Case(g, "torch.bincount", lambda x=x: torch.bincount(x, minlength=bins), bytes=4 * nh))
        for version in ("v1_global", "v2_shared", "v3_warp_aggregated"):
            fn = getattr(m, f"histogram_{version}")
            task = "9.8" if (version, what) == ("v2_shared", "uniform") else None
            out.append(Case(g, f"histogram_{version}", lambda fn=fn, x=x: fn(x, hist, nh, bins), bytes=4 * nh,
                            task=task))

    # sort
    log_s = 22 if quick else 26
    ns = 2**log_s
    keys = torch.randn(ns, device=dev)
    sorted_, idx = torch.empty_like(keys), torch.empty(ns, dtype=torch.int32, device=dev)
    swork = torch.empty(2 * ns + ns // 8 + 1024, dtype=torch.int32, device=dev)
    g = f"sort 2^{log_s} fp32 keys"
    out.append(Case(g, "torch.sort(stable=True)", lambda: torch.sort(keys, stable=True), bytes=12 * ns,
                    reference=True))
    out.append(Case(g, "argsort_f32 (4 passes of 8 bits)", lambda: m.argsort_f32(keys, sorted_, idx, ns, swork),
                    bytes=12 * ns, task="9.9"))

    # sampling
    vocab, t, k, p = 50_257, 0.8, 50, 0.9
    sample_twin = triton_track.bench_twin(m, "sampling_triton.py")
    for b in ((8, 128) if not quick else (8,)):
        logits = torch.randn(b, vocab, device=dev) * 2
        ids = torch.empty(b, dtype=torch.int32, device=dev)
        g = f"sample [{b}, {vocab}] T={t} top-k {k} top-p {p}"
        out.append(Case(g, "softmax + topk + multinomial", lambda lg=logits: torch_sampler(lg, t, k, p),
                        bytes=4 * b * vocab, reference=True))
        out.append(Case(g, "sample_top_k_top_p (fused)",
                        lambda lg=logits, ids=ids, b=b: m.sample_top_k_top_p(lg, ids, b, vocab, t, k, p, 1, 0),
                        bytes=4 * b * vocab, task="9.10" if b == 128 else None))
        out.append(triton_track.bench_case(
            sample_twin, g, "sample_top_k_top_p (Triton twin, 9.T2)",
            lambda tw, lg=logits, ids=ids, b=b: tw.sample_top_k_top_p(lg, ids, b, vocab, t, k, p, 1, 0),
            ["sample_kernel"], bytes=4 * b * vocab))
    return out
