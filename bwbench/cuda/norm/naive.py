"""The naive LayerNorm / RMSNorm: the multi-kernel starting point, each kernel reading x again
(mean, variance around it, normalization). Grid-stride kernels of NAIVE_BLOCK threads."""

from __future__ import annotations

import numpy as np

from bwbench.cuda.loader import KernelSource, cpp_type, launch_grid_stride, load
from bwbench.cuda.norm.launch import checked_outputs
from bwbench.cuda.norm.plan import NAIVE_BLOCK, NAIVE_KERNELS

__all__ = ["NAIVE", "naive_layer_norm", "naive_rms_norm"]

NAIVE = KernelSource("norm.cu", NAIVE_KERNELS)


def _naive(x, gamma, beta, eps, out, rms: bool):
    what = "naive_rms_norm" if rms else "naive_layer_norm"
    outputs, y, mean, rstd = checked_outputs(x, gamma, beta, out, rms, what)
    rows, cols = x.shape
    if rows == 0:
        return outputs
    ctype = cpp_type(x.dtype)
    device = x.device.index
    module = load(NAIVE)
    rows_, cols_, eps_ = np.int64(rows), np.int64(cols), np.float32(eps)

    def step(name: str, work_blocks: int, args: tuple) -> None:
        launch_grid_stride(module.kernel(name), NAIVE_BLOCK, work_blocks, args, device)

    if rms:
        step(f"naive_row_rms<{ctype}>", rows, (x, rstd, rows_, cols_, eps_))
    else:
        step(f"naive_row_mean<{ctype}>", rows, (x, mean, rows_, cols_))
        step(f"naive_row_rstd<{ctype}>", rows, (x, mean, rstd, rows_, cols_, eps_))
    step(f"naive_normalize<{ctype}, {'true' if rms else 'false'}>", -(-rows * cols // NAIVE_BLOCK),
         (x, mean, rstd, gamma, beta, y, rows_, cols_))
    return outputs


def naive_layer_norm(x, gamma, beta, eps: float = 1e-5, *, out: tuple | None = None):
    """LayerNorm in three kernels: row mean; row variance around it (a second read of x) -> rstd;
    normalization (a third read of x). Same outputs as `layer_norm`."""
    return _naive(x, gamma, beta, eps, out, rms=False)


def naive_rms_norm(x, gamma, eps: float = 1e-5, *, out: tuple | None = None):
    """RMSNorm in two kernels: row mean of squares -> rstd; normalization (a second read of x)."""
    return _naive(x, gamma, None, eps, out, rms=True)
