"""BatchNorm2d training forward fused with ReLU keeping a 1-bit mask, and its backward (seeds/003).

OneFlow's BN+ReLU article: in ResNet every BatchNorm is followed by a ReLU (bn_relu) or by a
residual add and a ReLU (bn_add_relu). Fusing them saves a pass over the activations, and the
ReLU's backward then needs only the sign of the pre-activation: a bitmask of n/8 bytes instead of
y (n * itemsize bytes). Cases: ResNet-50 stage shapes, NCHW and NHWC (channels_last), forward
(x [, z] -> y, mask, mean, invstd) and backward (dy, mask, x, mean, invstd, gamma -> dx [, dz],
dgamma, dbeta). Batch statistics, biased variance, eps 1e-5; running statistics are not updated.

Bytes per implementation (each declares its own; n elements of s bytes, C channels, m = n/8
mask bytes, p = the per-channel float32 traffic: gamma, beta read; mean, invstd written):
- optimized (two passes: statistics, then normalize; x read twice. For NCHW with H*W % 32 == 0, and
  NHWC with C % 32 == 0 from 16 MiB, the two passes are one cooperative launch whose second pass
  walks each block's data in reverse, so part of the second read comes from L2: the model still
  counts it, as a copy of the same bytes would move them; on an H100 the NCHW backward reaches
  95-100% of copy that way):
  forward  read 2ns [+ ns for z] + 8C, write ns + m + 8C;
  backward read 2 * (2ns + m) + 12C (dy, mask and x in both passes), write ns [+ ns dz] + 8C.
  Except where the forward is one launch: its first pass keeps as much of x in shared memory as
  fits (about half of a 51 MB tensor on an H100), and its second pass reads only the rest from
  global memory, so its model counts x once plus that rest, which depends on the GPU
  (bwbench.cuda.bn_relu.forward_x_read_bytes; without a GPU, x twice). Counting x twice there
  would put it above the card's peak.
- torch (BN then ReLU in place [after the add in place], as nn.BatchNorm2d + nn.ReLU(inplace=True)
  run; statistics and normalization are separate passes in PyTorch's and cuDNN's non-persistent
  kernels): forward read 2ns, write ns (BN) + 2ns (relu_) [+ 3ns: add_]; backward
  threshold_backward (read dy, y; write g: 3ns) + native_batch_norm_backward (read g, x for the
  sums, then g, x again and write dx: 5ns) = 8ns. It keeps y (ns bytes) for the backward.
- cudnn (cudnnBatchNormalizationForwardTrainingEx, BN_ACTIVATION / BN_ADD_ACTIVATION, persistent,
  NHWC): modelled as the two-pass forward, x read twice (what it keeps on chip is not known), the
  mask as n/8 bytes; compare it with optimized by time, since optimized's model counts x once plus
  what it reads again; its real reserve space size is cuDNN's (asked at build time, recorded in
  the check message). Backward: not benchmarked (see `cudnn`).
These models are what each implementation should move; `bwbench profile` shows what it does move.

Checking (`check_outputs`, against float64). y and dx are sums whose terms are larger than the
result where they cancel, so each element's allowance is the dtype's tolerance plus one rounding
(unit roundoff u of the dtype) of each term: y: u * (|BN(x)| + |z|), because an unfused pipeline
such as torch's rounds BN(x) to the dtype before adding z (on an H200 torch's float16 bn_add_relu
was 5e-4 off on y = 0.087); dx: u * |gamma * invstd| * (|g| + |dbeta| / M + |xhat * dgamma| / M).
The mask must equal (pre-activation > 0) outside a band of MASK_BAND plus that y allowance around
zero, where rounding may decide either way (torch's mask is its kept y > 0); y exactly 0 where the
mask is clear outside the band; mean and invstd within tolerance. Backward: dz exact (it is dy or 0);
dgamma and dbeta within 1e-5 relative plus SUM_ABS_FACTOR times the sum of the absolute values of
their terms. float32 accumulation of M = N*H*W terms in blocks stays near 1e-6 of that sum (torch's
float16 NCHW backward: 1.2e-6 on the H200); a wrong formula is off by about sum/sqrt(M) (100 times
the allowance at M = 401408) or more. Measured on an H200: torch's float16 backward at the odd
quick shape (3, 37, 9, 11) NCHW still falls outside (dbeta 8.807 against 8.788, 2e-3 relative: its
reductions there are less precise than float32 accumulation), so that record reads "failed" with
the figures; the larger shapes were not rechecked after this bound was set.
"""

