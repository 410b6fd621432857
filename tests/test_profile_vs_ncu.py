"""benchmarks/profile_vs_ncu.py's table, rendered from a small saved comparison (no GPU, no simulator run):
each pair lands in the right part (access-pattern counts held to the rule, or counts that follow nvcc's code
generation, listed with a reason), the tallies count what the rows say, and a disagreement in an
access-pattern count is reported as one."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("profile_vs_ncu", ROOT / "benchmarks" / "profile_vs_ncu.py")
pvn = importlib.util.module_from_spec(_spec)
sys.modules["profile_vs_ncu"] = pvn  # dataclasses look the module up by name
_spec.loader.exec_module(pvn)

LD_REQ = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
LD_SEC = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
ATOM_REQ = "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum"
SH_INST = "smsp__inst_executed_op_shared_ld.sum"
SH_WAVE = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
SH_CONF = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
WIDENED = "sgemm_v3_shared_kernel"  # its shared-load wavefronts follow nvcc's LDS.128 (WIDTH_CHANGED)
PREDICATED = "reduce_v2_sequential_kernel"  # its issued shared instructions are predicated (ISSUED_NOTES)


def comparison() -> dict:
    """Two kernels that agree on every access-pattern count and differ on the code-generation ones."""
    sim = {
        PREDICATED: {LD_REQ: 512, LD_SEC: 2048, ATOM_REQ: 0, SH_INST: 1600, SH_WAVE: 1600, SH_CONF: 0},
        WIDENED: {LD_REQ: 4096, LD_SEC: 16384, ATOM_REQ: 0, SH_INST: 131072, SH_WAVE: 131072, SH_CONF: 0},
        "plain_kernel": {LD_REQ: 64, LD_SEC: 256, ATOM_REQ: 0, SH_INST: 0, SH_WAVE: 0, SH_CONF: 0},
    }
    gpu = json.loads(json.dumps(sim))
    gpu[PREDICATED][SH_INST] = 8256
    gpu[WIDENED][SH_INST] = 81920
    gpu[WIDENED][SH_WAVE] = 98304
    return {"device": "Test GPU", "date": "2026-11-25", "command": "python benchmarks/profile_vs_ncu.py",
            "sim": sim, "ncu": gpu}


def rows(md: str, part: str) -> list[list[str]]:
    """The body rows of one part's table ('## 1.' or '## 2.'), as lists of cells."""
    section = md.split(part, 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| `")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


def tallies(md: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(agree, total) of the access-pattern part and (equal, total) of the code-generation part."""
    a = re.search(r"\*\*(\d+) of (\d+) agree\*\*", md)
    c = re.search(r"\): (\d+) of (\d+) equal", md)
    assert a and c, md[:2000]
    return (int(a[1]), int(a[2])), (int(c[1]), int(c[2]))


def test_pairs_are_classified_by_what_the_simulator_can_know():
    pairs, unused = pvn.compare(comparison()["sim"], comparison()["ncu"])
    part = {(p.kernel, p.metric): (p.part, p.note) for p in pairs}
    for kernel in (PREDICATED, WIDENED, "plain_kernel"):
        assert part[(kernel, LD_SEC)] == (pvn.ACCESS, "")
    assert part[(PREDICATED, SH_INST)] == (pvn.CODEGEN, "predicated")
    assert part[(PREDICATED, SH_WAVE)] == (pvn.ACCESS, "")        # nvcc kept the source's 4-byte width
    assert part[(WIDENED, SH_INST)] == (pvn.CODEGEN, "lds128")
    assert part[(WIDENED, SH_WAVE)] == (pvn.CODEGEN, "lds128_wavefronts")
    # a bank-conflict count of 0 in a kernel with shared accesses is a result, and is listed
    assert part[(PREDICATED, SH_CONF)] == (pvn.ACCESS, "")
    # 0 on both sides where the kernel never touches the memory space: left out, and said so
    assert (("plain_kernel", SH_CONF) not in part and ("plain_kernel", SH_INST) not in part
            and (PREDICATED, ATOM_REQ) not in part)
    assert unused["plain_kernel"] == ["global atomics", "shared memory"] and unused[PREDICATED] == ["global atomics"]
    for key in {p.note for p in pairs if p.part == pvn.CODEGEN}:
        assert key in pvn.NOTES


def test_table_counts_what_its_rows_say_and_gives_each_codegen_row_a_reason():
    md = pvn.table(comparison())
    access, codegen = rows(md, "## 1."), rows(md, "## 2.")
    assert {r[0].strip("`") for r in access} >= {LD_REQ, LD_SEC, SH_CONF}
    assert all(r[4] == "yes" for r in access)
    assert {(r[1], r[0].strip("`")) for r in codegen} == {(PREDICATED, SH_INST), (WIDENED, SH_INST),
                                                          (WIDENED, SH_WAVE)}
    assert all(r[4] == "differs" for r in codegen)
    (a_ok, a_n), (c_eq, c_n) = tallies(md)
    assert (a_ok, a_n) == (len(access), len(access)) and (c_eq, c_n) == (0, len(codegen))
    notes = re.findall(r"^(\d+)\. (.+)$", md.split("Notes", 1)[1], re.M)
    assert {int(r[5]) for r in codegen} == {int(n) for n, _ in notes}   # every row's note is printed
    assert "8,256" in md and "Test GPU" in md and "2026-11-25" in md
    assert pvn.disagreements(comparison()) == []    # code-generation differences break no rule


def test_a_disagreement_in_an_access_pattern_count_is_reported_as_one():
    data = comparison()
    data["ncu"]["plain_kernel"][LD_SEC] += 1      # one sector more on the GPU
    bad = pvn.disagreements(data)
    assert [(p.kernel, p.metric) for p in bad] == [("plain_kernel", LD_SEC)]
    md = pvn.table(data)
    (a_ok, a_n), _ = tallies(md)
    assert a_ok == a_n - 1
    row = [r for r in rows(md, "## 1.") if r[1] == "plain_kernel" and r[0] == f"`{LD_SEC}`"]
    assert row and row[0][4] == "**no**"


def test_a_missing_number_is_a_disagreement_not_a_silent_gap():
    data = comparison()
    del data["ncu"][PREDICATED][LD_REQ]
    assert [(p.kernel, p.metric) for p in pvn.disagreements(data)] == [(PREDICATED, LD_REQ)]
    row = [r for r in rows(pvn.table(data), "## 1.") if r[1] == PREDICATED and r[0] == f"`{LD_REQ}`"]
    assert row and row[0][3] == "not measured" and row[0][4] == "**missing**"


def test_the_5_percent_rule_applies_only_to_kernels_declared_nondeterministic(monkeypatch):
    data = comparison()
    data["ncu"]["plain_kernel"][LD_SEC] = 256 * 1.04
    assert pvn.disagreements(data)                   # deterministic: must be equal
    monkeypatch.setitem(pvn.TOLERANT, "plain_kernel", "test: racing atomics")
    assert pvn.disagreements(data) == []
    data["ncu"]["plain_kernel"][LD_SEC] = 256 * 1.06
    assert pvn.disagreements(data)


def test_from_json_says_what_is_wrong_with_a_bad_file(tmp_path):
    with pytest.raises(SystemExit, match="no file"):
        pvn.load_json(str(tmp_path / "absent.json"))
    f = tmp_path / "c.json"
    f.write_text("{not json")
    with pytest.raises(SystemExit, match="not JSON"):
        pvn.load_json(str(f))
    f.write_text(json.dumps({"sim": {}}))
    with pytest.raises(SystemExit, match="'sim' and 'ncu'"):
        pvn.load_json(str(f))
    data = comparison()
    del data["device"]
    f.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="--device"):
        pvn.load_json(str(f))
    assert pvn.load_json(str(f), device="Test GPU", date="2026-11-26")["date"] == "2026-11-26"
