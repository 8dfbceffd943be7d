"""Which kernel of the softmax family runs a shape: pure functions, testable without a GPU.

The article's dispatcher (OneFlow's softmax.cuh), as data in and a choice out:

1. warp tier: a thread group of 1 .. 32 lanes per row with the row in registers, while the row
   fits the registers (`warp_shape`) and cols is at most the measured `warp_max_cols`;
2. registers tier (forward, 16-byte packs): one block per row with the row in the block's
   registers, 4 or 8 packs a thread (`registers_shape`), for rows of at most
   `Thresholds.registers_max_packs` packs and rows whose shared-memory cache would leave fewer than
   `Thresholds.registers_below_smem_blocks` blocks an SM;
3. shared-memory tier: one block per row with the row cached in shared memory, while the
   occupancy query says enough blocks fit on an SM (`Thresholds.min_smem_blocks_per_sm`); the
   block size comes from the occupancy table (`block_size_by_occupancy`: by default the one that
   keeps the most threads resident, measured better on an H200 than the article's rule, which is
   kept as `block_rule="oneflow"`);
4. uncached tier: one block per row re-reading the row through L1/L2, for any cols, with about
   `uncached_packs_per_thread` packs per thread (`uncached_block_size`);
5. cluster tier: rows no block's shared memory holds, split over a thread-block cluster
   (`cluster_shape`), on GPUs that launch clusters;
6. tile and flat tiers: runs of consecutive rows of dense tensors moved as the aligned 16-byte
   packs covering them, for rows whose bytes no pack divides (`tile_shape`, `flat_shape`; the
   flat tier is the backward's).

Where measurements split between tiers and no rule of the row's bytes told the winners apart,
`timed_alternatives` names the tiers the first call times against the choice.

plan.py turns a choice into a launch with the device's occupancy answers; the thresholds are
measured (plan.DEFAULT_THRESHOLDS), not the article's RTX 3090 values. The kernels'
template arguments are enumerated here too, so the set of instantiated kernels and the set the
dispatcher can ask for are one list.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, NamedTuple

from bwbench.cuda import row_tile
from bwbench.cuda.launch_spec import PORTABLE_CLUSTER_BLOCKS

__all__ = [
    "BLOCK_SIZES",
    "FlatShape",
    "GROUP_WIDTHS",
    "Thresholds",
    "TierChoice",
    "TileShape",
    "WarpShape",
    "all_warp_shapes",
    "block_size_by_occupancy",
    "cache_bytes",
    "choose_online",
    "choose_tier",
    "flat_rows_most",
    "flat_shape",
    "kernel_name",
    "kernel_names",
    "pack_elements",
    "smem_bytes",
    "span_cols",
    "span_packs",
    "takes_tile",
    "tile_shape",
    "tile_smem_bytes",
    "uncached_block_size",
    "warp_shape",
    "warp_shapes",
]

WARP_BLOCK = 128
"""Threads per block of the warp-tier kernels (softmax.cu's BW_SOFTMAX_WARP_BLOCK)."""

GROUP_WIDTHS = (1, 2, 4, 8, 16, 32)
BLOCK_SIZES = (128, 256, 512, 1024)
PACK_BYTES = 16
"""The widest access: ld.global.v4 / st.global.v4."""

PACKS_PER_THREAD = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
"""Packs per lane offered to a full-warp group; gaps cost idle lanes (padding), not traffic."""

MAX_COLS_PER_THREAD = {"forward": 64, "backward": 32}
"""Register budget of the warp tier: row elements one lane holds (the backward holds y and dy).
The forward instantiates up to cols 2048 in 16-byte packs so the warp/block threshold can be
measured there; unpacked (odd cols) rows stop at 32 per lane, i.e. cols 1024."""
MAX_UNPACKED_COLS_PER_THREAD = 32

SMALL_GROUP_ROWS = (1, 2, 4)
"""Rows per access offered to groups narrower than a warp (the article uses 2). The backward,
holding y and dy, stops at 2 (BACKWARD_SMALL_GROUP_ROWS): with 4 one of its unpacked shapes
spills on sm_90."""
BACKWARD_SMALL_GROUP_ROWS = (1, 2)
FULL_WARP_ROWS = (1, 2)
"""Rows per access offered to full warps holding at most FULL_WARP_MAX_PACKS packs per lane."""
FULL_WARP_MAX_PACKS = 2

BLOCK_RULES = ("threads", "oneflow")

ITEMSIZE = {"half_t": 2, "bf16_t": 2, "float": 4}
ALGORITHMS = {"softmax": 0, "log_softmax": 1}
TIERS = ("warp", "registers", "smem", "uncached", "online_warp", "online_block", "cluster", "tile", "flat")
TILE_BLOCK = row_tile.BLOCK
"""Threads per block of the tile tier (softmax.cu's BW_SOFTMAX_TILE_BLOCK)."""
CLUSTER_SIZES = (2, 4, 8, 16)
"""Blocks per row of the cluster tier. CUDA promises clusters of up to 8 blocks on every GPU that
has them (PORTABLE_CLUSTER); 16 is a non-portable size that H100-class GPUs launch once a kernel
opts in, and the plan takes it only where the GPU says such a cluster can be resident."""
PORTABLE_CLUSTER = PORTABLE_CLUSTER_BLOCKS
"""The largest cluster every GPU with clusters launches."""
CLUSTER_PACKS_PER_THREAD = 8
"""The cluster tier's block size gives each thread about this many packs of its slice."""


class HeldShape(NamedTuple):
    """A cluster launch that keeps `packs` 16-byte packs of its slice a thread in registers (of x;
    of y and of dy each) and caches the rest: `size` blocks a row of `threads` threads, for values
    of `itemsize` bytes, taken only where the GPU holds at least `min_blocks` of them an SM and
    more than the same size cached whole, or (`ties`) as many."""

    size: int
    threads: int
    packs: int
    min_blocks: int
    itemsize: int
    ties: bool = False


CLUSTER_HELD_SHAPES = {
    "forward": (HeldShape(16, 256, 3, 4, 4), HeldShape(16, 256, 4, 4, 4), HeldShape(16, 256, 5, 4, 4),
                HeldShape(16, 256, 6, 4, 4), HeldShape(8, 512, 8, 2, 4)),
    "backward": (HeldShape(16, 512, 4, 2, 4, ties=True), HeldShape(16, 256, 2, 4, 2), HeldShape(8, 256, 2, 3, 2)),
}
"""The cluster shapes built with packs in registers, in order of preference: cluster_shape takes
the first the GPU holds at min_blocks an SM where the same size cached whole would leave fewer
(`ties`: no more), or where no size fits cached. On an H100:
- forward, float32: sixteenths of 256 threads holding the fewest packs that leave four blocks an
  SM (rows of 262144 and 300007: 92.5-92.9% of copy, against 88.9-89.3 for eighths of 512 threads
  holding 8 packs at two an SM, and 85-87 for three an SM of 256 threads or of sixteenths cached
  whole); those eighths where 16 is not launched. 16-bit packs are not held: at 8 a thread the
  kernel spilled (64 registers and 126-194 bytes of stack on sm_90).
- backward, float32: sixteenths of 512 threads holding 4 packs of y and of dy (32 floats, within
  the 64 registers a thread has at two blocks an SM), where sixteenths cached whole leave one, and
  also where they leave two (rows of about 155000-227000 columns, striding): 1024 x 200003, 94.9%
  against 91.1; 1531 x 180001 and 220013, 94.4-95.2 against 91.6-92.4; 333 x 160001, 93.4-94.3
  against 90.3-90.7.
- backward, 16-bit: sixteenths of 256 threads holding 2 packs of y and of dy (54 registers), four
  blocks an SM where cached whole they leave three (rows of 256000 and 262144: 93.3-94.9% against
  89.1-90.1); 3 packs spilled and lost 7 points, 512 threads holding one lost 9. Eighths the same
  way, at three blocks an SM at least (4096 rows of 128256: four against three, 94.8-95.0 against
  91.2). At as many blocks an SM as cached whole the 16-bit shapes did not win: eighths at
  three an SM gained 0.7-2.1 points at rows of 151936 (whole packs) but lost 2.5-3.2 at 149999
  and 153001 (1531 and 4096 rows), and sixteenths at three (rows of 300007-360007, striding) lost
  a point."""
CLUSTER_STRIDE_MAX_BLOCKS = 3
"""The backward's clusters of sixteen stride over the rows where they leave at most this many
blocks an SM (cluster_strides)."""
CLUSTER_MAX_REGISTERS = 64
"""Registers a thread of the cluster kernels has at most (their launch bounds: 1024 threads)."""
REGISTER_FILE = 65536
SM_THREADS = 2048
"""32-bit registers and resident threads an SM has (every GPU with clusters)."""
CLUSTER_MIN_SLICE_BYTES = 16 * 1024
"""The forward's cluster tier splits a row into no more slices than keep this many bytes each
(blocks of 128 threads and more at CLUSTER_PACKS_PER_THREAD 16-byte packs): see cluster_shape."""
DIRECTIONS = ("forward", "backward")

REGISTER_SHAPES = ((4, 128), (4, 256), (4, 512), (4, 1024), (8, 1024))
"""(packs a thread, threads) of the registers tier, in order of preference: 4 packs a thread up to
4096 packs a row, then 8 (a half row of 65536 at most). Every one compiles without spills."""

MAX_COLS = 1 << 30
"""Longest row the kernels accept: their in-row indices are 32-bit with headroom for the loop
step (a row of 2^30 half values is 2 GiB)."""


@dataclass(frozen=True)
class WarpShape:
    """Template arguments of a warp-tier kernel: P elements per access, NP packs per lane, G lanes
    per row, R rows per group and access."""

    pack: int
    packs_per_thread: int
    group: int
    rows_per_access: int

    @property
    def cols_per_thread(self) -> int:
        return self.pack * self.packs_per_thread

    @property
    def max_cols(self) -> int:
        return self.cols_per_thread * self.group

    @property
    def rows_per_block(self) -> int:
        return WARP_BLOCK // self.group * self.rows_per_access


@dataclass(frozen=True)
class Thresholds:
    """The measured switch points of one operation (forward, backward or online)."""

    warp_max_cols: int = 1024
    """Rows up to this many columns go to the warp tier (registers)."""
    small_group_rows: int = 2
    """Rows per access of thread groups narrower than a warp (one of SMALL_GROUP_ROWS)."""
    full_warp_rows: int = 1
    """Rows per access of full warps with at most FULL_WARP_MAX_PACKS packs per lane."""
    min_smem_blocks_per_sm: int = 1
    """The shared-memory tier is used while at least this many of its blocks fit on an SM."""
    block_rule: str = "threads"
    """How the shared-memory tier's block size follows from occupancy (one of BLOCK_RULES)."""
    uncached_packs_per_thread: int = 8
    """The uncached tier's block size gives each thread about this many packs of the row."""
    one_pass: bool = False
    """Block tiers compute (max, sum) in one pass with the online merge (forward only)."""
    online_warp_max_cols: int = 1024
    """The online implementation's thread-group kernel up to this many columns, blocks above."""
    registers_max_packs: int = 0
    """Forward rows past the warp tier of at most this many 16-byte packs go to the registers
    tier (0: none by length)."""
    registers_below_smem_blocks: int = 0
    """Forward rows whose shared-memory tier fits fewer than this many 128-thread blocks an SM go
    to the registers tier where it holds them (at most 8 x 1024 packs; 0: none by occupancy)."""
    partial_cache_share: float = 0.0
    """Backward rows whose y and dy do not fit in a block's shared memory still take the
    shared-memory tier, caching the row's first packs and reading the rest twice, where at least
    this share of the row fits (0: they take the uncached tier)."""
    cluster_below_smem_blocks: int = 0
    """Rows past the warp and registers tiers whose shared-memory tier fits fewer than this many
    128-thread blocks an SM (0: none fit) go to the cluster tier, on GPUs that launch clusters
    (0 disables it)."""
    cluster_min_blocks_per_sm: int = 1
    """The cluster tier is chosen only where its slices leave at least this many blocks an SM."""
    tile_max_row_bytes: int = 0
    """Rows of dense tensors of at most this many bytes that the warp tier does not hold go to the
    tile tier (0: none)."""
    tile_unaligned_only: bool = True
    """Only rows whose bytes are no multiple of 16 take the tile tier (the others' rows all start
    on a pack boundary, where the warp tier moves whole packs)."""
    tile_bytes: int = 8192
    """Bytes of each tensor one tile of the tile tier holds, about (whole rows, at least a row a
    group of lanes). 8 KiB against 16 KiB (H100, float16, 49152 rows, % of copy): backward 31
    columns 59 → 67, 33 43 → 49, 127 68 → 77, 129-1025 even; the blocks of 256 threads then fit
    eight an SM, the threads' limit, where the backward's 32 KiB fitted seven."""

    def __post_init__(self) -> None:
        if self.small_group_rows not in SMALL_GROUP_ROWS:
            raise ValueError(f"small_group_rows must be one of {SMALL_GROUP_ROWS}, got {self.small_group_rows}")
        if self.full_warp_rows not in FULL_WARP_ROWS:
            raise ValueError(f"full_warp_rows must be one of {FULL_WARP_ROWS}, got {self.full_warp_rows}")
        if self.block_rule not in BLOCK_RULES:
            raise ValueError(f"block_rule must be one of {BLOCK_RULES}, got {self.block_rule!r}")
        if self.uncached_packs_per_thread < 1:
            raise ValueError("uncached_packs_per_thread must be >= 1")
        if not 0.0 <= self.partial_cache_share <= 1.0:
            raise ValueError(f"partial_cache_share must be within [0, 1], got {self.partial_cache_share}")


@dataclass(frozen=True)
class TierChoice:
    """What runs: the tier, and the warp shape or the block size."""

    tier: str
    warp: WarpShape | None = None
    block: int | None = None
    one_pass: bool = False
    pack: int = 1
    packs_per_thread: int = 0
    """Registers tier: 16-byte packs each thread holds; flat tier: of y and of dy each."""
    partial: bool = False
    """Backward shared-memory tier: the row does not fit, so only its first packs are cached."""
    cluster: int = 0
    """Cluster tier: blocks per row (one of CLUSTER_SIZES)."""
    cluster_regs: int = 0
    """Cluster tier: 16-byte packs of its slice (of x; of y and of dy each) each thread keeps in
    registers, the rest cached in shared memory (0: all cached)."""
    group: int = 0
    """Tile tier: lanes per row; flat tier: lanes adding a row's segments."""
    tile_rows: int = 0
    """Tile and flat tiers: rows a block takes at a time."""
    lane_elements: int = 0
    """Tile tier: elements of its row each lane holds in registers (0: it reads the cached row at each pass)."""

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}, got {self.tier!r}")


