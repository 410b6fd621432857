"""Graded checks of lesson 05 (tensor cores and mixed precision): lessons/05_tensor_cores/{bf16,gemm_tc}.cu.

Tasks (ids match the TODOs in the kernel files; titles and points live in lessons/05_tensor_cores/lesson.toml):
  5.1  bias_gelu_bf16: bias + GELU on 16-byte groups of 8 bf16, fp32 math, one rounding at the store
  5.2  rmsnorm_bf16: bf16 rows held in registers, sum of squares accumulated in fp32
  5.3  wmma_gemm_naive: WMMA, one warp per 16x16 tile (fp16 in, fp32 accumulate)
  5.4  wmma_gemm_tiled: WMMA on a 128x128 block tile staged in shared memory
  5.5  mma_gemm: mma.sync m16n8k16 with ldmatrix (bf16)
  5.6  mma_gemm_pipelined: swizzled shared tiles and a 4-stage cp.async pipeline (bf16)
  5.7  speed: wmma_gemm_tiled at 4096^3 against cuBLAS fp16 (GPU only)
  5.8  speed: mma_gemm_pipelined at 4096^3 against cuBLAS fp16 (GPU only)
  5.9  speed: bias_gelu_bf16 and rmsnorm_bf16 against the measured copy bandwidth (GPU only)
  5.10 flash_attention_bf16: Q K^T and P V on mma.sync, online softmax in fp32, causal and full
  5.11 speed: flash_attention_bf16 at (8, 16, 4096, 64) against PyTorch SDPA's flash backend (GPU only)
  5.12 gemm_wgmma: Hopper wgmma + TMA, correct on ragged sizes (on a GPU: compute capability 9.0 and an sm_90a build,
       which the loader makes there; on the CPU simulator: its model of cc_hopper.h, checked mode)
  5.13 speed: gemm_wgmma at 4096^3 against cuBLAS fp16 (GPU only; target in lesson.toml)

Tolerances come from the formats. bf16 has 8 significant bits: rounding an exact result to bf16 once moves it
by at most 2^-8 of its size (half a unit in the last place), and that is all a kernel computing in fp32 and
rounding at the store may lose (fp32's own errors are 2^16 times smaller). A kernel that rounds an
intermediate to bf16 (the sum x + bias, the running sum of squares) loses more and fails. The GEMMs'
inputs are exact 16-bit values whose products are exact in fp32; only the fp32 accumulation rounds, by at
most about K * 2^-24 of the sum of |a*b| terms: the tolerance is twice that. Accumulating in fp16/bf16,
or rounding the inputs to the other 16-bit format, is hundreds of times further off. Outputs start as NaN
poison with a guard after them, inputs are checked unchanged, and no size is a multiple of a tile.
Attention rounds the probabilities P to bf16 before P V (as every flash kernel does): each weight moves by
at most 2^-8 of itself, which moves an output by at most 2^-8 of the largest |v|; with the output's own
rounding that is the tolerance (a missing mask, scale or rescaling is far outside it).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import cudacourse as cc
from cudacourse import check
from cudacourse.course import course

LESSON = "05_tensor_cores"
BF16_ROUND = 2.0**-8  # bf16's unit roundoff: half an ulp, relative (8 significant bits)
FP32_ROUND = 2.0**-24


def _m() -> cc.Lesson:
    return cc.lesson(LESSON)


# The compute capability each task's instructions need on a GPU (the simulator runs them all): WMMA fp16 from
# 7.0, bf16 mma.sync, ldmatrix with bf16 fragments and cp.async from 8.0, wgmma and TMA 9.0. Below it a task
# is not graded.
NEEDS_CC = {"5.3": (7, 0), "5.4": (7, 0), "5.7": (7, 0), "5.5": (8, 0), "5.6": (8, 0), "5.8": (8, 0),
            "5.10": (8, 0), "5.11": (8, 0), "5.12": (9, 0), "5.13": (9, 0)}


@pytest.fixture(autouse=True)
def _compute_capability(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("task")
    need = NEEDS_CC.get(marker.args[0]) if marker else None
    if need is None or not torch.cuda.is_available() or cc.lesson(LESSON).backend != "cuda":
        return
    have = torch.cuda.get_device_capability()
    if have < need:
        pytest.skip(f"not graded: task {marker.args[0]} needs compute capability {need[0]}.{need[1]} (this GPU is "
                    f"{have[0]}.{have[1]})")


def _bf16(shape: tuple[int, ...] | int, g: torch.Generator, m: cc.Lesson, scale: float = 1.0) -> torch.Tensor:
    return check.randn(shape, g, m.device, dtype=torch.bfloat16, scale=scale)


def _assert_bf16_rounded_once(y: torch.Tensor, ref: torch.Tensor, name: str, task: str, hint: str,
                              atol: float = 1e-30) -> None:
    """y (bf16) must be ref (float64) rounded once: within half a bf16 ulp plus fp32's share (``atol``)."""
    check.assert_close(y.double(), ref.to(torch.float64).cpu(), name=name, rtol=BF16_ROUND * (1 + 2.0**-6),
                       atol=atol, task=task, hint=hint)


