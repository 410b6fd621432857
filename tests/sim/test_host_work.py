"""Results computed by the launcher's host code fail, naming the launcher (issue 36, item 4).

The cheats are written as an attacker would write them: copy the input to the host (``cudaMemcpy``,
``cudaMemcpyAsync`` into pinned memory, ``cudaMemcpy2D``, through a device scratch copy, through a ``__device__``
symbol or managed memory), answer there (``std::max_element`` or a plain loop), and put the answer back (a
host-to-device copy, a device-to-device copy of a host-written scratch, or a kernel launched with the answer as a
scalar). The legitimate launchers (a ``cudaMemset`` before atomics, device-to-device copies, several kernels,
a host read of a kernel-computed count, host constants uploaded into scratch) still pass.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import build

from cudacourse.errors import KernelError

SRC = r"""
#include <cuda_runtime.h>
#include <algorithm>
#include <vector>
#include <cstdlib>

__global__ void set_index(int* out, int v) { out[0] = v; }
__device__ float g_copy[256];

void argmax_memcpy(const float* x, int* out, int n) {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost);                 // READ memcpy
    int idx = (int)(std::max_element(h.begin(), h.end()) - h.begin());
    cudaMemcpy(out, &idx, sizeof idx, cudaMemcpyHostToDevice);
}

void argmax_async_pinned(const float* x, int* out, int n) {
    float* h; int* hi;
    cudaMallocHost(&h, n * sizeof(float)); cudaMallocHost(&hi, sizeof(int));
    cudaStream_t s; cudaStreamCreate(&s);
    cudaMemcpyAsync(h, x, n * sizeof(float), cudaMemcpyDeviceToHost, s);                 // READ async
    cudaStreamSynchronize(s);
    int b = 0;
    for (int i = 1; i < n; ++i) if (h[i] > h[b]) b = i;
    *hi = b;
    cudaMemcpyAsync(out, hi, sizeof(int), cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s); cudaFreeHost(h); cudaFreeHost(hi);
}

void argmax_scalar_kernel(const float* x, int* out, int n) {
    float* h = (float*)malloc(n * sizeof(float));
    cudaMemcpy(h, x, n * sizeof(float), cudaMemcpyDeviceToHost);                         // READ scalar
    int b = 0;
    for (int i = 1; i < n; ++i) if (h[i] > h[b]) b = i;
    free(h);
    set_index<<<1, 1>>>(out, b);                   // a kernel writes it, but the host computed it
}

void argmax_via_scratch(const float* x, int* out, int n) {
    float* d; int* di;
    cudaMalloc(&d, n * sizeof(float)); cudaMalloc(&di, sizeof(int));
    cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyDeviceToDevice);
    std::vector<float> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);                  // READ scratch
    int idx = (int)(std::max_element(h.begin(), h.end()) - h.begin());
    cudaMemcpy(di, &idx, sizeof idx, cudaMemcpyHostToDevice);
    cudaMemcpy(out, di, sizeof idx, cudaMemcpyDeviceToDevice);
    cudaFree(d); cudaFree(di);
}

void argmax_2d(const float* x, int* out, int n) {
    std::vector<float> h(n);
    cudaMemcpy2D(h.data(), sizeof(float), x, sizeof(float), sizeof(float), n, cudaMemcpyDeviceToHost);   // READ 2d
    int idx = (int)(std::max_element(h.begin(), h.end()) - h.begin());
    cudaMemcpy(out, &idx, sizeof idx, cudaMemcpyHostToDevice);
}

void argmax_symbol(const float* x, int* out, int n) {
    cudaMemcpyToSymbol(g_copy, x, n * sizeof(float), 0, cudaMemcpyDeviceToDevice);       // READ symbol
    int idx = (int)(std::max_element(g_copy, g_copy + n) - g_copy);
    cudaMemcpy(out, &idx, sizeof idx, cudaMemcpyHostToDevice);
}

void argmax_managed(const float* x, int* out, int n) {
    float* m;
    cudaMallocManaged(&m, n * sizeof(float));
    cudaMemcpy(m, x, n * sizeof(float), cudaMemcpyDeviceToDevice);                       // READ managed
    cudaDeviceSynchronize();
    int idx = (int)(std::max_element(m, m + n) - m);
    cudaMemcpy(out, &idx, sizeof idx, cudaMemcpyHostToDevice);
    cudaFree(m);
}

void relu_on_host(const float* x, float* y, int n) {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost);                  // READ relu
    for (float& v : h) v = v > 0.f ? v : 0.f;
    cudaMemcpy(y, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
}

