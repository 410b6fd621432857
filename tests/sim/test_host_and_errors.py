"""Host API, compile errors at the learner's line, refused constructs, and the isolation of the caller
from kernels that hang, crash or write wildly."""

from __future__ import annotations

import pytest
import torch
from conftest import build

from cudacourse.errors import CompileError, KernelError, KernelTimeout, LaunchError, UnsupportedError

HOST_SRC = r"""
#include <cuda_runtime.h>
#include <cstdio>
__global__ void add_one(float* d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] += 1.0f;
}
void host_roundtrip(const float* x, float* y, float* ms, int n) {
    float* h = (float*)malloc(n * sizeof(float));
    cudaMemcpy(h, x, n * sizeof(float), cudaMemcpyDeviceToHost);
    float* d = nullptr;
    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) return;
    cudaMemset(d, 0, n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    cudaEventRecord(a);
    cudaStream_t s; cudaStreamCreate(&s);
    add_one<<<(n + 63) / 64, 64, 0, s>>>(d, n);
    cudaEventRecord(b); cudaEventSynchronize(b);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) printf("error %s\n", cudaGetErrorString(err));
    cudaDeviceSynchronize();
    float hms = -1.0f;                 // (host code cannot write device memory: copied out below)
    cudaEventElapsedTime(&hms, a, b);
    cudaMemcpy(ms, &hms, sizeof hms, cudaMemcpyHostToDevice);
    cudaMemcpy(y, d, n * sizeof(float), cudaMemcpyDeviceToDevice);
    cudaFree(d); free(h);
    cudaEventDestroy(a); cudaEventDestroy(b); cudaStreamDestroy(s);
    cudaDeviceProp p; cudaGetDeviceProperties(&p, 0);
    int sms = 0, warp = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0);
    if (p.warpSize != 32 || p.maxThreadsPerBlock != 1024 || sms < 1 || warp != 32) cudaMemset(y, 0xFF, 4);
}
void malloc_overrun(int n) {
    float* d; cudaMalloc(&d, n * sizeof(float));
    add_one<<<1, 64>>>(d, n + 8);
    cudaFree(d);
}
__global__ void hang(int* flag) { while (flag[0] == 0) { } }
void spin(int* flag) { hang<<<1, 1>>>(flag); }
__global__ void wild(float* y) { float* p = (float*)0x10; p[threadIdx.x] = 1.0f; y[0] = 2.0f; }
void crash(float* y) { wild<<<1, 32>>>(y); }
__global__ void writes_input(const float* x, float* y) { ((float*)x)[threadIdx.x] = -7.0f; y[threadIdx.x] = 1.0f; }
void mutate(const float* x, float* y) { writes_input<<<1, 4>>>(x, y); }
void zero_grid(float* y, int n) { add_one<<<n / 1024, 256>>>(y, n); }
void bad_block_dims(float* y) { add_one<<<1, dim3(8, 8, 128)>>>(y, 1); }
__global__ void inc_first(float* p) { p[0] += 1.0f; }
void pinned_and_bad_free(float* out, int* status) {
    float* h; cudaMallocHost(&h, sizeof(float));
    h[0] = 41.0f;
    inc_first<<<1, 1>>>(h);            // mapped pinned memory is usable from kernels
    cudaMemcpy(out, h, sizeof(float), cudaMemcpyHostToDevice);
    int st[2];
    st[0] = cudaFree(out);             // not from cudaMalloc: an error code, not a crash
    st[1] = cudaFreeHost(h);
    cudaMemcpy(status, st, sizeof st, cudaMemcpyHostToDevice);
}
void host_throws(int n) { if (n > 0) throw std::runtime_error("TODO(task 1.2) not implemented"); }
__global__ void deep(float* y) {
    float big[40000];
    for (int i = 0; i < 40000; ++i) big[i] = i;
    y[threadIdx.x] = big[threadIdx.x * 7];
}
void stack_overflow(float* y) { deep<<<1, 2>>>(y); }
"""


