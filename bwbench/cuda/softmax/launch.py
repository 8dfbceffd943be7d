"""Softmax, log-softmax, their backwards and the online softmax with kernels/softmax.cu.

One dispatcher, five operations: `plan_launch` asks plan.py for the launch of a shape (once per
operation, shape, dtype, pack, device and options: a repeated call only checks its tensors,
allocates the output and enqueues), `which_tier` says which tier it chose. Where the plan leaves
alternatives (shapes whose measurements split between two tiers), the first call times them cold
on its own arguments and keeps the fastest, as the norms' launcher does.
"""

from __future__ import annotations

import numpy as np
import torch

from bwbench.cuda.autotune import fastest
from bwbench.cuda.loader import (
    Kernel,
    KernelSource,
    PlannedCall,
    allow_all_dynamic_shared_memory,
    check_bool,
    check_count,
    check_matrix,
    cpp_type,
    load,
    max_active_blocks_per_sm,
    max_active_clusters,
    run,
)
from bwbench.cuda.softmax import dispatch
from bwbench.cuda.softmax.plan import OPERATIONS, STORAGE_TYPES, SoftmaxPlan, plan

__all__ = ["BACKWARD_SOURCES", "FORWARD_SOURCES", "log_softmax", "log_softmax_backward", "online_softmax",
           "plan_launch", "row_layout", "softmax", "softmax_backward", "which_tier"]

# One module per storage type and direction: a float16 forward run compiles only its kernels.
FORWARD_SOURCES = {t: KernelSource("softmax.cu", dispatch.kernel_names(t, "forward")) for t in STORAGE_TYPES}
BACKWARD_SOURCES = {t: KernelSource("softmax.cu", dispatch.kernel_names(t, "backward")) for t in STORAGE_TYPES}


class _Queries:
    """plan.py's DeviceQueries answered by CUDA for one compiled module on one device."""

    def __init__(self, module, device: int) -> None:
        self.module, self.device = module, device
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.clusters = torch.cuda.get_device_capability(device) >= (9, 0)

    def smem_limit(self, kernel: str) -> int:
        return allow_all_dynamic_shared_memory(self.module.kernel(kernel), self.device)

    def blocks_per_sm(self, kernel: str, threads: int, smem: int) -> int:
        return max_active_blocks_per_sm(self.module.kernel(kernel), threads, smem, self.device)

    def active_clusters(self, kernel: str, cluster: int, threads: int, smem: int) -> int:
        return max_active_clusters(self.module.kernel(kernel), cluster, threads, smem, self.device)


_PLANS: dict[tuple, tuple[SoftmaxPlan, Kernel]] = {}
"""Plans and their kernels by (op, rows, cols, dtype, layout, device, options)."""


def _planned(op: str, rows: int, cols: int, dtype: torch.dtype, layout: tuple[int, bool, bool], device: int,
             options: tuple) -> tuple[SoftmaxPlan, Kernel]:
    key = (op, rows, cols, dtype, layout, device, options)
    found = _PLANS.get(key)
    if found is None:
        ctype = cpp_type(dtype)
        direction = OPERATIONS[op][0] if op in OPERATIONS else "forward"
        module = load((FORWARD_SOURCES if direction == "forward" else BACKWARD_SOURCES)[ctype])
        pack, starts_aligned, dense = layout
        chosen = plan(op, rows, cols, ctype, pack, _Queries(module, device), starts_aligned=starts_aligned,
                      dense=dense, **dict(options))
        found = _PLANS[key] = (chosen, module.kernel(chosen.launch.kernel))
    return found


def _options(overrides: dict) -> tuple:
    unknown = set(overrides) - {"thresholds", "tier", "block", "grid_waves", "cluster"}
    if unknown:
        raise TypeError(f"unknown options {sorted(unknown)}: thresholds, tier, block, grid_waves and cluster are")
    return tuple(sorted(overrides.items()))


def _device(device) -> int:
    if isinstance(device, torch.device):
        device = device.index
    return torch.cuda.current_device() if device is None else int(device)