# ----------------------------------------------------------------------------------------------------
# 5.1 bias + GELU in bf16
# ----------------------------------------------------------------------------------------------------

# ragged shapes take the worked one-element kernel; cols % 8 == 0 the 16-byte kernel (task 5.1): one group,
# one row, several rows, a row wider than one block (1032 columns: 129 groups), and more rows than the grid has
# (8500 rows of one group: the launcher's grid, sized to the simulated H100, covers 8448 rows, so threads loop).
# A ragged case first checks its 16-byte neighbour (``_with_16byte_neighbour``).
GELU_CASES = [(1, 1), (3, 33), (7, 31), (50, 257), (1, 8), (5, 24), (3, 1032), (40, 1024), (8500, 8)]
GELU_HINT = ("convert x and bias to fp32 (__bfloat1622float2), add and apply gelu_f32 in fp32, and round once with "
             "__floats2bfloat162_rn; the thread's column group c has bias group c, and it loops over rows "
             "r = blockIdx.y, r + gridDim.y, ... < rows with group index r * (cols / 8) + c.")


def _with_16byte_neighbour(cols: int) -> list[int]:
    """Row lengths a case checks: a ragged length (not a multiple of 8) only reaches the worked one-element
    kernels through the given launchers, so it passed on the untouched stub; it is checked after its neighbour
    rounded up to a multiple of 8, which takes the 16-byte kernel of the task (a stub must fail every case)."""
    return [cols] if cols % 8 == 0 else [(cols + 7) // 8 * 8, cols]


def _cols_case(cols: int) -> int | str:
    """The ``cols`` parameter of a case as its name shows it: every row length it checks, in order ("8 then 1"),
    so that a failure at the 16-byte neighbour is not reported under a case named ``cols=1``."""
    widths = _with_16byte_neighbour(cols)
    return widths[0] if len(widths) == 1 else " then ".join(map(str, widths))


def _widths(cols: int | str) -> list[int]:
    """The row lengths of a case's ``cols`` parameter (:func:`_cols_case`)."""
    return [int(w) for w in str(cols).split(" then ")]


def _bias_gelu(m: cc.Lesson, x: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = x.shape
    full, y = check.guarded(rows * cols, m.device, dtype=torch.bfloat16)
    with check.unchanged(x, b, names=["x", "bias"]):
        m.bias_gelu_bf16(x, b, y.view(rows, cols), rows, cols)
    check.assert_guard(full, rows * cols, "bias_gelu_bf16", "5.1")
    return y.view(rows, cols), F.gelu(x.double().cpu() + b.double().cpu())


@pytest.mark.task("5.1")
@pytest.mark.parametrize(("rows", "cols"), [(r, _cols_case(c)) for r, c in GELU_CASES])
def test_bias_gelu_bf16(rows: int, cols: int | str) -> None:
    """Where x + b is very negative, GELU is 0.5 s (1 + erf(s / sqrt 2)) with 1 + erf nearly 0: fp32 itself
    then loses the relative precision (an absolute error of about |s| 2^-24), hence the atol."""
    m = _m()
    for c in _widths(cols):
        g = check.rng(f"bias-gelu-{rows}x{c}")
        x, b = _bf16((rows, c), g, m, scale=3.0), _bf16(c, g, m)
        y, ref = _bias_gelu(m, x, b)
        s = (x.double().cpu() + b.double().cpu()).abs().max().item()
        _assert_bf16_rounded_once(y, ref, f"bias_gelu_bf16 {rows}x{c}", "5.1", GELU_HINT, atol=4 * FP32_ROUND * s)


@pytest.mark.task("5.1")
def test_bias_gelu_bf16_unaligned_view() -> None:
    """x starting 2 bytes into its buffer (a slice) cannot be read 16 bytes at a time: the launcher must take
    the one-element path, and the result is the same as for an aligned copy of x, which takes the 16-byte
    kernel (checked first: the slice alone runs only worked code and passed on the untouched stub)."""
    m = _m()
    g = check.rng("bias-gelu-unaligned")
    rows, cols = 3, 64
    x = _bf16(rows * cols + 1, g, m, scale=3.0)[1:].view(rows, cols)
    b = _bf16(cols, g, m)
    s = (x.double().cpu() + b.double().cpu()).abs().max().item()
    y_aligned, ref = _bias_gelu(m, x.clone(), b)
    _assert_bf16_rounded_once(y_aligned, ref, "bias_gelu_bf16 on an aligned copy of the slice", "5.1", GELU_HINT,
                              atol=4 * FP32_ROUND * s)
    y, ref = _bias_gelu(m, x, b)
    _assert_bf16_rounded_once(y, ref, "bias_gelu_bf16 on a slice", "5.1", GELU_HINT, atol=4 * FP32_ROUND * s)


@pytest.mark.task("5.1")
def test_bias_gelu_bf16_special_values() -> None:
    """Saturated tails, zero, a huge finite value (bf16 has fp32's range: 1e38 is a bf16), +inf, NaN: a row of
    8 (the 16-byte kernel), then its first 7 (the worked one-element kernel; alone, it passed on the stub)."""
    m = _m()
    row = torch.tensor([[-30.0, 30.0, 0.0, 1e38, float("inf"), float("nan"), -0.5, 2.5]], dtype=torch.bfloat16)
    for cols in (8, 7):
        x = row[:, :cols].contiguous().to(m.device)
        y, ref = _bias_gelu(m, x, torch.zeros(cols, dtype=torch.bfloat16, device=m.device))
        _assert_bf16_rounded_once(y, ref, f"bias_gelu_bf16 special values ({cols} columns)", "5.1", GELU_HINT)


@pytest.mark.task("5.1")
def test_bias_gelu_bf16_rejects_fp32() -> None:
    """The given binding refuses fp32 tensors. Checked after a valid bf16 call of the same shape gives the right
    values (the refusal alone passed on the untouched stub)."""
    m = _m()
    g = check.rng("bias-gelu-reject")
    xv, bv = _bf16((4, 8), g, m, scale=3.0), _bf16(8, g, m)
    y, ref = _bias_gelu(m, xv, bv)
    s = (xv.double().cpu() + bv.double().cpu()).abs().max().item()
    _assert_bf16_rounded_once(y, ref, "bias_gelu_bf16 4x8 (the valid call)", "5.1", GELU_HINT, atol=4 * FP32_ROUND * s)
    x = torch.zeros(4, 8, device=m.device)
    with pytest.raises(TypeError, match="bfloat16"):
        m.bias_gelu_bf16(x, torch.zeros(8, device=m.device, dtype=torch.bfloat16), torch.empty_like(x).bfloat16(), 4, 8)


# ----------------------------------------------------------------------------------------------------
# 5.2 RMSNorm in bf16
# ----------------------------------------------------------------------------------------------------


@pytest.mark.task("5.2")
# ragged rows take the worked two-pass kernel (each after its 16-byte neighbour: ``_with_16byte_neighbour``); rows
# of 8k values the register kernel (task 5.2) with 1 group of 8 per thread (up to 8192 values), 2 (8200) or 4
# (16392), and threads left without a group
@pytest.mark.parametrize(("rows", "cols", "offset"), [(r, _cols_case(c), o) for r, c, o in [
    (1, 1, 0.0), (5, 33, 0.0), (3, 4099, 0.0), (2, 4096, 8.0), (1, 8, 0.0), (4, 24, 0.0), (2, 8200, 0.0),
    (2, 16392, 8.0)]])
def test_rmsnorm_bf16(rows: int, cols: int | str, offset: float) -> None:
    """offset 8: every square is about 64, 4096 of them: a bf16 running sum stops growing at about 2^8 terms."""
    m = _m()
    for c in _widths(cols):
        g = check.rng(f"rmsnorm-bf16-{rows}x{c}")
        x = (check.randn((rows, c), g, dtype=torch.float64) + offset).to(torch.bfloat16).to(m.device)
        w = _bf16(c, g, m)
        full, y = check.guarded(rows * c, m.device, dtype=torch.bfloat16)
        with check.unchanged(x, w, names=["x", "w"]):
            m.rmsnorm_bf16(x, w, y.view(rows, c), rows, c, 1e-6)
        ref = F.rms_norm(x.double().cpu(), (c,), w.double().cpu(), 1e-6)
        _assert_bf16_rounded_once(y.view(rows, c), ref, f"rmsnorm_bf16 {rows}x{c}", "5.2",
                                  "accumulate the squares in fp32 (convert each element first) and round to bf16 "
                                  "only when storing y.")
        check.assert_guard(full, rows * c, "rmsnorm_bf16", "5.2")


# ----------------------------------------------------------------------------------------------------
# 5.3-5.6 GEMMs: C (M x N, fp32) = A (M x K) W^T, W is N x K
# ----------------------------------------------------------------------------------------------------

# (M, N, K): single elements, ragged everything, K % 8 != 0 (no 16-byte rows: the scalar and fallback paths),
# more than one block tile in M and N, several k-tiles and pipeline stages, and N % 8 == 0 with whole 16x16
# tiles inside C beside ragged ones (store_acc_tile's direct store_matrix_sync and its staged path); K = 328 is
# 11 k-tiles of 32, so task 5.6's 4-stage ring is refilled twice (a stage overwritten too early shows there),
# with an even N (float2 stores of C) and a ragged last k-tile.
GEMM_CASES = [(1, 1, 1), (37, 45, 72), (64, 130, 37), (131, 129, 136), (130, 136, 48), (72, 66, 328)]
GEMMS = {"5.3": ("wmma_gemm_naive", torch.float16), "5.4": ("wmma_gemm_tiled", torch.float16),
         "5.5": ("mma_gemm", torch.bfloat16), "5.6": ("mma_gemm_pipelined", torch.bfloat16)}
GEMM_HINTS = {
    "5.3": "stage both 16x16 tiles (zeros outside M, N, K), __syncwarp, load_matrix_sync (W as col_major, ldm 16), "
           "mma_sync, __syncwarp; store with store_acc_tile.",
    "5.4": "prologue: fetch_tile and put_tile k-tile 0 into buffer 0, __syncthreads; each k-tile t: fetch_tile t + 1 "
           "(if any), 2 W and 4 A fragments per k16 step from buffer t % 2, put_tile into the other buffer, "
           "__syncthreads; warp (warp / 4, warp % 4) owns rows 64 * (warp / 4), columns 32 * (warp % 4).",
    "5.5": "check the ldmatrix row addresses (A: row lane%16, column 8*(lane/16); W: row lane%8 + 8*(lane/16), column "
           "8*((lane/8)%2)) and the accumulator layout (row lane/4 + 8*(v/2), column 2*(lane%4) + v%2).",
    "5.6": "wait for a stage (cp_async_wait<kStages - 2>) and __syncthreads before reading it; commit one group per "
           "iteration even when nothing is issued; read and write through the same swizzle.",
}


def _gemm_case(task: str, M: int, N: int, K: int) -> None:
    name, dtype = GEMMS[task]
    m = _m()
    g = check.rng(f"{name}-{M}x{N}x{K}")
    A = check.randn((M, K), g, m.device, dtype=dtype)
    W = check.randn((N, K), g, m.device, dtype=dtype)
    full, C = check.guarded(M * N, m.device)
    with check.unchanged(A, W, names=["A", "W"]):
        getattr(m, name)(A, W, C.view(M, N), M, N, K)
    a, w = A.double().cpu(), W.double().cpu()
    ref = a @ w.T
    atol = 2 * max(K, 1) * FP32_ROUND * float((a.abs() @ w.abs().T).max()) + 1e-6
    check.assert_close(C.view(M, N), ref, name=f"{name} {M}x{N}x{K}", rtol=0.0, atol=atol, task=task,
                       hint=GEMM_HINTS[task])
    check.assert_guard(full, M * N, name, task)


@pytest.mark.task("5.3")
@pytest.mark.parametrize(("M", "N", "K"), GEMM_CASES)
def test_wmma_gemm_naive(M: int, N: int, K: int) -> None:
    _gemm_case("5.3", M, N, K)


@pytest.mark.task("5.4")
@pytest.mark.parametrize(("M", "N", "K"), GEMM_CASES)
def test_wmma_gemm_tiled(M: int, N: int, K: int) -> None:
    _gemm_case("5.4", M, N, K)


@pytest.mark.task("5.5")
@pytest.mark.parametrize(("M", "N", "K"), GEMM_CASES)
def test_mma_gemm(M: int, N: int, K: int) -> None:
    _gemm_case("5.5", M, N, K)


@pytest.mark.task("5.6")
@pytest.mark.parametrize(("M", "N", "K"), GEMM_CASES)
def test_mma_gemm_pipelined(M: int, N: int, K: int) -> None:
    _gemm_case("5.6", M, N, K)


def _rejects_fp32(task: str) -> None:
    """fp32 tensors where 16-bit inputs are expected: a TypeError naming the parameter, before any launch.
    Checked after a valid (ragged) call gives the right values: the refusal is the given binding's, so on its own
    it passed on the untouched stub, and a stub must fail every case of its task."""
    name, dtype = GEMMS[task]
    _gemm_case(task, 17, 9, 24)
    m = _m()
    A, W = torch.ones(16, 16, device=m.device), torch.ones(16, 16, device=m.device, dtype=dtype)
    C = check.poisoned((16, 16), torch.float32, m.device)
    with pytest.raises(TypeError) as e:
        getattr(m, name)(A, W, C, 16, 16, 16)
    want = "float16" if dtype == torch.float16 else "bfloat16"
    assert "A" in str(e.value) and want in str(e.value), str(e.value)
    assert bool(C.isnan().all()), "a rejected call must not have run the kernel"


@pytest.mark.task("5.3")
def test_wmma_gemm_rejects_fp32_inputs() -> None:
    _rejects_fp32("5.3")


@pytest.mark.task("5.5")
def test_mma_gemm_rejects_fp32_inputs() -> None:
    _rejects_fp32("5.5")


# ----------------------------------------------------------------------------------------------------
# 5.10 flash attention in bf16 on mma.sync
# ----------------------------------------------------------------------------------------------------

# (B, H, N, d, causal, q scale): ragged N, every supported d, one query, peaked softmax (large logits)
FLASH_CASES = [(1, 2, 70, 64, 0, 1.0), (1, 2, 70, 64, 1, 1.0), (2, 1, 130, 32, 1, 1.0), (1, 1, 1, 16, 0, 1.0),
               (1, 1, 33, 48, 1, 1.0), (1, 1, 100, 64, 1, 8.0)]


@pytest.mark.task("5.10")
@pytest.mark.parametrize(("B", "H", "N", "d", "causal", "qscale"), FLASH_CASES)
def test_flash_attention_bf16(B: int, H: int, N: int, d: int, causal: int, qscale: float) -> None:
    m = _m()
    g = check.rng(f"flash-bf16-{B}x{H}x{N}x{d}-{causal}-{qscale}")
    q = _bf16((B, N, H, d), g, m, scale=qscale)
    k, v = _bf16((B, N, H, d), g, m), _bf16((B, N, H, d), g, m)
    full, o = check.guarded(B * N * H * d, m.device, dtype=torch.bfloat16)
    with check.unchanged(q, k, v, names=["q", "k", "v"]):
        m.flash_attention_bf16(q, k, v, o.view(B, N, H, d), B, H, N, d, d**-0.5, causal)
    qd, kd, vd = (x.double().cpu().transpose(1, 2) for x in (q, k, v))
    ref = F.scaled_dot_product_attention(qd, kd, vd, is_causal=bool(causal)).transpose(1, 2)
    atol = BF16_ROUND * float(v.double().abs().max()) * (1 + 2.0**-4)
    check.assert_close(o.view(B, N, H, d).double(), ref, name=f"flash_attention_bf16 B={B} H={H} N={N} d={d} "
                       f"causal={causal}", rtol=BF16_ROUND, atol=atol, task="5.10",
                       hint="check the key/query indices of the mask (key 8j + 2t + i%2, query g + 8*(i/2)), the "
                            "rescaling of o_acc and row_sum by alpha, and the packing of P into A fragments.")
    check.assert_guard(full, B * N * H * d, "flash_attention_bf16", "5.10")


# ----------------------------------------------------------------------------------------------------
# Speed (GPU only; targets in lesson.toml, read by bench too)
# ----------------------------------------------------------------------------------------------------


def _target(task_id: str) -> float:
    target = course().task(LESSON, task_id).target
    assert target is not None, f"task {task_id} declares no speed target in lesson.toml"
    return target


def _gemm_sets(n: int, dtype: torch.dtype) -> tuple[list[tuple[torch.Tensor, ...]], Any]:
    """``MIN_SETS`` sets (A, W, C, A fp16, W fp16) of n^3 with different values, and ``ok(i)``: set i's C against an
    fp64 product on the device, within the fp32-accumulation bound of the correctness tests."""
    from cudacourse.speed import MIN_SETS

    m = _m()
    sets = []
    for _ in range(MIN_SETS):
        A, W = torch.randn(n, n, device=m.device, dtype=dtype), torch.randn(n, n, device=m.device, dtype=dtype)
        sets.append((A, W, torch.empty(n, n, device=m.device), A.half(), W.half()))
    refs = [(A.double() @ W.double().T).float() for A, W, *_ in sets]
    atol = [2 * n * FP32_ROUND * float((A.double().abs() @ W.double().abs().T).max()) + 1e-6 for A, W, *_ in sets]

    def ok(i: int) -> None:
        check.assert_close(sets[i][2], refs[i], name=f"C of {n}^3", rtol=0.0, atol=atol[i])

    return sets, ok


def _gemm_judge(task: str, name: str, n: int, sets: list[tuple[torch.Tensor, ...]], ok: Any, call: Any) -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    judge((LESSON, task), f"{name} {n}^3",
          Side(name, call, lambda i: (sets[i][2],), ok),
          Side("cuBLAS fp16", lambda i: torch.matmul(sets[i][3], sets[i][4].T)),
          sets=MIN_SETS, flops=2 * n**3, peak="tensor")


def _gemm_speed(task: str, name: str, dtype: torch.dtype) -> None:
    m = _m()
    _gemm_case(next(t for t, (n, _) in GEMMS.items() if n == name), 131, 129, 136)  # correct before timed
    n = 4096
    sets, ok = _gemm_sets(n, dtype)
    _gemm_judge(task, name, n, sets, ok, lambda i: getattr(m, name)(*sets[i][:3], n, n, n))


@pytest.mark.task("5.7")
@pytest.mark.gpu
def test_speed_wmma_tiled() -> None:
    _gemm_speed("5.7", "wmma_gemm_tiled", torch.float16)


@pytest.mark.task("5.8")
@pytest.mark.gpu
def test_speed_mma_pipelined() -> None:
    _gemm_speed("5.8", "mma_gemm_pipelined", torch.bfloat16)


@pytest.mark.task("5.9")
@pytest.mark.gpu
def test_speed_bf16_elementwise_and_rmsnorm() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    # 384 MiB in and out: ~0.27 ms a call at the H100's copy bandwidth (rows below gridDim.y's 65535). At 16384
    # rows (~0.09 ms) a grade, which times the calls by wall clock through the GPU worker (bench._wall_samples),
    # measured the message traffic as much as the kernel: the solution's RMSNorm read 0.70 of copy there
    # (2026-11-27), 0.93 in the bench.
    rows, cols = 49152, 4096
    sets = [(torch.randn(rows, cols, device=m.device, dtype=torch.bfloat16),
             torch.randn(cols, device=m.device, dtype=torch.bfloat16),
             torch.empty(rows, cols, device=m.device, dtype=torch.bfloat16)) for _ in range(MIN_SETS)]
    nbytes = 2 * rows * cols * 2  # read x, write y (bf16)
    refs = {"bias_gelu_bf16": lambda x, b: F.gelu(x.float() + b.float()),
            "rmsnorm_bf16": lambda x, w: F.rms_norm(x.float(), (cols,), w.float(), 1e-6)}
    for name, call in (("bias_gelu_bf16", lambda i: m.bias_gelu_bf16(*sets[i], rows, cols)),
                       ("rmsnorm_bf16", lambda i: m.rmsnorm_bf16(*sets[i], rows, cols, 1e-6))):

        def ok(i: int, name: str = name) -> None:
            want = refs[name](sets[i][0], sets[i][1])
            # bf16 output: one rounding (2^-8 relative) of a value computed in fp32; the timing checks the work
            check.assert_close(sets[i][2].float(), want, name=f"{name} {rows}x{cols}", rtol=2.0**-6, atol=2.0**-6,
                               task="5.9")

        judge((LESSON, "5.9"), f"{name} {rows}x{cols} bf16", Side(name, call, lambda i: (sets[i][2],), ok), None,
              sets=MIN_SETS, nbytes=nbytes)


@pytest.mark.task("5.11")
@pytest.mark.gpu
def test_speed_flash_attention_bf16() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    test_flash_attention_bf16(1, 2, 70, 64, 1, 1.0)  # correct before timed
    B, H, N, d = 8, 16, 4096, 64
    sets = []
    for _ in range(MIN_SETS):
        q, k, v = (torch.randn(B, N, H, d, device=m.device, dtype=torch.bfloat16) for _ in range(3))
        sets.append((q, k, v, torch.empty_like(q)))

    def sdpa(i: int) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in sets[i][:3]))

    def ok(i: int) -> None:
        # against SDPA's flash output (an fp64 reference of this size needs 17 GB): both round to bf16
        want = sdpa(i).transpose(1, 2).float()
        check.assert_close(sets[i][3].float(), want, name=f"flash_attention_bf16 ({B}, {H}, {N}, {d})",
                           rtol=2.0**-6, atol=2.0**-6 * float(sets[i][2].float().abs().max()), task="5.11")

    judge((LESSON, "5.11"), f"flash_attention_bf16 ({B}, {H}, {N}, {d})",
          Side("yours", lambda i: m.flash_attention_bf16(*sets[i], B, H, N, d, d**-0.5, 0), lambda i: (sets[i][3],),
               ok),
          Side("SDPA flash", sdpa), sets=MIN_SETS, flops=4 * B * H * N * N * d, peak="tensor")


