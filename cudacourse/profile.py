"""The simulator as a profiler: memory-traffic counters per kernel launch and per source line.

``cc.load(path, profile=True)`` (simulator backend) records, for every call, what each kernel launch did
to memory, with Nsight Compute's definitions, for the accesses the source makes; ``m.profile_report()``
returns the last call's :class:`ProfileReport` (``print(report)`` shows it; ``report.kernels[i].metrics``
holds the numbers under Nsight Compute's metric names).

How close that is, measured (``benchmarks/profile_vs_ncu.py``, results/nvidia-h100-80gb-hbm3/profile_vs_ncu.md:
lesson 01-03 solution kernels under ``ncu`` on an H100): every access-pattern count is equal (global requests
and sectors, shared-memory wavefronts, bank conflicts: 79 of 79). The simulator counts the *source's*
accesses, so two kinds of count follow nvcc's code instead and can differ: the issued shared instructions
(``smsp__inst_executed_op_shared_*``: a GPU also counts a warp whose lanes are all predicated off, which is
how nvcc compiles ``if (tid < s) s[tid] += s[tid + s];``: 8,256 loads on the H100 where the simulator counts
1,600 in ``reduce_v2_sequential``), and the wavefronts of accesses nvcc merged into wider ones (four
``As[ty][k]`` reads become one ``LDS.128`` in ``sgemm_v3_shared``).

Definitions (the simulator's model of the hardware):

- **Warp-level request.** The lanes of one warp executing the same instruction (program counter) for the
  same n-th time. The simulator runs CUDA threads one after another as fibers; the n-th execution of a pc
  by each lane stands for the one lock-step execution of that instruction by the warp on a GPU. A load
  instruction executed by a warp is one request (``l1tex__t_requests_...``), however many lanes take part.
- **Sectors.** A global request touches the distinct 32-byte sectors that its active lanes' bytes fall
  in (``l1tex__t_sectors_...``). Stride-1 ``float`` loads by 32 lanes: 4 sectors; stride-32: 32 sectors;
  ``float4`` loads: 16 sectors for 512 bytes.
- **Shared-memory wavefronts and bank conflicts.** 32 banks of 4 bytes. Lanes are served in phases: the whole
  warp for accesses of up to 4 bytes, half-warps for 8-byte and quarter-warps for 16-byte accesses (NVIDIA,
  GTC 2019 talk S9593 "cuTENSOR", slide on 128-bit shared accesses, as discussed in
  Dao-AILab/flash-attention issue 738 and NVIDIA/cutlass issue 328). In a phase, each bank delivers one
  distinct 4-byte word per wavefront; lanes reading the same word share it (broadcast). Bank conflicts are
  the wavefronts beyond one per phase. Not confirmed for broadcasts: on the H100 a 128-bit read of one
  16-byte word by the whole warp took 2 wavefronts (sgemm_v3_shared's ``LDS.128``, profile_vs_ncu.md),
  where this rule counts 4.
- **Active lanes.** Lanes taking part in a memory request, and with ``profile="branches"`` lanes entering
  a basic block together (that build adds ``-fsanitize-coverage=trace-pc``, a build of its own; code
  inlined from the runtime's headers counts in the totals but has no line of the learner's file); fewer
  than 32 means divergence or a partial warp.
- **Vector accesses.** g++ splits a ``float2``/``float4`` copy into scalar accesses at consecutive
  instructions; adjacent accesses of one thread that form an aligned 8- or 16-byte unit are counted as
  one vector access, as nvcc emits one ``LDG.64``/``LDG.128``. (Two scalar loads of ``x[2*i]`` and
  ``x[2*i+1]`` on one line are also merged: a GPU issues two requests there.)

Only memory passed to the launcher (tensors) and ``cudaMalloc`` memory count as global memory;
``__device__`` variables and local arrays are not counted. Launches with more than
``PROFILE_MAX_THREADS`` threads are sampled: every k-th block is counted and the report says so.
Counting uses checked mode's instrumentation: ``profile=True`` runs the checked build itself (the same
cached library; every check still runs) with the counters switched on for each call.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROFILE_MAX_THREADS = 1 << 17  # threads counted per launch (ccsim_rt.cpp); larger launches are sampled

# ----------------------------------------------------------------------------------------------------
# Nsight Compute's metric names and what each means
# ----------------------------------------------------------------------------------------------------

METRICS: dict[str, str] = {
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "global load requests (one per warp-level load instruction)",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "32-byte sectors those loads touched",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "global store requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "32-byte sectors those stores touched",
    "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum": "global atomic requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_atom.sum": "32-byte sectors those atomics touched",
    "smsp__inst_executed_op_shared_ld.sum": "shared-memory load instructions executed by warps (the source's "
                                            "loads; a GPU counts nvcc's, predicated-off ones included)",
    "smsp__inst_executed_op_shared_st.sum": "shared-memory store instructions executed by warps (the source's "
                                            "stores; a GPU counts nvcc's, predicated-off ones included)",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "wavefronts (passes) the shared loads needed",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "wavefronts the shared stores needed",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "extra wavefronts of shared loads: bank conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "extra wavefronts of shared stores: bank conflicts",
    "launch__registers_per_thread": "registers per thread (nvcc --resource-usage, sm_90)",
    "launch__occupancy_limit_blocks": "blocks per SM allowed by the 32-block limit",
    "launch__occupancy_limit_warps": "blocks per SM allowed by the 64-warp limit",
    "launch__occupancy_limit_registers": "blocks per SM allowed by the 65536 registers",
    "launch__occupancy_limit_shared_mem": "blocks per SM allowed by the 228 KB of shared memory",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical occupancy: resident warps / 64, in percent",
}
# the simulator's own measures (no exact Nsight Compute counterpart)
SIM_METRICS: dict[str, str] = {
    "sim__sectors_per_request_global_ld": "sectors per global load request (4 = coalesced floats, 32 = worst)",
    "sim__sectors_per_request_global_st": "sectors per global store request",
    "sim__global_efficiency_pct": "bytes the lanes asked for / bytes of the sectors moved, in percent",
    "sim__bank_conflicts_per_shared_request": "extra wavefronts per shared-memory request",
    "sim__active_lanes_per_request": "lanes taking part per memory request (32 = the whole warp)",
    "sim__active_lanes_per_branch": "lanes per warp-level basic-block execution (profile='branches'; 32 = none idle)",
    "sim__useful_lanes_pct": "active lanes / 32 over basic-block executions, in percent (profile='branches')",
    "sim__barriers": "__syncthreads() executed, per block, summed over blocks",
}
NCU_LIST = [m for m in METRICS if not m.startswith("launch__") and not m.startswith("sm__")]

_OPS = {0: "ld", 1: "st", 2: "atom"}
_REGS: dict[str, tuple[str, dict[str, int]]] = {}  # register counts per file, by content


# ----------------------------------------------------------------------------------------------------
# The report model
# ----------------------------------------------------------------------------------------------------


@dataclass
class LineStat:
    """Counters of one instruction (pc) of the learner's file, or of all pcs of one line."""

    line: int
    space: str            # "global", "shared" or "branch"
    op: str               # "ld", "st", "atom" ("" for branches)
    buffer: str           # the tensor/array it touched ("" for branches)
    size: int             # bytes per lane per access
    requests: int = 0
    lanes: int = 0
    bytes: int = 0
    sectors: int = 0
    wavefronts: int = 0
    ideal: int = 0

    @property
    def conflicts(self) -> int:
        """Shared memory: wavefronts beyond one per phase."""
        return self.wavefronts - self.ideal

    @property
    def sectors_per_request(self) -> float:
        """Global memory: 32-byte sectors per warp-level request."""
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def active_lanes(self) -> float:
        """Average lanes taking part per request (32: the whole warp)."""
        return self.lanes / self.requests if self.requests else 0.0


