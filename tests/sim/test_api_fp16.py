"""__half and __nv_bfloat16 on the simulator: conversions bit-exact in every rounding mode, once-rounded
arithmetic, the intrinsic list of cuda_fp16.h/cuda_bf16.h, and the 16-bit atomics.

References: torch/numpy conversions (round-to-nearest-even), neighbours of that result for the directed
modes, exact rational arithmetic (fractions) where float64 could round twice.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import build

RUNTIME = Path(__file__).resolve().parents[2] / "cudacourse" / "sim" / "runtime"

SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// half/bf16 bit patterns -> float bits
__global__ void h2f_kernel(const short* bits, int* out, int n, int bf) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float f = bf ? __bfloat162float(__ushort_as_bfloat16((unsigned short)bits[i]))
                 : __half2float(__ushort_as_half((unsigned short)bits[i]));
    out[i] = __float_as_int(f);
}
void to_float(const short* bits, int* out, int n, int bf) { h2f_kernel<<<(n + 255) / 256, 256>>>(bits, out, n, bf); }

// float -> half/bf16 bits in mode 0..3 (rn, rz, rd, ru)
__global__ void f2h_kernel(const float* x, short* out, int n, int bf, int mode) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    unsigned short b;
    if (bf) {
        __nv_bfloat16 h = mode == 0 ? __float2bfloat16_rn(v) : mode == 1 ? __float2bfloat16_rz(v)
                        : mode == 2 ? __float2bfloat16_rd(v) : __float2bfloat16_ru(v);
        b = __bfloat16_as_ushort(h);
    } else {
        __half h = mode == 0 ? __float2half_rn(v) : mode == 1 ? __float2half_rz(v)
                 : mode == 2 ? __float2half_rd(v) : __float2half_ru(v);
        b = __half_as_ushort(h);
    }
    out[i] = (short)b;
}
void from_float(const float* x, short* out, int n, int bf, int mode) {
    f2h_kernel<<<(n + 255) / 256, 256>>>(x, out, n, bf, mode);
}

// long long -> half/bf16 in mode 0..3, and half/bf16 -> int in mode 0..3
__global__ void ll_kernel(const long long* x, short* out, int n, int bf, int mode) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long v = x[i];
    unsigned short b;
    if (bf) b = __bfloat16_as_ushort(mode == 0 ? __ll2bfloat16_rn(v) : mode == 1 ? __ll2bfloat16_rz(v)
                                     : mode == 2 ? __ll2bfloat16_rd(v) : __ll2bfloat16_ru(v));
    else b = __half_as_ushort(mode == 0 ? __ll2half_rn(v) : mode == 1 ? __ll2half_rz(v)
                              : mode == 2 ? __ll2half_rd(v) : __ll2half_ru(v));
    out[i] = (short)b;
}
void from_ll(const long long* x, short* out, int n, int bf, int mode) {
    ll_kernel<<<(n + 255) / 256, 256>>>(x, out, n, bf, mode);
}
__global__ void h2i_kernel(const __half* x, int* out, int n, int mode) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half h = x[i];
    out[i] = mode == 0 ? __half2int_rn(h) : mode == 1 ? __half2int_rz(h)
           : mode == 2 ? __half2int_rd(h) : __half2int_ru(h);
}
void half_to_int(const __half* x, int* out, int n, int mode) { h2i_kernel<<<(n + 255) / 256, 256>>>(x, out, n, mode); }

// arithmetic: op 0 add, 1 sub, 2 mul, 3 div, 4 fma(a, b, c), 5 hmax, 6 hmin, 7 add_sat; half2 path too
__global__ void arith_kernel(const __half* a, const __half* b, const __half* c, __half* out, int n, int op) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half x = a[i], y = b[i], z = c[i], r;
    switch (op) {
        case 0: r = __hadd(x, y); break;
        case 1: r = __hsub(x, y); break;
        case 2: r = __hmul(x, y); break;
        case 3: r = __hdiv(x, y); break;
        case 4: r = __hfma(x, y, z); break;
        case 5: r = __hmax(x, y); break;
        case 6: r = __hmin(x, y); break;
        default: r = __hadd_sat(x, y); break;
    }
    out[i] = r;
}
void arith(const __half* a, const __half* b, const __half* c, __half* out, int n, int op) {
    arith_kernel<<<(n + 127) / 128, 128>>>(a, b, c, out, n, op);
}
__global__ void arith2_kernel(const __half2* a, const __half2* b, const __half2* c, __half2* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = __hfma2(a[i], b[i], c[i]);
}
void fma2(const __half2* a, const __half2* b, const __half2* c, __half2* out, int n) {
    arith2_kernel<<<(n + 127) / 128, 128>>>(a, b, c, out, n);
}
__global__ void bf_arith_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, const __nv_bfloat16* c,
                                __nv_bfloat16* out, int n, int op) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 x = a[i], y = b[i], z = c[i];
    out[i] = op == 0 ? x + y : op == 1 ? x - y : op == 2 ? x * y : op == 3 ? x / y : __hfma(x, y, z);
}
void bf_arith(const __nv_bfloat16* a, const __nv_bfloat16* b, const __nv_bfloat16* c, __nv_bfloat16* out, int n,
              int op) {
    bf_arith_kernel<<<(n + 127) / 128, 128>>>(a, b, c, out, n, op);
}

// comparisons and math on half2 / bf16
__global__ void misc_kernel(const __half* a, const __half* b, int* flags, float* vals, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half x = a[i], y = b[i];
    __half2 p = __halves2half2(x, y), q = __halves2half2(y, x);
    flags[i * 8 + 0] = __heq(x, y);
    flags[i * 8 + 1] = __hltu(x, y);
    flags[i * 8 + 2] = __hbgt2(p, q);
    flags[i * 8 + 3] = (int)__hge2_mask(p, q);
    flags[i * 8 + 4] = __hisinf(x);
    flags[i * 8 + 5] = __hisnan(x);
    flags[i * 8 + 6] = __half2short_rz(x);
    flags[i * 8 + 7] = __half2uint_ru(x);
    vals[i * 4 + 0] = __half2float(hexp(x));
    vals[i * 4 + 1] = __half2float(hrsqrt(__habs(x)));
    vals[i * 4 + 2] = __low2float(h2sqrt(__habs2(p)));
    vals[i * 4 + 3] = __bfloat162float(htanh(__float2bfloat16(__half2float(x))));
}
void misc(const __half* a, const __half* b, int* flags, float* vals, int n) {
    misc_kernel<<<(n + 63) / 64, 64>>>(a, b, flags, vals, n);
}

// 16-bit atomics: every thread adds 1 to slot (i % slots)
__global__ void atomics_kernel(__half* h, __half2* h2, __nv_bfloat16* b, __nv_bfloat162* b2, int n, int slots) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int s = i % slots;
    atomicAdd(&h[s], __float2half(1.0f));
    atomicAdd(&h2[s], __floats2half2_rn(1.0f, 2.0f));
    atomicAdd(&b[s], __float2bfloat16(1.0f));
    atomicAdd(&b2[s], __floats2bfloat162_rn(2.0f, 1.0f));
}
void atomics(__half* h, __half2* h2, __nv_bfloat16* b, __nv_bfloat16* b2, int n, int slots) {
    // (bf16 pairs travel as a bf16 tensor of twice the length)
    atomics_kernel<<<(n + 127) / 128, 128>>>(h, h2, b, (__nv_bfloat162*)b2, n, slots);
}
"""

