"""Summary statistics of timing samples, and the stopping rule for sampling.

Pure Python on purpose: the numbers a gate or a report reads must not depend on a GPU being present.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, asdict
from typing import Sequence


@dataclass(frozen=True)
class Stats:
    """Timing statistics of one implementation on one case, in microseconds."""

    count: int
    min_us: float
    p10_us: float
    median_us: float
    p90_us: float
    max_us: float
    mean_us: float
    stdev_us: float
    noise: float
    """Robust relative spread of the samples: (p90 - p10) / (2.563 * median), which equals
    stdev / mean for normal noise but is not blown up by a few launch-latency outliers."""
    median_error: float
    """Relative standard error of the median (1.2533 * noise / sqrt(count)): how well the headline
    number is pinned down. Sampling stops once this settles below the target."""
    converged: bool
    """True when sampling stopped because the median settled, False when it hit a time or count cap."""

    def to_dict(self) -> dict:
        return asdict(self)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of an already sorted sequence."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return float(sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac)


P10_P90_SIGMAS = 2.5631
"""Width of the 10th-90th percentile interval of a normal distribution, in standard deviations."""


def relative_noise(samples: Sequence[float]) -> float:
    """Robust relative spread; infinite with fewer than two samples."""
    if len(samples) < 2:
        return math.inf
    ordered = sorted(samples)
    median = percentile(ordered, 50)
    if median <= 0:
        return math.inf
    return (percentile(ordered, 90) - percentile(ordered, 10)) / (P10_P90_SIGMAS * median)


def median_error(samples: Sequence[float]) -> float:
    """Relative standard error of the median, from the robust spread."""
    if len(samples) < 2:
        return math.inf
    return 1.2533 * relative_noise(samples) / math.sqrt(len(samples))


DISTURBED_MEDIAN_OVER_P10 = 1.25
"""A sample set whose median is this many times its p10 was disturbed (another process on the GPU,
moving clocks): in the reference runs (2,281 records on an H100 and an H200, cold L2) the median
never passed 1.12x the p10, while a ReLU forward record of 2026-11-22 that passed as ok sat at 1.7x
(p10 9.4 us, median 15.7 us, p90 74 us)."""


DISTURBED_WARNING = "disturbed samples:"
"""How `disturbance`'s warning starts: the gate finds disturbed records by it."""


def disturbance(stats: Stats) -> str | None:
    """A warning for a record whose samples were disturbed (see DISTURBED_MEDIAN_OVER_P10), or None.
    Its median is not the kernel's speed: re-run the case rather than trust or gate on it."""
    if stats.count < 2 or stats.p10_us <= 0 or stats.median_us <= DISTURBED_MEDIAN_OVER_P10 * stats.p10_us:
        return None
    return (f"{DISTURBED_WARNING} the median ({stats.median_us:.1f} us) is {stats.median_us / stats.p10_us:.2f}x "
            f"the p10 ({stats.p10_us:.1f} us); something else used the GPU or its clocks moved - re-run this case")


def summarize(samples_us: Sequence[float], converged: bool) -> Stats:
    if not samples_us:
        raise ValueError("no timing samples to summarize")
    ordered = sorted(float(s) for s in samples_us)
    return Stats(
        count=len(ordered),
        min_us=ordered[0],
        p10_us=percentile(ordered, 10),
        median_us=percentile(ordered, 50),
        p90_us=percentile(ordered, 90),
        max_us=ordered[-1],
        mean_us=statistics.fmean(ordered),
        stdev_us=statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
        noise=relative_noise(ordered) if len(ordered) > 1 else 0.0,
        median_error=median_error(ordered) if len(ordered) > 1 else 0.0,
        converged=converged,
    )


@dataclass(frozen=True)
class SamplingPolicy:
    """When to stop taking samples: the median's relative standard error settles below
    `max_median_error` after `min_samples`, or `max_seconds` of wall time or `max_samples` samples
    are spent (then the result is recorded as not converged)."""

    min_samples: int = 20
    max_samples: int = 2000
    max_median_error: float = 0.002
    max_seconds: float = 1.0
    batch: int = 10

    def done(self, samples: Sequence[float], elapsed_s: float) -> tuple[bool, bool]:
        """(stop, converged) after these samples and this much wall time."""
        n = len(samples)
        if n >= self.min_samples and median_error(samples) <= self.max_median_error:
            return True, True
        if n >= self.max_samples or (elapsed_s >= self.max_seconds and n >= min(self.min_samples, 5)):
            return True, False
        return False, False
