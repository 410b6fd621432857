"""The real-world fidelity corpus (tests/sim/realworld/*.cu) on the simulator.

Each corpus file is plain CUDA C++ written in the style of widely used public code (llm.c's dev/cuda
files, templated kernels, cooperative groups, vectorised loads, bf16, cuBLAS around custom kernels). It
exposes its launchers and ``void validate(int seed, float* report)``, which runs the file's own CPU
reference against every kernel version and block size and writes [mismatches, elements checked, largest
error, outputs compared] (see realworld/common.h). Every file runs in checked mode under forward, reverse and
shuffled thread orders, and in fast mode in forward order: the thread order is the launch's, set up the same way in
both modes (runtime/rt/sched_launch.h), so the other two fast-mode orders ran the same scheduling a second time for
84 cases, about 60 of the 2-core machine's CPU-seconds in `make test`. The same files run on a GPU in
tests/test_parity.py.

A file that needs a simulator change not merged yet says so in a ``// NEEDS: sim-core item N [checked]``
header line; its cases are strict xfails (only the checked-mode ones with ``checked``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import build

from cudacourse.source import find_launchers

CORPUS = Path(__file__).resolve().parent / "realworld"
FILES = sorted(CORPUS.glob("*.cu"))
ORDERS = ["forward", "reverse", "shuffle:7"]
SEED = 1234


def needs(path: Path) -> list[tuple[str, str, bool]]:
    """The ``// NEEDS:`` lines of a corpus file: (item, why, checked mode only)."""
    out = []
    for m in re.finditer(r"^//\s*NEEDS:\s*sim-core item (\d+)(\s+checked)?\s*(?:\((.*)\))?", path.read_text(), re.M):
        out.append((m.group(1), m.group(3) or "", bool(m.group(2))))
    return out


def _cases() -> list:
    cases = []
    for path in FILES:
        for mode in ("checked", "fast"):
            marks = [pytest.mark.xfail(strict=True, reason=f"needs sim-core item {item}" + (f": {why}" if why else ""))
                     for item, why, checked_only in needs(path) if mode == "checked" or not checked_only]
            for order in ORDERS if mode == "checked" else ORDERS[:1]:
                cases.append(pytest.param(path, mode, order, marks=marks[:1], id=f"{path.stem}-{mode}-{order}"))
    return cases


def test_the_corpus_is_large_enough():
    assert len(FILES) >= 40, f"the fidelity corpus has {len(FILES)} files; issue 13 asks for at least 40"


def run_validate(path: Path, *, checked: bool, order: str) -> list[float]:
    """Build ``path`` for the simulator and return its validate() report."""
    src = path.read_text()
    launchers = find_launchers(src)
    assert "validate" in launchers, f"{path.name}: no `void validate(int seed, float* report)` launcher"
    lib = build(src, str(path), checked=checked, order=order, timeout_s=60.0, device_calls=True)
    try:
        report = torch.full((4,), float("nan"))
        lib.call("validate", [SEED, report])
        return report.tolist()
    finally:
        lib.close()


@pytest.mark.parametrize("path, mode, order", _cases())
def test_realworld_file_validates(path: Path, mode: str, order: str):
    mismatches, checked, max_err, outputs = run_validate(path, checked=mode == "checked", order=order)
    assert outputs >= 1 and checked > 0, f"{path.name}: validate() compared nothing ({outputs} outputs)"
    assert mismatches == 0, (f"{path.name} ({mode}, {order}): {int(mismatches)} of {int(checked)} values differ "
                             f"from the file's CPU reference (largest error {max_err:g}); see the printed mismatches")


def _nvcc_has(header: str) -> bool:
    """True when nvcc's own include folder holds ``header``."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return False
    roots = [Path(nvcc).resolve().parent.parent, *Path("/usr/local").glob("cuda*")]
    return any((r / "include" / header).is_file() for r in roots)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_realworld_file_compiles_with_nvcc(path: Path, tmp_path: Path):
    """The corpus is plain CUDA C++: nvcc compiles every file as it stands (g++ accepts more)."""
    if "cublas_v2.h" in path.read_text() and not _nvcc_has("cublas_v2.h"):
        pytest.skip("cuBLAS headers are not installed with this nvcc (checked on the GPU machine)")
    # -cuda: nvcc's front ends, device compile and ptxas, without g++'s compile of the host code it wrote (the
    # simulator builds that code with g++; as test_harness.py's NVCC_CHECK)
    r = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-cuda", str(path), "-o", str(tmp_path / "x.ii")],
                       capture_output=True, text=True, cwd=path.parent)
    assert r.returncode == 0, f"{path.name} does not compile with nvcc:\n{r.stderr[-3000:]}"
