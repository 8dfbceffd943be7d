"""CPU checks of the bitmask suites: mask format, byte models, and the suites' output checks
(run on CPU tensors standing in for each implementation's outputs, right and wrong)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bwbench.cuda import bitmask
from bwbench.discovery import get_suite
from bwbench.philox import dropout_keep_numpy
from bwbench.suite import Case


def test_pack_bits_format_is_the_articles_byte_order():
    keep = torch.rand(1003, generator=torch.Generator().manual_seed(0)) > 0.5
    packed = bitmask.pack_bits(keep)
    assert packed.dtype == torch.uint8 and packed.numel() == bitmask.packed_bytes(1003) == 126
    for i in range(1003):  # element i is bit i % 8 of byte i // 8 (= bit i % 32 of word i // 32)
        assert bool((int(packed[i // 8]) >> (i % 8)) & 1) == bool(keep[i])
    assert int(packed[-1]) >> (1003 % 8) == 0  # padding bits zero
    assert torch.equal(bitmask.unpack_bits(packed, 1003), keep)
    # A view of a word-padded buffer: the optimized backward may read whole 32-bit words.
    assert packed.untyped_storage().nbytes() >= bitmask.word_bytes(1003)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 4097])
def test_pack_unpack_round_trip(n):
    keep = torch.arange(n) % 3 == 0
    assert torch.equal(bitmask.unpack_bits(bitmask.pack_bits(keep), n), keep)


def test_dropout_threshold_and_scale():
    assert bitmask.dropout_threshold(0.5) == 2**15
    assert bitmask.dropout_threshold(0.1) == round(0.1 * 2**16) == 6554
    assert bitmask.dropout_threshold(1 - 2**-16) == 2**16 - 1
    assert bitmask.dropout_scale(0.5) == 2.0
    with pytest.raises(ValueError):
        bitmask.dropout_threshold(1.0)
    with pytest.raises(ValueError, match="too close to 1"):
        bitmask.dropout_threshold(1 - 2**-18)


def _case(suite, **params):
    dtype = params.pop("dtype", "float16")
    return Case(suite.name, params, dtype)


def test_relu_byte_models():
    suite = get_suite("relu")
    impls = suite.implementations
    n = 16 * 32 * 112 * 112
    fwd = _case(suite, direction="forward", size=(16, 32, 112, 112))
    bwd = _case(suite, direction="backward", size=(16, 32, 112, 112))
    assert suite.traffic_of(impls["optimized"], fwd).total == 2 * n * 2 + n // 8
    assert suite.traffic_of(impls["bytemask"], fwd).total == 2 * n * 2 + n // 8
    assert suite.traffic_of(impls["torch"], fwd).total == 2 * n * 2
    assert suite.traffic_of(impls["optimized"], bwd).total == 2 * n * 2 + n // 8
    assert suite.traffic_of(impls["torch"], bwd).total == 3 * n * 2


def test_dropout_byte_models():
    suite = get_suite("dropout")
    impls = suite.implementations
    n = 1 << 20
    fwd = _case(suite, direction="forward", p=0.5, n=n, dtype="float32")
    assert suite.traffic_of(impls["optimized"], fwd).total == 2 * n * 4 + n // 8
    assert suite.traffic_of(impls["boolmask"], fwd).total == 2 * n * 4 + n
    assert suite.traffic_of(impls["torch"], fwd).total == 2 * n * 4 + n


def test_mask_memory_next_to_torchs():
    """What each implementation keeps for the backward: 1 bit an element against torch's byte
    (dropout: 8x less) or torch's y (ReLU and BN+ReLU: 16x less in float16)."""
    n = 16 * 32 * 112 * 112
    relu, dropout, bn_relu = (get_suite(name) for name in ("relu", "dropout", "bn_relu"))
    for direction in ("forward", "backward"):
        case = _case(relu, direction=direction, size=(16, 32, 112, 112))
        kept = {name: relu.mask_bytes_of(impl, case) for name, impl in relu.implementations.items()}
        assert kept == {"optimized": n // 8, "bytemask": n // 8, "torch": 2 * n}
    case = _case(dropout, direction="forward", p=0.5, n=(1 << 28) + 3)
    kept = {name: dropout.mask_bytes_of(impl, case) for name, impl in dropout.implementations.items()}
    assert kept == {"optimized": (1 << 25) + 1, "boolmask": (1 << 28) + 3, "torch": (1 << 28) + 3}
    case = _case(bn_relu, direction="forward", variant="bn_relu", shape=(32, 64, 112, 112), layout="NHWC",
                 dtype="float32")
    m = 32 * 64 * 112 * 112
    kept = {name: bn_relu.mask_bytes_of(impl, case) for name, impl in bn_relu.implementations.items()}
    assert kept == {"optimized": m // 8, "torch": 4 * m, "cudnn": None}  # cuDNN's reserve size: its check message


def _module(name):
    import importlib.util

    from bwbench.paths import suites_dir

    spec = importlib.util.spec_from_file_location(f"_bitmask_test_{name}", suites_dir() / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_relu_check():
    relu = _module("relu")
    case = _case(relu.suite, direction="forward", size=(1001,))
    inputs = relu.inputs(case, torch.Generator().manual_seed(1))
    x = inputs["x"]
    y = torch.clamp_min(x, 0)
    bits = bitmask.pack_bits(x > 0)
    assert relu.check(case, inputs, (y, bits))[0]
    assert relu.check(case, inputs, (y, y))[0]  # torch keeps y
    wrong = bits.clone()
    wrong[3] ^= 1
    ok, message = relu.check(case, inputs, (y, wrong))
    assert not ok and "mask" in message
    padded = bits.clone()
    padded[-1] |= 0x80  # 1001 % 8 == 1: bit 7 of the last byte is padding
    assert not relu.check(case, inputs, (y, padded))[0]
    y_bad = y.clone()
    y_bad[5] = float("nan")
    assert not relu.check(case, inputs, (y_bad, bits))[0]
    # The reference agrees with the check.
    ref_y, ref_bits = relu.reference(**inputs)
    assert torch.equal(ref_y, y) and torch.equal(ref_bits, bits)

    bcase = _case(relu.suite, direction="backward", size=(4, 33))
    b = relu.inputs(bcase, torch.Generator().manual_seed(2))
    dx = torch.where(b["y"] > 0, b["dy"], torch.zeros_like(b["dy"]))
    assert relu.check(bcase, b, dx)[0]
    assert torch.equal(relu.reference(**b), dx)
    assert torch.equal(bitmask.unpack_bits(b["mask"], 132), (b["y"] > 0).reshape(-1))
    assert not relu.check(bcase, b, b["dy"])[0]


def test_dropout_check():
    drop = _module("dropout")
    n, p = 4099, 0.1
    case = _case(drop.suite, direction="forward", p=p, n=n, dtype="float32")
    inputs = drop.inputs(case, torch.Generator().manual_seed(3))
    keep = inputs["keep"]
    assert np.array_equal(keep.numpy(), dropout_keep_numpy(n, p, drop.SEED, drop.OFFSET))
    x = inputs["x"]
    y = (x * keep.float() * np.float32(1 / (1 - p))).to(torch.float32)
    assert drop.check(case, inputs, (y, bitmask.pack_bits(keep)))[0]               # optimized
    assert drop.check(case, inputs, (y, keep.to(torch.uint8)))[0]                  # boolmask
    # torch: a different but plausible mask passes statistically, with y consistent with it.
    other = torch.rand(n, generator=torch.Generator().manual_seed(9)) >= p
    y_other = x * other.float() / (1 - p)
    assert drop.check(case, inputs, (y_other, other))[0]
    # ... but as a uint8 (this project's kernels) it must be the Philox mask exactly.
    assert not drop.check(case, inputs, (y_other, other.to(torch.uint8)))[0]
    # y inconsistent with its own mask fails; a mask keeping far too much fails.
    assert not drop.check(case, inputs, (x.clone(), other))[0]
    everything = torch.ones(n, dtype=torch.bool)
    assert not drop.check(case, inputs, (x / (1 - p), everything))[0]
    ref_y, ref_bits = drop.reference(**inputs)
    assert torch.equal(ref_bits, bitmask.pack_bits(keep))
    torch.testing.assert_close(ref_y, y.double(), rtol=3e-7, atol=0)

    bcase = _case(drop.suite, direction="backward", p=0.5, n=1000, dtype="float16")
    b = drop.inputs(bcase, torch.Generator().manual_seed(4))
    dx = (b["dy"].float() * b["keep"].float() * 2).half()
    assert drop.check(bcase, b, dx)[0]
    assert not drop.check(bcase, b, b["dy"])[0]
    assert torch.equal(bitmask.unpack_bits(b["bits"], 1000), b["keep"])
    assert math.isclose(float(b["p"]), 0.5)


def test_narrow_counter_limit_keeps_every_group_in_one_word():
    """Below the limit the kernels pass the group index i // 8 as one 32-bit counter word; lanes of
    the last chunk reach up to a chunk (32 lanes x 8 elements) past n."""
    from bwbench.cuda.bitmask import plan

    last_group = (plan.NARROW_COUNTER_LIMIT - 1 + 32 * 8) // (128 // plan.KEEP_BITS)
    assert last_group < 2**32
    assert not plan.wide_counter(plan.NARROW_COUNTER_LIMIT - 1) and plan.wide_counter(plan.NARROW_COUNTER_LIMIT)


def test_dropout_grid_grows_with_the_tensor():
    """One wave of blocks for small tensors, two from 16 MB, a thread per chunk from 48 MB."""
    from bwbench.cuda.bitmask import plan

    mb = 1 << 20
    assert [plan.dropout_waves(n * mb) for n in (1, 8, 15)] == [1, 1, 1]
    assert [plan.dropout_waves(n * mb) for n in (16, 32, 47)] == [2, 2, 2]
    assert [plan.dropout_waves(n * mb) for n in (48, 64, 2048)] == [None, None, None]
    assert plan.DROPOUT_TWO_WAVES_MIN_BYTES < plan.DROPOUT_CHUNK_GRID_MIN_BYTES


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_dropout_check_fails_a_result_in_another_dtype_than_the_case(direction):
    """The suite's own check compared y (or dx) after promotion to float64, so a float32 result of
    a float16 case passed; it must be the case's dtype, as the harness's own check now demands."""
    suite = get_suite("dropout")
    case = _case(suite, direction=direction, p=0.5, n=4096, dtype="float16")
    inputs = suite.make_inputs(case, torch.Generator().manual_seed(0))
    reference = suite.compute_reference(**inputs)
    right = (reference[0].half(), inputs["keep"]) if direction == "forward" else reference.half()
    wide = (reference[0].float(), inputs["keep"]) if direction == "forward" else reference.float()
    assert suite.output_check(case, inputs, right)[0]
    passed, message = suite.output_check(case, inputs, wide)
    assert not passed and "output 0 is float32, expected float16" in message
