"""The GPU build and the simulator refuse the same device code (issue 36, item 4).

The simulator refuses a host function called from device code because nvcc does (``sim/devcheck.py``), including
``constexpr`` host functions such as ``std::min``, which nvcc accepts only with ``--expt-relaxed-constexpr``. That
holds only while every GPU build of a kernel file is plain nvcc without that flag: in a notebook, in ``make check``
and in the grade alike (``cuda_backend.build_cuda``; before, the in-process route went through torch's load_inline,
which adds the flag, under the same cache key as the grade's build). Here the real nvcc compiles for sm_90a (no GPU
needed) what the simulator refuses and what it accepts.
"""

from __future__ import annotations

import pytest

from cudacourse.backends import nvcc_path
from cudacourse.cuda_backend import build_cuda
from cudacourse.errors import CompileError
from cudacourse.settings import using
from cudacourse.source import find_launchers

pytestmark = pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc (CUDA toolkit) on the PATH")

HEAD = "#include <cuda_runtime.h>\n#include <algorithm>\n#include <limits>\n"
CONSTEXPR_MIN = HEAD + r"""
__global__ void k(const float* x, int* out, int n) {
    out[0] = (int)std::min(x[0], std::numeric_limits<float>::max());
}
void run(const float* x, int* out, int n) { k<<<1, 1>>>(x, out, n); }
"""
ALLOWED = HEAD + r"""
__host__ __device__ inline float cube(float v) { return v * v * v; }
__global__ void k(const float* x, int* out, int n) { out[0] = (int)fminf(cube(x[0]), 3.0e38f); }
void run(const float* x, int* out, int n) { k<<<1, 1>>>(x, out, n); }
"""


def _build(src: str, tmp_path, name: str) -> object:
    path = tmp_path / name
    path.write_text(src)
    with using(build_dir=tmp_path / "build"):
        return build_cuda(src, str(path), list(find_launchers(src).values()))


def test_the_gpu_build_refuses_a_constexpr_host_function_in_device_code(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    with pytest.raises(CompileError, match=r"std::min|constexpr|__host__") as e:
        _build(CONSTEXPR_MIN, tmp_path, "constexpr_min.cu")
    line = CONSTEXPR_MIN.splitlines().index("    out[0] = (int)std::min(x[0], std::numeric_limits<float>::max());") + 1
    assert e.value.line == line and f"constexpr_min.cu:{line}" in str(e.value), str(e.value)  # the learner's line
    assert _build(ALLOWED, tmp_path, "allowed.cu").exists()
