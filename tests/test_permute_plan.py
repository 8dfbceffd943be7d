"""The permute planner (bwbench/cuda/permute/plan.py) on the CPU: hand-worked examples, and brute-force
NumPy checks that the simplified permutation, and the index arithmetic each kernel is planned to do,
put every element where x.permute(perm) puts it."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from bwbench.cuda.permute.plan import (
    INT32_LIMIT,
    BatchDim,
    GATHER_CONFIG,
    GatherConfig,
    MAX_DIMS,
    GatherPlan,
    PermuteError,
    Simplified,
    TileConfig,
    TilePlan,
    choose_tile,
    compiled_tile_configs,
    contiguous_strides,
    divider32,
    fast_divide32,
    index_type,
    movement_size,
    plan_permute,
    rows_misaligned,
    simplify,
    tile_vec,
)


# ---------------------------------------------------------------------------------------------
# Simplification: hand-worked examples
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, perm, expected_shape, expected_perm", [
    # The article's example: (0,1,2,3)->(2,3,0,1) is a 2-D transpose of (3*4, 5*6).
    ((3, 4, 5, 6), (2, 3, 0, 1), (12, 30), (1, 0)),
    # The article's two 3-D cases do not merge.
    ((8, 16, 32), (1, 0, 2), (8, 16, 32), (1, 0, 2)),
    ((8, 16, 32), (0, 2, 1), (8, 16, 32), (0, 2, 1)),
    # Attention heads: (B, S, H, D) -> (B, H, S, D) keeps all four dims.
    ((32, 512, 16, 64), (0, 2, 1, 3), (32, 512, 16, 64), (0, 2, 1, 3)),
    # Identity and anything that only moves size-1 dims is a copy.
    ((2, 3, 4), (0, 1, 2), (24,), (0,)),
    ((5, 1, 7), (1, 0, 2), (35,), (0,)),
    ((1, 1, 1), (2, 0, 1), (1,), (0,)),
    ((), (), (1,), (0,)),
    # Size-1 dims are dropped before merging: (1,4096,1,2048) by (2,3,0,1) is a 2-D transpose.
    ((1, 4096, 1, 2048), (2, 3, 0, 1), (4096, 2048), (1, 0)),
    ((64, 1, 512, 1, 256), (2, 1, 0, 4, 3), (64, 512, 256), (1, 0, 2)),
    # NCDHW -> NDHWC merges to a batch transpose.
    ((8, 64, 16, 64, 64), (0, 2, 3, 4, 1), (8, 64, 65536), (0, 2, 1)),
    # Window partition (0,1,3,2,4,5): two pairs merge, the last dim still moves whole.
    ((32, 8, 7, 8, 7, 96), (0, 1, 3, 2, 4, 5), (256, 7, 8, 672), (0, 2, 1, 3)),
    # Full reversal merges nothing.
    ((2, 3, 4), (2, 1, 0), (2, 3, 4), (2, 1, 0)),
    # Two runs that swap: (0,1 | 2,3,4) -> (2,3,4 | 0,1).
    ((2, 3, 4, 5, 6), (2, 3, 4, 0, 1), (6, 120), (1, 0)),
    ((8, 32, 4, 64, 8, 64), (1, 4, 5, 0, 2, 3), (8, 32, 256, 512), (1, 3, 0, 2)),
    # Negative dims count from the end.
    ((3, 4, 5), (0, -1, -2), (3, 4, 5), (0, 2, 1)),
])
def test_simplify_examples(shape, perm, expected_shape, expected_perm):
    assert simplify(shape, perm) == Simplified(expected_shape, expected_perm)


@pytest.mark.parametrize("shape, perm", [((2, 3), (0,)), ((2, 3), (0, 0)), ((2, 3), (0, 2)), ((-1, 2), (1, 0))])
def test_simplify_rejects_bad_permutations(shape, perm):
    with pytest.raises(PermuteError):
        simplify(shape, perm)


def test_simplified_properties():
    s = simplify((8, 16, 32), (0, 2, 1))
    assert s.out_shape == (8, 32, 16) and s.last_dim_moves and not s.is_copy
    assert not simplify((8, 16, 32), (1, 0, 2)).last_dim_moves
    assert simplify((8, 16), (0, 1)).is_copy


# ---------------------------------------------------------------------------------------------
# Brute force: random shapes (with size-1 dims) and permutations against NumPy
# ---------------------------------------------------------------------------------------------


def _random_case(rng: random.Random, max_dims: int = 7) -> tuple[tuple[int, ...], tuple[int, ...]]:
    ndim = rng.randint(0, max_dims)
    shape = tuple(rng.choice([1, 1, 2, 3, 4, 5]) for _ in range(ndim))
    perm = list(range(ndim))
    rng.shuffle(perm)
    # Leave runs in order now and then so merging has something to do.
    if ndim >= 3 and rng.random() < 0.5:
        perm = sorted(perm[: ndim // 2]) + perm[ndim // 2:]
    return shape, tuple(perm)


def test_simplification_preserves_the_permutation_brute_force():
    rng = random.Random(1234)
    for _ in range(3000):
        shape, perm = _random_case(rng)
        x = np.arange(math.prod(shape)).reshape(shape)
        expected = np.ascontiguousarray(x.transpose(perm)).reshape(-1)
        s = simplify(shape, perm)
        got = np.ascontiguousarray(x.reshape(s.shape).transpose(s.perm)).reshape(-1)
        assert np.array_equal(got, expected), (shape, perm, s)
        assert 1 not in s.shape or s.shape == (1,)
        # Fully merged: no two input dims that are adjacent and in order in the output remain.
        assert all(b != a + 1 for a, b in zip(s.perm, s.perm[1:])), (shape, perm, s)


# ---------------------------------------------------------------------------------------------
# Movement size, index type, fast division
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("last_bytes, itemsize, addresses, expected", [
    (128, 2, (0, 0), 16),       # 64 halves: 16-byte moves
    (4096, 4, (256, 512), 16),
    (24, 4, (0, 0), 8),         # 6 floats = 24 bytes: 8 divides, 16 does not
    (12, 4, (0, 0), 4),         # 3 floats
    (34, 2, (0, 0), 2),         # 17 halves
    (17, 1, (0, 0), 1),
    (64, 1, (0, 2), 2),         # the source is only 2-byte aligned
    (64, 2, (8, 0), 8),
    (64, 8, (8, 8), 8),         # never below the element size, never above the alignment
    (8, 8, (0, 0), 8),
])
def test_movement_size(last_bytes, itemsize, addresses, expected):
    assert movement_size(last_bytes, itemsize, addresses) == expected


def test_index_type_threshold():
    assert index_type(1) == "int32"
    assert index_type(INT32_LIMIT - 1) == "int32"
    assert index_type(INT32_LIMIT) == "int64"
    assert index_type(2**31 + 5) == "int64"


@pytest.mark.parametrize("d", [1, 2, 3, 5, 7, 64, 96, 100, 641, 1000, 1001, 4095, 65536, 65537, 2**20 + 7,
                               2**30, 2**30 + 1, 2**31 - 1])
def test_fast_division_matches_integer_division(d):
    packed = divider32(d)
    assert packed & 0xFFFFFFFF == d and packed >> 32 < 2**32
    rng = random.Random(d)
    values = [0, 1, d - 1, d, d + 1, 2 * d - 1, 2**31 - 1, 2**31 - 2, 2**31 - d] + \
        [rng.randrange(2**31) for _ in range(2000)] + [rng.randrange(min(2**31, 4 * d)) for _ in range(200)]
    for n in values:
        if 0 <= n < 2**31:
            assert fast_divide32(n, packed) == n // d, (n, d)


def test_fast_division_rejects_out_of_range():
    for d in (0, 2**31):
        with pytest.raises(PermuteError):
            divider32(d)


def test_tile_vec():
    assert tile_vec(2, 128) == 4                # half4: 8-byte packs
    assert tile_vec(2, 66) == 2                 # half2
    assert tile_vec(2, 1001) == 1               # an odd side: one element
    assert tile_vec(1, 64) == 8 and tile_vec(1, 68) == 4 and tile_vec(1, 62) == 1
    assert tile_vec(2, 64, 2) == 1              # a 2-byte aligned pointer cannot take half2
    assert tile_vec(2, 64, 4) == 2
    assert tile_vec(4, 64) == 2 and tile_vec(4, 63) == 1 and tile_vec(8, 64) == 1


def test_choose_tile_narrows_each_side_on_its_own_and_shrinks_small_problems():
    c = choose_tile(2, 1000, 1001, ())
    assert (c.vec_read, c.vec_write) == (1, 4)   # odd columns, rows a multiple of 4
    assert c.tile == 32                          # 256 large tiles: a tiny problem
    assert choose_tile(2, 256, 256, (BatchDim(64, 1 << 16, 1 << 16),)).tile == 64
    big = choose_tile(4, 1024, 1024, (BatchDim(64, 1 << 20, 1 << 20),))
    small = choose_tile(4, 256, 256, (BatchDim(64, 1 << 16, 1 << 16),))
    assert (big.tile, small.tile) == (64, 32) and big.vec_read == 2
    assert all(c in compiled_tile_configs() for c in (c, big, small))


# ---------------------------------------------------------------------------------------------
# Plans: hand-worked examples
# ---------------------------------------------------------------------------------------------


def test_plan_of_1_0_2_half_moves_16_bytes():
    plan = plan_permute((64, 512, 512), (1, 0, 2), 2)
    k = plan.kernel
    assert isinstance(k, GatherPlan)
    assert k.unit_bytes == 16 and k.index == "int32" and k.config == GATHER_CONFIG
    assert k.out_sizes == (512, 64, 64)         # 512 halves = 64 units of 16 bytes
    assert k.src_strides == (64, 512 * 64, 1)   # output dim 0 is input dim 1, ...


def test_plan_of_0_2_1_half_is_a_batch_transpose():
    plan = plan_permute((64, 1024, 2048), (0, 2, 1), 2)
    k = plan.kernel
    assert isinstance(k, TilePlan) and k.batch_transpose
    assert (k.rows, k.cols, k.src_row_stride, k.dst_row_stride) == (1024, 2048, 2048, 1024)
    assert len(k.batch) == 1
    assert (k.batch[0].size, k.batch[0].src_stride, k.batch[0].dst_stride) == (64, 1024 * 2048, 1024 * 2048)
    assert (k.config.vec_read, k.config.vec_write, k.config.tile) == (8, 8, 64)   # 16-byte packs both ways
    assert k.tiles == (32, 16, 64)


def test_plan_of_a_general_6d_permute_is_tiled_with_batch_dims():
    plan = plan_permute((8, 32, 4, 64, 8, 64), (1, 4, 5, 0, 2, 3), 4)
    k = plan.kernel
    assert plan.simplified == Simplified((8, 32, 256, 512), (1, 3, 0, 2))
    assert isinstance(k, TilePlan) and not k.batch_transpose
    assert (k.rows, k.cols) == (256, 512)
    assert [b.size for b in k.batch] == [32, 8]   # innermost first


def test_plan_of_an_odd_half_transpose_reads_single_elements():
    plan = plan_permute((1000, 1001), (1, 0), 2)
    assert isinstance(plan.kernel, TilePlan)
    c = plan.kernel.config
    assert (c.vec_read, c.vec_write, c.shifted) == (1, 4, False)   # odd columns, rows a multiple of 4
    # Aligned half2 reads are kept where the columns allow them.
    c = plan_permute((1000, 1002), (1, 0), 2).kernel.config
    assert (c.vec_read, c.shifted) == (2, False)


def test_shifted_reads_when_asked_for():
    c = choose_tile(2, 1000, 1001, (), shifted_reads=True)
    assert (c.vec_read, c.vec_write, c.shifted) == (4, 4, True)
    # Without 8-byte alignment of the source the reads stay single halves.
    c = choose_tile(2, 1000, 1001, (), src_address=4, shifted_reads=True)
    assert (c.vec_read, c.shifted) == (1, False)
    # Aligned reads of 4 bytes or more are never replaced.
    assert not choose_tile(2, 1000, 1002, (), shifted_reads=True).shifted
    assert not choose_tile(4, 1000, 1001, (), shifted_reads=True).shifted
    plan = plan_permute((3, 70, 131), (0, 2, 1), 1, config=TileConfig(1, 8, 1, 128, shifted=True))
    assert plan.kernel.config.shifted


def test_plan_of_a_copy_and_of_nothing():
    plan = plan_permute((4, 1, 6), (1, 0, 2), 4)
    assert isinstance(plan.kernel, GatherPlan) and plan.kernel.out_sizes == (6,) and plan.kernel.unit_bytes == 16
    assert plan_permute((4, 0, 6), (2, 1, 0), 4).kernel is None


def test_plan_uses_int64_past_2_31_elements():
    plan = plan_permute((5, 20000, 21475), (0, 2, 1), 1)
    assert plan.numel > 2**31 and plan.kernel.index == "int64" and plan.kernel.config.vec_read == 1
    plan = plan_permute((5, 20000, 21475), (1, 0, 2), 1)
    assert plan.kernel.index == "int64" and plan.kernel.unit_bytes == 1


def test_plan_refuses_too_many_dims_and_odd_items():
    shape, perm = (2,) * 10, tuple(reversed(range(10)))
    with pytest.raises(PermuteError, match="at most"):
        plan_permute(shape, perm, 4)
    with pytest.raises(PermuteError, match="element size"):
        plan_permute((2, 3), (1, 0), 3)


def test_forced_configs():
    with pytest.raises(PermuteError, match="does not fit"):
        plan_permute((64, 64), (1, 0), 2, config=TileConfig(4, 1, 1, 32))
    with pytest.raises(PermuteError, match="does not fit"):
        plan_permute((64, 66), (1, 0), 2, config=TileConfig(2, 4, 4, 64))
    plan = plan_permute((64, 66), (1, 0), 2, config=TileConfig(2, 2, 4, 64))
    assert plan.kernel.config == TileConfig(2, 2, 4, 64)
    plan = plan_permute((8, 64, 64), (1, 0, 2), 2, config=GatherConfig(128, 4))
    assert plan.kernel.config == GatherConfig(128, 4) and plan.kernel.blocks == 8 * 64 * 8 // 512


# ---------------------------------------------------------------------------------------------
# Plans: brute force through a model of each kernel's index arithmetic
# ---------------------------------------------------------------------------------------------


def gather_model(plan: GatherPlan, src_units: np.ndarray) -> np.ndarray:
    """What permute_gather computes, element by element, with the fast divisions of the int path."""
    out = np.empty(plan.count, dtype=src_units.dtype)
    divs = [divider32(s) for s in plan.out_sizes]
    for i in range(plan.count):
        rest, offset = i, 0
        for k in range(len(plan.out_sizes) - 1, 0, -1):
            q = fast_divide32(rest, divs[k])
            offset += (rest - q * plan.out_sizes[k]) * plan.src_strides[k]
            rest = q
        out[i] = src_units[offset + rest * plan.src_strides[0]]
    return out


def _tile_origins(plan: TilePlan):
    """(r0, c0, src_base, dst_base) of every block, decoded as the kernels do (tile_origin)."""
    t = plan.config.tile
    tiles_c, tiles_r, _ = plan.tiles
    for block in range(plan.blocks):
        q = fast_divide32(block, divider32(tiles_c))
        tc = block - q * tiles_c
        b = fast_divide32(q, divider32(tiles_r))
        tr = q - b * tiles_r
        src_base = dst_base = 0
        for dim in plan.batch:
            nxt = fast_divide32(b, divider32(dim.size))
            index = b - nxt * dim.size
            src_base += index * dim.src_stride
            dst_base += index * dim.dst_stride
            b = nxt
        yield tr * t, tc * t, src_base, dst_base


def tiled_model(plan: TilePlan, src: np.ndarray, dst_phase: int = 0) -> np.ndarray:
    """What permute_tiled computes, tile by tile: block index -> (batch, tile row, tile column),
    batch index -> base offsets, then rows x columns through the tile. Configurations with
    write_align go to aligned_tiled_model (dst_phase: the destination's element offset within an
    aligned piece)."""
    if plan.config.write_align:
        return aligned_tiled_model(plan, src, dst_phase)
    out = np.full(src.size, -1, dtype=src.dtype)
    t = plan.config.tile
    for r0, c0, src_base, dst_base in _tile_origins(plan):
        for r in range(r0, min(r0 + t, plan.rows)):
            for c in range(c0, min(c0 + t, plan.cols)):
                out[dst_base + c * plan.dst_row_stride + r] = src[src_base + r * plan.src_row_stride + c]
    return out


def aligned_lead(config: TileConfig) -> int:
    """permute_tiled_aligned's LEAD: input rows read before the tile's own (whole read steps)."""
    s = config.write_align // config.itemsize
    per_step = config.threads // (config.tile // config.vec_read)
    steps = -(-(config.tile + s - 1) // per_step)
    return steps * per_step - config.tile


def aligned_tiled_model(plan: TilePlan, src: np.ndarray, dst_phase: int = 0) -> np.ndarray:
    """What permute_tiled_aligned computes. Asserts on the way what the kernel relies on: every
    element it writes was among the rows it read, every element is written exactly once, and an
    interior tile writes whole aligned pieces of exactly `tile` elements per row."""
    config = plan.config
    t, s, lead = config.tile, config.write_align // config.itemsize, aligned_lead(config)
    out = np.full(src.size, -1, dtype=src.dtype)
    writes = np.zeros(src.size, dtype=np.int64)
    for r0, c0, src_base, dst_base in _tile_origins(plan):
        read = range(r0 - lead if r0 > 0 else 0, min(r0 + t, plan.rows))
        interior = r0 > 0 and plan.rows - r0 > t and plan.cols - c0 >= t
        for c in range(c0, min(c0 + t, plan.cols)):
            row = dst_base + c * plan.dst_row_stride
            m = (dst_phase + row + r0) % s
            begin = r0 - m if r0 > 0 else 0
            end = plan.rows if plan.rows - r0 <= t else r0 + t - m
            if interior:
                assert (dst_phase + row + begin) % s == 0 and end - begin == t
            for r in range(begin, end):
                assert r in read, (r0, c0, r, read)
                out[row + r] = src[src_base + r * plan.src_row_stride + c]
                writes[row + r] += 1
    assert writes.max() == 1, "an element written twice"
    return out


def test_kernel_index_models_match_numpy_brute_force():
    rng = random.Random(99)
    checked = {"gather": 0, "tiled": 0}
    for _ in range(400):
        shape, perm = _random_case(rng, max_dims=6)
        shape = tuple(s * rng.choice([1, 1, 2, 7]) for s in shape)
        if math.prod(shape) > 6000:
            continue
        itemsize = rng.choice([1, 2, 4, 8])
        x = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
        expected = np.ascontiguousarray(x.transpose(perm)).reshape(-1)
        plan = plan_permute(shape, perm, itemsize)
        k = plan.kernel
        if isinstance(k, GatherPlan):
            # Model units as tuples of elements: unit u holds elements [u*scale, (u+1)*scale).
            scale = k.unit_bytes // itemsize
            units = x.reshape(-1, scale)
            idx = gather_model(k, np.arange(units.shape[0]))
            got = units[idx].reshape(-1)
            checked["gather"] += 1
        else:
            got = tiled_model(k, x.reshape(-1))
            checked["tiled"] += 1
        assert np.array_equal(got, expected), (shape, perm, itemsize, plan)
    assert checked["gather"] > 50 and checked["tiled"] > 50, checked


def test_tiled_model_on_edge_tiles_and_batches():
    """Sides that are not multiples of the tile, and two batch dims, with the large tile."""
    for shape, perm in [((3, 70, 130), (0, 2, 1)), ((130, 70), (1, 0)), ((2, 65, 3, 66), (1, 3, 0, 2)),
                        ((5, 33, 2, 40), (3, 0, 2, 1))]:
        x = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
        plan = plan_permute(shape, perm, 2)
        assert isinstance(plan.kernel, TilePlan)
        expected = np.ascontiguousarray(x.transpose(perm)).reshape(-1)
        assert np.array_equal(tiled_model(plan.kernel, x.reshape(-1)), expected), (shape, perm)


def test_wide_half_tiles_need_both_sides_and_pointers_aligned_to_16_bytes():
    wide = TileConfig(2, 8, 8, 64, 256)
    assert wide in compiled_tile_configs()
    assert plan_permute((64, 512, 512), (0, 2, 1), 2).kernel.config == wide
    assert plan_permute((8192, 8192), (1, 0), 2).kernel.config == wide
    # Input rows of 4 (mod 8) halves, or a pointer 8 bytes off 16, keep 8-byte packs (output rows of
    # 4 (mod 8) halves start off a sector and take aligned writes).
    assert plan_permute((64, 512, 516), (0, 2, 1), 2).kernel.config == TileConfig(2, 4, 4, 64)
    assert plan_permute((64, 512, 512), (0, 2, 1), 2, src_address=8).kernel.config == TileConfig(2, 4, 4, 64)
    assert plan_permute((64, 512, 512), (0, 2, 1), 2, dst_address=8).kernel.config == TileConfig(2, 4, 4, 64)
    # Small problems keep the 32-wide tile, and float32 keeps its 8-byte packs.
    assert plan_permute((8, 128, 128), (0, 2, 1), 2).kernel.config.tile == 32
    assert plan_permute((64, 512, 512), (0, 2, 1), 4).kernel.config == TileConfig(4, 2, 2, 64)


def test_aligned_writes_where_output_rows_start_off_a_sector():
    # Rows of 1000 halves (2000 bytes) start 16 bytes off a 32-byte sector every other row.
    assert plan_permute((33, 1000, 1000), (0, 2, 1), 2).kernel.config == TileConfig(2, 4, 4, 64, write_align=32)
    # Odd float16 columns (reads of single halves) keep the plain tile: measured no faster.
    assert plan_permute((33, 1000, 1001), (0, 2, 1), 2).kernel.config == TileConfig(2, 1, 4, 64)
    # Odd int8 columns: rows read as 4-byte words shifted into place, unless the source is not
    # 4-byte aligned.
    assert plan_permute((3, 1000, 1001), (0, 2, 1), 1).kernel.config == TileConfig(1, 4, 8, 128, shifted=True,
                                                                                     write_align=32)
    assert not choose_tile(1, 1000, 1001, (BatchDim(3, 1, 1),), src_address=2).write_align
    # Small problems (the 32-wide tile) keep permute_tiled: measured faster there.
    assert plan_permute((1000, 1001), (1, 0), 2).kernel.config.write_align == 0
    # Odd output rows still get 8-byte packs: the pieces, not the rows, set the alignment.
    assert plan_permute((3, 1001, 1024), (0, 2, 1), 2).kernel.config == TileConfig(2, 4, 4, 64, write_align=32)
    # Rows that start on sectors (1000 floats, 1024 halves) and rows within one tile keep permute_tiled.
    assert plan_permute((33, 1000, 1001), (0, 2, 1), 4).kernel.config.write_align == 0
    assert plan_permute((33, 1001, 1001), (0, 2, 1), 4).kernel.config == TileConfig(4, 1, 2, 64, write_align=32)
    assert plan_permute((33, 1024, 1001), (0, 2, 1), 2).kernel.config.write_align == 0
    assert plan_permute((7, 30, 1001), (0, 2, 1), 2).kernel.config.write_align == 0
    # A batch stride off a sector is enough.
    assert rows_misaligned(2, 1024, (BatchDim(3, 1, 1001),), 32)
    assert not rows_misaligned(2, 1024, (BatchDim(3, 1, 1024),), 32)
    assert not choose_tile(2, 1000, 1001, (), aligned_writes=False).write_align


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("shape, perm", [((3, 70, 131), (0, 2, 1)), ((130, 301), (1, 0)), ((2, 257, 3, 75), (1, 3, 0, 2)),
                                         ((300, 40), (1, 0)), ((2, 129, 65), (0, 2, 1))],
                         ids=lambda v: "x".join(map(str, v)))
def test_aligned_tiled_model_matches_numpy_at_any_destination_phase(itemsize, shape, perm):
    """Every compiled aligned configuration of the element size, every destination offset within
    a piece: the same output as NumPy, each element written once, read rows covering the writes."""
    x = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    expected = np.ascontiguousarray(x.transpose(perm)).reshape(-1)
    configs = [c for c in compiled_tile_configs() if c.write_align and c.itemsize == itemsize]
    assert configs
    fitted = 0
    for config in configs:
        try:
            plan = plan_permute(shape, perm, itemsize, config=config)
        except PermuteError:   # reads wider than the columns allow
            continue
        fitted += 1
        s = config.write_align // itemsize
        assert aligned_lead(config) >= s - 1
        for phase in sorted({0, 1, s // 2, s - 1}):
            got = tiled_model(plan.kernel, x.reshape(-1), dst_phase=phase)
            assert np.array_equal(got, expected), (config, phase)
    assert fitted


@pytest.mark.parametrize("vec, tile", [(4, 64), (4, 32), (8, 128), (2, 64)])
def test_shifted_reads_cover_each_row_once_from_aligned_packs(vec, tile):
    """A model of permute_tiled's SHIFT read of one tile row starting at element offset o: every
    column gets element o + col exactly once, every pack is aligned and holds an element of the row."""
    for o in range(0, 3 * vec + 1):
        loaded: dict[int, int] = {}
        packs = []
        h = o % vec
        for xr in range(tile // vec):
            start = o - h + xr * vec
            packs.append(start)
            for e in range(vec):
                col = xr * vec - h + e
                if col >= 0:
                    assert col not in loaded
                    loaded[col] = start + e
        if h:
            start = o - h + tile
            packs.append(start)
            for e in range(h):
                assert tile - h + e not in loaded
                loaded[tile - h + e] = start + e
        assert loaded == {col: o + col for col in range(tile)}
        for start in packs:
            assert start % vec == 0 and start >= 0
            assert any(o <= start + e < o + tile for e in range(vec)), (o, start)


def test_every_chosen_config_is_compiled():
    rng = random.Random(5)
    compiled = set(compiled_tile_configs())
    for _ in range(300):
        itemsize = rng.choice([1, 2, 4, 8])
        rows, cols = rng.randint(1, 5000), rng.randint(1, 5000)
        batch = (BatchDim(rng.randint(1, 64), 1, 1),)
        src, dst = rng.choice([0, 1, 2, 4, 8]) * itemsize % 16, rng.choice([0, 2, 4, 8]) * itemsize % 16
        for shifted in (False, True):
            assert choose_tile(itemsize, rows, cols, batch, src, dst, shifted_reads=shifted) in compiled


def test_strides_helper():
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1)
    assert contiguous_strides(()) == ()
    assert MAX_DIMS == 8
