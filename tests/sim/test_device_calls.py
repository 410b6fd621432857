"""Device code that calls a host function is refused at build time, as nvcc refuses it (issue 36, item 4).

The cheats are written as an attacker would write them (the issue's kernel calling ``std::max_element``, and
styles the check was not designed around: a host helper behind a ``__device__`` function, inside a lambda, in
a functor, in an ``extern "C"`` kernel, in a header beside the file); the legitimate file uses everything CUDA
allows in device code, and must build.
"""

from __future__ import annotations

import re

import pytest
from conftest import build

from cudacourse.errors import CompileError

HEAD = "#include <cuda_runtime.h>\n#include <algorithm>\n#include <cstdlib>\n#include <vector>\n#include <limits>\n"

# name -> (kernel code with the bad call on the line marked // HOST, the callee's name as reported)
CHEATS = {
    "max_element": (r"""
__global__ void argmax_kernel(const float* x, int* out, int n) {
    if (threadIdx.x == 0) out[0] = (int)(std::max_element(x, x + n) - x);  // HOST
}
void run(const float* x, int* out, int n) { argmax_kernel<<<1, 32>>>(x, out, n); }
""", "std::max_element"),
    "host_helper": (r"""
int argmax_host(const float* x, int n) { int b = 0; for (int i = 1; i < n; ++i) if (x[i] > x[b]) b = i; return b; }
__global__ void argmax_kernel(const float* x, int* out, int n) {
    if (threadIdx.x == 0) out[0] = argmax_host(x, n);  // HOST
}
void run(const float* x, int* out, int n) { argmax_kernel<<<1, 32>>>(x, out, n); }
""", "argmax_host"),
    "nested_device": (r"""
namespace util { template <typename T> T biggest(const T* x, int n) { return *std::max_element(x, x + n); } }
__device__ float helper(const float* x, int n) { return util::biggest(x, n); }  // HOST
__global__ void k(const float* x, int* out, int n) { if (threadIdx.x == 0) out[0] = (int)helper(x, n); }
void run(const float* x, int* out, int n) { k<<<1, 32>>>(x, out, n); }
""", "util::biggest"),
    "lambda_sort": (r"""
__global__ void k(const float* x, int* out, int n) {
    auto median = [&]() { float v[8]; for (int i = 0; i < 8; ++i) v[i] = x[i];
                          std::sort(v, v + 8); return v[4]; };  // HOST
    if (threadIdx.x == 0) out[0] = (int)median();
}
void run(const float* x, int* out, int n) { k<<<1, 32>>>(x, out, n); }
""", "std::sort"),
    "functor": (r"""
struct Pick { int operator()(const float* x, int n) const { return (int)(std::max_element(x, x + n) - x); } };
template <typename F> __global__ void apply(const float* x, int* out, int n, F f) {
    if (threadIdx.x == 0) out[0] = f(x, n);  // HOST
}
void run(const float* x, int* out, int n) { apply<<<1, 32>>>(x, out, n, Pick{}); }
""", "Pick::operator()"),
    "extern_c": (r"""
static int pick(const float* x, int n) { return (int)(std::max_element(x, x + n) - x); }
extern "C" __global__ void argmax_c(const float* x, int* out, int n) { out[0] = pick(x, n); }  // HOST
void run(const float* x, int* out, int n) { argmax_c<<<1, 1>>>(x, out, n); }
""", "pick"),
    "vector": (r"""
__global__ void k(const float* x, int* out, int n) {
    std::vector<float> v(x, x + n);  // HOST
    out[0] = (int)v.size();
}
void run(const float* x, int* out, int n) { k<<<1, 1>>>(x, out, n); }
""", "std::vector"),
    "rand": (r"""
__global__ void k(const float* x, int* out, int n) { out[0] = rand() % n; }  // HOST
void run(const float* x, int* out, int n) { k<<<1, 1>>>(x, out, n); }
""", "rand"),
    "constexpr_min": (r"""
__global__ void k(const float* x, int* out, int n) {
    out[0] = (int)std::min(x[0], std::numeric_limits<float>::max());  // HOST
}
void run(const float* x, int* out, int n) { k<<<1, 1>>>(x, out, n); }
""", "std::min"),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_device_code_calling_host_code_is_refused(name) -> None:
    body, callee = CHEATS[name]
    src = HEAD + body
    line = next(i + 1 for i, ln in enumerate(src.splitlines()) if ln.rstrip().endswith("// HOST"))
    with pytest.raises(CompileError) as e:
        build(src, f"{name}.cu", device_calls=True).close()
    msg = str(e.value)
    assert e.value.line == line, (e.value.line, line, msg)
    assert f"{name}.cu:{line}: error:" in msg and callee in msg, msg
    assert "__device__" in msg and "nvcc" in msg, msg
    if name == "constexpr_min":
        assert "--expt-relaxed-constexpr" in msg, msg


def test_host_helper_in_a_header_beside_the_file(tmp_path) -> None:
    (tmp_path / "helpers.h").write_text("#pragma once\n#include <algorithm>\n"
                                        "inline int pick(const float* x, int n) {\n"
                                        "    return (int)(std::max_element(x, x + n) - x);\n}\n")
    cu = tmp_path / "argmax.cu"
    cu.write_text('#include <cuda_runtime.h>\n#include "helpers.h"\n'
                  "__global__ void k(const float* x, int* out, int n) { out[0] = pick(x, n); }\n"
                  "void run(const float* x, int* out, int n) { k<<<1, 1>>>(x, out, n); }\n")
    with pytest.raises(CompileError, match=r"argmax\.cu:3: error: device function k calls pick"):
        build(cu.read_text(), str(cu), device_calls=True).close()


# Everything here is allowed in device code by CUDA and must build (and run): the check must not refuse it.
LEGIT = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <utility>
#include <vector>
namespace cg = cooperative_groups;

struct Acc { float4 v; float s; };                       // implicit (non-trivial) constructor
struct Add { __device__ float operator()(float a, float b) const { return a + b; } };
struct P { float a; __host__ __device__ P(float v) : a(v) {} };
template <typename T> __device__ __forceinline__ T sq(T v) { return v * v; }
__host__ __device__ inline float cube(float v) { return v * v * v; }
template <int B> static __device__ float scaled(float v) {
    auto inc = [](float q) { return q + 1.f; };
    return inc(v) * B;
}
float __device__ trailing(float v) { return v; }
namespace { __device__ float anon(float v) { return -v; } }
template <typename F> __device__ float apply(F f, float v) { return f(v, 1.f); }

extern "C" __global__ void fill_one(float* y) { y[0] = 1.f; }

__global__ void legit(const float* x, float* y, int n) {
    __shared__ float tile[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    Acc acc; acc.v = make_float4(1.f, 2.f, 3.f, 4.f); acc.s = 0.f;
    struct Local { float k; __device__ float get() const { return k; } } loc{2.f};
    auto f = [=] __device__ (float v) { return sq(v) + cube(v); };
    float v = i < n ? x[i] : 0.f;
    tile[threadIdx.x] = v;
    __syncthreads();
    float r = f(v) + scaled<2>(v) + P(1.f).a + trailing(v) + anon(v) + apply(Add{}, v) + loc.get();
    r += expf(v) + sqrtf(fabsf(v)) + fminf(v, 1.f) + min(i, 3) + max(1.f, v) + std::exp(v) + std::abs(v) + __expf(v);
    r += (std::isnan(v) ? 1.f : 0.f) + acc.v.x + tile[threadIdx.x ^ 1] * 0.f;
    r += __half2float(__float2half(v)) * 0.f + __bfloat162float(__float2bfloat16(v)) * 0.f;
    r += __shfl_xor_sync(0xffffffff, v, 1) * 0.f;
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    r += warp.shfl(v, 0) * 0.f;
    assert(n > 0);
    if (i == 0 && n < 0) printf("never %d\n", n);
    if (i < n) { y[i] = r; atomicAdd(&y[n], 0.f); }
    float a = 1.f, b = 2.f; std::swap(a, b); r += std::move(a) * 0.f;
}
void run(const float* x, float* y, int n) {
    std::vector<float> host(4, 1.f);                    // host code may use the standard library freely
    float m = *std::max_element(host.begin(), host.end());
    legit<<<(n + 63) / 64, 64>>>(x, y, n + (int)(m - 1.f));
    fill_one<<<1, 1>>>(y + n);
}
"""


def test_everything_cuda_allows_in_device_code_builds_and_runs() -> None:
    import torch

    lib = build(LEGIT, "legit.cu", device_calls=True)
    try:
        x = torch.randn(100, generator=torch.Generator().manual_seed(1))
        y = torch.zeros(101)
        lib.call("run", [x, y, 100])
        assert torch.isfinite(y[:100]).all() and y[100].item() == 1.0
    finally:
        lib.close()


def test_device_heap_and_printf_are_device_functions() -> None:
    """new/delete, malloc/free, memcpy/memset and printf are CUDA device functions: the file builds."""
    src = HEAD + r"""
#include <cstring>
#include <cstdio>
__global__ void k(float* y) {
    float* a = new float[2]; float* b = (float*)malloc(8);
    memset(a, 0, 8); memcpy(b, a, 8); y[0] = b[1];
    delete[] a; free(b);
    if (y[0] > 1.f) printf("%f\\n", y[0]);
}
void run(const float* x, float* y, int n) { k<<<1, 1>>>(y); }
"""
    build(src, "heap.cu", device_calls=True).close()


def test_host_code_may_call_host_functions() -> None:
    """Launchers are host code: std::max_element there is fine (the check looks at device code only)."""
    src = HEAD + r"""
__global__ void k(float* y, float v) { y[threadIdx.x] = v; }
void run(const float* x, float* y, int n) { float h[3] = {1, 5, 2}; k<<<1, 4>>>(y, *std::max_element(h, h + 3)); }
"""
    build(src, "hostok.cu", device_calls=True).close()
    assert re.search(r"std::max_element", src)


def test_an_unchecked_build_never_stands_in_for_a_checked_one() -> None:
    """The simulator's own unit tests build without the check (conftest.build's default); such a build of a file
    has a cache key of its own, so the same file built afterwards for a learner is still refused."""
    body, callee = CHEATS["max_element"]
    src = HEAD + body + "// (unchecked first)\n"
    build(src, "unchecked_first.cu").close()  # no check: it builds
    with pytest.raises(CompileError, match=callee):
        build(src, "unchecked_first.cu", device_calls=True).close()


def test_the_call_the_learner_wrote_is_named_first() -> None:
    """On one line the compiler may list a container's helpers (its allocator) before the call that was written, or
    place one inside a library header (libstdc++ versions differ): the message names first the learner's lines, and
    on a line the call whose name is on it."""
    from cudacourse.sim.devcheck import HostCall, message, written_first

    src = '#line 1 "k.cu"\n__global__ void k() {\n    std::vector<float> v(8);  // here\n}\n'
    calls = [HostCall("/usr/include/c++/13/bits/allocator.h", 184, "k", "std::__new_allocator::~__new_allocator",
                      False),  # where g++ 13 places the destructor the vector brings along
             HostCall("k.cu", 2, "k", "std::allocator::allocator", False),
             HostCall("k.cu", 2, "k", "std::vector::vector", False),
             HostCall("k.cu", 2, "k", "std::allocator::~allocator", False),
             HostCall("k.cu", 1, "k", "helper", False)]
    ordered = written_first(calls, src)
    assert [h.callee for h in ordered] == ["helper", "std::vector::vector", "std::allocator::allocator",
                                           "std::allocator::~allocator", "std::__new_allocator::~__new_allocator"]
    assert message(ordered, lambda f: f).splitlines()[1].startswith("k.cu:2: error: device function k calls "
                                                                      "std::vector::vector")


def test_a_clean_verdict_serves_both_modes_and_a_refusal_is_never_kept(monkeypatch) -> None:
    """The check's verdict depends on the file's text, not on the mode: the fast build of a file whose checked build
    was found clean compiles once; a refused file is refused again in the other mode (no verdict is kept for it)."""
    import uuid

    from cudacourse.sim import build as sim_build

    runs: list[str] = []
    real = sim_build.devcheck.compile_and_check

    def counting(*args, **kw):
        runs.append(args[5])  # the learner's path
        return real(*args, **kw)

    monkeypatch.setattr(sim_build.devcheck, "compile_and_check", counting)
    tag = uuid.uuid4().hex  # a text no other run has built
    clean = (f"// {tag}\n#include <cuda_runtime.h>\n__global__ void k(float* y) {{ y[threadIdx.x] = 1.0f; }}\n"
             "void run(float* y) { k<<<1, 32>>>(y); }\n")
    build(clean, "clean.cu", checked=True, device_calls=True).close()
    build(clean, "clean.cu", checked=False, device_calls=True).close()
    assert runs == ["clean.cu"], runs
    body, _callee = CHEATS["max_element"]
    bad = f"// {tag}\n" + HEAD + body
    for checked in (True, False):
        with pytest.raises(CompileError, match="std::max_element"):
            build(bad, "bad.cu", checked=checked, device_calls=True).close()
    assert runs == ["clean.cu", "bad.cu", "bad.cu"], runs
