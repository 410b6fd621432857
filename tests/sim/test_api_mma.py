"""Tensor-core operations on the simulator: lesson 05's cc_mma.h (mma.sync m16n8k16, ldmatrix, cp.async) and
nvcuda::wmma.

The PTX layouts are checked element by element against the tables of the PTX ISA (sections "Matrix Fragments
for mma.m16n8k16 with floating point type" and "Warp-level matrix load instruction: ldmatrix"), written out
here independently of the simulator's code. Kernels that assume a wrong layout, skip cp_async_wait, or hand
ldmatrix/cp.async a misaligned address must be caught.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import build

from cudacourse.errors import KernelError

HEADER = Path(__file__).resolve().parents[2] / "solutions" / "05_tensor_cores" / "cc_mma.h"

PTX = r"""
#include "@HEADER@"

// Each lane writes its fragment registers out: a (4 regs), b (2 regs), and the mma result d (4 floats).
// A and B are given as matrices; the fragments are built from the ISA tables, so a wrong table shows in d.
__global__ void regs_kernel(const int* a_regs, const int* b_regs, const float* c, float* d, int bf16) {
    int lane = threadIdx.x;
    uint32_t a[4], b[2];
    float cc[4], dd[4];
    for (int r = 0; r < 4; ++r) a[r] = (uint32_t)a_regs[lane * 4 + r];
    for (int r = 0; r < 2; ++r) b[r] = (uint32_t)b_regs[lane * 2 + r];
    for (int i = 0; i < 4; ++i) cc[i] = c[lane * 4 + i];
    if (bf16) mma_m16n8k16_bf16(dd, a, b, cc);
    else mma_m16n8k16_f16(dd, a, b, cc);
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = dd[i];
}
void mma_regs(const int* a_regs, const int* b_regs, const float* c, float* d, int bf16) {
    regs_kernel<<<1, 32>>>(a_regs, b_regs, c, d, bf16);
}

// ldmatrix from a 32x8 shared tile of 16-bit values: lane l passes the address of row `rowsel[l]`.
__global__ void ldm_kernel(const short* m, const int* rowsel, int* out, int variant, int offset) {
    __shared__ __align__(16) short tile[33 * 8];
    for (int i = threadIdx.x; i < 32 * 8; i += 32) tile[i] = m[i];
    __syncwarp();
    uint32_t r[4] = {0, 0, 0, 0};
    const short* row = tile + rowsel[threadIdx.x] * 8 + offset;
    if (variant == 0) ldmatrix_x4(r, row);
    if (variant == 1) ldmatrix_x2(r, row);
    if (variant == 2) ldmatrix_x4_trans(r, row);
    if (variant == 3) ldmatrix_x2_trans(r, row);
    for (int j = 0; j < 4; ++j) out[threadIdx.x * 4 + j] = (int)r[j];
}
void ldm(const short* m, const int* rowsel, int* out, int variant, int offset) {
    ldm_kernel<<<1, 32>>>(m, rowsel, out, variant, offset);
}

// cp.async of a 64-float row into shared memory, then every thread reads its neighbour's chunk.
__global__ void cpa_kernel(const float* x, float* y, int wait, int misalign) {
    __shared__ __align__(16) float s[64 + 4];
    int t = threadIdx.x;  // 16 threads, 4 floats (16 bytes) each
    cp_async_16(s + 4 * t + misalign, x + 4 * t);
    cp_async_commit();
    if (wait) cp_async_wait<0>();
    __syncthreads();
    int u = (t + 1) % 16;
    for (int k = 0; k < 4; ++k) y[4 * t + k] = s[4 * u + k];
}
void cpa(const float* x, float* y, int wait, int misalign) { cpa_kernel<<<1, 16>>>(x, y, wait, misalign); }

// two groups in flight: wait<1> lands the first only
__global__ void cpa2_kernel(const float* x, float* y) {
    __shared__ __align__(16) float s[8];
    if (threadIdx.x == 0) {
        s[4] = -1.0f; s[5] = -1.0f; s[6] = -1.0f; s[7] = -1.0f;
        cp_async_16(s, x);
        cp_async_commit();
        cp_async_16(s + 4, x + 4, 8);  // 8 bytes copied, 8 zero-filled
        cp_async_commit();
        cp_async_wait<1>();
        for (int k = 0; k < 8; ++k) y[k] = s[k];
        cp_async_wait<0>();
        for (int k = 0; k < 8; ++k) y[8 + k] = s[k];
    }
}
void cpa2(const float* x, float* y) { cpa2_kernel<<<1, 32>>>(x, y); }

