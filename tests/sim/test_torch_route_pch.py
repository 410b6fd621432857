"""The precompiled ``<torch/extension.h>`` of the simulator's torch route (``sim/torch_route.py``).

A torch-route build spends 21 of its ~30 CPU-s parsing torch's headers; with the header precompiled it takes ~15.
What must hold: the precompiled header is made with the flags ``load_inline`` compiles with (else g++ quietly
ignores it and nothing is saved), g++ takes it, it is keyed by what g++ does not check itself (torch's headers),
made once when two processes ask at once, and a stale or damaged one never yields a wrong build: g++ ignores a
stale one by itself, and a build that g++ stops because it cannot read one is built again without it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_torch_route import SRC

from cudacourse.errors import CompileError
from cudacourse.settings import using
from cudacourse.sim import build_torch_extension
from cudacourse.sim import torch_route as tr

pytestmark = pytest.mark.xdist_group("torch_route")  # beside test_torch_route.py, whose build it reads


@pytest.fixture(scope="module")
def ext(torch_pch: Path):  # noqa: ANN201 - test_torch_route.py's build (the cache's, when that module ran first)
    return build_torch_extension(SRC, "relu_ext.cu", ["relu", "relu_nocheck"], checked=True)


def _gxx(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The compiler torch's builds use (``$CXX``, else ``c++``)."""
    return subprocess.run([tr._cxx(), *args], cwd=cwd, capture_output=True, text=True)


def test_the_pch_is_made_with_the_flags_load_inline_compiles_with(ext) -> None:  # noqa: ANN001
    """The build.ninja torch wrote for a real build: its compile flags are the precompiled header's, plus the
    module's name (a macro torch's headers never read) and the ``-include`` of the header itself."""
    folder = Path(ext.__file__).parent
    line = next(ln for ln in (folder / "build.ninja").read_text().splitlines() if ln.startswith("cflags = "))
    post = next(ln for ln in (folder / "build.ninja").read_text().splitlines() if ln.startswith("post_cflags ="))
    used = shlex.split(line[len("cflags = "):]) + shlex.split(post[len("post_cflags ="):])
    name = [f for f in used if f.startswith("-DTORCH_EXTENSION_NAME=")]
    i = used.index("-include")
    assert len(name) == 1 and used[i + 1].endswith("/" + tr.PCH_NAME), used
    assert [f for f in used[:i] + used[i + 2:] if f not in name] == tr._pch_compile_flags(tr.torch_cflags())


