"""Shared pytest setup of the course's tests: the grading plugin (options, markers, points table)."""

import json
import os
import resource
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

pytest_plugins = ["cudacourse.pytest_plugin"]

ROOT = Path(__file__).resolve().parent.parent


# The longest units of work, longest first (seconds on the 2-core machine, 2026-11-28, busy: the attack batch 309,
# the grader corpus 299, the stubs of lesson 01 147 and of the others 24-67 each, the timing exploits 153, the
# torch-route group 187, the build-once batch 140). `make test` runs xdist with --no-loadscope-reorder, so this
# order is the order work is handed out: the long units start at once, one per worker, and the many short tests
# fill the gaps, instead of a long group starting last (xdist's default order is by test count) and running alone.
LONGEST_FIRST = ("tests/test_grader_attacks.py", "tests/test_grader.py::test_corpus",
                 "tests/test_stubs_fail_cleanly.py",
                 "tests/sim/test_torch_route", "tests/test_torch_worker.py", "tests/test_speed_exploits.py",
                 "tests/test_grader_bad_input.py")


def _rank(item: pytest.Item) -> tuple[int, int]:
    nodeid = item.nodeid if item.nodeid.startswith("tests/") else f"tests/{item.nodeid}"
    for i, prefix in enumerate(LONGEST_FIRST):
        if nodeid.startswith(prefix):
            return (0, i)
    return (1 if item.get_closest_marker("slow") is not None else 2, 0)


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    """Start the longest units first, then the other slow tests (stable order otherwise): under xdist they then
    run beside the many short tests instead of forming a serial tail at the end of the suite on a 2-core machine."""
    items.sort(key=_rank)


# ----------------------------------------------------------------------------------------------------
# --cpu-durations=N: the tests that used the most CPU time, with what their child processes used
# ----------------------------------------------------------------------------------------------------
# On the 2-core machine the suite is CPU-bound (3 workers share 2 cores), so --durations' wall seconds mostly say
# who ran beside whom; CPU seconds say what a test costs. Child processes count once reaped (getrusage's
# RUSAGE_CHILDREN): compilers, a grade's task processes and workers, which their parents wait for. Not counted: a
# process reaped outside the test's process tree (what a sandboxed process leaves running when it ends is killed
# with its PID namespace, and then probably reaped by the system's init), and a process a session fixture keeps alive
# until after the test. So these are lower bounds.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=int, default=0, metavar="N",
                     help="print the N tests that used the most CPU seconds (their own and their child processes')")
    parser.addoption("--cpu-report", default=None, metavar="PATH",
                     help="write every test's CPU seconds to PATH as JSON (benchmarks/suite_by_check.py groups them)")


def _cpu_now() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


_CPU_START = pytest.StashKey[tuple[float, float]]()
_cpu_rows: list[tuple[float, float, str]] = []  # (own, children's CPU-s, nodeid) of each test, in the controller


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    item.stash[_CPU_START] = _cpu_now()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash:  # (user_properties travel to xdist's controller)
        (own0, kids0), (own1, kids1) = item.stash[_CPU_START], _cpu_now()
        outcome.get_result().user_properties.append(("cpu_s", (own1 - own0, kids1 - kids0)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """(In the controller, under xdist) keep each test's CPU seconds, sent with its teardown report."""
    for name, value in report.user_properties:
        if name == "cpu_s" and report.when == "teardown":
            _cpu_rows.append((*value, report.nodeid))


def _cpu_report(config: pytest.Config) -> Path | None:
    """The ``--cpu-report`` file, in the controller only (None in an xdist worker or without the option)."""
    path = config.getoption("--cpu-report")
    return Path(path) if path and not os.environ.get("PYTEST_XDIST_WORKER") else None


def pytest_sessionstart(session: pytest.Session) -> None:
    """Remove an earlier run's ``--cpu-report``: a run that dies before its end must not leave that table looking
    like its own."""
    if (path := _cpu_report(session.config)) is not None:
        path.unlink(missing_ok=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """(In the controller) write ``--cpu-report``: one row per test, as the summary counts them; nothing when no test
    ran. Rows are gathered from the teardown reports, so a pytest run that a test starts itself adds nothing here (it
    has its own controller), and its CPU counts once: in that test's child processes."""
    if (path := _cpu_report(session.config)) is not None and _cpu_rows:
        rows = [{"nodeid": nodeid, "own": round(own, 3), "children": round(kids, 3)} for own, kids, nodeid in _cpu_rows]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=0) + "\n")


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    n = config.getoption("--cpu-durations")
    if not n or not _cpu_rows:
        return
    total = sum(own + kids for own, kids, _ in _cpu_rows)
    shown = min(n, len(_cpu_rows))
    terminalreporter.write_sep("=", f"most CPU time: {shown} of {len(_cpu_rows)} tests ({total:.0f} CPU-s in all)")
    for own, kids, nodeid in sorted(_cpu_rows, key=lambda r: -(r[0] + r[1]))[:n]:
        terminalreporter.write_line(f"{own + kids:8.1f} CPU-s ({own:6.1f} own, {kids:7.1f} child processes)  {nodeid}")


def _shared_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary folder that every xdist worker of this run sees (the base of theirs)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link where the file system allows one (the precompiled torch header is 800 MB), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _seed(src: Path, dst: Path) -> None:
    """Copy the finished build folder ``src`` to ``dst`` (atomically: a copy, then a rename), unless there."""
    if dst.exists() or not (src / "DONE").exists():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f"{dst.name}.seed{os.getpid()}"
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("*.lock"), copy_function=_link_or_copy)
    tmp.rename(dst)


