"""cudacourse.speed on a simulated GPU clock: the judging rules of issue 36 without a GPU.

``bench.time_samples`` is replaced by a clock that advances by what each simulated launcher says one call costs, so
these tests decide exactly what was "measured": skipped work is free, an honest call costs its time. Everything
else (buffer sets, poison, interleaving, the checks after timing, the ceilings, the bounded re-measurement) is the
real code. The same rules run on the GPU in every speed test of lessons 01-06.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from cudacourse import speed
from cudacourse.check import CheckFailure

N = 1000
COPY_GBS = 1000.0
NBYTES = 8 * N  # read and write N floats
HONEST_MS = NBYTES / (0.9 * COPY_GBS * 1e6)  # one call at 0.9 of the copy bandwidth, in ms


class Clock:
    """Simulated GPU time: launchers ``spend`` milliseconds; a sample is the time its calls spent."""

    def __init__(self) -> None:
        self.now = 0.0
        self.wall = False  # the grader's wall path: a sample is ``group`` calls (else one call, CUDA events)
        self.rounds = 0  # time_samples calls: one per side per round

    def spend(self, ms: float) -> None:
        self.now += ms

    def time_samples(self, fn: Callable[[], object], *, setup: Callable[[], object] | None = None,
                     reps: int = 50, group: int = 1, **_: Any) -> list[float]:
        """bench.time_samples' contract: warm-up calls, then per sample ``setup()`` and one call (events) or
        ``group`` calls (wall path)."""
        self.rounds += 1
        for _ in range(group):
            fn()
        k = group if self.wall else 1
        out = []
        for _ in range(min(reps, 5)):
            if setup is not None:
                setup()
            t0 = self.now
            for _ in range(k):
                fn()
            out.append((self.now - t0) / k)
        return out


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr("cudacourse.bench.time_samples", c.time_samples)
    monkeypatch.setattr(speed, "copy_gbs", lambda: COPY_GBS)
    monkeypatch.setattr(speed, "peak_tflops", lambda kind: 100.0)
    monkeypatch.setattr("cudacourse.loader.uses_gpu_worker", lambda backend="auto": c.wall)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    return c


def _sets() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(N, generator=g) for _ in range(speed.MIN_SETS)]
    return xs, [torch.full_like(x, float("nan")) for x in xs]


def _judge(call: Callable[[int], object], xs: list[torch.Tensor], ys: list[torch.Tensor], *,
           ref: speed.Side | None = None, target: float = 0.85, target_of: str = "copy") -> speed.Verdict:
    def ok(i: int) -> None:
        assert torch.equal(ys[i], torch.relu(xs[i])), f"set {i}: {int((ys[i] != torch.relu(xs[i])).sum())} wrong"

    return speed.judge(("01_relu", "1.7"), "relu on 1000 floats", speed.Side("yours", call, lambda i: (ys[i],), ok),
                       ref, sets=speed.MIN_SETS, nbytes=NBYTES, target=target, target_of=target_of)


def test_an_honest_kernel_passes_once_measured(clock: Clock) -> None:
    xs, ys = _sets()

    def relu(i: int) -> None:
        torch.clamp(xs[i], min=0, out=ys[i])
        clock.spend(HONEST_MS)

    v = _judge(relu, xs, ys)
    assert len(v.measurements) == 1 and v.ratio == pytest.approx(0.9)


def test_memo_by_pointer_is_refused_as_too_fast(clock: Clock) -> None:
    xs, ys = _sets()
    seen: set[int] = set()

    def memo(i: int) -> None:
        if ys[i].data_ptr() in seen and not bool(ys[i].isnan().any()):
            return  # "the output already holds the answer"
        seen.add(ys[i].data_ptr())
        torch.clamp(xs[i], min=0, out=ys[i])
        clock.spend(HONEST_MS)

    # poisoned before each sample, it must redo the work: honest time (the poison defeats the memo)...
    assert _judge(memo, xs, ys).ratio == pytest.approx(0.9)

    def blind_memo(i: int) -> None:  # ...and one that trusts its memo blindly leaves poison
        if ys[i].data_ptr() in seen:
            clock.spend(1e-6)
            return
        seen.add(ys[i].data_ptr())
        torch.clamp(xs[i], min=0, out=ys[i])

    seen.clear()
    with pytest.raises(CheckFailure, match="faster than this GPU can run it"):
        _judge(blind_memo, xs, ys)


def test_work_deferred_to_the_next_call_fails_the_check_after_timing(clock: Clock) -> None:
    xs, ys = _sets()
    pending: list[int] = []

    def lazy(i: int) -> None:
        while pending:  # the previous call's work, done now
            j = pending.pop()
            torch.clamp(xs[j], min=0, out=ys[j])
        pending.append(i)
        clock.spend(HONEST_MS)

    with pytest.raises(CheckFailure, match=r"after timing, the output of buffer set \d of 3 is wrong"):
        _judge(lazy, xs, ys)


def test_a_fraction_of_the_work_on_repeated_calls_fails(clock: Clock) -> None:
    xs, ys = _sets()
    calls = [0]

    def partial(i: int) -> None:
        calls[0] += 1
        k = N if calls[0] <= 3 else N // 8  # the whole work for the first (checked) calls only
        torch.clamp(xs[i][:k], min=0, out=ys[i][:k])
        clock.spend(HONEST_MS * k / N)

    with pytest.raises(CheckFailure):
        _judge(partial, xs, ys)


def _ref(clock: Clock, ms: list[float]) -> speed.Side:
    """A reference whose successive measurements cost ``ms`` (one value per measurement, then the last)."""
    state = {"calls": 0}
    per = speed.ROUNDS * (speed.MIN_SETS + 5)  # calls per measurement (warm-up + samples)

    def call(i: int) -> None:
        clock.spend(ms[min(state["calls"] // per, len(ms) - 1)])
        state["calls"] += 1

    return speed.Side("the reference", call)


def test_near_the_target_it_measures_again_and_keeps_the_best(clock: Clock) -> None:
    xs, ys = _sets()

    def relu(i: int) -> None:
        torch.clamp(xs[i], min=0, out=ys[i])
        clock.spend(1.0)

    v = _judge(relu, xs, ys, ref=_ref(clock, [0.96, 1.03]), target=1.0, target_of="reference")
    assert [round(m.ratio, 2) for m in v.measurements] == [0.96, 1.03]
    assert "measured 2 times" in v.message and v.ratio == pytest.approx(1.03)


def test_a_ratio_far_above_the_target_is_measured_in_one_round(clock: Clock) -> None:
    """Rounds beyond the first only matter near the target: a kernel at 2x its target stops after one round of each
    side; one at 1.06x (under ``CLEAR``) gets every round, and its skipped work is still caught after timing."""
    xs, ys = _sets()

    def relu(i: int) -> None:
        torch.clamp(xs[i], min=0, out=ys[i])
        clock.spend(1.0)

    v = _judge(relu, xs, ys, ref=_ref(clock, [2.0]), target=1.0, target_of="reference")
    assert v.ratio == pytest.approx(2.0) and clock.rounds == 2, clock.rounds
    clock.rounds = 0
    _judge(relu, xs, ys, ref=_ref(clock, [1.06]), target=1.0, target_of="reference")
    assert clock.rounds == 2 * speed.ROUNDS, clock.rounds
    calls = [0]

    def skips(i: int) -> None:  # honest for its first calls, then does nothing, at a plausible rate
        calls[0] += 1
        if calls[0] <= speed.MIN_SETS:
            torch.clamp(xs[i], min=0, out=ys[i])
        clock.spend(0.5)

    with pytest.raises(CheckFailure, match=r"after timing"):
        _judge(skips, xs, ys, ref=_ref(clock, [2.0]), target=1.0, target_of="reference")


def test_the_re_measurement_is_bounded_and_a_slow_kernel_fails(clock: Clock) -> None:
    xs, ys = _sets()

    def relu(i: int) -> None:
        torch.clamp(xs[i], min=0, out=ys[i])
        clock.spend(1.0)

    with pytest.raises(CheckFailure, match=r"measured 3 times.*0\.95, 0\.94, 0\.95"):
        _judge(relu, xs, ys, ref=_ref(clock, [0.95, 0.94, 0.95, 2.0]), target=1.0, target_of="reference")
    with pytest.raises(CheckFailure, match=r"0\.50x, target >= 1x\.$"):  # far below: measured once
        _judge(relu, xs, ys, ref=_ref(clock, [0.5]), target=1.0, target_of="reference")


def test_in_place_work_is_restored_and_checked_by_one_more_call(clock: Clock) -> None:
    p0 = torch.randn(N)
    ps = [p0.clone() for _ in range(speed.MIN_SETS)]
    calls = [0]

    def step(i: int) -> None:
        calls[0] += 1
        if calls[0] > 6:  # skip after the warm-up: the step count would show it
            clock.spend(1e-6)
            return
        ps[i].mul_(0.5)
        clock.spend(HONEST_MS)

    def ok(i: int) -> None:
        assert torch.equal(ps[i], p0 * 0.5), "not one step from the start"

    with pytest.raises(CheckFailure):
        speed.judge(("01_relu", "1.7"), "in place", speed.Side("yours", step, check=ok,
                                                                reset=lambda i: speed.restore_(ps[i], p0)),
                    None, sets=speed.MIN_SETS, nbytes=NBYTES)


def test_fewer_than_three_sets_is_a_test_bug(clock: Clock) -> None:
    with pytest.raises(ValueError, match="at least 3 buffer sets"):
        speed.judge(("01_relu", "1.7"), "x", speed.Side("yours", lambda i: None), None, sets=1, nbytes=NBYTES)


def test_every_speed_task_declares_a_target_and_its_margin() -> None:
    """Each graded speed target in lesson.toml has its margin beside it: how far the solution measured above it."""
    from cudacourse.course import course

    missing = [f"{t.lesson} {t.id}" for les in course() for t in les.tasks
               if t.gpu and t.target is not None and t.margin is None]
    assert not missing, f"speed targets without a margin in lesson.toml: {missing}"
    tight = [f"{t.lesson} {t.id}: {t.margin}" for les in course() for t in les.tasks
             if t.margin is not None and t.margin < speed.NEAR]
    assert not tight, (f"speed targets within {speed.NEAR:.0%} of what the solution measures (noise fails a right "
                       f"kernel there): {tight}")


@pytest.mark.parametrize("wall", [False, True], ids=["events", "wall"])
def test_both_timing_paths_catch_skipped_and_deferred_work(clock: Clock, wall: bool) -> None:
    """The grader's wall path (a sample is several calls, every set poisoned before it) catches the same."""
    clock.wall = wall
    xs, ys = _sets()
    seen: set[int] = set()

    def blind_memo(i: int) -> None:
        if ys[i].data_ptr() not in seen:
            seen.add(ys[i].data_ptr())
            torch.clamp(xs[i], min=0, out=ys[i])
        clock.spend(HONEST_MS)  # (as slow as honest work: only the check can tell)

    with pytest.raises(CheckFailure, match="after timing"):
        _judge(blind_memo, xs, ys)
    pending: list[int] = []

    def lazy(i: int) -> None:
        while pending:
            j = pending.pop()
            torch.clamp(xs[j], min=0, out=ys[j])
        pending.append(i)
        clock.spend(HONEST_MS)

    if not wall:
        with pytest.raises(CheckFailure, match="after timing"):
            _judge(lazy, xs, ys)
    else:  # a sample of k calls times k calls' work whichever call does it: deferring gains nothing there
        assert _judge(lazy, xs, ys).ratio == pytest.approx(0.9)


