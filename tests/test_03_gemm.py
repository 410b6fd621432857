"""Graded checks of lesson 03 (matrix multiplication): lessons/03_gemm/gemm.cu.

Tasks (ids match the TODOs in the kernel file and the rows of the points table):
  3.1 naive, one thread per C element, threadIdx.x down the rows (sgemm_v1_naive)       2 points
  3.2 coalesced, threadIdx.x along the columns (sgemm_v2_coalesced)                    2 points
  3.3 shared-memory 32x32 tiles (sgemm_v3_shared)                                      3 points
  3.4 2-D register blocking, 8x8 outputs per thread (sgemm_v5_2d)                      4 points
  3.5 linear layer y = x W^T + b, checked against torch.nn.functional.linear (linear)  3 points
  3.6 speed: sgemm_v5_2d at 4096^3 reaches 0.30x cuBLAS (GPU only)                    2 points
  3.7 speed: sgemm_v2_coalesced at least 2x faster than sgemm_v1_naive at 2048^3 (GPU) 1 point

Every C[i, j] is a float32 sum of K products of standard-normal numbers. The running sum grows like
sqrt(k), so its rounding errors grow like eps * K, not sqrt(K) (see ``gemm_tolerance``): the absolute
tolerance scales with K. A wrong or missing product changes an entry
by about 1, far above it. Simulator shapes are small (checked mode costs microseconds per thread);
``m.backend == "cuda"`` adds large ones.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

import cudacourse as cc
from cudacourse import check, settings

LESSON = "03_gemm"
# (M, N, K): 1x1x1, ragged against every tile (32, 64, 128; 8 and 32 along K), exact tiles, and a
# shape with 2x3 blocks of 128 whose K is a multiple of 4 (the float4 paths) but M, N are ragged.
SIM_SHAPES = [(1, 1, 1), (17, 33, 65), (128, 128, 128), (130, 260, 36)]
SIM_LARGER = [(70, 150, 257)]  # one more launch per task on the simulator, sized for checked mode
GPU_SHAPES = [(1000, 1000, 257), (1024, 1024, 1024), (513, 1025, 2049)]
# (batch, in_features, out_features) for the linear layer.
SIM_LINEAR = [(1, 1, 1), (17, 65, 33), (64, 100, 48), (128, 128, 128)]
SIM_LINEAR_LARGER = [(70, 257, 150)]
GPU_LINEAR = [(1000, 257, 1000), (512, 1024, 768)]


def _m() -> cc.Lesson:
    return cc.lesson(LESSON)


def _shapes(m: cc.Lesson, sim: list, gpu: list) -> list:
    return sim + (gpu if m.backend == "cuda" else [])


def gemm_tolerance(K: int) -> tuple[float, float]:
    """(rtol, atol) for a float32 dot product of length K of standard-normal inputs.

    Adding K terms one by one, the partial sums have size about sqrt(k); each addition rounds with an
    error up to eps/2 times that size, and those errors add up with random signs to a standard
    deviation of about 0.15 * eps * K (benchmarks/sum_error.py, results/cpu/sum_error.txt: 0.15-0.17 for
    K = 65 .. 4096; the worst of 2000 rows reached 2.1 * eps * K at K = 65). We allow 4 * eps * K plus a
    relative 1e-5: blocked or FMA orders are more exact, and a dropped or doubled product (an error near 1)
    still fails for every K the tests use. (``check.sum_tolerance``, which grows like sqrt(K), is meant for tree
    orders; a running sum over K = 4096 products exceeds it in about 0.7% of rows (14-15 of 2000).)
    """
    eps = torch.finfo(torch.float32).eps
    return 1e-5, 4.0 * eps * max(K, 1) + 1e-6


def _gemm_inputs(name: str, M: int, N: int, K: int, m: cc.Lesson) -> tuple[torch.Tensor, torch.Tensor]:
    g = check.rng(name)
    return check.randn((M, K), g, m.device), check.randn((K, N), g, m.device)


def _reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return (A.detach().cpu().double() @ B.detach().cpu().double()).float()


def _output(rows: int, cols: int, m: cc.Lesson) -> tuple[torch.Tensor, torch.Tensor]:
    """A poisoned [rows, cols] output that is the head of a longer poisoned buffer (the guard)."""
    full, out = check.guarded(rows * cols, m.device)
    return full, out.view(rows, cols)


def _assert_guard(full: torch.Tensor, n: int, fn: str, task: str) -> None:
    check.assert_guard(full, n, fn, task, hint="Guard every store with row < M && col < N.")


def _check_gemm(fn: str, M: int, N: int, K: int, *, task: str, hint: str) -> None:
    m = _m()
    A, B = _gemm_inputs(f"{fn}-{M}x{N}x{K}", M, N, K, m)
    full, C = _output(M, N, m)
    with check.unchanged(A, B, names=["A", "B"]):
        getattr(m, fn)(A, B, C, M, N, K)
    _assert_guard(full, M * N, fn, task)
    rtol, atol = gemm_tolerance(K)
    check.assert_close(C, _reference(A, B), name=f"{fn} C[{M}x{N}], K={K}", rtol=rtol, atol=atol, task=task,
                       hint=hint)


HINT_31 = ("row = blockIdx.x*blockDim.x + threadIdx.x and col = blockIdx.y*blockDim.y + threadIdx.y (the launcher's "
           "grid covers rows with x); skip threads with row >= M or col >= N; C[row*N + col] = sum_k "
           "A[row*K + k] * B[k*N + col].")
HINT_32 = ("this launcher's grid is transposed: col = blockIdx.x*blockDim.x + threadIdx.x, row = blockIdx.y*blockDim.y "
           "+ threadIdx.y. With v1's mapping, rows past N (or columns past M) never get a thread when M != N.")
HINT_33 = ("per step k0: As[ty][tx] = A[row, k0+tx] and Bs[ty][tx] = B[k0+ty, col], 0.0f outside A or B; "
           "__syncthreads(); 32 products; __syncthreads(). Errors only in the last rows/columns or for K not a "
           "multiple of 32 mean a missing zero-fill at the ragged edge.")
HINT_34 = ("thread (trow, tcol) owns rows trow*8..trow*8+7 and columns tcol*8..tcol*8+7 of the 128x128 tile; all "
           "256 threads load the 1024-element tiles with a strided loop; zero outside A and B; guard the stores.")
HINT_35 = ("y[r, n] = sum_k x[r, k] * W[n, k] + b[n]: linear calls sgemm_v8_best<true> with M = batch, N = out, "
           "K = in and W as B; the W tile loads like the A tile (row colBase + r of W, columns k0 + c) and is stored "
           "transposed, Bs[c + j][r]; the epilogue adds bias[col + jj] where col + jj < N.")


# ----------------------------------------------------------------------------------------------------
# Worked examples and given versions (not graded: given complete; these keep them honest)
# ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("M,K", [(1, 1), (33, 65), (300, 129)])
def test_worked_sgemv(M: int, K: int) -> None:
    m = _m()
    g = check.rng(f"sgemv-{M}x{K}")
    A, x = check.randn((M, K), g, m.device), check.randn((K,), g, m.device)
    y = check.poisoned((M,), torch.float32, m.device)
    with check.unchanged(A, x, names=["A", "x"]):
        m.sgemv_example(A, x, y, M, K)
    rtol, atol = gemm_tolerance(K)
    ref = (A.cpu().double() @ x.cpu().double()).float()
    check.assert_close(y, ref, name="sgemv_example y", rtol=rtol, atol=atol, task="worked example",
                       hint="this kernel is given complete; did an edit change it?")


@pytest.mark.parametrize("fn", ["sgemm_v4_1d", "sgemm_v6_vec", "sgemm_v7_tuned", "sgemm_v8_warptile"])
def test_given_versions(fn: str) -> None:
    m = _m()
    for M, N, K in _shapes(m, SIM_SHAPES, GPU_SHAPES):
        _check_gemm(fn, M, N, K, task="given", hint="this kernel is given complete; did an edit change it?")


def test_given_versions_unaligned() -> None:
    """v6-v8 fall back to scalar loads when a pointer is not 16-byte aligned (a view one float in)."""
    m = _m()
    M, N, K = 40, 36, 20  # K and N multiples of 4: only the alignment forces the scalar path
    for fn in ("sgemm_v6_vec", "sgemm_v7_tuned", "sgemm_v8_warptile"):
        g = check.rng(f"{fn}-unaligned")
        A = check.randn((M * K + 1,), g, m.device)[1:].view(M, K)
        B = check.randn((K * N + 1,), g, m.device)[1:].view(K, N)
        C = check.poisoned((M * N + 1,), torch.float32, m.device)[1:].view(M, N)
        with check.unchanged(A, B, names=["A", "B"]):
            getattr(m, fn)(A, B, C, M, N, K)
        rtol, atol = gemm_tolerance(K)
        check.assert_close(C, _reference(A, B), name=f"{fn} (unaligned views)", rtol=rtol, atol=atol,
                           task="given", hint="the launcher must pick the scalar path for unaligned pointers")


# ----------------------------------------------------------------------------------------------------
# 3.1 naive
# ----------------------------------------------------------------------------------------------------

@pytest.mark.task("3.1")
@pytest.mark.parametrize("shape", SIM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_naive(shape: tuple[int, int, int]) -> None:
    _check_gemm("sgemm_v1_naive", *shape, task="3.1", hint=HINT_31)


@pytest.mark.task("3.1")
def test_naive_larger() -> None:
    """One larger shape on the simulator; large ones too on a GPU."""
    for shape in _shapes(_m(), SIM_LARGER, GPU_SHAPES):
        _check_gemm("sgemm_v1_naive", *shape, task="3.1", hint=HINT_31)


@pytest.mark.task("3.1")
def test_rejects_bad_inputs() -> None:
    """The binding refuses wrong dtypes and non-contiguous tensors before anything runs, naming the parameter.
    Checked after a valid call of the same shape gives the right values: the refusals are the given binding's, so
    on their own they passed on the untouched stub, and a stub must fail every case of its task."""
    m = _m()
    M, N, K = 8, 6, 4
    _check_gemm("sgemm_v1_naive", M, N, K, task="3.1", hint=HINT_31)
    A, B = _gemm_inputs("reject", M, N, K, m)
    C = check.poisoned((M, N), torch.float32, m.device)
    with pytest.raises(TypeError, match=r"parameter 'A'.*float32"):
        m.sgemm_v1_naive(A.double(), B, C, M, N, K)
    with pytest.raises(TypeError, match=r"parameter 'C'.*float32"):
        m.sgemm_v1_naive(A, B, C.half(), M, N, K)
    Bt = check.randn((N, K), check.rng("reject-t"), m.device).t()  # a [K, N] view with strides (1, K)
    with pytest.raises(ValueError, match=r"parameter 'B'.*contiguous"):
        m.sgemm_v1_naive(A, Bt, C, M, N, K)
    assert bool(C.isnan().all()), "a rejected call must not have run the kernel"


# ----------------------------------------------------------------------------------------------------
# 3.2 coalesced
# ----------------------------------------------------------------------------------------------------

@pytest.mark.task("3.2")
@pytest.mark.parametrize("shape", SIM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_coalesced(shape: tuple[int, int, int]) -> None:
    _check_gemm("sgemm_v2_coalesced", *shape, task="3.2", hint=HINT_32)


@pytest.mark.task("3.2")
def test_coalesced_larger() -> None:
    """One larger shape on the simulator; large ones too on a GPU."""
    for shape in _shapes(_m(), SIM_LARGER, GPU_SHAPES):
        _check_gemm("sgemm_v2_coalesced", *shape, task="3.2", hint=HINT_32)


# ----------------------------------------------------------------------------------------------------
# 3.3 shared-memory tiles
# ----------------------------------------------------------------------------------------------------

@pytest.mark.task("3.3")
@pytest.mark.parametrize("shape", SIM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_shared(shape: tuple[int, int, int]) -> None:
    _check_gemm("sgemm_v3_shared", *shape, task="3.3", hint=HINT_33)


@pytest.mark.task("3.3")
def test_shared_larger() -> None:
    """One larger shape on the simulator; large ones too on a GPU."""
    for shape in _shapes(_m(), SIM_LARGER, GPU_SHAPES):
        _check_gemm("sgemm_v3_shared", *shape, task="3.3", hint=HINT_33)


# ----------------------------------------------------------------------------------------------------
# 3.4 2-D register blocking
# ----------------------------------------------------------------------------------------------------

@pytest.mark.task("3.4")
@pytest.mark.parametrize("shape", SIM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_2d(shape: tuple[int, int, int]) -> None:
    _check_gemm("sgemm_v5_2d", *shape, task="3.4", hint=HINT_34)


@pytest.mark.task("3.4")
def test_2d_larger() -> None:
    """One larger shape on the simulator; large ones too on a GPU."""
    for shape in _shapes(_m(), SIM_LARGER, GPU_SHAPES):
        _check_gemm("sgemm_v5_2d", *shape, task="3.4", hint=HINT_34)


# ----------------------------------------------------------------------------------------------------
# 3.5 linear layer
# ----------------------------------------------------------------------------------------------------

def _check_linear(batch: int, fin: int, fout: int) -> None:
    m = _m()
    g = check.rng(f"linear-{batch}x{fin}x{fout}")
    x = check.randn((batch, fin), g, m.device)
    W = check.randn((fout, fin), g, m.device)
    b = check.randn((fout,), g, m.device)
    full, y = _output(batch, fout, m)
    with check.unchanged(x, W, b, names=["x", "W", "b"]):
        m.linear(x, W, b, y, batch, fin, fout)
    _assert_guard(full, batch * fout, "linear", "3.5")
    ref = F.linear(x.cpu().double(), W.cpu().double(), b.cpu().double()).float()
    rtol, atol = gemm_tolerance(fin + 1)
    check.assert_close(y, ref, name=f"linear y[{batch}x{fout}], in={fin}", rtol=rtol, atol=atol, task="3.5",
                       hint=HINT_35)


@pytest.mark.task("3.5")
@pytest.mark.parametrize("shape", SIM_LINEAR, ids=lambda s: "x".join(map(str, s)))
def test_linear(shape: tuple[int, int, int]) -> None:
    _check_linear(*shape)


@pytest.mark.task("3.5")
def test_linear_larger() -> None:
    """One larger shape on the simulator; large ones on a GPU."""
    for shape in _shapes(_m(), SIM_LINEAR_LARGER, GPU_LINEAR):
        _check_linear(*shape)


@pytest.mark.task("3.5")
def test_linear_rejects_bad_inputs() -> None:
    """The binding refuses a float64 weight and a non-contiguous x, naming the parameter. Checked after a valid
    call of the same shape gives the right values (the refusals alone passed on the untouched stub)."""
    _check_linear(4, 8, 6)
    m = _m()
    g = check.rng("linear-reject")
    x, W, b = check.randn((4, 8), g, m.device), check.randn((6, 8), g, m.device), check.randn((6,), g, m.device)
    y = check.poisoned((4, 6), torch.float32, m.device)
    with pytest.raises(TypeError, match=r"parameter 'W'.*float32"):
        m.linear(x, W.double(), b, y, 4, 8, 6)
    with pytest.raises(ValueError, match=r"parameter 'x'.*contiguous"):
        m.linear(check.randn((8, 4), g, m.device).t(), W, b, y, 4, 8, 6)
    assert bool(y.isnan().all()), "a rejected call must not have run the kernel"


# ----------------------------------------------------------------------------------------------------
# Speed (GPU only; "not graded" on the simulator). TF32 off: cuBLAS computes in true FP32 like our kernels.
# ----------------------------------------------------------------------------------------------------

def _gemm_sets(n: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], object]:
    """``MIN_SETS`` buffer sets (A, B, C) of n x n x n with different values, and ``ok(i)``, which checks set i's C
    against an fp64 product (computed on the device: 4096^3 in fp64 on the CPU took seconds per set)."""
    from cudacourse.speed import MIN_SETS

    m = _m()
    g = check.rng(f"speed-{n}")
    sets = [(check.randn_on_device((n, n), g, m.device), check.randn_on_device((n, n), g, m.device),
             torch.empty(n, n, device=m.device))
            for _ in range(MIN_SETS)]
    refs = [(A.double() @ B.double()).float() for A, B, _ in sets]
    rtol, atol = gemm_tolerance(n)

    def ok(i: int, fn: str = "") -> None:
        check.assert_close(sets[i][2], refs[i], name=f"{fn or 'C'} at {n}^3", rtol=rtol, atol=atol)

    return sets, ok


def _cublas_fp32(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> None:
    """torch.matmul with TF32 off: cuBLAS computes in true FP32 like our kernels."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        torch.matmul(A, B, out=C)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.task("3.6")
