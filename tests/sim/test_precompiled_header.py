"""The precompiled ``ccsim.h`` every simulator module is compiled with (``sim/build.py``: ``compiler``).

What must hold: each compile a build makes (checked, fast, the device-call check) finds a precompiled header made
with its own flags and g++ takes it (else g++ quietly parses the headers again and nothing is saved); one made
with other flags is passed over, never used; and the device-call check sees the same calls with it as without
(its verdict reads the headers' paths, which the precompiled header records).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cudacourse.sim import devcheck, rewrite
from cudacourse.sim.build import compiler, module_flags, precompiled_header
from cudacourse.sim.paths import RUNTIME_DIR
from cudacourse.source import find_launchers

SRC = """
__device__ float twice(float v) { return 2.0f * v; }
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = twice(x[i]);
}
void launch(const float* x, float* y, int n) { k<<<(n + 127) / 128, 128>>>(x, y, n); }
"""


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pch")
    (d / "src.cpp").write_text(rewrite(SRC, "k.cu", list(find_launchers(SRC).values())))
    return d / "src.cpp"


def _headers_read(cmd: list[str], src: Path) -> list[str]:
    """The lines of g++ ``-H`` naming a precompiled header: ``! file`` used, ``x file`` found and refused."""
    r = subprocess.run([*cmd, "-H", "-fsyntax-only", src.name], cwd=src.parent, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return [ln for ln in r.stderr.splitlines() if ln.endswith(".gch")]


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "fast"])
def test_each_compile_of_a_build_takes_the_header_made_with_its_flags(src: Path, checked: bool) -> None:
    flags = module_flags(checked)
    gxx, pch = compiler(flags, check=True)
    assert _headers_read([*gxx, *flags], src) == [f"! {pch[0] / 'ccsim.h.gch'}"]
    # the device-call check's build passes over the first (other flags) and takes the second
    assert _headers_read([*gxx, *devcheck.FLAGS], src) == [f"x {pch[0] / 'ccsim.h.gch'}",
                                                           f"! {pch[1] / 'ccsim.h.gch'}"]


def test_a_header_made_with_other_flags_is_never_used(src: Path) -> None:
    """A fast compile given only the checked mode's header reads the runtime's headers instead."""
    other = precompiled_header(module_flags(True))
    cmd = ["g++", "-I", str(other), "-I", str(RUNTIME_DIR), *module_flags(False)]
    assert _headers_read(cmd, src) == [f"x {other / 'ccsim.h.gch'}"]


def test_the_device_call_check_sees_the_same_calls_with_the_header(src: Path, tmp_path: Path) -> None:
    """``-fcallgraph-info`` lists each call with its callee's declaration (file:line): identical with the
    precompiled header and without it."""
    gxx, _pch = compiler(module_flags(True), check=True)
    graphs = []
    for name, cmd in (("with", gxx), ("without", ["g++", "-I", str(RUNTIME_DIR)])):
        d = tmp_path / name
        d.mkdir()
        (d / "src.cpp").write_text(src.read_text())
        r = subprocess.run([*cmd, *devcheck.FLAGS, "-c", "src.cpp", "-o", "check.o"], cwd=d, capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        graphs.append((d / "check.ci").read_text())
    assert graphs[0] == graphs[1]
    assert str(RUNTIME_DIR) in graphs[0] and "twice" in graphs[0]  # it does name the runtime and the calls
