"""The softmax family's dispatcher without a GPU: tier choice from occupancy numbers, warp shapes,
block sizes, kernel names, and the suites that use it."""

from __future__ import annotations

import pytest

from bwbench.cuda.softmax import dispatch as d
from bwbench.cuda.softmax.dispatch import Thresholds, TierChoice, WarpShape

HALF_PACK = 8  # 16 bytes of float16 / bfloat16
FLOAT_PACK = 4


def fits(blocks_128: int, by_size: dict[int, int] | None = None) -> dict[int, int]:
    """An occupancy table: blocks per SM at each block size."""
    table = {128: blocks_128, 256: 0, 512: 0, 1024: 0}
    table.update(by_size or {})
    return table


# ---------------------------------------------------------------------------------------------
# pack size
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("itemsize,aligned,expected", [(2, True, 8), (2, False, 1), (4, True, 4), (4, False, 1)])
def test_pack_is_16_bytes_whenever_the_tensors_share_their_offsets(itemsize, aligned, expected):
    assert d.pack_elements(itemsize, aligned) == expected


@pytest.mark.parametrize("cols,pack,starts_aligned,span", [
    (1024, 8, True, 1024), (1000, 8, True, 1000), (1023, 8, False, 1030), (1, 8, False, 8), (7, 1, False, 7),
])
def test_span_leaves_room_for_rows_that_start_mid_pack(cols, pack, starts_aligned, span):
    assert d.span_cols(cols, pack, starts_aligned) == span


@pytest.mark.parametrize("offset", range(8))
@pytest.mark.parametrize("cols", [1, 7, 8, 9, 31, 1000, 1023])
def test_span_holds_the_row_at_every_offset(offset, cols):
    """Pack k of a row's span covers elements [8k, 8k + 8) counted from the aligned pack holding
    its first element (kernels/softmax.cuh's RowSpan): the packs a row needs fit the span."""
    needed = -(-(offset + cols) // 8)
    assert needed <= d.span_packs(d.span_cols(cols, 8, offset == 0), 8)


# ---------------------------------------------------------------------------------------------
# warp tier shapes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cols,pack,expected", [
    (1, 1, WarpShape(1, 1, 1, 2)),
    (3, 1, WarpShape(1, 1, 4, 2)),       # padding: 4 lanes, one idle
    (32, 8, WarpShape(8, 1, 4, 2)),      # a quarter warp per row, two rows per access
    (64, 8, WarpShape(8, 1, 8, 2)),
    (128, 8, WarpShape(8, 1, 16, 2)),
    (256, 8, WarpShape(8, 1, 32, 1)),    # a whole warp, one 16-byte pack per lane
    (512, 8, WarpShape(8, 2, 32, 1)),
    (1000, 8, WarpShape(8, 4, 32, 1)),
    (1024, 8, WarpShape(8, 4, 32, 1)),
    (33, 1, WarpShape(1, 2, 32, 1)),
    (1023, 1, WarpShape(1, 32, 32, 1)),
    (1024, 4, WarpShape(4, 8, 32, 1)),
    (2048, 8, WarpShape(8, 8, 32, 1)),   # forward registers reach 2048 in packs
])
def test_warp_shape_is_the_smallest_group_that_holds_the_row(cols, pack, expected):
    shape = d.warp_shape(cols, pack)
    assert shape == expected
    assert shape.max_cols >= cols
    assert shape.cols_per_thread == shape.pack * shape.packs_per_thread


def test_warp_shape_limits_by_direction_and_pack():
    assert d.warp_shape(1025, 1) is None                       # unpacked rows stop at 32 per lane
    assert d.warp_shape(2049, 8) is None
    assert d.warp_shape(2048, 8, "backward") is None           # y and dy: half the registers
    assert d.warp_shape(1024, 8, "backward") == WarpShape(8, 4, 32, 1)


def test_warp_shapes_cover_every_cols_without_gaps():
    for direction in d.DIRECTIONS:
        for pack in (1, 4, 8):
            shapes = d.warp_shapes(pack, direction)
            top = shapes[-1].max_cols
            for cols in range(1, top + 1):
                shape = d.warp_shape(cols, pack, direction)
                assert shape is not None and shape.max_cols >= cols
                # the chosen shape wastes less than half of a larger group's lanes
                assert shape.group < 32 or shape.max_cols < 2 * cols + 32 * pack


