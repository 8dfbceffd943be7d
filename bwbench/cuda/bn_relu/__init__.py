"""BatchNorm2d training forward fused with ReLU (and Add+ReLU) keeping a 1-bit mask, and its
backward (kernels/bn_relu.cu): plan.py (kernels and grid rules; pure), launch.py. The float64
references are the suite's (suites/_bn_relu_reference.py)."""

from bwbench.cuda import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    launch=("SOURCE bn_relu_backward bn_relu_forward forward_x_read_bytes keep_mask layout_of memory_order"
        " one_launch_plan reads_once"),
    plan="BLOCK FEW_PARTIALS LAYOUTS finalize_grid",
)