# ----------------------------------------------------------------------------------------------------
# 5.12 Hopper: wgmma + TMA (a compute capability 9.0 GPU, or the simulator), 5.13 its speed (GPU only)
# ----------------------------------------------------------------------------------------------------

NO_SM90A = ("not graded: gemm_wgmma_supported says this build has no sm_90a code (a compute capability 9.0 GPU "
            "is needed; the course builds sm_90a there)")


def _wgmma(m: cc.Lesson, A: torch.Tensor, W: torch.Tensor, C: torch.Tensor, M: int, N: int, K: int) -> None:
    ok = torch.zeros(1, dtype=torch.int32, device=m.device)
    m.gemm_wgmma_supported(ok)
    if int(ok.item()) != 1:
        pytest.skip(NO_SM90A)
    m.gemm_wgmma(A, W, C, M, N, K)


@pytest.mark.task("5.12")
# N % 4 != 0 stores C from registers, N % 4 == 0 through shared memory by TMA; 2100 x 2052 is 153 block tiles, more
# than the persistent grid's one block per SM, so blocks take a second tile (and the stage parities carry over).
@pytest.mark.parametrize(("M", "N", "K"), [(37, 45, 72), (131, 129, 136), (300, 257, 520), (37, 44, 72),
                                           (300, 260, 520), (2100, 2052, 72)])