MODES = ["rn", "rz", "rd", "ru"]


@pytest.fixture(scope="module")
def lib():
    m = build(SRC, "fp16_api.cu")
    yield m
    m.close()


@pytest.fixture(scope="module")
def fast():
    m = build(SRC, "fp16_api.cu", checked=False)
    yield m
    m.close()


def _all_bits() -> torch.Tensor:
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)


# ----------------------------------------------------------------------------------------------------
# 16-bit -> float: every one of the 65536 patterns
# ----------------------------------------------------------------------------------------------------


def test_half_to_float_all_65536_patterns(fast):
    bits = _all_bits()
    out = torch.full((65536,), -1, dtype=torch.int32)
    fast.call("to_float", [bits, out, 65536, 0])
    ref = bits.view(torch.float16).float().view(torch.int32)
    nan = torch.isnan(bits.view(torch.float16))
    assert int(nan.sum()) == 2046
    assert torch.equal(out[~nan], ref[~nan]), "half -> float differs from the exact value"
    # NaN: the canonical 0x7fffffff, sign dropped (cuda_fp16.hpp's host conversion, like the GPU's cvt)
    assert (out[nan] == 0x7FFFFFFF).all()


def test_bf16_to_float_all_65536_patterns(fast):
    bits = _all_bits()
    out = torch.zeros(65536, dtype=torch.int32)
    fast.call("to_float", [bits, out, 65536, 1])
    ref = bits.to(torch.int32) << 16
    assert torch.equal(out, ref), "bf16 -> float must be the exact 16-bit shift"


