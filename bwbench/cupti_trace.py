"""Kernel and copy times from CUPTI's activity records, attributed to the timed call that launched them.

CUDA events bracket a call on the stream, so what they measure includes the two event records and
the gaps around them (about 2 µs on an H100, as much as a small kernel's whole run). CUPTI stamps
the start and end of every kernel, memcpy and memset on the device itself. To know which records
belong to which sample, each timed call runs inside its own external correlation id: CUPTI tags
every CUDA API call made inside the bracket with that id, and every kernel or copy carries the
correlation id of the API call that launched it. The L2 flush and the device sleep before a sample
are launched outside any bracket, so they never count. Where a CUPTI build gives no external
correlation records, the API calls that started inside the sample's host time window (CUPTI's own
clock, read at both ends of the bracket) tie the kernels to it instead.

cupti-python is an optional extra (`pip install 'bwbench[cupti]'`); everything here that does not
talk to it is pure Python, so the attribution is tested without a GPU.
"""

from __future__ import annotations

import atexit
import bisect
import itertools
import statistics
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

INSTALL_HINT = ("install the 'cupti' extra of bwbench, i.e. pip install 'cupti-python~=13.0.0' "
                "(the series that matches the CUPTI library of CUDA 13.0)")

NAME_CHARS = 160
"""Kernel names kept in a record are cut to this length (templated names run to kilobytes)."""

BUFFER_BYTES = 8 << 20
"""Size of each activity buffer handed to CUPTI; one holds tens of thousands of records."""


class CuptiUnavailable(RuntimeError):
    """cupti-python cannot be imported, or CUPTI does not trace kernels here: said plainly."""


class CuptiAttributionError(RuntimeError):
    """A timed sample came back without a complete kernel or copy record: its time is unknown."""


def load_cupti():
    """The cupti-python module, or CuptiUnavailable with the reason."""
    try:
        from cupti import cupti
    except ImportError as err:
        raise CuptiUnavailable(f"cupti-python is not importable ({err}); {INSTALL_HINT}") from None
    except Exception as err:  # noqa: BLE001 - a broken install (missing CUPTI library) is a reason, not a crash
        raise CuptiUnavailable(f"cupti-python failed to load ({type(err).__name__}: {err})") from None
    return cupti


@dataclass(frozen=True)
class GpuActivity:
    """One kernel, memcpy or memset as the device ran it (CUPTI timestamps, nanoseconds)."""

    kind: str
    start_ns: int
    end_ns: int
    correlation_id: int
    name: str = ""

    @property
    def complete(self) -> bool:
        return self.start_ns > 0 and self.end_ns >= self.start_ns


@dataclass(frozen=True)
class SampleTime:
    """One timed call: the span from its first start to its last end (the headline, what a user
    waits for) and the sum of its kernels' and copies' own durations (the span less the gaps
    between launches); `activities` is how many kernels and copies it ran (None for CUDA events)."""

    span_us: float
    sum_us: float
    activities: int | None = None
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApiCall:
    """A CUDA runtime or driver call on the host (CUPTI timestamps, nanoseconds)."""

    start_ns: int
    correlation_id: int


