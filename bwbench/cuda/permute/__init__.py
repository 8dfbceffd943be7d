"""`x.permute(perm).contiguous()` with this project's CUDA kernels (kernels/permute.cu).

- simplify.py and plan.py: the plan of a permute and its launch (pure);
- launch.py: the optimized `permute` and the per-element `naive_permute`.
"""

from bwbench.cuda import lazy_exports

_EXPORTS = {
    "NAIVE": "launch",
    "OPTIMIZED": "launch",
    "naive_permute": "launch",
    "permute": "launch",
    "plan_for": "launch",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
