"""Dropout forward and backward with a 1-bit mask: ONNX Runtime's BitmaskDropout (seeds/004).

The forward draws Philox4x32-10 in the kernel (counter based: seed, offset, element index; 8
elements per draw, 16 bits each), scales kept values by 1/(1-p), and keeps the keep mask for the
backward: one bit per element (optimized), one byte per element (boolmask, and torch's
native_dropout).

Bytes (s = itemsize, n = elements): forward reads n*s, writes n*s + mask; backward reads
n*s + mask, writes n*s; mask = n/8 bytes (optimized) or n bytes (boolmask, torch).

Checking: optimized and boolmask must reproduce bwbench/philox.py's mask bit for bit and
y = x * keep / (1 - p). torch uses another generator, so the suite's own output check
(`suite.check_outputs`) judges its forward statistically: the kept fraction within 4 standard
deviations of 1 - p, kept values x / (1 - p), dropped values zero. Backward cases feed every
implementation the same Philox mask in its own format, so their reference is plain:
dx = dy * keep / (1 - p).
"""

from __future__ import annotations

import math

import torch

from bwbench.cuda.bitmask.plan import KEEP_BITS
from bwbench.domains import FloatRange, one_of, positive_int
from bwbench.suite import Suite, Tolerance, Traffic

SIZES = [1 << k for k in (20, 22, 24, 26, 28, 30)]  # elements (dropout is elementwise: 1-D)
SEED, OFFSET = 0x5EED_0123_4567_89AB, 0  # fixed, so every run checks the same masks
# The kernels compare 16 random bits an element with round(p * 2^16): p resolves to 2^-16 and must
# round below 2^16.
DROP_RATE = FloatRange(0.0, 1.0 - 2.0 ** -(KEEP_BITS + 1),
                       text=f"a number above 0 and below 1 - 2^-{KEEP_BITS + 1} "
                            f"(the kernels resolve p to 2^-{KEEP_BITS})")

suite = Suite(
    "dropout",
    "y = x * keep / (1 - p) keeping the keep mask; dx = dy * keep / (1 - p)",
    axes={"direction": ["forward", "backward"], "p": [0.1, 0.5], "n": SIZES},
    dtypes=["float16", "float32", "bfloat16"],
    quick={"n": [1 << 20], "p": [0.5]},
    x_axis="n",
    domains={"direction": one_of("forward", "backward"), "p": DROP_RATE, "n": positive_int},
    # y = x * scale rounds once in the kernel (scale in float32; float16 subnormals round to 2^-25
    # absolute); the reference is float64.
    tolerances={"float16": Tolerance(rtol=1e-3, atol=1e-7), "bfloat16": Tolerance(rtol=8e-3, atol=1e-30),
                "float32": Tolerance(rtol=3e-7, atol=1e-30)},
)

def numel(case) -> int:
    return case.n


def keep_mask(case, device) -> torch.Tensor:
    """The kernels' keep decision for this case (bwbench/philox.py on the GPU), one bool per element."""
    from bwbench.philox import dropout_keep_torch

    return dropout_keep_torch(numel(case), case.p, SEED, OFFSET, device=device)


@suite.inputs
def inputs(case, gen):
    from bwbench.cuda.bitmask import pack_bits

    def randn():
        return torch.randn(case.n, generator=gen, device=gen.device, dtype=case.torch_dtype)

    # Every input carries p, so the reference (which sees only the inputs) knows the scale.
    p = torch.tensor(case.p, dtype=torch.float64)
    keep = keep_mask(case, gen.device)
    if case.direction == "forward":
        return {"x": randn(), "p": p, "keep": keep}
    return {"dy": randn(), "p": p, "keep": keep, "bits": pack_bits(keep),
            "bytes": keep.to(torch.uint8)}


@suite.reference
def reference(p, keep, x=None, dy=None, bits=None, bytes=None):  # noqa: A002 - the mask format's name
    """float64: forward (x * keep / (1 - p), packed bits of keep); backward dy * keep / (1 - p)."""
    from bwbench.cuda.bitmask import pack_bits

    scale = 1.0 / (1.0 - float(p))
    src = x if x is not None else dy
    out = src.double() * keep.reshape(src.shape).double() * scale
    return (out, pack_bits(keep)) if x is not None else out


def bit_mask_bytes(case) -> int:
    """A packed-bit mask: one bit per element, ceil(n / 8) bytes."""
    return (numel(case) + 7) // 8


def byte_mask_bytes(case) -> int:
    """One mask byte per element (boolmask, and torch's bool mask)."""
    return numel(case)


def _traffic(case, mask: int) -> Traffic:
    data = numel(case) * case.itemsize
    if case.direction == "forward":
        return Traffic(read=data, write=data + mask)
    return Traffic(read=data + mask, write=data)


