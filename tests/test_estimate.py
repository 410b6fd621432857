"""The time estimate (cudacourse/estimate.py) and its committed calibration (results/cpu/estimate_calibration.*).

The model's terms are checked on hand-made counters; the calibration test reruns the lesson 01 ReLU group through
the simulator and fails when its errors or its ranking get worse than the committed table says.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from cudacourse import estimate as es

ROOT = Path(__file__).resolve().parent.parent
H100 = es.GPUS["H100"]


def _copy_like(n: int, vec: int = 1, sectors_per_request: float = 4.0) -> es.LaunchCounters:
    """A ReLU-like launch over n floats: one load and one store per element, ``vec`` floats per access."""
    threads = 256
    blocks = n // (threads * vec)
    req = n / (32 * vec)
    sec = req * sectors_per_request * vec
    return es.LaunchCounters("k", blocks, threads, 0, 16, ld_requests=req, sectors=2 * sec,
                             buffer_sectors={"x:ld": sec, "y:st": sec})


def test_a_float4_copy_runs_at_the_measured_copy_bandwidth() -> None:
    n = 1 << 28
    plain = {"overlap_power": math.inf}  # the plain roofline maximum
    e = es.estimate(_copy_like(n, vec=4), H100, {"x": 4 * n, "y": 4 * n}, params=plain)
    assert e.bound == "dram"
    assert e.seconds == pytest.approx(8 * n / (H100.copy_gbs * 1e9) + es.CALIBRATED["launch"], rel=1e-9)
    # the calibrated smooth maximum adds a little for the terms below the bound, never less than the bound
    soft = es.estimate(_copy_like(n, vec=4), H100, {"x": 4 * n, "y": 4 * n})
    assert e.seconds <= soft.seconds <= 1.5 * e.seconds
    # the H200 moves the same bytes faster, by the ratio of the measured copy bandwidths
    e2 = es.estimate(_copy_like(n, vec=4), es.GPUS["H200"], {"x": 4 * n, "y": 4 * n})
    assert e2.seconds < e.seconds


def test_uncoalesced_access_costs_more_than_its_bytes() -> None:
    n = 1 << 26
    caps = {"x": 4 * n, "y": 4 * n}
    good = es.estimate(_copy_like(n), H100, caps)
    bad = es.estimate(_copy_like(n, sectors_per_request=32.0), H100, caps)  # 32 sectors per warp request
    assert bad.parts["l1"] == pytest.approx(8 * good.parts["l1"])
    assert bad.parts["dram"] == good.parts["dram"]  # a buffer moves at most its own bytes from DRAM
    assert bad.seconds > good.seconds


def test_waves_tails_and_occupancy() -> None:
    c = _copy_like(1 << 20)
    one = es.estimate(c, H100)
    # one block more than a full wave (132 SMs x 8 blocks of 256 threads) costs a second wave
    full = es.LaunchCounters("k", 132 * 8, 256, 0, 16, ld_requests=132 * 8 * 8 * 10)
    tail = es.LaunchCounters("k", 132 * 8 + 1, 256, 0, 16, ld_requests=(132 * 8 + 1) * 8 * 10)
    assert es.estimate(full, H100).parts["waves"] == 1 and es.estimate(tail, H100).parts["waves"] == 2
    assert es.estimate(tail, H100).parts["latency"] == pytest.approx(2 * es.estimate(full, H100).parts["latency"])
    # 128 registers per thread halve the resident blocks of 256 threads compared with 64: twice the waves
    lo = es.LaunchCounters("k", 132 * 8, 256, 0, 64, ld_requests=132 * 8 * 8 * 10)
    hi = es.LaunchCounters("k", 132 * 8, 256, 0, 128, ld_requests=132 * 8 * 8 * 10)
    assert es.estimate(hi, H100).parts["waves"] == 2 * es.estimate(lo, H100).parts["waves"]
    assert one.parts["occupancy"] == 1.0
    huge = es.LaunchCounters("k", 10, 256, 300 * 1024, 32)
    assert es.estimate(huge, H100).bound == "cannot launch" and math.isinf(es.estimate(huge, H100).seconds)


def test_unknown_registers_and_unestimable_calls_say_so() -> None:
    e = es.estimate(es.LaunchCounters("k", 1, 32, 0, None), H100)
    assert "registers unknown" in e.note
    assert "no estimate" in es.not_estimated("cuBLAS torch.matmul") and "cuBLAS" in es.not_estimated("cuBLAS")
    assert "no estimate" in es.render([])


def _calibration():  # noqa: ANN202 - the benchmark script as a module
    spec = importlib.util.spec_from_file_location("estimate_calibration", ROOT / "benchmarks/estimate_calibration.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = mod  # type: ignore[union-attr]  # (its dataclasses look their module up there)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_calibration_of_the_relu_group_is_no_worse_than_committed() -> None:
    committed = json.loads((ROOT / "results/cpu/estimate_calibration.json").read_text())
    assert committed["params"] == pytest.approx(es.CALIBRATED), "estimate.CALIBRATED differs from the committed table"
    cal = _calibration()
    rows = [r for r in cal.rows() if r.group == "relu 2^28 fp32"]
    assert len(rows) == 3
    tab = cal.table(rows, cal.collect(rows), es.CALIBRATED)
    old = {(x["gpu"], x["name"]): x for x in committed["rows"]}
    for x in tab:
        was = old[(x["gpu"], x["name"])]
        assert abs(x["rel_error"]) <= abs(was["rel_error"]) + 0.02, (x, was)
    for gpu in ("H100", "H200"):
        now = cal.summary(tab, gpu)["rank"]["relu 2^28 fp32"]
        assert now >= committed["summary"][gpu]["rank"]["relu 2^28 fp32"] - 1e-9
