"""The runtime's headers with ``ccsim.h`` precompiled, which every simulator module includes (``sim/build.py``:
``runtime_headers``).

What must hold: each compile a grade makes (checked, the device-call check) finds a precompiled header made
with its own flags and g++ takes it (else g++ quietly parses the headers again and nothing is saved); the
device-call check sees the same calls with it as without (its verdict reads the headers' paths, which a
precompiled header records); a mode without a header of its own compiles the same code; and the folder is built
where it stays, never renamed or copied from a seed cache (the paths it records would then name a folder that
is not there).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cudacourse import buildcache, settings
from cudacourse.sim import devcheck, rewrite
from cudacourse.sim.build import PCH_MODES, module_flags, runtime_headers
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


def _pch_lines(hdrs: Path, flags: list[str], src: Path) -> list[str]:
    """The lines of g++ ``-H`` naming a precompiled header: ``! file`` used, ``x file`` found and refused."""
    r = subprocess.run(["g++", "-I", str(hdrs), *flags, "-H", "-fsyntax-only", src.name], cwd=src.parent,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return [ln for ln in r.stderr.splitlines() if ".gch" in ln]


@pytest.mark.parametrize("mode", list(PCH_MODES))
def test_each_mode_takes_the_header_made_with_its_flags(src: Path, mode: str) -> None:
    hdrs = runtime_headers()
    assert f"! {hdrs / 'ccsim.h.gch' / mode}.gch" in _pch_lines(hdrs, PCH_MODES[mode], src)
    assert PCH_MODES["checked"] == module_flags(True) and PCH_MODES["devcheck"] == devcheck.FLAGS


def _compile(include: Path, flags: list[str], src: Path, d: Path) -> str:
    """Compile ``src`` in a fresh folder ``d`` with the runtime's headers from ``include``; g++'s ``-H`` lines."""
    d.mkdir()
    (d / "src.cpp").write_text(src.read_text())
    r = subprocess.run(["g++", "-I", str(include), *flags, "-H", "-c", "src.cpp", "-o", "src.o"], cwd=d,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stderr


@pytest.mark.parametrize("mode", ["fast", "branches"])
def test_a_mode_without_a_header_of_its_own_compiles_the_same_code(src: Path, tmp_path: Path, mode: str) -> None:
    """The fast mode and a profile="branches" build have flags of their own: g++ refuses the precompiled headers
    (fast) or takes one only where that changes nothing (branches: the checked mode's, plus basic-block hooks), so
    the object's code is the same as from the headers read as text."""
    flags = module_flags(mode == "branches", mode)
    said = _compile(runtime_headers(), flags, src, tmp_path / "pch")
    assert ("! " in said) == (mode == "branches"), said[:500]
    _compile(RUNTIME_DIR, flags, src, tmp_path / "text")
    code = [subprocess.run(["objdump", "-dr", "--no-show-raw-insn", "src.o"], cwd=tmp_path / n, capture_output=True,
                           text=True, check=True).stdout for n in ("pch", "text")]
    assert code[0] == code[1] and ("__sanitizer_cov_trace_pc" in code[0]) == (mode == "branches")


def test_the_device_call_check_sees_the_same_calls_with_the_header(src: Path, tmp_path: Path) -> None:
    """``-fcallgraph-info`` lists each call with its callee's declaration (file:line): the same, but for the
    runtime's folder, with the precompiled header as with the package's headers read as text."""
    hdrs = runtime_headers()
    assert f"! {hdrs}" in _compile(hdrs, devcheck.FLAGS, src, tmp_path / "with")
    assert ".gch" not in _compile(RUNTIME_DIR, devcheck.FLAGS, src, tmp_path / "without")
    graphs = [(tmp_path / "with" / "src.ci").read_text(), (tmp_path / "without" / "src.ci").read_text()]
    assert str(hdrs) + "/" in graphs[0] and str(RUNTIME_DIR) not in graphs[0] and "twice" in graphs[0]
    assert graphs[0].replace(str(hdrs), "<runtime>") == graphs[1].replace(str(RUNTIME_DIR), "<runtime>")


def test_the_folder_is_built_in_place_and_never_copied_from_a_seed(tmp_path: Path) -> None:
    """``cached(relocatable=False)`` builds in the final folder (the build sees its own path) and ignores a
    complete build of the same key in the seed cache."""
    seed = tmp_path / "seed"
    (seed / "k" / "key1").mkdir(parents=True)
    (seed / "k" / "key1" / "DONE").write_text("")
    seen = []
    with settings.using(build_dir=tmp_path / "own", build_seed=seed):
        d = buildcache.cached("k", "key1", lambda d: seen.append(d), relocatable=False)
        assert buildcache.cached("k", "key1", lambda d: seen.append(d), relocatable=False) == d
        with pytest.raises(RuntimeError):
            buildcache.cached("k", "key2", lambda d: (_ for _ in ()).throw(RuntimeError("no")), relocatable=False)
        assert not (tmp_path / "own" / "k" / "key2").exists()  # a failed build leaves nothing
    assert seen == [tmp_path / "own" / "k" / "key1"] and d == seen[0]
