"""What `x.permute(perm).contiguous()` launches (kernels/permute.cu): pure, testable without a GPU.

No torch, no GPU so every decision is testable on any machine. The steps follow
OneFlow's permute article:

1. `simplify`: drop size-1 dimensions and merge dimensions that stay adjacent and in order, so
   (0,1,2,3)->(2,3,0,1) becomes a 2-D transpose and fewer divisions are needed per element.
2. `movement_size`: when the last dimension moves whole, copy it in units of up to 16 bytes, as
   far as its byte size and both pointers' alignment allow.
3. `index_type`: 32-bit indexing when every index fits (integer division is much cheaper),
   64-bit otherwise.
4. `plan_permute`: a `GatherPlan` when the last dimension moves whole (each output unit reads one
   input unit; reads and writes are both contiguous along the last dimension), or a `TilePlan`
   when it does not (a shared-memory tile transposes the input's last dimension with the one that
   becomes the output's last; the article's BatchTranspose is the case with one batch dimension).

Divisions on the device use precomputed multiply-shift "magic numbers" (`divider32`), the fast
division the article names as its next step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bwbench.cuda.errors import PermuteError
from bwbench.cuda.launch_spec import Launch
from bwbench.cuda.permute.simplify import (  # the plan's steps 1-3, re-exported
    INT32_LIMIT,
    MOVEMENT_SIZES,
    Simplified,
    check_permutation,
    contiguous_strides,
    divider32,
    fast_divide32,
    index_type,
    movement_size,
    simplify,
)

__all__ = ["INT32_LIMIT", "MAX_DIMS", "MOVEMENT_SIZES", "BatchDim", "GatherConfig", "GatherPlan", "PermuteError",
           "PermutePlan", "Simplified", "TileConfig", "TilePlan", "check_permutation", "choose_tile",
           "compiled_tile_configs", "contiguous_strides", "divider32", "fast_divide32", "gather_launch", "index_type",
           "launch_of", "movement_size", "plan_permute", "simplify", "tiled_launch"]

MAX_DIMS = 8
"""Dimensions (after simplification) the kernels take; more is refused with a clear error."""

MAX_BATCH_DIMS = MAX_DIMS - 2
"""Dimensions of a TilePlan besides the two the tile spans."""



# ----------------------------------------------------------------------------------------------
# 4. Plans
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GatherConfig:
    """One compiled gather kernel: `threads` per block, each moving `unroll` units (all loads first)."""

    threads: int
    unroll: int

    @property
    def units_per_block(self) -> int:
        return self.threads * self.unroll


GATHER_CONFIG = GatherConfig(threads=256, unroll=1)
"""The gather kernel used: small blocks (4 KB of 16-byte units) keep the last wave short, and one
16-byte read per thread already keeps enough in flight (measured on an H200, docs/permute.md)."""


@dataclass(frozen=True)
class GatherPlan:
    """The last dimension moves whole: output unit i (units of `unit_bytes`) is read from the input
    offset sum over output dims k of index_k * src_strides[k]. Used for copies too (one dim)."""

    unit_bytes: int
    out_sizes: tuple[int, ...]
    """Output shape in units (the last dimension counted in units of unit_bytes)."""
    src_strides: tuple[int, ...]
    """For each output dimension, the input stride (in units) of the dimension it comes from."""
    index: str
    config: GatherConfig = GATHER_CONFIG

    @property
    def count(self) -> int:
        return math.prod(self.out_sizes)

    @property
    def blocks(self) -> int:
        return -(-self.count // self.config.units_per_block)


@dataclass(frozen=True)
class TileConfig:
    """One compiled tiled kernel: a tile x tile block of elements moved by `threads` threads; reads
    take `vec_read` elements along the input's last dim per access, writes `vec_write` along the
    output's (packs of up to 8 bytes)."""

    itemsize: int
    vec_read: int
    vec_write: int
    tile: int
    threads: int = 256
    shifted: bool = False
    """Reads of vec_read elements from rows that start anywhere (C not a multiple of vec_read): each
    row is read in aligned packs and shifted into place in shared memory (with write_align: 4-byte
    words, shifted through warp shuffles)."""
    write_align: int = 0
    """Bytes (0: off): every tile row is written as whole pieces of this many bytes, starting on a
    boundary, where output rows start anywhere (permute_tiled_aligned). vec_write then only has to
    divide the piece: the packs are aligned whatever the output row length."""


