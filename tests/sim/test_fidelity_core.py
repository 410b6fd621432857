"""Issue 13, the simulator's core fidelity: __shared__ per template instantiation, identical stores that
are not races, the dynamic shared-memory opt-in, plain C++ host code, host assert()/exit(), warp masks and
__activemask(), and tensor views of every shape the loader accepts (issue 15)."""

from __future__ import annotations

import pytest
import torch

import cudacourse as cc
from cudacourse.errors import BarrierError, KernelError, LaunchError, RaceError, UninitializedReadError
from cudacourse.source import find_launchers

ORDERS = ["forward", "reverse", "shuffle:7"]

# ----------------------------------------------------------------------------------------------------
# 1. __shared__ in templates: one array per instantiation
# ----------------------------------------------------------------------------------------------------

TEMPLATE_SRC = r"""
template <int K> __device__ float scaled_block_sum(const float* x) {
    __shared__ float buf[64];              // one array per K, as on the GPU
    buf[threadIdx.x] = x[threadIdx.x] * K;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < 64; ++i) s += buf[i];
    return s;
}
__global__ void two_sums(const float* x, float* y) {
    float a = scaled_block_sum<1>(x);
    float b = scaled_block_sum<3>(x);      // no barrier in between: only right if the arrays differ
    y[threadIdx.x] = a;
    y[64 + threadIdx.x] = b;
}
void template_shared(const float* x, float* y) { two_sums<<<1, 64>>>(x, y); }
"""


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "fast"])
@pytest.mark.parametrize("order", ORDERS)
def test_shared_array_per_template_instantiation(sim, checked: bool, order: str) -> None:
    lib = sim(TEMPLATE_SRC, checked=checked, order=order)
    x = torch.randn(64)
    y = torch.full((128,), float("nan"))
    lib.call("template_shared", [x, y])
    s = x.sum()
    torch.testing.assert_close(y[:64], s.expand(64), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(y[64:], (3 * s).expand(64), rtol=1e-5, atol=1e-4)


# ----------------------------------------------------------------------------------------------------
# 2. identical stores are not a race; different values are
# ----------------------------------------------------------------------------------------------------

STORES_SRC = r"""
__global__ void warp_sums(const float* x, float* y, int same) {
    __shared__ float s[2];
    float v = x[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    // every lane stores its warp's total: no lane == 0 guard (same values), or its own value (a race)
    s[threadIdx.x / 32] = same ? v : x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) y[0] = s[0] + s[1];
}
void stores(const float* x, float* y, int same) { warp_sums<<<1, 64>>>(x, y, same); }

__global__ void reread_then_overwrite(float* y, int same) {
    __shared__ float s[1];
    if (threadIdx.x == 0) s[0] = 5.0f;
    __syncthreads();
    float r = s[0];                          // every thread reads ...
    s[0] = same ? 5.0f : (float)threadIdx.x; // ... and stores without a barrier in between
    y[threadIdx.x] = r;
}
void read_write(float* y, int same) { reread_then_overwrite<<<1, 64>>>(y, same); }
"""


@pytest.mark.parametrize("order", ORDERS)
def test_identical_stores_are_not_a_race(sim, order: str) -> None:
    lib = sim(STORES_SRC, order=order)
    x = torch.randn(64)
    y = torch.full((1,), float("nan"))
    lib.call("stores", [x, y, 1])
    torch.testing.assert_close(y[0], x.sum(), rtol=1e-5, atol=1e-4)
    out = torch.full((64,), float("nan"))
    lib.call("read_write", [out, 1])
    assert (out == 5.0).all()


@pytest.mark.parametrize("order", ORDERS)
def test_different_stores_stay_a_race(sim, order: str) -> None:
    lib = sim(STORES_SRC, order=order)
    with pytest.raises(RaceError, match="different value") as e:
        lib.call("stores", [torch.randn(64), torch.empty(1), 0])
    assert e.value.line == 7 and e.value.kernel == "warp_sums"
    with pytest.raises(RaceError) as e:              # read-after-write or write-after-read, by order
        lib.call("read_write", [torch.empty(64), 0])
    assert e.value.line in (17, 18)


# ----------------------------------------------------------------------------------------------------
# 3. dynamic shared memory above 48 KB with cudaFuncSetAttribute
# ----------------------------------------------------------------------------------------------------

OPTIN_SRC = r"""
#include <cuda_runtime.h>
__global__ void big_smem_sum(const float* x, float* y, int n) {
    extern __shared__ float buf[];          // n floats
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];
    __syncthreads();
    if (threadIdx.x == 0) { float s = 0.0f; for (int i = 0; i < n; ++i) s += buf[i]; y[0] = s; }
}
void optin(const float* x, float* y, int* status, int n, int optin_bytes) {
    if (optin_bytes > 0) {
        int e = cudaFuncSetAttribute(big_smem_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, optin_bytes);
        cudaMemcpy(status, &e, sizeof e, cudaMemcpyHostToDevice);  // (host code cannot write device memory)
    }
    big_smem_sum<<<1, 128, n * sizeof(float)>>>(x, y, n);
}
"""


def test_dynamic_shared_memory_opt_in(sim) -> None:
    lib = sim(OPTIN_SRC)
    n = 25000                                         # 100000 bytes: above 48 KB
    x, y, st = torch.randn(n), torch.full((1,), float("nan")), torch.full((1,), -1, dtype=torch.int32)
    with pytest.raises(LaunchError, match="100000.*49152"):
        lib.call("optin", [x, y, st, n, 0])          # no opt-in: refused, naming both numbers
    lib.call("optin", [x, y, st, n, 100000])
    assert st[0] == 0
    torch.testing.assert_close(y[0], x.sum(), rtol=1e-4, atol=1e-3)
    with pytest.raises(LaunchError, match="110000.*100000"):
        lib.call("optin", [torch.randn(27500), y, st, 27500, 100000])   # above its own opt-in
    with pytest.raises(LaunchError, match="240000.*232448"):
        lib.call("optin", [torch.randn(60000), y, st, 60000, 240000])   # above the H100's 227 KB
    assert st[0] != 0                                 # the opt-in itself was refused (cudaErrorInvalidValue)


# ----------------------------------------------------------------------------------------------------
# 4. host code is plain C++
# ----------------------------------------------------------------------------------------------------

HOST_SRC = r"""
#include <cuda_runtime.h>
__global__ void axpy_opt(const float* x, float* y, const float* bias, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + (bias ? bias[i] : 0.0f);
}
void plain_host(const float* x, float* y, int n) {
    int blockDim = 128;                      // host locals may use the built-ins' names
    dim3 gridDim((n + blockDim - 1) / blockDim);
    int threadIdx = 0;
    axpy_opt<<<gridDim, blockDim>>>(x, y, NULL, n);
    axpy_opt<<<gridDim, blockDim + threadIdx>>>(x, y, nullptr, n);
}
"""


def test_host_locals_named_like_builtins_and_null_arguments(sim) -> None:
    lib = sim(HOST_SRC)
    n = 1000
    x, y = torch.randn(n), torch.full((n,), float("nan"))
    lib.call("plain_host", [x, y, n])
    torch.testing.assert_close(y, 2 * x)


IF_ELSE_SRC = r"""
#if defined(USE_WIDE)
void first(float* y, int n) {
#else
void first(float* y, int n, int unused) {
#endif
    (void)y; (void)n;
}
void second(float* y) { (void)y; }
"""


def test_launcher_discovery_survives_if_else_braces() -> None:
    assert {"first", "second"} <= set(find_launchers(IF_ELSE_SRC))


# ----------------------------------------------------------------------------------------------------
# 5. host assert() and exit()
# ----------------------------------------------------------------------------------------------------

ASSERT_SRC = r"""
#include <cassert>
#include <cstdlib>
__global__ void fill(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1.0f; }
void checked_fill(float* y, int n) {
    assert(n > 0 && "n must be positive");
    fill<<<1, 64>>>(y, n);
}
void quits(float* y, int code) {
    if (code) exit(code);
    fill<<<1, 64>>>(y, 64);
}
"""


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "fast"])
def test_host_assert_and_exit_are_reported(sim, checked: bool) -> None:
    lib = sim(ASSERT_SRC, checked=checked)
    y = torch.full((64,), float("nan"))
    with pytest.raises(KernelError, match=r"assert\(n > 0 && \"n must be positive\"\) failed") as e:
        lib.call("checked_fill", [y, 0])
    assert e.value.line == 6 and "test.cu:6" in str(e.value)
    lib.call("checked_fill", [y, 64])                # a fresh worker
    assert (y == 1.0).all()
    with pytest.raises(KernelError, match=r"exit\(3\)") as e:
        lib.call("quits", [y, 3])
    assert e.value.line == 10 and "test.cu:10" in str(e.value)
    y.fill_(float("nan"))
    lib.call("quits", [y, 0])
    assert (y == 1.0).all()


