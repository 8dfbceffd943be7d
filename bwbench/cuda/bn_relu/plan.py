"""What the BatchNorm + ReLU kernels (kernels/bn_relu.cu) launch: pure, testable without a GPU.

The kernel list, the block size and the grid rules of both paths: three kernels (per-channel
reduction, finalize, elementwise apply) or one cooperative launch (`fused_grid`) whose blocks wait
for each other between the phases, keeping what shared memory holds of x (`fused_nhwc_scratch_bytes`,
walk_step) for the second pass. Tensors small enough for one wave's registers have one-launch
register kernels of their own: NCHW planes no pack divides (`fused_group_plan`) and NHWC with C a
multiple of 32 (`nhwc_regs_plan`).
"""

from __future__ import annotations

import math

__all__ = ["BLOCK", "KERNELS", "LAYOUTS", "apply_blocks", "finalize_grid", "fused_grid", "fused_group_plan",
           "group_fused_kernels", "group_grid", "group_held_bytes", "group_held_kernel", "group_instances",
           "group_way_kernel", "nhwc_regs_kernels", "nhwc_regs_plan", "one_launch_by_default", "plane_group",
           "reduction_grid", "walk_step"]

LAYOUTS = ("NCHW", "NHWC")
BLOCK = 256  # bnr::kBlock
MAX_ELEMENTS = 2**31 - 2**26
"""The kernels index with 32-bit integers (a grid-stride step may go up to 2^26 past the end)."""

_TYPES = {"half_t": 8, "float": 4}  # storage type -> elements per 16-byte pack
_B = ("true", "false")


def _reduction_names(ctype: str, v: int) -> list[str]:
    out = []
    for kernel in ("bn_stats_nchw", "bn_stats_nhwc", "bn_grad_nchw", "bn_grad_nhwc"):
        out += [f"bnr::{kernel}<{ctype}, {v}, true>", f"bnr::{kernel}<{ctype}, 1, false>"]
    return out


GROUP_IMAGES = {("forward", False): (4, 8), ("forward", True): (4,), ("backward", False): (4,),
                ("backward", True): (4,)}
"""(direction, residual) -> the images a thread holds in registers in each instance of the one-launch
group kernels (template argument R); more take more registers (fewer blocks an SM)."""

GROUP_HELD_IMAGES = {"forward": 28, "backward": 0}
"""direction -> the most images a thread of the held instance (group_held_kernel) may keep in
shared memory beside its GROUP_HELD_R in registers (the kernel's `held_images` argument, the
launch's dynamic shared memory): up to 32 images a thread in all. The backward holds none."""

GROUP_HELD_R = 4
"""The instance (R images in registers) that holds further images in shared memory."""

_GROUP_KERNEL = {"forward": "bn_relu_fused_nchw_groups", "backward": "bn_relu_backward_fused_nchw_groups"}


def group_fused_kernels(direction: str, ctype: str, residual: bool) -> dict[int, str]:
    """R -> the name of the one-launch group kernel holding R images a thread in registers."""
    return {r: f"bnr::{_GROUP_KERNEL[direction]}<{ctype}, {str(residual).lower()}, {r}>"
            for r in GROUP_IMAGES[(direction, residual)]}


def group_held_kernel(direction: str, ctype: str, residual: bool) -> str | None:
    """The one-launch group kernel holding GROUP_HELD_R images a thread in registers and more in
    shared memory (an instance of its own: the register-only one keeps none of that code), or None
    where the direction holds none."""
    if not GROUP_HELD_IMAGES[direction]:
        return None
    return f"bnr::{_GROUP_KERNEL[direction]}<{ctype}, {str(residual).lower()}, {GROUP_HELD_R}, true>"


def group_way_kernel(direction: str, ctype: str, residual: bool, way: tuple[int, int]) -> str:
    """The kernel of one way (R, held) of group_instances."""
    r, held = way
    return group_held_kernel(direction, ctype, residual) if held else group_fused_kernels(direction, ctype, residual)[r]


def _fewest_images_first(way: tuple[int, int]) -> tuple[int, int]:
    """Sort key of the ways (R, held): fewest images a thread, then registers before shared memory."""
    r, held = way
    return r + held, held