@dataclass
class KernelProfile:
    """One kernel launch: configuration, per-line counters, totals under Nsight Compute's names."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    static_smem: int
    blocks: int
    blocks_profiled: int
    barriers: int
    lines: list[LineStat]
    source: str = ""                                   # the kernel file (registers come from nvcc on demand)
    trace_full: bool = False
    _trace: Any = field(default=None, repr=False)      # the recorded accesses, or a callable fetching them
    shared_arrays: list[dict] = field(default_factory=list)

    @property
    def trace(self) -> list[tuple]:
        """Recorded accesses ``(space, op, bytes, buffer, block, thread, element, line, byte offset)`` in order
        (for the pictures of ``cudacourse.plot``; at most 4096 per instruction and 65536 per call).
        Fetched from the simulator's worker on first use."""
        if callable(self._trace):
            self._trace = self._trace()
        return self._trace or []

    @property
    def registers(self) -> int | None:
        """Registers per thread from ``nvcc --resource-usage`` for sm_90 (None without nvcc); compiled on first use."""
        base = self.kernel.split("<")[0].split("::")[-1].strip()
        return register_counts(self.source).get(base) if self.source else None

    @property
    def threads_per_block(self) -> int:
        """Threads in one block."""
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def sampled(self) -> bool:
        """True when only every k-th block was counted (a launch above ``PROFILE_MAX_THREADS`` threads)."""
        return self.blocks_profiled < self.blocks

    def _sum(self, space: str, op: str, attr: str) -> int:
        return sum(getattr(s, attr) for s in self.lines if s.space == space and (not op or s.op == op))

    @property
    def metrics(self) -> dict[str, float]:
        """Totals of the counted blocks under Nsight Compute's metric names, plus the simulator's own."""
        m: dict[str, float] = {}
        for op in ("ld", "st", "atom"):
            m[f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum"] = self._sum("global", op, "requests")
            m[f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum"] = self._sum("global", op, "sectors")
        for op in ("ld", "st"):
            m[f"smsp__inst_executed_op_shared_{op}.sum"] = self._sum("shared", op, "requests")
            wf = self._sum("shared", op, "wavefronts")
            m[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum"] = wf
            m[f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum"] = wf - self._sum("shared", op, "ideal")
        for op in ("ld", "st"):
            r, sec = (m[f"l1tex__t_{w}_pipe_lsu_mem_global_op_{op}.sum"] for w in ("requests", "sectors"))
            m[f"sim__sectors_per_request_global_{op}"] = sec / r if r else 0.0
        moved = 32 * self._sum("global", "", "sectors")
        m["sim__global_efficiency_pct"] = 100.0 * self._sum("global", "", "bytes") / moved if moved else 0.0
        sreq = self._sum("shared", "", "requests")
        m["sim__bank_conflicts_per_shared_request"] = (
            (self._sum("shared", "", "wavefronts") - self._sum("shared", "", "ideal")) / sreq if sreq else 0.0)
        mem = [s for s in self.lines if s.space != "branch"]
        req = sum(s.requests for s in mem)
        m["sim__active_lanes_per_request"] = sum(s.lanes for s in mem) / req if req else 0.0
        br = self._sum("branch", "", "requests")
        if br:  # profile="branches"
            m["sim__active_lanes_per_branch"] = self._sum("branch", "", "lanes") / br
            m["sim__useful_lanes_pct"] = 100.0 * m["sim__active_lanes_per_branch"] / 32
        m["sim__barriers"] = self.barriers
        return m

    def occupancy(self) -> dict[str, float]:
        """Theoretical occupancy on the H100 under Nsight Compute's ``launch__``/``sm__`` names (runs nvcc once
        for the register count where it is on the PATH)."""
        return occupancy(self.threads_per_block, self.dynamic_smem + self.static_smem, self.registers)

    def render(self) -> str:
        """The text report of this launch: totals with meanings, then one row per line of the file."""
        g, b = self.grid, self.block
        out = [f"== {self.kernel} <<<({g[0]},{g[1]},{g[2]}), ({b[0]},{b[1]},{b[2]}), {self.dynamic_smem}>>>  "
               f"static shared {self.static_smem} B"]
        if self.sampled:
            out.append(f"   SAMPLED: counted {self.blocks_profiled} of {self.blocks} blocks (every "
                       f"{math.ceil(self.blocks / max(self.blocks_profiled, 1))}th; a launch above "
                       f"{PROFILE_MAX_THREADS} threads is sampled): totals cover the counted blocks only.")
        m = {**self.metrics, **self.occupancy()}
        for name, meaning in {**METRICS, **SIM_METRICS}.items():
            v = m.get(name)
            if v is None or (not v and name.startswith(("l1tex", "smsp", "sim__sectors", "sim__bank"))):
                continue  # no such traffic in this launch
            val = f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"
            out.append(f"   {name:<58} {val:>12}  {meaning}")
        rows = [s for s in self.lines if s.space != "branch" and s.requests and s.line]
        if rows:
            out.append("   line  space   op    buffer        bytes  requests  lanes/req  sectors/req  conflicts/req")
            for s in sorted(rows, key=lambda s: (s.line, s.space, s.op)):
                spr = f"{s.sectors_per_request:11.2f}" if s.space == "global" else f"{'':11}"
                cpr = f"{s.conflicts / s.requests:13.2f}" if s.space == "shared" else ""
                out.append(f"   {s.line:4d}  {s.space:<7} {s.op:<5} {s.buffer[:12]:<12} {s.size:5d} {s.requests:9d} "
                           f"{s.active_lanes:10.1f} {spr} {cpr}".rstrip())
        div = [s for s in self.lines if s.space == "branch" and s.line and s.requests and s.active_lanes < 31.95]
        if div:
            out.append("   divergent lines (basic blocks entered by fewer than 32 lanes on average): " +
                       ", ".join(f"{s.line} ({s.active_lanes:.1f} lanes)" for s in sorted(div, key=lambda s: s.line)))
        return "\n".join(out)


@dataclass
class ProfileReport:
    """The launches of one call, in order. ``str(report)`` is the text report."""

    kernels: list[KernelProfile]
    path: str

    def kernel(self, name: str) -> KernelProfile:
        """The first launch of kernel ``name`` (raises ``KeyError`` naming the launches there were)."""
        for k in self.kernels:
            if k.kernel == name or k.kernel.split("<")[0] == name:
                return k
        raise KeyError(f"no launch of kernel {name!r} in this call (launched: "
                       f"{', '.join(k.kernel for k in self.kernels) or 'none'})")

    def __str__(self) -> str:
        if not self.kernels:
            return f"{os.path.basename(self.path)}: the call launched no kernel."
        head = (f"profile of {os.path.basename(self.path)} on the CPU simulator (counts as Nsight Compute defines "
                "them, for the source's accesses; see cudacourse.profile)")
        return "\n".join([head, *(k.render() for k in self.kernels)])


# ----------------------------------------------------------------------------------------------------
# Occupancy
# ----------------------------------------------------------------------------------------------------


def occupancy(threads: int, smem: int, registers: int | None) -> dict[str, float]:
    """Theoretical occupancy of a block shape on an H100/H200 (compute capability 9.0) under Nsight Compute's
    ``launch__``/``sm__`` names, with each limit: :func:`cudacourse.occupancy.occupancy`'s figures (the one
    calculator, with its cited rules). ``smem`` is the block's static plus dynamic shared memory; ``registers``
    per thread (None: not limited)."""
    from cudacourse.occupancy import occupancy as calculate

    o = calculate(min(max(threads, 1), 1024), registers or 0, smem)
    out = {"launch__occupancy_limit_blocks": o.limit_blocks, "launch__occupancy_limit_warps": o.limit_warps,
           "launch__occupancy_limit_registers": o.limit_registers, "launch__occupancy_limit_shared_mem": o.limit_shared,
           "sm__maximum_warps_per_active_cycle_pct": 100.0 * o.occupancy}
    if registers:
        out["launch__registers_per_thread"] = registers
    return out


def register_counts(source_path: str) -> dict[str, int]:
    """Registers per thread of each kernel (demangled base name) from ``nvcc --resource-usage`` for sm_90.

    Empty where nvcc is not on the PATH or the file does not compile with it. Cached by content.
    """
    nvcc = shutil.which("nvcc")
    if not nvcc or not os.path.isfile(source_path):
        return {}
    text = Path(source_path).read_text()
    hit = _REGS.get(source_path)
    if hit and hit[0] == text:
        return hit[1]
    from cudacourse.buildcache import cached, content_key, local_headers

    key = content_key("regs-sm90", text, local_headers(source_path))

    def build(d: Path) -> None:
        r = subprocess.run([nvcc, "--resource-usage", "-arch=sm_90", "-c", source_path, "-o", str(d / "k.o"),
                            "-I", os.path.dirname(os.path.abspath(source_path))],
                           capture_output=True, text=True, timeout=300)
        (d / "usage.txt").write_text(r.stdout + r.stderr)

    try:
        usage = (cached("regs", key, build) / "usage.txt").read_text()
    except (OSError, subprocess.SubprocessError):
        return {}
    regs: dict[str, int] = {}
    fn = None
    for ln in usage.splitlines():
        mm = re.search(r"Function properties for (\S+)", ln) or re.search(r"Compiling entry function '(\S+)'", ln)
        if mm:
            fn = mm.group(1)
        mm = re.search(r"Used (\d+) registers", ln)
        if mm and fn:
            regs[_demangled_base(fn)] = int(mm.group(1))
    _REGS[source_path] = (text, regs)
    return regs


def _demangled_base(mangled: str) -> str:
    mm = re.match(r"_Z(?:N\d*\w*?)?(\d+)", mangled)
    if not mm:
        return mangled
    n = int(mm.group(1))
    start = mm.end()
    return mangled[start:start + n]


# ----------------------------------------------------------------------------------------------------
# From the runtime's counters to the report
# ----------------------------------------------------------------------------------------------------


def require_sim(backend: str, path: str, functions: list[str], torch_route: bool) -> None:
    """Refuse profile mode where it cannot run, saying what to do instead (Nsight Compute on a GPU)."""
    if backend == "cuda":
        raise ValueError(
            "profile=True needs the simulator (backend='sim'): on a GPU, Nsight Compute measures the same metrics. "
            f"Run your script under it:\n  {ncu_command('python your_script.py')}")
    if torch_route:
        raise ValueError("profile=True works for plain exercise files (raw-pointer launchers), not the torch::Tensor "
                         "route: load the kernel file itself with cc.load(path, profile=True, backend='sim').")


def ncu_command(target: str, kernels: str | None = None) -> str:
    """The Nsight Compute command that reports the same metrics as the simulator's profile."""
    k = f" -k regex:{kernels}" if kernels else ""
    return f"ncu --metrics {','.join(NCU_LIST)}{k} --csv {target}"


def _line_of(sym: Any, pc: int, path: str) -> int:
    w = sym.where(pc) if sym is not None else None
    if not w:
        return 0
    f, ln = w
    return ln if os.path.basename(f) == os.path.basename(path) else 0


def report(lib: Any, path: str, trace: bool = False) -> ProfileReport:
    """Build the :class:`ProfileReport` of the last call of a profile-mode ``SimLibrary``.

    ``trace=True`` fetches the recorded accesses now (for pictures drawn after later calls); otherwise
    ``KernelProfile.trace`` fetches them on first use, which works only until the module's next call.
    """
    if lib is None or not getattr(lib, "profile", False):
        raise ValueError("this module was not loaded with profile=True (use cc.load(path, profile=True) on the "
                         "simulator, then call a launcher)")
    raw = lib.last_profile
    if raw is None:
        raise ValueError("no profile yet: call one of the module's launchers first (the report is the last call's)")
    sym = lib._sym
    bufs = raw.get("buffers", [])
    sym.resolve([st[0] for L in raw["launches"] for st in L["stats"]])
    kernels = []
    for L in raw["launches"]:
        merged: dict[tuple, LineStat] = {}
        for pc, space, op, buf, size, req, lanes, nbytes, sectors, wf, ideal in L["stats"]:
            # 0: code inlined from the runtime's headers (built-ins, the launch wrapper): still kernel code, so it
            # counts in the totals, but it has no line of the learner's file
            line = _line_of(sym, pc, path)
            sp = ("global", "shared", "branch")[space]
            bname = bufs[buf][2] if 0 <= buf < len(bufs) else ("shared" if space == 1 else "")
            key = (line, sp, _OPS[op] if space != 2 else "", bname, pc if space != 2 else line)
            s = merged.setdefault(key, LineStat(line, sp, key[2], bname, size))
            s.requests += req
            s.lanes += lanes
            s.bytes += nbytes
            s.sectors += sectors
            s.wavefronts += wf
            s.ideal += ideal
            s.size = max(s.size, size)
        lines = _per_line(list(merged.values()))
        sites = [{"offset": s[0], "bytes": s[1], "elem": s[2], "dims": (s[3], s[4]), "name": s[5]}
                 for s in L.get("sites", []) if s[1]]
        kernels.append(KernelProfile(
            kernel=L["kernel"], grid=tuple(L["grid"]), block=tuple(L["block"]), dynamic_smem=L["dynamic_smem"],
            static_smem=L["static_smem"], blocks=L["blocks"], blocks_profiled=L["blocks_profiled"],
            barriers=L["barriers"], lines=lines, source=path if os.path.isfile(path) else "",
            _trace=functools.partial(_fetch_trace, lib, lib.calls, len(kernels), path), trace_full=L["trace_full"],
            shared_arrays=sites))
    if trace:
        for k in kernels:
            _ = k.trace
    return ProfileReport(kernels, path)


def _fetch_trace(lib: Any, call: int, index: int, path: str) -> list[tuple]:
    """The recorded accesses of launch ``index`` of the library's call number ``call`` (asked of its worker,
    which keeps only the last call's)."""
    raw = lib.profile_trace() if lib.calls == call else None
    if raw is None or index >= len(raw["launches"]):
        raise ValueError("the recorded accesses are gone (the module was called again or closed): draw the "
                         "pictures right after the call")
    bufs = raw.get("buffers", [])
    events = raw["launches"][index]["trace"]
    lib._sym.resolve([ev[7] for ev in events])
    out = []
    for space, op, size, buf, block, tid, off, pc in events:
        known = space == 0 and 0 <= buf < len(bufs)
        elem = off // bufs[buf][1] if known and bufs[buf][1] else off
        out.append((("global", "shared")[space], _OPS[op], size, bufs[buf][2] if known else "shared", block, tid, elem,
                    _line_of(lib._sym, pc, path), off))
    return out


def _per_line(stats: list[LineStat]) -> list[LineStat]:
    """Memory counters stay per instruction (several loads on one line stay apart); branches merge per line."""
    out: dict[tuple, LineStat] = {}
    for s in stats:
        if s.space != "branch":
            out[(id(s),)] = s
            continue
        t = out.setdefault(("b", s.line), LineStat(s.line, "branch", "", "", 0))
        t.requests += s.requests
        t.lanes += s.lanes
    return list(out.values())
