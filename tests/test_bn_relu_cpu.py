"""CPU checks of the bn_relu suite: float64 references against torch autograd, byte models against
hand counts, launch plans, the kernels' index walks (mirrored in NumPy), input errors, and the
suite's output check on CPU tensors standing in for right and wrong outputs."""

from __future__ import annotations

import types

import importlib.util

import numpy as np
import pytest
import torch

import bwbench.cuda.bn_relu as bn_relu_package
from bwbench.cuda.bn_relu import launch as _launch
from bwbench.cuda.bn_relu import plan as _plan
from bwbench.cuda.bitmask import unpack_bits
from bwbench.discovery import get_suite
from bwbench.suite import Case, SelectionError


def _suite_reference():
    import importlib

    from bwbench.discovery import _package_for
    from bwbench.paths import suites_dir

    package = _package_for(suites_dir())
    return importlib.import_module(f"{package}._bn_relu_reference")


bn_relu = types.SimpleNamespace(**{k: v for m in (_plan, _launch, _suite_reference()) for k, v in vars(m).items()
                                   if not k.startswith("__")})
"""The family's plan, launcher and the suite's references under one name (the tests' view)."""


def _module():
    from bwbench.discovery import _package_for
    from bwbench.paths import suites_dir

    package = _package_for(suites_dir())
    spec = importlib.util.spec_from_file_location(f"{package}._bn_relu_test_suite", suites_dir() / "bn_relu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _case(direction="forward", variant="bn_relu", shape=(3, 37, 9, 11), layout="NCHW", dtype="float32"):
    return Case("bn_relu", {"direction": direction, "variant": variant, "shape": shape, "layout": layout}, dtype)


def _autograd(x, gamma, beta, eps, z, dy):
    """torch's own float64 BatchNorm (training) + [add] + ReLU and its autograd backward."""
    x = x.double().detach().requires_grad_()
    g = gamma.double().detach().requires_grad_()
    b = beta.double().detach().requires_grad_()
    zz = z.double().detach().requires_grad_() if z is not None else None
    pre = torch.nn.functional.batch_norm(x, None, None, g, b, training=True, eps=eps)
    if zz is not None:
        pre = pre + zz
    y = torch.relu(pre)
    y.backward(dy.double())
    return y.detach(), pre.detach(), x.grad, g.grad, b.grad, (zz.grad if zz is not None else None)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_references_match_torch_autograd_float64(residual, layout):
    gen = torch.Generator().manual_seed(5)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    shape = (3, 5, 4, 7)
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3 + 1).contiguous(memory_format=fmt)
    gamma, beta = torch.randn(5, generator=gen) + 1, torch.randn(5, generator=gen)
    z = torch.randn(shape, generator=gen, dtype=torch.float64) if residual else None
    dy = torch.randn(shape, generator=gen, dtype=torch.float64)
    y_t, pre_t, dx_t, dg_t, db_t, dz_t = _autograd(x, gamma, beta, 1e-5, z, dy)

    y, pre, mean, invstd = bn_relu.forward_reference(x, gamma, beta, 1e-5, z)
    torch.testing.assert_close(y, y_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(pre, pre_t, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mean, x.mean(dim=(0, 2, 3)), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(invstd, 1 / torch.sqrt(x.var(dim=(0, 2, 3), unbiased=False) + 1e-5), rtol=1e-12, atol=0)

    out = bn_relu.backward_reference(dy, pre > 0, x, mean, invstd, gamma, residual)
    torch.testing.assert_close(out[0], dx_t, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out[-2], dg_t, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out[-1], db_t, rtol=1e-10, atol=1e-12)
    if residual:
        torch.testing.assert_close(out[1], dz_t, rtol=0, atol=0)


def test_memory_order_and_layout():
    x = torch.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2).float()
    assert bn_relu.layout_of(x) == "NCHW"
    cl = x.contiguous(memory_format=torch.channels_last)
    assert bn_relu.layout_of(cl) == "NHWC"
    # memory order of a channels_last tensor is its storage order
    assert torch.equal(bn_relu.memory_order(cl), torch.as_strided(cl, (cl.numel(),), (1,)))
    assert torch.equal(bn_relu.memory_order(x), x.reshape(-1))
    with pytest.raises(ValueError, match="contiguous \\(NCHW\\) or channels_last"):
        bn_relu.layout_of(x.transpose(2, 3))
    with pytest.raises(ValueError, match="4-D"):
        bn_relu.layout_of(torch.zeros(3, 4))


def test_launchers_refuse_bad_input_clearly():
    x = torch.zeros(2, 3, 4, 4)
    g = torch.ones(3)
    with pytest.raises(ValueError, match="CUDA tensor"):
        bn_relu.bn_relu_forward(x, g, g, 1e-5)
    with pytest.raises(ValueError, match="dtype"):
        bn_relu._check_data(torch.zeros(2, 3, 4, 4, dtype=torch.int32), "x")


# ----------------------------------------------------------------------------------------------
# Byte models
# ----------------------------------------------------------------------------------------------


def test_byte_models_by_hand():
    suite = get_suite("bn_relu")
    impls = suite.implementations
    n, c = 32 * 64 * 112 * 112, 64
    for dtype, s in (("float16", 2), ("float32", 4)):
        fwd = _case("forward", "bn_relu", (32, 64, 112, 112), "NHWC", dtype)
        add = _case("forward", "bn_add_relu", (32, 64, 112, 112), "NHWC", dtype)
        bwd = _case("backward", "bn_relu", (32, 64, 112, 112), "NHWC", dtype)
        bwd_add = _case("backward", "bn_add_relu", (32, 64, 112, 112), "NHWC", dtype)
        m = n // 8
        # optimized: x twice + y + mask (+ z) + gamma, beta, mean, invstd
        assert suite.traffic_of(impls["optimized"], fwd).total == 3 * n * s + m + 16 * c
        assert suite.traffic_of(impls["optimized"], add).total == 4 * n * s + m + 16 * c
        # backward: (dy, mask, x) twice, dx (+ dz); mean, invstd, gamma read; dgamma, dbeta written
        assert suite.traffic_of(impls["optimized"], bwd).total == 5 * n * s + 2 * m + 20 * c
        assert suite.traffic_of(impls["optimized"], bwd_add).total == 6 * n * s + 2 * m + 20 * c
        # torch: BN 3ns, relu_ 2ns (+ add_ 3ns); backward 3ns + 5ns
        assert suite.traffic_of(impls["torch"], fwd).total == 5 * n * s + 16 * c
        assert suite.traffic_of(impls["torch"], add).total == 8 * n * s + 16 * c
        assert suite.traffic_of(impls["torch"], bwd).total == 8 * n * s + 20 * c
        assert suite.traffic_of(impls["torch"], bwd_add).total == 8 * n * s + 20 * c
        assert suite.traffic_of(impls["cudnn"], fwd) == suite.compute_traffic(fwd)  # x twice, the two-pass model
    # the ResNet shapes reach the 64 MB target size in float16 except the 7x7 stage
    sizes = {shape: suite.compute_traffic(_case(shape=shape, dtype="float16")).total for shape in _module().SHAPES}
    assert sizes[(32, 64, 112, 112)] > 64e6 and sizes[(32, 256, 56, 56)] > 64e6 and sizes[(32, 2048, 7, 7)] < 64e6


def test_suite_wiring():
    suite = get_suite("bn_relu")
    assert list(suite.axes) == ["direction", "variant", "shape", "layout"]
    assert set(suite.implementations) == {"optimized", "torch", "cudnn"}
    assert {i.kind for i in suite.implementations.values()} == {"cuda", "torch", "cudnn"}
    assert len(suite.cases()) == 2 * 2 * 3 * 2  # float16 by default
    assert len(suite.cases(["float16", "float32"], quick=True)) == 2 * 2 * 2 * 2 * 2
    assert all("mask" in i.description or "reserve" in i.description or "keeps" in i.description.lower()
               for i in suite.implementations.values())
    with pytest.raises(SelectionError, match="at least 2 values"):
        suite.cases(axis_values={"shape": [(1, 3, 1, 1)]})
    with pytest.raises(SelectionError, match="bfloat16"):
        suite.cases(["bfloat16"])


def test_cudnn_skips_what_it_cannot_fuse():
    from bwbench.suite import Skip

    impl = get_suite("bn_relu").implementations["cudnn"]
    with pytest.raises(Skip, match="reserve"):
        impl.build(_case("backward", layout="NHWC", dtype="float16"))
    from bwbench.cuda.cudnn import CudnnBatchNormRelu, CudnnUnavailable

    with pytest.raises(CudnnUnavailable, match="NHWC"):
        CudnnBatchNormRelu((2, 8, 4, 4), torch.float16, 1e-5, False, "NCHW")
    with pytest.raises(CudnnUnavailable, match="float16"):
        CudnnBatchNormRelu((2, 8, 4, 4), torch.float32, 1e-5, False, "NHWC")


# ----------------------------------------------------------------------------------------------
# Launch plans and the kernels' index walks, mirrored in NumPy
# ----------------------------------------------------------------------------------------------


def test_barrier_buffer_layout_matches_the_kernels():
    """The host sizes the grid barrier's buffer (counters, generation, the NHWC forward's ready
    flags) from constants that bn_relu.cu defines on its side."""
    import re

    from bwbench.cuda.loader import source_files

    source = "\n".join(path.read_text() for path in source_files("bn_relu.cu"))  # the .cu and its headers

    def constant(name: str) -> str:
        return re.search(rf"constexpr int {name} = ([^;]+);", source).group(1)

    gap = int(constant("kBarrierGap"))
    assert bn_relu.BARRIER_WORDS == 3 * gap + 1  # three arrival counters, then the generation
    assert constant("kReadyFlags") == "4 * kBarrierGap" and bn_relu.READY_FLAGS_AT == 4 * gap
    assert bn_relu.READY_FLAGS_AT >= bn_relu.BARRIER_WORDS
    assert int(constant("kMergeGroup")) == bn_relu.MERGE_GROUP
    assert int(constant("kMergeRound")) == bn_relu.MERGE_ROUND
    assert int(constant("kChannelsPerRound")) == bn_relu.CHANNELS_PER_ROUND


def test_reduction_grid_never_spills_into_a_second_wave():
    wave = 132 * 8
    for c in (64, 256, 2048, 37):
        (gx, gy), tx = bn_relu.reduction_grid("NCHW", 32, c, 3136, 8, wave)
        assert gx == c and tx == 1 and (gx * gy <= wave or gy == 1)
    (gx, gy), tx = bn_relu.reduction_grid("NHWC", 32, 64, 12544, 8, wave)
    assert tx == 8 and gx == 1 and gx * gy <= wave
    (gx, gy), tx = bn_relu.reduction_grid("NHWC", 32, 2048, 49, 8, wave)
    assert tx == 32 and gx == 8 and gx * gy <= wave


def test_one_launch_path_applies_only_where_blocks_own_whole_mask_words_and_fit_at_once():
    wave = 132 * 4
    # NCHW: H*W a multiple of 32 (56x56 = 98 words a plane); 28x28 = 784 is not
    assert bn_relu.fused_grid("NCHW", 32, 256, 56 * 56, 8, True, wave) == bn_relu.reduction_grid("NCHW", 32, 256, 3136, 8, wave)
    assert bn_relu.fused_grid("NCHW", 32, 256, 28 * 28, 8, True, wave) is None
    assert bn_relu.fused_grid("NCHW", 32, 256, 56 * 56, 8, False, wave) is None  # no 16-byte packs
    assert bn_relu.fused_grid("NCHW", 32, 1024, 64, 8, True, wave) is None  # 1024 channel blocks > 528 resident
    # NHWC: C a multiple of 32
    for c in (32, 64, 256, 2048):
        (gx, gy), tx = bn_relu.fused_grid("NHWC", 32, c, 49, 8, True, wave)
        assert gx * gy <= wave and tx % 4 == 0  # a mask word's 4 lanes share a row
    assert bn_relu.fused_grid("NHWC", 32, 48, 3136, 8, True, wave) is None


@pytest.mark.parametrize("c", [64, 256, 2048, 48, 1000])
def test_nhwc_apply_grid_keeps_each_thread_on_its_channels(c):
    for pack in (8, 4):
        numel = 32 * c * 56 * 56
        blocks = bn_relu.apply_blocks("NHWC", numel, c, pack, True, 132 * 8)
        assert (blocks * bn_relu.BLOCK * pack) % c == 0


def _nchw_walk(n, c, hw, v, splits):
    """Offsets bn_stats_nchw / bn_grad_nchw visit for each channel (the kernel's loop in NumPy)."""
    per_channel, block = n * hw, bn_relu.BLOCK
    seen = {}
    for ch in range(c):
        offs = []
        for s in range(splits):
            starts = (s * block + np.arange(block)) * v
            for j0 in range(0, per_channel, splits * block * v):
                j = starts + j0
                j = j[j < per_channel]
                plane = j // hw
                base = (plane * c + ch) * hw + (j - plane * hw)
                offs.append((base[:, None] + np.arange(v)).ravel())
        seen[ch] = np.sort(np.concatenate(offs))
    return seen


@pytest.mark.parametrize("shape,v", [((3, 5, 4, 6), 8), ((3, 37, 9, 11), 1), ((2, 4, 8, 8), 4)])
def test_nchw_reduction_walk_covers_each_channel_once(shape, v):
    n, c, h, w = shape
    (gx, gy), _ = bn_relu.reduction_grid("NCHW", n, c, h * w, v, 16)
    idx = np.arange(n * c * h * w).reshape(n, c, h * w)
    for ch, offs in _nchw_walk(n, c, h * w, v, gy).items():
        assert np.array_equal(offs, np.sort(idx[:, ch, :].ravel()))


@pytest.mark.parametrize("shape,v", [((3, 16, 5, 7), 8), ((2, 37, 3, 5), 1), ((2, 2048, 2, 2), 8), ((4, 12, 3, 3), 4)])
def test_nhwc_reduction_walk_covers_each_channel_once(shape, v):
    n, c, h, w = shape
    rows = n * h * w
    (tiles, splits), tx = bn_relu.reduction_grid("NHWC", n, c, h * w, v, 16)
    ty = bn_relu.BLOCK // tx
    count = np.zeros((rows, c), dtype=int)
    for bx in range(tiles):
        for s in range(splits):
            for t in range(bn_relu.BLOCK):
                c0 = (bx * tx + t % tx) * v
                if c0 >= c:
                    continue
                for r in range(s * ty + t // tx, rows, splits * ty):
                    count[r, c0:c0 + v] += 1
    assert (count == 1).all()


@pytest.mark.parametrize("c,hw,pack", [(2048, 49, 8), (1024, 196, 8), (64, 49, 4), (16, 9, 8), (12, 6, 4),
                                         (1000, 15, 4), (8, 255, 8)])
def test_plane_group_spans_whole_packs_within_a_block(c, hw, pack):
    group = bn_relu.plane_group(c, hw, pack)
    assert group is not None and 0 < group <= c
    assert (group * hw) % pack == 0 and (c * hw) % pack == 0  # every group starts and ends on a pack
    assert group * hw <= bn_relu.BLOCK * pack  # at most one pack a thread
    assert group == c or (group + pack) * hw > bn_relu.BLOCK * pack  # as large as a block holds


@pytest.mark.parametrize("c,hw,pack", [(256, 196, 4), (64, 3136, 8), (37, 99, 8), (30, 49, 4), (8, 257, 8),
                                         (24, 1, 8), (12, 6, 8)])
def test_plane_group_leaves_whole_pack_planes_and_misfits_to_the_channel_walk(c, hw, pack):
    # planes of whole packs keep the per-channel walk; C off the group unit, a unit of channels
    # wider than a block, or planes under a pack (a pack over three planes or more), has no group
    assert bn_relu.plane_group(c, hw, pack) is None


def test_group_grid_fills_one_wave_with_image_splits():
    assert bn_relu.group_grid(32, 1024, 10, 660) == (103, 6)
    assert bn_relu.group_grid(32, 2048, 40, 660) == (52, 12)
    assert bn_relu.group_grid(2, 2048, 40, 660) == (52, 2)  # no more splits than images
    assert bn_relu.group_grid(4, 70000, 8, 660) == (8750, 1)


def _group_walk(n, c, hw, v, group, splits):
    """(offset, channel the kernel credits it to) for every element bn_stats_nchw_groups visits: thread
    t's pack holds channel j0 of the group for its first `split` elements, j0 + 1 after
    (bnr::span_channels)."""
    image_packs = c * hw // v
    out = []
    for g in range(-(-c // group)):
        c0 = g * group
        channels = min(group, c - c0)
        packs = channels * hw // v
        for s in range(splits):
            for t in range(packs):
                j0 = min(t * v // hw, channels - 1)
                split = min(v, (j0 + 1) * hw - t * v)
                for img in range(s, n, splits):
                    p = img * image_packs + c0 * hw // v + t
                    out += [(p * v + k, c0 + j0 + (k >= split)) for k in range(v)]
    return np.array(out)


@pytest.mark.parametrize("shape,v", [((3, 64, 7, 7), 8), ((5, 26, 14, 14), 8), ((2, 24, 3, 3), 8),
                                     ((7, 12, 2, 3), 4), ((4, 20, 7, 7), 4)])
def test_nchw_group_walk_covers_each_element_once_in_its_own_channel(shape, v):
    n, c, h, w = shape
    group = bn_relu.plane_group(c, h * w, v)
    groups, splits = bn_relu.group_grid(n, c, group, 16)
    walk = _group_walk(n, c, h * w, v, group, splits)
    assert np.array_equal(np.sort(walk[:, 0]), np.arange(n * c * h * w))
    assert np.array_equal(walk[:, 1], (walk[:, 0] // (h * w)) % c)


# ----------------------------------------------------------------------------------------------
# The suite's output check
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
def test_forward_check_accepts_right_and_rejects_wrong(layout, variant):
    mod = _module()
    case = _case("forward", variant, (3, 37, 9, 11), layout, "float32")
    inputs = mod.inputs(case, torch.Generator().manual_seed(11))
    y, bits, mean, invstd = mod.reference(**inputs)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    right = (y.float().contiguous(memory_format=fmt), bits, mean.float(), invstd.float())
    ok, message = mod.check(case, inputs, right)
    assert ok, message
    assert ok and "mask == (pre > 0)" in message
    # torch's format: the kept y stands for the mask
    assert mod.check(case, inputs, (right[0], right[0], right[2], right[3]))[0]
    # a flipped mask bit far from zero fails
    _, pre, _, _ = bn_relu.forward_reference(inputs["x"], inputs["gamma"], inputs["beta"], 1e-5, inputs.get("z"))
    far = int((bn_relu.memory_order(pre).abs() > 0.1).nonzero()[0, 0])
    wrong = bits.clone()
    wrong[far // 8] ^= 1 << (far % 8)
    ok, message = mod.check(case, inputs, (right[0], wrong, right[2], right[3]))
    assert not ok and "mask" in message
    # padding bits must be zero
    n = inputs["x"].numel()
    padded = bits.clone()
    padded[-1] |= 0x80
    assert n % 8 and not mod.check(case, inputs, (right[0], padded, right[2], right[3]))[0]
    # wrong statistics, y poisoned, wrong arity
    assert not mod.check(case, inputs, (right[0], bits, right[2] + 1e-3, right[3]))[0]
    assert not mod.check(case, inputs, (right[0], bits, right[2], right[3] * (1 + 1e-4)))[0]
    y_bad = right[0].clone()
    y_bad[0, 0, 0, 1] = float("nan")
    assert not mod.check(case, inputs, (y_bad, bits, right[2], right[3]))[0]
    assert not mod.check(case, inputs, right[:3])[0]
    # an opaque reserve space (cuDNN) is reported, not decoded
    n_bytes = (inputs["x"].numel() + 7) // 8
    ok, message = mod.check(case, inputs, (right[0], torch.zeros(1, n_bytes, dtype=torch.uint8), right[2], right[3]))
    assert ok and "not checked" in message


def test_mask_band_lets_near_zero_ties_go_either_way():
    mod = _module()
    case = _case("forward", "bn_relu", (2, 3, 4, 5), "NCHW", "float32")
    inputs = mod.inputs(case, torch.Generator().manual_seed(2))
    # make one pre-activation exactly 0: beta_c = -(x - mean) * invstd * gamma at element 0
    _, pre, mean, invstd = bn_relu.forward_reference(inputs["x"], inputs["gamma"], inputs["beta"], 1e-5)
    inputs["beta"][0] -= float(pre[0, 0, 0, 0])
    y, bits, mean, invstd = mod.reference(**inputs)
    flipped = bits.clone()
    flipped[0] ^= 1  # element 0 sits on the tie
    ok, message = mod.check(case, inputs, (y.float(), flipped, mean.float(), invstd.float()))
    assert ok, message


@pytest.mark.parametrize("variant", ["bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_backward_check_accepts_right_and_rejects_wrong(variant, layout):
    mod = _module()
    case = _case("backward", variant, (3, 37, 9, 11), layout, "float16")
    inputs = mod.inputs(case, torch.Generator().manual_seed(12))
    assert torch.equal(unpack_bits(inputs["mask"], inputs["x"].numel()), bn_relu.memory_order(inputs["y"] > 0))
    ref = mod.reference(**inputs)
    res = variant == "bn_add_relu"
    assert len(ref) == (4 if res else 3)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    dx = ref[0].half().contiguous(memory_format=fmt)
    outs = [dx, *(t.float() for t in ref[-2:])]
    if res:
        outs.insert(1, ref[1].half())
    ok, message = mod.check(case, inputs, tuple(outs))
    assert ok, message
    bad = list(outs)
    bad[-1] = bad[-1].clone()
    bad[-1][3] += 0.5  # one element's gradient more in dbeta
    assert not mod.check(case, inputs, tuple(bad))[0]
    bad = list(outs)
    bad[0] = (ref[0] * 1.01).half()
    assert not mod.check(case, inputs, tuple(bad))[0]
    if res:
        bad = list(outs)
        bad[1] = inputs["dy"]  # dz must be masked
        assert not mod.check(case, inputs, tuple(bad))[0]
    assert not mod.check(case, inputs, tuple(outs[:2]))[0]


def test_sum_tolerance_scales_with_the_terms():
    mod = _module()
    want = torch.tensor([10.0, -3.0], dtype=torch.float64)
    terms = torch.tensor([1e5, 1e5], dtype=torch.float64)
    assert mod._check_sum("dbeta", torch.tensor([10.5, -3.5]), want, terms) is None  # 0.5 < 1e-5 * 1e5
    assert mod._check_sum("dbeta", torch.tensor([12.0, -3.0]), want, terms) is not None


def test_y_allowance_covers_one_rounding_of_each_term_and_no_more():
    """An unfused float16 pipeline (BN rounded to half, then + z) passes; an error of a few of
    those roundings does not."""
    mod = _module()
    gen = torch.Generator().manual_seed(3)
    bn = torch.randn(4096, dtype=torch.float64, generator=gen) * 3
    z = torch.randn(4096, dtype=torch.float64, generator=gen) * 3
    want = (bn + z).clamp_min(0)
    unfused = (bn.half().double() + z.half().double()).half().clamp_min(0)
    terms = mod.UNIT_ROUNDOFF["float16"] * (bn.abs() + z.abs())
    tol = mod.Y_TOL["float16"]
    assert mod._compare_terms("y", unfused, want, tol, terms) is None
    assert mod._compare_terms("y", unfused, want, tol, 0.0) is not None  # cancellation needs the allowance
    off = unfused.double() + 4 * terms
    assert mod._compare_terms("y", off, want, tol, terms) is not None


def test_finalize_merges_32_channels_a_block_only_for_few_partials():
    from bwbench.cuda.bn_relu.plan import FEW_PARTIALS, finalize_grid

    assert finalize_grid(2048, 1) == (True, 2048 // 32)
    assert finalize_grid(2049, FEW_PARTIALS) == (True, 2049 // 32 + 1)
    assert finalize_grid(256, 1056) == (False, 256)


def test_nhwc_forward_scratch_holds_its_merge_and_the_tile_coefficients():
    """All of a pack's channels merged at once: 3 floats x 8 warps x tx lanes x pack channels; in
    rounds MERGE_ROUND of them, but never less than phase C's 12 bytes a channel of the tile."""
    assert bn_relu.fused_nhwc_scratch_bytes(8, 32) == 3 * 8 * 8 * 32 * 4 == 24576  # float16, C = 256
    assert bn_relu.fused_nhwc_scratch_bytes(8, 32, merge_rounds=True) == 3 * bn_relu.MERGE_ROUND * 8 * 32 * 4
    assert bn_relu.fused_nhwc_scratch_bytes(4, 64, merge_rounds=True) == 3 * bn_relu.MERGE_ROUND * 8 * 64 * 4
    for pack, tx in ((8, 1), (8, 8), (8, 32), (4, 64), (4, 2)):
        for rounds in (False, True):
            assert bn_relu.fused_nhwc_scratch_bytes(pack, tx, rounds) >= 12 * pack * tx


def test_one_launch_plan_counts_the_elements_its_cache_does_not_hold():
    """A thread's k-th pack is element first + k * step of its channel (first < step), so the
    packs in k < slots cover elements below slots * step: the rest is read again."""
    plan = bn_relu.OneLaunchPlan(grid=(64, 8), tx=1, slots=13, step=8 * 256 * 8)
    assert plan.step == bn_relu.walk_step("NCHW", 8, (64, 8), 1)
    assert plan.elements_read_again(32 * 112 * 112) == 32 * 112 * 112 - 13 * 16384  # 188416 of 401408
    assert plan.elements_read_again(13 * 16384) == 0
    assert bn_relu.OneLaunchPlan((64, 8), 1, 0, 16384).elements_read_again(1000) == 1000
    # NHWC: a step is S * (threads across rows) rows
    assert bn_relu.walk_step("NHWC", 8, (1, 396), 8) == 396 * 32


def test_optimized_forward_model_counts_x_as_the_launcher_reads_it(monkeypatch):
    """On a GPU the optimized forward's bytes take x's reads from the launcher's plan (once plus
    what its shared-memory cache does not hold); the backward and CPU-only machines keep x twice."""
    suite = get_suite("bn_relu")
    impl = suite.implementations["optimized"]
    fwd = _case("forward", "bn_add_relu", (32, 64, 112, 112), "NCHW", "float16")
    bwd = _case("backward", "bn_relu", (32, 64, 112, 112), "NCHW", "float16")
    ns = 32 * 64 * 112 * 112 * 2
    twice = suite.traffic_of(impl, fwd)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    asked = []
    monkeypatch.setattr(bn_relu_package, "forward_x_read_bytes",
                        lambda shape, dtype, layout, residual=False, device=None: asked.append((shape, layout, residual)) or ns + 1000)
    once_and_a_bit = suite.traffic_of(impl, fwd)
    assert asked == [((32, 64, 112, 112), "NCHW", True)]
    assert once_and_a_bit.read == twice.read - ns + 1000 and once_and_a_bit.write == twice.write
    assert suite.traffic_of(impl, bwd) == suite.compute_traffic(bwd)
    # the one-launch group kernels (7x7 planes) read dy, the mask and x once
    small = _case("backward", "bn_relu", (32, 2048, 7, 7), "NCHW", "float16")
    monkeypatch.setattr(bn_relu_package, "reads_once", lambda direction, shape, *a, **k: direction == "backward")
    n7 = 32 * 2048 * 49
    assert suite.traffic_of(impl, small).read == suite.compute_traffic(small).read - (2 * 2 * n7 + n7 // 8)
    assert suite.traffic_of(impl, small).write == suite.compute_traffic(small).write


def test_reads_once_only_where_a_register_kernel_may_apply():
    """NCHW planes packs divide, the NHWC backward and NHWC forwards of C no multiple of 32 never
    read once: answered before any kernel loads (no GPU here)."""
    for direction, shape, layout in (("backward", (32, 64, 112, 112), "NCHW"), ("forward", (32, 64, 7, 8), "NCHW"),
                                     ("backward", (32, 2048, 7, 7), "NHWC"), ("forward", (32, 48, 7, 7), "NHWC")):
        assert not bn_relu.reads_once(direction, shape, torch.float16, layout)


@pytest.mark.parametrize("shape,pack,wave", [((32, 2048, 7, 7), 8, 528), ((32, 512, 7, 7), 8, 528),
                                             ((32, 256, 14, 14), 8, 528), ((32, 1024, 7, 7), 4, 528),
                                             ((1, 32, 1, 1), 8, 528), ((2, 32, 33, 31), 8, 528),
                                             ((32, 2048, 7, 7), 8, 512)])
def test_nhwc_regs_plan_fits_one_wave_with_tiles_of_whole_mask_words(shape, pack, wave):
    n, c, h, w = shape
    rows = n * h * w
    tiles, splits, r = bn_relu.nhwc_regs_plan(rows, c, pack, {4: wave})
    at_once = bn_relu.BLOCK * pack // 32  # a block's rows at a time: 32 channels of a row across 32 / pack lanes
    assert tiles * 32 == c and tiles * splits <= wave  # whole mask words; resident at once
    assert splits * at_once * r >= rows  # every row held, at most r a thread
    assert splits == min(wave // tiles, -(-rows // at_once))  # as many splits as fit, none without rows
    assert (splits - 1) * at_once < rows


@pytest.mark.parametrize("shape,pack,wave", [((32, 1000, 7, 7), 8, 528),  # C no multiple of 32
                                             ((32, 1024, 14, 14), 8, 528),  # 6272 rows: 16 splits x 64 x 4 hold 4096
                                             ((32, 2048, 7, 7), 4, 528),  # float32: 8 x 32 x 4 hold 1024 of 1568
                                             ((4, 4096, 1, 1), 8, 100)])  # 128 tiles: more blocks than a wave
def test_nhwc_regs_plan_leaves_what_it_cannot_hold(shape, pack, wave):
    n, c, h, w = shape
    assert bn_relu.nhwc_regs_plan(n * h * w, c, pack, {4: wave}) is None


def test_nhwc_regs_kernels_are_declared():
    for residual in (False, True):
        for ctype in ("half_t", "float"):
            names = bn_relu.nhwc_regs_kernels(ctype, residual)
            assert set(names) == set(bn_relu.NHWC_REGS_ROWS[residual])
            assert all(name in bn_relu.KERNELS for name in names.values())


def _group_waves(direction: str = "forward", residual: bool = False, sms: int = 132) -> dict[tuple[int, int], int]:
    """(R, held) -> blocks resident, as an H100 would answer: the register instances' bounds (4
    blocks an SM at R = 4 without z, else 3) and 228 KiB of shared memory an SM, 1 KiB of it
    reserved a block beside the block's static 5136 bytes and its held packs."""
    waves = {}
    for r, held in bn_relu.group_instances(direction, residual):
        by_registers = 4 if r == 4 and not residual else 3
        by_shared = 228 * 1024 // (bn_relu.group_held_bytes(held, residual) + 5136 + 1024)
        waves[(r, held)] = sms * min(by_registers, by_shared)
    return waves


_HELD_BY_BOTH = [((32, 2048, 7, 7), 8), ((32, 512, 7, 7), 8), ((32, 256, 14, 14), 8), ((7, 2048, 5, 5), 8),
                 ((16, 64, 5, 5), 4), ((48, 2048, 7, 7), 8), ((12, 64, 3, 3), 4), ((32, 1024, 14, 14), 8),
                 ((37, 512, 14, 14), 8)]
_HELD_WITHOUT_Z = [((64, 1024, 14, 14), 8), ((96, 2048, 7, 7), 8)]  # z's packs too leave too few blocks


@pytest.mark.parametrize("shape,pack,residual", [(*case, False) for case in _HELD_BY_BOTH + _HELD_WITHOUT_Z] +
                         [(*case, True) for case in _HELD_BY_BOTH])
def test_fused_group_plan_owns_whole_mask_words_and_fits_one_wave(shape, pack, residual):
    n, c, h, w = shape
    hw = h * w
    waves = _group_waves("forward", residual)
    group, groups, splits, r, held = bn_relu.fused_group_plan(n, c, hw, pack, waves)
    assert (group * hw) % 32 == 0 and (c * hw) % 32 == 0  # every span starts and ends on a mask word
    assert group * hw <= bn_relu.BLOCK * pack and hw >= pack  # a pack a thread, two planes at most
    assert groups == -(-c // group) and groups * splits <= waves[(r, held)]  # resident at once
    assert -(-n // splits) <= r + held  # the thread's images fit its registers and shared memory
    fits = [way for way in waves if waves[way] >= groups and -(-n // min(n, waves[way] // groups)) <= sum(way)]
    assert r + held == min(sum(way) for way in fits)  # fewest images that fit
    assert held == min(way[1] for way in fits if sum(way) == r + held)  # registers first


def test_fused_group_plan_holds_images_in_shared_memory_where_registers_are_too_few():
    """ResNet-50's 14x14 stage at batch 32: 128 groups of 8 channels. Four images a thread fit
    528 blocks, 8 splits of 4 images, 1024 blocks; eight in registers fit 396, 3 splits of 11.
    Four in registers and four in shared memory (16 KiB a block) fit 4 splits, 512 blocks."""
    assert bn_relu.fused_group_plan(32, 1024, 196, 8, _group_waves()) == (8, 128, 4, 4, 4)
    assert bn_relu.group_held_bytes(4, False) == 4 * bn_relu.BLOCK * 16
    assert bn_relu.group_held_bytes(4, True) == 2 * 4 * bn_relu.BLOCK * 16
    # The backward holds none: its ways are its register instances.
    assert all(held == 0 for _, held in bn_relu.group_instances("backward", False))
    assert bn_relu.fused_group_plan(32, 1024, 196, 8, _group_waves("backward")) is None
    for (n, c, h, w), pack in _HELD_WITHOUT_Z:  # with z, twice the shared memory a held image
        assert bn_relu.fused_group_plan(n, c, h * w, pack, _group_waves("forward", True)) is None


def test_group_instances_order_fewest_images_then_registers():
    ways = bn_relu.group_instances("forward", False)
    assert ways[0] == (4, 0) and len(set(ways)) == len(ways)
    assert ways.index((8, 0)) < ways.index((4, 4)) and ways.index((4, 3)) < ways.index((8, 0))
    assert max(sum(way) for way in ways) == bn_relu.GROUP_HELD_R + bn_relu.GROUP_HELD_IMAGES["forward"]


@pytest.mark.parametrize("shape,pack", [((256, 1024, 14, 14), 8),  # 128 groups: 8 splits of 32 images exceed a wave
                                        ((32, 1000, 7, 7), 8),  # C no multiple of 32: spans off the words
                                        ((16, 333, 13, 13), 8), ((5, 24, 1, 1), 8),  # a pack over many planes
                                        ((8, 64, 7, 8), 8),  # whole packs: the per-channel one launch
                                        ((4, 64, 7, 7), 4)])  # 32 float planes of 49 exceed a block
def test_fused_group_plan_leaves_what_it_cannot_hold(shape, pack):
    n, c, h, w = shape
    assert bn_relu.fused_group_plan(n, c, h * w, pack, _group_waves()) is None


def test_group_kernels_are_declared_for_each_direction_and_instance():
    for direction in ("forward", "backward"):
        for residual in (False, True):
            for ctype in ("half_t", "float"):
                names = bn_relu.group_fused_kernels(direction, ctype, residual)
                assert set(names) == set(bn_relu.GROUP_IMAGES[(direction, residual)])
                assert all(name in bn_relu.KERNELS for name in names.values())
                held = bn_relu.group_held_kernel(direction, ctype, residual)
                assert (held is None) == (direction == "backward") and held not in names.values()
                for way in bn_relu.group_instances(direction, residual):
                    kernel = bn_relu.group_way_kernel(direction, ctype, residual, way)
                    assert kernel in bn_relu.KERNELS and (kernel == held) == (way[1] > 0)


def test_one_launch_wins_is_timed_once_and_never_during_capture(monkeypatch):
    """The first call of a shape times both paths (the faster is kept, ties to the one launch);
    later calls and graph capture time nothing."""
    monkeypatch.setattr(_launch, "_GROUP_TIMED", {})
    times = {"one": 5.0, "three": 4.0}
    timed = []
    from bwbench.cuda import autotune

    monkeypatch.setattr(autotune, "cold_launch_us", lambda fn, device: timed.append(fn()) or times[timed[-1]])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    key = _launch._group_key("forward", "half_t", False, 0, (32, 512, 7, 7))
    assert _launch._one_launch_wins(key, lambda: "one", lambda: "three", 0) is False
    assert _launch._one_launch_wins(key, lambda: "one", lambda: "three", 0) is False
    assert timed == ["one", "three"]
    times["three"] = 5.0
    other = _launch._group_key("backward", "half_t", False, 0, (32, 512, 7, 7))
    assert _launch._one_launch_wins(other, lambda: "one", lambda: "three", 0) is True  # a tie keeps one launch
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    fresh = _launch._group_key("forward", "float", True, 0, (8, 64, 5, 5))
    assert _launch._one_launch_wins(fresh, lambda: "one", lambda: "three", 0) is True
    assert fresh not in _launch._GROUP_TIMED and len(timed) == 4
