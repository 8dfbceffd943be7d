"""GPU checks of the bn_relu kernels (kernels/bn_relu.cu) against the float64 references: odd shapes
(C not a multiple of 8, H*W odd, N = 1), both layouts, both dtypes, both variants, outputs poisoned
first, aligned and misaligned; statistics of data with a large mean; the cuDNN wrapper; and the
suite through the harness's own check. Run with `pytest -m gpu`; skips without a GPU."""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

SHAPES = [(1, 3, 1, 5), (3, 37, 9, 11), (2, 16, 4, 4), (4, 64, 7, 7), (2, 40, 28, 28), (8, 256, 14, 14),
          (2, 2048, 7, 7)]
DTYPES = ["float16", "float32"]


def _suite_module():
    """suites/bn_relu.py as discovery imports it (inside the suites' package, so its relative import
    of _bn_relu_reference resolves)."""
    from bwbench.discovery import _package_for
    from bwbench.paths import suites_dir

    return importlib.import_module(f"{_package_for(suites_dir())}.bn_relu")


MOD = _suite_module()


def _case(direction, variant, shape, layout, dtype):
    from bwbench.suite import Case

    return Case("bn_relu", {"direction": direction, "variant": variant, "shape": shape, "layout": layout}, dtype)


def _poison(n_bytes: int) -> None:
    """Hand the caching allocator blocks of 0xFF (NaN in every float format, set bits in a mask)."""
    blocks = [torch.empty(n_bytes + 4096, dtype=torch.uint8, device="cuda") for _ in range(6)]
    for b in blocks:
        b.fill_(0xFF)
    del blocks


def _inputs(case, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return MOD.inputs(case, gen)


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """The same values at an address 1 element past a 16-byte boundary, same layout."""
    from bwbench.cuda.bn_relu import layout_of

    n, c, h, w = t.shape
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:]
    if layout_of(t) == "NHWC":
        out = buf.view(n, h, w, c).permute(0, 3, 1, 2)
    else:
        out = buf.view(n, c, h, w)
    out.copy_(t)
    return out


def _reference():
    """suites/_bn_relu_reference.py, imported as the suites import it."""
    import importlib

    from bwbench.discovery import _package_for
    from bwbench.paths import suites_dir

    package = _package_for(suites_dir())
    return importlib.import_module(f"{package}._bn_relu_reference")


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_matches_reference(shape, dtype, layout, variant, misaligned):
    from bwbench.cuda.bitmask import packed_bytes
    from bwbench.cuda.bn_relu import bn_relu_forward, layout_of

    case = _case("forward", variant, shape, layout, dtype)
    inputs = _inputs(case, seed=sum(shape))
    if misaligned:
        inputs["x"] = _misaligned(inputs["x"])
        if "z" in inputs:
            inputs["z"] = _misaligned(inputs["z"])
    x = inputs["x"]
    _poison(x.numel() * 8)
    y, mask, mean, invstd = bn_relu_forward(x, inputs["gamma"], inputs["beta"], inputs["eps"], inputs.get("z"))
    torch.cuda.synchronize()
    assert layout_of(y) == layout and mask.numel() == packed_bytes(x.numel())
    ok, message = MOD.check(case, inputs, (y, mask, mean, invstd))
    assert ok, f"{case}: {message}"
    # bytes past ceil(n/8) in the last mask word are zero as well
    words = torch.empty(0, dtype=torch.uint8, device="cuda").set_(mask.untyped_storage(), 0,
                                                                  (4 * ((x.numel() + 31) // 32),))
    assert not bool(words[packed_bytes(x.numel()):].any())


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_matches_reference(shape, dtype, layout, variant, misaligned):
    from bwbench.cuda.bn_relu import bn_relu_backward

    case = _case("backward", variant, shape, layout, dtype)
    inputs = _inputs(case, seed=sum(shape) + 1)
    if misaligned:
        inputs["x"] = _misaligned(inputs["x"])
        inputs["dy"] = _misaligned(inputs["dy"])
    _poison(inputs["x"].numel() * 8)
    out = bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"], inputs["invstd"],
                           inputs["gamma"], residual=variant == "bn_add_relu")
    torch.cuda.synchronize()
    ok, message = MOD.check(case, inputs, out)
    assert ok, f"{case}: {message}"


# (shape, takes the one-launch path in NCHW, in NHWC): H*W % 32 == 0, C % 32 == 0 respectively.
FUSED_SHAPES = [((4, 24, 8, 8), True, False), ((3, 64, 8, 12), True, True), ((5, 32, 32, 32), True, True),
                ((2, 96, 16, 16), True, True), ((8, 256, 14, 14), False, True), ((2, 2048, 7, 7), False, True),
                ((1, 3, 1, 5), False, False)]


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,nchw,nhwc", FUSED_SHAPES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else None)
def test_one_launch_and_three_kernel_paths_both_match_reference(shape, nchw, nhwc, dtype, layout, variant, direction):
    """The fused path is taken exactly where it applies (fused=True refuses elsewhere), and both
    paths pass the suite's check on fresh inputs into poisoned outputs."""
    from bwbench.cuda.bn_relu import bn_relu_backward, bn_relu_forward

    case = _case(direction, variant, shape, layout, dtype)
    inputs = _inputs(case, seed=sum(shape) + 7)
    applies = nchw if layout == "NCHW" else nhwc
    if layout == "NCHW":  # or the one-launch group kernels, for planes no pack divides
        from bwbench.cuda.bn_relu import reads_once

        applies = applies or reads_once(direction, shape, getattr(torch, dtype), layout, variant == "bn_add_relu")
    for fused in (True, False):
        _poison(inputs["x"].numel() * 8)
        if direction == "forward":
            def call():
                return bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"], inputs.get("z"),
                                       fused=fused)
        else:
            def call():
                return bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"], inputs["invstd"],
                                        inputs["gamma"], residual=variant == "bn_add_relu", fused=fused)
        if fused and not applies:
            with pytest.raises(ValueError, match="one-launch path does not apply"):
                call()
            continue
        out = call()
        torch.cuda.synchronize()
        ok, message = MOD.check(case, inputs, out)
        assert ok, f"{case} fused={fused}: {message}"


