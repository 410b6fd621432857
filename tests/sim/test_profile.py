"""The simulator's profile mode: counters checked against patterns whose counts follow by hand from the
definitions in cudacourse/profile.py (warp-level requests, 32-byte sectors, 32 banks of 4 bytes with
half-/quarter-warp phases for 64-/128-bit accesses, active lanes). Written in several styles (templates,
float4 through reinterpret_cast, cooperative-groups tiles) so the counting does not depend on one."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT  # noqa: F401 - puts the repository on sys.path

import cudacourse as cc
from cudacourse.profile import PROFILE_MAX_THREADS, ncu_command, occupancy

SRC = r"""
#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// global loads with a stride in elements (templated on the element type)
template <typename T>
__global__ void strided(const T* __restrict__ x, T* __restrict__ y, int stride, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[(long long)i * stride];
}
void run_strided(const float* x, float* y, int stride, int n) {
    strided<float><<<(n + 63) / 64, 64>>>(x, y, stride, n);
}

// 128-bit loads and stores through reinterpret_cast
__global__ void copy4(const float* x, float* y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) reinterpret_cast<float4*>(y)[i] = reinterpret_cast<const float4*>(x)[i];
}
void run_copy4(const float* x, float* y, int n4) { copy4<<<(n4 + 31) / 32, 32>>>(x, y, n4); }

// one warp writes a 32x32 tile column-wise (stride `pitch` words) and reads it back row-wise
template <int PITCH>
__global__ void tile(float* out) {
    __shared__ float t[32 * PITCH];
    int lane = threadIdx.x;
    for (int r = 0; r < 32; ++r) t[lane * PITCH + r] = (float)(lane + r);
    __syncthreads();
    float s = 0.0f;
    for (int r = 0; r < 32; ++r) s += t[r * PITCH + lane] + t[0];   // + broadcast of one word
    out[lane] = s;
}
void run_tile32(float* out) { tile<32><<<1, 32>>>(out); }
void run_tile33(float* out) { tile<33><<<1, 32>>>(out); }

// a branch taken by half of each warp (cooperative-groups tile gives the lane)
__global__ void half_branch(float* y, int n) {
    cg::thread_block_tile<32> w = cg::tiled_partition<32>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (w.thread_rank() < 16 && i < n) y[i] = 2.0f * y[i];
}
void run_half(float* y, int n) { half_branch<<<(n + 127) / 128, 128>>>(y, n); }