FORK_SRC = r"""
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
__global__ void fill(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1.0f; }
// A launcher that forks a helper process and waits for it, as host code that daemonises or shells out does.
// how = 0: the child calls exit(3); how = 1: the child returns from the launcher (into the worker's loop).
void forks(float* y, int how) {
    pid_t child = fork();
    if (child == 0) {
        if (how == 0) exit(3);
        return;
    }
    int status = 0;
    waitpid(child, &status, 0);
    fill<<<1, 64>>>(y, 64);
}
void quits(float* y, int code) { if (code) exit(code); fill<<<1, 64>>>(y, 64); }
"""


@pytest.mark.parametrize("how", [0, 1], ids=["child-exits", "child-returns"])
def test_a_forked_child_does_not_answer_for_the_worker(sim, how: int) -> None:
    """The child shares the worker's pipes: its exit() must not be reported as the worker's (that report reached
    the checker as the answer to a later call and failed other tasks, on the H100 machine), and a child that
    returns from the launcher must not answer the call or read the next request (the parent would wait for it
    forever)."""
    lib = sim(FORK_SRC, timeout_s=20)
    for _ in range(3):  # the same worker serves call after call
        y = torch.full((64,), float("nan"))
        lib.call("forks", [y, how])
        assert (y == 1.0).all()
    y = torch.full((64,), float("nan"))
    with pytest.raises(KernelError, match=r"launcher quits called exit\(3\)"):  # the worker's own exit() is reported
        lib.call("quits", [y, 3])