@pytest.fixture(scope="session")
def torch_pch() -> Path:
    """The precompiled ``<torch/extension.h>`` of the simulator's checked torch-route builds, in the checkout's
    cache (``sim.torch_route.prepare_torch_pch``: made once, under the cache's lock, ~45 CPU-s and 800 MB). Every
    later torch-route build of the run that finds it saves ~16 of its ~30 CPU-s: the suite makes about six (the
    solution's relu_torch.cu, the torch-route tests, the attack and corpus batches' own relu_torch.cu files)."""
    from cudacourse.sim.torch_route import prepare_torch_pch

    return prepare_torch_pch(checked=True)


@pytest.fixture(scope="session")
def grader_build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's build cache (``--build`` of the grader's own files: the simulator's runtime, a submission's
    files identical to the instructor's) for every grade of this test session, shared by the xdist workers.

    Each grade built the runtime (about 10 CPU-s) and the corpus and attack batches each built relu_torch.cu's
    torch extension (about 35 CPU-s) again in a fresh folder. Builds there are keyed by content and written
    under a file lock (``buildcache.cached``), only by the grader's confined "course's copy" workers and by
    this session's seeding (:func:`instructor_builds`: the checkout's own builds of the instructor's files);
    a submission's workers read it and write their own folder, as in any grade. It is not the checkout's cache
    itself: that one holds every lesson's solution sources (``ccsim-src/``), which no submission may read."""
    d = _shared_tmp(tmp_path_factory) / "cc-grader-build"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture(scope="session")
def grader_runtime(tmp_path_factory: pytest.TempPathFactory, grader_build_cache: Path) -> Path:
    """``grader_build_cache`` seeded with the checkout's build of the simulator's runtime (built there first if
    need be): all a batch of submissions that build only kernel files (no torch route) reads from it. The attack
    batch and the corpus start with such a batch, on two xdist workers at once: the one that waits for the other
    here waits for the runtime alone (about 10 CPU-s), not for the torch builds of :func:`instructor_builds`."""
    import filelock

    from cudacourse.buildcache import build_root
    from cudacourse.sim import runtime_object

    with filelock.FileLock(str(_shared_tmp(tmp_path_factory) / "cc-grader-build.seed.lock")):
        rt = runtime_object().parent
        _seed(rt, grader_build_cache / rt.relative_to(build_root()))
    return grader_build_cache


@pytest.fixture()
def seed_sim_runtime() -> Callable[[Path], None]:
    """``sim.seed_runtime``, once the checkout's runtime is built: it copies the simulator's compiled runtime into
    a build cache of the test's own (call it outside ``using(build_dir=...)``: it copies from the current build root).
    For tests whose own cache is there for other builds: each such cache built the runtime again, 13-18 CPU-s of the
    2-core machine, four times in a run of the suite (2026-11-30)."""
    from cudacourse.sim import runtime_object, seed_runtime

    runtime_object()  # (built under the cache's lock by the first test that needs it)
    return seed_runtime


@pytest.fixture(scope="session")
def instructor_builds(tmp_path_factory: pytest.TempPathFactory, grader_runtime: Path, torch_pch: Path) -> Path:
    """``grader_build_cache`` seeded (:func:`grader_runtime`) with the checkout's builds of the simulator's runtime,
    of the precompiled torch header (:func:`torch_pch`: a submission's relu_torch.cu builds with it in a confined
    worker, which reads this cache) and of lesson 01's solution relu_torch.cu (its torch extension), built there
    first if need be (file locks: once per run, whichever worker or test gets there first). The corpus, the attack
    batch and the bad-input grade grade lesson 01 on the simulator, and the suite's own tests (test_01_relu, the
    torch-route tests, the notebook) build the same in the checkout's cache: keyed by content, so one build serves
    both caches. Only the instructor's files."""
    import filelock

    from cudacourse.buildcache import build_root
    from cudacourse.loader import exposed_functions
    from cudacourse.sim import build_torch_extension

    root = build_root()  # the checkout's cache (or $CUDA_COURSE_BUILD)
    torch_file = ROOT / "solutions" / "01_relu" / "relu_torch.cu"
    text = torch_file.read_text()
    # what loader.Module builds for this file on the simulator (checked mode, the default: the same entry); the
    # build cache's own lock makes it once (the seeding lock is held only to copy, not for a build's 15 CPU-s)
    ext = Path(build_torch_extension(text, str(torch_file), exposed_functions(text), checked=True).__file__)
    with filelock.FileLock(str(_shared_tmp(tmp_path_factory) / "cc-grader-build.seed.lock")):
        _seed(torch_pch, grader_runtime / torch_pch.relative_to(root))
        _seed(ext.parent, grader_runtime / ext.parent.relative_to(root))
    return grader_runtime
