"""Graded checks of lesson 01 (ReLU): lessons/01_relu/relu.cu and lessons/01_relu/relu_torch.cu.

Tasks (ids match the TODOs in the kernel files and the rows of the points table):
  1.1 scalar ReLU, one thread per element, bounds check (relu_v1_scalar)           2 points
  1.2 grid-stride ReLU, any grid covers any n (relu_v2_grid_stride)                2 points
  1.3 float4 ReLU with a scalar tail (relu_v3_float4)                              3 points
  1.4 ReLU backward, wired into a torch.autograd.Function (relu_backward)          2 points
  1.5 fused bias-add + GELU, tanh approximation (bias_gelu)                        3 points
  1.6 hand-written torch::Tensor binding (relu_forward in relu_torch.cu)           3 points
  1.7 speed: relu_v3_float4 at >= 0.80 of the copy bandwidth, 2^28 floats (GPU)    2 points

Every case uses fresh seeded inputs (the seed is printed; replay with --seed), outputs poisoned with NaN
before the run, inputs checked unchanged after it, and sizes that are not multiples of the block (256)
or of the vector width (4). ReLU is exact, so its results must match bit for bit; GELU is compared with
a float64 reference under written-down tolerances.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

import cudacourse as cc
from cudacourse import check

LESSON = "01_relu"
BLOCK = 256                      # kBlock in relu.cu
BIG = 2**20 + 3                  # the largest graded length: not a multiple of the block or of 4
SIZES = [1, 31, 32, 33, 1000, BIG]
EXACT = dict(rtol=0.0, atol=0.0)  # max(x, 0) involves no rounding: any difference is a bug


def _m() -> cc.Lesson:
    return cc.lesson(LESSON)


def _input(name: str, n: int, m: cc.Lesson, scale: float = 1.0) -> torch.Tensor:
    """Random normal values with exact zeros and infinities planted (where n allows), on m.device."""
    x = check.randn((n,), check.rng(name), "cpu", scale=scale)
    if n >= 8:
        x[n // 2] = 0.0
        x[n // 3] = float("inf")
        x[n // 5] = float("-inf")
    return x.to(m.device)


def _given(m: cc.Lesson, launcher: str) -> bool | None:
    """Whether the learner's ``launcher`` in relu.cu is still the course's (a diagnosis of an unwritten tail then
    points at the kernel, not at the launcher); None where it cannot be told (a grader's worker)."""
    return check.given_unchanged(m.dir / "relu.cu", launcher)


def _wrong_device(n: int, m: cc.Lesson) -> torch.Tensor:
    """A float32 tensor on a device the module does not run on (CPU for the GPU, 'meta' for the simulator)."""
    return torch.zeros(n, device="cpu" if m.backend == "cuda" else "meta")


# ----------------------------------------------------------------------------------------------------
# Worked examples (not graded: they are given complete; these keep them honest)
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 1000])
def test_worked_examples(n: int) -> None:
    m = _m()
    x = _input(f"worked-{n}", n, m)
    dy = _input(f"worked-dy-{n}", n, m)
    hint = "this function is given complete in relu.cu; did an edit change it?"
    y = check.poisoned(n, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.scale(x, y, 2.5, n)
    check.assert_close(y, 2.5 * x, name="scale", task="worked example", hint=hint)
    y = check.poisoned(n, torch.float32, m.device)
    m.fill(y, 7.0, n, 1)
    check.assert_close(y, torch.full_like(y, 7.0), name="fill (1 block)", task="worked example", hint=hint)
    dx = check.poisoned(n, torch.float32, m.device)
    with check.unchanged(x, dy, names=["x", "dy"]):
        m.abs_backward(x, dy, dx, n)
    check.assert_close(dx, dy * torch.sign(x), name="abs_backward", task="worked example", hint=hint)
    rows, cols = 3, 37
    xm = check.randn((rows, cols), check.rng(f"worked-bias-{n}"), m.device)
    b = check.randn((cols,), check.rng(f"worked-b-{n}"), m.device)
    ym = check.poisoned((rows, cols), torch.float32, m.device)
    with check.unchanged(xm, b, names=["x", "b"]):
        m.bias_add(xm, b, ym, rows, cols)
    check.assert_close(ym, xm + b, name="bias_add", task="worked example", hint=hint)


def test_worked_scale_float4() -> None:
    m = _m()
    n = 1024
    x = _input("worked-float4", n, m)
    y = check.poisoned(n, torch.float32, m.device)
    m.scale_float4(x, y, -3.0, n)
    check.assert_close(y, -3.0 * x, name="scale_float4", task="worked example",
                       hint="scale_float4 is given complete in relu.cu; did an edit change it?")


# ----------------------------------------------------------------------------------------------------
# Task 1.1: scalar ReLU
# ----------------------------------------------------------------------------------------------------

HINT_11 = ("relu_v1_scalar_kernel (TODO task 1.1): each thread computes its global index from its block and "
           "thread indices, and only a thread whose index is inside the array reads and writes it; the worked "
           "example scale just above it has the same shape.")


@pytest.mark.task("1.1")
@pytest.mark.parametrize("n", SIZES)
def test_relu_scalar(n: int) -> None:
    """Scalar ReLU with a bounds check (relu_v1_scalar)."""
    m = _m()
    x = _input(f"1.1-n{n}", n, m)
    y = check.poisoned(n, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.relu_v1_scalar(x, y, n)
    check.assert_close(y, torch.relu(x), name=f"relu_v1_scalar y (n={n})", task="1.1", hint=HINT_11,
                       launcher_given=_given(m, "relu_v1_scalar"), **EXACT)


@pytest.mark.task("1.1")
def test_relu_scalar_rejects_bad_inputs() -> None:
    """The generated binding refuses tensors a raw float* cannot take, naming the parameter, running nothing.
    Checked after a valid call gives the right values: the refusals are the binding's, not the learner's code, so
    on their own they passed on the untouched stub (a learner read "6 failed, 4 passed" for an empty kernel), and
    a stub must fail every case of its task."""
    m = _m()
    n = 100
    x = _input("1.1-bad-valid", n, m)
    y = check.poisoned(n, torch.float32, m.device)
    m.relu_v1_scalar(x, y, n)
    check.assert_close(y, torch.relu(x), name=f"relu_v1_scalar y (n={n})", task="1.1", hint=HINT_11,
                       launcher_given=_given(m, "relu_v1_scalar"), **EXACT)
    for bad in ["dtype", "non-contiguous", "device", "output dtype"]:
        _scalar_rejects(m, bad)


def _scalar_rejects(m: cc.Lesson, bad: str) -> None:
    """The generated binding refuses tensors a raw float* cannot take, naming the parameter, running nothing."""
    n = 100
    x = check.randn((n,), check.rng(f"1.1-bad-{bad}"), m.device)
    y = check.poisoned(n, torch.float32, m.device)
    if bad == "dtype":
        with pytest.raises(TypeError, match=r"parameter 'x'.*float32"):
            m.relu_v1_scalar(x.double(), y, n)
    elif bad == "non-contiguous":
        x2 = check.randn((2 * n,), check.rng("1.1-bad-strided"), m.device)[::2]
        with pytest.raises(ValueError, match=r"parameter 'x'.*contiguous"):
            m.relu_v1_scalar(x2, y, n)
    elif bad == "device":
        with pytest.raises(ValueError, match=r"parameter 'x'.*expects a tensor on"):
            m.relu_v1_scalar(_wrong_device(n, m), y, n)
    else:
        with pytest.raises(TypeError, match=r"parameter 'y'.*float32"):
            m.relu_v1_scalar(x, y.half(), n)
    assert bool(y.isnan().all()), f"a rejected call ({bad}) must not run the kernel"


# ----------------------------------------------------------------------------------------------------
# Task 1.2: grid-stride ReLU
# ----------------------------------------------------------------------------------------------------

HINT_12 = ("relu_v2_grid_stride_kernel (TODO task 1.2): a thread handles more than one element: after its first, "
           "it steps forward by the total number of threads in the grid until it reaches n. A loop that is "
           "missing, or stops before n, leaves the elements past its last step unwritten.")


@pytest.mark.task("1.2")
@pytest.mark.parametrize("n,blocks", [(1, 1), (31, 1), (33, 1), (1000, 1), (1000, 3), (5000, 2),
                                      (BIG, 7), (BIG, 0)])
def test_relu_grid_stride(n: int, blocks: int) -> None:
    """Grid-stride ReLU (relu_v2_grid_stride)."""
    m = _m()
    x = _input(f"1.2-n{n}-b{blocks}", n, m)
    y = check.poisoned(n, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.relu_v2_grid_stride(x, y, n, blocks)
    grid = f"{blocks} block{'s' * (blocks != 1)}" if blocks else "the launcher's own grid"
    check.assert_close(y, torch.relu(x), name=f"relu_v2_grid_stride y (n={n}, {grid})", task="1.2", hint=HINT_12,
                       launcher_given=_given(m, "relu_v2_grid_stride"), **EXACT)


@pytest.mark.task("1.2")
@pytest.mark.sim_only
def test_relu_grid_stride_writes_each_element_once() -> None:
    """A loop that steps by one block's threads instead of the whole grid's gives the right values (every block
    covers the whole array), at gridDim.x times the work. The simulator's profile mode counts the stores."""
    m = _m()  # (sim_only: on a GPU the case is deselected, and the benchmark shows the time)
    n, blocks = 20_000, 7
    prof = cc.load(m.dir / "relu.cu", backend="sim", profile=True)
    try:
        x = _input("1.2-once", n, m)
        y = check.poisoned(n, torch.float32, "cpu")
        prof.relu_v2_grid_stride(x, y, n, blocks)
        check.assert_close(y, torch.relu(x), name=f"relu_v2_grid_stride y (n={n}, {blocks} blocks)", task="1.2",
                           hint=HINT_12, launcher_given=_given(m, "relu_v2_grid_stride"), **EXACT)
        kernels = prof.profile_report().kernels
    finally:
        prof.close()
    stored = sum(k.metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"] for k in kernels)
    need = math.ceil(n * 4 / 32)
    assert kernels and not any(k.sampled for k in kernels), "the profile of this small launch should count every block"
    if stored > need + 2 * len(kernels):  # (a sector or two more where y does not start on a sector)
        raise check.CheckFailure(
            f"relu_v2_grid_stride (task 1.2, n={n}, {blocks} blocks): the values are right, but the kernel stored "
            f"{stored:.0f} 32-byte sectors where one store per element needs {need} ({stored / need:.1f}x): several "
            "threads write each element. After its first element, a thread must step past every thread of the "
            "grid, not only those of its block.")


# ----------------------------------------------------------------------------------------------------
# Task 1.3: float4 ReLU with a tail
# ----------------------------------------------------------------------------------------------------

# A direction, not the code (the TODO and scale_float4_kernel show the rest); check.assert_close leaves it out where
# the failure shows the float4 part right and only the tail wrong.
HINT_13 = ("relu_v3_float4_kernel (TODO task 1.3): two parts, the whole float4s as scale_float4_kernel handles "
           "them, then the n % 4 leftover floats after the last whole float4, one thread each.")


@pytest.mark.task("1.3")
@pytest.mark.parametrize("n", [1, 3, 4, 5, 31, 32, 33, 1000, 1001, 1023, BIG])
def test_relu_float4(n: int) -> None:
    """float4 ReLU with a tail (relu_v3_float4)."""
    m = _m()
    x = _input(f"1.3-n{n}", n, m)
    y = check.poisoned(n, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.relu_v3_float4(x, y, n)
    check.assert_close(y, torch.relu(x), name=f"relu_v3_float4 y (n={n}, n % 4 = {n % 4})", task="1.3",
                       hint=HINT_13, vector=4, launcher_given=_given(m, "relu_v3_float4"), **EXACT)


@pytest.mark.task("1.3")
@pytest.mark.parametrize("n", [1001, 4096])
def test_relu_float4_misaligned_views(n: int) -> None:
    """x[1:] starts 4 bytes after a 16-byte boundary: the launcher must not use float4 loads on it."""
    m = _m()
    xs = _input(f"1.3-misaligned-n{n}", n + 1, m)
    ys = check.poisoned(n + 1, torch.float32, m.device)
    x, y = xs[1:], ys[1:]
    with check.unchanged(xs, names=["x"]):
        m.relu_v3_float4(x, y, n)
    check.assert_close(y, torch.relu(x), name=f"relu_v3_float4 on x[1:] (n={n})", task="1.3",
                       hint="for pointers that are not 16-byte aligned the given launcher falls back to "
                            "relu_v1_scalar_kernel (task 1.1): keep that check in relu_v3_float4(), and make "
                            "task 1.1 pass first.", **EXACT)
    assert bool(ys[0].isnan()), "relu_v3_float4 wrote before the start of y (y[-1] of the view)"


# ----------------------------------------------------------------------------------------------------
# Task 1.4: ReLU backward, inside a torch.autograd.Function
# ----------------------------------------------------------------------------------------------------

HINT_14 = ("relu_backward_kernel (TODO task 1.4): the gradient passes through where the input was strictly "
           "positive and is 0 elsewhere (at x == 0 too, as in PyTorch; and exactly 0, not dy * 0, so an infinite "
           "or NaN dy does not leak through).")


class ReLUWithKernel(torch.autograd.Function):
    """y = relu(x) whose backward pass is the learner's ``relu_backward`` kernel.

    The forward uses torch here so that task 1.4 is graded on its own (the notebook wires the learner's
    forward kernel in as well).
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.clamp_min(x, 0.0)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, dy: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        dy = dy.contiguous()
        dx = check.poisoned(x.shape, torch.float32, x.device)
        _m().relu_backward(x, dy, dx, x.numel())
        return dx


@pytest.mark.task("1.4")
@pytest.mark.parametrize("n", SIZES)
def test_relu_backward_kernel(n: int) -> None:
    """ReLU backward in an autograd.Function (relu_backward)."""
    m = _m()
    x = _input(f"1.4-x-n{n}", n, m)
    dy = check.randn((n,), check.rng(f"1.4-dy-n{n}"), "cpu")
    if n >= 8:  # Inf / NaN upstream gradients where x <= 0 must still give exactly 0 (as torch does)
        neg = (x.cpu() <= 0).nonzero().flatten()
        dy[neg[: 2]] = float("inf")
        dy[neg[2: 4]] = float("nan")
    dy = dy.to(m.device)
    dx = check.poisoned(n, torch.float32, m.device)
    with check.unchanged(x, dy, names=["x", "dy"]):
        m.relu_backward(x, dy, dx, n)
    ref = torch.ops.aten.threshold_backward(dy, x, 0.0)
    check.assert_close(dx, ref, name=f"relu_backward dx (n={n})", task="1.4", hint=HINT_14, **EXACT)


@pytest.mark.task("1.4")
@pytest.mark.parametrize("shape", [(1,), (33,), (17, 61)])
def test_relu_backward_autograd(shape: tuple[int, ...]) -> None:
    """Gradients through the autograd.Function match torch.relu's for a random upstream gradient."""
    m = _m()
    name = "x".join(map(str, shape))
    x0 = check.randn(shape, check.rng(f"1.4-auto-x-{name}"), m.device)
    w = check.randn(shape, check.rng(f"1.4-auto-w-{name}"), m.device)
    x_ours = x0.clone().requires_grad_(True)
    x_ref = x0.clone().requires_grad_(True)
    (ReLUWithKernel.apply(x_ours) * w).sum().backward()
    (torch.relu(x_ref) * w).sum().backward()
    check.assert_close(x_ours.grad, x_ref.grad, name=f"x.grad through ReLUWithKernel (shape {shape})", task="1.4",
                       hint=HINT_14, **EXACT)


# ----------------------------------------------------------------------------------------------------
# Task 1.5: fused bias-add + GELU (tanh approximation)
# ----------------------------------------------------------------------------------------------------

HINT_15 = ("gelu_tanh (TODO task 1.5): the tanh form of GELU in the lesson README, with tanhf (a tanh built from "
           "expf overflows for large inputs); bias_gelu_kernel: one thread per element of the rows x cols matrix, "
           "adding the bias of the element's column before the GELU.")
# float32 against a float64 reference: tanhf and torch differ by an ulp or two, and 1 + tanh(z) loses
# relative accuracy for z near -1 (cancellation), so allow 1e-5 relative plus 1e-5 absolute. The erf
# form of GELU differs from the tanh form by up to ~1e-3 and fails this.
GELU_TOL = dict(rtol=1e-5, atol=1e-5)


def _gelu_case(name: str, rows: int, cols: int, m: cc.Lesson, scale: float = 1.0) -> None:
    x = check.randn((rows, cols), check.rng(f"{name}-x"), m.device, scale=scale)
    b = check.randn((cols,), check.rng(f"{name}-b"), m.device, scale=scale)
    y = check.poisoned((rows, cols), torch.float32, m.device)
    with check.unchanged(x, b, names=["x", "b"]):
        m.bias_gelu(x, b, y, rows, cols)
    ref = F.gelu(x.double() + b.double(), approximate="tanh").float()
    check.assert_close(y, ref, name=f"bias_gelu y ({rows}x{cols}, inputs ~{scale:g})", task="1.5", hint=HINT_15,
                       **GELU_TOL)


@pytest.mark.task("1.5")
@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 31), (3, 33), (257, 31), (64, 1000)])
def test_bias_gelu(rows: int, cols: int) -> None:
    """Fused bias-add + GELU, tanh form (bias_gelu)."""
    _gelu_case(f"1.5-{rows}x{cols}", rows, cols, _m())


@pytest.mark.task("1.5")
def test_bias_gelu_large_magnitudes() -> None:
    """Inputs up to ~+-200: tanh saturates; a tanh built from expf would give Inf / Inf = NaN."""
    _gelu_case("1.5-large", 33, 65, _m(), scale=50.0)


@pytest.mark.task("1.5")
def test_bias_gelu_matches_torch_float32() -> None:
    """Also within tolerance of torch's own float32 GELU, on torch's device."""
    m = _m()
    x = check.randn((40, 50), check.rng("1.5-torch32-x"), m.device)
    b = check.randn((50,), check.rng("1.5-torch32-b"), m.device)
    y = check.poisoned((40, 50), torch.float32, m.device)
    m.bias_gelu(x, b, y, 40, 50)
    check.assert_close(y, F.gelu(x + b, approximate="tanh"), name="bias_gelu vs torch float32", task="1.5",
                       hint=HINT_15, **GELU_TOL)


# ----------------------------------------------------------------------------------------------------
# Task 1.6: hand-written torch::Tensor binding (relu_torch.cu, built with torch headers: one build)
# ----------------------------------------------------------------------------------------------------

HINT_16 = ("relu_forward (TODO task 1.6, relu_torch.cu): scale_forward just above it is the pattern, step for "
           "step: the same checks of x, a new output like x, nothing to launch for an empty x, then the launch of "
           "relu_torch_kernel and its check.")


def _expect_rejection(call: object, what: str, words: list[str]) -> None:
    """``call()`` must raise (TORCH_CHECK raises RuntimeError) with a message containing every word."""
    try:
        call()  # type: ignore[operator]
    except Exception as e:  # noqa: BLE001 - any exception type TORCH_CHECK maps to is acceptable
        msg = str(e)
        if "TODO(task 1.6)" in msg:
            raise AssertionError(f"relu_forward is still the stub: {msg.splitlines()[0]}\n  Hint: {HINT_16}") from None
        missing = [w for w in words if w.lower() not in msg.lower()]
        assert not missing, (f"relu_forward rejected {what}, but its message does not say {missing}: "
                             f"'{msg.splitlines()[0][:200]}'. Say what is wrong, e.g. \"relu_forward: x must be "
                             f"{words[-1]}\".")
        return
    raise AssertionError(f"relu_forward accepted {what}; it must refuse it with TORCH_CHECK (words expected in the "
                         f"message: {words}). Hint: {HINT_16}")


@pytest.mark.task("1.6")
def test_torch_binding_values() -> None:
    """torch::Tensor binding (relu_forward, relu_torch.cu)."""
    m = _m()
    for shape in [(1,), (1000,), (3, 5, 7)]:
        n = 1
        for s in shape:
            n *= s
        x = _input(f"1.6-{shape}", n, m).view(shape)
        with check.unchanged(x, names=["x"]):
            y = m.relu_forward(x)
        assert isinstance(y, torch.Tensor), f"relu_forward must return a tensor, got {type(y).__name__}. {HINT_16}"
        assert y.data_ptr() != x.data_ptr(), "relu_forward must return a new tensor (torch::empty_like), not x"
        assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device, (
            f"relu_forward returned shape {tuple(y.shape)} {y.dtype} on {y.device}; expected the shape, dtype and "
            f"device of x ({tuple(x.shape)} {x.dtype} on {x.device}): allocate with torch::empty_like(x)")
        check.assert_close(y, torch.relu(x), name=f"relu_forward(x) (shape {shape})", task="1.6", hint=HINT_16,
                           **EXACT)
    empty = torch.empty(0, device=m.device)
    y = m.relu_forward(empty)
    assert y.numel() == 0, "relu_forward of an empty tensor must return an empty tensor (and launch nothing)"


@pytest.mark.task("1.6")
def test_torch_binding_rejects_bad_inputs() -> None:
    m = _m()
    x = check.randn((64,), check.rng("1.6-bad"), m.device)
    _expect_rejection(lambda: m.relu_forward(x.double()), "a float64 tensor", ["x", "float32"])
    _expect_rejection(lambda: m.relu_forward(x.view(8, 8).t()), "a transposed (non-contiguous) tensor",
                      ["x", "contiguous"])
    _expect_rejection(lambda: m.relu_forward(_wrong_device(64, m)), "a tensor on the wrong device", ["x", "CUDA"])


# ----------------------------------------------------------------------------------------------------
# Task 1.7: speed (GPU only; "not graded" on the simulator)
# ----------------------------------------------------------------------------------------------------


@pytest.mark.task("1.7")
@pytest.mark.gpu
def test_relu_float4_speed() -> None:
    """Speed: relu_v3_float4 against the copy bandwidth measured in the same run (cudacourse.speed)."""
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    n = 2**28
    xs = [torch.randn(n, device=m.device) for _ in range(MIN_SETS)]
    ys = [torch.full_like(x, float("nan")) for x in xs]

    def ok(i: int) -> None:
        want = torch.relu(xs[i])
        if not torch.equal(ys[i], want):
            bad = (ys[i] != want).nonzero()[0].item()  # (a NaN left by the poison differs too)
            lo = max(0, bad - 4)
            check.assert_close(ys[i][lo:lo + 1024], want[lo:lo + 1024], name="relu_v3_float4 on 2^28 floats",
                               task="1.7", hint=HINT_13, **EXACT)

    m.relu_v3_float4(xs[0], ys[0], n)
    ok(0)  # correct first: a fast wrong kernel earns no speed points
    judge(("01_relu", "1.7"), "relu_v3_float4 on 2^28 floats",
          Side("relu_v3_float4", lambda i: m.relu_v3_float4(xs[i], ys[i], n), lambda i: (ys[i],), ok), None,
          sets=MIN_SETS, nbytes=2 * 4 * n,  # one read and one write of each float
          hint="Hint: one float4 load and one float4 store per thread, enough threads (n / 4 of them), no extra "
               "passes over memory.")


# ----------------------------------------------------------------------------------------------------
# Course check (not graded): these tests catch wrong kernels
# ----------------------------------------------------------------------------------------------------

WRONG_KERNELS = r"""
__global__ void k_zero(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 0.0f; }
__global__ void k_copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }
__global__ void k_short(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n - 1) y[i] = fmaxf(x[i], 0.0f); }
__global__ void k_abs(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = fabsf(x[i]); }
void relu_zero(const float* x, float* y, int n) { k_zero<<<(n + 255) / 256, 256>>>(x, y, n); }
void relu_copy(const float* x, float* y, int n) { k_copy<<<(n + 255) / 256, 256>>>(x, y, n); }
void relu_short(const float* x, float* y, int n) { k_short<<<(n + 255) / 256, 256>>>(x, y, n); }
void relu_abs(const float* x, float* y, int n) { k_abs<<<(n + 255) / 256, 256>>>(x, y, n); }
"""


def test_wrong_kernels_fail_the_check() -> None:
    """All zeros, a copy, a missing last element and |x| must each fail the comparison used by the tasks."""
    m = _m()
    wrong = cc.load(WRONG_KERNELS, ["relu_zero", "relu_copy", "relu_short", "relu_abs"], backend=m.backend)
    n = 1000
    x = _input("wrong-kernels", n, m)
    for name in ["relu_zero", "relu_copy", "relu_short", "relu_abs"]:
        y = check.poisoned(n, torch.float32, m.device)
        getattr(wrong, name)(x, y, n)
        with pytest.raises(AssertionError):
            check.assert_close(y, torch.relu(x), name=name, **EXACT)


# ----------------------------------------------------------------------------------------------------
# Triton track (optional): tasks 1.T1 and 1.T2, the twins in relu_triton.py, checked like their CUDA versions.
# On the CPU Triton's interpreter runs them (one program at a time: sizes up to ~2^14 here, more on a GPU);
# without the triton package they are "not graded", with the command that installs it.
# ----------------------------------------------------------------------------------------------------

TRITON_SIZES = [1, 31, 32, 33, 1000, 3 * 1024 + 5, 2**14 + 3]  # ragged against every BLOCK the configs try
TRITON_GPU_SIZES = [2**20 + 3, 2**24 + 1]
HINT_1T1 = ("relu_kernel (TODO task 1.T1 in relu_triton.py): scale_kernel above it is the same shape (a tile of "
            "offsets per program, masked where it passes n), with ReLU in place of the scaling.")
HINT_1T2 = ("gelu_tanh and bias_gelu_kernel (TODO task 1.T2 in relu_triton.py): the TODO's sigmoid form, with the "
            "exponential of a value that is never positive (so it cannot overflow); each element's bias is that of "
            "its column.")


def _twin() -> ModuleType:
    from cudacourse.triton_track import twin_or_not_graded

    return twin_or_not_graded(LESSON)


def _guard(t: ModuleType) -> object:
    """Torch may allocate and check in relu_triton.py, never compute the answer (refused at run time)."""
    from cudacourse.grading.screens import torch_answer_guard

    return torch_answer_guard([t.__file__])


def _triton_relu_case(t: ModuleType, m: cc.Lesson, x: torch.Tensor, what: str, task: str = "1.T1") -> None:
    n = x.numel()
    y = check.poisoned(n, torch.float32, m.device)
    with check.unchanged(x, names=["x"]), _guard(t):
        t.relu(x, y, n)
    check.assert_close(y, torch.relu(x), name=f"relu (Triton) y, {what}", task=task, hint=HINT_1T1, **EXACT)


@pytest.mark.task("1.T1")
@pytest.mark.parametrize("n", TRITON_SIZES)
def test_triton_relu(n: int) -> None:
    """The Triton twin of ReLU: any n, exact, zeros and infinities included; at n = 1000 also the wrapper's
    refusal of bad inputs (after the values: the given wrapper refuses them, so on its own case it passed on the
    untouched stub)."""
    t, m = _twin(), _m()
    _triton_relu_case(t, m, _input(f"1.T1-n{n}", n, m), f"n={n}")
    if m.backend == "cuda" and n == TRITON_SIZES[-1]:
        for big in TRITON_GPU_SIZES:
            _triton_relu_case(t, m, _input(f"1.T1-n{big}", big, m), f"n={big}")
    if n == 1000:
        for bad in ["dtype", "non-contiguous", "device"]:
            _triton_relu_rejects(t, m, bad)


@pytest.mark.task("1.T1")
@pytest.mark.parametrize("n", [5, 1003])
def test_triton_relu_misaligned_views(n: int) -> None:
    """x and y one float into their buffers: Triton sees the pointers are not 16-byte aligned and loads narrower;
    the answer must not change."""
    t, m = _twin(), _m()
    buf = _input(f"1.T1-view-{n}", n + 1, m)
    x = buf[1:]
    full = check.poisoned(n + 1, torch.float32, m.device)
    with check.unchanged(x, names=["x"]), _guard(t):
        t.relu(x, full[1:], n)
    check.assert_close(full[1:], torch.relu(x), name=f"relu (Triton) of a view at offset 1, n={n}", task="1.T1",
                       hint=HINT_1T1, **EXACT)
    assert bool(full[0].isnan()), "relu (Triton, task 1.T1) wrote before the start of its output"


def _triton_relu_rejects(t: ModuleType, m: cc.Lesson, bad: str) -> None:
    """The given wrapper refuses what the kernel cannot take, naming the parameter, before anything runs."""
    n = 100
    x = check.randn((n,), check.rng(f"1.T1-bad-{bad}"), m.device)
    y = check.poisoned(n, torch.float32, m.device)
    if bad == "dtype":
        with pytest.raises(TypeError, match=r"parameter 'x'.*float32"):
            t.relu(x.double(), y, n)
    elif bad == "non-contiguous":
        with pytest.raises(ValueError, match=r"parameter 'x'.*contiguous"):
            t.relu(check.randn((2 * n,), check.rng("1.T1-bad-strided"), m.device)[::2], y, n)
    else:
        with pytest.raises(ValueError, match=r"parameter 'x'.*expects a tensor on"):
            t.relu(_wrong_device(n, m), y, n)
    assert bool(y.isnan().all()), "a rejected call must not run the kernel"


def _triton_gelu_case(t: ModuleType, m: cc.Lesson, name: str, rows: int, cols: int, scale: float = 1.0) -> None:
    x = check.randn((rows, cols), check.rng(f"{name}-x"), m.device, scale=scale)
    b = check.randn((cols,), check.rng(f"{name}-b"), m.device, scale=scale)
    y = check.poisoned((rows, cols), torch.float32, m.device)
    with check.unchanged(x, b, names=["x", "b"]), _guard(t):
        t.bias_gelu(x, b, y, rows, cols)
    ref = F.gelu(x.double() + b.double(), approximate="tanh").float()
    check.assert_close(y, ref, name=f"bias_gelu (Triton) y ({rows}x{cols}, inputs ~{scale:g})", task="1.T2",
                       hint=HINT_1T2, **GELU_TOL)


@pytest.mark.task("1.T2")
@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 31), (3, 33), (257, 31), (64, 1000)])
def test_triton_bias_gelu(rows: int, cols: int) -> None:
    """The Triton twin of the fused bias + GELU (tanh form), against a float64 reference."""
    t, m = _twin(), _m()
    _triton_gelu_case(t, m, f"1.T2-{rows}x{cols}", rows, cols)
    if m.backend == "cuda" and (rows, cols) == (64, 1000):
        _triton_gelu_case(t, m, "1.T2-4099x1031", 4099, 1031)