# ----------------------------------------------------------------------------------------------------
# 6. warp masks: shuffles outside the mask, exact __activemask()
# ----------------------------------------------------------------------------------------------------

WARP_SRC = r"""
__global__ void half_warp_sum(const float* x, float* y) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 16) {
        for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0x0000ffffu, v, o);   // partners stay below 16
        if (threadIdx.x == 0) y[0] = v;
    }
}
__global__ void half_warp_overread(const float* x, float* y) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 16) {
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0x0000ffffu, v, o);
        if (threadIdx.x == 0) y[0] = v;
    }
}
void shfl_ok(const float* x, float* y) { half_warp_sum<<<1, 32>>>(x, y); }
void shfl_bad(const float* x, float* y) { half_warp_overread<<<1, 32>>>(x, y); }

__global__ void masks(unsigned* out) {
    int lane = threadIdx.x % 32;
    unsigned m;
    if (lane < 10) m = __activemask();
    else m = __activemask();
    unsigned all = __activemask();
    unsigned odd = 0;
    if (lane % 2) odd = __activemask();
    out[3 * threadIdx.x] = m; out[3 * threadIdx.x + 1] = all; out[3 * threadIdx.x + 2] = odd;
}
void active(unsigned* out) { masks<<<1, 48>>>(out); }
"""


@pytest.mark.parametrize("order", ORDERS)
def test_shuffle_outside_mask_is_diagnosed(sim, order: str) -> None:
    lib = sim(WARP_SRC, order=order)
    x, y = torch.randn(32), torch.full((1,), float("nan"))
    lib.call("shfl_ok", [x, y])
    torch.testing.assert_close(y[0], x[:16].sum(), rtol=1e-5, atol=1e-5)
    with pytest.raises(BarrierError, match="reads lane 16, which is not in the mask") as e:
        lib.call("shfl_bad", [x, y])
    assert e.value.line == 12