def correlations_in_windows(calls: Iterable[ApiCall], windows: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Sample id by correlation id, for API calls that started inside a sample's host time window."""
    ordered = sorted(windows.items(), key=lambda item: item[1][0])
    starts = [w[0] for _, w in ordered]
    found: dict[int, int] = {}
    for call in calls:
        i = bisect.bisect_right(starts, call.start_ns) - 1
        if i >= 0 and call.start_ns <= ordered[i][1][1]:
            found[call.correlation_id] = ordered[i][0]
    return found


def attribute(activities: Iterable[GpuActivity], external_ids: dict[int, int]) -> dict[int, list[GpuActivity]]:
    """Group activities by the external id their launching API call ran under. Activities whose
    correlation id has no external id (the flush, the sleep, anything launched outside a sample's
    bracket) are left out."""
    grouped: dict[int, list[GpuActivity]] = {}
    for act in activities:
        sample = external_ids.get(act.correlation_id)
        if sample is not None:
            grouped.setdefault(sample, []).append(act)
    return grouped


def sample_time(acts: Sequence[GpuActivity]) -> SampleTime:
    """Span and sum of one sample's activities."""
    if not acts:
        raise CuptiAttributionError("no kernel or copy was traced for this sample")
    if not all(a.complete for a in acts):
        raise CuptiAttributionError("a kernel or copy of this sample has no end timestamp")
    ordered = sorted(acts, key=lambda a: a.start_ns)
    span_ns = max(a.end_ns for a in ordered) - ordered[0].start_ns
    sum_ns = sum(a.end_ns - a.start_ns for a in ordered)
    return SampleTime(span_ns / 1e3, sum_ns / 1e3, len(ordered), tuple(a.name for a in ordered))


def sample_times(activities: Iterable[GpuActivity], external_ids: dict[int, int],
                 sample_ids: Sequence[int]) -> list[SampleTime]:
    """One SampleTime per sample id, in order; CuptiAttributionError names the first sample that
    has no complete record (a call that launched nothing on the GPU cannot be timed this way)."""
    grouped = attribute(activities, external_ids)
    times = []
    for position, sample in enumerate(sample_ids):
        try:
            times.append(sample_time(grouped.get(sample, [])))
        except CuptiAttributionError as err:
            raise CuptiAttributionError(f"sample {position + 1} of {len(sample_ids)}: {err}") from None
    return times


def summarize_sums(times: Sequence[SampleTime]) -> dict[str, Any]:
    """What a record keeps beside the span samples: the sum's median and spread, and how many
    kernels and copies a call ran (with the first call's kernel names)."""
    sums = sorted(t.sum_us for t in times)
    counts = [t.activities for t in times if t.activities is not None]
    detail: dict[str, Any] = {
        "span_median_us": statistics.median(t.span_us for t in times),
        "sum_median_us": statistics.median(sums),
        "sum_min_us": sums[0],
        "sum_max_us": sums[-1],
    }
    if counts:
        detail["activities_per_call"] = statistics.median(counts)
        detail["activities_per_call_range"] = [min(counts), max(counts)]
        detail["names"] = [name[:NAME_CHARS] for name in times[0].names[:16]]
    return detail


_sample_ids = itertools.count(1)


def next_sample_ids(count: int) -> list[int]:
    """Fresh external ids, unique in the process, so a late record can never land in a later sample."""
    return [next(_sample_ids) for _ in range(count)]


class _Sink:
    """Where CUPTI's buffer callbacks put what they read (copied out: the buffer is reused)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.activities: list[GpuActivity] = []
        self.external_ids: dict[int, int] = {}
        self.api_calls: list[ApiCall] = []

    def take(self) -> tuple[list[GpuActivity], dict[int, int], list[ApiCall]]:
        with self.lock:
            taken = self.activities, self.external_ids, self.api_calls
            self.activities, self.external_ids, self.api_calls = [], {}, []
        return taken


_sinks: dict[int, _Sink] = {}
"""One sink per cupti module object: CUPTI takes one pair of buffer callbacks per process."""


def _sink_for(cupti) -> _Sink:
    key = id(cupti)
    if key not in _sinks:
        sink = _Sink()
        kinds = cupti.ActivityKind
        kernel_kinds = {int(kinds.CONCURRENT_KERNEL), int(kinds.KERNEL)}
        copy_kinds = {int(kinds.MEMCPY): "memcpy", int(kinds.MEMSET): "memset"}
        external_kind = int(kinds.EXTERNAL_CORRELATION)
        api_kinds = {int(kinds.RUNTIME), int(kinds.DRIVER)}
        ours = int(cupti.ExternalCorrelationKind.CUSTOM0)

        def buffer_requested():
            return BUFFER_BYTES, 0

        def buffer_completed(activities):
            got, ext, calls = [], {}, []
            for act in activities:
                kind = int(act.kind)
                if kind in kernel_kinds:
                    got.append(GpuActivity("kernel", int(act.start), int(act.end), int(act.correlation_id),
                                           str(act.name)))
                elif kind in copy_kinds:
                    got.append(GpuActivity(copy_kinds[kind], int(act.start), int(act.end), int(act.correlation_id)))
                elif kind in api_kinds:
                    calls.append(ApiCall(int(act.start), int(act.correlation_id)))
                elif kind == external_kind and int(act.external_kind) == ours:
                    ext[int(act.correlation_id)] = int(act.external_id)
            with sink.lock:
                sink.activities.extend(got)
                sink.external_ids.update(ext)
                sink.api_calls.extend(calls)

        cupti.activity_register_callbacks(buffer_requested, buffer_completed)
        atexit.register(_flush_before_exit, cupti)
        _sinks[key] = sink
    return _sinks[key]


def _flush_before_exit(cupti) -> None:
    """Hand back any buffer while Python can still run the callback (not during teardown)."""
    try:
        cupti.activity_flush_all(int(cupti.ActivityFlag.FLUSH_FORCED))
    except Exception:  # noqa: BLE001 - at exit there is nothing left to report to
        pass


class ActivityTrace:
    """CUPTI activity tracing of kernels, copies and the API calls that launch them, switched on
    only while a measurement runs (tracing adds host cost to every CUDA call)."""

    def __init__(self, cupti=None):
        self.cupti = cupti if cupti is not None else load_cupti()
        kinds = self.cupti.ActivityKind
        # API records are what external correlation records hang on; kernels and copies are what is timed.
        self.kinds = [kinds.CONCURRENT_KERNEL, kinds.MEMCPY, kinds.MEMSET, kinds.RUNTIME, kinds.DRIVER,
                      kinds.EXTERNAL_CORRELATION]
        self._external_kind = self.cupti.ExternalCorrelationKind.CUSTOM0
        self._sink = _sink_for(self.cupti)
        self._enabled: list = []

    def start(self) -> None:
        try:
            for kind in self.kinds:
                self.cupti.activity_enable(kind)
                self._enabled.append(kind)
        except Exception as err:  # noqa: BLE001 - cuptiError and friends: tracing is not possible here
            self.stop()
            raise CuptiUnavailable(f"CUPTI could not enable {getattr(kind, 'name', kind)} tracing ({err})") from None
        self._sink.take()  # nothing from before this measurement

    def stop(self) -> None:
        self.flush()
        for kind in reversed(self._enabled):
            self.cupti.activity_disable(kind)
        self._enabled.clear()
        self._sink.take()

    def flush(self) -> None:
        self.cupti.activity_flush_all(int(self.cupti.ActivityFlag.FLUSH_FORCED))  # buffers not yet full too

    def push(self, sample_id: int) -> None:
        self.cupti.activity_push_external_correlation_id(self._external_kind, sample_id)

    def pop(self) -> None:
        self.cupti.activity_pop_external_correlation_id(self._external_kind)

    def now(self) -> int:
        """CUPTI's timestamp (ns), the clock of its API records."""
        return int(self.cupti.get_timestamp())

    def drain(self) -> tuple[list[GpuActivity], dict[int, int], list[ApiCall]]:
        """Everything traced since the last drain (call after the device has synchronised)."""
        self.flush()
        return self._sink.take()
