"""One run on one GPU: device facts, timer, copy ceiling, results writer and the case loop.

`bwbench run`, `info`, `profile`, the Python API (`bwbench.run`, `bwbench.bench`) and a fleet worker
all measure through a Session, so a number means the same thing whichever of them produced it.
What crosses a process boundary (WorkItem in, Record and RunDocument out) is a plain, picklable
dataclass; a Session itself stays in the process that owns its GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .results import Record, ResultsWriter, RunDocument
from .runner import AfterTiming, Runner, RunSettings
from .stats import SamplingPolicy, Stats
from .suite import Case, Implementation, Suite

DEFAULT_COPY_BYTES = 4_000_000_000
"""Buffer size of the device copy bandwidth the environment records (capped at a quarter of free memory)."""


@dataclass(frozen=True)
class SessionSettings:
    """How a session measures: timing mode, input seed, when sampling stops, device copy size."""

    timing: str = "cold"
    seed: int = 0
    policy: SamplingPolicy = field(default_factory=SamplingPolicy)
    copy_bytes: int = DEFAULT_COPY_BYTES
    timer: str = "auto"
    """The clock of cold samples: "events", "cupti" or "auto" (CUPTI where it traces, else events)."""

    def run_settings(self) -> RunSettings:
        return RunSettings(timing=self.timing, seed=self.seed, timer=self.timer)


@dataclass(frozen=True)
class WorkItem:
    """One suite's share of a run, as it travels to a worker: the suite by name or file path (the
    worker loads it again), the implementations by name and the cases themselves."""

    suite: str
    impls: tuple[str, ...]
    cases: tuple[Case, ...]


@dataclass
class SuitePlan:
    """One suite of a run, resolved in this process: the suite, its implementations and its cases."""

    suite: Suite
    impls: list[Implementation]
    cases: list[Case]

    def work_item(self) -> WorkItem:
        return WorkItem(self.suite.source or self.suite.name, tuple(i.name for i in self.impls), tuple(self.cases))

    @classmethod
    def from_work_item(cls, item: WorkItem) -> "SuitePlan":
        from .discovery import get_suite

        suite = get_suite(item.suite)
        return cls(suite, suite.select_impls(item.impls), list(item.cases))


@dataclass
class BenchResult:
    """One callable timed as `bwbench run` times an implementation, next to a copy of the same bytes
    measured in the same call through the same timer."""

    median_us: float
    gbps: float
    pct_copy: float | None
    copy_gbps: float | None
    bytes: int
    mode: str
    samples_us: list[float]
    stats: Stats
    pct_peak: float | None = None
    disturbed: bool = False
    """The samples were disturbed (see stats.disturbance): re-measure before trusting or gating."""
    writeback_us: float | None = None
    """Cold only: the part of median_us that is the call's writes, still in L2 when its kernels
    ended, reaching DRAM (see timing.WriteBack)."""

    def __str__(self) -> str:
        copy = f", {self.pct_copy:.1f}% of copy ({self.copy_gbps:,.0f} GB/s)" if self.pct_copy is not None else ""
        return f"{self.median_us:,.2f} µs, {self.gbps:,.0f} GB/s{copy} [{self.mode}, {len(self.samples_us)} samples]"


class MemoryWriter:
    """ResultsWriter's interface without a file: a run the caller keeps in memory."""

    def __init__(self, document: RunDocument, on_add: Callable[[Record], None] | None = None):
        self.document = document
        self.on_add = on_add

    def add(self, record: Record) -> None:
        self.document.records.append(record)
        if self.on_add:
            self.on_add(record)

    def flush(self) -> None:
        pass

    def finish(self, interrupted: bool = False) -> None:
        self.document.complete = not interrupted
        self.document.interrupted = interrupted


def fails_run(record: Record) -> bool:
    """A record that makes a run exit 1: a failure of code under test or of the copy ceiling.
    Baselines that fail or are inexact are reported, not fatal (the run is about the code under test)."""
    return record.status == "failed" and record.role != "baseline"


def check_bench_arguments(fn: Any, nbytes: Any, mode: str) -> int:
    """bench's arguments checked before any GPU work: a callable, a positive whole number of bytes
    (an int, or a number that is one, as numpy's are), a timing mode. Returns the bytes as an int."""
    import numbers

    from .timing import TIMING_MODES

    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, not {type(fn).__name__}")
    if mode not in TIMING_MODES:
        raise ValueError(f"mode must be one of {', '.join(TIMING_MODES)}, not {mode!r}")
    whole = isinstance(nbytes, numbers.Integral) or (isinstance(nbytes, numbers.Real) and float(nbytes).is_integer())
    if isinstance(nbytes, bool) or not whole or int(nbytes) <= 0:
        raise ValueError(f"bytes must be a positive whole number (the bytes fn moves), not {nbytes!r}")
    return int(nbytes)


