"""A missing __syncthreads() is named as the race it is, whatever the thread order (issue 34, item 5).

Before the fix the thread that ran first found its neighbour's shared element unwritten and was reported as an
``UninitializedReadError`` (advice: loop bounds first), while another order reported the same bug as a race. Now
a read of unwritten shared memory waits (the thread is stopped before the access) until the barrier interval
resolves: another thread writing the element in that interval makes it a race, nobody writing it an
uninitialised read. Every case runs under forward, reverse and two shuffled orders.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import build

from cudacourse.errors import RaceError, UninitializedReadError

ORDERS = ["forward", "reverse", "shuffle:1", "shuffle:20261128"]

# Kernels in the style of widely used public code: the coalesced transpose of NVIDIA's "An Efficient Matrix
# Transpose in CUDA C/C++" (TILE_DIM 32, BLOCK_ROWS 8) and reduction #1 of Harris's "Optimizing Parallel
# Reduction in CUDA", each with a barrier taken out; plus the genuine uninitialised reads that must stay that.
SRC = r"""
#include <cuda_runtime.h>
#define TILE_DIM 32
#define BLOCK_ROWS 8

__global__ void transposeCoalesced(float* odata, const float* idata, int width, int height) {
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        tile[threadIdx.y + j][threadIdx.x] = idata[(y + j) * width + x];                  // WRITE_T
    // __syncthreads() missing here
    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];                 // READ_T
}
void transpose(const float* in, float* out, int n) {
    dim3 grid(n / TILE_DIM, n / TILE_DIM), block(TILE_DIM, BLOCK_ROWS);
    transposeCoalesced<<<grid, block>>>(out, in, n, n);
}

__global__ void reduce0(const float* g_idata, float* g_odata, unsigned n) {
    extern __shared__ float sdata[];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = i < n ? g_idata[i] : 0.0f;                                              // WRITE_R
    // __syncthreads() missing here
    for (unsigned s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) sdata[tid] += sdata[tid + s];                             // READ_R
        __syncthreads();
    }
    if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}
void reduce(const float* in, float* out, int n) {
    reduce0<<<(n + 255) / 256, 256, 256 * sizeof(float)>>>(in, out, (unsigned)n);
}

// warp-synchronous code without __syncwarp(): lanes read their neighbour's slot
__global__ void warp_swap(const float* x, float* y) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];                                                                         // WRITE_W
    y[t] = s[t ^ 1];                                                                     // READ_W
}
void swap_pairs(const float* x, float* y, int n) { warp_swap<<<1, 64>>>(x, y); }

// byte-sized elements share a shadow word: still a race, not a false uninitialised read
__global__ void byte_swap(const float* x, float* y) {
    __shared__ unsigned char s[64];
    int t = threadIdx.x;
    s[t] = (unsigned char)(x[t] > 0.0f);                                                 // WRITE_B
    y[t] = (float)s[t ^ 1];                                                              // READ_B
}
void swap_bytes(const float* x, float* y, int n) { byte_swap<<<1, 64>>>(x, y); }

// the counter is set by thread 0 but the others add to it before any barrier
__global__ void count_positive(const float* x, float* y) {
    __shared__ int count;
    if (threadIdx.x == 0) count = 0;                                                     // WRITE_C
    if (x[threadIdx.x] > 0.0f) atomicAdd(&count, 1);                                     // ATOMIC_C
    __syncthreads();
    if (threadIdx.x == 0) y[0] = (float)count;
}
void count(const float* x, float* y, int n) { count_positive<<<1, 64>>>(x, y); }

// genuine: only half the block fills the tile (a loop-bound bug); the other half reads unwritten slots
__global__ void half_filled(const float* x, float* y) {
    __shared__ float tile[128];
    int t = threadIdx.x;
    if (t < 64) tile[t] = x[t];
    __syncthreads();
    y[t] = tile[t];                                                                      // READ_U
}
void half_block(const float* x, float* y, int n) { half_filled<<<1, 128>>>(x, y); }

// genuine: nobody initialises the counter at all
__global__ void count_uninit(const float* x, float* y) {
    __shared__ int count;
    if (x[threadIdx.x] > 0.0f) atomicAdd(&count, 1);                                     // ATOMIC_U
    __syncthreads();
    if (threadIdx.x == 0) y[0] = (float)count;
}
void count_nothing(const float* x, float* y, int n) { count_uninit<<<1, 64>>>(x, y); }

// genuine: the element is written, but only after the next barrier (a later interval): not this race
__global__ void written_too_late(const float* x, float* y) {
    __shared__ float s[64];
    int t = threadIdx.x;
    float v = s[(t + 1) % 64];                                                           // READ_L
    __syncthreads();
    s[t] = x[t];
    y[t] = v;
}
void too_late(const float* x, float* y, int n) { written_too_late<<<1, 64>>>(x, y); }

