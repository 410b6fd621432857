"""``cudacourse check``: a task, a lesson, the lessons started, and a clear error for an unknown id."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudacourse import checkcmd, exercise_state, stubs
from cudacourse.course import CourseError, course


def test_resolve_task_and_lesson() -> None:
    c = course()
    lessons, tasks = checkcmd.resolve(c, "1.1")
    assert [les.id for les in lessons] == ["01_relu"] and tasks == ["1.1"]
    for name in ("02_reduce", "02", "2"):
        lessons, tasks = checkcmd.resolve(c, name)
        assert [les.id for les in lessons] == ["02_reduce"] and tasks == []
    args = checkcmd.pytest_args(c, *checkcmd.resolve(c, "3.2"), ["-x"])
    assert args[0].endswith("tests/test_03_gemm.py") and args[1:3] == ["--cc-task", "3.2"] and args[-1] == "-x"


def test_unknown_id_lists_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CourseError) as e:
        checkcmd.resolve(course(), "1.99")
    text = str(e.value)
    assert "'1.99'" in text and "1.1, 1.2" in text and "01_relu" in text
    assert checkcmd.main(["99.9"]) == 2  # (was 9.9, a task since lesson 09)
    assert "no task or lesson '99.9'" in capsys.readouterr().err


def test_started_means_differs_from_the_stub(tmp_path: Path) -> None:
    c = course()
    les = c.lesson("01_relu")
    for name in les.exercise_files:
        want = stubs.expected(c.kernel_dir(les.id, "solution") / name)
        (tmp_path / name).write_bytes(want.encode() if isinstance(want, str) else want)
    assert not exercise_state.lesson_started(c, les, tmp_path)
    first = tmp_path / les.exercise_files[0]
    first.write_text(first.read_text() + "\n// my work\n")
    assert exercise_state.lesson_started(c, les, tmp_path)
    first.unlink()
    assert exercise_state.lesson_started(c, les, tmp_path)


def test_check_runs_only_that_task() -> None:
    """The real command, as a learner types it, on the reference solutions (so it must pass)."""
    env = dict(os.environ, PYTHONPATH=str(course().root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "cudacourse", "check", "1.1", "--solution"], cwd=course().root,
                         env=env, capture_output=True, text=True)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "cudacourse check: task 1.1" in text
    # the file task 1.1 uses is built first, saying so (a first build is no silent wait); not relu_torch.cu
    assert "building 01_relu/relu.cu ... built in" in text and "relu_torch.cu" not in text
    # the points table holds task 1.1 only (rows start with the id; "built in 1.2 s" once matched a bare "1.2 ")
    assert re.search(r"(?m)^1\.1\s", text) and not re.search(r"(?m)^1\.2\s", text), text
    assert " passed" in text and " failed" not in text


def test_a_file_without_solution_markers_never_means_not_started(tmp_path: Path) -> None:
    """Where the stub equals the solution (no BEGIN SOLUTION block), an untouched copy is indistinguishable
    from finished work: the lesson counts as started and is graded."""
    from cudacourse.course import Course

    root = tmp_path / "course"
    for kind in ("lessons", "solutions"):
        (root / kind / "01_toy").mkdir(parents=True)
        (root / kind / "01_toy" / "toy.cu").write_text("// complete\n")
    (root / "lessons" / "01_toy" / "lesson.toml").write_text(
        '[lesson]\ntitle = "t"\nwrite = "w"\nlearn = "l"\nfiles = ["toy.cu"]\n')
    c = Course(root)
    assert exercise_state.lesson_started(c, c.lesson("01_toy"))


def test_a_compile_error_is_shown_once_per_process(tmp_path: Path) -> None:
    """Issue 15: under pytest a broken file's compiler output prints once; every other case it blocks says one
    line pointing at it (before: the same error once per case, hundreds of lines)."""
    c = course()
    sub = tmp_path / "sub" / "lessons" / "01_relu"
    sub.parent.mkdir(parents=True)
    import shutil

    shutil.copytree(c.kernel_dir("01_relu", "solution"), sub)
    text = (sub / "relu.cu").read_text()
    assert text.count("y[i] = fmaxf(x[i], 0.0f);") == 2
    (sub / "relu.cu").write_text(text.replace("y[i] = fmaxf(x[i], 0.0f);", "y[i] = fmaxf(x[i], 0.0f) CC_BROKEN", 1))
    broken_line = text[:text.index("y[i] = fmaxf(x[i], 0.0f);")].count("\n") + 1
    env = dict(os.environ, PYTHONPATH=str(c.root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    out = subprocess.run([sys.executable, "-m", "pytest", str(c.tests_dir / "test_01_relu.py"), "-q",
                          "--submission", str(sub.parent.parent), "--backend", "sim", "--cc-task", "1.1",
                          "-p", "no:cacheprovider", "-p", "no:xdist"],
                         cwd=c.root, env=env, capture_output=True, text=True)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    # The compiler quotes the broken source line in its output: that excerpt appears exactly once among the
    # failures. (Pytest's closing summary repeats each failure's message; under CI=1 it prints them untruncated,
    # so it is left out of the count.)
    failures = text.split("short test summary info")[0]
    excerpts = [ln for ln in failures.splitlines() if "CC_BROKEN" in ln and "|" in ln]
    assert len(excerpts) == 1, text[-4000:]
    assert "loader.py" not in failures, "a compile error's report is the compiler's output, not the harness's frames"
    short = ("does not compile (the compiler's first error only; its whole message is printed once, under another "
             "failing case of this file): "
             f"{sub / 'relu.cu'}:{broken_line}")
    assert text.count(short) >= 3, text[-4000:]  # task 1.1 has more than four cases
    assert text.count("CUDA_COURSE_SEED=") == 1, "the run's seed is printed once, not once per case"


def test_check_output_is_the_courses_messages_each_hint_once(tmp_path: Path) -> None:
    """A learner's report: `make check` printed a traceback into the test file and the same hint paragraph for
    every failing size, then a list of raw test ids. Now: the course's message, each hint once, no raw ids."""
    import shutil

    c = course()
    sub = tmp_path / "sub" / "lessons" / "01_relu"
    shutil.copytree(c.kernel_dir("01_relu", "solution"), sub)
    text = (sub / "relu.cu").read_text()
    (sub / "relu.cu").write_text(text.replace("y[i] = fmaxf(x[i], 0.0f);", ";", 1))  # task 1.1 writes nothing
    env = dict(os.environ, PYTHONPATH=str(c.root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    out = subprocess.run([sys.executable, "-m", "cudacourse", "check", "1.1", "--", "--submission",
                          str(sub.parent.parent), "--backend", "sim", "-p", "no:xdist"],
                         cwd=c.root, env=env, capture_output=True, text=True)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    hints = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("Hint:")]
    assert len(hints) >= 2 and len(set(hints)) == 2 and hints[1:] == ["Hint: the same as above."] * (len(hints) - 1)
    assert "test_01_relu.py:" not in text and "FAILED tests/" not in text  # no traceback, no raw test ids
    assert "never written" in text and "1.1 " in text and text.count("ARGS=--seed=") == 1
    seed = re.search(r"ARGS=--seed=(\d+)", text).group(1)  # type: ignore[union-attr]
    # Issue 15 (second walkthrough): each failure headed by its task's title and the case in words, not
    # "test_relu_scalar[31]"; the same diagnosis at another size printed once, then "the same as for n=..."; no
    # "N deselected" (the other tasks' tests)
    assert "test_relu_scalar" not in text and "deselected" not in text
    assert "task 1.1 (relu_v1_scalar: one thread per element, with a bounds check): relu scalar, n=1000" in text
    assert text.count("elements were never written (still poison)") < 5
    assert "The rest: the same as for n=" in text

    # --verbose: the raw test ids and every message whole; --seed (as `make check ARGS=--seed=N`): the same inputs
    out = subprocess.run([sys.executable, "-m", "cudacourse", "check", "1.1", "--verbose", f"--seed={seed}", "--",
                          "--submission",
                          str(sub.parent.parent), "--backend", "sim", "-p", "no:xdist"],
                         cwd=c.root, env=env, capture_output=True, text=True)
    verbose = out.stdout + out.stderr
    assert out.returncode == 1 and "test_relu_scalar[31]" in verbose and "The rest: the same" not in verbose
    assert f"ARGS=--seed={seed} " in verbose


def test_the_simulator_runtime_build_is_announced_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A learner's first check said "building 01_relu/relu.cu ... built in 18.2 s", most of it the simulator's runtime
    (built once); later builds took 2 s. The runtime's build now has its own line, printed only when it is built."""
    import cudacourse.sim.build as sim  # where runtime_object looks up cached
    from cudacourse import settings

    built = []
    with settings.using(build_dir=tmp_path), checkcmd._saying_runtime_builds():
        sim.cached("sim-rt", "k1", lambda d: built.append(d))
        first = capsys.readouterr().out
        sim.cached("sim-rt", "k1", lambda d: built.append(d))  # cached now: nothing built, nothing said
        again = capsys.readouterr().out
        sim.cached("other", "k2", lambda d: built.append(d))
        other = capsys.readouterr().out
        sim.cached("sim-pch", "k3", lambda d: built.append(d), relocatable=False)  # the precompiled headers, too
        headers = capsys.readouterr().out
    assert len(built) == 3
    assert first.startswith("cudacourse check: building the simulator's runtime (once: later checks reuse it) ...")
    assert "built in" in first and again == "" and other == ""
    assert headers.startswith("cudacourse check: precompiling the simulator's headers (once") and "built in" in headers
    assert sim.cached is not None and sim.cached.__name__ == "cached"  # put back


def test_doctor_puts_the_confinement_under_for_instructors() -> None:
    """'grading confinement  landlock ABI 7 + user/pid/net/mount namespaces ...' among a learner's facts read as
    a problem; it is kept, after the learner's verdict, under a heading for instructors."""
    env = dict(os.environ, PYTHONPATH=str(course().root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "cudacourse", "doctor"], capture_output=True, text=True, env=env,
                       cwd=course().root)
    out = r.stdout
    assert "grading confinement" in out and "for instructors" in out
    assert out.index("the course can run here") < out.index("for instructors") < out.index("grading confinement")


def test_setup_shows_a_large_download_with_its_size() -> None:
    """Setup's 73 s torch download showed one line and nothing else: pip's own line with the size now passes
    through, and a download of 100 MB or more says pip stays quiet until it is done."""
    pip_out = ("Collecting torch==2.13.0\n"
               "  Downloading https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64"
               ".whl.metadata (29 kB)\n"
               "  Downloading https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64"
               ".whl (191.8 MB)\n"
               "  Downloading pillow-13.0.0-cp311-cp311-manylinux_2_28_x86_64.whl (7.1 MB)\n"
               "  Downloading iniconfig-2.3.1-py3-none-any.whl (7.6 kB)\n"
               "Installing collected packages: torch\nSuccessfully installed torch-2.13.0+cpu\n")
    r = subprocess.run(["bash", str(course().root / "setup.sh"), "--pip-lines"], input=pip_out, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "setup:   Collecting torch==2.13.0",
        "setup:     Downloading torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl (191.8 MB): a large download; "
        "pip prints nothing more until it is done",
        "setup:     Downloading pillow-13.0.0-cp311-cp311-manylinux_2_28_x86_64.whl (7.1 MB)",
        "setup:   Installing collected packages: torch",
        "setup:   Successfully installed torch-2.13.0+cpu",
    ]
    # a wheel from a local folder: pip's "Processing" line names it (35 s of nothing before, issue 34)
    r = subprocess.run(["bash", str(course().root / "setup.sh"), "--pip-lines"], capture_output=True, text=True,
                       input="Processing /opt/wheels/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl\n")
    assert r.stdout.splitlines() == ["setup:   Processing torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"]


def test_setup_says_a_long_step_is_still_going() -> None:
    """No silent wait over 10 s in setup (issue 34): a step prints a heartbeat line while its command runs (here
    every second, for a command of five), and its closing line."""
    env = {**os.environ, "HEARTBEAT_S": "1"}
    r = subprocess.run(["bash", str(course().root / "setup.sh"), "--step", "installing things (a test)", "sleep", "5"],
                       capture_output=True, text=True, env=env)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == "setup: installing things (a test) ...", r.stdout + r.stderr
    assert any(ln.startswith("setup:   ... still installing things (") for ln in lines[1:-1]), r.stdout
    assert lines[-1].startswith("setup: installing things (a test): done in "), r.stdout


def test_setup_names_an_index_it_cannot_reach(tmp_path: Path) -> None:
    """A learner without network access got only pip's "ResolutionImpossible" from setup (torch was in a local
    wheel folder, its dependencies nowhere): setup now asks whether the index answers, and says so."""
    setup = str(course().root / "setup.sh")
    refused = subprocess.run(["bash", setup, "--reach", "http://127.0.0.1:9/simple"], capture_output=True, text=True)
    assert refused.returncode == 1 and "refused" in refused.stdout.lower(), refused.stdout + refused.stderr
    missing = subprocess.run(["bash", setup, "--reach", f"file://{tmp_path}/none"], capture_output=True, text=True)
    assert missing.returncode == 1 and "does not exist" in missing.stdout
    assert subprocess.run(["bash", setup, "--reach", f"file://{tmp_path}"]).returncode == 0


def test_setup_passes_each_pip_line_on_as_it_comes() -> None:
    """A learner watched setup through a pipe: 47 s of nothing, then every "Collecting" line at once (sed
    buffered its output). The filter now passes a line on before its input ends."""
    import threading

    proc = subprocess.Popen(["bash", str(course().root / "setup.sh"), "--pip-lines"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("Collecting first\n")
    proc.stdin.flush()
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout=60)  # (a deadlock guard: the line comes at once, or only when stdin closes)
    passed_on = list(got)
    proc.stdin.close()
    proc.wait()
    assert passed_on == ["setup:   Collecting first\n"], "the line came only once pip's output had ended"


def test_a_task_whose_todo_is_still_the_stub_is_not_started(tmp_path: Path) -> None:
    """A learner who had done 1.1-1.3 in relu.cu read 12 lines of failure for 1.4, whose TODO in the same file they
    had not begun: the grader now leaves such a task out, as it does a task whose whole file is the stub. A
    comment does not start a task; code in its block does."""
    import shutil

    from cudacourse.exercise_state import untouched_todos
    from cudacourse.grading import plan
    from cudacourse.grading.staging import Submission

    c = course()
    les = c.lesson("01_relu")
    sub = tmp_path / "sub"
    folder = sub / "lessons" / "01_relu"
    shutil.copytree(c.kernel_dir("01_relu", "student"), folder)
    text = (folder / "relu.cu").read_text()
    todo_11 = next(ln for ln in text.splitlines() if "TODO(task 1.1)" in ln)
    text = text.replace(todo_11, todo_11 + "\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                  "    if (i < n) y[i] = fmaxf(x[i], 0.0f);", 1)
    todo_14 = next(ln for ln in text.splitlines() if "TODO(task 1.4)" in ln)
    (folder / "relu.cu").write_text(text.replace(todo_14, todo_14 + "\n    // (later)", 1))
    task = {t.id: t for t in les.tasks}
    assert untouched_todos(c, les, task["1.1"], folder) == []
    assert untouched_todos(c, les, task["1.4"], folder) == ["relu.cu"]
    declared = plan.declared_tasks(c, None)
    idle = plan.untouched_tasks(c, Submission("s", sub, "submission"), declared, ["01_relu"])
    assert idle[("01_relu", "1.4")] == "its TODO in relu.cu is still the stub"
    assert idle[("01_relu", "1.6")] == "relu_torch.cu is still the stub" and ("01_relu", "1.1") not in idle
    (folder / "relu.cu").write_text(text.replace(todo_14, todo_14 + "\n    int i = 0;", 1))
    assert untouched_todos(c, les, task["1.4"], folder) == []
    # A learner who wrote their own kernel outside the TODO block and launched it from the given launcher has
    # started, though the block is untouched.
    (folder / "relu.cu").write_text(text.replace(todo_14, todo_14 + "\n    // (later)", 1)
                                    + "\n__global__ void my_backward(float* p) { p[0] = 0.0f; }\n")
    assert untouched_todos(c, les, task["1.4"], folder) == []


def test_a_stub_or_assertion_failure_has_the_course_words_without_a_traceback() -> None:
    """Task 1.6's stub printed a raw pytest traceback through tests/test_01_relu.py (issue 34): a stub's own
    "TODO(task N.M) not implemented" error, of any type, and a test's assertion message are shown alone."""
    from cudacourse.failure_text import course_words

    with pytest.raises(RuntimeError) as stub:
        raise RuntimeError("TODO(task 1.6) not implemented: relu_forward in lessons/01_relu/relu_torch.cu must ...\n"
                           "Exception raised from relu_forward at /tmp/x.cpp:80 (most recent call first):")
    assert course_words(stub) == ("task 1.6 is not written yet (the stub says: TODO(task 1.6) not implemented: "
                                   "relu_forward in lessons/01_relu/relu_torch.cu must ...)")
    with pytest.raises(NotImplementedError) as py_stub:
        raise NotImplementedError("TODO(task 6.7): train_step in lessons/06_training/train.py")
    assert course_words(py_stub) == ("task 6.7 is not written yet (the stub says: TODO(task 6.7): train_step in "
                                      "lessons/06_training/train.py)")
    with pytest.raises(AssertionError) as told:
        raise AssertionError("relu_forward must return a new tensor (torch::empty_like), not x\nassert 1 != 1")
    assert course_words(told) == "relu_forward must return a new tensor (torch::empty_like), not x"
    with pytest.raises(AssertionError) as bare:
        raise AssertionError("assert 1 == 2")
    assert course_words(bare) == ""


def test_a_speed_task_on_the_simulator_shows_its_estimate_labelled_as_one() -> None:
    """Issue 39: on the simulator a speed task is not graded; `make check` says what the calibrated model estimates
    for it on an H100 and an H200, against the task's target, and that an estimate is not a grade."""
    c = course()
    env = dict(os.environ, PYTHONPATH=str(c.root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    out = subprocess.run([sys.executable, "-m", "cudacourse", "check", "1.7", "--solution", "--", "--backend", "sim",
                          "-p", "no:xdist"], cwd=c.root, env=env, capture_output=True, text=True)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert re.search(r"(?m)^1\.7 .*not-graded$", text), text  # still not graded: the estimate earns nothing
    assert "estimated GPU times of the speed tasks (not graded: estimates are not grades)" in text
    target = re.escape(f"{c.task('01_relu', '1.7').target:g}")  # lesson.toml's, whatever it is now
    for gpu in ("H100", "H200"):  # the solution moves 2 x 1 GiB at about the copy's speed
        assert re.search(rf"(?m)^  estimated on an {gpu}: 0\.\d+ ms = (0\.9\d|1\.0\d) of copy, target {target} "
                         r"\(not graded: estimates are not grades\)$", text), text
    assert text.index("points (impl=solution") < text.index("estimated on an H100")  # after the points table


class _Reporter:
    """The two methods of pytest's terminal reporter that LearnerOutput's summary uses."""

    def __init__(self) -> None:
        self.stats: dict = {}
        self.lines: list[str] = []

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(title)

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_no_estimate_asked_or_possible_prints_no_number() -> None:
    """`make check ARGS=--no-estimate` prints none; a task the model cannot estimate says why, with no number."""
    out = checkcmd.LearnerOutput({}, estimates=False)
    out.not_graded_gpu = ["1.7"]
    rep = _Reporter()
    out.pytest_terminal_summary(rep)
    assert rep.lines == []
    out = checkcmd.LearnerOutput({})
    out.not_graded_gpu = ["5.8", "7.6"]
    out.pytest_terminal_summary(rep)
    text = "\n".join(rep.lines)
    assert "task 5.8: no estimate: tensor-core kernels" in text and "task 7.6: no estimate: host work" in text
    assert " ms " not in text and text.count("not graded: estimates are not grades") == 3  # heading + 2 tasks
