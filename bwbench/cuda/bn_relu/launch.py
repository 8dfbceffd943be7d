"""BatchNorm2d training forward fused with ReLU (and the residual Add+ReLU) keeping a 1-bit mask,
and its backward, with this project's kernels (kernels/bn_relu.cu); plan.py holds the pure grid rules.

    bn_relu_forward(x, gamma, beta, eps, z=None) -> (y, mask, mean, invstd)
    bn_relu_backward(dy, mask, x, mean, invstd, gamma, residual=False)
        -> (dx, dgamma, dbeta), or (dx, dz, dgamma, dbeta) with residual=True

x, z, dy, y, dx, dz: (N, C, H, W) float16 or float32, either NCHW-contiguous or channels_last
(NHWC) — the layout is read from the strides, and outputs have x's layout. gamma, beta: float32
of shape (C,) (BatchNorm's parameters stay float32 under mixed precision, as cuDNN requires).
mean, invstd, dgamma, dbeta: float32 (C,). The mask is over the tensor's memory order in
bwbench.cuda.bitmask's packed-bit format (uint8, ceil(n/8) bytes, a view of whole words).

Each call reads x (forward) and dy, the mask and x (backward) twice: a per-channel reduction, then
an elementwise pass. Where the shape allows (16-byte packs, and NCHW planes or NHWC rows of whole
32-element mask words: H*W % 32 == 0, or C % 32 == 0) and the grid fits on the GPU at once, that is
one cooperative launch whose blocks wait for each other between the phases (see `fused_grid`; NHWC
only from ONE_LAUNCH_NHWC_MIN_BYTES); otherwise three kernels (reduction, per-channel finalize,
elementwise pass). The one-launch forward keeps what shared memory holds of x between its passes
(one_launch_plan), so its second pass reads only the rest from global memory (forward_x_read_bytes).
Tensors small enough to sit in the registers of one wave (NCHW planes no pack divides, both
directions; NHWC with C % 32 == 0, the forward) have one-launch register kernels that read them once,
chosen on first use by timing against the other path. Statistics are
batch statistics, biased variance; running statistics are not updated (no implementation here
updates them). Everything launches on PyTorch's current stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from bwbench.cuda.bitmask.launch import pack_bits
from bwbench.cuda.bitmask.plan import packed_bytes
from bwbench.cuda.bn_relu.plan import (
    _TYPES,
    BLOCK,
    CACHE_SLOT_BYTES,
    KERNELS,
    MAX_ELEMENTS,
    MERGE_GROUP,
    MERGE_ROUNDS_MIN_SLOTS,
    READY_FLAGS,
    READY_FLAGS_AT,
    TILE_CHANNELS,
    apply_blocks,
    finalize_grid,
    fused_grid,
    fused_group_plan,
    fused_nhwc_scratch_bytes,
    group_grid,
    group_held_bytes,
    group_held_kernel,
    group_instances,
    group_way_kernel,
    nhwc_regs_kernels,
    nhwc_regs_plan,
    one_launch_by_default,
    plane_group,
    reduction_grid,
    walk_from_end,
    walk_step,
)
from bwbench.cuda.autotune import fastest
from bwbench.cuda.launch_spec import Launch
from bwbench.cuda.loader import (
    KernelSource,
    allow_all_dynamic_shared_memory,
    cpp_type,
    device_index,
    check_cooperative,
    current_stream_ptr,
    load,
    max_active_blocks_per_sm,
    run,
)

__all__ = ["SOURCE", "bn_relu_backward", "bn_relu_forward", "forward_x_read_bytes", "keep_mask", "layout_of",
           "memory_order", "one_launch_plan", "reads_once"]

SOURCE = KernelSource("bn_relu.cu", KERNELS)

# ----------------------------------------------------------------------------------------------
# Layout helpers (also used by the suite and the tests)
# ----------------------------------------------------------------------------------------------


def layout_of(t: torch.Tensor) -> str:
    """"NCHW" for a contiguous (N, C, H, W) tensor, "NHWC" for a channels_last one."""
    if not isinstance(t, torch.Tensor) or t.dim() != 4:
        raise ValueError(f"expected a 4-D (N, C, H, W) tensor, got {getattr(t, 'shape', type(t).__name__)}")
    if t.is_contiguous():
        return "NCHW"
    if t.is_contiguous(memory_format=torch.channels_last):
        return "NHWC"
    raise ValueError(f"a (N, C, H, W) tensor must be contiguous (NCHW) or channels_last (NHWC), got strides {t.stride()}")


def memory_order(t: torch.Tensor, layout: str | None = None) -> torch.Tensor:
    """The elements of t in its memory order (the mask's order), as a 1-D view where possible."""
    layout = layout or layout_of(t)
    return t.permute(0, 2, 3, 1).reshape(-1) if layout == "NHWC" else t.reshape(-1)


def make_like(shape, dtype, device, layout: str) -> torch.Tensor:
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    return torch.empty(shape, dtype=dtype, device=device, memory_format=fmt)


# ----------------------------------------------------------------------------------------------
# Checks and launch plans
# ----------------------------------------------------------------------------------------------


def _check_data(t, name: str, like: torch.Tensor | None = None) -> str:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in (torch.float16, torch.float32):
        raise ValueError(f"{name}: dtype {t.dtype} is not supported (float16 or float32)")
    if t.device.type != "cuda":
        raise ValueError(f"{name} must be a CUDA tensor, got one on {t.device}")
    layout = layout_of(t)
    if like is not None:
        if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device or layout_of(like) != layout:
            raise ValueError(f"{name} must match x: shape {tuple(like.shape)}, {like.dtype}, {layout_of(like)}; "
                             f"got {tuple(t.shape)}, {t.dtype}, {layout}")
    elif t.numel() >= MAX_ELEMENTS:
        raise ValueError(f"{name} has {t.numel()} elements; these kernels index with 32 bits (< {MAX_ELEMENTS})")
    return layout


def _check_param(t, name: str, x: torch.Tensor) -> None:
    c = x.shape[1]
    if not isinstance(t, torch.Tensor) or t.shape != (c,) or t.dtype != torch.float32 or \
            t.device != x.device or not t.is_contiguous():
        got = f"{tuple(t.shape)} {t.dtype} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} must be a contiguous float32 CUDA tensor of shape ({c},), got {got}")


