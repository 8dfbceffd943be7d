"""GPU checks of the CUDA kernels and the cuDNN baseline against float64 PyTorch references.

Run with `pytest -m gpu` on a machine with a CUDA GPU; everything here skips without one. Inputs
are fresh random values (never zeros), outputs are poisoned with NaN before the kernels run, and
shapes include odd column counts (1, 33, 1000, 4097) that do not divide any block or vector width.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
COLS = [1, 33, 1000, 1024, 4097]
ROWS = [1, 7, 256]
# (rtol, atol) against the float64 reference, by output dtype.
TOLERANCES = {
    torch.float16: (2e-3, 1e-6),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1e-5, 1e-8),
}


def _random(rows: int, cols: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(rows, cols, generator=gen, device="cuda", dtype=torch.float32) * scale).to(dtype)


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    rtol, atol = TOLERANCES[dtype]
    assert not torch.isnan(actual).any(), f"{what}: output has NaN (unwritten poisoned elements?)"
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------------------------------------
# naive softmax (five kernels)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_naive_softmax_matches_reference(dtype: torch.dtype, cols: int, rows: int) -> None:
    from bwbench.cuda.softmax import naive_softmax

    x = _random(rows, cols, dtype, seed=rows * 100003 + cols)
    out = torch.full_like(x, float("nan"))
    y = naive_softmax(x, out=out)
    assert y is out
    torch.cuda.synchronize()
    _assert_close(y, torch.softmax(x.double(), -1), dtype, f"naive_softmax {dtype} ({rows}, {cols})")

    # The allocating form gives the same answer.
    y2 = naive_softmax(x)
    assert y2.shape == x.shape and y2.dtype == dtype and y2.is_contiguous()
    torch.testing.assert_close(y2, y, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_naive_softmax_large_magnitudes(dtype: torch.dtype) -> None:
    """Values far beyond exp's range: only correct if the row max is subtracted first."""
    from bwbench.cuda.softmax import naive_softmax

    x = _random(64, 777, dtype, seed=7, scale=60.0)
    if dtype == torch.float32:
        x[0, 0] = 1000.0  # exp(1000) overflows float32 without the max subtraction
    y = naive_softmax(x)
    _assert_close(y, torch.softmax(x.double(), -1), dtype, f"naive_softmax large inputs {dtype}")


def test_naive_softmax_rejects_bad_inputs() -> None:
    from bwbench.cuda.softmax import naive_softmax

    with pytest.raises(ValueError, match="2-D"):
        naive_softmax(torch.randn(2, 3, 4, device="cuda"))
    with pytest.raises(ValueError, match="contiguous"):
        naive_softmax(torch.randn(8, 8, device="cuda").t())
    with pytest.raises(ValueError, match="CUDA"):
        naive_softmax(torch.randn(8, 8))
    with pytest.raises(ValueError, match="float16"):
        naive_softmax(torch.randn(8, 8, device="cuda", dtype=torch.float64))


def test_naive_softmax_empty() -> None:
    from bwbench.cuda.softmax import naive_softmax

    assert naive_softmax(torch.empty(0, 5, device="cuda")).shape == (0, 5)


def test_naive_softmax_runs_on_the_current_stream() -> None:
    from bwbench.cuda.softmax import naive_softmax

    x = _random(512, 4097, torch.float32, seed=11)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = naive_softmax(x)
        # Same stream, so ordered after the kernels without any synchronisation.
        ok = torch.allclose(y.double(), torch.softmax(x.double(), -1), rtol=1e-5, atol=1e-8)
    side.synchronize()
    assert ok