def test_gemm_wgmma(M: int, N: int, K: int) -> None:
    m = _m()
    g = check.rng(f"gemm_wgmma-{M}x{N}x{K}")
    A = check.randn((M, K), g, m.device, dtype=torch.bfloat16)
    W = check.randn((N, K), g, m.device, dtype=torch.bfloat16)
    full, C = check.guarded(M * N, m.device)
    with check.unchanged(A, W, names=["A", "W"]):
        _wgmma(m, A, W, C.view(M, N), M, N, K)
    a, w = A.double().cpu(), W.double().cpu()
    atol = 2 * K * FP32_ROUND * float((a.abs() @ w.abs().T).max()) + 1e-6
    check.assert_close(C.view(M, N), a @ w.T, name=f"gemm_wgmma {M}x{N}x{K}", rtol=0.0, atol=atol, task="5.12",
                       hint="check the stage parities ((it / kHStages) & 1 for full, one use earlier for empty), the "
                            "descriptors (+16 elements per k16 step) and that a stage goes back to the producer "
                            "(mbar_arrive on empty) only after wgmma_wait1 has retired the k-tile that read it.")
    check.assert_guard(full, M * N, "gemm_wgmma", "5.12")


@pytest.mark.task("5.13")
@pytest.mark.gpu
def test_speed_gemm_wgmma() -> None:
    m = _m()
    n = 4096
    sets, ok = _gemm_sets(n, torch.bfloat16)
    _wgmma(m, *sets[0][:3], n, n, n)  # (skips when this build has no sm_90a code)
    ok(0)  # correct first
    _gemm_judge("5.13", "gemm_wgmma", n, sets, ok, lambda i: m.gemm_wgmma(*sets[i][:3], n, n, n))
