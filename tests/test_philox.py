"""The Python Philox4x32-10 (bwbench/philox.py) against Random123's known-answer vectors.

Vectors: Random123's tests/kat_vectors (github.com/DEShawResearch/random123), the three
"philox4x32 10" lines: counter (4 words), key (2 words), expected output (4 words).
"""

from __future__ import annotations

import numpy as np
import pytest

from bwbench import philox

KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_known_answers_with_python_ints(counter, key, expected):
    assert tuple(philox.philox4x32(counter, key)) == expected


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_known_answers_with_numpy_arrays(counter, key, expected):
    ctr = [np.full(3, c, dtype=np.int64) for c in counter]
    out = philox.philox4x32(ctr, [np.int64(k) for k in key])
    for word, want in zip(out, expected):
        assert word.dtype == np.int64 and (word == want).all()


def _mulhilo_exact(a: int, m: int) -> tuple[int, int]:
    product = a * m
    return product >> 32, product & 0xFFFFFFFF


def test_limb_multiplication_is_exact():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.integers(0, 2**32, 1000, dtype=np.int64),
                             np.array([0, 1, 0xFFFF, 0x10000, 0xFFFFFFFF], dtype=np.int64)])
    for m in (philox.M0, philox.M1, 0xFFFFFFFF):
        hi, lo = philox._mulhilo(values, m)
        for a, h, l in zip(values.tolist(), hi.tolist(), lo.tolist()):
            assert (h, l) == _mulhilo_exact(a, m)


def test_dropout_stream_layout():
    """Element i uses 16-bit half i % 8 of counter (i // 8, offset), low halves first; keep iff that
    half >= round(p * 2^16)."""
    n, p, seed, offset = 45, 0.3, 0x0123456789ABCDEF, (7 << 32) + 5
    keep = philox.dropout_keep_numpy(n, p, seed, offset)
    t = philox.threshold(p)
    assert t == round(0.3 * 65536)
    for i in range(n):
        g = i // 8
        words = philox.philox4x32((g & 0xFFFFFFFF, g >> 32, offset & 0xFFFFFFFF, offset >> 32),
                                  (seed & 0xFFFFFFFF, seed >> 32))
        half = (words[(i % 8) // 2] >> (16 * (i % 2))) & 0xFFFF
        assert bool(keep[i]) == (half >= t), i


def test_dropout_keeps_about_one_minus_p():
    n = 1 << 16
    for p in (0.1, 0.5, 0.9):
        kept = philox.dropout_keep_numpy(n, p, seed=42).mean()
        sigma = (p * (1 - p) / n) ** 0.5
        assert abs(kept - (1 - p)) < 4 * sigma


def test_same_seed_same_mask_other_seed_or_offset_differs():
    a = philox.dropout_keep_numpy(4096, 0.5, seed=1, offset=0)
    assert (a == philox.dropout_keep_numpy(4096, 0.5, seed=1, offset=0)).all()
    assert (a != philox.dropout_keep_numpy(4096, 0.5, seed=2, offset=0)).any()
    assert (a != philox.dropout_keep_numpy(4096, 0.5, seed=1, offset=1)).any()
    assert philox.dropout_keep_numpy(100, 0.0, seed=3).all()


def test_torch_path_matches_numpy_on_cpu():
    torch = pytest.importorskip("torch")
    for n in (1, 5, 1000, 4097):
        want = philox.dropout_keep_numpy(n, 0.1, seed=99, offset=3)
        got = philox.dropout_keep_torch(n, 0.1, seed=99, offset=3, device="cpu", chunk_groups=64)
        assert got.dtype == torch.bool and got.numel() == n
        assert (got.numpy() == want).all()


def test_threshold_bounds():
    assert philox.threshold(0.0) == 0
    assert philox.threshold(0.5) == 1 << 15
    with pytest.raises(ValueError):
        philox.threshold(1.0)
    with pytest.raises(ValueError):
        philox.threshold(-0.1)
