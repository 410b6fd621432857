"""The time estimate (cudacourse/estimate.py) and its committed calibration (results/cpu/estimate_calibration.*).

The model's terms are checked on hand-made counters. The error table is kept honest twice (issue 39, item 4):
the whole table is recomputed from the committed simulator counters (results/cpu/estimate_counters.json) with
today's model and today's committed GPU results, and must be what is committed and no worse; a sample of rows,
one of each kind of call, is rerun through today's simulator and must leave the table no worse.
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


def _committed() -> dict:
    return json.loads((ROOT / "results/cpu/estimate_calibration.json").read_text())


def _no_worse(tab: list[dict], committed: dict, cal: object) -> None:
    """Every summary figure of ``tab`` is at least as good as the committed one (0.5% of slack for rounding)."""
    for gpu in ("H100", "H200"):
        now, was = cal.summary(tab, gpu), committed["summary"][gpu]  # type: ignore[attr-defined]
        for k in ("median_all", "worst_all", "median_memory", "worst_memory"):
            assert now[k] <= was[k] + 0.005, f"{gpu} {k}: {now[k]:.3f}, worse than the committed {was[k]:.3f}"
        for g, rho in was["rank"].items():
            assert now["rank"][g] >= rho - 1e-9, f"{gpu} rank correlation of {g}: {now['rank'][g]:.2f} < {rho:.2f}"


def test_committed_table_is_what_the_committed_counters_and_todays_model_give() -> None:
    """The whole error table (both GPUs, every row) recomputed from the committed simulator counters with today's
    estimate.py and today's committed GPU results: no summary figure worse than committed, and every row as
    committed (a model change, better or worse, reruns benchmarks/estimate_calibration.py: seconds with
    --counters results/cpu/estimate_counters.json)."""
    committed = _committed()
    assert committed["params"] == pytest.approx(es.CALIBRATED), "estimate.CALIBRATED differs from the committed table"
    cal = _calibration()
    rs = cal.rows()
    counts = cal.read_counters()
    assert set(counts) == {f"{r.group}|{r.name}" for r in rs}, "the committed counters and the rows differ"
    tab = cal.table(rs, counts, es.CALIBRATED)
    _no_worse(tab, committed, cal)
    now = {(x["gpu"], x["group"], x["name"]): (x["measured_ms"], x["predicted_ms"]) for x in tab}
    was = {(x["gpu"], x["group"], x["name"]): (x["measured_ms"], x["predicted_ms"]) for x in committed["rows"]}
    assert now.keys() == was.keys()
    stale = [f"{k}: now {now[k]}, committed {was[k]}" for k in now if now[k] != pytest.approx(was[k], rel=1e-9)]
    assert not stale, ("results/cpu/estimate_calibration.* are stale: rerun benchmarks/estimate_calibration.py\n  " +
                       "\n  ".join(stale))


def test_the_table_fails_a_worse_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above has teeth: a model that ignores the uncoalesced-access term (l1) is worse, and is caught."""
    cal = _calibration()
    rs = cal.rows()
    tab = cal.table(rs, cal.read_counters(), {**es.CALIBRATED, "l1_bytes_per_clk": 1e9})
    with pytest.raises(AssertionError, match="worse than the committed|rank correlation"):
        _no_worse(tab, _committed(), cal)


# One row of each kind of call: a 1-D launch, a multi-pass reduction (one call per pass), the same launcher at the
# same small sizes over rows of two widths (a run cache keyed by the size alone once gave the second the first
# one's counters), a two-dimensional softmax, and a register-tiled GEMM (work in n^3, grid in n^2; 3 s to simulate,
# where v1-v4 take 9-17 s on a busy machine).
SAMPLE = [("relu 2^28 fp32", "relu_v3_float4"), ("sum 2^28 fp32", "reduce_v5_warp_shuffle (multi-pass)"),
          ("row sum 32768x4096 fp32", "row_sum (warp per row)"), ("row sum 131072x1024 fp32", "row_sum (warp per row)"),
          ("softmax 8192x16384 fp32", "softmax_v2_warp_per_row"), ("sgemm 2048^3 fp32", "sgemm_v5_2d")]


@pytest.mark.parametrize(("group", "name"), SAMPLE)
def test_todays_simulator_makes_the_table_no_worse(group: str, name: str) -> None:
    """A sampled row rerun through today's simulator (two small sizes, extrapolated), put in place of its committed
    counters: the table is no worse than committed, and the row's error grows by at most 2 points. (The whole
    table takes minutes: benchmarks/estimate_calibration.py; one row per test spreads the sample over workers.)"""
    cal = _calibration()
    rs = {(r.group, r.name): r for r in cal.rows()}
    counts = cal.read_counters()
    counts[f"{group}|{name}"] = [cal.launches_at_full(c) for c in rs[(group, name)].calls]
    tab = cal.table(list(rs.values()), counts, es.CALIBRATED)
    committed = _committed()
    _no_worse(tab, committed, cal)
    was = {(x["gpu"], x["group"], x["name"]): x["rel_error"] for x in committed["rows"]}
    for x in tab:
        if (x["group"], x["name"]) == (group, name):
            old = was[(x["gpu"], group, name)]
            assert abs(x["rel_error"]) <= abs(old) + 0.02, (
                f"{x['gpu']} {group} | {name}: error {x['rel_error']:+.2f}, committed {old:+.2f}")