from __future__ import annotations

import torch

from bwbench.domains import one_of, positive_int, shape_of
from bwbench.suite import Skip, Suite, Tolerance, Traffic

SHAPES = [(32, 64, 112, 112), (32, 256, 56, 56), (32, 2048, 7, 7)]
ODD = (3, 37, 9, 11)  # C not a multiple of 8, H*W odd: the unvectorized paths

# `--preset models`: the small-spatial BatchNorms of ResNet-50's last two stages at batch 32 (stage
# 3: 14x14, 256 and 1024 channels; stage 4: 7x7, 512 and 2048), where each channel's plane is 49
# or 196 values: short runs that no 16-byte pack divides in NCHW. `--preset odd`: planes and
# channel counts no pack divides (a prime spatial size, odd channels).
PRESETS = {
    "models": [{"shape": [(32, 256, 14, 14), (32, 1024, 14, 14), (32, 512, 7, 7), (32, 2048, 7, 7)]}],
    "odd": [{"shape": [ODD, (32, 1000, 7, 7), (16, 333, 13, 13), (7, 2048, 5, 5)]}],
}
EPS = 1e-5
MASK_BAND = 1e-5

# Per output: y, mean, invstd (forward); dx (backward). y = x_hat * gamma + beta [+ z] is a sum whose
# float32 error is relative to its terms (about 1), not to y: atol 1e-5 where terms cancel.
Y_TOL = {"float16": Tolerance(rtol=1e-3, atol=1e-5), "float32": Tolerance(rtol=1e-5, atol=1e-5)}
MEAN_TOL = Tolerance(rtol=1e-5, atol=1e-6)
INVSTD_TOL = Tolerance(rtol=1e-5, atol=0.0)
SUM_RTOL, SUM_ABS_FACTOR = 1e-5, 1e-5
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "float32": 2.0 ** -24}

suite = Suite(
    "bn_relu",
    "y = relu(BatchNorm2d(x) [+ z]) keeping a 1-bit mask, batch statistics; backward through the mask and BN",
    axes={"direction": ["forward", "backward"], "variant": ["bn_relu", "bn_add_relu"], "shape": SHAPES,
          "layout": ["NCHW", "NHWC"]},
    dtypes=["float16", "float32"],
    quick={"shape": [ODD, (32, 256, 56, 56)]},
    presets=PRESETS,
    x_axis="shape",
    domains={"direction": one_of("forward", "backward"), "variant": one_of("bn_relu", "bn_add_relu"),
             "shape": shape_of(positive_int, rank=4), "layout": one_of("NCHW", "NHWC")},
    tolerances={d: (Y_TOL[d], MEAN_TOL, INVSTD_TOL) for d in Y_TOL},
)


def numel(case) -> int:
    n, c, h, w = case.shape
    return n * c * h * w


def mask_bytes(case) -> int:
    return (numel(case) + 7) // 8


def residual(case) -> bool:
    return case.variant == "bn_add_relu"


@suite.validate
def validate(case):
    if len(case.shape) != 4 or min(case.shape) < 1:
        return f"shape must be (N, C, H, W) with every dimension >= 1, got {case.shape}"
    if case.layout not in ("NCHW", "NHWC"):
        return f"layout must be NCHW or NHWC, got {case.layout!r}"
    if case.shape[0] * case.shape[2] * case.shape[3] < 2:
        return "batch statistics need at least 2 values per channel (N * H * W >= 2)"
    return None