def group_instances(direction: str, residual: bool) -> list[tuple[int, int]]:
    """(R, held) of every way the one-launch group kernel may hold a thread's images, fewest images
    first and registers before shared memory at equal images: each register instance with none
    held, and the R = GROUP_HELD_R instance holding 1 .. GROUP_HELD_IMAGES more in shared memory."""
    ways = [(r, 0) for r in GROUP_IMAGES[(direction, residual)]]
    ways += [(GROUP_HELD_R, h) for h in range(1, GROUP_HELD_IMAGES[direction] + 1)]
    return sorted(ways, key=_fewest_images_first)


def group_held_bytes(held: int, residual: bool) -> int:
    """Dynamic shared memory of a one-launch group block holding `held` images a thread: a 16-byte
    pack of x (and of z) for each of its BLOCK threads."""
    return held * BLOCK * 16 * (2 if residual else 1)


NHWC_REGS_ROWS = {False: (4,), True: (4,)}
"""residual -> the rows a thread holds in registers in each instance of the one-launch NHWC register
kernel (template argument R)."""


def nhwc_regs_kernels(ctype: str, residual: bool) -> dict[int, str]:
    """R -> the name of the one-launch NHWC register kernel holding R rows a thread."""
    return {r: f"bnr::bn_relu_fused_nhwc_regs<{ctype}, {str(residual).lower()}, {r}>" for r in NHWC_REGS_ROWS[residual]}


KERNELS = (
    *(n for t, v in _TYPES.items() for n in _reduction_names(t, v)),
    *(f"bnr::{k}_nchw_groups<{t}>" for k in ("bn_stats", "bn_grad") for t in _TYPES),
    *(f"bnr::bn_stats_finalize<{t}, {w}>" for t in _TYPES for w in _B),
    *(f"bnr::bn_grad_finalize<{w}>" for w in _B),
    *(f"bnr::{k}<{t}, {nhwc}, {vec}, {res}>" for k in ("bn_relu_apply", "bn_relu_backward_apply")
      for t in _TYPES for nhwc in _B for vec in _B for res in _B),
    *(f"bnr::{k}_{layout}<{t}, {res}>" for k in ("bn_relu_fused", "bn_relu_backward_fused")
      for layout in ("nchw", "nhwc") for t in _TYPES for res in _B),
    *(f"bnr::bn_relu_fused_nhwc<{t}, {res}, true>" for t in _TYPES for res in _B),
    *(name for t in _TYPES for res in (False, True) for direction in ("forward", "backward")
      for name in (f"bnr::{_GROUP_KERNEL[direction]}<{t}, {str(res).lower()}, {r}>" for r in
                   GROUP_IMAGES[(direction, res)])),
    *(name for t in _TYPES for res in (False, True) for direction in ("forward", "backward")
      if (name := group_held_kernel(direction, t, res))),
    *(name for t in _TYPES for res in (False, True) for name in nhwc_regs_kernels(t, res).values()),
)
"""Every kernel of kernels/bn_relu.cu the launcher names."""


