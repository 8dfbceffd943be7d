"""Time every compiled tiled-kernel configuration that fits a permute case, next to the planner's.

Usage: python3 scripts/permute_configs.py [SHAPE:PERM:DTYPE ...]
e.g. 64x256x256:0,2,1:float16 (the defaults are the float16 cases furthest from their targets).
Each configuration is checked bit for bit against torch, then timed cold (bwbench's Timer: L2
flushed before every sample). A tuning aid for bwbench/permute_plan.py; `bwbench run permute`
gives the figures to report.
"""

import sys

import torch

from bwbench.cuda import permute as launcher
from bwbench.permute_plan import TilePlan, compiled_tile_configs
from bwbench.stats import SamplingPolicy
from bwbench.timing import Timer

DEFAULT_CASES = ("64x256x256:0,2,1:float16", "33x1000x1001:0,2,1:float16", "1000x1001:1,0:float16",
                 "64x512x512:0,2,1:float16", "8192x8192:1,0:float16", "64x256x256:0,2,1:float32")


def parse(case: str):
    shape, perm, dtype = case.split(":")
    return (tuple(int(s) for s in shape.split("x")), tuple(int(p) for p in perm.split(",")), getattr(torch, dtype))


def main(cases) -> None:
    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch.device("cuda"), props.L2_cache_size, None, SamplingPolicy(min_samples=30, max_seconds=0.5))
    for case in cases:
        shape, perm, dtype = parse(case)
        x = torch.randn(shape, device="cuda").to(dtype)
        expected = x.permute(perm).contiguous()
        out = torch.empty_like(expected)
        nbytes = 2 * x.numel() * x.element_size()
        copy_src, copy_dst = torch.empty_like(x), torch.empty_like(x)
        copy = timer.cold(lambda: copy_dst.copy_(copy_src)).stats.median_us
        chosen = launcher.plan_for(x, perm, out).kernel
        rows = []
        configs = [c for c in compiled_tile_configs() if c.itemsize == x.element_size()]
        for config in configs if isinstance(chosen, TilePlan) else [None]:
            try:
                launcher.permute(x, perm, out=out.fill_(0), config=config)
            except ValueError:
                continue
            if not torch.equal(out, expected):
                rows.append((float("inf"), f"{config}: WRONG OUTPUT"))
                continue
            us = timer.cold(lambda config=config: launcher.permute(x, perm, out=out, config=config)).stats.median_us
            mark = " <- planner" if config is None or config == chosen.config else ""
            rows.append((us, f"{config}{mark}"))
        print(f"{case}: {nbytes / 2**20:.0f} MiB moved, copy {copy:.1f} us ({nbytes / copy / 1e3:.0f} GB/s)")
        for us, what in sorted(rows)[:10]:
            print(f"  {us:8.1f} us {nbytes / us / 1e3:6.0f} GB/s {copy / us:5.0%} of copy  {what}")
        print(flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT_CASES)
