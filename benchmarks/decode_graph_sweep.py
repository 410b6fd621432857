"""Lesson 07's decode step on a GPU: where eager launches lose to a CUDA graph, and where they do not.

    PYTHONPATH=$PWD python benchmarks/decode_graph_sweep.py [OUT.txt]     (GPU; SIMTEST=1: checks on the simulator)

Builds solutions/07_host_side/host_side.cu as it is ("warp per row": the lesson's matvec) and in two variants
made by text substitution: "thread per row" (the matvec the lesson had before: one thread per output row,
looping over the d inputs, so a warp's loads are d floats apart) and "x4 layers" (decode_step launches its
three kernels 4 times, as a 4-layer model would: 12 nodes per graph). For each, it first checks the step
against float64 PyTorch, then times d = 64 ... 4096 with the launchers' own host-clock figures (decode_eager's
info[0]; decode_graph's info[1] capture + instantiate and info[2] replays): median of 11 calls after 2
warm-ups, `steps` steps per call. Prints a table (also written to OUT.txt when given).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
from pathlib import Path

import torch

import cudacourse as cc

ROOT = Path(__file__).resolve().parent.parent
SIM = os.environ.get("SIMTEST") == "1"
DEV = "cpu" if SIM else "cuda"

THREAD_PER_ROW = r"""__global__ void matvec_kernel(const float* __restrict__ W, const float* __restrict__ x,
                              float* __restrict__ t, int d) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= d) return;
    float acc = 0.0f;
    for (int c = 0; c < d; ++c) acc += W[(long long)r * d + c] * x[c];
    t[r] = acc;
}
"""


def variants(src: str) -> dict[str, str]:
    """name -> source text: the lesson's file and its two variants (each substitution must match once)."""
    def sub(text: str, old: str, new: str) -> str:
        assert text.count(old) == 1, f"substitution did not match once: {old[:60]!r}"
        return text.replace(old, new)

    start = src.index("__global__ void matvec_kernel")
    end = src.index("__global__ void residual_tanh_kernel")
    naive = src[:start] + THREAD_PER_ROW + "\n" + src[end:]
    naive = sub(naive, "matvec_kernel<<<ceil_div(d, kRowsPerBlock), kBlock, 0, s>>>",
                "matvec_kernel<<<ceil_div(d, kBlock), kBlock, 0, s>>>")
    body = ("    matvec_kernel<<<ceil_div(d, kRowsPerBlock), kBlock, 0, s>>>(W, x, t, d);\n"
            "    residual_tanh_kernel<<<ceil_div(d, kBlock), kBlock, 0, s>>>(x, t, d);\n"
            "    rmsnorm_kernel<<<1, kBlock, 0, s>>>(x, d);\n")
    layers = sub(src, body, "    for (int layer = 0; layer < 4; ++layer) {\n" + body + "    }\n")
    return {"warp per row": src, "thread per row": naive, "warp per row, x4 layers": layers}


def reference(x: torch.Tensor, w: torch.Tensor, d: int, steps: int) -> torch.Tensor:
    """float64 PyTorch: steps x (x += tanh(W x); x = rmsnorm(x))."""
    v, wd = x.double().cpu(), w.double().cpu().view(d, d)
    for _ in range(steps):
        v = v + torch.tanh(wd @ v)
        v = v / torch.sqrt((v * v).mean() + 1e-6)
    return v.float()


def check(m: cc.Module, name: str, d: int, layers: int) -> None:
    """Eager and graph after 3 steps agree with float64 PyTorch (layers: kernel triples per step)."""
    g = torch.Generator().manual_seed(d)
    x, w = torch.randn(d, generator=g).to(DEV), (torch.randn(d * d, generator=g) / math.sqrt(d)).to(DEV)
    t, info = torch.empty(d, device=DEV), torch.full((3,), math.nan, device=DEV)
    ref = reference(x, w, d, 3 * layers)
    for fn in ("decode_eager", "decode_graph"):
        y = x.clone()
        getattr(m, fn)(y, w, t, info, d, 3)
        err = ((y.cpu() - ref).norm() / ref.norm()).item()
        assert err < 1e-5, f"{name} {fn} d={d}: relative error {err:.2e}"
    assert info[0].item() == 3 * layers, f"{name}: {info[0].item()} graph nodes"


def time_one(m: cc.Module, d: int, steps: int, reps: int = 11) -> tuple[float, float, float]:
    """(eager ms, graph replay ms, capture + instantiate ms), medians of the launchers' host-clock figures."""
    x, w = torch.randn(d, device=DEV), torch.randn(d * d, device=DEV) / math.sqrt(d)
    t, info = torch.empty(d, device=DEV), torch.empty(3, device=DEV)
    eager, replay, capture = [], [], []
    for rep in range(reps + 2):
        m.decode_eager(x, w, t, info, d, steps)
        e = info[0].item()
        m.decode_graph(x, w, t, info, d, steps)
        if rep >= 2:
            eager.append(e)
            capture.append(info[1].item())
            replay.append(info[2].item())
    return statistics.median(eager), statistics.median(replay), statistics.median(capture)


def main(argv: list[str]) -> int:
    """Check, time, print the table (and write it to argv[0] when given)."""
    src = (ROOT / "solutions" / "07_host_side" / "host_side.cu").read_text()
    backend = "sim" if SIM else "cuda"
    dev = torch.cuda.get_device_name(0) if not SIM else "CPU simulator (nominal times)"
    reps = 3 if SIM else 11
    lines = [f"{dev}; decode step x += tanh(W x); x = rmsnorm(x); host-clock times from the launchers "
             f"(median of {reps})",
             f"{'variant':<26}{'d':>6}{'steps':>7}{'eager us/step':>15}{'graph us/step':>15}{'eager/graph':>13}"
             f"{'capture+inst us':>17}"]
    sizes = [64, 256] if SIM else [64, 256, 1024, 4096]
    for name, text in variants(src).items():
        m = cc.load(text, ["decode_eager", "decode_graph"], backend=backend)
        layers = 4 if "x4" in name else 1
        for d in sizes[:2]:
            check(m, name, d, layers)
        for d in sizes:
            steps = 20 if SIM else 1000
            e, r, c = time_one(m, d, steps, reps=reps)
            lines.append(f"{name:<26}{d:>6}{steps:>7}{e / steps * 1e3:>15.2f}{r / steps * 1e3:>15.2f}"
                         f"{e / r:>12.2f}x{c * 1e3:>17.1f}")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if argv:
        Path(argv[0]).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
