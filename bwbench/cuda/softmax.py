"""Softmax over the last dimension of a 2-D tensor, with this project's CUDA kernels.

`naive_softmax` is the article's starting point: five separate kernels (kernels/softmax_naive.cu),
each re-reading its input from global memory, with float32 intermediates.
"""

from __future__ import annotations

import numpy as np
import torch

from bwbench.cuda.loader import KernelSource, cpp_type, grid_size, launch, load

_STORAGE_TYPES = ("half_t", "bf16_t", "float")

NAIVE = KernelSource(
    "softmax_naive.cu",
    name_expressions=(
        *(f"naive_reduce_max<{t}>" for t in _STORAGE_TYPES),
        *(f"naive_broadcast_sub<{t}>" for t in _STORAGE_TYPES),
        "naive_exp",
        "naive_reduce_sum",
        *(f"naive_broadcast_div<{t}>" for t in _STORAGE_TYPES),
    ),
)

# Threads per block for every naive kernel (the reductions need a multiple of 32).
NAIVE_BLOCK = 256


def _check_input(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"softmax expects a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"softmax expects a 2-D tensor (rows, cols), got shape {tuple(x.shape)}")
    if x.device.type != "cuda":
        raise ValueError(f"softmax expects a CUDA tensor, got one on {x.device}")
    if not x.is_contiguous():
        raise ValueError(f"softmax expects a contiguous tensor, got strides {x.stride()}")
    cpp_type(x.dtype)  # ValueError naming the supported dtypes


def naive_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(x, dim=-1) in five kernels: row max, subtract, exp, row sum, divide.

    x: 2-D contiguous CUDA tensor of float16, bfloat16 or float32. Returns a new tensor like x, or
    writes into `out` (same shape, dtype and device, contiguous) and returns it. Runs on PyTorch's
    current stream; capturable in a CUDA graph once it has run outside capture.
    """
    _check_input(x)
    ctype = cpp_type(x.dtype)
    if out is None:
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
    else:
        if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device or not out.is_contiguous():
            raise ValueError(
                f"out must be contiguous with x's shape, dtype and device: got {tuple(out.shape)} {out.dtype} "
                f"on {out.device}, want {tuple(x.shape)} {x.dtype} on {x.device}"
            )
        y = out
    rows, cols = x.shape
    n = rows * cols
    if n == 0:
        return y

    device = x.device.index if x.device.index is not None else torch.cuda.current_device()
    module = load(NAIVE)
    reduce_max = module.kernel(f"naive_reduce_max<{ctype}>")
    broadcast_sub = module.kernel(f"naive_broadcast_sub<{ctype}>")
    exp = module.kernel("naive_exp")
    reduce_sum = module.kernel("naive_reduce_sum")
    broadcast_div = module.kernel(f"naive_broadcast_div<{ctype}>")

    tmp = torch.empty(n, dtype=torch.float32, device=x.device)
    row_max = torch.empty(rows, dtype=torch.float32, device=x.device)
    row_sum = torch.empty(rows, dtype=torch.float32, device=x.device)

    rows_, cols_, n_ = np.int64(rows), np.int64(cols), np.int64(n)
    elementwise_blocks = -(-n // NAIVE_BLOCK)

    def grid(kernel, work_blocks: int) -> int:
        return grid_size(kernel, NAIVE_BLOCK, work_blocks, device=device)

    launch(reduce_max, grid(reduce_max, rows), NAIVE_BLOCK, (x, row_max, rows_, cols_))
    launch(broadcast_sub, grid(broadcast_sub, elementwise_blocks), NAIVE_BLOCK, (x, row_max, tmp, rows_, cols_))
    launch(exp, grid(exp, elementwise_blocks), NAIVE_BLOCK, (tmp, n_))
    launch(reduce_sum, grid(reduce_sum, rows), NAIVE_BLOCK, (tmp, row_sum, rows_, cols_))
    launch(broadcast_div, grid(broadcast_div, elementwise_blocks), NAIVE_BLOCK, (tmp, row_sum, y, rows_, cols_))
    return y
