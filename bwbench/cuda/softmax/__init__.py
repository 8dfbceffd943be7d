"""Softmax over the last dimension of a 2-D tensor, with this project's CUDA kernels.

- dispatch.py: the article's tier rules (pure); plan.py: the launch of a shape (pure);
- launch.py: the optimized family (softmax, log_softmax, their backwards, online_softmax);
- naive.py: the multi-kernel starting points of the softmax, log_softmax and softmax_backward suites.
"""

from bwbench.cuda import lazy_exports

_EXPORTS = {
    "BACKWARD_SOURCES": "launch",
    "FORWARD_SOURCES": "launch",
    "log_softmax": "launch",
    "log_softmax_backward": "launch",
    "online_softmax": "launch",
    "plan_launch": "launch",
    "softmax": "launch",
    "softmax_backward": "launch",
    "which_tier": "launch",
    "FAMILY_NAIVE": "naive",
    "NAIVE": "naive",
    "naive_log_softmax": "naive",
    "naive_softmax": "naive",
    "naive_softmax_backward": "naive",
    "DEFAULT_THRESHOLDS": "plan",
    "OPERATIONS": "plan",
    "SoftmaxPlan": "plan",
    "load_thresholds": "plan",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