@suite.inputs
def inputs(case, gen):
    from bwbench.cuda.bn_relu import keep_mask

    from ._bn_relu_reference import forward_reference

    fmt = torch.channels_last if case.layout == "NHWC" else torch.contiguous_format
    c = case.shape[1]

    def randn(*shape, dtype=case.torch_dtype):
        return torch.randn(*shape, generator=gen, device=gen.device, dtype=torch.float32).to(dtype)

    # x of mean 0.5 and std 2, so the statistics are not trivially (0, 1); gamma around 1, beta small.
    x = (randn(*case.shape, dtype=torch.float32) * 2 + 0.5).to(case.torch_dtype).contiguous(memory_format=fmt)
    gamma = 1 + 0.5 * randn(c, dtype=torch.float32)
    beta = 0.5 * randn(c, dtype=torch.float32)
    out = {"x": x, "gamma": gamma, "beta": beta, "eps": EPS}
    z = randn(*case.shape).contiguous(memory_format=fmt) if residual(case) else None
    if case.direction == "forward":
        if z is not None:
            out["z"] = z
        return out
    # Backward: the forward's saved statistics and kept y (torch's mask), and the bitmask of y > 0
    # (so every implementation reads the same decisions in its own format).
    y, _, mean, invstd = forward_reference(x, gamma, beta, EPS, z)
    y = y.to(case.torch_dtype).contiguous(memory_format=fmt)
    out.update(dy=randn(*case.shape).contiguous(memory_format=fmt), y=y, mask=keep_mask(y > 0),
               mean=mean.float(), invstd=invstd.float(), residual=residual(case))
    return out


@suite.reference
def reference(x, gamma, beta, eps, z=None, dy=None, y=None, mask=None, mean=None, invstd=None, residual=False):
    """float64. Forward: (y, packed bits of pre > 0, mean, invstd). Backward: (dx, [dz,] dgamma, dbeta),
    the mask being y > 0 (the same decisions as the `mask` input)."""
    from bwbench.cuda.bn_relu import keep_mask

    from ._bn_relu_reference import backward_reference, forward_reference

    if dy is None:
        y_ref, pre, m, s = forward_reference(x, gamma, beta, eps, z)
        return y_ref, keep_mask(pre > 0), m, s
    return backward_reference(dy, y > 0, x, mean, invstd, gamma, residual=residual)


# ----------------------------------------------------------------------------------------------
# Byte models
# ----------------------------------------------------------------------------------------------


@suite.traffic
def traffic(case):
    """The optimized implementation's: x read twice (statistics pass, normalize pass)."""
    ns, c = numel(case) * case.itemsize, case.shape[1]
    if case.direction == "forward":
        return Traffic(read=2 * ns + (ns if residual(case) else 0) + 8 * c, write=ns + mask_bytes(case) + 8 * c)
    return Traffic(read=2 * (2 * ns + mask_bytes(case)) + 12 * c, write=ns + (ns if residual(case) else 0) + 8 * c)


def optimized_traffic(case):
    """traffic(case), with the forward's second read of x cut to what the one-launch forward reads
    again from global memory on this GPU (the rest it keeps in shared memory or registers), and the
    backward's second read of dy, the mask and x dropped where the one-launch group kernel keeps
    them in registers."""
    base = traffic(case)
    if not torch.cuda.is_available():
        return base
    from bwbench.cuda.bn_relu import forward_x_read_bytes, reads_once

    ns = numel(case) * case.itemsize
    if case.direction == "forward":
        x_reads = forward_x_read_bytes(case.shape, case.torch_dtype, case.layout, residual(case))
        return Traffic(read=base.read - 2 * ns + x_reads, write=base.write)
    if reads_once("backward", case.shape, case.torch_dtype, case.layout, residual(case)):
        return Traffic(read=base.read - (2 * ns + mask_bytes(case)), write=base.write)
    return base


