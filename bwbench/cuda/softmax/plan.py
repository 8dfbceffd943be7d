"""What a softmax-family call launches: pure, testable without a GPU.

`plan` turns (operation, rows, cols, storage type, pack) and the answers of a `DeviceQueries`
into one `Launch` of kernels/softmax.cu: the tier comes from the measured rules of dispatch.py,
the block size and grid from the occupancy answers. `kernel_names` (dispatch.py) lists every
kernel the optimized family instantiates and `NAIVE_KERNELS` / `FAMILY_NAIVE_KERNELS` the naive
ones, so the set compiled and the set a plan can ask for are one list.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from bwbench.cuda import row_tile
from bwbench.cuda.launch_spec import DeviceQueries, Launch, grid_blocks
from bwbench.cuda.softmax import dispatch

__all__ = ["DEFAULT_THRESHOLDS", "FAMILY_NAIVE_KERNELS", "NAIVE_BLOCK", "NAIVE_KERNELS", "OPERATIONS",
           "STORAGE_TYPES", "SoftmaxPlan", "load_thresholds", "plan"]

STORAGE_TYPES = ("half_t", "bf16_t", "float")

OPERATIONS = {
    # name: (direction, algorithm, thresholds key)
    "softmax": ("forward", "softmax", "forward"),
    "log_softmax": ("forward", "log_softmax", "forward"),
    "online_softmax": ("forward", "softmax", "online"),
    "softmax_backward": ("backward", "softmax", "backward"),
    "log_softmax_backward": ("backward", "log_softmax", "backward"),
}

DEFAULT_THRESHOLDS = {
    # Measured on an H200, float16, rows 49152 (the numbers and the runs are in docs/softmax.md).
    # The rules are in occupancy terms (resident threads, packs per thread), so they carry over to
    # other GPUs better than cols thresholds would.
    #   forward: registers beat the shared-memory block up to cols 2048 (93% vs 82% of copy); the
    #   one-pass (m, d) merge beats three passes in the block tiers from cols 4096 (94% vs 91% at
    #   4096, 89% vs 73% at 32768); one row per access beats the article's two in groups under a
    #   warp (cols 32: 94% vs 82%) and in full warps (cols 256: 90% vs 86%).
    #   backward: y and dy in registers up to cols 1024, held as raw 16-byte packs (half 4348 vs
    #   3815 GB/s against the shared-memory block at 1024). One row per access again (cols 32: 91%
    #   vs 75%).
    #   both: the block size that keeps the most threads resident (cols 32768 forward: 93% vs 89%
    #   with OneFlow's rule; backward 8192: 102% vs 97%).
    #   forward, registers tier: it wins at 512 packs (half/bf16 cols 4096: 4122 vs 3983 and 4114
    #   vs 3882 GB/s) and where the cache leaves one block an SM (float32 cols 32768: 3813 vs 3377
    #   GB/s); it loses at 1024 threads with 4 packs and is even between.
    "forward": dispatch.Thresholds(warp_max_cols=2048, small_group_rows=1, full_warp_rows=1, one_pass=True,
                                   block_rule="threads", uncached_packs_per_thread=8,
                                   registers_max_packs=512, registers_below_smem_blocks=2,
                                   cluster_below_smem_blocks=1, cluster_min_blocks_per_sm=2),
    #   backward, rows whose y and dy do not fit in shared memory: the shared-memory tier caching
    #   the first 7/8 of a float32 row of 32768 columns (227 KiB of 256) against the uncached tier,
    #   which moved 1.46x the row's bytes from DRAM.
    #   both, rows no block's shared memory holds, on GPUs with thread-block clusters (H100, 1024
    #   or 4096 rows, float16): a cluster caching the row beat the uncached tier where its slices
    #   leave two or more blocks an SM (forward 262144: 89% vs 65% of copy; vocabulary 128256: 93%
    #   vs 67%), and in the backward even at one block an SM (262144: 66% vs 60%; 100003: 89% vs
    #   63%). The forward at one block an SM lost (float32 262144: 57% vs 64%), and so did a
    #   cluster against the partly cached backward (float32 32768: 93% vs 96%), so both stay.
    #   Clusters of 16, where the GPU holds them and their slices leave two blocks an SM: float32
    #   forward 262144 64% -> 76%, float16 backward 262144 66% -> 82%, vocabulary 256000 69% ->
    #   82%; at one block an SM (float32 backward 262144) 55% against the uncached tier's 59%.
    #   Since the blocks exchange their parts through mailboxes (no cluster barrier a row): float32
    #   forward 262144 76% -> 86%, 100003 82% -> 92% (eighths), float16 backward 262144 86% -> 90%.
    #   tile tier (H100, float16, 49152 rows): backward rows of odd byte counts past the warp tier,
    #   1023 and 1025 columns, 93% of copy against 78-79% for the shared-memory tier; at 2047
    #   (4 KiB rows) the shared-memory tier won (100% vs 95%). Rows the warp tier holds stay there
    #   (mixed: 31-197 columns won or lost by up to 15 points either way), and the forward keeps
    #   its row tiers everywhere (warp or registers 84-97% against the tile's 75-83% at 1000-2047).
    "backward": dispatch.Thresholds(warp_max_cols=1024, small_group_rows=1, full_warp_rows=1, block_rule="threads",
                                    uncached_packs_per_thread=2, partial_cache_share=0.5,
                                    cluster_below_smem_blocks=1, cluster_min_blocks_per_sm=1,
                                    tile_max_row_bytes=3072),
    "online": dispatch.Thresholds(online_warp_max_cols=1024, one_pass=True, uncached_packs_per_thread=8),
}

DEFAULT_GRID_WAVES: int | None = None
"""Blocks launched per resident block slot, at most, the rest of the rows grid-striding (OneFlow
caps its grid at 32 waves); None: a block for every row or row group. Measured on an H200, one
block per row beat 32 waves where a block works on one row at a time: the backward at 16384
columns 100% -> 102% of copy, the forward at 16384 95% -> 97%, the float32 backward at 32768
(uncached) 68% -> 80%; the other cols were even. Tests pass a small number to exercise the row
loop."""

NAIVE_BLOCK = 256
"""Threads per block for every naive kernel (the reductions need a multiple of 32)."""

NAIVE_KERNELS = (
    *(f"naive_reduce_max<{t}>" for t in STORAGE_TYPES),
    *(f"naive_broadcast_sub<{t}>" for t in STORAGE_TYPES),
    "naive_exp",
    "naive_reduce_sum",
    *(f"naive_broadcast_div<{t}>" for t in STORAGE_TYPES),
)
"""kernels/softmax_naive.cu: the article's five-kernel softmax (and the reductions the others reuse)."""

