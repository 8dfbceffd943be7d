"""cuDNN softmax (the legacy cudnnSoftmaxForward/Backward API) through ctypes.

It binds the cuDNN library PyTorch itself loaded, so the baseline is the exact cuDNN a PyTorch user
gets, with no second copy of the library and no extra dependency. In cuDNN 9 the main library
(libcudnn.so.9) is a shim that still exports the legacy API and forwards it to libcudnn_ops; a
symbol it lacks is looked up in libcudnn_ops next to it.

Anything that makes the baseline impossible here (no cuDNN, a missing symbol, an unsupported dtype
or size) raises CudnnUnavailable, whose text is the reason recorded for a skipped implementation.
"""

from __future__ import annotations

import ctypes
import re
import threading
from pathlib import Path
from typing import Any

import torch

from bwbench.cuda.errors import CudnnError, CudnnUnavailable
from bwbench.cuda.loader import device_index

__all__ = ["CudnnBatchNormRelu", "CudnnError", "CudnnSoftmax", "CudnnUnavailable", "cudnn_version"]


# cudnnDataType_t
CUDNN_DATA_FLOAT = 0
CUDNN_DATA_HALF = 2
CUDNN_DATA_BFLOAT16 = 9
# cudnnTensorFormat_t
CUDNN_TENSOR_NCHW = 0
CUDNN_TENSOR_NHWC = 1
# cudnnBatchNormMode_t, cudnnBatchNormOps_t, cudnnActivationMode_t, cudnnNanPropagation_t
CUDNN_BATCHNORM_SPATIAL_PERSISTENT = 2
CUDNN_BATCHNORM_OPS_BN_ACTIVATION = 1
CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION = 2
CUDNN_ACTIVATION_RELU = 1
CUDNN_NOT_PROPAGATE_NAN = 0
# cudnnSoftmaxAlgorithm_t
CUDNN_SOFTMAX_FAST = 0
CUDNN_SOFTMAX_ACCURATE = 1
CUDNN_SOFTMAX_LOG = 2
# cudnnSoftmaxMode_t
CUDNN_SOFTMAX_MODE_INSTANCE = 0
# cudnnStatus_t: "not supported" is 9 in cuDNN 8 and the 3000-3999 family in cuDNN 9.
_CUDNN8_STATUS_NOT_SUPPORTED = 9

_DATA_TYPES = {
    torch.float32: CUDNN_DATA_FLOAT,
    torch.float16: CUDNN_DATA_HALF,
    torch.bfloat16: CUDNN_DATA_BFLOAT16,
}
_ALGORITHMS = {"accurate": CUDNN_SOFTMAX_ACCURATE, "log": CUDNN_SOFTMAX_LOG}
_INT32_MAX = 2**31 - 1

