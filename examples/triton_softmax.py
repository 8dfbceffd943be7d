"""A user's own Triton softmax, benchmarked with bwbench against torch.softmax and bwbench's kernel.

Copy this file anywhere and run it as a suite:

    bwbench run ./triton_softmax.py                # check, time, results and report
    bwbench run ./triton_softmax.py --quick        # a few shapes
    bwbench list ./                                # what this folder holds

The kernel is the classic fused row softmax: one program per row, the whole row loaded once into
registers, max, exp, sum and divide there, one store. It reads x once and writes y once, so its
speed of light is a copy of the same bytes, the ratio bwbench reports as "% of copy". Only the
public API is imported from bwbench; Triton compiles and autotunes on the first call, which bwbench
keeps out of the timing and records as the build time.
"""

import torch

from bwbench import Skip, Suite, Traffic, pow2

try:
    import triton
    import triton.language as tl
except ImportError:  # the suite still lists where Triton is missing; its kernel is then skipped
    triton = None

suite = Suite(
    "triton_softmax",
    "y = softmax(x, dim=-1) with a user's Triton kernel, next to torch and bwbench's own",
    axes={"rows": [49152], "cols": pow2(256, 16384)},
    dtypes=["float16", "bfloat16", "float32"],
    quick={"rows": [4096], "cols": [1024, 4096]},
    x_axis="cols",
)


if triton is not None:

    @triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (4, 8, 16)], key=["n_cols"])
    @triton.jit
    def softmax_rows(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        inside = cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
        shifted = x - tl.max(x, axis=0)
        numerator = tl.exp(shifted)
        y = numerator / tl.sum(numerator, axis=0)
        tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=inside)


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    """Row softmax of a 2-D tensor: one Triton program per row."""
    rows, cols = x.shape
    y = torch.empty_like(x)
    softmax_rows[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(cols))
    return y


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


@suite.impl("triton", kind="triton")
def mine(case):
    """My Triton kernel: one program per row, the row in registers."""
    if triton is None:
        raise Skip("Triton is not installed here")
    return triton_softmax


@suite.impl("torch", kind="torch")
def eager(case):
    """torch.softmax in eager mode."""
    return lambda x: torch.softmax(x, dim=-1)


suite.reuse("softmax", "optimized", name="bwbench")  # bwbench's own kernel, as a baseline