@dataclass(frozen=True)
class BatchDim:
    """A dimension the tile does not span: its size and the strides (elements) it steps by."""

    size: int
    src_stride: int
    dst_stride: int


@dataclass(frozen=True)
class TilePlan:
    """The last dimension moves: tiles of (rows of the input dim that becomes the output's last) x
    (columns of the input's last dim) go through shared memory. Reads are contiguous along the
    columns, writes along the rows."""

    config: TileConfig
    rows: int
    """R: size of the input dimension that becomes the output's last."""
    cols: int
    """C: size of the input's last dimension."""
    src_row_stride: int
    """Input stride (elements) of the row dimension."""
    dst_row_stride: int
    """Output stride (elements) of the column dimension."""
    batch: tuple[BatchDim, ...]
    """The other dimensions, innermost (fastest in the input) first."""
    index: str
    batch_transpose: bool
    """The article's BatchTranspose: only the last two dimensions swap."""

    @property
    def tiles(self) -> tuple[int, int, int]:
        """(tiles along columns, tiles along rows, batch count)."""
        return tile_grid(self.rows, self.cols, self.batch, self.config.tile)

    @property
    def blocks(self) -> int:
        return math.prod(self.tiles)


def tile_grid(rows: int, cols: int, batch: Sequence[BatchDim], tile: int) -> tuple[int, int, int]:
    return (-(-cols // tile), -(-rows // tile), math.prod(b.size for b in batch))


@dataclass(frozen=True)
class PermutePlan:
    """Everything the launcher needs for one (shape, perm, itemsize, alignment)."""

    shape: tuple[int, ...]
    perm: tuple[int, ...]
    itemsize: int
    simplified: Simplified
    kernel: GatherPlan | TilePlan | None
    """None when there is nothing to move (an empty tensor)."""

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[p] for p in self.perm)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


TILE_VECS: dict[int, tuple[int, ...]] = {1: (8, 4, 1), 2: (4, 2, 1), 4: (2, 1), 8: (1,)}
"""Elements per access the tiled kernels are compiled for, by element size: packs of up to 8 bytes
(half4 and half2 for float16), one element where a side is odd."""

SHIFTED_VEC: dict[int, int] = {1: 8, 2: 4}
"""Pack (elements) for shifted reads of 1- and 2-byte elements whose rows are not pack-aligned (an
odd C): 8-byte reads instead of single bytes or halves."""

WORD = 4
"""Aligned-write tiles of 1- and 2-byte elements read rows that start anywhere as 4-byte words
(shifted into place through warp shuffles) when the large tile's row is one warp of words."""

WORD_READS_WITH_ALIGNED_WRITES: tuple[int, ...] = (1,)
"""Element sizes whose rows of odd length take aligned writes with shifted word reads. Measured on an
H100 (cold, permute_configs.py): int8 3x1000x100001 by (0,2,1) 51% of copy against 46% for the
plain tile; float16 33x1000x1001 by (0,2,1) 87% against 88-89%: there the 16 rows each block reads
twice and the fifth sector of every unaligned 128-byte row (L2 read sectors +23%) cost what the
whole-sector writes save, so odd-width float16 keeps permute_tiled."""

# Shifted reads (choose_tile's shifted_reads, off by default): measured on an H200, shifted 8-byte
# reads of odd-width float16 rows were slower than reading single elements (33x1000x1001 by (0,2,1):
# 75% against 78% of copy; 1000x1001 by (1,0): 86% against 94%). They stay compiled and tested, and
# can be forced with a TileConfig(..., shifted=True) or choose_tile(..., shifted_reads=True).

WRITE_ALIGN: dict[int, int] = {1: 32, 2: 32, 4: 32, 8: 32}
"""The piece output rows are written in where their starts are not aligned to it (a 32-byte DRAM
sector). Measured on an H100 (cold), by (0,2,1): float16 33x1000x1000 86% of
copy with the plain tile, 97% with whole sectors; float16 33x1001x1024 79% -> 100%; float32
33x1001x1001 74% -> 97%. DRAM bytes stay the same (Nsight Compute): the partial sectors cost L2 write
requests and DRAM efficiency, not traffic. Pieces of 64 and 128 bytes (more rows read twice) measured
1-3 points below 32 (docs/permute.md)."""

TILE_SIDES: dict[int, tuple[int, ...]] = {1: (128,), 2: (64, 32), 4: (64, 32), 8: (32,)}
"""Tile sides by element size, the large first: rows of 128 or 256 bytes. The second, where there is
one, is used for small problems (see SMALL_PROBLEM_BLOCKS)."""

SMALL_PROBLEM_BLOCKS: dict[int, int] = {2: 512, 4: 2048}
"""Below this many large tiles the small tile is used: with few tiles per SM the last wave of large
ones leaves SMs idle. Half rows of a 32-element tile are only 64 bytes, so float16 switches only for
tiny problems. Measured on an H200 (docs/permute.md)."""


WIDE_TILE_CONFIGS: tuple[TileConfig, ...] = tuple(
    TileConfig(size, 16 // size, 16 // size, 64, threads) for size in (2, 4) for threads in (128, 256))
"""Large tiles moving 16-byte packs on both sides (8 halves or 4 floats an access), for sides that
are multiples of the pack. On an H100 (cold) these were the fastest or
within 1% of it on most large float16 transposes and on float32 matrices of 8192 columns; the same
packs in 32 x 32 tiles of 64 or 128 threads (the tile torch.compile's Triton kernel takes for a small
half transpose) were 2-5% slower than 64 x 64 tiles, and were dropped."""


WIDE_PACKS: tuple[int, ...] = (2,)
"""Element sizes whose large tiles move 16-byte packs on both sides where both sides and pointers
allow (WIDE_TILE_CONFIGS, 256 threads)."""


def compiled_tile_configs() -> list[TileConfig]:
    """Every tiled configuration the launcher compiles (the planner only picks among these)."""
    configs = [TileConfig(size, vr, vw, side) for size, vecs in TILE_VECS.items() for side in TILE_SIDES[size]
               for vr in vecs for vw in vecs]
    configs += [TileConfig(size, vr, vw, side, shifted=True) for size, vr in SHIFTED_VEC.items()
                for side in TILE_SIDES[size] for vw in TILE_VECS[size]]
    configs += [TileConfig(size, vr, TILE_VECS[size][0], side, write_align=WRITE_ALIGN[size])
                for size, vecs in TILE_VECS.items() for side in TILE_SIDES[size] for vr in vecs]
    configs += [TileConfig(size, WORD // size, TILE_VECS[size][0], TILE_SIDES[size][0], shifted=True,
                           write_align=WRITE_ALIGN[size]) for size in (1, 2)]
    configs += WIDE_TILE_CONFIGS
    return configs


def rows_misaligned(itemsize: int, dst_row_stride: int, batch: Sequence[BatchDim], align: int) -> bool:
    """Whether some output row (tile column) starts off an `align`-byte boundary in a destination
    that itself starts on one."""
    return any(stride * itemsize % align for stride in (dst_row_stride, *(b.dst_stride for b in batch)))


def tile_vec(itemsize: int, side: int, address: int = 0) -> int:
    """The widest compiled pack (elements) that divides `side` and the alignment of `address`."""
    for vec in TILE_VECS[itemsize]:
        if side % vec == 0 and int(address) % (vec * itemsize) == 0:
            return vec
    return 1


def choose_tile(itemsize: int, rows: int, cols: int, batch: Sequence[BatchDim], src_address: int = 0,
                dst_address: int = 0, shifted_reads: bool = False, dst_row_stride: int | None = None,
                aligned_writes: bool = True) -> TileConfig:
    """Reads as wide as the columns and the source allow (with `shifted_reads`, shifted 8-byte reads
    where aligned ones would be narrower than 4 bytes), writes as wide as the rows and the
    destination allow, the large tile unless the problem is small. With `aligned_writes`, output
    rows (of stride `dst_row_stride`, default `rows`) that start off a WRITE_ALIGN boundary are
    written in whole aligned pieces, with the widest packs. Large plain tiles move 16-byte packs
    where both sides and both pointers allow them (WIDE_PACKS)."""
    vr, vw = tile_vec(itemsize, cols, src_address), tile_vec(itemsize, rows, dst_address)
    shifted = False
    wide = SHIFTED_VEC.get(itemsize)
    if shifted_reads and wide and vr * itemsize < 4 and int(src_address) % (wide * itemsize) == 0:
        vr, shifted = wide, True
    sides = TILE_SIDES[itemsize]
    side = sides[0]
    if len(sides) > 1 and math.prod(tile_grid(rows, cols, batch, side)) < SMALL_PROBLEM_BLOCKS[itemsize]:
        side = sides[1]
    align = WRITE_ALIGN[itemsize]
    if (aligned_writes and not shifted and side == sides[0] and rows > side
            and rows_misaligned(itemsize, rows if dst_row_stride is None else dst_row_stride, batch, align)):
        if vr * itemsize >= WORD:
            return TileConfig(itemsize, vr, TILE_VECS[itemsize][0], side, write_align=align)
        if itemsize in WORD_READS_WITH_ALIGNED_WRITES and int(src_address) % WORD == 0:
            return TileConfig(itemsize, WORD // itemsize, TILE_VECS[itemsize][0], side, shifted=True,
                              write_align=align)
    if not shifted and side == sides[0]:
        pack16 = 16 // itemsize
        if (itemsize in WIDE_PACKS and cols % pack16 == 0 and rows % pack16 == 0
                and int(src_address) % 16 == 0 and int(dst_address) % 16 == 0):
            return TileConfig(itemsize, pack16, pack16, side, 256)
    return TileConfig(itemsize, vr, vw, side, shifted=shifted)


def plan_permute(shape: Sequence[int], perm: Sequence[int], itemsize: int, src_address: int = 0,
                 dst_address: int = 0, config: TileConfig | GatherConfig | None = None) -> PermutePlan:
    """Plan the permute of a contiguous tensor of `shape` (elements of `itemsize` bytes at
    `src_address`) into a contiguous output at `dst_address`. `config` forces a kernel
    configuration (for tuning); a TileConfig must fit the element size, sides and alignment."""
    shape, perm = check_permutation(shape, perm)
    if itemsize not in (1, 2, 4, 8):
        raise PermuteError(f"element size {itemsize} is not 1, 2, 4 or 8 bytes")
    simple = simplify(shape, perm)
    if math.prod(shape) == 0:
        return PermutePlan(shape, perm, itemsize, simple, None)
    if simple.ndim > MAX_DIMS:
        raise PermuteError(f"{simple.ndim} dimensions remain after merging {shape} by {perm}; "
                           f"the kernels take at most {MAX_DIMS}")
    addresses = (src_address, dst_address)
    if not simple.last_dim_moves:
        gather = config if isinstance(config, GatherConfig) else GATHER_CONFIG
        kernel: GatherPlan | TilePlan = _gather_plan(simple, itemsize, addresses, gather)
    else:
        kernel = _tile_plan(simple, itemsize, addresses, config if isinstance(config, TileConfig) else None)
    return PermutePlan(shape, perm, itemsize, simple, kernel)


def _gather_plan(simple: Simplified, itemsize: int, addresses: Sequence[int], config: GatherConfig) -> GatherPlan:
    unit = movement_size(simple.shape[-1] * itemsize, itemsize, addresses)
    scale = unit // itemsize
    in_shape = simple.shape[:-1] + (simple.shape[-1] // scale,)
    in_strides = contiguous_strides(in_shape)
    out_sizes = tuple(in_shape[p] for p in simple.perm)
    src_strides = tuple(in_strides[p] for p in simple.perm)
    return GatherPlan(unit, out_sizes, src_strides, index_type(math.prod(in_shape)), config)


def _tile_plan(simple: Simplified, itemsize: int, addresses: Sequence[int], tile: TileConfig | None) -> TilePlan:
    n = simple.ndim
    row_dim = simple.perm[-1]            # input dim that becomes the output's last
    col_pos = simple.perm.index(n - 1)   # where the input's last dim lands in the output
    in_strides = contiguous_strides(simple.shape)
    out_strides = contiguous_strides(simple.out_shape)
    out_pos = {d: k for k, d in enumerate(simple.perm)}
    rows, cols = simple.shape[row_dim], simple.shape[-1]
    batch = tuple(BatchDim(simple.shape[d], in_strides[d], out_strides[out_pos[d]])
                  for d in reversed(range(n)) if d not in (row_dim, n - 1))
    if tile is None:
        config = choose_tile(itemsize, rows, cols, batch, *addresses, dst_row_stride=out_strides[col_pos])
    elif tile.itemsize == itemsize and (tile.shifted or cols % tile.vec_read == 0) \
            and (tile.write_align or rows % tile.vec_write == 0) and addresses[0] % (tile.vec_read * itemsize) == 0 \
            and (tile.write_align or addresses[1] % (tile.vec_write * itemsize) == 0):
        config = tile
    else:
        raise PermuteError(f"tile configuration {tile} does not fit elements of {itemsize} bytes, "
                           f"sides {rows} x {cols} and addresses {tuple(addresses)}")
    plan = TilePlan(config, rows, cols, in_strides[row_dim], out_strides[col_pos], batch,
                    index_type(math.prod(simple.shape)),
                    batch_transpose=simple.perm == tuple(range(n - 2)) + (n - 1, n - 2))
    if plan.blocks >= 2**31:
        raise PermuteError(f"{plan.blocks} tiles do not fit one grid")
    return plan


# ----------------------------------------------------------------------------------------------
# 5. Kernels and launches (the scalar arguments packed once per plan)
# ----------------------------------------------------------------------------------------------

INDEX_CPP = {"int32": "int", "int64": "long long"}
_INDEX_NP = {"int32": np.int32, "int64": np.int64}
NAIVE_THREADS = 256
GATHER_BYTES = (1, 2, 4, 8, 16)

TUNING_GATHER_CONFIGS: tuple[GatherConfig, ...] = (GatherConfig(256, 2), GatherConfig(128, 2), GatherConfig(512, 1))
"""Gather configurations compiled (16-byte units, 32-bit index) besides the one in use, so they can
be compared on a GPU (`permute(..., config=...)`)."""


def gather_kernel_name(unit_bytes: int, index: str, config: GatherConfig = GATHER_CONFIG) -> str:
    return f"permute_gather<{unit_bytes}, {INDEX_CPP[index]}, {config.threads}, {config.unroll}>"


def tiled_kernel_name(config: TileConfig, index: str) -> str:
    common = f"{config.itemsize}, {config.vec_read}, {config.vec_write}, {config.tile}, {config.threads}, {INDEX_CPP[index]}"
    if config.write_align:
        return f"permute_tiled_aligned<{common}, {config.write_align}, {'true' if config.shifted else 'false'}>"
    return f"permute_tiled<{common}, {'true' if config.shifted else 'false'}>"


def naive_kernel_name(itemsize: int) -> str:
    return f"permute_naive<{itemsize}>"


OPTIMIZED_KERNELS = (
    *(gather_kernel_name(b, i) for b in GATHER_BYTES for i in INDEX_CPP),
    *(gather_kernel_name(16, "int32", c) for c in TUNING_GATHER_CONFIGS if c != GATHER_CONFIG),
    *(tiled_kernel_name(c, i) for c in compiled_tile_configs() for i in INDEX_CPP),
)
"""Every optimized kernel the plans can name."""

NAIVE_KERNELS = tuple(naive_kernel_name(b) for b in (1, 2, 4, 8))


def slots(values: Sequence[int], count: int, kind) -> list:
    """`values` as numpy scalars of `kind`, padded with zeros to the kernel's fixed `count`."""
    return [kind(v) for v in values] + [kind(0)] * (count - len(values))


def gather_launch(plan: GatherPlan) -> Launch:
    index = _INDEX_NP[plan.index]
    if plan.index == "int32":
        divs = [divider32(s) for s in plan.out_sizes]
    else:
        divs = list(plan.out_sizes)
    args = (index(plan.count), np.int32(len(plan.out_sizes)), *slots(divs, MAX_DIMS, np.uint64),
            *slots(plan.src_strides, MAX_DIMS, np.int64))
    return Launch(gather_kernel_name(plan.unit_bytes, plan.index, plan.config), (plan.blocks,),
                  (plan.config.threads,), args=args, tier="gather")


def tiled_launch(plan: TilePlan) -> Launch:
    index = _INDEX_NP[plan.index]
    tiles_c, tiles_r, _ = plan.tiles
    batch = plan.batch
    args = (index(plan.rows), index(plan.cols), index(plan.src_row_stride), index(plan.dst_row_stride),
            np.uint64(divider32(tiles_c)), np.uint64(divider32(tiles_r)), np.int32(len(batch)),
            *slots([divider32(b.size) for b in batch], MAX_BATCH_DIMS, np.uint64),
            *slots([b.src_stride for b in batch], MAX_BATCH_DIMS, np.int64),
            *slots([b.dst_stride for b in batch], MAX_BATCH_DIMS, np.int64))
    return Launch(tiled_kernel_name(plan.config, plan.index), (plan.blocks,), (plan.config.threads,), args=args,
                  tier="tiled")


def launch_of(plan: PermutePlan) -> Launch | None:
    """The one launch of a plan (None when there is nothing to move)."""
    if plan.kernel is None:
        return None
    return gather_launch(plan.kernel) if isinstance(plan.kernel, GatherPlan) else tiled_launch(plan.kernel)
