"""cuDNN frontend graphs (the `nvidia-cudnn-frontend` package): the layernorm and rmsnorm baselines.

Beside the ctypes bindings (bindings.py) because both are "the cuDNN a PyTorch user gets"; where
the package is missing or cuDNN has no engine for a case, CudnnUnavailable says why and the runner
records the implementation as skipped.
"""

from __future__ import annotations

import torch

from bwbench.cuda.errors import CudnnUnavailable

__all__ = ["CudnnNorm"]

CUDNN_FRONTEND_MISSING = "nvidia-cudnn-frontend is not installed (pip install bwbench[cudnn])"


def _import_cudnn_frontend():
    try:
        import cudnn  # the nvidia-cudnn-frontend package
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "cudnn":
            raise CudnnUnavailable(CUDNN_FRONTEND_MISSING) from exc
        raise CudnnUnavailable(f"nvidia-cudnn-frontend failed to import: {exc}") from exc
    except (ImportError, OSError) as exc:
        raise CudnnUnavailable(f"nvidia-cudnn-frontend failed to import: {exc}") from exc
    return cudnn


class CudnnNorm:
    """The cuDNN frontend's layernorm or rmsnorm graph (training phase) for one shape and dtype.

    x is described as (rows, cols, 1, 1) with channels-last strides (what the frontend's
    normalization engines expect; the same bytes as a contiguous (rows, cols) matrix), gamma and
    beta as (1, cols, 1, 1), the statistics as (rows, 1, 1, 1) float32. Built once, outside the
    timing; `forward` executes it on PyTorch's current stream. Raises Skip where the package is
    missing or cuDNN has no engine for the case.
    """

    def __init__(self, rows: int, cols: int, dtype: torch.dtype, eps: float, rms: bool) -> None:
        cudnn = _import_cudnn_frontend()
        self.cudnn = cudnn
        self.rms = rms
        self.rows, self.cols, self.dtype = rows, cols, dtype
        data_types = {torch.float16: cudnn.data_type.HALF, torch.bfloat16: cudnn.data_type.BFLOAT16,
                      torch.float32: cudnn.data_type.FLOAT}
        if dtype not in data_types:
            raise CudnnUnavailable(f"no cuDNN data type for {dtype}")
        io = data_types[dtype]
        self.handle = cudnn.create_handle()
        self._stream = None
        graph = cudnn.pygraph(handle=self.handle, intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT)
        self.x_t = graph.tensor(name="x", dim=[rows, cols, 1, 1], stride=[cols, 1, cols, cols], data_type=io)
        self.g_t = graph.tensor(name="gamma", dim=[1, cols, 1, 1], stride=[cols, 1, cols, cols], data_type=io)
        self.eps_cpu = torch.full((1, 1, 1, 1), eps, dtype=torch.float32)
        self.eps_t = graph.tensor(name="eps", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1],
                                  data_type=cudnn.data_type.FLOAT, is_pass_by_value=True)
        if rms:
            self.b_t = None
            self.y_t, self.rstd_t = graph.rmsnorm(name="rmsnorm", norm_forward_phase=cudnn.norm_forward_phase.TRAINING,
                                                  input=self.x_t, scale=self.g_t, bias=None, epsilon=self.eps_t)
            self.mean_t = None
        else:
            self.b_t = graph.tensor(name="beta", dim=[1, cols, 1, 1], stride=[cols, 1, cols, cols], data_type=io)
            self.y_t, self.mean_t, self.rstd_t = graph.layernorm(
                name="layernorm", norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=self.x_t,
                scale=self.g_t, bias=self.b_t, epsilon=self.eps_t)
        self.y_t.set_output(True).set_data_type(io).set_dim([rows, cols, 1, 1]).set_stride([cols, 1, cols, cols])
        for stat in (self.mean_t, self.rstd_t):
            if stat is not None:
                stat.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim([rows, 1, 1, 1]).set_stride([1, 1, 1, 1])
        try:
            graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        except cudnn.cudnnGraphNotSupportedError as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CudnnUnavailable(f"cuDNN has no {'rmsnorm' if rms else 'layernorm'} engine for ({rows}, {cols}) "
                       f"{str(dtype).removeprefix('torch.')}: {text}") from exc
        self.graph = graph
        self.workspace = torch.empty(max(1, graph.get_workspace_size()), dtype=torch.uint8, device="cuda")

    def forward(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None = None, eps: float | None = None):
        stream = torch.cuda.current_stream().cuda_stream
        if stream != self._stream:
            self.cudnn.set_stream(handle=self.handle, stream=stream)
            self._stream = stream
        rows = self.rows
        y = torch.empty_like(x)
        rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
        pack = {self.x_t: x, self.g_t: gamma, self.eps_t: self.eps_cpu, self.y_t: y, self.rstd_t: rstd}
        if self.rms:
            self.graph.execute(pack, self.workspace, handle=self.handle)
            return y, rstd
        mean = torch.empty(rows, dtype=torch.float32, device=x.device)
        pack[self.b_t] = beta
        pack[self.mean_t] = mean
        self.graph.execute(pack, self.workspace, handle=self.handle)
        return y, mean, rstd
