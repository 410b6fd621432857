"""Every known-buggy kernel in tests/bug_corpus is diagnosed with the right error class at the right line."""

from __future__ import annotations

import os

import pytest
import torch
from corpus import CORPUS, load_case, run_case

from cudacourse import errors

CASES = sorted(CORPUS.glob("*.cu"))


def test_corpus_is_complete() -> None:
    kinds = {load_case(p).expect for p in CASES}
    assert {"RaceError", "OutOfBoundsError", "UninitializedReadError", "BarrierError", "KernelTimeout",
            "LaunchError", "KernelError", "poison"} <= kinds


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_case(path) -> None:
    case = load_case(path)
    if case.line is not None:
        assert case.line in case.bug_lines, f"{path.name}: EXPECT line {case.line} is not marked // BUG"
    err, out = run_case(case, timeout_s=3.0)
    if case.expect == "poison":
        assert err is None, f"unexpected {err!r}"
        assert torch.isnan(out[-1]), "the unwritten last element must keep its NaN poison"
        assert not torch.isnan(out[:-1]).any()
        return
    assert err is not None, f"{path.name}: no error raised"
    cls = getattr(errors, case.expect)
    assert type(err) is cls, f"{path.name}: expected {case.expect}, got {type(err).__name__}: {err}"
    if case.line is not None:
        where = f"{path.name}:{case.line}"
        assert err.line == case.line or where in str(err), f"{path.name}: expected line {case.line}: {err}"
        assert err.kernel, "the report names the kernel"
    if case.expect not in ("LaunchError", "KernelTimeout"):
        assert err.block is not None and err.thread is not None, str(err)
        assert err.file and os.path.basename(err.file) == path.name
