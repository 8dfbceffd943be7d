"""Correctness before timing: poison, run once, compare with the float64 reference.

A wrong implementation is recorded as failed and never timed. Comparisons run in chunks so a
multi-gigabyte output never needs a full-size float64 temporary next to the reference.
"""

from __future__ import annotations

from typing import Any, Sequence

from .results import Check
from .suite import Tolerance

CHUNK_ELEMENTS = 1 << 25


def as_tuple(outputs: Any) -> tuple:
    if isinstance(outputs, (tuple, list)):
        return tuple(outputs)
    return (outputs,)


def poison_allocator(reference: Any, dtype) -> None:
    """Fill blocks the size of the expected outputs with 0xFF bytes (NaN in every float format) and
    give them back to PyTorch's caching allocator: an implementation that allocates its outputs
    gets those blocks back, so an element it never writes shows up as NaN in the check."""
    import torch

    blocks = [torch.empty(ref.shape, dtype=dtype, device=ref.device) for ref in as_tuple(reference)]
    for block in blocks:
        block.view(torch.uint8).fill_(0xFF)
    del blocks


def expected_dtypes(reference: Any, case_dtype: str, declared: Sequence[str | None] | None = None) -> tuple:
    """Per output, the torch dtype an implementation must return it in: the suite's declared name
    where it gives one, else the case's dtype for a floating reference output (the reference is
    float64 for precision, not as the dtype to return) and the reference's own for any other (a
    bool mask, integer indices). Compared after promotion, a float32 result of a float16 case
    would pass while holding more than the kernel under test stores."""
    import torch

    refs = as_tuple(reference)
    names = tuple(declared) if declared is not None else (None,) * len(refs)
    return tuple(getattr(torch, name) if name is not None
                 else getattr(torch, case_dtype) if ref.is_floating_point() else ref.dtype
                 for name, ref in zip(names, refs))


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def compare(outputs: Any, reference: Any, tolerance: Tolerance | Sequence[Tolerance],
            dtypes: Sequence[Any] | None = None) -> Check:
    """Element-wise |out - ref| <= atol + rtol * |ref| on every output; NaN or Inf never passes.
    `tolerance` is one Tolerance for all outputs or one per output (y in half, statistics in float).
    `dtypes` (see expected_dtypes), where given, is the dtype each output must have: another one
    fails the check before any value is compared."""
    import torch

    outs, refs = as_tuple(outputs), as_tuple(reference)
    tols = tuple(tolerance) if isinstance(tolerance, (tuple, list)) else (tolerance,) * len(refs)
    tol = tols[0]
    if len(outs) != len(refs):
        return Check(False, message=f"returned {len(outs)} outputs, the reference has {len(refs)}",
                     rtol=tol.rtol, atol=tol.atol)
    if len(tols) != len(refs):
        raise ValueError(f"{len(tols)} tolerances for {len(refs)} outputs")
    max_abs, max_rel, worst = 0.0, 0.0, None
    for n, (out, ref, tol) in enumerate(zip(outs, refs, tols)):
        if not isinstance(out, torch.Tensor):
            return Check(False, message=f"output {n} is a {type(out).__name__}, not a tensor", rtol=tol.rtol, atol=tol.atol)
        if tuple(out.shape) != tuple(ref.shape):
            return Check(False, message=f"output {n} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}",
                         rtol=tol.rtol, atol=tol.atol)
        if dtypes is not None and out.dtype != dtypes[n]:
            return Check(False, message=f"output {n} is {_dtype_name(out.dtype)}, expected {_dtype_name(dtypes[n])}",
                         rtol=tol.rtol, atol=tol.atol)
        flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
        for begin in range(0, flat_ref.numel(), CHUNK_ELEMENTS):
            o = flat_out[begin:begin + CHUNK_ELEMENTS].to(torch.float64)
            r = flat_ref[begin:begin + CHUNK_ELEMENTS].to(torch.float64)
            err = (o - r).abs()
            err = torch.where(torch.isfinite(o) | ~torch.isfinite(r), err, torch.full_like(err, float("inf")))
            err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
            bound = tol.atol + tol.rtol * r.abs()
            bad = err > bound
            chunk_abs = float(err.max())
            rel = err / r.abs().clamp_min(tol.atol if tol.atol > 0 else 1e-30)
            chunk_rel = float(rel.max())
            if chunk_abs > max_abs or chunk_abs == float("inf"):
                max_abs = chunk_abs
            max_rel = max(max_rel, chunk_rel)
            if worst is None and bool(bad.any()):
                index = int(bad.nonzero()[0, 0]) + begin
                worst = index
                message = (f"output {n}: element {index} is {float(o[index - begin])!r}, reference "
                           f"{float(r[index - begin])!r} (allowed error {float(bound[index - begin]):.3g})")
                first_failure = message
    if worst is not None:
        return Check(False, max_abs, max_rel, worst, tols[0].rtol, tols[0].atol, first_failure)
    return Check(True, max_abs, max_rel, None, tols[0].rtol, tols[0].atol)