def plan_launch(op: str, rows: int, cols: int, dtype: torch.dtype, *, aligned: bool = True,
                starts_aligned: bool | None = None, dense: bool = True,
                device: int | torch.device | None = None, **overrides) -> SoftmaxPlan:
    """The plan of `op` on a (rows, cols) tensor of `dtype` (cached). aligned: whether 16-byte packs
    are allowed (every tensor starts each row at the same offset within 16 bytes); False forces
    one element per access. starts_aligned: every row starts on a 16-byte boundary (None: as in
    a fresh contiguous tensor, i.e. where cols is a multiple of the pack). dense: every tensor's
    rows lie end to end (row stride = cols), as in fresh contiguous tensors.
    overrides: thresholds=, tier=, block=, grid_waves=, cluster= (see plan.plan)."""
    if not isinstance(op, str) or op not in OPERATIONS:
        raise ValueError(f"op must be one of {', '.join(OPERATIONS)}, got {op!r}")
    rows, cols = check_count("plan_launch", "rows", rows), check_count("plan_launch", "cols", cols)
    aligned, dense = check_bool("plan_launch", "aligned", aligned), check_bool("plan_launch", "dense", dense)
    if starts_aligned is not None:
        starts_aligned = check_bool("plan_launch", "starts_aligned", starts_aligned)
    pack = dispatch.pack_elements(dispatch.ITEMSIZE[cpp_type(dtype)], aligned)
    if starts_aligned is None:
        starts_aligned = cols % pack == 0
    layout = (pack, starts_aligned or pack == 1, dense)
    return _planned(op, rows, cols, dtype, layout, _device(device), _options(overrides))[0]


def _check_rows(t: torch.Tensor, what: str, name: str) -> tuple[int, int]:
    """(rows, cols) of a 2-D CUDA tensor whose rows are contiguous (any row stride)."""
    check_matrix(t, what, name, rows_only=True)
    rows, cols = t.shape
    if cols > dispatch.MAX_COLS:
        raise ValueError(f"{what}: {name} has {cols} columns; the kernels take at most {dispatch.MAX_COLS}")
    return rows, cols


def _result(out: torch.Tensor | None, like: torch.Tensor, what: str) -> torch.Tensor:
    if out is None:
        return torch.empty_like(like)  # contiguous for the dense or row-strided 2-D inputs taken
    if out.shape != like.shape or out.dtype != like.dtype or out.device != like.device:
        raise ValueError(f"out must have the input's shape, dtype and device: got {tuple(out.shape)} {out.dtype} "
                         f"on {out.device}, want {tuple(like.shape)} {like.dtype} on {like.device}")
    _check_rows(out, what, "out")
    return out


def row_layout(tensors: tuple[torch.Tensor, ...]) -> tuple[int, bool, bool]:
    """(elements per access, whether every row starts on a pack boundary, whether every tensor's
    rows lie end to end).

    The 16-byte pack where every tensor starts each row at the same offset within 16 bytes (equal
    base offsets, equal row strides modulo 16 bytes), which contiguous tensors of one shape from
    PyTorch's allocator always do; else 1 element (a column slice against a fresh output, say).
    """
    itemsize = tensors[0].element_size()
    phases = {(t.data_ptr() % dispatch.PACK_BYTES,
               t.stride(0) * itemsize % dispatch.PACK_BYTES if t.shape[0] > 1 else 0) for t in tensors}
    rows, cols = tensors[0].shape
    dense = all(rows == 1 or t.stride(0) == cols for t in tensors)
    if len(phases) != 1:
        return 1, True, dense
    (offset, stride), = phases
    return dispatch.PACK_BYTES // itemsize, offset == 0 and stride == 0, dense


def _row_stride(t: torch.Tensor) -> np.int64:
    return np.int64(t.stride(0) if t.shape[0] > 1 else t.shape[1])