// ldmatrix from a shared tile nobody wrote
__global__ void ldm_uninit_kernel(int* out) {
    __shared__ __align__(16) short tile[32 * 8];
    uint32_t r[4];
    ldmatrix_x4(r, tile + threadIdx.x * 8);  // LDM_UNINIT_LINE
    out[threadIdx.x] = (int)r[0];
}
void ldm_uninit(int* out) { ldm_uninit_kernel<<<1, 32>>>(out); }
""".replace("@HEADER@", str(HEADER))


def _lib(checked: bool = True):
    return build(PTX, "mma_ptx.cu", checked=checked)


# Layout tests run on the simulator and, where a GPU is present, on the GPU against the same ISA tables: the
# backend-parity check of the fragment layouts (python -m pytest tests/sim/test_api_mma.py -k cuda on a GPU).
BACKENDS = ["sim", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="the GPU half of the layout parity check: no GPU on this machine"))]


def _call(backend: str, src: str, name: str, fn: str, args: list) -> list:
    """Run launcher ``fn`` of ``src`` on ``backend``; returns the arguments (tensors back on the CPU)."""
    if backend == "sim":
        lib = build(src, name)
        try:
            lib.call(fn, args)
        finally:
            lib.close()
        return args
    import cudacourse as cc

    m = cc.load(src, [fn], backend="cuda")
    moved = [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]
    getattr(m, fn)(*moved)
    torch.cuda.synchronize()
    return [a.cpu() if isinstance(a, torch.Tensor) else a for a in moved]


def _bits(x: torch.Tensor) -> torch.Tensor:
    """16-bit patterns of a bf16/fp16 tensor as int64."""
    return x.view(torch.int16).to(torch.int64) & 0xFFFF


def _pack(lo: torch.Tensor, hi: torch.Tensor) -> int:
    return int(_bits(lo)) | (int(_bits(hi)) << 16)


# The PTX ISA tables, written out (g = lane >> 2, t = lane % 4):
def a_pos(lane: int, i: int) -> tuple[int, int]:
    """A (16x16) element a_i of a lane: row g for a0,a1,a4,a5 and g+8 for a2,a3,a6,a7; col 2t+(i&1), +8 for i>=4."""
    g, t = lane >> 2, lane % 4
    return g + (8 if i in (2, 3, 6, 7) else 0), 2 * t + (i & 1) + (8 if i >= 4 else 0)


def b_pos(lane: int, i: int) -> tuple[int, int]:
    """B (16x8) element b_i: row (k) 2t+(i&1), +8 for i>=2; column (n) g."""
    g, t = lane >> 2, lane % 4
    return 2 * t + (i & 1) + (8 if i >= 2 else 0), g


def c_pos(lane: int, i: int) -> tuple[int, int]:
    """C/D (16x8) element c_i: row g for c0,c1 and g+8 for c2,c3; column 2t+(i&1)."""
    g, t = lane >> 2, lane % 4
    return g + (8 if i >= 2 else 0), 2 * t + (i & 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mma_m16n8k16_fragment_layout_matches_the_ptx_isa(dtype, backend):
    g = torch.Generator().manual_seed(5)
    A = torch.randn(16, 16, generator=g).to(dtype)
    B = torch.randn(16, 8, generator=g).to(dtype)
    C = torch.randn(16, 8, generator=g)
    a_regs = torch.tensor([[_pack(A[a_pos(ln, 2 * r)], A[a_pos(ln, 2 * r + 1)]) for r in range(4)] for ln in range(32)])
    b_regs = torch.tensor([[_pack(B[b_pos(ln, 2 * r)], B[b_pos(ln, 2 * r + 1)]) for r in range(2)] for ln in range(32)])
    c = torch.tensor([[float(C[c_pos(ln, i)]) for i in range(4)] for ln in range(32)])
    d = torch.full((32, 4), float("nan"))
    d = _call(backend, PTX, "mma_ptx.cu", "mma_regs",
              [a_regs.to(torch.int32), b_regs.to(torch.int32), c, d, int(dtype == torch.bfloat16)])[3]
    ref = A.double() @ B.double() + C.double()
    for ln in range(32):
        for i in range(4):
            want = float(ref[c_pos(ln, i)])
            assert abs(float(d[ln, i]) - want) <= 1e-4 * (1 + abs(want)), (
                f"lane {ln} d[{i}] = {float(d[ln, i])}, the ISA's D{c_pos(ln, i)} = {want}")


def test_mma_with_a_transposed_a_layout_is_wrong():
    """A kernel that packs A as if a[r] held row 2t.. (a common mistake: rows and columns swapped) is caught."""
    g = torch.Generator().manual_seed(6)
    A = torch.randn(16, 16, generator=g).to(torch.bfloat16)
    B = torch.randn(16, 8, generator=g).to(torch.bfloat16)
    wrong = [[_pack(A[a_pos(ln, 2 * r)[::-1]], A[a_pos(ln, 2 * r + 1)[::-1]]) for r in range(4)] for ln in range(32)]
    b_regs = [[_pack(B[b_pos(ln, 2 * r)], B[b_pos(ln, 2 * r + 1)]) for r in range(2)] for ln in range(32)]
    d = torch.full((32, 4), float("nan"))
    lib = _lib()
    try:
        lib.call("mma_regs", [torch.tensor(wrong).to(torch.int32), torch.tensor(b_regs).to(torch.int32),
                              torch.zeros(32, 4), d, 1])
    finally:
        lib.close()
    ref = A.double() @ B.double()
    got = torch.tensor([[float(ref[c_pos(ln, i)]) for i in range(4)] for ln in range(32)])
    assert not torch.allclose(d.double(), got.double(), atol=1e-2), "a transposed A fragment must give a wrong D"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("variant", "num", "trans"), [(0, 4, False), (1, 2, False), (2, 4, True), (3, 2, True)])
def test_ldmatrix_layout_matches_the_ptx_isa(variant, num, trans, backend):
    vals = torch.arange(32 * 8, dtype=torch.int32).to(torch.int16)  # element (row, col) holds row*8+col
    perm = torch.randperm(32, generator=torch.Generator().manual_seed(variant)).to(torch.int32)
    out = torch.zeros(32, 4, dtype=torch.int32)  # the kernel zeroes the registers ldmatrix does not write
    out = _call(backend, PTX, "mma_ptx.cu", "ldm", [vals, perm, out, variant, 0])[2]
    for ln in range(32):
        for j in range(num):
            g, t = ln >> 2, ln % 4
            rows = [int(perm[8 * j + r]) for r in range(8)]  # matrix j's row r lives at tile row rows[r]
            if not trans:  # row g, elements 2t and 2t+1
                lo, hi = rows[g] * 8 + 2 * t, rows[g] * 8 + 2 * t + 1
            else:  # column g, rows 2t and 2t+1
                lo, hi = rows[2 * t] * 8 + g, rows[2 * t + 1] * 8 + g
            want = lo | (hi << 16)
            got = int(out[ln, j]) & 0xFFFFFFFF
            assert got == want, f"lane {ln} r[{j}] (trans={trans}): {got:#x} != {want:#x}"
        for j in range(num, 4):
            assert int(out[ln, j]) == 0, "ldmatrix wrote registers beyond its count"


def test_ldmatrix_misaligned_row_is_named():
    lib = _lib()
    try:
        with pytest.raises(KernelError) as e:
            lib.call("ldm", [torch.zeros(256, dtype=torch.int16), torch.arange(32, dtype=torch.int32),
                             torch.zeros(32, 4, dtype=torch.int32), 0, 2])
    finally:
        lib.close()
    msg = str(e.value)
    assert "ldmatrix" in msg and "16-byte aligned" in msg and "0x" in msg and "mma_ptx.cu" in msg, msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_cp_async_lands_at_the_wait(backend):
    x = torch.randn(64)
    y = _call(backend, PTX, "mma_ptx.cu", "cpa", [x, torch.full((64,), float("nan")), 1, 0])[1]
    assert torch.equal(y, x.view(16, 4).roll(-1, 0).flatten())
    x2 = torch.arange(8, dtype=torch.float32) + 1
    y2 = _call(backend, PTX, "mma_ptx.cu", "cpa2", [x2, torch.full((16,), float("nan"))])[1]
    # wait_group 1 guarantees the older group only; the simulator holds the newer one back (adversarially), while on
    # the H100 the slot already held later data when read (measured: [5, 6, 0, 0]): there only the older group counts
    newer_ok = backend == "cuda" or torch.equal(y2[4:8], torch.full((4,), -1.0))
    assert torch.equal(y2[:4], x2[:4]) and newer_ok, f"wait<1> must land the older group only: {y2[:8]}"
    assert torch.equal(y2[8:], torch.tensor([1.0, 2, 3, 4, 5, 6, 0, 0])), f"src_bytes=8 zero-fills the rest: {y2[8:]}"


def test_missing_cp_async_wait_is_caught():
    lib = _lib()
    try:
        with pytest.raises(KernelError) as e:
            lib.call("cpa", [torch.randn(64), torch.zeros(64), 0, 0])
    finally:
        lib.close()
    assert "never written" in str(e.value) or "Uninitial" in type(e.value).__name__, str(e.value)


def test_ldmatrix_of_unwritten_shared_memory_names_the_learners_line():
    lib = _lib()
    try:
        with pytest.raises(KernelError) as e:
            lib.call("ldm_uninit", [torch.zeros(32, dtype=torch.int32)])
    finally:
        lib.close()
    line = next(i for i, text in enumerate(PTX.splitlines(), 1) if "LDM_UNINIT_LINE" in text)
    assert type(e.value).__name__ == "UninitializedReadError" and e.value.line == line, (e.value.line, str(e.value))


def test_cp_async_misaligned_destination_is_named():
    lib = _lib()
    try:
        with pytest.raises(KernelError) as e:
            lib.call("cpa", [torch.randn(64), torch.zeros(64), 1, 1])
    finally:
        lib.close()
    msg = str(e.value)
    assert "cp.async" in msg and "16-byte aligned" in msg and "mma_ptx.cu" in msg, msg


WMMA = r"""
#include <mma.h>
using namespace nvcuda;

