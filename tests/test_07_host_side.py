"""Graded checks of lesson 07 (the host side): lessons/07_host_side/host_side.cu and custom_op.py.

Tasks (ids match the TODOs; titles and points live in lessons/07_host_side/lesson.toml):
  7.1  the chunked copy-in/compute/copy-out pipeline over N streams, every stream waiting on coef_ready
  7.2  one decode step captured into a CUDA graph, instantiated and replayed `steps` times
  7.3  swish as a torch.library custom op: values, gradients, torch.library.opcheck, torch.compile with
       fullgraph=True (no graph break), and errors naming the argument for bad input
  7.4  the op on a non-default PyTorch stream, and a tensor on the wrong device (GPU only)
  7.5  speed: the overlapped pipeline (8 chunks, 4 streams) against the serial one (GPU only; cudacourse.speed)
  7.6  speed: graph replay of the decode step against eager launches (GPU only; cudacourse.speed)
  7.7  speed: the op under torch.compile at least 0.8x eager's speed, no recompilation (GPU only)

On the CPU simulator, work on a created stream runs at synchronisation points in an adversarial order
(the most recently issued ready operation first), so a chunk that does not wait for the coefficient
upload computes with stale or never-written coefficients and fails here, as it could on a GPU.
References are computed in float64 by PyTorch (task 7.5's speed test: float32 on the GPU); outputs start as NaN
poison; inputs are checked unchanged. Speed tasks 7.5 and 7.6 are judged by cudacourse.speed.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest
import torch

import cudacourse as cc
from cudacourse import check, settings
from cudacourse.course import course
from cudacourse.lessons import learner_python
from cudacourse.torch_worker import backward, run_beside

LESSON = "07_host_side"


def _m() -> Any:
    return cc.lesson(LESSON)


def _op() -> Any:
    """The learner's custom_op.py (task 7.3), from the folder cc.lesson loads kernels from. One copy per
    process: the op's name is registered with PyTorch once.

    While grading it runs in a confined torch worker (``lessons.learner_python``), never in this process, which
    compares and records verdicts: the op is registered there, its kernels are the worker's own (``kernels()``
    calls ``cc.lesson`` there), ``op.swish(x)`` runs there, and the checks that must run where the op is
    registered (``opcheck``, ``torch.compile``, task 7.7's timing) are this file's helpers, run beside it
    (``run_beside``)."""
    path = _m().dir / "custom_op.py"
    if not path.exists():
        raise AssertionError(f"task 7.3: {path} not found.")
    name = "cc_l07_custom_op"  # (imported here, outside grading: never hosted and imported in one process)
    mod = sys.modules.get(name)
    # (only where it is imported here: while grading it is hosted in a worker of its own, whatever this process holds)
    if settings.current().confine is None and mod is not None and getattr(mod, "__file__", None) != str(path):
        raise AssertionError(f"custom_op.py was already loaded from {mod.__file__} in this process; the op's "
                             "name can be registered once: run the tests in a fresh process")
    return learner_python(path, gpu=_m().backend == "cuda", timeout_s=300.0, guard=False, module_name=name)


def cc_preload(tasks: set[str]) -> None:
    """Called by the grader's plugin in a process that times, before its turn on the GPU (``pytest_plugin._preload``):
    task 7.7's torch worker starts now (Python, torch, a CUDA context, the learner's file, its kernels), not inside
    the timed test."""
    if "7.7" in tasks:
        run_beside(_op(), _import_the_compiler)


def _import_the_compiler(op: Any) -> None:
    """torch.compile's modules, imported where task 7.7 compiles the op (8 s on the H100 machine, in the timed turn
    when left to the test)."""
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401


def _target(task_id: str) -> float:
    """A speed task's target, declared once in lessons/07_host_side/lesson.toml (bench reads the same)."""
    target = course().task(LESSON, task_id).target
    assert target is not None, f"task {task_id} declares no speed target in lesson.toml"
    return target


