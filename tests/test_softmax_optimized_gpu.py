"""GPU checks of the optimized softmax family: every tier of every operation against float64.

Run with `pytest -m gpu`; everything skips without a CUDA GPU. Each operation (softmax,
log-softmax, their backward, online softmax) is forced through each of its tiers and through
auto-dispatch, at odd column counts (1, 3, 33, 1000, 1023, 4097, 65535 and a few powers of two)
and several row counts, in float16, bfloat16 and float32, with four layouts: contiguous, input and
output offset by one element (16-byte packs with a partial head and tail on every row), the input
alone offset (offsets differ: one element per access), and a column slice of a wider tensor (row
stride != cols). Outputs are poisoned with NaN first, inputs are
fresh random values.

Tolerances: bwbench.suite.DEFAULT_TOLERANCES, i.e. stricter than the softmax_backward suite
(whose atol admits PyTorch's rounding of dy * y). Exceptions, all float32 absolute tolerances:
log-softmax 1e-6 (the log_softmax suite's: log(sum) errs by a few ulps of 1 whatever the size of
the result); softmax backward 5e-7 (dx = y * (dy - s) cancels where dy ~ s, leaving s's float32
rounding, ~1e-7 for unit-scale dy, as an absolute error); log-softmax backward 2e-6 (dx = dy -
exp(y) * sum(dy) cancels likewise, and exp(y) * sum(dy) reaches ~5).
"""

from __future__ import annotations

import zlib
from dataclasses import replace

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
COLS = [1, 3, 33, 64, 1000, 1023, 4096, 4097, 65535]
ROWS = [1, 7, 130]
LAYOUTS = ["contiguous", "offset", "offset-input-only", "strided"]
FORWARD_TIERS = ["auto", "warp", "warp/rows1", "warp/rows4", "warp/fullrows2", "warp_fit", "warp_wide", "warp_elements",
                 "registers", "smem", "smem/three-pass", "smem/oneflow", "uncached", "uncached/three-pass", "cluster",
                 "tile"]
BACKWARD_TIERS = ["auto", "warp", "warp/rows1", "warp/fullrows2", "warp_fit", "warp_wide", "warp_elements", "smem",
                  "smem/oneflow", "uncached", "cluster", "tile", "flat"]
ONLINE_TIERS = ["auto", "online_warp", "online_block"]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tolerance(op: str, dtype: torch.dtype):
    from bwbench.discovery import get_suite
    from bwbench.suite import DEFAULT_TOLERANCES, Tolerance

    if op in ("softmax", "online_softmax"):
        return DEFAULT_TOLERANCES[_name(dtype)]
    if op == "log_softmax":
        return get_suite("log_softmax").tolerance(_name(dtype))
    if dtype == torch.float32 and op == "softmax_backward":
        return Tolerance(rtol=1e-5, atol=5e-7)
    if dtype == torch.float32:
        return Tolerance(rtol=1e-5, atol=2e-6)
    return DEFAULT_TOLERANCES[_name(dtype)]


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, op: str, dtype: torch.dtype, what: str) -> None:
    tol = _tolerance(op, dtype)
    assert actual.shape == expected.shape, what
    assert not torch.isnan(actual).any(), f"{what}: output has NaN (unwritten poisoned elements?)"
    torch.testing.assert_close(actual.double(), expected, rtol=tol.rtol, atol=tol.atol, msg=lambda m: f"{what}: {m}")


