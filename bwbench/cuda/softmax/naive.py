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


def naive_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(x, dim=-1) in five kernels: row max, subtract, exp, row sum, divide.

    x: 2-D contiguous CUDA tensor of float16, bfloat16 or float32. Returns a new tensor like x, or
    writes into `out` (same shape, dtype and device, contiguous) and returns it. Runs on PyTorch's
    current stream; capturable in a CUDA graph once it has run outside capture.
    """
    check_matrix(x, "naive_softmax")
    ctype = cpp_type(x.dtype)
    y = _naive_out(x, out)
    rows, cols = x.shape
    n = rows * cols
    if n == 0:
        return y

    device = device_index(x)
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
    elementwise = -(-n // NAIVE_BLOCK)
    launch_grid_stride(reduce_max, NAIVE_BLOCK, rows, (x, row_max, rows_, cols_), device)
    launch_grid_stride(broadcast_sub, NAIVE_BLOCK, elementwise, (x, row_max, tmp, rows_, cols_), device)
    launch_grid_stride(exp, NAIVE_BLOCK, elementwise, (tmp, n_), device)
    launch_grid_stride(reduce_sum, NAIVE_BLOCK, rows, (tmp, row_sum, rows_, cols_), device)
    launch_grid_stride(broadcast_div, NAIVE_BLOCK, elementwise, (tmp, row_sum, y, rows_, cols_), device)
    return y


def naive_log_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """log_softmax(x, dim=-1) in five kernels: row max, subtract, exp, row sum, subtract log.

    Same contract as `naive_softmax` (2-D contiguous CUDA tensor, float16/bfloat16/float32).
    """
    check_matrix(x, "naive_log_softmax")
    ctype = cpp_type(x.dtype)
    y = _naive_out(x, out)
    rows, cols = x.shape
    n = rows * cols
    if n == 0:
        return y
    device = device_index(x)
    base, family = load(NAIVE), load(FAMILY_NAIVE)
    reduce_max = base.kernel(f"naive_reduce_max<{ctype}>")
    broadcast_sub = base.kernel(f"naive_broadcast_sub<{ctype}>")
    exp_into = family.kernel("naive_exp_into")
    reduce_sum = base.kernel("naive_reduce_sum")
    sub_log = family.kernel(f"naive_broadcast_sub_log<{ctype}>")

    t = torch.empty(n, dtype=torch.float32, device=x.device)
    e = torch.empty(n, dtype=torch.float32, device=x.device)
    row_max = torch.empty(rows, dtype=torch.float32, device=x.device)
    row_sum = torch.empty(rows, dtype=torch.float32, device=x.device)
    rows_, cols_, n_ = np.int64(rows), np.int64(cols), np.int64(n)
    elementwise = -(-n // NAIVE_BLOCK)
    launch_grid_stride(reduce_max, NAIVE_BLOCK, rows, (x, row_max, rows_, cols_), device)
    launch_grid_stride(broadcast_sub, NAIVE_BLOCK, elementwise, (x, row_max, t, rows_, cols_), device)
    launch_grid_stride(exp_into, NAIVE_BLOCK, elementwise, (t, e, n_), device)
    launch_grid_stride(reduce_sum, NAIVE_BLOCK, rows, (e, row_sum, rows_, cols_), device)
    launch_grid_stride(sub_log, NAIVE_BLOCK, elementwise, (t, row_sum, y, rows_, cols_), device)
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
    ctype = cpp_type(y.dtype)
    dx = _naive_out(y, out)
    rows, cols = y.shape
    n = rows * cols
    if n == 0:
        return dx
    device = device_index(y)
    base, family = load(NAIVE), load(FAMILY_NAIVE)
    mul = family.kernel(f"naive_mul<{ctype}>")
    reduce_sum = base.kernel("naive_reduce_sum")
    sub = family.kernel(f"naive_broadcast_sub_grad<{ctype}>")
    mul_out = family.kernel(f"naive_mul_out<{ctype}>")

    p = torch.empty(n, dtype=torch.float32, device=y.device)
    t = torch.empty(n, dtype=torch.float32, device=y.device)
    row_sum = torch.empty(rows, dtype=torch.float32, device=y.device)
    rows_, cols_, n_ = np.int64(rows), np.int64(cols), np.int64(n)
    elementwise = -(-n // NAIVE_BLOCK)
    launch_grid_stride(mul, NAIVE_BLOCK, elementwise, (y, dy, p, n_), device)
    launch_grid_stride(reduce_sum, NAIVE_BLOCK, rows, (p, row_sum, rows_, cols_), device)
    launch_grid_stride(sub, NAIVE_BLOCK, elementwise, (dy, row_sum, t, rows_, cols_), device)
    launch_grid_stride(mul_out, NAIVE_BLOCK, elementwise, (t, y, dx, n_), device)
    return dx