@pytest.mark.parametrize("few_partials", [0, 10**9], ids=["block-per-channel", "channels-per-block"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(3, 70, 5, 7), (8, 2048, 7, 7), (2, 9, 33, 31)], ids=lambda v: "x".join(map(str, v)))
def test_both_finalize_kernels_match_reference(shape, layout, direction, few_partials, monkeypatch):
    """The three-kernel path's finalize, forced to a block per channel and to 32 channels a block
    (whatever the partial count), passes the suite's check."""
    from bwbench.cuda.bn_relu import launch as launcher
    from bwbench.cuda.bn_relu import plan as planner

    monkeypatch.setattr(planner, "FEW_PARTIALS", few_partials)
    case = _case(direction, "bn_relu", shape, layout, "float16")
    inputs = _inputs(case, seed=sum(shape) + few_partials % 97)
    _poison(inputs["x"].numel() * 8)
    if direction == "forward":
        out = launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"], fused=False)
    else:
        out = launcher.bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"], inputs["invstd"],
                                        inputs["gamma"], fused=False)
    torch.cuda.synchronize()
    ok, message = MOD.check(case, inputs, out)
    assert ok, f"{case} few_partials={few_partials}: {message}"


@pytest.mark.parametrize("from_end_min_bytes", [0, 2**62], ids=["from-end", "in-order"])
@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(3, 70, 5, 7), (4, 64, 7, 7), (2, 40, 28, 28)], ids=lambda v: "x".join(map(str, v)))
def test_both_walk_orders_of_the_separate_passes_match_reference(shape, layout, direction, variant,
                                                                 from_end_min_bytes, monkeypatch):
    """The three-kernel path's elementwise passes, walked from the end (forced for every size) and
    from the start, pass the suite's check, the scalar tail included."""
    from bwbench.cuda.bn_relu import launch as launcher
    from bwbench.cuda.bn_relu import plan as planner

    monkeypatch.setattr(planner, "FROM_END_MIN_BYTES", from_end_min_bytes)
    assert planner.walk_from_end(4) == (from_end_min_bytes == 0)
    case = _case(direction, variant, shape, layout, "float16")
    inputs = _inputs(case, seed=sum(shape) + 7)
    _poison(inputs["x"].numel() * 8)
    residual = variant == "bn_add_relu"
    if direction == "forward":
        out = launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"],
                                       z=inputs.get("z"), fused=False)
    else:
        out = launcher.bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"], inputs["invstd"],
                                        inputs["gamma"], residual=residual, fused=False)
    torch.cuda.synchronize()
    ok, message = MOD.check(case, inputs, out)
    assert ok, f"{case} from_end_min_bytes={from_end_min_bytes}: {message}"