def test_rows_per_access_choices():
    assert d.warp_shape(32, 8, small_group_rows=4) == WarpShape(8, 1, 4, 4)
    assert d.warp_shape(32, 8, small_group_rows=1) == WarpShape(8, 1, 4, 1)
    assert d.warp_shape(256, 8, full_warp_rows=2) == WarpShape(8, 1, 32, 2)
    assert d.warp_shape(512, 8, full_warp_rows=2) == WarpShape(8, 2, 32, 2)
    assert d.warp_shape(1024, 8, full_warp_rows=2) == WarpShape(8, 4, 32, 1)   # 4 packs: one row
    th = Thresholds(small_group_rows=4, full_warp_rows=2)
    assert d.choose_tier(64, 8, thresholds=th).warp == WarpShape(8, 1, 8, 4)
    shapes = d.all_warp_shapes(8, "forward")
    assert WarpShape(8, 1, 16, 4) in shapes and WarpShape(8, 2, 32, 2) in shapes
    assert len(set(shapes)) == len(shapes)
    with pytest.raises(ValueError):
        Thresholds(small_group_rows=3)
    with pytest.raises(ValueError, match="backward"):
        d.warp_shape(32, 8, "backward", small_group_rows=4)
    with pytest.raises(ValueError):
        Thresholds(block_rule="largest")


def test_rows_per_block():
    assert WarpShape(8, 1, 4, 2).rows_per_block == 64
    assert WarpShape(8, 4, 32, 1).rows_per_block == 4


# ---------------------------------------------------------------------------------------------
# block size and tier choice
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("table,oneflow,threads", [
    ({128: 16, 256: 8, 512: 4, 1024: 2}, 128, 128),    # thread-limited: same threads, 128 keeps 16 rows
    ({128: 3, 256: 3, 512: 3, 1024: 2}, 512, 1024),    # shared-memory-limited: 1024 threads hold 2048
    ({128: 1, 256: 1, 512: 1, 1024: 1}, 1024, 1024),
    ({128: 7, 256: 7, 512: 4, 1024: 2}, 256, 512),     # 512 and 1024 tie at 2048 threads: the smaller
    ({128: 7, 256: 4, 512: 2, 1024: 1}, 128, 256),     # the backward at cols 8192 on an H200
    ({128: 0, 256: 0, 512: 0, 1024: 0}, None, None),   # does not launch
    ({}, None, None),
])
def test_block_size_by_occupancy(table, oneflow, threads):
    assert d.block_size_by_occupancy(table, "oneflow") == oneflow
    assert d.block_size_by_occupancy(table, "threads") == threads
    assert d.block_size_by_occupancy(table) == threads
    with pytest.raises(ValueError):
        d.block_size_by_occupancy(table, "largest")


@pytest.mark.parametrize("cols,pack,per_thread,expected", [
    (4096, 8, 8, 128), (16384, 8, 8, 256), (32768, 8, 8, 512), (32768, 4, 8, 1024),
    (8192, 8, 2, 512), (1 << 20, 1, 8, 1024), (1025, 1, 8, 256), (2048, 8, 2, 128),
])
def test_uncached_block_size_gives_each_thread_a_few_packs(cols, pack, per_thread, expected):
    assert d.uncached_block_size(cols, pack, per_thread) == expected


def test_choose_tier_follows_the_article():
    th = Thresholds(warp_max_cols=1024, min_smem_blocks_per_sm=2, block_rule="oneflow")
    assert d.choose_tier(32, HALF_PACK, thresholds=th).tier == "warp"
    assert d.choose_tier(1024, HALF_PACK, thresholds=th) == TierChoice("warp", warp=WarpShape(8, 4, 32, 1), pack=8)
    # above the warp threshold: shared memory while enough blocks fit
    choice = d.choose_tier(4096, HALF_PACK, smem_blocks_per_sm=fits(14), thresholds=th)
    assert choice == TierChoice("smem", block=128, pack=8)
    choice = d.choose_tier(32768, HALF_PACK, smem_blocks_per_sm=fits(3, {256: 3, 512: 3, 1024: 2}), thresholds=th)
    assert choice == TierChoice("smem", block=512, pack=8)
    # too few blocks fit (or none): uncached, any cols
    choice = d.choose_tier(32768, HALF_PACK, smem_blocks_per_sm=fits(1, {256: 1, 512: 1, 1024: 1}), thresholds=th)
    assert choice == TierChoice("uncached", block=512, pack=8)
    assert d.choose_tier(1 << 20, 1, smem_blocks_per_sm=fits(0), thresholds=th).tier == "uncached"
    assert d.choose_tier(1 << 20, 1, smem_blocks_per_sm=None, thresholds=th).tier == "uncached"


