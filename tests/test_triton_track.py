"""The Triton track's frame (cudacourse/triton_track.py): model, configs, argument checks, "not graded" without triton.

The twins themselves are graded in each lesson's test file (tasks N.T*); these tests check the machinery
around them: what lesson.toml may declare, how a machine without triton reports the tasks, what doctor says.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cudacourse import triton_track
from cudacourse.course import CourseModelError, course, parse_lesson

ROOT = Path(__file__).resolve().parent.parent
HAVE_TRITON = triton_track.status(gpu=False).available


def test_the_model_declares_the_twins_and_their_tasks() -> None:
    """Every lesson with Triton tasks declares its twins, every twin has a solution and a stub, and every Triton
    task's id carries the T (1.T1): the track reads apart from the CUDA tasks in the points table."""
    c = course(ROOT)
    with_twins = [les for les in c if les.triton_files]
    assert {les.id for les in with_twins} >= {"01_relu", "02_reduce", "04_transformer"}
    for les in c:
        tracks = {t.track for t in les.tasks}
        assert tracks <= {"cuda", "triton"}
        for t in les.tasks:
            assert (t.track == "triton") == bool(re.fullmatch(r"\d+\.T\d+", t.id)), t.id
            assert not (t.track == "triton" and t.gpu), f"{t.id}: a Triton task is graded on the CPU too"
        for f in les.triton_files:
            assert f.endswith("_triton.py") and f in les.exercise_files
            sol = (ROOT / "solutions" / les.id / f).read_text()
            assert "BEGIN SOLUTION" in sol and "@triton.autotune" in sol, f
            assert any(f"TODO(task {t.id}" in sol for t in les.tasks if t.track == "triton"), f


def test_the_model_rejects_bad_triton_declarations() -> None:
    good = ('[lesson]\ntitle = "t"\nwrite = "w"\nlearn = "l"\nfiles = ["a.cu"]\ntriton_files = ["a_triton.py"]\n\n'
            '[[task]]\nid = "5.T1"\ntitle = "x"\npoints = 2\ntrack = "triton"\n')
    info = parse_lesson("05_toy", good)
    assert info.triton_files == ("a_triton.py",) and info.tasks[0].track == "triton"
    assert info.exercise_files == ("a.cu", "a_triton.py")
    for bad, why in [(good.replace('track = "triton"', 'track = "tritn"'), "track must be one of"),
                     (good.replace('["a_triton.py"]', '["a_triton.cu"]'), "triton_files are Python files"),
                     (good.replace('triton_files = ["a_triton.py"]\n', ""), "needs the lesson's triton_files")]:
        with pytest.raises(CourseModelError, match=re.escape(why)):
            parse_lesson("05_toy", bad)


def test_status_without_triton_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # find_spec then says: not installed
    st = triton_track.status(gpu=False)
    assert not st.available and st.mode == "missing"
    assert triton_track.INSTALL in st.detail or "Linux" in st.detail
    assert triton_track.not_graded_reason(st).startswith("not graded")
    with pytest.raises(RuntimeError, match="not graded"):
        triton_track.load(ROOT / "solutions" / "01_relu" / "relu_triton.py", backend="sim")
    from cudacourse.doctor import triton_fact

    assert triton_fact().startswith("cannot run") and triton_track.INSTALL in triton_fact()


@pytest.mark.skipif(not HAVE_TRITON, reason="needs the triton package (make setup EXTRAS=triton)")
def test_configs_tune_on_a_gpu_and_fix_one_on_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    tuned = triton_track.configs({"BLOCK": 64}, BLOCK=[1024, 4096], num_warps=[4, 8])
    assert sorted((c.kwargs["BLOCK"], c.num_warps) for c in tuned) == [(1024, 4), (1024, 8), (4096, 4), (4096, 8)]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    (one,) = triton_track.configs({"BLOCK": 64, "num_warps": 2}, BLOCK=[1024, 4096], num_warps=[4, 8])
    assert (one.kwargs, one.num_warps) == ({"BLOCK": 64}, 2)
    with pytest.raises(ValueError, match="at least one tuned name"):
        triton_track.configs({"BLOCK": 64})
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setenv(triton_track.ONE_CONFIG_ENV, "1")  # a grading task process on a GPU: the first kept config
    (first,) = triton_track.configs({"BLOCK": 64}, BLOCK=[1024, 4096], num_warps=[4, 8],
                                    keep=lambda c: c["BLOCK"] > 1024)
    assert (first.kwargs, first.num_warps) == ({"BLOCK": 4096}, 4)