def torch_traffic(case):
    """BatchNorm (two passes over x, writes y), then ReLU in place [after the residual add in place];
    backward: threshold_backward then native_batch_norm_backward (keeps y, not a mask)."""
    ns, c = numel(case) * case.itemsize, case.shape[1]
    res = residual(case)
    if case.direction == "forward":
        # BN: read x twice, write y; add_: read y and z, write y; relu_: read y, write y.
        return Traffic(read=2 * ns + (2 * ns if res else 0) + ns + 8 * c, write=ns + (ns if res else 0) + ns + 8 * c)
    # threshold_backward: read dy and y, write g; native_batch_norm_backward: read g and x (sums), then
    # g and x again, write dx. dz is g itself (autograd passes it to the residual branch).
    return Traffic(read=2 * ns + 2 * ns + 2 * ns + 12 * c, write=ns + ns + 8 * c)


# ----------------------------------------------------------------------------------------------
# Checking
# ----------------------------------------------------------------------------------------------


def _decode_mask(mask, x, layout):
    """Memory-order bools from packed bits or from a kept y (torch); None and why otherwise."""
    from bwbench.cuda.bitmask import packed_bytes, unpack_bits
    from bwbench.cuda.bn_relu import memory_order

    n = x.numel()
    if mask.dtype == torch.uint8 and mask.dim() == 1 and mask.numel() == packed_bytes(n):
        if n % 8 and int(mask[-1]) >> (n % 8):
            return None, f"padding bits of the last mask byte are not zero ({int(mask[-1]):#04x})"
        return unpack_bits(mask, n), ""
    if mask.dtype == x.dtype and mask.shape == x.shape:
        return memory_order(mask, layout) > 0, ""
    return None, f"opaque mask: {mask.dtype} {tuple(mask.shape)}, {mask.numel() * mask.element_size()} bytes"


def _compare_terms(name, got, want, tol, term_scale):
    """|got - want| <= rtol * |want| + atol + term_scale, element by element (term_scale: one
    rounding of each term of the sum, see the module docstring)."""
    if got is None:
        return f"{name}: not returned"
    if got.shape != want.shape:
        return f"{name}: expected shape {tuple(want.shape)}, got {tuple(got.shape)}"
    bound = tol.rtol * want.abs() + tol.atol + term_scale
    err = (got.double() - want).abs()
    bad = ~(err <= bound)  # NaN fails too
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0, 0])
        return (f"{name}: {int(bad.sum())} elements off, first (flat {i}) is {float(got.reshape(-1)[i])!r}, "
                f"reference {float(want.reshape(-1)[i])!r} (allowed error {float(bound.reshape(-1)[i]):.3g})")
    return None


def _check_sum(name, got, want, abs_terms):
    if got is None or got.shape != want.shape:
        return f"{name}: expected shape {tuple(want.shape)}, got {None if got is None else tuple(got.shape)}"
    bound = SUM_RTOL * want.abs() + SUM_ABS_FACTOR * abs_terms
    err = (got.double() - want).abs()
    bad = ~(err <= bound)
    if bool(bad.any()):
        c = int(bad.nonzero()[0, 0])
        return f"{name}: channel {c} is {float(got[c])!r}, reference {float(want[c])!r} (allowed {float(bound[c]):.3g})"
    return None


