"""LayerNorm and RMSNorm forward with this project's CUDA kernels (kernels/norm.cu).

- plan.py: tiers, instantiations and the launch model (pure);
- launch.py: the optimized `layer_norm` / `rms_norm`;
- naive.py: the multi-kernel starting points.
The float64 references are the suites' (suites/_norm_reference.py); the cuDNN frontend graphs
are bwbench.cuda.cudnn.CudnnNorm.
"""

from bwbench.cuda import lazy_exports

_EXPORTS = {
    "OPTIMIZED": "launch",
    "Chosen": "launch",
    "chosen_launch": "launch",
    "launch_plan": "launch",
    "layer_norm": "launch",
    "rms_norm": "launch",
    "NAIVE": "naive",
    "naive_layer_norm": "naive",
    "naive_rms_norm": "naive",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