class _Call:
    """What a repeated call on the same kind of inputs needs, made once: the planned launch bound
    to its argument layout, and the row strides and sizes it passes, so that the host cost of a
    call is an allocation and an enqueue."""

    def __init__(self, launch: PlannedCall, strides: tuple[int, ...], rows: int, cols: int,
                 extra: tuple[int, ...] = ()) -> None:
        self.launch, self.strides, self.rows, self.cols, self.extra = launch, strides, rows, cols, extra

    def __call__(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor | None:
        """The output of `op` on inputs of the remembered kind, enqueued; None where the fresh
        output is not 16-byte aligned (another allocator: the caller plans afresh)."""
        out = torch.empty_like(inputs[0])  # contiguous: the inputs are dense or row-strided 2-D
        address = out.data_ptr()
        if address % dispatch.PACK_BYTES:
            return None
        strides = self.strides
        if len(inputs) == 1:
            self.launch.enqueue((inputs[0].data_ptr(), strides[0], address, strides[1], self.rows, self.cols,
                                 *self.extra))
        else:
            y, dy = inputs
            self.launch.enqueue((y.data_ptr(), strides[0], dy.data_ptr(), strides[1], address, strides[2],
                                 self.rows, self.cols, *self.extra))
        return out


_CALLS: dict[tuple, _Call] = {}
"""Calls without out= or overrides, by _signature: everything the checks look at, so a hit needs
no check."""


def _signature(op: str, inputs: tuple) -> tuple | None:
    """(op, and each input's dtype, device index, shape, strides and offset within 16 bytes), or
    None where an input is not a tensor (the checks will say so)."""
    try:
        if len(inputs) == 1:
            x, = inputs
            return (op, x.dtype, x.get_device(), x.shape, x.stride(), x.data_ptr() % dispatch.PACK_BYTES)
        return (op, *[item for t in inputs
                      for item in (t.dtype, t.get_device(), t.shape, t.stride(), t.data_ptr() % dispatch.PACK_BYTES)])
    except (AttributeError, TypeError):
        return None


_TIMED: dict[tuple, tuple[SoftmaxPlan, Kernel]] = {}
"""The candidate the first-use timing kept, by the _planned key of its plan."""


def _overlaps(result: torch.Tensor, inputs: tuple) -> bool:
    """Whether `result` shares memory with an input (an in-place call, which a repeated timing
    launch would compute on its own output)."""
    def extent(t: torch.Tensor) -> tuple[int, int]:
        first = t.data_ptr()
        last = first + ((t.shape[0] - 1) * t.stride(0) + t.shape[1]) * t.element_size()
        return first, last

    lo, hi = extent(result)
    return any(a < hi and lo < b for a, b in map(extent, inputs))


def _fastest(chosen: SoftmaxPlan, kernel: Kernel, common: tuple, tensors: tuple, device: int,
             key: tuple) -> tuple[SoftmaxPlan, Kernel]:
    """The plan to run: `chosen`, or where it carries alternatives the fastest candidate, timed
    once cold in L2 on these very arguments (every candidate computes the same output) and kept
    under `key`. Not while a CUDA graph is being captured (nothing may synchronize then), nor for
    an output that overlaps an input: the dispatch's first choice runs and nothing is kept."""
    if not chosen.alternatives:
        return chosen, kernel
    found = _TIMED.get(key)
    if found is not None:
        return found
    if torch.cuda.is_current_stream_capturing() or _overlaps(tensors[-1], tensors[:-1]):
        return chosen, kernel
    module = kernel.module
    options = [(c, module.kernel(c.launch.kernel)) for c in chosen.candidates]
    runs = [lambda c=c, k=k: run(k, c.launch, (*common, *c.launch.args), device) for c, k in options]
    found = _TIMED[key] = options[fastest(runs, device)]
    return found


def _launch(op: str, inputs: tuple, out: torch.Tensor | None, overrides: dict, key: tuple | None) -> torch.Tensor:
    """Checks, plans (cached; timed on first use where the plan leaves alternatives) and enqueues
    `op` on `inputs`; remembers the call under `key`."""
    first = inputs[0]
    rows, cols = first.shape
    result = _result(out, first, op)
    if rows == 0 or cols == 0:
        return result
    tensors = (*inputs, result)
    device = first.device.index
    layout, options = row_layout(tensors), _options(overrides) if overrides else ()
    chosen, kernel = _planned(op, rows, cols, first.dtype, layout, device, options)
    strides = tuple(int(_row_stride(t)) for t in tensors)
    common = (*[item for t, stride in zip(tensors, strides) for item in (t, np.int64(stride))],
              np.int64(rows), np.int32(cols))
    chosen, kernel = _fastest(chosen, kernel, common, tensors, device,
                              (op, rows, cols, first.dtype, layout, device, options))
    args = (*common, *chosen.launch.args)
    run(kernel, chosen.launch, args, device)
    if (key is not None and out is None and not overrides and result.data_ptr() % dispatch.PACK_BYTES == 0
            and result.is_contiguous()):
        _CALLS[key] = _Call(PlannedCall(kernel, chosen.launch, args, device), strides, rows, cols,
                            tuple(int(a) for a in chosen.launch.args))
    return result


def _forward(op: str, x: torch.Tensor, out: torch.Tensor | None, overrides: dict) -> torch.Tensor:
    key = None
    if out is None and not overrides:
        key = _signature(op, (x,))
        call = _CALLS.get(key)
        if call is not None:
            found = call((x,))
            if found is not None:
                return found
    _check_rows(x, op, "x")
    return _launch(op, (x,), out, overrides, key)


def _backward(op: str, y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None, overrides: dict) -> torch.Tensor:
    key = None
    if out is None and not overrides:
        key = _signature(op, (y, dy))
        call = _CALLS.get(key)
        if call is not None:
            found = call((y, dy))
            if found is not None:
                return found
    _check_rows(y, op, "y")
    _check_rows(dy, op, "dy")
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise ValueError(f"dy must match y: got {tuple(dy.shape)} {dy.dtype} on {dy.device}, "
                         f"y is {tuple(y.shape)} {y.dtype} on {y.device}")
    return _launch(op, (y, dy), out, overrides, key)


def softmax(x: torch.Tensor, *, out: torch.Tensor | None = None, **overrides) -> torch.Tensor:
    """softmax(x, dim=-1) in one kernel of the optimized family (the dispatcher picks the tier).

    x: 2-D CUDA tensor of float16, bfloat16 or float32 whose rows are contiguous (any row stride:
    a column slice runs without a copy; other layouts raise ValueError, call .contiguous()).
    Returns a new contiguous tensor, or writes into `out` (same shape and dtype, rows contiguous,
    not overlapping x). Runs on PyTorch's current stream. `overrides` (thresholds=, tier=,
    block=, grid_waves=, cluster=) are for tuning and tests.
    """
    return _forward("softmax", x, out, overrides)


def log_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None, **overrides) -> torch.Tensor:
    """log_softmax(x, dim=-1): the same kernels as `softmax` with the LogSoftmax algorithm."""
    return _forward("log_softmax", x, out, overrides)


