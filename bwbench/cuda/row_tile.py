"""The host side of kernels/row_tile.cuh: sizes of tiles of consecutive dense rows moved through
shared memory in aligned 16-byte packs. Pure; shared by the softmax family's and the norms' plans."""

from __future__ import annotations

__all__ = ["BLOCK", "COLS_PER_LANE", "GROUP_WIDTHS", "LANE_ELEMENTS", "group_width", "lane_elements", "packs_max",
           "rows_of_size", "smem_bytes"]

BLOCK = 256
"""Threads per block of the tile kernels (softmax_tile, softmax_grad_tile, norm_tile)."""

GROUP_WIDTHS = (1, 2, 4, 8, 16, 32)
COLS_PER_LANE = 4
"""A row's lanes: the narrowest power of two giving each lane at most this many elements."""

PACK_BYTES = 16


def group_width(cols: int) -> int:
    """Lanes that share a row of `cols` elements (a power of two up to a warp)."""
    return next((g for g in GROUP_WIDTHS if g * COLS_PER_LANE >= cols), GROUP_WIDTHS[-1])


LANE_ELEMENTS = (4, 8)
"""Tile kernel instances (norm_tile, softmax_tile, softmax_grad_tile) whose lanes hold their part
of a row, at most this many elements, in registers (rows of up to 128 and 256 columns); longer rows
take the instance that reads the cached row at each pass. 16 took 126 registers in norm_tile
(LayerNorm), two blocks an SM; 8 takes 56."""


def lane_elements(cols: int) -> int:
    """The tile instance for rows of `cols`: the fewest register elements (LANE_ELEMENTS) that give
    the row's group (group_width) all of it, or 0 for the instance that keeps it in shared memory only."""
    need = -(-cols // group_width(cols))
    return next((e for e in LANE_ELEMENTS if e >= need), 0)


def rows_of_size(target_bytes: int, cols: int, itemsize: int) -> int:
    """Rows of a tile of about `target_bytes` of one tensor: whole rows, the same number for every
    group of lanes of a block (at least one each)."""
    slots = BLOCK // group_width(cols)
    return max(1, target_bytes // (cols * itemsize) // slots) * slots


def packs_max(elements: int, itemsize: int) -> int:
    """The most 16-byte packs a run of `elements` covers at any phase (row_tile.cuh's packs_max)."""
    pack = PACK_BYTES // itemsize
    return (elements + 2 * pack - 2) // pack


def smem_bytes(tile_rows: int, cols: int, itemsize: int, tensors: int = 1) -> int:
    """Dynamic shared memory of a tile of `tile_rows` rows for `tensors` tensors read (x; or y and dy)."""
    return packs_max(tile_rows * cols, itemsize) * PACK_BYTES * tensors
