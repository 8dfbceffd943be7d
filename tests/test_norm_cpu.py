"""LayerNorm / RMSNorm on the CPU: byte models, tier choice, declared instantiations, the float64
references, and the statistics of kernels/norm.cu (Welford + Chan, the two-pass sums, the span_rows
tier's neutral edge packs) emulated in NumPy float32 on rows where E[x^2] - E[x]^2 cancels
catastrophically."""

from __future__ import annotations

import math
import re
import sys

import numpy as np
import pytest
import torch

from bwbench.check import compare
from bwbench.cuda.cudnn import CudnnNorm
from bwbench.cuda.norm import NAIVE, OPTIMIZED
from bwbench.cuda.norm import plan as norm
from bwbench.discovery import get_suite
from bwbench.paths import kernels_dir
from bwbench.suite import Skip

F32 = np.float32


def _suite_module(name: str):
    """A private helper module of suites/ (imported as the suites import it)."""
    import importlib

    from bwbench.discovery import _package_for
    from bwbench.paths import suites_dir

    package = _package_for(suites_dir())
    return importlib.import_module(f"{package}.{name}")


# ---------------------------------------------------------------------------------------------
# Suites: byte models, sweep, tolerances
# ---------------------------------------------------------------------------------------------


def test_layernorm_byte_model_by_hand():
    suite = get_suite("layernorm")
    case = next(c for c in suite.cases(axis_values={"cols": [4096]}))
    assert (case.rows, case.cols, case.dtype, case.eps) == (49152, 4096, "float16", 1e-5)
    t = suite.compute_traffic(case)
    # x (49152 x 4096 halves) + gamma + beta (4096 halves each) read; y + mean + rstd (float32) written.
    assert t.read == 49152 * 4096 * 2 + 2 * 4096 * 2
    assert t.write == 49152 * 4096 * 2 + 2 * 49152 * 4


