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


# The host-work check (cudacourse/hostwork.cu) sees the copies a library makes through the wrapped runtime calls;
# a file that names a way around them is refused when it is built, from the object's symbols (issue 36, item 4).
ARGMAX_HEAD = "#include <cuda_runtime.h>\n#include <stdlib.h>\n"
ROUND_THE_CHECK = {
    "driver call": ("#include <cuda.h>\n", "cuMemcpyDtoH(out, (CUdeviceptr)x, 4);",
                    r"cuMemcpyDtoH\w*: a CUDA driver call"),
    "asm label": ('extern "C" cudaError_t cc_c(void*, const void*, size_t, cudaMemcpyKind) '
                  'asm("__re" "al_cudaMemcpy");\n',
                  "cc_c(out, x, 4, cudaMemcpyDeviceToDevice);", r"__real_cudaMemcpy: a name of the grader's"),
    "pasted dlsym": ('#define CC_CAT(a, b) a##b\nextern "C" void* CC_CAT(dl, sym)(void*, const char*);\n',
                     "out[0] = (float)(size_t)CC_CAT(dl, sym)(nullptr, \"x\");", r"dlsym: loading libraries"),
    "unwrapped copy": ("", "cudaMemcpy3DParms p = {}; cudaMemcpy3D(&p);", r"cudaMemcpy3D: a copy call the grader"),
    "the check's own name": ('extern "C" int cc_hw_end(unsigned long long* at) { return -1; }\n', "",
                             r"cc_hw_end: a name of the grader's"),
}


@pytest.mark.parametrize("case", list(ROUND_THE_CHECK))
def test_the_gpu_build_refuses_a_way_around_the_host_work_check(case: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    decl, body, why = ROUND_THE_CHECK[case]
    src = ARGMAX_HEAD + decl + "void run(const float* x, float* out, int n) {\n    " + body + "\n}\n"
    with pytest.raises(CompileError, match=why):
        _build(src, tmp_path, "around.cu")


def test_the_gpu_build_keeps_the_calls_the_course_uses(tmp_path, monkeypatch) -> None:
    """Wrapped copies, copies from a __device__ symbol and the tensor-map entry point build, and the library's
    copies go through the wrappers (its code calls __wrap_cudaMemcpy, never cudaMemcpy itself)."""
    import subprocess

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    src = ARGMAX_HEAD + """__device__ float cc_flag;
void run(const float* x, float* out, int n) {
    float h = 0.0f;
    cudaMemcpy(&h, x, 4, cudaMemcpyDeviceToHost);
    cudaMemcpyAsync(out, &h, 4, cudaMemcpyHostToDevice, 0);
    cudaMemcpyFromSymbol(&h, cc_flag, 4);
    void* fn = nullptr;
    cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, nullptr);
}
"""
    so = _build(src, tmp_path, "fine.cu")
    dis = subprocess.run(["objdump", "-d", str(so)], capture_output=True, text=True).stdout
    run = dis[dis.index("<_Z3runPKfPfi>:"):]
    run = run[:run.index("\n\n")]
    assert "__wrap_cudaMemcpy" in run and "__wrap_cudaMemcpyAsync" in run and "__wrap_cudaMemcpyFromSymbol" in run, run
    assert "<cudaMemcpy@plt>" not in run and "<cudaMemcpy>" not in run, run