FAMILY_NAIVE_KERNELS = (
    "naive_exp_into",
    *(f"naive_broadcast_sub_log<{t}>" for t in STORAGE_TYPES),
    *(f"naive_mul<{t}>" for t in STORAGE_TYPES),
    *(f"naive_broadcast_sub_grad<{t}>" for t in STORAGE_TYPES),
    *(f"naive_mul_out<{t}>" for t in STORAGE_TYPES),
)
"""kernels/softmax_family_naive.cu: the naive log-softmax and softmax backward."""


def load_thresholds(overrides: Mapping[str, Mapping[str, object]]) -> dict[str, dispatch.Thresholds]:
    """The defaults with `overrides` ({"forward" | "backward" | "online": {field: value}}) applied,
    e.g. after measuring another GPU; pass the result's entries as `thresholds=`."""
    unknown = set(overrides) - set(DEFAULT_THRESHOLDS)
    if unknown:
        raise ValueError(f"unknown threshold groups {sorted(unknown)}; valid: {sorted(DEFAULT_THRESHOLDS)}")
    try:
        return {key: dispatch.with_overrides(th, **overrides.get(key, {})) for key, th in DEFAULT_THRESHOLDS.items()}
    except TypeError as exc:  # an unknown field name
        raise ValueError(str(exc)) from None


