"""Phase timelines of bn_relu's one-launch forward, built with -DBW_BNR_TRACE: each block stamps
%globaltimer at its start, the end of its statistics pass (phase A), leaving the first barrier,
leaving the second (NHWC; NCHW: after its channel's merge) and its end. Prints, per case, when
blocks reach each point (min / median / max, microseconds from the first block's start), cold
(L2 flushed before each call), last of three calls. A diagnostic: `bwbench run` gives the figures.

Usage: python3 scripts/bn_relu_trace.py [--shape 32x64x112x112 ...] [--dtype float16]
"""
import argparse
import os

os.environ["BWBENCH_NVRTC_OPTIONS"] = (os.environ.get("BWBENCH_NVRTC_OPTIONS", "") + " -DBW_BNR_TRACE").strip()

import cupy  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bwbench.cuda import bn_relu  # noqa: E402
from bwbench.cuda.loader import load  # noqa: E402

POINTS = ("start", "A done", "barrier 1", "B done", "end", "B merged")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append")
    parser.add_argument("--dtype", default="float16")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape] if args.shape else \
        [(32, 64, 112, 112), (32, 256, 56, 56)]
    dtype = getattr(torch, args.dtype)
    trace = cupy.ndarray((4096, 7), dtype=cupy.uint64, memptr=load(bn_relu.SOURCE).raw.get_global("bnr_trace"))
    # A read flush, as bwbench's Timer does: a written one would leave dirty lines whose write-back
    # lands inside the traced call and slows its first phase.
    flush = torch.ones(64 << 20, dtype=torch.float32, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in shapes:
        x0 = torch.randn(shape, generator=gen, device="cuda").to(dtype)
        gamma = torch.rand(shape[1], generator=gen, device="cuda") + 0.5
        beta = torch.randn(shape[1], generator=gen, device="cuda")
        for layout in ("NCHW", "NHWC"):
            x = x0.contiguous(memory_format=torch.channels_last if layout == "NHWC" else torch.contiguous_format)
            for cache in (True, False):
                bn_relu.CACHE_X = cache
                try:
                    for _ in range(3):
                        trace.fill(0)
                        flush.sum()
                        torch.cuda._sleep(50_000)  # the host's launch hidden behind GPU work
                        bn_relu.bn_relu_forward(x, gamma, beta, 1e-5, fused=True)
                        torch.cuda.synchronize()
                except ValueError as e:
                    print(f"{layout} {shape}: {e}")
                    break
                t = cupy.asnumpy(trace)
                t = t[t[:, 0] > 0].astype(np.int64)
                sm = t[:, 6]
                t = t[:, :6]
                rel = (t - t[:, 0].min()) / 1000.0
                cells = []
                for i, p in enumerate(POINTS):
                    col = rel[t[:, i] > 0, i]
                    if len(col):
                        cells.append(f"{p} {np.min(col):5.1f}/{np.median(col):5.1f}/{np.max(col):5.1f}")
                print(f"{layout} {'x'.join(map(str, shape))} {args.dtype} cache={'on ' if cache else 'off'} "
                      f"blocks={len(t)}: " + " | ".join(cells), flush=True)
                per_sm = np.bincount(sm, minlength=int(sm.max()) + 1)[sm]  # blocks sharing each block's SM
                for k in np.unique(per_sm):
                    on = per_sm == k
                    print(f"    blocks on SMs holding {k}: {on.sum():4d}, median A done {np.median(rel[on, 1]):5.1f}, "
                          f"median end {np.median(rel[on, 4]):5.1f} us", flush=True)


if __name__ == "__main__":
    main()