@pytest.mark.task("1.T2")
def test_triton_bias_gelu_large_magnitudes() -> None:
    """Inputs up to ~+-200: the sigmoid form must saturate to v and to 0, never inf / inf."""
    _triton_gelu_case(_twin(), _m(), "1.T2-large", 33, 65, scale=50.0)


def test_triton_worked_scale() -> None:
    """The worked example of relu_triton.py (given complete; not graded)."""
    t, m = _twin(), _m()
    x = _input("1.T-worked", 3000, m)
    y = check.poisoned(3000, torch.float32, m.device)
    t.scale(x, y, -2.5, 3000)
    check.assert_close(y, -2.5 * x, name="scale (Triton)", task="worked example",
                       hint="scale is given complete in relu_triton.py; did an edit change it?")


# Wrong twins, made from the solution by one edit each: every one must fail the checks the tasks use.
TRITON_MUTANTS = {
    "relu all zeros": ("tl.store(y_ptr + offs, tl.maximum(x, 0.0)", "tl.store(y_ptr + offs, tl.zeros_like(x)"),
    "relu misses the last element": ("mask = offs < n\n    x = tl.load(x_ptr + offs, mask=mask)\n    tl.store(y_ptr "
                                     "+ offs, tl.maximum", "mask = offs < n - 1\n    x = tl.load(x_ptr + offs, "
                                     "mask=mask)\n    tl.store(y_ptr + offs, tl.maximum"),
    "gelu all zeros": ("return v * sig", "return v * 0.0"),
    "gelu without the bias": ("gelu_tanh(x + b)", "gelu_tanh(x)"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow / NaN warnings from the wrong code
@pytest.mark.parametrize("mutant", list(TRITON_MUTANTS))
def test_triton_wrong_twins_fail_the_check(mutant: str, tmp_path: Path) -> None:
    from cudacourse.triton_track import load_mutant

    _twin()  # not graded (a skip) without triton
    m = _m()
    wrong = load_mutant(LESSON, "relu_triton.py", TRITON_MUTANTS[mutant], tmp_path, backend=m.backend)
    with pytest.raises(AssertionError):
        if mutant.startswith("relu"):
            _triton_relu_case(wrong, m, _input("1.T-mutant", 1000, m), mutant)
        else:
            _triton_gelu_case(wrong, m, "1.T-mutant", 3, 33)