class Session:
    """Measures on one device. Build it with `Session.open(gpu)`; tests build it from fakes."""

    def __init__(self, device, environment: dict[str, Any], timer, settings: SessionSettings | None = None,
                 telemetry=None):
        self.device = device
        self.environment = environment
        self.timer = timer
        self.settings = settings or SessionSettings()
        self.telemetry = telemetry

    @property
    def peak_gbps(self) -> float | None:
        return self.environment.get("peak_gbps")

    @property
    def gpu_name(self) -> str:
        return self.environment.get("gpu_name") or "gpu"

    @classmethod
    def open(cls, gpu: int = 0, settings: SessionSettings | None = None, *, measure_copy: bool = True,
             telemetry: bool = True) -> "Session":
        """A session on CUDA device `gpu`: its facts, a timer, and (unless measure_copy is False)
        the device copy bandwidth the environment records. Raises NoGpuError without a GPU."""
        import torch

        from .device import query_device, require_cuda
        from .telemetry import Telemetry
        from .timing import make_timer

        settings = settings or SessionSettings()
        device = require_cuda(gpu)
        facts = query_device(device)
        timer = make_timer(settings.timer, device, facts.l2_bytes, facts.sm_clock_max_mhz, settings.policy)
        if measure_copy:
            from .timing import measure_copy_ceiling

            free, _total = torch.cuda.mem_get_info(device)
            facts.copy_bytes = min(settings.copy_bytes, free // 4)
            ceiling = measure_copy_ceiling(timer, facts.copy_bytes)
            facts.copy_gbps, facts.copy_gbps_by_method = ceiling.gbps, ceiling.gbps_by_method
        probe = Telemetry(facts.gpu_uuid, facts.gpu_index) if telemetry else None
        return cls(device, facts.to_dict(), timer, settings, probe)  # kernel_options: the build's NVRTC options

    # --- a run --------------------------------------------------------------------------
    def document(self, plans: Sequence[SuitePlan], options: dict[str, Any] | None = None) -> RunDocument:
        return RunDocument(environment=dict(self.environment), options=dict(options or {}),
                           suites={p.suite.name: p.suite.describe() for p in plans})

    def run(self, work: Iterable[SuitePlan | WorkItem], *, output: str | Path | None = None,
            options: dict[str, Any] | None = None, on_record: Callable[[Record], None] | None = None,
            on_step: Callable[[str], None] | None = None, after_timing: AfterTiming | None = None,
            replace: bool = False) -> RunDocument:
        """Check and time every case of every plan; each record goes to `on_record` and (with
        `output`) to the results file as soon as it is made. Ctrl-C ends the run early: the
        document comes back with `interrupted` set and every record measured so far."""
        plans = [w if isinstance(w, SuitePlan) else SuitePlan.from_work_item(w) for w in work]
        document = self.document(plans, options)
        writer = ResultsWriter(Path(output), document, on_add=on_record, replace=replace) if output is not None \
            else MemoryWriter(document, on_add=on_record)
        runner = Runner(self.device, self.timer, writer, self.settings.run_settings(), self.peak_gbps,
                        self.telemetry, on_step=on_step, after_timing=after_timing)
        interrupted = False
        try:
            for plan in plans:
                for case in plan.cases:
                    runner.run_case(plan.suite, case, plan.impls)
        except KeyboardInterrupt:
            interrupted = True
        writer.finish(interrupted=interrupted)
        return document

    # --- one callable ---------------------------------------------------------------------
    def bench(self, fn: Callable[[], Any], *, nbytes: int, mode: str | None = None) -> BenchResult:
        """Time `fn()` as the case loop times an implementation (same timer, policy and mode), and a
        copy moving the same bytes right before it, as the case loop does."""
        from .stats import disturbance
        from .timing import measure_copy_ceiling

        mode = mode or self.settings.timing
        nbytes = check_bench_arguments(fn, nbytes, mode)
        ceiling = measure_copy_ceiling(self.timer, nbytes // 2, mode)
        m = self.timer.measure(fn, mode)
        gbps = nbytes / (m.stats.median_us * 1e-6) / 1e9
        return BenchResult(median_us=m.stats.median_us, gbps=gbps, pct_copy=100.0 * gbps / ceiling.gbps,
                           copy_gbps=ceiling.gbps, bytes=nbytes, mode=m.mode,
                           samples_us=list(m.samples_us), stats=m.stats,
                           pct_peak=100.0 * gbps / self.peak_gbps if self.peak_gbps else None,
                           disturbed=disturbance(m.stats) is not None,
                           writeback_us=(m.detail or {}).get("writeback_us"))
