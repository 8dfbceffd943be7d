"""First-use timing of a launcher's candidate plans, cold in L2 like `bwbench run`'s samples.

A launcher that leaves several plans for a shape times them once on the caller's own arguments.
Timed back to back, a small problem stays in L2 and the timing ranks plans by how they run from
L2, not from DRAM: a norm plan kept that way once ran 10-17 points below the one it displaced.
So each candidate gets a few of bwbench.timing.Timer's cold samples (L2 flushed, the host's
launch hidden behind a device sleep), the same machinery `bwbench run` times with.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from bwbench.stats import SamplingPolicy
from bwbench.timing import Timer

TIMED_LAUNCHES = 3
"""Timed launches per candidate (the fastest counts), after the Timer's untimed warm-up."""

_TIMERS: dict[int, Timer] = {}


def _timer(device: int) -> Timer:
    """One Timer (and so one L2 flush buffer) per device, made on first use."""
    if device not in _TIMERS:
        props = torch.cuda.get_device_properties(device)
        clock_khz = getattr(props, "clock_rate", 0) or None
        _TIMERS[device] = Timer(device, int(getattr(props, "L2_cache_size", 0) or 0),
                                clock_khz / 1000.0 if clock_khz else None)
    return _TIMERS[device]


def cold_launch_us(run: Callable[[], None], device: int, launches: int = TIMED_LAUNCHES) -> float:
    """Fastest of `launches` cold calls of `run` (microseconds, CUDA events), without the write-back
    a cold sample is charged: every candidate writes the same output, so it would add only noise."""
    policy = SamplingPolicy(min_samples=launches, max_samples=launches, batch=launches, max_seconds=60.0)
    m = _timer(device).cold(run, policy)
    return min(m.samples_us) - (m.detail or {}).get("writeback_us", 0.0)


def fastest(runs: Sequence[Callable[[], None]], device: int) -> int:
    """Index of the fastest of `runs` (the first of equals), each timed by cold_launch_us; a lone
    candidate is not timed."""
    if len(runs) < 2:
        return 0
    times = [cold_launch_us(run, device) for run in runs]
    return times.index(min(times))
