"""Which CUDA kernels PyTorch runs for the calls lesson 09 is measured against (GPU only).

Runs each call twice (the first warms up), profiles the second with ``torch.profiler`` and prints the names of the
CUDA kernels it launched, shortened to their first 150 characters. The lesson's README cites the committed output
(results/nvidia-h200/09_scan_sort/routes.txt) for which path each call takes:
``benchmarks/gpu_scan.sh`` runs this as ``python3 benchmarks/scan_sort_routes.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def kernels(fn: Callable[[], object]) -> list[str]:
    """The distinct CUDA kernel names ``fn`` launches, in order of first launch."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names: list[str] = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.name not in names and "Memset" not in e.name:
            names.append(e.name)
    return names


def main() -> None:
    """Print the kernels of each reference call."""
    dev = "cuda"
    n = 2**28
    xi = torch.randint(-4, 5, (n,), device=dev, dtype=torch.int32)
    xf = torch.randn(n, device=dev)
    ns = 2**26
    keys = torch.randn(ns, device=dev)
    small = torch.randn(4096, device=dev)
    hi = torch.randint(0, 256, (ns,), device=dev, dtype=torch.int32)
    hf = hi.float()
    logits = torch.randn(128, 50_257, device=dev) * 2
    probs = torch.softmax(logits / 0.8, dim=-1)
    topv = torch.topk(probs, 50, dim=-1).values
    calls: dict[str, Callable[[], object]] = {
        "torch.cumsum(int32 [2^28], dtype=int32)": lambda: torch.cumsum(xi, 0, dtype=torch.int32),
        "torch.cumsum(float32 [2^28])": lambda: torch.cumsum(xf, 0),
        "torch.sort(float32 [2^26], stable=True)": lambda: torch.sort(keys, stable=True),
        "torch.sort(float32 [2^26])": lambda: torch.sort(keys),
        "torch.sort(float32 [4096], stable=True)": lambda: torch.sort(small, stable=True),
        "torch.histc(float32 [2^26], 256, 0, 256)": lambda: torch.histc(hf, 256, 0, 256),
        "torch.bincount(int32 [2^26], minlength=256)": lambda: torch.bincount(hi, minlength=256),
        "torch.softmax(float32 [128, 50257], -1)": lambda: torch.softmax(logits, dim=-1),
        "torch.topk(float32 [128, 50257], 50)": lambda: torch.topk(probs, 50, dim=-1),
        "torch.cumsum(float32 [128, 50], -1)": lambda: torch.cumsum(topv, dim=-1),
        "torch.multinomial(float32 [128, 50], 1)": lambda: torch.multinomial(topv, 1),
    }
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    for what, fn in calls.items():
        print(f"\n{what}:")
        for name in kernels(fn):
            print(f"  {name[:150]}")


if __name__ == "__main__":
    main()
