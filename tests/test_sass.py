"""The sass verb (cudacourse/sass.py) and the occupancy rules it applies (cudacourse/occupancy.py).

The occupancy cases are worked by hand from the CUDA Programming Guide's cc 9.0 limits (cited in
cudacourse/occupancy.py): 32 blocks, 64 warps, 64K registers in 4 sub-partitions allocated per warp in units of
256, 228 KB of shared memory per SM with 1 KB reserved per block in units of 128 bytes.
The SASS tests compile with nvcc and disassemble with the PyPI wheels (`make setup EXTRAS=sass`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cudacourse import sass as sa
from cudacourse.course import course
from cudacourse.occupancy import occupancy

# ----------------------------------------------------------------------------------------------------
# Occupancy, by hand
# ----------------------------------------------------------------------------------------------------


def test_registers_limit() -> None:
    # 64 regs x 32 lanes = 2048 per warp; a sub-partition's 16384 hold 8 warps, the SM 32: 4 blocks of 8 warps
    o = occupancy(256, 64, 0)
    assert (o.limit_registers, o.blocks_per_sm, o.warps_per_sm, o.limiter) == (4, 4, 32, "registers")
    assert o.occupancy == 0.5
    # 128 regs: 4096 per warp, 4 warps per sub-partition, 16 per SM: 2 blocks of 256 threads, 25%
    assert occupancy(256, 128, 0).blocks_per_sm == 2
    # 40 regs: 1280 per warp; 16384 // 1280 = 12 warps per sub-partition, 48 per SM: 16 blocks of 3 warps
    # (dividing the SM's 65536 at once would give 51 warps and 17 blocks: the sub-partitions matter)
    o = occupancy(96, 40, 0)
    assert (o.limit_registers, o.warps_per_sm) == (16, 48)
    # 33 regs round up to 1280 per warp, as 40 do
    assert occupancy(96, 33, 0).limit_registers == 16
    # 255 regs x 1024 threads: 8192 per warp x 32 warps > 64K registers per block: the launch cannot run
    assert occupancy(1024, 255, 0).blocks_per_sm == 0


def test_shared_memory_limit() -> None:
    # 48 KB + 1 KB reserved = 50176 B (a multiple of 128); 233472 // 50176 = 4 blocks of 4 warps: 25%
    o = occupancy(128, 32, 48 * 1024)
    assert (o.limit_shared, o.blocks_per_sm, o.limiter) == (4, 4, "shared memory")
    assert o.occupancy == 0.25
    # 100 KB: 103424 B per block, 2 blocks
    assert occupancy(128, 32, 100 * 1024).blocks_per_sm == 2
    # 1000 B rounds with the reserved KB to 2048 B: 114 blocks by shared memory, so the 32-block limit binds
    assert occupancy(32, 16, 1000).limit_shared == 114
    # more than 227 KB per block cannot launch
    assert occupancy(128, 32, 227 * 1024 + 4).blocks_per_sm == 0


def test_block_and_warp_limits() -> None:
    o = occupancy(32, 16, 0)  # one warp per block: 32 blocks, 32 of 64 warps
    assert (o.blocks_per_sm, o.limiter, o.occupancy) == (32, "blocks", 0.5)
    o = occupancy(256, 32, 0)  # 8 warps per block: 8 blocks fill the 64 warps; 32 regs allow exactly 64 warps
    assert (o.limit_warps, o.limit_registers, o.blocks_per_sm, o.occupancy) == (8, 8, 8, 1.0)
    assert occupancy(1000, 16, 0).warps_per_block == 32  # a partial warp takes a whole one
    with pytest.raises(ValueError, match="1 to 1024"):
        occupancy(2048, 16, 0)


# ----------------------------------------------------------------------------------------------------
# Which kernels a launcher launches, without compiling
# ----------------------------------------------------------------------------------------------------


def _solution(lesson: str, name: str) -> str:
    return (course().kernel_dir(lesson, "solution") / name).read_text()


def test_launches_follow_the_launcher() -> None:
    got = sa.launches(_solution("01_relu", "relu.cu"), "relu_v3_float4")
    # the unaligned fallback, then the float4 kernel; both with the file's kBlock threads
    assert [la.kernel for la in got] == ["relu_v1_scalar_kernel", "relu_v3_float4_kernel"]
    assert all(la.threads == 256 for la in got), [la.threads for la in got]
    two = sa.launches(_solution("02_reduce", "reduce.cu"), "reduce_v7_two_pass")
    assert [(la.kernel, la.threads) for la in two] == [("reduce_v7_pass1_kernel", 256),
                                                       ("reduce_v7_pass2_kernel", 1024)]
    # through template helpers (softmax_v3_pick<true>, launch_softmax_v3<N, VEC>) to the templated kernel
    v3 = sa.launches(_solution("04_transformer", "norms.cu"), "softmax_v3_row_in_registers")
    assert [la.kernel for la in v3][:1] == ["softmax_v3_kernel"] and v3[-1].kernel == "softmax_v2_kernel"
    with pytest.raises(ValueError, match="no function 'nope'"):
        sa.launches(_solution("01_relu", "relu.cu"), "nope")


def test_missing_tools_name_the_setup_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(sa, "find_tool", lambda name: None)
    with pytest.raises(sa.ToolMissing, match="make setup EXTRAS=sass"):
        sa.require_tool("cuobjdump")
    assert sa.main(["01_relu", "relu_v3_float4", "--impl", "solution"]) == 2
    assert "make setup EXTRAS=sass" in capsys.readouterr().out


@pytest.mark.skipif(sa.find_tool("nvcc") is None, reason=f"nvcc not installed: `{sa.SETUP_HINT}` installs it")
def test_nvcc_without_a_disassembler_names_the_setup_extra(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    """nvcc on the PATH (a CUDA toolkit without cuobjdump, or nvcc alone): the cubin builds, and the verb says which
    tool is missing and the command that installs it, instead of a traceback."""
    real = sa.find_tool
    monkeypatch.setattr(sa, "find_tool", lambda name: real(name) if name == "nvcc" else None)
    assert sa.main(["01_relu", "relu_v3_float4", "--impl", "solution"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: cuobjdump not found") and "make setup EXTRAS=sass" in out, out


# ----------------------------------------------------------------------------------------------------
# What nvcc made (needs nvcc and the cuobjdump/nvdisasm wheels)
# ----------------------------------------------------------------------------------------------------

_missing = [t for t in ("nvcc", "cuobjdump", "nvdisasm") if sa.find_tool(t) is None]
needs_tools = pytest.mark.skipif(bool(_missing), reason=f"{', '.join(_missing)} not installed: "
                                                        f"`{sa.SETUP_HINT}` installs the wheels")


@needs_tools
def test_float4_relu_loads_128_bits_with_its_source_line() -> None:
    rep = sa.sass("01_relu", "relu_v3_float4", impl="solution")
    k = rep.kernel("relu_v3_float4_kernel")
    assert k.count("LDG.E.128") == 1 and k.count("STG.E.128") == 1, k.instructions
    # the scalar fallback has no 128-bit access
    assert rep.kernel("relu_v1_scalar_kernel").count("LDG.E.128") == 0
    src = rep.path.read_text().split("\n")
    lines = {src[line - 1].strip() for _, ins, line, _ in k.sass if ins.startswith("LDG.E.128")}
    assert lines == {"float4 v = reinterpret_cast<const float4*>(x)[i];"}, lines
    assert k.resources.registers > 0 and k.resources.spill_stores == 0
    assert k.occupancy[0].threads == 256
    text = str(rep)
    assert "LDG.E.128" in text and "float4 v = reinterpret_cast" in text and "occupancy" in text


@needs_tools
def test_warp_reductions_shuffle_in_registers() -> None:
    # lesson 02's warp_reduce_sum uses __shfl_down_sync (offsets 16, 8, 4, 2, 1): five SHFL.DOWN, no shared memory
    k = sa.sass("02_reduce", "warp_sum", impl="solution").kernel("warp_sum_kernel")
    assert k.count("SHFL.DOWN") == 5 and k.count("SHFL.BFLY") == 0, k.instructions
    assert not any(i.startswith(("LDS", "STS")) for i in k.instructions)
    assert "shfl.sync.down" in k.ptx
    # the butterfly (__shfl_xor_sync, every lane gets the total) is lesson 04's softmax: SHFL.BFLY
    k = sa.sass("04_transformer", "softmax_v2_warp_per_row", impl="solution").kernel("softmax_v2_kernel")
    assert k.count("SHFL.BFLY") >= 10 and "shfl.sync.bfly" in k.ptx, k.instructions


@needs_tools
def test_mma_sync_gemm_uses_tensor_cores_and_ldmatrix() -> None:
    rep = sa.sass("05_tensor_cores", "mma_gemm", impl="solution")
    k = rep.kernel("mma_gemm_kernel")
    assert k.count("HMMA") >= 32 and k.count("LDSM") >= 4, (k.count("HMMA"), k.count("LDSM"))
    assert k.resources.smem > 0 and k.occupancy[0].registers == k.resources.registers


@needs_tools
def test_verb_prints_the_report(capsys: pytest.CaptureFixture) -> None:
    assert sa.main(["01_relu", "relu_v3_float4", "--impl", "solution"]) == 0
    out = capsys.readouterr().out
    assert "relu_v3_float4_kernel" in out and "LDG.E.128" in out and "blocks/SM" in out
    assert sa.main(["01_relu", "no_such_launcher", "--impl", "solution"]) == 1


# ----------------------------------------------------------------------------------------------------
# The SASS excerpts the lessons show (<!-- sass-excerpt: LESSON LAUNCHER KERNEL --> before a ```text block)
# ----------------------------------------------------------------------------------------------------

_EXCERPT = re.compile(r"<!-- sass-excerpt: (\S+) (\S+) (\S+) -->\n```text\n(.*?)\n```", re.S)


def excerpts() -> list[tuple[str, str, str, str, str]]:
    """(readme, lesson, launcher, kernel, text) of every marked SASS excerpt in the lessons' READMEs."""
    root = course().root
    return [(str(p.relative_to(root)), *m.groups()) for p in sorted(root.glob("lessons/*/README.md"))
            for m in _EXCERPT.finditer(p.read_text())]


