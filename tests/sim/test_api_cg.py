"""<cooperative_groups/reduce.h> and <cooperative_groups/scan.h> on the simulator: cg::reduce with every
operator on tiles of each width and on coalesced groups, inclusive/exclusive scans, under every thread
order and in both modes."""

from __future__ import annotations

import pytest
import torch
from conftest import build

SRC = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
namespace cg = cooperative_groups;

// out[t * 8 + k]: the k-th result of thread t (reduce plus/less/greater/and/or/xor, inclusive, exclusive)
template <unsigned N>
__global__ void tile_kernel(const int* x, int* out) {
    auto block = cg::this_thread_block();
    auto tile = cg::tiled_partition<N>(block);
    int t = block.thread_rank();
    int v = x[t];
    int* o = out + t * 8;
    o[0] = cg::reduce(tile, v, cg::plus<int>());
    o[1] = cg::reduce(tile, v, cg::less<int>());
    o[2] = cg::reduce(tile, v, cg::greater<int>());
    o[3] = cg::reduce(tile, v, cg::bit_and<int>());
    o[4] = cg::reduce(tile, v, cg::bit_or<int>());
    o[5] = cg::reduce(tile, v, cg::bit_xor<int>());
    o[6] = cg::inclusive_scan(tile, v);
    o[7] = cg::exclusive_scan(tile, v, cg::plus<int>());
}
void tiles(const int* x, int* out, int width) {
    switch (width) {
        case 4: tile_kernel<4><<<1, 64>>>(x, out); break;
        case 8: tile_kernel<8><<<1, 64>>>(x, out); break;
        case 16: tile_kernel<16><<<1, 64>>>(x, out); break;
        default: tile_kernel<32><<<1, 64>>>(x, out); break;
    }
}

// Only lanes whose input is odd take part: a coalesced group with holes.
__global__ void coalesced_kernel(const int* x, int* out, float* fout) {
    int t = threadIdx.x;
    int v = x[t];
    if (v & 1) {
        cg::coalesced_group g = cg::coalesced_threads();
        int* o = out + t * 6;
        o[0] = cg::reduce(g, v, cg::plus<int>());
        o[1] = cg::reduce(g, v, cg::greater<int>());
        o[2] = cg::inclusive_scan(g, v);
        o[3] = cg::exclusive_scan(g, v);
        o[4] = (int)g.thread_rank();
        o[5] = (int)g.size();
        fout[t] = cg::reduce(g, 0.5f * v, cg::plus<float>());
    }
}
void coalesced(const int* x, int* out, float* fout) { coalesced_kernel<<<1, 64>>>(x, out, fout); }
"""


def _tile_ref(x: torch.Tensor, width: int) -> torch.Tensor:
    out = torch.zeros(len(x), 8, dtype=torch.int64)
    for s in range(0, len(x), width):
        seg = x[s:s + width].to(torch.int64)
        vals = seg.tolist()
        andv, orv, xorv = vals[0], vals[0], vals[0]
        for v in vals[1:]:
            andv, orv, xorv = andv & v, orv | v, xorv ^ v
        inc = torch.cumsum(seg, 0)
        exc = torch.cat([torch.zeros(1, dtype=torch.int64), inc[:-1]])
        out[s:s + width, 0] = int(seg.sum())
        out[s:s + width, 1] = int(seg.min())
        out[s:s + width, 2] = int(seg.max())
        out[s:s + width, 3] = andv
        out[s:s + width, 4] = orv
        out[s:s + width, 5] = xorv
        out[s:s + width, 6] = inc
        out[s:s + width, 7] = exc
    return out


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle:3"])
@pytest.mark.parametrize("checked", [True, False], ids=["checked", "fast"])
def test_reduce_and_scan_on_tiles(order, checked):
    lib = build(SRC, "cg_api.cu", checked=checked, order=order)
    try:
        g = torch.Generator().manual_seed(11)
        x = torch.randint(-1000, 1000, (64,), generator=g, dtype=torch.int32)
        for width in (4, 8, 16, 32):
            out = torch.full((64 * 8,), -12345, dtype=torch.int32)
            lib.call("tiles", [x, out, width])
            assert torch.equal(out.view(64, 8).to(torch.int64), _tile_ref(x, width)), f"tile width {width}"
    finally:
        lib.close()


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle:5"])
def test_reduce_and_scan_on_a_coalesced_group(order):
    lib = build(SRC, "cg_api.cu", order=order)
    try:
        g = torch.Generator().manual_seed(12)
        x = torch.randint(0, 1000, (64,), generator=g, dtype=torch.int32)
        out = torch.full((64 * 6,), -12345, dtype=torch.int32)
        fout = torch.full((64,), float("nan"))
        lib.call("coalesced", [x, out, fout])
        o = out.view(64, 6)
        for w in range(2):
            lanes = [t for t in range(32 * w, 32 * w + 32) if int(x[t]) & 1]
            vals = [int(x[t]) for t in lanes]
            assert lanes, "the seed must give odd inputs"
            run = 0
            for r, t in enumerate(lanes):
                assert o[t].tolist() == [sum(vals), max(vals), run + vals[r], run, r, len(vals)], f"thread {t}"
                assert abs(float(fout[t]) - 0.5 * sum(vals)) < 1e-3
                run += vals[r]
        idle = [t for t in range(64) if not int(x[t]) & 1]
        assert all(o[t].tolist() == [-12345] * 6 for t in idle), "non-members must not write"
    finally:
        lib.close()
