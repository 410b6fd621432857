"""CUDA C++ syntax and built-ins the simulator accepts: qualifiers, templates, namespaces, launches,
globals, 3-D built-ins, vector and half types, math and bit intrinsics, printf and assert."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build

from cudacourse.errors import KernelError

SRC = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>
#include <device_launch_parameters.h>
#include <cstdio>
#include <cassert>

__constant__ float c_scale[4];
__device__ int d_counter;

namespace course {
template <typename T, int K>
__device__ __forceinline__ T times(T v) { return v * (T)K; }
}

template <typename T, int K>
__global__ void __launch_bounds__(256) scale_kernel(const T* __restrict__ x, T* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll 4
    for (int r = 0; r < 1; ++r)
        if (i < n) y[i] = course::times<T, K>(x[i]) * c_scale[0];
}

__host__ __device__ __noinline__ int idx3(int x, int y, int z, int nx, int ny) { return (z * ny + y) * nx + x; }

__global__ void builtins3d(int* out) {
    int gx = blockIdx.x * blockDim.x + threadIdx.x;
    int gy = blockIdx.y * blockDim.y + threadIdx.y;
    int gz = blockIdx.z * blockDim.z + threadIdx.z;
    int nx = gridDim.x * blockDim.x, ny = gridDim.y * blockDim.y;
    out[idx3(gx, gy, gz, nx, ny)] = gx + 100 * gy + 10000 * gz + (warpSize == 32 ? 0 : 1000000);
}

void scale2(const float* x, float* y, int n) {
    float s[4] = {2.0f, 0, 0, 0};
    cudaMemcpyToSymbol(c_scale, s, sizeof(s));
    scale_kernel<float, 3>
        <<<(n + 127) / 128,
           128>>>(x, y,
                  n);
}

void grid3d(int* out) {
    dim3 block(4, 2, 2);
    dim3 grid(2, 3, 2);
    builtins3d<<<grid, block, 0, 0>>>(out);
}

__global__ void vec_kernel(const float4* a, float2* b, int4* c, double2* d) {
    int i = threadIdx.x;
    float4 v = a[i];
    b[i] = make_float2(v.x + v.y, v.z * v.w);
    int4 q = make_int4(i, 2 * i, 3 * i, 4 * i);
    c[i] = q;
    double2 dd = make_double2(i * 0.5, -i * 0.25);
    d[i] = dd;
    uint3 u = make_uint3(1, 2, 3); (void)u;
}
void vectors(const float4* a, float2* b, int4* c, double2* d) { vec_kernel<<<1, 8>>>(a, b, c, d); }

__global__ void half_kernel(const __half* x, __half* y, float* f, __nv_bfloat16* bf, int n) {
    int i = threadIdx.x;
    if (i >= n) return;
    __half h = x[i];
    __half two = __float2half(2.0f);
    y[i] = __hadd(__hmul(h, two), __float2half(1.0f));
    f[i] = __half2float(h) + __low2float(__floats2half2_rn(0.5f, 3.0f));
    bf[i] = __float2bfloat16(__half2float(h) * 4.0f);
}
void halves(const __half* x, __half* y, float* f, __nv_bfloat16* bf, int n) { half_kernel<<<1, 32>>>(x, y, f, bf, n); }

__global__ void math_kernel(const float* x, float* y) {
    int i = threadIdx.x;
    float v = x[i];
    float r[20];
    r[0] = expf(v); r[1] = __expf(v); r[2] = exp2f(v); r[3] = logf(fabsf(v) + 1.0f); r[4] = __logf(fabsf(v) + 1.0f);
    r[5] = rsqrtf(fabsf(v) + 1.0f); r[6] = sqrtf(fabsf(v)); r[7] = fmaxf(v, 0.5f); r[8] = fminf(v, 0.5f);
    r[9] = tanhf(v); r[10] = erff(v); r[11] = __fdividef(v, 3.0f); r[12] = powf(fabsf(v), 1.5f);
    r[13] = fmaf(v, 2.0f, 1.0f) + __fmaf_rn(v, 0.0f, 0.0f); r[14] = sinf(v) + __sinf(0.0f);
    r[15] = cosf(v) + __cosf(0.0f) - 1.0f;
    r[16] = __saturatef(v); r[17] = max(v, 0.25f) + min(1, 2) - 1; r[18] = v > 0 ? CUDART_INF_F : -INFINITY;
    r[19] = (float)max(3, 7) + (float)min(2u, 5u);
    for (int k = 0; k < 20; ++k) y[i * 20 + k] = r[k];
}
void math(const float* x, float* y) { math_kernel<<<1, 16>>>(x, y); }

__global__ void bits_kernel(const unsigned* x, int* y) {
    int i = threadIdx.x;
    unsigned v = x[i];
    y[i * 6 + 0] = __popc(v);
    y[i * 6 + 1] = __clz((int)v);
    y[i * 6 + 2] = __ffs((int)v);
    y[i * 6 + 3] = (int)__brev(v);
    y[i * 6 + 4] = __popcll(((unsigned long long)v << 32) | v);
    y[i * 6 + 5] = (int)__ldg(&x[i]);
}
void bits(const unsigned* x, int* y) { bits_kernel<<<1, 8>>>(x, y); }

__global__ void hello_kernel(int n) {
    if (threadIdx.x < n) printf("hello from thread %d of block %d\n", threadIdx.x, blockIdx.x);
}
void hello(int n) { hello_kernel<<<2, 4>>>(n); cudaDeviceSynchronize(); }

__global__ void assert_kernel(const float* x, int n) {
    int i = threadIdx.x;
    if (i < n) assert(x[i] >= 0.0f);
}
void check_positive(const float* x, int n) { assert_kernel<<<1, 64>>>(x, n); }

__global__ void counter_kernel() { atomicAdd(&d_counter, 1); }
void count_threads(int* out) {
    int zero = 0;
    cudaMemcpyToSymbol(d_counter, &zero, sizeof(int));
    counter_kernel<<<3, 50>>>();
    cudaMemcpyFromSymbol(out, d_counter, sizeof(int));
}
"""


