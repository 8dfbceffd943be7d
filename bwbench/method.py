"""How a run's samples were timed, and whether a run may be judged against one timed otherwise.

Three choices change what a sample measures, most of all at cases of a few microseconds: cold or
hot (L2 flushed before each sample, or graph replays with warm caches), the clock (CUDA events add
about 2 µs a sample, CUPTI's kernel spans nothing) and, for cold samples, whether the writes a call
left in L2 were charged (files written before that charge existed were not). A gate that compares
runs timed differently reports the change of method as a change of speed, so gates refuse it.
"""

from __future__ import annotations

from .results import Record, RunDocument

CHARGED = "write-back charged"
UNCHARGED = "no write-back charge"


def describe(timing: str, timer: str, charged: bool) -> str:
    """"cold, cupti, write-back charged", "hot, events", …: hot samples are always timed with
    events and carry no charge (graph replays pay each other's write-back)."""
    if timing == "hot":
        return "hot, events"
    return f"{timing}, {timer}, {CHARGED if charged else UNCHARGED}"


def record_method(record: Record) -> str | None:
    """How a record was timed (`describe`); None for a record that was not timed."""
    if record.status != "ok" or not record.timing:
        return None
    return describe(record.timing, record.timer or "events", "writeback_us" in (record.timer_detail or {}))


def run_method(document: RunDocument) -> str | None:
    """The run's method in words (several joined by " + " where a run changed clock partway);
    None when no record was timed."""
    methods = sorted({m for m in map(record_method, document.records) if m})
    return " + ".join(methods) or None


def planned_method(timing: str, timer: str) -> str:
    """The method a run about to start will record, `timer` being the clock its cold samples use."""
    return describe(timing, timer, charged=True)


def method_mismatch(baseline: str | None, current: str | None) -> str | None:
    """Why two runs cannot be judged against each other (one line), or None. An unknown method
    (no timed record) is no evidence either way."""
    if baseline is None or current is None or baseline == current:
        return None
    return f"the baseline was timed {baseline} and the current run {current}: their small cases are not comparable"


def short_method(method: str | None) -> str:
    """A table cell: "cold cupti +wb", "cold events", "hot events"; "—" when not known."""
    if not method:
        return "—"
    return method.replace(f", {CHARGED}", " +wb").replace(f", {UNCHARGED}", "").replace(", ", " ")
