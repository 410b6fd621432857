"""cuda_fp8.h on the simulator (cudacourse/sim/runtime/ccsim_fp8.h): the C++ types and the C interface.

The float -> fp8 conversion itself is checked bit for bit against PyTorch over every representable value and the
boundaries by lesson 08's graded tests (tests/test_08_fp8.py, task 8.1's cast_to_fp8_intrinsic); here: the
types' constructors (they saturate), the x2/x4 packing order, the widening and integer conversions, the half and
bf16 entry points, the refused names, and where a CUDA toolkit is installed the toolkit header's own host code as
the reference (benchmarks/fp8_header_check/run.sh, on every 997th float here).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import build

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "cudacourse" / "sim" / "runtime"

SRC = r"""
#include <cuda_fp8.h>

// the types from float (saturating constructors) and back: y[i] bits, f[i] = float(type)
__global__ void types_kernel(const float* x, unsigned char* y4, unsigned char* y5, float* f4, float* f5, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_fp8_e4m3 a(x[i]);
    __nv_fp8_e5m2 b(x[i]);
    y4[i] = a.__x;
    y5[i] = b.__x;
    f4[i] = float(a);
    f5[i] = float(b);
}
void types(const float* x, unsigned char* y4, unsigned char* y5, float* f4, float* f5, int n) {
    types_kernel<<<(n + 127) / 128, 128>>>(x, y4, y5, f4, f5, n);
}

// pairs and quads: out[0..1] = x2 bits, out[2..5] = x4 bits (little-endian), back[0..3] = float4 of the quad
__global__ void vectors_kernel(const float* x, unsigned char* out, float* back) {
    __nv_fp8x2_e4m3 p(make_float2(x[0], x[1]));
    __nv_fp8x4_e4m3 q(make_float4(x[0], x[1], x[2], x[3]));
    out[0] = p.__x & 0xff; out[1] = p.__x >> 8;
    for (int k = 0; k < 4; ++k) out[2 + k] = (q.__x >> (8 * k)) & 0xff;
    float4 f = float4(q);
    back[0] = f.x; back[1] = f.y; back[2] = f.z; back[3] = f.w;
    __nv_fp8x2_e5m2 h(__floats2half2_rn(x[0], x[1]));
    out[6] = h.__x & 0xff; out[7] = h.__x >> 8;
    __nv_fp8x4_e5m2 bq(__floats2bfloat162_rn(x[0], x[1]), __floats2bfloat162_rn(x[2], x[3]));
    for (int k = 0; k < 4; ++k) out[8 + k] = (bq.__x >> (8 * k)) & 0xff;
}
void vectors(const float* x, unsigned char* out, float* back) { vectors_kernel<<<1, 1>>>(x, out, back); }