# ----------------------------------------------------------------------------------------------------
# 7.1: the pipeline
# ----------------------------------------------------------------------------------------------------


def _coef(d: int, g: torch.Generator, device: Any) -> torch.Tensor:
    """a in [0.5, 0.9) (a contraction: many iterations stay finite), then b in [-1, 1)."""
    a = 0.5 + 0.4 * torch.rand(d, generator=g)
    b = 2 * torch.rand(d, generator=g) - 1
    return torch.cat([a, b]).to(device)


def _pipeline_ref(x: torch.Tensor, coef: torch.Tensor, d: int, iters: int) -> torch.Tensor:
    n = x.numel()
    j = torch.arange(n) % d
    a, b = coef[:d].double().cpu()[j], coef[d:].double().cpu()[j]
    v = x.double().cpu()
    for _ in range(iters):
        v = a * v + b
    return v.float()


def _pipeline(m: Any, x: torch.Tensor, coef: torch.Tensor, d: int, nchunks: int, nstreams: int,
              iters: int) -> tuple[torch.Tensor, float]:
    n = x.numel()
    y = check.poisoned((n,), torch.float32, m.device)
    ms = check.poisoned((1,), torch.float32, m.device)
    with check.unchanged(x, coef):
        m.pipeline_stage_in(x, coef, n, d)
        m.pipeline_run(ms, n, d, nchunks, nstreams, iters)
        m.pipeline_stage_out(y, n)
    return y, float(ms.item())


PIPELINE_CASES = [(1000, 7, 4, 4), (4099, 33, 8, 3), (31, 5, 8, 8), (1, 1, 1, 1), (2**14 + 3, 64, 5, 2)]


@pytest.mark.task("7.1")
@pytest.mark.parametrize("n,d,nchunks,nstreams", PIPELINE_CASES)
def test_pipeline(n: int, d: int, nchunks: int, nstreams: int) -> None:
    m = _m()
    g = check.rng(f"pipeline-{n}-{d}")
    if m.backend == "cuda":
        n *= 64
    iters = 3
    for call in range(2):  # fresh coefficients each call: a chunk that does not wait for them sees stale ones
        x = check.randn((n,), g, m.device)
        coef = _coef(d, g, m.device)
        y, ms = _pipeline(m, x, coef, d, nchunks, nstreams, iters)
        check.assert_close(y, _pipeline_ref(x, coef, d, iters).to(m.device), name=f"pipeline output (call {call + 1})",
                           rtol=1e-5, atol=1e-5, task="7.1",
                           hint="every chunk is copied in, transformed and copied out on stream c % nstreams; if "
                                "only chunks on streams other than 0 are wrong, those streams do not wait for "
                                "coef_ready (cudaStreamWaitEvent) and read the coefficients before they arrive")
        assert math.isfinite(ms) and ms >= 0.0, (
            f"task 7.1: ms[0] = {ms}: the events around the pipeline did not time it (start and stop recorded, "
            "stop synchronised?)")


# ----------------------------------------------------------------------------------------------------
# 7.2: the decode step as a CUDA graph
# ----------------------------------------------------------------------------------------------------


def _decode_ref(x: torch.Tensor, w: torch.Tensor, d: int, steps: int) -> torch.Tensor:
    v, wd = x.double().cpu(), w.double().cpu().view(d, d)
    for _ in range(steps):
        v = v + torch.tanh(wd @ v)
        v = v / torch.sqrt((v * v).mean() + 1e-6)
    return v.float()


