"""Example hidden tests for lesson 01, kept out of the learners' repository.

    make grade ARGS="--submission DIR --hidden templates/hidden_example"

A hidden file uses the same plugin and markers as tests/test_01_relu.py. A test marked with an existing
task id ("1.1") adds cases to that task: the task earns its points only if the public *and* the hidden
cases pass. A new task id ("1.H") adds a task of its own. Name hidden files test_NN_topic_<something>.py
(never the name of a public test file) so the grader maps them to their lesson.

These cases catch what the public ones cannot: answers hard-coded for the public sizes, answers cached
between calls, and sizes picked at grading time from the run's seed (CUDA_COURSE_SEED, fresh per run).
"""

from __future__ import annotations

import pytest
import torch

import cudacourse as cc
from cudacourse import check

LESSON = "01_relu"
EXACT = dict(rtol=0.0, atol=0.0)


def _grading_time_size(name: str, lo: int = 2, hi: int = 70_000) -> int:
    """A size drawn from the run's seed: different in every grading run, never a multiple of 32."""
    g = check.rng(f"hidden-size-{name}")
    n = int(torch.randint(lo, hi, (1,), generator=g).item())
    return n if n % 32 else n + 7


@pytest.mark.task("1.1")
@pytest.mark.parametrize("n", [2, 257, 4097, 65_537, "grading-time"])
def test_relu_scalar_hidden_sizes(n: int | str) -> None:
    """relu_v1_scalar on sizes the public tests do not use."""
    m = cc.lesson(LESSON)
    size = _grading_time_size("1.1") if n == "grading-time" else int(n)
    x = check.randn((size,), check.rng(f"hidden-1.1-{n}"), m.device)
    y = check.poisoned(size, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.relu_v1_scalar(x, y, size)
    check.assert_close(y, torch.relu(x), name=f"relu_v1_scalar y (hidden size {size})", task="1.1", **EXACT)


@pytest.mark.task("1.1")
def test_relu_scalar_fresh_inputs_same_size() -> None:
    """Two calls with the same size and different inputs: an answer cached from the first call fails."""
    m = cc.lesson(LESSON)
    n = 1000
    for k in range(3):
        x = check.randn((n,), check.rng(f"hidden-1.1-repeat-{k}"), m.device)
        y = check.poisoned(n, torch.float32, m.device)
        m.relu_v1_scalar(x, y, n)
        check.assert_close(y, torch.relu(x), name=f"relu_v1_scalar y (call {k + 1} of 3, n={n})", task="1.1",
                           **EXACT)


@pytest.mark.task("1.H")
@pytest.mark.parametrize("blocks", [1, 2, 5])
def test_grid_stride_grading_time_size(blocks: int) -> None:
    """Hidden task: relu_v2_grid_stride with a grading-time size and small grids. The size is always more than 5
    blocks of the largest block (1024 threads) cover, so each thread must loop: with sizes from 2 up, a kernel
    without the loop passed whenever the draw was at most 256 (about 1 grading run in 80)."""
    m = cc.lesson(LESSON)
    n = _grading_time_size("1.H", lo=5 * 1024 + 1, hi=20_000)
    x = check.randn((n,), check.rng(f"hidden-1.H-{blocks}"), m.device)
    y = check.poisoned(n, torch.float32, m.device)
    with check.unchanged(x, names=["x"]):
        m.relu_v2_grid_stride(x, y, n, blocks)
    check.assert_close(y, torch.relu(x), name=f"relu_v2_grid_stride y (n={n}, blocks={blocks})", task="1.H",
                       **EXACT)
