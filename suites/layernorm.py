"""LayerNorm forward in training form: y = (x - mean) * rstd * gamma + beta, with mean and rstd kept.

The article's setting (Apex / OneFlow LayerNorm): per-row statistics over the last dimension, half
precision, 49152 rows and 32 ... 32768 columns as in the softmax benchmark. A forward that keeps
its statistics reads x, gamma and beta once and writes y, mean and rstd once: that is its byte
model and the copy it is measured against. The naive version reads x three times (mean, variance
around it, normalization), so it cannot get past about half of that copy.

Tolerances, per output (y, mean, rstd):
- y: the dtype's rtol; atol at least 1e-5, because y = x_hat * gamma + beta is a sum whose error
  is relative to its terms (about 1), not to y: where the two terms cancel, y is near 0 and a
  float32 kernel is off by a few ulps of 1 (~1e-7 ... 1e-6), which a 1e-8 atol would call wrong.
- mean: rtol 1e-5 and atol 1e-6. A float32 mean of unit-scale data is exact to a few ulps of the
  data (6e-8 each), not of the mean: a row of mean 1e-7 cannot be known to 1e-12.
- rstd: rtol 1e-5, atol 0 (rstd is never near 0: the variance is O(1), plus eps).
"""

import torch

from bwbench.domains import positive_float, positive_int
from bwbench.suite import DEFAULT_TOLERANCES, Suite, Tolerance, Traffic, compile_per_case, pow2

from ._shapes import NORM_PRESETS

Y_MIN_ATOL = 1e-5
STATS_TOLERANCES = (Tolerance(rtol=1e-5, atol=1e-6), Tolerance(rtol=1e-5, atol=0.0))
DTYPES = ["float16", "bfloat16", "float32"]

suite = Suite(
    "layernorm",
    "y, mean, rstd = LayerNorm(x) over the last dim of x (rows, cols), gamma and beta of shape (cols,)",
    axes={"rows": [49152], "cols": pow2(32, 32768), "eps": [1e-5]},
    dtypes=DTYPES,
    quick={"rows": [4096], "cols": [32, 1024, 32768]},
    x_axis="cols",
    domains={"rows": positive_int, "cols": positive_int, "eps": positive_float},
    presets=NORM_PRESETS,
    output_dtypes=(None, "float32", "float32"),  # y in the case's dtype, the statistics in float32
    tolerances={
        dtype: (Tolerance(DEFAULT_TOLERANCES[dtype].rtol, max(DEFAULT_TOLERANCES[dtype].atol, Y_MIN_ATOL)),
                *STATS_TOLERANCES)
        for dtype in DTYPES
    },
)


@suite.inputs
def inputs(case, gen):
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=gen.device, dtype=case.torch_dtype)

    return {"x": randn(case.rows, case.cols), "gamma": randn(case.cols), "beta": randn(case.cols), "eps": case.eps}


@suite.reference
def reference(x, gamma, beta, eps):
    from ._norm_reference import layer_norm_reference

    return layer_norm_reference(x, gamma, beta, eps)


@suite.traffic
def traffic(case):
    """Read x, gamma and beta; write y and the float32 mean and rstd of every row."""
    matrix = case.rows * case.cols * case.itemsize
    return Traffic(read=matrix + 2 * case.cols * case.itemsize, write=matrix + 2 * case.rows * 4)


@suite.impl("optimized", kind="cuda")
def optimized(case):
    """One read of x: Welford per thread, Chan merge across lanes and warps, row in registers or shared memory
    (full rows of up to 2048 columns: shifted two-pass sums over the registers)."""
    from bwbench.cuda.norm import layer_norm

    return lambda x, gamma, beta, eps: layer_norm(x, gamma, beta, eps)


@suite.impl("naive", kind="naive")
def naive(case):
    """Three kernels: row mean; variance around it (second read of x) -> rstd; normalization (third read)."""
    from bwbench.cuda.loader import load
    from bwbench.cuda.norm import NAIVE, naive_layer_norm

    load(NAIVE)  # compile now, outside the check and the timing
    return lambda x, gamma, beta, eps: naive_layer_norm(x, gamma, beta, eps)


@suite.impl("cudnn", kind="cudnn")
def cudnn(case):
    """cuDNN frontend layernorm graph, training phase (needs nvidia-cudnn-frontend)."""
    from bwbench.cuda.cudnn import CudnnNorm  # raises Skip with the reason where it cannot run

    return CudnnNorm(case.rows, case.cols, case.torch_dtype, case.eps, rms=False).forward


def _torch_layer_norm(x, gamma, beta, eps):
    # The op F.layer_norm itself dispatches to; it returns the statistics F.layer_norm drops.
    y, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return y, mean.view(-1).float(), rstd.view(-1).float()


@suite.impl("torch", kind="torch")
def eager(case):
    """torch.native_layer_norm (what F.layer_norm runs), returning y, mean and rstd."""
    return _torch_layer_norm


@suite.impl("compiled", kind="compiled")
def compiled(case):
    """torch.compile(dynamic=False) of the torch version: Triton, compiled once per shape."""
    eps = case.eps
    fn = compile_per_case(lambda x, gamma, beta: _torch_layer_norm(x, gamma, beta, eps))
    return lambda x, gamma, beta, eps: fn(x, gamma, beta)


@suite.impl("liger", kind="liger")
def liger(case):
    """Liger-Kernel's Triton LayerNorm forward: one program per row, float32 mean and rstd."""
    from bwbench.peers import liger  # raises Skip with the reason where Liger-Kernel cannot run

    return liger.layer_norm(case)


@suite.impl("quack", kind="quack")
def quack(case):
    """QuACK's CuTe DSL LayerNorm forward (sm90+): its RMSNorm kernel with is_layernorm, mean and rstd stored."""
    from bwbench.peers import quack  # raises Skip with the reason where QuACK cannot run

    return quack.layer_norm(case)