# NCHW planes no 16-byte pack divides: N = 1, H*W under a pack, short last groups, many image splits
GROUP_SHAPES = [(1, 16, 3, 3), (5, 24, 1, 1), (7, 12, 2, 3), (67, 64, 7, 7), (3, 26, 14, 14), (2, 2048, 7, 7),
                (4, 40, 5, 5)]


@pytest.mark.parametrize("groups", [True, False], ids=["plane-groups", "channel-walk"])
@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GROUP_SHAPES, ids=lambda v: "x".join(map(str, v)))
def test_nchw_plane_groups_and_channel_walk_both_match_reference(shape, dtype, direction, variant, groups,
                                                                 monkeypatch):
    """NCHW planes that take no whole 16-byte packs, three kernels: the group reduction (with the
    elementwise passes in packs that may cross planes) and the per-channel walk it replaces both pass
    the suite's check."""
    from bwbench.cuda.bn_relu import launch as launcher
    from bwbench.cuda.bn_relu import plan as planner

    n, c, h, w = shape
    pack = 16 // torch.empty((), dtype=getattr(torch, dtype)).element_size()
    expected = planner.plane_group(c, h * w, pack)
    if groups and expected is None:
        pytest.skip(f"{dtype} planes of {h * w} take whole packs: the per-channel walk applies")
    taken = []
    monkeypatch.setattr(launcher, "plane_group", lambda *a: taken.append(planner.plane_group(*a)) or
                        (taken[-1] if groups else None))
    case = _case(direction, variant, shape, "NCHW", dtype)
    inputs = _inputs(case, seed=sum(shape) + 5)
    _poison(inputs["x"].numel() * 8)
    if direction == "forward":
        out = launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"], z=inputs.get("z"),
                                       fused=False)
    else:
        out = launcher.bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"], inputs["invstd"],
                                        inputs["gamma"], residual=variant == "bn_add_relu", fused=False)
    torch.cuda.synchronize()
    assert taken == [expected]
    ok, message = MOD.check(case, inputs, out)
    assert ok, f"{case} groups={groups}: {message}"


# The one-launch group kernels: several groups, one group, N = 2 and 67 images (R = 1), 4 and 8
# images a thread (64x2048x5x5, 48x2048x7x7 in float16), planes of 9, 25, 49, 100 and 196 values
FUSED_GROUP_SHAPES = [(67, 64, 7, 7), (2, 2048, 7, 7), (3, 96, 7, 7), (9, 64, 5, 5), (40, 32, 10, 10),
                      (6, 48, 14, 14), (12, 64, 3, 3), (64, 2048, 5, 5), (48, 2048, 7, 7),
                      (32, 1024, 14, 14), (37, 512, 14, 14), (150, 2048, 5, 5), (64, 1024, 14, 14)]
"""The last four hold images in shared memory beside the registers (the forward, float16): 4, 1, 6
and 12 of them a thread on an H100, the last split's images fewer than the others' in two."""


@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", FUSED_GROUP_SHAPES, ids=lambda v: "x".join(map(str, v)))
def test_one_launch_group_kernels_match_reference(shape, dtype, direction, variant, monkeypatch):
    """Where reads_once says so the one-launch group kernel can run (fused=None, the first-use timing
    set to keep it, and fused=True); it and the three kernels (fused=False) both pass the suite's
    check on fresh inputs into poisoned outputs."""
    from bwbench.cuda.bn_relu import launch as launcher

    residual = variant == "bn_add_relu"
    expected = launcher.reads_once(direction, shape, getattr(torch, dtype), "NCHW", residual)
    if shape == (2, 2048, 7, 7) and dtype == "float16" and not residual:
        assert expected, "the 7x7 planes of ResNet-50's last stage take one launch"
    ran = []
    run_groups = launcher._run_groups
    monkeypatch.setattr(launcher, "_run_groups", lambda *a, **k: ran.append(True) or run_groups(*a, **k))
    monkeypatch.setattr(launcher, "_one_launch_wins", lambda *a, **k: True)  # the path under test, untimed
    case = _case(direction, variant, shape, "NCHW", dtype)
    inputs = _inputs(case, seed=sum(shape) + 11)
    for fused in (None, True, False):
        if fused is True and not expected:
            continue
        _poison(inputs["x"].numel() * 8)
        ran.clear()
        if direction == "forward":
            out = launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"],
                                           z=inputs.get("z"), fused=fused)
        else:
            out = launcher.bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"],
                                            inputs["invstd"], inputs["gamma"], residual=residual, fused=fused)
        torch.cuda.synchronize()
        assert ran == ([True] if expected and fused is not False else []), (fused, ran)
        ok, message = MOD.check(case, inputs, out)
        assert ok, f"{case} fused={fused}: {message}"


