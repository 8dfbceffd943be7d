"""Philox4x32-10 in Python, vectorized: the reference for the dropout kernels' masks.

The same arithmetic runs on NumPy int64 arrays (CPU tests, Random123 known-answer vectors) and on
torch int64 tensors (GPU reference for large masks, chunked). 32-bit words live in int64 and the
32x32 -> 64-bit products are assembled from 16-bit limbs, so nothing ever exceeds 2^34: no
reliance on wrap-around of signed 64-bit multiplication, which neither library promises.

The dropout stream (kernels/bitmask.cuh, `keep_halves`): element i keeps iff 16-bit half i % 8 of
Philox at counter (lo(i // 8), hi(i // 8), lo(offset), hi(offset)) with key (lo(seed), hi(seed)),
halves taken low first from output words 0..3, is >= threshold = round(p * 2^16), computed by the
kernels' own planner (bwbench.cuda.bitmask.plan.dropout_threshold).
"""

from __future__ import annotations

from typing import Any, Sequence

from bwbench.cuda.bitmask.plan import KEEP_BITS
from bwbench.cuda.bitmask.plan import dropout_threshold as threshold

M0, M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # key bumps (golden ratio, sqrt(3) - 1)
MASK32 = 0xFFFFFFFF
ROUNDS = 10


def _mulhilo(a: Any, m: int) -> tuple[Any, Any]:
    """(hi, lo) 32-bit halves of a * m for a < 2^32 (array) and a 32-bit constant m."""
    a_hi, a_lo = a >> 16, a & 0xFFFF
    m_hi, m_lo = m >> 16, m & 0xFFFF
    low = a_lo * m_lo
    mid = a_hi * m_lo + a_lo * m_hi
    t = low + ((mid & 0xFFFF) << 16)
    lo = t & MASK32
    hi = (a_hi * m_hi + (mid >> 16) + (t >> 32)) & MASK32
    return hi, lo


def philox4x32(counter: Sequence[Any], key: Sequence[Any], rounds: int = ROUNDS) -> tuple[Any, Any, Any, Any]:
    """Philox4x32-R of four 32-bit counter words and two key words (ints, or int64 arrays/tensors
    holding values in [0, 2^32)); returns the four output words in the same form."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(rounds):
        if r > 0:
            k0 = (k0 + W0) & MASK32
            k1 = (k1 + W1) & MASK32
        hi0, lo0 = _mulhilo(c0, M0)
        hi1, lo1 = _mulhilo(c2, M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


ELEMENTS_PER_DRAW = 128 // KEEP_BITS  # 8: four 32-bit words, two 16-bit halves each
HALF = (1 << KEEP_BITS) - 1


def _halves(words: Sequence[Any], stack: Any) -> Any:
    """The draw's four words as 8 values per counter, in element order: (w0 lo, w0 hi, w1 lo, ...)."""
    return stack([h for w in words for h in (w & HALF, w >> KEEP_BITS)], 1)


def dropout_keep_numpy(n: int, p: float, seed: int, offset: int = 0):
    """The kernels' keep decision for elements 0..n-1 as a NumPy bool array (CPU)."""
    import numpy as np

    groups = np.arange(-(-n // ELEMENTS_PER_DRAW), dtype=np.int64)
    words = philox4x32((groups & MASK32, groups >> 32, np.int64(offset & MASK32), np.int64(offset >> 32)),
                       (np.int64(seed & MASK32), np.int64(seed >> 32)))
    words = [np.broadcast_to(w, groups.shape) for w in words]
    return _halves(words, np.stack).reshape(-1)[:n] >= threshold(p)


def dropout_keep_torch(n: int, p: float, seed: int, offset: int = 0, device: Any = "cuda",
                       chunk_groups: int = 1 << 23):
    """The same decision as a torch.bool tensor on `device`, computed in chunks (a 2^30-element
    mask never needs more than a few hundred MB of int64 temporaries)."""
    import torch

    t = threshold(p)
    groups_total = -(-n // ELEMENTS_PER_DRAW)
    keep = torch.empty(groups_total * ELEMENTS_PER_DRAW, dtype=torch.bool, device=device)
    key = (seed & MASK32, seed >> 32)
    for start in range(0, groups_total, chunk_groups):
        g = torch.arange(start, min(start + chunk_groups, groups_total), dtype=torch.int64, device=device)
        zeros = torch.zeros_like(g)
        words = philox4x32((g & MASK32, g >> 32, zeros + (offset & MASK32), zeros + (offset >> 32)),
                           (key[0], key[1]))
        span = slice(start * ELEMENTS_PER_DRAW, (start + g.numel()) * ELEMENTS_PER_DRAW)
        keep[span] = (_halves(words, torch.stack) >= t).reshape(-1)
        del g, zeros, words
    return keep[:n]
