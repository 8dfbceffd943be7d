"""What a LayerNorm / RMSNorm call launches (kernels/norm.cu): pure, testable without a GPU.

The tiers, chosen by the row length as for the softmax (`plan`):

- "warp": a group of 1 ... 32 lanes per row, the row in registers, for cols <= 2048;
- "registers": one block per row, the row in the block's registers (4 or 8 16-byte packs a
  thread), for rows up to 4096 packs: no shared-memory row cache and no per-pack merge;
- "smem": one block per row, the row cached in shared memory (copied in with cp.async), while a
  block with that much shared memory can still launch (the occupancy query is not 0);
- "uncached": one block per row, x read twice (the second time mostly from L2), any cols;
- "tile": rows whose bytes are no multiple of 16 (odd widths), up to TILE_MAX_ROW_BYTES: a block
  copies several consecutive rows (one contiguous run) through shared memory in aligned 16-byte
  packs, so x and y move in whole packs although the rows do not start on one. Offered first,
  with the row tier as the alternative the launcher times against it on first use;
- "span": longer odd rows, one block a row copied through shared memory the same way (a tile of
  one row), offered first likewise while the row fits shared memory;
- "span_rows": odd rows held in registers, one block a row: each thread loads its aligned 16-byte
  packs of the span covering the row straight from global memory; gamma and beta wait in shared
  memory, shifted to the row's offset within a pack. Timed beside the tile or span tier;
- "cluster": rows longer than the registers and span_rows tiers hold, on GPUs with thread-block
  clusters: 2, 4 or 8 blocks a row, each caching its slice, their sums exchanged through
  distributed shared memory. Offered first, timed beside the tiers that hold the row whole.

A block tier is latency-bound (measured on an H200: each block spends microseconds per row
whatever the row length), so its throughput is rows in flight per SM times bytes per row over
the time per row. `rank_blocks` ranks the block sizes by that model; where `plan` leaves
alternatives, the launcher times them once per shape on the caller's arguments and keeps the
fastest, as cuDNN's and Triton's autotuners do. `optimized_names` and `NAIVE_KERNELS` list every
kernel compiled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from bwbench.cuda import row_tile

__all__ = ["DEFAULT_GRID_WAVES", "NAIVE_KERNELS", "NormPlan", "TIERS", "block_name", "full_pack", "optimized_names",
           "plan", "rank_blocks", "rows_configs", "span_rows_configs", "span_rows_grid", "warp_config", "warp_configs"]

TIERS = ("warp", "registers", "smem", "uncached", "tile", "span", "span_rows", "cluster")

WARP_BLOCK = 128
"""Threads per block of norm_warp (norm::kWarpBlock in kernels/norm.cu)."""

WARP_MAX_COLS = 2048
"""Longest row the warp tier keeps in registers: 32 lanes x 64 columns each. Rows longer than
1024 are also timed against the shared-memory tier on first use (`plan`'s alternatives)."""

WARP_SURE_COLS = 1024
"""Up to here the warp tier is used without timing alternatives."""

BLOCK_SIZES = (32, 64, 128, 256, 512)
"""Candidate threads per block of the block tiers, smallest first."""

CACHED_STORE_BATCH = 4
UNCACHED_STORE_BATCH = 2
"""Packs a thread handles per step of the second pass (kernels/norm.cu: kBlockStoreBatch)."""

ROW_LATENCY_US = 2.0
STEP_LATENCY_US = 0.5
"""The launch model's guesses: a block spends about ROW_LATENCY_US per row waiting for x, plus
STEP_LATENCY_US per step of its second pass (a round trip for gamma and beta). Measured on an
H200, a block tier is latency-bound (its throughput is rows in flight x row bytes / time per row),
so these only rank the block sizes; the launcher then times the candidates once per shape."""

REGISTER_PACKS = (4, 8)
"""16-byte packs a thread holds in the registers tier (norm_rows' P)."""

REGISTER_BLOCKS = (64, 128, 256, 512, 1024)
"""Threads per block of the registers tier (norm_rows' B): a row is P x B packs at most."""

REGISTER_HOLD_PACKS = 4
"""Only the 4-packs-a-thread kernels get a variant holding gamma/beta in registers: ptxas keeps
them as floats (8 registers a pack and parameter), which at 8 packs leaves one block an SM."""

REGISTER_SPARE = 40
"""Registers a norm_rows thread needs besides its row (4 a pack, kept in storage format) and held
parameters (as floats): addresses, loop state, statistics. The instantiation filter's margin;
the no-spill compile test checks it (ptxas -v, sm_90: 45-64 registers without held parameters
at 4 packs, 63-80 at 8; 72-116 with them)."""

UNCACHED_BLOCK = 512
NAIVE_BLOCK = 256
"""Threads per block of the naive kernels (grid-stride)."""

STATIC_SMEM_MARGIN = 1024
"""Bytes of the per-block shared-memory limit left for the kernels' static reduction buffers."""

TILE_BLOCK = row_tile.BLOCK
"""Threads per block of norm_tile."""

TILE_MAX_ROW_BYTES = 4096
"""Rows of odd byte counts up to this size are offered the tile tier."""

TILE_BYTES = (16384, 8192)
"""Bytes of x one tile holds, about: each size is a candidate (the first is the plan's guess)."""

SPAN_BLOCKS = (512, 256)
"""Threads per block of norm_span: each a candidate, the first the plan's guess."""

SPAN_ROWS_PACKS = (3, 4, 5, 6, 8)
SPAN_ROWS_BLOCKS = (32, 64, 128, 256, 512)
"""Packs a thread (P) and threads (B) of norm_span_rows with a block a row: a row's span is at most
P x B packs. Odd widths near a power of two span one pack more than it (1023 half columns: 129
packs), which powers of two alone fit at half their slots; the unrolled empty slots still cost
instructions (Nsight Compute, H200, LayerNorm 1023: 8 packs x 32 threads issued 70% more
instructions than RMSNorm's kernel of the same shape). 5 x 32 holds those 129 packs in 160 slots."""

SPAN_ROWS_WHOLE_PACKS = (4, 6)
"""P of the block-a-row shapes also built to hold only a row's whole packs, the elements before
and after them moved one a thread (X = 1 in kernels/norm.cu): no edge arithmetic in the packs, and
a row one pack past P x B packs (1023 and 1025 half columns span 129, 127-128 of them whole) takes
P x B slots, where a whole slot more a thread had cost every thread that slot's arithmetic."""

SPAN_ROWS_GROUP_WIDTHS = (2, 4, 8, 16)
SPAN_ROWS_GROUP_PACKS = (3, 4, 5)
SPAN_ROWS_GROUP_BLOCK = 128
"""Shorter odd rows (up to 16 x 5 packs: 639 half columns) in groups of W lanes, a row a group,
P packs a lane, SPAN_ROWS_GROUP_BLOCK threads a block."""

CLUSTER_SIZES = (2, 4, 8, 16)
"""Blocks a row of norm_cluster: CUDA's portable cluster sizes (every GPU with clusters holds 8),
and 16 where the GPU holds such a cluster (the launcher's occupancy answer is 0 where not; an
H100 does). Sixteenths leave twice the blocks an SM of eighths: float32 LayerNorm rows of 100003
columns, 25 KiB slices, went from 85.4% to 86.5% of copy at 1024 rows (docs/norm.md)."""

CLUSTER_MIN_BLOCKS = 2
"""The cluster tier offers the sizes whose slices leave at least this many blocks an SM (one block
an SM loads, reduces and stores a row in turn, with nothing to overlap them); where none does
(in sixteenths, rows past about 920000 half or 460000 float columns; in eighths, where the GPU
holds no cluster of 16, half that), those that leave one, whose slices still move in 16-byte
packs."""

CLUSTER_TIMED_MIN_ROW_BYTES = 16 * 1024
CLUSTER_TIMED_SIZES = (2, 4)
"""Odd rows that span_rows holds, of at least CLUSTER_TIMED_MIN_ROW_BYTES, also time norm_cluster
in clusters of CLUSTER_TIMED_SIZES (their first block size only) on first use: at 1531 rows of
20011 half columns (H100, tools/tiers.py) LayerNorm's clusters of two read 81.8% of copy against
span_rows' 78.6."""

CLUSTER_PACKS_PER_THREAD = (8, 4, 16)
"""norm_cluster's blocks, each timed on first use: the fewest threads (a multiple of 32, up to
1024) that give each thread at most this many packs of its slice. Fewer threads leave more blocks
an SM within the register file (LayerNorm's instances take up to 64 registers a thread), which
matters once the slice alone, not gamma and beta beside it, sets the shared memory."""

SPAN_ROWS_CANDIDATES = 2
"""The tightest-fitting norm_span_rows shapes timed on first use (and the tightest of whole packs)."""

STORAGE_TYPES = ("half_t", "bf16_t", "float")
ITEMSIZE = {"half_t": 2, "bf16_t": 2, "float": 4}

def full_pack(ctype: str) -> int:
    """Elements of one 16-byte access."""
    return 16 // ITEMSIZE[ctype]


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


# ----------------------------------------------------------------------------------------------
# Kernel instantiations and the tier choice (pure functions: tested on the CPU)
# ----------------------------------------------------------------------------------------------


RAW_ROW_TYPES = ("half_t",)
"""Storage types whose full warp-tier rows have an instance that keeps them raw in registers
(WarpConfig.raw_rows), timed on first use beside the float rows."""

RAW_ROW_PACKS = 3
"""Packs a lane of the raw-rows instances. On an H100 (LayerNorm and RMSNorm, half, bwbench run,
with raw instances at two to eight packs a lane timed beside the float rows) they won at three
packs a lane (384 and 768 columns: +1 to +8 points of copy), were even or a point behind at four
and eight (1024, 2048) and at two packs lost 4-5 points in some runs (32 and 128 columns), where
the first-use timing did not always keep the float rows."""


@dataclass(frozen=True)
class WarpConfig:
    """Template arguments of norm_warp: pack N, columns per lane C, lanes per row W, rows per group R."""

    pack: int
    cols_per_thread: int
    width: int
    rows_per_access: int

    @property
    def rows_per_block(self) -> int:
        return WARP_BLOCK // self.width * self.rows_per_access

    def name(self, ctype: str, rms: bool) -> str:
        return (f"norm_warp<{ctype}, {_cpp_bool(rms)}, {self.pack}, {self.cols_per_thread}, "
                f"{self.width}, {self.rows_per_access}>")

    def raw_rows(self, ctype: str) -> bool:
        """Whether this configuration has a raw-rows instance: half 16-byte packs, three a lane
        (RAW_ROW_PACKS). bfloat16's raw instances spilled 24-76 bytes at the same bounds, so
        bfloat16 keeps its float rows."""
        return (ctype in RAW_ROW_TYPES and self.pack == full_pack(ctype)
                and self.cols_per_thread == RAW_ROW_PACKS * self.pack and self.width != 4)

    def raw_name(self, ctype: str, rms: bool) -> str:
        return (f"norm_warp<{ctype}, {_cpp_bool(rms)}, {self.pack}, {self.cols_per_thread}, "
                f"{self.width}, {self.rows_per_access}, true>")

    def holds_raw(self, ctype: str, cols: int) -> bool:
        """Whether rows of `cols` may take the raw-rows instance: full rows (cols == C * W)."""
        return self.raw_rows(ctype) and cols == self.cols_per_thread * self.width


def _cpp_bool(value: bool) -> str:
    return "true" if value else "false"


def warp_configs(ctype: str) -> tuple[WarpConfig, ...]:
    """Every norm_warp instantiation for one storage type (both modes use the same list).

    Up to 64 packs a row: two packs per lane and 1 ... 32 lanes, two rows per group at a time
    (four loads in flight per lane, and half the lanes, so half the merge steps, of one pack per
    lane: LayerNorm's merges are what limits short rows). Longer rows: 32 lanes and every multiple
    of the pack up to 32 columns a lane, then 48 or 64 (scalar packs: powers of two, kept few since
    odd shapes are for correctness, not speed). A one-pack row gets one lane.
    """
    configs = []
    for pack in (full_pack(ctype), 1):
        configs.append(WarpConfig(pack, pack, 1, 2))
        for width in (1, 2, 4, 8, 16, 32):
            configs.append(WarpConfig(pack, 2 * pack, width, 2))
        per_lane = (*range(3 * pack, 33, pack), 48, 64) if pack > 1 else (4, 8, 16, 32, 64)
        configs.extend(WarpConfig(pack, c, 32, 1) for c in per_lane)
    configs.extend(c for c in _four_pack_configs(ctype) if c not in configs)
    configs.extend(c for c in _three_pack_configs(ctype) if c not in configs)
    return tuple(configs)


FOUR_PACK_WIDTHS = (8, 16, 32)
"""Lanes per row of the four-packs-a-lane alternatives (17 ... 128 packs a row: half 256-1024).
Not 4 lanes (16 packs, half 128 cols): the four-pack plan ran there at 73-85% of copy in
`bwbench run`, against 88-96% for two packs (reference runs of ff215c9, H100 LayerNorm and H200
RMSNorm). The first-use timing of that time, hot in L2, had kept it; the timing is cold now
(bwbench/cuda/autotune.py), but the plan is not offered again until a GPU run shows the cold
timing rejects it."""


def _four_pack_configs(ctype: str) -> list[WarpConfig]:
    """Four 16-byte packs a lane, one or two rows a group: a quarter of the lanes, so fewer merge
    steps per element than two packs a lane, at the cost of fewer rows in flight. Timed against
    the two-packs-a-lane plan (LayerNorm's Chan merges are what limit rows of 256-512 columns)."""
    pack = full_pack(ctype)
    return [WarpConfig(pack, 4 * pack, width, rows) for width in FOUR_PACK_WIDTHS for rows in (2, 1)]


THREE_PACK_WIDTHS = (16, 32)
"""Lanes per row of the three-packs-a-lane alternatives, one or two rows a group: rows of 33-48
packs (half 264-384 cols) on 16 lanes and 65-96 packs (520-768) on 32 fill every slot where two or
four packs a lane leave up to a quarter of the lanes idle (LayerNorm half at 384 and 768 columns:
79-88% of copy on an H100, torch.compile 88-95%)."""


def _three_pack_configs(ctype: str) -> list[WarpConfig]:
    pack = full_pack(ctype)
    return [WarpConfig(pack, 3 * pack, width, rows) for width in THREE_PACK_WIDTHS for rows in (2, 1)]


def warp_alternatives(cols: int, pack: int, ctype: str) -> list[WarpConfig]:
    """norm_warp instantiations worth timing against `warp_config` for a row of `cols`: four packs
    a lane for 17-128 packs (measured on an H200, LayerNorm half: 90% vs 86% at 256 cols, 89% vs
    84% at 512), three packs a lane for 33-48 and 65-96 packs."""
    if pack != full_pack(ctype) or cols % pack:
        return []
    packs = cols // pack
    first = warp_config(cols, pack)
    found = []
    width = _next_pow2(-(-packs // 4))
    if width in FOUR_PACK_WIDTHS and packs > 16:
        found += [c for c in _four_pack_configs(ctype) if c.width == width]
    width = _next_pow2(-(-packs // 3))
    if width in THREE_PACK_WIDTHS and packs > 2 * width:
        found += [c for c in _three_pack_configs(ctype) if c.width == width]
    return [c for c in found if c != first]


def warp_config(cols: int, pack: int) -> WarpConfig | None:
    """The norm_warp instantiation for a row of `cols` loaded in packs of `pack`, or None if the
    row is too long for registers."""
    if cols < 1 or cols > WARP_MAX_COLS or cols % pack:
        return None
    packs = cols // pack
    if packs == 1:
        return WarpConfig(pack, pack, 1, 2)
    if packs <= 64:
        return WarpConfig(pack, 2 * pack, _next_pow2(-(-packs // 2)), 2)
    per_lane = -(-packs // 32) * pack
    if pack == 1:
        return WarpConfig(1, _next_pow2(per_lane), 32, 1)
    if per_lane > 32:
        per_lane = 48 if per_lane <= 48 else 64
    return WarpConfig(pack, per_lane, 32, 1)


def block_name(ctype: str, rms: bool, pack: int, cached: bool, params: bool = False) -> str:
    return f"norm_block<{ctype}, {_cpp_bool(rms)}, {pack}, {_cpp_bool(cached)}, {_cpp_bool(params)}>"


@dataclass(frozen=True)
class RowsConfig:
    """Template arguments of norm_rows: pack N, packs a thread P, threads B, gamma/beta held."""

    pack: int
    packs_per_thread: int
    block: int
    hold: bool

    def name(self, ctype: str, rms: bool) -> str:
        return (f"norm_rows<{ctype}, {_cpp_bool(rms)}, {self.pack}, {self.packs_per_thread}, {self.block}, "
                f"{_cpp_bool(self.hold)}>")


def rows_configs(ctype: str, rms: bool) -> tuple[RowsConfig, ...]:
    """Every norm_rows instantiation: those whose row (4 registers a pack), held gamma/beta (as
    floats) and REGISTER_SPARE fit in the registers __launch_bounds__(B, 1) allows."""
    pack = full_pack(ctype)
    configs = []
    for per_thread in REGISTER_PACKS:
        for block in REGISTER_BLOCKS:
            budget = min(255, 65536 // block) - REGISTER_SPARE
            row_regs = per_thread * 4
            held_regs = per_thread * pack * (1 if rms else 2)
            for hold in (True, False):
                if hold and per_thread != REGISTER_HOLD_PACKS:
                    continue
                if row_regs + (held_regs if hold else 0) <= budget:
                    configs.append(RowsConfig(pack, per_thread, block, hold))
    return tuple(configs)


def rows_max_cols(ctype: str, rms: bool) -> int:
    """Longest row the registers tier holds (its largest instantiation's P x B packs)."""
    return max(c.packs_per_thread * c.block for c in rows_configs(ctype, rms)) * full_pack(ctype)


def rows_candidates(packs: int, ctype: str, rms: bool) -> list[RowsConfig]:
    """The norm_rows instantiations for a row of `packs` full packs, best guess first: for each
    packs-a-thread, the smallest block that covers the row (fewest idle threads), parameters held
    in registers before read from L1."""
    declared = set(rows_configs(ctype, rms))
    chosen = []
    for per_thread in REGISTER_PACKS:
        block = max(REGISTER_BLOCKS[0], _next_pow2(-(-packs // per_thread)))
        for hold in (True, False):
            config = RowsConfig(full_pack(ctype), per_thread, block, hold)
            if config in declared:
                chosen.append(config)
    return chosen


@dataclass(frozen=True)
class SpanRowsConfig:
    """Template arguments of norm_span_rows: packs a thread P, threads a row W, threads B, and X
    (whole_packs: the slots hold the row's whole packs, its other elements move one a thread)."""

    packs_per_thread: int
    width: int
    block: int
    whole_packs: bool = False

    @property
    def slots(self) -> int:
        """Packs a row's threads hold: P x W."""
        return self.packs_per_thread * self.width

    def max_cols(self, pack: int) -> int:
        """Longest row held at any offset within a pack: a span of `slots` packs, or (whole packs)
        `slots` whole packs and a pack's worth less one around them."""
        return self.slots * pack + pack - 1 if self.whole_packs else self.slots * pack - pack + 1

    @property
    def rows_per_block(self) -> int:
        return self.block // self.width

    def name(self, ctype: str, rms: bool) -> str:
        whole = ", 1" if self.whole_packs else ""
        return f"norm_span_rows<{ctype}, {_cpp_bool(rms)}, {self.packs_per_thread}, {self.width}, {self.block}{whole}>"


SPAN_ROWS_SPARE = 64
"""Registers a norm_span_rows thread needs besides its row's packs (4 registers each, as stored):
addresses, the edge masks, the statistics and gamma and beta in flight from shared memory
(ptxas -v, sm_90: 72 registers at 4 packs, 74-94 at 8)."""


def span_rows_configs(rms: bool) -> tuple[SpanRowsConfig, ...]:
    """Every norm_span_rows instantiation (the same for both modes): those whose row packs and
    SPAN_ROWS_SPARE fit the registers __launch_bounds__(B, 1) allows."""
    rows = [SpanRowsConfig(p, b, b) for p in SPAN_ROWS_PACKS for b in SPAN_ROWS_BLOCKS]
    rows += [SpanRowsConfig(p, b, b, True) for p in SPAN_ROWS_WHOLE_PACKS for b in SPAN_ROWS_BLOCKS]
    groups = [SpanRowsConfig(p, w, SPAN_ROWS_GROUP_BLOCK) for p in SPAN_ROWS_GROUP_PACKS for w in SPAN_ROWS_GROUP_WIDTHS]
    return tuple(c for c in groups + rows if c.packs_per_thread * 4 <= min(255, 65536 // c.block) - SPAN_ROWS_SPARE)


def span_rows_smem_bytes(cols: int, ctype: str, rms: bool) -> int:
    """Dynamic shared memory of norm_span_rows: gamma (and beta), shifted, over the most packs a
    row of `cols` spans."""
    return span_packs_max(cols, full_pack(ctype)) * 16 * (1 if rms else 2)


def span_rows_max_cols(ctype: str, rms: bool) -> int:
    """Longest row norm_span_rows holds at any offset."""
    pack = full_pack(ctype)
    return max(c.max_cols(pack) for c in span_rows_configs(rms))


def span_packs_max(cols: int, pack: int) -> int:
    """The most aligned packs of `pack` elements a row of `cols` spans, at any offset."""
    return (cols + 2 * pack - 2) // pack


def span_rows_candidates(cols: int, ctype: str, rms: bool) -> list[SpanRowsConfig]:
    """The SPAN_ROWS_CANDIDATES tightest span shapes that hold the row (more packs a thread first on
    a tie, then the smaller block), plus the tightest whole-pack shape where it is no longer than
    the first of those; the tightest first. The whole-pack shape joins the span shapes rather than
    replacing them: at 4097-12289 half columns a span shape (more packs a thread, or 512 threads)
    stayed the faster."""
    pack = full_pack(ctype)

    def order(c: SpanRowsConfig) -> tuple[int, int, int]:
        return c.max_cols(pack), -c.packs_per_thread, c.block

    fits = sorted((c for c in span_rows_configs(rms) if c.max_cols(pack) >= cols), key=order)
    spans = [c for c in fits if not c.whole_packs][:SPAN_ROWS_CANDIDATES]
    whole = [c for c in fits if c.whole_packs and (not spans or c.max_cols(pack) <= spans[0].max_cols(pack))][:1]
    return sorted(whole + spans, key=order)


def span_rows_plans(cols: int, ctype: str, rms: bool, occupancy: "Occupancy", smem_limit: int) -> list["NormPlan"]:
    """norm_span_rows plans for a row of `cols` (any offset), those that launch."""
    smem = span_rows_smem_bytes(cols, ctype, rms)
    if smem > smem_limit:
        return []
    plans = []
    for config in span_rows_candidates(cols, ctype, rms):
        name = config.name(ctype, rms)
        if occupancy(name, config.block, smem) > 0:
            plans.append(NormPlan("span_rows", name, full_pack(ctype), config.block, smem, config.rows_per_block,
                                  grid_multiple=full_pack(ctype)))
    return plans


def span_rows_grid(grid: int, work: int, multiple: int, max_grid: int = 2**31 - 1) -> int:
    """A grid of about `grid` blocks, a multiple of `multiple` (the pack's elements): block b takes
    rows b, b + grid, ..., so with grid * cols a multiple of the pack they all start at the same
    offset within one. Rounded up where `grid` covers the `work` (blocks' worth of rows: the extra
    blocks find none), down where blocks stride over rows."""
    if multiple <= 1:
        return grid
    up = -(-grid // multiple) * multiple
    if grid >= work and up <= max_grid:
        return up
    return max(multiple, grid // multiple * multiple)


def param_bytes(cols: int, ctype: str, rms: bool) -> int:
    """Shared memory for gamma (and beta) when a block tier keeps them there."""
    return (1 if rms else 2) * cols * ITEMSIZE[ctype]


def optimized_names(ctype: str, rms: bool) -> tuple[str, ...]:
    names = [c.name(ctype, rms) for c in warp_configs(ctype)]
    names += [c.raw_name(ctype, rms) for c in warp_configs(ctype) if c.raw_rows(ctype)]
    names += [c.name(ctype, rms) for c in rows_configs(ctype, rms)]
    for pack in (full_pack(ctype), 1):
        names += [block_name(ctype, rms, pack, cached, params) for cached in (True, False) for params in (True, False)]
    names += [tile_name(ctype, rms, e) for e in (0, *row_tile.LANE_ELEMENTS)] + [span_name(ctype, rms)]
    names += [c.name(ctype, rms) for c in span_rows_configs(rms)]
    names += [cluster_name(ctype, rms, size) for size in CLUSTER_SIZES]
    return tuple(names)


def cluster_name(ctype: str, rms: bool, size: int) -> str:
    return f"norm_cluster<{ctype}, {_cpp_bool(rms)}, {size}>"


def cluster_size(name: str) -> int:
    """Blocks a row of a norm_cluster kernel name (1 for the other kernels)."""
    return int(name.rsplit(",", 1)[1].rstrip("> ")) if name.startswith("norm_cluster<") else 1


def cluster_slice_packs(cols: int, ctype: str, size: int) -> int:
    """Packs of the largest slice a norm_cluster block takes: of the longest span a row of `cols`
    has, split over `size` blocks."""
    return -(-span_packs_max(cols, full_pack(ctype)) // size)


def cluster_smem_bytes(cols: int, ctype: str, size: int) -> int:
    """Dynamic shared memory of norm_cluster: a block's slice of the row (gamma and beta are read
    from global memory, so the slice alone sets how many blocks share an SM)."""
    return cluster_slice_packs(cols, ctype, size) * 16


def cluster_block(cols: int, ctype: str, size: int, packs_per_thread: int = CLUSTER_PACKS_PER_THREAD[0]) -> int:
    """Threads of a norm_cluster block: `packs_per_thread` packs of the slice a thread or fewer."""
    return min(1024, max(32, -(-cluster_slice_packs(cols, ctype, size) // (packs_per_thread * 32)) * 32))


def cluster_plans(cols: int, ctype: str, rms: bool, occupancy: "Occupancy", smem_limit: int,
                  min_blocks: int = CLUSTER_MIN_BLOCKS, sizes: tuple[int, ...] = CLUSTER_SIZES,
                  packs_per_thread: tuple[int, ...] = CLUSTER_PACKS_PER_THREAD) -> list["NormPlan"]:
    """norm_cluster plans for a row of `cols` (any lead; x and y at the same one): each of `sizes`
    whose slice fits, in each block of `packs_per_thread` that leaves `min_blocks` blocks an SM;
    the smallest cluster first. Only for GPUs that launch clusters (the caller's question)."""
    plans = []
    for size in sizes:
        smem = cluster_smem_bytes(cols, ctype, size)
        if smem > smem_limit:
            continue
        name = cluster_name(ctype, rms, size)
        blocks = dict.fromkeys(cluster_block(cols, ctype, size, p) for p in packs_per_thread)
        plans += [NormPlan("cluster", name, full_pack(ctype), block, smem, 1, cluster=size, grid_multiple=size)
                  for block in blocks if occupancy(name, block, smem) >= min_blocks]
    return plans


def span_name(ctype: str, rms: bool) -> str:
    return f"norm_span<{ctype}, {_cpp_bool(rms)}>"


def span_plans(cols: int, ctype: str, rms: bool, occupancy: "Occupancy", smem_limit: int) -> list["NormPlan"]:
    """norm_span plans (a block a row, its packs in shared memory), one per SPAN_BLOCKS size that
    launches."""
    smem = tile_smem_bytes(1, cols, ITEMSIZE[ctype])
    if smem > smem_limit:
        return []
    name = span_name(ctype, rms)
    return [NormPlan("span", name, full_pack(ctype), b, smem, 1) for b in SPAN_BLOCKS if occupancy(name, b, smem) > 0]


def tile_name(ctype: str, rms: bool, lane_elements: int = 0) -> str:
    return f"norm_tile<{ctype}, {_cpp_bool(rms)}, {lane_elements}>"


def tile_smem_bytes(tile_rows: int, cols: int, itemsize: int) -> int:
    """Shared memory of a tile: the 16-byte packs covering tile_rows * cols elements at any phase."""
    return row_tile.smem_bytes(tile_rows, cols, itemsize)


def tile_plans(cols: int, ctype: str, rms: bool, occupancy: "Occupancy", smem_limit: int) -> list["NormPlan"]:
    """norm_tile plans of TILE_BYTES-sized tiles (whole rows, the same number for every group of
    lanes), those that launch."""
    itemsize = ITEMSIZE[ctype]
    group = row_tile.group_width(cols)
    name = tile_name(ctype, rms, row_tile.lane_elements(cols))
    plans = []
    for target in TILE_BYTES:
        tile_rows = row_tile.rows_of_size(target, cols, itemsize)
        smem = tile_smem_bytes(tile_rows, cols, itemsize)
        if smem > smem_limit or occupancy(name, TILE_BLOCK, smem) < 1:
            continue
        candidate = NormPlan("tile", name, full_pack(ctype), TILE_BLOCK, smem, tile_rows, extra=(tile_rows, group))
        if candidate not in plans:
            plans.append(candidate)
    return plans


NAIVE_KERNELS = (
    *(f"naive_row_mean<{t}>" for t in STORAGE_TYPES),
    *(f"naive_row_rstd<{t}>" for t in STORAGE_TYPES),
    *(f"naive_row_rms<{t}>" for t in STORAGE_TYPES),
    *(f"naive_normalize<{t}, {_cpp_bool(rms)}>" for t in STORAGE_TYPES for rms in (False, True)),
)
"""The naive kernels of norm.cu: row mean, row rstd, row rms, normalize."""

DEFAULT_GRID_WAVES: tuple[int | None, ...] = (None, 1)
"""The grids a plan is timed with on first use, the model's choice first: a block for every row
group (None), or one wave of blocks striding over the rows (1). Measured on an H200: a block per
row group ran LayerNorm at 2048-16384 columns at 97-98% of copy against 87-90% with one wave, but
32768 at 84-85% against 90% (every block loads its gamma and beta once, which one wave amortises
over many rows), so both are timed. Tests pass (1,) to exercise the row loop."""


@dataclass(frozen=True)
class NormPlan:
    """How one (cols, dtype, mode) is launched: tier, kernel, block, shared memory, rows per block,
    and the other plans worth timing against it on first use (`alternatives`, best guess first)."""

    tier: str
    kernel: str
    pack: int
    block: int
    smem_bytes: int
    rows_per_block: int
    alternatives: tuple["NormPlan", ...] = ()
    extra: tuple[int, ...] = ()
    """Arguments after eps: (tile_rows, group) for the tile tier."""
    grid_multiple: int = 1
    """Where the blocks stride over rows, the grid is a multiple of this (span_rows_grid)."""
    cluster: int = 1
    """Blocks a row (the cluster tier's thread-block cluster); the grid is a multiple of it."""

    @property
    def candidates(self) -> tuple["NormPlan", ...]:
        return (self, *self.alternatives)


Occupancy = Callable[[str, int, int], int]
"""(kernel name, threads per block, dynamic shared memory bytes) -> resident blocks per SM."""


def rank_blocks(packs: int, row_bytes: int, cached: bool, occupancy: Callable[[int], int]) -> list[int]:
    """Block sizes of a block tier, best first by the latency model: every resident block has one
    row in flight, and a row takes ROW_LATENCY_US (twice without the cache, which re-reads x)
    plus STEP_LATENCY_US per step of the second pass. Blocks larger than the row's packs (idle
    threads) and blocks that cannot launch are left out."""
    batch = CACHED_STORE_BATCH if cached else UNCACHED_STORE_BATCH
    scored = []
    for block in BLOCK_SIZES:
        if block > max(32, -(-packs // 32) * 32):
            break
        resident = occupancy(block)
        if resident < 1:
            continue
        steps = -(-packs // (block * batch))
        row_us = ROW_LATENCY_US * (1 if cached else 2) + STEP_LATENCY_US * steps
        scored.append((resident * row_bytes / row_us, -block, block))
    return [block for *_, block in sorted(scored, reverse=True)]


def splits_rows(cols: int, ctype: str, rms: bool) -> bool:
    """Whether rows of `cols` are longer than the registers and span_rows tiers hold, so that the
    cluster tier is offered first where the GPU launches clusters (and x and y share their phase)."""
    return cols > max(span_rows_max_cols(ctype, rms), rows_max_cols(ctype, rms))


def plan(cols: int, ctype: str, rms: bool, pack: int, occupancy: Occupancy, smem_limit: int,
         tier: str | None = None, block: int | None = None, same_phase: bool = False,
         clusters: bool = False) -> NormPlan:
    """Choose the tier and launch shape (the dispatcher of the softmax article, for norms).

    `pack` is the elements per access (the 16-byte pack, or 1 where cols or a pointer does not
    allow it), `occupancy` answers the CUDA occupancy query, `smem_limit` is the dynamic shared
    memory one block may have. `tier` forces a tier (tests use it on short rows); None chooses.
    `block` forces the threads per block of the block tiers (for tuning experiments).
    `same_phase`: x and y start the same number of elements past a 16-byte boundary, which the
    tile, span, span_rows and cluster tiers need. `clusters`: the GPU launches thread-block
    clusters (compute capability 9.0 and later), which the cluster tier needs.
    """
    row_bytes = cols * ITEMSIZE[ctype]
    if tier == "cluster":
        runs = clusters and same_phase and block is None
        found = cluster_plans(cols, ctype, rms, occupancy, smem_limit, 1) if runs else []
        if not found:
            raise ValueError(f"the cluster tier needs a GPU that launches thread-block clusters, x and y at the same "
                             f"offset within 16 bytes, no forced block, and a slice of the row that fits in shared "
                             f"memory; got cols={cols}")
        return _with_alternatives(found[0], found[1:])
    # Rows no block caches with room for a second block an SM: the cluster tier first, where it runs.
    long_row = clusters and same_phase and tier is None and block is None and splits_rows(cols, ctype, rms)
    split = (cluster_plans(cols, ctype, rms, occupancy, smem_limit)
             or cluster_plans(cols, ctype, rms, occupancy, smem_limit, 1)) if long_row else []
    if tier in ("tile", "span", "span_rows") or (tier is None and block is None and same_phase and row_bytes % 16):
        short = row_bytes <= TILE_MAX_ROW_BYTES
        held = span_rows_plans(cols, ctype, rms, occupancy, smem_limit) if same_phase and block is None else []
        if not same_phase or block is not None:
            staged = []
        elif tier == "span_rows":
            staged = held
        elif tier == "tile" or (tier is None and short):
            staged = tile_plans(cols, ctype, rms, occupancy, smem_limit)
        else:
            staged = span_plans(cols, ctype, rms, occupancy, smem_limit)
        if tier is not None:
            if not staged:
                where = {"tile": "a row per group of lanes within shared memory",
                         "span": "a row within shared memory",
                         "span_rows": f"a row of at most {span_rows_max_cols(ctype, rms)} columns"}[tier]
                raise ValueError(f"the {tier} tier needs x and y at the same offset within 16 bytes, no forced block, "
                                 f"and {where}; got cols={cols}")
            return _with_alternatives(staged[0], staged[1:])
        if staged or held or split:  # (tier and block not forced, x and y at one phase, an odd row)
            row_tier = plan(cols, ctype, rms, pack, occupancy, smem_limit)
            # Shorter rows of 16 KiB and more time a few cluster shapes after the others.
            timed_split = (cluster_plans(cols, ctype, rms, occupancy, smem_limit, sizes=CLUSTER_TIMED_SIZES,
                                         packs_per_thread=CLUSTER_PACKS_PER_THREAD[:1])
                           if clusters and not long_row and row_bytes >= CLUSTER_TIMED_MIN_ROW_BYTES else [])
            first, *rest = [*split, *staged, *held]
            return _with_alternatives(first, [*rest, *timed_split,
                                              *(_with_alternatives(c, ()) for c in row_tier.candidates)])
    if tier is not None and tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; tiers: {', '.join(TIERS)}")
    if block is not None and (block % 32 or not 32 <= block <= 1024):
        raise ValueError(f"block must be a multiple of 32 from 32 to 1024, got {block}")
    packs = cols // pack
    row_bytes = 2 * cols * ITEMSIZE[ctype]

    def block_plans(tier_name: str) -> list[NormPlan]:
        """Plans of one block tier: gamma (and beta) in shared memory first, where they fit
        next to the row cache, then read from global memory; block sizes ranked by the model."""
        cached = tier_name == "smem"
        plans = []
        for params in (True, False):
            smem = (cols * ITEMSIZE[ctype] if cached else 0) + (param_bytes(cols, ctype, rms) if params else 0)
            if smem > smem_limit:
                continue
            name = block_name(ctype, rms, pack, cached, params)
            fits = lambda b, name=name, smem=smem: occupancy(name, b, smem)  # noqa: E731
            blocks = ([block] if fits(block) > 0 else []) if block is not None else rank_blocks(packs, row_bytes, cached, fits)
            plans += [NormPlan(tier_name, name, pack, b, smem, 1) for b in blocks]
        return plans

    def smem_plans() -> list[NormPlan]:
        if tier not in (None, "smem") or cols * ITEMSIZE[ctype] > smem_limit:
            return []
        return block_plans("smem")

    def register_plans() -> list[NormPlan]:
        """Plans of the registers tier (full 16-byte packs only; `block` is not forced here:
        the block size is part of the instantiation)."""
        if tier not in (None, "registers") or pack != full_pack(ctype) or block is not None:
            return []
        plans = []
        for config in rows_candidates(packs, ctype, rms):
            name = config.name(ctype, rms)
            if occupancy(name, config.block, 0) > 0:
                plans.append(NormPlan("registers", name, pack, config.block, 0, 1))
        return plans

    if tier in (None, "warp"):
        config = warp_config(cols, pack)
        if config is not None:
            warp = NormPlan("warp", config.name(ctype, rms), pack, WARP_BLOCK, 0, config.rows_per_block)
            alternatives = warp_alternatives(cols, pack, ctype)
            others = [NormPlan("warp", c.name(ctype, rms), pack, WARP_BLOCK, 0, c.rows_per_block) for c in alternatives]
            # The raw-rows instances (three packs a lane) are timed beside the float ones.
            others += [NormPlan("warp", c.raw_name(ctype, rms), pack, WARP_BLOCK, 0, c.rows_per_block)
                       for c in (config, *alternatives) if c.holds_raw(ctype, cols)]
            if tier is None and cols > WARP_SURE_COLS:
                return _with_alternatives(warp, others + register_plans() + smem_plans())
            return _with_alternatives(warp, others)
        if tier == "warp":
            raise ValueError(f"the warp tier holds at most {WARP_MAX_COLS} columns, got {cols}")
    in_registers = register_plans()
    if in_registers:
        return _with_alternatives(in_registers[0], in_registers[1:] + smem_plans())
    if tier == "registers":
        raise ValueError(f"the registers tier needs cols a multiple of {full_pack(ctype)} with 16-byte aligned "
                         f"pointers, at most {rows_max_cols(ctype, rms)} columns, and no forced block; "
                         f"got cols={cols}")
    cached = smem_plans()
    if split:
        return _with_alternatives(split[0], split[1:] + (cached or block_plans("uncached")))
    if cached:
        return _with_alternatives(cached[0], cached[1:])
    if tier == "smem":
        raise ValueError(f"a row of {cols} x {ITEMSIZE[ctype]} bytes does not fit in shared memory here")
    plans = block_plans("uncached") or [NormPlan("uncached", block_name(ctype, rms, pack, False), pack,
                                                 block or UNCACHED_BLOCK, 0, 1)]
    return _with_alternatives(plans[0], plans[1:])


def _with_alternatives(first: NormPlan, others) -> NormPlan:
    return replace(first, alternatives=tuple(others))
