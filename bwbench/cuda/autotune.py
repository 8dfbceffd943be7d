"""First-use timing of a launcher's candidate plans, cold in L2 like `bwbench run`'s samples.

A launcher that leaves several plans for a shape times them once on the caller's own arguments.
Timed back to back, a small problem stays in L2 and the timing ranks plans by how they run from
L2, not from DRAM: a norm plan kept that way once ran 10-17 points below the one it displaced.
So every timed launch here follows a read of a buffer twice the L2 size, as in bwbench.timing.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

TIMED_LAUNCHES = 3
"""Timed launches per candidate (the fastest counts), after one untimed warm-up."""

MIN_HIDE_US, MAX_HIDE_US = 20.0, 2000.0
"""Bounds of the device-side sleep that hides the host's launch cost (as bwbench.timing's)."""

_FLUSH_BUFFERS: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _flush_buffer(device: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A buffer twice the device's L2 (at least 64 MiB) and a scalar to sum it into, made once."""
    if device not in _FLUSH_BUFFERS:
        l2_bytes = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        nbytes = max(2 * l2_bytes, 64 << 20)
        source = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        _FLUSH_BUFFERS[device] = (source, torch.empty((), dtype=torch.float32, device=device))
    return _FLUSH_BUFFERS[device]


def _clock_mhz(device: int) -> float:
    """SM clock for converting the sleep to cycles (torch reports kHz; 1500 MHz if unknown)."""
    rate_khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 0) or 1_500_000
    return rate_khz / 1000.0


def _host_us(run: Callable[[], None], calls: int = 3) -> float:
    """Host time to enqueue one call."""
    began = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - began) * 1e6 / calls


def cold_launch_us(run: Callable[[], None], device: int, launches: int = TIMED_LAUNCHES) -> float:
    """Fastest of `launches` calls of `run` (microseconds, CUDA events), each after an L2 flush.

    Between the flush and the start event the GPU sleeps for twice the host's enqueue time, so the
    GPU does not wait on the host inside the timed region (a Python launch costs tens of
    microseconds, as long as a small kernel)."""
    source, total = _flush_buffer(device)
    run()
    sleep_cycles = int(min(MAX_HIDE_US, max(MIN_HIDE_US, 2.0 * _host_us(run))) * _clock_mhz(device))
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(launches)]
    for start, end in events:
        torch.sum(source, dim=0, out=total)
        torch.cuda._sleep(sleep_cycles)
        start.record()
        run()
        end.record()
    torch.cuda.synchronize(device)
    return min(start.elapsed_time(end) for start, end in events) * 1000.0
