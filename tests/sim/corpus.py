"""Helpers to run the bug corpus (tests/bug_corpus/*.cu): parse headers, build, run, compare."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from cudacourse.sim import SimLibrary
from cudacourse.source import find_launchers

CORPUS = Path(__file__).resolve().parent.parent / "bug_corpus"


@dataclass
class Case:
    """One corpus file: what it should produce and how to call it."""

    path: Path
    expect: str
    line: int | None
    bug_lines: list[int]
    sizes: dict[str, int]


def load_case(path: Path) -> Case:
    """Parse the ``// EXPECT:`` and ``// ARGS:`` header of a corpus file."""
    text = path.read_text()
    m = re.search(r"//\s*EXPECT:\s*(\w+)(?:\s+at line\s+(\d+))?", text)
    assert m, f"{path.name}: no EXPECT header"
    a = re.search(r"//\s*ARGS:\s*(.*)", text)
    assert a, f"{path.name}: no ARGS header"
    sizes = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", a.group(1))}
    bug_lines = [i + 1 for i, ln in enumerate(text.splitlines()) if re.search(r"//\s*BUG\b", ln)]
    return Case(path, m.group(1), int(m.group(2)) if m.group(2) else None, bug_lines, sizes)


def run_case(case: Case, *, checked: bool = True, timeout_s: float = 10.0) -> tuple[Exception | None, torch.Tensor]:
    """Build and run ``run(in, out, n)`` of a corpus file; return the error raised (or None) and the output."""
    src = case.path.read_text()
    launchers = [find_launchers(src)["run"]]
    lib = SimLibrary.build(src, case.path.name, launchers, checked=checked, timeout_s=timeout_s)
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(case.sizes["in"], generator=g)
        y = torch.full((case.sizes["out"],), float("nan"))
        try:
            lib.call("run", [x, y, case.sizes["n"]])
        except Exception as e:  # noqa: BLE001 - the caller inspects it
            return e, y
        return None, y
    finally:
        lib.close()