def _nvcc_release() -> str:
    nvcc = sa.find_tool("nvcc")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout if nvcc else ""
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else ""


def test_the_lessons_show_sass_excerpts() -> None:
    got = {(les, fn) for _, les, fn, _, _ in excerpts()}
    assert {("01_relu", "relu_v3_float4"), ("02_reduce", "warp_sum")} <= got, got


@needs_tools
@pytest.mark.parametrize(("readme", "lesson", "launcher", "kernel", "text"), excerpts(),
                         ids=[f"{e[1]}-{e[2]}" for e in excerpts()])
def test_a_lesson_sass_excerpt_is_what_nvcc_makes(readme: str, lesson: str, launcher: str, kernel: str,
                                                  text: str) -> None:
    """Each excerpt is regenerated: its command is the one shown, each source line it quotes is that line of the
    solution's file, and each instruction is in the kernel's SASS under the same source line (same opcode; with
    the nvcc that made the excerpt, 13.0, the same operands and registers too)."""
    check_excerpt(readme, lesson, launcher, kernel, text)


@needs_tools
def test_the_excerpt_check_catches_a_wrong_excerpt() -> None:
    readme, lesson, launcher, kernel, text = next(e for e in excerpts() if e[2] == "relu_v3_float4")
    for wrong in (text.replace("LDG.E.128.CONSTANT", "LDG.E.64.CONSTANT"),  # another instruction
                  text.replace("line 169 |", "line 168 |"),  # a source line that is not there
                  text.replace("/*0180*/ STG.E.128", "/*0180*/ STS.128")):  # an opcode the kernel lacks
        assert wrong != text
        with pytest.raises(AssertionError):
            check_excerpt(readme, lesson, launcher, kernel, wrong)


