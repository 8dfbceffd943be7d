"""GPU checks of the LayerNorm / RMSNorm kernels (bwbench.cuda.norm) against the float64 references.

Run with `pytest -m gpu`. Every tier is forced on odd shapes (cols = 1, 33, 1000, 1023, 4097 ...),
in float16, bfloat16 and float32, with outputs poisoned with NaN first, and judged with the suites'
own per-output tolerances (bwbench.check.compare). Numerics: rows of mean 1e4 and standard
deviation 1 (where E[x^2] - E[x]^2 cancels) and constant rows (variance 0: rstd = 1/sqrt(eps)).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
DTYPE_IDS = lambda d: str(d).removeprefix("torch.")  # noqa: E731
EPS = 1e-5


def _tolerance(rms: bool, dtype: torch.dtype):
    from bwbench.discovery import get_suite

    return get_suite("rmsnorm" if rms else "layernorm").tolerance(str(dtype).removeprefix("torch."))


def _params(cols: int, dtype: torch.dtype, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    gamma = torch.randn(cols, generator=gen, device="cuda").to(dtype)
    beta = torch.randn(cols, generator=gen, device="cuda").to(dtype)
    return gamma, beta


def _random(rows: int, cols: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(rows, cols, generator=gen, device="cuda").to(dtype)


def _norm():
    """The norm family's plan, launchers and the suites' references under one name (the tests' view)."""
    import importlib
    import types

    from bwbench.cuda import loader
    from bwbench.cuda.norm import launch, naive, plan
    from bwbench.discovery import _package_for
    from bwbench.paths import suites_dir

    package = _package_for(suites_dir())
    reference = importlib.import_module(f"{package}._norm_reference")
    names: dict = {}
    for module in (plan, launch, naive, reference):
        names.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    names["cpp_type"] = loader.cpp_type
    names["_launch_of"] = lambda chosen, module, device, rows: launch._with_grid(chosen, module, device, rows, None)
    return types.SimpleNamespace(**names)


def _poisoned(x: torch.Tensor, rms: bool):
    rows = x.shape[0]
    stats = [torch.full((rows,), float("nan"), device=x.device) for _ in range(1 if rms else 2)]
    return (torch.full_like(x, float("nan")), *stats)


def _run(fn_name: str, x, gamma, beta, rms: bool, **kw):
    norm = _norm()

    out = _poisoned(x, rms)
    fn = getattr(norm, fn_name)
    got = fn(x, gamma, EPS, out=out, **kw) if rms else fn(x, gamma, beta, EPS, out=out, **kw)
    assert all(g is o for g, o in zip(got, out)), "must write into out="
    torch.cuda.synchronize()
    return got


def _check(got, x, gamma, beta, rms: bool, what: str):
    from bwbench.check import compare
    norm = _norm()

    ref = norm.rms_norm_reference(x, gamma, EPS) if rms else norm.layer_norm_reference(x, gamma, beta, EPS)
    result = compare(got, ref, _tolerance(rms, x.dtype))
    assert result.passed, f"{what}: {result.message}"


TIERS = [None, "warp", "registers", "smem", "uncached", "tile", "span", "span_rows", "cluster"]


def _has_clusters() -> bool:
    return torch.cuda.get_device_capability(0) >= (9, 0)


def _takes(tier: str | None, cols: int, dtype: torch.dtype, rms: bool = False) -> bool:
    """Whether a forced tier can hold rows of `cols` (the others are tested on their own shapes)."""
    norm = _norm()

    if tier == "warp":
        return cols <= norm.WARP_MAX_COLS
    if tier == "registers":
        ctype = norm.cpp_type(dtype)
        return cols % norm.full_pack(ctype) == 0 and cols <= norm.rows_max_cols(ctype, rms)
    if tier == "tile":  # a row for each group of lanes fits shared memory
        return cols <= 4097
    if tier == "span":  # a row fits shared memory
        return cols * dtype.itemsize <= 200 * 1024
    if tier == "span_rows":  # a row's span fits the largest instantiation
        return cols <= norm.span_rows_max_cols(norm.cpp_type(dtype), rms)
    if tier == "cluster":  # thread-block clusters (sm_90 and later)
        return _has_clusters()
    return True


CASES = [(1, 1), (7, 33), (5, 64), (256, 1000), (3, 1023), (64, 1024), (5, 1500), (5, 1544), (130, 2048),
         (9, 4097), (4, 32768)]


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_optimized_matches_reference(dtype, tier, rms):
    norm = _norm()

    for rows, cols in CASES:
        if not _takes(tier, cols, dtype, rms):
            continue
        x = _random(rows, cols, dtype, seed=rows * 7919 + cols)
        gamma, beta = _params(cols, dtype, seed=cols)
        got = _run("rms_norm" if rms else "layer_norm", x, gamma, beta, rms, tier=tier)
        _check(got, x, gamma, beta, rms, f"tier={tier} ({rows}, {cols}) {dtype}")


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("tier,cols", [("warp", 200), ("warp", 64), ("registers", 4096), ("smem", 2048),
                                       ("uncached", 1544), ("tile", 1000), ("span", 1544),
                                       ("span_rows", 1543)])
def test_row_loop_covers_more_rows_than_the_grid(tier, cols, rms):
    """With one wave of blocks (one of the grids the launcher times) the kernels' row loop covers
    the rest of the rows."""
    norm = _norm()

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = sms * (2048 if tier == "warp" else 64) + 5  # past one wave of blocks of up to 128 rows
    x = _random(rows, cols, torch.float16, seed=cols + 5)
    gamma, beta = _params(cols, torch.float16, seed=cols + 6)
    got = _run("rms_norm" if rms else "layer_norm", x, gamma, beta, rms, tier=tier, grid_waves=(1,))
    step = norm.chosen_launch(x, rms, tier=tier, grid_waves=(1,))
    assert step is not None and step.grid * step.plan.rows_per_block < rows, "the loop is not exercised"
    _check(got, x, gamma, beta, rms, f"tier={tier} rows={rows} cols={cols} with one wave")


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_naive_matches_reference(dtype, rms):
    for rows, cols in CASES:
        x = _random(rows, cols, dtype, seed=rows + cols)
        gamma, beta = _params(cols, dtype, seed=cols + 1)
        got = _run("naive_rms_norm" if rms else "naive_layer_norm", x, gamma, beta, rms)
        _check(got, x, gamma, beta, rms, f"naive ({rows}, {cols}) {dtype}")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_misaligned_pointers_fall_back_to_scalar_packs(dtype, tier):
    """x, gamma and y one element past a 16-byte boundary: contiguous, but no 16-byte pack fits."""
    rows, cols = 37, 512
    base = _random(rows * cols + 1, 1, dtype, seed=5).view(-1)
    x = base[1:].view(rows, cols)
    assert x.is_contiguous() and x.data_ptr() % 16
    gbase = torch.randn(2 * cols + 1, device="cuda").to(dtype)
    gamma, beta = gbase[1:cols + 1], gbase[cols + 1:]
    if tier == "registers":
        with pytest.raises(ValueError, match="registers tier needs"):
            _run("layer_norm", x, gamma, beta, False, tier=tier)
        return
    if tier in ("tile", "span", "span_rows", "cluster"):  # x one element past a boundary, a fresh y on one: their packs do not line up
        with pytest.raises(ValueError, match=f"{tier} tier needs"):
            _run("layer_norm", x, gamma, beta, False, tier=tier)
        return
    for rms in (False, True):
        got = _run("rms_norm" if rms else "layer_norm", x, gamma, beta, rms, tier=tier)
        _check(got, x, gamma, beta, rms, f"misaligned tier={tier} {dtype}")


def _cancellation_rows(rows: int, cols: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = 1e4 + torch.randn(rows, cols, generator=gen, device="cuda", dtype=torch.float64)
    return x.to(dtype)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_mean_1e4_std_1_rows(dtype, tier):
    """E[x^2] - E[x]^2 cancels here: in float32 it is off by about an ulp of 1e8 (8), against a
    variance of 1. y within the dtype's tolerance; mean and rstd within 1e-5 relative."""
    norm = _norm()

    for rows, cols in [(8, 32), (64, 1000), (16, 1024), (8, 2048), (8, 4096), (4, 32768)]:
        if not _takes(tier, cols, dtype):
            continue
        x = _cancellation_rows(rows, cols, dtype, seed=cols)
        gamma, beta = _params(cols, dtype, seed=3)
        got = _run("layer_norm", x, gamma, beta, rms=False, tier=tier)
        _check(got, x, gamma, beta, False, f"mean 1e4 tier={tier} ({rows}, {cols}) {dtype}")
        if dtype == torch.float32:  # the float32 rows keep their spread: rstd is about 1, not 1/sqrt(eps)
            assert torch.allclose(got[2], torch.ones_like(got[2]), rtol=0.5)


def _far_rows(rows: int, cols: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """N(0, 1) rows, every other one with 1e3 at seven of the eight places normk::row_shift samples:
    its shift K is then far from the mean, E[d^2] - E[d]^2 cancels, and the kernels that take the
    statistics in one pass must take the second; neighbouring rows, in the same warp, need not.
    Column 0 stays ordinary: the tiers that shift by K = x[row, 0] keep the mean to K's float32
    precision, which an outlier there would put outside the suite's tolerance for the mean."""
    x = _random(rows, cols, torch.float32, seed)
    x[::2, [(i * cols) >> 3 for i in range(1, 8)]] = 1e3
    return x.to(dtype)


SHIFTED_BY_FIRST_ELEMENT = {None, "warp", "registers", "smem", "uncached", "tile", "span"}
"""Tiers whose shift is K = x[row, 0]: an outlier there puts the mean written out past the suite's
tolerance (docs/norm.md, "A known limit"). span_rows shifts by row_shift and corrects its mean."""


@pytest.mark.parametrize("tier", [
    pytest.param(tier, marks=pytest.mark.xfail(strict=True, reason="known limit: shift by x[row, 0] (docs/norm.md)"))
    if tier in SHIFTED_BY_FIRST_ELEMENT else tier for tier in TIERS])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rows_whose_first_element_is_an_outlier(dtype, tier):
    """LayerNorm with 1e3 in column 0 of every other row of N(0, 1) values: within the suite's
    tolerances where the tier does not shift by that element. Strict xfail elsewhere, so that a fix
    shows up as a failure to remove the mark."""
    _check_outlier_rows(dtype, tier, "first", "outlier in column 0")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_rows_whose_sampled_elements_are_outliers(dtype, tier):
    """LayerNorm where one pass over the shifted values would cancel (every other row), within the
    suite's tolerances."""
    _check_outlier_rows(dtype, tier, "far", "outlier samples")


def _check_outlier_rows(dtype, tier: str | None, cancel: str, what: str):
    """LayerNorm of `_inputs(..., cancel)` rows at short, odd, model and long widths that `tier` takes."""
    for rows, cols in [(9, 33), (33, 768), (9, 1023), (9, 1025), (64, 1024), (9, 4097), (5, 12289), (3, 30001)]:
        if not _takes(tier, cols, dtype):
            continue
        x, gamma, beta = _inputs(rows, cols, dtype, False, cancel)
        got = _run("layer_norm", x, gamma, beta, rms=False, tier=tier)
        _check(got, x, gamma, beta, False, f"{what} tier={tier} ({rows}, {cols}) {dtype}")


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_constant_rows(dtype, tier):
    """Variance 0: mean is the value and rstd = 1/sqrt(eps) exactly as the reference has it."""
    norm = _norm()

    for rows, cols in [(6, 1), (6, 33), (6, 256), (6, 1000), (3, 5000)]:
        if not _takes(tier, cols, dtype):
            continue
        values = torch.tensor([0.0, 1.0, -3.25, 1000.0, 10000.0, 0.1], device="cuda")[:rows]
        x = values[:, None].expand(rows, cols).contiguous().to(dtype)
        gamma, beta = _params(cols, dtype, seed=4)
        for rms in (False, True):
            got = _run("rms_norm" if rms else "layer_norm", x, gamma, beta, rms, tier=tier)
            _check(got, x, gamma, beta, rms, f"constant rows tier={tier} ({rows}, {cols}) {dtype} rms={rms}")
        y, mean, rstd = _run("layer_norm", x, gamma, beta, rms=False, tier=tier)
        torch.testing.assert_close(rstd, torch.full_like(rstd, EPS ** -0.5), rtol=1e-6, atol=0)
        torch.testing.assert_close(mean, x[:, 0].float(), rtol=0, atol=0)


def test_allocating_form_and_bad_inputs():
    from bwbench.cuda.norm import layer_norm, rms_norm

    x = _random(10, 300, torch.float16, seed=1)
    gamma, beta = _params(300, torch.float16, seed=2)
    y, mean, rstd = layer_norm(x, gamma, beta)
    assert y.shape == x.shape and y.dtype == x.dtype and mean.shape == rstd.shape == (10,)
    assert mean.dtype == rstd.dtype == torch.float32
    y2, rstd2 = rms_norm(x, gamma)
    assert y2.shape == x.shape and rstd2.shape == (10,)
    empty = layer_norm(torch.empty(0, 8, device="cuda"), torch.ones(8, device="cuda"), torch.zeros(8, device="cuda"))
    assert empty[0].shape == (0, 8) and empty[1].shape == (0,)
    with pytest.raises(ValueError, match="2-D"):
        layer_norm(x.view(2, 5, 300), gamma, beta)
    with pytest.raises(ValueError, match="contiguous"):
        layer_norm(_random(300, 10, torch.float16, 1).t(), gamma, beta)
    with pytest.raises(ValueError, match="gamma must be contiguous of shape"):
        layer_norm(x, gamma[:299], beta)
    with pytest.raises(ValueError, match="beta must be"):
        layer_norm(x, gamma, beta.float())
    with pytest.raises(ValueError, match="float16"):
        layer_norm(x.double(), gamma.double(), beta.double())


def test_runs_on_the_current_stream_and_in_a_cuda_graph():
    from bwbench.cuda.norm import layer_norm

    x = _random(300, 2048, torch.bfloat16, seed=5)
    gamma, beta = _params(2048, torch.bfloat16, seed=6)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer_norm(x, gamma, beta)  # warm-up outside capture (compiles, sets attributes)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer_norm(x, gamma, beta)
    for seed in (7, 8):
        x.copy_(_random(300, 2048, torch.bfloat16, seed=seed))
        for o in out:
            o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(out, x, gamma, beta, False, f"graph replay seed {seed}")


def _last_rows_past_int32(rows: int, cols: int, tier: str | None) -> None:
    """A (rows, cols) half matrix whose last rows lie past element 2^31: only 64-bit row offsets
    reach them. The rows are copies of a few random ones, so the check is cheap."""
    norm = _norm()

    need = rows * cols * 2 * 2 + (2 << 30)
    free, _ = torch.cuda.mem_get_info()
    if free < need:
        pytest.skip(f"needs about {need / 2**30:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")
    seed_rows = _random(8, cols, torch.float16, seed=cols)
    x = seed_rows.repeat(rows // 8 + 1, 1)[:rows].contiguous()
    gamma, beta = _params(cols, torch.float16, seed=10)
    y, mean, rstd = norm.layer_norm(x, gamma, beta, EPS, tier=tier)
    torch.cuda.synchronize()
    for start in (0, rows // 2, rows - 5):
        sl = slice(start, start + 5)
        _check((y[sl], mean[sl], rstd[sl]), x[sl], gamma, beta, False, f"({rows}, {cols}) rows {start}.. tier={tier}")


@pytest.mark.parametrize("rows,cols,tier", [((1 << 16) + 3, 1 << 15, None), ((1 << 16) + 3, 1 << 15, "uncached"),
                                            ((1 << 21) + 7, 1024, None)], ids=["smem", "uncached", "warp"])
def test_beyond_int32_elements(rows, cols, tier):
    _last_rows_past_int32(rows, cols, tier)
    torch.cuda.empty_cache()


def test_plans_for_the_default_sweep():
    """Which tier and block each default cols gets on this GPU (printed; -s shows it)."""
    norm = _norm()

    for dtype in DTYPES:
        for cols in [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]:
            x = torch.empty(4, cols, device="cuda", dtype=dtype)
            step = norm.launch_plan(x, rms=False, pack=norm.full_pack(norm.cpp_type(dtype)))
            ctype = norm.cpp_type(dtype)
            split = _has_clusters() and norm.splits_rows(cols, ctype, False)
            expected = ("warp" if cols <= norm.WARP_MAX_COLS else
                        "registers" if cols <= norm.rows_max_cols(ctype, False) else
                        "cluster" if split else "smem")
            assert step.plan.tier == expected
            print(f"{DTYPE_IDS(dtype)} cols={cols}: {step.plan.tier} block={step.plan.block} smem={step.plan.smem_bytes} "
                  f"grid={step.grid} {step.plan.kernel} + {[(c.tier, c.block) for c in step.plan.alternatives]}")


def test_first_call_times_the_candidate_blocks_once():
    """A block-tier shape is timed once over its candidate block sizes; the fastest is kept, and
    the answer is right whichever was chosen."""
    norm = _norm()

    x = _random(300, 4096, torch.float16, seed=12)
    gamma, beta = _params(4096, torch.float16, seed=13)
    assert norm.chosen_launch(x, rms=False) is None
    got = _run("layer_norm", x, gamma, beta, rms=False)
    step = norm.chosen_launch(x, rms=False)
    model = norm.launch_plan(x, rms=False, pack=8).plan
    assert step is not None and step.plan.tier in ("registers", "smem") and len(model.candidates) > 1
    assert step.plan in model.candidates
    _check(got, x, gamma, beta, False, "after tuning")
    again = _run("layer_norm", x, gamma, beta, rms=False)
    assert norm.chosen_launch(x, rms=False) is step
    for a, b in zip(again, got):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _launch_exactly(chosen, x, gamma, beta, rms: bool):
    """Run one given plan (kernel and launch shape) on poisoned outputs, bypassing the timing."""
    from bwbench.cuda import loader

    norm = _norm()

    rows, cols = x.shape
    module = loader.load(norm.OPTIMIZED[(norm.cpp_type(x.dtype), rms)])
    step = norm._launch_of(chosen, module, x.device.index or 0, rows)
    out = _poisoned(x, rms)
    mean, rstd = (None, out[1]) if rms else (out[1], out[2])
    args = (x, gamma, beta, out[0], mean, rstd, np.int32(rows), np.int32(cols), np.float32(EPS))
    loader.launch(step.kernel, step.grid, step.plan.block, args, shared_mem=step.plan.smem_bytes)
    torch.cuda.synchronize()
    return out


def _inputs(rows: int, cols: int, dtype, rms: bool, cancel: bool | str):
    """x (random; cancel=True: mean-1e4 rows; "far": _far_rows; "first": 1e3 in column 0 of every
    other row) and gamma and beta."""
    if cancel == "far":
        x = _far_rows(rows, cols, dtype, seed=cols)
    elif cancel == "first":
        x = _random(rows, cols, torch.float32, seed=cols)
        x[::2, 0] = 1e3
        x = x.to(dtype)
    elif cancel and not rms:
        x = _cancellation_rows(rows, cols, dtype, seed=cols)
    else:
        x = _random(rows, cols, dtype, seed=cols)
    return (x, *_params(cols, dtype, seed=rows))


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_registers_instantiation(dtype, rms):
    """Each norm_rows kernel on full rows (P x B packs), ragged rows (a last partial warp and idle
    warps) and mean-1e4 rows: the timing may pick any of them."""
    norm = _norm()

    ctype = norm.cpp_type(dtype)
    pack = norm.full_pack(ctype)
    for config in norm.rows_configs(ctype, rms):
        slots = config.packs_per_thread * config.block
        chosen = norm.NormPlan("registers", config.name(ctype, rms), pack, config.block, 0, 1)
        for rows, cols, cancel in [(5, slots * pack, False), (7, (slots - 3 * 32 - 5) * pack, False),
                                   (3, (slots // 2 + 1) * pack, True), (300, slots * pack, True)]:
            x, gamma, beta = _inputs(rows, cols, dtype, rms, cancel)
            _check(_launch_exactly(chosen, x, gamma, beta, rms), x, gamma, beta, rms, f"{chosen.kernel} ({rows}, {cols})")


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_span_rows_instantiation(dtype, rms):
    """Each norm_span_rows kernel on rows of its longest span, ragged and short rows, odd and whole
    byte counts, mean-1e4 rows and rows whose shift is an outlier, with the grid the launcher gives
    and with 7 blocks striding over the rows (a block's rows then start at different offsets within
    a pack, so the rows off the block's offset read gamma and beta from global memory)."""
    from bwbench.cuda import loader

    norm = _norm()
    ctype = norm.cpp_type(dtype)
    pack = norm.full_pack(ctype)
    module = loader.load(norm.OPTIMIZED[(ctype, rms)])
    for config in norm.span_rows_configs(rms):
        longest = config.max_cols(pack)
        many = 3 * config.rows_per_block + 1  # several rows a group, the last block's groups partly idle
        for rows, cols, cancel in [(5, longest, False), (9, longest - 2, True), (many, longest - pack + 1, False),
                                   (11, pack + 1, False), (7, 2 * pack - 1, True),
                                   (many, config.slots * pack // 2 + 3, "far"), (4, 1, False), (13, 3, False)]:
            x, gamma, beta = _inputs(rows, cols, dtype, rms, cancel)
            chosen = norm.NormPlan("span_rows", config.name(ctype, rms), pack, config.block,
                                   norm.span_rows_smem_bytes(cols, ctype, rms), config.rows_per_block)
            if chosen.smem_bytes + norm.STATIC_SMEM_MARGIN > 48 * 1024:  # static memory counts too
                # The launcher's limit, not this row's: a lower one would stay on the kernel and
                # fail a later test's launch of longer rows that the launcher planned before it.
                limit = loader.max_shared_memory_per_block(0) - norm.STATIC_SMEM_MARGIN
                loader.set_max_dynamic_shared_memory(module.kernel(chosen.kernel), limit, 0)
            _check(_launch_exactly(chosen, x, gamma, beta, rms), x, gamma, beta, rms, f"{chosen.kernel} ({rows}, {cols})")
            out = _poisoned(x, rms)
            mean, rstd = (None, out[1]) if rms else (out[1], out[2])
            args = (x, gamma, beta, out[0], mean, rstd, np.int32(rows), np.int32(cols), np.float32(EPS))
            loader.launch(module.kernel(chosen.kernel), 7, config.block, args, shared_mem=chosen.smem_bytes)
            torch.cuda.synchronize()
            _check(out, x, gamma, beta, rms, f"{chosen.kernel} ({rows}, {cols}) with 7 blocks")


def _past_boundary(t: torch.Tensor, k: int) -> torch.Tensor:
    """The same values, `k` elements past the start of a fresh (16-byte aligned) allocation."""
    held = torch.empty(t.numel() + k, device=t.device, dtype=t.dtype)
    held[k:] = t
    return held[k:]


@pytest.mark.skipif(not torch.cuda.is_available() or not _has_clusters(), reason="needs thread-block clusters (sm_90)")
@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_cluster_instantiation(dtype, rms):
    """Each norm_cluster kernel (2, 4, 8 and, where the GPU holds them, 16 blocks a row) on long
    odd and whole-pack rows, mean-1e4 rows, rows whose shift is an outlier (the second exchange),
    rows shorter than a pack per block, with the launcher's grid and with three clusters striding
    over the rows (their rows then start at different offsets); gamma and beta also 1 and 3, then
    both 3 elements past a 16-byte boundary, so every shift between their packs and the row's is
    read, apart (shifted at run time) and together (the shift's words fixed at compile time); rows
    at the parameters' own offset (every row of whole packs with fresh parameters, and the rows that
    start 3 elements in with both 3 past) take 16-bit LayerNorm's lined-up store."""
    from bwbench.cuda import loader
    from bwbench.cuda.launch_spec import PORTABLE_CLUSTER_BLOCKS

    norm = _norm()
    ctype = norm.cpp_type(dtype)
    pack = norm.full_pack(ctype)
    module = loader.load(norm.OPTIMIZED[(ctype, rms)])
    limit = loader.max_shared_memory_per_block(0) - norm.STATIC_SMEM_MARGIN
    for size in norm.CLUSTER_SIZES:
        for rows, cols, cancel in [(5, 40001, False), (3, 16 * 1024 + 8, False), (6, 33331, True), (7, 20011, "far"),
                                   (4, 3, False), (9, 7 * size * pack + 1, "first")]:
            smem = norm.cluster_smem_bytes(cols, ctype, size)
            if smem > limit:  # never planned: float32 LayerNorm's halves of 40001 columns
                continue
            x, gamma, beta = _inputs(rows, cols, dtype, rms, cancel)
            chosen = norm.NormPlan("cluster", norm.cluster_name(ctype, rms, size), pack,
                                   norm.cluster_block(cols, ctype, size), smem, 1, cluster=size,
                                   grid_multiple=size)
            loader.set_max_dynamic_shared_memory(module.kernel(chosen.kernel), limit, 0)
            kernel = module.kernel(chosen.kernel)
            if size > PORTABLE_CLUSTER_BLOCKS and loader.max_active_clusters(kernel, size, chosen.block, smem, 0) < 1:
                continue  # no such cluster on this GPU (the query also opts the kernel in where there is)
            what = f"{chosen.kernel} ({rows}, {cols}, {cancel})"
            _check(_launch_exactly(chosen, x, gamma, beta, rms), x, gamma, beta, rms, what)
            for g_past, b_past in [(1, 3), (3, 3)]:  # their shifts apart, then together
                gamma_off, beta_off = _past_boundary(gamma, g_past), _past_boundary(beta, b_past)
                _check(_launch_exactly(chosen, x, gamma_off, beta_off, rms), x, gamma_off, beta_off, rms,
                       f"{what} with gamma and beta {g_past} and {b_past} elements past 16 bytes")
            out = _poisoned(x, rms)
            mean, rstd = (None, out[1]) if rms else (out[1], out[2])
            args = (x, gamma, beta, out[0], mean, rstd, np.int32(rows), np.int32(cols), np.float32(EPS))
            loader.launch(module.kernel(chosen.kernel), 3 * size, chosen.block, args, shared_mem=smem)
            torch.cuda.synchronize()
            _check(out, x, gamma, beta, rms, f"{what} with 3 clusters")


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_four_and_three_pack_warp_instantiation(dtype, rms):
    """The four- and three-packs-a-lane norm_warp kernels (timed alternatives for 17-128 packs) on
    full and ragged rows, odd row counts (two rows a group) and mean-1e4 rows."""
    norm = _norm()

    ctype = norm.cpp_type(dtype)
    for config in norm._four_pack_configs(ctype) + norm._three_pack_configs(ctype):
        chosen = norm.NormPlan("warp", config.name(ctype, rms), config.pack, norm.WARP_BLOCK, 0, config.rows_per_block)
        full = config.cols_per_thread * config.width
        for rows, cols, cancel in [(9, full, False), (301, full - 3 * config.pack, True), (4, full // 2 + config.pack, False)]:
            x, gamma, beta = _inputs(rows, cols, dtype, rms, cancel)
            _check(_launch_exactly(chosen, x, gamma, beta, rms), x, gamma, beta, rms, f"{chosen.kernel} ({rows}, {cols})")


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
def test_every_raw_rows_warp_instantiation(rms):
    """The raw-rows norm_warp kernels (half rows of exactly C * W columns kept as stored, timed
    beside the float rows) on odd row counts (two rows a group, the last group past the end),
    mean-1e4 rows and constant rows."""
    norm = _norm()
    configs = [c for c in norm.warp_configs("half_t") if c.raw_rows("half_t")]
    assert configs
    for config in configs:
        chosen = norm.NormPlan("warp", config.raw_name("half_t", rms), config.pack, norm.WARP_BLOCK, 0,
                               config.rows_per_block)
        cols = config.cols_per_thread * config.width
        for rows, cancel in [(9, False), (301, True), (1, False)]:
            x, gamma, beta = _inputs(rows, cols, torch.float16, rms, cancel)
            _check(_launch_exactly(chosen, x, gamma, beta, rms), x, gamma, beta, rms, f"{chosen.kernel} ({rows}, {cols})")
        x = torch.full((5, cols), 3.25, device="cuda", dtype=torch.float16)
        gamma, beta = _params(cols, torch.float16, seed=5)
        _check(_launch_exactly(chosen, x, gamma, beta, rms), x, gamma, beta, rms, f"{chosen.kernel} constant rows")


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_odd_widths_offer_the_tile_tier_first(dtype, rms):
    """Rows whose bytes are no multiple of 16: the model's first plan is the tile tier (the span
    tier past its rows, the cluster tier past every single block's), the row tiers (and, at rows of
    16 KiB and more, clusters of two and four) its timed alternatives; whichever wins, the result
    is right (tile boundaries mid-row at
    any phase: rows of 13 to 1031 columns, row counts that leave a partial last tile)."""
    norm = _norm()

    for rows, cols in [(1, 13), (300, 31), (4099, 33), (77, 197), (1000, 577), (33, 1031), (5, 4099), (9, 12289),
                       (3, 30001)]:
        x = _random(rows, cols, dtype, seed=rows + 3 * cols)
        gamma, beta = _params(cols, dtype, seed=cols + 2)
        if cols * x.element_size() % 16:
            model = norm.launch_plan(x, rms=rms, pack=1).plan
            staged = ("cluster" if _has_clusters() and norm.splits_rows(cols, norm.cpp_type(dtype), rms) else
                      "tile" if cols * x.element_size() <= norm.TILE_MAX_ROW_BYTES else "span")
            assert model.tier == staged and any(c.tier != staged for c in model.alternatives), model
        got = _run("rms_norm" if rms else "layer_norm", x, gamma, beta, rms)
        _check(got, x, gamma, beta, rms, f"auto ({rows}, {cols}) {dtype}")
        again = _run("rms_norm" if rms else "layer_norm", x, gamma, beta, rms)  # the remembered launch
        _check(again, x, gamma, beta, rms, f"repeat ({rows}, {cols}) {dtype}")


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_tile_lanes_holding_their_row_give_the_same_bits(dtype, rms, monkeypatch):
    """The tile tier's instances whose lanes keep their part of the row and its gamma and beta in
    registers (rows of up to 256 columns) against the one that reads the cached row three times:
    the same sums in the same order, so the same bits, at odd widths and a partial last tile; and
    both pass the check."""
    from bwbench.cuda import row_tile
    from bwbench.cuda.norm import launch as launcher

    norm = _norm()
    for rows, cols in [(1001, 3), (777, 31), (300, 33), (129, 127), (1000, 129), (77, 197), (90, 255)]:
        if cols * torch.empty((), dtype=dtype).element_size() % 16 == 0:
            continue
        x = _random(rows, cols, dtype, seed=rows + 5 * cols)
        gamma, beta = _params(cols, dtype, seed=cols + 4)
        fn = "rms_norm" if rms else "layer_norm"
        results = []
        for lane_elements in (row_tile.LANE_ELEMENTS, ()):
            monkeypatch.setattr(row_tile, "LANE_ELEMENTS", lane_elements)
            for cache in ("_MODELS", "_CHOSEN", "_REPEATS"):
                monkeypatch.setattr(launcher, cache, {})
            assert norm.launch_plan(x, rms=rms, pack=1, tier="tile").plan.kernel.endswith(
                ", 0>" if not lane_elements else f", {row_tile.lane_elements(cols)}>")
            got = _run(fn, x, gamma, beta, rms, tier="tile")
            _check(got, x, gamma, beta, rms, f"tile lanes {lane_elements} ({rows}, {cols}) {dtype}")
            results.append([t.clone() for t in got])
        for held, generic in zip(*results):
            assert torch.equal(held, generic), f"({rows}, {cols}) {dtype}: register and shared-memory tiles differ"