def test_rmsnorm_byte_model_by_hand():
    suite = get_suite("rmsnorm")
    case = next(c for c in suite.cases(dtypes=["float32"], axis_values={"cols": [32]}))
    t = suite.compute_traffic(case)
    assert t.read == 49152 * 32 * 4 + 32 * 4
    assert t.write == 49152 * 32 * 4 + 49152 * 4


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_sweep_quick_and_eps_option(name):
    suite = get_suite(name)
    cases = suite.cases()
    assert [c.cols for c in cases] == [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert {c.rows for c in cases} == {49152} and {c.dtype for c in cases} == {"float16"}
    assert [c.cols for c in suite.cases(quick=True)] == [32, 1024, 32768]
    assert {c.eps for c in suite.cases(axis_values={"eps": suite.parse_axis_values("eps", ["1e-6"])})} == {1e-6}
    assert set(suite.implementations) == {"optimized", "naive", "cudnn", "torch", "compiled", "liger", "quack"}
    assert {i.kind for i in suite.implementations.values()} == {"cuda", "naive", "cudnn", "torch", "compiled",
                                                                 "liger", "quack"}
    assert set(suite.dtypes) == {"float16", "bfloat16", "float32"}


def test_tolerances_one_per_output():
    ln, rms = get_suite("layernorm"), get_suite("rmsnorm")
    for dtype in ("float16", "bfloat16", "float32"):
        y, mean, rstd = ln.tolerance(dtype)
        assert y.atol >= 1e-5 and y.rtol <= 1.6e-2
        assert (mean.rtol, rstd.rtol) == (1e-5, 1e-5)
        y, rstd = rms.tolerance(dtype)
        assert rstd.rtol == 1e-5
    assert ln.tolerance("float32")[0].rtol == 1e-5


# ---------------------------------------------------------------------------------------------
# Tier choice and the kernels it names
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ctype", ["half_t", "bf16_t", "float"])
def test_every_warp_choice_is_instantiated(ctype):
    declared = set(OPTIMIZED[(ctype, False)].name_expressions)
    declared_rms = set(OPTIMIZED[(ctype, True)].name_expressions)
    for pack in (norm.full_pack(ctype), 1):
        for cols in range(1, norm.WARP_MAX_COLS + 1):
            config = norm.warp_config(cols, pack)
            if cols % pack:
                assert config is None
                continue
            assert config is not None, (cols, pack)
            assert config.name(ctype, False) in declared, (cols, pack, config)
            assert config.name(ctype, True) in declared_rms, (cols, pack, config)
            # The lanes cover the row, with less than half of them padding.
            assert config.cols_per_thread * config.width >= cols
            assert config.cols_per_thread * config.width < 2 * cols or config.width == 1 or cols > 1024
        assert norm.warp_config(norm.WARP_MAX_COLS + pack, pack) is None


def test_warp_configs_read_like_the_article():
    assert norm.warp_config(32, 8) == norm.WarpConfig(8, 16, 2, 2)     # 2 lanes x 16 halves, 2 rows
    assert norm.warp_config(256, 8) == norm.WarpConfig(8, 16, 16, 2)   # half a warp, two packs per lane
    assert norm.warp_config(512, 8) == norm.WarpConfig(8, 16, 32, 2)
    assert norm.warp_config(1024, 8) == norm.WarpConfig(8, 32, 32, 1)  # a warp, 4 packs per lane
    assert norm.warp_config(768, 8) == norm.WarpConfig(8, 24, 32, 1)
    assert norm.warp_config(1024, 4) == norm.WarpConfig(4, 32, 32, 1)
    assert norm.warp_config(1536, 8) == norm.WarpConfig(8, 48, 32, 1)
    assert norm.warp_config(2048, 8) == norm.WarpConfig(8, 64, 32, 1)
    assert norm.warp_config(1100, 4) == norm.WarpConfig(4, 48, 32, 1)
    assert norm.warp_config(2047, 1) == norm.WarpConfig(1, 64, 32, 1)
    assert norm.warp_config(8, 8) == norm.WarpConfig(8, 8, 1, 2)
    assert norm.warp_config(1, 1) == norm.WarpConfig(1, 1, 1, 2)
    assert norm.warp_config(33, 1) == norm.WarpConfig(1, 2, 32, 2)
    assert norm.warp_config(65, 1) == norm.WarpConfig(1, 4, 32, 1)
    assert norm.warp_config(1000, 1) == norm.WarpConfig(1, 32, 32, 1)
    assert norm.WarpConfig(8, 16, 2, 2).rows_per_block == 128 // 2 * 2


class FakeGPU:
    """Occupancy like an H100's SM: 2048 threads, 32 blocks, 228 KiB shared memory, `regs` registers
    a thread for every kernel."""

    def __init__(self, regs: int = 48, smem_per_sm: int = 228 * 1024) -> None:
        self.regs, self.smem_per_sm, self.calls = regs, smem_per_sm, []

    def __call__(self, name: str, block: int, smem: int) -> int:
        self.calls.append((name, block, smem))
        by_threads = 2048 // block
        by_regs = 65536 // (self.regs * block)
        by_smem = self.smem_per_sm // (smem + 1024) if smem else 32
        return max(0, min(32, by_threads, by_regs, by_smem))


def test_raw_rows_only_for_full_rows_of_half_packs():
    """The raw-rows instances are timed beside the float ones for rows of exactly C * W half
    columns, three packs a lane; partial rows, other packs a lane, bfloat16 and float32 have only
    the float instance."""
    gpu, limit = FakeGPU(), 227 * 1024 - norm.STATIC_SMEM_MARGIN
    raw = lambda cols, ctype="half_t", pack=8: [c.kernel for c in norm.plan(cols, ctype, False, pack, gpu, limit).candidates
                                                if c.kernel.endswith(", true>")]  # noqa: E731
    assert raw(768) == ["norm_warp<half_t, false, 8, 24, 32, 1, true>", "norm_warp<half_t, false, 8, 24, 32, 2, true>"]
    assert norm.plan(768, "half_t", False, 8, gpu, limit).kernel == "norm_warp<half_t, false, 8, 24, 32, 1>"
    assert raw(760) == [] and raw(768, "bf16_t") == [] and raw(768, "float", 4) == []  # a partial row; other types
    assert raw(64) == [] and raw(1024) == [] and raw(512) == []  # two and four packs a lane
    assert raw(384) == ["norm_warp<half_t, false, 8, 24, 16, 2, true>", "norm_warp<half_t, false, 8, 24, 16, 1, true>"]
    for ctype in ("half_t", "bf16_t", "float"):
        names = set(norm.optimized_names(ctype, False))
        for config in norm.warp_configs(ctype):
            assert config.name(ctype, False) in names
            assert (config.raw_name(ctype, False) in names) == config.raw_rows(ctype)
            assert not config.raw_rows(ctype) or config.cols_per_thread == 3 * config.pack


def test_plan_picks_the_tier_by_cols():
    gpu, limit = FakeGPU(), 227 * 1024 - norm.STATIC_SMEM_MARGIN
    p = norm.plan(1024, "half_t", False, 8, gpu, limit)
    assert (p.tier, p.kernel, p.block, p.smem_bytes) == ("warp", "norm_warp<half_t, false, 8, 32, 32, 1>", 128, 0)
    # ... timed against two rows a group at a time; 512 columns: two packs a lane, timed against four.
    assert [c.kernel for c in p.alternatives] == ["norm_warp<half_t, false, 8, 32, 32, 2>"]
    p = norm.plan(512, "half_t", False, 8, gpu, limit)
    assert [c.kernel for c in p.candidates] == ["norm_warp<half_t, false, 8, 16, 32, 2>", "norm_warp<half_t, false, 8, 32, 16, 2>",
                                                "norm_warp<half_t, false, 8, 32, 16, 1>"]
    assert norm.plan(64, "half_t", False, 8, gpu, limit).alternatives == ()
    # 384 and 768 columns (48 and 96 packs): three packs a lane fill every lane, timed beside.
    p = norm.plan(384, "half_t", False, 8, gpu, limit)
    assert "norm_warp<half_t, false, 8, 24, 16, 2>" in [c.kernel for c in p.alternatives]
    p = norm.plan(768, "half_t", True, 8, gpu, limit)
    assert p.kernel == "norm_warp<half_t, true, 8, 24, 32, 1>"
    assert "norm_warp<half_t, true, 8, 24, 32, 2>" in [c.kernel for c in p.alternatives]
    # Three packs a lane of half, full rows: also as raw rows (`, true>`), timed beside.
    assert "norm_warp<half_t, true, 8, 24, 32, 1, true>" in [c.kernel for c in p.alternatives]
    # 2 KiB rows: the warp tier (64 columns a lane), timed against the two block tiers.
    p = norm.plan(1024 + 8, "half_t", False, 8, gpu, limit)
    assert (p.tier, p.kernel) == ("warp", "norm_warp<half_t, false, 8, 48, 32, 1>")
    assert {c.tier for c in p.alternatives} == {"registers", "smem"}
    # 8 KiB rows: the row in a block's registers, 4 packs a thread (128 threads) or 8 (64), gamma
    # held in registers or read each row; timed against the shared-memory tier, where small
    # blocks come first, so that many rows are in flight (21 two-warp blocks an SM here;
    # one-warp blocks would fit 25 but need twice the second-pass steps), and gamma joins the row
    # in shared memory (8 KiB each) before the plans that read it from global memory.
    p = norm.plan(4096, "half_t", True, 8, gpu, limit)
    assert (p.tier, p.kernel, p.block, p.smem_bytes) == ("registers", "norm_rows<half_t, true, 8, 4, 128, true>", 128, 0)
    assert [c.kernel for c in p.candidates if c.tier == "registers"] == [
        "norm_rows<half_t, true, 8, 4, 128, true>", "norm_rows<half_t, true, 8, 4, 128, false>",
        "norm_rows<half_t, true, 8, 8, 64, false>"]
    cached = [c for c in p.candidates if c.tier == "smem"]
    assert cached[0].block == 64 and {c.block for c in cached} == {32, 64, 128, 256, 512}
    assert {(c.kernel, c.smem_bytes) for c in cached} == {
        ("norm_block<half_t, true, 8, true, true>", 16384), ("norm_block<half_t, true, 8, true, false>", 8192)}
    # 64 KiB rows: 8 packs a thread, 512 threads (4 packs would need 1024: only without held
    # parameters, and LayerNorm's are too many there). Shared memory allows 3 blocks an SM
    # whatever their size; larger blocks then only shorten the second pass, until registers allow
    # fewer blocks (512 x 48 registers: 2). (x, gamma and beta: 192 KiB, one block an SM.)
    p = norm.plan(32768, "half_t", False, 8, gpu, limit)
    assert [(c.kernel, c.block) for c in p.candidates if c.tier == "registers"] == [
        ("norm_rows<half_t, false, 8, 4, 1024, false>", 1024), ("norm_rows<half_t, false, 8, 8, 512, false>", 512)]
    assert p.candidates[0] is p and p.tier == "registers"
    cached = [c for c in p.candidates if c.tier == "smem"]
    assert (cached[0].block, cached[0].smem_bytes) == (512, 3 * 65536)
    without = [c for c in cached if c.smem_bytes == 65536]
    assert without[0].block == 256 and {c.block for c in without} == set(norm.BLOCK_SIZES)
    # 128 KiB rows (float32): longer than the registers tier; one block an SM, so the largest block.
    assert norm.rows_max_cols("float", False) == 16384
    p = norm.plan(32768, "float", False, 4, gpu, limit)
    assert (p.tier, p.block, p.smem_bytes) == ("smem", 512, 131072)
    # Longer than shared memory: the uncached tier, and no occupancy query for the cached kernel.
    gpu.calls.clear()
    p = norm.plan(200_000, "half_t", False, 8, gpu, limit)
    assert (p.tier, p.kernel) == ("uncached", "norm_block<half_t, false, 8, false, false>")
    assert p.block in norm.BLOCK_SIZES and all(c.tier == "uncached" for c in p.candidates)
    assert all("true>" not in name for name, *_ in gpu.calls)


def test_rank_blocks_follows_the_latency_model():
    # Every block fits 4 a SM: the largest block has the fewest second-pass steps.
    assert norm.rank_blocks(4096, 1 << 17, True, lambda b: 4)[0] == 512
    # Resident blocks inversely proportional to their size: the smallest wins (rows in flight).
    assert norm.rank_blocks(256, 1 << 13, True, lambda b: 1024 // b)[0] == 32
    # Blocks that cannot launch or would idle are never candidates.
    assert norm.rank_blocks(100, 400, True, lambda b: 0 if b == 64 else 8) == [32, 128]
    assert norm.rank_blocks(10, 40, False, lambda b: 8) == [32]
    assert norm.rank_blocks(10, 40, False, lambda b: 0) == []


def test_plan_forced_tiers():
    gpu, limit = FakeGPU(), 200 * 1024
    assert norm.plan(33, "float", False, 1, gpu, limit, tier="smem").kernel == "norm_block<float, false, 1, true, true>"
    assert norm.plan(33, "float", False, 1, gpu, limit, tier="uncached").kernel == "norm_block<float, false, 1, false, true>"
    assert norm.plan(33, "float", False, 1, gpu, limit, tier="uncached", block=96).block == 96
    forced = norm.plan(5000, "float", False, 4, gpu, limit, tier="smem", block=64)
    assert {c.block for c in forced.candidates} == {64} and len(forced.candidates) == 2
    assert norm.plan(2048, "float", False, 4, gpu, limit, tier="warp").alternatives == ()
    with pytest.raises(ValueError, match="multiple of 32"):
        norm.plan(5000, "float", False, 4, gpu, limit, block=100)
    assert norm.plan(33, "float", True, 1, gpu, limit, tier="warp").kernel == "norm_warp<float, true, 1, 2, 32, 2>"
    with pytest.raises(ValueError, match="at most 2048 columns"):
        norm.plan(4096, "float", False, 4, gpu, limit, tier="warp")
    with pytest.raises(ValueError, match="does not fit"):
        norm.plan(200_000, "float", False, 4, gpu, limit, tier="smem")
    assert norm.plan(36, "float", False, 4, gpu, limit, tier="registers").kernel == "norm_rows<float, false, 4, 4, 64, true>"
    with pytest.raises(ValueError, match="registers tier needs"):
        norm.plan(33, "float", False, 1, gpu, limit, tier="registers")
    with pytest.raises(ValueError, match="registers tier needs"):
        norm.plan(32768, "float", False, 4, gpu, limit, tier="registers")
    with pytest.raises(ValueError, match="unknown tier"):
        norm.plan(64, "float", False, 4, gpu, limit, tier="fast")


def test_every_planned_kernel_is_declared():
    gpu, limit = FakeGPU(), 227 * 1024 - norm.STATIC_SMEM_MARGIN
    for ctype in ("half_t", "bf16_t", "float"):
        for rms in (False, True):
            declared = set(OPTIMIZED[(ctype, rms)].name_expressions)
            for cols in [1, 2, 3, 31, 33, 100, 1000, 1023, 1024, 1025, 4096, 4097, 8192, 16384, 32768, 40_001,
                         65_536, 300_000]:
                for pack in (norm.full_pack(ctype), 1):
                    if cols % pack:
                        continue
                    for tier in (None, "registers", "smem", "uncached", "tile", "span", "span_rows", "cluster"):
                        for same_phase, clusters in ((False, False), (True, False), (True, True)):
                            try:
                                p = norm.plan(cols, ctype, rms, pack, gpu, limit, tier, same_phase=same_phase,
                                              clusters=clusters)
                            except ValueError:
                                continue
                            assert all(c.kernel in declared for c in p.candidates)


@pytest.mark.parametrize("ctype", ["half_t", "bf16_t", "float"])
def test_odd_rows_take_the_tile_tier_first_and_time_the_row_tiers(ctype):
    from bwbench.cuda import row_tile

    gpu, limit = FakeGPU(), 227 * 1024 - norm.STATIC_SMEM_MARGIN
    itemsize = norm.ITEMSIZE[ctype]
    for cols in (1, 3, 31, 33, 127, 197, 577, 1023, 2047 if itemsize == 2 else 1023):
        if cols * itemsize % 16 == 0:
            continue
        p = norm.plan(cols, ctype, False, 1, gpu, limit, same_phase=True)
        held = 4 if cols <= 128 else 8 if cols <= 256 else 0  # elements a lane keeps in registers
        assert p.tier == "tile" and p.kernel == f"norm_tile<{ctype}, false, {held}>" and p.block == norm.TILE_BLOCK
        tile_rows, group = p.extra
        assert p.rows_per_block == tile_rows and group == row_tile.group_width(cols)
        assert tile_rows % (norm.TILE_BLOCK // group) == 0, "as many rows for every group"
        assert p.smem_bytes == norm.tile_smem_bytes(tile_rows, cols, itemsize) <= limit
        assert any(c.tier != "tile" for c in p.alternatives), "the row tiers are timed against it"
        assert all(c.alternatives == () for c in p.alternatives)
        # y at another phase than x, or a forced block: the row tiers alone
        assert norm.plan(cols, ctype, False, 1, gpu, limit).tier != "tile"
        assert all(c.tier != "tile" for c in norm.plan(cols, ctype, False, 1, gpu, limit, block=64,
                                                       same_phase=True).candidates)
    # rows of whole packs keep the row tiers; odd rows past TILE_MAX_ROW_BYTES take a block each
    assert norm.plan(1024, ctype, False, 16 // itemsize, gpu, limit, same_phase=True).tier != "tile"
    for odd_long in (norm.TILE_MAX_ROW_BYTES // itemsize + 1, 30001):
        p = norm.plan(odd_long, ctype, False, 1, gpu, limit, same_phase=True)
        assert p.tier == "span" and p.kernel == f"norm_span<{ctype}, false>" and p.rows_per_block == 1
        assert p.smem_bytes == norm.tile_smem_bytes(1, odd_long, itemsize) and p.extra == ()
        assert [c.block for c in p.candidates if c.tier == "span"] == list(norm.SPAN_BLOCKS)
        assert any(c.tier != "span" for c in p.alternatives)
    # longer than shared memory: the row tiers alone
    assert norm.plan(200_001, ctype, False, 1, gpu, limit, same_phase=True).tier == "uncached"


def test_forced_tile_tier_needs_lined_up_packs():
    gpu, limit = FakeGPU(), 227 * 1024 - norm.STATIC_SMEM_MARGIN
    forced = norm.plan(64, "half_t", True, 8, gpu, limit, tier="tile", same_phase=True)
    assert forced.tier == "tile" and all(c.tier == "tile" for c in forced.candidates)
    with pytest.raises(ValueError, match="tile tier needs"):
        norm.plan(64, "half_t", True, 8, gpu, limit, tier="tile")
    with pytest.raises(ValueError, match="tile tier needs"):
        norm.plan(32768, "float", True, 4, gpu, limit, tier="tile", same_phase=True)
    assert norm.plan(33, "float", True, 1, gpu, limit, tier="span", same_phase=True).tier == "span"
    with pytest.raises(ValueError, match="span tier needs"):
        norm.plan(33, "float", True, 1, gpu, limit, tier="span")


def whole_packs_at(cols: int, lead: int, pack: int) -> int:
    """Whole packs of a row of `cols` that starts `lead` elements into a pack."""
    return max((lead + cols) // pack - (1 if lead else 0), 0)


def test_span_rows_instantiations_fit_their_registers_and_cover_their_rows():
    for rms in (False, True):
        configs = norm.span_rows_configs(rms)
        assert configs and len(set(configs)) == len(configs)
        assert {c.width for c in configs} >= {*norm.SPAN_ROWS_GROUP_WIDTHS, *norm.SPAN_ROWS_BLOCKS}
        for c in configs:  # the row as stored (4 registers a pack), and the spare
            assert c.packs_per_thread * 4 + norm.SPAN_ROWS_SPARE <= min(255, 65536 // c.block)
            assert c.width == c.block or (c.width <= 32 and c.block % c.width == 0)
            assert c.rows_per_block == c.block // c.width and c.slots == c.packs_per_thread * c.width
            assert not c.whole_packs or c.width == c.block  # whole packs: a block a row
            for pack in (4, 8):
                longest = c.max_cols(pack)
                if c.whole_packs:  # at every offset the whole packs fit the slots, one more does not
                    assert max(whole_packs_at(longest, lead, pack) for lead in range(pack)) == c.slots
                    assert max(whole_packs_at(longest + 1, lead, pack) for lead in range(pack)) == c.slots + 1
                    # the elements around them, one a thread, at most 2 x (pack - 1)
                    assert all(longest - whole_packs_at(longest, lead, pack) * pack <= 2 * pack - 2 <= c.width
                               for lead in range(pack))
                else:  # the span at its worst offset fits the slots
                    assert norm.span_packs_max(longest, pack) == c.slots
                    assert norm.span_packs_max(longest + 1, pack) == c.slots + 1
        for ctype in ("half_t", "bf16_t", "float"):
            pack = norm.full_pack(ctype)
            longest = norm.span_rows_max_cols(ctype, rms)
            for cols in [c for c in (1, 7, 31, 33, 129, 197, 577, 1023, 1025, 4097, 12289) if c < longest] + [longest]:
                found = norm.span_rows_candidates(cols, ctype, rms)
                assert found, (ctype, rms, cols)
                assert len(found) <= norm.SPAN_ROWS_CANDIDATES + 1 and sum(c.whole_packs for c in found) <= 1
                assert all(c.max_cols(pack) >= cols for c in found)
                # nothing declared holds the row in fewer columns than the first candidate
                assert all(c.max_cols(pack) >= found[0].max_cols(pack) for c in configs if c.max_cols(pack) >= cols)
                spans = [c for c in found if not c.whole_packs]
                assert all(c.max_cols(pack) <= spans[0].max_cols(pack) for c in found if c.whole_packs)
            assert norm.span_rows_candidates(longest + 1, ctype, rms) == []
            assert longest == max(c.max_cols(pack) for c in configs)


def test_span_rows_fit_odd_widths_tightly():
    # 1023 half columns span up to 129 packs, 127 or 128 of them whole: 4 packs x 32 threads of
    # whole packs, then spans of 5 x 32 (160 slots) and 6 x 32, not 8 x 32 (256)
    first, second, third = norm.span_rows_candidates(1023, "half_t", False)
    assert (first.packs_per_thread, first.width, first.block, first.whole_packs) == (4, 32, 32, True)
    assert first.name("half_t", False) == "norm_span_rows<half_t, false, 4, 32, 32, 1>"
    assert (second.packs_per_thread, second.width, second.block, second.whole_packs) == (5, 32, 32, False)
    assert second.name("half_t", False) == "norm_span_rows<half_t, false, 5, 32, 32>"
    assert not third.whole_packs and third.slots > second.slots
    assert norm.span_packs_max(1023, 8) == 129 and {whole_packs_at(1023, lead, 8) for lead in range(8)} == {127}
    # 12289 half columns (1537 packs): 6 x 256 of whole packs joins 8 x 256 and 4 x 512
    shapes = [(c.packs_per_thread, c.block, c.whole_packs) for c in norm.span_rows_candidates(12289, "half_t", False)]
    assert shapes == [(6, 256, True), (8, 256, False), (4, 512, False)]
    # 1001 half columns: 4 x 32 holds the span; whole packs would hold no shorter a row
    assert not any(c.whole_packs for c in norm.span_rows_candidates(1001, "half_t", False))
    # 129 half columns span up to 18 packs: groups of 4 lanes of 5 packs, 32 rows a block
    first = norm.span_rows_candidates(129, "half_t", True)[0]
    assert (first.packs_per_thread, first.width, first.block) == (5, 4, norm.SPAN_ROWS_GROUP_BLOCK)


def test_span_rows_grid_keeps_every_block_at_one_offset():
    assert norm.span_rows_grid(1000, 1000, 8) == 1000
    assert norm.span_rows_grid(1001, 1001, 8) == 1008  # covers the work: rounded up, extra blocks idle
    assert norm.span_rows_grid(1000, 5000, 8) == 1000
    assert norm.span_rows_grid(1001, 5000, 8) == 1000  # strides: rounded down
    assert norm.span_rows_grid(5, 5000, 8) == 8  # never below one multiple
    assert norm.span_rows_grid(1001, 5000, 1) == 1001
    assert norm.span_rows_grid(2**31 - 2, 2**31 - 2, 8) % 8 == 0
    for grid, rows, pack, cols in [(1001, 5000, 8, 1023), (530, 49152, 4, 4097), (264, 9999, 8, 31)]:
        g = norm.span_rows_grid(grid, rows, pack)
        offsets = {(r * cols) % pack for r in range(3, rows, g)}  # the rows of block 3
        assert len(offsets) == 1


def test_odd_rows_time_the_span_rows_tier_too():
    gpu, limit = FakeGPU(), 227 * 1024 - norm.STATIC_SMEM_MARGIN
    for ctype, rms, cols in [("half_t", False, 1023), ("half_t", True, 4097), ("float", False, 2047), ("bf16_t", True, 31)]:
        p = norm.plan(cols, ctype, rms, 1, gpu, limit, same_phase=True)
        held = [c for c in p.candidates if c.tier == "span_rows"]
        assert held and p.tier in ("tile", "span")
        assert all(c.grid_multiple == norm.full_pack(ctype) and c.rows_per_block >= 1 for c in held)
        assert all(c.smem_bytes == norm.span_packs_max(cols, norm.full_pack(ctype)) * 16 * (1 if rms else 2)
                   for c in held)
        assert not any(c.tier == "span_rows" for c in norm.plan(cols, ctype, rms, 1, gpu, limit).candidates)
    forced = norm.plan(1024, "half_t", False, 8, gpu, limit, tier="span_rows", same_phase=True)
    assert forced.tier == "span_rows" and all(c.tier == "span_rows" for c in forced.candidates)
    with pytest.raises(ValueError, match="span_rows tier needs"):
        norm.plan(1023, "half_t", False, 1, gpu, limit, tier="span_rows")
    with pytest.raises(ValueError, match="span_rows tier needs .* at most"):
        norm.plan(norm.span_rows_max_cols("half_t", False) + 1, "half_t", False, 1, gpu, limit, tier="span_rows",
                  same_phase=True)


def cluster_slices(cols: int, lead: int, pack: int, size: int) -> list[range]:
    """The packs of a row's span each block of norm_cluster takes (kernels/norm.cu's arithmetic)."""
    span = (lead + cols + pack - 1) // pack
    share = -(-span // size)
    return [range(min(span, rank * share), min(span, min(span, rank * share) + share)) for rank in range(size)]


@pytest.mark.parametrize("ctype", ["half_t", "bf16_t", "float"])
def test_cluster_slices_cover_the_span_and_fit_the_shared_memory(ctype):
    pack = norm.full_pack(ctype)
    for cols in (1, 2, pack - 1, pack + 1, 1023, 65519, 65536, 100003):
        for size in norm.CLUSTER_SIZES:
            slice_bytes = norm.cluster_smem_bytes(cols, ctype, size)  # the slice of x: 16 bytes a pack
            for lead in range(pack):
                slices = cluster_slices(cols, lead, pack, size)
                packs = [k for piece in slices for k in piece]
                assert packs == list(range((lead + cols + pack - 1) // pack))  # each pack once, in rank order
                assert max(len(piece) for piece in slices) * 16 <= slice_bytes
            for packs_per_thread in norm.CLUSTER_PACKS_PER_THREAD:
                block = norm.cluster_block(cols, ctype, size, packs_per_thread)
                assert block % 32 == 0 and 32 <= block <= 1024
                assert slice_bytes // 16 <= block * packs_per_thread or block == 1024
                assert block == 32 or slice_bytes // 16 > (block - 32) * packs_per_thread  # the fewest threads


def cluster_stores(cols: int, lead: int, pack: int, size: int, threads: int) -> list[int]:
    """The packs of a row's span norm_cluster's store writes, one entry a write (kernels/norm.cu's
    arithmetic): each block's whole packs two a thread at a time and the rest one, then the span's
    edge packs by one thread each."""
    span = (lead + cols + pack - 1) // pack
    tail = span * pack - lead - cols
    stored = []
    for piece in cluster_slices(cols, lead, pack, size):
        lo, entries = piece.start, len(piece)
        head_here = lead > 0 and lo == 0 and entries > 0
        tail_here = tail > 0 and lo + entries == span and entries > 0
        e_stop = entries - 1 if tail_here else entries
        for tid in range(threads):
            e = int(head_here) + tid
            while e + threads < e_stop:
                stored += [lo + e, lo + e + threads]
                e += 2 * threads
            if e < e_stop:
                stored.append(lo + e)
            if head_here and tid == 0:
                stored.append(lo)
            if tail_here and tid == threads - 1 and not (head_here and entries == 1):
                stored.append(lo + entries - 1)
    return stored


@pytest.mark.parametrize("ctype", ["half_t", "float"])
def test_cluster_store_writes_every_pack_of_the_span_once(ctype):
    """Whole packs in pairs, edge packs apart, slices with no packs (rows shorter than a pack a
    block) included: every pack of the span written by exactly one thread, none outside it."""
    pack = norm.full_pack(ctype)
    for cols in (1, 2, pack - 1, pack, pack + 1, 3 * pack + 1, 1023, 40001):
        for size in norm.CLUSTER_SIZES:
            for threads in {32, 64, norm.cluster_block(cols, ctype, size)}:
                for lead in range(pack):
                    span = (lead + cols + pack - 1) // pack
                    assert sorted(cluster_stores(cols, lead, pack, size, threads)) == list(range(span)), \
                        (cols, size, threads, lead)


def test_long_rows_take_the_cluster_tier_where_the_gpu_has_clusters():
    gpu, limit = FakeGPU(regs=32), 227 * 1024 - norm.STATIC_SMEM_MARGIN
    # 65519 half columns (128 KiB): norm_span's row cache leaves one block an SM. Clusters of 2, 4,
    # 8 and 16 (64, 32, 16 and 8 KiB slices of x; gamma and beta read from global memory) come first;
    # the span and cached tiers stay beside them, timed on first use.
    p = norm.plan(65519, "half_t", False, 1, gpu, limit, same_phase=True, clusters=True)
    split = [c for c in p.candidates if c.tier == "cluster"]
    assert p.tier == "cluster" and list(dict.fromkeys(c.cluster for c in split)) == [2, 4, 8, 16]
    assert all(c.grid_multiple == c.cluster and gpu(c.kernel, c.block, c.smem_bytes) >= 2 for c in split)
    # Each size in the blocks of 8, 4 and 16 packs a thread (eighths: 1024 packs, 128, 256 and 64 threads).
    assert [c.block for c in split if c.cluster == 8] == [128, 256, 64]
    assert len({(c.cluster, c.block) for c in split}) == len(split)
    assert {"span", "smem"} <= {c.tier for c in p.candidates}
    # No clusters (before sm_90), or x and y at different offsets: as before.
    assert not any(c.tier == "cluster" for c in norm.plan(65519, "half_t", False, 1, gpu, limit,
                                                           same_phase=True).candidates)
    assert not any(c.tier == "cluster" for c in norm.plan(65519, "half_t", False, 1, gpu, limit,
                                                           clusters=True).candidates)
    # Whole-pack rows past the registers tier: clusters first, the row cache beside them.
    p = norm.plan(65536, "half_t", True, 8, gpu, limit, same_phase=True, clusters=True)
    assert p.tier == "cluster" and "smem" in {c.tier for c in p.candidates}
    # Rows the registers or span_rows tiers hold never take it first; odd ones of 16 KiB and more
    # time clusters of two and four (one block size each) after the others.
    for cols, pack in [(32768, 8), (30001, 1), (1023, 1), (8191, 1)]:
        p = norm.plan(cols, "half_t", False, pack, gpu, limit, same_phase=True, clusters=True)
        timed = [(c.cluster, c.block) for c in p.candidates if c.tier == "cluster"]
        assert p.tier != "cluster"
        if cols * 2 % 16 and cols * 2 >= norm.CLUSTER_TIMED_MIN_ROW_BYTES:
            assert [size for size, _ in timed] == list(norm.CLUSTER_TIMED_SIZES), (cols, timed)
        else:
            assert not timed, cols
    # Rows whose slices leave two blocks an SM only in sixteenths (float32, 300007 columns: 75 KiB
    # a block, eighths 150 KiB): the sixteenths, then the uncached tier.
    p = norm.plan(300_007, "float", False, 1, gpu, limit, same_phase=True, clusters=True)
    others = [c for c in p.alternatives if c.tier != "cluster"]
    assert (p.tier, p.cluster) == ("cluster", 16) and others[0].tier == "uncached"
    assert {c.cluster for c in p.candidates if c.tier == "cluster"} == {16}
    # A GPU that holds no cluster of 16 (the launcher's occupancy answer is 0): the eighths that
    # leave one block an SM.
    no16 = lambda name, block, smem: 0 if norm.cluster_size(name) == 16 else gpu(name, block, smem)  # noqa: E731
    p = norm.plan(300_007, "float", False, 1, no16, limit, same_phase=True, clusters=True)
    assert {c.cluster for c in p.candidates if c.tier == "cluster"} == {8}
    assert norm.cluster_size("norm_cluster<float, true, 16>") == 16 and norm.cluster_size("norm_span<float, true>") == 1
    # Longer than sixteenths can hold: no cluster.
    assert norm.plan(1_000_000, "float", False, 1, gpu, limit, same_phase=True, clusters=True).tier == "uncached"


def test_forced_cluster_tier():
    gpu, limit = FakeGPU(), 227 * 1024 - norm.STATIC_SMEM_MARGIN
    forced = norm.plan(33, "bf16_t", True, 1, gpu, limit, tier="cluster", same_phase=True, clusters=True)
    assert forced.tier == "cluster" and [c.cluster for c in forced.candidates] == list(norm.CLUSTER_SIZES)
    for same_phase, clusters in ((True, False), (False, True)):
        with pytest.raises(ValueError, match="cluster tier needs"):
            norm.plan(65519, "half_t", False, 1, gpu, limit, tier="cluster", same_phase=same_phase, clusters=clusters)
    with pytest.raises(ValueError, match="cluster tier needs"):
        norm.plan(65519, "half_t", False, 1, gpu, limit, tier="cluster", block=256, same_phase=True, clusters=True)


def test_naive_source_declares_every_launch():
    names = set(NAIVE.name_expressions)
    for t in ("half_t", "bf16_t", "float"):
        assert {f"naive_row_mean<{t}>", f"naive_row_rstd<{t}>", f"naive_row_rms<{t}>",
                f"naive_normalize<{t}, false>", f"naive_normalize<{t}, true>"} <= names


# ---------------------------------------------------------------------------------------------
# float64 references
# ---------------------------------------------------------------------------------------------


def test_references_match_numpy(monkeypatch):
    reference = _suite_module("_norm_reference")
    monkeypatch.setattr(reference, "REFERENCE_CHUNK_ELEMENTS", 7 * 33)  # several chunks, a ragged last one
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(50, 33, generator=gen) * 3 + 2
    g, b = torch.randn(33, generator=gen), torch.randn(33, generator=gen)
    y, mean, rstd = reference.layer_norm_reference(x, g, b, 1e-5)
    xn = x.double().numpy()
    m = xn.mean(1)
    r = 1 / np.sqrt(xn.var(1) + 1e-5)
    np.testing.assert_allclose(mean.numpy(), m, rtol=1e-13)
    np.testing.assert_allclose(rstd.numpy(), r, rtol=1e-13)
    np.testing.assert_allclose(y.numpy(), (xn - m[:, None]) * r[:, None] * g.double().numpy() + b.double().numpy(),
                               rtol=1e-12, atol=1e-12)
    y, rstd = reference.rms_norm_reference(x, g, 1e-5)
    r = 1 / np.sqrt((xn * xn).mean(1) + 1e-5)
    np.testing.assert_allclose(rstd.numpy(), r, rtol=1e-13)
    np.testing.assert_allclose(y.numpy(), xn * r[:, None] * g.double().numpy(), rtol=1e-12)
    assert y.dtype == torch.float64 and rstd.shape == (50,)


def test_torch_baselines_pass_the_suite_check_in_float32():
    """The eager baselines return the suite's outputs (shapes, float32 statistics) and pass its
    tolerances on the CPU: the tolerances are honest for an ordinary float32 implementation."""
    for name in ("layernorm", "rmsnorm"):
        suite = get_suite(name)
        case = next(c for c in suite.cases(dtypes=["float32"], axis_values={"rows": [64], "cols": [1000]}))
        gen = torch.Generator().manual_seed(3)
        inputs = suite.make_inputs(case, gen)
        out = suite.implementations["torch"].build(case)(**inputs)
        ref = suite.compute_reference(**inputs)
        assert [tuple(o.shape) for o in out] == [tuple(r.shape) for r in ref]
        assert all(o.dtype == torch.float32 for o in out)
        check = compare(out, ref, suite.tolerance("float32"))
        assert check.passed, check.message


def test_cudnn_frontend_missing_is_a_clean_skip(monkeypatch):
    monkeypatch.setitem(sys.modules, "cudnn", None)  # makes `import cudnn` fail
    with pytest.raises(Skip, match=r"nvidia-cudnn-frontend is not installed \(pip install bwbench\[cudnn\]\)"):
        CudnnNorm(8, 64, torch.float16, 1e-5, rms=False)


# ---------------------------------------------------------------------------------------------
# Welford + Chan as kernels/norm.cu computes them, in NumPy float32 (vectorized over rows)
# ---------------------------------------------------------------------------------------------


def _fma(a, b, c):
    # float32 fma: the float64 product of two float32 values is exact; one rounding to float32
    # (up to a rare double rounding, irrelevant at the 1e-5 level checked here).
    return (a.astype(np.float64) * b + c).astype(F32)


def _chan(a, b):
    na, ma, qa = a
    nb, mb, qb = b
    n = (na + nb).astype(F32)
    wb = (nb / np.maximum(n, F32(1))).astype(F32)
    d = (mb - ma).astype(F32)
    return n, _fma(d, wb, ma), (qa + qb + d * d * na * wb).astype(F32)


def _butterfly(states):
    """The kernels' ordered butterfly over len(states) lanes (a power of two): lower lane first."""
    width = len(states)
    mask = width // 2
    while mask:
        states = [_chan(states[l ^ mask], states[l]) if l & mask else _chan(states[l], states[l ^ mask])
                  for l in range(width)]
        mask //= 2
    assert all(np.array_equal(s[1], states[0][1]) for s in states), "lanes must agree bit for bit"
    return states[0]


def welford_chan_statistics(x: np.ndarray, lanes: int, eps: float):
    """mean, rstd and the shifted mean of every row of float32 x, as norm_warp computes them:
    shift by x[:, 0], Welford per lane over columns lane, lane + lanes, ... (counts as constants),
    then the ordered butterfly; lanes > 32 merge a warp at a time, then across warps as
    block_merge does."""
    rows, cols = x.shape
    k = x[:, 0].copy()
    states = []
    for lane in range(lanes):
        mean = np.zeros(rows, F32)
        m2 = np.zeros(rows, F32)
        count = 0
        for c in range(lane, cols, lanes):
            count += 1
            v = (x[:, c] - k).astype(F32)
            d = (v - mean).astype(F32)
            mean = _fma(d, F32(1.0 / count), mean)
            m2 = _fma(d, (v - mean).astype(F32), m2)
        states.append((np.full(rows, count, F32), mean, m2))
    warps = [_butterfly(states[w:w + 32]) for w in range(0, lanes, 32)]
    if len(warps) > 1:
        empty = (np.zeros(rows, F32),) * 3
        warps = [_butterfly(warps + [empty] * (32 - len(warps)))]
    n, mean, m2 = warps[0]
    rstd = (1 / np.sqrt((m2 / F32(cols)).astype(F32) + F32(eps))).astype(F32)
    return (k + mean).astype(F32), rstd, mean


def _cancellation_rows(rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (1e4 + rng.standard_normal((rows, cols))).astype(F32)


@pytest.mark.parametrize("cols,lanes", [(32, 4), (1000, 32), (4096, 256), (32768, 1024)])
def test_welford_chan_on_catastrophic_cancellation_rows(cols, lanes):
    x = _cancellation_rows(16, cols, seed=cols)
    eps = 1e-5
    mean, rstd, shifted = welford_chan_statistics(x, lanes, eps)
    xs = (x - x[:, :1]).astype(F32)
    _check_against_float64(x, mean, rstd, (xs - shifted[:, None]).astype(F32), eps)


def _check_against_float64(x, mean, rstd, centered, eps):
    """mean and rstd within 1e-5 of float64, and y as the kernels form it, ((x - K) - mean') * rstd
    * gamma + beta, within float32's own tolerance, though the float32 mean alone is off by up to
    half an ulp of 1e4 (5e-4). Returns gamma, beta and the float64 y."""
    cols = x.shape[1]
    x64 = x.astype(np.float64)
    ref_mean = x64.mean(1)
    ref_rstd = 1 / np.sqrt(x64.var(1) + eps)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-5, atol=0)
    np.testing.assert_allclose(rstd, ref_rstd, rtol=1e-5, atol=0)
    gamma = np.random.default_rng(1).standard_normal(cols).astype(F32)
    beta = np.random.default_rng(2).standard_normal(cols).astype(F32)
    y = _fma((centered * rstd[:, None]).astype(F32), gamma, beta)
    ref_y = (x64 - ref_mean[:, None]) * ref_rstd[:, None] * gamma + beta
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
    return gamma, beta, ref_y


def _xor_butterfly_sum(sums):
    """The lanes' sums added in an xor butterfly, as the kernels' warp sums do (a + b and b + a are
    the same float, so every lane ends with the same bits)."""
    lanes = len(sums)
    mask = 1
    while mask < lanes:
        sums = [(sums[l] + sums[l ^ mask]).astype(F32) for l in range(lanes)]
        mask *= 2
    return sums[0]


def two_pass_statistics(x: np.ndarray, lanes: int, eps: float):
    """mean, rstd and the centered shifted values of float32 x, as norm_warp computes full rows:
    shift by x[:, 0]; each lane sums its columns lane, lane + lanes, ...; a butterfly sum over the
    lanes gives mean' = sum / cols; then the same for the squares of the centered values."""
    rows, cols = x.shape
    k = x[:, 0].copy()
    xs = (x - k[:, None]).astype(F32)

    def lane_sums(values):
        sums = []
        for lane in range(lanes):
            acc = np.zeros(rows, F32)
            for c in range(lane, cols, lanes):
                acc = (acc + values[:, c]).astype(F32)
            sums.append(acc)
        return _xor_butterfly_sum(sums)

    shifted = (lane_sums(xs) / F32(cols)).astype(F32)
    centered = (xs - shifted[:, None]).astype(F32)
    m2 = lane_sums((centered * centered).astype(F32))
    rstd = (1 / np.sqrt((m2 / F32(cols)).astype(F32) + F32(eps))).astype(F32)
    return (k + shifted).astype(F32), rstd, centered


@pytest.mark.parametrize("cols,lanes", [(32, 2), (256, 8), (1024, 32), (2048, 32)])
def test_two_pass_on_catastrophic_cancellation_rows(cols, lanes):
    """norm_warp's full rows (the row in registers): as accurate as Welford and Chan on rows of
    mean 1e4 and std 1, y within float32's tolerance."""
    x = _cancellation_rows(16, cols, seed=cols + 1)
    eps = 1e-5
    mean, rstd, centered = two_pass_statistics(x, lanes, eps)
    gamma, beta, ref_y = _check_against_float64(x, mean, rstd, centered, eps)
    # Without the shift by x[:, 0] the float32 mean of these rows is off by up to half an ulp of
    # 1e4, and y with it: the shift is what makes the two-pass form exact enough.
    unshifted = (x.astype(F32).sum(1, dtype=F32) / F32(cols)).astype(F32)
    y_unshifted = _fma(((x - unshifted[:, None]).astype(F32) * rstd[:, None]).astype(F32), gamma, beta)
    assert np.abs(y_unshifted - ref_y).max() > 1e-4


def test_one_pass_formula_fails_on_the_same_rows():
    """The rows really are hard: E[x^2] - E[x]^2 in float32 is off by orders of magnitude (or
    negative, so its rstd is NaN), which is what Welford avoids."""
    x = _cancellation_rows(16, 4096, seed=4096)
    ex = x.mean(1, dtype=F32)
    ex2 = (x * x).mean(1, dtype=F32)
    var = ex2 - ex * ex
    ref_var = x.astype(np.float64).var(1)
    assert np.all(~np.isfinite(np.sqrt(np.maximum(var, 0))) | (np.abs(var - ref_var) / ref_var > 1e-2))


@pytest.mark.parametrize("value", [0.0, 1.0, -3.25, 1e4, 65504.0])
def test_constant_rows_give_rstd_of_eps(value):
    x = np.full((4, 777), value, F32)
    eps = 1e-5
    mean, rstd, shifted = welford_chan_statistics(x, 32, eps)
    np.testing.assert_array_equal(shifted, 0)  # x - K is exactly 0: no rounding at all
    np.testing.assert_array_equal(mean, F32(value))
    np.testing.assert_allclose(rstd, 1 / math.sqrt(eps), rtol=1e-6)


def row_shift(x: np.ndarray) -> np.ndarray:
    """K of every row as normk::row_shift computes it for float32 rows: the mean of the elements at
    (i * cols) >> 3 for i = 0 ... 7, summed in pairs."""
    cols = x.shape[1]
    s = [x[:, (i * cols) >> 3] for i in range(8)]

    def add(a, b):
        return (a + b).astype(F32)

    total = add(add(add(s[0], s[1]), add(s[2], s[3])), add(add(s[4], s[5]), add(s[6], s[7])))
    return (total * F32(0.125)).astype(F32)


def span_rows_statistics(x: np.ndarray, lead: int, pack: int, lanes: int, eps: float, passes: str = "auto",
                         correct: bool = True, whole: bool = False):
    """mean, rstd, the centered values and whether one pass sufficed, for every row of float32 x as
    norm_span_rows computes LayerNorm: the row sits `lead` elements into the aligned span of packs
    that covers it, and the span's elements outside the row (of the two edge packs) hold K
    (row_shift); lane t sums packs t, t + lanes, ... of d = x - K and of d^2 (an fma), an xor
    butterfly sums the lanes. Where the mean of d squared is at most half the mean of d^2, var is
    their difference; elsewhere e = x - (K + mean') and e^2 summed the same way (less what each
    neutral value added, `correct`) give the variance and the mean about c (the corrected two-pass
    form), and y is formed from x - c. passes="one" or "two" takes that path for every row.
    whole=True: the whole-pack shapes (X = 1): lane t sums only its whole packs of the row, then the
    element around them that it holds (t < head: column t; after that, the columns past the whole
    packs), and no value is neutral."""
    rows, cols = x.shape
    k = row_shift(x)
    span = -(-(lead + cols) // pack)
    first_pack = 1 if whole and lead else 0
    end_pack = max((lead + cols) // pack, first_pack) if whole else span
    head = min(first_pack * pack - lead, cols)
    neutrals = 0 if whole else span * pack - cols
    padded = np.repeat(k[:, None], span * pack, axis=1)
    padded[:, lead:lead + cols] = x
    d = (padded - k[:, None]).astype(F32)  # the neutral ones exactly 0

    def lane_sums(values, squares=False):
        sums = []
        for lane in range(lanes):
            acc = np.zeros(rows, F32)
            held = [p * pack + j for p in range(first_pack + lane, end_pack, lanes) for j in range(pack)]
            single = lane if lane < head else lane - head + end_pack * pack - lead
            if whole and single < cols:
                held.append(single + lead)
            for i in held:
                v = values[:, i]
                acc = _fma(v, v, acc) if squares else (acc + v).astype(F32)
            sums.append(acc)
        return _xor_butterfly_sum(sums)

    mean = (lane_sums(d) / F32(cols)).astype(F32)
    squares = (lane_sums(d, squares=True) / F32(cols)).astype(F32)
    mean_sq = (mean * mean).astype(F32)
    exact = mean_sq <= (F32(0.5) * squares).astype(F32)
    var = np.maximum((squares - mean_sq).astype(F32), F32(0))
    one_pass = exact if passes == "auto" else np.full(rows, passes == "one")
    shift = k
    if not one_pass.all():
        center = (k + mean).astype(F32)
        e = (padded - center[:, None]).astype(F32)
        about, squares = lane_sums(e), lane_sums(e, squares=True)
        if correct:  # each neutral value added e = K - c
            neutral = (k - center).astype(F32)
            about = _fma(-F32(neutrals), neutral, about)
            squares = _fma((-F32(neutrals) * neutral).astype(F32), neutral, squares)
        off = (about / F32(cols)).astype(F32)
        squares = (squares / F32(cols)).astype(F32)
        var2 = np.maximum((squares - (off * off).astype(F32)).astype(F32), F32(0))
        var = np.where(one_pass, var, var2)
        mean = np.where(one_pass, mean, off)
        shift = np.where(one_pass, k, center)
    rstd = (1 / np.sqrt((var + F32(eps)).astype(F32))).astype(F32)
    centered = ((padded - shift[:, None]).astype(F32) - mean[:, None]).astype(F32)
    return (shift + mean).astype(F32), rstd, centered[:, lead:lead + cols], exact


def _far_rows(rows: int, cols: int, seed: int) -> np.ndarray:
    """Rows whose sampled elements lie far out (1e3 at row_shift's eight places, the rest N(0, 1)):
    K is 1e3 and the mean of x - K nearly -1e3, so E[d^2] - E[d]^2 cancels almost entirely, and
    the sum of x - K rounds at the scale of K, not of the mean."""
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(F32)
    x[:, [(i * cols) >> 3 for i in range(8)]] = 1e3
    return x


@pytest.mark.parametrize("cols,pack,lanes,whole", [(1023, 8, 32, False), (1025, 8, 32, False), (4097, 8, 128, False),
                                                   (577, 8, 16, False), (129, 8, 4, False), (1023, 4, 64, False),
                                                   (1023, 8, 32, True), (1025, 8, 32, True), (4097, 8, 128, True),
                                                   (1023, 4, 64, True), (13, 8, 32, True)])
def test_span_rows_statistics_in_one_pass_or_two(cols, pack, lanes, whole):
    """norm_span_rows' LayerNorm at every offset within a pack: one pass on rows of mean 1e4 and
    std 1 (K lands near the mean), as accurate as the other tiers; two on rows whose sampled
    elements are outliers, within the suite's tolerances where one pass alone is not (on long rows:
    the outliers' share of the variance, 8 / cols, bounds how much E[d^2] - E[d]^2 cancels). In the
    second pass the neutral values' squares, uncorrected, would put rstd off too. The whole-pack
    shapes (whole) the same, with the row's edge elements one a thread and no neutral values."""
    eps = 1e-5
    for lead in range(pack):
        x = _cancellation_rows(8, cols, seed=cols + lead)
        mean, rstd, centered, exact = span_rows_statistics(x, lead, pack, lanes, eps, whole=whole)
        assert exact.all()
        _check_against_float64(x, mean, rstd, centered, eps)
        far = _far_rows(8, cols, seed=lead)
        mean, rstd, centered, exact = span_rows_statistics(far, lead, pack, lanes, eps, whole=whole)
        assert exact.any() == (cols < 64)  # 8 outliers of 13 columns: the variance is theirs
        ref_mean, ref_var = far.astype(np.float64).mean(1), far.astype(np.float64).var(1)
        # The suite's tolerances (suites/layernorm.py): the second pass's correction gives the
        # mean the precision of the data, not of K.
        ref_rstd = 1 / np.sqrt(ref_var + eps)
        np.testing.assert_allclose(mean, ref_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rstd, ref_rstd, rtol=1e-5, atol=0)
        _check_against_float64(far, mean, rstd, centered, eps)
        if cols > 4000:  # one pass's error grows with the row, the outliers' share of the variance falls
            one_mean, one_rstd, _, _ = span_rows_statistics(far, lead, pack, lanes, eps, passes="one", whole=whole)
            assert not (np.allclose(one_mean, ref_mean, rtol=1e-5, atol=1e-6)
                        and np.allclose(one_rstd, ref_rstd, rtol=1e-5, atol=0))
        if not whole and (-(-(lead + cols) // pack)) * pack > cols:  # a span with neutral values
            for rows in (x, far):
                _, uncorrected, _, _ = span_rows_statistics(rows, lead, pack, lanes, eps, passes="two", correct=False)
                ref = 1 / np.sqrt(rows.astype(np.float64).var(1) + eps)
                assert np.abs(uncorrected / ref - 1).max() > 1e-5


@pytest.mark.parametrize("value", [0.0, -3.25, 0.1, 1e4])
def test_span_rows_statistics_on_constant_rows(value):
    x = np.full((4, 1023), value, F32)
    eps = 1e-5
    for lead in range(8):
        mean, rstd, centered, exact = span_rows_statistics(x, lead, 8, 32, eps)
        assert exact.all()
        np.testing.assert_array_equal(mean, F32(value))
        np.testing.assert_array_equal(centered, 0)
        np.testing.assert_allclose(rstd, 1 / math.sqrt(eps), rtol=1e-6)


FOLDED_OFFSET_MAX = float(re.search(r"kFoldedOffsetMax = ([0-9.]+)f;", (kernels_dir() / "norm.cu").read_text()).group(1))
"""kernels/norm.cu's normk::kFoldedOffsetMax, read from the source."""


@pytest.mark.parametrize("mean,std", [(0.0, 1.0), (3.0, 0.5), (-20.0, 4.0), (1e4, 1.0), (300.0, 2.0)])
def test_store_folds_the_shift_only_where_it_stays_exact(mean, std):
    """norm_span_rows' LayerNorm stores x * rstd + folded, folded = fma(-shift, rstd, offset), where
    |folded| <= kFoldedOffsetMax: within 1e-6 of (x - shift) * rstd + offset, a tenth of the float32
    y tolerance's absolute part. Rows past the bound (a mean far from 0 against the spread) keep the
    subtraction; folded, those of mean 1e4 and std 1 would be off by more than that tolerance."""
    x = (np.random.default_rng(7).standard_normal((64, 1023)) * std + mean).astype(np.float16).astype(F32)
    shift = row_shift(x)
    d = (x - shift[:, None]).astype(F32)
    mu = (d.astype(np.float64).mean(1)).astype(F32)
    rstd = (1 / np.sqrt(d.astype(np.float64).var(1) + 1e-5)).astype(F32)
    offset = (-mu * rstd).astype(F32)
    folded = _fma(-shift, rstd, offset)
    exact = (x.astype(np.float64) - shift[:, None]) * rstd[:, None] + offset[:, None]
    stored = _fma(x, rstd[:, None], folded[:, None])
    error = np.abs(stored - exact).max(1)
    fold = np.abs(folded) <= FOLDED_OFFSET_MAX
    assert fold.all() == (abs(mean) / std < FOLDED_OFFSET_MAX / 2)
    assert (error[fold] <= 1e-6).all()
    if abs(mean) / std >= 1e3:
        assert (error > 1e-5).all()


def test_chan_merge_identity_and_empty_lanes():
    rows = 3
    a = (np.full(rows, 5, F32), np.array([1.5, -2, 7], F32), np.array([3, 0.25, 9], F32))
    empty = (np.zeros(rows, F32),) * 3
    for merged in (_chan(a, empty), _chan(empty, a)):
        for got, want in zip(merged, a):
            np.testing.assert_array_equal(got, want)
    n, m, q = _chan(empty, empty)
    assert not np.any(n) and not np.any(m) and not np.any(q)


def test_registers_tier_candidates_cover_the_row_with_the_smallest_block():
    for ctype in ("half_t", "bf16_t", "float"):
        pack = norm.full_pack(ctype)
        for rms in (False, True):
            for packs in (1, 100, 256, 257, 512, 1000, 2048, 4096):
                chosen = norm.rows_candidates(packs, ctype, rms)
                for c in chosen:
                    assert c.pack == pack and c.packs_per_thread * c.block >= packs
                    assert c.block == norm.REGISTER_BLOCKS[0] or c.packs_per_thread * c.block < 2 * packs
                if packs * pack <= norm.rows_max_cols(ctype, rms):
                    assert chosen, (ctype, rms, packs)
                # Held parameters first, for each packs-a-thread.
                holds = [c.hold for c in chosen if c.packs_per_thread == norm.REGISTER_HOLD_PACKS]
                assert holds == sorted(holds, reverse=True)


def test_tile_lanes_hold_their_part_of_a_row_in_registers_where_it_fits():
    from bwbench.cuda import row_tile

    for cols in range(1, 2049):
        e = row_tile.lane_elements(cols)
        group = row_tile.group_width(cols)
        if e:
            assert e * group >= cols and e in row_tile.LANE_ELEMENTS  # the whole row in the group's registers
            assert all(f < -(-cols // group) for f in row_tile.LANE_ELEMENTS if f < e)  # the fewest that hold it
        else:
            assert cols > max(row_tile.LANE_ELEMENTS) * group
    for ctype in ("half_t", "bf16_t", "float"):
        for rms in (False, True):
            names = norm.optimized_names(ctype, rms)
            assert all(norm.tile_name(ctype, rms, e) in names for e in (0, *row_tile.LANE_ELEMENTS))
