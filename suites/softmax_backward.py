"""The softmax gradient over the last dimension: dx = y * (dy - sum(dy * y, -1)).

The backward of the softmax suite's operation, on the same sweep (OneFlow's grad benchmark). It
reads the forward output y and the gradient dy once each and writes dx once: 3 x the tensor's
bytes, judged against a copy of the same total. The inputs are y = softmax(x) for random x (a
real forward output, rounded to the dtype) and a random dy; the reference is computed in float64
from those rounded tensors. The naive version runs four kernels (multiply, row sum, subtract,
multiply) with float32 intermediates.

dy is random with a scale of cols/32 (`dy_scale`): y ~ 1/cols, so dx = y * (dy - s) then has the
same size at every row length (median |dx| ~ 1.1e-2, max ~ 5), and one absolute tolerance means
the same thing across the sweep instead of being loose at long rows and tight at short ones.

Tolerance: dx = y * (dy - s) cancels where dy ~ s, so an implementation's absolute error is set by
how it forms s = sum(dy * y), not by |dx|. PyTorch's kernels round each dy * y to the storage type
before summing (simulated on these inputs: absolute errors up to 7.6e-5 in float16 and 6.2e-4 in
bfloat16 at cols 32..512, where the float64 reference is ~1e-2), which the default atol (1e-6 and
1e-5) rejects although nothing is wrong but that rounding. The atol here is about twice the worst
of that: 2e-4 (float16), 1.5e-3 (bfloat16) and 1e-7 (float32, whose float sums err by ~2e-8).
That is 2%, 13% and 1e-3 % of the median |dx|: a real bug (a wrong s, a missed row, an unwritten
element) is still far outside it. This project's kernels sum in float32 from the unrounded
products and pass the default tolerances; tests/test_softmax_optimized_gpu.py holds them to those.
"""

import torch

from bwbench.domains import positive_int
from bwbench.suite import DEFAULT_TOLERANCES, Suite, Tolerance, Traffic, compile_per_case, pow2

from ._shapes import SOFTMAX_PRESETS

suite = Suite(
    "softmax_backward",
    "dx = y * (dy - sum(dy * y, -1)) for y = softmax(x), dy of shape (rows, cols)",
    axes={"rows": [49152], "cols": pow2(32, 32768)},
    dtypes=["float16", "bfloat16", "float32"],
    quick={"rows": [4096], "cols": [32, 1024, 32768]},
    x_axis="cols",
    domains={"rows": positive_int, "cols": positive_int},
    presets=SOFTMAX_PRESETS,
    tolerances={
        "float16": Tolerance(rtol=DEFAULT_TOLERANCES["float16"].rtol, atol=2e-4),
        "bfloat16": Tolerance(rtol=DEFAULT_TOLERANCES["bfloat16"].rtol, atol=1.5e-3),
        "float32": Tolerance(rtol=DEFAULT_TOLERANCES["float32"].rtol, atol=1e-7),
    },
)


def dy_scale(cols: int) -> float:
    """dy's scale: dx = y * (dy - s) with y ~ 1/cols, so dy ~ cols/32 keeps dx near 1e-2 at every
    row length (max |dy| ~ 6000 at cols 32768, well inside float16's range)."""
    return max(1.0, cols / 32)


@suite.inputs
def inputs(case, gen):
    x = torch.randn(case.rows, case.cols, generator=gen, device=gen.device, dtype=torch.float32)
    y = torch.softmax(x, dim=-1).to(case.torch_dtype)
    del x
    dy = torch.randn(case.rows, case.cols, generator=gen, device=gen.device, dtype=torch.float32)
    dy = dy.mul_(dy_scale(case.cols)).to(case.torch_dtype)
    return {"y": y, "dy": dy}


REFERENCE_CHUNK = 1 << 26
"""Elements per slice of the float64 reference: peak memory of a few slices, not of 3 full copies."""


@suite.reference
def reference(y, dy):
    dx = torch.empty(y.shape, dtype=torch.float64, device=y.device)
    step = max(1, REFERENCE_CHUNK // max(1, y.shape[-1]))
    for start in range(0, y.shape[0], step):
        y64, dy64 = y[start:start + step].double(), dy[start:start + step].double()
        part = dy64 - (dy64 * y64).sum(dim=-1, keepdim=True)
        dx[start:start + step] = part.mul_(y64)
    return dx


@suite.traffic
def traffic(case):
    size = case.rows * case.cols * case.itemsize
    return Traffic(read=2 * size, write=size)


@suite.impl("naive", kind="naive")
def naive(case):
    """Four kernels: Mul, ReduceSum, BroadcastSub, Mul (float32 in between)."""
    from bwbench.cuda.loader import load
    from bwbench.cuda.softmax import FAMILY_NAIVE, NAIVE, naive_softmax_backward

    load(NAIVE)  # compile now, outside the check and the timing
    load(FAMILY_NAIVE)
    return naive_softmax_backward


@suite.impl("cudnn", kind="cudnn")
def cudnn(case):
    """cudnnSoftmaxBackward, ACCURATE algorithm, INSTANCE mode."""
    from bwbench.cuda.cudnn import CudnnSoftmax  # raises Skip with the reason where cuDNN cannot run

    return CudnnSoftmax(case.rows, case.cols, case.torch_dtype, algorithm="accurate").backward


def _torch_backward(y, dy):
    return torch._softmax_backward_data(dy, y, -1, y.dtype)


@suite.impl("torch", kind="torch")
def eager(case):
    """torch._softmax_backward_data (what autograd runs for softmax) in eager mode."""
    return _torch_backward


@suite.impl("compiled", kind="compiled")
def compiled(case):
    """torch.compile(dynamic=False) of torch._softmax_backward_data: Triton, compiled once per shape."""
    return compile_per_case(_torch_backward)


@suite.impl("optimized", kind="cuda")
def optimized(case):
    """The softmax family's backward: y and dy in registers, in shared memory, or re-read, by cols."""
    from bwbench.cuda.softmax import plan_launch, softmax_backward

    plan_launch("softmax_backward", case.rows, case.cols, case.torch_dtype)  # compile and plan now
    return softmax_backward
