"""Backend parity: the same kernels on the CPU simulator and on a GPU give the same results.

Runs only where a GPU is present (it compares the two backends); on a CPU-only machine every case is
skipped with that reason. Warp-semantics kernels (shuffles of every width, votes, partial masks,
cooperative groups, __syncthreads_count) must agree exactly; the solutions' kernels within float
tolerance, on identical inputs. The real-world corpus (tests/sim/realworld) runs on the GPU against the
same CPU references that validate it on the simulator (tests/sim/test_realworld.py), and the 16-bit
conversions of the simulator are compared bit for bit with the GPU's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import cudacourse as cc
from cudacourse import check

ROOT = Path(__file__).resolve().parent.parent
# The simulator's own warp-semantics kernels (tests/sim/test_sync.py), read as text so the two test
# folders' conftest modules do not collide.
_sync_text = (ROOT / "tests" / "sim" / "test_sync.py").read_text()
SYNC_SRC = _sync_text.split('SRC = r"""', 1)[1].split('"""', 1)[0]

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="parity compares the simulator with a GPU: no GPU on this machine")

# The bad-mask launchers are undefined behaviour on a GPU (the simulator reports them): not compared.
SYNC_FUNCS = ["barriers", "shfl", "warp_sum", "vote", "partial", "coop"]


def _both(source: str | Path, functions: list[str] | None = None) -> tuple[cc.Module, cc.Module]:
    return cc.load(source, functions, backend="sim"), cc.load(source, functions, backend="cuda")


def _run(m: cc.Module, fn: str, args: list) -> list:
    moved = [a.to(m.device) if isinstance(a, torch.Tensor) else a for a in args]
    getattr(m, fn)(*moved)
    return [a.cpu() if isinstance(a, torch.Tensor) else a for a in moved]


def _shfl_case(width: int) -> Callable[[], list]:
    return lambda: [torch.randint(-1000, 1000, (64,), dtype=torch.int32), torch.zeros(384, dtype=torch.int32), width]


SYNC_CASES: list[tuple[str, Callable[[], list]]] = [
    ("barriers", lambda: [(torch.rand(64) < 0.3).int(), torch.zeros(192, dtype=torch.int32)]),
    *[("shfl", _shfl_case(w)) for w in (32, 16, 8, 4, 2, 1)],
    ("warp_sum", lambda: [torch.randn(64), torch.zeros(2)]),
    ("vote", lambda: [(torch.rand(64) < 0.5).int(), torch.zeros(256, dtype=torch.int32)]),
    ("partial", lambda: [torch.randint(-50, 50, (32,), dtype=torch.int32), torch.zeros(32, dtype=torch.int32)]),
    ("coop", lambda: [torch.randn(64), torch.zeros(448), torch.zeros(192, dtype=torch.int32)]),
]


@pytest.fixture(scope="module")
def sync_modules() -> tuple[cc.Module, cc.Module]:
    return _both(SYNC_SRC, SYNC_FUNCS)


@pytest.mark.parametrize("fn, make", SYNC_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(SYNC_CASES)])
def test_warp_semantics_match_the_gpu(sync_modules, fn: str, make: Callable[[], list]) -> None:
    sim, gpu = sync_modules
    args = make()
    a = _run(sim, fn, [x.clone() if isinstance(x, torch.Tensor) else x for x in args])
    b = _run(gpu, fn, [x.clone() if isinstance(x, torch.Tensor) else x for x in args])
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            if x.dtype.is_floating_point:
                check.assert_close(x, y, name=f"{fn}: sim vs GPU", rtol=1e-5, atol=1e-5)
            else:
                assert torch.equal(x, y), f"{fn}: simulator {x.tolist()[:16]} vs GPU {y.tolist()[:16]}"


def _solution(lesson: str, file: str) -> Path:
    return ROOT / "solutions" / lesson / file


def _sgemm(fn: str) -> Callable[[torch.Generator], tuple[list, list[int]]]:
    def make(g: torch.Generator) -> tuple[list, list[int]]:
        M, N, K = 130, 260, 36
        return [check.randn((M, K), g), check.randn((K, N), g), check.poisoned((M, N)), M, N, K], [2]
    return make


SOLUTION_CASES: list[tuple[str, str, str, Callable[[torch.Generator], tuple[list, list[int]]]]] = [
    ("01_relu", "relu.cu", "relu_v3_float4", lambda g: ([check.randn(1003, g), check.poisoned(1003), 1003], [1])),
    ("01_relu", "relu.cu", "bias_gelu",
     lambda g: ([check.randn((33, 70), g), check.randn(70, g), check.poisoned((33, 70)), 33, 70], [2])),
    ("02_reduce", "reduce.cu", "row_sum",
     lambda g: ([check.randn((17, 1000), g), check.poisoned(17), 17, 1000], [1])),
    ("02_reduce", "reduce.cu", "argmax",
     lambda g: ([check.randn(70001, g), torch.zeros(1, dtype=torch.int64), 70001], [1])),
    ("03_gemm", "gemm.cu", "sgemm_v5_2d", _sgemm("sgemm_v5_2d")),
    ("03_gemm", "gemm.cu", "sgemm_v8_warptile", _sgemm("sgemm_v8_warptile")),
    ("04_transformer", "norms.cu", "softmax",
     lambda g: ([check.randn((9, 4099), g, scale=30.0), check.poisoned((9, 4099)), 9, 4099], [1])),
    ("04_transformer", "norms.cu", "layernorm",
     lambda g: ([check.randn((9, 1000), g), check.randn(1000, g), check.randn(1000, g), check.poisoned((9, 1000)),
                 9, 1000, 1e-5], [3])),
    ("04_transformer", "attention.cu", "attention_flash",
     lambda g: ([check.randn((2 * 100, 3 * 64), g), check.randn((2 * 100, 3 * 64), g),
                 check.randn((2 * 100, 3 * 64), g), check.poisoned((2 * 100, 3 * 64)), 2, 3, 100, 64,
                 1 / math.sqrt(64), 1], [3])),
]


@pytest.mark.parametrize("lesson, file, fn, make", SOLUTION_CASES, ids=[c[2] for c in SOLUTION_CASES])
def test_solution_kernels_match_the_gpu(lesson: str, file: str, fn: str, make) -> None:
    sim, gpu = _both(_solution(lesson, file), [fn])
    args, outs = make(check.rng(f"parity-{fn}"))
    a = _run(sim, fn, [x.clone() if isinstance(x, torch.Tensor) else x for x in args])
    b = _run(gpu, fn, [x.clone() if isinstance(x, torch.Tensor) else x for x in args])
    for i in outs:
        if a[i].dtype.is_floating_point:
            check.assert_close(a[i], b[i], name=f"{fn} output {i}: sim vs GPU", rtol=1e-4, atol=1e-4)
        else:
            assert torch.equal(a[i], b[i]), f"{fn}: simulator {a[i].tolist()} vs GPU {b[i].tolist()}"


# ----------------------------------------------------------------------------------------------------
# The real-world corpus on the GPU, against each file's own CPU reference
# ----------------------------------------------------------------------------------------------------

REALWORLD = ROOT / "tests" / "sim" / "realworld"
REALWORLD_FILES = sorted(REALWORLD.glob("*.cu"))
REALWORLD_SEED = 1234  # the seed tests/sim/test_realworld.py uses


def _inline_common(path: Path) -> str:
    """The file's text with ``#include "common.h"`` replaced by the header (the GPU build compiles text)."""
    return path.read_text().replace('#include "common.h"', (REALWORLD / "common.h").read_text())