@suite.traffic
def traffic(case):
    """The optimized byte model: a packed-bit mask of n / 8 bytes."""
    return _traffic(case, bit_mask_bytes(case))


def byte_mask_traffic(case):
    """One mask byte per element (boolmask, torch)."""
    return _traffic(case, byte_mask_bytes(case))


@suite.check_outputs
def check(case, inputs, outputs) -> tuple[bool, str]:
    """Forward: decode the mask; a uint8 mask (this project's Philox kernels, bits or bytes) must
    equal the Philox reference exactly, a torch.bool mask (native_dropout's own generator) must
    keep 1 - p of the elements within 4 standard deviations; either way y = x * mask / (1 - p)
    within the suite's tolerance. Backward: dx = dy * keep / (1 - p) within tolerance."""
    from bwbench.check import compare
    from bwbench.cuda.bitmask import packed_bytes, unpack_bits

    outs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    tol = suite.tolerance(case.dtype)
    n, p = numel(case), case.p
    keep = inputs["keep"].reshape(-1)
    if case.direction == "backward":
        result = compare(outs, reference(**inputs), tol, (case.torch_dtype,))
        return result.passed, result.message or "dx within tolerance"
    if len(outs) != 2:
        return False, f"forward returned {len(outs)} outputs, expected (y, mask)"
    y, mask = outs
    if mask.dtype == torch.uint8 and mask.dim() == 1 and mask.numel() == packed_bytes(n) and n != packed_bytes(n):
        if n % 8 and int(mask[-1]) >> (n % 8):
            return False, "padding bits of the last mask byte are not zero"
        got, exact = unpack_bits(mask, n), True
    elif mask.dtype == torch.uint8 and mask.numel() == n:
        if bool((mask > 1).any()):
            return False, "a byte mask holds values other than 0 and 1"
        got, exact = mask.reshape(-1).bool(), True
    elif mask.dtype == torch.bool and mask.numel() == n:
        got, exact = mask.reshape(-1), False
    else:
        return False, f"unknown mask format: {mask.dtype} of shape {tuple(mask.shape)}"
    if exact and not torch.equal(got, keep):
        index = int((got != keep).nonzero()[0, 0])
        return False, f"mask differs from the Philox reference first at element {index}"
    if not exact:
        kept = int(got.sum())
        sigma = math.sqrt(n * p * (1 - p))
        if abs(kept - n * (1 - p)) > 4 * sigma:
            return False, f"kept {kept} of {n} elements; expected {n * (1 - p):.0f} +- {4 * sigma:.0f} (4 sigma)"
    result = compare(y, inputs["x"].double() * got.reshape(y.shape).double() / (1.0 - p), tol, (case.torch_dtype,))
    if not result.passed:
        return False, f"y: {result.message}"
    return True, ("mask == Philox reference" if exact else f"kept fraction {int(got.sum()) / n:.4f}") + ", y within tolerance"



@suite.impl("optimized", kind="cuda", mask_bytes=bit_mask_bytes)
def optimized(case):
    """Philox4x32-10 in the kernel, 8 elements per draw (16 bits each), 16-byte accesses, mask words
    OR-reduced across lanes with shuffles and written by one lane each. Keeps n/8 bytes for the
    backward."""
    from bwbench.cuda.bitmask import SOURCE, dropout_backward, dropout_forward
    from bwbench.cuda.loader import load

    load(SOURCE)
    p = case.p
    if case.direction == "forward":
        return lambda x, **_: dropout_forward(x, p, SEED, OFFSET)
    return lambda dy, bits, **_: dropout_backward(dy, bits, p)


@suite.impl("boolmask", kind="naive", traffic=byte_mask_traffic, mask_bytes=byte_mask_bytes)
def boolmask(case):
    """The same kernel keeping one byte per element (n bytes for the backward)."""
    from bwbench.cuda.bitmask import SOURCE, dropout_backward_bytes, dropout_forward_bytes
    from bwbench.cuda.loader import load

    load(SOURCE)
    p = case.p
    if case.direction == "forward":
        return lambda x, **_: dropout_forward_bytes(x, p, SEED, OFFSET)
    return lambda dy, bytes, **_: dropout_backward_bytes(dy, bytes, p)  # noqa: A002


@suite.impl("torch", kind="torch", traffic=byte_mask_traffic, mask_bytes=byte_mask_bytes)
def eager(case):
    """aten.native_dropout (its own Philox stream, a bool mask: n bytes) and native_dropout_backward."""
    p = case.p
    if case.direction == "forward":
        native_dropout = torch.ops.aten.native_dropout
        return lambda x, **_: native_dropout(x, p, True)
    backward = torch.ops.aten.native_dropout_backward
    scale = 1.0 / (1.0 - p)
    return lambda dy, keep, **_: backward(dy, keep.reshape(dy.shape), scale)