def pack_elements(itemsize: int, aligned: bool) -> int:
    """Elements per access: a 16-byte pack where `aligned`, else 1.

    `aligned` says every tensor of the call starts each row at the same offset within 16 bytes
    (equal base offsets and equal row strides modulo 16 bytes), so one span of aligned packs
    serves them all (kernels/softmax.cuh's RowSpan); the caller checks the tensors. Any cols and
    any offset work: the kernels peel the partial head and tail packs of each row.
    """
    return PACK_BYTES // itemsize if aligned else 1


def span_cols(cols: int, pack: int, starts_aligned: bool) -> int:
    """Elements of the longest span of aligned packs a row of `cols` covers: cols where every row
    starts on a pack boundary, else up to pack - 1 more (a row starting mid-pack). The kernels'
    capacity (warp shapes, registers, shared memory) is sized for this, not for cols."""
    return cols if pack == 1 or starts_aligned else cols + pack - 1


def span_packs(cols: int, pack: int) -> int:
    """Packs of `pack` elements that hold `cols` elements."""
    return -(-cols // pack)


def _packs_options(pack: int, direction: str) -> tuple[int, ...]:
    limit = MAX_COLS_PER_THREAD[direction] if pack > 1 else MAX_UNPACKED_COLS_PER_THREAD
    return tuple(n for n in PACKS_PER_THREAD if n * pack <= limit)


def _rows_per_access(group: int, packs: int, small_group_rows: int, full_warp_rows: int) -> int:
    if group < 32:
        return small_group_rows
    return full_warp_rows if packs <= FULL_WARP_MAX_PACKS else 1


def warp_shapes(pack: int, direction: str, small_group_rows: int = 2, full_warp_rows: int = 1) -> tuple[WarpShape, ...]:
    """The warp-tier shapes of one pack size and one choice of rows per access, smallest first:
    small groups (one pack per lane) for rows up to 16 packs, then full warps with 1 .. NP packs
    per lane."""
    small = tuple(WarpShape(pack, 1, g, small_group_rows) for g in GROUP_WIDTHS[:-1])
    full = tuple(WarpShape(pack, n, 32, _rows_per_access(32, n, small_group_rows, full_warp_rows))
                 for n in _packs_options(pack, direction))
    return small + full


FIT_GROUPS = (2, 4, 8, 16)
"""Group widths of the fitted warp shapes: groups under a warp with several packs a lane."""
FIT_PACKS = {"forward": (2, 3), "backward": ()}
"""Packs a lane of the fitted warp shapes (16-byte packs only). More packs a lane, masked like
these, spilled in some instantiations (4 and 5) or took 120-128 registers (6 and 7); in the
backward, which holds y and dy, 3 spilled and 2 fits no odd span tighter than the power-of-two
groups do, so it has none."""

FIT_WIDE = {"forward": ((4, 4), (4, 5), (8, 4), (8, 5), (16, 4), (16, 5)), "backward": ((8, 4), (16, 4))}
"""(group, packs a lane) of the wide fitted shapes: groups under a warp that leave the partial head
and tail packs to their owner lanes, as full warps do, instead of masking every pack. They hold
odd spans in fewer slots (a row of 577 half values, 74 packs: 16 lanes of five, 80 slots, where a
full warp of three takes 96), and with more packs a lane and more rows a warp they issue fewer
instructions a row where a row is short (197 columns: 8 lanes of four, four rows a warp, where a
full warp of one pack a lane holds one). The backward, which holds y and dy, has 8 and 16 lanes of
four (32 16-bit values a lane: MAX_COLS_PER_THREAD): rows of 17-32 packs (127-255 columns), and
two rows a warp for rows of 33-64 packs that a full warp of two leaves partly idle (300 columns)."""

FIT_FAMILIES = ("masked", "wide")
"""The two kinds of fitted shapes, each timed on first use where one holds the row tighter."""

FIT_TIERS = {"masked": "warp_fit", "wide": "warp_wide"}
"""The tier name that forces each family's tightest shape (plan's `tier=`)."""

FIT_FAMILY = {tier: family for family, tier in FIT_TIERS.items()}
"""The family each of those tier names forces."""


def fit_shapes(pack: int, direction: str, family: str | None = None) -> tuple[WarpShape, ...]:
    """Warp shapes of groups under a warp holding several packs a lane, one row a group, of one
    family (FIT_FAMILIES) or both: with them a row of 17 packs (127 half values starting mid-pack)
    fits 8 lanes of 3 packs, 24 slots, where the power-of-two groups of one pack a lane give it a
    whole warp, 32 slots, 15 lanes idle."""
    if family not in (None, *FIT_FAMILIES):
        raise ValueError(f"family must be one of {FIT_FAMILIES}, got {family!r}")
    if pack == 1:  # 16-byte packs only, not the one-element fallback of misaligned tensors
        return ()
    limit = MAX_COLS_PER_THREAD[direction]
    by_family = {"masked": [(g, n) for g in FIT_GROUPS for n in FIT_PACKS[direction]],
                 "wide": list(FIT_WIDE[direction])}
    shapes = [shape for f in ((family,) if family else FIT_FAMILIES) for shape in by_family[f]]
    return tuple(WarpShape(pack, n, g, 1) for g, n in shapes if n * pack <= limit)


def _slots(shape: WarpShape) -> int:
    return shape.group * shape.packs_per_thread


def fit_shape(cols: int, pack: int, direction: str, current: WarpShape | None = None,
              family: str = "masked") -> WarpShape | None:
    """The fitted shape holding a row span of `cols` in the fewest lane slots (group x packs a lane),
    the wider group on a tie; where `current` is given, in fewer slots than it has, or, where the
    row leaves some of its slots idle, in as many on a narrower group (more rows a warp, so more
    loads in flight); None where none does."""
    packs = span_packs(cols, pack)

    def tighter(w: WarpShape) -> bool:
        if current is None:
            return True
        fewer = _slots(w) < _slots(current)
        return fewer or (packs < _slots(current) == _slots(w) and w.group < current.group)

    fitting = [w for w in fit_shapes(pack, direction, family) if packs <= _slots(w) and tighter(w)]
    if not fitting:
        return None
    return min(fitting, key=lambda w: (_slots(w), -w.group))


def small_group_rows_options(direction: str) -> tuple[int, ...]:
    return BACKWARD_SMALL_GROUP_ROWS if direction == "backward" else SMALL_GROUP_ROWS


def all_warp_shapes(pack: int, direction: str) -> tuple[WarpShape, ...]:
    """Every warp-tier shape instantiated: each rows-per-access choice."""
    shapes = [shape for r in small_group_rows_options(direction) for w in FULL_WARP_ROWS
              for shape in warp_shapes(pack, direction, r, w)]
    return tuple(dict.fromkeys(shapes))


def warp_shape(cols: int, pack: int, direction: str = "forward", small_group_rows: int = 2,
               full_warp_rows: int = 1) -> WarpShape | None:
    """The smallest warp-tier shape whose group holds a row of `cols`, or None when none does."""
    if small_group_rows not in small_group_rows_options(direction):
        raise ValueError(f"the {direction} warp tier takes {small_group_rows_options(direction)} rows per "
                         f"access in groups under a warp, not {small_group_rows}")
    for shape in warp_shapes(pack, direction, small_group_rows, full_warp_rows):
        if cols <= shape.max_cols:
            return shape
    return None


def block_size_by_occupancy(blocks_per_sm: Mapping[int, int], rule: str = "threads") -> int | None:
    """The shared-memory tier's block size from the occupancy table; None if 128 threads cannot
    launch (the row's cache does not fit in shared memory).

    "threads": the size that keeps the most threads resident per SM, the smaller one on a tie
    (more rows in flight). "oneflow": the article's rule, the largest size that keeps as many
    blocks resident as 128 threads do. They differ where registers, not shared memory, limit the
    larger blocks: on an H200 the backward at cols 8192 ran at 96% of copy with OneFlow's 128
    threads (7 blocks, 896 threads per SM) and at 102% with 256 (4 blocks, 1024 threads).
    """
    if rule not in BLOCK_RULES:
        raise ValueError(f"rule must be one of {BLOCK_RULES}, got {rule!r}")
    base = blocks_per_sm.get(BLOCK_SIZES[0], 0)
    if base <= 0:
        return None
    if rule == "oneflow":
        for size in reversed(BLOCK_SIZES[1:]):
            if blocks_per_sm.get(size, 0) == base:
                return size
        return BLOCK_SIZES[0]
    best = BLOCK_SIZES[0]
    for size in BLOCK_SIZES[1:]:
        if blocks_per_sm.get(size, 0) * size > blocks_per_sm.get(best, 0) * best:
            best = size
    return best


def uncached_block_size(cols: int, pack: int, packs_per_thread: int) -> int:
    """The uncached tier's block size: about `packs_per_thread` packs of the row per thread, a
    power of two from 128 to 1024. Measured on an H200: large blocks starve short rows (cols 4096
    in float16 at 1024 threads: 24% of copy, at 256: 78%), small blocks starve long ones."""
    want = -(-span_packs(cols, pack) // packs_per_thread)
    size = BLOCK_SIZES[0]
    while size < want and size < BLOCK_SIZES[-1]:
        size *= 2
    return size


def registers_shape(cols: int, pack: int) -> tuple[int, int] | None:
    """(packs a thread, threads) of the registers tier for a row of `cols`, or None where it does
    not apply: the smallest block of the first REGISTER_SHAPES entry that holds the row."""
    if pack == 1:
        return None
    packs = span_packs(cols, pack)
    for per_thread, threads in REGISTER_SHAPES:
        if per_thread * threads >= packs:
            return per_thread, threads
    return None


class ClusterShape(NamedTuple):
    """The cluster tier's launch: `size` blocks a row of `threads` threads, `smem` bytes of dynamic
    shared memory each, and `register_packs` packs of the slice a thread holds in registers."""

    size: int
    threads: int
    smem: int
    register_packs: int = 0

    def choice(self, pack: int) -> TierChoice:
        return TierChoice("cluster", block=self.threads, pack=pack, cluster=self.size, cluster_regs=self.register_packs)


def cluster_shape(cols: int, pack: int, itemsize: int, direction: str, smem_limit: int,
                  min_blocks_per_sm: int = 1, largest: int = CLUSTER_SIZES[-1],
                  resident: Callable[[ClusterShape], int] | None = None) -> ClusterShape | None:
    """The cluster tier's shape (blocks per row, threads, dynamic shared memory, packs a thread
    holds in registers) for a row span of `cols`, or None where even the largest cluster (of at
    most `largest` blocks) leaves fewer than `min_blocks_per_sm` blocks an SM within `smem_limit`.
    `resident` answers how many blocks of a shape an SM holds (the occupancy query; None: as many
    as resident_estimate allows).

    The backward takes the smallest cluster whose slice leaves room for two blocks an SM, else the
    smallest whose slice fits; its sixteen stride over the rows and load the next row while they
    store (cluster_strides), which carries them at one block an SM too (float32 rows of 262144 on
    an H100: 82% of copy, where re-reading the row through L2 gave 59%).
    The forward takes the largest portable cluster whose slices leave two blocks an SM and hold
    at least CLUSTER_MIN_SLICE_BYTES (the smallest leaving two where every slice is smaller), and
    sixteen only where no portable size leaves two: with the mailbox exchange, smaller slices on
    more blocks beat fewer larger ones (H100, float16: 4096 rows of 128256 columns, eighths of
    32 KiB against quarters of 64 KiB; 1024 rows of 100003, eighths against halves), until a slice
    is so small that its block has 128 threads (sixteenths of 100003: 6 points below eighths).
    Whole 16-byte packs then take the first of CLUSTER_HELD_SHAPES of the chosen size (of any size
    where none fits cached) that leaves at least its blocks an SM and more than the slices cached
    whole (those marked `ties`: at least as many): float32 rows of 262144, forward sixteenths of
    64 KiB, 12 KiB of them held, four an SM against three, and backward sixteenths of y and dy, 64
    of 128 KiB held, two against one; 16-bit backward rows of 262144, sixteenths of 64 KiB, 16 KiB
    held, four against three."""
    sizes = [c for c in CLUSTER_SIZES if c <= largest]
    slice_bytes = {c: cluster_smem_bytes(cols, pack, itemsize, direction, c) for c in sizes}
    fitting = [c for c in sizes if slice_bytes[c] <= smem_limit // max(1, min_blocks_per_sm)
               and (c <= PORTABLE_CLUSTER or cluster_strides(c, direction, 1) or slice_bytes[c] <= smem_limit // 2)]
    cached = None
    if fitting:
        two_an_sm = [c for c in fitting if slice_bytes[c] <= smem_limit // 2]
        size = two_an_sm[0] if two_an_sm else fitting[0]
        if direction == "forward":
            leaves_two = [c for c in two_an_sm if c <= PORTABLE_CLUSTER]
            sized = [c for c in leaves_two if slice_bytes[c] >= CLUSTER_MIN_SLICE_BYTES]
            size = sized[-1] if sized else leaves_two[0] if leaves_two else size
        cached = cluster_shape_of(size, cols, pack, itemsize, direction)
    held_shapes = [held for held in cluster_held_shapes(direction, pack, itemsize)
                   if held.size in sizes and (cached is None or held.size == cached.size)]
    if held_shapes:
        blocks = resident or (lambda shape: resident_estimate(shape, smem_limit))
        cached_blocks = blocks(cached) if cached else 0
        for held in held_shapes:
            beat = cached_blocks + (0 if held.ties else 1) if cached else max(1, min_blocks_per_sm)
            smem = slice_bytes[held.size] - cluster_held_bytes(direction, held.packs, held.threads, pack, itemsize)
            shape = ClusterShape(held.size, held.threads, smem, held.packs)
            if 0 < smem <= smem_limit and blocks(shape) >= max(held.min_blocks, beat):
                return shape
    return cached


def resident_estimate(shape: ClusterShape, smem_limit: int) -> int:
    """Blocks of a cluster shape an SM holds, without the occupancy query: as many as its shared
    memory, its threads and (holding packs: CLUSTER_MAX_REGISTERS a thread) its registers allow."""
    blocks = min(smem_limit // max(1, shape.smem), SM_THREADS // shape.threads)
    if shape.register_packs:
        blocks = min(blocks, REGISTER_FILE // (shape.threads * CLUSTER_MAX_REGISTERS))
    return blocks


def cluster_held_shapes(direction: str, pack: int, itemsize: int) -> list[HeldShape]:
    """The CLUSTER_HELD_SHAPES built for this direction, storage and pack: whole 16-byte packs."""
    if pack * itemsize != PACK_BYTES:
        return []
    return [held for held in CLUSTER_HELD_SHAPES[direction] if held.itemsize == itemsize]


def cluster_held_bytes(direction: str, register_packs: int, threads: int, pack: int, itemsize: int) -> int:
    """Bytes of a cluster block's slice its `threads` threads hold in registers rather than cache,
    `register_packs` packs each (of x; or of y and of dy)."""
    return register_packs * threads * pack * itemsize * (2 if direction == "backward" else 1)


def cluster_shape_of(size: int, cols: int, pack: int, itemsize: int, direction: str) -> ClusterShape:
    """The cluster tier splitting a row span of `cols` over `size` blocks, every pack cached: the
    block gives each thread about CLUSTER_PACKS_PER_THREAD packs."""
    slice_packs = -(-span_packs(cols, pack) // size)
    return ClusterShape(size, uncached_block_size(slice_packs * pack, pack, CLUSTER_PACKS_PER_THREAD),
                        cluster_smem_bytes(cols, pack, itemsize, direction, size))


def cluster_strides(size: int, direction: str, blocks_per_sm: int) -> bool:
    """Whether the cluster tier's grid is the clusters the GPU holds at once, striding over the
    rows, each block loading its next row's slices while it stores the row before (the kernel's
    kStride), rather than a cluster a row: the backward's clusters of sixteen at up to
    CLUSTER_STRIDE_MAX_BLOCKS blocks an SM (`blocks_per_sm`). A non-portable cluster is slow to
    find room for at every row; on an H100 striding took the float16 backward at 262144 columns
    from 83% of copy to 86% (three blocks an SM, cached whole) and the float32 one from 88% to 96%
    (two an SM, 4 packs of y and of dy a thread held in registers), but lost 1.6 points in
    backward clusters of eight (128256 columns), 4.5 in the float16 backward's held sixteenths at
    four blocks an SM (262144 columns), and 2-11 points in the forward (8-10 with the mailbox
    exchange)."""
    return direction == "backward" and size > PORTABLE_CLUSTER and blocks_per_sm <= CLUSTER_STRIDE_MAX_BLOCKS


def cluster_block_size(preferred: int, resident: Mapping[int, int]) -> int:
    """The cluster tier's block: `preferred` (about CLUSTER_PACKS_PER_THREAD packs a thread) or a
    smaller one of BLOCK_SIZES where that keeps more of the row's blocks resident an SM
    (`resident`: blocks an SM at each size, with the slice's shared memory), the largest of those
    that keep the most. A slice of 4097 float32 packs (rows of 262147) wants 1024 threads, which
    leave two blocks an SM where 512 leave three: 51% of copy against 76% for 4096 packs at 512
    (H100, forward, clusters of 16)."""
    sizes = [size for size in BLOCK_SIZES if size <= preferred] or [preferred]
    most = max(resident.get(size, 0) for size in sizes)
    return max(size for size in sizes if resident.get(size, 0) == most)


def cluster_smem_bytes(cols: int, pack: int, itemsize: int, direction: str, size: int) -> int:
    """Dynamic shared memory of one block of the cluster tier: its slice of the row's packs (x;
    or y and dy), the slices of `size` blocks covering the span."""
    per_pack = pack * itemsize * (2 if direction == "backward" else 1)
    return -(-span_packs(cols, pack) // size) * per_pack


@dataclass(frozen=True)
class TileShape:
    """The tile tier's launch: `group` lanes a row, `tile_rows` rows a block at a time, `smem` bytes
    of dynamic shared memory (every tensor's copy of a tile)."""

    group: int
    tile_rows: int
    smem: int
    lane_elements: int = 0  # row_tile.lane_elements: the same rule in both directions


def tile_smem_bytes(tile_rows: int, cols: int, itemsize: int, direction: str) -> int:
    """Dynamic shared memory of a tile of `tile_rows` rows: each tensor read (x; or y and dy) as
    the 16-byte packs covering it at any phase."""
    return row_tile.smem_bytes(tile_rows, cols, itemsize, 2 if direction == "backward" else 1)


def tile_shape(rows: int, cols: int, itemsize: int, direction: str, tile_bytes: int, sms: int,
               smem_limit: int) -> TileShape | None:
    """The tile tier's shape for (rows, cols): tiles of about `tile_bytes` a tensor, whole rows, a
    multiple of the block's groups, and small enough that every SM gets two tiles where the
    tensor allows; None where one row per group does not fit `smem_limit`."""
    group = row_tile.group_width(cols)
    slots = TILE_BLOCK // group
    by_size = row_tile.rows_of_size(tile_bytes, cols, itemsize)
    by_spread = -(-rows // (2 * max(1, sms))) // slots * slots
    tile_rows = max(slots, min(by_size, by_spread))
    smem = tile_smem_bytes(tile_rows, cols, itemsize, direction)
    if smem > smem_limit:
        return None
    return TileShape(group, tile_rows, smem, row_tile.lane_elements(cols))


FLAT_BLOCK = 256
"""Threads per block of the flat tier (softmax.cu's BW_SOFTMAX_FLAT_BLOCK)."""
FLAT_PACKS_PER_THREAD = (2, 4)
"""16-byte packs of y and of dy a thread of the flat tier holds (its kernels' K). H100, float16
backward, 49152 rows, % of copy (tools/tiers.py), two packs against four: 31 columns 69 / 64, 33
64 / 63, 127 80 / 75, 129 72 / 77, 197 78 / 80, 577 95 / 97, 1023 94 / 99, 2047 81 / 100; 151296 x
197 96 / 98. One pack a thread was even with two at 31 and 33 columns (67 / 69, 65 / 64) and lost
by 10-36 points from 127."""
FLAT_COMBINE_READS = 4
"""Segments one lane of the flat tier's row groups adds, at most, before the group's shuffles."""


@dataclass(frozen=True)
class FlatShape:
    """The flat tier's launch: `tile_rows` rows a block at a time, `packs_per_thread` packs of each
    tensor a thread, `group` lanes adding a row's segments."""

    group: int
    tile_rows: int
    packs_per_thread: int


def flat_rows_most(cols: int, itemsize: int, packs_per_thread: int) -> int:
    """The most rows of `cols` a flat tile holds at `packs_per_thread` (their packs at any phase
    within the block's threads' packs); 0 where not even one row fits."""
    pack = PACK_BYTES // itemsize
    return (FLAT_BLOCK * packs_per_thread * pack - pack + 1) // cols


def flat_shape(rows: int, cols: int, itemsize: int, slots: Mapping[int, int],
               packs_per_thread: int | None = None) -> FlatShape | None:
    """The flat tier's shape for (rows, cols), given the GPU's resident blocks (`slots`: SMs times
    blocks an SM) of each instance in FLAT_PACKS_PER_THREAD.

    Packs a thread (None: chosen): the fewest whose one wave of full tiles holds every row (small
    tensors spread over the most threads), else the most (more of the row's packs for each tile's
    barriers and sums). Tiles: as few waves of the resident blocks as hold the rows, the rows spread
    evenly over them (no last wave of a few tiles). `group` lanes add a row's segments: as many as
    leave every row of a tile a group at once, up to one lane for FLAT_COMBINE_READS segments.
    None where a row is shorter than a pack (a pack would span more than two rows) or longer than a
    block holds."""
    pack = PACK_BYTES // itemsize
    if cols < pack:
        return None
    fitting = [k for k in FLAT_PACKS_PER_THREAD if flat_rows_most(cols, itemsize, k) >= 1]
    if packs_per_thread is None:
        if not fitting:
            return None
        packs_per_thread = next((k for k in fitting
                                 if rows <= max(1, slots.get(k, 0)) * flat_rows_most(cols, itemsize, k)),
                                fitting[-1])
    elif packs_per_thread not in fitting:
        return None
    most = flat_rows_most(cols, itemsize, packs_per_thread)
    resident = max(1, slots.get(packs_per_thread, 0))
    waves = -(-rows // (resident * most))
    tile_rows = min(most, -(-rows // (resident * waves)))
    segments = -(-(cols + pack - 1) // pack) + 1
    group = 1
    while group < 32 and group * 2 * tile_rows <= FLAT_BLOCK and group * FLAT_COMBINE_READS < segments:
        group *= 2
    return FlatShape(group, tile_rows, packs_per_thread)


def smem_bytes(direction: str, cols: int, itemsize: int, pack: int = 1) -> int:
    """Dynamic shared memory of the cached block tier: the row's packs as stored (x; or y and dy)."""
    return span_packs(cols, pack) * pack * itemsize * (2 if direction == "backward" else 1)


def cache_bytes(direction: str, cols: int, itemsize: int, pack: int, limit: int, share: float) -> int:
    """Dynamic shared memory to launch the cached block tier with: the whole row where it fits in
    `limit` bytes; for the backward, otherwise, as many whole (y, dy) pack pairs as fit, when they
    are at least `share` of the row (the kernel caches the packs its shared memory holds and reads
    the others twice); else the whole row's size, which cannot launch (the uncached tier runs)."""
    need = smem_bytes(direction, cols, itemsize, pack)
    if need <= limit or direction != "backward" or share <= 0:
        return need
    pair = 2 * pack * itemsize
    fits = limit // pair * pair
    return fits if fits >= share * need else need


def choose_tier(cols: int, pack: int, *, direction: str = "forward",
                smem_blocks_per_sm: Mapping[int, int] | None = None,
                thresholds: Thresholds = Thresholds(),
                cluster: ClusterShape | None = None, tile: TileShape | None = None,
                row_bytes: int = 0) -> TierChoice:
    """The tier for a row whose span (span_cols) is `cols` elements, moved `pack` at a time.

    smem_blocks_per_sm: resident blocks per SM of the cached block kernel at each block size with
    this row's shared memory (the occupancy query); only consulted when the warp tier does not
    apply, and None means "not asked" (treated as: does not fit).
    cluster: the cluster tier's shape here (cluster_shape), None where the GPU has no clusters.
    tile: the tile tier's shape (tile_shape), None where the tensors are not dense; row_bytes is
    then the row's size (cols times the item size, not the span).
    """
    if cols < 1:
        raise ValueError(f"cols must be >= 1, got {cols}")
    if cols <= thresholds.warp_max_cols:
        shape = warp_shape(cols, pack, direction, thresholds.small_group_rows, thresholds.full_warp_rows)
        if shape is not None:
            return TierChoice("warp", warp=shape, pack=pack)
    if tile is not None and takes_tile(row_bytes, thresholds):
        return TierChoice("tile", block=TILE_BLOCK, pack=pack, group=tile.group, tile_rows=tile.tile_rows,
                          lane_elements=tile.lane_elements)
    one_pass = thresholds.one_pass and direction == "forward"
    shape = registers_shape(cols, pack) if direction == "forward" else None
    if shape is not None:
        resident = (smem_blocks_per_sm or {}).get(BLOCK_SIZES[0], 0)
        crowded = resident < thresholds.registers_below_smem_blocks
        if _short_for_registers(cols, pack, direction, thresholds) or crowded:
            return TierChoice("registers", block=shape[1], pack=pack, packs_per_thread=shape[0])
    resident = (smem_blocks_per_sm or {}).get(BLOCK_SIZES[0], 0)
    if cluster is not None and resident < thresholds.cluster_below_smem_blocks:
        return cluster.choice(pack)
    if smem_blocks_per_sm is not None:
        block = block_size_by_occupancy(smem_blocks_per_sm, thresholds.block_rule)
        if block is not None and smem_blocks_per_sm[BLOCK_SIZES[0]] >= max(1, thresholds.min_smem_blocks_per_sm):
            return TierChoice("smem", block=block, one_pass=one_pass, pack=pack)
    block = uncached_block_size(cols, pack, thresholds.uncached_packs_per_thread)
    return TierChoice("uncached", block=block, one_pass=one_pass, pack=pack)


def takes_tile(row_bytes: int, thresholds: Thresholds) -> bool:
    """Whether a row of `row_bytes` of a dense tensor goes to the tile tier."""
    if not 0 < row_bytes <= thresholds.tile_max_row_bytes:
        return False
    return not thresholds.tile_unaligned_only or row_bytes % PACK_BYTES != 0


ELEMENTS_TIER = "warp_elements"
"""The warp tier moving one element per access (the kernels that serve tensors whose rows start at
different offsets within 16 bytes), timed on first use against the packed warp shapes where no pack
divides a row. Narrow odd rows in packs hold a partial pack at each end and several packs a lane, so
their kernels take 60-90 registers and keep a quarter to a half of the warp slots busy; one element
a lane takes 22-37 and keeps 60-85% busy. Nsight Compute, H100, float16, cold L2 (µs, packed
against one element a lane): 49152 x 127 forward 14.2 / 10.8, backward (the tile tier) 15.2 /
13.6; 49152 x 129 forward 14.0 / 12.1, backward 18.0 / 15.2; 151296 x 197 forward 46.5 / 44.4;
it lost at 31 and 33 columns (6.9-9.0 / 10.3-10.6) and in the 197-column backward (61.2 / 64.9)."""

FORWARD_TILE_MAX_ROW_BYTES = 512
"""Forward rows of at most this many bytes time the tile tier on first use: those its lanes hold in
registers (row_tile.LANE_ELEMENTS) at two bytes an element. Past them it lost by 20-30 points."""


CLUSTER_TIMED_SMEM_BLOCKS = 2
"""Rows whose cached block leaves at most this many blocks an SM time the cluster tier on first use
(timed_alternatives)."""

CLUSTER_TIMED_MIN_BLOCKS = 2
"""Where a cluster is a candidate, the other sizes whose slices leave at least this many blocks an
SM are timed beside it (plan._other_cluster_sizes)."""


def timed_alternatives(choice: TierChoice, direction: str, *, dense: bool, row_bytes: int,
                       smem_blocks_per_sm: int | None = None, clusters: bool = False,
                       fits_tighter: tuple[str, ...] = (), itemsize: int = 2) -> tuple[str, ...]:
    """Tiers to time against `choice` on first use, where measurements split either way and no rule
    of the row's bytes told the winners apart (H100, float16, % of copy, bwbench.bench):

    - backward rows of a dense tensor that the warp tier holds and that no 16-byte pack divides:
      the tile tier won at 31 columns (67 against 46), 33 (49 against 47) and 127 (77 against 64)
      and lost at 129 (58 against 65), 197 (73 against 79) and 577 (87 against 93);
    - forward rows of the same kind up to FORWARD_TILE_MAX_ROW_BYTES: the tile tier won at 31
      columns (52 against 46) and lost at 33, 127, 129 and 197 (33-51 against 47-66);
    - rows the cached block tier holds at CLUSTER_TIMED_SMEM_BLOCKS blocks an SM or fewer, forward
      and backward, where the GPU has clusters: the forward's cluster won at 100003 columns (88
      against 82) and lost at 65537 (81 against 87); at 4096 rows of 50257 half columns (two
      blocks an SM forward, one backward) it won both, 96.2 against 91.0 forward and 94.5 against
      89.2 backward;
      float32 forward rows it holds of CLUSTER_MIN_SLICE_BYTES and more, at any blocks an SM:
      1531 and 6007 rows of 5003 columns, clusters of two, 81.6 and 92.3 against 74.2 and 88.6;
      of 20011, clusters of four, 92.7 and 95.3 against 88.0 and 94.3 (float16 at the same
      widths: the cached block ahead, 77.7 and 89.6 against 73.1 and 87.9 for clusters of two).

    And the fitted warp shapes (fit_shape) of each family in `fits_tighter` (those that hold the
    row tighter than the warp tier's shape): "warp_fit", masked, won at 127 and 129 columns (55
    and 57 against 39) and lost at 31 and 33 (37 against 46-47); "warp_wide" won at 300 and 577
    (80 and 90 against 50 and 74) and, in the backward, at 129 and 197 (65 and 79 against the
    tile tier's 58 and 74).

    And, for every packed warp-tier row that no 16-byte pack divides, the warp tier one element per
    access (ELEMENTS_TIER), which won at 127, 129 and 197 columns and lost at 31 and 33.

    And, for those backward rows and the ones the tile tier takes, the flat tier (bwbench run,
    float16, 49152 rows, two runs): it took the backward at 31 columns from 66 to 70, 33 from 47-49
    to 64, 300 from 85 to 88, 577 from 92-93 to 97, 1023 and 1025 from 93 to 98, and 151296 x 197
    from 93 to 98; at 127 and 129 the warp tier kept winning (89 and 80 against 80 and 77).
    """
    if choice.tier == "warp":
        fitted = tuple(FIT_TIERS[family] for family in FIT_FAMILIES if family in fits_tighter)
        odd = choice.pack > 1 and row_bytes % PACK_BYTES != 0
        elements = (ELEMENTS_TIER,) if odd else ()
        flat = ("flat",) if direction == "backward" else ()
        if dense and odd and (direction == "backward" or row_bytes <= FORWARD_TILE_MAX_ROW_BYTES):
            return ("tile", *flat, *fitted, *elements)
        return (*fitted, *elements)
    if choice.tier == "tile" and direction == "backward":
        return ("flat",)
    if choice.tier != "smem" or not clusters:
        return ()
    few_blocks = smem_blocks_per_sm is not None and smem_blocks_per_sm <= CLUSTER_TIMED_SMEM_BLOCKS
    wide_float32 = direction == "forward" and itemsize == 4 and row_bytes >= CLUSTER_MIN_SLICE_BYTES
    return ("cluster",) if few_blocks or wide_float32 else ()


def needs_occupancy(cols: int, pack: int, direction: str, thresholds: Thresholds) -> bool:
    """Whether choose_tier will look at the shared-memory occupancy (so the caller asks the GPU)."""
    shape = warp_shape(cols, pack, direction, thresholds.small_group_rows, thresholds.full_warp_rows)
    if cols <= thresholds.warp_max_cols and shape is not None:
        return False
    return not _short_for_registers(cols, pack, direction, thresholds)


def _short_for_registers(cols: int, pack: int, direction: str, thresholds: Thresholds) -> bool:
    """A forward row the registers tier takes by its length alone (no occupancy needed)."""
    return (direction == "forward" and registers_shape(cols, pack) is not None
            and span_packs(cols, pack) <= thresholds.registers_max_packs)


def choose_online(cols: int, pack: int, thresholds: Thresholds = Thresholds()) -> TierChoice:
    """The online implementation: a thread group per row (the narrowest that covers the row in one
    pack per lane, at most a warp) up to `online_warp_max_cols`, a block per row above."""
    if cols < 1:
        raise ValueError(f"cols must be >= 1, got {cols}")
    if cols <= thresholds.online_warp_max_cols:
        group = next((g for g in GROUP_WIDTHS if cols <= g * pack), GROUP_WIDTHS[-1])
        return TierChoice("online_warp", warp=WarpShape(pack, 1, group, 1), pack=pack)
    block = uncached_block_size(cols, pack, thresholds.uncached_packs_per_thread)
    return TierChoice("online_block", block=block, one_pass=True, pack=pack)


# ---------------------------------------------------------------------------------------------
# Kernel names (CuPy name expressions) and the full instantiation list
# ---------------------------------------------------------------------------------------------


def _bool(value: bool) -> str:
    return "true" if value else "false"


def kernel_name(ctype: str, algorithm: str, direction: str, choice: TierChoice) -> str:
    """The name expression of the kernel that runs `choice` (see kernels/softmax.cu)."""
    algo = ALGORITHMS[algorithm]
    p = choice.pack
    if direction == "forward":
        if choice.tier == "warp":
            w = choice.warp
            return f"softmax_warp<{ctype}, {algo}, {p}, {w.packs_per_thread}, {w.group}, {w.rows_per_access}>"
        if choice.tier in ("smem", "uncached", "online_block"):
            cached = choice.tier == "smem"
            return f"softmax_block<{ctype}, {algo}, {p}, {_bool(cached)}, {_bool(choice.one_pass)}>"
        if choice.tier == "online_warp":
            return f"softmax_warp_online<{ctype}, {algo}, {p}, {choice.warp.group}>"
        if choice.tier == "registers":
            return f"softmax_rows<{ctype}, {algo}, {p}, {choice.packs_per_thread}, {choice.block}>"
        if choice.tier == "cluster":
            return f"softmax_cluster<{ctype}, {algo}, {p}, {choice.cluster}, {choice.cluster_regs}>"
        if choice.tier == "tile":
            return f"softmax_tile<{ctype}, {algo}, {choice.lane_elements}>"
    elif direction == "backward":
        if choice.tier == "warp":
            w = choice.warp
            return (f"softmax_grad_warp<{ctype}, {algo}, {p}, {w.packs_per_thread}, {w.group}, "
                    f"{w.rows_per_access}>")
        if choice.tier == "smem" and choice.partial:
            return f"softmax_grad_partial<{ctype}, {algo}, {p}>"
        if choice.tier in ("smem", "uncached"):
            return f"softmax_grad_block<{ctype}, {algo}, {p}, {_bool(choice.tier == 'smem')}>"
        if choice.tier == "cluster":
            return f"softmax_grad_cluster<{ctype}, {algo}, {p}, {choice.cluster}, {choice.cluster_regs}>"
        if choice.tier == "tile":
            return f"softmax_grad_tile<{ctype}, {algo}, {choice.lane_elements}>"
        if choice.tier == "flat":
            return f"softmax_grad_flat<{ctype}, {algo}, {choice.packs_per_thread}>"
    raise ValueError(f"no {direction} kernel for tier {choice.tier!r}")


def kernel_names(ctype: str, direction: str) -> tuple[str, ...]:
    """Every kernel one storage type instantiates for a direction: all warp shapes of both pack
    sizes, both block tiers (one- and three-pass for the forward), the online thread-group kernels
    (forward softmax only: the `online` implementation), for both algorithms."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    names: list[str] = []
    wide = PACK_BYTES // ITEMSIZE[ctype]
    for algorithm in ALGORITHMS:
        lanes = (0, *row_tile.LANE_ELEMENTS)
        names += [kernel_name(ctype, algorithm, direction, TierChoice("tile", pack=wide, lane_elements=e))
                  for e in lanes]
        if direction == "backward":
            names += [kernel_name(ctype, algorithm, direction, TierChoice("flat", pack=wide, packs_per_thread=k))
                      for k in FLAT_PACKS_PER_THREAD]
        for pack in (wide, 1):
            for shape in all_warp_shapes(pack, direction) + fit_shapes(pack, direction):
                names.append(kernel_name(ctype, algorithm, direction, TierChoice("warp", warp=shape, pack=pack)))
            for tier in ("smem", "uncached"):
                for one_pass in ((False, True) if direction == "forward" else (False,)):
                    names.append(kernel_name(ctype, algorithm, direction,
                                             TierChoice(tier, block=128, one_pass=one_pass, pack=pack)))
            if direction == "backward":
                names.append(kernel_name(ctype, algorithm, direction,
                                         TierChoice("smem", block=128, pack=pack, partial=True)))
            for size in CLUSTER_SIZES:
                names.append(kernel_name(ctype, algorithm, direction,
                                         TierChoice("cluster", block=128, pack=pack, cluster=size)))
                names += [kernel_name(ctype, algorithm, direction, TierChoice(
                    "cluster", block=held.threads, pack=pack, cluster=size, cluster_regs=held.packs))
                    for held in cluster_held_shapes(direction, pack, ITEMSIZE[ctype]) if held.size == size]
            if direction == "forward" and pack > 1:
                for per_thread, threads in REGISTER_SHAPES:
                    names.append(kernel_name(ctype, algorithm, direction, TierChoice(
                        "registers", block=threads, pack=pack, packs_per_thread=per_thread)))
            if direction == "forward" and algorithm == "softmax":
                for g in GROUP_WIDTHS:
                    names.append(kernel_name(ctype, algorithm, direction,
                                             TierChoice("online_warp", warp=WarpShape(pack, 1, g, 1), pack=pack)))
    return tuple(dict.fromkeys(names))


def with_overrides(thresholds: Thresholds, **changes) -> Thresholds:
    """A copy of `thresholds` with some fields changed (tuning runs and tests)."""
    return replace(thresholds, **changes)
