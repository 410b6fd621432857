"""Synchronisation: __syncthreads variants, warp collectives (shuffle width semantics, votes, __syncwarp,
__activemask), cooperative groups, and the diagnosis of bad masks."""

from __future__ import annotations

import pytest
import torch
from conftest import build

from cudacourse.errors import BarrierError

SRC = r"""
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

__global__ void barrier_ops(const int* pred, int* out) {
    int t = threadIdx.x;
    int c = __syncthreads_count(pred[t]);
    int a = __syncthreads_and(pred[t]);
    int o = __syncthreads_or(pred[t]);
    out[t * 3 + 0] = c; out[t * 3 + 1] = a; out[t * 3 + 2] = o;
}
void barriers(const int* pred, int* out) { barrier_ops<<<1, 64>>>(pred, out); }

// out: 6 results per lane: shfl(src=3,w), up(2,w), down(2,w), xor(1,w), xor(5,w), shfl(lane+1,w)
__global__ void shuffles(const int* v, int* out, int width) {
    int t = threadIdx.x;
    int x = v[t];
    out[t * 6 + 0] = __shfl_sync(0xffffffff, x, 3, width);
    out[t * 6 + 1] = __shfl_up_sync(0xffffffff, x, 2, width);
    out[t * 6 + 2] = __shfl_down_sync(0xffffffff, x, 2, width);
    out[t * 6 + 3] = __shfl_xor_sync(0xffffffff, x, 1, width);
    out[t * 6 + 4] = __shfl_xor_sync(0xffffffff, x, 5, width);
    out[t * 6 + 5] = __shfl_sync(0xffffffff, x, (t & 31) + 1, width);
}
void shfl(const int* v, int* out, int width) { shuffles<<<1, 64>>>(v, out, width); }

__global__ void shfl_float(const float* v, float* out) {
    float x = v[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffff, x, o);
    double d = (double)v[threadIdx.x];
    d = __shfl_sync(0xffffffff, d, 0);
    if ((threadIdx.x & 31) == 0) out[threadIdx.x / 32] = x + (float)(d - d);
}
void warp_sum(const float* v, float* out) { shfl_float<<<1, 64>>>(v, out); }

__global__ void votes(const int* pred, unsigned* out) {
    int t = threadIdx.x;
    unsigned b = __ballot_sync(0xffffffff, pred[t]);
    int an = __any_sync(0xffffffff, pred[t]);
    int al = __all_sync(0xffffffff, pred[t]);
    __syncwarp();
    unsigned act = __activemask();
    out[t * 4 + 0] = b; out[t * 4 + 1] = an; out[t * 4 + 2] = al; out[t * 4 + 3] = act;
}
void vote(const int* pred, unsigned* out) { votes<<<1, 64>>>(pred, out); }

__global__ void partial_mask(const int* v, int* out) {
    int t = threadIdx.x;
    if (t < 16) {
        unsigned m = 0xffffu;
        int x = v[t];
        for (int o = 8; o > 0; o >>= 1) x += __shfl_down_sync(m, x, o, 16);
        __syncwarp(m);
        out[t] = x;
    } else {
        out[t] = -1;
    }
}
void partial(const int* v, int* out) { partial_mask<<<1, 32>>>(v, out); }

__global__ void cg_kernel(const float* v, float* out, int* meta) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<8> tile = cg::tiled_partition<8>(block);
    float x = v[block.thread_rank()];
    float s = cg::reduce(tile, x, cg::plus<float>());
    float mx = cg::reduce(tile, x, cg::greater<float>());
    float mn = cg::reduce(tile, x, cg::less<float>());
    float d = x;
    for (int o = tile.size() / 2; o > 0; o /= 2) d += tile.shfl_down(d, o);
    float first = tile.shfl(x, 0);
    float up = tile.shfl_up(x, 1);
    float xr = tile.shfl_xor(x, 1);
    tile.sync();
    block.sync();
    int r = block.thread_rank();
    out[r * 7 + 0] = s; out[r * 7 + 1] = mx; out[r * 7 + 2] = mn; out[r * 7 + 3] = d;
    out[r * 7 + 4] = first; out[r * 7 + 5] = up; out[r * 7 + 6] = xr;
    meta[r * 3 + 0] = tile.thread_rank(); meta[r * 3 + 1] = tile.meta_group_rank(); meta[r * 3 + 2] = block.size();
}
void coop(const float* v, float* out, int* meta) { cg_kernel<<<1, 64>>>(v, out, meta); }

__global__ void bad_mask_self(int* out) {
    int t = threadIdx.x;
    out[t] = __shfl_sync(0x0000ffffu, t, 0);
}
void mask_excludes_caller(int* out) { bad_mask_self<<<1, 32>>>(out); }

__global__ void exited_lanes(int* out) {
    int t = threadIdx.x;
    if (t >= 20) return;
    out[t] = __ballot_sync(0xffffffff, t & 1);
}
void mask_names_exited(int* out) { exited_lanes<<<1, 32>>>(out); }
"""


@pytest.fixture(scope="module")
def lib():
    lib = build(SRC, "sync.cu")
    yield lib
    lib.close()