@pytest.mark.parametrize("order", ORDERS)
def test_activemask_is_the_lanes_at_one_call_site(sim, order: str) -> None:
    lib = sim(WARP_SRC, order=order)
    out = torch.zeros(48 * 3, dtype=torch.int32)
    lib.call("active", [out.view(torch.int32)])
    got = out.view(48, 3).numpy().astype("uint32")
    for t in range(48):
        lane, width = t % 32, 32 if t < 32 else 16
        full = (1 << width) - 1
        low = (1 << min(10, width)) - 1
        assert got[t, 0] == (low if lane < 10 else full & ~low), t
        assert got[t, 1] == full, t
        assert got[t, 2] == (full & 0xAAAAAAAA if lane % 2 else 0), t


# ----------------------------------------------------------------------------------------------------
# 8. (issue 15) tensor views of every shape the loader accepts
# ----------------------------------------------------------------------------------------------------

RELU_SRC = r"""
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
void relu(const float* x, float* y, int n) { if (n > 0) relu_kernel<<<(n + 63) / 64, 64>>>(x, y, n); }
"""


def _views() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    base = torch.randn(64)
    grid = torch.randn(8, 10)
    out_base = torch.full((64,), float("nan"))
    out_grid = torch.full((8, 10), float("nan"))
    return [
        ("strided 1-element", torch.randn(2)[::2], torch.full((2,), float("nan"))[::2]),
        ("0-element", torch.randn(0), torch.empty(0)),
        ("0-element slice", base[5:5], out_base[5:5]),
        ("offset into a storage", base[7:40], out_base[3:36]),
        ("2-D contiguous row slice", grid[2:5], out_grid[4:7]),
        ("1-element column of a 2-D tensor", grid[3:4, 2:3], out_grid[0:1, 9:10]),
    ]


@pytest.mark.parametrize("case", range(6), ids=[v[0] for v in _views()])
def test_views_the_loader_accepts(tmp_path, case: int) -> None:
    _, x, y = _views()[case]
    src = tmp_path / "relu.cu"
    src.write_text(RELU_SRC)
    m = cc.load(str(src), ["relu"], backend="sim")
    storage = y._base if y._base is not None else y
    before = storage.clone()
    m.relu(x, y, x.numel())
    torch.testing.assert_close(y, x.clamp_min(0))
    # nothing outside the view was touched
    y_idx = torch.zeros(storage.numel(), dtype=torch.bool)
    if y.numel():
        flat = torch.arange(storage.numel()).view(storage.shape)
        sel = flat.as_strided(y.shape, y.stride(), y.storage_offset())
        y_idx[sel.reshape(-1)] = True
    outside = ~y_idx.view(storage.shape)
    assert torch.equal(storage[outside].isnan(), before[outside].isnan())


def test_non_contiguous_views_keep_the_clear_error(tmp_path) -> None:
    src = tmp_path / "relu.cu"
    src.write_text(RELU_SRC)
    m = cc.load(str(src), ["relu"], backend="sim")
    with pytest.raises(ValueError, match="contiguous"):
        m.relu(torch.randn(8)[::2], torch.empty(4), 4)