def test_group_kernel_holds_images_in_shared_memory_where_registers_are_too_few():
    """ResNet-50's 14x14 stage at batch 32 takes the one launch in float16, with images of each
    thread waiting in shared memory (the check of its results is the test above)."""
    from bwbench.cuda.bn_relu import launch as launcher

    module, device = launcher.load(launcher.SOURCE), torch.cuda.current_device()
    spec = launcher.group_launch(module, "forward", "half_t", (32, 1024, 14, 14), False, device)
    assert spec is not None and spec.args[1] > 0 and spec.shared_mem == launcher.group_held_bytes(spec.args[1], False)
    assert spec.kernel == launcher.group_held_kernel("forward", "half_t", False)
    assert spec.blocks <= launcher._wave(module.kernel(spec.kernel), device, spec.shared_mem)


# The one-launch NHWC register kernel: ResNet-50's small stages (64 and 16 tiles, several splits; in
# float32 the 1568 rows of 32x2048x7x7 exceed what one wave's registers hold), one tile of 32
# channels, rows that end inside a block's rows (M = 35, 2046, 63) and inside a warp's, two rows
# (H = W = 1 would be NCHW as well), and 4x1024x8x8
NHWC_REGS_CASES = [(shape, dtype) for shape in [(32, 512, 7, 7), (32, 256, 14, 14), (1, 32, 5, 7), (2, 32, 33, 31),
                                               (1, 96, 1, 2), (9, 64, 7, 1), (4, 1024, 8, 8)] for dtype in DTYPES]
NHWC_REGS_CASES.append(((32, 2048, 7, 7), "float16"))


@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("shape,dtype", NHWC_REGS_CASES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_nhwc_register_kernel_matches_reference(shape, dtype, variant, monkeypatch):
    """Where reads_once says so the NHWC register kernel runs (fused=None, the first-use timing set
    to keep it), and it and the three kernels (fused=False) pass the suite's check on fresh inputs
    into poisoned outputs."""
    from bwbench.cuda.bn_relu import launch as launcher

    residual = variant == "bn_add_relu"
    assert launcher.reads_once("forward", shape, getattr(torch, dtype), "NHWC", residual), "small: it applies"
    ran = []
    run_regs = launcher._run_nhwc_regs
    monkeypatch.setattr(launcher, "_run_nhwc_regs", lambda *a, **k: ran.append(True) or run_regs(*a, **k))
    monkeypatch.setattr(launcher, "_one_launch_wins", lambda *a, **k: True)  # the path under test, untimed
    case = _case("forward", variant, shape, "NHWC", dtype)
    inputs = _inputs(case, seed=sum(shape) + 13)
    for fused in (None, False):
        _poison(inputs["x"].numel() * 8)
        ran.clear()
        out = launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"],
                                       z=inputs.get("z"), fused=fused)
        torch.cuda.synchronize()
        assert ran == ([True] if fused is None else []), (fused, ran)
        ok, message = MOD.check(case, inputs, out)
        assert ok, f"{case} fused={fused}: {message}"


@pytest.mark.parametrize("shape,dtype", [((256, 2048, 7, 7), "float16"), ((32, 2048, 7, 7), "float32"),
                                         ((32, 48, 7, 7), "float16"), ((2, 36, 28, 28), "float16")],
                         ids=["too-many-rows", "too-many-float-rows", "tiles-off-the-words", "packs-off-the-channels"])