@pytest.mark.task("7.2")
@pytest.mark.parametrize("d,steps", [(33, 1), (100, 4), (300, 3), (64, 0)])
def test_decode_graph(d: int, steps: int) -> None:
    """Eager (worked) and graph replays both match float64 PyTorch after `steps` steps; steps = 0 captures and
    instantiates only, which must run nothing (x unchanged). d = 33 and 300 leave partial warps and blocks."""
    m = _m()
    g = check.rng(f"decode-{d}-{steps}")
    x = check.randn((d,), g, m.device)
    w = check.randn((d * d,), g, m.device, scale=1.0 / math.sqrt(d))
    ref = _decode_ref(x, w, d, steps).to(m.device)
    xe = x.clone()
    t = check.poisoned((d,), torch.float32, m.device)
    info = check.poisoned((3,), torch.float32, m.device)
    m.decode_eager(xe, w, t, info, d, steps)
    check.assert_close(xe, ref, name="decode_eager (the worked example)", rtol=1e-4, atol=1e-5, task="7.2")
    xg = x.clone()
    info = check.poisoned((3,), torch.float32, m.device)
    with check.unchanged(w):
        m.decode_graph(xg, w, t, info, d, steps)
    nodes, capture_ms, replay_ms = info.tolist()
    assert nodes == 3, (f"task 7.2: the captured graph has {nodes} nodes, expected 3 (one decode step: matvec, "
                        "residual_tanh, rmsnorm). NaN: no graph was captured (cudaStreamBeginCapture ... "
                        "cudaStreamEndCapture(s, &graph)); more: capture one step, then launch the graph `steps` times")
    assert math.isfinite(capture_ms) and math.isfinite(replay_ms), f"task 7.2: info = {info.tolist()}"
    check.assert_close(xg, ref, name=f"decode_graph x after {steps} replays", rtol=1e-4, atol=1e-5, task="7.2",
                       hint="capturing runs nothing (steps = 0 leaves x as it was); launch the instantiated graph "
                            "once per step on the same stream, then the launcher synchronises it")


# ----------------------------------------------------------------------------------------------------
# 7.3: the custom op
# ----------------------------------------------------------------------------------------------------