def test_warp_threshold_is_a_measured_number_not_a_register_limit():
    low = Thresholds(warp_max_cols=512)
    assert d.choose_tier(1024, HALF_PACK, smem_blocks_per_sm=fits(16), thresholds=low).tier == "smem"
    high = Thresholds(warp_max_cols=2048)
    assert d.choose_tier(2048, HALF_PACK, thresholds=high).tier == "warp"
    # an unpacked 2048-column row does not fit the registers: falls through to the block tiers
    assert d.choose_tier(2048, 1, smem_blocks_per_sm=fits(16), thresholds=high).tier == "smem"
    assert d.needs_occupancy(2048, 1, "forward", high)
    assert not d.needs_occupancy(2048, 8, "forward", high)


def test_min_smem_blocks_of_zero_still_needs_one_block():
    th = Thresholds(min_smem_blocks_per_sm=0)
    assert d.choose_tier(70000, 1, smem_blocks_per_sm=fits(0), thresholds=th).tier == "uncached"


def test_one_pass_applies_to_forward_block_tiers_only():
    th = Thresholds(one_pass=True)
    assert d.choose_tier(4096, 8, smem_blocks_per_sm=fits(8), thresholds=th).one_pass
    assert not d.choose_tier(4096, 8, direction="backward", smem_blocks_per_sm=fits(8), thresholds=th).one_pass
    assert not d.choose_tier(64, 8, thresholds=th).one_pass


def test_choose_online():
    th = Thresholds(online_warp_max_cols=1024, uncached_packs_per_thread=8)
    assert d.choose_online(1, 1, th) == TierChoice("online_warp", warp=WarpShape(1, 1, 1, 1), pack=1)
    assert d.choose_online(64, 8, th).warp.group == 8
    assert d.choose_online(1000, 8, th).warp.group == 32
    assert d.choose_online(1025, 1, th) == TierChoice("online_block", block=256, one_pass=True, pack=1)


def test_bad_arguments():
    with pytest.raises(ValueError):
        d.choose_tier(0, 1)
    with pytest.raises(ValueError):
        d.choose_online(0, 1)
    with pytest.raises(ValueError):
        TierChoice("in_l2")
    with pytest.raises(ValueError):
        d.kernel_names("half_t", "sideways")


def test_smem_bytes():
    assert d.smem_bytes("forward", 32768, 2) == 65536
    assert d.smem_bytes("backward", 32768, 2) == 131072


# ---------------------------------------------------------------------------------------------
# kernel names: every choice the dispatcher can make is instantiated
# ---------------------------------------------------------------------------------------------


def test_kernel_names_match_the_templates():
    warp = TierChoice("warp", warp=WarpShape(8, 4, 32, 1), pack=8)
    assert d.kernel_name("half_t", "softmax", "forward", warp) == "softmax_warp<half_t, 0, 8, 4, 32, 1>"
    smem = TierChoice("smem", block=512, one_pass=True, pack=8)
    assert d.kernel_name("bf16_t", "log_softmax", "forward", smem) == "softmax_block<bf16_t, 1, 8, true, true>"
    assert d.kernel_name("float", "softmax", "backward", TierChoice("uncached", block=1024, pack=4)) == \
        "softmax_grad_block<float, 0, 4, false>"
    online = TierChoice("online_warp", warp=WarpShape(1, 1, 16, 1), pack=1)
    assert d.kernel_name("half_t", "softmax", "forward", online) == "softmax_warp_online<half_t, 0, 1, 16>"
    with pytest.raises(ValueError):
        d.kernel_name("half_t", "softmax", "backward", online)