// 64-bit shared accesses: 32 lanes reading consecutive doubles take two half-warp phases, no conflict
__global__ void dbl(double* out) {
    __shared__ double s[64];
    s[threadIdx.x] = threadIdx.x; s[threadIdx.x + 32] = 0.0;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
void run_dbl(double* out) { dbl<<<1, 32>>>(out); }

// a large launch: sampled
__global__ void big(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1.0f;
}
void run_big(float* y, int n) { big<<<(n + 255) / 256, 256>>>(y, n); }
"""


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    p = tmp_path_factory.mktemp("prof") / "patterns.cu"
    p.write_text(SRC)
    mod = cc.load(p, backend="sim", profile="branches")
    yield mod
    mod.close()


def _k(m, name):
    return m.profile_report().kernel(name)


def test_stride_1_floats_take_4_sectors_per_request_and_stride_32_take_32(m):
    x = torch.randn(32 * 200)
    y = torch.full((200,), float("nan"))
    m.run_strided(x, y, 1, 200)
    assert torch.equal(y, x[:200])
    k = _k(m, "strided")
    mm = k.metrics
    # 200 threads: 7 warps (the last with 8 lanes): 4 sectors per full warp, 1 for the 8-lane warp
    assert mm["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 7
    assert mm["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 6 * 4 + 1
    assert mm["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"] == 6 * 4 + 1
    assert mm["sim__global_efficiency_pct"] == pytest.approx(100.0)
    m.run_strided(x, y, 32, 192)
    mm = _k(m, "strided").metrics
    assert mm["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 6
    assert mm["sim__sectors_per_request_global_ld"] == 32
    assert mm["sim__global_efficiency_pct"] < 60   # loads waste 7/8 of each sector; stores are perfect
    row = [s for s in _k(m, "strided").lines if s.space == "global" and s.op == "ld"]
    assert len(row) == 1 and row[0].buffer == "x" and row[0].line == SRC.count("\n", 0, SRC.index("y[i] = x[")) + 1


def test_float4_through_reinterpret_cast_is_one_request_of_16_sectors(m):
    x = torch.randn(4 * 64)
    y = torch.full_like(x, float("nan"))
    m.run_copy4(x, y, 64)
    assert torch.equal(x, y)
    mm = _k(m, "copy4").metrics
    assert mm["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 2          # 2 warps, one LDG.128 each
    assert mm["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 2 * 16      # 512 bytes per warp
    assert mm["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"] == 2
    assert mm["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"] == 32


def test_column_writes_to_an_unpadded_tile_are_32_way_conflicts_and_padding_removes_them(m):
    out = torch.full((32,), float("nan"))
    m.run_tile32(out)
    k = _k(m, "tile")
    mm = k.metrics
    assert mm["smsp__inst_executed_op_shared_st.sum"] == 32
    assert mm["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"] == 32 * 31  # every store: 32 wavefronts
    # row reads are conflict-free, and t[0] read by every lane is a broadcast
    assert mm["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 0
    # 32 row reads, plus t[0] once (hoisted out of the loop: it is loop-invariant) or 32 times
    assert mm["smsp__inst_executed_op_shared_ld.sum"] in (33, 64)
    assert mm["sim__barriers"] == 1
    want = torch.tensor([sum(float(r + c) + 0.0 for r in range(32)) for c in range(32)])
    m.run_tile33(out)
    mm = _k(m, "tile").metrics
    assert mm["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"] == 0
    assert mm["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 0
    assert torch.allclose(out, want)


def test_a_branch_taken_by_16_lanes_shows_16_active_lanes(m):
    y = torch.randn(256)
    y0 = y.clone()
    m.run_half(y, 256)
    lane = torch.arange(256) % 32
    assert torch.equal(y, torch.where(lane < 16, 2 * y0, y0))
    k = _k(m, "half_branch")
    st = [s for s in k.lines if s.space == "global" and s.op == "st"]
    assert st and all(s.active_lanes == 16 for s in st)
    assert k.metrics["sim__useful_lanes_pct"] < 100.0          # basic blocks entered by 16 lanes
    assert k.metrics["sim__active_lanes_per_request"] == 16     # the global store is the only memory access
    assert k.metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"] == 8 * 2   # 16 floats: 2 sectors per warp


def test_64_bit_shared_accesses_are_two_half_warp_phases_without_conflicts(m):
    out = torch.full((32,), float("nan"), dtype=torch.float64)
    m.run_dbl(out)
    assert torch.equal(out, torch.arange(32, dtype=torch.float64))
    mm = _k(m, "dbl").metrics
    assert mm["smsp__inst_executed_op_shared_ld.sum"] == 1
    assert mm["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] == 2
    assert mm["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 0


def test_a_large_launch_is_sampled_and_says_so(m):
    n = 2 * PROFILE_MAX_THREADS + 1000
    y = torch.zeros(n)
    m.run_big(y, n)
    assert torch.all(y == 1.0)            # every block still ran
    k = _k(m, "big")
    assert k.sampled and 0 < k.blocks_profiled < k.blocks
    assert "SAMPLED" in str(m.profile_report())


def test_report_text_uses_nsight_compute_names_and_the_learner_lines(m):
    m.run_copy4(torch.randn(128), torch.zeros(128), 32)
    text = str(m.profile_report())
    assert "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum" in text and "copy4" in text
    with pytest.raises(KeyError, match="copy4"):
        m.profile_report().kernel("nonexistent")


def test_occupancy_limits_follow_the_h100_numbers():
    o = occupancy(256, 0, 32)
    assert o["sm__maximum_warps_per_active_cycle_pct"] == 100.0
    o = occupancy(256, 0, 128)               # 128 regs x 256 threads: 2 blocks = 16 warps
    assert o["launch__occupancy_limit_registers"] == 2 and o["sm__maximum_warps_per_active_cycle_pct"] == 25.0
    o = occupancy(128, 100 * 1024, None)     # 100 KB per block (+1 KB reserved): 2 blocks
    assert o["launch__occupancy_limit_shared_mem"] == 2


def test_profile_on_cuda_names_the_nsight_compute_command(tmp_path):
    assert "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum" in ncu_command("python x.py")
    from cudacourse.profile import require_sim

    with pytest.raises(ValueError, match="ncu --metrics"):
        require_sim("cuda", "k.cu", ["f"], False)


def test_a_module_loaded_without_profile_says_how_to_get_one():
    from cudacourse.profile import report

    with pytest.raises(ValueError, match="profile=True"):
        report(None, "k.cu")


def test_pictures_draw_from_the_recorded_accesses(m):
    pytest.importorskip("matplotlib")
    from cudacourse import plot

    m.run_strided(torch.randn(32 * 64), torch.zeros(64), 32, 64)
    lazy = m.profile_report()                 # accesses fetched on first use: valid until the next call
    k = m.profile_report(trace=True).kernel("strided")
    loads = [t for t in k.trace if t[3] == "x" and t[1] == "ld"]
    assert sorted(t[6] for t in loads) == [32 * i for i in range(64)]   # element indices of x, stride 32
    fig = plot.coalescing_map(k, "x", op="ld")
    assert "32 sectors" in fig.axes[0].get_title()
    plot.access_map(k, "y", shape=(4, 16))
    m.run_tile32(torch.zeros(32))
    fig = plot.bank_map(m.profile_report(trace=True).kernel("tile"), op="st")
    assert "up to 32 lanes per bank" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="called again"):
        _ = lazy.kernel("strided").trace