// every code: integer conversions of both kinds (int, unsigned char, signed char, bool) and the half bits
__global__ void ints_kernel(int* out) {
    int c = threadIdx.x;
    __nv_fp8_e4m3 a; a.__x = (unsigned char)c;
    __nv_fp8_e5m2 b; b.__x = (unsigned char)c;
    out[8 * c + 0] = int(a); out[8 * c + 1] = (unsigned char)a; out[8 * c + 2] = (signed char)a;
    out[8 * c + 3] = bool(a);
    out[8 * c + 4] = int(b); out[8 * c + 5] = (unsigned char)b; out[8 * c + 6] = (signed char)b;
    out[8 * c + 7] = __nv_cvt_fp8_to_halfraw((unsigned char)c, __NV_E4M3).x;
}
void ints(int* out) { ints_kernel<<<1, 256>>>(out); }
"""


@pytest.fixture(scope="module")
def lib():
    m = build(SRC, "fp8_api.cu")
    yield m
    m.close()


def _decode(codes: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    return codes.view(dt).float()


def test_types_saturate_and_round_trip(lib):
    """The constructors saturate (448, 57344 for anything larger, infinities included) and round to nearest
    even; float(type) gives the value back (NaN as a NaN)."""
    vals = torch.tensor([0.0, -0.0, 1.0, 3.3, 448.0, 464.0, 465.0, 1e9, -1e9, float("inf"), -float("inf"),
                         57344.0, 61440.0, 1e-3, 2.0**-9, 2.0**-10 * 1.5, 2.0**-17, float("nan")], dtype=torch.float32)
    n = vals.numel()
    y4, y5 = torch.zeros(n, dtype=torch.uint8), torch.zeros(n, dtype=torch.uint8)
    f4, f5 = torch.zeros(n), torch.zeros(n)
    lib.call("types", [vals, y4, y5, f4, f5, n])
    want4 = vals.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).clone()
    want5 = vals.clamp(-57344, 57344).to(torch.float8_e5m2).view(torch.uint8).clone()
    want4[vals.isnan()] = 0x7F
    want5[vals.isnan()] = 0x7F
    assert torch.equal(y4, want4), (y4, want4)
    assert torch.equal(y5, want5), (y5, want5)
    finite = ~vals.isnan()
    assert torch.equal(f4[finite], _decode(want4, torch.float8_e4m3fn)[finite])
    assert torch.equal(f5[finite], _decode(want5, torch.float8_e5m2)[finite])
    assert bool(f4[-1].isnan()) and bool(f5[-1].isnan())


def test_pairs_and_quads_pack_x_in_the_low_byte(lib):
    x = torch.tensor([1.5, -2.0, 1000.0, 0.125], dtype=torch.float32)
    out = torch.zeros(12, dtype=torch.uint8)
    back = torch.zeros(4)
    lib.call("vectors", [x, out, back])
    e4 = x.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    e5 = x.to(torch.float8_e5m2).view(torch.uint8)
    assert out[:2].tolist() == e4[:2].tolist(), "__nv_fp8x2_e4m3: .x goes to the low byte"
    assert out[2:6].tolist() == e4.tolist(), "__nv_fp8x4_e4m3: x, y, z, w from the low byte up"
    assert torch.equal(back, e4.view(torch.float8_e4m3fn).float()), "float4(__nv_fp8x4_e4m3)"
    assert out[6:8].tolist() == e5[:2].tolist(), "__nv_fp8x2_e5m2 from __half2"
    assert out[8:12].tolist() == e5.tolist(), "__nv_fp8x4_e5m2 from two __nv_bfloat162"


def test_integer_and_half_conversions_of_every_code(lib):
    """int(): toward zero, NaN -> 0; unsigned char saturates at 0 and 255, signed char at -128 and 127; bool is
    false for +-0 only; e5m2 infinities saturate; the half bits of e4m3 (NaN -> 0x7FFF)."""
    out = torch.zeros(256 * 8, dtype=torch.int32)
    lib.call("ints", [out])
    got = out.view(256, 8)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for col, dt in ((0, torch.float8_e4m3fn), (4, torch.float8_e5m2)):
        v = codes.view(dt).double()
        nan = v.isnan()
        trunc = torch.where(nan, 0.0, v.clamp(-2.0**31, 2.0**31 - 1).trunc())
        assert torch.equal(got[:, col], trunc.to(torch.int32)), f"int() of {dt}"
        uc = torch.where(nan, 0.0, v.clamp(0, 255).trunc())
        assert torch.equal(got[:, col + 1], uc.to(torch.int32)), f"unsigned char of {dt}"
        sc = torch.where(nan, 0.0, v.clamp(-128, 127).trunc())
        assert torch.equal(got[:, col + 2], sc.to(torch.int32)), f"signed char of {dt}"
    assert torch.equal(got[:, 3], ((codes.to(torch.int32) & 0x7F) != 0).to(torch.int32)), "bool()"
    half = codes.view(torch.float8_e4m3fn).half().view(torch.int16).to(torch.int32) & 0xFFFF
    nan = codes.view(torch.float8_e4m3fn).float().isnan()
    half[nan] = 0x7FFF
    assert torch.equal(got[:, 7], half), "__nv_cvt_fp8_to_halfraw (e4m3)"


def test_refused_names_say_so(tmp_path):
    """The MX scale format (e8m0) is refused by name: the build fails naming it."""
    (tmp_path / "e8m0.cpp").write_text('#include "ccsim.h"\nvoid f() { __nv_fp8_e8m0 s(1.0f); (void)s; }\n')
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-I", str(RUNTIME), "e8m0.cpp"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "not_available_on_the_simulator___nv_fp8_e8m0" in r.stderr


def _cuda_include() -> Path | None:
    for root in sorted(Path("/usr/local").glob("cuda*")):
        if (root / "include" / "cuda_fp8.hpp").is_file():
            return root / "include"
    return None


@pytest.mark.skipif(_cuda_include() is None, reason="no CUDA toolkit's cuda_fp8.hpp here to compare with")
def test_bit_exact_with_the_toolkit_header():
    """ccsim_fp8.h against the toolkit's cuda_fp8.hpp host code (benchmarks/fp8_header_check/run.sh: all 256 codes,
    every half and bf16 input, random doubles, and here every 997th float, each kind and saturation mode)."""
    env = {"PATH": "/usr/bin:/bin", "CUDA_INCLUDE": str(_cuda_include())}
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "fp8_header_check" / "run.sh"), "997"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and re.search(r"^mismatches: 0$", r.stdout, re.M), r.stdout[-3000:] + r.stderr[-2000:]


def test_every_name_of_cuda_fp8_h_is_provided_or_refused(tmp_path):
    """Each function and type name of cuda_fp8.h (CUDA 13.0's list) is visible to ``using ::name;`` or refused."""
    names = ["__nv_cvt_double_to_fp8", "__nv_cvt_double2_to_fp8x2", "__nv_cvt_float_to_fp8", "__nv_cvt_float2_to_fp8x2",
             "__nv_cvt_halfraw_to_fp8", "__nv_cvt_halfraw2_to_fp8x2", "__nv_cvt_bfloat16raw_to_fp8",
             "__nv_cvt_bfloat16raw2_to_fp8x2", "__nv_cvt_fp8_to_halfraw", "__nv_cvt_fp8x2_to_halfraw2",
             "__nv_fp8_e4m3", "__nv_fp8_e5m2", "__nv_fp8x2_e4m3", "__nv_fp8x2_e5m2", "__nv_fp8x4_e4m3",
             "__nv_fp8x4_e5m2", "__nv_fp8_storage_t", "__nv_fp8x2_storage_t", "__nv_fp8x4_storage_t",
             "__nv_saturation_t", "__nv_fp8_interpretation_t"]
    src = '#include "ccsim.h"\n' + "".join(f"namespace probe_{i} {{ using ::{n}; }}\n" for i, n in enumerate(names))
    src += "static_assert(__NV_SATFINITE != __NV_NOSAT && __NV_E4M3 != __NV_E5M2, \"enums\");\n"
    (tmp_path / "probe.cpp").write_text(src)
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-I", str(RUNTIME), "probe.cpp"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
