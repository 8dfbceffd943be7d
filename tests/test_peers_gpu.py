"""GPU checks of the peer baselines (Liger-Kernel, QuACK) through the suites' own implementations.

Run with `pytest -m gpu`. Each peer is built exactly as `bwbench run` builds it, fed the suite's
own random inputs, its outputs allocated from NaN-poisoned memory, and judged against the suite's
float64 reference with the suite's per-output tolerances, at odd shapes (cols = 1, 33, 1000, 1023,
4097), in float16, bfloat16 and float32. A peer that is not installed here (or cannot run on this
GPU) is skipped with the adapter's own reason.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

PEERS = ("liger", "quack")
SUITES = ("softmax", "rmsnorm", "layernorm")
DTYPES = ("float16", "bfloat16", "float32")
ODD_COLS = (1, 33, 1000, 1023, 4097)


def _case(suite: str, rows: int, cols: int, dtype: str):
    from bwbench.suite import Case

    params = {"rows": rows, "cols": cols} if suite == "softmax" else {"rows": rows, "cols": cols, "eps": 1e-5}
    return Case(suite, params, dtype)


def _build(peer: str, suite, case):
    from bwbench.suite import Skip

    try:
        return suite.implementations[peer].build(case)
    except Skip as err:
        pytest.skip(str(err))


def _run_checked(peer: str, suite_name: str, rows: int, cols: int, dtype: str):
    """Build, poison, run once and compare, as the runner does; returns the outputs."""
    from bwbench.check import as_tuple, compare, poison_allocator
    from bwbench.discovery import get_suite

    suite = get_suite(suite_name)
    case = _case(suite_name, rows, cols, dtype)
    fn = _build(peer, suite, case)
    gen = torch.Generator(device="cuda").manual_seed(rows * 100003 + cols)
    inputs = suite.make_inputs(case, gen)
    reference = suite.compute_reference(**inputs)
    poison_allocator(reference, case.torch_dtype)
    out = fn(**inputs)
    torch.cuda.synchronize()
    result = compare(out, reference, suite.tolerance(dtype))
    assert result.passed, f"{peer} on {case}: {result.message}"
    return as_tuple(out), case


def _assert_outputs_match_the_byte_model(outs, case):
    """y in the case's dtype, every statistic float32 per row: what the suite's traffic counts."""
    y, *stats = outs
    assert y.dtype == case.torch_dtype and tuple(y.shape) == (case.rows, case.cols)
    for stat in stats:
        assert stat.dtype == torch.float32 and stat.numel() == case.rows


@pytest.mark.parametrize("cols", ODD_COLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("peer", PEERS)
def test_peer_passes_the_suites_check_at_odd_shapes(peer, suite, dtype, cols):
    outs, case = _run_checked(peer, suite, 67, cols, dtype)
    _assert_outputs_match_the_byte_model(outs, case)


@pytest.mark.parametrize("cols", (1, 33, 200))
@pytest.mark.parametrize("dtype", DTYPES)
def test_liger_rms_norm_many_short_rows(dtype, cols):
    """Liger's RMSNorm takes 16 rows per program for rows of at most 256 columns when there are at
    least 32768 rows (the suite's default of 49152 does): that kernel is checked too."""
    outs, case = _run_checked("liger", "rmsnorm", 40001, cols, dtype)
    _assert_outputs_match_the_byte_model(outs, case)


@pytest.mark.parametrize("cols", (32768,))
@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("peer", PEERS)
def test_peer_long_rows(peer, suite, cols):
    outs, case = _run_checked(peer, suite, 3, cols, "float16")
    _assert_outputs_match_the_byte_model(outs, case)


def test_liger_rows_past_its_block_are_skipped_not_run():
    from bwbench.discovery import get_suite
    from bwbench.suite import Skip

    pytest.importorskip("liger_kernel")
    case = _case("layernorm", 3, 65537, "float16")
    with pytest.raises(Skip, match="at most 65536 columns"):
        get_suite("layernorm").implementations["liger"].build(case)