def test_the_distribution_script_reads_what_judge_writes() -> None:
    """benchmarks/speed_distribution.py parses the messages cudacourse.speed writes (pass and fail alike)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "speed_distribution.py"
    spec = importlib.util.spec_from_file_location("speed_distribution", path)
    assert spec is not None and spec.loader is not None
    dist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dist)
    ok = "row_sum 32768x4096: yours 0.130 ms (4121 GB/s), torch.sum(dim=-1) 0.137 ms: 1.05x, target >= 0.9x."
    near = ("adamw_flat: yours 1.0 ms, torch 1.0 ms: 0.84x, target >= 0.85x (measured 3 times, the first within 10% "
            "of the target: 0.80, 0.84, 0.83; the best counts).")
    copy = ("relu: yours 0.505 ms (4255 GB/s), 1.00 of the copy bandwidth measured in this run (4261 GB/s), "
            "target >= 0.85.")
    assert dist.parse({"message": ok}) == ([1.05], 1)
    assert dist.parse({"message": near}) == ([0.84], 3)
    assert dist.parse({"message": copy}) == ([1.0], 1)
    runs = [{"2.8": {"status": "pass", "ratios": [1.05], "measured": 1}},
            {"2.8": {"status": "fail", "ratios": [0.84], "measured": 3}}]
    assert "| 2.8 | 0.9 | 2 | 0.84 | 0.95 | 1.05 | 1 | 1 |" in dist.table(runs, {"2.8": 0.9})