def test_naive_softmax_beyond_int32_elements() -> None:
    """rows * cols > 2^31: the kernels' 64-bit indexing (x 4 GiB in half, float32 scratch 8 GiB)."""
    from bwbench.cuda.softmax import naive_softmax

    rows, cols = (1 << 16) + 3, 1 << 15
    need = rows * cols * (2 + 4 + 2) + (6 << 30)
    free, _ = torch.cuda.mem_get_info()
    if free < need:
        pytest.skip(f"needs about {need / 2**30:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")
    x = _random(rows, cols, torch.float16, seed=3)
    y = naive_softmax(x)
    for start in (0, rows // 2, rows - 5):  # the last rows lie past element 2^31
        ref = torch.softmax(x[start:start + 5].double(), -1)
        _assert_close(y[start:start + 5], ref, torch.float16, f"rows {start}..{start + 4}")


def test_naive_softmax_in_cuda_graph() -> None:
    from bwbench.cuda.softmax import naive_softmax

    x = _random(300, 1000, torch.float16, seed=5)
    # Warm up outside capture on a side stream, as PyTorch recommends (compiles, sets up context).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        naive_softmax(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = naive_softmax(x)
    for seed in (6, 8):
        x.copy_(_random(300, 1000, torch.float16, seed=seed))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _assert_close(y, torch.softmax(x.double(), -1), torch.float16, f"graph replay seed {seed}")


# ---------------------------------------------------------------------------------------------
# loader helpers
# ---------------------------------------------------------------------------------------------


def test_occupancy_and_attributes() -> None:
    from bwbench.cuda.loader import grid_size, load, max_active_blocks_per_sm
    from bwbench.cuda.softmax import NAIVE

    kernel = load(NAIVE).kernel("naive_exp")
    per_sm = max_active_blocks_per_sm(kernel, 256, 0)
    assert 1 <= per_sm <= 32
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    assert grid_size(kernel, 256, 10**9) == sms * per_sm
    assert grid_size(kernel, 256, 10**9, waves=2) == 2 * sms * per_sm
    assert grid_size(kernel, 256, 10**9, waves=None) == 10**9
    assert grid_size(kernel, 256, 3) == 3
    attrs = kernel.attributes()
    assert attrs["num_regs"] > 0 and attrs["local_size_bytes"] == 0


def test_launch_refuses_python_ints() -> None:
    from bwbench.cuda.loader import load
    from bwbench.cuda.softmax import NAIVE

    kernel = load(NAIVE).kernel("naive_exp")
    t = torch.zeros(4, device="cuda")
    with pytest.raises(TypeError, match="np.int64"):
        kernel(1, 32, (t, 4))


# ---------------------------------------------------------------------------------------------
# cuDNN
# ---------------------------------------------------------------------------------------------


def _cudnn(rows: int, cols: int, dtype: torch.dtype, algorithm: str):
    from bwbench.cuda.cudnn import CudnnSoftmax, CudnnUnavailable

    try:
        return CudnnSoftmax(rows, cols, dtype, algorithm=algorithm)
    except CudnnUnavailable as exc:
        pytest.skip(f"cuDNN unavailable: {exc}")


def _cudnn_major(version: int) -> int:
    return version // 10000 if version >= 90000 else version // 1000


def test_cudnn_version() -> None:
    from bwbench.cuda.cudnn import cudnn_version

    version = cudnn_version()
    if version is None:
        pytest.skip("no cuDNN")
    torch_version = torch.backends.cudnn.version()
    if torch_version is not None:  # the library PyTorch loaded is the one bound here
        assert _cudnn_major(version) == _cudnn_major(torch_version), (version, torch_version)


@pytest.mark.parametrize("algorithm", ["accurate", "log"])
@pytest.mark.parametrize("cols", [1, 33, 1000, 4097])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_cudnn_softmax_forward(dtype: torch.dtype, cols: int, algorithm: str) -> None:
    rows = 7
    op = _cudnn(rows, cols, dtype, algorithm)
    x = _random(rows, cols, dtype, seed=cols)
    from bwbench.cuda.cudnn import CudnnUnavailable

    try:
        y = op.forward(x)
    except CudnnUnavailable as exc:
        pytest.skip(f"cuDNN does not run this: {exc}")
    torch.cuda.synchronize()
    ref = torch.softmax(x.double(), -1) if algorithm == "accurate" else torch.log_softmax(x.double(), -1)
    rtol, atol = TOLERANCES[dtype]
    if algorithm == "log":  # log values are O(log cols): an absolute error of a few ulps of that
        atol = max(atol, rtol * 10)
    assert not torch.isnan(y).any()
    torch.testing.assert_close(y.double(), ref, rtol=rtol, atol=atol)
    op.close()


@pytest.mark.parametrize("algorithm", ["accurate", "log"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_cudnn_softmax_backward(dtype: torch.dtype, algorithm: str) -> None:
    rows, cols = 5, 1000
    op = _cudnn(rows, cols, dtype, algorithm)
    x = _random(rows, cols, dtype, seed=21)
    dy = _random(rows, cols, dtype, seed=22)
    from bwbench.cuda.cudnn import CudnnUnavailable

    try:
        y = op.forward(x)
        dx = op.backward(y, dy)
    except CudnnUnavailable as exc:
        pytest.skip(f"cuDNN does not run this: {exc}")
    torch.cuda.synchronize()
    y64, dy64 = y.double(), dy.double()
    if algorithm == "accurate":  # d softmax: y * (dy - sum(dy * y))
        ref = y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))
    else:  # d log_softmax: dy - exp(y) * sum(dy)
        ref = dy64 - y64.exp() * dy64.sum(-1, keepdim=True)
    rtol, _ = TOLERANCES[dtype]
    atol = rtol * ref.abs().max().item()  # sums of cols terms: error relative to the largest value
    torch.testing.assert_close(dx.double(), ref, rtol=rtol, atol=atol)
    op.close()


def test_cudnn_rejects_mismatched_input() -> None:
    op = _cudnn(4, 8, torch.float32, "accurate")
    with pytest.raises(ValueError, match="built for"):
        op.forward(torch.randn(4, 9, device="cuda"))
    op.close()
    with pytest.raises(RuntimeError, match="closed"):
        op.forward(torch.randn(4, 8, device="cuda"))


def test_cudnn_unsupported_dtype_and_size_are_skips() -> None:
    from bwbench.cuda.cudnn import CudnnSoftmax, CudnnUnavailable

    with pytest.raises(CudnnUnavailable, match="float64"):
        CudnnSoftmax(4, 8, torch.float64)
    with pytest.raises(CudnnUnavailable, match="int32"):
        CudnnSoftmax(1 << 16, 1 << 16, torch.float16)
