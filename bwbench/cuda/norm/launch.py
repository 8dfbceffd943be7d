"""LayerNorm and RMSNorm forward (training form) with kernels/norm.cu.

    layer_norm(x, gamma, beta, eps) -> (y, mean, rstd)     y like x; mean, rstd float32 of shape (rows,)
    rms_norm(x, gamma, eps)         -> (y, rstd)

One read of x: Welford per thread merged with Chan's formula across lanes and warps (LayerNorm;
full rows of the warp tier take shifted two-pass sums over the registers instead), 16-byte packs,
and a tier from plan.py. The first call for a shape times the plan's candidates (and grids) cold
on its own arguments and keeps the fastest; later calls find the launch in a cache and only check,
allocate and enqueue. Everything launches on PyTorch's current stream and allocates its outputs
with PyTorch (or writes into `out=`), so it can be captured in a CUDA graph once it has run
outside capture.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bwbench.cuda.autotune import fastest
from bwbench.cuda.launch_spec import PORTABLE_CLUSTER_BLOCKS, Launch, grid_blocks
from bwbench.cuda.loader import (
    CompiledModule,
    Kernel,
    KernelSource,
    PlannedCall,
    check_bool,
    check_count,
    check_matrix,
    cpp_type,
    load,
    max_active_blocks_per_sm,
    max_active_clusters,
    max_shared_memory_per_block,
    run,
    set_max_dynamic_shared_memory,
)
from bwbench.cuda.norm.plan import (
    DEFAULT_GRID_WAVES,
    STATIC_SMEM_MARGIN,
    STORAGE_TYPES,
    NormPlan,
    cluster_size,
    full_pack,
    optimized_names,
    plan,
    span_rows_grid,
)

__all__ = ["OPTIMIZED", "Chosen", "chosen_launch", "launch_plan", "layer_norm", "rms_norm"]

# One source per (storage type, mode): a case compiles only the kernels it can use.
OPTIMIZED: dict[tuple[str, bool], KernelSource] = {
    (ctype, rms): KernelSource("norm.cu", optimized_names(ctype, rms))
    for ctype in STORAGE_TYPES for rms in (False, True)
}


@dataclass(frozen=True)
class Chosen:
    """A plan candidate with its launch (grid included) and compiled kernel."""

    plan: NormPlan
    launch: Launch
    kernel: Kernel

    @property
    def grid(self) -> int:
        return self.launch.grid[0]


def check_inputs(x: torch.Tensor, params: dict[str, torch.Tensor | None], what: str) -> None:
    """x a 2-D contiguous CUDA matrix with at least one column; each parameter of shape (cols,)
    with x's dtype and device, contiguous."""
    check_matrix(x, what)
    if x.shape[1] < 1:
        raise ValueError(f"{what} needs at least one column, got shape {tuple(x.shape)}")
    for name, p in params.items():
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"{what} expects {name} to be a torch.Tensor, got {type(p).__name__}")
        if p.shape != (x.shape[1],) or p.dtype != x.dtype or p.device != x.device or not p.is_contiguous():
            raise ValueError(f"{name} must be contiguous of shape ({x.shape[1]},) with x's dtype and device: got "
                             f"{tuple(p.shape)} {p.dtype} on {p.device}")


def outputs(x: torch.Tensor, out: tuple | None, rms: bool) -> tuple[torch.Tensor, ...]:
    """(y, rstd) or (y, mean, rstd): new tensors, or `out` checked."""
    rows = x.shape[0]
    if out is None:
        y = torch.empty_like(x)  # x is contiguous (checked)
        stats = [torch.empty(rows, dtype=torch.float32, device=x.device) for _ in range(1 if rms else 2)]
        return (y, *stats)
    want = 2 if rms else 3
    if len(out) != want:
        raise ValueError(f"out must hold {want} tensors ({'y, rstd' if rms else 'y, mean, rstd'}), got {len(out)}")
    y, stats = out[0], out[1:]
    if y.shape != x.shape or y.dtype != x.dtype or y.device != x.device or not y.is_contiguous():
        raise ValueError(f"out y must be contiguous with x's shape, dtype and device, got {tuple(y.shape)} {y.dtype}")
    for s in stats:
        if s.shape != (rows,) or s.dtype != torch.float32 or s.device != x.device or not s.is_contiguous():
            raise ValueError(f"out statistics must be contiguous float32 of shape ({rows},), got {tuple(s.shape)} {s.dtype}")
    return tuple(out)