@suite.check_outputs
def check(case, inputs, outputs):
    """See the module docstring: tolerances per output, the mask exact outside a band around zero."""
    from bwbench.cuda.bn_relu import memory_order

    from ._bn_relu_reference import backward_reference, forward_reference

    outs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    x, layout = inputs["x"], case.layout
    y_tol = Y_TOL[case.dtype]
    if case.direction == "backward":
        want_n = 4 if residual(case) else 3
        if len(outs) != want_n:
            return False, f"backward returned {len(outs)} outputs, expected {want_n}"
        keep = inputs["y"] > 0
        ref = backward_reference(inputs["dy"], keep, x, inputs["mean"], inputs["invstd"], inputs["gamma"], residual(case))
        dx, dgamma, dbeta = outs[0], outs[-2], outs[-1]
        g = ref[1] if residual(case) else torch.where(keep, inputs["dy"].double(), 0.0)
        xhat = (x.double() - inputs["mean"].double().view(1, -1, 1, 1)) * inputs["invstd"].double().view(1, -1, 1, 1)
        m = x.numel() // x.shape[1]
        scale = (inputs["gamma"].double() * inputs["invstd"].double()).abs().view(1, -1, 1, 1)
        dx_terms = scale * (g.abs() + (ref[-1].abs() / m).view(1, -1, 1, 1) + xhat.abs() * (ref[-2].abs() / m).view(1, -1, 1, 1))
        problems = [_compare_terms("dx", dx, ref[0], y_tol, UNIT_ROUNDOFF[case.dtype] * dx_terms)]
        if residual(case):
            dz = outs[1]
            want_dz = torch.where(keep, inputs["dy"], torch.zeros_like(inputs["dy"]))
            if dz.shape != want_dz.shape or not torch.equal(dz, want_dz):
                problems.append("dz: differs from dy * mask (must be exact)")
        problems.append(_check_sum("dgamma", dgamma, ref[-2], (g * xhat).abs().sum(dim=(0, 2, 3))))
        problems.append(_check_sum("dbeta", dbeta, ref[-1], g.abs().sum(dim=(0, 2, 3))))
        problems = [p for p in problems if p]
        return (not problems), "; ".join(problems) or "dx, dgamma, dbeta within tolerance" + (", dz exact" if residual(case) else "")

    if len(outs) != 4:
        return False, f"forward returned {len(outs)} outputs, expected (y, mask, mean, invstd)"
    y, mask, mean, invstd = outs
    y_ref, pre, m_ref, s_ref = forward_reference(x, inputs["gamma"], inputs["beta"], inputs["eps"], inputs.get("z"))
    if y.shape != x.shape or y.dtype != x.dtype:
        return False, f"y is {y.dtype} {tuple(y.shape)}, expected {x.dtype} {tuple(x.shape)}"
    z = inputs.get("z")
    bn = pre if z is None else pre - z.double()
    y_terms = UNIT_ROUNDOFF[case.dtype] * (bn.abs() + (0.0 if z is None else z.double().abs()))
    problems = [_compare_terms("y", y, y_ref, y_tol, y_terms if z is not None else 0.0),
                _compare_terms("mean", mean, m_ref, MEAN_TOL, 0.0),
                _compare_terms("invstd", invstd, s_ref, INVSTD_TOL, 0.0)]
    keep, why = _decode_mask(mask, x, layout)
    note = f", mask memory {mask.numel() * mask.element_size()} bytes"
    if keep is None and why.startswith("opaque"):
        note += f", mask not checked ({why})"
    elif keep is None:
        problems.append(why)
    else:
        want = memory_order(pre > 0, layout)
        band = MASK_BAND + (y_terms if z is not None else 0.0)
        outside = memory_order(pre.abs() > band, layout)
        wrong = (keep != want) & outside
        if bool(wrong.any()):
            i = int(wrong.nonzero()[0, 0])
            problems.append(f"mask: element {i} (memory order) is {int(keep[i])}, pre-activation "
                            f"{float(memory_order(pre, layout)[i])!r}")
        elif bool((memory_order(y, layout)[~keep & outside] != 0).any()):
            problems.append("y is not 0 where the mask is clear")
        ties = int(((keep != want) & ~outside).sum())
        note += f", mask == (pre > 0) ({ties} of {keep.numel()} near 0 differ)"
    problems = [p for p in problems if p]
    return (not problems), "; ".join(problems) or "y, mean, invstd within tolerance" + note


# ----------------------------------------------------------------------------------------------
# Implementations
# ----------------------------------------------------------------------------------------------


def kept_y_bytes(case) -> int:
    """torch keeps y for threshold_backward: n * itemsize bytes in the mask's place."""
    return numel(case) * case.itemsize