def test_nhwc_register_kernel_leaves_what_it_cannot_hold(shape, dtype, monkeypatch):
    """More rows than one wave's registers hold, or C no multiple of 32: another path runs, and passes."""
    from bwbench.cuda.bn_relu import launch as launcher

    assert not launcher.reads_once("forward", shape, getattr(torch, dtype), "NHWC")
    monkeypatch.setattr(launcher, "_run_nhwc_regs", lambda *a, **k: pytest.fail("the register kernel ran"))
    case = _case("forward", "bn_relu", shape, "NHWC", dtype)
    inputs = _inputs(case, seed=sum(shape))
    _poison(inputs["x"].numel() * 8)
    out = launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"])
    torch.cuda.synchronize()
    ok, message = MOD.check(case, inputs, out)
    assert ok, f"{case}: {message}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_nhwc_register_kernel_statistics_of_data_with_a_large_mean(dtype, monkeypatch):
    """The register kernel shifts by each channel's first element too: mean 1e4, std 1."""
    from bwbench.cuda.bn_relu import launch as launcher

    forward_reference = _reference().forward_reference
    monkeypatch.setattr(launcher, "_one_launch_wins", lambda *a, **k: True)
    gen = torch.Generator(device="cuda").manual_seed(5)
    shape = (16, 64, 7, 7)
    x = (1e4 + torch.randn(*shape, generator=gen, device="cuda")).to(dtype).contiguous(memory_format=torch.channels_last)
    gamma, beta = torch.ones(64, device="cuda"), torch.zeros(64, device="cuda")
    assert launcher.reads_once("forward", shape, dtype, "NHWC")
    y, _, mean, invstd = launcher.bn_relu_forward(x, gamma, beta, 1e-5)
    _, _, m_ref, s_ref = forward_reference(x, gamma, beta, 1e-5)
    torch.testing.assert_close(mean.double(), m_ref, rtol=2e-7, atol=0)
    torch.testing.assert_close(invstd.double(), s_ref, rtol=1e-4, atol=0)


@pytest.mark.parametrize("direction,layout", [("forward", "NCHW"), ("backward", "NCHW"), ("forward", "NHWC")])
def test_first_use_timing_keeps_one_path_and_the_byte_model_follows(direction, layout, monkeypatch):
    """fused=None at a shape both paths take: the first call times the one launch against the other
    path once, keeps the faster (reads_once then says which), and every call passes the check."""
    from bwbench.cuda.bn_relu import launch as launcher

    monkeypatch.setattr(launcher, "_GROUP_TIMED", {})
    timed = []
    from bwbench.cuda import autotune

    cold = autotune.cold_launch_us
    monkeypatch.setattr(autotune, "cold_launch_us", lambda fn, device, **k: timed.append(1) or cold(fn, device, **k))
    shape = (32, 512, 7, 7)
    case = _case(direction, "bn_relu", shape, layout, "float16")
    inputs = _inputs(case, seed=29)
    for _ in range(3):
        _poison(inputs["x"].numel() * 8)
        if direction == "forward":
            out = launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"])
        else:
            out = launcher.bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"],
                                            inputs["invstd"], inputs["gamma"])
        torch.cuda.synchronize()
        ok, message = MOD.check(case, inputs, out)
        assert ok, f"{case}: {message}"
    assert len(timed) == 2, "both paths timed once, on the first call"
    (key, kept), = launcher._GROUP_TIMED.items()
    assert launcher.reads_once(direction, shape, torch.float16, layout) == kept


