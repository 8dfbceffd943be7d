"""`x.permute(perm).contiguous()` with this project's CUDA kernels (kernels/permute.cu).

`permute` is the optimized version: the plan (plan.py: merged dimensions, movement size, index
type, gather or tiled transpose, and the launch with its scalar arguments packed) is made on the
host and cached per shape, permutation, element size and pointer alignment, so a repeated call
only checks, allocates and launches. `naive_permute` is the
article's starting point: one element per thread, 64-bit N-d index arithmetic, nothing merged.

Both take any dtype of 1, 2, 4 or 8 bytes (a permute only moves bytes), a contiguous CUDA input,
and run on PyTorch's current stream (capturable in a CUDA graph once they have run outside it).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np
import torch

from bwbench.cuda.errors import PermuteError
from bwbench.cuda.launch_spec import Launch
from bwbench.cuda.loader import Kernel, KernelSource, PlannedCall, launch, load, run
from bwbench.cuda.permute.plan import (
    MAX_DIMS,
    NAIVE_KERNELS,
    NAIVE_THREADS,
    OPTIMIZED_KERNELS,
    GatherConfig,
    PermutePlan,
    TileConfig,
    check_permutation,
    contiguous_strides,
    launch_of,
    naive_kernel_name,
    plan_permute,
    slots,
)

__all__ = ["NAIVE", "OPTIMIZED", "naive_permute", "permute", "plan_for"]

OPTIMIZED = KernelSource("permute.cu", OPTIMIZED_KERNELS)
NAIVE = KernelSource("permute.cu", NAIVE_KERNELS)


@functools.lru_cache(maxsize=1024)
def _cached(shape: tuple[int, ...], perm: tuple[int, ...], itemsize: int, src_align: int, dst_align: int,
            config: TileConfig | GatherConfig | None) -> tuple[PermutePlan, Launch | None]:
    plan = plan_permute(shape, perm, itemsize, src_align, dst_align, config)
    return plan, launch_of(plan)


_KERNELS: dict[tuple[str, int], Kernel] = {}
"""Compiled kernels by (name, device), looked up once."""


def _kernel(name: str, device: int) -> Kernel:
    kernel = _KERNELS.get((name, device))
    if kernel is None:
        kernel = _KERNELS[(name, device)] = load(OPTIMIZED).kernel(name)
    return kernel


# ----------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------


def _check_input(x: torch.Tensor, perm: Sequence[int], what: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{what} expects a torch.Tensor, got {type(x).__name__}")
    try:  # None or 1.5 for perm was a TypeError from tuple() or deep inside the plan
        dims = tuple(perm)
    except TypeError:
        dims = None
    if dims is None or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise ValueError(f"{what} takes perm as a sequence of dimension indices, not {type(perm).__name__} {perm!r}")
    if x.device.type != "cuda":
        raise ValueError(f"{what} expects a CUDA tensor, got one on {x.device}")
    if not x.is_contiguous():
        raise ValueError(f"{what} expects a contiguous tensor, got strides {x.stride()}")
    if x.element_size() not in (1, 2, 4, 8):
        raise ValueError(f"{what} moves elements of 1, 2, 4 or 8 bytes, not {x.element_size()} ({x.dtype})")
    try:
        return check_permutation(tuple(x.shape), dims)
    except PermuteError as err:
        raise ValueError(str(err)) from None


def _output(x: torch.Tensor, out_shape: tuple[int, ...], out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty(out_shape, dtype=x.dtype, device=x.device)
    if tuple(out.shape) != out_shape or out.dtype != x.dtype or out.device != x.device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {x.dtype} tensor of shape {out_shape} on {x.device}: got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    return out


def plan_for(x: torch.Tensor, perm: Sequence[int], out: torch.Tensor | None = None,
             config: TileConfig | GatherConfig | None = None) -> PermutePlan:
    """The plan `permute(x, perm, out=out)` would run (for tests and notes)."""
    shape, perm = _check_input(x, perm, "plan_for")
    dst = out.data_ptr() if out is not None else 0
    return _cached(shape, perm, x.element_size(), x.data_ptr() % 16, dst % 16, config)[0]


class _Repeat:
    """A permute the launcher has checked and planned before, kept for inputs of the same kind
    (dtype, device, shape, 16-byte phase, permutation, config): a repeat only allocates and enqueues."""

    def __init__(self, launch: PlannedCall | None, x: torch.Tensor, out_shape: tuple[int, ...], dst_phase: int,
                 scalars: tuple) -> None:
        self.launch, self.out_shape, self.dst_phase = launch, out_shape, dst_phase
        self.dtype, self.device = x.dtype, x.device
        self.scalars = tuple(a.item() for a in scalars)

    def __call__(self, x: torch.Tensor) -> torch.Tensor | None:
        y = torch.empty(self.out_shape, dtype=self.dtype, device=self.device)
        if y.data_ptr() % 16 != self.dst_phase:  # another allocator: the caller plans afresh
            return None
        if self.launch is not None:
            self.launch.enqueue((x.data_ptr(), y.data_ptr(), *self.scalars))
        return y


_REPEATS: dict[tuple, _Repeat] = {}
"""Calls without out=, by (dtype, device index, shape, contiguity, 16-byte phase, perm, config)."""


def permute(x: torch.Tensor, perm: Sequence[int], *, out: torch.Tensor | None = None,
            config: TileConfig | GatherConfig | None = None) -> torch.Tensor:
    """x.permute(perm).contiguous(), bit for bit, with the optimized kernels.

    x: contiguous CUDA tensor of any dtype of 1, 2, 4 or 8 bytes; perm: a permutation of its
    dimensions. Returns a new contiguous tensor, or writes into `out` (contiguous, the permuted
    shape, x's dtype and device) and returns it. `config` forces a compiled kernel configuration
    (tuning only; it must be one that OPTIMIZED declares). Raises ValueError for anything it cannot do (more than 8 dimensions after
    merging, a non-contiguous input).
    """
    key = None
    if out is None:
        try:
            key = (x.dtype, x.get_device(), x.shape, x.is_contiguous(), x.data_ptr() % 16, tuple(perm), config)
            repeat = _REPEATS.get(key)
        except (AttributeError, TypeError):
            key = repeat = None
        if repeat is not None:
            found = repeat(x)
            if found is not None:
                return found
    shape, perm = _check_input(x, perm, "permute")
    y = _output(x, tuple(shape[p] for p in perm), out)
    try:
        plan, spec = _cached(shape, perm, x.element_size(), x.data_ptr() % 16, y.data_ptr() % 16, config)
    except PermuteError as err:
        raise ValueError(str(err)) from None
    device = x.device.index
    launch = None
    if spec is not None:
        kernel = _kernel(spec.kernel, device)
        args = (x, y, *spec.args)
        run(kernel, spec, args, device)
        launch = PlannedCall(kernel, spec, args, device)
    if key is not None:
        _REPEATS[key] = _Repeat(launch, x, tuple(y.shape), y.data_ptr() % 16, spec.args if spec is not None else ())
    return y


def naive_permute(x: torch.Tensor, perm: Sequence[int], *, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.permute(perm).contiguous() the naive way: one element per thread, each thread turning its
    output offset into an N-d index with 64-bit division and modulo over every dimension (size-1
    ones included) and summing the input strides. Same arguments as `permute` (no `config`)."""
    shape, perm = _check_input(x, perm, "naive_permute")
    out_shape = tuple(shape[p] for p in perm)
    y = _output(x, out_shape, out)
    count = math.prod(shape)
    if count == 0:
        return y
    if len(shape) > MAX_DIMS:
        raise ValueError(f"naive_permute takes at most {MAX_DIMS} dimensions, got {len(shape)}")
    if not shape:
        shape, perm, out_shape = (1,), (0,), (1,)
    in_strides = contiguous_strides(shape)
    args = (np.int64(count), np.int32(len(shape)), *slots(out_shape, MAX_DIMS, np.int64),
            *slots([in_strides[p] for p in perm], MAX_DIMS, np.int64))
    module = load(NAIVE)
    launch(module.kernel(naive_kernel_name(x.element_size())), -(-count // NAIVE_THREADS), NAIVE_THREADS,
           (x, y, *args))
    return y
