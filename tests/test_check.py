import math

import pytest
import torch

from bwbench.check import compare
from bwbench.suite import DEFAULT_TOLERANCES, Tolerance


def softmax_pair(dtype, rows=64, cols=1000):
    x = torch.randn(rows, cols, dtype=torch.float32).to(dtype)
    return torch.softmax(x.float(), -1).to(dtype), torch.softmax(x.double(), -1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_correctly_rounded_outputs_pass_the_dtype_tolerance(dtype):
    out, ref = softmax_pair(getattr(torch, dtype))
    check = compare(out, ref, DEFAULT_TOLERANCES[dtype])
    assert check.passed, check.message
    assert check.max_abs_err < 1e-2


def test_a_single_wrong_element_fails_with_its_index():
    out, ref = softmax_pair(torch.float16)
    out = out.clone()
    out[3, 7] = out[3, 7] * 1.05
    check = compare(out, ref, DEFAULT_TOLERANCES["float16"])
    assert not check.passed
    assert check.worst_index == 3 * 1000 + 7
    assert "element 3007" in check.message


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_inf_never_passes(bad):
    out, ref = softmax_pair(torch.float32)
    out[-1, -1] = bad
    check = compare(out, ref, Tolerance(rtol=1.0, atol=1.0))
    assert not check.passed
    assert math.isinf(check.max_abs_err)


def test_shape_and_count_mismatches_fail():
    out, ref = softmax_pair(torch.float32)
    assert "shape" in compare(out[:, :-1], ref, DEFAULT_TOLERANCES["float32"]).message
    assert "2 outputs" in compare((out, out), ref, DEFAULT_TOLERANCES["float32"]).message
    assert not compare("nope", ref, DEFAULT_TOLERANCES["float32"]).passed


def test_comparison_is_chunked_without_changing_the_answer(monkeypatch):
    import bwbench.check as check_module

    out, ref = softmax_pair(torch.float16, rows=8, cols=333)
    out[7, 300] = 0.5
    whole = compare(out, ref, DEFAULT_TOLERANCES["float16"])
    monkeypatch.setattr(check_module, "CHUNK_ELEMENTS", 100)
    chunked = compare(out, ref, DEFAULT_TOLERANCES["float16"])
    assert (whole.passed, whole.worst_index, whole.max_abs_err) == (chunked.passed, chunked.worst_index, chunked.max_abs_err)


def test_one_tolerance_per_output():
    y, ref_y = softmax_pair(torch.float16)
    stats = torch.randn(64, dtype=torch.float64)
    loose_stats = stats.float() * (1 + 1e-4)
    tols = (DEFAULT_TOLERANCES["float16"], Tolerance(rtol=1e-5, atol=0))
    assert not compare((y, loose_stats), (ref_y, stats), tols).passed, "statistics held to 1e-5"
    assert compare((y, stats.float()), (ref_y, stats), tols).passed
    with pytest.raises(ValueError):
        compare((y, stats), (ref_y, stats), tols[:1])
