"""Graded checks of lesson 07 (the host side): lessons/07_host_side/host_side.cu, custom_op.py and allocator.cu.

Tasks (ids match the TODOs; titles and points live in lessons/07_host_side/lesson.toml):
  7.1  the chunked copy-in/compute/copy-out pipeline over N streams, every stream waiting on coef_ready
  7.2  one decode step captured into a CUDA graph, instantiated and replayed `steps` times
  7.3  swish as a torch.library custom op: values, gradients, torch.library.opcheck, torch.compile with
       fullgraph=True (no graph break), and errors naming the argument for bad input
  7.4  the op on a non-default PyTorch stream, and a tensor on the wrong device (GPU only)
  7.5  speed: the overlapped pipeline (8 chunks, 4 streams) against the serial one (GPU only; cudacourse.speed)
  7.6  speed: graph replay of the decode step against eager launches (GPU only; cudacourse.speed)
  7.7  speed: the op under torch.compile at least 0.8x eager's speed, no recompilation (GPU only)
  7.8  a caching allocator (allocator.cu) with PyTorch's policy: pointers, statuses, reserved bytes and
       cudaMalloc/cudaFree counts equal a model of PyTorch's allocator after every operation of a trace
  7.9  its statistics under torch.cuda.memory_stats() names equal PyTorch's (the model; on a GPU PyTorch itself)
  7.10 the allocator plugged into PyTorch (CUDAPluggableAllocator) under lesson 06's capstone step (GPU only)
  7.11 a trace that fragments the cache (judged on the model of PyTorch's policy)

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
    the CPU). a is in [0.5, 0.9), a contraction: rounding differences shrink each iteration instead of growing.
    Where d divides the length, the same operations on rows of d broadcast a and b instead of reading them at full
    length: the same numbers, a third less memory traffic (a grade's timed phase waits for three of these)."""
    if x.numel() % d == 0:
        a, b = coef[:d], coef[d:]
        v = x.clone().view(-1, d)
    else:
        j = torch.arange(x.numel(), device=x.device) % d
        a, b = coef[:d][j], coef[d:][j]
        v = x.clone()
    for _ in range(iters):
        v.mul_(a).add_(b)
    return v.view(-1)


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
    xs = [check.randn_on_device((n,), g, m.device) for _ in range(MIN_SETS)]
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


# ----------------------------------------------------------------------------------------------------
# 7.8-7.11: a caching allocator of your own (allocator.cu)
# ----------------------------------------------------------------------------------------------------
# The instructor's side: a model of PyTorch's caching allocator, written from c10/cuda/CUDACachingAllocator.cpp
# (DeviceCachingAllocator: malloc, get_free_block, should_split, alloc_found_block, free, free_block,
# try_merge_blocks, insert_events, process_events, synchronize_and_free_events, release_cached_blocks, alloc_block,
# release_block) with its default settings (no max_split_size, no expandable segments, no garbage collection, no
# CUDA graphs). The learner's allocator replays a trace (alloc_tools.run_trace); the model replays the same trace
# and both must agree after every operation: the pointer each malloc returns, its status and the statistics. The
# model takes one thing from the learner's run: the address cudaMalloc gave a new segment (the pointer the malloc
# that made it returned), so that ties between equal free blocks (PyTorch takes the lowest address) come out the
# same. On a GPU task 7.9 also replays every trace through PyTorch itself and compares torch.cuda.memory_stats().

_MiB = 1 << 20
_K_MIN, _K_SMALL, _K_SMALL_BUF = 512, _MiB, 2 * _MiB
_K_MIN_LARGE, _K_LARGE_BUF, _K_ROUND = 10 * _MiB, 20 * _MiB, 2 * _MiB
_MALLOC, _FREE, _RECORD, _EMPTY, _SPIN, _SYNC, _FREE_RAW = range(7)
_OK, _OOM, _DOUBLE_FREE, _FOREIGN, _INTERIOR, _TOO_LARGE, _BAD = range(7)
_STATUS = ["ok", "out of memory", "double free", "foreign pointer", "interior pointer", "too large", "bad argument"]
_STAT_KINDS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
               "inactive_split_bytes", "requested_bytes")


def _tools() -> Any:
    """lessons/07_host_side/alloc_tools.py (given code: while grading, the instructor's copy is staged)."""
    from cudacourse.lessons import import_file

    return import_file(_m().dir / "alloc_tools.py", "cc_l07_alloc_tools")


