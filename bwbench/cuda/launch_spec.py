"""`Launch`: one kernel launch as every family's plan describes it (pure data, no GPU).

A plan (bwbench/cuda/<family>/plan.py) turns a shape into Launches; the family's launch.py adds
the tensors and enqueues them with `bwbench.cuda.loader.run`. The scalar arguments that depend
only on the shape are packed here once (numpy scalars of the kernel's parameter widths), so a
repeated call does not rebuild them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["DeviceQueries", "Launch", "MAX_GRID", "dims", "grid_blocks"]

MAX_GRID = 2**31 - 1
"""CUDA's largest grid.x."""


def dims(value: int | tuple[int, ...]) -> tuple[int, ...]:
    """A grid or block as a tuple of 1 to 3 positive ints."""
    out = (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)
    if not 1 <= len(out) <= 3 or any(d < 1 for d in out):
        raise ValueError(f"a grid or block has 1 to 3 dimensions, each >= 1: got {value!r}")
    return out


def grid_blocks(work_blocks: int, blocks_per_sm: int, sms: int, waves: int | None = 1) -> int:
    """Blocks for a grid-stride kernel with `work_blocks` blocks' worth of work: at most `waves` full
    waves (SMs x resident blocks per SM; the blocks then stride over the rest), or with waves=None a
    block for every piece of work, up to MAX_GRID. Never 0: callers return early on empty inputs.
    `blocks_per_sm` must be at least 1 (the caller says why not, naming the kernel)."""
    cap = MAX_GRID if waves is None else sms * blocks_per_sm * int(waves)
    return max(1, min(int(work_blocks), cap, MAX_GRID))


@dataclass(frozen=True)
class Launch:
    """One launch: the kernel (a name expression of a KernelSource, template arguments included),
    its grid and block, dynamic shared memory, whether it is cooperative, and the scalar arguments
    fixed by the plan (`args`, passed after the tensors unless the launcher says otherwise).
    `tier` names the plan's choice for people and tests ("warp", "smem", "gather", ...)."""

    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_mem: int = 0
    cooperative: bool = False
    args: tuple[Any, ...] = field(default=(), compare=False)
    tier: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", dims(self.grid))
        object.__setattr__(self, "block", dims(self.block))
        if self.shared_mem < 0:
            raise ValueError(f"shared memory must be >= 0, got {self.shared_mem}")

    @property
    def threads(self) -> int:
        """Threads per block."""
        return math.prod(self.block)

    @property
    def blocks(self) -> int:
        """Blocks in the grid."""
        return math.prod(self.grid)


PORTABLE_CLUSTER_BLOCKS = 8
"""The largest thread-block cluster CUDA launches on every GPU that has clusters; a kernel opts in
to larger (non-portable) ones, which only some GPUs hold."""


class DeviceQueries(Protocol):
    """What a plan asks the GPU, passed in so that the plan stays pure (tests answer with tables).

    Kernels are named by their name expressions; the launcher answers from CUDA's occupancy query
    and device attributes, once per question (it caches)."""

    sms: int
    """Streaming multiprocessors of the device."""

    clusters: bool
    """Whether the device launches thread-block clusters (compute capability 9.0 and later)."""

    def smem_limit(self, kernel: str) -> int:
        """Dynamic shared memory `kernel` may launch with here (and let it have that much)."""

    def blocks_per_sm(self, kernel: str, threads: int, smem: int) -> int:
        """Resident blocks per SM of `kernel` with `threads` threads and `smem` dynamic bytes."""

    def active_clusters(self, kernel: str, cluster: int, threads: int, smem: int) -> int:
        """Clusters of `kernel` (whose `cluster` blocks are fixed at compile time) with `threads`
        threads and `smem` dynamic bytes a block that can be resident at once; 0 where it cannot
        launch here. Asked only of cluster sizes above the portable 8."""