def test_one_launch_path_repeats_and_runs_on_two_streams():
    """The grid barrier resets itself: many launches in a row, and on a second stream (its own
    counters), keep giving the same statistics as the three-kernel path."""
    from bwbench.cuda.bn_relu import bn_relu_forward

    gen = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(4, 64, 16, 16, generator=gen, device="cuda").half()
    gamma, beta = torch.rand(64, device="cuda") + 0.5, torch.randn(64, device="cuda")
    want = bn_relu_forward(x, gamma, beta, 1e-5, fused=False)
    side = torch.cuda.Stream()
    results = []
    for i in range(200):
        if i % 2:
            with torch.cuda.stream(side):
                results.append(bn_relu_forward(x, gamma, beta, 1e-5, fused=True))
        else:
            results.append(bn_relu_forward(x, gamma, beta, 1e-5, fused=True))
    torch.cuda.synchronize()
    for y, mask, mean, invstd in results[::17] + results[-2:]:
        torch.testing.assert_close(mean, want[2], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(invstd, want[3], rtol=1e-6, atol=0)
        torch.testing.assert_close(y.float(), want[0].float(), rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("shape", [(16, 24, 30, 30), (16, 32, 32, 32), (16, 24, 7, 7), (16, 64, 5, 5)],
                         ids=["three-kernel", "one-launch", "plane-groups", "one-launch-groups"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_statistics_of_data_with_a_large_mean(layout, shape):
    """Shifted sums: a channel of mean 1e4 and std 1 keeps invstd to float32 accuracy."""
    from bwbench.cuda.bn_relu import bn_relu_forward

    forward_reference = _reference().forward_reference

    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = (1e4 + torch.randn(*shape, generator=gen, device="cuda")).contiguous(memory_format=fmt)
    gamma = torch.ones(shape[1], device="cuda")
    beta = torch.zeros(shape[1], device="cuda")
    y, _, mean, invstd = bn_relu_forward(x, gamma, beta, 1e-5)
    _, _, m_ref, s_ref = forward_reference(x, gamma, beta, 1e-5)
    torch.testing.assert_close(mean.double(), m_ref, rtol=2e-7, atol=0)  # half an ulp of 1e4 is 5e-8 relative
    torch.testing.assert_close(invstd.double(), s_ref, rtol=1e-4, atol=0)


def test_constant_channel_gives_invstd_of_eps():
    from bwbench.cuda.bn_relu import bn_relu_forward

    x = torch.full((2, 8, 5, 5), 3.25, device="cuda")
    y, mask, mean, invstd = bn_relu_forward(x, torch.ones(8, device="cuda"), torch.full((8,), 0.5, device="cuda"), 1e-5)
    assert torch.equal(mean, torch.full_like(mean, 3.25))
    torch.testing.assert_close(invstd, torch.full_like(invstd, 1e-5 ** -0.5))
    assert torch.equal(y, torch.full_like(y, 0.5)) and bool((mask[:-1] == 0xFF).all())


def test_bad_inputs_are_clear_errors():
    from bwbench.cuda.bn_relu import bn_relu_backward, bn_relu_forward

    x = torch.randn(2, 8, 4, 4, device="cuda")
    g = torch.ones(8, device="cuda")
    with pytest.raises(ValueError, match="float32 CUDA tensor of shape \\(8,\\)"):
        bn_relu_forward(x, g.half(), g, 1e-5)
    with pytest.raises(ValueError, match="must match x"):
        bn_relu_forward(x, g, g, 1e-5, z=x.half())
    with pytest.raises(ValueError, match="eps"):
        bn_relu_forward(x, g, g, 0.0)
    with pytest.raises(ValueError, match="mask"):
        bn_relu_backward(x, torch.zeros(3, dtype=torch.uint8, device="cuda"), x, g, g, g)
    with pytest.raises(ValueError, match="channels_last"):
        bn_relu_forward(x.transpose(2, 3), g, g, 1e-5)


def test_cudnn_fused_forward_matches_reference():
    from bwbench.cuda.cudnn import CudnnBatchNormRelu, CudnnUnavailable

    for variant in ("bn_relu", "bn_add_relu"):
        case = _case("forward", variant, (4, 64, 14, 14), "NHWC", "float16")
        inputs = _inputs(case, seed=9)
        try:
            bn = CudnnBatchNormRelu(case.shape, torch.float16, 1e-5, variant == "bn_add_relu", "NHWC")
            out = bn.forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs.get("z"))
        except CudnnUnavailable as exc:
            pytest.skip(f"cuDNN fused BN+ReLU unavailable: {exc}")
        torch.cuda.synchronize()
        print(f"cuDNN reserve space for {case.shape}: {bn.reserve_bytes} bytes (n/8 = {inputs['x'].numel() // 8})")
        ok, message = MOD.check(case, inputs, out)
        assert ok, message


def test_suite_passes_the_harness_check(tmp_path):
    """Every implementation of the suite passes (or is skipped with a reason) on the quick shapes."""
    from bwbench.device import query_device
    from bwbench.discovery import get_suite
    from bwbench.results import ResultsWriter, RunDocument
    from bwbench.runner import Runner, RunSettings
    from bwbench.stats import SamplingPolicy
    from bwbench.timing import Timer

    suite = get_suite("bn_relu")
    cases = suite.cases(["float16", "float32"], {"shape": [MOD.ODD, (8, 256, 14, 14)]})
    device = torch.device("cuda", torch.cuda.current_device())
    facts = query_device(device)
    timer = Timer(device, facts.l2_bytes, facts.sm_clock_max_mhz, SamplingPolicy(min_samples=3, max_seconds=0.05))
    doc = RunDocument(environment=facts.to_dict(), options={}, suites={suite.name: suite.describe()})
    runner = Runner(device, timer, ResultsWriter(tmp_path / "r.json", doc), RunSettings(), facts.peak_gbps)
    records = [r for case in cases for r in runner.run_case(suite, case, list(suite.implementations.values()))]
    failed = [(r.case, r.dtype, r.impl, r.reason) for r in records if r.status == "failed"]
    # torch's float16 backward reduces less precisely than our float32 bound at the odd shape (see
    # the suite docstring); torch is a baseline, so it is timed and marked inexact, not failed.
    print("torch inexact:", [(r.case, r.dtype, r.reason) for r in records if r.inexact])
    tolerated = [f for f in failed if f[2] == "torch" and f[1] == "float16" and "direction=backward" in f[0]]
    print("torch float16 backward outside the bound:", tolerated)
    assert [f for f in failed if f not in tolerated] == []
    ok = {(r.impl, r.dtype) for r in records if r.status == "ok"}
    assert ("optimized", "float16") in ok and ("optimized", "float32") in ok and ("torch", "float16") in ok
    skipped = {r.reason for r in records if r.status == "skipped" and r.impl == "cudnn"}
    print("cudnn skips:", skipped)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("shape", [(16, 64, 64, 64), (4, 256, 36, 36), (2, 512, 24, 24)], ids=lambda v: "x".join(map(str, v)))
def test_one_launch_nhwc_forward_merges_in_rounds_to_the_same_bits(shape, variant, dtype, monkeypatch):
    """The NHWC one-launch forward's block merge, all of a pack's channels at once or MERGE_ROUND
    a round (more x-cache slots): the same y, mask and statistics bit for bit, passing the check."""
    from bwbench.cuda.bn_relu import launch as launcher
    from bwbench.cuda.bn_relu import plan as planner

    case = _case("forward", variant, shape, "NHWC", dtype)
    inputs = _inputs(case, seed=sum(shape) + 5)
    outs = []
    for rounds in (False, True):
        monkeypatch.setattr(launcher, "PLANS", {})
        monkeypatch.setattr(launcher, "MERGE_ROUNDS_MIN_SLOTS", -(10**9) if rounds else 10**9)
        _poison(inputs["x"].numel() * 8)
        outs.append(launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"],
                                             inputs.get("z"), fused=True))
        torch.cuda.synchronize()
        (plan,) = launcher.PLANS.values()
        assert plan.merge_rounds == rounds and plan.slots >= 1
    ok, message = MOD.check(case, inputs, outs[1])
    assert ok, message
    for got, want in zip(outs[1], outs[0]):
        assert torch.equal(got, want), f"{case}: the merge in rounds differs from the merge at once"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("layout,shape", [("NHWC", (16, 64, 64, 64)), ("NHWC", (4, 256, 36, 36)),
                                          ("NCHW", (64, 64, 64, 64))], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_one_launch_forward_gives_the_same_bits_whatever_its_x_cache_holds(layout, shape, variant, dtype, monkeypatch):
    """The one-launch forward with its x cache off, holding one or three packs of each thread's
    walk (the rest read again from global memory), or all that fits: the same y, mask and
    statistics bit for bit, and they pass the suite's check. The shapes give walks of 4-32 packs."""
    from bwbench.cuda.bn_relu import launch as launcher
    from bwbench.cuda.bn_relu import plan as planner

    case = _case("forward", variant, shape, layout, dtype)
    inputs = _inputs(case, seed=sum(shape) + 3)
    real_slots = launcher.cache_slots
    outs = []
    for cap in (0, 1, 3, None):
        monkeypatch.setattr(launcher, "PLANS", {})
        def capped(kernel, device, wanted, extra=0, cap=cap):
            return real_slots(kernel, device, wanted if cap is None else min(wanted, cap), extra)

        monkeypatch.setattr(launcher, "cache_slots", capped)
        _poison(inputs["x"].numel() * 8)
        outs.append(launcher.bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"],
                                             inputs.get("z"), fused=True))
        torch.cuda.synchronize()
        (plan,) = launcher.PLANS.values()
        if cap is None:
            assert plan.slots >= 4, f"expected at least 4 cache slots at {shape}, got {plan.slots}"
    ok, message = MOD.check(case, inputs, outs[-1])
    assert ok, message
    for cap, out in zip((1, 3, None), outs[1:]):
        for got, want in zip(out, outs[0]):
            assert torch.equal(got, want), f"{case}: cache of {cap} packs differs from no cache"
