"""tools/tiers.py: every softmax or norm tier forced at a shape. Its measuring needs a GPU; what it checks
before any GPU work, and its table, are tested here."""

import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture(scope="module")
def tiers():
    spec = importlib.util.spec_from_file_location("tiers", TOOLS / "tiers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiers"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_request_names_the_op_shapes_dtypes_and_tiers(tiers):
    request = tiers.parse(["softmax_backward", "--rows", "1024", "--cols", "262144, 262147", "--dtype",
                           "float32,float16", "--tiers", "cluster,uncached"])
    assert request.op == "softmax_backward" and request.rows == 1024 and request.cols == (262144, 262147)
    assert request.dtypes == ("float32", "float16") and request.tiers == ("cluster", "uncached")
    every = tiers.parse(["softmax", "--rows", "8", "--cols", "33"])
    assert every.dtypes == ("float16",) and every.tiers == tiers.OPS["softmax"][2]
    assert "registers" not in tiers.parse(["softmax_backward", "--rows", "8", "--cols", "33"]).tiers
    norm = tiers.parse(["layer_norm", "--rows", "49152", "--cols", "1023,4097", "--tiers", "tile,span_rows"])
    assert norm.op == "layer_norm" and norm.cols == (1023, 4097) and norm.tiers == ("tile", "span_rows")


def test_the_softmax_family_takes_forced_cluster_sizes(tiers):
    from bwbench.cuda.softmax import dispatch

    assert tiers.CLUSTER_SIZES == dispatch.CLUSTER_SIZES
    request = tiers.parse(["softmax", "--rows", "4096", "--cols", "128256", "--tiers", "cluster4,cluster8,cluster"])
    assert request.tiers == ("cluster4", "cluster8", "cluster")
    assert [tiers.tier_options(t) for t in ("auto", *request.tiers)] == [
        {}, {"tier": "cluster", "cluster": 4}, {"tier": "cluster", "cluster": 8}, {"tier": "cluster"}]
    assert not set(tiers.SIZED_CLUSTERS) & set(tiers.parse(["softmax", "--rows", "8", "--cols", "33"]).tiers), \
        "sized clusters run only when asked for"
    with pytest.raises(ValueError, match="--tiers takes"):
        tiers.parse(["layer_norm", "--rows", "8", "--cols", "33", "--tiers", "cluster8"])
    with pytest.raises(ValueError, match="--tiers takes"):
        tiers.parse(["softmax", "--rows", "8", "--cols", "33", "--tiers", "cluster32"])


def test_the_norm_tiers_are_the_launchers(tiers):
    from bwbench.cuda.norm import plan

    for op in tiers.NORMS:
        assert set(tiers.OPS[op][2]) == set(plan.TIERS)
    with pytest.raises(ValueError, match="--tiers takes"):
        tiers.parse(["rms_norm", "--rows", "8", "--cols", "33", "--tiers", "cluster4"])  # sized: the softmax family's


@pytest.mark.parametrize("argv,message", [
    (["softmax_forward", "--rows", "8", "--cols", "33"], "OP must be one of"),
    (["softmax", "--rows", "0", "--cols", "33"], "positive integers"),
    (["softmax", "--rows", "8,9", "--cols", "33"], "one number"),
    (["softmax", "--rows", "8", "--cols", "33,-1"], "positive integers"),
    (["softmax", "--rows", "8", "--cols", "1e3"], "positive integers"),
    (["softmax", "--rows", "8", "--cols", "33", "--dtype", "float64"], "--dtype takes"),
    (["softmax_backward", "--rows", "8", "--cols", "33", "--tiers", "registers"], "--tiers takes"),
    (["softmax", "--rows", "8", "--cols", "33", "--max-time", "0"], "--max-time must be positive"),
])
def test_bad_requests_get_one_line_and_exit_2(tiers, capsys, argv, message):
    assert tiers.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_without_a_gpu_it_says_so_before_any_work(tiers, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tiers.main(["softmax", "--rows", "8", "--cols", "33"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_the_table_has_a_row_per_measurement(tiers):
    text = tiers.markdown([["8", "33", "float16", "auto", "warp", "45.1", "900", "3.2", "1.0e-04"],
                           ["8", "33", "float16", "cluster", "–", "–", "–", "–", "cannot run: no clusters"]])
    lines = text.splitlines()
    assert lines[0].startswith("| rows | cols | dtype | forced | ran as | % of copy")
    assert len(lines) == 4 and all(line.count("|") == len(tiers.HEADER) + 1 for line in lines)
