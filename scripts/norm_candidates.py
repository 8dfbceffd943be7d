"""Time every candidate plan the norm launcher would time for a shape, and show which it keeps.

Usage: python3 scripts/norm_candidates.py [--twopass] [--dtype float16] [COLS ...]
(rows 49152; LayerNorm and RMSNorm). Timing is the launcher's own first-use timing (cold L2).
--twopass also times, for each LayerNorm warp-tier candidate, its two-pass twin
(norm_warp<..., true>: exact mean, then the squared deviations) and checks its outputs against
the Welford plan's. A tuning aid for bwbench/cuda/norm.py; `bwbench run` gives the figures to report.
"""

import argparse

import numpy as np
import torch

from bwbench.cuda import loader, norm

ROWS = 49152


def twin_name(kernel: str) -> str:
    return kernel[:-1] + ", true>"


def main(cols_list: list[int], dtype: torch.dtype, twopass: bool) -> None:
    ctype = norm.cpp_type(dtype)
    pack = norm.full_pack(ctype)
    twins = loader.KernelSource("norm.cu", tuple(twin_name(c.name(ctype, False)) for c in norm.warp_configs(ctype)))
    for rms in (False, True):
        for cols in cols_list:
            x = torch.randn(ROWS, cols, device="cuda", dtype=dtype) * 2 + 3
            gamma, beta = torch.randn(cols, device="cuda", dtype=dtype), torch.randn(cols, device="cuda", dtype=dtype)
            y = torch.full_like(x, float("nan"))
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
                if twopass and not rms and candidate.tier == "warp":
                    torch.cuda.synchronize()
                    ref = (y.clone(), mean.clone(), rstd.clone())
                    y.fill_(float("nan"))
                    twin = norm._launch_of(norm.NormPlan(**{**candidate.__dict__, "kernel": twin_name(candidate.kernel),
                                                            "alternatives": ()}),
                                           loader.load(twins), device, ROWS)
                    us = min(norm._time_us(twin, args, device) for _ in range(3))
                    torch.cuda.synchronize()
                    dy = (y.float() - ref[0].float()).abs().max().item()
                    dm = (mean - ref[1]).abs().max().item()
                    dr = ((rstd - ref[2]) / ref[2]).abs().max().item()
                    rows.append((us, f"{twin.plan.kernel} [max |dy| {dy:.2g}, |dmean| {dm:.2g}, rel drstd {dr:.2g}]",
                                 candidate.block, twin.grid))
            name = "rmsnorm" if rms else "layernorm"
            for us, kernel, block, grid in sorted(rows)[:8]:
                print(f"{name} {ctype} cols={cols}: {us:8.1f} us {nbytes / us / 1e3:7.0f} GB/s  {kernel} block={block} grid={grid}")
            print(flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cols", nargs="*", type=int, default=[2048, 4096, 8192, 16384, 32768])
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    parser.add_argument("--twopass", action="store_true")
    ns = parser.parse_args()
    main(ns.cols, getattr(torch, ns.dtype), ns.twopass)