@pytest.mark.parametrize("path", REALWORLD_FILES, ids=[p.stem for p in REALWORLD_FILES])
def test_realworld_corpus_validates_on_the_gpu(path: Path) -> None:
    gpu = cc.load(_inline_common(path), ["validate"], backend="cuda")
    report = torch.full((4,), float("nan"), device="cuda")
    gpu.validate(REALWORLD_SEED, report)
    mismatches, checked, max_err, outputs = report.cpu().tolist()
    assert outputs >= 1 and checked > 0, f"{path.name}: validate() compared nothing on the GPU"
    assert mismatches == 0, (f"{path.name} on the GPU: {int(mismatches)} of {int(checked)} values differ from the "
                             f"file's CPU reference (largest error {max_err:g})")


# ----------------------------------------------------------------------------------------------------
# 16-bit conversions: the simulator's bits are the GPU's bits
# ----------------------------------------------------------------------------------------------------

CONVERT_SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void to_float_kernel(const short* bits, int* out, int n, int bf) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float f = bf ? __bfloat162float(__ushort_as_bfloat16((unsigned short)bits[i]))
                 : __half2float(__ushort_as_half((unsigned short)bits[i]));
    out[i] = __float_as_int(f);
}
void to_float(const short* bits, int* out, int n, int bf) {
    to_float_kernel<<<(n + 255) / 256, 256>>>(bits, out, n, bf);
}
__global__ void from_float_kernel(const float* x, short* out, int n, int bf, int mode) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    unsigned short b;
    if (bf) b = __bfloat16_as_ushort(mode == 0 ? __float2bfloat16_rn(v) : mode == 1 ? __float2bfloat16_rz(v)
                                     : mode == 2 ? __float2bfloat16_rd(v) : __float2bfloat16_ru(v));
    else b = __half_as_ushort(mode == 0 ? __float2half_rn(v) : mode == 1 ? __float2half_rz(v)
                              : mode == 2 ? __float2half_rd(v) : __float2half_ru(v));
    out[i] = (short)b;
}
void from_float(const float* x, short* out, int n, int bf, int mode) {
    from_float_kernel<<<(n + 255) / 256, 256>>>(x, out, n, bf, mode);
}
"""


@pytest.fixture(scope="module")
def convert_modules() -> tuple[cc.Module, cc.Module]:
    return _both(CONVERT_SRC, ["to_float", "from_float"])


@pytest.mark.parametrize("bf", [0, 1], ids=["half", "bf16"])
def test_16bit_to_float_matches_the_gpu_bit_for_bit(convert_modules, bf: int) -> None:
    sim, gpu = convert_modules
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    a = _run(sim, "to_float", [bits.clone(), torch.zeros(65536, dtype=torch.int32), 65536, bf])[1]
    b = _run(gpu, "to_float", [bits.clone(), torch.zeros(65536, dtype=torch.int32), 65536, bf])[1]
    diff = (a != b).nonzero().flatten()
    assert len(diff) == 0, f"{len(diff)} patterns differ, first 0x{int(bits[diff[0]]) & 0xFFFF:04x}"


@pytest.mark.parametrize("mode", range(4), ids=["rn", "rz", "rd", "ru"])
@pytest.mark.parametrize("bf", [0, 1], ids=["half", "bf16"])
def test_float_to_16bit_matches_the_gpu_bit_for_bit(convert_modules, bf: int, mode: int) -> None:
    sim, gpu = convert_modules
    g = torch.Generator().manual_seed(13)
    x = torch.cat([torch.randint(-2**31, 2**31 - 1, (300_000,), generator=g, dtype=torch.int32).view(torch.float32),
                   torch.randn(100_000, generator=g) * 1e4,
                   torch.tensor([0.0, -0.0, 65504.0, 65520.0, 65519.99, 2.0**-24, 2.0**-25, 3e38, float("inf"),
                                 float("-inf"), float("nan")])])
    n = len(x)
    a = _run(sim, "from_float", [x.clone(), torch.zeros(n, dtype=torch.int16), n, bf, mode])[1]
    b = _run(gpu, "from_float", [x.clone(), torch.zeros(n, dtype=torch.int16), n, bf, mode])[1]
    diff = (a != b).nonzero().flatten()
    assert len(diff) == 0, (f"{len(diff)} values differ, first x={float(x[diff[0]])!r}: simulator "
                            f"0x{int(a[diff[0]]) & 0xFFFF:04x}, GPU 0x{int(b[diff[0]]) & 0xFFFF:04x}")