# ----------------------------------------------------------------------------------------------------
# float -> 16-bit in every rounding mode: edge cases plus a large random sample of bit patterns
# ----------------------------------------------------------------------------------------------------


def _float_sample() -> np.ndarray:
    rng = np.random.default_rng(13)
    edges = [0.0, -0.0, 1.0, -1.0, 65504.0, 65504.5, 65519.99, 65520.0, 65536.0, 1e9, -65520.0, 2.0**-24,
             2.0**-25, 1.5 * 2.0**-25, 2.0**-26, 2.0**-14, 2.0**-14 - 2.0**-25, 1 + 2.0**-11, 1 + 3 * 2.0**-11,
             3.3895314e38, 3.4028235e38, 1.1754944e-38, 1.4e-45, -1.4e-45, 1 + 2.0**-8, 1 + 3 * 2.0**-8,
             np.inf, -np.inf, np.nan]
    halves = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    halves = halves[np.isfinite(halves)]
    mids = ((halves[:-1].astype(np.float64) + halves[1:].astype(np.float64)) / 2).astype(np.float32)  # ties
    rand_bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = (rng.standard_normal(100_000) * rng.choice([1e-6, 1e-3, 1.0, 100.0, 3e4], 100_000)).astype(np.float32)
    return np.concatenate([np.array(edges, dtype=np.float32), halves, mids, rand_bits, near])


def _half_modes_ref(x: np.ndarray) -> dict[str, np.ndarray]:
    """Bits of x rounded to half in each mode: RN by numpy, the others from RN's neighbours."""
    with np.errstate(over="ignore", invalid="ignore"):
        rn = x.astype(np.float16)
        back = rn.astype(np.float32)
        exact = back == x
        lo = np.where(back <= x, rn, np.nextafter(rn, np.float16(-np.inf)))
        hi = np.where(back >= x, rn, np.nextafter(rn, np.float16(np.inf)))
    rz = np.where(x > 0, lo, hi)
    out = {"rn": rn, "rz": np.where(exact, rn, rz), "rd": np.where(exact, rn, lo), "ru": np.where(exact, rn, hi)}
    return {k: v.view(np.uint16).astype(np.int32) for k, v in out.items()}


def _bf16_modes_ref(x: np.ndarray) -> dict[str, np.ndarray]:
    """Bits of x rounded to bf16: RN by torch; truncation and one step away from zero for the others."""
    u = x.view(np.uint32).astype(np.int64)
    trunc = u >> 16
    exact = (u & 0xFFFF) == 0
    away = np.where(exact, trunc, trunc + 1)
    neg = x < 0
    rn = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().astype(np.int64) & 0xFFFF
    return {"rn": rn, "rz": trunc, "rd": np.where(neg, away, trunc), "ru": np.where(neg, trunc, away)}


@pytest.mark.parametrize("bf", [0, 1], ids=["half", "bf16"])
@pytest.mark.parametrize("mode", range(4), ids=MODES)
def test_float_to_16bit_every_mode(fast, bf, mode):
    x = _float_sample()
    out = torch.zeros(len(x), dtype=torch.int16)
    fast.call("from_float", [torch.from_numpy(x), out, len(x), bf, mode])
    got = out.numpy().astype(np.int64) & 0xFFFF
    nan = np.isnan(x)
    assert (got[nan] == 0x7FFF).all(), "NaN must become the canonical NaN 0x7fff"
    ref = (_bf16_modes_ref if bf else _half_modes_ref)(x)[MODES[mode]] & 0xFFFF
    bad = np.nonzero(got[~nan] != ref[~nan])[0]
    assert len(bad) == 0, (f"{len(bad)} of {len(x)} differ; first: x={x[~nan][bad[0]]!r} "
                           f"got 0x{got[~nan][bad[0]]:04x} want 0x{ref[~nan][bad[0]]:04x}")


# ----------------------------------------------------------------------------------------------------
# Integer conversions: exact rational reference
# ----------------------------------------------------------------------------------------------------


