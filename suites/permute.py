"""Permute / transpose: y = x.permute(perm).contiguous(), OneFlow's permute benchmark and more.

A permute reads every element once and writes it once, so its speed of light is a same-size copy.
The cases: the article's (0,1,2)->(1,0,2) (the last dim moves whole: a copy of rows) and
(0,1,2)->(0,2,1) (a batch transpose: the last dim moves) from 4M to 512M elements, attention head
reshuffles, a 4-D permute that merges into a 2-D transpose, a square 2-D transpose, odd sizes that
fit no tile, size-1 dims, and 5-D / 6-D permutes from real models (NCDHW -> NDHWC, Swin's window
partition, a general 6-D reshuffle). Every implementation must be bit-exact.

Run one case of your own: bwbench run permute --shape 32x2048x2048 --perm 0,2,1 --dtype float16
"""

import math

import torch

from bwbench.domains import non_negative_int, positive_int, shape_of
from bwbench.suite import Suite, Tolerance, Traffic, compile_per_case

DTYPES = ["float16", "float32", "bfloat16", "int8", "int64"]

ARTICLE_SHAPES = [(64, 256, 256), (64, 512, 512), (64, 1024, 1024), (64, 2048, 2048), (128, 2048, 2048)]
"""4M, 16M, 64M, 256M and 512M elements: 16 MB to 2 GB in float32, 8 MB to 1 GB in float16."""

POINTS = (
    [{"shape": s, "perm": (1, 0, 2)} for s in ARTICLE_SHAPES]
    + [{"shape": s, "perm": (0, 2, 1)} for s in ARTICLE_SHAPES]
    + [
        {"shape": (32, 512, 16, 64), "perm": (0, 2, 1, 3)},        # attention: (B, S, H, D) -> (B, H, S, D)
        {"shape": (32, 16, 512, 64), "perm": (0, 2, 1, 3)},        # and back
        {"shape": (16, 128, 64, 128), "perm": (2, 3, 0, 1)},       # merges to a 2-D transpose
        {"shape": (8192, 8192), "perm": (1, 0)},                   # plain 2-D transpose
        {"shape": (1000, 1001), "perm": (1, 0)},                   # odd sizes: no side fits a tile
        {"shape": (33, 1000, 1001), "perm": (0, 2, 1)},            # odd batch transpose
        {"shape": (1, 4096, 1, 2048), "perm": (2, 3, 0, 1)},       # size-1 dims around a transpose
        {"shape": (64, 1, 512, 1, 256), "perm": (2, 1, 0, 4, 3)},  # size-1 dims around a row copy
        {"shape": (8, 64, 16, 64, 64), "perm": (0, 2, 3, 4, 1)},   # 5-D: NCDHW -> NDHWC
        {"shape": (32, 8, 7, 8, 7, 96), "perm": (0, 1, 3, 2, 4, 5)},  # 6-D: Swin window partition
        {"shape": (8, 32, 4, 64, 8, 64), "perm": (1, 4, 5, 0, 2, 3)},  # 6-D: a general reshuffle
    ]
)


suite = Suite(
    "permute",
    "y = x.permute(perm).contiguous() for a contiguous x",
    axes={},
    points=POINTS,
    dtypes=DTYPES,
    default_dtypes=["float16", "float32"],
    quick={"shape": [(64, 256, 256), (32, 512, 16, 64), (1000, 1001)]},
    x_axis="shape",
    domains={"shape": shape_of(positive_int), "perm": shape_of(non_negative_int)},
    tolerances={dtype: Tolerance(rtol=0.0, atol=0.0) for dtype in DTYPES},
)

@suite.validate
def perm_fits_shape(case):
    if sorted(case.perm) != list(range(len(case.shape))):
        return f"perm {case.perm} is not a permutation of the {len(case.shape)} dims of shape {case.shape}"
    return None


INT_RANGES = {"int8": (-128, 128), "int64": (-(2**53), 2**53)}
"""Integers over int8's whole range; int64 within +-2^53, where the float64 check stays exact."""


@suite.inputs
def inputs(case, gen):
    """x, random and never all zeros, and the case's permutation (every implementation takes both)."""
    if case.dtype in INT_RANGES:
        low, high = INT_RANGES[case.dtype]
        x = torch.randint(low, high, case.shape, generator=gen, device=gen.device, dtype=case.torch_dtype)
    else:
        x = torch.randn(case.shape, generator=gen, device=gen.device, dtype=case.torch_dtype)
    return {"x": x, "perm": case.perm}


@suite.reference
def reference(x, perm):
    out = torch.empty(tuple(x.shape[p] for p in perm), dtype=torch.float64, device=x.device)
    return out.copy_(x.permute(perm))


@suite.traffic
def traffic(case):
    size = math.prod(case.shape) * case.itemsize
    return Traffic(read=size, write=size)


@suite.impl("optimized", kind="cuda")
def optimized(case):
    """Merged dims, 16-byte moves when the last dim moves whole, tiled shared-memory transpose otherwise."""
    from bwbench.cuda.loader import load
    from bwbench.cuda.permute import OPTIMIZED, permute

    load(OPTIMIZED)  # compile now, outside the check and the timing
    return permute


@suite.impl("naive", kind="naive")
def naive(case):
    """One element per thread, 64-bit N-d index arithmetic per element, nothing merged."""
    from bwbench.cuda.loader import load
    from bwbench.cuda.permute import NAIVE, naive_permute

    load(NAIVE)
    return naive_permute


@suite.impl("torch", kind="torch")
def eager(case):
    """x.permute(perm).contiguous() in eager PyTorch."""
    return lambda x, perm: x.permute(perm).contiguous()


@suite.impl("compiled", kind="compiled")
def compiled(case):
    """torch.compile(dynamic=False) of x.permute(perm).contiguous(): Triton, compiled once per shape."""
    perm = case.perm
    fn = compile_per_case(lambda x: x.permute(perm).contiguous())
    return lambda x, perm: fn(x)