def _aligned(*tensors) -> bool:
    return all(t is None or t.data_ptr() % 16 == 0 for t in tensors)


_WAVES: dict[tuple[str, int, int], int] = {}


def _wave(kernel, device: int, shared_mem: int = 0) -> int:
    """Blocks of BLOCK threads of `kernel` with `shared_mem` bytes of dynamic shared memory resident
    on the whole GPU at once (asked once)."""
    key = (kernel.name, device, shared_mem)
    wave = _WAVES.get(key)
    if wave is None:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        wave = _WAVES[key] = sms * max(1, max_active_blocks_per_sm(kernel, BLOCK, shared_mem, device))
    return wave


_BARRIERS: dict[tuple[int, int], torch.Tensor] = {}
_RETIRED_BARRIERS: list[torch.Tensor] = []  # outgrown buffers, kept: a captured CUDA graph may still use one


def _barrier(device: torch.device, channels: int = 0) -> torch.Tensor:
    """The grid barrier's words for the current stream, with a ready flag for each group of
    MERGE_GROUP of `channels` channels: zeroed once, reset by the kernels themselves (a flag holds
    the barrier token of the launch that set it, which no other recent launch's token equals), one
    buffer per stream so that launches on different streams never share one."""
    index = device_index(device)
    key = (index, current_stream_ptr(index))
    words = READY_FLAGS_AT + max(READY_FLAGS, -(-int(channels) // MERGE_GROUP))
    bar = _BARRIERS.get(key)
    if bar is None or bar.numel() < words:
        if bar is not None:
            _RETIRED_BARRIERS.append(bar)
        bar = _BARRIERS[key] = torch.zeros(words, dtype=torch.int32, device=device)
    return bar


def merge_rounds_kernel(kernel):
    """The instance of a bnr::bn_relu_fused_nhwc<T, residual> kernel that merges in rounds."""
    return kernel.module.kernel(f"{kernel.name[:-1]}, true>")


def cache_slots(kernel, device: int, wanted: int, extra: int = 0) -> int:
    """Cache slots (at most `wanted`) a block of `kernel` can have, next to `extra` bytes of other
    dynamic shared memory, without fewer blocks an SM than it gets with no dynamic shared memory
    (the grid was sized for those: see _wave)."""
    if wanted <= 0:
        return 0
    limit = allow_all_dynamic_shared_memory(kernel, device)
    resident = max_active_blocks_per_sm(kernel, BLOCK, 0, device)
    slots = min(wanted, (limit - extra) // CACHE_SLOT_BYTES)
    while slots > 0 and max_active_blocks_per_sm(kernel, BLOCK, slots * CACHE_SLOT_BYTES + extra, device) < resident:
        slots -= 1
    return slots


@dataclass(frozen=True)
class OneLaunchPlan:
    """A one-launch grid and, for the forward, its x cache."""

    grid: tuple[int, int]
    tx: int  # threads across channel packs (NHWC)
    slots: int  # x-cache slots of each thread (forward; 0: none)
    step: int  # walk_step
    scratch: int = 0  # dynamic shared memory after the cache (fused_nhwc_scratch_bytes)
    merge_rounds: bool = False  # the NHWC forward's block merge in rounds (MERGE_ROUNDS_MIN_SLOTS)
    launch: Launch | None = None  # the cooperative launch that runs it (kernel, grid, shared memory)

    @property
    def shared_mem(self) -> int:
        return self.slots * CACHE_SLOT_BYTES + self.scratch

    def elements_read_again(self, per_channel: int) -> int:
        """Elements of each channel the second pass reads from global memory again (the packs of
        a thread's walk past its cache slots)."""
        return max(0, per_channel - self.slots * self.step)


PLANS: dict[tuple, OneLaunchPlan | Launch | None] = {}


def one_launch_plan(kernel, device: int, layout: str, shape, pack: int, vec: bool, fused: bool | None,
                    cache_x: bool) -> OneLaunchPlan | None:
    """The one-launch path's plan for `kernel` on `device`, or None where it does not apply or
    `fused` (None: one_launch_by_default) does not take it; ValueError if fused=True and it does not apply."""
    if fused is False:
        return None
    n, c, h, w = shape
    key = (kernel.name, device, layout, n, c, h * w, pack, vec, cache_x)
    if key not in PLANS:
        grid = fused_grid(layout, n, c, h * w, pack, vec, _wave(kernel, device))
        plan = None
        if grid is not None:
            (gx, gy), tx = grid
            step = walk_step(layout, pack, (gx, gy), tx)
            wanted = -(-(n * h * w) // step)
            scratch, slots, rounds = 0, 0, False
            if cache_x and layout == "NHWC":
                scratch = fused_nhwc_scratch_bytes(pack, tx)
                slots = cache_slots(kernel, device, wanted, scratch)
                fewer = fused_nhwc_scratch_bytes(pack, tx, merge_rounds=True)
                rounds_kernel = merge_rounds_kernel(kernel)
                more = cache_slots(rounds_kernel, device, wanted, fewer)
                same_wave = max_active_blocks_per_sm(rounds_kernel, BLOCK, 0, device) >= \
                    max_active_blocks_per_sm(kernel, BLOCK, 0, device)  # the grid is sized for `kernel`
                if same_wave and more - slots >= MERGE_ROUNDS_MIN_SLOTS:
                    scratch, slots, rounds = fewer, more, True
            elif cache_x:
                slots = cache_slots(kernel, device, wanted)
            runs = merge_rounds_kernel(kernel).name if rounds else kernel.name
            spec = Launch(runs, (gx, gy), (BLOCK,), slots * CACHE_SLOT_BYTES + scratch, cooperative=True,
                          tier="one-launch")
            plan = OneLaunchPlan((gx, gy), tx, slots, step, scratch, rounds, spec)
        PLANS[key] = plan
    plan = PLANS[key]
    if plan is None and fused:
        raise ValueError(f"the one-launch path does not apply to {layout} {tuple(shape)}")
    return plan if fused or one_launch_by_default(layout, n * c * h * w * (16 // pack)) else None


def _one_launch(module, name: str, x: torch.Tensor, layout: str, pack: int, vec: bool, fused: bool | None,
                ws_arrays: int, leading: tuple, trailing: tuple = (), cache_x: bool = False) -> bool:
    """Run kernel `name` as the one-launch path if it applies and `fused` allows; False to fall back
    to three kernels. Its arguments: leading, the workspace, the barrier, the walk's sizes, trailing,
    and with cache_x the number of x-cache slots (its dynamic shared memory: plan.shared_mem). Where
    the plan merges in rounds, the kernel's `<..., true>` instance runs (NHWC forward)."""
    kernel = module.kernel(name)
    try:
        plan = one_launch_plan(kernel, device_index(x), layout, x.shape, pack, vec, fused, cache_x)
    except ValueError as e:
        raise ValueError(f"{e} {x.dtype}") from None
    if plan is None:
        return False
    n, c, h, w = x.shape
    ws = torch.empty(ws_arrays * plan.grid[1] * c, dtype=torch.float32, device=x.device)
    sizes = (np.int32(c), np.int32(h * w), np.int32(n * h * w)) if layout == "NCHW" else \
        (np.int32(n * h * w), np.int32(c), np.int32(plan.tx))
    if cache_x:
        trailing = (*trailing, np.int32(plan.slots))
    if plan.merge_rounds:
        kernel = merge_rounds_kernel(kernel)
    device = x.device.index
    if (plan.launch, device) not in _CHECKED:
        check_cooperative(kernel, plan.launch, device)
        _CHECKED.add((plan.launch, device))
    run(kernel, plan.launch, (*leading, ws, _barrier(x.device, c), *sizes, *trailing), device)
    return True


def group_launch(module, direction: str, ctype: str, shape, residual: bool, device: int) -> Launch | None:
    """The one-launch group kernel's launch (NCHW planes no pack divides; fused_group_plan) for an
    aligned tensor of this shape on `device`, or None where it does not apply. Its scalar args hold
    the group."""
    n, c, h, w = shape
    pack = _TYPES[ctype]
    key = ("groups", direction, ctype, residual, device, n, c, h * w)
    if key not in PLANS:
        ways = group_instances(direction, residual)
        held_kernel = group_held_kernel(direction, ctype, residual)
        if held_kernel is not None:
            limit = allow_all_dynamic_shared_memory(module.kernel(held_kernel), device)
            ways = [(r, held) for r, held in ways if group_held_bytes(held, residual) <= limit]
        waves = {way: _wave(module.kernel(group_way_kernel(direction, ctype, residual, way)), device,
                            group_held_bytes(way[1], residual)) for way in ways}
        found = fused_group_plan(n, c, h * w, pack, waves)
        if found is None:
            PLANS[key] = None
        else:
            group, groups, splits, r, held = found
            args = (group, held) if direction == "forward" else (group,)  # the backward holds none
            PLANS[key] = Launch(group_way_kernel(direction, ctype, residual, (r, held)), (groups, splits), (BLOCK,),
                                group_held_bytes(held, residual), cooperative=True, args=args,
                                tier="one-launch groups" + (f", {held} images held" if held else ""))
    return PLANS[key]


def _group_spec(module, direction: str, access: Access, layout: str, x: torch.Tensor, residual: bool,
                fused: bool | None) -> Launch | None:
    """The one-launch group kernel's launch for this call where it applies and `fused` allows."""
    if fused is False or layout != "NCHW" or access.vec or not access.aligned:
        return None
    return group_launch(module, direction, access.ctype, x.shape, residual, device_index(x))


def _run_cooperative(module, spec: Launch, x: torch.Tensor, ws_arrays: int, leading: tuple, sizes: tuple,
                     trailing: tuple = ()) -> None:
    """Enqueue the cooperative one-launch kernel `spec` (checked once per device to fit the GPU at
    once): leading, a workspace of ws_arrays x S x C floats, the barrier, sizes, trailing."""
    c = x.shape[1]
    device = device_index(x)
    kernel = module.kernel(spec.kernel)
    if (spec, device) not in _CHECKED:
        check_cooperative(kernel, spec, device)
        _CHECKED.add((spec, device))
    ws = torch.empty(ws_arrays * spec.grid[1] * c, dtype=torch.float32, device=x.device)
    run(kernel, spec, (*leading, ws, _barrier(x.device, c), *sizes, *trailing), x.device.index)


def _run_groups(module, spec: Launch, x: torch.Tensor, ws_arrays: int, leading: tuple, trailing: tuple = ()) -> None:
    """Enqueue the one-launch group kernel `spec`: leading, the workspace, the barrier, N, C, H*W,
    the group, trailing."""
    n, c, h, w = x.shape
    _run_cooperative(module, spec, x, ws_arrays, leading,
                     (np.int32(n), np.int32(c), np.int32(h * w), *map(np.int32, spec.args)), trailing)


def nhwc_regs_launch(module, ctype: str, shape, residual: bool, device: int) -> Launch | None:
    """The one-launch NHWC register kernel's launch (nhwc_regs_plan) for an aligned channels_last
    tensor of this shape on `device`, or None where it does not apply."""
    n, c, h, w = shape
    key = ("nhwc-regs", ctype, residual, device, n, c, h * w)
    if key not in PLANS:
        names = nhwc_regs_kernels(ctype, residual)
        waves = {r: _wave(module.kernel(name), device) for r, name in names.items()}
        found = nhwc_regs_plan(n * h * w, c, _TYPES[ctype], waves)
        PLANS[key] = None if found is None else Launch(names[found[2]], found[:2], (BLOCK,), cooperative=True,
                                                       tier="one-launch NHWC registers")
    return PLANS[key]


def _nhwc_regs_spec(module, access: Access, layout: str, x: torch.Tensor, residual: bool,
                    fused: bool | None) -> Launch | None:
    """The NHWC register kernel's launch for this forward call, where it applies and fused=None (it
    is then timed against the path fused=None takes otherwise)."""
    if fused is not None or layout != "NHWC" or not access.vec:
        return None
    return nhwc_regs_launch(module, access.ctype, x.shape, residual, device_index(x))


def _run_nhwc_regs(module, spec: Launch, x: torch.Tensor, leading: tuple) -> None:
    n, c, h, w = x.shape
    _run_cooperative(module, spec, x, 2, leading, (np.int32(n * h * w), np.int32(c)))


_GROUP_TIMED: dict[tuple, bool] = {}
"""(layout, direction, storage type, residual, device, shape) -> whether the one-launch register
kernel (the NCHW group kernel, or the NHWC register kernel) beat the other path when first timed."""


def _group_key(direction: str, ctype: str, residual: bool, device: int, shape, layout: str = "NCHW") -> tuple:
    return layout, direction, ctype, residual, device, tuple(shape)


def _one_launch_wins(key: tuple, one_launch, three_kernels, device: int) -> bool:
    """Whether the one-launch register kernel (NCHW group or NHWC register kernel) runs for `key`'s
    shape: on first use it and the other path are timed cold in L2 on the caller's arguments
    (bwbench/cuda/autotune.py; both write the same outputs) and the faster is kept. The one launch
    holds each thread's data in registers and skips a launch and a second read, but its grid barrier
    and per-block merge are fixed costs that the three kernels beat at some shapes (32x512x7x7
    float16 NCHW forward on an H100: 18.2 against 14.1 us). During CUDA graph capture, where nothing
    may synchronize, the one launch runs untimed and nothing is kept."""
    found = _GROUP_TIMED.get(key)
    if found is not None:
        return found
    if torch.cuda.is_current_stream_capturing():
        return True
    won = fastest([one_launch, three_kernels], device) == 0
    _GROUP_TIMED[key] = won
    return won


def reads_once(direction: str, shape, dtype: torch.dtype, layout: str, residual: bool = False,
               device: int | torch.device | None = None) -> bool:
    """Whether bn_relu_forward / bn_relu_backward (fused=None) read x (dy, the mask and x) from
    global memory only once for a 16-byte aligned tensor of this shape on `device`: the one-launch
    register kernels (NCHW planes no pack divides, both directions; small NHWC tensors, the forward)
    keep them in registers between their passes. Where first-use timing has chosen between such a
    kernel and the other path (_one_launch_wins), the kept choice; before, the plan's."""
    n, c, h, w = shape
    ctype = cpp_type(dtype)
    nchw = layout == "NCHW"
    if (h * w) % _TYPES[ctype] == 0 if nchw else (direction != "forward" or c % TILE_CHANNELS):
        return False  # no register kernel for this shape (answered without a GPU)
    index = device_index(device)
    module = load(SOURCE)
    found = group_launch(module, direction, ctype, shape, residual, index) if nchw else \
        nhwc_regs_launch(module, ctype, shape, residual, index)
    if found is None:
        return False
    return _GROUP_TIMED.get(_group_key(direction, ctype, residual, index, shape, layout), True)


_CHECKED: set[tuple[Launch, int]] = set()
"""Cooperative launches found to fit the GPU (checked once per device)."""


def forward_x_read_bytes(shape, dtype: torch.dtype, layout: str, residual: bool = False,
                         device: int | torch.device | None = None) -> int:
    """Bytes of x that bn_relu_forward (fused=None) reads from global memory for a 16-byte aligned x
    of this shape on `device`: twice x's bytes on the three-kernel path; on the one-launch path,
    once plus what its x cache could not hold (the second pass takes the rest from shared memory);
    once on the one-launch group path (`reads_once`)."""
    n, c, h, w = shape
    itemsize = torch.empty((), dtype=dtype).element_size()
    once = n * c * h * w * itemsize
    if reads_once("forward", shape, dtype, layout, residual, device):
        return once
    ctype = cpp_type(dtype)
    pack = _TYPES[ctype]
    vec = (h * w) % pack == 0 if layout == "NCHW" else c % pack == 0
    kernel = load(SOURCE).kernel(f"bnr::bn_relu_fused_{layout.lower()}<{ctype}, {'true' if residual else 'false'}>")
    plan = one_launch_plan(kernel, device_index(device), layout, shape, pack, vec, None, cache_x=True)
    if plan is None:
        return 2 * once
    return once + plan.elements_read_again(n * h * w) * c * itemsize


@dataclass(frozen=True)
class Access:
    """How the kernels of one call touch x and the tensors that move with it."""

    ctype: str  # storage type
    pack: int  # elements of a 16-byte pack
    vec: bool  # packs that each lie in one channel's walk (the reductions and the one-launch path)
    aligned: bool  # every tensor 16-byte aligned: the elementwise passes take packs (NCHW at any H*W)

    def apply_vec(self, layout: str) -> bool:
        return self.aligned if layout == "NCHW" else self.vec


def _plan(x: torch.Tensor, layout: str, *others) -> Access:
    ctype = cpp_type(x.dtype)
    pack = _TYPES[ctype]
    _, c, h, w = x.shape
    fits = (h * w) % pack == 0 if layout == "NCHW" else c % pack == 0
    aligned = _aligned(x, *others)
    return Access(ctype, pack, fits and aligned, aligned)


def _reduce(module, kind: str, access: Access, layout: str, x: torch.Tensor, leading: tuple,
            ws_arrays: int) -> tuple[torch.Tensor, int]:
    """Launch a per-channel reduction kernel (the group reduction for NCHW planes that take no
    whole packs, where it applies); returns its workspace and S."""
    n, c, h, w = x.shape
    hw = h * w
    ctype, pack, vec = access.ctype, access.pack, access.vec
    group = plane_group(c, hw, pack) if layout == "NCHW" and access.aligned else None
    if group is not None:
        name = f"bnr::{kind}_nchw_groups<{ctype}>"
        gx, gy = group_grid(n, c, group, _wave(module.kernel(name), device_index(x)))
        ws = torch.empty(ws_arrays * gy * c, dtype=torch.float32, device=x.device)
        _enqueue(module, name, (gx, gy), (*leading, ws, np.int32(n), np.int32(c), np.int32(hw), np.int32(group)),
                 x.device.index)
        return ws, gy
    v = pack if vec else 1
    name = f"bnr::{kind}_{layout.lower()}<{ctype}, {v}, {'true' if vec else 'false'}>"
    kernel = module.kernel(name)
    (gx, gy), tx = reduction_grid(layout, n, c, hw, v, _wave(kernel, device_index(x)))
    ws = torch.empty(ws_arrays * gy * c, dtype=torch.float32, device=x.device)
    if layout == "NCHW":
        tail = (np.int32(c), np.int32(hw), np.int32(n * hw))
    else:
        tail = (np.int32(n * hw), np.int32(c), np.int32(tx))
    _enqueue(module, name, (gx, gy), (*leading, ws, *tail), x.device.index)
    return ws, gy


def _enqueue(module, name: str, grid, args: tuple, device: int) -> None:
    """One launch of BLOCK threads of kernel `name` (no dynamic shared memory)."""
    run(module.kernel(name), Launch(name, grid, (BLOCK,)), args, device)


# ----------------------------------------------------------------------------------------------
# Forward and backward
# ----------------------------------------------------------------------------------------------


def bn_relu_forward(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float,
                    z: torch.Tensor | None = None, fused: bool | None = None):
    """(y, mask, mean, invstd): y = relu(BN(x) [+ z]) with batch statistics; mask bit = (pre-activation > 0).

    fused: None takes the one-launch path where it applies and one_launch_by_default agrees; where
    a one-launch register kernel applies (NCHW planes no pack divides: the group kernel; small NHWC
    tensors: the NHWC register kernel), that kernel or the other path, whichever the first call
    timed faster (_one_launch_wins). False forces the three kernels; True requires a one-launch path
    (the group kernel for NCHW planes no pack divides, else the one launch with the x cache;
    ValueError where none applies)."""
    layout = _check_data(x, "x")
    if z is not None:
        _check_data(z, "z", like=x)
    _check_param(gamma, "gamma", x)
    _check_param(beta, "beta", x)
    if not (isinstance(eps, (int, float)) and eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")
    n, c, h, w = x.shape
    numel = x.numel()
    if numel == 0:
        raise ValueError(f"x is empty (shape {tuple(x.shape)}): no batch statistics")
    y = make_like(x.shape, x.dtype, x.device, layout)
    words = torch.empty(max(1, (numel + 31) // 32), dtype=torch.int32, device=x.device)
    mean = torch.empty(c, dtype=torch.float32, device=x.device)
    invstd = torch.empty(c, dtype=torch.float32, device=x.device)
    mask = words.view(torch.uint8)[:packed_bytes(numel)]
    module = load(SOURCE)
    device = x.device.index
    access = _plan(x, layout, z, y)
    ctype, pack, vec = access.ctype, access.pack, access.vec
    b = lambda v: "true" if v else "false"  # noqa: E731
    leading = (x, z, gamma, beta, np.float32(eps), mean, invstd, y, words)

    def three_kernels() -> None:
        ws, splits = _reduce(module, "bn_stats", access, layout, x, (x,), 3)
        warps, grid = finalize_grid(c, splits)
        _enqueue(module, f"bnr::bn_stats_finalize<{ctype}, {b(warps)}>", grid,
                 (ws, np.int32(splits), x, np.int32(h * w if layout == "NCHW" else 1), np.float32(eps), mean,
                  invstd, np.int32(c)), device)
        apply_vec = access.apply_vec(layout)
        apply = module.kernel(f"bnr::bn_relu_apply<{ctype}, {b(layout == 'NHWC')}, {b(apply_vec)}, "
                              f"{b(z is not None)}>")
        blocks = apply_blocks(layout, numel, c, pack, apply_vec, _wave(apply, device_index(x)))
        _enqueue(module, apply.name, blocks, (x, z, mean, invstd, gamma, beta, y, words, np.int32(numel),
                                             np.int32(c), np.int32(h * w),
                                             np.int32(walk_from_end(x.numel() * x.element_size()))), device)

    groups = _group_spec(module, "forward", access, layout, x, z is not None, fused)
    if groups is not None:
        def one_launch() -> None:
            _run_groups(module, groups, x, 2, leading)

        key = _group_key("forward", ctype, z is not None, device_index(x), x.shape)
        (one_launch if fused or _one_launch_wins(key, one_launch, three_kernels, device_index(x))
         else three_kernels)()
        return y, mask, mean, invstd

    def cached_or_three_kernels() -> None:
        if not _one_launch(module, f"bnr::bn_relu_fused_{layout.lower()}<{ctype}, {b(z is not None)}>", x, layout,
                           pack, vec, fused, 3, leading, cache_x=True):
            three_kernels()

    regs = _nhwc_regs_spec(module, access, layout, x, z is not None, fused)
    if regs is not None:
        def one_launch_regs() -> None:
            _run_nhwc_regs(module, regs, x, leading)

        key = _group_key("forward", ctype, z is not None, device_index(x), x.shape, layout)
        (one_launch_regs if _one_launch_wins(key, one_launch_regs, cached_or_three_kernels, device_index(x))
         else cached_or_three_kernels)()
        return y, mask, mean, invstd
    cached_or_three_kernels()
    return y, mask, mean, invstd


def bn_relu_backward(dy: torch.Tensor, mask: torch.Tensor, x: torch.Tensor, mean: torch.Tensor,
                     invstd: torch.Tensor, gamma: torch.Tensor, residual: bool = False, fused: bool | None = None):
    """(dx, [dz,] dgamma, dbeta) through the ReLU mask and BN with the saved mean and invstd;
    `fused` as in bn_relu_forward."""
    layout = _check_data(x, "x")
    _check_data(dy, "dy", like=x)
    for name, p in (("mean", mean), ("invstd", invstd), ("gamma", gamma)):
        _check_param(p, name, x)
    numel = x.numel()
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.uint8 or mask.dim() != 1 or \
            not mask.is_contiguous() or mask.numel() < packed_bytes(numel) or mask.device != x.device:
        raise ValueError(f"mask must be a contiguous 1-D uint8 CUDA tensor of at least {packed_bytes(numel)} bytes "
                         f"(packed bits of {numel} elements)")
    if mask.data_ptr() % 4:
        raise ValueError("mask must start at a 4-byte aligned address (the kernels read 32-bit words)")
    if numel == 0:
        raise ValueError(f"x is empty (shape {tuple(x.shape)})")
    n, c, h, w = x.shape
    dx = make_like(x.shape, x.dtype, x.device, layout)
    dz = make_like(x.shape, x.dtype, x.device, layout) if residual else None
    dgamma = torch.empty(c, dtype=torch.float32, device=x.device)
    dbeta = torch.empty(c, dtype=torch.float32, device=x.device)
    module = load(SOURCE)
    device = x.device.index
    access = _plan(x, layout, dy, dx, dz)
    ctype, pack, vec = access.ctype, access.pack, access.vec
    mask_bytes = np.int32(mask.numel())
    b = lambda v: "true" if v else "false"  # noqa: E731
    inv_m = np.float32(1.0 / (numel // c))
    leading = (dy, mask, mask_bytes, x, mean, invstd, gamma, dgamma, dbeta, dx, dz)
    result = (dx, dz, dgamma, dbeta) if residual else (dx, dgamma, dbeta)

    def three_kernels() -> None:
        ws, splits = _reduce(module, "bn_grad", access, layout, x, (dy, mask, mask_bytes, x, mean), 2)
        warps, grid = finalize_grid(c, splits)
        _enqueue(module, f"bnr::bn_grad_finalize<{b(warps)}>", grid,
                 (ws, np.int32(splits), invstd, dgamma, dbeta, np.int32(c)), device)
        apply_vec = access.apply_vec(layout)
        apply = module.kernel(f"bnr::bn_relu_backward_apply<{ctype}, {b(layout == 'NHWC')}, {b(apply_vec)}, "
                              f"{b(residual)}>")
        blocks = apply_blocks(layout, numel, c, pack, apply_vec, _wave(apply, device_index(x)))
        _enqueue(module, apply.name, blocks, (dy, mask, mask_bytes, x, mean, invstd, gamma, dgamma, dbeta, dx, dz,
                                             np.int32(numel), np.int32(c), np.int32(h * w), inv_m,
                                             np.int32(walk_from_end(x.numel() * x.element_size()))), device)

    groups = _group_spec(module, "backward", access, layout, x, residual, fused)
    if groups is not None:
        def one_launch() -> None:
            _run_groups(module, groups, x, 2, leading, (inv_m,))

        key = _group_key("backward", ctype, residual, device_index(x), x.shape)
        (one_launch if fused or _one_launch_wins(key, one_launch, three_kernels, device_index(x))
         else three_kernels)()
        return result
    if _one_launch(module, f"bnr::bn_relu_backward_fused_{layout.lower()}<{ctype}, {b(residual)}>", x, layout,
                   pack, vec, fused, 2, leading, (inv_m,)):
        return result
    three_kernels()
    return result


def keep_mask(keep: torch.Tensor) -> torch.Tensor:
    """Packed bits of a bool tensor of x's shape, in its memory order (for inputs and checks)."""
    return pack_bits(memory_order(keep))
