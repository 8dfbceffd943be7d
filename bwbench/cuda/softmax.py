"""Softmax over the last dimension of a 2-D tensor, with this project's CUDA kernels.

`naive_softmax` is the article's starting point: five separate kernels (kernels/softmax_naive.cu),
each re-reading its input from global memory, with float32 intermediates; `naive_log_softmax` and
`naive_softmax_backward` are its counterparts for the other suites.

The optimized family (kernels/softmax.cu) is one dispatcher over the article's tiers for five
operations: `softmax`, `log_softmax`, `softmax_backward`, `log_softmax_backward` and
`online_softmax`. `plan_launch` says what a shape runs (`which_tier` for short); the choice itself
is the pure code in softmax_dispatch.py, fed with this device's occupancy numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from bwbench.cuda import softmax_dispatch as dispatch
from bwbench.cuda.loader import (
    Kernel,
    KernelSource,
    allow_all_dynamic_shared_memory,
    check_matrix,
    cpp_type,
    device_index,
    grid_size,
    launch,
    launch_grid_stride,
    load,
    max_active_blocks_per_sm,
)

_STORAGE_TYPES = ("half_t", "bf16_t", "float")

NAIVE = KernelSource(
    "softmax_naive.cu",
    name_expressions=(
        *(f"naive_reduce_max<{t}>" for t in _STORAGE_TYPES),
        *(f"naive_broadcast_sub<{t}>" for t in _STORAGE_TYPES),
        "naive_exp",
        "naive_reduce_sum",
        *(f"naive_broadcast_div<{t}>" for t in _STORAGE_TYPES),
    ),
)

# Threads per block for every naive kernel (the reductions need a multiple of 32).
NAIVE_BLOCK = 256


def _naive_out(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device or not out.is_contiguous():
        raise ValueError(
            f"out must be contiguous with the input's shape, dtype and device: got {tuple(out.shape)} "
            f"{out.dtype} on {out.device}, want {tuple(x.shape)} {x.dtype} on {x.device}"
        )
    return out


def naive_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(x, dim=-1) in five kernels: row max, subtract, exp, row sum, divide.

    x: 2-D contiguous CUDA tensor of float16, bfloat16 or float32. Returns a new tensor like x, or
    writes into `out` (same shape, dtype and device, contiguous) and returns it. Runs on PyTorch's
    current stream; capturable in a CUDA graph once it has run outside capture.
    """
    check_matrix(x, "naive_softmax")
    ctype = cpp_type(x.dtype)
    y = _naive_out(x, out)
    rows, cols = x.shape
    n = rows * cols
    if n == 0:
        return y

    device = device_index(x)
    module = load(NAIVE)
    reduce_max = module.kernel(f"naive_reduce_max<{ctype}>")
    broadcast_sub = module.kernel(f"naive_broadcast_sub<{ctype}>")
    exp = module.kernel("naive_exp")
    reduce_sum = module.kernel("naive_reduce_sum")
    broadcast_div = module.kernel(f"naive_broadcast_div<{ctype}>")

    tmp = torch.empty(n, dtype=torch.float32, device=x.device)
    row_max = torch.empty(rows, dtype=torch.float32, device=x.device)
    row_sum = torch.empty(rows, dtype=torch.float32, device=x.device)

    rows_, cols_, n_ = np.int64(rows), np.int64(cols), np.int64(n)
    elementwise = -(-n // NAIVE_BLOCK)
    launch_grid_stride(reduce_max, NAIVE_BLOCK, rows, (x, row_max, rows_, cols_), device)
    launch_grid_stride(broadcast_sub, NAIVE_BLOCK, elementwise, (x, row_max, tmp, rows_, cols_), device)
    launch_grid_stride(exp, NAIVE_BLOCK, elementwise, (tmp, n_), device)
    launch_grid_stride(reduce_sum, NAIVE_BLOCK, rows, (tmp, row_sum, rows_, cols_), device)
    launch_grid_stride(broadcast_div, NAIVE_BLOCK, elementwise, (tmp, row_sum, y, rows_, cols_), device)
    return y


# =============================================================================================
# Naive multi-kernel log-softmax and softmax backward (kernels/softmax_family_naive.cu plus the
# reductions of softmax_naive.cu): the baselines of the log_softmax and softmax_backward suites.
# =============================================================================================

FAMILY_NAIVE = KernelSource(
    "softmax_family_naive.cu",
    name_expressions=(
        "naive_exp_into",
        *(f"naive_broadcast_sub_log<{t}>" for t in _STORAGE_TYPES),
        *(f"naive_mul<{t}>" for t in _STORAGE_TYPES),
        *(f"naive_broadcast_sub_grad<{t}>" for t in _STORAGE_TYPES),
        *(f"naive_mul_out<{t}>" for t in _STORAGE_TYPES),
    ),
)


def naive_log_softmax(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """log_softmax(x, dim=-1) in five kernels: row max, subtract, exp, row sum, subtract log.

    Same contract as `naive_softmax` (2-D contiguous CUDA tensor, float16/bfloat16/float32).
    """
    check_matrix(x, "naive_log_softmax")
    ctype = cpp_type(x.dtype)
    y = _naive_out(x, out)
    rows, cols = x.shape
    n = rows * cols
    if n == 0:
        return y
    device = device_index(x)
    base, family = load(NAIVE), load(FAMILY_NAIVE)
    reduce_max = base.kernel(f"naive_reduce_max<{ctype}>")
    broadcast_sub = base.kernel(f"naive_broadcast_sub<{ctype}>")
    exp_into = family.kernel("naive_exp_into")
    reduce_sum = base.kernel("naive_reduce_sum")
    sub_log = family.kernel(f"naive_broadcast_sub_log<{ctype}>")

    t = torch.empty(n, dtype=torch.float32, device=x.device)
    e = torch.empty(n, dtype=torch.float32, device=x.device)
    row_max = torch.empty(rows, dtype=torch.float32, device=x.device)
    row_sum = torch.empty(rows, dtype=torch.float32, device=x.device)
    rows_, cols_, n_ = np.int64(rows), np.int64(cols), np.int64(n)
    elementwise = -(-n // NAIVE_BLOCK)
    launch_grid_stride(reduce_max, NAIVE_BLOCK, rows, (x, row_max, rows_, cols_), device)
    launch_grid_stride(broadcast_sub, NAIVE_BLOCK, elementwise, (x, row_max, t, rows_, cols_), device)
    launch_grid_stride(exp_into, NAIVE_BLOCK, elementwise, (t, e, n_), device)
    launch_grid_stride(reduce_sum, NAIVE_BLOCK, rows, (e, row_sum, rows_, cols_), device)
    launch_grid_stride(sub_log, NAIVE_BLOCK, elementwise, (t, row_sum, y, rows_, cols_), device)
    return y


def naive_softmax_backward(y: torch.Tensor, dy: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The softmax gradient dx = y * (dy - sum(dy * y)) in four kernels: multiply, row sum,
    subtract, multiply (float32 in between). y and dy: 2-D contiguous CUDA tensors of one shape
    and dtype."""
    check_matrix(y, "naive_softmax_backward", "y")
    check_matrix(dy, "naive_softmax_backward", "dy")
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise ValueError(f"dy must match y: got {tuple(dy.shape)} {dy.dtype} on {dy.device}, "
                         f"y is {tuple(y.shape)} {y.dtype} on {y.device}")
    ctype = cpp_type(y.dtype)
    dx = _naive_out(y, out)
    rows, cols = y.shape
    n = rows * cols
    if n == 0:
        return dx
    device = device_index(y)
    base, family = load(NAIVE), load(FAMILY_NAIVE)
    mul = family.kernel(f"naive_mul<{ctype}>")
    reduce_sum = base.kernel("naive_reduce_sum")
    sub = family.kernel(f"naive_broadcast_sub_grad<{ctype}>")
    mul_out = family.kernel(f"naive_mul_out<{ctype}>")

    p = torch.empty(n, dtype=torch.float32, device=y.device)
    t = torch.empty(n, dtype=torch.float32, device=y.device)
    row_sum = torch.empty(rows, dtype=torch.float32, device=y.device)
    rows_, cols_, n_ = np.int64(rows), np.int64(cols), np.int64(n)
    elementwise = -(-n // NAIVE_BLOCK)
    launch_grid_stride(mul, NAIVE_BLOCK, elementwise, (y, dy, p, n_), device)
    launch_grid_stride(reduce_sum, NAIVE_BLOCK, rows, (p, row_sum, rows_, cols_), device)
    launch_grid_stride(sub, NAIVE_BLOCK, elementwise, (dy, row_sum, t, rows_, cols_), device)
    launch_grid_stride(mul_out, NAIVE_BLOCK, elementwise, (t, y, dx, n_), device)
    return dx


# =============================================================================================
# The optimized family (kernels/softmax.cu): one dispatcher, five operations.
# =============================================================================================

# One module per storage type and direction: a float16 forward run compiles only its 80 kernels.
FORWARD_SOURCES = {t: KernelSource("softmax.cu", dispatch.kernel_names(t, "forward")) for t in _STORAGE_TYPES}
BACKWARD_SOURCES = {t: KernelSource("softmax.cu", dispatch.kernel_names(t, "backward")) for t in _STORAGE_TYPES}

OPERATIONS = {
    # name: (direction, algorithm, thresholds key)
    "softmax": ("forward", "softmax", "forward"),
    "log_softmax": ("forward", "log_softmax", "forward"),
    "online_softmax": ("forward", "softmax", "online"),
    "softmax_backward": ("backward", "softmax", "backward"),
    "log_softmax_backward": ("backward", "log_softmax", "backward"),
}

DEFAULT_THRESHOLDS = {
    # Measured on an H200, float16, rows 49152 (scripts/softmax_tune.py; the numbers and the runs
    # are in notes/softmax.md). The rules are in occupancy terms (resident threads, packs per
    # thread), so they carry over to other GPUs better than cols thresholds would.
    #   forward: registers beat the shared-memory block up to cols 2048 (93% vs 82% of copy); the
    #   one-pass (m, d) merge beats three passes in the block tiers from cols 4096 (94% vs 91% at
    #   4096, 89% vs 73% at 32768); one row per access beats the article's two in groups under a
    #   warp (cols 32: 94% vs 82%) and in full warps (cols 256: 90% vs 86%).
    #   backward: y and dy in registers up to cols 1024. Held as floats (and loaded two bytes at a
    #   time) they lost to the shared-memory block at 1024 (85% vs 90%); as raw 16-byte packs they
    #   win there (2026-11-22: half 4348 vs 3815 GB/s, bfloat16 4346 vs 3758; float32, whose
    #   registers did not change, 4345 vs 4395). One row per access again (cols 32: 91% vs 75%).
    #   both: the block size that keeps the most threads resident (cols 32768 forward: 93% vs 89%
    #   with OneFlow's rule; backward 8192: 102% vs 97%).
    #   forward, registers tier (2026-11-22, scripts/softmax_tune.py --only auto,registers): it wins
    #   at 512 packs (half/bf16 cols 4096: 4122 vs 3983 and 4114 vs 3882 GB/s) and where the cache
    #   leaves one block an SM (float32 cols 32768: 3813 vs 3377 GB/s); it loses at 1024 threads
    #   with 4 packs (half 32768: 3587 vs 3952, float32 16384: 2934 vs 3631) and is even between.
    "forward": dispatch.Thresholds(warp_max_cols=2048, small_group_rows=1, full_warp_rows=1, one_pass=True,
                                   block_rule="threads", uncached_packs_per_thread=8,
                                   registers_max_packs=512, registers_below_smem_blocks=2),
    #   backward, rows whose y and dy do not fit in shared memory (2026-11-24): the shared-memory
    #   tier caching the first 7/8 of a float32 row of 32768 columns (227 KiB of 256) against the
    #   uncached tier, which moved 1.46x the row's bytes from DRAM (notes/softmax.md).
    "backward": dispatch.Thresholds(warp_max_cols=1024, small_group_rows=1, full_warp_rows=1, block_rule="threads",
                                    uncached_packs_per_thread=2, partial_cache_share=0.5),
    "online": dispatch.Thresholds(online_warp_max_cols=1024, one_pass=True, uncached_packs_per_thread=8),
}

THRESHOLDS_ENV = "BWBENCH_SOFTMAX_THRESHOLDS"
"""A JSON file of {"forward" | "backward" | "online": {field: value}} that overrides the defaults,
e.g. written by `scripts/softmax_tune.py --pick FILE` after measuring another GPU."""


def load_thresholds(path: str | None = None) -> dict[str, dispatch.Thresholds]:
    """The dispatcher's thresholds: the defaults, with the overrides of the JSON file at `path`
    (default: the file named by $BWBENCH_SOFTMAX_THRESHOLDS, if set)."""
    import json
    import os

    path = path if path is not None else os.environ.get(THRESHOLDS_ENV)
    if not path:
        return dict(DEFAULT_THRESHOLDS)
    with open(path, encoding="utf-8") as handle:
        overrides = json.load(handle)
    unknown = set(overrides) - set(DEFAULT_THRESHOLDS)
    if unknown:
        raise ValueError(f"{path}: unknown threshold groups {sorted(unknown)}; valid: {sorted(DEFAULT_THRESHOLDS)}")
    try:
        return {key: dispatch.with_overrides(th, **overrides.get(key, {})) for key, th in DEFAULT_THRESHOLDS.items()}
    except TypeError as exc:  # an unknown field name
        raise ValueError(f"{path}: {exc}") from None


THRESHOLDS = load_thresholds()

GRID_WAVES: int | None = None
"""Blocks launched per resident block slot, at most, the rest of the rows grid-striding (OneFlow
caps its grid at 32 waves); None: a block for every row or row group. Measured on an H200
(2026-11-24, notes/softmax.md), one block per row beat 32 waves where a block works on one row at
a time: the backward at 16384 columns 100% -> 102% of copy, the forward at 16384 95% -> 97%, the
float32 backward at 32768 (uncached) 68% -> 80%; the other cols were even. Tests set a small
number to exercise the row loop."""


@dataclass(frozen=True)
class SoftmaxLaunch:
    """How one call runs: the tier the dispatcher chose, the kernel and its launch shape."""

    op: str
    choice: dispatch.TierChoice
    kernel_name: str
    grid: int
    block: int
    smem: int
    kernel: Kernel = field(compare=False, repr=False)

    @property
    def tier(self) -> str:
        return self.choice.tier


_PLANS: dict[tuple, SoftmaxLaunch] = {}


def _smem_occupancy(kernel: Kernel, smem: int, device: int) -> dict[int, int]:
    """Resident blocks per SM of the cached block kernel at each block size with `smem` bytes."""
    limit = allow_all_dynamic_shared_memory(kernel, device)
    if smem > limit:
        return {size: 0 for size in dispatch.BLOCK_SIZES}
    return {size: max_active_blocks_per_sm(kernel, size, smem, device) for size in dispatch.BLOCK_SIZES}


def plan_launch(op: str, rows: int, cols: int, dtype: torch.dtype, *, aligned: bool = True,
                device: int | torch.device | None = None, thresholds: dispatch.Thresholds | None = None,
                tier: str | None = None, block: int | None = None) -> SoftmaxLaunch:
    """The launch of `op` on a (rows, cols) tensor of `dtype` (cached per shape).

    aligned: whether 16-byte packs are allowed (16-byte aligned pointers, row strides a multiple of
    the pack); False forces one element per access. thresholds, tier and block override the
    measured dispatch (tuning runs and tests); a forced tier that cannot run raises ValueError.
    """
    if op not in OPERATIONS:
        raise ValueError(f"op must be one of {', '.join(OPERATIONS)}, got {op!r}")
    if rows < 1 or cols < 1:
        raise ValueError(f"nothing to launch for shape ({rows}, {cols})")
    direction, algorithm, key = OPERATIONS[op]
    ctype = cpp_type(dtype)
    itemsize = dispatch.ITEMSIZE[ctype]
    dev = device_index(device)
    pack = dispatch.pack_elements(itemsize, cols, aligned)
    th = thresholds or THRESHOLDS[key]
    cache_key = (op, rows, cols, ctype, pack, dev, th, tier, block)
    cached = _PLANS.get(cache_key)
    if cached is not None:
        return cached

    source = (FORWARD_SOURCES if direction == "forward" else BACKWARD_SOURCES)[ctype]
    module = load(source)
    smem_needed = dispatch.smem_bytes(direction, cols, itemsize)
    one_pass = th.one_pass and direction == "forward"

    def smem_kernel(partial: bool = False) -> Kernel:
        choice = dispatch.TierChoice("smem", block=128, one_pass=one_pass, pack=pack, partial=partial)
        return module.kernel(dispatch.kernel_name(ctype, algorithm, direction, choice))

    partial = False
    if th.partial_cache_share > 0 and direction == "backward":
        limit = allow_all_dynamic_shared_memory(smem_kernel(), dev)
        cached = dispatch.cache_bytes(direction, cols, itemsize, pack, limit, th.partial_cache_share)
        partial = cached < smem_needed
        smem_needed = cached

    if key == "online":
        choice = dispatch.choose_online(cols, pack, th)
        if tier is not None and tier != choice.tier:
            if tier == "online_block":
                choice = dispatch.TierChoice("online_block", one_pass=True, pack=pack,
                                             block=dispatch.uncached_block_size(cols, pack, th.uncached_packs_per_thread))
            elif tier == "online_warp":
                choice = dispatch.choose_online(cols, pack, dispatch.with_overrides(th, online_warp_max_cols=cols))
            else:
                raise ValueError(f"online_softmax has tiers online_warp and online_block, not {tier!r}")
    elif tier is None:
        occupancy = None
        if dispatch.needs_occupancy(cols, pack, direction, th):
            occupancy = _smem_occupancy(smem_kernel(partial), smem_needed, dev)
        choice = dispatch.choose_tier(cols, pack, direction=direction, smem_blocks_per_sm=occupancy, thresholds=th)
    elif tier == "warp":
        shape = dispatch.warp_shape(cols, pack, direction, th.small_group_rows, th.full_warp_rows)
        if shape is None:
            raise ValueError(f"the warp tier holds at most {dispatch.warp_shapes(pack, direction)[-1].max_cols} "
                             f"columns in {pack}-element packs; got cols={cols}")
        choice = dispatch.TierChoice("warp", warp=shape, pack=pack)
    elif tier == "smem":
        occupancy = _smem_occupancy(smem_kernel(partial), smem_needed, dev)
        size = block or dispatch.block_size_by_occupancy(occupancy, th.block_rule)
        if size is None or occupancy.get(size, 0) < 1:
            raise ValueError(f"the shared-memory tier cannot launch cols={cols} ({smem_needed} bytes per row) "
                             f"with {size or 128} threads on this device")
        choice = dispatch.TierChoice("smem", block=size, one_pass=one_pass, pack=pack)
    elif tier == "registers":
        shape = dispatch.registers_shape(cols, pack) if direction == "forward" else None
        if shape is None:
            raise ValueError(f"the registers tier runs forward rows in 16-byte packs of at most "
                             f"{dispatch.REGISTER_SHAPES[-1][0] * dispatch.REGISTER_SHAPES[-1][1]} packs; "
                             f"got {op} cols={cols} with {pack}-element packs")
        if block is not None:
            raise ValueError("the registers tier's block size follows from cols; do not force one")
        choice = dispatch.TierChoice("registers", block=shape[1], pack=pack, packs_per_thread=shape[0])
    elif tier == "uncached":
        choice = dispatch.TierChoice("uncached", one_pass=one_pass, pack=pack,
                                     block=dispatch.uncached_block_size(cols, pack, th.uncached_packs_per_thread))
    else:
        raise ValueError(f"tier must be warp, registers, smem or uncached for {op}, got {tier!r}")
    if block is not None and choice.block is not None:
        if block not in dispatch.BLOCK_SIZES:
            raise ValueError(f"block must be one of {dispatch.BLOCK_SIZES}, got {block}")
        choice = replace(choice, block=block)
    if choice.tier == "smem" and partial:
        choice = replace(choice, partial=True)

    name = dispatch.kernel_name(ctype, algorithm, direction, choice)
    kernel = module.kernel(name)
    if choice.warp is not None:
        threads = dispatch.WARP_BLOCK
        work = -(-rows // (threads // choice.warp.group * choice.warp.rows_per_access))
        smem = 0
    else:
        threads = choice.block
        work = rows
        smem = smem_needed if choice.tier == "smem" else 0
        if smem:
            allow_all_dynamic_shared_memory(kernel, dev)
    if max_active_blocks_per_sm(kernel, threads, smem, dev) < 1:
        raise ValueError(f"{name} cannot launch {threads} threads with {smem} bytes of shared memory here")
    grid = grid_size(kernel, threads, work, smem, dev, waves=GRID_WAVES)
    plan = SoftmaxLaunch(op, choice, name, grid, threads, smem, kernel)
    _PLANS[cache_key] = plan
    return plan


def _check_rows(t: torch.Tensor, what: str, name: str) -> tuple[int, int]:
    """(rows, cols) of a 2-D CUDA tensor whose rows are contiguous (any row stride)."""
    check_matrix(t, what, name, rows_only=True)
    rows, cols = t.shape
    if cols > dispatch.MAX_COLS:
        raise ValueError(f"{what}: {name} has {cols} columns; the kernels take at most {dispatch.MAX_COLS}")
    return rows, cols


def _result(out: torch.Tensor | None, like: torch.Tensor, what: str) -> torch.Tensor:
    if out is None:
        return torch.empty(like.shape, dtype=like.dtype, device=like.device)
    if out.shape != like.shape or out.dtype != like.dtype or out.device != like.device:
        raise ValueError(f"out must have the input's shape, dtype and device: got {tuple(out.shape)} {out.dtype} "
                         f"on {out.device}, want {tuple(like.shape)} {like.dtype} on {like.device}")
    _check_rows(out, what, "out")
    return out


def _aligned(*tensors: torch.Tensor) -> bool:
    """16-byte packs are allowed: every pointer 16-byte aligned and every row stride a multiple of
    the pack (the row starts stay aligned)."""
    for t in tensors:
        pack = dispatch.PACK_BYTES // t.element_size()
        if t.data_ptr() % dispatch.PACK_BYTES:
            return False
        if t.shape[0] > 1 and t.stride(0) % pack:
            return False
    return True


def _row_stride(t: torch.Tensor) -> np.int64:
    return np.int64(t.stride(0) if t.shape[0] > 1 else t.shape[1])


def _forward(op: str, x: torch.Tensor, out: torch.Tensor | None, overrides: dict) -> torch.Tensor:
    rows, cols = _check_rows(x, op, "x")
    y = _result(out, x, op)
    if rows == 0 or cols == 0:
        return y
    plan = plan_launch(op, rows, cols, x.dtype, aligned=_aligned(x, y), device=x.device, **overrides)
    launch(plan.kernel, plan.grid, plan.block,
           (x, _row_stride(x), y, _row_stride(y), np.int64(rows), np.int32(cols)), shared_mem=plan.smem)
    return y


def _backward(op: str, y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None, overrides: dict) -> torch.Tensor:
    rows, cols = _check_rows(y, op, "y")
    _check_rows(dy, op, "dy")
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise ValueError(f"dy must match y: got {tuple(dy.shape)} {dy.dtype} on {dy.device}, "
                         f"y is {tuple(y.shape)} {y.dtype} on {y.device}")
    dx = _result(out, y, op)
    if rows == 0 or cols == 0:
        return dx
    plan = plan_launch(op, rows, cols, y.dtype, aligned=_aligned(y, dy, dx), device=y.device, **overrides)
    launch(plan.kernel, plan.grid, plan.block,
           (y, _row_stride(y), dy, _row_stride(dy), dx, _row_stride(dx), np.int64(rows), np.int32(cols)),
           shared_mem=plan.smem)
    return dx


def softmax(x: torch.Tensor, *, out: torch.Tensor | None = None, **overrides) -> torch.Tensor:
    """softmax(x, dim=-1) in one kernel of the optimized family (the dispatcher picks the tier).

    x: 2-D CUDA tensor of float16, bfloat16 or float32 whose rows are contiguous (any row stride:
    a column slice runs without a copy; other layouts raise ValueError, call .contiguous()).
    Returns a new contiguous tensor, or writes into `out` (same shape and dtype, rows contiguous,
    not overlapping x). Runs on PyTorch's current stream. `overrides` (thresholds=, tier=,
    block=) are for tuning and tests.
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
    "uncached", or for online_softmax "online_warp" / "online_block"."""
    rows, cols = _check_rows(x, "which_tier", "x")
    if rows == 0 or cols == 0:
        return "none"
    return plan_launch(op, rows, cols, x.dtype, aligned=_aligned(x), device=x.device, **overrides).tier
