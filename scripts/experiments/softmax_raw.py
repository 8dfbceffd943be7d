"""Experiment: the shipped warp tiers (16-bit rows held as raw 16-byte packs) against the same
tiers holding the row as floats (softmax_raw.cu; both with 16-byte loads), same grid and block,
cold-timed with bwbench's Timer after a check against float64.

Usage: python3 scripts/experiments/softmax_raw.py [COLS ...]   (rows 49152, float16 and bfloat16)
"""

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from bwbench.cuda import loader
from bwbench.cuda import softmax as s
from bwbench.stats import SamplingPolicy
from bwbench.timing import Timer

ROWS = 49152
HERE = Path(__file__).resolve().parent


def reference(op: str, x: torch.Tensor, dy: torch.Tensor | None) -> torch.Tensor:
    xd = x.double()
    if op == "softmax":
        return torch.softmax(xd, -1)
    if op == "log_softmax":
        return torch.log_softmax(xd, -1)
    dyd = dy.double()
    if op == "log_softmax_backward":
        return dyd - xd.exp() * dyd.sum(-1, keepdim=True)
    return xd * (dyd - (xd * dyd).sum(-1, keepdim=True))


def main(cols_list):
    timer = Timer(torch.device("cuda"), torch.cuda.get_device_properties(0).L2_cache_size, None,
                  SamplingPolicy(min_samples=30, max_seconds=0.5))
    folder = Path(tempfile.mkdtemp())
    for f in loader.kernels_dir().iterdir():
        shutil.copy(f, folder)
    shutil.copy(HERE / "softmax_raw.cu", folder)
    print(torch.cuda.get_device_name(0))
    for op in ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward"):
        backward = op.endswith("backward")
        for dtype in (torch.float16, torch.bfloat16):
            for cols in cols_list:
                plan = s.plan_launch(op, ROWS, cols, dtype, tier="warp") if cols <= (1024 if backward else 2048) else None
                if plan is None:
                    continue
                twin = plan.kernel_name.replace("warp<", "warp_floats<")
                kernel = loader.load(loader.KernelSource("softmax_raw.cu", (twin,)), folder).kernel(twin)
                x = (torch.randn(ROWS, cols, device="cuda") * 3).to(dtype)
                dy = None
                if backward:
                    x = (torch.log_softmax if op.startswith("log") else torch.softmax)(x.float(), -1).to(dtype)
                    dy = torch.randn(ROWS, cols, device="cuda").to(dtype)
                ref = reference(op, x, dy)
                out = torch.empty_like(x)
                stride = np.int64(cols)
                args = ((x, stride, dy, stride, out, stride) if backward else (x, stride, out, stride)) + \
                    (np.int64(ROWS), np.int32(cols))
                nbytes = (3 if backward else 2) * x.numel() * x.element_size()
                line = f"{op:21s} {str(dtype)[6:]:8s} cols={cols:5d} {plan.kernel_name[:52]:52s}"
                for label, k in (("shipped", plan.kernel), ("floats", kernel)):
                    def run(k=k):
                        loader.launch(k, plan.grid, plan.block, args)
                    out.fill_(float("nan"))
                    run()
                    torch.cuda.synchronize()
                    err = (out.double() - ref).abs().max().item()
                    us = timer.cold(run).stats.median_us
                    line += f" | {label} {us:6.1f} us {nbytes / us / 1e3:5.0f} GB/s err {err:.0e}"
                print(line, flush=True)


if __name__ == "__main__":
    main([int(c) for c in sys.argv[1:]] or [128, 256, 512, 1024, 2048])