def _swish_ref(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xd = x.detach().double().cpu().requires_grad_(True)
    y = xd * torch.sigmoid(xd)
    (dx,) = torch.autograd.grad(y, xd, dy.double().cpu())
    return y.detach().float(), dx.float()


@pytest.mark.task("7.3")
@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_op_values_and_gradient(n: int) -> None:
    m, op = _m(), _op()
    g = check.rng(f"swish-{n}")
    x = check.randn((n,), g, m.device, scale=4.0)
    dy = check.randn((n,), g, m.device)
    ry, rdx = _swish_ref(x, dy)
    y = op.swish(x)
    check.assert_close(y, ry.to(m.device), name="swish(x)", rtol=1e-5, atol=1e-6, task="7.3")
    _, (dx,) = backward(op.swish, (x.clone().requires_grad_(True),), dy)  # swish(x).backward(dy), where it runs
    assert dx is not None, "task 7.3: swish(x).backward() left x.grad empty: register_autograd is missing"
    check.assert_close(dx, rdx.to(m.device), name="x.grad through swish_backward", rtol=1e-5, atol=1e-6,
                       task="7.3", hint="_backward returns swish_backward(x, grad) with x from ctx.saved_tensors")
    assert run_beside(op, _registered), "task 7.3: torch.ops.cudacourse_l07.swish is not registered"


# Helpers that run where custom_op.py is loaded (run_beside: in its worker while grading), each given the module


def _registered(op: Any) -> bool:
    import torch

    return torch.ops.cudacourse_l07.swish.default is not None  # registered under its schema name


def _opcheck(op: Any, x: torch.Tensor) -> None:
    import torch

    torch.library.opcheck(op.swish, (x.requires_grad_(True),), test_utils=(
        "test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))


def _compiled_swish_2x_plus_1(op: Any, x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    def f(t: torch.Tensor) -> torch.Tensor:
        return op.swish(t * 2.0) + 1.0

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=False)
    xr = x.clone().requires_grad_(True)
    y = compiled(xr)
    y.backward(dy)
    return y.detach(), xr.grad


def _lesson_lookups(op: Any, device: torch.device) -> tuple[int, bool]:
    import torch

    import cudacourse as cc

    calls, real = [], cc.lesson

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    cc.lesson = counting  # what custom_op.py's kernels() calls, in the process it runs in
    try:
        x = torch.randn(100, device=device, requires_grad=True)
        for _ in range(3):
            op.swish(x).sum().backward()
    finally:
        cc.lesson = real
    return len(calls), x.grad is not None


def _on_a_side_stream(op: Any, x: torch.Tensor) -> torch.Tensor:
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = op.swish(x)          # launched on s: correct only if the kernel used the current stream
        y2 = y * 1.0             # PyTorch's own op on s, ordered after the kernel by the stream
    torch.cuda.current_stream().wait_stream(s)
    return y2


@pytest.mark.task("7.3")
def test_op_passes_opcheck() -> None:
    """torch.library.opcheck: schema, fake implementation, autograd registration and the dispatcher paths
    torch.compile uses all agree with the real op."""
    m, op = _m(), _op()
    g = check.rng("swish-opcheck")
    run_beside(op, _opcheck, check.randn((37,), g, m.device))


@pytest.mark.task("7.3")
def test_op_compiles_without_graph_break() -> None:
    """torch.compile(fullgraph=True) raises on any graph break. The backend is "aot_eager" (on the GPU too):
    dynamo traces the op through its fake implementation and AOTAutograd traces its backward through the
    registered autograd formula, which is everything a graph break would come from; Inductor's code
    generation adds nothing to that proof and costs minutes of CPU compilation."""
    m, op = _m(), _op()
    g = check.rng("swish-compile")
    x = check.randn((513,), g, m.device)
    dy = check.randn((513,), g, m.device)
    y, dx = run_beside(op, _compiled_swish_2x_plus_1, x, dy)
    ry, rdx = _swish_ref(2.0 * x, dy)
    check.assert_close(y, (ry + 1.0).to(m.device), name="compiled swish(2x) + 1", rtol=1e-5, atol=1e-5,
                       task="7.3")
    check.assert_close(dx, (2.0 * rdx).to(m.device), name="compiled gradient", rtol=1e-5, atol=1e-5,
                       task="7.3")


@pytest.mark.task("7.3")
def test_op_bad_input_names_the_argument() -> None:
    m, op = _m(), _op()
    x = torch.randn(10, device=m.device)
    with pytest.raises(TypeError, match=r"'x'.*float32.*float64"):
        op.swish(x.double())
    with pytest.raises(TypeError, match=r"'x'.*float32"):
        op.swish(torch.ones(10, dtype=torch.int32, device=m.device))
    with pytest.raises(ValueError, match=r"'x'.*contiguous"):
        op.swish(torch.randn(4, 6, device=m.device).t())
    with pytest.raises(TypeError, match=r"'dy'.*float32"):
        op.swish_backward(x, x.double())


def test_op_looks_its_kernels_up_once() -> None:
    """custom_op.py is code a learner copies: cc.lesson() on every call of the op cost host time on each launch
    (task 7.7 times the op, host-bound). kernels() looks the lesson up once per process, not once per call."""
    m, op = _m(), _op()
    calls, has_grad = run_beside(op, _lesson_lookups, m.device)
    assert has_grad
    assert calls <= 1, f"cc.lesson was called {calls} times for 3 forward and backward calls of the op"


# ----------------------------------------------------------------------------------------------------
# 7.4-7.7: GPU only
# ----------------------------------------------------------------------------------------------------


@pytest.mark.task("7.4")
@pytest.mark.gpu
def test_op_on_a_non_default_stream_and_wrong_device() -> None:
    m, op = _m(), _op()
    g = check.rng("swish-stream")
    x = check.randn((1 << 22,), g, m.device)
    ry, _ = _swish_ref(x, x)
    y2 = run_beside(op, _on_a_side_stream, x)
    check.assert_close(y2, ry.to(m.device), name="swish on a non-default stream", rtol=1e-5, atol=1e-6, task="7.4",
                       hint="pass stream_handle(x) (torch.cuda.current_stream().cuda_stream) to the launcher")
    with pytest.raises(ValueError, match=r"'x' is on 'cpu'"):
        op.swish(x.cpu())


def _pipeline_ref_gpu(x: torch.Tensor, coef: torch.Tensor, d: int, iters: int) -> torch.Tensor:
    """The pipeline's transform in float32 on the GPU (64M elements x 1024 iterations: far too many for float64 on
    the CPU). a is in [0.5, 0.9), a contraction: rounding differences shrink each iteration instead of growing."""
    j = torch.arange(x.numel(), device=x.device) % d
    a, b = coef[:d][j], coef[d:][j]
    v = x.clone()
    for _ in range(iters):
        v.mul_(a).add_(b)
    return v


@pytest.mark.task("7.5")
@pytest.mark.gpu
def test_speed_pipeline() -> None:
    """The overlapped pipeline (8 chunks on 4 streams) against the serial one (1 chunk, 1 stream) of the same
    launcher, judged by cudacourse.speed: three buffer sets (pipeline_select), each set's pinned output filled with
    NaN and its input staged again before each timed sample (pipeline_stage_in, outside the sample), interleaved
    rounds with the serial run, every set checked after the timing, and a rate above the GPU's FP32 peak (1024
    dependent FMAs per element) or its copy bandwidth refused."""
    from cudacourse.speed import MIN_SETS, Side, judge

    m = _m()
    n, d, iters = 1 << 26, 1024, 1024
    g = check.rng("pipeline-speed")
    xs = [check.randn((n,), g, m.device) for _ in range(MIN_SETS)]
    coefs = [_coef(d, g, m.device) for _ in range(MIN_SETS)]
    refs = [_pipeline_ref_gpu(x, c, d, iters) for x, c in zip(xs, coefs, strict=True)]
    ms = torch.empty(1, device=m.device)
    y = torch.empty(n, device=m.device)

    def stage(i: int) -> None:  # set i's input into its pinned buffer, its pinned output NaN (the poison)
        m.pipeline_select(i)
        m.pipeline_stage_in(xs[i], coefs[i], n, d)

    def ok(i: int) -> None:
        m.pipeline_select(i)
        check.poison_(y)
        m.pipeline_stage_out(y, n)
        check.assert_close(y, refs[i], name=f"pipeline output of buffer set {i}", rtol=1e-4, atol=1e-4, task="7.5")

    def run(i: int, nchunks: int, nstreams: int) -> None:
        m.pipeline_select(i)
        m.pipeline_run(ms, n, d, nchunks, nstreams, iters)

    for i in range(MIN_SETS):
        stage(i)
    run(0, 8, 4)
    ok(0)  # correct first: a fast wrong pipeline earns no speed point
    judge((LESSON, "7.5"), f"pipeline {n} floats, d={d}, {iters} iterations",
          Side("8 chunks on 4 streams", lambda i: run(i, 8, 4), check=ok, reset=stage),
          Side("1 chunk on 1 stream (serial)", lambda i: run(i, 1, 1)),
          sets=MIN_SETS, nbytes=2 * 4 * n, flops=2 * iters * n, peak="fp32",
          hint="Copies overlap kernels only from pinned memory and on different streams, each chunk's three steps "
               "on its own stream; look at the Nsight Systems timeline (README).")


@pytest.mark.task("7.6")
@pytest.mark.gpu
def test_speed_graph() -> None:
    """1000 graph replays of the decode step against 1000 eager steps (3 launches each), judged by
    cudacourse.speed: three buffer sets (state, weights, scratch), each set's state restored before each timed
    sample, interleaved rounds, every set's state after `steps` replays checked against the eager steps' (the same
    kernels, so the same numbers), and a rate above the copy bandwidth (W read once per step) refused. A call
    includes its capture and instantiation (about 14 us on the H200, once per 1000 steps)."""
    from cudacourse.speed import MIN_SETS, Side, judge, restore_

    m = _m()
    d, steps = 256, 1000
    g = check.rng("decode-speed")
    x0 = [check.randn((d,), g, m.device) for _ in range(MIN_SETS)]
    ws = [check.randn((d * d,), g, m.device, scale=1.0 / 16) for _ in range(MIN_SETS)]
    xs = [x.clone() for x in x0]
    xe = [x.clone() for x in x0]
    ts = [torch.empty(d, device=m.device) for _ in range(MIN_SETS)]
    infos = [torch.empty(3, device=m.device) for _ in range(MIN_SETS)]
    want = []
    for i in range(MIN_SETS):  # the worked eager steps give the state each replayed call must reach
        x = x0[i].clone()
        m.decode_eager(x, ws[i], ts[i], infos[i], d, steps)
        want.append(x)

    def ok(i: int) -> None:
        check.assert_close(xs[i], want[i], name=f"decode state of buffer set {i} after {steps} replays",
                           rtol=1e-5, atol=1e-6, task="7.6")

    m.decode_graph(xs[0], ws[0], ts[0], infos[0], d, steps)
    ok(0)  # correct first
    judge((LESSON, "7.6"), f"decode step d={d}, {steps} steps",
          Side("CUDA graph replay", lambda i: m.decode_graph(xs[i], ws[i], ts[i], infos[i], d, steps), check=ok,
               reset=lambda i: restore_(xs[i], x0[i])),
          Side("eager launches", lambda i: m.decode_eager(xe[i], ws[i], ts[i], infos[i], d, steps)),
          sets=MIN_SETS, nbytes=steps * d * d * 4,
          hint="Capture one step, instantiate it once, then one cudaGraphLaunch per step on the same stream and "
               "one synchronisation at the end.")


def _time_compiled_op(op: Any, n: int) -> tuple[float, float]:
    """(eager ms, compiled ms) of ``op.swish`` on ``n`` floats, timed with CUDA events where custom_op.py is loaded
    (run_beside: its worker while grading, with its kernels there too), refusing any recompilation while timed."""
    import torch

    from cudacourse.bench import time_kernel

    x = torch.randn(n, device="cuda")

    def f(t: torch.Tensor) -> torch.Tensor:
        return op.swish(t)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    compiled(x)
    with torch._dynamo.config.patch(error_on_recompile=True):
        return time_kernel(lambda: f(x)), time_kernel(lambda: compiled(x))


@pytest.mark.task("7.7")
@pytest.mark.gpu
def test_speed_compiled_op() -> None:
    """Compiled against eager, and no recompilation while timed (dynamo's ``error_on_recompile``: an op whose
    guards fail on every call would recompile each time); a graph break already fails ``fullgraph=True``.

    Both are timed where the op is registered: in its torch worker while grading, whose numbers this process
    then judges. A ratio of two calls of the learner's own op is the learner's code's to make either way (an eager
    path that sleeps would pass anywhere); what the worker keeps out is the learner's code in this process."""
    op = _op()
    eager, comp = run_beside(op, _time_compiled_op, 1 << 24)
    target = _target("7.7")
    from cudacourse.speed import note, refuse_impossible

    # (an op that answers from a cache does no work: faster than the GPU's copy bandwidth)
    refuse_impossible("swish 16M floats, eager", eager, nbytes=8 << 24)
    refuse_impossible("swish 16M floats, compiled", comp, nbytes=8 << 24)
    note(f"swish 16M floats: eager {eager:.3f} ms, compiled {comp:.3f} ms", eager / comp, target)
    assert eager / comp >= target, (f"swish 16M floats: eager {eager:.3f} ms, compiled {comp:.3f} ms: "
                                    f"{eager / comp:.2f}x, target {target}x")