def check_excerpt(readme: str, lesson: str, launcher: str, kernel: str, text: str) -> None:
    """Assert that one README excerpt is what `make sass` shows today (see the test above)."""
    lines = text.splitlines()
    assert lines[0] == f'$ make sass ARGS="{lesson} {launcher} --impl solution"', f"{readme}: {lines[0]}"
    rep = sa.sass(lesson, launcher, impl="solution")
    k = rep.kernel(kernel)
    exact = _nvcc_release() == "13.0"
    src = rep.path.read_text().split("\n")
    head = next(ln for ln in lines if ln.startswith("== "))
    assert head.split("   launched")[0] == f"== {k.name}", head
    if exact:
        assert head == f"== {k.name}   launched at line {k.launch.line}: <<<{', '.join(k.launch.config)}>>>"
        regs = next(ln for ln in lines if ln.strip().startswith("registers "))
        assert regs.strip().startswith(f"registers {k.resources.registers}/thread,"), (regs, k.resources)
    where: tuple[str, int] | None = None
    checked = 0
    for ln in lines:
        tag, bar, rest = ln.partition(" | ")
        if ln.strip() == "...":
            where = None  # lines left out: the next instruction's source line is not shown
        if not bar:
            continue
        tag = tag.strip()
        if tag:  # a source line: "line 169" (the kernel's file) or "sm_30_intrinsics.hpp:440" (a header)
            if tag.startswith("line "):
                where = (rep.path.name, int(tag.split()[1]))
                assert src[where[1] - 1].strip() == rest.strip(), f"{readme}: {tag} is not {rest.strip()!r}"
            else:
                name, _, num = tag.rpartition(":")
                where = (name, int(num))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4})\*/ (.*)$", rest)
        assert m, f"{readme}: not an instruction line: {ln!r}"
        ins = m.group(2)
        op = re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]
        under = [r for r in k.sass if where is None or (Path(r[3]).name == where[0] and r[2] == where[1])]
        assert any(re.sub(r"^@!?U?P\w+\s+", "", r[1]).split()[0] == op for r in under), (
            f"{readme}: no {op} under {where} in {kernel}'s SASS now: regenerate the excerpt")
        if exact:
            assert (m.group(1), ins) in {(r[0], r[1]) for r in k.sass}, f"{readme}: {ins} at {m.group(1)}"
        checked += 1
    assert checked >= 3


