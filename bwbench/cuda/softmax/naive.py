"""The naive softmax family: the articles' multi-kernel starting points (kernels/softmax_naive.cu,
kernels/softmax_family_naive.cu), each kernel re-reading its input from global memory with float32
intermediates. Grid-stride kernels of NAIVE_BLOCK threads (plan.py lists them)."""

from __future__ import annotations

import numpy as np
import torch

from bwbench.cuda.loader import KernelSource, check_matrix, cpp_type, device_index, launch_grid_stride, load
from bwbench.cuda.softmax.plan import FAMILY_NAIVE_KERNELS, NAIVE_BLOCK, NAIVE_KERNELS

__all__ = ["FAMILY_NAIVE", "NAIVE", "naive_log_softmax", "naive_softmax", "naive_softmax_backward"]

NAIVE = KernelSource("softmax_naive.cu", NAIVE_KERNELS)
FAMILY_NAIVE = KernelSource("softmax_family_naive.cu", FAMILY_NAIVE_KERNELS)


def _naive_out(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device or not out.is_contiguous():
        raise ValueError(
            f"out must be contiguous with the input's shape, dtype and device: got {tuple(out.shape)} "
            f"{out.dtype} on {out.device}, want {tuple(x.shape)} {x.dtype} on {x.device}"
        )
    return out


def _start(x: torch.Tensor, out: torch.Tensor | None, what: str, name: str = "x"):
    """x checked; (its storage type, the output to write, rows, cols)."""
    check_matrix(x, what, name)
    rows, cols = x.shape
    return cpp_type(x.dtype), _naive_out(x, out), rows, cols


def _float32(n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(n, dtype=torch.float32, device=like.device)


def _pipeline(steps, device: int) -> None:
    """Launch each (kernel, blocks' worth of work, arguments) of a naive pipeline in order, every
    kernel a grid-stride one of NAIVE_BLOCK threads."""
    for name, work, args in steps:
        source = NAIVE if name in NAIVE.name_expressions else FAMILY_NAIVE
        launch_grid_stride(load(source).kernel(name), NAIVE_BLOCK, work, args, device)


def _sizes(rows: int, cols: int) -> tuple:
    """(rows, cols, n) as the kernels' int64 arguments, and the elementwise kernels' blocks of work."""
    n = rows * cols
    return np.int64(rows), np.int64(cols), np.int64(n), -(-n // NAIVE_BLOCK)


def naive_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(x, dim=-1) in five kernels: row max, subtract, exp, row sum, divide.

    x: 2-D contiguous CUDA tensor of float16, bfloat16 or float32. Returns a new tensor like x, or
    writes into `out` (same shape, dtype and device, contiguous) and returns it. Runs on PyTorch's
    current stream; capturable in a CUDA graph once it has run outside capture.
    """
    t, y, rows, cols = _start(x, out, "naive_softmax")
    if rows * cols == 0:
        return y
    tmp, row_max, row_sum = _float32(rows * cols, x), _float32(rows, x), _float32(rows, x)
    rows_, cols_, n_, each = _sizes(rows, cols)
    _pipeline([(f"naive_reduce_max<{t}>", rows, (x, row_max, rows_, cols_)),
               (f"naive_broadcast_sub<{t}>", each, (x, row_max, tmp, rows_, cols_)),
               ("naive_exp", each, (tmp, n_)),
               ("naive_reduce_sum", rows, (tmp, row_sum, rows_, cols_)),
               (f"naive_broadcast_div<{t}>", each, (tmp, row_sum, y, rows_, cols_))], device_index(x))
    return y


def naive_log_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """log_softmax(x, dim=-1) in five kernels: row max, subtract, exp, row sum, subtract log.

    Same contract as `naive_softmax` (2-D contiguous CUDA tensor, float16/bfloat16/float32).
    """
    t, y, rows, cols = _start(x, out, "naive_log_softmax")
    if rows * cols == 0:
        return y
    shifted, e = _float32(rows * cols, x), _float32(rows * cols, x)
    row_max, row_sum = _float32(rows, x), _float32(rows, x)
    rows_, cols_, n_, each = _sizes(rows, cols)
    _pipeline([(f"naive_reduce_max<{t}>", rows, (x, row_max, rows_, cols_)),
               (f"naive_broadcast_sub<{t}>", each, (x, row_max, shifted, rows_, cols_)),
               ("naive_exp_into", each, (shifted, e, n_)),
               ("naive_reduce_sum", rows, (e, row_sum, rows_, cols_)),
               (f"naive_broadcast_sub_log<{t}>", each, (shifted, row_sum, y, rows_, cols_))], device_index(x))
    return y


def naive_softmax_backward(y: torch.Tensor, dy: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The softmax gradient dx = y * (dy - sum(dy * y)) in four kernels: multiply, row sum,
    subtract, multiply (float32 in between). y and dy: 2-D contiguous CUDA tensors of one shape
    and dtype."""
    check_matrix(y, "naive_softmax_backward", "y")
    check_matrix(dy, "naive_softmax_backward", "dy")
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise ValueError(f"dy must match y: got {tuple(dy.shape)} {dy.dtype} on {dy.device}, "
                         f"y is {tuple(y.shape)} {y.dtype} on {y.device}")
    t, dx, rows, cols = _start(y, out, "naive_softmax_backward", "y")
    if rows * cols == 0:
        return dx
    product, diff, row_sum = _float32(rows * cols, y), _float32(rows * cols, y), _float32(rows, y)
    rows_, cols_, n_, each = _sizes(rows, cols)
    _pipeline([(f"naive_mul<{t}>", each, (y, dy, product, n_)),
               ("naive_reduce_sum", rows, (product, row_sum, rows_, cols_)),
               (f"naive_broadcast_sub_grad<{t}>", each, (dy, row_sum, diff, rows_, cols_)),
               (f"naive_mul_out<{t}>", each, (diff, y, dx, n_))], device_index(y))
    return dx
