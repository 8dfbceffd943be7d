"""Experiment: the forward warp tier with x held as raw 16-byte packs (softmax_raw.cu) against the
shipped kernel (floats), same grid and block, cold-timed with bwbench's Timer after a check against
float64. (The same experiment for the backward, y and dy as raw packs, won and is what
kernels/softmax.cu ships.)

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


def main(cols_list):
    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch.device("cuda"), props.L2_cache_size, None, SamplingPolicy(min_samples=30, max_seconds=0.5))
    folder = Path(tempfile.mkdtemp())
    for f in loader.kernels_dir().iterdir():
        shutil.copy(f, folder)
    shutil.copy(HERE / "softmax_raw.cu", folder)
    print(torch.cuda.get_device_name(0))
    for op in ("softmax", "log_softmax"):
        for dtype in (torch.float16, torch.bfloat16):
            for cols in cols_list:
                plan = s.plan_launch(op, ROWS, cols, dtype)
                if plan.tier != "warp":
                    continue
                raw_name = plan.kernel_name.replace("softmax_warp<", "softmax_warp_raw<")
                module = loader.load(loader.KernelSource("softmax_raw.cu", (raw_name,)), folder)
                kernel = module.kernel(raw_name)
                x = (torch.randn(ROWS, cols, device="cuda") * 3).to(dtype)
                ref = torch.log_softmax(x.double(), -1) if op == "log_softmax" else torch.softmax(x.double(), -1)
                y = torch.full_like(x, float("nan"))
                stride = np.int64(cols)
                args = (x, stride, y, stride, np.int64(ROWS), np.int32(cols))

                def shipped():
                    loader.launch(plan.kernel, plan.grid, plan.block, args)

                def raw():
                    loader.launch(kernel, plan.grid, plan.block, args)

                nbytes = 2 * x.numel() * x.element_size()
                line = f"{op:21s} {str(dtype)[6:]:8s} cols={cols:5d} {plan.kernel_name:50s}"
                for label, fn in (("float", shipped), ("raw", raw)):
                    y.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = (y.double() - ref).abs().max().item()
                    us = timer.cold(fn).stats.median_us
                    line += f" | {label} {us:7.1f} us {nbytes / us / 1e3:5.0f} GB/s err {err:.1e}"
                print(line, flush=True)


if __name__ == "__main__":
    main([int(c) for c in sys.argv[1:]] or [128, 256, 512, 1024, 2048])
