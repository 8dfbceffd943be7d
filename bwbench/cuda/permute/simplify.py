"""Steps 1-3 of the permute plan (pure): merged dimensions, movement size, index type, and the
fast 32-bit division the kernels use for their index arithmetic."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from bwbench.cuda.errors import PermuteError

__all__ = ["INT32_LIMIT", "MOVEMENT_SIZES", "Simplified", "check_permutation", "contiguous_strides", "divider32",
           "fast_divide32", "index_type", "movement_size", "simplify"]

MOVEMENT_SIZES = (16, 8, 4, 2, 1)
"""Bytes one thread moves per access when the last dimension moves whole, widest first."""

INT32_LIMIT = 2**31 - 2**16
"""Element (unit) counts below this use 32-bit indexing. The slack keeps a block's first index
plus its unrolled span below 2^31 too."""


# ----------------------------------------------------------------------------------------------
# 1. Dimension simplification
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Simplified:
    """An equivalent permute of a contiguous tensor: `x.reshape(shape).permute(perm)` holds the same
    elements in the same output order as the original. At least one dimension."""

    shape: tuple[int, ...]
    perm: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[p] for p in self.perm)

    @property
    def last_dim_moves(self) -> bool:
        """True when the input's last dimension is not the output's last (a transpose is needed)."""
        return self.perm[-1] != self.ndim - 1

    @property
    def is_copy(self) -> bool:
        return self.ndim == 1


def check_permutation(shape: Sequence[int], perm: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validate and normalise: non-negative sizes, perm a permutation of range(len(shape))
    (negative entries count from the end, as in torch)."""
    shape = tuple(int(s) for s in shape)
    n = len(shape)
    if any(s < 0 for s in shape):
        raise PermuteError(f"negative size in shape {shape}")
    perm = tuple(int(p) + n if int(p) < 0 else int(p) for p in perm)
    if len(perm) != n or sorted(perm) != list(range(n)):
        raise PermuteError(f"perm {tuple(perm)} is not a permutation of the {n} dimensions of shape {shape}")
    return shape, perm


def simplify(shape: Sequence[int], perm: Sequence[int]) -> Simplified:
    """Drop size-1 dimensions, then merge runs of input dimensions that appear consecutively and in
    order in the output. Examples: (3,4,5,6),(2,3,0,1) -> (12,30),(1,0); (5,1,7),(1,0,2) -> (35,),(0,)."""
    shape, perm = check_permutation(shape, perm)
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    if not keep:
        return Simplified((1,), (0,))
    rank = {d: i for i, d in enumerate(keep)}
    sizes = [shape[d] for d in keep]
    order = [rank[d] for d in perm if d in rank]

    # Runs of input dims that follow each other in the output: each run is one merged dim.
    runs: list[list[int]] = []
    for d in order:
        if runs and runs[-1][-1] + 1 == d:
            runs[-1].append(d)
        else:
            runs.append([d])
    by_input = sorted(range(len(runs)), key=lambda r: runs[r][0])
    merged_shape = tuple(math.prod(sizes[d] for d in runs[r]) for r in by_input)
    new_rank = {r: i for i, r in enumerate(by_input)}
    return Simplified(merged_shape, tuple(new_rank[r] for r in range(len(runs))))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


# ----------------------------------------------------------------------------------------------
# 2. Movement size and 3. index type
# ----------------------------------------------------------------------------------------------


def movement_size(last_dim_bytes: int, itemsize: int, addresses: Sequence[int] = ()) -> int:
    """The widest access (16, 8, 4, 2 or 1 bytes, never below the element size) that divides the
    byte size of the dimension that moves whole and the alignment of every address."""
    for size in MOVEMENT_SIZES:
        if size < itemsize:
            break
        if last_dim_bytes % size == 0 and all(int(a) % size == 0 for a in addresses):
            return size
    return itemsize


def index_type(count: int) -> str:
    """"int32" when `count` elements (or units) can be indexed with 32-bit integers, else "int64"."""
    return "int32" if count < INT32_LIMIT else "int64"


def divider32(d: int) -> int:
    """A divisor packed for the kernels' 32-bit fast division: (magic << 32) | d.

    For 1 <= d < 2^31, s = ceil(log2 d) and magic = floor(2^32 (2^s - d) / d) + 1, the quotient of
    any 0 <= n < 2^31 is (umulhi(n, magic) + n) >> s (the device recomputes s from d). This is the
    round-up multiply-shift method (as in PyTorch's IntDivider): one multiply-high, an add and a
    shift instead of a ~20-instruction integer division."""
    if not 1 <= d < 2**31:
        raise PermuteError(f"fast division needs 1 <= d < 2^31, got {d}")
    s = (d - 1).bit_length()
    magic = ((1 << 32) * ((1 << s) - d)) // d + 1
    assert magic < 1 << 32
    return (magic << 32) | d


def fast_divide32(n: int, packed: int) -> int:
    """What the device computes with a `divider32` value (a model for tests)."""
    d, magic = packed & 0xFFFFFFFF, packed >> 32
    s = (d - 1).bit_length()
    return (((n * magic) >> 32) + n) >> s
