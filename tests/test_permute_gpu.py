"""GPU checks of the permute kernels: bit-exact against x.permute(perm).contiguous().

Run with `pytest -m gpu` on a machine with a CUDA GPU; everything here skips without one. Inputs are
fresh random values (never zeros), outputs are poisoned with 0xFF bytes first, and the cases cover
odd sizes that fit no tile or vector width, size-1 dims, 5-D and 6-D permutes, misaligned pointers,
and one tensor of more than 2^31 elements on the 64-bit index path.
"""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int64]
# Bit patterns are compared through an integer view of the same width.
BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

CASES = [
    ((64, 96, 128), (1, 0, 2)),       # last dim moves whole, 16-byte units
    ((64, 96, 128), (0, 2, 1)),       # batch transpose, full tiles
    ((7, 33, 65), (0, 2, 1)),         # odd: partial tiles, no packs
    ((3, 66, 130), (0, 2, 1)),        # even: packs, partial tiles
    ((1000, 1001), (1, 0)),
    ((1001, 1000), (1, 0)),
    ((1, 1), (1, 0)),
    ((5,), (0,)),
    ((), ()),
    ((2, 3, 4), (0, 1, 2)),           # identity: a copy
    ((3, 4, 5, 6), (2, 3, 0, 1)),     # merges to a 2-D transpose
    ((1, 300, 1, 200), (2, 3, 0, 1)),  # size-1 dims around a transpose
    ((9, 1, 70, 1, 33), (2, 1, 0, 4, 3)),  # size-1 dims around a row copy
    ((4, 37, 3, 64), (0, 2, 1, 3)),   # attention-like, odd sequence
    ((5, 7, 3, 9), (3, 1, 0, 2)),     # last dim moves, two batch dims
    ((4, 6, 5, 7, 3), (4, 2, 0, 3, 1)),  # 5-D
    ((2, 3, 4, 5, 6, 7), (5, 3, 1, 4, 0, 2)),  # 6-D, last dim moves
    ((2, 3, 4, 5, 6, 8), (1, 0, 3, 2, 4, 5)),  # 6-D, last dim moves whole
    ((3, 8, 7, 8, 7, 12), (0, 1, 3, 2, 4, 5)),  # window partition
    ((2, 40, 3, 70, 2, 66), (1, 4, 5, 0, 2, 3)),  # 6-D general, tiled with batch dims
    ((2, 64, 3, 130), (3, 0, 2, 1)),  # last dim moves to the middle
    ((129, 257), (1, 0)),
    ((3, 130, 131), (0, 2, 1)),       # odd columns, full tiles
    ((2, 300, 259), (0, 2, 1)),       # the same with int8's 128-wide tiles
    ((3, 257, 5, 263), (0, 3, 2, 1)),  # odd columns under two batch dims (row starts of any parity)
]


def _random(shape, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, generator=gen, device="cuda", dtype=dtype)
    if dtype == torch.int64:
        return torch.randint(-(2**62), 2**62, shape, generator=gen, device="cuda", dtype=dtype)
    return torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)


def _poisoned(shape, dtype) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype, device="cuda")
    out.reshape(-1).view(torch.uint8).fill_(0xFF)
    return out


