"""Host code cannot touch device memory on the simulator, as on a GPU (issue 14, ``cpu-answer-no-launch``).

While a launcher's host code runs, the arguments' shared-memory mapping is protected; launches, cudaMemcpy,
cudaMemset and the runtime's other device-memory calls open it. A host read or write of an argument is a
``KernelError`` that names the launcher, the argument and the host line; the runtime's own calls still work.
"""

from __future__ import annotations

import pytest
import torch
from conftest import build

from cudacourse.errors import KernelError

SRC = r"""
#include <cuda_runtime.h>

__global__ void relu_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
// the answer computed by host code, no kernel launched
void host_write(const float* x, float* y, int n) {
    for (int k = 0; k < n; k++) y[k] = 1.0f;
}
// host code reads an input (a beginner's "peek at the data")
void host_read(const float* x, float* y, int n) {
    int blocks = x[0] > 1e30f ? 1 : (n + 255) / 256;
    relu_k<<<blocks, 256>>>(x, y, n);
}
// a kernel runs, then host code patches the output afterwards
void launch_then_host_write(const float* x, float* y, int n) {
    relu_k<<<(n + 255) / 256, 256>>>(x, y, n);
    cudaDeviceSynchronize();
    y[0] = 42.0f;
}
// the same through libc's memcpy (the fault is outside the module: its caller's line is named)
void host_memcpy(const float* x, float* y, int n) {
    memcpy(y, x, n * sizeof(float));
}
// a classic beginner bug: host code fills a cudaMalloc buffer directly
void host_fills_cudamalloc(const float* x, float* y, int n) {
    float* d;
    cudaMalloc(&d, n * sizeof(float));
    for (int k = 0; k < n; k++) d[k] = 0.0f;
    relu_k<<<(n + 255) / 256, 256>>>(x, d, n);
    cudaMemcpy(y, d, n * sizeof(float), cudaMemcpyDeviceToDevice);
    cudaFree(d);
}
// managed memory is the host's too
void managed_on_host(const float* x, float* y, int n) {
    float* m;
    cudaMallocManaged(&m, n * sizeof(float));
    for (int k = 0; k < n; k++) m[k] = -1.0f;
    relu_k<<<(n + 255) / 256, 256>>>(x, m, n);
    cudaDeviceSynchronize();
    m[0] += 1.0f;
    cudaMemcpy(y, m, n * sizeof(float), cudaMemcpyDeviceToDevice);
    cudaFree(m);
}
// cudaMemcpy in both directions, cudaMemset and a device-to-device copy from host code: all legitimate
void copies(const float* x, float* y, int n, float* out2) {
    float* h = new float[n];
    cudaMemcpy(h, x, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (int k = 0; k < n; k++) h[k] = h[k] * 2.0f;
    cudaMemcpy(y, h, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(out2, 0, n * sizeof(float));
    cudaMemcpy(out2, y, 2 * sizeof(float), cudaMemcpyDeviceToDevice);
    cudaStream_t s; cudaStreamCreate(&s);
    cudaMemcpyAsync(h, out2, sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaMemsetAsync(out2 + 2, 0, sizeof(float), s);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    h[1] = h[0] + 1.0f;
    cudaMemcpy(out2 + 3, h + 1, sizeof(float), cudaMemcpyHostToDevice);
    delete[] h;
}
// a realworld-style launcher: cudaMalloc scratch, kernels on a stream and the default stream, copies back
__global__ void scale_k(const float* a, float* b, int n, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i] * s;
}
void scratch_pipeline(const float* x, float* y, int n) {
    float* t; cudaMalloc(&t, n * sizeof(float));
    cudaStream_t s; cudaStreamCreate(&s);
    relu_k<<<(n + 255) / 256, 256, 0, s>>>(x, t, n);
    scale_k<<<(n + 255) / 256, 256, 0, s>>>(t, y, n, 3.0f);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    scale_k<<<(n + 127) / 128, 128>>>(y, t, n, 0.5f);
    cudaMemcpy(y, t, n * sizeof(float), cudaMemcpyDeviceToDevice);
    cudaFree(t);
}
"""