@dataclass(frozen=True)
class SoftmaxPlan:
    """One call's plan: the dispatcher's choice and the launch that runs it, and the plans of other
    tiers the launcher times against it on first use (`alternatives`; dispatch.timed_alternatives)."""

    op: str
    choice: dispatch.TierChoice
    launch: Launch
    alternatives: tuple["SoftmaxPlan", ...] = ()

    @property
    def candidates(self) -> tuple["SoftmaxPlan", ...]:
        """This plan first, then its alternatives."""
        return (self, *self.alternatives)

    @property
    def tier(self) -> str:
        return self.choice.tier

    @property
    def kernel_name(self) -> str:
        return self.launch.kernel

    @property
    def grid(self) -> int:
        return self.launch.grid[0]

    @property
    def block(self) -> int:
        return self.launch.block[0]

    @property
    def smem(self) -> int:
        return self.launch.shared_mem


def _smem_occupancy(queries: DeviceQueries, kernel: str, smem: int) -> dict[int, int]:
    """Resident blocks per SM of the cached block kernel at each block size with `smem` bytes."""
    if smem > queries.smem_limit(kernel):
        return {size: 0 for size in dispatch.BLOCK_SIZES}
    return {size: queries.blocks_per_sm(kernel, size, smem) for size in dispatch.BLOCK_SIZES}


def plan(op: str, rows: int, cols: int, ctype: str, pack: int, queries: DeviceQueries,
         thresholds: dispatch.Thresholds | None = None, tier: str | None = None, block: int | None = None,
         grid_waves: int | None = DEFAULT_GRID_WAVES, starts_aligned: bool = True, dense: bool = False,
         cluster: int | None = None) -> SoftmaxPlan:
    """The launch of `op` on (rows, cols) of storage type `ctype` moved `pack` elements at a time.

    starts_aligned: every row starts on a pack boundary; otherwise capacity is planned for rows
    that start mid-pack (dispatch.span_cols). thresholds, tier and block override the measured
    dispatch (tuning runs and tests); a forced tier that cannot run raises ValueError. cluster
    forces the cluster tier's blocks a row (one of dispatch.CLUSTER_SIZES; implies
    tier="cluster"): how the size rule of dispatch.cluster_shape is measured. grid_waves
    caps the grid (None: a block per row; striding clusters, dispatch.cluster_strides, always run
    the clusters the GPU holds at once). dense: every tensor's rows lie end to end (row stride
    = cols), which the tile tier needs. Where the dispatch leaves the tier open
    (dispatch.timed_alternatives), the plan carries the other tiers' plans for the launcher to time.
    """
    if cluster is not None:
        if cluster not in dispatch.CLUSTER_SIZES:
            raise ValueError(f"cluster must be one of {dispatch.CLUSTER_SIZES}, got {cluster!r}")
        if tier not in (None, "cluster"):
            raise ValueError(f"cluster= sizes the cluster tier; it cannot go with tier={tier!r}")
        tier = "cluster"
    options = dict(thresholds=thresholds, block=block, grid_waves=grid_waves, starts_aligned=starts_aligned,
                   dense=dense, cluster=cluster)
    first = _plan_tier(op, rows, cols, ctype, pack, queries, tier=tier, **options)
    if tier is not None or block is not None:
        return first
    direction = OPERATIONS[op][0]
    one_block = None
    if first.tier == "smem":
        one_block = queries.blocks_per_sm(first.kernel_name, first.block, first.smem)
    tighter: tuple[str, ...] = ()
    if first.tier == "warp":
        span = dispatch.span_cols(cols, pack, starts_aligned)
        tighter = tuple(family for family in dispatch.FIT_FAMILIES
                        if dispatch.fit_shape(span, pack, direction, first.choice.warp, family) is not None)
    alternatives = []
    for other in dispatch.timed_alternatives(first.choice, direction, dense=dense,
                                             row_bytes=cols * dispatch.ITEMSIZE[ctype],
                                             smem_blocks_per_sm=one_block, clusters=queries.clusters,
                                             fits_tighter=tighter, itemsize=dispatch.ITEMSIZE[ctype]):
        try:
            alternatives.append(_plan_tier(op, rows, cols, ctype, pack, queries, tier=other, **options))
        except ValueError:  # that tier cannot run this shape here
            continue
    alternatives += _other_cluster_sizes([first, *alternatives], op, rows, cols, ctype, pack, queries, options)
    return replace(first, alternatives=tuple(alternatives)) if alternatives else first