// ---- legitimate launchers -----------------------------------------------------------------------------
__global__ void sum_atomic(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}
void sum_memset(const float* x, float* out, int n) {
    cudaMemset(out, 0, sizeof(float));
    sum_atomic<<<(n + 127) / 128, 128>>>(x, out, n);
}

__global__ void relu_inplace(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] > 0.f ? y[i] : 0.f;
}
void relu_d2d(const float* x, float* y, int n) {
    cudaMemcpy(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice);
    relu_inplace<<<(n + 127) / 128, 128>>>(y, n);
}

__global__ void count_positive(const float* x, int* count, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] > 0.f) atomicAdd(count, 1);
}
__global__ void scale_by_table(const float* x, const float* table, float* y, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * table[i % 4] + (float)k;
}
void two_kernels_host_count(const float* x, float* y, int n) {
    int* dcount; float* dtable;
    cudaMalloc(&dcount, sizeof(int)); cudaMalloc(&dtable, 4 * sizeof(float));
    cudaMemset(dcount, 0, sizeof(int));
    count_positive<<<(n + 127) / 128, 128>>>(x, dcount, n);
    int count = 0;
    cudaMemcpy(&count, dcount, sizeof count, cudaMemcpyDeviceToHost);   // a kernel's result, not the input
    const float table[4] = {1.f, 2.f, 3.f, 4.f};                         // host constants
    cudaMemcpy(dtable, table, sizeof table, cudaMemcpyHostToDevice);
    scale_by_table<<<(n + 127) / 128, 128>>>(x, dtable, y, n, count);
    cudaFree(dcount); cudaFree(dtable);
}

void stage_in_only(const float* x, float* h_unused, int n) {       // reads the input, writes nothing after
    std::vector<float> h(n);
    cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost);
}
"""

LINES = {tag: i + 1 for i, ln in enumerate(SRC.splitlines()) for tag in re.findall(r"// READ (\w+)$", ln)}
CHEATS = {"argmax_memcpy": "memcpy", "argmax_async_pinned": "async", "argmax_scalar_kernel": "scalar",
          "argmax_via_scratch": "scratch", "argmax_2d": "2d", "argmax_symbol": "symbol", "argmax_managed": "managed",
          "relu_on_host": "relu"}


@pytest.fixture(scope="module", params=[True, False], ids=["checked", "fast"])
def lib(request):
    lib = build(SRC, "hostwork.cu", checked=request.param)
    yield lib
    lib.close()


def _x(n: int = 200) -> torch.Tensor:
    x = torch.randn(n, generator=torch.Generator().manual_seed(11))
    x[137] = 10.0
    return x


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_host_computed_output_fails_naming_the_launcher(lib, name) -> None:
    x = _x()
    out = torch.full((200,), float("nan")) if name == "relu_on_host" else torch.full((1,), -1, dtype=torch.int32)
    with pytest.raises(KernelError) as e:
        lib.call(name, [x, out, 200])
    msg = str(e.value)
    assert e.value.kind == "host-work", msg
    assert f"launcher {name} changed its argument" in msg, msg
    assert f"hostwork.cu:{LINES[CHEATS[name]]}" in msg and e.value.line == LINES[CHEATS[name]], msg
    assert "kernel" in msg and "host" in msg, msg


def test_legitimate_launchers_pass(lib) -> None:
    x = _x()
    out = torch.full((1,), float("nan"))
    lib.call("sum_memset", [x, out, 200])
    assert torch.allclose(out, x.sum().reshape(1), atol=1e-3)
    y = torch.full((200,), float("nan"))
    lib.call("relu_d2d", [x, y, 200])
    assert torch.equal(y, x.clamp(min=0))
    y = torch.full((200,), float("nan"))
    lib.call("two_kernels_host_count", [x, y, 200])
    k = int((x > 0).sum())
    assert torch.allclose(y, x * torch.tensor([1.0, 2.0, 3.0, 4.0]).repeat(50) + k)
    lib.call("stage_in_only", [x, torch.zeros(4), 200])


def test_a_cheat_does_not_poison_the_next_call(lib) -> None:
    """The host-read state is per call: a legitimate call after a refused one passes."""
    with pytest.raises(KernelError):
        lib.call("argmax_memcpy", [_x(), torch.full((1,), -1, dtype=torch.int32), 200])
    out = torch.full((1,), float("nan"))
    lib.call("sum_memset", [_x(), out, 200])
    assert torch.isfinite(out).all()
