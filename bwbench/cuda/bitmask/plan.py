"""What the bitmask kernels (kernels/bitmask.cu) launch: pure, testable without a GPU.

The kernel list, the block size, the mask sizes, dropout's keep threshold (the one place it is
computed: bwbench/philox.py's reference uses it too) and the grid rules.
"""

from __future__ import annotations

__all__ = ["BLOCK", "KEEP_BITS", "KERNELS", "MASK_LINE", "NARROW_COUNTER_LIMIT", "dropout_scale", "dropout_threshold",
           "packed_bytes", "word_bytes"]

_TYPES = ("half_t", "bf16_t", "float")
_FLAGS = ("true", "false")

KERNELS = (
    *(f"relu_forward_bitmask<{t}, {a}>" for t in _TYPES for a in _FLAGS),
    *(f"bitmask_backward<{t}, {a}>" for t in _TYPES for a in _FLAGS),
    *(f"bytemask_backward<{t}, {a}>" for t in _TYPES for a in _FLAGS),
    *(f"dropout_forward_bitmask<{t}, {a}, {w}>" for t in _TYPES for a in _FLAGS for w in _FLAGS),
    *(f"dropout_forward_bytemask<{t}, {a}, {w}>" for t in _TYPES for a in _FLAGS for w in _FLAGS),
    *(f"relu_forward_bytemask_naive<{t}>" for t in _TYPES),
    *(f"relu_backward_bytemask_naive<{t}>" for t in _TYPES),
)
"""Every kernel of kernels/bitmask.cu the launchers name."""

BLOCK = 256  # threads per block for every kernel here (a multiple of 32: the forward loops are per warp)

MASK_LINE = 1024
"""Elements of one 128-byte mask line; the aligned bitmask backward gives a warp a line per step
(kernels/bitmask.cu, masked_backward_lines)."""

NARROW_COUNTER_LIMIT = 1 << 34
"""Dropout over fewer elements than this draws with the counter's second word fixed at 0 (every
group index i / 8 fits 32 bits, with room for the lanes past the end of the last chunk), which
saves multiplies (kernels/bitmask.cuh, dropout_draw_narrow). Larger tensors take the general
draw; both give the same mask."""

KEEP_BITS = 16
"""Random bits each element's keep decision compares: one Philox4x32-10 draw (128 bits) decides 8
elements. With 32 bits an element (4 a draw) the draws were about 70% of the instructions of the
float16 forward, which then ran below copy speed on the faster memories; halving them costs a
resolution of 2^-16 in p (docs/bitmask.md)."""


def packed_bytes(n: int) -> int:
    """Bytes of a packed-bit mask of n elements as the functions here return it: ceil(n / 8)."""
    return (n + 7) // 8


def word_bytes(n: int) -> int:
    """Bytes the optimized kernels write for n elements: whole 32-bit words, 4 * ceil(n / 32)."""
    return 4 * ((n + 31) // 32)


def dropout_threshold(p: float) -> int:
    """The 16-bit value an element's random bits must reach to keep it: round(p * 2^16), for
    0 <= p < 1. Kept with probability (2^16 - threshold) / 2^16, which is 1 - p to within 2^-17."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    threshold = round(p * 2.0**KEEP_BITS)
    if threshold >= 1 << KEEP_BITS:
        raise ValueError(f"dropout probability {p} is too close to 1: the kernels keep with a resolution "
                         f"of 2^-{KEEP_BITS}, so p must be below 1 - 2^-{KEEP_BITS + 1}")
    return threshold


def dropout_scale(p: float) -> float:
    """1 / (1 - p): kept values are scaled so that the expectation of y is x."""
    return 1.0 / (1.0 - p)


DROPOUT_CHUNK_GRID_MIN_BYTES = 48 << 20
"""The dropout forward takes a thread per chunk for x of this size and more, one wave of
grid-striding blocks below. With 16 random bits an element, on an H100 (float16, interleaved, two
rounds each): a thread per chunk ran at 91.6 / 93.1 / 97.2% of copy at 48 / 64 / 128 MB against
90.0 / 89.6 / 90.9% with one wave; one wave led at 8-32 MB (87.7-89.2% against 82.5-86.7%)."""


DROPOUT_TWO_WAVES_MIN_BYTES = 16 << 20
"""From this size up to DROPOUT_CHUNK_GRID_MIN_BYTES the dropout forward launches two waves of
grid-striding blocks: on an H100 (float16, three interleaved rounds) 91.2-91.7% of copy at 16, 32
and 40 MB and 89.1-89.6% at 24 MB, against 87.0-90.7% with one wave; at 8 MB one wave led (86.5-87.8%
against 84.2-85.2%)."""


def dropout_waves(nbytes: int) -> int | None:
    """Grid of the dropout forward for x of `nbytes`: a thread per chunk (None) from
    DROPOUT_CHUNK_GRID_MIN_BYTES, two waves of grid-striding blocks from
    DROPOUT_TWO_WAVES_MIN_BYTES, one wave below."""
    if nbytes >= DROPOUT_CHUNK_GRID_MIN_BYTES:
        return None
    return 2 if nbytes >= DROPOUT_TWO_WAVES_MIN_BYTES else 1


def wide_counter(n: int) -> bool:
    """Whether the group index i / 8 may not fit the Philox counter's first word."""
    return n >= NARROW_COUNTER_LIMIT