def test_gxx_takes_the_suites_pch(ext, torch_pch: Path, tmp_path: Path) -> None:  # noqa: ANN001
    """g++ reads the precompiled header rather than torch's headers: ninja's record of the inputs of the torch-route
    build above lists the header itself only when g++ read it instead. (A build made before this checkout had a
    precompiled header, its key unchanged: then a probe, ``-H`` marking a used one with ``!``, with a module's name
    defined as in a build: g++ refuses a precompiled header that reads a macro defined otherwise.)"""
    folder = Path(ext.__file__).parent
    deps = subprocess.run([sys.executable, "-m", "ninja", "-C", str(folder), "-t", "deps"], capture_output=True,
                          text=True).stdout
    if "main.o" in deps and tr.PCH_NAME not in deps:
        return
    (tmp_path / "a.cpp").write_text("#include <torch/extension.h>\nint f() { return 1; }\n")
    flags = ["-DTORCH_EXTENSION_NAME=ccsim_ext_probe", *tr._pch_compile_flags(tr.torch_cflags())]
    r = _gxx(*flags, "-Winvalid-pch", "-H", "-include", str(torch_pch / tr.PCH_NAME), "-fsyntax-only", "a.cpp",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.splitlines()[0] == f"! {torch_pch / tr.PCH_NAME}.gch", r.stderr[:500]


def test_gxx_ignores_a_stale_pch_and_stops_at_a_damaged_one(tmp_path: Path) -> None:
    """What the fallback relies on, with a small header: a precompiled header made with other flags is ignored
    (-Winvalid-pch says so) and the header read instead, so the answer is right; one cut short either stops g++
    with a message naming the ``.gch`` file, which ``build_torch_extension`` answers by building without it (g++
    12), or is ignored like a stale one (a g++ that checks more of the file before it uses it): never a wrong
    answer, never a failure that does not name the file."""
    (tmp_path / "h.h").write_text("#define ANSWER 42\n")
    (tmp_path / "m.cpp").write_text("static_assert(ANSWER == 42, \"the header's answer\");\nint main() {}\n")
    assert _gxx("-O2", "-x", "c++-header", "h.h", "-o", "h.h.gch", cwd=tmp_path).returncode == 0
    used = _gxx("-O2", "-Winvalid-pch", "-H", "-include", str(tmp_path / "h.h"), "-c", "m.cpp", cwd=tmp_path)
    assert used.returncode == 0 and f"! {tmp_path}/h.h.gch" in used.stderr.splitlines(), used.stderr
    stale = _gxx("-O0", "-Winvalid-pch", "-include", str(tmp_path / "h.h"), "-c", "m.cpp", cwd=tmp_path)
    # (g++ 12 says "h.h.gch: not used because ...", g++ 13 "h.h.gch: created and used with differing settings of ...":
    # the flag's name is what both print)
    assert stale.returncode == 0 and "h.h.gch" in stale.stderr and "[-Winvalid-pch]" in stale.stderr, stale.stderr
    data = (tmp_path / "h.h.gch").read_bytes()
    (tmp_path / "h.h.gch").write_bytes(data[:100])
    cut = _gxx("-O2", "-Winvalid-pch", "-include", str(tmp_path / "h.h"), "-c", "m.cpp", cwd=tmp_path)
    assert "h.h.gch" in cut.stderr, cut.stderr  # stopped naming it, or ignored with -Winvalid-pch's warning
    assert cut.returncode != 0 or "[-Winvalid-pch]" in cut.stderr, cut.stderr


def test_the_key_covers_the_mode_the_compiler_and_torchs_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """g++ checks flags and macros itself, not the headers a precompiled header was made from: torch's version
    and build are in the key, and each mode (checked or not) has a precompiled header of its own."""
    import torch

    checked, plain = tr._pch_key(tr.torch_cflags(True)), tr._pch_key(tr.torch_cflags(False))
    assert checked != plain
    tr._pch_key_of.cache_clear()
    monkeypatch.setattr(torch, "__version__", torch.__version__ + ".other")
    assert tr._pch_key(tr.torch_cflags(True)) != checked
    monkeypatch.undo()
    tr._pch_key_of.cache_clear()
    # a grading worker runs from a staged copy of the course: its runtime folder is another (never read by torch)
    monkeypatch.setattr(tr, "RUNTIME_DIR", Path("/elsewhere/cudacourse/sim/runtime"))
    tr._load_inline_flags.cache_clear()
    assert any("/elsewhere/" in f for f in tr._pch_compile_flags(tr.torch_cflags(True)))
    assert tr._pch_key(tr.torch_cflags(True)) == checked
    monkeypatch.undo()
    tr._pch_key_of.cache_clear()
    tr._load_inline_flags.cache_clear()
    monkeypatch.setenv("CXX", "g++")  # another compiler command: another key
    assert tr._pch_key(tr.torch_cflags(True)) != tr._pch_key_of(tuple(tr.torch_cflags(True)), "c++")
    tr._pch_key_of.cache_clear()


def _plant_pch(cache: Path, size_ok: bool = True) -> Path:
    """A complete-looking precompiled header in ``cache`` under the real key (its content: not a PCH)."""
    d = cache / "sim-torch-pch" / tr._pch_key(tr.torch_cflags(True))
    d.mkdir(parents=True)
    (d / tr.PCH_NAME).write_text(tr.PCH_TEXT)
    (d / f"{tr.PCH_NAME}.gch").write_bytes(b"gpch" + b"\0" * 60)
    (d / "size").write_text("64" if size_ok else "65")
    (d / "DONE").write_text("")
    return d


@pytest.mark.parametrize("gcc_says", ["cannot read", "learner"])
def test_a_build_stopped_by_the_pch_is_built_again_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              gcc_says: str) -> None:
    """A build that g++ stops naming the ``.gch`` is built again with the same flags (torch would rename a module
    built again with others) and without the link to the precompiled header; a learner's own compile error is
    not built twice. (load_inline is replaced: this checks the driver, not g++, whose side is above.)"""
    import torch.utils.cpp_extension as cpp

    shared = tmp_path / "shared"
    _plant_pch(shared)
    calls: list[tuple[list[str], bool]] = []

    def fake_load_inline(**kw):  # noqa: ANN003, ANN202
        d = Path(kw["build_directory"])
        calls.append((list(kw["extra_cflags"]), (d / f"{tr.PCH_NAME}.gch").is_symlink()))
        if gcc_says == "cannot read" and len(calls) == 1:
            raise RuntimeError(f"main.cpp\n<command-line>: fatal error: cannot read {d}/{tr.PCH_NAME}.gch: bad\n")
        raise RuntimeError("main.cpp:3:1: error: 'x' was not declared in this scope")

    monkeypatch.setattr(cpp, "load_inline", fake_load_inline)
    src = f"#include <torch/extension.h>\n// {tmp_path}\ntorch::Tensor f(torch::Tensor x) {{ return x; }}\n"
    with using(build_shared=shared), pytest.raises(CompileError):
        build_torch_extension(src, "x.cu", ["f"], checked=True)
    assert calls[0][1], "the first build had no link to the precompiled header"
    if gcc_says == "cannot read":
        assert len(calls) == 2 and calls[1] == (calls[0][0], False), calls
    else:
        assert len(calls) == 1, calls


