"""Atomics on every type, and shared memory: static/extern/multi-dim/padded arrays, helpers declaring
__shared__, float4 reinterpretation, poisoning, and the 48 KB limits."""

from __future__ import annotations

import pytest
import torch
from conftest import build

from cudacourse.errors import LaunchError, OutOfBoundsError

SRC = r"""
#include <cuda_runtime.h>

__global__ void int_atomics(int* a, unsigned* u, unsigned long long* ull, long long* ll) {
    int t = threadIdx.x + blockIdx.x * blockDim.x;   // 256 threads over 2 blocks
    atomicAdd(&a[0], 2); atomicSub(&a[1], 1); atomicMax(&a[2], t); atomicMin(&a[3], -t);
    atomicAnd(&a[4], ~(1 << (t % 31))); atomicOr(&a[5], 1 << (t % 31)); atomicXor(&a[6], 1);
    if (t == 7) atomicExch(&a[7], 77);
    atomicCAS(&a[8], 0, t + 1);
    atomicAdd(&u[0], 3u); atomicSub(&u[1], 1u); atomicMax(&u[2], (unsigned)t); atomicMin(&u[3], (unsigned)t);
    atomicInc(&u[4], 9u); atomicDec(&u[5], 1000u); atomicAnd(&u[6], 0xFFu); atomicOr(&u[7], 1u << (t % 32));
    atomicXor(&u[8], 1u); atomicCAS(&u[9], 0u, 5u); if (t == 3) atomicExch(&u[10], 33u);
    atomicAdd(&ull[0], 1ull << 33); atomicMax(&ull[1], (unsigned long long)t);
    atomicMin(&ull[2], (unsigned long long)t + 10);
    atomicCAS(&ull[3], 0ull, 99ull); atomicExch(&ull[4], 4ull); atomicAnd(&ull[5], 0xF0ull); atomicOr(&ull[6], 2ull);
    atomicXor(&ull[7], 1ull);
    atomicAdd(&ll[0], -3ll); atomicMax(&ll[1], (long long)t); atomicMin(&ll[2], -(long long)t);
}
void ints(int* a, unsigned* u, unsigned long long* ull, long long* ll) { int_atomics<<<2, 128>>>(a, u, ull, ll); }

__global__ void float_atomics(float* f, double* d) {
    int t = threadIdx.x + blockIdx.x * blockDim.x;
    atomicAdd(&f[0], 0.5f); atomicAdd(&d[0], 0.25);
    if (t == 5) { atomicExch(&f[1], 5.5f); atomicExch(&d[1], 6.5); }
    atomicMax(&f[2], (float)t); atomicMin(&f[3], -(float)t); atomicSub(&f[4], 1.0f);
}
void floats(float* f, double* d) { float_atomics<<<4, 64>>>(f, d); }

__global__ void shared_histogram(const int* v, int* hist, int n) {
    __shared__ int h[16];
    int t = threadIdx.x;
    if (t < 16) h[t] = 0;
    __syncthreads();
    for (int i = t; i < n; i += blockDim.x) atomicAdd(&h[v[i] & 15], 1);
    __syncthreads();
    if (t < 16) hist[t] = h[t];
}
void histogram(const int* v, int* hist, int n) { shared_histogram<<<1, 64>>>(v, hist, n); }

// ---- shared memory forms -----------------------------------------------------------------------
#define TILE 8
__device__ float helper_sum(const float* x) {
    __shared__ float buf[64];
    int t = threadIdx.x;
    buf[t] = x[t];
    __syncthreads();
    float s = buf[t] + buf[(t + 1) % 64];
    __syncthreads();
    return s;
}
__global__ void shared_forms(const float* x, float* y, int* flags) {
    // a comment before the declaration; and one inside it
    __shared__ float /* padded, multi-dim */ tile[TILE][TILE + 1];  // padded, multi-dim
    __shared__ int counter, other;
    static __shared__ __align__(16) float vec[64];
    extern __shared__ float dyn[];
    extern __shared__ int dyn_alias[];
    int t = threadIdx.x;
    tile[t / TILE][t % TILE] = x[t];
    vec[t] = 2.0f * x[t];
    dyn[t] = 3.0f * x[t];
    if (t == 0) { counter = 0; other = 0; }
    __syncthreads();
    atomicAdd(&counter, 1);
    float4 q = reinterpret_cast<float4*>(vec)[t / 4];  // 16-byte access
    __syncthreads();
    y[t] = tile[t % TILE][t / TILE] + (t % 4 == 0 ? q.x : t % 4 == 1 ? q.y : t % 4 == 2 ? q.z : q.w) + dyn[t];
    y[64 + t] = helper_sum(x);
    if (t == 0) { flags[0] = counter; flags[1] = (void*)dyn == (void*)dyn_alias; }
}
void forms(const float* x, float* y, int* flags) { shared_forms<<<1, 64, 64 * sizeof(float)>>>(x, y, flags); }

__global__ void poison_kernel(float* f, int* i) {
    __shared__ float sf[4];
    __shared__ int si[4];
    int t = threadIdx.x;
    volatile float* pf = sf; volatile int* pi = si;  // read the poison on purpose
    (void)pf; (void)pi;
    f[t] = 0.0f; i[t] = 0;
    if (t == 0) {
        unsigned char* raw = (unsigned char*)sf;
        i[0] = raw[0];
    }
}
void poison(float* f, int* i) { poison_kernel<<<1, 4>>>(f, i); }

__global__ void dyn_overflow(float* y) {
    extern __shared__ float s[];
    int t = threadIdx.x;
    s[t] = 1.0f;
    __syncthreads();
    y[t] = s[t + 1];
}
void dyn_past_end(float* y) { dyn_overflow<<<1, 32, 32 * sizeof(float)>>>(y); }

__global__ void tiny(float* y) { y[threadIdx.x] = 1.0f; }
void too_much_dynamic(float* y) { tiny<<<1, 32, 64 * 1024>>>(y); }
void max_dynamic(float* y) { tiny<<<1, 32, 48 * 1024>>>(y); }

__global__ void big_static(float* y) {
    __shared__ float a[8192];   // 32 KB
    __shared__ float b[4096];   // 16 KB: exactly 48 KB in all
    int t = threadIdx.x;
    a[t] = 1.0f; b[t] = 2.0f;
    __syncthreads();
    y[t] = a[t] + b[t];
}
void static_48k(float* y) { big_static<<<1, 32>>>(y); }
void static_48k_plus_dynamic(float* y) { big_static<<<1, 32, 1024>>>(y); }
"""