@pytest.mark.gpu
def test_speed_2d_vs_cublas() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    n = 4096
    sets, ok = _gemm_sets(n)
    check.poison_(sets[0][2])
    m.sgemm_v5_2d(*sets[0], n, n, n)
    ok(0, "sgemm_v5_2d (checked before timing)")  # type: ignore[operator]
    refs = [torch.empty(n, n, device=m.device) for _ in sets]
    judge(("03_gemm", "3.6"), f"sgemm_v5_2d at {n}^3",
          Side("sgemm_v5_2d", lambda i: m.sgemm_v5_2d(*sets[i], n, n, n), lambda i: (sets[i][2],), ok),  # type: ignore[arg-type]
          Side("cuBLAS FP32 (TF32 off)", lambda i: _cublas_fp32(sets[i][0], sets[i][1], refs[i])),
          sets=MIN_SETS, flops=2 * n**3, peak="fp32",
          hint="Check that every thread keeps acc[8][8], a[8] and b[8] in registers (constant trip counts with "
               "#pragma unroll, no dynamic indexing into them) and that the k loop reads shared memory, never global "
               "memory.")


@pytest.mark.task("3.7")
@pytest.mark.gpu
def test_speed_coalesced_vs_naive() -> None:
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    n = 2048
    sets, ok = _gemm_sets(n)
    for fn in ("sgemm_v1_naive", "sgemm_v2_coalesced"):  # correct first
        check.poison_(sets[0][2])
        getattr(m, fn)(*sets[0], n, n, n)
        ok(0, f"{fn} (checked before timing)")  # type: ignore[operator]
    naive = [torch.empty(n, n, device=m.device) for _ in sets]
    judge(("03_gemm", "3.7"), f"at {n}^3",
          Side("sgemm_v2_coalesced", lambda i: m.sgemm_v2_coalesced(*sets[i], n, n, n), lambda i: (sets[i][2],),
               ok),  # type: ignore[arg-type]
          Side("sgemm_v1_naive", lambda i: m.sgemm_v1_naive(sets[i][0], sets[i][1], naive[i], n, n, n)),
          sets=MIN_SETS, flops=2 * n**3, peak="fp32",
          hint="In v2 consecutive threadIdx.x must give consecutive columns (coalesced B loads and C stores); in v1 "
               "they must give consecutive rows, as its TODO says.")


