"""QuACK (Dao-AILab/quack) as a baseline: its CuTe DSL kernels for softmax, RMSNorm and LayerNorm.

QuACK targets Hopper and newer (sm90+: thread-block clusters for long rows); on an older GPU its
cases are skipped with that reason. It needs NVIDIA's CUTLASS DSL libraries (nvidia-cutlass-dsl,
about 90 MB), which `pip install 'bwbench[quack]'` brings in.

The adapters call QuACK's forward entry points with the suite's tensors and return the suites'
outputs (y, and float32 mean and rstd per row), so the suites' byte models hold as they are.
RMSNorm goes through `quack.rmsnorm.rmsnorm_fwd(store_rstd=True)`, weight offset 0:
y = x * rstd * gamma. LayerNorm goes through the op that QuACK's own `layernorm_fwd` runs,
`quack.rmsnorm._rmsnorm_fwd` with `is_layernorm=True`: that wrapper asserts float32 gamma and
beta, while the op itself takes them in x's dtype, as the suite passes them; converting them
inside the timed call would time two extra kernels. Kernels compile on their first call (the
check), outside the timing.
"""

from __future__ import annotations

from bwbench.peers import Peer, require_dtype
from bwbench.suite import Skip

QUACK = Peer(distribution="quack-kernels", extra="quack", minimum="0.6.0")
MIN_CAPABILITY = (9, 0)


def _supports(case) -> None:
    """QuACK's own limits, checked before its (large) libraries are imported."""
    import torch

    require_dtype(QUACK, case.dtype)
    if not torch.cuda.is_available():
        raise Skip("quack-kernels needs a CUDA GPU")
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < MIN_CAPABILITY:
        raise Skip(f"quack-kernels needs an sm90+ GPU (Hopper or newer); this one is sm{major}{minor}")


def rms_norm(case):
    """y, rstd from quack.rmsnorm.rmsnorm_fwd (store_rstd=True, no residual, weight offset 0)."""
    _supports(case)
    forward = QUACK.function("quack.rmsnorm", "rmsnorm_fwd")

    def run(x, gamma, eps):
        y, _, rstd = forward(x, gamma, eps=eps, store_rstd=True)
        return y, rstd

    return run


def layer_norm(case):
    """y, mean, rstd from quack.rmsnorm._rmsnorm_fwd with is_layernorm=True (gamma, beta in x's dtype)."""
    import torch

    _supports(case)
    forward = QUACK.function("quack.rmsnorm", "_rmsnorm_fwd")

    def run(x, gamma, beta, eps):
        y = torch.empty_like(x)
        mean = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        rstd = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        # (x, weight, out, bias, rstd, mean, residual, residual_out, eps, is_layernorm)
        forward(x, gamma, y, beta, rstd, mean, None, None, eps, True)
        return y, mean, rstd

    return run


def softmax(case):
    """y from quack.softmax.softmax_fwd (online softmax, row in registers; clusters for long rows)."""
    _supports(case)
    forward = QUACK.function("quack.softmax", "softmax_fwd")
    return lambda x: forward(x)
