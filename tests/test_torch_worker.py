"""The torch worker (cudacourse/workers/torch*.py): learner code that needs torch, run outside the checking process.

Most tests host a small Python module in the worker (it starts in about a second, no build); the torch-route
tests reuse builds other tests make anyway (tests/sim/test_torch_route.py's extension, lesson 01's
``relu_torch.cu`` solution), and one builds a file of its own: a static constructor that writes files and a
function that calls ``abort()``.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import cudacourse as cc
from cudacourse.errors import KernelError, KernelTimeout, OutOfBoundsError
from cudacourse.sandbox import available, learner_memory
from cudacourse.settings import using
from cudacourse.workers.torch import TorchWorker, backward
from cudacourse.workers.wire import Decoder, Encoder, ProtocolError, recv_message, send_message

ROOT = Path(__file__).resolve().parents[1]
CONFINE = "strict" if available().confined else "best-effort"

pytestmark = pytest.mark.xdist_group("torch_route")  # with tests/sim/test_torch_route.py: its build is shared

PY_MODULE = '''
import os
import torch
from cudacourse.errors import OutOfBoundsError


def echo(*args, **kwargs):
    return list(args), kwargs


def describe(x):
    return [list(x.shape), list(x.stride()), x.is_contiguous(), str(x.dtype), x.device.type]


def double_in_place(x):
    x.mul_(2)
    return x[1:]  # a view of the argument


def fresh(n):
    return torch.arange(n, dtype=torch.float32)


def check_fails(x):
    raise RuntimeError("double_it: x must be contiguous")


def out_of_bounds():
    raise OutOfBoundsError("x[1000] is past the end", kernel="k", block=(1, 0, 0), thread=(3, 0, 0), line=13)


def key_error():
    raise KeyError("nope")


def a_set():
    return {1, 2}


def peek(obj, name):
    return obj._chan.request({"req": "getattr", "handle": obj._handle, "name": name})


def use_kernels(k, x, cfg):
    """What decoder.py does: call methods of the test's kernels object, read a config."""
    y = k.scale(x, cfg.factor)
    return k.scale(y, 1.0 + cfg.twice), k.calls


def abort():
    os.abort()


def spin():
    while True:
        pass


def write(path):
    with open(path, "w") as f:
        f.write("written")
    return "done"


def writes_bytecode():
    import sys
    return not sys.flags.dont_write_bytecode


class Accumulator:
    def __init__(self, start):
        self.total = start

    def add(self, x):
        self.total = self.total + x
        return self.total


def make_accumulator(start):
    return Accumulator(start)


def total_of(acc):
    return acc.total


def call_back_with_a_set(k):
    return k.fill({1, 2}, 1.0)


def fill_through(k, n):
    out = torch.zeros(n)
    k.fill(out, 7.0)  # the checking process writes into a tensor allocated here: copied back
    return out


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        dx = torch.empty_like(x)
        ctx.k.twice_product(x, dy, dx)  # as lesson 06's Functions do: a kernel writes the gradient
        return dx, None


class Ops:
    """As lesson 06's train.Ops: made once, keeps the kernels object it is given, used by later calls."""

    def __init__(self, k):
        self.k = k
        self.device = k.device

    def square(self, x):
        return _Square.apply(x, self.k)


def cube(x):
    return x * x * x


def reserve_gib():
    import mmap
    held = []
    try:
        while len(held) < 64:
            held.append(mmap.mmap(-1, 1 << 30))  # reserved, never touched: harmless where no limit holds
    except OSError:
        pass
    return len(held)