def _assert_bit_exact(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype and actual.is_contiguous()
    bits = BITS[actual.element_size()]
    a, e = actual.reshape(-1).view(bits), expected.reshape(-1).view(bits)
    if not torch.equal(a, e):
        bad = int((a != e).nonzero()[0, 0])
        pytest.fail(f"{what}: first difference at flat index {bad}: {int(a[bad])} != {int(e[bad])}")


@pytest.mark.parametrize("shape, perm", CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_permute_kernels_are_bit_exact(dtype, shape, perm):
    from bwbench.cuda.permute import naive_permute, permute

    x = _random(shape, dtype, seed=hash((shape, perm)) % 10**6)
    expected = x.permute(perm).contiguous()
    for name, fn in (("optimized", permute), ("naive", naive_permute)):
        out = _poisoned(expected.shape, dtype)
        y = fn(x, perm, out=out)
        assert y is out
        torch.cuda.synchronize()
        _assert_bit_exact(y, expected, f"{name} {dtype} {shape} by {perm}")
        _assert_bit_exact(fn(x, perm), expected, f"{name} {dtype} {shape} by {perm} (allocating)")


@pytest.mark.parametrize("offset", [1, 2, 3, 4, 8])
def test_misaligned_pointers_narrow_the_moves(offset):
    """A view whose data starts `offset` elements into its storage cannot take 16-byte moves or half2
    packs; the planner must notice and the result stay exact."""
    from bwbench.cuda.permute import permute, plan_for
    from bwbench.cuda.permute.plan import TilePlan

    for shape, perm in (((16, 24, 64), (1, 0, 2)), ((16, 24, 64), (0, 2, 1)), ((8, 12, 6, 32), (0, 2, 1, 3)),
                        ((4, 72, 135), (0, 2, 1))):
        n = math.prod(shape)
        storage = _random((n + offset,), torch.float16, seed=offset)
        x = storage[offset:].view(shape)
        expected = x.permute(perm).contiguous()
        out_storage = _poisoned((n + offset,), torch.float16)
        out = out_storage[offset:].view(expected.shape)
        plan = plan_for(x, perm, out)
        k = plan.kernel
        if isinstance(k, TilePlan):
            # Aligned-write tiles align their packs themselves, wherever the output starts.
            widths = (k.config.vec_read * 2, 2 if k.config.write_align else k.config.vec_write * 2)
        else:
            widths = (k.unit_bytes, k.unit_bytes)
        assert (x.data_ptr() % widths[0], out.data_ptr() % widths[1]) == (0, 0)
        permute(x, perm, out=out)
        torch.cuda.synchronize()
        _assert_bit_exact(out, expected, f"offset {offset} {shape} by {perm}")
        assert torch.all(out_storage[:offset].view(torch.int16) == -1), "wrote before the output"


@pytest.mark.parametrize("dtype", [torch.float16, torch.int8], ids=["float16", "int8"])
@pytest.mark.parametrize("shape, perm", [((3, 130, 131), (0, 2, 1)), ((2, 300, 259), (0, 2, 1)),
                                         ((3, 257, 5, 263), (0, 3, 2, 1)), ((1000, 1001), (1, 0))],
                         ids=lambda v: "x".join(map(str, v)))
def test_shifted_reads_when_forced(dtype, shape, perm):
    """Shifted 8-byte reads of rows that start anywhere (not chosen by default: they measured slower,
    see choose_tile's shifted_reads) stay exact, at every row parity and under batch dims."""
    from bwbench.cuda.permute import permute, plan_for
    from bwbench.cuda.permute.plan import choose_tile

    x = _random(shape, dtype, seed=7)
    expected = x.permute(perm).contiguous()
    k = plan_for(x, perm).kernel
    config = choose_tile(x.element_size(), k.rows, k.cols, k.batch, shifted_reads=True)
    assert config.shifted
    out = _poisoned(expected.shape, dtype)
    permute(x, perm, out=out, config=config)
    torch.cuda.synchronize()
    _assert_bit_exact(out, expected, f"shifted {dtype} {shape} by {perm}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape, perm", [((3, 130, 131), (0, 2, 1)), ((2, 300, 259), (0, 2, 1)),
                                         ((3, 257, 5, 263), (0, 3, 2, 1)), ((1000, 1001), (1, 0)),
                                         ((2, 1001, 1024), (0, 2, 1)), ((2, 40, 3, 70, 2, 66), (1, 4, 5, 0, 2, 3))],
                         ids=lambda v: "x".join(map(str, v)))
def test_aligned_writes_at_every_destination_phase(dtype, shape, perm):
    """permute_tiled_aligned (every compiled configuration that fits) writes exactly the output,
    and nothing around it, whatever the output's offset within an aligned piece."""
    from bwbench.cuda.permute import permute
    from bwbench.cuda.permute.plan import compiled_tile_configs

    x = _random(shape, dtype, seed=11)
    expected = x.permute(perm).contiguous()
    n, size = x.numel(), x.element_size()
    configs = [c for c in compiled_tile_configs() if c.write_align and c.itemsize == size]
    ran = 0
    for config in configs:
        s = config.write_align // size
        for offset in sorted({0, 1, s // 2, s - 1}):
            storage = _poisoned((n + offset + s,), dtype)
            out = storage[offset:offset + n].view(expected.shape)
            try:
                permute(x, perm, out=out, config=config)
            except ValueError:   # reads wider than the columns allow
                break
            torch.cuda.synchronize()
            _assert_bit_exact(out, expected, f"{config} offset {offset} {dtype} {shape} by {perm}")
            around = torch.cat([storage[:offset], storage[offset + n:]]).view(torch.uint8)
            assert torch.all(around == 0xFF), f"{config} offset {offset}: wrote outside the output"
            ran += 1
    assert ran


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape, perm", [((3, 72, 136), (0, 2, 1)), ((2, 64, 3, 128), (3, 0, 2, 1)),
                                         ((256, 512), (1, 0)), ((2, 40, 3, 72, 2, 64), (1, 4, 5, 0, 2, 3))],
                         ids=lambda v: "x".join(map(str, v)))
def test_wide_tiles_when_forced(dtype, shape, perm):
    """Every 16-byte-pack tile configuration is exact on full and partial tiles, under batch dims."""
    from bwbench.cuda.permute import permute
    from bwbench.cuda.permute.plan import WIDE_TILE_CONFIGS

    x = _random(shape, dtype, seed=13)
    expected = x.permute(perm).contiguous()
    configs = [c for c in WIDE_TILE_CONFIGS if c.itemsize == x.element_size()]
    assert configs
    for config in configs:
        out = _poisoned(expected.shape, dtype)
        permute(x, perm, out=out, config=config)
        torch.cuda.synchronize()
        _assert_bit_exact(out, expected, f"{config} {dtype} {shape} by {perm}")


def test_plans_take_the_article_paths():
    from bwbench.cuda.permute import plan_for

    x = torch.empty(8, 64, 128, dtype=torch.float16, device="cuda")
    assert plan_for(x, (1, 0, 2)).kernel.unit_bytes == 16
    tiled = plan_for(x, (0, 2, 1)).kernel
    assert tiled.batch_transpose and tiled.index == "int32"
    assert (tiled.config.vec_read, tiled.config.vec_write) == (4, 4)  # 8-byte half4 packs both ways


def test_bad_inputs_are_refused():
    from bwbench.cuda.permute import naive_permute, permute

    x = torch.randn(4, 6, device="cuda")
    for fn in (permute, naive_permute):
        with pytest.raises(ValueError, match="contiguous"):
            fn(x.t(), (1, 0))
        with pytest.raises(ValueError, match="permutation"):
            fn(x, (0, 0))
        with pytest.raises(ValueError, match="out must be"):
            fn(x, (1, 0), out=torch.empty(4, 6, device="cuda"))
    with pytest.raises(ValueError, match="CUDA"):
        permute(torch.randn(2, 2), (1, 0))
    assert permute(torch.empty(0, 5, 3, device="cuda"), (2, 0, 1)).shape == (3, 0, 5)


def test_cuda_graph_capture():
    from bwbench.cuda.permute import permute

    x = _random((16, 80, 96), torch.float16, seed=5)
    out = torch.empty(16, 96, 80, dtype=torch.float16, device="cuda")
    permute(x, (0, 2, 1), out=out)  # outside capture first
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        permute(x, (0, 2, 1), out=out)
    out.fill_(0)
    graph.replay()
    torch.cuda.synchronize()
    _assert_bit_exact(out, x.permute(0, 2, 1).contiguous(), "graph replay")


@pytest.mark.parametrize("perm", [(0, 2, 1), (1, 0, 2)], ids=["transpose", "rows"])
def test_more_than_2_31_elements_on_the_int64_path(perm):
    """int8, 5 x 20000 x 21475 = 2^31 + 16352 elements (2.1 GB in, 2.1 GB out): 64-bit indexing,
    one-byte moves (21475 is odd)."""
    from bwbench.cuda.permute import permute, plan_for

    shape = (5, 20000, 21475)
    n = math.prod(shape)
    assert n > 2**31
    free, _ = torch.cuda.mem_get_info()
    if free < 3.5 * n:
        pytest.skip(f"needs {3.5 * n / 1e9:.1f} GB of free GPU memory, {free / 1e9:.1f} GB free")
    x = torch.randint(-128, 128, shape, dtype=torch.int8, device="cuda")
    plan = plan_for(x, perm)
    assert plan.kernel.index == "int64"
    expected = x.permute(perm).contiguous()
    y = _poisoned(expected.shape, torch.int8)
    permute(x, perm, out=y)
    torch.cuda.synchronize()
    assert torch.equal(y, expected)
    # The very last elements, where 32-bit offsets would have wrapped.
    assert torch.equal(y.reshape(-1)[-100000:], expected.reshape(-1)[-100000:])
    del x, y, expected
    torch.cuda.empty_cache()


def test_suite_runs_through_the_harness(tmp_path):
    """Every implementation of the suite passes the harness check on the quick cases."""
    from typer.testing import CliRunner

    from bwbench.cli import app

    result = CliRunner().invoke(app, ["run", "permute", "--quick", "--dtype", "int8,bfloat16,int64", "--max-time",
                                      "0.05", "--min-samples", "3", "-o", str(tmp_path), "--name", "p",
                                      "--no-report", "--impl", "optimized,naive,torch",
                                      "--copy-size", "256MB"])
    assert result.exit_code == 0, result.output
    import json

    records = json.loads((tmp_path / "p.json").read_text())["records"]
    statuses = {(r["case"], r["dtype"], r["impl"]): r["status"] for r in records}
    assert statuses and all(s == "ok" for s in statuses.values()), statuses
