"""Every tier of the softmax family or the norms forced at a shape, beside the automatic choice: checked, then timed.

Usage: python tools/tiers.py OP --rows R --cols C1,C2 [--dtype float16,float32] [--tiers warp,cluster]

OP is softmax, log_softmax, softmax_backward, layer_norm or rms_norm. For each shape and dtype it
runs the launcher's own choice ("auto") and then each tier forced (`tier=` of bwbench.cuda.softmax
or bwbench.cuda.norm), on the same random inputs. The softmax family's `--tiers` also takes the
cluster tier at a forced size, cluster2 … cluster16 (`cluster=`: blocks a row), which is how the
cluster tier's size rule is measured. A tier that cannot run the shape says why; a
result outside the suite's tolerance of its float64 reference is reported wrong and not timed.
The others are timed with `bwbench.bench`, cold in L2 as `bwbench run` times, against a copy of
the same bytes measured in the same call, and printed as a markdown table (% of that copy, GB/s,
median µs). This is how the launchers' rules are measured: the forced-tier tables of
docs/softmax.md and docs/norm.md come from it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

SOFTMAX_FORWARD_TIERS = ("warp", "warp_fit", "warp_wide", "warp_elements", "registers", "smem", "uncached", "cluster",
                         "tile")

OPS = {
    # op: (suite whose reference and tolerance check it, reads+writes in tensors of the input's size, tiers)
    "softmax": ("softmax", 2, SOFTMAX_FORWARD_TIERS),
    "log_softmax": ("log_softmax", 2, SOFTMAX_FORWARD_TIERS),
    "softmax_backward": ("softmax_backward", 3, ("warp", "warp_wide", "warp_elements", "smem", "uncached", "cluster",
                                                 "tile", "flat")),
    "layer_norm": ("layernorm", 2, ("warp", "registers", "smem", "uncached", "tile", "span", "span_rows", "cluster")),
    "rms_norm": ("rmsnorm", 2, ("warp", "registers", "smem", "uncached", "tile", "span", "span_rows", "cluster")),
}
NORMS = ("layer_norm", "rms_norm")
CLUSTER_SIZES = (2, 4, 8, 16)  # bwbench.cuda.softmax.dispatch.CLUSTER_SIZES, named here without importing torch
SIZED_CLUSTERS = tuple(f"cluster{size}" for size in CLUSTER_SIZES)
"""Forced cluster sizes the softmax family's --tiers takes beside its tiers (not run by default)."""
EPS = 1e-5
DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class Request:
    """What to measure: checked before any GPU work."""

    op: str
    rows: int
    cols: tuple[int, ...]
    dtypes: tuple[str, ...]
    tiers: tuple[str, ...]
    max_time: float


def _positive_ints(text: str, name: str) -> tuple[int, ...]:
    values = []
    for item in (part.strip() for part in text.split(",")):
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"--{name} takes positive integers separated by commas, got {item!r}")
        values.append(int(item))
    return tuple(values)