_c_int, _c_void_p = ctypes.c_int, ctypes.c_void_p
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "cudnnGetVersion": (ctypes.c_size_t, []),
    "cudnnGetErrorString": (ctypes.c_char_p, [_c_int]),
    "cudnnCreate": (_c_int, [ctypes.POINTER(_c_void_p)]),
    "cudnnSetStream": (_c_int, [_c_void_p, _c_void_p]),
    "cudnnCreateTensorDescriptor": (_c_int, [ctypes.POINTER(_c_void_p)]),
    "cudnnDestroyTensorDescriptor": (_c_int, [_c_void_p]),
    # (desc, format, dataType, n, c, h, w)
    "cudnnSetTensor4dDescriptor": (_c_int, [_c_void_p, _c_int, _c_int, _c_int, _c_int, _c_int, _c_int]),
    # (handle, algo, mode, alpha, xDesc, x, beta, yDesc, y)
    "cudnnSoftmaxForward": (_c_int, [_c_void_p, _c_int, _c_int] + [_c_void_p] * 6),
    # (handle, algo, mode, alpha, yDesc, y, dyDesc, dy, beta, dxDesc, dx)
    "cudnnSoftmaxBackward": (_c_int, [_c_void_p, _c_int, _c_int] + [_c_void_p] * 8),
    "cudnnCreateActivationDescriptor": (_c_int, [ctypes.POINTER(_c_void_p)]),
    "cudnnDestroyActivationDescriptor": (_c_int, [_c_void_p]),
    # (desc, mode, reluNanOpt, coef)
    "cudnnSetActivationDescriptor": (_c_int, [_c_void_p, _c_int, _c_int, ctypes.c_double]),
    # (derivedBnDesc, xDesc, mode)
    "cudnnDeriveBNTensorDescriptor": (_c_int, [_c_void_p, _c_void_p, _c_int]),
    # (handle, mode, bnOps, xDesc, zDesc, yDesc, bnScaleBiasMeanVarDesc, activationDesc, *size)
    "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize": (
        _c_int, [_c_void_p, _c_int, _c_int] + [_c_void_p] * 5 + [ctypes.POINTER(ctypes.c_size_t)]),
    # (handle, mode, bnOps, activationDesc, xDesc, *size)
    "cudnnGetBatchNormalizationTrainingExReserveSpaceSize": (
        _c_int, [_c_void_p, _c_int, _c_int, _c_void_p, _c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
    # (handle, mode, bnOps, alpha, beta, xDesc, x, zDesc, z, yDesc, y, bnDesc, scale, bias,
    #  exponentialAverageFactor, runningMean, runningVar, epsilon, saveMean, saveInvVariance,
    #  activationDesc, workspace, workspaceBytes, reserveSpace, reserveSpaceBytes)
    "cudnnBatchNormalizationForwardTrainingEx": (
        _c_int, [_c_void_p, _c_int, _c_int] + [_c_void_p] * 11 + [ctypes.c_double, _c_void_p, _c_void_p,
                                                                  ctypes.c_double, _c_void_p, _c_void_p, _c_void_p,
                                                                  _c_void_p, ctypes.c_size_t, _c_void_p,
                                                                  ctypes.c_size_t]),
}

_LOCK = threading.Lock()
_LIB: _Library | None = None
_HANDLES: dict[int, int] = {}  # device index -> cudnnHandle_t, one per device for the process


class _Library:
    """The loaded cuDNN library and its typed functions."""

    def __init__(self, path: str, cdll: ctypes.CDLL) -> None:
        self.path = path
        self.cdll = cdll
        self._functions: dict[str, Any] = {}
        self._fallbacks: list[ctypes.CDLL] | None = None
        self.version = int(self.function("cudnnGetVersion")())

    def function(self, name: str) -> Any:
        fn = self._functions.get(name)
        if fn is not None:
            return fn
        restype, argtypes = _SIGNATURES[name]
        fn = getattr(self.cdll, name, None)
        if fn is None:
            for lib in self._sublibraries():
                fn = getattr(lib, name, None)
                if fn is not None:
                    break
        if fn is None:
            raise CudnnUnavailable(f"{name} is not exported by {self.path} (cuDNN {self.version_text()})")
        fn.restype = restype
        fn.argtypes = argtypes
        self._functions[name] = fn
        return fn

    def _sublibraries(self) -> list[ctypes.CDLL]:
        # cuDNN 9 keeps the legacy ops in libcudnn_ops.so.9, next to the shim.
        if self._fallbacks is None:
            self._fallbacks = []
            folder = Path(self.path).parent
            for candidate in sorted(folder.glob("libcudnn_ops.so*")) if folder.is_dir() else []:
                try:
                    self._fallbacks.append(ctypes.CDLL(str(candidate)))
                    break
                except OSError:
                    continue
        return self._fallbacks

    def version_text(self) -> str:
        v = getattr(self, "version", 0)
        if v >= 90000:  # cuDNN 9: major * 10000 + minor * 100 + patch
            return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        return f"{v // 1000}.{v // 100 % 10}.{v % 100}" if v else "unknown"

    def error_string(self, status: int) -> str:
        try:
            text = self.function("cudnnGetErrorString")(status)
        except CudnnUnavailable:
            text = None
        return text.decode(errors="replace") if text else f"cuDNN status {status}"

    def is_not_supported(self, status: int) -> bool:
        if self.version >= 90000:
            return 3000 <= status < 4000
        return status == _CUDNN8_STATUS_NOT_SUPPORTED

    def check(self, status: int, what: str) -> None:
        if status == 0:
            return
        message = f"{what}: {self.error_string(status)} (status {status}, cuDNN {self.version_text()})"
        if self.is_not_supported(status):
            raise CudnnUnavailable(message)
        raise CudnnError(status, message)


def _loaded_cudnn_path() -> str | None:
    """Path of the main libcudnn.so* mapped into this process (not libcudnn_ops, _graph, ...)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and re.search(r"/libcudnn\.so(\.\d+)*$", parts[5]):
            return parts[5]
    return None


def _library() -> _Library:
    global _LIB
    if _LIB is not None:
        return _LIB
    with _LOCK:
        if _LIB is not None:
            return _LIB
        try:
            torch_version = torch.backends.cudnn.version()  # makes PyTorch load its cuDNN
        except Exception:  # a CPU-only or broken build: fall through to the plain names
            torch_version = None
        candidates = [p for p in (_loaded_cudnn_path(),) if p] + ["libcudnn.so.9", "libcudnn.so.8"]
        errors = []
        for candidate in candidates:
            try:
                cdll = ctypes.CDLL(candidate)
            except OSError as exc:
                errors.append(f"{candidate}: {exc}")
                continue
            if getattr(cdll, "cudnnGetVersion", None) is None:
                errors.append(f"{candidate}: no cudnnGetVersion")
                continue
            _LIB = _Library(candidate, cdll)
            return _LIB
        raise CudnnUnavailable(
            f"cuDNN not found (torch.backends.cudnn.version() = {torch_version}; tried " + "; ".join(errors) + ")"
        )


def cudnn_version() -> int | None:
    """cudnnGetVersion() of the cuDNN this module uses (e.g. 91000 for 9.10.0), or None without cuDNN."""
    try:
        return _library().version
    except CudnnUnavailable:
        return None


def _handle(lib: _Library, device: int) -> int:
    handle = _HANDLES.get(device)
    if handle is not None:
        return handle
    with _LOCK:
        handle = _HANDLES.get(device)
        if handle is None:
            out = _c_void_p()
            with torch.cuda.device(device):  # a cuDNN handle belongs to the device current at creation
                lib.check(lib.function("cudnnCreate")(ctypes.byref(out)), "cudnnCreate")
            handle = _HANDLES[device] = int(out.value)
    return handle


class CudnnSoftmax:
    """cuDNN softmax over the last dim of a contiguous (rows, cols) tensor.

    Built once (outside timing): the library, the per-device handle and the tensor descriptor.
    The tensor is described as NCHW (rows, cols, 1, 1) with CUDNN_SOFTMAX_MODE_INSTANCE, i.e. one
    softmax over C*H*W = cols values per row. algorithm "accurate" is softmax (max-subtracted), "log"
    is log_softmax.
    """

    def __init__(self, rows: int, cols: int, dtype: torch.dtype, algorithm: str = "accurate",
                 device: int | torch.device | None = None) -> None:
        self._desc: int | None = None
        self._lib: _Library | None = None
        if algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm must be one of {sorted(_ALGORITHMS)}, got {algorithm!r}")
        if rows < 1 or cols < 1:
            raise ValueError(f"rows and cols must be >= 1, got ({rows}, {cols})")
        if dtype not in _DATA_TYPES:
            supported = ", ".join(str(d).removeprefix("torch.") for d in _DATA_TYPES)
            raise CudnnUnavailable(f"cuDNN softmax: dtype {dtype} not supported here (supported: {supported})")
        if rows > _INT32_MAX or cols > _INT32_MAX or rows * cols > _INT32_MAX:
            raise CudnnUnavailable(
                f"cuDNN softmax: shape ({rows}, {cols}) does not fit its int32 tensor descriptors "
                f"(each dimension and the element count must be <= {_INT32_MAX})"
            )
        self.rows, self.cols, self.dtype, self.algorithm = int(rows), int(cols), dtype, algorithm
        index = device_index(device)
        self.device = torch.device("cuda", index)

        lib = _library()
        for name in ("cudnnSetStream", "cudnnSoftmaxForward", "cudnnSoftmaxBackward"):
            lib.function(name)  # a missing symbol is a reason to skip, found now rather than at timing
        self._handle = _handle(lib, index)
        desc = _c_void_p()
        lib.check(lib.function("cudnnCreateTensorDescriptor")(ctypes.byref(desc)), "cudnnCreateTensorDescriptor")
        self._lib, self._desc = lib, int(desc.value)
        lib.check(
            lib.function("cudnnSetTensor4dDescriptor")(
                self._desc, CUDNN_TENSOR_NCHW, _DATA_TYPES[dtype], self.rows, self.cols, 1, 1),
            f"cudnnSetTensor4dDescriptor({self.rows}, {self.cols}, 1, 1, {dtype})",
        )
        self._algo = _ALGORITHMS[algorithm]
        # Scaling factors are float for half, bfloat16 and float data (double only for double data).
        self._alpha = ctypes.c_float(1.0)
        self._beta = ctypes.c_float(0.0)

    def __repr__(self) -> str:
        return f"<CudnnSoftmax {self.algorithm} ({self.rows}, {self.cols}) {self.dtype} on {self.device}>"

    def _check_tensor(self, t: torch.Tensor, name: str) -> None:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != (self.rows, self.cols) or t.dtype != self.dtype or t.device != self.device:
            raise ValueError(
                f"{name} is {tuple(t.shape)} {t.dtype} on {t.device}; this CudnnSoftmax was built for "
                f"({self.rows}, {self.cols}) {self.dtype} on {self.device}"
            )
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")

    def _ready(self) -> _Library:
        if self._desc is None or self._lib is None:
            raise RuntimeError("this CudnnSoftmax is closed")
        lib = self._lib
        stream = torch.cuda.current_stream(self.device).cuda_stream
        lib.check(lib.function("cudnnSetStream")(self._handle, stream), "cudnnSetStream")
        return lib

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = softmax(x, -1) (or log_softmax for algorithm="log"), on PyTorch's current stream."""
        self._check_tensor(x, "x")
        lib = self._ready()
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        lib.check(
            lib.function("cudnnSoftmaxForward")(
                self._handle, self._algo, CUDNN_SOFTMAX_MODE_INSTANCE,
                ctypes.byref(self._alpha), self._desc, x.data_ptr(),
                ctypes.byref(self._beta), self._desc, y.data_ptr()),
            "cudnnSoftmaxForward",
        )
        return y

    __call__ = forward

    def backward(self, y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        """dx from the forward output y and the output gradient dy."""
        self._check_tensor(y, "y")
        self._check_tensor(dy, "dy")
        lib = self._ready()
        dx = torch.empty_like(y, memory_format=torch.contiguous_format)
        lib.check(
            lib.function("cudnnSoftmaxBackward")(
                self._handle, self._algo, CUDNN_SOFTMAX_MODE_INSTANCE,
                ctypes.byref(self._alpha), self._desc, y.data_ptr(), self._desc, dy.data_ptr(),
                ctypes.byref(self._beta), self._desc, dx.data_ptr()),
            "cudnnSoftmaxBackward",
        )
        return dx

    def close(self) -> None:
        """Destroy the tensor descriptor (the handle is shared by the process and kept)."""
        desc, self._desc = self._desc, None
        if desc is not None and self._lib is not None:
            self._lib.function("cudnnDestroyTensorDescriptor")(desc)

    def __enter__(self) -> CudnnSoftmax:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may already be gone
            pass


class CudnnBatchNormRelu:
    """cuDNN's fused BatchNorm training forward + ReLU (CUDNN_BATCHNORM_OPS_BN_ACTIVATION), or
    + residual add + ReLU (BN_ADD_ACTIVATION), in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode, through
    cudnnBatchNormalizationForwardTrainingEx.

    cuDNN fuses the activation only for NHWC data (channels_last), float16 (bfloat16 too) with
    float32 scale/bias/statistics; anything else raises CudnnUnavailable with the reason. The
    ReLU mask cuDNN keeps for its backward lives in an opaque reserve space, whose size
    (`reserve_bytes`) is asked of cuDNN; `forward` returns it in the mask's place. Built once
    (descriptors, workspace and reserve sizes) outside timing; running statistics are not updated
    (NULL pointers, as cuDNN allows).
    """

    def __init__(self, shape: tuple[int, int, int, int], dtype: torch.dtype, eps: float, residual: bool,
                 layout: str, device: int | None = None) -> None:
        self._lib: _Library | None = None
        self._descs: list[tuple[str, int]] = []
        if layout != "NHWC":
            raise CudnnUnavailable("cuDNN fuses BN with an activation only for NHWC (channels_last) data; "
                                   f"{layout} is not supported")
        if dtype not in (torch.float16, torch.bfloat16):
            raise CudnnUnavailable(f"cuDNN's fused BN+activation (persistent NHWC) takes float16/bfloat16 "
                                   f"data, not {dtype}")
        n, c, h, w = (int(v) for v in shape)
        if n * c * h * w > _INT32_MAX:
            raise CudnnUnavailable(f"shape {shape} does not fit cuDNN's int32 tensor descriptors")
        self.shape, self.dtype, self.eps, self.residual = (n, c, h, w), dtype, float(eps), residual
        index = device_index(device)
        self.device = torch.device("cuda", index)
        lib = _library()
        for name in ("cudnnSetStream", "cudnnBatchNormalizationForwardTrainingEx", "cudnnDeriveBNTensorDescriptor",
                     "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize",
                     "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", "cudnnCreateActivationDescriptor"):
            lib.function(name)
        self._lib = lib
        self._handle = _handle(lib, index)
        self._x = self._tensor_desc()
        lib.check(lib.function("cudnnSetTensor4dDescriptor")(self._x, CUDNN_TENSOR_NHWC, _DATA_TYPES[dtype], n, c, h, w),
                  f"cudnnSetTensor4dDescriptor(NHWC {shape}, {dtype})")
        self._bn = self._tensor_desc()
        lib.check(lib.function("cudnnDeriveBNTensorDescriptor")(self._bn, self._x, CUDNN_BATCHNORM_SPATIAL_PERSISTENT),
                  "cudnnDeriveBNTensorDescriptor")
        act = _c_void_p()
        lib.check(lib.function("cudnnCreateActivationDescriptor")(ctypes.byref(act)), "cudnnCreateActivationDescriptor")
        self._act = int(act.value)
        self._descs.append(("cudnnDestroyActivationDescriptor", self._act))
        lib.check(lib.function("cudnnSetActivationDescriptor")(self._act, CUDNN_ACTIVATION_RELU,
                                                               CUDNN_NOT_PROPAGATE_NAN, 0.0),
                  "cudnnSetActivationDescriptor(RELU)")
        self._ops = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION if residual else CUDNN_BATCHNORM_OPS_BN_ACTIVATION
        z_desc = self._x if residual else None
        size = ctypes.c_size_t()
        lib.check(lib.function("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize")(
            self._handle, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, self._ops, self._x, z_desc, self._x, self._bn,
            self._act, ctypes.byref(size)), "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize")
        self.workspace_bytes = int(size.value)
        lib.check(lib.function("cudnnGetBatchNormalizationTrainingExReserveSpaceSize")(
            self._handle, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, self._ops, self._act, self._x, ctypes.byref(size)),
            "cudnnGetBatchNormalizationTrainingExReserveSpaceSize")
        self.reserve_bytes = int(size.value)
        self._workspace = torch.empty(max(1, self.workspace_bytes), dtype=torch.uint8, device=self.device)
        self._alpha, self._beta = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def _tensor_desc(self) -> int:
        lib = self._lib
        desc = _c_void_p()
        lib.check(lib.function("cudnnCreateTensorDescriptor")(ctypes.byref(desc)), "cudnnCreateTensorDescriptor")
        self._descs.append(("cudnnDestroyTensorDescriptor", int(desc.value)))
        return int(desc.value)

    def forward(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, z: torch.Tensor | None = None):
        """(y, reserve, save_mean, save_invstd); y channels_last like x; reserve uint8 (1, reserve_bytes)."""
        if self._lib is None:
            raise RuntimeError("this CudnnBatchNormRelu is closed")
        for name, t in (("x", x), ("z", z)):
            if t is None:
                continue
            if tuple(t.shape) != self.shape or t.dtype != self.dtype or \
                    not t.is_contiguous(memory_format=torch.channels_last):
                raise ValueError(f"{name} must be a channels_last {self.dtype} tensor of shape {self.shape}")
        if (z is not None) != self.residual:
            raise ValueError("z is required for the residual variant and only for it")
        c = self.shape[1]
        for name, p in (("gamma", gamma), ("beta", beta)):
            if p.shape != (c,) or p.dtype != torch.float32 or not p.is_contiguous():
                raise ValueError(f"{name} must be a contiguous float32 tensor of shape ({c},)")
        lib = self._lib
        lib.check(lib.function("cudnnSetStream")(self._handle, torch.cuda.current_stream(self.device).cuda_stream),
                  "cudnnSetStream")
        y = torch.empty_like(x, memory_format=torch.channels_last)
        mean = torch.empty(c, dtype=torch.float32, device=x.device)
        invstd = torch.empty(c, dtype=torch.float32, device=x.device)
        reserve = torch.empty(max(1, self.reserve_bytes), dtype=torch.uint8, device=x.device)
        lib.check(lib.function("cudnnBatchNormalizationForwardTrainingEx")(
            self._handle, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, self._ops,
            ctypes.byref(self._alpha), ctypes.byref(self._beta),
            self._x, x.data_ptr(), self._x if z is not None else None, z.data_ptr() if z is not None else None,
            self._x, y.data_ptr(), self._bn, gamma.data_ptr(), beta.data_ptr(),
            0.0, None, None, self.eps, mean.data_ptr(), invstd.data_ptr(), self._act,
            self._workspace.data_ptr(), self.workspace_bytes, reserve.data_ptr(), self.reserve_bytes),
            "cudnnBatchNormalizationForwardTrainingEx")
        # (1, reserve_bytes): cuDNN's own layout, not this project's packed bits, so it is shaped so
        # that nobody decodes it as such.
        return y, reserve[:self.reserve_bytes].view(1, -1), mean, invstd

    __call__ = forward

    def close(self) -> None:
        descs, self._descs = self._descs, []
        if self._lib is not None:
            for destroy, desc in descs:
                self._lib.function(destroy)(desc)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
