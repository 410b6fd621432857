"""``python -m cudacourse doctor``: what this machine has, which backend runs, and how to fix problems.

Every problem is printed with the command to type. Exit status 0 means the course can run here (the
CPU simulator counts); 1 means it cannot.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from cudacourse import buildcache
from cudacourse.loader import nvcc_path


@dataclass
class Report:
    """Facts found and problems with their fixes."""

    facts: list[tuple[str, str]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (what is wrong, what to type)
    fatal: bool = False
    # For instructors grading others' submissions only (how their code is isolated): printed under its own
    # heading, after the learner's facts, so a learner does not read sandbox details as a problem of theirs.
    instructors: list[tuple[str, str]] = field(default_factory=list)


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def nvcc_version(path: str | None) -> str | None:
    """'13.0' from ``nvcc --version``, or None."""
    if not path:
        return None
    m = re.search(r"release (\d+\.\d+)", _run([path, "--version"]))
    return m.group(1) if m else None


def check_arch_list(value: str) -> list[str]:
    """Problems with a ``TORCH_CUDA_ARCH_LIST`` value (it takes compute capabilities, e.g. ``9.0;8.6``).

    Compute capabilities are 3.x to 12.x with one digit after the point (plus an optional ``+PTX`` or
    an ``a``/``f`` suffix, as in ``9.0a``). A CUDA version such as ``12.4``, ``12.8`` or ``13.0`` is a
    common mistake: an RTX 5090 is compute capability 12.0 (sm_120), an H100 is 9.0 (sm_90).
    """
    problems = []
    for tok in re.split(r"[;\s,]+", value.strip()):
        if not tok:
            continue
        m = re.fullmatch(r"(\d+)\.(\d)([af]?)(\+PTX)?", tok)
        if not m:
            problems.append(f"'{tok}' is not a compute capability (expected forms like 8.6, 9.0, 9.0a, 12.0+PTX)")
            continue
        major, minor = int(m.group(1)), int(m.group(2))
        known = {(5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7),
                 (8, 9), (9, 0), (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1)}
        if (major, minor) not in known:
            hint = " — that looks like a CUDA toolkit version, not a compute capability" if major >= 10 else ""
            problems.append(f"'{tok}' is not a known compute capability{hint}")
    return problems


def triton_fact() -> str:
    """Whether the optional Triton track (the tasks N.T*, lessons/NN/*_triton.py) can run here, and how: compiled
    where the course's backend is the GPU, on Triton's CPU interpreter elsewhere."""
    from cudacourse import triton_track
    from cudacourse.loader import backend_name

    try:
        gpu = backend_name() == "cuda"
    except (RuntimeError, ValueError):  # a bad CUDA_COURSE_BACKEND: reported above
        gpu = False
    st = triton_track.status(gpu=gpu)
    if st.mode == "compiled":
        return f"can run: {st.detail}"
    if st.mode == "interpreter":
        return f"can run, on the CPU: {st.detail}"
    return f"cannot run (optional, tasks N.T*): {st.detail}"


def diagnose() -> Report:
    """Collect facts and problems."""
    r = Report()
    r.facts.append(("python", sys.version.split()[0] + f" ({sys.executable})"))
    try:
        import torch
    except ImportError:
        r.problems.append(("torch is not installed in this Python", "make setup   (or: ./setup.sh)"))
        r.fatal = True
        torch = None
    if torch is not None:
        r.facts.append(("torch", f"{torch.__version__} (built with CUDA {torch.version.cuda or 'none: CPU build'})"))
    nv = nvcc_path()
    nvv = nvcc_version(nv)
    r.facts.append(("nvcc", f"{nv} (CUDA {nvv})" if nv else "not found"))
    cxx = shutil.which("g++") or shutil.which("c++")
    r.facts.append(("g++", (_run([cxx, "--version"]).splitlines() or ["?"])[0] if cxx else "not found"))
    if not cxx:
        r.problems.append(("no C++ compiler: the simulator needs g++ (>= 9)", "sudo apt-get install g++"))
        r.fatal = True
    ninja = shutil.which("ninja")
    r.facts.append(("ninja", ninja or "not found"))
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    r.facts.append(("CUDA_HOME", home or "(unset)"))
    if home and not os.path.exists(os.path.join(home, "bin", "nvcc")):
        r.problems.append((f"CUDA_HOME={home} has no bin/nvcc", "export CUDA_HOME=/usr/local/cuda  (where nvcc is)"))
    gpu = bool(torch is not None and torch.cuda.is_available())
    if gpu:
        p = torch.cuda.get_device_properties(0)
        r.facts.append(("GPU", f"{p.name}, compute capability {p.major}.{p.minor} (sm_{p.major}{p.minor}), "
                               f"{p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB"))
        if not nv:
            r.problems.append(("a GPU is present but nvcc is not found, so kernels cannot be compiled for it",
                               "conda install -c conda-forge cuda-nvcc cuda-cudart-dev   (or set CUDA_HOME)"))
        if not ninja:
            r.problems.append(("ninja is missing (torch's load_inline needs it)", "pip install ninja"))
    else:
        r.facts.append(("GPU", "none visible to torch"))
    if torch is not None and torch.version.cuda and nvv and torch.version.cuda.split(".")[0] != nvv.split(".")[0]:
        r.problems.append((f"nvcc is CUDA {nvv} but torch was built with CUDA {torch.version.cuda}: extensions "
                           "built with a different major version fail to load",
                           f"install nvcc {torch.version.cuda.split('.')[0]}.x (conda install -c conda-forge "
                           f"cuda-nvcc={torch.version.cuda}) or a torch built for CUDA {nvv}"))
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    r.facts.append(("TORCH_CUDA_ARCH_LIST", arch or "(unset: torch picks the visible GPU's)"))
    if arch:
        probs = check_arch_list(arch)
        toks = {t.split("+")[0].rstrip("af") for t in re.split(r"[;\s,]+", arch.strip()) if t}
        cuda_versions = {v for v in (nvv, torch.version.cuda if torch is not None else None) if v}
        for t in sorted(toks & cuda_versions):
            probs.append(f"'{t}' is your CUDA version; the list wants compute capabilities")
        if gpu:
            cc = f"{p.major}.{p.minor}"
            if cc not in toks:
                probs.append(f"it does not include this GPU's compute capability {cc}: kernels built with it "
                             "will not run here ('no kernel image is available')")
        for prob in probs:
            r.problems.append((f"TORCH_CUDA_ARCH_LIST: {prob}",
                               "unset TORCH_CUDA_ARCH_LIST, or give compute capabilities: export "
                               "TORCH_CUDA_ARCH_LIST=\"9.0\"   (H100: 9.0, A100: 8.0, RTX 4090: 8.9, RTX 5090: 12.0)"))
    from cudacourse.loader import backend_name
    from cudacourse.settings import current

    try:
        b = backend_name()
        chosen = current().backend
        why = f"CUDA_COURSE_BACKEND={chosen}" if chosen != "auto" \
            else ("a GPU and nvcc are usable" if b == "cuda" else
                  "no usable GPU" + ("" if gpu else "") + (" and nvcc" if gpu and not nv else ""))
        r.facts.append(("backend", f"{b} ({why})"))
    except (RuntimeError, ValueError) as e:
        r.problems.append((str(e), "unset CUDA_COURSE_BACKEND  (or set it to auto, cuda or sim)"))
    from cudacourse.course import CourseModelError, course

    try:
        r.facts.append(("course", f"{course().root} ({len(course().lessons)} lessons)"))
    except CourseModelError as e:
        r.facts.append(("course", "not found"))
        r.problems.append((str(e), "export CUDA_COURSE_ROOT=/path/to/a/clone/of/the/course   "
                                   "(or, in the clone: pip install -e .)"))
        r.fatal = True
    r.facts.append(("build folder", str(buildcache.build_root())))
    r.facts.append(("Triton track", triton_fact()))
    from cudacourse.sandbox import available, describe_for_grading

    conf = available()
    r.instructors.append(("grading confinement", describe_for_grading()))
    if not conf.confined:  # grading still works, a learner's own included; reports of others' work say "unconfined"
        r.instructors.append(("note", "submissions graded here would run unconfined: " + "; ".join(conf.missing)
                              + ". Grading still works (its reports say \"unconfined\"); docs/CONFINEMENT.md "
                              "says what is needed"))
    return r


def main(argv: list[str] | None = None) -> int:
    """Print the report. Exit 0 when the course can run."""
    ap = argparse.ArgumentParser(prog="python -m cudacourse doctor", description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    r = diagnose()
    width = max(len(k) for k, _ in r.facts)
    for k, v in r.facts:
        print(f"{k:<{width}}  {v}")
    if r.problems:
        print(f"\n{len(r.problems)} problem(s):")
        for what, fix in r.problems:
            print(f"  - {what}\n    fix: {fix}")
    else:
        print("\nno problems found")
    print("\nthe course can run here" if not r.fatal else "\nthe course cannot run here until the above is fixed")
    if r.instructors:
        print("\nfor instructors (how `make grade ARGS=--submission ...` isolates others' code; nothing to do for "
              "your own work):")
        w = max(len(k) for k, _ in r.instructors)
        for k, v in r.instructors:
            print(f"  {k:<{w}}  {v}")
    return 1 if r.fatal else 0
