"""cuDNN baselines: the legacy softmax and BN+ReLU through ctypes on PyTorch's own cuDNN
(bindings.py), and the frontend's normalization graphs (frontend.py)."""

from bwbench.cuda.cudnn.bindings import CudnnBatchNormRelu, CudnnSoftmax, cudnn_version
from bwbench.cuda.cudnn.frontend import CudnnNorm
from bwbench.cuda.errors import CudnnError, CudnnUnavailable

__all__ = ["CudnnBatchNormRelu", "CudnnError", "CudnnNorm", "CudnnSoftmax", "CudnnUnavailable", "cudnn_version"]