def test_syncthreads_count_and_or(lib) -> None:
    pred = torch.zeros(64, dtype=torch.int32)
    pred[[3, 10, 40]] = 1
    out = torch.zeros(64 * 3, dtype=torch.int32)
    lib.call("barriers", [pred, out])
    assert out.view(64, 3).tolist() == [[3, 0, 1]] * 64
    lib.call("barriers", [torch.ones(64, dtype=torch.int32), out])
    assert out.view(64, 3).tolist() == [[64, 1, 1]] * 64


def _expected_shuffles(v: list[int], width: int) -> list[list[int]]:
    res = []
    for t in range(64):
        lane = t % 32
        base = t - lane
        seg = lane - lane % width

        def val(src_lane: int, base: int = base) -> int:
            return v[base + src_lane]

        r = [val(seg + 3 % width)]
        r.append(val(lane - 2) if lane - 2 >= seg else v[t])
        r.append(val(lane + 2) if lane + 2 < seg + width else v[t])
        for m in (1, 5):
            s = lane ^ m
            r.append(val(s) if s < seg + width else v[t])
        r.append(val(seg + ((lane + 1) % width)))
        res.append(r)
    return res


@pytest.mark.parametrize("width", [32, 16, 8, 4])
def test_shuffle_width_semantics(lib, width: int) -> None:
    v = torch.arange(100, 164, dtype=torch.int32)
    out = torch.zeros(64 * 6, dtype=torch.int32)
    lib.call("shfl", [v, out, width])
    assert out.view(64, 6).tolist() == _expected_shuffles(v.tolist(), width)


def test_warp_sum_float_and_double_shuffle(lib) -> None:
    v = torch.randn(64)
    out = torch.zeros(2)
    lib.call("warp_sum", [v, out])
    assert torch.allclose(out, v.view(2, 32).sum(1), atol=1e-5)


def test_votes_and_activemask(lib) -> None:
    pred = torch.zeros(64, dtype=torch.int32)
    pred[[1, 4]] = 1
    pred[32:] = 1
    out = torch.zeros(64 * 4, dtype=torch.int32)
    lib.call("vote", [pred, out])
    r = out.view(64, 4).tolist()
    assert r[0] == [0b10010, 1, 0, -1]
    assert r[40] == [-1, 1, 1, -1]  # 0xffffffff as int32


def test_partial_mask_shuffle(lib) -> None:
    v = torch.arange(32, dtype=torch.int32)
    out = torch.zeros(32, dtype=torch.int32)
    lib.call("partial", [v, out])
    assert out[0].item() == sum(range(16))
    assert out[16:].tolist() == [-1] * 16


def test_cooperative_groups(lib) -> None:
    v = torch.randn(64)
    out = torch.zeros(64 * 7)
    meta = torch.zeros(64 * 3, dtype=torch.int32)
    lib.call("coop", [v, out, meta])
    r = out.view(64, 7)
    t = v.view(8, 8)
    assert torch.allclose(r[:, 0], t.sum(1).repeat_interleave(8), atol=1e-5)
    assert torch.equal(r[:, 1], t.max(1).values.repeat_interleave(8))
    assert torch.equal(r[:, 2], t.min(1).values.repeat_interleave(8))
    assert torch.allclose(r[::8, 3], t.sum(1), atol=1e-5)
    assert torch.equal(r[:, 4], t[:, 0].repeat_interleave(8))
    up = t.clone()
    up[:, 1:] = t[:, :-1]
    assert torch.equal(r[:, 5], up.reshape(-1))
    assert torch.equal(r[:, 6], t[:, [1, 0, 3, 2, 5, 4, 7, 6]].reshape(-1))
    m = meta.view(64, 3)
    assert m[:, 0].tolist() == [i % 8 for i in range(64)]
    assert m[:, 1].tolist() == [i // 8 for i in range(64)]
    assert set(m[:, 2].tolist()) == {64}


def test_mask_excluding_the_caller_is_reported(lib) -> None:
    with pytest.raises(BarrierError, match="does not include its own lane"):
        lib.call("mask_excludes_caller", [torch.zeros(32, dtype=torch.int32)])


def test_mask_naming_exited_lanes_is_reported(lib) -> None:
    with pytest.raises(BarrierError, match="already exited") as ei:
        lib.call("mask_names_exited", [torch.zeros(32, dtype=torch.int32)])
    assert ei.value.line is not None and ei.value.kernel == "exited_lanes"


@pytest.mark.parametrize("order", ["reverse", "shuffle:7"])
def test_orders_give_same_collective_results(order: str) -> None:
    lib = build(SRC, "sync.cu", order=order)
    try:
        v = torch.arange(100, 164, dtype=torch.int32)
        out = torch.zeros(64 * 6, dtype=torch.int32)
        lib.call("shfl", [v, out, 8])
        assert out.view(64, 6).tolist() == _expected_shuffles(v.tolist(), 8)
    finally:
        lib.close()


def test_order_from_environment(monkeypatch) -> None:
    from cudacourse.sim.build import parse_order

    monkeypatch.setenv("CUDA_COURSE_SIM_ORDER", "shuffle:42")
    assert parse_order(None) == (2, 42)
    assert parse_order("reverse") == (1, 1)
    monkeypatch.delenv("CUDA_COURSE_SIM_ORDER")
    assert parse_order(None) == (0, 1)
    with pytest.raises(ValueError):
        parse_order("sideways")