def online_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None, **overrides) -> torch.Tensor:
    """softmax(x, dim=-1) with the online normalizer: one read of each row computes (max, sum of
    exp) with the associative (m, d) merge, a second read writes y; no row cache."""
    return _forward("online_softmax", x, out, overrides)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, *, out: torch.Tensor | None = None,
                     **overrides) -> torch.Tensor:
    """The softmax gradient dx = y * (dy - sum(dy * y, -1)) from the forward output y and dy."""
    return _backward("softmax_backward", y, dy, out, overrides)


def log_softmax_backward(y: torch.Tensor, dy: torch.Tensor, *, out: torch.Tensor | None = None,
                         **overrides) -> torch.Tensor:
    """The log-softmax gradient dx = dy - exp(y) * sum(dy, -1) from the forward output y and dy."""
    return _backward("log_softmax_backward", y, dy, out, overrides)


def which_tier(x: torch.Tensor, op: str = "softmax", **overrides) -> str:
    """The tier `op` runs for input x (for a backward op, x stands for y and dy): "warp", "smem",
    "uncached", ..., or for online_softmax "online_warp" / "online_block". Where the dispatch
    leaves the choice to first-use timing, the timed tier once a call has run on such a tensor
    (with a fresh output), the dispatch's first choice before."""
    rows, cols = _check_rows(x, "which_tier", "x")
    if rows == 0 or cols == 0:
        return "none"
    key = (op, rows, cols, x.dtype, row_layout((x,)), x.device.index, _options(overrides))
    timed = _TIMED.get(key)
    return (timed or _planned(*key))[0].tier
