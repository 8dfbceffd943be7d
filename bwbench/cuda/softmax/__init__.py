"""Softmax over the last dimension of a 2-D tensor, with this project's CUDA kernels.

- dispatch.py: the article's tier rules (pure); plan.py: the launch of a shape (pure);
- launch.py: the optimized family (softmax, log_softmax, their backwards, online_softmax);
- naive.py: the multi-kernel starting points of the softmax, log_softmax and softmax_backward suites.
"""

from bwbench.cuda import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    launch=("BACKWARD_SOURCES FORWARD_SOURCES log_softmax log_softmax_backward online_softmax plan_launch"
        " softmax softmax_backward which_tier"),
    naive="FAMILY_NAIVE NAIVE naive_log_softmax naive_softmax naive_softmax_backward",
    plan="DEFAULT_THRESHOLDS OPERATIONS SoftmaxPlan load_thresholds",
)
