"""Results documents of the softmax suite as a GPU run records them, made from a seeded model
instead of a GPU: the gate and report tests need two runs of the same code that differ only by
run-to-run noise, and the shape of real records (copy ceiling, baselines, raw samples, stats).

The model, close to what an H200 records for the default softmax sweep (float16, 49152 rows):
- a kernel's time is a launch latency plus its bytes over its bandwidth, a fixed fraction of the
  copy's for each implementation (the naive five kernels about a tenth);
- samples scatter around that time by 1% (3% for cases under 64 MB, which take a few
  microseconds) with a few slow outliers, as launch jitter makes them;
- a rerun moves each record's median by a seeded drift of up to 1% (2% under 64 MB), the spread
  two runs of unchanged code show: never a 5% drop, so a gate at 5% must find nothing.
"""

from __future__ import annotations

import random

from bwbench.results import Check, Record, RunDocument
from bwbench.stats import summarize
from bwbench.suite import COPY_IMPL

ROWS = 49152
COLS = [2**k for k in range(5, 16)]  # 32 ... 32768
DTYPE = "float16"
ITEMSIZE = 2
COPY_GBPS = 4300.0
LAUNCH_US = 3.5
SMALL_BYTES = 64_000_000
IMPLEMENTATIONS = {  # name: (kind, fraction of the copy's bandwidth)
    COPY_IMPL: ("ceiling", 1.0),
    "naive": ("naive", 0.10),
    "cudnn": ("cudnn", 0.70),
    "torch": ("torch", 0.78),
    "compiled": ("compiled", 0.92),
}
SAMPLES = 48


def case_name(cols: int) -> str:
    return f"rows={ROWS},cols={cols}"


def model_time_us(nbytes: int, fraction: float) -> float:
    return LAUNCH_US + nbytes / (COPY_GBPS * fraction * 1e9) * 1e6


def samples_around(center_us: float, spread: float, rng: random.Random) -> list[float]:
    """SAMPLES timings around `center_us`: normal scatter, and one in twelve 20-40% slower."""
    values = [center_us * (1 + rng.gauss(0, spread)) for _ in range(SAMPLES)]
    for i in range(0, SAMPLES, 12):
        values[i] *= 1.2 + 0.2 * rng.random()
    return values


def softmax_run(run: int, gpu: str = "NVIDIA H200") -> RunDocument:
    """Run `run` (1, 2, ...) of the default softmax sweep; runs share the model and differ by drift
    and sample noise only."""
    drift_rng = random.Random(1000 + run)
    noise_rng = random.Random(run)
    records = []
    for cols in COLS:
        nbytes = 2 * ROWS * cols * ITEMSIZE  # x read once, y written once
        small = nbytes < SMALL_BYTES
        copy_gbps = None
        for impl, (kind, fraction) in IMPLEMENTATIONS.items():
            drift = 1 + (drift_rng.uniform(-0.02, 0.02) if small else drift_rng.uniform(-0.01, 0.01))
            samples = samples_around(model_time_us(nbytes, fraction) * drift, 0.03 if small else 0.01, noise_rng)
            stats = summarize(samples, converged=True)
            gbps = nbytes / (stats.median_us * 1e-6) / 1e9
            if impl == COPY_IMPL:
                copy_gbps = gbps
            check = None if impl == COPY_IMPL else Check(passed=True, max_abs_err=2.4e-4, rtol=2e-3, atol=1e-6)
            records.append(Record(
                suite="softmax", case=case_name(cols), params={"rows": ROWS, "cols": cols}, dtype=DTYPE,
                impl=impl, kind=kind, status="ok", bytes_read=nbytes // 2, bytes_written=nbytes // 2,
                bytes_total=nbytes, timing="cold", stats=stats.to_dict(), samples_us=samples, gbps=gbps,
                copy_gbps=copy_gbps, pct_copy=100 * gbps / copy_gbps, pct_peak=100 * gbps / 4814.3,
                check=None if check is None else vars(check)))
    environment = {"gpu_name": gpu, "peak_gbps": 4814.3, "copy_gbps": COPY_GBPS, "git_commit": "0000000",
                   "bwbench_version": "0.1.0"}
    options = {"suite": "softmax", "timing": "cold", "max_time": 1.0, "seed": 0}
    suites = {"softmax": {"description": "y = softmax(x, dim=-1) for x of shape (rows, cols)",
                          "axes": {"rows": [str(ROWS)], "cols": [str(c) for c in COLS]}, "x_axis": "cols",
                          "dtypes": [DTYPE],
                          "implementations": {name: {"kind": kind, "description": name}
                                              for name, (kind, _) in IMPLEMENTATIONS.items() if name != COPY_IMPL}}}
    return RunDocument(environment=environment, options=options, suites=suites, records=records, complete=True)