def _round_exact(v: Fraction, eb: int, mb: int, mode: str) -> int:
    """Bits of the exact value ``v`` rounded to a format with ``eb`` exponent and ``mb`` fraction bits."""
    sign = 0x8000 if v < 0 else 0
    a = abs(v)
    bias = (1 << (eb - 1)) - 1
    emin = 1 - bias
    inf = ((1 << eb) - 1) << mb
    if a == 0:
        return sign
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, emin)
    q = a / Fraction(2) ** (e - mb)
    n = q.numerator // q.denominator
    frac = q - n
    away = (mode == "ru" and not sign) or (mode == "rd" and sign)
    if frac:
        if mode == "rn":
            n += 1 if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and n % 2) else 0
        elif away:
            n += 1
    bits = n if n < (1 << mb) else ((e + bias) << mb) + n - (1 << mb)
    if bits >= inf:
        return sign | (inf if mode == "rn" or away else inf - 1)
    return sign | bits


@pytest.mark.parametrize("bf", [0, 1], ids=["half", "bf16"])
def test_long_long_to_16bit_every_mode(fast, bf):
    vals = [0, 1, -1, 2047, 2049, 2051, 65504, 65519, 65520, 65535, -70000, 257, 259, 2**24 + 1, 2**53 + 1,
            2**60 - 1, -(2**60 - 1), 2**63 - 1, -(2**63), 12345678901, -987654321]
    rng = np.random.default_rng(5)
    vals += [int(v) for v in rng.integers(-(2**62), 2**62, 200)] + [int(v) for v in rng.integers(-5000, 5000, 200)]
    x = torch.tensor(vals, dtype=torch.int64)
    eb, mb = (8, 7) if bf else (5, 10)
    for mode in range(4):
        out = torch.zeros(len(vals), dtype=torch.int16)
        fast.call("from_ll", [x, out, len(vals), bf, mode])
        got = [int(b) & 0xFFFF for b in out]
        want = [_round_exact(Fraction(v), eb, mb, MODES[mode]) for v in vals]
        bad = [(v, hex(g), hex(w)) for v, g, w in zip(vals, got, want, strict=True) if g != w]
        assert not bad, f"mode {MODES[mode]}: {bad[:5]}"


def test_half_to_int_every_mode(fast):
    bits = _all_bits()
    h = bits.view(torch.float16)
    f = h.double()
    for mode, fn in enumerate([torch.round, torch.trunc, torch.floor, torch.ceil]):
        out = torch.zeros(65536, dtype=torch.int32)
        fast.call("half_to_int", [h.clone(), out, 65536, mode])
        ref = fn(f).clamp(-(2**31), 2**31 - 1)
        ref = torch.where(torch.isnan(f), torch.zeros_like(ref), ref).to(torch.int64)  # NaN -> 0, inf saturates
        assert torch.equal(out.to(torch.int64), ref), f"__half2int_{MODES[mode]}"


# ----------------------------------------------------------------------------------------------------
# Arithmetic: one rounding of the exact result
# ----------------------------------------------------------------------------------------------------


