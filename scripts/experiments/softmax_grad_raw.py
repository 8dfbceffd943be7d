"""Experiment: the backward warp tier with y and dy held as raw 16-byte packs (softmax_grad_raw.cu)
against the shipped kernel (floats), same grid and block, cold-timed with bwbench's Timer after a
check against float64.

Usage: python3 scripts/experiments/softmax_grad_raw.py [COLS ...]   (rows 49152, float16 and bfloat16)
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


def main(cols_list):
    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch.device("cuda"), props.L2_cache_size, None, SamplingPolicy(min_samples=30, max_seconds=0.5))
    folder = Path(tempfile.mkdtemp())
    for f in loader.kernels_dir().iterdir():
        shutil.copy(f, folder)
    shutil.copy(HERE / "softmax_grad_raw.cu", folder)
    print(torch.cuda.get_device_name(0))
    for op in ("softmax_backward", "log_softmax_backward"):
        for dtype in (torch.float16, torch.bfloat16):
            for cols in cols_list:
                plan = s.plan_launch(op, ROWS, cols, dtype)
                if plan.tier != "warp":
                    continue
                raw_name = plan.kernel_name.replace("softmax_grad_warp<", "softmax_grad_warp_raw<")
                module = loader.load(loader.KernelSource("softmax_grad_raw.cu", (raw_name,)), folder)
                kernel = module.kernel(raw_name)
                x = torch.randn(ROWS, cols, device="cuda")
                y = (torch.log_softmax(x, -1) if op.startswith("log") else torch.softmax(x, -1)).to(dtype)
                dy = torch.randn(ROWS, cols, device="cuda").to(dtype)
                yd, dyd = y.double(), dy.double()
                ref = (dyd - yd.exp() * dyd.sum(-1, keepdim=True)) if op.startswith("log") else \
                    yd * (dyd - (yd * dyd).sum(-1, keepdim=True))
                dx = torch.full_like(y, float("nan"))
                stride = np.int64(cols)
                args = (y, stride, dy, stride, dx, stride, np.int64(ROWS), np.int32(cols))

                def shipped():
                    loader.launch(plan.kernel, plan.grid, plan.block, args)

                def raw():
                    loader.launch(kernel, plan.grid, plan.block, args)

                nbytes = 3 * y.numel() * y.element_size()
                line = f"{op:21s} {str(dtype)[6:]:8s} cols={cols:5d} {plan.kernel_name:50s}"
                for label, fn in (("float", shipped), ("raw", raw)):
                    dx.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = (dx.double() - ref).abs().max().item()
                    us = timer.cold(fn).stats.median_us
                    line += f" | {label} {us:7.1f} us {nbytes / us / 1e3:5.0f} GB/s err {err:.1e}"
                print(line, flush=True)


if __name__ == "__main__":
    main([int(c) for c in sys.argv[1:]] or [128, 256, 512, 1024])
