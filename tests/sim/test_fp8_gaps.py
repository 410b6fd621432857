"""Two simulator gaps found while writing lesson 08 (issue 40), each checked against what the CUDA toolkit says.

- cuda_fp16.h documents that ``__half2ll_r*`` and ``__half2ull_r*`` (all four rounding modes) return
  0x8000000000000000 for a NaN input; the simulator returned 0, as for the 32-bit conversions (which do return 0).
  cuda_bf16.h documents no such rule for ``__bfloat162ll_r*``: those keep 0. The fp8 types' 64-bit conversion
  operators (cuda_fp8.hpp: through ``__half2ll_rz``) give the same.
- cuda_runtime_api.h declares ``cudaMemsetAsync(void*, int, size_t, cudaStream_t stream = 0)``: a call without the
  stream argument compiled with nvcc and failed to compile on the simulator.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build

SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

// out[8 * i + k]: the 64-bit conversions of x[i] (as half): ll rz, rn, rd, ru, then ull rz, rn, rd, ru
__global__ void half_to_64_kernel(const float* x, long long* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half h = __float2half(x[i]);
    long long* o = out + 8 * i;
    o[0] = __half2ll_rz(h); o[1] = __half2ll_rn(h); o[2] = __half2ll_rd(h); o[3] = __half2ll_ru(h);
    o[4] = (long long)__half2ull_rz(h); o[5] = (long long)__half2ull_rn(h);
    o[6] = (long long)__half2ull_rd(h); o[7] = (long long)__half2ull_ru(h);
}
void half_to_64(const float* x, long long* out, int n) { half_to_64_kernel<<<1, 64>>>(x, out, n); }

// other[0..3]: __bfloat162ll_rz(NaN), __half2int_rz(NaN), long long(e4m3 NaN), unsigned long long(e5m2 NaN)
__global__ void others_kernel(long long* other) {
    const float nan = __int_as_float(0x7FC00000);
    other[0] = __bfloat162ll_rz(__float2bfloat16(nan));
    other[1] = __half2int_rz(__float2half(nan));
    __nv_fp8_e4m3 a; a.__x = 0x7F;
    __nv_fp8_e5m2 b; b.__x = 0x7E;
    other[2] = (long long)a;
    other[3] = (long long)(unsigned long long)b;
}
void others(long long* other) { others_kernel<<<1, 1>>>(other); }

// cudaMemsetAsync without its stream argument (the default stream, as the toolkit declares it)
void memset_default_stream(unsigned char* p, int n) { cudaMemsetAsync(p, 0x5A, n); }
"""

LLONG_MIN = -(2**63)


@pytest.fixture(scope="module")
def lib():
    m = build(SRC, "fp8_gaps.cu")
    yield m
    m.close()


def test_half_to_64_bit_integers_of_nan_and_of_numbers(lib) -> None:
    x = torch.tensor([float("nan"), -float("nan"), 2.75, -2.5, 0.0, float("inf"), -float("inf"), 65504.0],
                     dtype=torch.float32)
    out = torch.zeros(8 * x.numel(), dtype=torch.int64)
    lib.call("half_to_64", [x, out, x.numel()])
    got = out.view(-1, 8).tolist()
    for row in got[:2]:  # both NaNs: every mode, signed and unsigned, gives the bits 0x8000000000000000
        assert row == [LLONG_MIN] * 8, f"__half2ll_r*/__half2ull_r* of a NaN: {row} (cuda_fp16.h: 0x8000000000000000)"
    # numbers are unchanged: rz, rn, rd, ru; the unsigned ones clamp negatives to 0 and +inf to ULLONG_MAX (-1 here)
    assert got[2] == [2, 3, 2, 3, 2, 3, 2, 3]
    assert got[3] == [-2, -2, -3, -2, 0, 0, 0, 0]
    assert got[4] == [0] * 8
    assert got[5] == [2**63 - 1] * 4 + [-1] * 4
    assert got[6] == [LLONG_MIN] * 4 + [0] * 4
    assert got[7] == [65504] * 8
    assert not any(math.isnan(v) for v in x[2:].tolist())


def test_other_conversions_of_nan_keep_their_documented_results(lib) -> None:
    other = torch.full((4,), 7, dtype=torch.int64)
    lib.call("others", [other])
    bf16_ll, half_int, e4m3_ll, e5m2_ull = other.tolist()
    assert bf16_ll == 0, "__bfloat162ll_rz(NaN): cuda_bf16.h documents no 0x8000000000000000 rule; kept at 0"
    assert half_int == 0, "__half2int_rz(NaN) is 0 (cuda_fp16.h)"
    assert e4m3_ll == LLONG_MIN, "long long(__nv_fp8_e4m3 NaN) goes through __half2ll_rz"
    assert e5m2_ull == LLONG_MIN, "unsigned long long(__nv_fp8_e5m2 NaN) goes through __half2ull_rz"


def test_cudaMemsetAsync_takes_the_default_stream(lib) -> None:
    buf = torch.zeros(37, dtype=torch.uint8)
    lib.call("memset_default_stream", [buf, 37])
    assert buf.tolist() == [0x5A] * 37