@pytest.fixture(scope="module")
def lib():
    lib = build(SRC, "atomics_shared.cu")
    yield lib
    lib.close()


def test_integer_atomics(lib) -> None:
    a = torch.tensor([0, 0, -1, 0, -1, 0, 0, 0, 0], dtype=torch.int32)
    u = torch.tensor([0, 0, 0, 1000, 0, 0, 0xFFFF, 0, 0, 0, 0], dtype=torch.int64).to(torch.int32)
    ull = torch.tensor([0, 0, 1000, 0, 0, 0xFF, 0, 0], dtype=torch.int64)
    ll = torch.tensor([0, -5, 5], dtype=torch.int64)
    lib.call("ints", [a, u, ull, ll])
    n = 256
    assert a.tolist()[:4] == [2 * n, -n, n - 1, -(n - 1)]
    assert a[4].item() == -(2**31) and a[5].item() == 0x7FFFFFFF
    assert a[6].item() == 0 and a[7].item() == 77 and 1 <= a[8].item() <= n
    uu = [x & 0xFFFFFFFF for x in u.tolist()]
    assert uu[0] == 3 * n and uu[1] == (-n) & 0xFFFFFFFF and uu[2] == n - 1 and uu[3] == 0
    assert uu[4] == n % 10  # atomicInc wraps at 9
    assert uu[5] == 1000 - (n - 1) and uu[6] == 0xFF and uu[7] == 0xFFFFFFFF
    assert uu[8] == 0 and uu[9] == 5 and uu[10] == 33
    assert ull.tolist() == [n << 33, n - 1, 10, 99, 4, 0xF0, 2, 0]
    assert ll.tolist() == [-3 * n, n - 1, -(n - 1)]