// the same kernels, correct
__global__ void transpose_ok(float* odata, const float* idata, int width, int height) {
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        tile[threadIdx.y + j][threadIdx.x] = idata[(y + j) * width + x];
    __syncthreads();
    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        odata[(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
}
void transpose_good(const float* in, float* out, int n) {
    dim3 grid(n / TILE_DIM, n / TILE_DIM), block(TILE_DIM, BLOCK_ROWS);
    transpose_ok<<<grid, block>>>(out, in, n, n);
}
__global__ void warp_swap_ok(const float* x, float* y) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncwarp();
    y[t] = s[t ^ 1];
}
void swap_good(const float* x, float* y, int n) { warp_swap_ok<<<1, 64>>>(x, y); }
__global__ void count_ok(const float* x, float* y) {
    __shared__ int count;
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    if (x[threadIdx.x] > 0.0f) atomicAdd(&count, 1);
    __syncthreads();
    if (threadIdx.x == 0) y[0] = (float)count;
}
void count_good(const float* x, float* y, int n) { count_ok<<<1, 64>>>(x, y); }
"""

LINES = {tag: i + 1 for i, ln in enumerate(SRC.splitlines()) for tag in re.findall(r"// (\w+_\w)$", ln)}


@pytest.fixture(scope="module", params=ORDERS)
def lib(request):
    lib = build(SRC, "barriers.cu", order=request.param)
    yield lib
    lib.close()


def _run(lib, name: str, n: int = 64, out: int | None = None, arg: int | None = None
         ) -> tuple[Exception | None, torch.Tensor]:
    x = torch.randn(n, generator=torch.Generator().manual_seed(3))
    y = torch.full((out or n,), float("nan"))
    try:
        lib.call(name, [x, y, n if arg is None else arg])
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return e, y
    return None, y


def _assert_missing_barrier(err: Exception | None, read: str, write: str) -> None:
    assert isinstance(err, RaceError), f"expected RaceError, got {type(err).__name__}: {err}"
    msg = str(err)
    assert err.line == LINES[read], (err.line, msg)
    assert f"barriers.cu:{LINES[read]}" in msg and f"barriers.cu:{LINES[write]}" in msg, msg
    # the barrier is the advice, and it comes first: no loop-bound advice at all
    assert "__syncthreads()" in msg and "loop bounds" not in msg, msg


@pytest.mark.parametrize(("name", "n", "out", "arg", "read", "write"), [
    ("transpose", 64 * 64, 64 * 64, 64, "READ_T", "WRITE_T"),
    ("reduce", 1000, 4, 1000, "READ_R", "WRITE_R"),
    ("swap_pairs", 64, 64, 64, "READ_W", "WRITE_W"),
    ("swap_bytes", 64, 64, 64, "READ_B", "WRITE_B"),
])
def test_missing_barrier_is_a_race_in_every_order(lib, name, n, out, arg, read, write) -> None:
    err, _ = _run(lib, name, n, out, arg)
    _assert_missing_barrier(err, read, write)


def test_missing_barrier_after_counter_init(lib) -> None:
    """Atomics into a counter that thread 0 zeroes in the same interval: a race (in one order the atomic comes
    first and waits; in the other it follows the plain store: either way the barrier is named)."""
    err, _ = _run(lib, "count")
    assert isinstance(err, RaceError), f"{type(err).__name__}: {err}"
    assert f"barriers.cu:{LINES['ATOMIC_C']}" in str(err) and f"barriers.cu:{LINES['WRITE_C']}" in str(err), str(err)


@pytest.mark.parametrize(("name", "n", "tag", "thread"), [
    ("half_block", 128, "READ_U", (64, 0, 0)),
    ("count_nothing", 64, "ATOMIC_U", None),
    ("too_late", 64, "READ_L", (0, 0, 0)),
])
def test_genuine_uninitialised_read_stays_one(lib, name, n, tag, thread) -> None:
    err, _ = _run(lib, name, n)
    assert isinstance(err, UninitializedReadError), f"{type(err).__name__}: {err}"
    assert err.line == LINES[tag], (err.line, str(err))
    assert "loop bounds" in str(err), str(err)
    if thread is not None:   # the lowest-numbered reader is named, whatever the order
        assert err.thread == thread, str(err)


def test_correct_versions_pass(lib) -> None:
    n = 64 * 64
    x = torch.randn(n, generator=torch.Generator().manual_seed(5))
    y = torch.full((n,), float("nan"))
    lib.call("transpose_good", [x, y, 64])
    assert torch.equal(y.view(64, 64), x.view(64, 64).t())
    x, y = torch.randn(64), torch.full((64,), float("nan"))
    lib.call("swap_good", [x, y, 64])
    assert torch.equal(y, x.view(32, 2).flip(1).reshape(64))
    y = torch.full((64,), float("nan"))
    lib.call("count_good", [x, y, 64])
    assert y[0].item() == float((x > 0).sum())