@pytest.mark.parametrize("ctype", ["half_t", "bf16_t", "float"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_every_reachable_choice_is_instantiated(ctype, direction):
    names = set(d.kernel_names(ctype, direction))
    wide = 16 // d.ITEMSIZE[ctype]
    algorithms = ["softmax", "log_softmax"]
    ths = [Thresholds(warp_max_cols=w, one_pass=o, small_group_rows=r, full_warp_rows=f)
           for w in (512, 1024, 2048) for o in (False, True) for r in d.small_group_rows_options(direction)
           for f in (1, 2)]
    tables = [None, fits(0), fits(4, {256: 4})]
    for pack in (wide, 1):
        for cols in list(range(1, 130)) + [255, 256, 257, 1000, 1023, 1024, 1025, 2047, 2048, 4097, 65535]:
            if pack > 1 and cols % pack:
                continue
            for th in ths:
                for table in tables:
                    choice = d.choose_tier(cols, pack, direction=direction, smem_blocks_per_sm=table, thresholds=th)
                    for algorithm in algorithms:
                        assert d.kernel_name(ctype, algorithm, direction, choice) in names
                    if direction == "forward":
                        online = d.choose_online(cols, pack, Thresholds())
                        assert d.kernel_name(ctype, "softmax", direction, online) in names


def test_instantiation_count_stays_small():
    """Every module compiles at first use (NVRTC) and in the CPU compile test: keep it bounded.
    The forward's 14 fitted warp shapes (two families, two algorithms) took it past 176; the
    backward's tile instances holding rows in registers (two sizes, two algorithms) past 112, and
    its two wide fitted shapes past 116; float32's cluster eighths (forward) and sixteenths
    (backward) holding packs in registers (two algorithms each) past 188 and 118; the forward's
    tile instances holding rows in registers (two sizes, two algorithms) past 190; the backward's
    flat tier (two sizes, two algorithms) past 120; float32's forward sixteenths holding 3-6 packs
    in registers (four sizes, two algorithms) past 194, and 16-bit backward sixteenths and eighths
    holding 2 packs of y and dy past 118."""
    for ctype in ("half_t", "bf16_t", "float"):
        assert len(d.kernel_names(ctype, "forward")) <= 202
        assert len(d.kernel_names(ctype, "backward")) <= 124


def test_sources_are_declared_per_dtype_and_direction():
    from bwbench.cuda import softmax as s

    for table in (s.FORWARD_SOURCES, s.BACKWARD_SOURCES):
        assert set(table) == {"half_t", "bf16_t", "float"}
        for source in table.values():
            assert source.filename == "softmax.cu"
    assert s.FAMILY_NAIVE.filename == "softmax_family_naive.cu"
    assert set(s.OPERATIONS) == {"softmax", "log_softmax", "online_softmax", "softmax_backward",
                                 "log_softmax_backward"}


def test_default_thresholds_are_valid_and_measured_choices():
    from bwbench.cuda import softmax as s

    assert set(s.DEFAULT_THRESHOLDS) == {"forward", "backward", "online"}
    assert s.DEFAULT_THRESHOLDS["forward"].one_pass and not s.DEFAULT_THRESHOLDS["backward"].one_pass
    assert s.DEFAULT_THRESHOLDS["forward"].warp_max_cols == 2048
    assert s.DEFAULT_THRESHOLDS["backward"].warp_max_cols == 1024
    for key in ("forward", "backward"):  # picked on the H200 (docs/softmax.md)
        th = s.DEFAULT_THRESHOLDS[key]
        assert (th.small_group_rows, th.full_warp_rows, th.block_rule) == (1, 1, "threads")


def test_threshold_overrides_apply_over_the_defaults():
    from bwbench.cuda import softmax as s

    loaded = s.load_thresholds({"forward": {"small_group_rows": 4, "block_rule": "oneflow"}})
    assert loaded["forward"].small_group_rows == 4 and loaded["forward"].block_rule == "oneflow"
    assert loaded["backward"] == s.DEFAULT_THRESHOLDS["backward"]
    with pytest.raises(ValueError, match="unknown threshold groups"):
        s.load_thresholds({"sideways": {}})
    with pytest.raises(ValueError, match="colour"):
        s.load_thresholds({"forward": {"colour": 1}})


# ---------------------------------------------------------------------------------------------
# the suites
# ---------------------------------------------------------------------------------------------


def test_suites_declare_the_family():
    from bwbench.discovery import get_suite

    softmax = get_suite("softmax")
    assert {"naive", "cudnn", "torch", "compiled", "optimized", "online"} <= set(softmax.implementations)
    assert softmax.implementations["optimized"].kind == "cuda"
    assert softmax.implementations["online"].kind == "cuda"
    for name in ("log_softmax", "softmax_backward"):
        suite = get_suite(name)
        assert set(suite.implementations) == {"naive", "cudnn", "torch", "compiled", "optimized"}
        assert suite.axes == softmax.axes and suite.quick == softmax.quick
        assert list(suite.dtypes) == ["float16", "bfloat16", "float32"]
        assert suite.default_dtypes == ["float16"]


def test_byte_models():
    from bwbench.discovery import get_suite
    from bwbench.suite import Case

    case = Case("x", {"rows": 49152, "cols": 1024}, "float16")
    size = 49152 * 1024 * 2
    fwd = get_suite("log_softmax").compute_traffic(case)
    assert (fwd.read, fwd.write) == (size, size)
    bwd = get_suite("softmax_backward").compute_traffic(case)
    assert (bwd.read, bwd.write) == (2 * size, size)


def test_log_softmax_tolerance_loosens_only_float32_atol():
    from bwbench.discovery import get_suite
    from bwbench.suite import DEFAULT_TOLERANCES

    suite = get_suite("log_softmax")
    for dtype in ("float16", "bfloat16"):
        assert suite.tolerance(dtype) == DEFAULT_TOLERANCES[dtype]
    tol = suite.tolerance("float32")
    assert tol.rtol == DEFAULT_TOLERANCES["float32"].rtol and tol.atol == 1e-6


def test_backward_tolerance_keeps_rtol_and_sizes_atol_to_dx():
    """dy is scaled so |dx| ~ 1e-2 at every cols; the atol stays a small fraction of that."""
    from bwbench.discovery import get_suite
    from bwbench.suite import DEFAULT_TOLERANCES

    module = __import__("bwbench_suites.softmax_backward", fromlist=["dy_scale"])
    assert module.dy_scale(32) == 1.0 and module.dy_scale(3) == 1.0 and module.dy_scale(32768) == 1024.0
    suite = get_suite("softmax_backward")
    for dtype, atol in (("float16", 2e-4), ("bfloat16", 1.5e-3), ("float32", 1e-7)):
        tol = suite.tolerance(dtype)
        assert tol.rtol == DEFAULT_TOLERANCES[dtype].rtol and tol.atol == atol
        assert tol.atol < 0.15 * 1.1e-2


def test_backward_inputs_keep_dx_the_same_size_across_cols():
    import torch

    from bwbench.discovery import get_suite

    suite = get_suite("softmax_backward")
    medians = []
    for case in suite.cases(["float32"], {"rows": [64], "cols": [32, 1024, 32768]}):
        inputs = suite.make_inputs(case, torch.Generator().manual_seed(0))
        assert set(inputs) == {"y", "dy"} and inputs["y"].dtype == torch.float32
        torch.testing.assert_close(inputs["y"].sum(-1), torch.ones(64), rtol=0, atol=1e-5)
        medians.append(float(suite.compute_reference(**inputs).abs().median()))
    assert max(medians) / min(medians) < 1.5, medians


def test_backward_reference_in_chunks_matches_the_formula():
    import torch

    from bwbench.discovery import get_suite

    module = __import__("bwbench_suites.softmax_backward", fromlist=["REFERENCE_CHUNK"])
    suite = get_suite("softmax_backward")
    gen = torch.Generator().manual_seed(1)
    y = torch.softmax(torch.randn(37, 300, generator=gen), -1)
    dy = torch.randn(37, 300, generator=gen)
    old = module.REFERENCE_CHUNK
    try:
        module.REFERENCE_CHUNK = 1000  # 3 rows per slice
        got = suite.compute_reference(y=y, dy=dy)
    finally:
        module.REFERENCE_CHUNK = old
    y64, dy64 = y.double(), dy.double()
    want = y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)


def test_registers_tier_takes_short_block_rows_and_rows_that_crowd_shared_memory():
    th = Thresholds(warp_max_cols=2048, registers_max_packs=512, registers_below_smem_blocks=2)
    roomy = {128: 4, 256: 2, 512: 1, 1024: 0}
    crowded = {128: 1, 256: 1, 512: 1, 1024: 1}
    assert d.registers_shape(4096, 8) == (4, 128)
    assert d.registers_shape(32768, 8) == (4, 1024)
    assert d.registers_shape(65536, 8) == (8, 1024)
    assert d.registers_shape(65536 + 8, 8) is None and d.registers_shape(4096, 1) is None
    assert d.registers_shape(4095, 8) == (4, 128) and d.registers_shape(4097, 8) == (4, 256)
    assert d.registers_shape(16384, 4) == (4, 1024) and d.registers_shape(32768, 4) == (8, 1024)
    # 512 packs: by length, without asking the occupancy.
    choice = d.choose_tier(4096, 8, thresholds=th)
    assert (choice.tier, choice.block, choice.packs_per_thread) == ("registers", 128, 4)
    assert not d.needs_occupancy(4096, 8, "forward", th) and d.needs_occupancy(4104, 8, "forward", th)
    assert d.kernel_name("half_t", "log_softmax", "forward", choice) == "softmax_rows<half_t, 1, 8, 4, 128>"
    # Longer rows: the shared-memory tier while it fits two blocks an SM, else registers.
    assert d.choose_tier(8192, 8, smem_blocks_per_sm=roomy, thresholds=th).tier == "smem"
    choice = d.choose_tier(32768, 4, smem_blocks_per_sm=crowded, thresholds=th)
    assert (choice.tier, choice.block, choice.packs_per_thread) == ("registers", 1024, 8)
    assert d.choose_tier(32768, 4, smem_blocks_per_sm={s: 0 for s in roomy}, thresholds=th).tier == "registers"
    # Unpacked rows, rows too long, the backward and zero thresholds keep the other tiers.
    assert d.choose_tier(4097, 1, smem_blocks_per_sm=crowded, thresholds=th).tier == "smem"
    assert d.choose_tier(1 << 20, 8, smem_blocks_per_sm={s: 0 for s in roomy}, thresholds=th).tier == "uncached"
    assert d.choose_tier(4096, 8, direction="backward", smem_blocks_per_sm=roomy, thresholds=th).tier == "smem"
    assert d.choose_tier(4096, 8, smem_blocks_per_sm=crowded, thresholds=Thresholds(warp_max_cols=2048)).tier == "smem"
    # Every shape the tier can choose is instantiated.
    names = set(d.kernel_names("float", "forward"))
    for per_thread, threads in d.REGISTER_SHAPES:
        choice = TierChoice("registers", block=threads, pack=4, packs_per_thread=per_thread)
        assert d.kernel_name("float", "softmax", "forward", choice) in names


def test_backward_rows_too_long_for_shared_memory_cache_whole_pack_pairs():
    limit = 232320  # an H200's opt-in shared memory less the kernel's static 128 bytes
    assert d.cache_bytes("backward", 16384, 4, 4, limit, 0.5) == 131072  # fits: the whole row
    assert d.cache_bytes("backward", 32768, 4, 4, limit, 0.5) == 232320  # 7260 of 8192 (y, dy) pairs
    assert d.cache_bytes("backward", 30001, 4, 1, limit, 0.5) == 232320  # unpacked: 8-byte pairs
    assert d.cache_bytes("backward", 32768, 4, 4, limit, 0.95) == 262144  # less than the share: no cache
    assert d.cache_bytes("backward", 32768, 4, 4, limit, 0.0) == 262144  # off
    assert d.cache_bytes("forward", 65536, 4, 4, limit, 0.5) == 262144  # the forward caches whole rows only
    choice = d.TierChoice("smem", block=1024, pack=4, partial=True)
    assert d.kernel_name("float", "softmax", "backward", choice) == "softmax_grad_partial<float, 0, 4>"
    assert d.kernel_name("float", "softmax", "backward", choice) in d.kernel_names("float", "backward")
    assert "softmax_grad_partial<half_t, 1, 1>" in d.kernel_names("half_t", "backward")
    with pytest.raises(ValueError, match="partial_cache_share"):
        d.Thresholds(partial_cache_share=1.5)