@pytest.fixture(scope="module")
def lib():
    lib = build(SRC, "syntax.cu")
    yield lib
    lib.close()


def test_templates_namespaces_constant_multiline_launch(lib) -> None:
    x = torch.randn(1000)
    y = torch.full_like(x, float("nan"))
    lib.call("scale2", [x, y, 1000])
    assert torch.allclose(y, x * 6)


def test_builtins_3d(lib) -> None:
    nx, ny, nz = 8, 6, 4
    out = torch.full((nx * ny * nz,), -1, dtype=torch.int32)
    lib.call("grid3d", [out])
    exp = torch.tensor([x + 100 * y + 10000 * z for z in range(nz) for y in range(ny) for x in range(nx)],
                       dtype=torch.int32)
    assert torch.equal(out, exp)


def test_vector_types(lib) -> None:
    a = torch.arange(32, dtype=torch.float32)
    b = torch.zeros(16)
    c = torch.zeros(32, dtype=torch.int32)
    d = torch.zeros(16, dtype=torch.float64)
    lib.call("vectors", [a, b, c, d])
    av = a.view(8, 4)
    assert torch.equal(b.view(8, 2)[:, 0], av[:, 0] + av[:, 1])
    assert torch.equal(b.view(8, 2)[:, 1], av[:, 2] * av[:, 3])
    i = torch.arange(8, dtype=torch.int32)
    assert torch.equal(c.view(8, 4), torch.stack([i, 2 * i, 3 * i, 4 * i], 1))
    assert torch.equal(d.view(8, 2)[:, 1], -i.double() * 0.25)


def test_half_and_bfloat16(lib) -> None:
    x = (torch.randn(20) * 10).half()
    y = torch.zeros(20, dtype=torch.float16)
    f = torch.zeros(20)
    bf = torch.zeros(20, dtype=torch.bfloat16)
    lib.call("halves", [x, y, f, bf, 20])
    assert torch.equal(y, (x * 2 + 1).half()) or torch.allclose(y.float(), x.float() * 2 + 1, rtol=2e-3)
    assert torch.allclose(f, x.float() + 0.5)
    assert torch.allclose(bf.float(), (x.float() * 4).bfloat16().float())


def test_math(lib) -> None:
    x = torch.linspace(-2, 2, 16)
    y = torch.zeros(16 * 20)
    lib.call("math", [x, y])
    r = y.view(16, 20)
    a = x.abs()
    exp = [x.exp(), x.exp(), torch.exp2(x), torch.log(a + 1), torch.log(a + 1), torch.rsqrt(a + 1), a.sqrt(),
           x.clamp(min=0.5), x.clamp(max=0.5), x.tanh(), torch.erf(x), x / 3, a.pow(1.5), x * 2 + 1, x.sin(),
           x.cos(), x.clamp(0, 1), torch.maximum(x, torch.tensor(0.25))]
    for k, e in enumerate(exp):
        assert torch.allclose(r[:, k], e, rtol=1e-5, atol=1e-6), k
    assert torch.equal(r[:, 18], torch.where(x > 0, math.inf, -math.inf))
    assert torch.all(r[:, 19] == 9)


def test_bit_intrinsics(lib) -> None:
    vals = [0, 1, 2, 0x80000000, 0xFFFFFFFF, 12, 0x00F0F000, 7]
    x = torch.tensor([v if v < 2**31 else v - 2**32 for v in vals], dtype=torch.int32)
    y = torch.zeros(8 * 6, dtype=torch.int32)
    lib.call("bits", [x, y])
    r = y.view(8, 6).tolist()
    for v, row in zip(vals, r, strict=True):
        brev = int(f"{v:032b}"[::-1], 2)
        exp = [bin(v).count("1"), 32 - v.bit_length(), (v & -v).bit_length(), brev - 2**32 if brev >= 2**31 else brev,
               2 * bin(v).count("1"), v - 2**32 if v >= 2**31 else v]
        assert row == exp, (v, row, exp)


def test_printf(lib, capsys) -> None:
    lib.call("hello", [2])
    out = capsys.readouterr().out
    assert out.count("hello from thread") == 4
    assert "hello from thread 1 of block 1" in out


def test_device_assert(lib) -> None:
    x = torch.ones(64)
    lib.call("check_positive", [x, 64])
    x[37] = -1
    with pytest.raises(KernelError) as ei:
        lib.call("check_positive", [x, 64])
    e = ei.value
    assert e.kind == "assert" and e.thread == (37, 0, 0) and e.line is not None
    assert "assert" in str(e) and "syntax.cu" in str(e)
    lib.call("check_positive", [torch.ones(64), 64])  # still usable


def test_device_global_and_symbol_copies(lib) -> None:
    out = torch.zeros(1, dtype=torch.int32)
    lib.call("count_threads", [out])
    assert out.item() == 150


def test_fast_mode_same_results() -> None:
    lib = build(SRC, "syntax.cu", checked=False)
    try:
        x = torch.randn(300)
        y = torch.zeros(300)
        lib.call("scale2", [x, y, 300])
        assert torch.allclose(y, x * 6)
    finally:
        lib.close()
