"""Row log-softmax over the last dimension: the softmax suite's sweep with the LogSoftmax algorithm.

y = (x - max) - log(sum(exp(x - max))) reads x once and writes y once, like softmax, so its speed
of light is the same-size copy. The naive version runs five kernels (max, subtract, exp, sum,
subtract log) with float32 intermediates.

Tolerance: log-probabilities are O(log cols) in size, and log(sum) carries an absolute error of a
few float32 ulps of 1 whatever the result's size, so where a log-probability is near 0 (one value
dominating its row) the relative error is unbounded. float32 results therefore get an absolute
tolerance of 1e-6 (ten times that error); float16 and bfloat16 keep the default ones, which their
own rounding dominates.
"""

import torch

from bwbench.domains import positive_int
from bwbench.suite import DEFAULT_TOLERANCES, Suite, Tolerance, Traffic, compile_per_case, pow2

from ._shapes import SOFTMAX_PRESETS

suite = Suite(
    "log_softmax",
    "y = log_softmax(x, dim=-1) for x of shape (rows, cols)",
    axes={"rows": [49152], "cols": pow2(32, 32768)},
    dtypes=["float16", "bfloat16", "float32"],
    quick={"rows": [4096], "cols": [32, 1024, 32768]},
    x_axis="cols",
    domains={"rows": positive_int, "cols": positive_int},
    presets=SOFTMAX_PRESETS,
    tolerances={**DEFAULT_TOLERANCES, "float32": Tolerance(rtol=1e-5, atol=1e-6)},
)


@suite.inputs
def inputs(case, gen):
    return {"x": torch.randn(case.rows, case.cols, generator=gen, device=gen.device, dtype=case.torch_dtype)}


@suite.reference
def reference(x):
    return torch.log_softmax(x.double(), dim=-1)


@suite.traffic
def traffic(case):
    size = case.rows * case.cols * case.itemsize
    return Traffic(read=size, write=size)


@suite.impl("naive", kind="naive")
def naive(case):
    """Five kernels: ReduceMax, BroadcastSub, Exp, ReduceSum, BroadcastSub(log) (float32 in between)."""
    from bwbench.cuda.loader import load
    from bwbench.cuda.softmax import FAMILY_NAIVE, NAIVE, naive_log_softmax

    load(NAIVE)  # compile now, outside the check and the timing
    load(FAMILY_NAIVE)
    return naive_log_softmax


@suite.impl("cudnn", kind="cudnn")
def cudnn(case):
    """cudnnSoftmaxForward, LOG algorithm, INSTANCE mode."""
    from bwbench.cuda.cudnn import CudnnSoftmax  # raises Skip with the reason where cuDNN cannot run

    return CudnnSoftmax(case.rows, case.cols, case.torch_dtype, algorithm="log").forward


@suite.impl("torch", kind="torch")
def eager(case):
    """torch.log_softmax in eager mode."""
    return lambda x: torch.log_softmax(x, dim=-1)


@suite.impl("compiled", kind="compiled")
def compiled(case):
    """torch.compile(dynamic=False) of torch.log_softmax: Triton, compiled once per shape."""
    return compile_per_case(lambda x: torch.log_softmax(x, dim=-1))


@suite.impl("optimized", kind="cuda")
def optimized(case):
    """The softmax family's kernels with the LogSoftmax algorithm (same dispatch as softmax)."""
    from bwbench.cuda.softmax import log_softmax, plan_launch

    plan_launch("log_softmax", case.rows, case.cols, case.torch_dtype)  # compile and plan now
    return log_softmax
