"""Time every candidate plan the norm launcher would time for a shape, and show which it keeps.

Usage: python3 scripts/norm_candidates.py [--dtype float16] [COLS ...]
(rows 49152; LayerNorm and RMSNorm). Timing is the launcher's own first-use timing (cold L2).
A tuning aid for bwbench/cuda/norm.py; `bwbench run` gives the figures to report.
"""

import argparse

import numpy as np
import torch

from bwbench.cuda import norm

ROWS = 49152


def main(cols_list: list[int], dtype: torch.dtype) -> None:
    ctype = norm.cpp_type(dtype)
    pack = norm.full_pack(ctype)
    for rms in (False, True):
        for cols in cols_list:
            x = torch.randn(ROWS, cols, device="cuda", dtype=dtype) * 2 + 3
            gamma, beta = torch.randn(cols, device="cuda", dtype=dtype), torch.randn(cols, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            mean, rstd = torch.empty(ROWS, device="cuda"), torch.empty(ROWS, device="cuda")
            args = (x, gamma, None if rms else beta, y, None if rms else mean, rstd,
                    np.int32(ROWS), np.int32(cols), np.float32(1e-5))
            chosen, module, device = norm._model_plan(x, rms, pack, None, None)
            nbytes = 2 * x.numel() * x.element_size()
            rows = []
            for candidate in chosen.candidates:
                step = norm._launch_of(candidate, module, device, ROWS)
                us = min(norm._time_us(step, args, device) for _ in range(3))
                rows.append((us, candidate.kernel, candidate.block, step.grid))
            name = "rmsnorm" if rms else "layernorm"
            for us, kernel, block, grid in sorted(rows)[:6]:
                print(f"{name} {ctype} cols={cols}: {us:8.1f} us {nbytes / us / 1e3:7.0f} GB/s  {kernel} block={block} grid={grid}")
            print(flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cols", nargs="*", type=int, default=[2048, 4096, 8192, 16384, 32768])
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    ns = parser.parse_args()
    main(ns.cols, getattr(torch, ns.dtype))