def test_only_a_grading_process_keeps_one_config(tmp_path: Path) -> None:
    """The plugin sets the one-config switch in a grading task process (``--cc-report``) and nowhere else, so
    ``make check`` and the course's own tests still autotune."""
    env = {k: v for k, v in os.environ.items() if k != triton_track.ONE_CONFIG_ENV}
    for extra, want in (([f"--cc-report={tmp_path / 'r.jsonl'}"], "1"), ([], None)):
        test = tmp_path / "test_env.py"
        test.write_text(f"import os\ndef test_env():\n    assert os.environ.get({triton_track.ONE_CONFIG_ENV!r}) == "
                        f"{want!r}\n")
        args = ["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "cudacourse.pytest_plugin", *extra, str(test)]
        r = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, (extra, r.stdout[-2000:] + r.stderr[-2000:])


def test_size_class_groups_sizes_into_few_tunings() -> None:
    """The autotuners' key: one class below the floor, then the power of two at or above the size, so the ragged
    sizes of a graded test share a few tunings while the bench's large sizes keep classes of their own."""
    sc = triton_track.size_class
    assert {sc(n) for n in (0, 1, 31, 33, 1000, 3 * 1024 + 5, 2**14 + 3, 2**20)} == {2**20}
    assert (sc(2**20 + 1), sc(2**21), sc(2**24 + 1), sc(2**28)) == (2**21, 2**21, 2**25, 2**28)
    assert (sc(1, 1024), sc(1000, 1024), sc(1025, 1024), sc(4099, 1024), sc(4096, 1024)) == (1024, 1024, 2048, 8192,
                                                                                              4096)
    # the twin tests' sizes on a GPU: few classes, so few tunings (each times every config once)
    relu_sizes = [1, 31, 32, 33, 1000, 3 * 1024 + 5, 2**14 + 3, 2**20 + 3, 2**24 + 1]
    assert len({sc(n) for n in relu_sizes}) == 3
    with pytest.raises(ValueError, match="floor must be a power of two"):
        sc(5, 1000)
    with pytest.raises(ValueError, match="must be >= 0"):
        sc(-1)


def test_check_tensors_names_the_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x, y = torch.zeros(8), torch.zeros(8)
    triton_track.check_tensors("f", x=x, y=y, ids=(torch.zeros(3, dtype=torch.int32), torch.int32))
    with pytest.raises(TypeError, match=r"f: parameter 'y' expects a float32 tensor, got float64"):
        triton_track.check_tensors("f", x=x, y=y.double())
    with pytest.raises(ValueError, match=r"parameter 'x' expects a contiguous tensor"):
        triton_track.check_tensors("f", x=torch.zeros(4, 4).t(), y=y)
    with pytest.raises(ValueError, match=r"parameter 'x' expects a tensor on cpu, got one on meta"):
        triton_track.check_tensors("f", x=torch.zeros(8, device="meta"), y=y)
    with pytest.raises(TypeError, match=r"parameter 'n' expects a tensor, got int"):
        triton_track.check_tensors("f", x=x, n=3)


def test_a_machine_without_triton_reports_the_triton_tasks_not_graded(tmp_path: Path) -> None:
    """Without the package the Triton tasks are skipped with a "not graded" reason naming the install command,
    never failed and never passed; the CUDA tasks of the same file are unaffected."""
    report = tmp_path / "report.jsonl"
    code = ("import sys; sys.modules['triton'] = None; import pytest; "
            f"sys.exit(pytest.main(['tests/test_01_relu.py', '-q', '-p', 'no:cacheprovider', '-p', 'no:xdist', "
            f"'--impl=solution', '--cc-report={report}', '-k', 'triton_relu or relu_scalar_rejects']))")
    env = {**os.environ, "CUDA_COURSE_IMPL": "solution"}
    env.pop("TRITON_INTERPRET", None)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    results = [rec for rec in map(json.loads, report.read_text().splitlines()) if rec.get("event") == "result"]
    triton = [rec for rec in results if rec["task"] == "1.T1"]
    cuda = [rec for rec in results if rec["task"] == "1.1"]
    assert triton and cuda
    assert all(rec["outcome"] == "not-graded" for rec in triton), [rec["outcome"] for rec in triton]
    assert all(triton_track.INSTALL in rec["message"] for rec in triton), triton[0]["message"]
    assert all(rec["outcome"] == "passed" for rec in cuda)
    assert "1.T1" in r.stdout and "not graded" in r.stdout  # the points table says so


@pytest.mark.skipif(not HAVE_TRITON, reason="needs the triton package (make setup EXTRAS=triton)")
def test_the_interpreter_works_after_triton_was_imported_for_a_gpu() -> None:
    """torch.compile imports triton.language without TRITON_INTERPRET (also on a CPU), which leaves tl.sum a
    compiled-mode function the interpreter cannot call; load() imports triton's Python modules afresh. The row
    loop also checks the numpy >= 2.4 fix of the interpreter's int conversion (triton-lang/triton#9171)."""
    code = """
import sys, torch, triton.language
assert type(triton.language.sum).__name__ == "JITFunction"
from cudacourse import triton_track
t = triton_track.load(sys.argv[1], backend="sim")
x = torch.randn(5, 3000); out = torch.full((5,), float("nan"))
t.row_sum(x, out, 5, 3000)
err = (out.double() - x.double().sum(-1)).abs().max().item()
assert err < 1e-3, err
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code, str(ROOT / "solutions" / "02_reduce" / "reduce_triton.py")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout[-2000:] + r.stderr[-3000:]


BENCH_ROWS = """
import sys, torch
from cudacourse import bench, triton_track
torch.cuda.synchronize = lambda *a, **k: None  # the interpreter stands in for the GPU here
t = triton_track.load(sys.argv[1], backend="sim")
n = 5000
x, y = torch.randn(n), torch.full((n,), float("nan"))
case = triton_track.bench_case((t, ""), "relu", "relu (Triton twin, 1.T1)", lambda tw: tw.relu(x, y, n),
                               ["relu_kernel"], bytes=8 * n)
assert torch.equal(y, torch.relu(x)), "the priming call did not run the kernel"
assert case.extra["autotune_s"] >= 0, case.extra
assert case.extra["config"] == "relu_kernel: BLOCK=1024, num_warps=4, num_stages=3", case.extra
assert case.note.startswith("first call (compile + autotune) ") and case.bytes == 8 * n, case.note
row = bench.Row("01_relu", case.group, case.name, 0.5, 0.01, 80.0, None, 4.0, 1.0, False, None, "reference",
                note=case.note, extra=case.extra)
info = {"gpu": "g", "compute_capability": "9.0", "sms": "1", "driver": "d", "torch": "t", "cuda": "c"}
assert case.note in bench.markdown(info, 2000.0, 50.0, [row], {})
gone = triton_track.bench_case((None, "no triton here"), "relu", "relu (Triton twin)", lambda tw: None, ["k"])
try:
    gone.fn()
    raise SystemExit("a missing twin's row did not raise")
except RuntimeError as e:
    assert "no triton here" in str(e)
print("ok")
"""


@pytest.mark.skipif(not HAVE_TRITON, reason="needs the triton package (make setup EXTRAS=triton)")
def test_bench_rows_time_the_first_call_apart() -> None:
    """bench_case primes a twin (the first call compiles and autotunes), records that time and the kept config in
    the row's note and extra, and a missing twin's row says why. In a process of its own: the interpreter, once
    on, stays on in a process (a GPU machine's test worker must keep compiling)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", BENCH_ROWS, str(ROOT / "solutions" / "01_relu" / "relu_triton.py")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]


@pytest.mark.skipif(not HAVE_TRITON, reason="needs the triton package (make setup EXTRAS=triton)")
@pytest.mark.parametrize("impl", ["solution", "student"])
def test_every_twin_compiles_for_an_h100(impl: str) -> None:
    """Every twin's kernels, solutions and untouched stubs alike, compile for sm_90 without a GPU (Triton's bundled
    ptxas), and the solutions still compile to what benchmarks/triton_codegen.txt records, which the explainers
    cite (16-byte accesses only with alignment known; tl.sum's shuffles, barriers and shared memory)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "benchmarks/triton_codegen.py", "--impl", impl], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    if impl == "student":
        return
    out = r.stdout
    relu = [line for line in out.splitlines() if line.strip().startswith("relu_kernel")]
    assert "loads 16 B, stores 16 B" in relu[0] and "loads 4 B, stores 4 B" in relu[1], relu
    assert re.search(r"row_sum_kernel .*aligned.*shfl\.sync 8, bar\.sync 2, shared memory 32 B", out)
    assert re.search(r"softmax_kernel .*shfl\.sync 32, bar\.sync 10", out)
    committed = (ROOT / "benchmarks" / "triton_codegen.txt").read_text()
    if committed.splitlines()[0] == out.splitlines()[0]:  # the same triton: the same code
        assert out == committed, "benchmarks/triton_codegen.txt is stale: regenerate it (see its script's header)"


HOSTED = """
import os, sys, torch
from cudacourse import settings, triton_track
settings.configure(confine="best-effort")  # as the grader sets it: the twin is imported in the torch worker
good, cheat = sys.argv[1], sys.argv[2]
t = triton_track.load(good, backend="sim")
assert type(t).__name__ == "RemoteModule", type(t)
n = 3000
x, y = torch.randn(n), torch.full((n,), float("nan"))
t.relu(x, y, n)  # runs in the worker, on the interpreter (TRITON_INTERPRET reached it); y is copied back
assert torch.equal(y, torch.relu(x)), "the hosted twin's output did not come back"
try:
    triton_track.load(cheat, backend="sim").relu(x, y, n)
    raise SystemExit("a twin computing with torch was not refused")
except RuntimeError as e:
    assert "calls torch's relu()" in str(e), e
print("ok")
"""


@pytest.mark.skipif(not HAVE_TRITON, reason="needs the triton package (make setup EXTRAS=triton)")
def test_while_grading_a_twin_runs_in_the_torch_worker_under_the_torch_guard(tmp_path: Path) -> None:
    """While grading on the CPU a learner's twin is imported in the confined torch worker (never in the checking
    process), runs there on the interpreter, and a wrapper that computes the answer with torch is refused."""
    sol = ROOT / "solutions" / "01_relu" / "relu_triton.py"
    cheat = tmp_path / "cheat" / "relu_triton.py"
    cheat.parent.mkdir()
    old = 'relu_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, size_class(n))'
    assert sol.read_text().count(old) == 1
    cheat.write_text(sol.read_text().replace(old, "y.copy_(torch.relu(x))"))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", HOSTED, str(sol), str(cheat)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]


@pytest.mark.skipif(not HAVE_TRITON, reason="needs the triton package (make setup EXTRAS=triton)")
def test_doctor_says_how_the_track_runs_here() -> None:
    from cudacourse.doctor import diagnose
    from cudacourse.loader import backend_name

    fact = dict(diagnose().facts)["Triton track"]
    want = "can run: " if backend_name() == "cuda" else "can run, on the CPU: "
    assert fact.startswith(want) and "triton " in fact, fact


# ----------------------------------------------------------------------------------------------------
# The grader's screen of submitted twins (friendly early errors; confinement is the guarantee)
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["lessons", "solutions"])
def test_the_triton_screen_passes_every_stub_and_solution(impl: str) -> None:
    from cudacourse.grading.screens import screen_triton_file

    twins = sorted((ROOT / impl).glob("*/*_triton.py"))
    assert len(twins) >= 6, twins
    for p in twins:
        assert screen_triton_file(p.name, p.read_text()) == [], p


SCREEN_CHEATS = {
    "import os": ("import torch\n", "import os\nimport torch\n", "import os is not allowed"),
    "torch.softmax": ('softmax_kernel[(rows,)](x, y, cols, size_class(cols, 1024))',
                      "y.copy_(torch.softmax(x.view(rows, cols), dim=1).view(-1))", "'torch.softmax' is not allowed"),
    "a computing method": ('softmax_kernel[(rows,)](x, y, cols, size_class(cols, 1024))',
                           "y.copy_(x.view(rows, cols).softmax(1).view(-1))", "'.softmax(...)' computes with torch"),
    "torch.nn.functional": ("import torch\n", "import torch\nimport torch.nn.functional as F\n",
                            "import torch.nn.functional is not allowed"),
    "open()": ("    check_tensors(\"softmax\", x=x, y=y)\n",
               "    check_tensors(\"softmax\", x=x, y=y)\n    open('/tmp/x')\n", "'open' is not allowed"),
    "triton internals": ("import triton\n", "import triton\nX = triton.runtime\n", "'triton.runtime' is not allowed"),
}


@pytest.mark.parametrize("cheat", list(SCREEN_CHEATS))
def test_the_triton_screen_refuses_what_is_no_twin(cheat: str) -> None:
    """What screen_python_file refuses (other modules, files), and torch answers, with a message naming the line."""
    from cudacourse.grading.screens import Rejection, screen_triton_file

    old, new, why = SCREEN_CHEATS[cheat]
    text = (ROOT / "solutions" / "04_transformer" / "norms_triton.py").read_text()
    assert text.count(old) >= 1, f"the cheat {cheat!r} no longer applies: update SCREEN_CHEATS"
    reasons = screen_triton_file("norms_triton.py", text.replace(old, new, 1))
    assert any(why in r and r.startswith("norms_triton.py:") for r in reasons), reasons
    msg = Rejection("04_transformer", "norms_triton.py", reasons).text()
    assert "Triton twin holds @triton.jit kernels" in msg and "plain CUDA" not in msg, msg


def test_staging_screens_a_submitted_twin_as_triton(tmp_path: Path) -> None:
    """stage_kernels sends *_triton.py through the Triton screen (not the C++ one): an untouched solution is staged
    as it is; a twin importing os is replaced by a stub that fails on import, saying why."""
    import shutil

    from cudacourse.grading.staging import Submission, stage_kernels

    c = course(ROOT)
    learner = tmp_path / "learner" / "lessons" / "04_transformer"
    shutil.copytree(c.kernel_dir("04_transformer", "solution"), learner)
    dst = tmp_path / "staged"
    sub = Submission("learner", tmp_path / "learner", "submission")
    stage_kernels(sub, dst, ["04_transformer"], c)
    assert sub.rejections == [], [r.text() for r in sub.rejections]
    assert (dst / "lessons/04_transformer/norms_triton.py").read_text() == (learner / "norms_triton.py").read_text()
    (learner / "attention_triton.py").write_text("import os\n" + (learner / "attention_triton.py").read_text())
    sub = Submission("learner", tmp_path / "learner", "submission")
    stage_kernels(sub, dst, ["04_transformer"], c)
    assert [r.file for r in sub.rejections] == ["attention_triton.py"], [r.text() for r in sub.rejections]
    staged = (dst / "lessons/04_transformer/attention_triton.py").read_text()
    assert staged.startswith("raise ImportError(") and "import os is not allowed" in staged, staged


def test_the_torch_guard_names_the_file_that_called_torch(tmp_path: Path) -> None:
    """The run-time guard's refusal names the learner's file and line, and what that file must compute with."""
    from cudacourse.grading.screens import torch_answer_guard

    twin = tmp_path / "my_triton.py"
    twin.write_text("import torch\n\ndef f(x):\n    return torch.softmax(x, 0)\n")
    from cudacourse.loader import import_file

    mod = import_file(twin, "cc_guard_wording_test")
    with pytest.raises(RuntimeError) as e, torch_answer_guard([str(twin)]):
        mod.f(torch.ones(3))
    msg = str(e.value)
    assert msg.startswith("my_triton.py:4: calls torch's softmax()") and "my_triton.py must compute it with its " \
        "@triton.jit kernels" in msg and "decoder" not in msg, msg
