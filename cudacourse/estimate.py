"""How fast would it be? An estimated GPU time for a kernel call the simulator ran (an estimate, never a grade).

From the simulator's counters (``cudacourse.profile``: global requests and sectors per buffer, shared-memory
wavefronts, barriers, blocks) and the compiled kernel's registers (``cudacourse.sass``, nvcc) this module
estimates each launch's time on an H100 SXM or an H200 with a roofline plus the effects the lessons teach:

``t = launch + softmax_k(t_dram, t_l1, t_shared, t_flops, t_latency)``, per launch, summed over a call's launches,
where ``softmax_k(t...) = (sum t_i^k)^(1/k)`` is a smooth maximum: the largest term bounds the time, and terms
close to it add a little (their overlap is imperfect); ``k = inf`` is the plain roofline maximum.

- **t_dram**: bytes DRAM moves / the copy bandwidth measured in the same bench run (H100 3008 GB/s,
  results/nvidia-h100-80gb-hbm3/results.json; H200 4261 GB/s, results/nvidia-h200/results.json). A buffer moves
  at most its own size (a re-read is served by L1/L2), else the 32-byte sectors the requests touched.
- **t_l1**: every sector a request touches passes through L1 and the L1-L2 path, reused or not:
  ``sectors * 32 B / (SMs * l1_bytes_per_clk * clock)``. Uncoalesced accesses (32 sectors per request where 4
  would do) land here: the lesson 01/02/03 "coalescing" effect.
- **t_shared**: shared-memory wavefronts (bank conflicts included: each extra wavefront is a pass) at
  ``1 / shared_clk_per_wavefront`` per SM per clock.
- **t_flops**: FLOPs / the peak rate (FP32 non-tensor 66.9 TFLOP/s on both; see GPUS), when the caller knows the
  FLOPs (the simulator does not count instructions).
- **t_latency**: occupancy, latency hiding, waves and tails. The resident blocks per SM come from the
  occupancy rules (``cudacourse.occupancy``); the grid runs in ``waves = ceil(blocks / (SMs * blocks_per_SM))``
  (a partial last wave costs a whole one: the tail, and each wave costs ``block_overhead``); in each wave a
  warp waits for its global loads in turn: all the executions of its most executed load instruction (a loop's
  iterations depend on each other through the loop), plus ``serial_loads`` times its other loads (loads of
  other instructions may overlap them: ``x[i]`` and ``x[i + blockDim.x]`` are in flight together), and
  ``barrier_latency`` at each ``__syncthreads``. A load waits
  ``load_latency`` when DRAM serves it and ``cache_latency`` when L1/L2 do; the share served by DRAM is the
  launch's DRAM bytes of loads over the bytes of the sectors its loads touched (a buffer read once: all DRAM; a
  GEMM operand read 2048 times: almost all cache). This is what makes a scalar loop slower than a float4 one at
  equal bytes, and a thread-per-row loop slower than a warp-per-row one.
- **launch**: a fixed cost per launch (multi-pass reductions pay it per pass).

The constants (:data:`CALIBRATED`) are fitted on the H100's committed bench rows by
``benchmarks/estimate_calibration.py`` (and checked, not refitted, on the H200's); its table
(results/cpu/estimate_calibration.md) says how close the estimates are, row by row. What the model leaves out:
instruction issue (integer division, modulo, special functions: the simulator counts no instructions), L2
capacity, DRAM page effects, clock boost.

Not estimated: cuBLAS, Triton twins and host work (nothing the simulator counts): :func:`not_estimated` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cudacourse.occupancy import occupancy


@dataclass(frozen=True)
class GPU:
    """The figures of one GPU model the estimate needs; sources in the comments of :data:`GPUS`."""

    name: str
    sms: int
    clock_hz: float
    copy_gbs: float          # device-to-device copy, measured (read + write bytes / time)
    fp32_flops: float        # peak FP32 (non-tensor) FLOP/s
    results: str             # the bench results the copy figure comes from


# H100 SXM5 and H200: 132 SMs (both results.md headers, from the driver), max boost clock 1.98 GHz (NVIDIA H100
# Tensor Core GPU Architecture whitepaper, table "NVIDIA H100 compared to A100": H100 SXM5 boost 1980 MHz for
# non-tensor work; the H200 is the same GH100 chip), FP32 67 TFLOP/s (NVIDIA H100 and H200 datasheets, SXM:
# 132 SMs x 128 FP32 lanes x 2 x 1.98 GHz = 66.9e12). Copy bandwidth: measured by `make bench` in the run the
# rows come from (results/*/results.json "copy_gbs").
GPUS: dict[str, GPU] = {
    "H100": GPU("H100 SXM (80 GB HBM3)", 132, 1.98e9, 3008.3, 66.9e12, "results/nvidia-h100-80gb-hbm3/results.json"),
    "H200": GPU("H200 (141 GB HBM3e)", 132, 1.98e9, 4260.9, 66.9e12, "results/nvidia-h200/results.json"),
}

# Fitted by benchmarks/estimate_calibration.py on the H100 rows (see results/cpu/estimate_calibration.md).
CALIBRATED: dict[str, float] = {
    "load_latency": 600e-9,           # s per global load of a warp that DRAM serves
    "cache_latency": 40e-9,           # s per global load of a warp that L1/L2 serve
    "barrier_latency": 50e-9,         # s per __syncthreads of a block
    "l1_bytes_per_clk": 48.0,         # B per clock per SM through L1 (sectors * 32 B)
    "shared_clk_per_wavefront": 1.0,  # clocks per shared-memory wavefront per SM
    "launch": 2e-6,                   # s per launch
    "block_overhead": 200e-9,         # s per wave (starting and retiring the blocks of one wave)
    "serial_loads": 0.0,              # share of the other load instructions that wait after the most executed one
    "overlap_power": 4.0,             # k of the smooth maximum of the terms (inf: the plain maximum)
}


@dataclass
class LaunchCounters:
    """What one launch did, as the estimate needs it (totals over all blocks, at the size to estimate)."""

    kernel: str
    blocks: float
    threads: int
    smem: int
    registers: int | None
    ld_requests: float = 0.0
    ld_rounds: float = 0.0                # requests of the most executed global load instruction (0: unknown)
    sectors: float = 0.0                  # global sectors of loads, stores and atomics
    shared_wavefronts: float = 0.0
    barriers: float = 0.0                 # __syncthreads executed, summed over blocks
    buffer_sectors: dict[str, float] = field(default_factory=dict)  # "buffer:op" -> sectors

    def scaled(self, other: LaunchCounters, u1: float, u2: float, u: float, b1: float, b2: float, b: float
               ) -> LaunchCounters:
        """Extrapolate linearly from this launch (at work ``u1``, grid unit ``b1``) and ``other`` (``u2``, ``b2``)
        to work ``u`` and grid unit ``b``: counts ``c(u) = c1 + (c2 - c1) (u - u1) / (u2 - u1)``."""
        def ext(x1: float, x2: float, a1: float = u1, a2: float = u2, a: float = u) -> float:
            return max(0.0, x1 + (x2 - x1) * (a - a1) / (a2 - a1)) if a2 != a1 else x1
        keys = set(self.buffer_sectors) | set(other.buffer_sectors)
        return LaunchCounters(
            self.kernel, max(1.0, ext(self.blocks, other.blocks, b1, b2, b)), self.threads, self.smem, self.registers,
            ext(self.ld_requests, other.ld_requests), ext(self.ld_rounds, other.ld_rounds),
            ext(self.sectors, other.sectors),
            ext(self.shared_wavefronts, other.shared_wavefronts), ext(self.barriers, other.barriers),
            {k: ext(self.buffer_sectors.get(k, 0.0), other.buffer_sectors.get(k, 0.0)) for k in keys})


def counters(kp: Any, registers: int | None = None) -> LaunchCounters:
    """The :class:`LaunchCounters` of one ``cudacourse.profile.KernelProfile`` (a sampled launch is scaled up to
    all its blocks). ``registers``: per thread, from :func:`registers_of` (None: unknown)."""
    f = kp.blocks / max(kp.blocks_profiled, 1)
    m = kp.metrics
    per_buf: dict[str, float] = {}
    for s in kp.lines:
        if s.space == "global":
            per_buf[f"{s.buffer}:{s.op}"] = per_buf.get(f"{s.buffer}:{s.op}", 0.0) + f * s.sectors
    sectors = sum(m[f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum"] for op in ("ld", "st", "atom"))
    rounds = max((s.requests for s in kp.lines if s.space == "global" and s.op == "ld"), default=0)
    wf = sum(m[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum"] for op in ("ld", "st"))
    return LaunchCounters(kp.kernel, float(kp.blocks), kp.threads_per_block, kp.dynamic_smem + kp.static_smem,
                          registers, f * m["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"], f * rounds,
                          f * sectors, f * wf,
                          f * m["sim__barriers"], per_buf)


@dataclass
class Estimate:
    """The estimated time of one launch and the term that bounds it."""

    kernel: str
    seconds: float
    bound: str
    parts: dict[str, float]
    note: str = ""

    @property
    def ms(self) -> float:
        """Estimated milliseconds."""
        return 1e3 * self.seconds


def estimate(c: LaunchCounters, gpu: GPU, buffer_bytes: dict[str, int] | None = None, flops: float = 0.0,
             params: dict[str, float] | None = None) -> Estimate:
    """Estimate one launch on ``gpu`` (see the module's docstring for the model).

    ``buffer_bytes``: the size of each buffer (the launcher's parameter names) at the estimated size, to cap
    each buffer's DRAM bytes; without it every sector counts as DRAM traffic.
    """
    p = {**CALIBRATED, **(params or {})}
    note = ""
    regs = c.registers
    if regs is None:
        regs, note = 32, "registers unknown (no nvcc): 32 assumed"
    occ = occupancy(c.threads, regs, c.smem)
    if occ.blocks_per_sm == 0:
        return Estimate(c.kernel, math.inf, "cannot launch", {}, "the block does not fit on an SM")
    dram = dram_ld = ld_bytes = 0.0
    for key, sec in c.buffer_sectors.items():
        buf, op = key.rsplit(":", 1)
        cap = (buffer_bytes or {}).get(buf)
        moved = min(32.0 * sec, cap) if cap is not None else 32.0 * sec
        dram += moved
        if op == "ld":
            dram_ld += moved
            ld_bytes += 32.0 * sec
    from_dram = dram_ld / ld_bytes if ld_bytes else 1.0
    latency = from_dram * p["load_latency"] + (1.0 - from_dram) * p["cache_latency"]
    slots = gpu.sms * occ.blocks_per_sm
    waves = math.ceil(c.blocks / slots)
    warps = c.blocks * occ.warps_per_block
    rounds = c.ld_rounds or c.ld_requests
    loads = rounds + p["serial_loads"] * (c.ld_requests - rounds)  # per launch; per warp below
    chain = (loads / warps) * latency + (c.barriers / c.blocks) * p["barrier_latency"] + p["block_overhead"]
    parts = {
        "dram": dram / (gpu.copy_gbs * 1e9),
        "l1": 32.0 * c.sectors / (gpu.sms * p["l1_bytes_per_clk"] * gpu.clock_hz),
        "shared": c.shared_wavefronts * p["shared_clk_per_wavefront"] / (gpu.sms * gpu.clock_hz),
        "flops": flops / gpu.fp32_flops,
        "latency": waves * chain,
    }
    bound = max(parts, key=lambda k: parts[k])
    k = p["overlap_power"]
    top = parts[bound]
    t = top if math.isinf(k) or top == 0 else top * sum((v / top) ** k for v in parts.values()) ** (1 / k)
    return Estimate(c.kernel, p["launch"] + t, bound, {**parts, "waves": waves,
                                                                  "occupancy": occ.occupancy}, note)


def registers_of(path: str) -> dict[str, int]:
    """Registers per thread of each kernel of a file (base name -> count), compiled for sm_90a; empty without nvcc."""
    from cudacourse import sass

    try:
        d = sass.build(path)
    except Exception:  # noqa: BLE001 - no nvcc, or nvcc rejects the file: registers unknown
        return {}
    return {sass.base_name(k): r.registers for k, r in sass.parse_ptxas((d / "ptxas.txt").read_text()).items()}


NOT_COUNTED = ("the simulator runs only CUDA kernels of the course's files; cuBLAS calls, Triton twins and host work "
               "are not counted, so no time is invented for them")


def not_estimated(what: str) -> str:
    """The message for a call the model cannot estimate (cuBLAS, Triton, host work)."""
    return f"{what}: no estimate ({NOT_COUNTED})"


def estimate_report(report: Any, gpu: str = "H100", buffer_bytes: dict[str, int] | None = None) -> list[Estimate]:
    """Estimates of every launch of a ``cudacourse.profile.ProfileReport`` on ``gpu`` ("H100" or "H200")."""
    regs = registers_of(report.path) if report.kernels else {}
    return [estimate(counters(k, regs.get(k.kernel.split("<")[0])), GPUS[gpu], buffer_bytes) for k in report.kernels]


def render(estimates: list[Estimate], gpu: str = "H100", sizes: str = "") -> str:
    """Lines labelled 'estimate' for a profile report (``sizes``: the call's sizes in words, e.g. ``n=4096``)."""
    g = GPUS[gpu]
    if not estimates:
        return not_estimated("this call launched no kernel (host work only)")
    total = sum(e.seconds for e in estimates)
    at = f" at this call's sizes ({sizes})" if sizes else ""
    out = [f"estimate on an {g.name}{at} (not a measurement; model: cudacourse/estimate.py, errors: "
           f"results/cpu/estimate_calibration.md): {1e3 * total:.3g} ms"]
    for e in estimates:
        out.append(f"   estimate {e.kernel}: {e.ms:.3g} ms, bound by {e.bound} (waves {e.parts.get('waves', 0):.0f}, "
                   f"occupancy {100 * e.parts.get('occupancy', 0):.0f}%){'; ' + e.note if e.note else ''}")
    return "\n".join(out)


def for_call(report: Any, launcher: Any, args: list, gpus: tuple[str, ...] = ("H100", "H200")) -> str:
    """The estimate lines of one profiled call (``cudacourse profile``): each GPU's estimate at the call's own
    sizes, every buffer capped at the bytes of the tensor passed for it."""
    sizes = {p.name: t.numel() * t.element_size() for p, t in zip(launcher.params, args, strict=True) if p.pointer}
    words = ", ".join(f"{p.name}={v}" for p, v in zip(launcher.params, args, strict=True)
                      if not p.pointer and isinstance(v, int))
    return "\n".join(render(estimate_report(report, g, sizes), g, words) for g in gpus)
