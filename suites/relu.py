"""ReLU forward and backward with a 1-bit mask: OneFlow's BN+ReLU article (seeds/003).

The backward of y = relu(x) only needs the sign of y. Keeping a bitmask from the forward (n / 8
bytes) instead of y (n * itemsize bytes) cuts the backward's traffic from 3 to a little over 2
tensors' worth. Cases: forward (x -> y, mask) and backward (dy, mask -> dx), flat sizes 2^20 to
2^30 elements and the article's (16, 32, 112, 112).

Bytes per implementation (each declares its own; s = itemsize, n = elements):
- optimized, bytemask: forward reads n*s, writes n*s + n/8; backward reads n*s + n/8, writes n*s.
  The article's bytemask packs 8 elements per byte, so its mask is also n/8 bytes: what it loses
  is coalescing (a warp's loads stride 8 elements apart), not bytes.
- torch: forward reads n*s, writes n*s (it keeps y itself for the backward: n*s bytes of memory);
  backward (threshold_backward) reads dy and y, writes dx: 3*n*s.

Checking: ReLU is exact, so every output must equal the reference exactly (tolerance 0). The
mask formats differ (torch keeps y), so the suite's own output check (`suite.check_outputs`)
decodes every implementation's mask and compares it with x > 0.
"""

from __future__ import annotations

import math

import torch

from bwbench.domains import one_of, positive_int, shape_of
from bwbench.suite import Suite, Tolerance, Traffic

SIZES = [(1 << k,) for k in (20, 22, 24, 26, 28, 30)] + [(16, 32, 112, 112)]

suite = Suite(
    "relu",
    "y = relu(x) keeping a mask of x > 0; dx = dy where the mask is set",
    axes={"direction": ["forward", "backward"], "size": SIZES},
    dtypes=["float16", "float32", "bfloat16"],
    quick={"size": [(1 << 20,), (16, 32, 112, 112)]},
    x_axis="size",
    domains={"direction": one_of("forward", "backward"), "size": shape_of(positive_int)},
    tolerances={d: Tolerance(rtol=0.0, atol=0.0) for d in ("float16", "float32", "bfloat16")},
)

def numel(case) -> int:
    return math.prod(case.size)


def mask_bytes(case) -> int:
    """A packed-bit mask: one bit per element, ceil(n / 8) bytes."""
    return (numel(case) + 7) // 8


def kept_y_bytes(case) -> int:
    """torch keeps y itself for threshold_backward: n * itemsize bytes in the mask's place."""
    return numel(case) * case.itemsize


@suite.inputs
def inputs(case, gen):
    def randn():
        return torch.randn(case.size, generator=gen, device=gen.device, dtype=case.torch_dtype)

    if case.direction == "forward":
        return {"x": randn()}
    from bwbench.cuda.bitmask import pack_bits

    y = torch.relu(randn())
    return {"dy": randn(), "y": y, "mask": pack_bits(y > 0)}


@suite.reference
def reference(x=None, dy=None, y=None, mask=None):
    """Exact in the input dtype (relu copies or zeroes): forward (y, packed bits of x > 0), backward dx."""
    from bwbench.cuda.bitmask import pack_bits

    if x is not None:
        return torch.clamp_min(x, 0), pack_bits(x > 0)
    return torch.where(y > 0, dy, torch.zeros_like(dy))


@suite.traffic
def traffic(case):
    """The bitmask byte model (the optimized implementation's and the bytemask's)."""
    n, s = numel(case), case.itemsize
    if case.direction == "forward":
        return Traffic(read=n * s, write=n * s + mask_bytes(case))
    return Traffic(read=n * s + mask_bytes(case), write=n * s)


def torch_traffic(case):
    """torch keeps y instead of a mask: the backward reads it."""
    n, s = numel(case), case.itemsize
    if case.direction == "forward":
        return Traffic(read=n * s, write=n * s)
    return Traffic(read=2 * n * s, write=n * s)


