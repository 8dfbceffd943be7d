"""Row softmax over the last dimension: OneFlow's benchmark.

Half precision, 49152 rows (32 x 12 x 128: BERT-base attention scores) and row lengths from 32 to
32768. A softmax reads x once and writes y once, so its speed of light is a same-size copy; the naive
five-kernel version moves at least four times those bytes and cannot get past a quarter of it.
"""

import torch

from bwbench.domains import positive_int
from bwbench.suite import Suite, Traffic, compile_per_case, pow2

from ._shapes import SOFTMAX_PRESETS

suite = Suite(
    "softmax",
    "y = softmax(x, dim=-1) for x of shape (rows, cols)",
    axes={"rows": [49152], "cols": pow2(32, 32768)},
    dtypes=["float16", "bfloat16", "float32"],
    quick={"rows": [4096], "cols": [32, 1024, 32768]},
    x_axis="cols",
    domains={"rows": positive_int, "cols": positive_int},
    presets=SOFTMAX_PRESETS,
)


@suite.inputs
def inputs(case, gen):
    return {"x": torch.randn(case.rows, case.cols, generator=gen, device=gen.device, dtype=case.torch_dtype)}


@suite.reference
def reference(x):
    return torch.softmax(x.double(), dim=-1)


@suite.traffic
def traffic(case):
    size = case.rows * case.cols * case.itemsize
    return Traffic(read=size, write=size)


@suite.impl("naive", kind="naive")
def naive(case):
    """Five kernels: ReduceMax, BroadcastSub, Exp, ReduceSum, BroadcastDiv (float32 in between)."""
    from bwbench.cuda.loader import load
    from bwbench.cuda.softmax import NAIVE, naive_softmax

    load(NAIVE)  # compile now, outside the check and the timing
    return naive_softmax


@suite.impl("cudnn", kind="cudnn")
def cudnn(case):
    """cudnnSoftmaxForward, ACCURATE algorithm, INSTANCE mode."""
    from bwbench.cuda.cudnn import CudnnSoftmax  # raises Skip with the reason where cuDNN cannot run

    return CudnnSoftmax(case.rows, case.cols, case.torch_dtype, algorithm="accurate").forward


@suite.impl("torch", kind="torch")
def eager(case):
    """torch.softmax in eager mode."""
    return lambda x: torch.softmax(x, dim=-1)


@suite.impl("compiled", kind="compiled")
def compiled(case):
    """torch.compile(dynamic=False) of torch.softmax: Triton, compiled once per shape."""
    return compile_per_case(lambda x: torch.softmax(x, dim=-1))


@suite.impl("optimized", kind="cuda")
def optimized(case):
    """One kernel of the optimized family: a thread group per row with the row in registers, a
    block per row with the row in shared memory, or a block per row re-reading it, by cols."""
    from bwbench.cuda.softmax import plan_launch, softmax

    plan_launch("softmax", case.rows, case.cols, case.torch_dtype)  # compile and plan now, not in the check
    return softmax


@suite.impl("online", kind="cuda")
def online(case):
    """Online normalizer: one read of the row for (max, sum of exp) with the associative (m, d)
    merge, a second read to write y; no row cache."""
    from bwbench.cuda.softmax import online_softmax, plan_launch

    plan_launch("online_softmax", case.rows, case.cols, case.torch_dtype)
    return online_softmax


@suite.impl("liger", kind="liger")
def liger(case):
    """Liger-Kernel's Triton softmax forward: one program per row over a power-of-two block."""
    from bwbench.peers import liger  # raises Skip with the reason where Liger-Kernel cannot run

    return liger.softmax(case)


@suite.impl("quack", kind="quack")
def quack(case):
    """QuACK's CuTe DSL softmax forward (sm90+): online max and sum, clusters of blocks for long rows."""
    from bwbench.peers import quack  # raises Skip with the reason where QuACK cannot run

    return quack.softmax(case)