def _other_cluster_sizes(candidates: list[SoftmaxPlan], op: str, rows: int, cols: int, ctype: str, pack: int,
                         queries: DeviceQueries, options: dict) -> list[SoftmaxPlan]:
    """Where a cluster is among the candidates, the cluster tier in each other size whose slices
    leave dispatch.CLUSTER_TIMED_MIN_BLOCKS blocks an SM, all cached, to time beside it: at 4096 ×
    50257 half columns the backward's rule took halves (94.2% of copy) where eighths read 98.3."""
    taken = {c.choice.cluster for c in candidates if c.tier == "cluster"}
    if not taken:
        return []
    sized = []
    for size in dispatch.CLUSTER_SIZES:
        if size in taken:
            continue
        try:
            other = _plan_tier(op, rows, cols, ctype, pack, queries, tier="cluster", **{**options, "cluster": size})
        except ValueError:  # too large a slice, or no such cluster on this GPU
            continue
        if queries.blocks_per_sm(other.kernel_name, other.block, other.smem) >= dispatch.CLUSTER_TIMED_MIN_BLOCKS:
            sized.append(other)
    return sized


def _plan_tier(op: str, rows: int, cols: int, ctype: str, pack: int, queries: DeviceQueries,
               thresholds: dispatch.Thresholds | None, tier: str | None, block: int | None,
               grid_waves: int | None, starts_aligned: bool, dense: bool, cluster: int | None = None) -> SoftmaxPlan:
    """plan's single choice: the measured dispatch's tier, or the forced one."""
    if op not in OPERATIONS:
        raise ValueError(f"op must be one of {', '.join(OPERATIONS)}, got {op!r}")
    if rows < 1 or cols < 1:
        raise ValueError(f"nothing to launch for shape ({rows}, {cols})")
    if tier == dispatch.ELEMENTS_TIER:
        # The warp tier in one-element packs: any row offsets, so every row starts "aligned".
        pack, starts_aligned, tier = 1, True, "warp"
    direction, algorithm, key = OPERATIONS[op]
    itemsize = dispatch.ITEMSIZE[ctype]
    th = thresholds or DEFAULT_THRESHOLDS[key]
    span = dispatch.span_cols(cols, pack, starts_aligned)
    smem_needed = dispatch.smem_bytes(direction, span, itemsize, pack)
    one_pass = th.one_pass and direction == "forward"

    def smem_kernel(partial: bool = False) -> str:
        choice = dispatch.TierChoice("smem", block=128, one_pass=one_pass, pack=pack, partial=partial)
        return dispatch.kernel_name(ctype, algorithm, direction, choice)

    partial = False
    # The partly cached kernel takes rows of whole packs only (kernels/softmax.cu).
    if th.partial_cache_share > 0 and direction == "backward" and starts_aligned and cols % pack == 0:
        limit = queries.smem_limit(smem_kernel())
        cached = dispatch.cache_bytes(direction, span, itemsize, pack, limit, th.partial_cache_share)
        partial = cached < smem_needed
        smem_needed = cached

    def cluster_tier() -> dispatch.ClusterShape | None:
        if not queries.clusters or key == "online":
            return None
        limit = queries.smem_limit(smem_kernel())
        if cluster is not None:
            return forced_cluster(limit)
        min_blocks = th.cluster_min_blocks_per_sm if tier is None else 1
        shape = dispatch.cluster_shape(span, pack, itemsize, direction, limit, min_blocks, resident=blocks_an_sm)
        if shape is not None and not holds(shape):
            shape = dispatch.cluster_shape(span, pack, itemsize, direction, limit, min_blocks,
                                           largest=dispatch.PORTABLE_CLUSTER, resident=blocks_an_sm)
        return shape

    def blocks_an_sm(shape: dispatch.ClusterShape) -> int:
        """Blocks of a cluster shape an SM holds (the occupancy query, its shared memory raised first)."""
        name = dispatch.kernel_name(ctype, algorithm, direction, shape.choice(pack))
        queries.smem_limit(name)
        return queries.blocks_per_sm(name, shape.threads, shape.smem)

    def holds(shape: dispatch.ClusterShape) -> bool:
        """Whether this GPU holds such a cluster at all (asked only of non-portable sizes)."""
        if shape.size <= dispatch.PORTABLE_CLUSTER:
            return True
        name = dispatch.kernel_name(ctype, algorithm, direction, shape.choice(pack))
        queries.smem_limit(name)  # its shared memory raised first: the query counts it
        return queries.active_clusters(name, shape.size, shape.threads, shape.smem) >= 1

    def forced_cluster(limit: int) -> dispatch.ClusterShape:
        shape = dispatch.cluster_shape_of(cluster, span, pack, itemsize, direction)
        if shape.smem > limit:
            raise ValueError(f"a slice of {shape.smem} bytes (the row span of {span} in {cluster}) exceeds the "
                             f"{limit} bytes of shared memory a block may take here")
        if not holds(shape):
            raise ValueError(f"this GPU holds no cluster of {cluster} blocks of {shape.threads} threads and "
                             f"{shape.smem} bytes of shared memory")
        return shape

    def tile() -> dispatch.TileShape | None:
        if not dense or pack == 1 or key == "online":
            return None
        name = dispatch.kernel_name(ctype, algorithm, direction,
                                    dispatch.TierChoice("tile", pack=pack, lane_elements=row_tile.lane_elements(cols)))
        return dispatch.tile_shape(rows, cols, itemsize, direction, th.tile_bytes, queries.sms,
                                   queries.smem_limit(name))

    def flat() -> dispatch.FlatShape | None:
        if not dense or pack == 1 or direction != "backward":
            return None
        slots = {}
        for k in dispatch.FLAT_PACKS_PER_THREAD:
            name = dispatch.kernel_name(ctype, algorithm, direction,
                                        dispatch.TierChoice("flat", pack=pack, packs_per_thread=k))
            slots[k] = queries.blocks_per_sm(name, dispatch.FLAT_BLOCK, 0) * queries.sms
        return dispatch.flat_shape(rows, cols, itemsize, slots)

    if key == "online":
        choice = _online_choice(span, pack, th, tier)
    elif tier is None:
        occupancy = shape = None
        if dispatch.needs_occupancy(span, pack, direction, th):
            occupancy = _smem_occupancy(queries, smem_kernel(partial), smem_needed)
            shape = cluster_tier() if th.cluster_below_smem_blocks else None
        tiles = tile() if dispatch.takes_tile(cols * itemsize, th) else None
        choice = dispatch.choose_tier(span, pack, direction=direction, smem_blocks_per_sm=occupancy, thresholds=th,
                                      cluster=shape, tile=tiles, row_bytes=cols * itemsize)
    elif tier == "cluster":
        shape = cluster_tier()
        if shape is None:
            raise ValueError("the cluster tier needs a GPU that launches thread-block clusters (compute capability "
                             f"9.0 or later) and slices of the row span of {span} that fit its shared memory")
        choice = shape.choice(pack)
    elif tier == "flat":
        shape = flat()
        if shape is None:
            most = dispatch.FLAT_BLOCK * dispatch.FLAT_PACKS_PER_THREAD[-1]
            raise ValueError("the flat tier needs a backward op, dense tensors (row stride = cols) in 16-byte packs "
                             f"whose phases agree, and rows of at least a pack and at most {most} packs; got {op} on "
                             f"({rows}, {cols}), {'dense' if dense else 'not dense'}, {pack}-element packs")
        choice = dispatch.TierChoice("flat", block=dispatch.FLAT_BLOCK, pack=pack, group=shape.group,
                                     tile_rows=shape.tile_rows, packs_per_thread=shape.packs_per_thread)
    elif tier == "tile":
        shape = tile()
        if shape is None:
            raise ValueError("the tile tier needs dense tensors (row stride = cols) in 16-byte packs whose phases agree, "
                             f"and a row per group of lanes within shared memory; got ({rows}, {cols}) "
                             f"{'dense' if dense else 'not dense'}, {pack}-element packs")
        choice = dispatch.TierChoice("tile", block=dispatch.TILE_BLOCK, pack=pack, group=shape.group,
                                     tile_rows=shape.tile_rows, lane_elements=shape.lane_elements)
    else:
        choice = _forced_choice(op, direction, span, pack, th, tier, block, one_pass,
                                lambda: _smem_occupancy(queries, smem_kernel(partial), smem_needed), smem_needed)
    if block is not None and choice.tier in ("tile", "flat"):
        raise ValueError(f"the {choice.tier} tier runs {choice.block} threads a block (its launch bounds); do not force "
                         f"a block for a shape it takes (got block={block})")
    if block is not None and choice.cluster_regs and block != choice.block:
        raise ValueError(f"a cluster block holding packs in registers runs {choice.block} threads; got block={block}")
    if block is not None and choice.block is not None:
        if block not in dispatch.BLOCK_SIZES:
            raise ValueError(f"block must be one of {dispatch.BLOCK_SIZES}, got {block}")
        choice = replace(choice, block=block)
    if choice.tier == "smem" and partial:
        choice = replace(choice, partial=True)

    name = dispatch.kernel_name(ctype, algorithm, direction, choice)
    if choice.tier in ("tile", "flat"):  # tiles of rows; the flat tier holds them in registers
        smem = dispatch.tile_smem_bytes(choice.tile_rows, cols, itemsize, direction) if choice.tier == "tile" else 0
        per_sm = queries.blocks_per_sm(name, choice.block, smem)
        if per_sm < 1:
            memory = f" with {smem} bytes of shared memory" if smem else ""
            raise ValueError(f"{name} cannot launch {choice.block} threads{memory} here")
        grid = grid_blocks(-(-rows // choice.tile_rows), per_sm, queries.sms, grid_waves)
        return SoftmaxPlan(op, choice, Launch(name, (grid,), (choice.block,), smem, tier=choice.tier,
                                              args=(np.int32(choice.tile_rows), np.int32(choice.group))))
    if choice.tier == "cluster":
        size = choice.cluster
        smem = dispatch.cluster_smem_bytes(span, pack, itemsize, direction, size)
        if choice.cluster_regs:  # the packs its threads hold are not cached
            smem -= dispatch.cluster_held_bytes(direction, choice.cluster_regs, choice.block, pack, itemsize)
        queries.smem_limit(name)
        if block is None and not choice.cluster_regs:
            resident = {b: queries.blocks_per_sm(name, b, smem) for b in dispatch.BLOCK_SIZES if b <= choice.block}
            choice = replace(choice, block=dispatch.cluster_block_size(choice.block, resident))
        per_sm = queries.blocks_per_sm(name, choice.block, smem)
        if per_sm < 1:
            raise ValueError(f"{name} cannot launch {choice.block} threads with {smem} bytes of shared memory here")
        if dispatch.cluster_strides(size, direction, per_sm):
            # The clusters the GPU holds at once, striding over the rows, each block loading its
            # next row while it stores the one before (kernels/softmax.cu, kStride).
            clusters = queries.active_clusters(name, size, choice.block, smem)
            grid = size * max(1, min(rows, clusters))
        else:
            grid = max(size, grid_blocks(rows * size, per_sm, queries.sms, grid_waves) // size * size)
        return SoftmaxPlan(op, choice, Launch(name, (grid,), (choice.block,), smem, tier=choice.tier))
    if choice.warp is not None:
        threads = dispatch.WARP_BLOCK
        work = -(-rows // (threads // choice.warp.group * choice.warp.rows_per_access))
        smem = 0
    else:
        threads = choice.block
        work = rows
        smem = smem_needed if choice.tier == "smem" else 0
        if smem:
            queries.smem_limit(name)
    per_sm = queries.blocks_per_sm(name, threads, smem)
    if per_sm < 1:
        raise ValueError(f"{name} cannot launch {threads} threads with {smem} bytes of shared memory here")
    grid = grid_blocks(work, per_sm, queries.sms, grid_waves)
    return SoftmaxPlan(op, choice, Launch(name, (grid,), (threads,), smem, tier=choice.tier))


def _online_choice(cols: int, pack: int, th: dispatch.Thresholds, tier: str | None) -> dispatch.TierChoice:
    choice = dispatch.choose_online(cols, pack, th)
    if tier is None or tier == choice.tier:
        return choice
    if tier == "online_block":
        return dispatch.TierChoice("online_block", one_pass=True, pack=pack,
                                   block=dispatch.uncached_block_size(cols, pack, th.uncached_packs_per_thread))
    if tier == "online_warp":
        return dispatch.choose_online(cols, pack, dispatch.with_overrides(th, online_warp_max_cols=cols))
    raise ValueError(f"online_softmax has tiers online_warp and online_block, not {tier!r}")


def _forced_choice(op, direction, span, pack, th, tier, block, one_pass, occupancy, smem_needed):
    """The choice when a test or a tuning run forces `tier`; `span` is the row's span (dispatch.span_cols)."""
    if tier == "warp":
        shape = dispatch.warp_shape(span, pack, direction, th.small_group_rows, th.full_warp_rows)
        if shape is None:
            raise ValueError(f"the warp tier holds at most {dispatch.warp_shapes(pack, direction)[-1].max_cols} "
                             f"columns in {pack}-element packs; got a row span of {span} (cols, plus up to a pack "
                             "where rows start mid-pack)")
        return dispatch.TierChoice("warp", warp=shape, pack=pack)
    if tier in dispatch.FIT_FAMILY:
        family = dispatch.FIT_FAMILY[tier]
        shape = dispatch.fit_shape(span, pack, direction, family=family)
        if shape is None:
            slots = [w.group * w.packs_per_thread for w in dispatch.fit_shapes(pack, direction, family)]
            limit = f"at most {max(slots)} lane slots" if slots else f"the {direction} has none"
            raise ValueError(f"no fitted warp shape ({tier}) holds a row span of {span} in {pack}-element packs "
                             f"({limit})")
        return dispatch.TierChoice("warp", warp=shape, pack=pack)
    if tier == "smem":
        table = occupancy()
        size = block or dispatch.block_size_by_occupancy(table, th.block_rule)
        if size is None or table.get(size, 0) < 1:
            raise ValueError(f"the shared-memory tier cannot launch a row span of {span} ({smem_needed} bytes per row) "
                             f"with {size or 128} threads on this device")
        return dispatch.TierChoice("smem", block=size, one_pass=one_pass, pack=pack)
    if tier == "registers":
        shape = dispatch.registers_shape(span, pack) if direction == "forward" else None
        if shape is None:
            raise ValueError(f"the registers tier runs forward rows in 16-byte packs of at most "
                             f"{dispatch.REGISTER_SHAPES[-1][0] * dispatch.REGISTER_SHAPES[-1][1]} packs; "
                             f"got {op} with a row span of {span} in {pack}-element packs")
        if block is not None:
            raise ValueError("the registers tier's block size follows from cols; do not force one")
        return dispatch.TierChoice("registers", block=shape[1], pack=pack, packs_per_thread=shape[0])
    if tier == "uncached":
        return dispatch.TierChoice("uncached", one_pass=one_pass, pack=pack,
                                   block=dispatch.uncached_block_size(span, pack, th.uncached_packs_per_thread))
    raise ValueError(f"tier must be warp, warp_fit, warp_wide, {dispatch.ELEMENTS_TIER}, registers, smem or uncached "
                     f"for {op}, got {tier!r}")