def _random_halves(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    h = torch.randint(-32768, 32768, (n,), generator=g, dtype=torch.int32).to(torch.int16).view(torch.float16)
    return torch.where(torch.isnan(h), torch.tensor(1.5, dtype=torch.float16), h)


@pytest.mark.parametrize("op", range(8), ids=["add", "sub", "mul", "div", "fma", "max", "min", "add_sat"])
def test_half_arithmetic_rounds_once(lib, op):
    n = 3000
    a, b, c = _random_halves(n, 1), _random_halves(n, 2), _random_halves(n, 3)
    out = torch.full((n,), float("nan"), dtype=torch.float16)
    lib.call("arith", [a, b, c, out, n, op])
    ad, bd, cd = a.double().numpy(), b.double().numpy(), c.double().numpy()
    with np.errstate(all="ignore"):
        if op == 4:  # fma: exact rational reference (float64 could round twice)
            want = []
            for x, y, z in zip(ad, bd, cd, strict=True):
                if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
                    want.append(np.float16(x * y + z))
                else:
                    bits = _round_exact(Fraction(x) * Fraction(y) + Fraction(z), 5, 10, "rn")
                    want.append(np.array([bits], dtype=np.uint16).view(np.float16)[0])
            ref = np.array(want, dtype=np.float16)
        else:
            exact = [ad + bd, ad - bd, ad * bd, ad / bd, None, np.fmax(ad, bd), np.fmin(ad, bd),
                     np.clip(np.nan_to_num(ad + bd, nan=0.0), 0, 1)][op]
            ref = exact.astype(np.float16)
    got = out.numpy()
    same = (got.view(np.uint16) == ref.view(np.uint16)) | (np.isnan(got) & np.isnan(ref))
    if op in (5, 6):  # +0/-0 ties: either zero is a valid max/min for numpy's fmax; compare values there
        same |= (got == ref)
    bad = np.nonzero(~same)[0]
    assert len(bad) == 0, f"{len(bad)} differ, first a={ad[bad[0]]} b={bd[bad[0]]} got {got[bad[0]]} want {ref[bad[0]]}"


def test_half2_fma_and_bf16_arithmetic(lib):
    n = 2000
    a, b, c = _random_halves(2 * n, 4), _random_halves(2 * n, 5), _random_halves(2 * n, 6)
    out = torch.full((2 * n,), float("nan"), dtype=torch.float16)
    lib.call("fma2", [a, b, c, out, n])
    ref = []
    for x, y, z in zip(a.double().tolist(), b.double().tolist(), c.double().tolist(), strict=True):
        if all(np.isfinite(v) for v in (x, y, z)):
            ref.append(_round_exact(Fraction(x) * Fraction(y) + Fraction(z), 5, 10, "rn"))
        else:
            with np.errstate(all="ignore"):
                ref.append(int(np.array([np.float16(x * y + z)]).view(np.uint16)[0]))
    got = out.view(torch.int16).numpy().astype(np.int64) & 0xFFFF
    nan_ok = np.isnan(out.numpy()) & np.array([(r & 0x7C00) == 0x7C00 and (r & 0x3FF) for r in ref], dtype=bool)
    assert ((got == np.array(ref)) | nan_ok).all()

    g = torch.Generator().manual_seed(9)
    xs = [torch.randn(n, generator=g).to(torch.bfloat16) * 100 for _ in range(3)]
    for op in range(5):
        out = torch.zeros(n, dtype=torch.bfloat16)
        lib.call("bf_arith", [*xs, out, n, op])
        x, y, z = (t.double().tolist() for t in xs)
        want = []
        for p, q, r in zip(x, y, z, strict=True):
            v = [Fraction(p) + Fraction(q), Fraction(p) - Fraction(q), Fraction(p) * Fraction(q),
                 Fraction(p) / Fraction(q) if q else None, Fraction(p) * Fraction(q) + Fraction(r)][op]
            want.append(_round_exact(v, 8, 7, "rn") if v is not None else None)
        got = (out.view(torch.int16).numpy().astype(np.int64) & 0xFFFF).tolist()
        pairs = enumerate(zip(got, want, strict=True))
        bad = [(i, hex(g_), hex(w)) for i, (g_, w) in pairs if w is not None and g_ != w]
        assert not bad, f"bf16 op {op}: {bad[:5]}"


def test_comparisons_and_math(lib):
    vals = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan"), 65504.0, 3.0, 0.5],
                        dtype=torch.float16)
    a = vals.repeat_interleave(len(vals))
    b = vals.repeat(len(vals))
    n = len(a)
    flags = torch.full((n * 8,), -7, dtype=torch.int32)
    out = torch.full((n * 4,), float("nan"))
    lib.call("misc", [a, b, flags, out, n])
    f = flags.view(n, 8)
    x, y = a.float(), b.float()
    assert torch.equal(f[:, 0].bool(), x == y)
    assert torch.equal(f[:, 1].bool(), ~(x >= y))  # unordered less: true on NaN
    assert torch.equal(f[:, 2].bool(), (x > y) & (y > x))  # both lanes (never both)
    lo_ge = (x >= y).to(torch.int64) * 0xFFFF
    hi_ge = (y >= x).to(torch.int64) * 0xFFFF
    assert torch.equal(f[:, 3].to(torch.int64) & 0xFFFFFFFF, lo_ge | (hi_ge << 16))
    assert torch.equal(f[:, 4], torch.where(torch.isinf(x), torch.sign(x), torch.zeros_like(x)).int())
    assert torch.equal(f[:, 5].bool(), torch.isnan(x))
    xd = torch.nan_to_num(x.double(), nan=0.0)
    assert torch.equal(f[:, 6], torch.trunc(xd).clamp(-32768, 32767).int())
    assert torch.equal(f[:, 7].to(torch.int64) & 0xFFFFFFFF, torch.ceil(xd).clamp(0, 2**32 - 1).to(torch.int64))
    v = out.view(n, 4)
    fin = torch.isfinite(x) & (x.abs() < 10)
    torch.testing.assert_close(v[fin, 0], torch.exp(x[fin]).half().float(), rtol=1e-3, atol=0)
    pos = fin & (x != 0)
    torch.testing.assert_close(v[pos, 1], torch.rsqrt(x[pos].abs()).half().float(), rtol=1e-3, atol=0)
    torch.testing.assert_close(v[fin, 2], torch.sqrt(x[fin].abs()).half().float(), rtol=0, atol=0)
    torch.testing.assert_close(v[fin, 3], torch.tanh(x[fin]).bfloat16().float(), rtol=8e-3, atol=0)