def _names(text: str | None, allowed: tuple[str, ...], name: str, also: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The comma-separated names of `text` (all of `allowed` when None), each of allowed or also."""
    if text is None:
        return allowed
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [c for c in chosen if c not in allowed + also]
    if unknown or not chosen:
        raise ValueError(f"--{name} takes {', '.join(allowed + also)}; got {text!r}")
    return chosen


def tier_options(tier: str) -> dict:
    """The launcher's overrides for a --tiers name: none for "auto", cluster= for a sized cluster."""
    if tier == "auto":
        return {}
    if tier in SIZED_CLUSTERS:
        return {"tier": "cluster", "cluster": int(tier.removeprefix("cluster"))}
    return {"tier": tier}


def parse(argv: list[str] | None) -> Request:
    """The request, or ValueError with a one-line reason."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", help=f"one of {', '.join(OPS)}")
    parser.add_argument("--rows", required=True, help="rows of the input")
    parser.add_argument("--cols", required=True, help="columns, comma-separated")
    parser.add_argument("--dtype", help=f"comma-separated, of {', '.join(DTYPES)} (default float16)")
    parser.add_argument("--tiers", help="only these forced tiers, comma-separated (default: all of the op's; "
                                        "the softmax family also takes cluster2, cluster4, cluster8, cluster16)")
    parser.add_argument("--max-time", type=float, default=0.3, help="seconds of sampling per measurement")
    args = parser.parse_args(argv)
    if args.op not in OPS:
        raise ValueError(f"OP must be one of {', '.join(OPS)}, got {args.op!r}")
    rows = _positive_ints(args.rows, "rows")
    if len(rows) != 1:
        raise ValueError(f"--rows takes one number, got {args.rows!r}")
    if not args.max_time > 0:
        raise ValueError(f"--max-time must be positive, got {args.max_time}")
    return Request(op=args.op, rows=rows[0], cols=_positive_ints(args.cols, "cols"),
                   dtypes=_names(args.dtype or "float16", DTYPES, "dtype"),
                   tiers=_names(args.tiers, OPS[args.op][2], "tiers", () if args.op in NORMS else SIZED_CLUSTERS),
                   max_time=args.max_time)


@dataclass(frozen=True)
class Shape:
    """One (cols, dtype) of a request: how to call the op with a tier, its float64 reference, the
    suite's tolerance, the bytes it moves and the tier a call ran."""

    call: object  # (options) -> outputs
    reference: object
    tolerance: object
    nbytes: int
    ran: object  # (options) -> str, asked after the call


def _softmax_shape(op: str, rows: int, cols: int, dtype, gen) -> Shape:
    import torch

    from bwbench.cuda import softmax as kernels
    from bwbench.discovery import get_suite

    suite_name, tensors, _ = OPS[op]
    x = torch.randn(rows, cols, generator=gen, device="cuda")
    if op == "softmax_backward":
        y = torch.softmax(x, -1).to(dtype)
        dy = torch.randn(rows, cols, generator=gen, device="cuda").to(dtype)
        args = (y, dy)
        reference = y.double() * (dy.double() - (dy.double() * y.double()).sum(-1, keepdim=True))
    else:
        args = (x.to(dtype),)
        reference = (torch.softmax if op == "softmax" else torch.log_softmax)(args[0].double(), -1)
    function = getattr(kernels, op)
    return Shape(call=lambda options: function(*args, **options), reference=reference,
                 tolerance=get_suite(suite_name).tolerance(str(dtype).removeprefix("torch.")),
                 nbytes=tensors * x.numel() * args[0].element_size(),
                 ran=lambda options: kernels.which_tier(args[0], op, **options))


def _norm_shape(op: str, rows: int, cols: int, dtype, gen) -> Shape:
    import torch

    from bwbench.cuda import norm as kernels
    from bwbench.discovery import get_suite

    rms = op == "rms_norm"
    suite = get_suite(OPS[op][0])
    x = torch.randn(rows, cols, generator=gen, device="cuda").to(dtype)
    gamma = torch.randn(cols, generator=gen, device="cuda").to(dtype)
    inputs = {"x": x, "gamma": gamma, "eps": EPS} if rms else \
        {"x": x, "gamma": gamma, "beta": torch.randn(cols, generator=gen, device="cuda").to(dtype), "eps": EPS}
    function = getattr(kernels, op)

    def ran(options) -> str:
        step = kernels.chosen_launch(x, rms, **options)
        return "?" if step is None else f"{step.plan.tier} ({step.plan.kernel.split('<', 1)[0]}, {step.plan.block} threads)"

    matrix = x.numel() * x.element_size()
    params = (1 if rms else 2) * cols * x.element_size()
    return Shape(call=lambda options: function(**inputs, **options), reference=suite.compute_reference(**inputs),
                 tolerance=suite.tolerance(str(dtype).removeprefix("torch.")),
                 nbytes=2 * matrix + params + (1 if rms else 2) * rows * 4, ran=ran)


def measure(request: Request) -> list[list[str]]:
    """One row per (cols, dtype, tier): the tier that ran, % of copy, GB/s, median µs, max error."""
    import torch

    import bwbench
    from bwbench.check import compare

    make = _norm_shape if request.op in NORMS else _softmax_shape
    rows_out = []
    for cols in request.cols:
        for dtype_name in request.dtypes:
            gen = torch.Generator(device="cuda").manual_seed(cols)
            shape = make(request.op, request.rows, cols, getattr(torch, dtype_name), gen)
            for tier in ("auto", *request.tiers):
                options = tier_options(tier)
                label = [str(request.rows), str(cols), dtype_name, tier]
                try:
                    out = shape.call(options)
                    ran = shape.ran(options)  # after the call: its timed choice
                except ValueError as err:  # the tier cannot run this shape here
                    rows_out.append(label + ["–", "–", "–", "–", f"cannot run: {err}"])
                    continue
                check = compare(out, shape.reference, shape.tolerance)
                error = f"{check.max_abs_err:.1e}" if check.max_abs_err is not None else "–"
                if not check.passed:
                    rows_out.append(label + [ran, "–", "–", "–", f"WRONG ({check.message})"])
                    continue
                result = bwbench.bench(lambda: shape.call(options), bytes=shape.nbytes, max_time=request.max_time)
                rows_out.append(label + [ran, f"{result.pct_copy:.1f}", f"{result.gbps:,.0f}",
                                         f"{result.median_us:,.1f}", error])
            shape = None  # free its tensors before the next shape
            torch.cuda.empty_cache()
    return rows_out


HEADER = ["rows", "cols", "dtype", "forced", "ran as", "% of copy", "GB/s", "µs", "max error"]


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        request = parse(argv)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA GPU is available (torch.cuda.is_available() is False); this tool times kernels",
              file=sys.stderr)
        return 2
    print(markdown(measure(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