@suite.impl("optimized", kind="cuda", traffic=optimized_traffic, mask_bytes=mask_bytes, description=(
    "statistics pass (shifted sums, Chan merges) then BN+ReLU writing a warp-OR bitmask, 16-byte accesses; "
    "NCHW with H*W % 32 == 0 and NHWC with C % 32 == 0 from 16 MiB: one cooperative launch (grid barrier, "
    "second pass in reverse; the forward keeps part of x in shared memory between the passes); keeps a "
    "1-bit mask (n/8 bytes) for the backward"))
def optimized(case):
    """Statistics (shifted sums, Chan merges) then normalize+ReLU with a 1-bit mask from warp OR;
    16-byte accesses. Keeps x and the n/8-byte mask for the backward."""
    from bwbench.cuda.bn_relu import SOURCE, bn_relu_backward, bn_relu_forward
    from bwbench.cuda.loader import load

    load(SOURCE)
    if case.direction == "forward":
        return lambda x, gamma, beta, eps, z=None: bn_relu_forward(x, gamma, beta, eps, z)
    res = residual(case)
    return lambda dy, mask, x, mean, invstd, gamma, **_: bn_relu_backward(dy, mask, x, mean, invstd, gamma, res)


@suite.impl("torch", kind="torch", traffic=torch_traffic, mask_bytes=kept_y_bytes, description=(
    "F.batch_norm's aten._batch_norm_impl_index (cuDNN where eligible) + relu_ [after add_]; backward "
    "threshold_backward + native_batch_norm_backward; keeps y (n*itemsize bytes) as its ReLU mask"))
def eager(case):
    """aten._batch_norm_impl_index (what F.batch_norm runs: cuDNN where eligible) then relu_ [after
    add_]; backward threshold_backward + native_batch_norm_backward. Keeps x and y (n*itemsize bytes)."""
    if case.direction == "forward":
        bn = torch.ops.aten._batch_norm_impl_index
        enabled = torch.backends.cudnn.enabled

        def forward(x, gamma, beta, eps, z=None):
            y, mean, invstd, _, _ = bn(x, gamma, beta, None, None, True, 0.0, eps, enabled)
            if z is not None:
                y.add_(z)
            y.relu_()
            return y, y, (mean if mean.numel() else None), (invstd if invstd.numel() else None)
        return forward
    threshold_backward = torch.ops.aten.threshold_backward
    bn_backward = torch.ops.aten.native_batch_norm_backward
    res = residual(case)

    def backward(dy, y, x, mean, invstd, gamma, eps, **_):
        g = threshold_backward(dy, y, 0)
        dx, dgamma, dbeta = bn_backward(g, x, gamma, None, None, mean, invstd, True, eps, [True, True, True])
        return (dx, g, dgamma, dbeta) if res else (dx, dgamma, dbeta)
    return backward


@suite.impl("cudnn", kind="cudnn", description=(
    "cudnnBatchNormalizationForwardTrainingEx, BN_ACTIVATION / BN_ADD_ACTIVATION, persistent, NHWC only; "
    "keeps an opaque reserve space (its ReLU mask; size in the check message) for the backward"))
def cudnn(case):
    """cudnnBatchNormalizationForwardTrainingEx with BN_ACTIVATION / BN_ADD_ACTIVATION (persistent,
    NHWC only). Keeps x and its opaque reserve space (cuDNN's ReLU mask) for the backward."""
    if case.direction == "backward":
        raise Skip("cudnn backward not benchmarked: cudnnBatchNormalizationBackwardEx reads the opaque reserve "
                   "space of its own forward, so it cannot take the mask every other implementation is given")
    from bwbench.cuda.cudnn import CudnnBatchNormRelu

    bn = CudnnBatchNormRelu(case.shape, case.torch_dtype, EPS, residual(case), case.layout)
    return lambda x, gamma, beta, eps, z=None: bn.forward(x, gamma, beta, z)
