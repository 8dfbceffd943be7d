"""A pytest gate on a kernel's bandwidth: fail when it moves its bytes at less than a fraction of
what a copy of the same bytes reaches on this GPU.

    pytest examples/test_gate_with_bench.py

`bwbench.bench` times the callable as `bwbench run` does (L2 flushed before every sample, median
of enough samples that it settles) and times a same-size copy in the same call, so the gate holds
on any GPU model without a number written down for each. A slower kernel, or one that starts
moving more bytes than it must, fails here.
"""

import pytest
import torch

import bwbench

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MIN_FRACTION_OF_COPY = 0.75
"""The floor: the kernel's bandwidth as a fraction of a same-size copy's."""


@pytest.mark.parametrize("cols", [1024, 4096])
def test_triton_softmax_moves_its_bytes_near_copy_speed(cols):
    from triton_softmax import triton_softmax  # the kernel of the Triton example next to this file

    x = torch.randn(49152, cols, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(triton_softmax(x), torch.softmax(x.float(), dim=-1).half(), rtol=2e-3, atol=1e-5)
    result = bwbench.bench(lambda: triton_softmax(x), bytes=2 * x.numel() * x.element_size())
    assert result.pct_copy >= 100 * MIN_FRACTION_OF_COPY, f"cols={cols}: {result}"


def test_a_kernel_that_moves_twice_its_bytes_fails_the_gate():
    """The gate can fail: a softmax that reads its input twice (an extra copy) is held to the bytes
    a softmax must move and falls well short of the floor."""
    x = torch.randn(49152, 4096, device="cuda", dtype=torch.float16)
    result = bwbench.bench(lambda: torch.softmax(x.clone(), dim=-1), bytes=2 * x.numel() * x.element_size())
    assert result.pct_copy < 100 * MIN_FRACTION_OF_COPY, f"expected below the floor: {result}"
