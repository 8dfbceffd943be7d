"""Experiment: is the same-size copy ceiling bimodal with buffer placement? (H200, 2026-11-22)

Allocates several src/dst pairs of the same size (keeping earlier ones alive so each pair lands
elsewhere) and times cudaMemcpy D2D (dst.copy_(src)) and an SM elementwise kernel (torch.neg) on
each, cold, with bwbench's timer.
"""
import torch

from bwbench.device import query_device, require_cuda
from bwbench.stats import SamplingPolicy
from bwbench.timing import Timer

dev = require_cuda(0)
info = query_device(dev)
timer = Timer(dev, info.l2_bytes, info.sm_clock_max_mhz, SamplingPolicy(max_seconds=0.3))
keep = []
for nbytes in (200_000_000, 1_600_000_000, 3_200_000_000):
    for trial in range(5):
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).uniform_()
        dst = torch.empty_like(src)
        keep.append((src, dst))
        memcpy = timer.cold(lambda: dst.copy_(src)).stats.median_us
        neg = timer.cold(lambda: torch.neg(src, out=dst)).stats.median_us
        print(f"{nbytes/1e9:5.2f} GB trial {trial}: memcpy {2*nbytes/memcpy/1e3:7.0f} GB/s  neg-kernel "
              f"{2*nbytes/neg/1e3:7.0f} GB/s  src {src.data_ptr():#x} dst {dst.data_ptr():#x} "
              f"delta {(dst.data_ptr()-src.data_ptr())/2**20:.0f} MiB", flush=True)
    keep.clear()
    torch.cuda.empty_cache()