def reduction_grid(layout: str, n: int, c: int, hw: int, pack: int, wave: int) -> tuple[tuple[int, int], int]:
    """((grid x, grid y), threads across channel packs) of a per-channel reduction kernel.

    NCHW: (C, S) blocks, S splits of each channel; NHWC: (tiles, S), a tile = up to 32 channel
    packs of a row, S row splits. S fills one wave (never just over it: a second, almost empty
    wave would double the time) and leaves each thread a few steps of work."""
    if layout == "NCHW":
        per_channel = n * hw
        splits = max(1, min(wave // c, -(-per_channel // (BLOCK * pack * 4))))
        return (c, splits), 1
    packs = c // pack
    tx = min(32, 1 << max(0, (packs - 1).bit_length()))
    tiles = -(-packs // tx)
    rows = n * hw
    splits = max(1, min(wave // tiles, -(-rows // (BLOCK // tx * 4))))
    return (tiles, splits), tx


def plane_group(c: int, hw: int, pack: int) -> int | None:
    """Channels a block of the NCHW group reduction (bnr::bn_*_nchw_groups) owns, or None where the
    per-channel walk is used instead.

    The group path is for planes no 16-byte pack divides (hw % pack != 0: 7x7, 14x14, any odd
    plane of at least a pack, so that a pack lies in at most two planes), where the per-channel
    walk takes one element an access. A group's planes, side by side in each image, must be whole
    packs from a pack boundary: groups are multiples of `pack // gcd(hw, pack)` channels, and C a
    multiple of that too (so the last, shorter group ends on one). A group's span is at most one
    pack a thread of the block; planes too large for even one unit of channels keep the
    per-channel walk."""
    if hw % pack == 0 or hw < pack:  # a pack in at most two planes: a thread keeps sums for two channels
        return None
    unit = pack // math.gcd(hw, pack)
    per_block = BLOCK * pack // hw // unit * unit
    if c % unit or per_block == 0:
        return None
    return min(per_block, c)


def fused_group_plan(n: int, c: int, hw: int, pack: int,
                     waves: dict[tuple[int, int], int]) -> tuple[int, int, int, int, int] | None:
    """(group, groups, S, R, held) of the one-launch group kernels, or None where they do not apply.

    `waves`: (R, held) -> blocks resident on the GPU at once of the instance holding R images a
    thread in registers and `held` more in shared memory (group_instances). A block must own the
    mask words of its span in every image (group * hw and c * hw multiples of 32: groups of
    `32 // gcd(hw, 32)` channels), a pack may span at most two planes (hw >= pack), the span at
    most one pack a thread, and the grid of groups x S must be resident at once with at most
    R + held images a thread. Takes the way of fewest images a thread that fits (registers first
    at equal images), S as large as it allows."""
    if hw % pack == 0 or hw < pack:
        return None
    unit = 32 // math.gcd(hw, 32)
    per_block = BLOCK * pack // hw // unit * unit
    if c % unit or per_block == 0:
        return None
    group = min(per_block, c)
    groups = -(-c // group)
    for r, held in sorted(waves, key=_fewest_images_first):
        splits = min(n, waves[(r, held)] // groups)
        if splits >= 1 and -(-n // splits) <= r + held:
            return group, groups, splits, r, held
    return None


TILE_CHANNELS = 32
"""Channels of a tile of the one-launch NHWC register kernel: one 32-bit mask word of every row."""


def nhwc_regs_plan(rows: int, c: int, pack: int, waves: dict[int, int]) -> tuple[int, int, int] | None:
    """(tiles, S, R) of the one-launch NHWC register kernel (bnr::bn_relu_fused_nhwc_regs), or None
    where it does not apply.

    `rows` = N * H * W; `waves`: R -> blocks of that instance resident on the GPU at once. A block
    holds a tile of 32 channels (C % 32 == 0) of BLOCK * pack / 32 rows at a time, R times over at a
    stride of S such row sets; the grid of tiles x S must be resident at once. Takes the instance
    of fewest rows a thread that fits, with S as large as it allows (more loads in flight, fewer
    rows a thread), and no larger than the rows need."""
    if c % TILE_CHANNELS or rows <= 0:
        return None
    tiles = c // TILE_CHANNELS
    at_once = BLOCK * pack // TILE_CHANNELS
    for r in sorted(waves):
        splits = min(waves[r] // tiles, -(-rows // at_once))
        if splits >= 1 and splits * at_once * r >= rows:
            return tiles, splits, r
    return None


def group_grid(n: int, c: int, group: int, wave: int) -> tuple[int, int]:
    """(groups, S) of the group reduction: S splits of the n images fill one wave (never past it)."""
    groups = -(-c // group)
    return groups, max(1, min(n, wave // groups))


FROM_END_MIN_BYTES = 16 << 20
"""The separate elementwise passes walk from the tensor's end (to read first what the reduction left
in L2) for x of this size and more. On an H100 that made the 51 MB float16 NHWC passes 3-7 points of
copy faster, and the 6.4 MB (32, 2048, 7, 7) ones, which L2 holds whole, 1-4 points slower."""


def walk_from_end(x_bytes: int) -> bool:
    return x_bytes >= FROM_END_MIN_BYTES


def apply_blocks(layout: str, numel: int, c: int, pack: int, vec: bool, wave: int) -> int:
    """Blocks of the elementwise pass: one wave at most; for NHWC, a multiple of the blocks after
    which a thread's channels repeat (its grid stride a multiple of C), so each thread loads its
    channels' constants once."""
    blocks = max(1, min(wave, -(-numel // (BLOCK * pack))))
    if layout == "NHWC" and vec and blocks * BLOCK * pack < numel:
        unit = c // math.gcd(c, BLOCK * pack)
        blocks = max(unit, blocks // unit * unit)
    return blocks


def fused_grid(layout: str, n: int, c: int, hw: int, pack: int, vec: bool, wave: int):
    """((grid x, grid y), threads across channel packs) of the one-launch path, or None where it
    does not apply: it needs 16-byte packs, mask words that one block owns whole (NCHW: H*W % 32
    == 0; NHWC: C % 32 == 0), and the reduction's grid no larger than `wave` (resident at once)."""
    if not vec or (hw % 32 if layout == "NCHW" else c % 32):
        return None
    (gx, gy), tx = reduction_grid(layout, n, c, hw, pack, wave)
    return ((gx, gy), tx) if gx * gy <= wave else None


ONE_LAUNCH_NHWC_MIN_BYTES = 16 << 20
"""`fused=None` takes the one-launch path wherever it applies for NCHW, and for NHWC from this size
of x. H100, cold, one launch against three kernels, float16 (32, 64, 112,
112) and (32, 256, 56, 56): NCHW forward 48-50 vs 63 us (bn_add_relu 62-64 vs 80), NCHW backward
84 vs 98 us; NHWC forward 52.5-58 vs 65-69 us (bn_add_relu 69-72 vs 82-86), NHWC backward 93-94 vs
98-103 us (bn_add_relu 114 vs 123-127). At (32, 2048, 7, 7), 6.4 MB float16 and 12.8 MB float32,
the NHWC one launch was 0-10% slower in both directions, so small NHWC tensors keep three kernels."""


def one_launch_by_default(layout: str, x_bytes: int) -> bool:
    return layout == "NCHW" or x_bytes >= ONE_LAUNCH_NHWC_MIN_BYTES


def walk_step(layout: str, pack: int, grid: tuple[int, int], tx: int) -> int:
    """Elements of a channel between one thread's consecutive packs in the one-launch walk: a
    thread's k-th pack is element first + k * step of its channel, first < step."""
    _, gy = grid
    return gy * BLOCK * pack if layout == "NCHW" else gy * (BLOCK // tx)


BARRIER_WORDS = 97  # bnr::grid_sync: arrival counts at words 0, 32 and 64, the generation at word 96
READY_FLAGS_AT = 128  # bnr::kReadyFlags, after the grid barrier's words: the NHWC forward's ready flag of each group of MERGE_GROUP channels
MERGE_GROUP = 8  # bnr::kMergeGroup
READY_FLAGS = 1024  # flags a buffer holds at first (8192 channels)

CACHE_SLOT_BYTES = BLOCK * 16
"""Shared memory of one x-cache slot of a block: a 16-byte pack for each of its threads."""

MERGE_ROUND = 2
"""bnr::kMergeRound: channels of a pack the fused NHWC forward's block merge takes a round, where
the plan asks for rounds."""

MERGE_ROUNDS_MIN_SLOTS = 2
"""The fused NHWC forward merges in rounds only where that frees at least this many x-cache slots:
on an H100 rounds took 3.1 us off float16 32x256x56x56 (11 -> 16 slots) and added 0.9 us at
32x64x112x112 (16 -> 17)."""


def fused_nhwc_scratch_bytes(pack: int, tx: int, merge_rounds: bool = False) -> int:
    """Dynamic shared memory after the x cache of bnr::bn_relu_fused_nhwc: its block merge of
    `pack` channels (all at once, or MERGE_ROUND a round) over 8 warps of `tx` lanes (3 floats
    each), reused for phase C's coefficients (12 bytes for each of the tile's tx * pack channels)."""
    merged = min(MERGE_ROUND, pack) if merge_rounds else pack
    return max(3 * merged * (BLOCK // 32) * tx * 4, 12 * pack * tx)


FEW_PARTIALS = 128
"""Up to this many partials per channel the finalize merges 32 channels a block (at most 16 loads a
thread, a warp reading one partial of 32 channels) instead of a block per channel: at (32, 2048,
7, 7) NCHW, S = 1, the block per channel made the forward 11-12% slower on an H200 than the warp
per channel it had replaced, and a warp per channel read one 32-byte sector a lane."""

CHANNELS_PER_ROUND = 32  # bnr::kChannelsPerRound


def finalize_grid(channels: int, partials: int) -> tuple[bool, int]:
    """(few partials: 32 channels a block?, blocks) of the finalize kernel for `partials` partials
    per channel."""
    if partials <= FEW_PARTIALS:
        return True, -(-channels // CHANNELS_PER_ROUND)
    return False, channels
