"""What a fork server would save each task process: a pytest run in a fresh process against one forked from a
process that has already imported torch, pytest and the course's plugin.

    .venv/bin/python benchmarks/fork_start.py [REPORT]

REPORT defaults to ``$OUT/fork_start.txt`` when ``$OUT`` is set, else only prints. The pytest run is the same in
both: ``pytest -q`` over a one-test file that imports torch (a task process's shape, less the course's tests).

- ``fresh``: ``python -m pytest`` in a new process (what a grade's task process pays today, less the sandbox's
  launcher), timed by its CPU seconds;
- ``forked``: this process imports ``torch, pytest, cudacourse.pytest_plugin`` once, then for each run forks a
  child that enters new user, PID, network and mount namespaces (``sandbox.launcher._unshare_namespaces``, as the
  launcher does), forks the namespace's first process, and that one calls ``pytest.main``.

Also printed: the number of threads after the imports. ``unshare(CLONE_NEWUSER)`` refuses a process with more than
one thread, so a server that has imported torch can only unshare in a forked child (which has one thread).
No Landlock, rlimits or capability dropping here: the figures are the start-up cost, not a sandbox.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 3
TEST = "import torch\n\n\ndef test_a():\n    assert torch.ones(3).sum() == 3\n"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def fresh(folder: Path) -> tuple[float, float]:
    """(wall, CPU seconds) of ``python -m pytest`` over the test file in a new process."""
    t0, c0 = time.monotonic(), _children_cpu()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "cudacourse.pytest_plugin",
                    "test_x.py"], cwd=folder, check=True, capture_output=True)
    return time.monotonic() - t0, _children_cpu() - c0


def forked(folder: Path) -> tuple[float, float]:
    """(wall, CPU seconds) of the same run in a child of this process, in new namespaces."""
    import pytest

    from cudacourse.sandbox import launcher

    t0, c0 = time.monotonic(), _children_cpu()
    pid = os.fork()
    if pid == 0:  # the server's child: the launcher's part, then the namespace's first process runs pytest
        try:
            launcher._unshare_namespaces()
            inner = os.fork()
            if inner == 0:
                os.chdir(folder)
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os._exit(int(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "cudacourse.pytest_plugin",
                                          "test_x.py"])))
            os._exit(os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1]))
        except BaseException as e:  # noqa: BLE001 - any failure is this child's exit status
            print(f"forked child: {e!r}", file=sys.stderr)
            os._exit(99)
    rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if rc != 0:
        raise SystemExit(f"the forked pytest run failed (exit {rc})")
    return time.monotonic() - t0, _children_cpu() - c0


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else (Path(os.environ["OUT"]) / "fork_start.txt"
                                                          if os.environ.get("OUT") else None)
    with tempfile.TemporaryDirectory(prefix="fork-start-") as t:
        folder = Path(t)
        (folder / "test_x.py").write_text(TEST)
        lines = [f"# benchmarks/fork_start.py: {os.cpu_count()} cores, python {sys.version.split()[0]}, "
                 f"load average {os.getloadavg()[0]:.2f}", ""]
        rows = [("fresh", *fresh(folder)) for _ in range(RUNS)]
        t0 = time.process_time()
        import pytest  # noqa: F401
        import torch  # noqa: F401 - the server's imports

        import cudacourse.pytest_plugin  # noqa: F401
        lines.append(f"server's imports: {time.process_time() - t0:.2f} CPU-s; threads after them: "
                     f"{len(os.listdir('/proc/self/task'))}")
        rows += [("forked", *forked(folder)) for _ in range(RUNS)]
    lines += ["", "| run | wall s | CPU s |", "|---|---:|---:|"]
    lines += [f"| {name} | {wall:.2f} | {cpu:.2f} |" for name, wall, cpu in rows]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out is not None:
        out.write_text(text)


if __name__ == "__main__":
    main()