# ----------------------------------------------------------------------------------------------------
# The speed tasks' estimates (cudacourse/speed_estimate.py): what `make check` shows on the simulator
# ----------------------------------------------------------------------------------------------------


def _task(tid: str):  # noqa: ANN202 - a course.Task
    from cudacourse.course import course

    return next(t for t in course().tasks() if t.id == tid)


def test_a_speed_task_estimate_is_the_tables_and_says_it_is_no_grade() -> None:
    from cudacourse import speed_estimate as se
    from cudacourse.course import course

    [e] = se.estimate_task(_task("1.7"), course().kernel_dir("01_relu", "solution"))
    row = {(x["gpu"], x["name"]): x for x in _committed()["rows"]}
    for gpu in ("H100", "H200"):  # the same calls as the calibration's relu_v3_float4 row, so the same estimate
        assert e.ms[gpu] == pytest.approx(row[(gpu, "relu_v3_float4")]["predicted_ms"], rel=1e-6)
        copy_ms = 8 * 2**28 / (es.GPUS[gpu].copy_gbs * 1e9) * 1e3
        assert e.ratio[gpu] == pytest.approx(copy_ms / e.ms[gpu])
    lines = e.lines()
    assert lines[0] == "task 1.7, relu_v3_float4 on 2^28 floats:"
    assert all("(not graded: estimates are not grades)" in ln and "estimated on an H" in ln for ln in lines[1:])
    assert f"of copy, target {_task('1.7').target:g}" in lines[1]  # lesson.toml's target, whatever it is now


def test_a_reference_measured_on_the_gpu_is_named_with_its_time() -> None:
    from cudacourse import speed_estimate as se
    from cudacourse.course import course

    [e] = se.estimate_task(_task("2.7"), course().kernel_dir("02_reduce", "solution"))
    h100 = se.measured_ms("H100", "sum 2^28 fp32", "torch.sum")
    assert h100 is not None and e.ratio["H100"] == pytest.approx(h100 / e.ms["H100"])
    assert f"torch.sum ({h100:.3g} ms, measured on the H100)" in "\n".join(e.lines())


def test_a_wrong_kernel_gets_no_estimate(tmp_path: Path) -> None:
    """The stub's relu_v3_float4 (a TODO: it writes nothing) must not get a time: it did no work."""
    from cudacourse import speed_estimate as se
    from cudacourse.course import course
    from cudacourse.stubs import expected

    stub = expected(course().kernel_dir("01_relu", "solution") / "relu.cu")
    (tmp_path / "relu.cu").write_text(stub if isinstance(stub, str) else stub.decode())
    [e] = se.estimate_task(_task("1.7"), tmp_path)
    assert not e.ms and "no estimate" in e.why_not and "task 1.3" in e.why_not, e.why_not
    assert "not graded: estimates are not grades" in e.lines()[0]


@pytest.mark.parametrize(("tid", "words"), [("5.8", "tensor-core"), ("6.8", "outside the calibration"),
                                            ("7.6", "host work"), ("7.5", "host work"),
                                            ("4.12", "no committed measurement")])
def test_what_the_model_cannot_estimate_says_so(tid: str, words: str) -> None:
    """Tensor cores, cuBLAS and torch calls, host work (streams, graphs, torch.compile): no number, a reason."""
    from cudacourse import speed_estimate as se

    task = _task(tid)
    assert task.gpu
    [e] = se.estimate_task(task, Path("/nonexistent"))
    assert not e.ms and e.why_not.startswith("no estimate") and words in e.why_not, e.why_not


def test_the_chart_of_a_lesson_is_labelled_as_an_estimate() -> None:
    from cudacourse import speed_estimate as se

    fig = se.chart("01_relu")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("estimate" in t and "not a measurement" in t for t in labels), labels
    assert any("measured" in t for t in labels)
    names = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "relu 2^28 fp32 | relu_v3_float4" in names
    with pytest.raises(ValueError, match="no calibration rows"):
        se.calibration_rows("07_host_side")


# ----------------------------------------------------------------------------------------------------
# `cudacourse profile`: the estimate beside the counters, and no number where there is nothing to count
# ----------------------------------------------------------------------------------------------------


def test_profile_prints_the_estimate_beside_the_counters(capsys: pytest.CaptureFixture[str]) -> None:
    from cudacourse import profile_cli

    assert profile_cli.main(["01_relu", "relu_v3_float4", "--impl", "solution", "--size", "65536"]) == 0
    out = capsys.readouterr().out
    assert "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum" in out  # the counters
    for gpu in ("H100 SXM (80 GB HBM3)", "H200 (141 GB HBM3e)"):
        assert f"estimate on an {gpu} at this call's sizes (n=65536) (not a measurement;" in out, out[-1500:]
    assert "estimate relu_v3_float4_kernel: " in out and "bound by " in out


def test_profile_of_what_the_simulator_does_not_count_gives_no_number(capsys: pytest.CaptureFixture[str]) -> None:
    from cudacourse import profile_cli

    assert profile_cli.main(["01_relu", "relu", "--impl", "solution"]) == 2  # relu_triton.py's twin
    out = capsys.readouterr().out
    assert "Triton twin (relu_triton.py)" in out and "no estimate" in out and " ms" not in out
    assert profile_cli.main(["01_relu", "relu_forward", "--impl", "solution"]) == 2  # the torch::Tensor route
    out = capsys.readouterr().out
    assert "relu_forward: no estimate" in out and " ms" not in out
    assert "host work only" in es.render([])  # a call that launched no kernel