// One warp: C = A(16x16, row) * B(16x16, `bcol` ? col : row) + C0, fp16 or bf16 in, fp32 accumulate.
template <class T, class LB>
__global__ void wmma_kernel(const T* a, const T* b, const float* c0, float* c, float scale) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(acc, c0, 16, wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= scale;  // element-wise: layout-free, valid
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_col_major);
}
void wmma_h(const __half* a, const __half* b, const float* c0, float* c, int bcol, float scale) {
    if (bcol) wmma_kernel<__half, wmma::col_major><<<1, 32>>>(a, b, c0, c, scale);
    else wmma_kernel<__half, wmma::row_major><<<1, 32>>>(a, b, c0, c, scale);
}
void wmma_bf(const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c0, float* c, int bcol, float scale) {
    if (bcol) wmma_kernel<__nv_bfloat16, wmma::col_major><<<1, 32>>>(a, b, c0, c, scale);
    else wmma_kernel<__nv_bfloat16, wmma::row_major><<<1, 32>>>(a, b, c0, c, scale);
}

// A kernel that assumes acc.x[i] is row (lane/4)... (a guessed layout) to add a bias per row.
__global__ void wmma_layout_guess_kernel(const __half* a, const __half* b, const float* bias, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int i = 0; i < acc.num_elements; ++i) acc.x[i] += bias[(threadIdx.x / 4 + 8 * (i / 4)) % 16];
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}
void wmma_layout_guess(const __half* a, const __half* b, const float* bias, float* c) {
    wmma_layout_guess_kernel<<<1, 32>>>(a, b, bias, c);
}

