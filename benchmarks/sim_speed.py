"""Speed of the CPU simulator: fast and checked mode on the reference kernels, and build times.

Run: ``.venv/bin/python benchmarks/sim_speed.py``. Prints a table (kernel, size, fast ms, checked ms,
build s). Times are the median of a few calls through ``SimLibrary.call`` (worker round trip and tensor
copies included); build times are cold (a private build folder, runtime object already built).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from cudacourse.sim import SimLibrary, runtime_object  # noqa: E402
from cudacourse.source import find_launchers  # noqa: E402

SRC = r"""
#include <cuda_runtime.h>
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
void relu(const float* x, float* y, int n) { relu_kernel<<<(n + 255) / 256, 256>>>(x, y, n); }

__global__ void reduce_kernel(const float* x, float* partial, int n) {
    __shared__ float sdata[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x * 2 + tid;
    float v = 0.0f;
    if (i < n) v += x[i];
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}
void reduce(const float* x, float* out, float* partial, int n) {
    int blocks = (n + 511) / 512;
    reduce_kernel<<<blocks, 256>>>(x, partial, n);
    reduce_kernel<<<1, 256>>>(partial, out, blocks);
}

#define TILE 16
__global__ void sgemm_kernel(const float* A, const float* B, float* C, int n) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < n / TILE; ++t) {
        As[ty][tx] = A[row * n + t * TILE + tx];
        Bs[ty][tx] = B[(t * TILE + ty) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    C[row * n + col] = acc;
}
void sgemm(const float* A, const float* B, float* C, int n) {
    dim3 block(TILE, TILE), grid(n / TILE, n / TILE);
    sgemm_kernel<<<grid, block>>>(A, B, C, n);
}
"""


def _time(lib: SimLibrary, name: str, args: list, reps: int) -> float:
    lib.call(name, args)  # warm up the worker and the shared memory
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        lib.call(name, args)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def machine_line() -> str:
    """Where the figures come from: CPU model, cores, load average, torch and g++ versions."""
    import platform
    import subprocess

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return (f"# benchmarks/sim_speed.py on {cpu} ({platform.machine()}), {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f} at the start, torch {torch.__version__}, {gxx}")


def main() -> None:
    """Print the speed table."""
    print(machine_line() + "\n")
    launchers = list(find_launchers(SRC).values())
    libs, builds = {}, {}
    with tempfile.TemporaryDirectory() as d:
        os.environ["CUDA_COURSE_BUILD"] = d  # cold builds
        t = time.perf_counter()
        runtime_object()
        rt_s = time.perf_counter() - t
        for checked in (False, True):
            t = time.perf_counter()
            libs[checked] = SimLibrary.build(SRC, "bench.cu", launchers, checked=checked)
            builds[checked] = time.perf_counter() - t
        n = 1 << 20
        x = torch.randn(n)
        cases = [
            ("relu (elementwise)", "1M", "relu", lambda: [x, torch.empty(n), n]),
            ("block reduction", "1M", "reduce", lambda: [x, torch.empty(1), torch.empty(2048), n]),
            ("tiled SGEMM", "256^3", "sgemm", lambda: [torch.randn(256, 256), torch.randn(256, 256),
                                                         torch.empty(256, 256), 256]),
        ]
        print(f"{'kernel':<22}{'size':>8}{'fast ms':>10}{'checked ms':>12}{'ratio':>7}")
        for label, size, name, mk in cases:
            fast = _time(libs[False], name, mk(), 5)
            chk = _time(libs[True], name, mk(), 3)
            print(f"{label:<22}{size:>8}{fast:>10.1f}{chk:>12.1f}{chk / fast:>7.1f}")
        print(f"\nbuild (cold, 3 kernels): fast {builds[False]:.2f} s, checked {builds[True]:.2f} s "
              f"(+ {rt_s:.2f} s once for the runtime object)")
        for lib in libs.values():
            lib.close()


if __name__ == "__main__":
    main()
