"""The classic torch::Tensor route (load_inline) on the simulator: one build, several checks."""

from __future__ import annotations

import pytest
import torch

from cudacourse.errors import OutOfBoundsError
from cudacourse.sim import build_torch_extension

SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void relu_nocheck_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    const at::cuda::OptionalCUDAGuard guard(device_of(x));
    auto y = torch::empty_like(x);
    int n = x.numel();
    int threads = 256, blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

torch::Tensor relu_nocheck(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_nocheck_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

# One xdist worker runs the three tests: the module fixture's build (torch headers, ~30 CPU-s; ~15 with the
# suite's precompiled header, tests/conftest.py's torch_pch, made first) happens once.
pytestmark = pytest.mark.xdist_group("torch_route")


@pytest.fixture(scope="module")
def ext(torch_pch):
    return build_torch_extension(SRC, "relu_ext.cu", ["relu", "relu_nocheck"], checked=True)


def test_torch_route_runs(ext) -> None:
    x = torch.randn(1000)
    assert torch.equal(ext.relu(x), x.clamp(min=0))


def test_torch_route_checks_raise(ext) -> None:
    with pytest.raises(RuntimeError, match="contiguous"):
        ext.relu(torch.randn(10, 10).t())


def test_torch_route_diagnoses_kernel_bugs(ext) -> None:
    with pytest.raises(OutOfBoundsError) as ei:
        ext.relu_nocheck(torch.randn(1000))
    # line 13 reads x[i] and writes y[i]: with several threads past the end, either access may be reported first
    # (a run on a busy 2-core machine reported y[1000])
    assert ei.value.line == 13 and ("x[1000]" in str(ei.value) or "y[1000]" in str(ei.value))
    x = torch.randn(256)
    assert torch.equal(ext.relu(x), x.clamp(min=0))  # still usable
