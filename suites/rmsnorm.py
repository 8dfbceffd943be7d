"""RMSNorm forward in training form: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps), kept.

LayerNorm without the mean (the variant of the Welford article): the statistic is a plain sum of
squares, which cannot cancel. Same sweep as layernorm. Byte model: read x and gamma, write y and
the float32 rstd of every row; the naive version reads x twice.

Tolerances, per output (y, rstd): y is a product (no cancellation), so its error is relative to
itself and the dtype's default tolerance holds; rstd within 1e-5 relative (atol 0: rstd is never
near 0).
"""

import torch

from bwbench.domains import positive_float, positive_int
from bwbench.suite import DEFAULT_TOLERANCES, Suite, Tolerance, Traffic, compile_per_case, pow2

from ._shapes import NORM_PRESETS

RSTD_TOLERANCE = Tolerance(rtol=1e-5, atol=0.0)
DTYPES = ["float16", "bfloat16", "float32"]

suite = Suite(
    "rmsnorm",
    "y, rstd = RMSNorm(x) over the last dim of x (rows, cols), gamma of shape (cols,)",
    axes={"rows": [49152], "cols": pow2(32, 32768), "eps": [1e-5]},
    dtypes=DTYPES,
    quick={"rows": [4096], "cols": [32, 1024, 32768]},
    x_axis="cols",
    domains={"rows": positive_int, "cols": positive_int, "eps": positive_float},
    presets=NORM_PRESETS,
    output_dtypes=(None, "float32"),  # y in the case's dtype, the statistics in float32
    tolerances={dtype: (DEFAULT_TOLERANCES[dtype], RSTD_TOLERANCE) for dtype in DTYPES},
)


@suite.inputs
def inputs(case, gen):
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=gen.device, dtype=case.torch_dtype)

    return {"x": randn(case.rows, case.cols), "gamma": randn(case.cols), "eps": case.eps}


@suite.reference
def reference(x, gamma, eps):
    from ._norm_reference import rms_norm_reference

    return rms_norm_reference(x, gamma, eps)


@suite.traffic
def traffic(case):
    """Read x and gamma; write y and the float32 rstd of every row."""
    matrix = case.rows * case.cols * case.itemsize
    return Traffic(read=matrix + case.cols * case.itemsize, write=matrix + case.rows * 4)


@suite.impl("optimized", kind="cuda")
def optimized(case):
    """One read of x: sum of squares per thread, warp/block all-reduce, row in registers or shared memory."""
    from bwbench.cuda.norm import rms_norm

    return lambda x, gamma, eps: rms_norm(x, gamma, eps)


@suite.impl("naive", kind="naive")
def naive(case):
    """Two kernels: row mean of squares -> rstd; normalization (second read of x)."""
    from bwbench.cuda.loader import load
    from bwbench.cuda.norm import NAIVE, naive_rms_norm

    load(NAIVE)  # compile now, outside the check and the timing
    return lambda x, gamma, eps: naive_rms_norm(x, gamma, eps)


@suite.impl("cudnn", kind="cudnn")
def cudnn(case):
    """cuDNN frontend rmsnorm graph, training phase (needs nvidia-cudnn-frontend)."""
    from bwbench.cuda.cudnn import CudnnNorm  # raises Skip with the reason where it cannot run

    return CudnnNorm(case.rows, case.cols, case.torch_dtype, case.eps, rms=True).forward


FUSED = hasattr(torch, "_fused_rms_norm")


def _torch_rms_norm(x, gamma, eps):
    if FUSED:
        # The fused op F.rms_norm dispatches to on CUDA; it also returns rstd (F.rms_norm drops it).
        y, rstd = torch._fused_rms_norm(x, [x.shape[-1]], gamma, eps)
        return y, rstd.view(-1).float()
    # Older PyTorch: the composite F.rms_norm computes, with rstd kept.
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + eps)
    return (x.float() * rstd * gamma.float()).to(x.dtype), rstd.view(-1)


@suite.impl("torch", kind="torch",
            description=("torch._fused_rms_norm (the fused kernel F.rms_norm runs on CUDA), returning y and rstd"
                         if FUSED else "composite RMSNorm in eager PyTorch (rsqrt of mean of squares, then scale)"))
def eager(case):
    return _torch_rms_norm


@suite.impl("compiled", kind="compiled")
def compiled(case):
    """torch.compile(dynamic=False) of the torch version: Triton, compiled once per shape."""
    eps = case.eps
    fn = compile_per_case(lambda x, gamma: _torch_rms_norm(x, gamma, eps))
    return lambda x, gamma, eps: fn(x, gamma)


@suite.impl("liger", kind="liger")
def liger(case):
    """Liger-Kernel's Triton RMSNorm forward, casting mode "gemma" (float32 math, y rounded once), offset 0."""
    from bwbench.peers import liger  # raises Skip with the reason where Liger-Kernel cannot run

    return liger.rms_norm(case)


@suite.impl("quack", kind="quack")
def quack(case):
    """QuACK's CuTe DSL RMSNorm forward (sm90+), weight offset 0, rstd stored."""
    from bwbench.peers import quack  # raises Skip with the reason where QuACK cannot run

    return quack.rms_norm(case)