# These launchers copy their inputs through host memory to test the copy and stream API itself: the host-work check
# (test_host_work.py) is off for this module's workers (conftest.host_reads_allowed).
pytestmark = pytest.mark.usefixtures("host_reads_allowed")


@pytest.fixture(scope="module", params=[True, False], ids=["checked", "fast"])
def lib(request):
    m = build(SRC, "hostmem.cu", checked=request.param)
    yield m
    m.close()


def _line(needle: str) -> int:
    return next(i for i, ln in enumerate(SRC.splitlines(), 1) if needle in ln)


def _xy(n: int = 300) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, generator=torch.Generator().manual_seed(5)), torch.full((n,), float("nan"))


def test_host_write_to_an_argument_is_reported_with_its_line(lib):
    x, y = _xy()
    with pytest.raises(KernelError) as ei:
        lib.call("host_write", [x, y, x.numel()])
    msg = str(ei.value)
    line = _line("y[k] = 1.0f")
    assert (f"host code of launcher host_write wrote device memory (argument y) at hostmem.cu:{line}" in msg), msg
    assert "host code cannot read or write device memory" in msg and "cudaMemcpy" in msg
    assert ei.value.line == line
    assert torch.isnan(y).all(), "nothing the host wrote may reach the output"
    # the library stays usable: the next call runs in a fresh worker
    lib.call("scratch_pipeline", [x, y, x.numel()])
    assert torch.allclose(y, 1.5 * torch.relu(x))


def test_host_read_of_an_argument_is_reported(lib):
    x, y = _xy()
    with pytest.raises(KernelError, match=r"host code of launcher host_read read device memory \(argument x\)") as ei:
        lib.call("host_read", [x, y, x.numel()])
    assert f"hostmem.cu:{_line('int blocks = x[0]')}" in str(ei.value)


def test_a_host_write_after_a_kernel_is_reported(lib):
    x, y = _xy()
    with pytest.raises(KernelError, match=r"launch_then_host_write wrote device memory \(argument y\)") as ei:
        lib.call("launch_then_host_write", [x, y, x.numel()])
    assert f"hostmem.cu:{_line('y[0] = 42.0f')}" in str(ei.value)


def test_a_host_memcpy_names_its_callers_line(lib):
    x, y = _xy()
    with pytest.raises(KernelError, match=r"host_memcpy (read|wrote) device memory \(argument [xy]\)") as ei:
        lib.call("host_memcpy", [x, y, x.numel()])
    assert f"hostmem.cu:{_line('memcpy(y, x, n')}" in str(ei.value)


def test_a_host_write_to_cudamalloc_memory_is_reported(lib):
    x, y = _xy()
    line = _line("d[k] = 0.0f")
    with pytest.raises(KernelError) as ei:
        lib.call("host_fills_cudamalloc", [x, y, x.numel()])
    msg = str(ei.value)
    assert (f"host_fills_cudamalloc wrote device memory (a cudaMalloc buffer (line {_line('cudaMalloc(&d')})) at "
            f"hostmem.cu:{line}") in msg, msg


def test_managed_memory_stays_open_to_host_code(lib):
    x, y = _xy()
    lib.call("managed_on_host", [x, y, x.numel()])
    want = torch.relu(x)
    want[0] += 1.0
    assert torch.equal(y, want)


def test_cuda_memcpy_and_memset_from_host_code_still_work(lib):
    x, y = _xy()
    out2 = torch.full((x.numel(),), float("nan"))
    lib.call("copies", [x, y, x.numel(), out2])
    assert torch.equal(y, 2 * x)
    assert torch.equal(out2[:2], 2 * x[:2]) and out2[2] == 0 and out2[3] == 2 * x[0] + 1
    assert (out2[4:] == 0).all()


def test_cudamalloc_scratch_with_kernels_and_streams_still_works(lib):
    x, y = _xy(1000)
    for _ in range(2):  # twice: the protection is re-armed for every call
        lib.call("scratch_pipeline", [x, y, x.numel()])
        assert torch.allclose(y, 1.5 * torch.relu(x))