# ----------------------------------------------------------------------------------------------------
# 3.8 a conflict-free shared-memory transpose (lessons/03_gemm/transpose.cu), judged by the profiler
# ----------------------------------------------------------------------------------------------------

# (M, N): one element, ragged against the 32x32 tile both ways, exact tiles, a tall thin one
TRANSPOSE_SHAPES = [(1, 1), (33, 65), (64, 64), (100, 37), (7, 129)]
HINT_38 = ("stage a 32x32 tile in shared memory as transpose_tiled does, with rows of 33 floats (tile[32][33]) so a "
           "column of the tile spreads over 32 banks; guard loads with r < M && c < N and stores with "
           "orow < N && oc < M.")


def _check_transpose(fn: str, M: int, N: int, task: str) -> None:
    m = _m()
    x = check.randn((M, N), check.rng(f"{fn}-{M}x{N}"), m.device)
    full, out = _output(N, M, m)
    with check.unchanged(x, names=["in"]):
        getattr(m, fn)(x, out, M, N)
    check.assert_guard(full, M * N, fn, task, hint="Guard every store with orow < N && oc < M.")
    check.assert_close(out, x.t().contiguous(), name=f"{fn} out[{N}x{M}]", rtol=0, atol=0, task=task, hint=HINT_38)


def _transpose_traffic(fn: str, task: str) -> None:
    """Run ``fn`` at 64x96 under the simulator's profiler: it must use shared memory without a single bank
    conflict and store coalesced (4 sectors per 32-float request)."""
    m = _m()
    mod = cc.load(m.dir / "transpose.cu", [fn], backend="sim", profile=True)
    try:
        M, N = 64, 96
        x = check.randn((M, N), check.rng(f"{fn}-profile"), torch.device("cpu"))
        out = check.poisoned((N, M), torch.float32, torch.device("cpu"))
        getattr(mod, fn)(x, out, M, N)
        assert torch.equal(out, x.t()), f"task {task}: {fn} gives a wrong transpose under the profiler. {HINT_38}"
        k = mod.profile_report().kernels[0]
        mm = k.metrics
        shared = mm["smsp__inst_executed_op_shared_ld.sum"] + mm["smsp__inst_executed_op_shared_st.sum"]
        conflicts = {op: int(mm[f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum"]) for op in ("ld", "st")}
        lines = sorted({s.line for s in k.lines if s.space == "shared" and s.conflicts})
        assert shared > 0, (f"task {task}: {fn} does not use shared memory; stage a tile in __shared__ memory so "
                            f"both the reads of `in` and the writes of `out` are coalesced. {HINT_38}")
        assert conflicts == {"ld": 0, "st": 0}, (
            f"task {task}: {fn} is correct but has shared-memory bank conflicts ({conflicts['ld']} extra load "
            f"wavefronts, {conflicts['st']} extra store wavefronts) at line(s) {lines} of transpose.cu. Run "
            f"`.venv/bin/python -m cudacourse profile 03_gemm {fn}` to see them. {HINT_38}")
        spr = mm["sim__sectors_per_request_global_st"]
        assert spr <= 4, (f"task {task}: {fn} stores to `out` uncoalesced ({spr:.1f} sectors per request, 4 is "
                          f"coalesced): consecutive threadIdx.x must write consecutive columns of out. {HINT_38}")
    finally:
        mod.close()


def test_transpose_given_versions() -> None:
    """The worked example and the given tiled version are correct (not graded)."""
    for fn in ("transpose_naive", "transpose_tiled"):
        for shape in TRANSPOSE_SHAPES:
            _check_transpose(fn, *shape, task="given")


def test_transpose_traffic_check_rejects_a_conflicted_tile() -> None:
    """The graded traffic check fails the given transpose_tiled (32-way conflicts), so it can fail a learner's."""
    with pytest.raises(AssertionError, match="bank conflicts"):
        _transpose_traffic("transpose_tiled", "given")


@pytest.mark.task("3.8")
@pytest.mark.parametrize("shape", TRANSPOSE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_transpose_conflict_free(shape: tuple[int, int]) -> None:
    _check_transpose("transpose_conflict_free", *shape, task="3.8")


@pytest.mark.task("3.8")
def test_transpose_conflict_free_has_no_bank_conflicts() -> None:
    _transpose_traffic("transpose_conflict_free", "3.8")


# ----------------------------------------------------------------------------------------------------
# Triton track (optional): task 3.T1, the twin in gemm_triton.py, checked like the CUDA versions (same shapes,
# same tolerance, poisoned and guarded output). On the CPU Triton's interpreter runs it with 32 x 32 x 32 tiles,
# so every simulator shape is ragged against them; on a GPU the autotuned tiles (64 or 128) and the GPU shapes.
# Without the triton package the task is "not graded", with the command that installs it.
# ----------------------------------------------------------------------------------------------------

HINT_3T1 = ("sgemm_kernel (TODO task 3.T1 in gemm_triton.py): acc = zeros; for k0 in range(0, K, BLOCK_K): load the A "
            "tile at rows[:, None] * K + (k0 + ks)[None, :] and the B tile at (k0 + ks)[:, None] * N + cols[None, :], "
            "masked with other=0.0; acc += tl.dot(a, b, input_precision=\"ieee\"); store masked to rows < M, cols < N.")


def _gemm_twin() -> ModuleType:
    from cudacourse.triton_track import twin_or_not_graded

    return twin_or_not_graded(LESSON)


def _triton_gemm_case(t: ModuleType, M: int, N: int, K: int, what: str = "") -> None:
    from cudacourse.grading.screens import torch_answer_guard

    m = _m()
    A, B = _gemm_inputs(f"3.T1-{M}x{N}x{K}", M, N, K, m)
    full, C = _output(M, N, m)
    with check.unchanged(A, B, names=["A", "B"]), torch_answer_guard([t.__file__]):
        t.sgemm(A, B, C, M, N, K)
    _assert_guard(full, M * N, "sgemm (Triton)", "3.T1")
    rtol, atol = gemm_tolerance(K)
    check.assert_close(C, _reference(A, B), name=f"sgemm (Triton) C[{M}x{N}], K={K}{what}", rtol=rtol, atol=atol,
                       task="3.T1", hint=HINT_3T1)


@pytest.mark.task("3.T1")
@pytest.mark.parametrize("shape", SIM_SHAPES + SIM_LARGER, ids=lambda s: "x".join(map(str, s)))
def test_triton_sgemm(shape: tuple[int, int, int]) -> None:
    """The Triton twin of the tiled SGEMM: ragged and exact shapes; on a GPU the large shapes too."""
    t = _gemm_twin()
    _triton_gemm_case(t, *shape)
    if _m().backend == "cuda" and shape == SIM_LARGER[-1]:
        for big in GPU_SHAPES:
            _triton_gemm_case(t, *big)


@pytest.mark.task("3.T1")
def test_triton_sgemm_unaligned_views_and_bad_inputs() -> None:
    """A and B one float into their buffers (Triton then loads narrower: the answer must not change), and the
    given wrapper refuses a float64 or non-contiguous tensor, naming it, before anything runs."""
    t, m = _gemm_twin(), _m()
    M, N, K = 40, 36, 20
    g = check.rng("3.T1-unaligned")
    A = check.randn((M * K + 1,), g, m.device)[1:].view(M, K)
    B = check.randn((K * N + 1,), g, m.device)[1:].view(K, N)
    full = check.poisoned((M * N + 1,), torch.float32, m.device)
    C = full[1:].view(M, N)
    with check.unchanged(A, B, names=["A", "B"]):
        t.sgemm(A, B, C, M, N, K)
    rtol, atol = gemm_tolerance(K)
    check.assert_close(C, _reference(A, B), name="sgemm (Triton) of views at offset 1", rtol=rtol, atol=atol,
                       task="3.T1", hint=HINT_3T1)
    assert bool(full[0].isnan()), "sgemm (Triton, task 3.T1) wrote before the start of C"
    C2 = check.poisoned((M, N), torch.float32, m.device)
    with pytest.raises(TypeError, match=r"parameter 'A'.*float32"):
        t.sgemm(A.double(), B, C2, M, N, K)
    with pytest.raises(ValueError, match=r"parameter 'B'.*contiguous"):
        t.sgemm(A, check.randn((N, K), g, m.device).t(), C2, M, N, K)
    assert bool(C2.isnan().all()), "a rejected call must not run the kernel"


def test_triton_worked_sgemv() -> None:
    """The worked example of gemm_triton.py (given complete; not graded)."""
    t, m = _gemm_twin(), _m()
    for M, K in [(1, 1), (33, 65), (300, 129)]:
        g = check.rng(f"3.T-sgemv-{M}x{K}")
        A, x = check.randn((M, K), g, m.device), check.randn((K,), g, m.device)
        y = check.poisoned((M,), torch.float32, m.device)
        t.sgemv_example(A, x, y, M, K)
        rtol, atol = gemm_tolerance(K)
        check.assert_close(y, (A.cpu().double() @ x.cpu().double()).float(), name=f"sgemv_example (Triton) {M}x{K}",
                           rtol=rtol, atol=atol, task="worked example",
                           hint="sgemv_example is given complete in gemm_triton.py; did an edit change it?")


# Wrong twins, made from the solution by one edit each: every one must fail the checks the task uses.
TRITON_MUTANTS = {
    "all zeros": ("tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc,",
                  "tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc * 0.0,"),
    "drops the ragged last slice of K": ("for k0 in range(0, K, BLOCK_K):\n        a = tl.load(a_ptr + rows",
                                         "for k0 in range(0, K - BLOCK_K + 1, BLOCK_K):\n        a = tl.load(a_ptr + "
                                         "rows"),
    "stores past the last column": ("acc, mask=(rows[:, None] < M) & (cols[None, :] < N))",
                                    "acc, mask=(rows[:, None] < M))"),
    "TF32 products": ('acc += tl.dot(a, b, input_precision="ieee")\n', "acc += tl.dot(a, b)\n"),
}


@pytest.mark.parametrize("mutant", list(TRITON_MUTANTS))
def test_triton_wrong_twins_fail_the_check(mutant: str, tmp_path: Path) -> None:
    from cudacourse.triton_track import load

    _gemm_twin()  # not graded (a skip) without triton
    m = _m()
    src = settings.current().root / "solutions" / LESSON / "gemm_triton.py"
    old, new = TRITON_MUTANTS[mutant]
    text = src.read_text()
    assert text.count(old) == 1, f"the mutant {mutant!r} no longer applies to {src}: update TRITON_MUTANTS"
    if mutant == "TF32 products" and m.backend != "cuda":
        pytest.skip("the interpreter multiplies in float32 whatever the precision asked: TF32 exists on a GPU only")
    (tmp_path / "gemm_triton.py").write_text(text.replace(old, new))
    wrong = load(tmp_path / "gemm_triton.py", backend=m.backend)
    with pytest.raises(AssertionError):
        # N = 200: the last tile of columns (32, 64 or 128 wide) sticks out by at most 56, inside the 64-float guard
        # after C, so a store past the last column is caught there and never lands outside the allocation
        _triton_gemm_case(wrong, 130, 200, 36 if m.backend != "cuda" else 1000, f" ({mutant})")
