"""What CUDA events add to a cold sample: an empty kernel timed with events and with CUPTI.

Usage: python tools/timer_overhead.py [--gpu 0]

The empty kernel runs after the same L2 flush and device sleep as every cold sample, so the
difference of the two medians is the events' own cost, the part of a small case's events time that
is not the kernel. Needs a GPU; the CUPTI column needs the cupti extra.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0, help="CUDA device index")
    args = parser.parse_args(argv)

    import torch

    from bwbench.device import NoGpuError, query_device, require_cuda
    from bwbench.stats import SamplingPolicy
    from bwbench.timing import make_timer, timer_medians

    try:
        device = require_cuda(args.gpu)
    except NoGpuError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    facts = query_device(device)
    timer = make_timer("events", device, facts.l2_bytes, facts.sm_clock_max_mhz,
                       SamplingPolicy(min_samples=100, max_median_error=0.001, max_seconds=2.0))
    medians = timer_medians(timer, lambda: torch.cuda._sleep(0))
    print(f"{facts.gpu_name}: empty kernel, cold, median of each timer")
    print(f"  events {medians.events_us:.2f} µs")
    if medians.cupti_us is None:
        print(f"  CUPTI  unavailable: {medians.cupti_reason}")
        return 1
    print(f"  CUPTI  {medians.cupti_us:.2f} µs")
    print(f"  events add {medians.events_overhead_us:.2f} µs; host cost of the launch {medians.host_us:.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