// Only 16 lanes reach the collective load.
__global__ void wmma_half_warp_kernel(const __half* a, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    if (threadIdx.x < 16) wmma::load_matrix_sync(fa, a, 16);
    c[threadIdx.x] = 0.0f;
}
void wmma_half_warp(const __half* a, float* c) { wmma_half_warp_kernel<<<1, 32>>>(a, c); }
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bcol", [0, 1])
def test_wmma_mma_sync(dtype, bcol, backend):
    g = torch.Generator().manual_seed(7 + bcol)
    a = torch.randn(16, 16, generator=g).to(dtype)
    b = torch.randn(16, 16, generator=g).to(dtype)
    c0 = torch.randn(16, 16, generator=g)
    c = torch.full((16, 16), float("nan"))
    c = _call(backend, WMMA, "wmma_api.cu", "wmma_h" if dtype == torch.float16 else "wmma_bf",
              [a, b, c0, c, bcol, 0.5])[3]
    bm = b.double().t() if bcol else b.double()  # col-major storage: element (k, n) at n*16 + k
    ref = 0.5 * (a.double() @ bm + c0.double())
    assert torch.allclose(c.t().double(), ref, rtol=1e-5, atol=1e-4), "stored col-major: c[n][m] = C[m][n]"


def test_wmma_code_that_assumes_a_fragment_layout_is_wrong_here():
    g = torch.Generator().manual_seed(9)
    a, b = torch.randn(16, 16, generator=g).half(), torch.randn(16, 16, generator=g).half()
    bias = torch.randn(16, generator=g)
    c = torch.full((16, 16), float("nan"))
    lib = build(WMMA, "wmma_api.cu")
    try:
        lib.call("wmma_layout_guess", [a, b, bias, c])
    finally:
        lib.close()
    ref = a.double() @ b.double() + bias.double()[:, None]
    assert not torch.allclose(c.double(), ref, atol=1e-2), "fragment layouts are opaque: a guessed layout must fail"


def test_wmma_needs_the_whole_warp():
    lib = build(WMMA, "wmma_api.cu")
    try:
        with pytest.raises(KernelError) as e:
            lib.call("wmma_half_warp", [torch.zeros(256).half(), torch.zeros(32)])
    finally:
        lib.close()
    line = WMMA.splitlines().index(next(s for s in WMMA.splitlines() if "if (threadIdx.x < 16)" in s)) + 1
    assert type(e.value).__name__ == "BarrierError" and f"line {line}" in str(e.value), str(e.value)
