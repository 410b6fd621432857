"""Graded checks of lesson 08 (FP8 and scaled formats): lessons/08_fp8/{fp8,gemm_fp8_hopper}.cu.

Tasks (ids match the TODOs in the kernel files; titles and points live in lessons/08_fp8/lesson.toml):
  8.1  float_to_fp8: float -> e4m3/e5m2 by hand, bit-exact over every representable value and the boundaries
  8.2  amax in one pass, and the scaled cast that records its input's amax (delayed scaling)
  8.3  rmsnorm_quant_1x128 (RMSNorm fused with 1x128 quantization) and quant_128x128 (weight blocks)
  8.4  gemm_fp8_blockscaled: the block scales promoted per 128-wide k-block, on CUDA cores
  8.5  gemm_fp8_wgmma: the same GEMM on Hopper's wgmma fed by TMA (GPU only: compute capability 9.0, sm_90a)
  8.6  speed: gemm_fp8_wgmma at 4096^3 against torch._scaled_mm with the same block scales (GPU only)
  8.7  speed: the quantization kernels of task 8.3 against the measured copy bandwidth (GPU only)

References. The conversions are compared bit for bit with PyTorch's float8_e4m3fn/float8_e5m2 casts, which round
to nearest even. PyTorch's handling of values past the largest finite one has changed between releases, so the
tests clamp to the largest finite value before casting (that is __NV_SATFINITE exactly) and apply cuda_fp8.h's
non-saturating rule themselves: past the rounding threshold (464 for e4m3, the midpoint between 448 and the
next step; 61440 for e5m2, where the tie rounds to the even code, infinity) the result is NaN 0x7F (e4m3) or
infinity 0x7C (e5m2) with the input's sign; a NaN input gives 0x7F.
The quantization kernels compute in fp32 exactly what the reference computes in fp32 (max, one division, one
product, one rounding), so those outputs are bit-exact too; after an RMSNorm, whose sum the kernel and the
reference add in different orders, each fp8 value must be a correct rounding of the fp64 value up to fp32
noise (2^-14 relative: an fp8 step is 2^-3, half of it 2^-4).
The GEMMs' inputs are fp8 values whose products are exact in fp32, so their only errors are the sums and the
bf16 rounding of C: at most 2^-8 of |C| for the rounding, plus 2^-16 (CUDA cores, fp32 sums) or 2^-10 (tensor
cores, whose FP8 sums keep fewer bits; README) of the sum of |a||w| terms.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import cudacourse as cc
from cudacourse import check

LESSON = "08_fp8"
DT = {0: torch.float8_e4m3fn, 1: torch.float8_e5m2}
NAME = {0: "e4m3", 1: "e5m2"}
MAXF = {0: 448.0, 1: 57344.0}  # largest finite values: codes 0x7E and 0x7B
OVER = {0: 0x7F, 1: 0x7C}      # what an overflow gives without saturation: NaN, infinity
AMAX_FLOOR = 1e-12


def _m() -> cc.Lesson:
    return cc.lesson(LESSON)


# wgmma with e4m3 operands is an instruction of compute capability 9.0 (sm_90a code). FP8 tensor cores exist from
# 8.9 (Ada, through mma.sync); the conversions and the CUDA-core tasks run on any GPU.
NEEDS_CC = {"8.5": (9, 0), "8.6": (9, 0)}


@pytest.fixture(autouse=True)
def _compute_capability(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("task")
    need = NEEDS_CC.get(marker.args[0]) if marker else None
    if need is None or not torch.cuda.is_available() or cc.lesson(LESSON).backend != "cuda":
        return
    have = torch.cuda.get_device_capability()
    if have < need:
        pytest.skip(f"not graded: task {marker.args[0]} needs compute capability {need[0]}.{need[1]} (wgmma with "
                    f"e4m3 operands is a Hopper instruction; FP8 tensor cores start at 8.9); this GPU is "
                    f"{have[0]}.{have[1]}")


def _watch(*ts: torch.Tensor) -> list[torch.Tensor]:
    """Views ``check.unchanged`` can compare (float8 tensors as their bytes)."""
    return [t.view(torch.uint8) if t.dtype in DT.values() else t for t in ts]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8).cpu()


def _byte_poison(n: int, g: torch.Generator, device: Any) -> torch.Tensor:
    """Random bytes: an unwritten output cannot match the expected bytes by luck."""
    return torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8).to(device)


def _assert_bits(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor | None, name: str, task: str,
                 hint: str) -> None:
    got, want = got.reshape(-1).cpu(), want.reshape(-1).cpu()
    bad = (got != want).nonzero().flatten()
    if not len(bad):
        return
    rows = []
    for i in bad[:6].tolist():
        xs = ""
        if x is not None:
            v = float(x.reshape(-1)[i])
            xs = f"x = {v!r} (0x{x.reshape(-1)[i : i + 1].view(torch.int32).item() & 0xFFFFFFFF:08x}), "
        rows.append(f"  [{i}] {xs}yours 0x{int(got[i]):02x}, expected 0x{int(want[i]):02x}")
    raise AssertionError(f"task {task}: {name}: {len(bad)} of {got.numel()} bytes differ:\n" + "\n".join(rows)
                         + f"\nHint: {hint}")


# ----------------------------------------------------------------------------------------------------
# References
# ----------------------------------------------------------------------------------------------------


def _finite_values(kind: int) -> torch.Tensor:
    """Every finite value of the format, as float64 (from PyTorch's decoding of all 256 codes)."""
    v = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(DT[kind]).double()
    return v[v.isfinite()]


def expected_fp8(x: torch.Tensor, kind: int, saturate: bool) -> torch.Tensor:
    """cuda_fp8.h's __nv_cvt_float_to_fp8 of float32 ``x`` (CPU), as bytes (see the module docstring)."""
    xc = x.clamp(-MAXF[kind], MAXF[kind])
    out = xc.to(DT[kind]).view(torch.uint8).clone()
    if not saturate:
        a = x.double().abs()
        over = a > 464.0 if kind == 0 else a >= 61440.0
        sign = torch.where(torch.signbit(x), 0x80, 0).to(torch.uint8)
        out[over] = (OVER[kind] | sign[over]).to(torch.uint8)
    out[x.isnan()] = 0x7F
    return out


def boundary_inputs(kind: int, g: torch.Generator) -> torch.Tensor:
    """float32 inputs: every finite value, the midpoints between neighbours (ties) and the floats either side of
    them, the overflow and underflow thresholds and their neighbours, float subnormals, zeros, infinities, NaNs,
    and random floats over the whole range; each with both signs."""
    f32 = torch.float32
    pos = torch.unique(_finite_values(kind).abs())                         # sorted, from 0
    mids = (pos[:-1] + pos[1:]) / 2                                        # exact: a few significant bits
    top = MAXF[kind] + (MAXF[kind] - float(pos[-2])) / 2                   # the overflow threshold
    special = torch.tensor([top, 2 * MAXF[kind], 1e30, 3.4028234663852886e38, float(pos[1]) / 2,
                            float(pos[1]) / 4, 1e-45, 1e-40, 1.1754943508222875e-38, 0.0], dtype=torch.float64)
    base = torch.cat([pos, mids, special]).to(f32)
    up = torch.nextafter(base, torch.full_like(base, math.inf))
    down = torch.nextafter(base, torch.zeros_like(base))
    rand = torch.exp2(torch.rand(3000, generator=g, dtype=torch.float64) * 60 - 40).to(f32)
    vals = torch.cat([base, up, down, rand])
    vals = torch.cat([vals, -vals, torch.tensor([math.inf, -math.inf], dtype=f32)])
    nans = torch.tensor([0x7FC00000, -0x400000, 0x7F800001, 0x7FFFFFFF], dtype=torch.int32).view(f32)  # +-qNaN, sNaN
    return torch.cat([vals, nans]).contiguous()


def ref_quant_1x128(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 bytes rows x cols, scales float[G][rows]) of x (rows x cols, CPU), all in fp32 as the kernels do."""
    rows, cols = x.shape
    G = (cols + 127) // 128
    xp = torch.zeros(rows, G * 128, dtype=torch.float32)
    xp[:, :cols] = x.float()
    xp = xp.view(rows, G, 128)
    amax = xp.abs().amax(-1).clamp_min(AMAX_FLOOR)
    inv = torch.tensor(448.0) / amax
    q = (xp * inv[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return q.reshape(rows, G * 128)[:, :cols].contiguous(), (amax / 448.0).T.contiguous()


def ref_quant_128x128(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 bytes, scales float[ceil(rows/128)][ceil(cols/128)]) of w (CPU), in fp32 as the kernel does."""
    rows, cols = w.shape
    R, Cb = (rows + 127) // 128, (cols + 127) // 128
    wp = torch.zeros(R * 128, Cb * 128, dtype=torch.float32)
    wp[:rows, :cols] = w.float()
    blocks = wp.view(R, 128, Cb, 128)
    amax = blocks.abs().amax(dim=(1, 3)).clamp_min(AMAX_FLOOR)
    inv = torch.tensor(448.0) / amax
    q = (blocks * inv[:, None, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return q.reshape(R * 128, Cb * 128)[:rows, :cols].contiguous(), (amax / 448.0).contiguous()


def half_ulp_e4m3(t: torch.Tensor) -> torch.Tensor:
    """Half the e4m3 spacing at |t| (float64): 2^(e - 4) for |t| in [2^e, 2^(e+1)), e at least -6 (subnormals)."""
    e = torch.floor(torch.log2(t.abs().clamp_min(2.0**-7))).clamp(-6, 8)
    return torch.exp2(e - 4)


def dequant_1x128(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """float64 values of e4m3 ``q`` (rows x cols) with 1x128 scales ``s`` (float[G][rows])."""
    cols = q.shape[1]
    per_col = s.double().T.repeat_interleave(128, dim=1)[:, :cols]
    return q.double() * per_col


def dequant_128x128(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    rows, cols = q.shape
    full = s.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:rows, :cols]
    return q.double() * full


# ----------------------------------------------------------------------------------------------------
# 8.1 Formats
# ----------------------------------------------------------------------------------------------------

HINT_81 = ("compare with cast_to_fp8_intrinsic at the indices shown. Check the shift (23 - mb, plus emin - e below "
           "2^emin), the tie (rem == half: round up only when q is odd), the subnormal floats (sig = u, e = -126), "
           "the carry (q reaching 2^(mb+1) moves into the exponent field by itself), and the overflow code (saturate "
           "? 0x7E/0x7B : 0x7F/0x7C), with the sign added last; a NaN is 0x7F whatever its sign.")


# The worked examples' own checks carry no task: they pass on the untouched stubs by design (graded tests fail there).


@pytest.mark.parametrize("kind", [0, 1], ids=["e4m3", "e5m2"])
def test_decode_every_code(kind: int) -> None:
    """The worked decoder against PyTorch on all 256 codes (NaN codes must decode to a NaN)."""
    m = _m()
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    out = check.poisoned(256, torch.float32, m.device)
    m.cast_from_fp8(codes.to(m.device), out, 256, kind)
    want = codes.view(DT[kind]).float()
    got = out.cpu()
    assert torch.equal(got.isnan(), want.isnan()), f"{NAME[kind]}: NaN codes decode wrongly"
    finite = ~want.isnan()
    assert torch.equal(got[finite].view(torch.int32), want[finite].view(torch.int32)), \
        f"{NAME[kind]}: decoded values differ from PyTorch's"


@pytest.mark.task("8.1")
@pytest.mark.parametrize("saturate", [1, 0], ids=["satfinite", "nosat"])
@pytest.mark.parametrize("kind", [0, 1], ids=["e4m3", "e5m2"])
def test_cast_to_fp8_bit_exact(kind: int, saturate: int) -> None:
    m = _m()
    g = check.rng(f"cast-{kind}-{saturate}")
    x = boundary_inputs(kind, g)
    n = x.numel()
    want = expected_fp8(x, kind, bool(saturate))
    xd = x.to(m.device)
    for fn in ("cast_to_fp8_intrinsic", "cast_to_fp8"):
        y = _byte_poison(n, g, m.device)
        with check.unchanged(xd, names=["x"]):
            getattr(m, fn)(xd, y, n, kind, saturate)
        hint = HINT_81 if fn == "cast_to_fp8" else ("the library's conversion itself differs: report it (simulator: "
                                                     "cudacourse/sim/runtime/ccsim_fp8.h)")
        _assert_bits(y, want, x, f"{fn} to {NAME[kind]} ({'saturating' if saturate else 'not saturating'})",
                     "8.1", hint)


@pytest.mark.task("8.1")
@pytest.mark.parametrize("n", [1, 255, 5003])
def test_cast_to_fp8_sizes(n: int) -> None:
    """Lengths that are not multiples of the block; random normal values (most are normal e4m3 values)."""
    m = _m()
    g = check.rng(f"cast-n-{n}")
    x = check.randn(n, g, "cpu", scale=100.0)
    full = _byte_poison(n + 64, g, m.device)
    tail = full[n:].cpu().clone()
    m.cast_to_fp8(x.to(m.device), full[:n], n, 0, 1)
    _assert_bits(full[:n], expected_fp8(x, 0, True), x, f"cast_to_fp8 n={n}", "8.1", HINT_81)
    assert torch.equal(full[n:].cpu(), tail), f"task 8.1: cast_to_fp8 n={n} wrote past the end of y"


# ----------------------------------------------------------------------------------------------------
# 8.2 amax and the scaled casts
# ----------------------------------------------------------------------------------------------------


def _amax_input(n: int, g: torch.Generator, device: Any) -> torch.Tensor:
    x = check.randn(n, g, "cpu", scale=3.0)
    if n > 2:
        x[int(torch.randint(0, n, (1,), generator=g))] = -1234.5  # the largest magnitude is a negative value
    return x.to(device)


@pytest.mark.task("8.2")
@pytest.mark.parametrize("n", [1, 33, 1000, 2**16 + 3])
def test_amax(n: int) -> None:
    m = _m()
    x = _amax_input(n, check.rng(f"amax-{n}"), m.device)
    out = check.poisoned(1, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.amax(x, out, n)
    check.assert_close(out, x.abs().max().reshape(1), name=f"amax n={n}", rtol=0.0, atol=0.0, task="8.2",
                       hint="max |x|, not max x; every thread (also one with no index) must reach the block "
                            "reduction, and thread 0 folds the block's maximum into *out with atomicMax on the "
                            "float's bits read as an int.")


@pytest.mark.task("8.2")
@pytest.mark.parametrize("n", [1, 1000, 20007])
def test_cast_scaled_e4m3_amax(n: int) -> None:
    """Delayed scaling: the scale comes from an older, smaller amax, so the largest values saturate at 448."""
    m = _m()
    g = check.rng(f"cast-amax-{n}")
    x = _amax_input(n, g, "cpu") * 10.0
    amax_prev = float(x.abs().max()) * 0.6
    inv = torch.tensor([448.0 / amax_prev], dtype=torch.float32)
    want = ((x * inv).clamp(-448.0, 448.0)).to(torch.float8_e4m3fn).view(torch.uint8)
    xd, invd = x.to(m.device), inv.to(m.device)
    y = _byte_poison(n, g, m.device)
    amax_out = check.poisoned(1, torch.float32, m.device)
    with check.unchanged(xd, invd, names=["x", "inv"]):
        m.cast_scaled_e4m3_amax(xd, invd, y.view(torch.float8_e4m3fn), amax_out, n)
    _assert_bits(y, want, x, f"cast_scaled_e4m3_amax y, n={n}", "8.2",
                 "y[i] = __nv_fp8_e4m3(x[i] * inv[0]): one fp32 product, then the saturating constructor.")
    check.assert_close(amax_out.cpu(), x.abs().max().reshape(1), name="amax_out (of x, unscaled)", rtol=0.0,
                       atol=0.0, task="8.2", hint="the amax is of the input x, before scaling; block_max_atomic "
                       "folds each block's maximum in.")


def test_worked_scale_and_scaled_cast() -> None:
    m = _m()
    amax = torch.tensor([7.25], device=m.device)
    inv, scale = check.poisoned(1, torch.float32, m.device), check.poisoned(1, torch.float32, m.device)
    m.fp8_scale_from_amax(amax, inv, scale)
    assert float(inv.item()) == float(torch.tensor(448.0) / torch.tensor(7.25))
    assert float(scale.item()) == float(torch.tensor(7.25) / torch.tensor(448.0))
    x = check.randn(999, check.rng("scaled-cast"), "cpu", scale=3.0)
    y = torch.zeros(999, dtype=torch.uint8, device=m.device)
    m.cast_scaled_e4m3(x.to(m.device), inv, y.view(torch.float8_e4m3fn), 999)
    want = (x * inv.cpu()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    _assert_bits(y, want, x, "cast_scaled_e4m3 (worked)", "8.2", "the worked kernel differs: report it")


# ----------------------------------------------------------------------------------------------------
# 8.3 Quantization layouts
# ----------------------------------------------------------------------------------------------------

SHAPES_83 = [(1, 5), (3, 128), (5, 512), (7, 300), (16, 1024), (2, 1031), (2, 8300),  # 8300: 65 groups, a second step
             (9, 1000), (17, 4096), (3, 8192), (11, 1528)]  # cols % 8 == 0: task 8.7's kernels (a block of 128 threads
# per row), a partial last group (1000 = 7 x 128 + 104, 1528), each template size (1024, 4096, 8192)


def _activations(rows: int, cols: int, g: torch.Generator) -> torch.Tensor:
    """bf16 activations with a few large channels (as real ones have) and a row of zeros."""
    x = check.randn((rows, cols), g, "cpu")
    x[:, :: max(1, cols // 7)] *= 40.0
    if rows > 2:
        x[1] = 0.0
    return x.to(torch.bfloat16)


@pytest.mark.parametrize(("rows", "cols"), SHAPES_83)
def test_quant_1x128_worked(rows: int, cols: int) -> None:
    m = _m()
    x = _activations(rows, cols, check.rng(f"q1x128-{rows}x{cols}"))
    G = (cols + 127) // 128
    y = check.poisoned((rows, cols), torch.float8_e4m3fn, m.device)
    s = check.poisoned((G, rows), torch.float32, m.device)
    m.quant_1x128(x.to(m.device), y, s, rows, cols)
    qw, sw = ref_quant_1x128(x)
    _assert_bits(_bits(y), qw, None, f"quant_1x128 {rows}x{cols} (worked)", "8.3", "the worked kernel: report it")
    assert torch.equal(s.cpu(), sw), "quant_1x128 (worked): scales differ"


@pytest.mark.task("8.3")
# cols % 8 == 0 (task 8.7's kernel, where the stub falls back to 8.3's): 128 x 256, 64 x 1000, 130 x 264, 257 x 136
@pytest.mark.parametrize(("rows", "cols"), [(1, 5), (130, 260), (128, 256), (257, 131), (64, 1000), (130, 264),
                                            (257, 136)])
def test_quant_128x128(rows: int, cols: int) -> None:
    m = _m()
    g = check.rng(f"q128-{rows}x{cols}")
    w = check.randn((rows, cols), g, "cpu")
    w *= torch.exp2(torch.randint(-6, 7, ((rows + 127) // 128, (cols + 127) // 128), generator=g).double()
                    ).repeat_interleave(128, 0).repeat_interleave(128, 1)[:rows, :cols]  # a scale per block
    w = w.to(torch.bfloat16)
    R, Cb = (rows + 127) // 128, (cols + 127) // 128
    q = check.poisoned((rows, cols), torch.float8_e4m3fn, m.device)
    s = check.poisoned((R, Cb), torch.float32, m.device)
    wd = w.to(m.device)
    with check.unchanged(wd, names=["w"]):
        m.quant_128x128(wd, q, s, rows, cols)
    qw, sw = ref_quant_128x128(w)
    check.assert_close(s.cpu(), sw, name=f"quant_128x128 scales {rows}x{cols}", rtol=0.0, atol=0.0, task="8.3",
                       hint="scales[i][j] = amax / 448 of block (i, j), amax at least kAmaxFloor; every thread "
                            "reaches block_max.")
    _assert_bits(_bits(q), qw, None, f"quant_128x128 {rows}x{cols}", "8.3",
                 "q = e4m3(w * (448 / amax)) with the block's amax: one fp32 division, one product, the saturating "
                 "conversion (store4 does the last two).")


HINT_83_RMS = ("store4(yr, c, cols, vec, v, 448 / amax) after v[j] = x[j] * rstd * w[j]; each group's amax over "
               "its own 128 values.")


@pytest.mark.task("8.3")
@pytest.mark.parametrize(("rows", "cols"), SHAPES_83)
def test_rmsnorm_quant_1x128(rows: int, cols: int) -> None:
    m = _m()
    check_rmsnorm_quant(m.rmsnorm_quant_1x128, m.device, rows, cols, "8.3", HINT_83_RMS)


def check_rmsnorm_quant(fn: Any, device: Any, rows: int, cols: int, task: str, hint: str) -> None:
    """fn(x, w, y, scales, rows, cols, eps) (the CUDA launcher or its Triton twin) against an fp64 reference."""
    g = check.rng(f"rmsq-{rows}x{cols}")
    x = _activations(rows, cols, g)
    w = (1.0 + 0.5 * check.randn(cols, g, "cpu")).to(torch.bfloat16)
    eps = 1e-6
    G = (cols + 127) // 128
    y = check.poisoned((rows, cols), torch.float8_e4m3fn, device)
    s = check.poisoned((G, rows), torch.float32, device)
    xd, wd = x.to(device), w.to(device)
    with check.unchanged(xd, wd, names=["x", "w"]):
        fn(xd, wd, y, s, rows, cols, eps)
    # fp64 reference of the normalized values, their 1x128 amax and scales
    xf, wf = x.double(), w.double()
    v = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps) * wf
    vp = torch.zeros(rows, G * 128, dtype=torch.float64)
    vp[:, :cols] = v
    amax = vp.view(rows, G, 128).abs().amax(-1).clamp_min(AMAX_FLOOR)
    s_ref = (amax / 448.0).T
    check.assert_close(s.cpu().double(), s_ref, name=f"rmsnorm_quant_1x128 scales {rows}x{cols}", rtol=2.0**-16,
                       atol=0.0, task=task,
                       hint="scales[g * rows + r] = amax / 448 of the normalized values v = x * rstd * w of group g "
                            "(rstd = rsqrtf(sum of squares / cols + eps)), not of x.")
    t_ref = v / s_ref.T.repeat_interleave(128, 1)[:, :cols]       # what y should hold before rounding, |t| <= 448
    got = y.cpu().double()
    err = (got - t_ref).abs()
    tol = half_ulp_e4m3(t_ref) + 2.0**-14 * t_ref.abs()
    bad = ~(err <= tol)
    if bool(bad.any()):
        i = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"task {task}: rmsnorm_quant_1x128 {rows}x{cols}: {int(bad.sum())} of {rows * cols} values are not the "
            f"e4m3 rounding of v / scale; first at [{i[0]}, {i[1]}]: yours {float(got[i[0], i[1]])}, v / scale = "
            f"{float(t_ref[i[0], i[1]])} (NaN: never written).\nHint: {hint}")


# ----------------------------------------------------------------------------------------------------
# 8.4 / 8.5 block-scaled GEMMs
# ----------------------------------------------------------------------------------------------------


def gemm_inputs(M: int, N: int, K: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(A e4m3 M x K, sa float[KB][M], W e4m3 N x K, sw float[NB][KB]) on the CPU. Scales spread over 2^-6..2^6 so
    that one taken from the wrong row or block is far off."""
    KB, NB = (K + 127) // 128, (N + 127) // 128
    A = (check.randn((M, K), g, "cpu") * 60.0).clamp(-448, 448).to(torch.float8_e4m3fn)
    W = (check.randn((N, K), g, "cpu") * 60.0).clamp(-448, 448).to(torch.float8_e4m3fn)
    sa = torch.exp2(torch.rand((KB, M), generator=g, dtype=torch.float64) * 12 - 6).float()
    sw = torch.exp2(torch.rand((NB, KB), generator=g, dtype=torch.float64) * 12 - 6).float()
    return A, sa, W, sw


def gemm_reference(A: torch.Tensor, sa: torch.Tensor, W: torch.Tensor, sw: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(C in fp64, the sum of |a||w| terms per output) from the dequantized operands, on A's device."""
    M, K = A.shape
    N = W.shape[0]
    a = A.double() * sa.double().T.repeat_interleave(128, dim=1)[:, :K]
    w = W.double() * sw.double().repeat_interleave(128, dim=0)[:N].repeat_interleave(128, dim=1)[:, :K]
    return a @ w.T, a.abs() @ w.abs().T


def assert_gemm(C: torch.Tensor, ref: torch.Tensor, P: torch.Tensor, sum_rel: float, name: str, task: str,
                hint: str) -> None:
    got = C.double()
    tol = 2.0**-8 * ref.abs() + sum_rel * P + 1e-30
    err = (got - ref).abs()
    bad = ~(err <= tol)
    if bool(bad.any()):
        i, j = bad.nonzero()[0].tolist()
        raise AssertionError(f"task {task}: {name}: {int(bad.sum())} of {bad.numel()} outputs are off; first at "
                             f"[{i}, {j}]: yours {float(got[i, j])}, expected {float(ref[i, j])} (tolerance "
                             f"{float(tol[i, j]):.3g}; NaN: never written).\nHint: {hint}")


@pytest.mark.task("8.4")
@pytest.mark.parametrize(("M", "N", "K"), [(64, 64, 128), (33, 17, 48), (100, 72, 200), (130, 260, 384)])
def test_gemm_fp8_blockscaled(M: int, N: int, K: int) -> None:
    m = _m()
    A, sa, W, sw = gemm_inputs(M, N, K, check.rng(f"gemm8-{M}x{N}x{K}"))
    ref, P = gemm_reference(A, sa, W, sw)
    dev = [t.to(m.device) for t in (A, sa, W, sw)]
    C = check.poisoned((M, N), torch.bfloat16, m.device)
    with check.unchanged(*_watch(*dev), names=["A", "sa", "W", "sw"]):
        m.gemm_fp8_blockscaled(*dev, C, M, N, K)
    assert_gemm(C.cpu(), ref, P, 2.0**-16, f"gemm_fp8_blockscaled {M}x{N}x{K}", "8.4",
                "after each k-block, out += part * sa[kb * M + row] * sw[(col0 / 128) * kblocks + kb]; the "
                "partial sums start from zero for every k-block.")


NO_SM90A = ("not graded: gemm_fp8_wgmma_supported says this build has no sm_90a code (a compute capability 9.0 GPU "
            "is needed; the course builds sm_90a there)")


def _wgmma_supported(m: cc.Lesson) -> None:
    if m.backend != "cuda":
        pytest.skip("not graded: wgmma and TMA run on a compute capability 9.0 GPU only; the simulator compiles "
                    "gemm_fp8_hopper.cu but does not run it (task 8.4 is the same computation, graded here)")
    ok = torch.zeros(1, dtype=torch.int32, device=m.device)
    m.gemm_fp8_wgmma_supported(ok)
    if int(ok.item()) != 1:
        pytest.skip(NO_SM90A)


HINT_85 = ("check the stage parity ((it / kStages) & 1), the descriptors (+32 bytes per k32 step, this warpgroup's "
           "64 rows at + 64 * 128 bytes), the accumulate flag (0 for the first wgmma of a k-tile), wgmma_wait0 "
           "before the partial sums are read, and the promotion (rows r and r + 8: acc[4j], acc[4j + 1] with s0, "
           "acc[4j + 2], acc[4j + 3] with s1).")


@pytest.mark.task("8.5")
@pytest.mark.gpu
# Not multiples of the 128 x 128 tile; K not a multiple of 128 (a partial last k-block); 2100 x 2060 is 17 x 17
# block tiles, more than one per SM, so blocks take a second tile and the stage parities carry over.
@pytest.mark.parametrize(("M", "N", "K"), [(128, 128, 128), (37, 45, 80), (200, 328, 400), (300, 520, 1040),
                                           (2100, 2060, 272)])
def test_gemm_fp8_wgmma(M: int, N: int, K: int) -> None:
    m = _m()
    _wgmma_supported(m)
    A, sa, W, sw = gemm_inputs(M, N, K, check.rng(f"wgmma8-{M}x{N}x{K}"))
    dev = [t.to(m.device) for t in (A, sa, W, sw)]
    ref, P = gemm_reference(*dev)
    full, C = check.guarded(M * N, m.device, dtype=torch.bfloat16)
    with check.unchanged(*_watch(*dev), names=["A", "sa", "W", "sw"]):
        m.gemm_fp8_wgmma(*dev, C.view(M, N), M, N, K)
    assert_gemm(C.view(M, N), ref, P, 2.0**-10, f"gemm_fp8_wgmma {M}x{N}x{K}", "8.5", HINT_85)
    check.assert_guard(full, M * N, "gemm_fp8_wgmma", "8.5")


def scaled_mm_reference(A: torch.Tensor, sa: torch.Tensor, W: torch.Tensor, sw: torch.Tensor) -> tuple[Any, str]:
    """torch._scaled_mm on the same operands: the DeepSeek recipe (1x128 scales of A, 128x128 of W) where this
    PyTorch and cuBLAS have it (PyTorch passes the scale layouts as transposed views of ours), else per-tensor
    scaling (cuBLASLt's plain FP8 GEMM). Returns the call and what it is."""

    def blockwise() -> torch.Tensor:
        return torch._scaled_mm(A, W.t(), scale_a=sa.t(), scale_b=sw.t(), out_dtype=torch.bfloat16)

    try:
        blockwise()
        return blockwise, "torch._scaled_mm, 1x128 x 128x128 block scales"
    except Exception:  # noqa: BLE001 - any refusal of the block-scale recipe: fall back
        one = torch.ones((), device=A.device)
        return (lambda: torch._scaled_mm(A, W.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                "torch._scaled_mm, per-tensor scales (this PyTorch has no block scales)")


@pytest.mark.task("8.6")
@pytest.mark.gpu
def test_speed_gemm_fp8_wgmma() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    _wgmma_supported(m)
    n = 4096
    sets = []
    for i in range(MIN_SETS):
        A, sa, W, sw = (t.to(m.device) for t in gemm_inputs(n, n, n, check.rng(f"speed8-{i}")))
        sets.append((A, sa, W, sw, torch.empty(n, n, device=m.device, dtype=torch.bfloat16)))
    refs = [gemm_reference(*s[:4]) for s in sets]

    def ok(i: int) -> None:
        assert_gemm(sets[i][4], *refs[i], 2.0**-10, f"gemm_fp8_wgmma {n}^3", "8.6", HINT_85)

    m.gemm_fp8_wgmma(*sets[0], n, n, n)
    ok(0)  # correct before timed
    calls = [scaled_mm_reference(*s[:4]) for s in sets]
    judge((LESSON, "8.6"), f"gemm_fp8_wgmma {n}^3 e4m3",
          Side("gemm_fp8_wgmma", lambda i: m.gemm_fp8_wgmma(*sets[i], n, n, n), lambda i: (sets[i][4],), ok),
          Side(calls[0][1], lambda i: calls[i][0]()), sets=MIN_SETS)


@pytest.mark.task("8.7")
@pytest.mark.gpu
def test_speed_quantization() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    test_rmsnorm_quant_1x128(7, 300)  # correct before timed
    # 768 MiB a call (about 0.2 ms at the H200's copy bandwidth): a grade times through the GPU worker by wall clock,
    # where calls of 0.1 ms measured the messages as much as the kernel (tests/test_05_tensor_cores.py, task 5.9)
    rows, cols = 65536, 4096
    G = cols // 128
    sets = [(torch.randn(rows, cols, device=m.device, dtype=torch.bfloat16),
             torch.randn(cols, device=m.device, dtype=torch.bfloat16),
             torch.empty(rows, cols, device=m.device, dtype=torch.float8_e4m3fn),
             torch.empty(G, rows, device=m.device)) for _ in range(MIN_SETS)]

    def ok_rms(i: int) -> None:
        x, w, y, s = sets[i]
        v = torch.nn.functional.rms_norm(x[:64].float(), (cols,), w.float(), 1e-6).double()
        deq = y[:64].double() * s[:, :64].double().T.repeat_interleave(128, 1)
        check.assert_close(deq, v, name="rmsnorm_quant_1x128 (first 64 rows, dequantized)", rtol=2.0**-3,
                           atol=2.0**-9 * float(v.abs().max()), task="8.7")

    judge((LESSON, "8.7"), f"rmsnorm_quant_1x128 {rows}x{cols}",
          Side("rmsnorm_quant_1x128", lambda i: m.rmsnorm_quant_1x128(*sets[i], rows, cols, 1e-6),
               lambda i: (sets[i][2], sets[i][3]), ok_rms), None,
          sets=MIN_SETS, nbytes=3 * rows * cols + 4 * rows * G + 2 * cols)
    R, C = 16384, 16384
    wsets = [(torch.randn(R, C, device=m.device, dtype=torch.bfloat16),
              torch.empty(R, C, device=m.device, dtype=torch.float8_e4m3fn),
              torch.empty(R // 128, C // 128, device=m.device)) for _ in range(MIN_SETS)]

    def ok_w(i: int) -> None:
        w, q, s = wsets[i]
        deq = dequant_128x128(q[:128, :256], s[:1, :2])
        check.assert_close(deq, w[:128, :256].double(), name="quant_128x128 (first blocks, dequantized)",
                           rtol=2.0**-4, atol=2.0**-9 * float(s[:1, :2].max()) * 448, task="8.7")

    judge((LESSON, "8.7"), f"quant_128x128 {R}x{C}",
          Side("quant_128x128", lambda i: m.quant_128x128(*wsets[i], R, C), lambda i: (wsets[i][1], wsets[i][2]),
               ok_w), None, sets=MIN_SETS, nbytes=3 * R * C + 4 * (R // 128) * (C // 128))


# ----------------------------------------------------------------------------------------------------
# Triton track (optional): task 8.T1, the twin in fp8_triton.py, checked like the CUDA kernel. On the CPU Triton's
# interpreter runs it; without the triton package it is "not graded", with the command that installs it.
# ----------------------------------------------------------------------------------------------------

HINT_8T1 = ("rmsnorm_quant_1x128_kernel (TODO task 8.T1 in fp8_triton.py): quant_1x128_kernel above it with rstd "
            "and w in front: rstd = tl.rsqrt(tl.sum(x * x, axis=1) / cols + eps) per row (cols, not BLOCK_N), "
            "v = x * rstd[:, None] * w[None, :], then the same groups, amax, rounding and stores.")
TRITON_SHAPES = [(1, 5), (3, 128), (7, 300), (9, 1000), (2, 1031), (5, 4096), (2, 8300)]


def _twin() -> Any:
    from cudacourse.triton_track import twin_or_not_graded

    return twin_or_not_graded(LESSON)


def _guard(t: Any) -> Any:
    """Torch may allocate and check in fp8_triton.py, never compute the answer (refused at run time)."""
    from cudacourse.grading.screens import torch_answer_guard

    return torch_answer_guard([t.__file__])


def _triton_rmsnorm_case(t: Any, device: Any, rows: int, cols: int, task: str = "8.T1") -> None:
    def call(*args: Any) -> None:
        with _guard(t):
            t.rmsnorm_quant_1x128(*args)

    check_rmsnorm_quant(call, device, rows, cols, task, HINT_8T1)


@pytest.mark.task("8.T1")
@pytest.mark.parametrize(("rows", "cols"), TRITON_SHAPES)
def test_triton_rmsnorm_quant_1x128(rows: int, cols: int) -> None:
    """The Triton twin against the same fp64 reference as the CUDA kernel (task 8.3); on a GPU also a large shape.
    At 7 x 300 also the wrapper's refusal of bad inputs (after the values: the given wrapper refuses them, so on its
    own case it passed on the untouched stub)."""
    t, m = _twin(), _m()
    _triton_rmsnorm_case(t, m.device, rows, cols)
    if m.backend == "cuda" and (rows, cols) == TRITON_SHAPES[-1]:
        _triton_rmsnorm_case(t, m.device, 1030, 7168)
    if (rows, cols) == (7, 300):
        _triton_rejects(t, m.device)


def _triton_rejects(t: Any, device: Any) -> None:
    rows, cols = 4, 256
    x = check.randn((rows, cols), check.rng("8.T1-bad"), device).to(torch.bfloat16)
    w = torch.ones(cols, device=device, dtype=torch.bfloat16)
    y = check.poisoned((rows, cols), torch.float8_e4m3fn, device)
    s = check.poisoned((2, rows), torch.float32, device)
    with pytest.raises(TypeError, match=r"parameter 'x'.*bfloat16"):
        t.rmsnorm_quant_1x128(x.float(), w, y, s, rows, cols, 1e-6)
    with pytest.raises(TypeError, match=r"parameter 'y'.*float8_e4m3fn"):
        t.rmsnorm_quant_1x128(x, w, y.view(torch.uint8), s, rows, cols, 1e-6)
    with pytest.raises(ValueError, match=r"parameter 'scales' holds 4 values, fewer than the 8"):
        t.rmsnorm_quant_1x128(x, w, y, check.poisoned((1, rows), torch.float32, device), rows, cols, 1e-6)
    assert bool(y.float().isnan().all()) and bool(s.isnan().all()), "a rejected call must not run the kernel"


@pytest.mark.parametrize(("rows", "cols"), [(1, 5), (7, 300), (9, 1000), (2, 8300)])
def test_triton_worked_quant_1x128(rows: int, cols: int) -> None:
    """The worked quant_1x128 of fp8_triton.py (given complete; not graded): bit-exact, as the CUDA one."""
    t, m = _twin(), _m()
    x = _activations(rows, cols, check.rng(f"q1x128-{rows}x{cols}"))
    y = check.poisoned((rows, cols), torch.float8_e4m3fn, m.device)
    s = check.poisoned(((cols + 127) // 128, rows), torch.float32, m.device)
    t.quant_1x128(x.to(m.device), y, s, rows, cols)
    qw, sw = ref_quant_1x128(x)
    _assert_bits(_bits(y), qw, None, f"quant_1x128 (Triton) {rows}x{cols}", "worked example",
                 "quant_1x128 is given complete in fp8_triton.py; did an edit change it?")
    assert torch.equal(s.cpu(), sw), "quant_1x128 (Triton, worked): scales differ"


# Wrong twins, made from the solution by one edit each: every one must fail the check task 8.T1 uses.
TRITON_MUTANTS = {
    "no norm": ("v = x * rstd[:, None] * w[None, :]\n    vg", "v = x * w[None, :]\n    vg"),
    "w left out": ("v = x * rstd[:, None] * w[None, :]\n    vg", "v = x * rstd[:, None]\n    vg"),
    "mean over the padded tile": ("tl.sum(x * x, axis=1) / cols + eps", "tl.sum(x * x, axis=1) / BLOCK_N + eps"),
    "scales not stored": ("mask=(r[:, None] < rows) & (g[None, :] * 128 < cols))\n    # STUB",
                          "mask=(r[:, None] < 0) & (g[None, :] * 128 < cols))\n    # STUB"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow / NaN warnings from the wrong code
@pytest.mark.parametrize("mutant", list(TRITON_MUTANTS))
def test_triton_wrong_twins_fail_the_check(mutant: str, tmp_path: Any) -> None:
    from cudacourse.triton_track import load_mutant

    _twin()  # not graded (a skip) without triton
    m = _m()
    wrong = load_mutant(LESSON, "fp8_triton.py", TRITON_MUTANTS[mutant], tmp_path, backend=m.backend)
    with pytest.raises(AssertionError):
        _triton_rmsnorm_case(wrong, m.device, 7, 300)