'''


@pytest.fixture(scope="module")
def py_worker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("pymod")
    (d / "mod.py").write_text(PY_MODULE)
    with using(confine=CONFINE):
        w = TorchWorker.python(d / "mod.py", timeout_s=20.0, confine=CONFINE)
    yield w
    w.close()


# ----------------------------------------------------------------------------------------------------
# The channel
# ----------------------------------------------------------------------------------------------------


def test_every_argument_type_round_trips(py_worker: Any) -> None:
    x = torch.randn(3, 4)
    args = [0, -7, 2**40, 2.5, float("inf"), True, False, None, "text", torch.float16, [1, [2.0, "a"]], (3, (4,)),
            x, torch.arange(6, dtype=torch.int32), torch.tensor([True, False]),
            torch.randn(5, dtype=torch.float64), torch.randn(4).half(), torch.empty(0)]
    got, kw = py_worker.call("echo", *args, opt={"w": x, "n": [1, 2]})
    assert len(got) == len(args)
    for a, b in zip(args, got, strict=True):
        if isinstance(a, torch.Tensor):
            assert isinstance(b, torch.Tensor) and b.dtype == a.dtype and b.shape == a.shape and torch.equal(a, b)
            # handed back as it came: a view of the caller's own tensor, as in-process
            assert b.data_ptr() == a.data_ptr() or a.numel() == 0
        else:
            assert type(b) is type(a) and b == a
    assert torch.equal(kw["opt"]["w"], x) and kw["opt"]["n"] == [1, 2]
    nan = py_worker.call("echo", float("nan"))[0][0]
    assert nan != nan
    y = py_worker.call("fresh", 3)  # a tensor made in the worker: a new tensor here
    assert torch.equal(y, torch.arange(3.0)) and y.dtype == torch.float32


def test_the_worker_keeps_the_graders_triton_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While grading on a GPU the plugin sets triton_track.ONE_CONFIG_ENV (one config per kernel, no autotuning):
    a Triton twin hosted in the worker must see it too, and the worker must see none of the grader's other
    variables."""
    from cudacourse.triton_track import ONE_CONFIG_ENV

    (tmp_path / "envmod.py").write_text("import os\n\ndef env(name):\n    return os.environ.get(name)\n")
    monkeypatch.setenv(ONE_CONFIG_ENV, "1")
    monkeypatch.setenv("CC_TEST_SECRET", "grader-only")
    with using(confine=CONFINE):
        w = TorchWorker.python(tmp_path / "envmod.py", timeout_s=20.0, confine=CONFINE)
    try:
        assert w.call("env", ONE_CONFIG_ENV) == "1"
        assert w.call("env", "CC_TEST_SECRET") is None
    finally:
        w.close()


def test_the_worker_reads_the_bytecode_folder_of_its_task_process(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A task process started with PYTHONPYCACHEPREFIX (a grade on a machine whose packages ship no bytecode:
    grading.processes.bytecode_cache) hands the folder to its torch workers, whose ``-I`` ignores the variable: they
    read the bytecode there (the folder is in their sandbox's reads) and write none (``-B``)."""
    pyc = tmp_path / "pycache"
    pyc.mkdir()
    (tmp_path / "prefix.py").write_text("import sys\n\ndef prefix():\n    return [sys.pycache_prefix, "
                                        "sys.dont_write_bytecode]\n")
    monkeypatch.setattr(sys, "pycache_prefix", str(pyc))
    with using(confine=CONFINE):
        w = TorchWorker.python(tmp_path / "prefix.py", timeout_s=20.0, confine=CONFINE)
    try:
        assert w.call("prefix") == [str(pyc), True]
    finally:
        w.close()
    assert not list(pyc.rglob("*.pyc"))  # read only


def test_strided_and_meta_tensors_keep_their_layout(py_worker: Any) -> None:
    base = torch.randn(8, 8)
    assert py_worker.call("describe", base.t()) == [[8, 8], [1, 8], False, "torch.float32", "cpu"]
    assert py_worker.call("describe", base[::2, 1:5]) == [[4, 4], [16, 1], False, "torch.float32", "cpu"]
    assert py_worker.call("describe", base[2]) == [[8], [1], True, "torch.float32", "cpu"]
    assert py_worker.call("describe", torch.zeros(4, device="meta")) == [[4], [1], True, "torch.float32", "meta"]
    got = py_worker.call("echo", base.t())[0][0]
    assert torch.equal(got, base.t()) and got.stride() == (1, 8)


def test_changed_arguments_are_copied_back_and_views_stay_views(py_worker: Any) -> None:
    x = torch.arange(6, dtype=torch.float32)
    v = py_worker.call("double_in_place", x)
    assert torch.equal(x, torch.arange(6, dtype=torch.float32) * 2)
    assert v.data_ptr() == x.data_ptr() + 4 and torch.equal(v, x[1:])  # x[1:] of the caller's own tensor
    cols = torch.zeros(4, 4)
    py_worker.call("double_in_place", cols[:, 1].fill_(1.0))
    assert cols[:, 1].tolist() == [2.0] * 4 and cols[:, [0, 2, 3]].abs().sum() == 0
    y = py_worker.call("fresh", 5)
    assert torch.equal(y, torch.arange(5.0))


def test_values_that_cannot_cross_are_refused(py_worker: Any) -> None:
    # the learner's code may hand the checking process values only (it exports nothing to it)
    with pytest.raises(TypeError, match=r"argument\[0\]: a set cannot be passed"):
        py_worker.call("call_back_with_a_set", _Writer())
    with pytest.raises(TypeError, match="a Lesson cannot be handed to code running in the worker"):
        py_worker.call("echo", cc.lesson("01_relu", impl="solution", backend="sim"))  # module(path) would read files
    thing = object()  # an object of this process crosses as a handle, and comes back as itself
    assert py_worker.call("echo", thing)[0][0] is thing
    with pytest.raises(KernelError, match="raised AttributeError: '__class__' cannot be read from the worker"):
        py_worker.call("peek", thing, "__class__")


def test_errors_keep_their_type_and_message(py_worker: Any) -> None:
    with pytest.raises(RuntimeError, match="double_it: x must be contiguous"):
        py_worker.call("check_fails", torch.zeros(2))
    with pytest.raises(OutOfBoundsError) as ei:
        py_worker.call("out_of_bounds")
    e = ei.value
    assert (e.kernel, e.block, e.thread, e.line) == ("k", (1, 0, 0), (3, 0, 0), 13) and "x[1000]" in str(e)
    with pytest.raises(KernelError, match="key_error\\(\\) raised KeyError: 'nope'"):
        py_worker.call("key_error")
    with pytest.raises(KernelError, match="no function 'missing'"):
        py_worker.call("missing")


def test_a_crash_or_a_hang_costs_one_call(py_worker: Any) -> None:
    with pytest.raises(KernelError, match=r"abort\(\) \(mod\.py\): the process running your code was killed by "
                                          r"signal 6"):
        py_worker.call("abort")
    assert py_worker.call("echo", 1) == ([1], {})  # a fresh worker
    py_worker.timeout_s = 2.0
    try:
        with pytest.raises(KernelTimeout, match=r"spin\(\) \(mod\.py\): .* still busy after 2 s"):
            py_worker.call("spin")
    finally:
        py_worker.timeout_s = 20.0
    assert py_worker.call("echo", 2) == ([2], {})


def test_python_module_cannot_write_outside_its_scratch(py_worker: Any, tmp_path: Path) -> None:
    if CONFINE != "strict":
        pytest.skip(f"OS confinement unavailable here: {available().describe()}")
    target = tmp_path / "outside.txt"
    with pytest.raises(KernelError, match="write\\(\\) raised PermissionError: .*Permission denied"):
        py_worker.call("write", str(target))
    assert not target.exists()
    assert py_worker.call("write", "inside.txt") == "done"  # its own scratch (the working directory) is writable


def test_the_worker_writes_no_bytecode(py_worker: Any) -> None:
    """While grading, the worker imports the course from the staged folder: a .pyc written there changes the
    harness, and the grader failed task 1.6 of the solution for it ("your code changed files of the grading
    harness"). ``-I`` ignores PYTHONDONTWRITEBYTECODE, so the worker is started with ``-B``."""
    assert py_worker.call("writes_bytecode") is False


@pytest.mark.skipif(learner_memory(torch=True) is None, reason="on a GPU machine the torch worker runs without a "
                    "memory limit (a CUDA build of torch maps more address space than any such limit)")
def test_a_host_allocation_of_many_gb_hits_the_workers_memory_limit(py_worker: Any) -> None:
    """The worker runs under an address-space limit (confine.learner_memory): 1 GiB reservations fail well before
    the 64 asked for, instead of growing until the machine runs out."""
    limit = learner_memory(torch=True)
    assert limit is not None
    got = py_worker.call("reserve_gib")
    assert 0 < got < limit / (1 << 30), got
    assert py_worker.call("echo", 1) == ([1], {})  # and the worker still serves calls


def test_nonsense_from_the_worker_is_refused() -> None:
    """What the checking process decodes is checked: lengths, dtypes, shapes, aliases; no pickle anywhere."""
    enc = Encoder()
    desc = enc.value([torch.arange(4.0)])
    payload = bytearray(b"".join(bytes(memoryview(b).cast("B")) for b in enc.blobs))
    assert torch.equal(Decoder(payload).value(desc)[0], torch.arange(4.0))
    bad = [
        [{"tensor": {**desc[0]["tensor"], "n": 12}}],               # bytes do not match the shape
        [{"tensor": {**desc[0]["tensor"], "off": 8}}],              # past the payload
        [{"tensor": {**desc[0]["tensor"], "dtype": "object"}}],     # not a known dtype
        [{"tensor": {**desc[0]["tensor"], "shape": [-4]}}],
        [{"alias": {"arg": 0, "shape": [4], "strides": [1], "offset": 0}}],  # nothing was sent
        [{"pickle": "gASV"}],
        [{"dtype": "__import__"}],
    ]
    for d in bad:
        with pytest.raises(ProtocolError):
            Decoder(payload).value(d)
    sent = torch.arange(4.0)
    with pytest.raises(ProtocolError):  # a view past the end of the caller's tensor
        Decoder(bytearray(), [sent]).value({"alias": {"arg": 0, "shape": [8], "strides": [1], "offset": 0}})
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"\x00\x00\x00\x05" + b"\x00" * 8 + b"[1,2]")
        with pytest.raises(ProtocolError, match="not a JSON object"):
            recv_message(b)
        send_message(a, {"op": "x", "v": json.loads("[1]")}, [b"abc"])
        assert recv_message(b) == ({"op": "x", "v": [1]}, bytearray(b"abc"))


# ----------------------------------------------------------------------------------------------------
# Torch-route files on the simulator
# ----------------------------------------------------------------------------------------------------


def test_torch_check_and_kernel_errors_come_back() -> None:
    """tests/sim/test_torch_route.py's extension (same source, path and functions: its build is reused)."""
    from tests.sim.test_torch_route import SRC

    with using(confine=CONFINE):
        w = TorchWorker.extension(SRC, "relu_ext.cu", ["relu", "relu_nocheck"], checked=True, confine=CONFINE)
    try:
        x = torch.randn(1000)
        assert torch.equal(w.call("relu", x), x.clamp(min=0))
        with pytest.raises(RuntimeError, match="x must be contiguous"):
            w.call("relu", torch.randn(10, 10).t())
        with pytest.raises(OutOfBoundsError) as ei:
            w.call("relu_nocheck", torch.randn(1000))
        # line 13 reads x[i] and writes y[i]: either access past the end may be the one reported first
        assert ei.value.line == 13 and ("x[1000]" in str(ei.value) or "y[1000]" in str(ei.value))
        x = torch.randn(256)
        assert torch.equal(w.call("relu", x), x.clamp(min=0))  # still usable
    finally:
        w.close()


def test_loader_uses_the_worker_while_grading() -> None:
    """cc.load of lesson 01's solution relu_torch.cu (the build test_01_relu.py makes with --impl=solution)."""
    path = ROOT / "solutions" / "01_relu" / "relu_torch.cu"
    with using(confine=CONFINE, backend="sim"):
        m = cc.load(path)
    try:
        assert isinstance(m._lib, TorchWorker)
        x = torch.randn(3, 5, 7)
        y = m.relu_forward(x)
        assert torch.equal(y, torch.relu(x)) and y.shape == x.shape
        with pytest.raises(RuntimeError, match="x must be float32"):
            m.relu_forward(x.double())
        with pytest.raises(RuntimeError, match="x must be contiguous"):
            m.relu_forward(x[0].t())
        with pytest.raises(RuntimeError, match="CUDA"):
            m.relu_forward(torch.zeros(4, device="meta"))
    finally:
        m.close()
    m = cc.load(path, backend="sim")  # not grading: in-process, as before
    assert "_lib" not in m.__dict__ and torch.equal(m.relu_forward(x), torch.relu(x))


# ----------------------------------------------------------------------------------------------------
# On a GPU: the worker owns a CUDA context of its own; CUDA tensors cross through host memory
# ----------------------------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (the cuda backend's worker)")


@needs_gpu
def test_on_a_gpu_the_torch_route_file_runs_in_a_worker_of_its_own() -> None:
    """cc.load of lesson 01's solution relu_torch.cu while grading on cuda: built (nvcc) and loaded in the worker,
    called with CUDA tensors as in-process: values, a new tensor on the same device, TORCH_CHECK's messages."""
    path = ROOT / "solutions" / "01_relu" / "relu_torch.cu"
    with using(confine=CONFINE, backend="cuda"):
        m = cc.load(path, backend="cuda")
    try:
        assert isinstance(m._lib, TorchWorker) and m._lib.gpu
        x = torch.randn(3, 5, 7, device="cuda")
        y = m.relu_forward(x)
        assert y.device == x.device and y.shape == x.shape and y.data_ptr() != x.data_ptr()
        assert torch.equal(y, torch.relu(x))
        with pytest.raises(RuntimeError, match="float32"):
            m.relu_forward(x.double())
        with pytest.raises(RuntimeError, match="contiguous"):
            m.relu_forward(x[0].t())
        with pytest.raises(RuntimeError, match="CUDA"):
            m.relu_forward(torch.zeros(4))  # a CPU tensor crosses as a CPU tensor
        assert m.relu_forward(torch.empty(0, device="cuda")).numel() == 0
    finally:
        m.close()


@needs_gpu
def test_on_a_gpu_python_code_changes_cuda_arguments_and_returns_views(tmp_path: Path) -> None:
    """A Python module in a GPU worker (as decoder.py while grading on cuda): changed CUDA arguments are copied
    back into the caller's tensors, a returned view of an argument is the same view of the caller's tensor,
    a tensor made there arrives on the caller's device, and the test's kernels object is called back."""
    (tmp_path / "mod.py").write_text(PY_MODULE)
    with using(confine=CONFINE, backend="cuda"):
        w = TorchWorker.python(tmp_path / "mod.py", timeout_s=60.0, confine=CONFINE, gpu=True)
    try:
        x = torch.arange(6, dtype=torch.float32, device="cuda")
        v = w.call("double_in_place", x)
        assert torch.equal(x.cpu(), torch.arange(6.0) * 2)
        assert v.device == x.device and v.data_ptr() == x.data_ptr() + 4
        cols = torch.zeros(4, 4, device="cuda")
        w.call("double_in_place", cols[:, 1].fill_(1.0))
        assert cols[:, 1].tolist() == [2.0] * 4 and float(cols[:, [0, 2, 3]].abs().sum()) == 0
        assert w.call("describe", cols.t()) == [[4, 4], [1, 4], False, "torch.float32", "cuda"]
        got = w.call("echo", torch.ones(3, device="cuda"), torch.ones(2))[0]
        assert [t.device.type for t in got] == ["cuda", "cpu"]

        class Kernels:
            calls = 0

            def scale(self, t: torch.Tensor, f: float) -> torch.Tensor:
                assert t.device.type == "cuda", "a CUDA tensor of the worker arrives here on the GPU"
                Kernels.calls += 1
                return t * f

        class Cfg:
            factor, twice = 3.0, 1.0

        y, calls = w.call("use_kernels", Kernels(), torch.ones(5, device="cuda"), Cfg())
        assert y.device.type == "cuda" and torch.equal(y.cpu(), torch.full((5,), 6.0)) and calls == 2
    finally:
        w.close()


CTOR_SRC = r"""
#include <torch/extension.h>
#include <cstdio>
#include <cstdlib>

// A static constructor writes two files: one in the worker's scratch (its working directory), one outside.
__attribute__((constructor)) static void write_files() {
    FILE* f = std::fopen("ctor-ran.txt", "w");
    if (f) { std::fputs("ran", f); std::fclose(f); }
    f = std::fopen("../escaped.txt", "w");  // the worker's private folder, outside its scratch
    if (f) { std::fputs("escaped", f); std::fclose(f); }
}

torch::Tensor ctor_ran() {
    FILE* f = std::fopen("ctor-ran.txt", "r");
    bool ran = f != nullptr;
    if (f) std::fclose(f);
    return torch::full({1}, ran ? 1.0f : 0.0f);
}

torch::Tensor crash(torch::Tensor x) {
    std::abort();
    return x;
}
"""


@pytest.mark.slow
def test_static_constructor_cannot_write_outside_and_a_crash_costs_one_call() -> None:
    """One build of its own (torch headers: ~40-60 s here)."""
    if CONFINE != "strict":
        pytest.skip(f"OS confinement unavailable here: {available().describe()}")
    with using(confine=CONFINE, backend="sim"):
        m = cc.load(CTOR_SRC, ["ctor_ran", "crash"])
    outside = m._lib._chan.private / "escaped.txt"
    try:
        assert m.ctor_ran().item() == 1.0  # the constructor ran, in the worker, and wrote its own scratch
        assert not outside.exists(), "a static constructor wrote outside the worker's scratch"
        with pytest.raises(KernelError, match=r"crash\(\) \(<source>\.cu\): the process running your code was "
                                              r"killed by signal 6"):
            m.crash(torch.zeros(1))
        assert m.ctor_ran().item() == 1.0  # a fresh worker
    finally:
        m.close()


# ----------------------------------------------------------------------------------------------------
# Python exercise files: the learner's module in the worker, the test's kernels object called back
# ----------------------------------------------------------------------------------------------------


class _Scaler:
    """A stand-in for a test's kernels object: it counts its calls, and what it computes is checked."""

    def __init__(self) -> None:
        self.calls = 0
        self.hidden = "not for the worker"

    def scale(self, x: torch.Tensor, a: float) -> torch.Tensor:
        self.calls += 1
        if a < 0:
            raise OutOfBoundsError("scale: a kernel bug, seen by the learner's code", kernel="scale_kernel", line=7)
        return x * a


class _ScaleCfg:
    factor = 2.0

    @property
    def twice(self) -> float:
        return 2 * self.factor


def test_the_learners_code_calls_the_tests_objects_back(py_worker: Any) -> None:
    k, x = _Scaler(), torch.arange(4.0)
    y, calls = py_worker.call("use_kernels", k, x, _ScaleCfg())
    assert torch.equal(y, x * 2.0 * 5.0) and calls == 2 and k.calls == 2  # ran here, counted here
    with pytest.raises(OutOfBoundsError, match="a kernel bug") as ei:  # a kernel error crosses twice, intact
        py_worker.call("use_kernels", k, x, type("Neg", (), {"factor": -1.0, "twice": 0.0})())
    assert ei.value.kernel == "scale_kernel" and ei.value.line == 7
    with pytest.raises(KernelError, match="'_Scaler' object has no attribute 'missing'"):
        py_worker.call("peek", k, "missing")
    with pytest.raises(KernelError, match="cannot be read from the worker"):
        py_worker.call("peek", k, "_Scaler__x")


class _Writer:
    """A kernels object as lesson 06's tests hand it to train.py: its launchers write into their arguments."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.calls = 0

    def fill(self, out: torch.Tensor, v: float) -> None:
        self.calls += 1
        out.fill_(v)

    def twice_product(self, x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor) -> None:
        self.calls += 1
        dx.copy_(2 * x * dy)


class _Counted:
    """A counting wrapper whose launchers are closures made by ``__getattr__`` (not methods), as test_06's."""

    def __init__(self, k: Any) -> None:
        self._k, self.counts = k, {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._k, name)
        if not callable(attr):
            return attr

        def call(*args: Any) -> Any:
            self.counts[name] = self.counts.get(name, 0) + 1
            return attr(*args)

        return call


def test_call_backs_copy_changed_arguments_back_and_closures_cross(py_worker: Any) -> None:
    k = _Counted(_Writer())
    for _ in range(3):
        out = py_worker.call("fill_through", k, 5)
        assert torch.equal(out, torch.full((5,), 7.0)), "the kernel's writes did not reach the worker's tensor"
    assert k.counts == {"fill": 3} and k._k.calls == 3  # counted here, once per call, one object throughout


def test_objects_made_in_the_worker_stay_there(py_worker: Any) -> None:
    from cudacourse.workers.torch import WorkerObject

    acc = py_worker.call("make_accumulator", 2.0)
    assert isinstance(acc, WorkerObject)
    assert acc.add(3.0) == 5.0 and acc.total == 5.0 and py_worker.call("total_of", acc) == 5.0
    a_set = py_worker.call("a_set")  # what cannot be copied stays there too
    assert isinstance(a_set, WorkerObject) and py_worker.call("echo", a_set)[0][0] is not a_set
    with pytest.raises(AttributeError, match="_x"):
        acc._x  # noqa: B018 - private names are not asked for
    ops = py_worker.call("Ops", _Writer())  # a class is called there: the object it makes stays there
    x, dy = torch.randn(7).requires_grad_(True), torch.randn(7)
    y, (dx,) = backward(ops.square, (x,), dy)
    assert torch.equal(y, (x * x).detach()) and torch.allclose(dx, 2 * x.detach() * dy), "autograd in the worker"
    y_here, (dx_here,) = backward(lambda t: t * t, (x.detach().clone().requires_grad_(True),), dy)  # in-process
    assert torch.allclose(dx_here, dx) and torch.allclose(y_here, y)
    with pytest.raises(KernelError, match="killed by signal"):
        py_worker.call("abort")
    with pytest.raises(KernelError, match="made by a worker that has been stopped since"):
        acc.total  # noqa: B018 - read first after the crash: a fresh worker, which never held it
    with pytest.raises(KernelError, match="made by a worker that has been stopped since"):
        py_worker.call("total_of", acc)


def _helper_beside(mod: Any, x: torch.Tensor) -> Any:
    """Sent to the worker as source by run_beside: ``mod`` there is the learner's module itself."""
    import sys

    return mod.__name__ in sys.modules or mod.__name__.startswith("cc_"), mod.fresh(3), x * 2


def test_helpers_of_the_test_file_run_beside_the_module(py_worker: Any) -> None:
    from cudacourse.workers.torch import RemoteFunction, run_beside

    mod = py_worker.module()
    loaded, fresh, doubled = run_beside(mod, _helper_beside, torch.ones(3))
    assert loaded is True and torch.equal(fresh, torch.arange(3.0)) and torch.equal(doubled, torch.full((3,), 2.0))
    here = run_beside(sys.modules[__name__], lambda m, x: x + 1, torch.zeros(2))  # not hosted: runs here
    assert torch.equal(here, torch.ones(2))
    cube = mod.cube
    assert isinstance(cube, RemoteFunction)
    x = torch.randn(5).requires_grad_(True)
    dy = torch.randn(5)
    y, (dx,) = backward(cube, (x,), dy)  # autograd of a module function, in the worker
    assert torch.allclose(y, x.detach() ** 3) and torch.allclose(dx, 3 * x.detach() ** 2 * dy)
    with pytest.raises(KernelError, match=r"_helper_fails\(\) raised ZeroDivisionError"):
        run_beside(mod, _helper_fails)


def _helper_fails(mod: Any) -> None:
    return 1 / 0


def test_several_files_in_one_worker(tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("def via(mod, x):\n    return mod.triple(x)\n")
    (tmp_path / "other.py").write_text("def triple(x):\n    return 3 * x\n")
    with using(confine=CONFINE):
        w = TorchWorker.python(tmp_path / "main.py", timeout_s=20.0, confine=CONFINE, also=[tmp_path / "other.py"])
    try:
        other = w.module(tmp_path / "other.py")
        assert torch.equal(w.module().via(other, torch.ones(2)), torch.full((2,), 3.0))  # the module itself, there
        assert other.triple(4) == 12
        with pytest.raises(ValueError, match="is not loaded in this worker"):
            w.module(tmp_path / "third.py")
    finally:
        w.close()


class _TorchKernels:
    """Kernels of lesson 04 computed with torch (rope and attention as identities): decoder.py's plumbing only."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.device = torch.device("cpu")

    def _n(self, op: str) -> None:
        self.counts[op] = self.counts.get(op, 0) + 1

    def rmsnorm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        self._n("rmsnorm")
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        self._n("linear")
        return x @ w.T

    def rope(self, q: torch.Tensor, k: torch.Tensor, *_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self._n("rope")
        return q, k

    def attention(self, q: torch.Tensor, *_: Any) -> torch.Tensor:
        self._n("attention")
        return q

    def swiglu(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        self._n("swiglu")
        return torch.nn.functional.silu(gate) * up

    def add(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self._n("add")
        return a + b

    def block(self, x: torch.Tensor, w: dict, eps: float) -> torch.Tensor:
        """The same composition, computed here (decoder.py's solution with these kernels)."""
        h = self.rmsnorm(x, w["attn_norm"], eps)
        x = self.add(x, self.linear(self.linear(h, w["wq"]), w["wo"]))
        h = self.rmsnorm(x, w["mlp_norm"], eps)
        return self.add(x, self.linear(self.swiglu(self.linear(h, w["w_gate"]), self.linear(h, w["w_up"])),
                                       w["w_down"]))


def _decoder_in_worker(tmp: Path, attack_id: str | None) -> Any:
    """lesson 04's solution decoder.py (or a corpus attack built from it), imported in a worker under the guard."""
    from tests.attacks.corpus import build, load

    d = tmp / (attack_id or "solution")
    d.mkdir()
    if attack_id is None:
        text = (ROOT / "solutions" / "04_transformer" / "decoder.py").read_text()
    else:
        attack = next(a for a in load() if a.id == attack_id)
        text = next(iter(build(attack, course=ROOT, paths={}).values()))
        # the payloads reach modules through sys.modules: give them what the test process would have loaded
        text = text.replace("from __future__ import annotations\n", "from __future__ import annotations\n\n"
                            "import cudacourse.check  # noqa: F401\n", 1)
    (d / "decoder.py").write_text(text)
    with using(confine=CONFINE):
        return TorchWorker.python(d / "decoder.py", confine=CONFINE, guard=True, timeout_s=60.0).module()


def test_decoder_runs_in_the_worker_and_its_attacks_stay_there(tmp_path: Path) -> None:
    """The capstone's decoder.py as test_04 hosts it while grading: the solution's block through the test's kernels
    object; the corpus's torch answer refused by the guard in the worker; its monkeypatch of cudacourse.check
    confined to the worker (python-sys-modules-monkeypatch, graded with the checks of test_04)."""
    from cudacourse import check
    from tests.test_04_transformer import BLOCK_CALLS, SIM_CFG, _init_weights

    cfg, B, T = SIM_CFG, 2, 3
    w = _init_weights(cfg, 1, "cpu")["layers"][0]
    x = torch.randn(B * T, cfg.dim)
    cos = sin = torch.zeros(T, cfg.head_dim // 2)
    dec = _decoder_in_worker(tmp_path, None)
    k = _TorchKernels()
    try:
        y = dec.decoder_block(k, x, w, cfg, B, T, cos, sin)
        assert k.counts == BLOCK_CALLS
        torch.testing.assert_close(y, _TorchKernels().block(x, w, cfg.eps))
    finally:
        dec.worker.close()
    dec = _decoder_in_worker(tmp_path, "python-answers-with-torch")
    try:
        with pytest.raises(RuntimeError, match=r"decoder\.py:\d+: calls torch's linear\(\), which computes part"):
            dec.decoder_block(_TorchKernels(), x, w, cfg, B, T, cos, sin)
    finally:
        dec.worker.close()
    real = check.assert_close
    dec = _decoder_in_worker(tmp_path, "python-sys-modules-monkeypatch")  # its payload runs as it is imported
    try:
        assert dec.generate(_TorchKernels(), {}, cfg, [1, 2], 3) == [0, 0, 0]  # its sabotaged generate
        assert check.assert_close is real  # the patch stayed in the worker: the comparison still fails here
        with pytest.raises(AssertionError):
            check.assert_close(torch.zeros(2), torch.ones(2), name="y")
    finally:
        dec.worker.close()