def _layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout (rows stay contiguous)."""
    rows, cols = t.shape
    if layout == "contiguous":
        return t.contiguous()
    if layout.startswith("offset") or layout == "sector":
        # offset: one element past a 16-byte boundary; sector: 16 bytes past a 32-byte boundary
        # (packs stay aligned, sectors do not)
        shift = 1 if layout.startswith("offset") else 16 // t.element_size()
        flat = torch.empty(rows * cols + shift, dtype=t.dtype, device=t.device)
        view = flat[shift:].view(rows, cols)
        view.copy_(t)
        return view
    if layout == "strided":  # a column slice: row stride cols + 8 (packs stay aligned where cols allows)
        wide = torch.full((rows, cols + 8), float("nan"), dtype=t.dtype, device=t.device)
        wide[:, :cols] = t
        return wide[:, :cols]
    raise ValueError(layout)


def _poisoned_out(rows: int, cols: int, dtype: torch.dtype, layout: str) -> torch.Tensor:
    """A NaN-filled output in the layout the inputs have ("offset-input-only": a fresh one)."""
    out = torch.full((rows, cols), float("nan"), dtype=dtype, device="cuda")
    return out if layout in ("offset-input-only", "strided") else _layout(out, layout)


def _random(rows: int, cols: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(rows, cols, generator=gen, device="cuda", dtype=torch.float32) * scale


def _inputs(op: str, rows: int, cols: int, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    x = _random(rows, cols, seed)
    if op in ("softmax", "log_softmax", "online_softmax"):
        return {"x": x.to(dtype)}
    y = (torch.softmax(x, -1) if op == "softmax_backward" else torch.log_softmax(x, -1)).to(dtype)
    return {"y": y, "dy": _random(rows, cols, seed + 1).to(dtype)}


def _reference(op: str, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    if op in ("softmax", "online_softmax"):
        return torch.softmax(inputs["x"].double(), -1)
    if op == "log_softmax":
        return torch.log_softmax(inputs["x"].double(), -1)
    y, dy = inputs["y"].double(), inputs["dy"].double()
    if op == "softmax_backward":
        return y * (dy - (dy * y).sum(-1, keepdim=True))
    return dy - y.exp() * dy.sum(-1, keepdim=True)


def _function(op: str):
    from bwbench.cuda import softmax as s

    return {"softmax": s.softmax, "log_softmax": s.log_softmax, "online_softmax": s.online_softmax,
            "softmax_backward": s.softmax_backward, "log_softmax_backward": s.log_softmax_backward}[op]


VARIANTS = {  # tier variant -> Thresholds fields
    "rows1": {"small_group_rows": 1},
    "rows4": {"small_group_rows": 4},
    "fullrows2": {"full_warp_rows": 2},
    "three-pass": {"one_pass": False},
    "one-pass": {"one_pass": True},
    "oneflow": {"block_rule": "oneflow"},
}


def _overrides(op: str, tier: str) -> dict:
    from bwbench.cuda.softmax import DEFAULT_THRESHOLDS as THRESHOLDS, OPERATIONS
    from bwbench.cuda.softmax.dispatch import with_overrides

    if tier == "auto":
        return {}
    name, _, variant = tier.partition("/")
    overrides = {"tier": name}
    if variant:
        overrides["thresholds"] = with_overrides(THRESHOLDS[OPERATIONS[op][2]], **VARIANTS[variant])
    return overrides


def _run_case(op: str, tier: str, dtype: torch.dtype, cols: int) -> None:
    from bwbench.cuda.softmax import dispatch as d
    from bwbench.cuda.softmax import plan_launch, which_tier
    from bwbench.cuda.softmax.launch import row_layout

    fn = _function(op)
    overrides = _overrides(op, tier)
    direction = "backward" if "backward" in op else "forward"
    for rows in ROWS:
        inputs = _inputs(op, rows, cols, dtype, seed=rows * 7919 + cols)
        reference = _reference(op, inputs)
        for layout in LAYOUTS:
            laid = {k: _layout(v, layout) for k, v in inputs.items()}
            first = next(iter(laid.values()))
            what = f"{op} [{tier}] {_name(dtype)} ({rows}, {cols}) {layout}"
            out = _poisoned_out(rows, cols, dtype, layout)
            pack, starts_aligned, dense = row_layout(tuple(laid.values()) + (out,))
            span = d.span_cols(cols, pack, starts_aligned)
            if overrides.get("tier") == "warp":
                if d.warp_shape(span, pack, direction) is None:
                    with pytest.raises(ValueError, match="warp tier holds at most"):
                        fn(**laid, out=out, **overrides)
                    continue
            if overrides.get("tier") == d.ELEMENTS_TIER and d.warp_shape(cols, 1, direction) is None:
                with pytest.raises(ValueError, match="warp tier holds at most"):
                    fn(**laid, out=out, **overrides)
                continue
            if overrides.get("tier") in d.FIT_FAMILY:
                if d.fit_shape(span, pack, direction, family=d.FIT_FAMILY[overrides["tier"]]) is None:
                    with pytest.raises(ValueError, match="no fitted warp shape"):
                        fn(**laid, out=out, **overrides)
                    continue
            if overrides.get("tier") == "registers":
                if d.registers_shape(span, pack) is None:
                    with pytest.raises(ValueError, match="registers tier runs"):
                        fn(**laid, out=out, **overrides)
                    continue
            if overrides.get("tier") == "cluster" and torch.cuda.get_device_capability() < (9, 0):
                with pytest.raises(ValueError, match="clusters"):
                    fn(**laid, out=out, **overrides)
                continue
            if overrides.get("tier") == "tile":
                try:
                    plan_launch(op, rows, cols, dtype, aligned=pack > 1, starts_aligned=starts_aligned, dense=dense,
                                **overrides)
                except ValueError as exc:  # strided, offsets that differ, or rows no tile holds
                    assert "tile tier needs" in str(exc), what
                    assert not dense or pack == 1 or cols * first.element_size() > 4096, what
                    with pytest.raises(ValueError, match="tile tier needs"):
                        fn(**laid, out=out, **overrides)
                    continue
            if overrides.get("tier") == "flat":
                try:
                    plan_launch(op, rows, cols, dtype, aligned=pack > 1, starts_aligned=starts_aligned, dense=dense,
                                **overrides)
                except ValueError as exc:  # strided, offsets that differ, rows under a pack or over a block's packs
                    assert "flat tier needs" in str(exc), what
                    itemsize = first.element_size()
                    assert not dense or pack == 1 or cols * itemsize < 16 or cols * itemsize > 4096, what
                    with pytest.raises(ValueError, match="flat tier needs"):
                        fn(**laid, out=out, **overrides)
                    continue
            if overrides.get("tier") == "smem":
                try:
                    plan_launch(op, rows, cols, dtype, aligned=pack > 1, starts_aligned=starts_aligned, **overrides)
                except ValueError as exc:  # the row does not fit in shared memory on this GPU
                    assert "cannot launch" in str(exc)
                    assert d.smem_bytes(direction, cols, first.element_size()) > 100_000, what
                    continue
            result = fn(**laid, out=out, **overrides)
            assert result is out
            torch.cuda.synchronize()
            _assert_close(result, reference, op, dtype, what)
            if tier != "auto" and op != "online_softmax" and layout != "offset-input-only":
                forced = overrides["tier"]
                warp = forced in d.FIT_FAMILY or forced == d.ELEMENTS_TIER
                assert which_tier(first, op, **overrides) == ("warp" if warp else forced), what


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("tier", FORWARD_TIERS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_forward_every_tier(op: str, tier: str, dtype: torch.dtype, cols: int) -> None:
    _run_case(op, tier, dtype, cols)


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("tier", BACKWARD_TIERS)
@pytest.mark.parametrize("op", ["softmax_backward", "log_softmax_backward"])
def test_backward_every_tier(op: str, tier: str, dtype: torch.dtype, cols: int) -> None:
    _run_case(op, tier, dtype, cols)


@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("tier", ONLINE_TIERS)
def test_online_every_tier(tier: str, dtype: torch.dtype, cols: int) -> None:
    _run_case("online_softmax", tier, dtype, cols)


# ---------------------------------------------------------------------------------------------
# Auto-dispatch: which tier a shape takes
# ---------------------------------------------------------------------------------------------


def test_auto_dispatch_reaches_every_tier():
    from bwbench.cuda.softmax import which_tier

    def t(rows, cols, dtype, op="softmax"):
        return which_tier(torch.empty(rows, cols, dtype=dtype, device="cuda"), op)

    for op in ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward"):
        assert t(49152, 32, torch.float16, op) == "warp"
        assert t(49152, 512, torch.float16, op) == "warp"
        assert t(3, 1, torch.float32, op) == "warp"
        assert t(8, 501, torch.bfloat16, op) == "warp"
        # dense backward rows of odd byte counts past the warp tier go through shared memory in tiles
        backward = "backward" in op
        assert t(49152, 1025, torch.float16, op) == ("tile" if backward else "warp")
        wide = torch.empty(64, 1040, dtype=torch.float16, device="cuda")
        assert which_tier(wide[:, :1025], op) == ("smem" if backward else "warp"), "a column slice is not dense"
        assert t(49152, 1024, torch.float16, op) == "warp"
        assert t(8, 4097, torch.float16, op) == "smem"
        assert t(8, 4096, torch.float32, op) == "smem"
        # 65535 float32 values (256 KiB; twice that for y and dy) fit no block's shared memory:
        # a cluster's blocks share the row where the GPU launches clusters
        clusters = torch.cuda.get_device_capability() >= (9, 0)
        assert t(8, 65535, torch.float32, op) == ("cluster" if clusters else "uncached")
        assert t(8, 1 << 22, torch.float16, op) == "uncached", "sixteenths of 8 MiB fit no cluster"
        # The forward's registers tier: 512 packs, and rows whose cache leaves one block an SM.
        forward = "backward" not in op
        assert t(8, 4096, torch.float16, op) == ("registers" if forward else "smem")
        assert t(8, 8192, torch.float16, op) == "smem"
        assert t(8, 32768, torch.float32, op) == ("registers" if forward else "smem")  # backward: 7/8 cached
        # float16 rows of 262144 (512 KiB): eighths of 64 KiB, or of 128 KiB for y and dy
        assert t(8, 262144, torch.float16, op) == ("cluster" if clusters else "uncached")
        # float32 (1 MiB): eighths cached leave one block an SM (where the forward's uncached
        # re-read beat the cluster) and the backward's (256 KiB of y and dy) fit no block; the
        # forward's eighths holding half their slice in registers leave two, and on GPUs that hold
        # clusters of 16 its sixteenths holding part of theirs four; the backward's sixteenths
        # (128 KiB) leave one, two with half of them in registers
        sixteen = _holds_sixteen(op, torch.float32)
        assert t(8, 262144, torch.float32, op) == ("cluster" if sixteen or (forward and clusters) else "uncached")
    assert t(8, 1000, torch.float16, "online_softmax") == "online_warp"
    assert t(8, 4097, torch.float16, "online_softmax") == "online_block"


def _holds_sixteen(op: str, dtype: torch.dtype) -> bool:
    """Whether this GPU launches the cluster tier's 16-block clusters of `op` (the non-portable
    size), with 512 threads and a sixteenth of a float32 row of 262144 a block (64 KiB in the
    forward, 128 KiB of y and dy in the backward)."""
    from bwbench.cuda import softmax as s
    from bwbench.cuda.loader import allow_all_dynamic_shared_memory, cpp_type, load, max_active_clusters
    from bwbench.cuda.softmax import dispatch as d

    if torch.cuda.get_device_capability() < (9, 0):
        return False
    direction, algorithm, _ = s.OPERATIONS[op]
    ctype = cpp_type(dtype)
    module = load((s.FORWARD_SOURCES if direction == "forward" else s.BACKWARD_SOURCES)[ctype])
    pack = d.pack_elements(d.ITEMSIZE[ctype], True)
    name = d.kernel_name(ctype, algorithm, direction, d.TierChoice("cluster", block=512, pack=pack, cluster=16))
    kernel = module.kernel(name)
    allow_all_dynamic_shared_memory(kernel)
    return max_active_clusters(kernel, 16, 512, (64 if direction == "forward" else 128) * 1024) > 0


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("size", [2, 4, 8, 16])
@pytest.mark.parametrize("cols", [33, 4097, 100003])
def test_forced_cluster_sizes(op, size, cols):
    """cluster= splits the row over that many blocks, down to slices with no pack at all (33
    columns in sixteen), odd widths and rows that start mid-pack included, every element right
    with poisoned outputs; a size this GPU cannot hold is refused, not run."""
    from bwbench.cuda import softmax as s
    from bwbench.cuda.softmax.launch import row_layout

    dtype = torch.float16
    for rows, layout in ((7, "contiguous"), (7, "offset")):
        inputs = _inputs(op, rows, cols, dtype, seed=cols + size)
        laid = {k: _layout(v, layout) for k, v in inputs.items()}
        out = _poisoned_out(rows, cols, dtype, layout)
        pack, starts_aligned, dense = row_layout(tuple(laid.values()) + (out,))
        try:
            plan = s.plan_launch(op, rows, cols, dtype, aligned=pack > 1, starts_aligned=starts_aligned, dense=dense,
                                 cluster=size)
        except ValueError as err:
            assert "no cluster" in str(err) or "clusters" in str(err), err
            pytest.skip(f"this GPU cannot run clusters of {size}: {err}")
        assert plan.tier == "cluster" and plan.choice.cluster == size
        result = _function(op)(**laid, out=out, cluster=size)
        assert result is out
        _assert_close(out, _reference(op, inputs), op, dtype, f"{op} ({rows}, {cols}) in {size} {layout}")


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=_name)
@pytest.mark.parametrize("packs", [1024, 1030])
def test_cluster_slices_turned_at_sector_boundaries(op, dtype, packs):
    """A slice whose first pack starts a 32-byte sector is read and written turned by a pack, its
    last entry wrapping round to the first pack: rows on a sector boundary and 16 bytes past one,
    slices of an even and an odd number of packs (1030 packs in 2, 4 and 8), a partial last pack
    (3 columns short), every element right with poisoned outputs."""
    from bwbench.cuda.softmax.launch import row_layout

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("no thread-block clusters before sm_90")
    per_pack = 16 // torch.tensor([], dtype=dtype).element_size()
    for cols in (packs * per_pack, packs * per_pack - 3):
        for size in (2, 4, 8):
            for rows, layout in ((5, "contiguous"), (5, "sector")):
                inputs = _inputs(op, rows, cols, dtype, seed=cols + size)
                laid = {k: _layout(v, layout) for k, v in inputs.items()}
                out = _poisoned_out(rows, cols, dtype, layout)
                assert row_layout(tuple(laid.values()) + (out,))[0] == per_pack
                assert _function(op)(**laid, out=out, cluster=size) is out
                _assert_close(out, _reference(op, inputs), op, dtype,
                              f"{op} {_name(dtype)} ({rows}, {cols}) in {size} {layout}")


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("dtype,cols", [(torch.float32, 262144), (torch.float32, 262147), (torch.float16, 262144),
                                        (torch.bfloat16, 262144), (torch.bfloat16, 300007), (torch.float32, 300007),
                                        (torch.float32, 400009)])
def test_sixteen_block_clusters_at_long_rows(op, dtype, cols):
    """Rows whose eighths leave one block an SM (or fit none) take clusters of 16 blocks where the
    GPU launches them and sixteenths leave two blocks an SM (the backward's, which stride over the
    rows loading the next while they store, at one block an SM too, where they leave at most
    three blocks an SM), or, float32 rows of 1-1.2 MB,
    sixteenths holding part of each slice in registers (forward: 3 or 5 packs a thread, four blocks
    an SM; backward: 4 of y and of dy, two), and 16-bit backward rows of 512 KiB, sixteenths holding
    2 packs of y and of dy (four an SM): odd widths and rows that start mid-pack included, 133
    rows (rows whose starts, and so slices, change from row to row), every element right with
    poisoned outputs."""
    if not _holds_sixteen(op, dtype):
        pytest.skip("this GPU launches no clusters of 16 blocks")
    backward = "backward" in op
    # 16-bit forward rows of 512-600 KiB keep eighths (three blocks an SM), and float32 rows of
    # 1-1.2 MB sixteenths with part of each slice in registers; float32 backward sixteenths of y
    # and dy of 195 KiB leave one, which the striding backward takes, and forward ones of 98 KiB
    # two, cached whole. 16-bit backward sixteenths of y and dy of 64 KiB hold 2 packs of each a
    # thread (four blocks an SM); of 73 KiB (300007 columns) they stay cached (three either way)
    fp32 = dtype == torch.float32
    expected = 16 if backward or fp32 else 8
    if fp32:
        in_registers = 0 if cols > 300007 else 4 if backward else 3 if cols <= 262147 else 5
    else:
        in_registers = 2 if backward and cols <= 262147 else 0
    for rows, plan, check in _long_row_cases(op, cols, dtype):
        assert plan.tier == "cluster" and plan.choice.cluster == expected, plan
        assert plan.choice.cluster_regs == in_registers, plan
        if backward and rows == 133 and (fp32 or not in_registers):  # at most three blocks an SM
            assert plan.launch.grid[0] < rows * 16, "the backward's clusters of 16 stride over the rows"
        elif backward and rows == 133:  # 16-bit held sixteenths, four an SM
            assert plan.launch.grid[0] == rows * 16, "a cluster a row"
        check()


def _long_row_cases(op: str, cols: int, dtype: torch.dtype):
    """For 3 and 133 contiguous rows and 5 offset rows (starting mid-pack): (rows, the launcher's
    plan, a check that runs the op into a poisoned output and compares it with the reference)."""
    from bwbench.cuda import softmax as s
    from bwbench.cuda.softmax.launch import row_layout

    for rows, layout in ((3, "contiguous"), (133, "contiguous"), (5, "offset")):
        inputs = _inputs(op, rows, cols, dtype, seed=cols + rows)
        laid = {k: _layout(v, layout) for k, v in inputs.items()}
        out = _poisoned_out(rows, cols, dtype, layout)
        pack, starts_aligned, dense = row_layout(tuple(laid.values()) + (out,))
        plan = s.plan_launch(op, rows, cols, dtype, aligned=pack > 1, starts_aligned=starts_aligned, dense=dense)

        def check(laid=laid, out=out, inputs=inputs, rows=rows, layout=layout):
            assert _function(op)(**laid, out=out) is out
            _assert_close(out, _reference(op, inputs), op, dtype, f"{op} {_name(dtype)} ({rows}, {cols}) {layout}")

        yield rows, plan, check


@pytest.mark.parametrize("op", ["softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=_name)
@pytest.mark.parametrize("cols", [128256, 131071])
def test_backward_eighths_holding_packs_in_registers(op, dtype, cols):
    """16-bit backward rows whose eighths of y and dy leave three blocks an SM cached whole (about
    116k-145k columns) hold 2 packs of each a thread in registers, four an SM: odd widths, rows
    that start mid-pack, 133 rows (slices that move from row to row), poisoned outputs."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("no thread-block clusters before sm_90")
    for _, plan, check in _long_row_cases(op, cols, dtype):
        assert plan.tier == "cluster" and plan.choice.cluster == 8 and plan.choice.cluster_regs == 2, plan
        check()