def checked_outputs(x, gamma, beta, out, rms: bool, what: str):
    """Inputs checked; (outputs, y, mean, rstd) to write, mean None for RMSNorm."""
    check_inputs(x, {"gamma": gamma} if rms else {"gamma": gamma, "beta": beta}, what)
    result = outputs(x, out, rms)
    mean, rstd = (None, result[1]) if rms else (result[1], result[2])
    return result, result[0], mean, rstd


_MODELS: dict[tuple, tuple[NormPlan, CompiledModule]] = {}
_CHOSEN: dict[tuple, Chosen] = {}


def _key(device: int, rows: int, cols: int, dtype, rms: bool, pack: int, tier, block, waves,
         same_phase: bool = True) -> tuple:
    return (device, rows, cols, dtype, rms, pack, tier, block, waves, same_phase)


def _model(device: int, cols: int, dtype, rms: bool, pack: int, tier, block,
           same_phase: bool = True) -> tuple[NormPlan, CompiledModule]:
    key = (device, cols, dtype, rms, pack, tier, block, same_phase)
    found = _MODELS.get(key)
    if found is None:
        ctype = cpp_type(dtype)
        module = load(OPTIMIZED[(ctype, rms)])
        smem_limit = max_shared_memory_per_block(device) - STATIC_SMEM_MARGIN

        def occupancy(name: str, threads: int, smem: int) -> int:
            kernel = module.kernel(name)
            if smem + STATIC_SMEM_MARGIN > 48 * 1024:  # the default limit counts static memory too
                set_max_dynamic_shared_memory(kernel, smem_limit, device)
            size = cluster_size(name)
            if size > PORTABLE_CLUSTER_BLOCKS and max_active_clusters(kernel, size, threads, smem, device) < 1:
                return 0  # this GPU holds no such cluster
            return max_active_blocks_per_sm(kernel, threads, smem, device)

        found = _MODELS[key] = (plan(cols, ctype, rms, pack, occupancy, smem_limit, tier, block, same_phase,
                                     _launches_clusters(device)), module)
    return found


def _launches_clusters(device: int) -> bool:
    """Whether the GPU launches thread-block clusters (the cluster tier): compute capability 9.0 on."""
    return torch.cuda.get_device_capability(device) >= (9, 0)


