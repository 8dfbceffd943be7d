"""ReLU and dropout that keep a 1-bit mask for the backward (kernels/bitmask.cu), and their baselines.

Mask formats (what each function returns and takes):

- packed bits (`relu_forward`, `relu_forward_bytemask`, `dropout_forward`): a uint8 tensor of
  ceil(n / 8) bytes, element i at bit i % 8 of byte i // 8, padding bits zero. The optimized
  kernels write whole 32-bit words (4 * ceil(n / 32) bytes, allocated here) and return the first
  ceil(n / 8) bytes as a view, so both ReLU writers return identical tensors. `pack_bits` and
  `unpack_bits` convert from and to one bool per element with torch ops (for inputs and checks).
- one byte per element (`dropout_forward_bytes`): uint8 0/1 of n bytes; the backward also takes a
  torch.bool mask (torch's native_dropout format), which has the same bytes.

Dropout draws from Philox4x32-10 (bitmask.cuh): element i keeps iff 16-bit half i % 8 of
Philox(counter = (i // 8, offset), key = seed), low half of each output word first, is >=
`dropout_threshold(p)`, so (seed, offset) fixes the mask; bwbench/philox.py reproduces it bit for bit.

Every function takes contiguous CUDA tensors of float16, bfloat16 or float32 (any shape, treated
as flat), allocates its outputs and launches on PyTorch's current stream (no synchronisation).
"""

from __future__ import annotations

import numpy as np
import torch

from bwbench.cuda.bitmask.plan import (
    BLOCK,
    KERNELS,
    MASK_LINE,
    dropout_scale,
    dropout_threshold,
    dropout_waves,
    packed_bytes,
    wide_counter,
    word_bytes,
)
from bwbench.cuda.launch_spec import MAX_GRID, Launch
from bwbench.cuda.loader import Kernel, KernelSource, PlannedCall, cpp_type, grid_size, load, run

SOURCE = KernelSource("bitmask.cu", KERNELS)


# ----------------------------------------------------------------------------------------------
# Sizes and formats
# ----------------------------------------------------------------------------------------------


def pack_bits(keep: torch.Tensor) -> torch.Tensor:
    """One bool per element -> packed bits (uint8, ceil(n / 8) bytes) in this module's format.

    The result is a view of a word-padded buffer (4 * ceil(n / 32) bytes, padding zero), so the
    optimized backward may read whole words. Torch ops only: meant for inputs and checks."""
    flat = keep.reshape(-1).to(torch.uint8)
    n = flat.numel()
    padded = torch.zeros(word_bytes(n) * 8, dtype=torch.uint8, device=keep.device)
    padded[:n] = flat
    lanes = padded.view(-1, 8)
    out = lanes[:, 0].clone()
    for j in range(1, 8):
        out |= lanes[:, j] << j
    return out[:packed_bytes(n)]


def unpack_bits(mask: torch.Tensor, n: int) -> torch.Tensor:
    """Packed bits (uint8, at least ceil(n / 8) bytes) -> one bool per element, n of them."""
    if mask.dtype != torch.uint8 or mask.dim() != 1 or mask.numel() < packed_bytes(n):
        raise ValueError(f"expected a 1-D uint8 mask of at least {packed_bytes(n)} bytes for {n} elements, "
                         f"got {mask.dtype} of shape {tuple(mask.shape)}")
    shifts = torch.arange(8, dtype=torch.uint8, device=mask.device)
    bits = (mask[:packed_bytes(n), None] >> shifts) & 1
    return bits.reshape(-1)[:n].bool()


# ----------------------------------------------------------------------------------------------
# Launch helpers
# ----------------------------------------------------------------------------------------------


def _check_values(t: torch.Tensor, what: str) -> None:
    if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
        raise ValueError(f"{what} must be a CUDA tensor")
    if not t.is_contiguous():
        raise ValueError(f"{what} must be contiguous, got strides {t.stride()}")
    cpp_type(t.dtype)  # ValueError naming the supported dtypes


def _aligned(*tensors: torch.Tensor) -> str:
    """'true' when every pointer is 16-byte aligned (packed 16-byte accesses allowed)."""
    return "true" if all(t.data_ptr() % 16 == 0 for t in tensors) else "false"


