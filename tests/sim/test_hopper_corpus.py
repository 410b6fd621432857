"""Hopper's asynchronous machinery on the simulator (issue 38): the correct kernels give the right C in checked mode
in every thread order, and every bug of tests/hopper_corpus/corpus.toml raises its error at its line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import tomllib
import torch

import cudacourse as cc
from cudacourse import check, errors

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "hopper_corpus"
SOLUTION = ROOT / "solutions" / "05_tensor_cores"
BUGS = tomllib.loads((CORPUS / "corpus.toml").read_text())["bug"]
ORDERS = ["forward", "reverse", "shuffle:11"]
SHAPE = {"gemm_hopper.cu": (131, 260, 520), "mma_tma.cu": (100, 130, 328)}  # ragged; more k-tiles than stages


def _stage(tmp: Path, base: str | None = None, old: str = "", new: str = "") -> Path:
    """Copies of the kernels and headers in ``tmp``, with ``old`` replaced by ``new`` in ``base``."""
    for p in (SOLUTION / "gemm_hopper.cu", SOLUTION / "cc_hopper.h", SOLUTION / "cc_mma.h", CORPUS / "mma_tma.cu"):
        shutil.copy(p, tmp / p.name)
    if base:
        text = (tmp / base).read_text()
        assert text.count(old) == 1, f"the corpus change does not apply to {base} any more: {old!r}"
        (tmp / base).write_text(text.replace(old, new))
    return tmp


def _run(folder: Path, file: str, fn: str, order: str) -> tuple[torch.Tensor, torch.Tensor]:
    M, N, K = SHAPE[file]
    with pytest.MonkeyPatch.context() as mp:  # the thread order is read when the module is loaded
        mp.setenv("CUDA_COURSE_SIM_ORDER", order)
        m = cc.load(str(folder / file), [fn], backend="sim", check=True, timeout_s=300)
    g = check.rng(f"hopper-{file}")
    A = check.randn((M, K), g, "cpu", dtype=torch.bfloat16)
    W = check.randn((N, K), g, "cpu", dtype=torch.bfloat16)
    C = torch.full((M, N), float("nan"))
    getattr(m, fn)(A, W, C, M, N, K)
    return C, A.double() @ W.double().T


def test_corpus_has_at_least_eight_bugs_with_their_errors() -> None:
    assert len(BUGS) >= 8
    for b in BUGS:
        assert {"name", "base", "error", "says", "line"} <= set(b), b
        assert all(hasattr(errors, e) for e in b["error"].split("|")), b


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(("file", "fn"), [("gemm_hopper.cu", "gemm_wgmma"), ("mma_tma.cu", "mma_tma_fence")])
def test_correct_kernels_pass_in_checked_mode(tmp_path: Path, file: str, fn: str, order: str) -> None:
    C, ref = _run(_stage(tmp_path), file, fn, order)
    K = SHAPE[file][2]
    assert not C.isnan().any(), "every element of C is written"
    assert float((C.double() - ref).abs().max()) <= 2 * K * 2.0**-24 * float(ref.abs().max()) * 8 + 1e-4


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("bug", BUGS, ids=[b["name"] for b in BUGS])
def test_bug_is_diagnosed_at_its_line(tmp_path: Path, bug: dict, order: str) -> None:
    base = bug["base"]
    folder = _stage(tmp_path, base if "old" in bug else None, bug.get("old", ""), bug.get("new", ""))
    file = base if base.endswith(".cu") else "gemm_hopper.cu"
    with pytest.raises(errors.KernelError) as e:
        _run(folder, file, bug.get("call", "gemm_wgmma" if file == "gemm_hopper.cu" else "mma_tma_fence"), order)
    err = e.value
    assert type(err).__name__ in bug["error"].split("|"), f"{type(err).__name__}: {err}"
    assert re.search("|".join(re.escape(s) for s in bug["says"].split("|")), str(err)), str(err)
    assert err.line, str(err)
    src = (folder / file).read_text().splitlines()[err.line - 1]
    assert any(want in src for want in bug["line"].split("|")), f"reported line {err.line}: {src!r}\n{err}"
    assert err.kernel and err.block is not None and err.thread is not None


def test_inline_hopper_ptx_is_refused_naming_the_instruction(tmp_path: Path) -> None:
    src = tmp_path / "cluster.cu"
    src.write_text('#include <cstdint>\n__global__ void k(uint32_t a, uint32_t b) {\n'
                   '    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes'
                   '.multicast::cluster [%0], [%1, {0, 0}], [%0], 3;" :: "r"(a), "l"((uint64_t)b));\n}\n'
                   'void run(int* x) { k<<<1, 32>>>(0, 0); }\n')
    with pytest.raises(cc.CompileError) as e:
        cc.load(str(src), ["run"], backend="sim")
    assert e.value.line == 3
    assert "multicast" in str(e.value) and "cluster" in str(e.value), str(e.value)


def test_elect_one_picks_one_lane_per_warp(tmp_path: Path) -> None:
    folder = _stage(tmp_path)
    m = cc.load(str(folder / "mma_tma.cu"), ["elect_count"], backend="sim", check=True)
    out = torch.zeros(1, dtype=torch.int32)
    m.elect_count(out)
    assert int(out.item()) == 4
