"""Repeated calls of the norm, permute and bitmask launchers: the second and later calls on inputs
of the same kind take the remembered launch (loader.PlannedCall, no checks or planning) and must
stay right with fresh inputs, fresh outputs from memory poisoned with NaN, and (dropout) a new
seed each time. Inputs of another kind (another offset, shape or eps) plan afresh."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

EPS = 1e-5


def _poison_freed(n_bytes: int) -> None:
    """Fill cached allocator blocks with NaN bytes and free them: a fresh output starts as NaN."""
    block = torch.full((n_bytes // 2 + 1024,), float("nan"), dtype=torch.float16, device="cuda")
    del block


def _randn(shape, dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=gen, device="cuda").to(dtype)


@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms_norm"])
@pytest.mark.parametrize("cols", [33, 768, 1000, 4096])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["float16", "float32"])
def test_norm_repeats_stay_right(dtype, cols, rms):
    from bwbench.check import compare
    from bwbench.cuda.norm import launch
    from tests.test_norm_gpu import _norm, _params, _tolerance

    norm = _norm()
    gamma, beta = _params(cols, dtype, seed=cols)
    for call in range(4):
        x = _randn((130, cols), dtype, seed=100 * cols + call)
        _poison_freed(x.numel() * x.element_size() * 3)
        got = launch.rms_norm(x, gamma, EPS) if rms else launch.layer_norm(x, gamma, beta, EPS)
        torch.cuda.synchronize()
        ref = norm.rms_norm_reference(x, gamma, EPS) if rms else norm.layer_norm_reference(x, gamma, beta, EPS)
        result = compare(got, ref, _tolerance(rms, dtype))
        assert result.passed, f"call {call}: {result.message}"
        assert launch._signature(x, gamma, None if rms else beta, EPS, rms, None, None,
                                 launch.DEFAULT_GRID_WAVES) in launch._REPEATS
    other = launch.rms_norm(x, gamma, 1e-3) if rms else launch.layer_norm(x, gamma, beta, 1e-3)
    ref = norm.rms_norm_reference(x, gamma, 1e-3) if rms else norm.layer_norm_reference(x, gamma, beta, 1e-3)
    assert compare(other, ref, _tolerance(rms, dtype)).passed, "another eps is another call"


@pytest.mark.parametrize("shape,perm", [((33, 1000, 1001), (0, 2, 1)), ((64, 256, 256), (0, 2, 1)),
                                        ((8, 16, 24, 32), (0, 2, 1, 3)), ((1000, 1001), (1, 0))])
@pytest.mark.parametrize("dtype", [torch.float16, torch.int8], ids=["float16", "int8"])
def test_permute_repeats_stay_right(dtype, shape, perm):
    from bwbench.cuda.permute import launch

    for call in range(3):
        base = torch.randint(-100, 100, (1 + int(torch.tensor(shape).prod()),), device="cuda").to(dtype)
        x = base[call % 2:][: base.numel() - 1].view(shape)  # 16-byte offset alternates
        _poison_freed(x.numel() * x.element_size())
        y = launch.permute(x, perm)
        torch.cuda.synchronize()
        assert torch.equal(y, x.permute(perm).contiguous()), f"call {call}"


@pytest.mark.parametrize("n", [1, 1000, 4097, 1 << 20])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["float16", "float32"])
def test_bitmask_repeats_stay_right(dtype, n):
    from bwbench.cuda.bitmask import launch
    from bwbench.cuda.bitmask import dropout_forward, masked_backward, pack_bits, relu_forward
    from bwbench.philox import dropout_keep_torch

    p = 0.25
    for call in range(3):
        x = _randn((n,), dtype, seed=n + call)
        dy = _randn((n,), dtype, seed=7 * n + call)
        _poison_freed(n * 8)
        y, mask = relu_forward(x)
        dx = masked_backward(dy, mask, 1.0)
        seed = 1234 + call
        yd, bits = dropout_forward(x, p, seed, call)
        torch.cuda.synchronize()
        assert torch.equal(y, torch.clamp_min(x, 0)) and torch.equal(mask, pack_bits(x > 0)), f"relu call {call}"
        assert torch.equal(dx, torch.where(x > 0, dy, torch.zeros_like(dy))), f"relu backward call {call}"
        keep = dropout_keep_torch(n, p, seed, call, device="cuda")
        want = (x.float() * keep.float() * torch.tensor(1 / (1 - p), dtype=torch.float32)).to(dtype)
        assert torch.equal(bits, pack_bits(keep)) and torch.equal(yd, want), f"dropout call {call}"
    assert launch._signature("relu_forward", (x,)) in launch._REPEATS
    assert launch._signature("dropout_forward", (x,), p) in launch._REPEATS