# These launchers copy their inputs through host memory to test the copy and stream API itself: the host-work check
# (test_host_work.py) is off for this module's workers (conftest.host_reads_allowed).
pytestmark = pytest.mark.usefixtures("host_reads_allowed")


@pytest.fixture(scope="module")
def lib():
    lib = build(HOST_SRC, "host.cu", timeout_s=2.0)
    yield lib
    lib.close()


def test_host_api_roundtrip(lib) -> None:
    x = torch.randn(200)
    y = torch.zeros(200)
    ms = torch.zeros(1)
    lib.call("host_roundtrip", [x, y, ms, 200])
    assert torch.allclose(y, x + 1)
    assert ms.item() >= 0


def test_cudamalloc_buffer_overrun_is_named(lib) -> None:
    with pytest.raises(KernelError) as ei:
        lib.call("malloc_overrun", [50])
    assert "cudaMalloc buffer" in str(ei.value) and ei.value.line is not None


def test_timeout_then_next_call_works(lib) -> None:
    flag = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(KernelTimeout) as ei:  # no wall-clock bound here: a busy machine must still pass
        lib.call("spin", [flag])
    assert ei.value.kernel == "hang" and ei.value.line is not None
    x = torch.randn(10)
    y = torch.zeros(10)
    lib.call("host_roundtrip", [x, y, torch.zeros(1), 10])
    assert torch.allclose(y, x + 1)


def test_wild_write_checked_mode(lib) -> None:
    y = torch.zeros(1)
    with pytest.raises(KernelError) as ei:
        lib.call("crash", [y])
    assert ei.value.kind == "crash" and ei.value.line is not None
    assert y.item() == 0.0  # stopped before the bad access: nothing after it ran


def test_segfault_in_fast_mode_caller_lives() -> None:
    lib = build(HOST_SRC, "host.cu", checked=False, timeout_s=5.0)
    try:
        with pytest.raises(KernelError) as ei:
            lib.call("crash", [torch.zeros(1)])
        assert ei.value.kind == "crash" and "SIGSEGV" in str(ei.value)
        assert ei.value.kernel == "wild" and ei.value.thread is not None
        with pytest.raises(KernelError, match="stack"):
            lib.call("stack_overflow", [torch.zeros(2)])
        x = torch.randn(10)
        y = torch.zeros(10)
        lib.call("host_roundtrip", [x, y, torch.zeros(1), 10])  # a fresh worker
        assert torch.allclose(y, x + 1)
    finally:
        lib.close()


def test_const_input_written_is_copied_back(lib) -> None:
    x = torch.ones(4)
    y = torch.zeros(4)
    lib.call("mutate", [x, y])
    assert torch.all(x == -7)


def test_launch_configuration_errors(lib) -> None:
    with pytest.raises(LaunchError, match="0") as ei:
        lib.call("zero_grid", [torch.zeros(10), 10])
    assert ei.value.kernel == "add_one" and ei.value.line is not None
    with pytest.raises(LaunchError, match="1024"):
        lib.call("bad_block_dims", [torch.zeros(10)])


def test_host_exception_is_reported(lib) -> None:
    with pytest.raises(KernelError, match=r"TODO\(task 1.2\)"):
        lib.call("host_throws", [1])
    lib.call("host_throws", [0])


def test_compile_error_points_at_learner_line() -> None:
    src = ("#include <cuda_runtime.h>\n__global__ void k(float* y) {\n    y[0] = undefined_name;\n}\n"
           "void f(float* y) { k<<<1,1>>>(y); }\n")
    with pytest.raises(CompileError) as ei:
        build(src, "broken.cu")
    assert ei.value.line == 3 and ei.value.file == "broken.cu"
    assert "undefined_name" in str(ei.value)