def test_lesson01_stub_takes_a_strided_one_element_view() -> None:
    """The issue-15 report: the untouched stub must fail cleanly (NaN outputs), not crash in the course."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    stub = root / "lessons" / "01_relu" / "relu.cu"
    m = cc.load(str(stub), ["relu_v1_scalar"], backend="sim")
    y = torch.full((1,), float("nan"))
    m.relu_v1_scalar(torch.randn(2)[::2], y, 1)   # must not raise inside the course
    assert y.numel() == 1



# ----------------------------------------------------------------------------------------------------
# 6. global memory in checked mode: uninitialised cudaMalloc reads, races between threads and blocks
# ----------------------------------------------------------------------------------------------------

GLOBAL_SRC = r"""
#include <cuda_runtime.h>
__global__ void copy_k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
void uninit_read(float* y, int n, int init) {
    float* d; cudaMalloc(&d, n * sizeof(float));
    if (init == 1) cudaMemset(d, 0, n * sizeof(float));
    if (init == 2) cudaMemcpy(d, y, (n - 1) * sizeof(float), cudaMemcpyDeviceToDevice);  // the last one stays unset
    copy_k<<<(n + 63) / 64, 64>>>(d, y, n);
    cudaFree(d);
}
__global__ void one_slot(float* out, int same) {
    out[0] = same ? 1.0f : (float)(blockIdx.x * blockDim.x + threadIdx.x);
}
void global_waw(float* out, int same) { one_slot<<<4, 32>>>(out, same); }
__global__ void shift_left(float* x, int n) {      // in place: reads the element its neighbour overwrites
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i + 1 < n) x[i] = x[i + 1] * 2.0f;
}
void global_rw(float* x, int n) { shift_left<<<(n + 31) / 32, 32>>>(x, n); }
void global_rw_fixed(const float* x, float* y, int n) { copy_k<<<(n + 31) / 32, 32>>>(x + 1, y, n - 1); }
"""


def test_uninitialised_cudamalloc_reads(sim) -> None:
    lib = sim(GLOBAL_SRC)
    n = 100
    y = torch.randn(n)
    with pytest.raises(UninitializedReadError, match=r"cudaMalloc buffer \(line 8\)\[\d+\]") as e:
        lib.call("uninit_read", [y.clone(), n, 0])
    assert e.value.line == 5
    out = y.clone()
    lib.call("uninit_read", [out, n, 1])
    assert (out == 0).all()
    with pytest.raises(UninitializedReadError, match=r"\[99\]"):
        lib.call("uninit_read", [y.clone(), n, 2])


@pytest.mark.parametrize("order", ORDERS)
def test_global_races(sim, order: str) -> None:
    lib = sim(GLOBAL_SRC, order=order)
    out = torch.full((1,), float("nan"))
    lib.call("global_waw", [out, 1])                 # 128 threads, 4 blocks, one value: no race
    assert out[0] == 1.0
    with pytest.raises(RaceError, match="different value") as e:
        lib.call("global_waw", [out, 0])
    assert e.value.line == 15
    with pytest.raises(RaceError) as e:
        lib.call("global_rw", [torch.randn(100), 100])
    assert e.value.line == 20
    x, y = torch.randn(100), torch.full((99,), float("nan"))
    lib.call("global_rw_fixed", [x, y, 100])
    torch.testing.assert_close(y, x[1:])


# A learner's grid-stride loop with the wrong stride (blockDim.x, not blockDim.x * gridDim.x): the 7 blocks
# store the same values to the same elements, on several OS threads at once. Identical stores are no race
# whatever the timing (the verdict once compared a store with the word as it was before the other block's
# store landed); one element that one block stores differently stays a race.
STRIDE_SRC = r"""
__global__ void relu(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x) y[i] = fmaxf(x[i], 0.0f);
}
void relu_overlapping(const float* x, float* y, int n) { relu<<<7, 256>>>(x, y, n); }
__global__ void relu_one_differs(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x)
        y[i] = fmaxf(x[i], 0.0f) + (blockIdx.x == 6 && i == n - 1 ? 1.0f : 0.0f);   // block 6: another value
}
void relu_one_race(const float* x, float* y, int n) { relu_one_differs<<<7, 256>>>(x, y, n); }
"""


@pytest.mark.parametrize("order", ORDERS)
def test_identical_global_stores_from_many_blocks_are_not_a_race(sim, order: str) -> None:
    lib = sim(STRIDE_SRC, "relu.cu", order=order, timeout_s=120.0)
    n = 1048579
    for x in (torch.randn(n), torch.ones(n)):
        y = torch.full((n,), float("nan"))
        lib.call("relu_overlapping", [x, y, n])
        assert torch.equal(y, x.clamp_min(0.0))
    with pytest.raises(RaceError, match=r"thread \(2,0,0\).* writes y\[1048578\] .*different value") as e:
        lib.call("relu_one_race", [torch.randn(n), torch.full((n,), float("nan")), n])
    assert e.value.line == 8 and e.value.kernel == "relu_one_differs"


def test_global_races_are_not_checked_in_fast_mode(sim) -> None:
    lib = sim(GLOBAL_SRC, checked=False)
    out = torch.full((1,), float("nan"))
    lib.call("global_waw", [out, 0])                 # fast mode: some thread's value, no diagnosis
    assert 0 <= out[0] < 128


# ----------------------------------------------------------------------------------------------------
# 7. the audit: common constructs run right; the rest are refused naming the construct and the line
# ----------------------------------------------------------------------------------------------------

SUPPORTED_SRC = r"""
#include <cuda_runtime.h>
#include <cstdio>
__constant__ float c_scale[2];
static __device__ int d_calls;
__global__ void __launch_bounds__(128, 2) features(const float* __restrict__ x, float* __restrict__ y,
                                                   double* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    auto twice = [] __device__ (float v) { return 2.0f * v; };
    float acc = 0.0f;
#pragma unroll 4
    for (int k = 0; k < 4; ++k) acc += c_scale[0];
    if (i < n) {
        y[i] = twice(__ldg(&x[i])) + acc;
        atomicAdd(total, (double)x[i]);
    }
    __nanosleep(10);
    if (i == 0) { atomicAdd(&d_calls, 1); printf("features ran\n"); }
}
__global__ void plus_one(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += 1.0f; }
void supported(const float* x, float* y, double* total, int* calls, int n) {
    float scale[2] = {0.25f, 0.0f};
    cudaMemcpyToSymbol(c_scale, scale, sizeof(scale));
    int zero = 0;
    cudaMemcpyToSymbol(d_calls, &zero, sizeof(int));
    features<<<(n + 127) / 128, 128>>>(x, y, total, n);
    void (*kernel_ptr)(float*, int) = plus_one;         // a launch through a function pointer
    kernel_ptr<<<(n + 127) / 128, 128>>>(y, n);
    void* args[] = {&y, &n};
    cudaLaunchKernel(plus_one, dim3((n + 127) / 128), dim3(128), args, 0, 0);
    cudaMemcpyFromSymbol(calls, d_calls, sizeof(int));
}
void erased(float* y, int n) {
    void* args[] = {&y, &n};
    cudaLaunchKernel((const void*)plus_one, dim3(1), dim3(128), args, 0, 0);
}
"""


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "fast"])
def test_common_constructs_run_right(sim, checked: bool, capsys) -> None:
    lib = sim(SUPPORTED_SRC, checked=checked)
    n = 300
    x, y = torch.randn(n), torch.full((n,), float("nan"))
    total, calls = torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.int32)
    lib.call("supported", [x, y, total, calls, n])
    torch.testing.assert_close(y, 2 * x + 1.0 + 2.0)
    torch.testing.assert_close(total[0], x.double().sum())
    assert calls[0] == 1
    assert "features ran" in capsys.readouterr().out
    with pytest.raises(LaunchError, match=r"cast to void\* is not supported.*test.cu:35"):
        lib.call("erased", [y, n])


REFUSED = {
    "texture and surface memory": "__global__ void k(cudaTextureObject_t t, float* y) {\n"
                                  "    y[0] = tex1Dfetch<float>(t, 0); }",
    "grid-wide synchronisation": "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
                                 "__global__ void k(float* y) { cg::this_grid().sync(); y[0] = 1; }",
    "thread-block clusters": "__global__ void __cluster_dims__(2, 1, 1) k(float* y) { y[0] = 1; }",
    "inline PTX": "__global__ void k(float* y) { asm volatile(\"membar.gl;\"); y[0] = 1; }",
}


@pytest.mark.parametrize("what", list(REFUSED))
def test_unsupported_constructs_are_refused_at_build_time(what: str) -> None:
    from cudacourse.errors import UnsupportedError
    from cudacourse.sim import rewrite

    src = "#include <cuda_runtime.h>\n\n" + REFUSED[what] + "\n"
    bad_line = next(i + 1 for i, ln in enumerate(src.splitlines()) if ("Texture" in ln or "this_grid" in ln or
                                                                      "__cluster" in ln or "cudaGraph" in ln or
                                                                      "asm" in ln))
    with pytest.raises(UnsupportedError, match=what.split()[0]) as e:
        rewrite(src, "k.cu")
    assert e.value.line == bad_line
    assert f"k.cu:{bad_line}" in str(e.value)
