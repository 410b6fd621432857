"""How the grader starts a process (a task process, the collection, a warm-up build): confined, with its limits,
its environment and its folders; and how it stops one with everything it started.

The one place in the grader that starts learner code (``sandbox.confined_popen``). The session
(:mod:`cudacourse.grading.session`) decides whether a process may still start and keeps the live ones.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudacourse.buildcache import build_root
from cudacourse.grading.plan import RunSettings
from cudacourse.grading.staging import Submission
from cudacourse.sandbox import (
    Confinement,
    Limits,
    available,
    confined_popen,
    has_gpu_devices,
    learner_memory,
    stop_group,
)
from cudacourse.settings import BUILD_ERRORS_ENV, ENV_PREFIX, UNBUILDABLE_ENV, Settings, to_env

GRADER_CPU_S = 3600  # CPU seconds one task process may use (its wall clock is the watchdog's: --timeout)


def confinement() -> Confinement:
    """What confinement the grader's workers get on this machine (probed once per process)."""
    return available()


def confine_mode() -> str:
    """``strict`` when every promise of the sandbox (``cudacourse/sandbox/``) holds here, else ``best-effort``
    (reports say "unconfined: <why>")."""
    return "strict" if confinement().confined else "best-effort"


def bytecode_cache() -> Path | None:
    """Where the grade's Python processes keep the bytecode of the installed packages, on a machine whose packages
    ship none; None where they do (Python's own ``__pycache__`` folders then serve).

    A Python process compiles every module it imports that has no bytecode. On the H200 machine (a virtual
    environment installed without bytecode, whose processes write none) that was about 820 modules and 2 of the
    6-7 CPU-s of collecting lessons 01-07's tests, in every task process and torch worker of a grade; with this
    folder a grade's task processes used 260-273 CPU-s instead of 331-351
    (results/nvidia-h200/grade_time_2026-11-29c/). There the collection, which runs only the instructor's code,
    writes the bytecode of what it imports into this folder (``PYTHONPYCACHEPREFIX``) and every later process of
    the grade reads it. No process that runs a submission's code may write here (the folder is outside every slot
    and build folder they may write, and they run with ``PYTHONDONTWRITEBYTECODE``): bytecode planted by learner
    code would run in every later grade."""
    if sys.pycache_prefix:  # the instructor's own choice (PYTHONPYCACHEPREFIX): kept
        return Path(sys.pycache_prefix)
    if _packages_have_bytecode():
        return None
    folder = build_root() / "pycache"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def bytecode_folder(env: dict[str, str]) -> list[Path]:
    """The grade's bytecode folder that ``env`` names (``PYTHONPYCACHEPREFIX``, :func:`bytecode_cache`), as a list
    of paths to add to a process's reads (every process) or writes (the collection alone); empty where none."""
    return [Path(env["PYTHONPYCACHEPREFIX"])] if env.get("PYTHONPYCACHEPREFIX") else []