def test_compile_error_after_a_rewritten_launch_keeps_lines() -> None:
    src = ("__global__ void k(float* y) { y[0] = 1; }\nvoid f(float* y) {\n    k<<<1,\n      1>>>(y);\n"
           "    int z = ;\n}\n")
    with pytest.raises(CompileError) as ei:
        build(src, "lines.cu")
    assert ei.value.line == 5


def test_inline_asm_is_refused() -> None:
    src = ("__global__ void k(int* y) {\n  int v;\n  asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(v));\n"
           "  y[0] = v;\n}\n")
    with pytest.raises(UnsupportedError) as ei:
        build(src, "asm.cu")
    assert ei.value.line == 3 and "PTX" in str(ei.value)


def test_launch_inside_macro_is_refused() -> None:
    src = "__global__ void k(int* y) { y[0] = 1; }\n#define LAUNCH(y) k<<<1, 1>>>(y)\nvoid f(int* y) { LAUNCH(y); }\n"
    with pytest.raises(UnsupportedError) as ei:
        build(src, "macro.cu")
    assert ei.value.line == 2


def test_shared_initializer_is_a_compile_error() -> None:
    src = "__global__ void k(int* y) {\n  __shared__ int s = 3;\n  y[0] = s;\n}\n"
    with pytest.raises(CompileError) as ei:
        build(src, "init.cu")
    assert ei.value.line == 2


def test_pinned_host_memory_and_invalid_free(lib) -> None:
    out = torch.zeros(1)
    status = torch.full((2,), -1, dtype=torch.int32)
    lib.call("pinned_and_bad_free", [out, status])
    assert out.item() == 42.0
    assert status.tolist() == [1, 0]  # cudaErrorInvalidValue, cudaSuccess


LEAK_CHILD = r"""
import os, signal, sys, torch
sys.path.insert(0, "tests/sim")
from conftest import build
from cudacourse.errors import KernelError
SRC = '''
#include <cstdlib>
__global__ void add_one(float* d, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) d[i] += 1.0f; }
void bump(float* d, int n) { add_one<<<(n + 255) / 256, 256>>>(d, n); }
void die(float* d) { abort(); }
'''
lib = build(SRC, "leak.cu")
for n in (1000, 3_000_001):  # the second outgrows the first shared memory while the worker runs
    x = torch.arange(n, dtype=torch.float32)
    lib.call("bump", [x, n])
    assert torch.equal(x, torch.arange(n, dtype=torch.float32) + 1), n
try:
    lib.call("die", [x])
except KernelError:
    pass
else:
    raise AssertionError("abort() in a launcher raised nothing")
lib.call("bump", [x, n])  # a fresh worker, handed the same shared memory
assert torch.equal(x, torch.arange(n, dtype=torch.float32) + 2)
print("calls ok", flush=True)
sys.keep_until_exit = lib  # alive to the interpreter's last moments, as a library a cache holds (its __del__ too late)
if sys.argv[1] == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("end", ["exit", "killed"])
def test_a_library_leaves_no_shared_memory_behind_even_when_its_process_is_killed(tmp_path, end) -> None:
    """The shared memory between a library and its workers has no name (it was a file in /dev/shm, memory that
    stayed taken: 7 GB after a day of this suite), and survives the worker's growth and restart; nor has the
    worker's log (a folder with it was left in /tmp by every notebook kernel nbval stops with SIGKILL). So a
    process that exits with the library still held, or is killed, leaves nothing in its temp folder."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    shm = Path("/dev/shm")
    before = set(os.listdir(shm)) if shm.is_dir() else set()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", LEAK_CHILD, end], cwd=root, capture_output=True, text=True,
                       env={**os.environ, "TMPDIR": str(tmp)}, timeout=600)
    assert "calls ok" in r.stdout, r.stdout + r.stderr
    assert r.returncode == (0 if end == "exit" else -9), r.stderr
    made = (set(os.listdir(shm)) if shm.is_dir() else set()) - before
    assert not {m for m in made if m.startswith("ccsim")}, made
    assert not list(tmp.rglob("*")), list(tmp.rglob("*"))  # (the worker's log has no name either)