# ----------------------------------------------------------------------------------------------------
# benchmarks/sass_gpu_check.py (run on the GPU machine): its comparison, tried here on the backend's own build
# ----------------------------------------------------------------------------------------------------


def _gpu_check():  # noqa: ANN202 - the benchmark script as a module
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("sass_gpu_check", course().root / "benchmarks/sass_gpu_check.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = mod  # type: ignore[union-attr]  # (its dataclasses look their module up there)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_the_gpu_check_verdicts() -> None:
    g = _gpu_check()
    assert g.verdict(["@P0 LDG.E R2, [R4]", "EXIT"], ["@P0 LDG.E R2, [R4]", "EXIT"]) == ("SAME", {})
    assert g.verdict(["FADD R1, R2, R3", "EXIT"], ["FADD R5, R2, R3", "EXIT"]) == ("SAME MIX", {})  # registers
    assert g.verdict(["LDG.E.128 R4, [R2]"], ["@!P0 LDG.E R4, [R2]"]) == (
        "DIFFERENT", {"LDG.E": [0, 1], "LDG.E.128": [1, 0]})
    got = g.compare("f.cu", {"_Z1kv": ["EXIT"], "_Z2onlyv": ["EXIT"]}, {"_Z1kv": ["EXIT"]})
    assert [(v.kernel, v.verdict) for v in got] == [("_Z1kv", "SAME"), ("_Z2onlyv", "MISSING")]
    assert "MISSING" in got[1].line() and "only in the sass listing" in got[1].line()


@needs_tools
@pytest.mark.parametrize("rel", ["01_relu/relu.cu", "04_transformer/norms.cu", "05_tensor_cores/attention_tc.cu"])
def test_the_gpu_check_finds_the_backends_library_the_same_as_what_sass_shows(
        rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU confirmation's comparison, run here on the shared library cuda_backend.build_cuda builds with nvcc
    (the one build command of the cuda backend, in a notebook and in the grade alike): every kernel is SAME,
    instruction for instruction. The three files hold branches (nvdisasm's labels, cuobjdump's
    addresses), calls into CUDA's internal functions (norms.cu's division) and spilled registers (attention_tc.cu:
    nvdisasm's SpillRefill notes). A build for another GPU (sm_80) is told apart."""
    from cudacourse import cuda_backend
    from cudacourse.module import exposed_functions
    from cudacourse.source import launcher

    g = _gpu_check()
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    f = course().root / "solutions" / rel
    src = f.read_text()
    lib = cuda_backend.build_cuda(src, str(f), [launcher(src, fn) for fn in exposed_functions(src)])
    shown = g.shown_listing(f, "9.0a")
    got = g.compare(rel, shown, g.cuobjdump_listing(lib, sa.find_tool("cuobjdump")))
    assert len(got) >= 3 and all(v.verdict == "SAME" for v in got), [v.line() for v in got if v.verdict != "SAME"]
    other = g.compare(rel, shown, g.shown_listing(f, "sm_80"))
    assert any(v.verdict not in ("SAME", "SAME MIX") for v in other), [v.line() for v in other]