def writing_bytecode(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process that writes the grade's bytecode (the collection, the warmers: the course's code only),
    without the ``PYTHONDONTWRITEBYTECODE`` every other process of the grade runs with (:func:`child_env`)."""
    return {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}


# Modules that the grade's tests reach only while they run, inside torch (the collection, which imports every test
# file, never does): sympy through torch's symbolic shapes (autograd, task 6.9's LayerNorm backward), FSDP through the
# fused AdamW (6.10), dynamo and inductor through torch.compile (7.3, 7.7). Without their bytecode every process that
# reached them compiled them from source: 1.2-1.8 of the 2.3 s each of tasks 6.9 and 6.10 spent importing in the
# H200 grade's timed turn (results/nvidia-h200/grade_time_2026-11-29e/). About 1,500 modules.
WARM_IMPORTS = ("torch.fx.experimental.symbolic_shapes", "torch.distributed.fsdp", "torch._dynamo",
                "torch._inductor.compile_fx")
_WARM = "import importlib, sys\ntry:\n    importlib.import_module(sys.argv[1])\nexcept Exception:\n    pass\n"


def bytecode_warmers(slot: Path, env: dict[str, str], scratch: Path) -> list[subprocess.Popen[Any]]:
    """Start the processes that write the bytecode of :data:`WARM_IMPORTS` into the grade's bytecode folder
    (``env``'s ``PYTHONPYCACHEPREFIX``, which they may write: like the collection they run only the course's own
    imports), beside the collection: one per module not there yet (an earlier grade's warmers may have written it),
    none where there is no such folder. One each, so that they are done within the collection's seconds (one
    process took 16 CPU-s, ending at about 20 s of the H200's grade), while the machine still has cores to spare;
    niced below the tasks. A grade that ends first stops them (Python writes each bytecode file whole, then renames
    it: none is left half-written)."""
    pyc = bytecode_folder(env)
    if not pyc:
        return []
    env = writing_bytecode(env)
    return [start_worker([python(), "-c", _WARM, name], cwd=slot, env=env, scratch=scratch, writable=pyc, nice=10,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name in WARM_IMPORTS if not _warmed(pyc[0], name)]


def _warmed(folder: Path, name: str) -> bool:
    """Whether ``folder`` (a ``PYTHONPYCACHEPREFIX``) holds the bytecode of module ``name`` (of a package)."""
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)  # (finds the package without importing it)
    if spec is None or not spec.submodule_search_locations:
        return True  # not installed: nothing to warm
    src = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    src = src / "__init__.py" if src.is_dir() else src.with_suffix(".py")
    return (folder / src.parent.relative_to(src.anchor) / f"{src.stem}.{sys.implementation.cache_tag}.pyc").exists()


def _packages_have_bytecode() -> bool:
    """Whether torch, the largest package a task process imports, was installed with its bytecode."""
    spec = importlib.util.find_spec("torch")
    return spec is None or spec.origin is None or Path(importlib.util.cache_from_source(spec.origin)).exists()


def start_worker(cmd: list[str], *, cwd: Path, env: dict[str, str], scratch: Path, writable: Sequence[Path] = (),
                 readable: Sequence[Path] = (), nice: int = 0, **popen: Any) -> subprocess.Popen[Any]:
    """Start one worker process (pytest over some tasks, a warm-up build), confined by the OS.

    It may write only ``cwd`` (its slot), ``scratch`` (its results file) and ``writable`` (the build
    cache); it reads the Python installation, the course package, the bytecode folder its ``env`` names
    (``PYTHONPYCACHEPREFIX``, :func:`bytecode_cache`) and ``readable``; no network, no signals to the grader, and
    :func:`kill_group` stops it with everything it started. Where the machine cannot keep every promise it runs
    with what works (``allow_unconfined``), and every report says so. ``nice``: added to its scheduling niceness
    (``Limits.nice``).
    """
    pyc = bytecode_folder(env)
    return confined_popen(cmd, scratch=scratch, cwd=str(cwd), env=env,
                          read_only=[cwd, *readable, *pyc], read_write=[cwd, *writable],
                          limits=task_limits(env, nice), gpu=has_gpu_devices(),
                          allow_unconfined=confine_mode() != "strict", stdin=subprocess.DEVNULL, **popen)


def task_limits(env: dict[str, str], nice: int = 0) -> Limits:
    """A task process's limits: CPU time, and an address-space limit where it has no CUDA context
    (``sandbox.learner_memory``)."""
    return Limits(memory=learner_memory(env, torch=True), cpu_s=GRADER_CPU_S, nice=nice)


def scratch_of(slot: Path) -> Path:
    """The folder beside ``slot`` where its worker writes results files (outside the staged tree)."""
    d = slot.parent / f"scratch-{slot.name}"
    d.mkdir(exist_ok=True)
    return d


def python() -> str:
    return sys.executable


def build_dir_of(sub: Submission, st: RunSettings) -> Path:
    """The build cache of ``sub``'s workers: its own folder for a submission (no other submission can see or
    plant a build there), the run's cache for this checkout's own kernels."""
    return sub.build_dir or st.build_dir


def child_env(slot: Path, seed: int, backend: str | None, build_dir: Path,
              unbuildable: dict[str, float] | None = None, threads: int | None = None,
              build_errors: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: the run's settings (``settings.to_env``), nothing inherited of ours.

    ``unbuildable`` ("lesson/file" -> seconds): files whose build the warm-up stopped; the loader fails
    them at once (``settings.UNBUILDABLE_ENV``) instead of building them again in every test process; likewise
    ``build_errors`` ("lesson/file" -> message): files whose warm-up build failed, with the compiler's message.
    ``threads``: the CPU threads each of torch's pools may use (unless the caller's environment sets them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith((ENV_PREFIX, "PYTEST_"))}
    if threads is not None:
        # One task process per core runs at once, and each computes float64 references on the CPU: with torch's
        # default (a thread per core in every process) 16 processes ran 16 threads each on an H100 machine's 16
        # cores, and spinning OpenMP threads burnt 1311 CPU-s of a 155 s grade
        # (results/nvidia-h100-80gb-hbm3/grade_profile/).
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, str(threads))
        # The simulator's workers too (a thread per core otherwise): a task process runs several (checked,
        # profiled...), and its process limit counts threads. On the H100 machine three workers of 17 threads beside
        # pytest's filled it, and one forked daemon more (the setsid attack) killed the next worker of its process.
        env.setdefault("CCSIM_WORKERS", str(max(2, threads)))
        # torch.compile in-process: a pool of compile workers costs more to start (and to stop) than the one small
        # graph a task compiles
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    run = Settings(root=slot, impl="student", backend=backend if backend in ("cuda", "sim") else "auto", seed=seed,
                   submission=slot, build_dir=build_dir, confine=confine_mode())
    env.update(to_env(run))
    env.update({"PYTHONPATH": str(slot), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
                # Only the plugins the command line names (the course's): none of the pytest plugins installed on
                # the machine, which the tests do not use and which could change how they run. On the H200 machine
                # (hypothesis, anyio, jaxtyping...) loading them, with pytest rewriting the asserts of their
                # modules, took seconds of the grade's collection and of every task process's start
                # (results/nvidia-h200/grade_time_2026-11-29c/3f7740d/collect/, benchmarks/collect_profile.sh)
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    if unbuildable:
        env[UNBUILDABLE_ENV] = ";".join(f"{k}={v:g}" for k, v in sorted(unbuildable.items()))
    if build_errors:
        env[BUILD_ERRORS_ENV] = json.dumps(build_errors)
    if (pyc := bytecode_cache()) is not None:
        env["PYTHONPYCACHEPREFIX"] = str(pyc)  # read only: PYTHONDONTWRITEBYTECODE (the collection writes it)
    return env


def signal_name(num: int) -> str:
    """``SIGSEGV`` for 11 (``signal N`` for a number Python does not name)."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Stop a worker and everything it started (``sandbox.stop_group``: its PID namespace, setsid or not)."""
    try:
        stop_group(proc, timeout=10.0)
    except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
        pass