def test_float_atomics(lib) -> None:
    f = torch.tensor([0.0, 0.0, -1.0, 1.0, 0.0])
    d = torch.zeros(2, dtype=torch.float64)
    lib.call("floats", [f, d])
    assert f.tolist() == [128.0, 5.5, 255.0, -255.0, -256.0]
    assert d.tolist() == [64.0, 6.5]


def test_shared_atomics_histogram(lib) -> None:
    v = torch.randint(0, 100, (1000,), dtype=torch.int32)
    h = torch.zeros(16, dtype=torch.int32)
    lib.call("histogram", [v, h, 1000])
    assert torch.equal(h, torch.bincount(v & 15, minlength=16).int())


def test_shared_forms(lib) -> None:
    x = torch.randn(64)
    y = torch.zeros(128)
    flags = torch.zeros(2, dtype=torch.int32)
    lib.call("forms", [x, y, flags])
    t = torch.arange(64)
    transposed = x.view(8, 8).t().reshape(-1)
    assert torch.allclose(y[:64], transposed + 2 * x + 3 * x)
    assert torch.allclose(y[64:], x + x[(t + 1) % 64])
    assert flags.tolist() == [64, 1]


def test_shared_poison_fast_mode() -> None:
    lib = build(SRC, "atomics_shared.cu", checked=False)
    try:
        f = torch.zeros(4)
        i = torch.zeros(4, dtype=torch.int32)
        lib.call("poison", [f, i])
        assert i[0].item() == 0xFF  # shared memory starts as 0xFF bytes
    finally:
        lib.close()


def test_dynamic_shared_past_end(lib) -> None:
    with pytest.raises(OutOfBoundsError, match="dynamic shared memory"):
        lib.call("dyn_past_end", [torch.zeros(32)])


def test_dynamic_shared_limit(lib) -> None:
    with pytest.raises(LaunchError, match="dynamic shared memory") as ei:
        lib.call("too_much_dynamic", [torch.zeros(32)])
    assert ei.value.kernel == "tiny" and ei.value.line is not None
    y = torch.zeros(32)
    lib.call("max_dynamic", [y])
    assert torch.all(y == 1)


def test_static_shared_limit_exact_and_over(lib) -> None:
    y = torch.zeros(32)
    lib.call("static_48k", [y])
    assert torch.all(y == 3)
    with pytest.raises(LaunchError, match="48 KB"):
        lib.call("static_48k_plus_dynamic", [y])


SUBWORD_SRC = r"""
#include <cuda_fp16.h>
__global__ void half_tile(const __half* x, __half* y, char* c) {
    __shared__ __half tile[64];
    __shared__ char flags[64];
    int t = threadIdx.x;
    tile[t] = x[t];            // neighbours write the two halves of one 4-byte word
    flags[t] = (char)(t & 1);
    __syncthreads();
    y[t] = tile[63 - t];
    c[t] = flags[63 - t];
}
void halves(const __half* x, __half* y, char* c) { half_tile<<<1, 64>>>(x, y, c); }

__global__ void half_race(const __half* x, __half* y) {
    __shared__ __half tile[64];
    int t = threadIdx.x;
    tile[t] = x[t];
    if (t & 1) y[t] = tile[t ^ 1];   // reads the neighbour's half without a barrier
}
void racy(const __half* x, __half* y) { half_race<<<1, 64>>>(x, y); }
"""


def test_subword_shared_arrays_have_no_false_races() -> None:
    from cudacourse.errors import RaceError

    lib = build(SUBWORD_SRC, "subword.cu")
    try:
        x = torch.randn(64).half()
        y = torch.zeros(64, dtype=torch.float16)
        c = torch.zeros(64, dtype=torch.int8)
        lib.call("halves", [x, y, c])
        assert torch.equal(y, x.flip(0))
        assert c.tolist() == [(63 - t) & 1 for t in range(64)]
        with pytest.raises(RaceError) as ei:
            lib.call("racy", [x, y])
        assert ei.value.line == SUBWORD_SRC.splitlines().index(
            "    if (t & 1) y[t] = tile[t ^ 1];   // reads the neighbour's half without a barrier") + 1
    finally:
        lib.close()