def decode_mask(mask: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor | None, str]:
    """One bool per element from any format an implementation returns, or None and why not:
    packed bits (uint8, ceil(n/8) bytes, padding bits zero), or the kept y (torch: y > 0)."""
    from bwbench.cuda.bitmask import packed_bytes, unpack_bits

    n = like.numel()
    if mask.dtype == torch.uint8 and mask.dim() == 1 and mask.numel() == packed_bytes(n):
        if n % 8 and int(mask[-1]) >> (n % 8):
            return None, f"padding bits of the last mask byte are not zero ({int(mask[-1]):#04x})"
        return unpack_bits(mask, n), ""
    if mask.dtype == like.dtype and mask.shape == like.shape:
        return mask.reshape(-1) > 0, ""
    return None, f"unknown mask format: {mask.dtype} of shape {tuple(mask.shape)}"


def _first_difference(got: torch.Tensor, want: torch.Tensor, what: str) -> str:
    bad = (got != want) | (got.isnan() if got.is_floating_point() else torch.zeros_like(want, dtype=torch.bool))
    index = int(bad.reshape(-1).nonzero()[0, 0])
    return f"{what}: element {index} is {got.reshape(-1)[index].item()!r}, expected {want.reshape(-1)[index].item()!r}"


@suite.check_outputs
def check(case, inputs, outputs) -> tuple[bool, str]:
    """Exact y (or dx) and, forward, the decoded mask equal to x > 0."""
    outs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    if case.direction == "backward":
        if len(outs) != 1:
            return False, f"backward returned {len(outs)} outputs, expected dx"
        dy, y = inputs["dy"], inputs["y"]
        want = torch.where(y > 0, dy, torch.zeros_like(dy))
        if outs[0].shape != want.shape or outs[0].dtype != want.dtype:
            return False, f"dx is {outs[0].dtype} {tuple(outs[0].shape)}, expected {want.dtype} {tuple(want.shape)}"
        if not torch.equal(outs[0], want):
            return False, _first_difference(outs[0], want, "dx")
        return True, "dx exact"
    if len(outs) != 2:
        return False, f"forward returned {len(outs)} outputs, expected (y, mask)"
    x = inputs["x"]
    y, mask = outs
    want = torch.clamp_min(x, 0)
    if y.shape != x.shape or y.dtype != x.dtype:
        return False, f"y is {y.dtype} {tuple(y.shape)}, expected {x.dtype} {tuple(x.shape)}"
    if not torch.equal(y, want):
        return False, _first_difference(y, want, "y")
    keep, why = decode_mask(mask, x)
    if keep is None:
        return False, why
    positive = (x > 0).reshape(-1)
    if not torch.equal(keep, positive):
        return False, _first_difference(keep, positive, "mask")
    return True, "y exact, mask == (x > 0)"



@suite.impl("optimized", kind="cuda", mask_bytes=mask_bytes)
def optimized(case):
    """Bitmask words from a warp-group OR (one 32-bit word per 32 elements, coalesced), 16-byte
    loads and stores; the backward reads the bitmask, not y. Keeps n/8 bytes for the backward."""
    from bwbench.cuda.bitmask import SOURCE, relu_backward, relu_forward
    from bwbench.cuda.loader import load

    load(SOURCE)
    if case.direction == "forward":
        return relu_forward
    return lambda dy, y, mask: relu_backward(dy, mask)


@suite.impl("bytemask", kind="naive", mask_bytes=mask_bytes)
def bytemask(case):
    """The article's first scheme: one thread per 8 elements builds one mask byte (uncoalesced
    loads, 8 elements apart across a warp). Keeps n/8 bytes for the backward."""
    from bwbench.cuda.bitmask import SOURCE, relu_backward_bytemask, relu_forward_bytemask
    from bwbench.cuda.loader import load

    load(SOURCE)
    if case.direction == "forward":
        return relu_forward_bytemask
    return lambda dy, y, mask: relu_backward_bytemask(dy, mask)


@suite.impl("torch", kind="torch", traffic=torch_traffic, mask_bytes=kept_y_bytes)
def eager(case):
    """torch.relu forward (keeps y: n*itemsize bytes for the backward), aten.threshold_backward(dy, y, 0)."""
    if case.direction == "forward":
        def forward(x):
            y = torch.relu(x)
            return y, y  # what torch keeps for the backward is y itself: no extra work
        return forward
    threshold_backward = torch.ops.aten.threshold_backward
    return lambda dy, y, mask: threshold_backward(dy, y, 0)
