"""Theoretical occupancy on the GPUs the course measured, by the CUDA Programming Guide's rules.

Occupancy is the number of warps resident on one SM divided by the most it can hold. A block is resident
only when all its warps, registers and shared memory fit at once, so four limits apply, and the smallest wins
(CUDA C++ Programming Guide, "Performance Guidelines" > "Maximize Utilization" > "Multiprocessor Level",
which names registers and shared memory as the resources a block needs, and the occupancy calculator API it
points to, ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``, whose reference implementation is the CUDA
toolkit's header ``include/cuda_occupancy.h``: ``cudaOccMaxBlocksPerSMRegsLimit``, ``...SmemLimit``,
``...WarpsLimit``; the arithmetic below follows that header, CUDA 13.0):

- **blocks**: at most 32 resident blocks per SM;
- **warps**: at most 64 resident warps (2048 threads) per SM; a block of ``t`` threads takes ``ceil(t/32)``;
- **registers**: 64K 32-bit registers per SM, split over 4 sub-partitions (16K each); a warp's registers
  are ``regs_per_thread * 32`` rounded up to the allocation unit of 256, and a sub-partition holds
  ``floor(16384 / that)`` warps (at most 255 registers per thread, 64K per block);
- **shared memory**: 228 KB per SM, at most 227 KB per block; the driver reserves 1 KB per block, and a block's
  static + dynamic + reserved bytes are rounded up to the allocation unit of 128 bytes.

The per-SM figures are compute capability 9.0's (H100 and H200 are both GH100 chips, cc 9.0) from the
Programming Guide's "Compute Capabilities" > "Features and Technical Specifications", Table "Technical
Specifications per Compute Capability" (maximum resident blocks 32, warps 64, threads 2048 per SM; 64K
32-bit registers per SM and per block, 255 per thread; 228 KB shared memory per SM, 227 KB per block) and
"Compute Capability 9.0" > "Shared Memory" (1 KB reserved per block; the unified data cache's carveout can be
0, 8, 16, 32, 64, 100, 132, 164, 196 or 228 KB: this module assumes the driver picks the carveout that fits,
up to 228 KB, as the occupancy API does by default). Allocation units (256 registers per warp, 128 bytes of
shared memory, 4 sub-partitions) are cc 9.0's in ``cuda_occupancy.h`` (``cudaOccRegAllocationGranularity``,
``cudaOccSMemAllocationGranularity``, ``cudaOccSubPartitionsPerMultiprocessor``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SMLimits:
    """Per-SM resources of one compute capability (cc 9.0 by default: H100, H200)."""

    name: str = "compute capability 9.0"
    max_blocks: int = 32
    max_warps: int = 64
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_unit: int = 256          # registers, per warp
    sub_partitions: int = 4
    smem_per_sm: int = 228 * 1024
    smem_per_block: int = 227 * 1024
    smem_reserved_per_block: int = 1024
    smem_unit: int = 128


CC90 = SMLimits()


@dataclass(frozen=True)
class Occupancy:
    """Blocks per SM allowed by each limit, the binding one, and the theoretical occupancy."""

    threads: int
    registers: int
    smem: int                      # static + dynamic bytes the block asks for
    limit_blocks: int
    limit_warps: int
    limit_registers: int
    limit_shared: int

    @property
    def warps_per_block(self) -> int:
        """Warps one block takes (a partial warp takes a whole one)."""
        return max(1, math.ceil(self.threads / 32))

    @property
    def blocks_per_sm(self) -> int:
        """Resident blocks per SM: the smallest limit."""
        return min(self.limit_blocks, self.limit_warps, self.limit_registers, self.limit_shared)

    @property
    def warps_per_sm(self) -> int:
        """Resident warps per SM."""
        return self.blocks_per_sm * self.warps_per_block

    @property
    def occupancy(self) -> float:
        """Resident warps / 64, between 0 and 1 (0: the block does not fit at all)."""
        return self.warps_per_sm / CC90.max_warps

    @property
    def limiter(self) -> str:
        """Which limit binds: ``blocks``, ``warps``, ``registers`` or ``shared memory`` (the first of equals)."""
        lims = {"warps": self.limit_warps, "registers": self.limit_registers, "shared memory": self.limit_shared,
                "blocks": self.limit_blocks}
        return min(lims, key=lambda k: lims[k])

    def describe(self) -> str:
        """One line: ``256 threads, 32 regs, 0 B shared: 8 blocks/SM (limit: warps) = 64/64 warps, 100%``."""
        return (f"{self.threads} threads, {self.registers} registers/thread, {self.smem:,} B shared: "
                f"{self.blocks_per_sm} blocks/SM (limited by {self.limiter}; blocks {self.limit_blocks}, "
                f"warps {self.limit_warps}, registers {self.limit_registers}, shared {self.limit_shared}) = "
                f"{self.warps_per_sm}/{CC90.max_warps} warps, occupancy {100 * self.occupancy:.0f}%")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(threads: int, registers: int, smem: int = 0, sm: SMLimits = CC90) -> Occupancy:
    """Theoretical occupancy of blocks of ``threads`` threads using ``registers`` registers per thread and
    ``smem`` bytes of shared memory (static + dynamic) on one SM of ``sm`` (cc 9.0 by default).

    A limit of 0 blocks means the block cannot launch (too many registers or too much shared memory).
    """
    if threads < 1 or threads > 1024:
        raise ValueError(f"a block has 1 to 1024 threads, got {threads}")
    warps = max(1, math.ceil(threads / 32))
    lim_blocks = sm.max_blocks
    lim_warps = sm.max_warps // warps
    if registers <= 0:
        lim_regs = lim_blocks
    else:
        per_warp = _round_up(registers * 32, sm.reg_unit)
        # the hardware check counts warps rounded up to the sub-partitions (cuda_occupancy.h)
        fits = (registers <= sm.max_regs_per_thread and per_warp * warps <= sm.regs_per_block
                and per_warp * _round_up(warps, sm.sub_partitions) <= sm.regs_per_block)
        per_sub = (sm.regs_per_sm // sm.sub_partitions) // per_warp
        lim_regs = (per_sub * sm.sub_partitions) // warps if fits else 0
    if smem > sm.smem_per_block:
        lim_smem = 0
    else:
        per_block = _round_up(smem + sm.smem_reserved_per_block, sm.smem_unit)
        lim_smem = sm.smem_per_sm // per_block
    return Occupancy(threads, registers, smem, lim_blocks, lim_warps, lim_regs, lim_smem)
