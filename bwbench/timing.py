"""Timing GPU work with CUDA events: cold (L2 flushed before every sample) or hot (CUDA graph replay).

Cold is the default because a memory-bound kernel's honest bandwidth is the DRAM's, not the L2's:
before every sample a buffer twice the L2 size is read (a read leaves clean lines, so no write-back
of the flush lands inside the timed region), then a device-side sleep keeps the GPU busy while the
host enqueues the implementation, so launch overhead on the host is not timed as idle GPU.
Only the implementation sits between the two events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from .stats import SamplingPolicy, Stats, summarize

TIMING_MODES = ("cold", "hot")

MIN_HIDE_LAUNCH_US = 20.0
MAX_HIDE_LAUNCH_US = 5000.0
"""Bounds of the device-side sleep before each cold sample. Within them the sleep is twice the
implementation's measured host-side launch cost, so the GPU never waits on the host inside the
timed region (torch.compile guards or a chain of launches can take tens of microseconds)."""

HOT_GRAPH_TARGET_US = 2000.0
"""A hot sample replays enough launches in one graph to run for about this long."""


@dataclass
class Measurement:
    """Raw samples (microseconds per call) and their statistics."""

    mode: str
    samples_us: list[float]
    stats: Stats
    launches_per_sample: int = 1


class Timer:
    """Times callables on one device; owns the L2 flush buffer and the CUDA events."""

    def __init__(self, device, l2_bytes: int, sm_clock_mhz: float | None, policy: SamplingPolicy | None = None):
        import torch

        self.torch = torch
        self.device = device
        self.policy = policy or SamplingPolicy()
        flush_bytes = max(2 * int(l2_bytes), 64 << 20)
        self._flush_src = torch.ones(flush_bytes // 4, dtype=torch.float32, device=device)
        self._flush_out = torch.empty((), dtype=torch.float32, device=device)
        self._cycles_per_us = sm_clock_mhz or 1500.0

    # --- cold --------------------------------------------------------------------------
    def flush_l2(self) -> None:
        self.torch.sum(self._flush_src, dim=0, out=self._flush_out)

    def _host_launch_us(self, fn: Callable[[], Any], calls: int = 5) -> float:
        """Host time to enqueue one call (no synchronisation inside the loop)."""
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        host_us = (time.perf_counter() - began) * 1e6 / calls
        self.torch.cuda.synchronize(self.device)
        return host_us

    def _hide_launch(self, sleep_us: float) -> None:
        sleep = getattr(self.torch.cuda, "_sleep", None)
        if sleep is not None:
            sleep(int(sleep_us * self._cycles_per_us))

    def cold(self, fn: Callable[[], Any], policy: SamplingPolicy | None = None) -> Measurement:
        policy = policy or self.policy
        torch = self.torch
        fn()  # warm-up: lazy initialisation, allocator growth, autotuning caches
        torch.cuda.synchronize(self.device)
        sleep_us = min(MAX_HIDE_LAUNCH_US, max(MIN_HIDE_LAUNCH_US, 2.0 * self._host_launch_us(fn)))
        samples: list[float] = []
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(policy.batch)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(policy.batch)]
        began = time.perf_counter()
        while True:
            for start, end in zip(starts, ends):
                self.flush_l2()
                self._hide_launch(sleep_us)
                start.record()
                fn()
                end.record()
            ends[-1].synchronize()
            samples.extend(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))
            stop, converged = policy.done(samples, time.perf_counter() - began)
            if stop:
                return Measurement("cold", samples, summarize(samples, converged))

    # --- hot ---------------------------------------------------------------------------
    def hot(self, fn: Callable[[], Any], policy: SamplingPolicy | None = None,
            max_launches: int = 1000) -> Measurement:
        """Back-to-back launches replayed from one CUDA graph: the per-launch time with warm caches
        and no host overhead, for shapes so small that launch latency is what a cold sample sees."""
        policy = policy or self.policy
        torch = self.torch
        estimate = self.cold(fn, SamplingPolicy(min_samples=5, max_samples=5, max_seconds=0.2, batch=5))
        launches = int(max(1, min(max_launches, HOT_GRAPH_TARGET_US // max(estimate.stats.median_us, 1.0))))
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm up on a side stream, as graph capture requires
            fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(launches):
                fn()
        graph.replay()
        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples: list[float] = []
        began = time.perf_counter()
        while True:
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0 / launches)
            stop, converged = policy.done(samples, time.perf_counter() - began)
            if stop:
                del graph
                return Measurement("hot", samples, summarize(samples, converged), launches)

    def measure(self, fn: Callable[[], Any], mode: str = "cold") -> Measurement:
        if mode == "cold":
            return self.cold(fn)
        if mode == "hot":
            return self.hot(fn)
        raise ValueError(f"timing mode {mode!r} is not one of {TIMING_MODES}")


def copy_callables(device, nbytes: int) -> dict[str, Callable[[], Any]]:
    """Two ways to move nbytes device to device (2 * nbytes of traffic each): cudaMemcpyAsync
    (torch's copy_ of contiguous same-dtype tensors) and an SM elementwise kernel that writes an
    exact copy (int32 x + 0), on one freshly allocated source and destination."""
    import torch

    words = max(4, int(nbytes) // 16 * 4)
    src = torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device=device)
    dst = torch.empty_like(src)
    return {"memcpy": lambda: dst.copy_(src), "kernel": lambda: torch.add(src, 0, out=dst)}


@dataclass
class CopyCeiling:
    """The same-size copy an implementation is compared with: the faster method's measurement."""

    nbytes: int
    gbps: float
    method: str
    gbps_by_method: dict[str, float]
    measurement: Measurement


COPY_PLACEMENTS = 2
"""Buffer pairs the ceiling is measured on. On an H200 a same-size copy came out about 10% slower
on some source/destination pairs than on others (memcpy alone in one run, memcpy and the copy
kernel together in another) while the kernels under test were steady, so the ceiling is the
fastest of both methods on two pairs: what the card can do for that size, never a slow draw."""


def measure_copy_ceiling(timer: Timer, nbytes: int, mode: str = "cold",
                         make_copies: Callable[[Any, int], dict[str, Callable[[], Any]]] = copy_callables,
                         placements: int = COPY_PLACEMENTS) -> CopyCeiling:
    """GB/s of copying a buffer of nbytes, counting bytes read plus bytes written."""
    nbytes = max(16, int(nbytes) // 16 * 16)
    held, results = [], {}
    for placement in range(placements):
        try:
            copies = make_copies(timer.device, nbytes)  # allocated while earlier pairs are held
        except Exception as err:  # noqa: BLE001 - no room for another pair: the ones measured stand
            if placement == 0 or "out of memory" not in str(err).lower():
                raise
            break
        held.append(copies)
        for name, fn in copies.items():
            results[name if placement == 0 else f"{name}#{placement + 1}"] = timer.measure(fn, mode)
    del held
    gbps = {name: 2 * nbytes / (m.stats.median_us * 1e-6) / 1e9 for name, m in results.items()}
    best = max(gbps, key=gbps.get)
    return CopyCeiling(nbytes, gbps[best], best, gbps, results[best])


def measure_copy_bandwidth(timer: Timer, nbytes: int, mode: str = "cold") -> tuple[float, Measurement]:
    """The device's copy bandwidth for a buffer of nbytes (the faster of memcpy and a copy kernel)."""
    ceiling = measure_copy_ceiling(timer, nbytes, mode)
    return ceiling.gbps, ceiling.measurement
