"""LayerNorm and RMSNorm forward with this project's CUDA kernels (kernels/norm.cu).

- plan.py: tiers, instantiations and the launch model (pure);
- launch.py: the optimized `layer_norm` / `rms_norm`;
- naive.py: the multi-kernel starting points.
The float64 references are the suites' (suites/_norm_reference.py); the cuDNN frontend graphs
are bwbench.cuda.cudnn.CudnnNorm.
"""

from bwbench.cuda import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    launch="OPTIMIZED Chosen chosen_launch launch_plan layer_norm rms_norm",
    naive="NAIVE naive_layer_norm naive_rms_norm",
)