class _Blk:
    __slots__ = ("ptr", "size", "stream", "small", "prev", "next", "allocated", "requested", "events", "uses")

    def __init__(self, ptr: int, size: int, stream: int, small: bool) -> None:
        self.ptr, self.size, self.stream, self.small = ptr, size, stream, small
        self.prev: _Blk | None = None
        self.next: _Blk | None = None
        self.allocated, self.requested, self.events, self.uses = False, 0, 0, []

    def split(self) -> bool:
        return self.prev is not None or self.next is not None


class _TorchModel:
    """PyTorch's caching allocator on a trace. ``events``: "sim" (an event is complete from the operation after
    the one that recorded it: the simulator runs queued stream work when a launcher returns) or "gpu" (complete
    only after a SYNC, EMPTY_CACHE or retry: the GPU traces put a long SPIN before every such free)."""

    def __init__(self, limit: int = 0, events: str = "sim", total: int = 1 << 40) -> None:
        self.limit, self.events, self.total = limit, events, total
        self.free: dict[bool, list[_Blk]] = {True: [], False: []}
        self.live: dict[int, _Blk] = {}
        self.freed: set[int] = set()
        self.segments: dict[int, int] = {}
        self.pending: list[tuple[int, list[list]]] = []  # (stream, [[recorded at op, done, block], ...])
        self.cur: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self.count = {"num_alloc_retries": 0, "num_ooms": 0, "num_device_alloc": 0, "num_device_free": 0,
                      "num_sync_all_streams": 0}
        self.reserved = 0
        self.ptr_of: dict[int, int] = {}
        self.op = 0
        self._fake = 1 << 56

    # statistics, as PyTorch's increase_stat/decrease_stat over "all" and the block's pool
    def _add(self, kind: str, small: bool, n: float) -> None:
        for t in ("all", "small_pool" if small else "large_pool"):
            k = f"{kind}.{t}"
            self.cur[k] = self.cur.get(k, 0) + n
            self.peak[k] = max(self.peak.get(k, 0), self.cur[k])

    def stats(self) -> dict[str, float]:
        c, p = self.cur, self.peak
        out = {f"{k}.current": c.get(k, 0.0) for k in c}
        for k in ("allocated_bytes.all", "reserved_bytes.all", "active_bytes.all"):
            out[f"{k}.peak"] = p.get(k, 0.0)
        out.update({k: float(v) for k, v in self.count.items()})
        r = c.get("reserved_bytes.all", 0.0)
        out["fragmentation"] = (r - c.get("allocated_bytes.all", 0.0)) / r if r else 0.0
        return out

    # the policy
    def _round(self, n: int) -> int:
        return _K_MIN if n < _K_MIN else _K_MIN * ((n + _K_MIN - 1) // _K_MIN)

    def _alloc_size(self, n: int) -> int:
        if n <= _K_SMALL:
            return _K_SMALL_BUF
        if n < _K_MIN_LARGE:
            return _K_LARGE_BUF
        return _K_ROUND * ((n + _K_ROUND - 1) // _K_ROUND)

    def malloc(self, size: int, stream: int, base: int) -> tuple[int, int]:
        if size < 0:
            return 0, _BAD
        if size == 0:
            return 0, _OK
        if size > self.total:
            return 0, _TOO_LARGE
        self._process_events()
        n = self._round(size)
        small = n <= _K_SMALL
        fits = [b for b in self.free[small] if b.stream == stream and b.size >= n]
        blk = min(fits, key=lambda b: (b.size, b.ptr)) if fits else None
        if blk is not None:
            self.free[small].remove(blk)
        else:
            blk = self._alloc_block(small, self._alloc_size(n), stream, False, base)
            if blk is None:
                self._release_cached()
                blk = self._alloc_block(small, self._alloc_size(n), stream, True, base)
            if blk is None:
                self.count["num_ooms"] += 1
                return 0, _OOM
        remaining = blk.size - n
        already = blk.split()
        if (remaining >= _K_MIN) if small else (remaining > _K_SMALL):
            rest = blk
            blk = _Blk(rest.ptr, n, stream, small)
            blk.prev, blk.next = rest.prev, rest
            if blk.prev:
                blk.prev.next = blk
            rest.prev = blk
            rest.ptr += n
            rest.size -= n
            self.free[small].append(rest)
            if already:
                self._add("inactive_split_bytes", small, -n)
            else:
                self._add("inactive_split_bytes", small, rest.size)
                self._add("inactive_split", small, 1)
        elif already:
            self._add("inactive_split_bytes", small, -blk.size)
            self._add("inactive_split", small, -1)
        blk.allocated, blk.requested = True, size
        self.live[blk.ptr] = blk
        self.freed.discard(blk.ptr)
        for kind, v in (("allocation", 1), ("allocated_bytes", blk.size), ("active", 1), ("active_bytes", blk.size),
                        ("requested_bytes", size)):
            self._add(kind, small, v)
        return blk.ptr, _OK

    def _alloc_block(self, small: bool, size: int, stream: int, retry: bool, base: int) -> _Blk | None:
        if retry:
            self.count["num_alloc_retries"] += 1
        if self.limit and self.reserved + size > self.limit:
            return None
        if not base or base in self.segments:  # (yours returned no pointer here: a made-up address)
            base, self._fake = self._fake, self._fake + (1 << 40)
        self.reserved += size
        self.segments[base] = size
        self._add("segment", small, 1)
        self._add("reserved_bytes", small, size)
        self.count["num_device_alloc"] += 1
        return _Blk(base, size, stream, small)

    def _bad_pointer(self, ptr: int) -> int:
        if ptr in self.freed:
            return _DOUBLE_FREE
        if any(b <= ptr < b + s for b, s in self.segments.items()):
            return _INTERIOR
        return _FOREIGN

    def free_ptr(self, ptr: int) -> int:
        if not ptr:
            return _OK
        blk = self.live.pop(ptr, None)
        if blk is None:
            return self._bad_pointer(ptr)
        self.freed.add(ptr)
        blk.allocated = False
        self._add("allocation", blk.small, -1)
        self._add("allocated_bytes", blk.small, -blk.size)
        if blk.uses:
            for t in blk.uses:
                queue = next((q for s, q in self.pending if s == t), None)
                if queue is None:
                    queue = []
                    self.pending.append((t, queue))
                queue.append([self.op, False, blk])
                blk.events += 1
            blk.uses = []
        else:
            self._free_block(blk)
        return _OK

    def record_stream(self, ptr: int, stream: int) -> int:
        blk = self.live.get(ptr)
        if blk is None:
            return self._bad_pointer(ptr)
        if stream != blk.stream and stream not in blk.uses:
            blk.uses.append(stream)
        return _OK

    def _merge(self, dst: _Blk, src: _Blk | None) -> int:
        if src is None or src.allocated or src.events or src.uses:
            return 0
        self.free[src.small].remove(src)
        if dst.prev is src:
            dst.ptr, dst.prev = src.ptr, src.prev
            if dst.prev:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _free_block(self, blk: _Blk) -> None:
        size0, blocks, nbytes = blk.size, 0, 0
        for cand in (blk.prev, blk.next):
            n = self._merge(blk, cand)
            if n:
                blocks, nbytes = blocks - 1, nbytes - n
        self.free[blk.small].append(blk)
        if blk.split():
            blocks, nbytes = blocks + 1, nbytes + blk.size
        self._add("inactive_split", blk.small, blocks)
        self._add("inactive_split_bytes", blk.small, nbytes)
        self._add("active", blk.small, -1)
        self._add("active_bytes", blk.small, -size0)
        self._add("requested_bytes", blk.small, -blk.requested)
        blk.requested = 0

    def _done(self, entry: list) -> bool:
        return entry[1] or (self.events == "sim" and self.op > entry[0])

    def _process_events(self) -> None:
        for _, queue in self.pending:
            while queue and self._done(queue[0]):
                blk = queue.pop(0)[2]
                blk.events -= 1
                if blk.events == 0:
                    self._free_block(blk)
        self.pending = [(s, q) for s, q in self.pending if q]

    def _release_cached(self) -> None:
        self.count["num_sync_all_streams"] += 1
        for _, queue in self.pending:
            for _, _, blk in queue:
                blk.events -= 1
                if blk.events == 0:
                    self._free_block(blk)
        self.pending = []
        for small in (False, True):
            for b in [b for b in self.free[small] if not b.split()]:
                self.free[small].remove(b)
                self.reserved -= b.size
                del self.segments[b.ptr]
                self._add("segment", small, -1)
                self._add("reserved_bytes", small, -b.size)
                self.count["num_device_free"] += 1

    def step(self, i: int, row: tuple[int, int, int, int], their_ptr: int) -> tuple[int, int]:
        """Operation ``i``; returns (pointer, status) as PyTorch's policy gives them."""
        self.op = i
        op, a, b, c = row
        if op == _MALLOC:
            if not 0 <= c < 8:
                return 0, _BAD
            ptr, st = self.malloc(b, c, their_ptr)
            if ptr:
                self.ptr_of[a] = ptr
            return ptr, st
        if op in (_FREE, _FREE_RAW, _RECORD):
            if op == _FREE_RAW and a < 0:
                return 0, _FOREIGN
            if a not in self.ptr_of:
                return 0, _BAD
            if op == _RECORD:
                return 0, self.record_stream(self.ptr_of[a], b)
            return 0, self.free_ptr(self.ptr_of[a] + (b if op == _FREE_RAW else 0))
        if op == _EMPTY:
            self._release_cached()
        elif op == _SYNC:
            for _, queue in self.pending:
                for entry in queue:
                    entry[1] = True
        return 0, _OK


_POLICY = ["reserved_bytes.all.current", "segment.all.current", "num_device_alloc", "num_device_free",
           "reserved_bytes.small_pool.current", "reserved_bytes.large_pool.current"]
_HINTS = {
    "reserved_bytes": "reserved follows cudaMalloc/cudaFree: check allocation_size (2 MiB, 20 MiB, rounded to 2 MiB), "
                      "best fit in get_free_block and which segments release_cached_blocks gives back (whole free "
                      "ones only)",
    "allocated_bytes": "allocated_bytes counts the rounded block size handed out (part 3 of task 7.9) and goes down "
                       "in free() (its continuation)",
    "active": "a block stays active until free_block: while it waits for another stream's event it is active but "
              "not allocated",
    "inactive_split": "inactive_split counts free pieces of split segments: +1 when a cut leaves a new piece, -1 per "
                      "neighbour merged, +1 when a freed block stays a piece",
    "requested_bytes": "requested_bytes adds what the caller asked for (before rounding) and subtracts it in "
                       "free_block",
    "num_alloc_retries": "a retry is the second alloc_block call, after release_cached_blocks",
    "num_sync_all_streams": "synchronize_and_free_events counts one per call (empty_cache and each retry)",
    "fragmentation": "(reserved - allocated) / reserved, from the 'all' currents; 0 with nothing reserved",
}


def _describe_op(row: tuple[int, int, int, int]) -> str:
    op, a, b, c = row
    return {_MALLOC: f"malloc(id {a}, {b} bytes, stream {c})", _FREE: f"free(id {a})",
            _RECORD: f"record_stream(id {a}, stream {b})", _EMPTY: "empty_cache()", _SPIN: f"spin(stream {a})",
            _SYNC: "synchronize()", _FREE_RAW: f"free(pointer of id {a} + {b})"}.get(op, f"op {op}")


def _check_trace(trace: Any, *, task: str, keys: list[str] | None = None, limit: int = 0, name: str = "") -> Any:
    """Replay ``trace`` on the learner's allocator and on the model; assert they agree after every operation on the
    pointers, the statuses and ``keys`` (default: every statistic). Returns the learner's TraceResult."""
    m, tools = _m(), _tools()
    r = tools.run_trace(m, trace, limit=limit)
    rows = trace.rows
    assert len(r.ptrs) == len(rows), f"task {task}: alloc_end gave {len(r.ptrs)} operations back, not {len(rows)}"
    total = torch.cuda.mem_get_info()[1] if m.backend == "cuda" else 85017624576
    model = _TorchModel(limit, "gpu" if m.backend == "cuda" else "sim", total)
    keys = keys or [k for k in tools.STATS]
    for i, row in enumerate(rows):
        ptr, st = model.step(i, row, r.ptrs[i])
        where = (f"task {task}{' (' + name + ')' if name else ''}: operation {i}, {_describe_op(row)}"
                 f"{'; limit ' + str(limit) + ' bytes' if limit else ''}.\n  The operations before it: "
                 f"{'; '.join(_describe_op(x) for x in rows[max(0, i - 6):i]) or 'none'}.\n  ")
        yours = _STATUS[r.status[i]] if 0 <= r.status[i] < len(_STATUS) else str(r.status[i])
        assert r.status[i] == st, (where + f"status: yours {yours}, PyTorch's policy {_STATUS[st]}"
                                   + (f" ({r.messages.strip()})" if r.messages else ""))
        if row[0] == _MALLOC:
            assert r.ptrs[i] == ptr, (
                where + f"pointer: yours {r.ptrs[i]:#x}, PyTorch's policy {ptr:#x} "
                f"({'the start of a new segment' if ptr in model.segments else 'inside a cached segment'}). "
                "Best fit: the smallest free block of this stream (lowest address among equal sizes), cut when the "
                "rest is >= 512 bytes (small pool) or > 1 MiB (large pool); only no fit makes a new segment.")
        want = model.stats()
        for k in keys:
            mine, theirs = r.stats[i][k], want.get(k, 0.0)
            if k == "fragmentation" and abs(mine - theirs) <= 1e-9:
                continue
            assert mine == theirs, (where + f"{k}: yours {mine:g}, PyTorch's {theirs:g}. Hint: "
                                    + next((h for p, h in _HINTS.items() if k.startswith(p)), "see the TODO"))
    return r


def _spin_cycles() -> int:
    """A SPIN that outlasts a few operations: ~50 ms at 2 GHz on a GPU; short on the simulator."""
    return 100_000_000 if _m().backend == "cuda" else 1000


def _crafted_traces() -> dict[str, Any]:
    """Traces that each exercise one rule (their names say which)."""
    T = _tools().Trace
    sizes = [1, 511, 512, 513, 1000, _MiB - 1, _MiB, _MiB + 1, 3 * _MiB, 10 * _MiB - 1, 10 * _MiB, 10 * _MiB + 1,
             25 * _MiB + 1]
    classes = T()
    for i, s in enumerate(sizes):
        classes.malloc(i, s)
    for i in range(0, len(sizes), 2):
        classes.free(i)
    classes.empty_cache()
    for i in range(1, len(sizes), 2):
        classes.free(i)
    classes.empty_cache()
    split = (T().malloc(0, 3 * _MiB).malloc(1, 3 * _MiB).malloc(2, 3 * _MiB).free(1).malloc(3, 2 * _MiB)
             .malloc(4, 1000).malloc(5, 700).free(4).free(0).free(3).malloc(6, 5 * _MiB).free(2).free(6).malloc(7, 600)
             .free(5).empty_cache().free(7).empty_cache())
    streams = (T().malloc(0, 4096, 0).free(0).malloc(1, 4096, 1).malloc(2, 4096, 0).malloc(3, 3 * _MiB, 1)
               .free(3).malloc(4, 3 * _MiB, 2).malloc(5, 3 * _MiB, 1).free(1).free(2).free(4).free(5).empty_cache())
    cycles = _spin_cycles()
    events = (T().malloc(0, 3 * _MiB, 0).malloc(9, 1000, 0).record_stream(0, 1).record_stream(9, 2)
              .record_stream(0, 0).spin(1, cycles).spin(2, cycles).free(0).free(9).malloc(1, 3 * _MiB, 0)
              .malloc(2, 1000, 0).sync().malloc(3, 3 * _MiB, 0).malloc(4, 500, 0).free(1).free(2).free(3).free(4)
              .malloc(5, 3 * _MiB, 0).record_stream(5, 3).spin(3, cycles).free(5).empty_cache())
    return {"size classes": classes, "split and coalesce": split, "per-stream pools": streams, "events": events}


def _random_trace(seed_name: str, n: int = 160, streams: int = 2) -> Any:
    """Random mallocs (small, 1-10 MiB, 10-24 MiB), frees and empty_caches, all freed at the end."""
    import random

    g = check.rng(seed_name)
    rnd = random.Random(int(torch.randint(0, 1 << 62, (1,), generator=g)))
    t, live, nxt = _tools().Trace(), [], 0
    for _ in range(n):
        r = rnd.random()
        if live and (r < 0.42 or len(live) >= 16):
            t.free(live.pop(rnd.randrange(len(live))))
        elif r < 0.46:
            t.empty_cache()
        else:
            k = rnd.random()
            size = (int(math.exp(rnd.uniform(0.0, math.log(_MiB)))) if k < 0.6 else
                    rnd.randint(_MiB + 1, 10 * _MiB) if k < 0.95 else rnd.randint(10 * _MiB, 24 * _MiB))
            t.malloc(nxt, size, rnd.randrange(streams))
            live.append(nxt)
            nxt += 1
    for i in live:
        t.free(i)
    return t.empty_cache()


@pytest.mark.task("7.8")
@pytest.mark.parametrize("name", ["size classes", "split and coalesce", "per-stream pools", "events"])
def test_allocator_policy(name: str) -> None:
    """Pointers, statuses, reserved bytes and cudaMalloc/cudaFree counts equal PyTorch's policy's after every
    operation of a trace made for one rule. (The reserved statistics are kept by the given alloc_block and
    release_block, so this task needs none of task 7.9's.) On the simulator a recorded event is complete at the
    next operation (queued stream work runs when a launcher returns), so a block waiting for one is reusable at the
    next malloc; on a GPU the trace's SPIN keeps it waiting until the SYNC."""
    _check_trace(_crafted_traces()[name], task="7.8", keys=_POLICY, name=name)


@pytest.mark.task("7.8")
@pytest.mark.parametrize("k", [0, 1, 2])
def test_allocator_random_traces(k: int) -> None:
    _check_trace(_random_trace(f"alloc-random-{k}", streams=1 + k), task="7.8", keys=_POLICY, name=f"random {k}")


def _limit_trace() -> Any:
    """Reserving past the limit: the cache is emptied and cudaMalloc retried (a retry), then an out-of-memory."""
    return (_tools().Trace().malloc(0, 3 * _MiB).malloc(1, 15 * _MiB).malloc(2, 1000).free(0).free(1)
            .malloc(3, 30 * _MiB).malloc(4, 30 * _MiB).malloc(5, 3 * _MiB).free(2).free(3).malloc(6, 30 * _MiB)
            .free(5).free(6).empty_cache())


_LIMIT = 53 * _MiB  # (odd in MiB: segment sums, all even, never tie with it)


@pytest.mark.task("7.8")
def test_allocator_limit_retry_and_out_of_memory() -> None:
    r = _check_trace(_limit_trace(), task="7.8", keys=_POLICY, limit=_LIMIT, name="limit")
    assert _OOM in r.status and "out of memory" in r.messages, (
        f"task 7.8: the trace's out-of-memory was not reported as one: {r.messages!r}")


@pytest.mark.task("7.8")
def test_allocator_refuses_bad_input_and_stays_intact() -> None:
    """Double free, a foreign pointer, a pointer inside a block, a request above the device's memory, a negative
    size and an unknown id: each refused with a message naming the pointer or size, and the pool afterwards is
    exactly as PyTorch's policy leaves it without them (the rest of the trace agrees with the model)."""
    T = _tools().Trace
    huge = 1 << 50
    t = (T().malloc(0, 1000).malloc(1, 3 * _MiB).free(0).free(0).free_raw(-1).free_raw(1, 4096).malloc(2, huge)
         .malloc(3, -5).free(77).record_stream(0, 1).malloc(4, 1000).free(4).free_raw(1, 0).free(1).empty_cache())
    r = _check_trace(t, task="7.8", keys=_POLICY, name="bad input")
    lines = r.messages.splitlines()
    p0, p1 = r.ptrs[0], r.ptrs[1]
    for op, what in [(3, f"{p0:#x}"), (5, f"{p1 + 4096:#x}"), (6, str(huge)), (7, "-5"), (8, "77"), (9, f"{p0:#x}")]:
        line = next((ln for ln in lines if ln.startswith(f"op {op}:")), None)
        assert line is not None and what in line, (
            f"task 7.8: operation {op} ({_describe_op(t.rows[op])}) must be refused with a message naming {what}; "
            f"the messages were:\n{r.messages}")
    assert "double free" in lines[0] and "inside" in r.messages and "not allocated by this allocator" in r.messages


@pytest.mark.task("7.9")
@pytest.mark.parametrize("name", ["size classes", "split and coalesce", "per-stream pools", "events", "limit",
                                  "random"])
def test_statistics_equal_pytorchs(name: str) -> None:
    """Every statistic (torch.cuda.memory_stats() names, and fragmentation) after every operation equals PyTorch's:
    on its model here, and on a GPU also on PyTorch itself (the trace replayed through torch.empty, del,
    record_stream, empty_cache and set_per_process_memory_fraction, torch.cuda.memory_stats() after each)."""
    limit = _LIMIT if name == "limit" else 0
    trace = (_limit_trace() if name == "limit" else _random_trace("alloc-stats", streams=2) if name == "random"
             else _crafted_traces()[name])
    r = _check_trace(trace, task="7.9", limit=limit, name=name)
    if _m().backend != "cuda":
        return
    tools = _tools()
    theirs = tools.torch_replay(trace, limit=limit)
    for i, row in enumerate(trace.rows):
        assert r.status[i] == theirs.status[i], (
            f"task 7.9 ({name}): operation {i}, {_describe_op(row)}: status yours {_STATUS[r.status[i]]}, "
            f"torch {_STATUS[theirs.status[i]]}")
        for k in tools.STATS:
            mine, want = r.stats[i][k], theirs.stats[i][k]
            assert mine == want or (k == "fragmentation" and abs(mine - want) < 1e-9), (
                f"task 7.9 ({name}): operation {i}, {_describe_op(row)}: {k} yours {mine:g}, "
                f"torch.cuda.memory_stats() {want:g}")


@pytest.mark.task("7.11")
def test_fragmenting_trace() -> None:
    """Your trace (fragmenting_trace), with one more empty_cache: on PyTorch's policy at least 32 MiB stays
    reserved and at least two thirds of it is unallocated; only MALLOC (stream 0), FREE and EMPTY_CACHE, sizes up
    to 64 MiB, frees of live ids only, at most 400 operations. Your allocator must agree with the policy on it."""
    m, tools = _m(), _tools()
    rows_t = torch.full((400 * 4,), -7, dtype=torch.int64, device=m.device)
    count = torch.full((1,), -1, dtype=torch.int32, device=m.device)
    m.fragmenting_trace(rows_t, 400, count)
    n = int(count.item())
    assert 0 < n <= 400, f"task 7.11: fragmenting_trace wrote {n} operations (count[0]); write 1 to 400"
    rows = [tuple(int(v) for v in rows_t[4 * i:4 * i + 4].tolist()) for i in range(n)]
    live: set[int] = set()
    for i, (op, a, b, c) in enumerate(rows):
        if op == _MALLOC:
            assert c == 0 and 0 < b <= 64 * _MiB and a not in live, (
                f"task 7.11: operation {i} {rows[i]}: a MALLOC takes a new id, 1 byte to 64 MiB, stream 0")
            live.add(a)
        elif op == _FREE:
            assert a in live, f"task 7.11: operation {i} frees id {a}, which is not live"
            live.discard(a)
        else:
            assert op == _EMPTY, f"task 7.11: operation {i} {rows[i]}: only MALLOC (0), FREE (1), EMPTY_CACHE (3)"
    trace = tools.Trace(rows).empty_cache()
    model = _TorchModel()
    for i, row in enumerate(trace.rows):
        model.step(i, row, (i + 1) << 36)
    s = model.stats()
    res, alloc = s["reserved_bytes.all.current"], s["allocated_bytes.all.current"]
    assert res >= 32 * _MiB and (res - alloc) >= 2 / 3 * res, (
        f"task 7.11: after your trace and an empty_cache PyTorch's policy holds {res / _MiB:.1f} MiB reserved, "
        f"{alloc / _MiB:.1f} MiB allocated ({(res - alloc) / res if res else 0:.0%} unallocated): the target is at "
        "least 32 MiB reserved and two thirds of it unallocated. Leave a small live block in each of several "
        "segments: empty_cache can give back only segments with nothing live in them.")
    _check_trace(trace, task="7.11", keys=_POLICY, name="your fragmenting trace")


def _train_twin(mod: Any, allocator: str, steps: int, warmup: int, weights: dict, batches: list) -> dict:
    """Runs in a fresh worker where alloc_tools.py (``mod``) is loaded: plugs ``allocator`` in (before anything
    touches the GPU), then trains lesson 06's capstone model in its PyTorch form (the same model as
    capstone.torch_loss, written out here so that nothing outside this file is needed) with AdamW."""
    import torch
    import torch.nn.functional as F

    stats = mod.plug(allocator)
    cfg = weights["cfg"]
    H, dim, eps, theta = int(cfg[0]), int(cfg[1]), float(cfg[2]), float(cfg[3])
    hd = dim // H
    W = {k: v.cuda().requires_grad_(True) for k, v in weights.items() if k != "cfg"}
    data = [(i.cuda(), t.cuda()) for i, t in batches]
    opt = torch.optim.AdamW(list(W.values()), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    n_layers = len([k for k in W if k.endswith(".wq")])

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rope(x: torch.Tensor, T: int) -> torch.Tensor:
        freq = theta ** (-torch.arange(0, hd // 2, dtype=x.dtype, device=x.device) * 2 / hd)
        ang = torch.arange(T, dtype=x.dtype, device=x.device)[:, None] * freq[None, :]
        c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    def step(i: int) -> float:
        ids, targets = data[i]
        B, T = ids.shape
        opt.zero_grad()
        x = W["tok_emb"][ids.reshape(-1)]
        for L in range(n_layers):
            p = f"layers.{L}."
            h = rms(x, W[p + "attn_norm"])
            q, k, v = (h @ W[p + n].T for n in ("wq", "wk", "wv"))
            q = rope(q.reshape(B, T, H, hd), T).transpose(1, 2)
            k = rope(k.reshape(B, T, H, hd), T).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v.reshape(B, T, H, hd).transpose(1, 2), is_causal=True)
            x = x + a.transpose(1, 2).reshape(B * T, dim) @ W[p + "wo"].T
            h = rms(x, W[p + "mlp_norm"])
            x = x + (F.silu(h @ W[p + "w_gate"].T) * (h @ W[p + "w_up"].T)) @ W[p + "w_down"].T
        loss = F.cross_entropy(rms(x, W["norm"]) @ W["lm_head"].T, targets.reshape(-1))
        loss.backward()
        opt.step()
        return float(loss.detach())

    return {"allocator": allocator, **mod.measure(stats, step, steps, warmup)}


def _capstone_inputs(steps: int) -> tuple[dict, list]:
    """Lesson 06's GPU capstone model (capstone.gpu_config(): vocab 64, dim 256, 8 heads, hidden 704, 4 layers),
    weights drawn as lesson 04's init_weights draws them, and random batches of 16 x 256 tokens, on the CPU."""
    g = check.rng("alloc-capstone")
    d, hid, vocab, layers = 256, 704, 64, 4

    def rnd(*shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).float()

    w: dict[str, Any] = {"tok_emb": rnd(vocab, d)}
    for L in range(layers):
        p = f"layers.{L}."
        w.update({p + "attn_norm": rnd(d, scale=0.1, shift=1.0), p + "wq": rnd(d, d, scale=d**-0.5),
                  p + "wk": rnd(d, d, scale=d**-0.5), p + "wv": rnd(d, d, scale=d**-0.5),
                  p + "wo": rnd(d, d, scale=d**-0.5), p + "mlp_norm": rnd(d, scale=0.1, shift=1.0),
                  p + "w_gate": rnd(hid, d, scale=d**-0.5), p + "w_up": rnd(hid, d, scale=d**-0.5),
                  p + "w_down": rnd(d, hid, scale=hid**-0.5)})
    w.update({"norm": rnd(d, scale=0.1, shift=1.0), "lm_head": rnd(vocab, d, scale=3 * d**-0.5),
              "cfg": torch.tensor([8.0, float(d), 1e-5, 10000.0], dtype=torch.float64)})
    batches = [(torch.randint(0, vocab, (16, 256), generator=g), torch.randint(0, vocab, (16, 256), generator=g))
               for _ in range(steps)]
    return w, batches


def _train_fresh(allocator: str, steps: int, warmup: int, inputs: tuple[dict, list]) -> dict:
    """_train_twin in a fresh torch worker (confined while grading; as confined as this machine allows
    otherwise): PyTorch swaps its allocator only in a process whose CUDA state has not started."""
    from cudacourse.workers.torch import TorchWorker

    weights, batches = inputs
    w = TorchWorker.python(_m().dir / "alloc_tools.py", timeout_s=600.0, gpu=True,
                           confine=settings.current().confine or "best-effort")
    try:
        return w.run(_train_twin, w.module(), allocator, steps, warmup, weights, batches)
    finally:
        w.close()


@pytest.mark.task("7.10")
@pytest.mark.gpu
def test_plugged_into_pytorch() -> None:
    """Lesson 06's capstone step (its PyTorch form) on PyTorch's allocator, yours (CUDAPluggableAllocator over
    cc_alloc_malloc/cc_alloc_free) and none (cc_plain_*), each in a fresh process: the same losses as on PyTorch's,
    no cudaMalloc in a step once warm, and the peak reserved within 2% of PyTorch's (the same policy on the same
    requests); with no caching every step calls cudaMalloc. Steps/s are reported, not graded."""
    from concurrent.futures import ThreadPoolExecutor

    steps, warmup = 6, 3
    # the three fresh processes at once (each imports torch and starts CUDA: ~15 s apiece, the longest wait of a
    # GPU grade when run one after another); their steps/s, reported and never graded, share the GPU
    inputs = _capstone_inputs(warmup + steps)
    with ThreadPoolExecutor(3) as pool:
        futures = {a: pool.submit(_train_fresh, a, steps, warmup, inputs) for a in ("torch", "yours", "none")}
        runs = {a: f.result() for a, f in futures.items()}
    t, y, n = runs["torch"], runs["yours"], runs["none"]
    for k, (a, b) in enumerate(zip(y["losses"], t["losses"], strict=True)):
        assert math.isfinite(a) and abs(a - b) <= 1e-3 * abs(b), (
            f"task 7.10: step {k}: loss {a} on your allocator, {b} on PyTorch's: the memory it hands out must hold "
            "what the kernels wrote (a block handed out twice, or freed too early?)")
    assert y["cudamalloc_per_step"] <= t["cudamalloc_per_step"], (
        f"task 7.10: {y['cudamalloc_per_step']:g} cudaMalloc per step on your allocator once warm, "
        f"{t['cudamalloc_per_step']:g} on PyTorch's: freed blocks must be reused, not given back")
    assert abs(y["peak_reserved"] - t["peak_reserved"]) <= 0.02 * t["peak_reserved"], (
        f"task 7.10: peak reserved {y['peak_reserved'] / _MiB:.1f} MiB on yours, {t['peak_reserved'] / _MiB:.1f} MiB "
        "on PyTorch's (the same policy on the same requests should reserve the same)")
    assert n["cudamalloc_per_step"] > 10, f"task 7.10: no caching made {n['cudamalloc_per_step']} cudaMalloc per step"
    from cudacourse.speed import NOTES

    NOTES.append("capstone step (PyTorch form; the three runs at once), " + "; ".join(
        f"{a}: {r['steps_per_s']:.1f} steps/s, peak reserved {r['peak_reserved'] / _MiB:.0f} MiB, "
        f"{r['cudamalloc_per_step']:g} cudaMalloc/step" for a, r in runs.items()))
