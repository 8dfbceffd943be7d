"""ReLU and dropout that keep a 1-bit mask for the backward, with this project's kernels
(kernels/bitmask.cu): plan.py (kernels, sizes, keep threshold, grids; pure), launch.py."""

from bwbench.cuda import lazy_exports

_EXPORTS = {
    "SOURCE": "launch",
    "pack_bits": "launch",
    "unpack_bits": "launch",
    "relu_forward": "launch",
    "relu_backward": "launch",
    "masked_backward": "launch",
    "relu_forward_bytemask": "launch",
    "relu_backward_bytemask": "launch",
    "dropout_forward": "launch",
    "dropout_forward_bytes": "launch",
    "dropout_backward": "launch",
    "dropout_backward_bytes": "launch",
    "BLOCK": "plan",
    "KERNELS": "plan",
    "MASK_LINE": "plan",
    "dropout_scale": "plan",
    "dropout_threshold": "plan",
    "packed_bytes": "plan",
    "word_bytes": "plan",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
