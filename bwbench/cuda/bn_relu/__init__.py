"""BatchNorm2d training forward fused with ReLU (and Add+ReLU) keeping a 1-bit mask, and its
backward (kernels/bn_relu.cu): plan.py (kernels and grid rules; pure), launch.py. The float64
references are the suite's (suites/_bn_relu_reference.py)."""

from bwbench.cuda import lazy_exports

_EXPORTS = {
    "SOURCE": "launch",
    "bn_relu_backward": "launch",
    "bn_relu_forward": "launch",
    "forward_x_read_bytes": "launch",
    "keep_mask": "launch",
    "layout_of": "launch",
    "memory_order": "launch",
    "one_launch_plan": "launch",
    "BLOCK": "plan",
    "FEW_PARTIALS": "plan",
    "LAYOUTS": "plan",
    "finalize_grid": "plan",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