# ----------------------------------------------------------------------------------------------------
# Atomics, in checked and fast mode
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["checked", "fast"])
def test_16bit_atomics(lib, fast, mode):
    m = lib if mode == "checked" else fast
    n, slots = 1000, 7
    h = torch.zeros(slots, dtype=torch.float16)
    h2 = torch.zeros(2 * slots, dtype=torch.float16)
    b = torch.zeros(slots, dtype=torch.bfloat16)
    b2 = torch.zeros(2 * slots, dtype=torch.bfloat16)
    m.call("atomics", [h, h2, b, b2, n, slots])
    counts = torch.tensor([len(range(s, n, slots)) for s in range(slots)], dtype=torch.float32)
    assert torch.equal(h.float(), counts)
    assert torch.equal(h2.float().view(slots, 2), torch.stack([counts, 2 * counts], 1))
    # bf16 has 8 significant bits: 143 and 286 are not representable; the sum of +1s saturates where
    # x + 1 rounds back to x (256 for +1; 2 steps of 2 are exact up to 512)
    bf_ref = torch.zeros(slots)
    for s in range(slots):
        v = torch.tensor(0.0, dtype=torch.bfloat16)
        for _ in range(int(counts[s])):
            v = (v.float() + 1).bfloat16()
        bf_ref[s] = v.float()
    assert torch.equal(b.float(), bf_ref)
    assert torch.equal(b2.float().view(slots, 2)[:, 1], bf_ref)


# ----------------------------------------------------------------------------------------------------
# The intrinsic list of the real headers: every name is provided, or refused by name
# ----------------------------------------------------------------------------------------------------


def _cuda_include() -> Path | None:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return None
    for root in [Path(nvcc).resolve().parent.parent, *Path("/usr/local").glob("cuda*")]:
        if (root / "include" / "cuda_fp16.h").is_file():
            return root / "include"
    return None


def _header_names(text: str) -> set[str]:
    """Function and type names declared in a CUDA header (identifiers followed by '(' on code lines)."""
    names = set()
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped[0] in "/#*":
            continue
        names.update(re.findall(r"\b(__[a-z][a-z0-9_]*|h2?[a-z][a-z0-9_]*|atomicAdd|make_[a-z0-9_]+)\s*\(", line))
    return names - {"__x", "__y"}


@pytest.mark.skipif(_cuda_include() is None, reason="the CUDA toolkit's cuda_fp16.h is not installed here")
def test_every_intrinsic_of_the_cuda_headers_is_provided_or_refused(tmp_path):
    """Each name declared in cuda_fp16.h/cuda_bf16.h is visible to ``using ::name;`` (provided), or is one of
    ccsim_fp16.h's refused names (whose use fails to compile naming it)."""
    inc = _cuda_include()
    assert inc is not None
    ours = (RUNTIME / "ccsim_fp16.h").read_text()
    refused = set(re.findall(r"#define (\w+)\(\.\.\.\) CCSIM_FP16_REFUSED", ours))
    names = sorted(_header_names((inc / "cuda_fp16.h").read_text()) | _header_names((inc / "cuda_bf16.h").read_text()))
    assert len(names) > 250, f"only {len(names)} names found: the header format changed?"
    probe = [n for n in names if n not in refused]
    src = '#include "ccsim.h"\n' + "".join(f"namespace probe_{i} {{ using ::{n}; }}\n" for i, n in enumerate(probe))
    (tmp_path / "probe.cpp").write_text(src)
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-fmax-errors=0", "-I", str(RUNTIME), "probe.cpp"],
                       cwd=tmp_path, capture_output=True, text=True)
    missing = sorted({probe[int(m) - 2] for m in re.findall(r"probe\.cpp:(\d+):", r.stderr) if int(m) >= 2})
    assert not missing, "intrinsics of cuda_fp16.h/cuda_bf16.h neither provided nor refused: " + ", ".join(missing)
    # a refused name fails the build with its name in the message
    (tmp_path / "refused.cpp").write_text('#include "ccsim.h"\n'
                                          'void f(const __half* p) { __half h = __ldca(p); (void)h; }\n')
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-I", str(RUNTIME), "refused.cpp"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "not_available_on_the_simulator___ldca" in r.stderr