def _launch(name: str, work_threads: int, args, waves: int | None = 1) -> tuple[Kernel, Launch]:
    """Launch with one wave of grid-striding blocks, or (waves=None) a thread for every piece of
    work. On an H200 (2^28 halves, docs/bitmask.md) the ReLU forward ran at 98% of copy with a
    thread per chunk against 90% with one wave, and the aligned backward at 98% with a warp per mask
    line against 94%. The dropout forward: see plan.DROPOUT_CHUNK_GRID_MIN_BYTES. The kernel and
    its occupancy are looked up once per device, the launch once per grid."""
    device = args[0].device.index
    found = _KERNELS.get((name, device))
    if found is None:
        kernel = load(SOURCE).kernel(name)
        found = _KERNELS[(name, device)] = (kernel, grid_size(kernel, BLOCK, MAX_GRID, device=device, waves=1))
    kernel, wave = found
    work = max(1, -(-work_threads // BLOCK))
    blocks = min(work, MAX_GRID) if waves is None else min(work, wave * waves)
    spec = _SPECS.get((name, blocks))
    if spec is None:
        spec = _SPECS[(name, blocks)] = Launch(name, (blocks,), (BLOCK,))
    run(kernel, spec, args, device)
    return kernel, spec


_KERNELS: dict[tuple[str, int], tuple[Kernel, int]] = {}
"""Kernel and blocks of one full wave, by (kernel name, device)."""
_SPECS: dict[tuple[str, int], Launch] = {}


def _dropout_waves(x: torch.Tensor) -> int | None:
    return dropout_waves(x.numel() * x.element_size())


def _vec(dtype: torch.dtype) -> int:
    return 16 // torch.empty((), dtype=dtype).element_size()


def _new_words(n: int, device) -> torch.Tensor:
    """The mask's 32-bit words the kernels write, as bytes (4 * ceil(n / 32), at least 4)."""
    return torch.empty(4 * max(1, (n + 31) // 32), dtype=torch.uint8, device=device)


def _bits_view(words: torch.Tensor, n: int) -> torch.Tensor:
    used = packed_bytes(n)
    return words if words.numel() == used else words[:used]


class _Repeat:
    """A call the launcher has checked and planned before, kept for inputs of the same kind
    (dtype, device, shape, contiguity, 16-byte phase, and the call's fixed options): a repeat only
    allocates its outputs and enqueues, with the values that vary (addresses, seed, offset)."""

    def __init__(self, launch: PlannedCall, like: torch.Tensor, out_phase: int, fixed: tuple) -> None:
        self.launch, self.out_phase, self.fixed = launch, out_phase, fixed
        self.n, self.device = like.numel(), like.device


_REPEATS: dict[tuple, _Repeat] = {}
"""Repeats of relu_forward, dropout_forward and masked_backward, by _signature."""


def _signature(op: str, tensors: tuple, *options) -> tuple | None:
    """Everything the checks and the kernel choice look at, or None where an argument cannot be
    remembered (not a tensor: the checks will say so)."""
    try:
        key = (op, *options, *[item for t in tensors
                                for item in (t.dtype, t.get_device(), t.shape, t.is_contiguous(), t.data_ptr() % 16)])
        hash(key)
        return key
    except (AttributeError, TypeError):
        return None


def _remember(key: tuple | None, launched: tuple[Kernel, Launch], args: tuple, like: torch.Tensor,
              out: torch.Tensor, fixed: tuple = ()) -> None:
    """Keep the launch `_launch` has just made (`launched`) under `key`, with the scalar values a
    repeat passes unchanged (`fixed`)."""
    if key is None:
        return
    kernel, spec = launched
    _REPEATS[key] = _Repeat(PlannedCall(kernel, spec, args, like.device.index), like, out.data_ptr() % 16, fixed)


def _check_bits(mask: torch.Tensor, n: int) -> None:
    if mask.dtype != torch.uint8 or not mask.is_contiguous() or mask.numel() < packed_bytes(n):
        raise ValueError(f"a packed-bit mask for {n} elements is a contiguous uint8 tensor of at least "
                         f"{packed_bytes(n)} bytes, got {mask.dtype} of shape {tuple(mask.shape)}")
    if mask.data_ptr() % 4:
        raise ValueError("a packed-bit mask must start at a 4-byte aligned address (the kernels read words)")


# ----------------------------------------------------------------------------------------------
# ReLU
# ----------------------------------------------------------------------------------------------


def relu_forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """y = relu(x) and the packed-bit mask of x > 0, mask words built with a warp-group OR."""
    key = _signature("relu_forward", (x,))
    repeat = _REPEATS.get(key) if key is not None else None
    if repeat is not None:
        y = torch.empty_like(x)
        if y.data_ptr() % 16 == repeat.out_phase:
            words = _new_words(repeat.n, repeat.device)
            repeat.launch.enqueue((x.data_ptr(), y.data_ptr(), words.data_ptr(), repeat.n))
            return y, _bits_view(words, repeat.n)
    _check_values(x, "x")
    n = x.numel()
    y = torch.empty_like(x)
    words = _new_words(n, x.device)
    if n:
        name = f"relu_forward_bitmask<{cpp_type(x.dtype)}, {_aligned(x, y)}>"
        args = (x, y, words, np.int64(n))
        _remember(key, _launch(name, -(-n // _vec(x.dtype)), args, waves=None), args, x, y)
    return y, _bits_view(words, n)


def relu_backward(dy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """dx = dy where the packed-bit mask is set, else 0: reads n / 8 mask bytes instead of y."""
    return masked_backward(dy, mask, 1.0)


def masked_backward(dy: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """dx = dy * scale where the packed-bit mask is set, else 0 (ReLU: scale 1; dropout: 1/(1-p))."""
    key = _signature("masked_backward", (dy, mask), float(scale)) if isinstance(scale, (int, float)) else None
    repeat = _REPEATS.get(key) if key is not None else None
    if repeat is not None:
        dx = torch.empty_like(dy)
        if dx.data_ptr() % 16 == repeat.out_phase:
            repeat.launch.enqueue((dy.data_ptr(), mask.data_ptr(), mask.numel(), dx.data_ptr(), scale, repeat.n))
            return dx
    _check_values(dy, "dy")
    n = dy.numel()
    _check_bits(mask, n)
    dx = torch.empty_like(dy)
    if n:
        aligned = _aligned(dy, dx)
        name = f"bitmask_backward<{cpp_type(dy.dtype)}, {aligned}>"
        args = (dy, mask, np.int64(mask.numel()), dx, np.float32(scale), np.int64(n))
        if aligned == "true":  # a warp for every mask line; the tail (< MASK_LINE elements) rides along
            launched = _launch(name, 32 * max(1, n // MASK_LINE), args, waves=None)
        else:  # one wave of threads striding a pack at a time
            launched = _launch(name, -(-n // _vec(dy.dtype)), args)
        _remember(key, launched, args, dy, dx)
    return dx


def relu_forward_bytemask(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The article's first scheme: one thread per 8 elements writes one mask byte (uncoalesced
    loads). Returns y and the same packed bits as relu_forward."""
    _check_values(x, "x")
    n = x.numel()
    y = torch.empty_like(x)
    mask = torch.empty(packed_bytes(n), dtype=torch.uint8, device=x.device)
    if n:
        _launch(f"relu_forward_bytemask_naive<{cpp_type(x.dtype)}>", packed_bytes(n), (x, y, mask, np.int64(n)))
    return y, mask


def relu_backward_bytemask(dy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The same scheme backwards: one thread per mask byte and its 8 elements of dy."""
    _check_values(dy, "dy")
    n = dy.numel()
    if mask.dtype != torch.uint8 or not mask.is_contiguous() or mask.numel() < packed_bytes(n):
        raise ValueError(f"expected a contiguous uint8 mask of at least {packed_bytes(n)} bytes")
    dx = torch.empty_like(dy)
    if n:
        _launch(f"relu_backward_bytemask_naive<{cpp_type(dy.dtype)}>", packed_bytes(n), (dy, mask, dx, np.int64(n)))
    return dx


# ----------------------------------------------------------------------------------------------
# Dropout
# ----------------------------------------------------------------------------------------------


def _wide_counter(n: int) -> str:
    """'true' when the group index i / 8 may not fit the Philox counter's first word."""
    return "true" if wide_counter(n) else "false"


def _dropout_args(p: float, seed: int, offset: int):
    if not (0 <= seed < 2**64 and 0 <= offset < 2**64):
        raise ValueError("seed and offset are unsigned 64-bit integers")
    return np.uint32(dropout_threshold(p)), np.float32(dropout_scale(p)), np.uint64(seed), np.uint64(offset)


def dropout_forward(x: torch.Tensor, p: float, seed: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """y = x * keep / (1 - p) and the packed-bit keep mask; keep from Philox4x32-10 at (seed, offset),
    16 random bits an element: p resolves to 2^-16 and must be below 1 - 2^-17 (ValueError)."""
    key = _signature("dropout_forward", (x,), float(p)) if isinstance(p, (int, float)) else None
    repeat = _REPEATS.get(key) if key is not None else None
    if repeat is not None and isinstance(seed, int) and isinstance(offset, int) and 0 <= seed < 2**64 \
            and 0 <= offset < 2**64:
        y = torch.empty_like(x)
        if y.data_ptr() % 16 == repeat.out_phase:
            words = _new_words(repeat.n, repeat.device)
            threshold, scale = repeat.fixed
            repeat.launch.enqueue((x.data_ptr(), y.data_ptr(), words.data_ptr(), threshold, scale, seed, offset,
                                   repeat.n))
            return y, _bits_view(words, repeat.n)
    _check_values(x, "x")
    n = x.numel()
    args = _dropout_args(p, seed, offset)
    y = torch.empty_like(x)
    words = _new_words(n, x.device)
    if n:
        name = f"dropout_forward_bitmask<{cpp_type(x.dtype)}, {_aligned(x, y)}, {_wide_counter(n)}>"
        launch_args = (x, y, words, *args, np.int64(n))
        launched = _launch(name, -(-n // _vec(x.dtype)), launch_args, waves=_dropout_waves(x))
        _remember(key, launched, launch_args, x, y, fixed=(int(args[0]), float(args[1])))
    return y, _bits_view(words, n)


def dropout_forward_bytes(x: torch.Tensor, p: float, seed: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The same kernel keeping one byte (0/1) per element: same y, same keep decisions."""
    _check_values(x, "x")
    n = x.numel()
    args = _dropout_args(p, seed, offset)
    y = torch.empty_like(x)
    mask = torch.empty(n, dtype=torch.uint8, device=x.device)
    if n:
        name = f"dropout_forward_bytemask<{cpp_type(x.dtype)}, {_aligned(x, y, mask)}, {_wide_counter(n)}>"
        _launch(name, -(-n // _vec(x.dtype)), (x, y, mask, *args, np.int64(n)), waves=_dropout_waves(x))
    return y, mask.view(x.shape)


def dropout_backward(dy: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    """dx = dy * keep / (1 - p) from the packed-bit mask."""
    return masked_backward(dy, mask, dropout_scale(p))


def dropout_backward_bytes(dy: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    """dx = dy * keep / (1 - p) from one byte per element (uint8 0/1 or torch.bool)."""
    _check_values(dy, "dy")
    n = dy.numel()
    if mask.dtype not in (torch.uint8, torch.bool) or not mask.is_contiguous() or mask.numel() != n:
        raise ValueError(f"expected a contiguous uint8 or bool mask of {n} elements, got {mask.dtype} "
                         f"of shape {tuple(mask.shape)}")
    mask = mask.view(torch.uint8).reshape(-1)
    dx = torch.empty_like(dy)
    if n:
        name = f"bytemask_backward<{cpp_type(dy.dtype)}, {_aligned(dy, dx, mask)}>"
        _launch(name, -(-n // _vec(dy.dtype)), (dy, mask, dx, np.float32(dropout_scale(p)), np.int64(n)))
    return dx