def _with_grid(chosen: NormPlan, module: CompiledModule, device: int, rows: int, waves: int | None) -> Chosen:
    kernel = module.kernel(chosen.kernel)
    per_sm = max_active_blocks_per_sm(kernel, chosen.block, chosen.smem_bytes, device)
    if per_sm < 1:
        raise RuntimeError(f"{kernel.name} cannot run {chosen.block} threads per block with {chosen.smem_bytes} "
                           "bytes of dynamic shared memory on this device (occupancy 0)")
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    work = -(-rows // chosen.rows_per_block) * chosen.cluster  # blocks' worth of rows
    grid = span_rows_grid(grid_blocks(work, per_sm, sms, waves), work, chosen.grid_multiple)
    return Chosen(chosen, Launch(chosen.kernel, (grid,), (chosen.block,), chosen.smem_bytes, tier=chosen.tier,
                                 args=tuple(np.int32(a) for a in chosen.extra)), kernel)


def launch_plan(x: torch.Tensor, rms: bool, pack: int, tier: str | None = None, block: int | None = None,
                grid_waves: tuple[int | None, ...] = DEFAULT_GRID_WAVES, same_phase: bool = True) -> Chosen:
    """The model's plan, compiled kernel and grid (the first of `grid_waves`) for x, before any timing;
    same_phase: y will start as far past a 16-byte boundary as x (a fresh y does where x is aligned)."""
    check_matrix(x, "launch_plan")
    rms, same_phase = check_bool("launch_plan", "rms", rms), check_bool("launch_plan", "same_phase", same_phase)
    packs = (full_pack(cpp_type(x.dtype)), 1)
    if check_count("launch_plan", "pack", pack) not in packs:
        raise ValueError(f"launch_plan takes pack as {packs[0]} (16-byte accesses of {x.dtype}) or 1, not {pack!r}")
    chosen, module = _model(x.device.index, x.shape[1], x.dtype, rms, pack, tier, block, same_phase)
    return _with_grid(chosen, module, x.device.index, x.shape[0], grid_waves[0])


def chosen_launch(x: torch.Tensor, rms: bool, tier: str | None = None, block: int | None = None,
                  grid_waves: tuple[int | None, ...] = DEFAULT_GRID_WAVES) -> Chosen | None:
    """The launch `layer_norm` / `rms_norm` settled on for x's shape (after timing), if any yet."""
    check_matrix(x, "chosen_launch")
    rms = check_bool("chosen_launch", "rms", rms)
    device, (rows, cols) = x.device.index, x.shape
    for pack in (full_pack(cpp_type(x.dtype)), 1):
        for same_phase in (True, False):
            found = _CHOSEN.get(_key(device, rows, cols, x.dtype, rms, pack, tier, block, grid_waves, same_phase))
            if found is not None:
                return found
    return None


def arguments(step: Chosen, args: tuple) -> tuple:
    """The kernel's arguments: the common ones, then the launch's own (the tile tier's)."""
    return (*args, *step.launch.args)


def _runner(step: Chosen, args: tuple, device: int):
    """One candidate's launch on the caller's arguments, for its first-use timing."""
    full = arguments(step, args)
    return lambda: run(step.kernel, step.launch, full, device)


def _tuned(x: torch.Tensor, rms: bool, pack: int, tier, block, waves: tuple, args: tuple,
           same_phase: bool = True) -> Chosen:
    """The launch for x: the model's plan with the first of `waves`, or, where the model leaves
    alternatives or the grids differ, the fastest of them timed once on these very arguments
    (every candidate computes the same outputs). Not while a CUDA graph is being captured (nothing
    may synchronize then): the model's choice is used and not remembered."""
    device, (rows, cols) = x.device.index, x.shape
    key = _key(device, rows, cols, x.dtype, rms, pack, tier, block, waves, same_phase)
    step = _CHOSEN.get(key)
    if step is not None:
        return step
    model, module = _model(device, cols, x.dtype, rms, pack, tier, block, same_phase)
    options = {(o.launch.kernel, o.grid, o.plan.block): o  # the block too: a kernel may be offered in several
               for o in (_with_grid(c, module, device, rows, w) for c in model.candidates for w in waves)}
    step = next(iter(options.values()))
    if len(options) > 1:
        if torch.cuda.is_current_stream_capturing():
            return step
        steps = list(options.values())
        step = steps[fastest([_runner(option, args, device) for option in steps], device)]
    _CHOSEN[key] = step
    return step


class _Repeat:
    """A call the launcher has checked, tuned and run before, kept for inputs of the same kind
    (the same dtype, device, shape, strides and 16-byte phase of x, gamma and beta, and the same
    eps and options): a repeat only allocates its outputs and enqueues."""

    def __init__(self, launch: PlannedCall, x: torch.Tensor, rms: bool, y_phase: int,
                 extra: tuple[int, ...] = ()) -> None:
        self.launch, self.rms, self.y_phase, self.extra = launch, rms, y_phase, extra
        self.rows, self.cols = x.shape
        self.device = x.device

    def __call__(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None, eps: float):
        y = torch.empty_like(x)
        if y.data_ptr() % 16 != self.y_phase:  # another allocator: the caller plans afresh
            return None
        rstd = torch.empty(self.rows, dtype=torch.float32, device=self.device)
        if self.rms:
            self.launch.enqueue((x.data_ptr(), gamma.data_ptr(), 0, y.data_ptr(), 0, rstd.data_ptr(),
                                 self.rows, self.cols, eps, *self.extra))
            return y, rstd
        mean = torch.empty(self.rows, dtype=torch.float32, device=self.device)
        self.launch.enqueue((x.data_ptr(), gamma.data_ptr(), beta.data_ptr(), y.data_ptr(), mean.data_ptr(),
                             rstd.data_ptr(), self.rows, self.cols, eps, *self.extra))
        return y, mean, rstd


_REPEATS: dict[tuple, _Repeat] = {}
"""Calls without out=, by _signature."""


def _signature(x, gamma, beta, eps, rms: bool, tier, block, waves) -> tuple | None:
    """Everything the checks and the plan look at, or None where an argument is not of a kind that
    can be remembered (not a tensor, say: the checks will say so)."""
    try:
        key = [rms, float(eps), tier, block, tuple(waves)]
        for t in (x, gamma) if rms else (x, gamma, beta):
            key += (t.dtype, t.get_device(), t.shape, t.stride(), t.data_ptr() % 16)
        key = tuple(key)
        hash(key)
        return key
    except (AttributeError, TypeError, ValueError):
        return None


def _run(x, gamma, beta, eps, out, rms: bool, tier: str | None, block: int | None, waves: tuple):
    key = _signature(x, gamma, beta, eps, rms, tier, block, waves) if out is None else None
    repeat = _REPEATS.get(key) if key is not None else None
    if repeat is not None:
        found = repeat(x, gamma, beta, eps)
        if found is not None:
            return found
    what = "rms_norm" if rms else "layer_norm"
    result, y, mean, rstd = checked_outputs(x, gamma, beta, out, rms, what)
    rows, cols = x.shape
    if rows == 0:
        return result
    if rows > 2**31 - 1 or cols > 2**31 - 1:
        raise ValueError(f"{what}: rows and cols must fit in int32, got {tuple(x.shape)}")
    pack = full_pack(cpp_type(x.dtype))
    if cols % pack or not all(t is None or t.data_ptr() % 16 == 0 for t in (x, gamma, beta, y)):
        pack = 1
    args = (x, gamma, beta, y, mean, rstd, np.int32(rows), np.int32(cols), np.float32(eps))
    step = _tuned(x, rms, pack, tier, block, tuple(waves), args, same_phase=x.data_ptr() % 16 == y.data_ptr() % 16)
    device = x.device.index
    args = arguments(step, args)
    run(step.kernel, step.launch, args, device)
    if key is not None and y.is_contiguous() and not torch.cuda.is_current_stream_capturing():
        _REPEATS[key] = _Repeat(PlannedCall(step.kernel, step.launch, args, device), x, rms, y.data_ptr() % 16,
                                step.plan.extra)
    return result


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5, *,
               tier: str | None = None, block: int | None = None, out: tuple | None = None,
               grid_waves: tuple[int | None, ...] = DEFAULT_GRID_WAVES) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm over the last dim of a 2-D contiguous CUDA x (float16, bfloat16 or float32).

    Returns (y, mean, rstd): y like x, mean and rstd float32 of shape (rows,), rstd =
    1 / sqrt(biased variance + eps). gamma and beta: shape (cols,), x's dtype. `tier` forces
    "warp", "registers", "smem" or "uncached" (None: chosen by the plan), `block` the threads per
    block of the shared-memory and uncached tiers, `grid_waves` the grids timed on first use;
    `out` = (y, mean, rstd) to write into.
    """
    return _run(x, gamma, beta, eps, out, False, tier, block, grid_waves)


def rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-5, *, tier: str | None = None,
             block: int | None = None, out: tuple | None = None,
             grid_waves: tuple[int | None, ...] = DEFAULT_GRID_WAVES) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dim: (y, rstd) with rstd = 1 / sqrt(mean(x^2) + eps), float32 (rows,).
    Options as for `layer_norm`."""
    return _run(x, gamma, None, eps, out, True, tier, block, grid_waves)
