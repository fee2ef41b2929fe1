"""Occupancy of a GPU kernel from its compiled resources: how many of its blocks one SM holds at
once, and what limits that (registers, shared memory, threads or the block count).

The inputs are what a code generator reads back from its compiler (ncd-cuda: ptxas's report)
and the machine's per-SM limits (``Machine.sm``). The arithmetic is the CUDA occupancy
calculator's: registers are allocated per warp in units of ``register_unit``; each block
reserves ``shared_per_block`` bytes of shared memory on top of its own.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ncd_perf.machine import Machine

__all__ = ["Occupancy", "occupancy"]


@attrs.frozen
class Occupancy:
    """Blocks and warps of one kernel resident per SM, the fraction of the SM's warp slots they
    fill, and the limit that binds (``registers``, ``shared memory``, ``threads``, ``blocks``)."""

    blocks: int
    warps: int
    fraction: float
    limiter: str

    def describe(self) -> str:
        return (
            f"{self.blocks} blocks/SM, {self.warps} warps ({self.fraction:.0%}), "
            f"limited by {self.limiter}"
        )


def occupancy(
    machine: Machine, threads: int, registers: int, shared_bytes: int = 0
) -> Occupancy | None:
    """Residency of a kernel launched with blocks of ``threads`` threads, each using
    ``registers`` registers and the block ``shared_bytes`` of shared memory; ``None`` on a
    machine with no SM limits. A block that cannot fit at all is 0 blocks, limited by what
    it exceeds."""
    sm: Mapping[str, int] = machine.sm
    if not sm or threads <= 0:
        return None
    warp = sm.get("warp", 32)
    warps_per_block = -(-threads // warp)
    unit = sm.get("register_unit", 256)
    regs_per_warp = -(-max(registers, 1) * warp // unit) * unit
    limits = {
        "blocks": sm["max_blocks"],
        "threads": sm["max_threads"] // (warps_per_block * warp),
        "registers": sm["registers"] // (regs_per_warp * warps_per_block),
        "shared memory": sm["shared_bytes"] // (shared_bytes + sm.get("shared_per_block", 0)),
    }
    limiter = min(limits, key=lambda k: limits[k])  # on a tie, the first listed
    blocks = max(0, limits[limiter])
    most = sm["max_threads"] // warp
    warps = blocks * warps_per_block
    return Occupancy(blocks, warps, warps / most, limiter)
