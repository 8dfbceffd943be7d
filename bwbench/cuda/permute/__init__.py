"""`x.permute(perm).contiguous()` with this project's CUDA kernels (kernels/permute.cu).

- simplify.py and plan.py: the plan of a permute and its launch (pure);
- launch.py: the optimized `permute` and the per-element `naive_permute`.
"""

from bwbench.cuda import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    launch="NAIVE OPTIMIZED naive_permute permute plan_for",
)