def test_a_torch_whose_ninja_writer_changed_builds_without_the_pch(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The flags come from torch's private ninja writer: if a torch release changes it so that they cannot be
    asked, a build goes on without the precompiled header (never fails because of it)."""
    import torch.utils.cpp_extension as cpp

    def changed(**kw):  # noqa: ANN003, ANN202
        raise TypeError("unexpected keyword argument")

    monkeypatch.setattr(cpp, "_write_ninja_file_to_build_library", changed)
    tr._load_inline_flags.cache_clear()
    tr._pch_key_of.cache_clear()
    try:
        assert tr._link_pch(tr.torch_cflags(True), tmp_path) is None
        assert (tmp_path / tr.PCH_NAME).read_text() == tr.PCH_TEXT
    finally:
        tr._load_inline_flags.cache_clear()
        tr._pch_key_of.cache_clear()


def test_a_pch_whose_size_is_not_the_recorded_one_is_not_used(tmp_path: Path) -> None:
    """A precompiled header cut short (its recorded size differs) is not even linked: the build reads the header."""
    shared = tmp_path / "shared"
    _plant_pch(shared, size_ok=False)
    d = tmp_path / "build"
    d.mkdir()
    with using(build_shared=shared):
        assert tr._link_pch(tr.torch_cflags(True), d) is None
    assert (d / tr.PCH_NAME).read_text() == tr.PCH_TEXT and not (d / f"{tr.PCH_NAME}.gch").exists()
    _plant_pch(tmp_path / "ok")
    with using(build_shared=tmp_path / "ok"):
        assert tr._link_pch(tr.torch_cflags(True), d) is not None
    assert (d / f"{tr.PCH_NAME}.gch").is_symlink()


def test_two_processes_asking_at_once_make_it_once(tmp_path: Path) -> None:
    """Two processes ask for the precompiled header at the same time: one compiles it (under the cache's lock,
    into a temporary folder renamed when complete), the other waits and gets the same folder. (A small header and
    a compiler wrapper that logs and waits, so that the two overlap.)"""
    log = tmp_path / "compiles.log"
    cxx = tmp_path / "cxx.sh"
    cxx.write_text(f'#!/bin/sh\ncase "$*" in *c++-header*) echo "$$" >> {log}; sleep 2;; esac\nexec g++ "$@"\n')
    cxx.chmod(0o755)
    script = textwrap.dedent(f"""
        import json, sys
        from cudacourse.sim import torch_route as tr
        from cudacourse.settings import using
        tr.PCH_TEXT = "#define SMALL 1\\n"
        tr._pch_compile_flags = lambda cflags: ["-O2"]
        tr._pch_key = lambda cflags: "small"  # (no torch import: the key has its own test)
        from pathlib import Path
        with using(build_dir=Path({str(tmp_path / "cache")!r})):
            print(json.dumps(str(tr.prepare_torch_pch(True))))
    """)
    env = {**__import__("os").environ, "CXX": str(cxx)}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    folders = {json.loads(o) for o, _ in outs}
    assert len(folders) == 1 and len(log.read_text().split()) == 1, (folders, log.read_text())
    folder = Path(folders.pop())
    assert (folder / "DONE").exists()
    assert int((folder / "size").read_text()) == (folder / f"{tr.PCH_NAME}.gch").stat().st_size
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name, folder.name + ".lock"]


def test_a_grade_links_the_pch_into_its_run_cache(tmp_path: Path) -> None:
    """A grade's confined workers read its run cache, not the instructor's: a complete precompiled header is
    hard-linked there (the same file, no 800 MB copy), an incomplete one is not, and linking again changes nothing."""
    src, dst = tmp_path / "instructor", tmp_path / "run"
    done = _plant_pch(src)
    half = src / tr.PCH_KIND / "unfinished"
    half.mkdir()
    (half / f"{tr.PCH_NAME}.gch").write_bytes(b"x")
    assert tr.share_torch_pch(src, dst) == 1
    linked = dst / tr.PCH_KIND / done.name
    assert (linked / f"{tr.PCH_NAME}.gch").samefile(done / f"{tr.PCH_NAME}.gch") and (linked / "DONE").exists()
    assert sorted(p.name for p in (dst / tr.PCH_KIND).iterdir()) == [done.name]
    assert tr.share_torch_pch(src, dst) == 0 and tr.share_torch_pch(src, src) == 0
    with using(build_shared=dst):
        assert tr._link_pch(tr.torch_cflags(True), tmp_path) == linked / f"{tr.PCH_NAME}.gch"
