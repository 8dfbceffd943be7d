"""`x.permute(perm).contiguous()` with this project's CUDA kernels (kernels/permute.cu).

`permute` is the optimized version: the plan (bwbench/permute_plan.py: merged dimensions, movement
size, index type, gather or tiled transpose) is made on the host and cached per shape, permutation,
element size and pointer alignment, so a repeated call only launches. `naive_permute` is the
article's starting point: one element per thread, 64-bit N-d index arithmetic, nothing merged.

Both take any dtype of 1, 2, 4 or 8 bytes (a permute only moves bytes), a contiguous CUDA input,
and run on PyTorch's current stream (capturable in a CUDA graph once they have run outside it).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from bwbench.cuda.loader import KernelSource, launch, load
from bwbench.permute_plan import (
    GATHER_CONFIG,
    MAX_BATCH_DIMS,
    MAX_DIMS,
    GatherConfig,
    GatherPlan,
    PermuteError,
    PermutePlan,
    TileConfig,
    TilePlan,
    check_permutation,
    compiled_tile_configs,
    contiguous_strides,
    divider32,
    plan_permute,
)

__all__ = ["NAIVE", "OPTIMIZED", "naive_permute", "permute", "plan_for"]

_INDEX_CPP = {"int32": "int", "int64": "long long"}
_INDEX_NP = {"int32": np.int32, "int64": np.int64}
NAIVE_THREADS = 256
GATHER_BYTES = (1, 2, 4, 8, 16)

TUNING_GATHER_CONFIGS: tuple[GatherConfig, ...] = (GatherConfig(256, 2), GatherConfig(128, 2), GatherConfig(512, 1))
"""Gather configurations compiled (16-byte units, 32-bit index) besides the one in use, so they can
be compared on a GPU (`permute(..., config=...)`)."""


def gather_kernel_name(unit_bytes: int, index: str, config: GatherConfig = GATHER_CONFIG) -> str:
    return f"permute_gather<{unit_bytes}, {_INDEX_CPP[index]}, {config.threads}, {config.unroll}>"


def tiled_kernel_name(config: TileConfig, index: str) -> str:
    common = f"{config.itemsize}, {config.vec_read}, {config.vec_write}, {config.tile}, {config.threads}, {_INDEX_CPP[index]}"
    if config.write_align:
        return f"permute_tiled_aligned<{common}, {config.write_align}, {'true' if config.shifted else 'false'}>"
    return f"permute_tiled<{common}, {'true' if config.shifted else 'false'}>"


def naive_kernel_name(itemsize: int) -> str:
    return f"permute_naive<{itemsize}>"


OPTIMIZED = KernelSource(
    "permute.cu",
    name_expressions=(
        *(gather_kernel_name(b, i) for b in GATHER_BYTES for i in _INDEX_CPP),
        *(gather_kernel_name(16, "int32", c) for c in TUNING_GATHER_CONFIGS if c != GATHER_CONFIG),
        *(tiled_kernel_name(c, i) for c in compiled_tile_configs() for i in _INDEX_CPP),
    ),
)

NAIVE = KernelSource("permute.cu", name_expressions=tuple(naive_kernel_name(b) for b in (1, 2, 4, 8)))


# ----------------------------------------------------------------------------------------------
# Launch descriptions (host work done once per plan)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchSpec:
    """One kernel launch without its two pointers: kernel name, grid, block, scalar arguments."""

    kernel: str
    grid: int
    block: tuple[int, ...]
    args: tuple


def _slots(values: Sequence[int], count: int, kind) -> list:
    return [kind(v) for v in values] + [kind(0)] * (count - len(values))


def gather_launch(plan: GatherPlan) -> LaunchSpec:
    index = _INDEX_NP[plan.index]
    if plan.index == "int32":
        divs = [divider32(s) for s in plan.out_sizes]
    else:
        divs = list(plan.out_sizes)
    args = (index(plan.count), np.int32(len(plan.out_sizes)), *_slots(divs, MAX_DIMS, np.uint64),
            *_slots(plan.src_strides, MAX_DIMS, np.int64))
    return LaunchSpec(gather_kernel_name(plan.unit_bytes, plan.index, plan.config), plan.blocks,
                      (plan.config.threads,), args)


def tiled_launch(plan: TilePlan) -> LaunchSpec:
    index = _INDEX_NP[plan.index]
    tiles_c, tiles_r, _ = plan.tiles
    batch = plan.batch
    args = (index(plan.rows), index(plan.cols), index(plan.src_row_stride), index(plan.dst_row_stride),
            np.uint64(divider32(tiles_c)), np.uint64(divider32(tiles_r)), np.int32(len(batch)),
            *_slots([divider32(b.size) for b in batch], MAX_BATCH_DIMS, np.uint64),
            *_slots([b.src_stride for b in batch], MAX_BATCH_DIMS, np.int64),
            *_slots([b.dst_stride for b in batch], MAX_BATCH_DIMS, np.int64))
    return LaunchSpec(tiled_kernel_name(plan.config, plan.index), plan.blocks, (plan.config.threads,), args)


@functools.lru_cache(maxsize=1024)
def _cached(shape: tuple[int, ...], perm: tuple[int, ...], itemsize: int, src_align: int, dst_align: int,
            config: TileConfig | GatherConfig | None) -> tuple[PermutePlan, LaunchSpec | None]:
    plan = plan_permute(shape, perm, itemsize, src_align, dst_align, config)
    if plan.kernel is None:
        return plan, None
    spec = gather_launch(plan.kernel) if isinstance(plan.kernel, GatherPlan) else tiled_launch(plan.kernel)
    return plan, spec


# ----------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------


def _check_input(x: torch.Tensor, perm: Sequence[int], what: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{what} expects a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise ValueError(f"{what} expects a CUDA tensor, got one on {x.device}")
    if not x.is_contiguous():
        raise ValueError(f"{what} expects a contiguous tensor, got strides {x.stride()}")
    if x.element_size() not in (1, 2, 4, 8):
        raise ValueError(f"{what} moves elements of 1, 2, 4 or 8 bytes, not {x.element_size()} ({x.dtype})")
    try:
        return check_permutation(tuple(x.shape), tuple(perm))
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


def permute(x: torch.Tensor, perm: Sequence[int], *, out: torch.Tensor | None = None,
            config: TileConfig | GatherConfig | None = None) -> torch.Tensor:
    """x.permute(perm).contiguous(), bit for bit, with the optimized kernels.

    x: contiguous CUDA tensor of any dtype of 1, 2, 4 or 8 bytes; perm: a permutation of its
    dimensions. Returns a new contiguous tensor, or writes into `out` (contiguous, the permuted
    shape, x's dtype and device) and returns it. `config` forces a compiled kernel configuration
    (tuning only; it must be one that OPTIMIZED declares). Raises ValueError for anything it cannot do (more than 8 dimensions after
    merging, a non-contiguous input).
    """
    shape, perm = _check_input(x, perm, "permute")
    y = _output(x, tuple(shape[p] for p in perm), out)
    try:
        plan, spec = _cached(shape, perm, x.element_size(), x.data_ptr() % 16, y.data_ptr() % 16, config)
    except PermuteError as err:
        raise ValueError(str(err)) from None
    if spec is None:
        return y
    module = load(OPTIMIZED)
    launch(module.kernel(spec.kernel), spec.grid, spec.block, (x, y, *spec.args))
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
    args = (np.int64(count), np.int32(len(shape)), *_slots(out_shape, MAX_DIMS, np.int64),
            *_slots([in_strides[p] for p in perm], MAX_DIMS, np.int64))
    module = load(NAIVE)
    launch(module.kernel(naive_kernel_name(x.element_size())), -(-count // NAIVE_THREADS), NAIVE_THREADS,
           (x, y, *args))
    return y