@pytest.mark.parametrize("op", ["softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("cols", [160001, 200003])
def test_float32_backward_sixteenths_holding_packs_at_two_blocks_an_sm(op, cols):
    """float32 backward rows whose sixteenths of y and dy leave two blocks an SM cached whole (about
    155k-227k columns) hold 4 packs of each a thread of 512 in registers, two an SM by their
    registers, and stride over the rows: odd widths, rows that start mid-pack, 133 rows, poisoned
    outputs."""
    if not _holds_sixteen(op, torch.float32):
        pytest.skip("this GPU launches no clusters of 16 blocks")
    for rows, plan, check in _long_row_cases(op, cols, torch.float32):
        assert plan.tier == "cluster" and plan.choice.cluster == 16 and plan.choice.cluster_regs == 4, plan
        if rows == 133:
            assert plan.launch.grid[0] < rows * 16, "the backward's clusters of 16 stride over the rows"
        check()


@pytest.mark.parametrize("op", ["softmax", "softmax_backward", "online_softmax"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
def test_auto_dispatch_agrees_with_the_pure_rule(op, dtype):
    """plan_launch's choice is choose_tier's on this GPU's occupancy numbers, at the sweep's cols."""
    from bwbench.cuda import softmax as s
    from bwbench.cuda.softmax import dispatch as d
    from bwbench.cuda.loader import allow_all_dynamic_shared_memory, cpp_type, load, max_active_blocks_per_sm

    direction, algorithm, key = s.OPERATIONS[op]
    ctype = cpp_type(dtype)
    itemsize = d.ITEMSIZE[ctype]
    th = s.DEFAULT_THRESHOLDS[key]
    device = torch.cuda.current_device()
    for cols in [2**k for k in range(5, 17)] + [31, 197, 1000, 1023, 4097, 50257, 151936]:
        pack = d.pack_elements(itemsize, True)
        span = d.span_cols(cols, pack, cols % pack == 0)
        plan = s.plan_launch(op, 49152, cols, dtype)
        if key == "online":
            assert plan.choice == d.choose_online(span, pack, th)
            continue
        module = load((s.FORWARD_SOURCES if direction == "forward" else s.BACKWARD_SOURCES)[ctype])
        one_pass = th.one_pass and direction == "forward"
        smem_kernel = module.kernel(d.kernel_name(ctype, algorithm, direction,
                                                  d.TierChoice("smem", block=128, one_pass=one_pass, pack=pack)))
        limit = allow_all_dynamic_shared_memory(smem_kernel, device)
        share = th.partial_cache_share if cols % pack == 0 else 0.0  # partly cached: whole packs only
        smem = d.cache_bytes(direction, span, itemsize, pack, limit, share)
        table = {size: (max_active_blocks_per_sm(smem_kernel, size, smem, device) if smem <= limit else 0)
                 for size in d.BLOCK_SIZES}
        partial = smem < d.smem_bytes(direction, span, itemsize, pack)
        cluster = None

        def resident(shape):  # as the plan asks: the occupancy query, shared memory raised first
            kernel = module.kernel(d.kernel_name(ctype, algorithm, direction, shape.choice(pack)))
            allow_all_dynamic_shared_memory(kernel, device)
            return max_active_blocks_per_sm(kernel, shape.threads, shape.smem, device)

        if torch.cuda.get_device_capability(device) >= (9, 0) and th.cluster_below_smem_blocks:
            cluster = d.cluster_shape(span, pack, itemsize, direction, limit, th.cluster_min_blocks_per_sm,
                                      resident=resident)
            if cluster is not None and cluster[0] > d.PORTABLE_CLUSTER and not _holds_sixteen(op, dtype):
                cluster = d.cluster_shape(span, pack, itemsize, direction, limit, th.cluster_min_blocks_per_sm,
                                          largest=d.PORTABLE_CLUSTER, resident=resident)
        tile_kernel = module.kernel(d.kernel_name(ctype, algorithm, direction, d.TierChoice("tile", pack=pack)))
        tile = d.tile_shape(49152, cols, itemsize, direction, th.tile_bytes,
                            torch.cuda.get_device_properties(device).multi_processor_count,
                            allow_all_dynamic_shared_memory(tile_kernel, device))
        assert plan.choice.partial == (partial and plan.tier == "smem")
        expected = d.choose_tier(span, pack, direction=direction,
                                                                    smem_blocks_per_sm=table, thresholds=th,
                                                                    cluster=cluster, tile=tile,
                                                                    row_bytes=cols * itemsize)
        if expected.tier == "cluster":  # the plan may take a smaller block that keeps more resident
            assert plan.block <= expected.block
            expected = replace(expected, block=plan.block)
        assert replace(plan.choice, partial=False) == expected
        assert plan.grid >= 1 and plan.block in (128, 256, 512, 1024)


@pytest.mark.parametrize("op", ["softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("dtype,cols", [(torch.float32, 32768), (torch.float32, 30001), (torch.float32, 40000),
                                        (torch.float16, 65536), (torch.bfloat16, 60001)])
def test_backward_caches_part_of_a_row_too_long_for_shared_memory(op, dtype, cols):
    """Rows whose y and dy exceed a block's shared memory: the shared-memory tier caches the
    first packs and reads the rest twice (rows of whole packs; others take the cluster tier where
    the GPU launches clusters, else the uncached tier); every element still right, with poisoned
    outputs."""
    from bwbench.cuda import softmax as s
    from bwbench.cuda.softmax import dispatch as d
    from bwbench.cuda.loader import cpp_type

    itemsize = d.ITEMSIZE[cpp_type(dtype)]
    for rows in (3, 133):
        inputs = _inputs(op, rows, cols, dtype, seed=cols + rows)
        plan = s.plan_launch(op, rows, cols, dtype)
        if cols % (16 // itemsize):
            clusters = torch.cuda.get_device_capability() >= (9, 0)
            assert plan.tier == ("cluster" if clusters else "uncached"), plan
        else:
            assert plan.tier == "smem" and plan.choice.partial, plan
            assert 0 < plan.smem < d.smem_bytes("backward", cols, itemsize) and plan.kernel_name.startswith("softmax_grad_partial<")
        out = torch.full((rows, cols), float("nan"), dtype=dtype, device="cuda")
        _function(op)(**inputs, out=out)
        _assert_close(out, _reference(op, inputs), op, dtype, f"{op} {_name(dtype)} ({rows}, {cols}) partly cached")


# ---------------------------------------------------------------------------------------------
# Grid-stride loops, 64-bit row offsets, numerics, API behaviour
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op,tier,cols", [
    ("softmax", "warp", 256), ("softmax", "warp", 32), ("softmax", "smem", 2048), ("log_softmax", "registers", 4096), ("log_softmax", "uncached", 2048),
    ("softmax_backward", "warp", 64), ("softmax_backward", "smem", 2048), ("log_softmax_backward", "uncached", 2048),
    ("online_softmax", "online_warp", 1000), ("online_softmax", "online_block", 2048),
])
def test_grid_stride_over_more_rows_than_the_grid(op, tier, cols):
    from bwbench.cuda import softmax as s

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = sms * 16 * 64 + 5  # more rows than one wave of any of these launches covers
    inputs = _inputs(op, rows, cols, torch.float16, seed=99)
    plan = s.plan_launch(op, rows, cols, torch.float16, tier=tier, grid_waves=1)
    per_launch = plan.grid * (plan.block // plan.choice.warp.group * plan.choice.warp.rows_per_access
                              if plan.choice.warp else 1)
    assert per_launch < rows, "the grid covers every row at once: the loop is not exercised"
    out = _function(op)(**inputs, tier=tier, grid_waves=1)
    _assert_close(out, _reference(op, inputs), op, torch.float16, f"{op} {tier} rows={rows}")


@pytest.mark.parametrize("op,rows,cols,tier", [
    ("softmax", (1 << 21) + 3, 1024, "warp"),
    ("log_softmax", (1 << 16) + 3, 1 << 15, "smem"),
    ("softmax", (1 << 16) + 3, 1 << 15, "uncached"),
    ("softmax_backward", (1 << 21) + 3, 1024, "warp"),
])
def test_beyond_int32_elements(op, rows, cols, tier):
    """rows * cols > 2^31: 64-bit row offsets (half: 4 GiB per tensor)."""
    need = rows * cols * 2 * (4 if "backward" in op else 3) + (2 << 30)
    free, _ = torch.cuda.mem_get_info()
    if free < need:
        pytest.skip(f"needs about {need / 2**30:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")
    assert rows * cols > 2**31
    gen = torch.Generator(device="cuda").manual_seed(5)
    if "backward" in op:
        inputs = {"y": torch.rand(rows, cols, generator=gen, device="cuda", dtype=torch.float16),
                  "dy": torch.randn(rows, cols, generator=gen, device="cuda", dtype=torch.float16)}
    else:
        inputs = {"x": torch.randn(rows, cols, generator=gen, device="cuda", dtype=torch.float16)}
    out = _function(op)(**inputs, tier=tier, grid_waves=1)
    for start in (0, rows // 2, rows - 5):  # the last rows lie past element 2^31
        part = {k: v[start:start + 5] for k, v in inputs.items()}
        _assert_close(out[start:start + 5], _reference(op, part), op, torch.float16, f"{op} rows {start}..")
    del out, inputs
    torch.cuda.empty_cache()


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "online_softmax"])
@pytest.mark.parametrize("cols", [33, 1000, 4097])
def test_large_magnitudes_and_masked_rows(op, cols, dtype):
    """Values far beyond exp's range (only right if the max is subtracted) and rows whose first
    entries are -inf (masked attention scores: no NaN may appear)."""
    tiers = ONLINE_TIERS if op == "online_softmax" else [t for t in FORWARD_TIERS if "rows" not in t]
    x = (_random(64, cols, seed=cols, scale=60.0)).to(dtype)
    if dtype == torch.float32:
        x[0, 0] = 1000.0
    x[1, : cols // 2 + 1] = float("-inf")
    x[2, 1::2] = float("-inf")
    ref = _reference("log_softmax" if op == "log_softmax" else "softmax", {"x": x})
    for tier in tiers:
        overrides = _overrides(op, tier)
        try:
            y = _function(op)(x, **overrides)
        except ValueError as exc:  # warp tiers at 4097 columns (fitted: past 384), registers tier without 16-byte packs
            assert any(m in str(exc) for m in ("warp tier", "fitted warp shape", "registers tier")), str(exc)
            continue
        finite = torch.isfinite(ref)
        assert torch.equal(torch.isfinite(y), finite), f"{op} {tier}: non-finite pattern differs"
        _assert_close(torch.where(finite, y.double(), 0.0).to(dtype), torch.where(finite, ref, 0.0), op, dtype,
                      f"{op} [{tier}] large/masked {_name(dtype)} cols={cols}")


def test_rejects_bad_inputs():
    from bwbench.cuda.softmax import log_softmax_backward, softmax, softmax_backward

    with pytest.raises(ValueError, match="2-D"):
        softmax(torch.randn(2, 3, 4, device="cuda"))
    with pytest.raises(ValueError, match=r"contiguous rows.*\.contiguous\(\)"):
        softmax(torch.randn(8, 8, device="cuda").t())
    with pytest.raises(ValueError, match="CUDA"):
        softmax(torch.randn(8, 8))
    with pytest.raises(ValueError, match="float16"):
        softmax(torch.randn(8, 8, device="cuda", dtype=torch.float64))
    with pytest.raises(ValueError, match="dy must match y"):
        softmax_backward(torch.randn(8, 8, device="cuda"), torch.randn(8, 9, device="cuda"))
    with pytest.raises(ValueError, match="dy must match y"):
        log_softmax_backward(torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda").half())
    with pytest.raises(ValueError, match="out must have"):
        softmax(torch.randn(8, 8, device="cuda"), out=torch.empty(8, 9, device="cuda"))
    with pytest.raises(ValueError, match="tier must be"):
        softmax(torch.randn(8, 8, device="cuda"), tier="in_l2")


def test_empty_and_single_column():
    from bwbench.cuda.softmax import log_softmax, softmax, softmax_backward

    assert softmax(torch.empty(0, 5, device="cuda")).shape == (0, 5)
    assert softmax(torch.empty(5, 0, device="cuda")).shape == (5, 0)
    x = torch.randn(300, 1, device="cuda", dtype=torch.float16)
    assert torch.equal(softmax(x), torch.ones_like(x))
    assert torch.equal(log_softmax(x), torch.zeros_like(x))
    assert torch.equal(softmax_backward(torch.ones_like(x), x), torch.zeros_like(x))


def test_broadcast_rows_with_zero_stride():
    """An expanded tensor (row stride 0) is a valid row-strided input."""
    from bwbench.cuda.softmax import softmax

    row = torch.randn(1, 1000, device="cuda", dtype=torch.float16)
    x = row.expand(64, 1000)
    _assert_close(softmax(x), torch.softmax(x.double(), -1), "softmax", torch.float16, "expanded rows")


def test_runs_on_the_current_stream_and_in_a_cuda_graph():
    from bwbench.cuda.softmax import softmax, softmax_backward

    x = torch.randn(300, 4096, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = softmax(x)
        dx = softmax_backward(y, x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    _assert_close(y, torch.softmax(x.double(), -1), "softmax", torch.float16, "side stream")

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = softmax(x)
        dx = softmax_backward(y, x)
    for seed in (6, 8):
        x.copy_(_random(300, 4096, seed=seed).half())
        y.fill_(float("nan"))
        dx.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _assert_close(y, torch.softmax(x.double(), -1), "softmax", torch.float16, f"graph replay seed {seed}")
        ref = _reference("softmax_backward", {"y": y, "dy": x})
        _assert_close(dx, ref, "softmax_backward", torch.float16, f"graph replay backward seed {seed}")


def test_kernels_do_not_spill_on_this_gpu():
    from bwbench.cuda import softmax as s
    from bwbench.cuda.loader import load

    for source in list(s.FORWARD_SOURCES.values()) + list(s.BACKWARD_SOURCES.values()) + [s.FAMILY_NAIVE]:
        module = load(source)
        for name in module.names:
            attrs = module.kernel(name).attributes()
            assert attrs["local_size_bytes"] == 0, f"{name} uses local memory: {attrs}"


# ---------------------------------------------------------------------------------------------
# The new suites' implementations at odd shapes (what the harness check does)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("suite_name", ["softmax", "log_softmax", "softmax_backward"])
def test_suite_implementations_match_the_reference_at_odd_shapes(suite_name, dtype):
    from bwbench.check import compare, poison_allocator
    from bwbench.discovery import get_suite
    from bwbench.suite import Skip

    suite = get_suite(suite_name)
    generator = torch.Generator(device="cuda")
    # The implementations under test must be right; baselines (naive, cuDNN, torch, peers) outside
    # tolerance are timed and shown as inexact by a run, not failed, so they are not asserted here.
    names = [n for n, impl in suite.implementations.items() if not impl.is_baseline]
    for case in suite.cases([dtype], {"rows": [1, 7, 256], "cols": [1, 33, 1000, 1024, 4097]}):
        generator.manual_seed(zlib.crc32(case.id.encode()))  # the same inputs in every process
        inputs = suite.make_inputs(case, generator)
        reference = suite.compute_reference(**inputs)
        for name in names:
            try:
                fn = suite.implementations[name].build(case)
                poison_allocator(reference, case.torch_dtype)
                out = fn(**inputs)
            except Skip:
                continue
            check = compare(out, reference, suite.tolerance(dtype))
            assert check.passed, f"{suite_name}/{name} {case}: {check.message}"


@pytest.mark.parametrize("suite_name", ["log_softmax", "softmax_backward"])
def test_compiled_baselines_pass_the_check(suite_name):
    from bwbench.check import compare
    from bwbench.discovery import get_suite

    suite = get_suite(suite_name)
    (case,) = suite.cases(["float16"], {"rows": [64], "cols": [1000]})
    generator = torch.Generator(device="cuda").manual_seed(3)
    inputs = suite.make_inputs(case, generator)
    fn = suite.implementations["compiled"].build(case)
    check = compare(fn(**inputs), suite.compute_reference(**inputs), suite.tolerance("float16"))
    assert check.passed, check.message


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward"])
@pytest.mark.parametrize("cols", [1000, 1023, 4097])
def test_repeated_calls_reuse_their_launch_and_stay_right(op, cols):
    """Calls without out= remember their launch by the inputs' dtype, shape, strides and offset
    within 16 bytes; a later call with another offset or shape plans afresh. Every result right."""
    from bwbench.cuda.softmax import launch

    fn = _function(op)
    for layout in ("contiguous", "offset", "contiguous", "offset"):
        inputs = _inputs(op, 7, cols, torch.float16, seed=cols + len(layout))
        laid = {k: _layout(v, layout) for k, v in inputs.items()}
        result = fn(**laid)
        torch.cuda.synchronize()
        _assert_close(result, _reference(op, inputs), op, torch.float16, f"{op} ({7}, {cols}) {layout} repeated")
        assert launch._signature(op, tuple(laid.values())) in launch._CALLS


@pytest.mark.parametrize("op,rows,cols", [("softmax_backward", 49152, 31), ("log_softmax_backward", 1000, 197),
                                          ("softmax", 1024, 65537), ("log_softmax", 64, 100003),
                                          ("softmax", 64, 50257), ("softmax_backward", 64, 50257)])
def test_first_use_timing_keeps_a_candidate_and_stays_right(op, rows, cols):
    """Shapes whose plan leaves a second tier to time (odd dense backward rows the warp tier holds;
    rows cached at two blocks an SM or fewer, forward and backward, where the GPU has clusters):
    the first call times both and keeps one, every call right with poisoned outputs, and later
    calls run the kept tier."""
    from bwbench.cuda import softmax as s
    from bwbench.cuda.softmax import which_tier

    dtype = torch.float16
    plan = s.plan_launch(op, rows, cols, dtype, dense=True)
    if cols > 32768 and torch.cuda.get_device_capability() < (9, 0):  # the cached block's rival is the cluster
        assert plan.alternatives == ()
    else:  # odd backward rows the warp tier holds also time the flat tier and one element a lane, the
        # 197-column backward a wide shape
        if cols > 32768:  # the cached block, the cluster in the rule's size and the other sizes that fit
            assert [c.tier for c in plan.candidates][:2] == ["smem", "cluster"], plan
        else:
            assert len(plan.candidates) == {31: 4, 197: 5}[cols], plan
    inputs = _inputs(op, rows, cols, dtype, seed=rows + cols)
    reference = _reference(op, inputs)
    out = _poisoned_out(rows, cols, dtype, "contiguous")
    assert _function(op)(**inputs, out=out) is out
    _assert_close(out, reference, op, dtype, f"{op} ({rows}, {cols}) first call")
    kept = which_tier(next(iter(inputs.values())), op)
    assert kept in {c.tier for c in plan.candidates}
    again = _function(op)(**inputs)
    _assert_close(again, reference, op, dtype, f"{op} ({rows}, {cols}) after timing")
    assert which_tier(next(iter(inputs.values())), op) == kept


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("tier", ["warp_fit", "warp_wide"])
@pytest.mark.parametrize("cols", [31, 40, 127, 129, 197, 300, 577, 640])
def test_fitted_warp_shapes_at_odd_widths(op, dtype, cols, tier):
    """Groups under a warp with several packs a lane (the fitted shapes), forced: two or three packs
    a lane loaded whole and masked (warp_fit), four or five with the partial head and tail left to
    their owner lanes (warp_wide), rows starting mid-pack, poisoned outputs, every layout."""
    from bwbench.cuda.softmax import dispatch as d
    from bwbench.cuda.softmax.launch import row_layout

    direction = "backward" if "backward" in op else "forward"
    family = d.FIT_FAMILY[tier]
    for rows in (1, 7, 130):
        inputs = _inputs(op, rows, cols, dtype, seed=rows * 31 + cols)
        reference = _reference(op, inputs)
        for layout in LAYOUTS:
            laid = {k: _layout(v, layout) for k, v in inputs.items()}
            out = _poisoned_out(rows, cols, dtype, layout)
            pack, starts_aligned, _ = row_layout(tuple(laid.values()) + (out,))
            if d.fit_shape(d.span_cols(cols, pack, starts_aligned), pack, direction, family=family) is None:
                with pytest.raises(ValueError, match="no fitted warp shape"):
                    _function(op)(**laid, out=out, tier=tier)
                continue
            assert _function(op)(**laid, out=out, tier=tier) is out
            _assert_close(out, reference, op, dtype, f"{op} [{tier}] {_name(dtype)} ({rows}, {cols}) {layout}")


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("rows,cols", [(49152, 127), (3001, 197), (130, 577), (7, 1023), (33, 1024), (5, 1025)])
def test_one_element_a_lane_on_aligned_rows(op, dtype, rows, cols):
    """The warp tier's one-element kernels, which the first call times against the packed shapes on
    odd rows, forced on tensors that would move in packs: every layout, poisoned outputs, the
    reference; past the one-element warp shapes (1025 columns) a clear error."""
    from bwbench.cuda.softmax import dispatch as d

    direction = "backward" if "backward" in op else "forward"
    inputs = _inputs(op, rows, cols, dtype, seed=rows + 3 * cols)
    reference = _reference(op, inputs)
    for layout in LAYOUTS:
        laid = {k: _layout(v, layout) for k, v in inputs.items()}
        out = _poisoned_out(rows, cols, dtype, layout)
        if d.warp_shape(cols, 1, direction) is None:
            with pytest.raises(ValueError, match="warp tier holds at most"):
                _function(op)(**laid, out=out, tier=d.ELEMENTS_TIER)
            continue
        assert _function(op)(**laid, out=out, tier=d.ELEMENTS_TIER) is out
        _assert_close(out, reference, op, dtype, f"{op} [one element] {_name(dtype)} ({rows}, {cols}) {layout}")


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
def test_tiles_holding_rows_in_registers_give_the_same_bits(op, dtype, monkeypatch):
    """The tile tier's instances whose lanes hold their part of a row (up to 256 columns) against
    the one that reads the cached rows at each pass: the same max and sums in the same order, so
    the same bits, at odd widths and partial last tiles; and both match the reference."""
    from bwbench.cuda import row_tile
    from bwbench.cuda.softmax import launch as launcher

    fn = _function(op)
    for rows, cols in [(1001, 3), (777, 31), (300, 33), (129, 127), (1000, 129), (77, 197), (90, 255)]:
        inputs = _inputs(op, rows, cols, dtype, seed=rows + 7 * cols)
        reference = _reference(op, inputs)
        results = []
        for lane_elements in (row_tile.LANE_ELEMENTS, ()):
            monkeypatch.setattr(row_tile, "LANE_ELEMENTS", lane_elements)
            for cache in ("_PLANS", "_CALLS", "_TIMED"):
                monkeypatch.setattr(launcher, cache, {})
            out = _poisoned_out(rows, cols, dtype, "contiguous")
            try:
                got = fn(**inputs, out=out, tier="tile")
            except ValueError as exc:  # float32 rows of whole packs, or no tile at this width
                assert "tile tier needs" in str(exc), str(exc)
                break
            torch.cuda.synchronize()
            _assert_close(got, reference, op, dtype, f"{op} tile lanes {lane_elements} ({rows}, {cols})")
            results.append(got.clone())
        if len(results) == 2:
            assert torch.equal(results[0], results[1]), f"{op} ({rows}, {cols}) {_name(dtype)}: tiles differ"


@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("op", ["softmax_backward", "log_softmax_backward"])
def test_flat_tiles_at_odd_widths(op, dtype, monkeypatch):
    """The flat tier over many tiles, each instance (packs a thread) forced in turn: odd widths
    whose rows start at every offset within a pack, a partial last tile, tiles strided over a small
    grid (grid_waves=1), rows one element past a pack boundary; outputs poisoned, and the same bits
    from run to run (each row's segments add in a fixed order)."""
    from bwbench.cuda.softmax import dispatch as d
    from bwbench.cuda.softmax import launch as launcher

    fn = _function(op)
    itemsize = torch.tensor([], dtype=dtype).element_size()
    cases = [(4099, 17), (3001, 31), (1300, 33), (777, 127), (515, 197), (257, 300), (130, 577), (65, 1023),
             (33, 6000 // itemsize)]
    for packs_per_thread in d.FLAT_PACKS_PER_THREAD:
        monkeypatch.setattr(d, "FLAT_PACKS_PER_THREAD", (packs_per_thread,))
        for cache in ("_PLANS", "_CALLS", "_TIMED"):
            monkeypatch.setattr(launcher, cache, {})
        for rows, cols in cases:
            if cols * itemsize < 16:
                continue
            inputs = _inputs(op, rows, cols, dtype, seed=rows + 11 * cols)
            reference = _reference(op, inputs)
            for layout in ("contiguous", "offset"):
                laid = {k: _layout(v, layout) for k, v in inputs.items()}
                what = f"{op} [flat, {packs_per_thread} packs] {_name(dtype)} ({rows}, {cols}) {layout}"
                plan = launcher.plan_launch(op, rows, cols, dtype, starts_aligned=layout == "contiguous" and
                                            cols * itemsize % 16 == 0, dense=True, tier="flat")
                assert plan.kernel_name.endswith(f", {packs_per_thread}>"), what
                results = []
                for grid_waves in (None, 1, None):
                    out = _poisoned_out(rows, cols, dtype, layout)
                    assert fn(**laid, out=out, tier="flat", grid_waves=grid_waves) is out
                    torch.cuda.synchronize()
                    _assert_close(out, reference, op, dtype, what)
                    results.append(out.clone())
                assert torch.equal(results[0], results[2]), f"{what}: runs differ"
