"""Liger-Kernel (linkedin/Liger-Kernel) as a baseline: its Triton forward kernels for RMSNorm,
LayerNorm and softmax.

Each adapter calls the forward launcher that the library's autograd Function calls
(`liger_kernel.ops.<op>`), not the Function itself: the launcher also returns the statistics the
Function keeps for the backward, so the suites check y and the statistics, and no autograd
bookkeeping is timed. The kernels write exactly the suites' outputs (y, and float32 mean and rstd
per row: Liger keeps float32 statistics from 0.8.4), so the suites' byte models hold as they are.

Liger launches one program per row over a power-of-two block of the row; its launcher refuses
rows longer than 65536 columns, which are skipped here with that reason.
"""

from __future__ import annotations

from bwbench.peers import Peer, require_dtype
from bwbench.suite import Skip

LIGER = Peer(distribution="liger-kernel", extra="liger", minimum="0.8.4")
MAX_COLS = 65536
RMS_NORM_CASTING_MODE = "gemma"
"""Liger's casting modes for RMSNorm: "gemma" computes in float32 (x and gamma converted) and rounds
y once, which is bwbench's reference; "llama" rounds x * rstd to x's dtype before multiplying by
gamma (two roundings); "none" computes in x's dtype and keeps rstd in it. The offset is 0:
y = x * rstd * gamma, not Gemma's x * rstd * (1 + gamma)."""


def _supports(case) -> None:
    require_dtype(LIGER, case.dtype)
    if case.cols > MAX_COLS:
        raise Skip(f"liger-kernel launches one block per row of at most {MAX_COLS} columns; this row has {case.cols}")


def rms_norm(case):
    """y, rstd from liger_kernel.ops.rms_norm.rms_norm_forward, casting mode "gemma", offset 0."""
    _supports(case)
    forward = LIGER.function("liger_kernel.ops.rms_norm", "rms_norm_forward")

    def run(x, gamma, eps):
        y, _, rstd, *_ = forward(X=x, W=gamma, eps=eps, offset=0.0, casting_mode=RMS_NORM_CASTING_MODE, row_mode=None)
        return y, rstd

    return run


def layer_norm(case):
    """y, mean, rstd from liger_kernel.ops.layer_norm.layer_norm_forward (statistics in float32)."""
    _supports(case)
    forward = LIGER.function("liger_kernel.ops.layer_norm", "layer_norm_forward")

    def run(x, gamma, beta, eps):
        y, _, mean, rstd, *_ = forward(X=x, W=gamma, B=beta, eps=eps)
        return y, mean, rstd

    return run


def softmax(case):
    """y from liger_kernel.ops.softmax._softmax_forward, the launcher of LigerSoftmaxFunction."""
    _supports(case)
    forward = LIGER.function("liger_kernel.ops.softmax", "_softmax_forward")

    def run(x):
        y, *_ = forward(x)
        return y

    return run
