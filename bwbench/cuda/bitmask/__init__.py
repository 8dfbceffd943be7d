"""ReLU and dropout that keep a 1-bit mask for the backward, with this project's kernels
(kernels/bitmask.cu): plan.py (kernels, sizes, keep threshold, grids; pure), launch.py."""

from bwbench.cuda import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    launch=("SOURCE pack_bits unpack_bits relu_forward relu_backward masked_backward relu_forward_bytemask"
        " relu_backward_bytemask dropout_forward dropout_forward_bytes dropout_backward"
        " dropout_backward_bytes"),
    plan="BLOCK KEEP_BITS KERNELS MASK_LINE dropout_scale dropout_threshold packed_bytes word_bytes",
)
