"""The results file: records appended as they are measured, one JSON document when the run ends.

Reports, gates and notebooks read only these files, so they work on machines without a GPU.
While a run measures, its records stream into NAME.jsonl (JSON Lines: a header, one line per
record, an end line), each appended in constant time, so an interrupted run (Ctrl-C, a crash, a
killed job) keeps everything it measured and the file is readable at any moment. When the run ends
the stream is exported as one JSON document, NAME.json, and the stream is removed. Both forms read
with `read_document`, typed (a wrong field type names the file and the field); neither ever holds
NaN or Infinity (null, plus a note of what the value was).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field, asdict, fields
from pathlib import Path
from typing import Any, Iterable

from typing_extensions import TypedDict

from .outputs import OutputError, atomic_file, create_exclusive, os_error_text
from .safe_json import InputFileError, dumps_finite, read_text_bounded, restore_nonfinite

SCHEMA_VERSION = 2
"""Bumped whenever Record, Check or RunDocument gain, lose or retype a field (a test compares
FIELDS_DIGEST with the dataclasses and fails until both are updated, with docs/results-schema.json)."""
SCHEMA = f"bwbench.results/{SCHEMA_VERSION}"
FIELDS_DIGEST = "ac3bad2593ebded5"

STATUSES = ("ok", "failed", "skipped")


@dataclass
class Check:
    """How an implementation's output compared with the float64 reference."""

    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    worst_index: int | None = None
    rtol: float | None = None
    atol: float | None = None
    message: str | None = None


@dataclass
class Record:
    """One (suite, case, dtype, implementation) result."""

    suite: str
    case: str
    params: dict[str, Any]
    dtype: str
    impl: str
    kind: str
    status: str
    reason: str | None = None
    bytes_read: int | None = None
    bytes_written: int | None = None
    bytes_total: int | None = None
    mask_bytes: int | None = None
    """Memory the forward keeps for the backward as its mask (suites with a mask only)."""
    timing: str | None = None
    stats: dict[str, Any] | None = None
    samples_us: list[float] = field(default_factory=list)
    gbps: float | None = None
    copy_gbps: float | None = None
    pct_copy: float | None = None
    pct_peak: float | None = None
    check: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None
    """Implementation-specific details (the copy ceiling's method and each method's GB/s)."""
    role: str | None = None
    """"test" (code under test: a wrong result fails the run) or "baseline" (what it is measured
    against); None for the copy ceiling and for files written before roles existed."""
    inexact: bool = False
    """A baseline outside the suite's tolerance: timed and recorded (status "ok", its numbers are
    real) but its output is not right; `check` holds its largest error and `reason` says so."""
    disturbed: bool = False
    """The samples were disturbed (median far above p10: another process, moving clocks): the
    median is not the kernel's speed, gates call a change against it ambiguous."""
    build_s: float | None = None
    """Seconds spent building the implementation and its first call (compile, autotune,
    descriptors), all outside the timing."""
    input_seed: int | None = None
    """Seed of the case's random inputs: the same seed regenerates the same inputs (profile does)."""
    timer: str | None = None
    """The clock of the samples: "cupti" (kernel and copy times from CUPTI's activity records, the
    span of one call's kernels) or "events" (CUDA events around the call, which add their own cost)."""
    host_us: float | None = None
    """Median host time to enqueue one call with the GPU kept busy (what a call costs in eager mode)."""
    timer_detail: dict[str, Any] | None = None
    """The clock's details: the kernels' own span (span_median_us) and the write-back of the call's
    output left in L2 that cold samples are charged (writeback_us, with the two flushes' medians);
    for CUPTI the sum of kernel times beside the span, kernels per call and their names; why `auto`
    fell back to events, where it did."""
    gpu_index: int | None = None
    """Fleet runs (bwbench.fleet): the GPU that measured this record, by NVML index on its host..."""
    gpu_uuid: str | None = None
    """...and by UUID, unique across hosts (environment of that GPU: the document's `gpus`)."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"record status {self.status!r} is not one of {STATUSES}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def memory_text(nbytes: int) -> str:
    """A memory size as people read it: kB below a megabyte, MB above."""
    return f"{nbytes / 1e3:,.1f} kB" if nbytes < 1e6 else f"{nbytes / 1e6:,.1f} MB"


@dataclass
class RunDocument:
    """Everything one `bwbench run` wrote: its environment, its options, its records."""

    environment: dict[str, Any]
    options: dict[str, Any]
    suites: dict[str, Any]
    records: list[Record] = field(default_factory=list)
    complete: bool = False
    interrupted: bool = False
    schema: str = SCHEMA
    gpus: list[dict[str, Any]] | None = None
    """Fleet runs only: one entry per GPU (its environment, NVML identity, how its part ended)."""
    health: dict[str, Any] | None = None
    """Fleet runs only: each GPU against the fleet median (bwbench.fleet.health)."""

    def to_dict(self) -> dict[str, Any]:
        fleet = {key: value for key, value in (("gpus", self.gpus), ("health", self.health)) if value is not None}
        return {
            "schema": self.schema,
            "complete": self.complete,
            "interrupted": self.interrupted,
            "environment": self.environment,
            "options": self.options,
            "suites": self.suites,
            **fleet,
            "records": [r.to_dict() for r in self.records],
        }


STREAM = "bwbench.stream/1"
"""The record stream's format: JSON Lines of {"header": ...}, {"record": ...}, {"replace": i,
"record": ...} (a record changed after it was written supersedes its line), {"end": ...}."""

SUPERSEDE_WINDOW = 64
"""How many of the latest records `flush()` looks at for changes made after they were written
(a case's own copy ceiling and telemetry): a constant cost per flush, whatever the run's length."""


class ResultsFileError(ValueError):
    """A results file that cannot be read: the message names the file (and the field), exit code 2."""


class ResultsWarning(UserWarning):
    """Something read past in a results file (a torn last line from a crash)."""


def stream_path(path: str | os.PathLike) -> Path:
    """NAME.jsonl for NAME.json (the record stream of the run whose export is NAME.json)."""
    path = Path(path)
    return path.with_suffix(".jsonl") if path.suffix in (".json", ".jsonl") else path.with_name(path.name + ".jsonl")


def export_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_suffix(".json") if path.suffix == ".jsonl" else path


def _fields_of(record: Record) -> tuple:
    return tuple(getattr(record, f.name) for f in fields(record))


def _changed(before: tuple, after: tuple) -> bool:
    return len(before) != len(after) or any(a is not b for a, b in zip(before, after))


class ResultsWriter:
    """Appends each record of a run to NAME.jsonl as it is made; `finish` exports NAME.json.

    The stream is created exclusively (an existing file is never replaced unless `replace`).
    `flush()` appends a superseding line for a recent record changed after it was written and a
    new header when the environment, options or suites changed; nothing is ever rewritten."""

    def __init__(self, path: Path, document: RunDocument, on_add=None, replace: bool = False):
        self.path = export_path(path)
        self.stream_path = stream_path(path)
        self.document = document
        self.on_add = on_add
        self.replace = replace
        self._snapshots: list[tuple] = []
        self._header: dict | None = None
        self._good_size = 0
        self._finished = False
        self._fh = create_exclusive(self.stream_path, replace=replace)
        self._write_header_if_changed()

    # --- lines -------------------------------------------------------------------------
    def _append(self, payload: dict) -> None:
        line = dumps_finite(payload, separators=(",", ":")) + "\n"
        try:
            if self._fh.tell() != self._good_size:  # a write cut short (Ctrl-C mid-line): drop its bytes
                self._fh.flush()
                os.ftruncate(self._fh.fileno(), self._good_size)
            self._fh.write(line)
            self._fh.flush()
            self._good_size = self._fh.tell()
        except OSError as err:
            raise OutputError(os_error_text(err, self.stream_path)) from None

    def _header_now(self) -> dict:
        d = self.document
        return {"schema": d.schema, "stream": STREAM, "environment": d.environment, "options": d.options,
                "suites": d.suites}

    def _write_header_if_changed(self) -> None:
        header = self._header_now()
        if header != self._header:
            self._append({"header": header})
            self._header = json.loads(dumps_finite(header))  # a copy, so later edits in place show

    def _write_new_records(self) -> None:
        for record in self.document.records[len(self._snapshots):]:
            self._append({"record": record.to_dict()})
            self._snapshots.append(_fields_of(record))

    def _supersede_changed(self, start: int) -> None:
        records = self.document.records
        for i in range(max(start, 0), len(self._snapshots)):
            now = _fields_of(records[i])
            if _changed(self._snapshots[i], now):
                self._append({"replace": i, "record": records[i].to_dict()})
                self._snapshots[i] = now

    # --- the interface the run loop uses -----------------------------------------------
    def add(self, record: Record) -> None:
        if self._finished:
            raise RuntimeError(f"{self.stream_path}: record added after the run finished")
        self.document.records.append(record)
        self._write_new_records()
        if self.on_add:
            self.on_add(record)

    def flush(self) -> None:
        """Record what changed since the last line (constant cost: only the latest records)."""
        if self._finished:
            self._export()
            return
        self._write_header_if_changed()
        self._write_new_records()
        self._supersede_changed(len(self._snapshots) - SUPERSEDE_WINDOW)

    def finish(self, interrupted: bool = False) -> None:
        """End the stream (complete or interrupted), export NAME.json, and remove the stream."""
        self.document.complete = not interrupted
        self.document.interrupted = interrupted
        if not self._finished:
            self._write_header_if_changed()
            self._write_new_records()
            self._supersede_changed(0)
            self._append({"end": {"complete": self.document.complete, "interrupted": interrupted,
                                  "records": len(self.document.records)}})
            try:
                os.fsync(self._fh.fileno())
            except OSError:
                pass
            self._fh.close()
            self._finished = True
        self._export()

    def _export(self) -> None:
        with atomic_file(self.path) as fh:
            fh.write(dumps_finite(self.document.to_dict(), indent=1))
            fh.write("\n")
        try:
            self.stream_path.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            raise OutputError(os_error_text(err, self.stream_path)) from None


# --- reading ------------------------------------------------------------------------------
@dataclass
class _Note:
    at: list[str | int]
    was: str


@dataclass
class _StoredDocument(RunDocument):
    """The single-JSON form as stored: a RunDocument plus the notes of its non-finite numbers."""

    nonfinite: list[_Note] | None = None


@dataclass
class _Header:
    schema: str
    environment: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    suites: dict[str, Any] = field(default_factory=dict)
    stream: str = STREAM


@dataclass
class _End:
    complete: bool = False
    interrupted: bool = False
    records: int | None = None


@dataclass
class _Line:
    header: _Header | None = None
    record: Record | None = None
    replace: int | None = None
    end: _End | None = None
    nonfinite: list[_Note] | None = None


class _ImplementationMeta(TypedDict, total=False):
    kind: str | None
    role: str | None
    description: str | None


class _SuiteMeta(TypedDict, total=False):
    """The fields of a suite's `describe()` that reports read; others are ignored."""

    description: str | None
    x_axis: str | None
    implementations: dict[str, _ImplementationMeta | None] | None


class _Suites(TypedDict):
    suites: dict[str, _SuiteMeta]


_ADAPTERS: dict[type, Any] = {}


def _adapter(kind: type):
    if kind not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def _where(loc: Iterable) -> str:
    text = ""
    for step in loc:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def _first_problem(err, path: Path, where: str = "") -> ResultsFileError:
    """A pydantic ValidationError as one line naming the file and the field."""
    problem = err.errors(include_url=False)[0]
    if problem["type"] == "json_invalid":
        return ResultsFileError(f"{path}{where} is not valid JSON ({problem['msg']})")
    got = problem.get("input")
    shown = "" if isinstance(got, (dict, list)) else f" (got {json.dumps(got)[:40] if _jsonable(got) else repr(got)[:40]})"
    field_name = _where(problem["loc"]) or "the document"
    return ResultsFileError(f"{path}{where}: field {field_name}: {problem['msg'].lower()}{shown}")


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _check_suites(suites: dict[str, Any], path: Path, where: str = "") -> None:
    """The suites' metadata typed like the records (`suites.softmax.x_axis` a list, an
    implementation's entry a number): the file and the field named, not a report's traceback."""
    from pydantic import ValidationError

    try:
        _adapter(_Suites).validate_python({"suites": suites}, strict=True)
    except ValidationError as err:
        raise _first_problem(err, path, where) from None


def _check_schema(schema: str, path: Path) -> None:
    if not isinstance(schema, str) or not schema.startswith("bwbench.results/"):
        raise ResultsFileError(f"{path} is not a bwbench results file (schema {schema!r}, expected {SCHEMA!r})")


_LONG_DIGITS = re.compile(r"(?<![0-9.])[0-9]{19,}(?![0-9.eE])")
"""A run of digits that may be an integer beyond 64 bits (2**63 has 19 digits), not the fraction
of a float: a float's 19 digits after its point would parse every results file a second time."""


class _TooLarge(ValueError):
    pass


def _bounded_int(token: str) -> int:
    value = int(token) if len(token) <= 40 else None
    if value is None or abs(value) >= 2**63:
        raise _TooLarge(token)
    return value


def _check_integers(text: str, path: Path, where: str = "") -> None:
    """Integers of a results file fit 64 bits, as the store's and a float's range need: a
    hand-edited 10**400 is a one-line error, not an OverflowError in a report or `store import`."""
    if not _LONG_DIGITS.search(text):
        return
    try:
        json.loads(text, parse_int=_bounded_int)
    except _TooLarge as err:
        digits = str(err)
        shown = digits if len(digits) <= 24 else digits[:20] + "…"
        raise ResultsFileError(f"{path}{where}: the integer {shown} is too large for a results file") from None
    except (ValueError, RecursionError):
        return  # not JSON: the typed read says where


def _read_whole(text: str, path: Path) -> RunDocument:
    from pydantic import ValidationError

    try:
        head = json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultsFileError(f"{path} is not valid JSON ({err})") from None
    except RecursionError:
        raise ResultsFileError(f"{path} nests too deeply: not a bwbench results file") from None
    if not isinstance(head, dict) or "schema" not in head:
        raise ResultsFileError(f"{path} is not a bwbench results file")
    _check_schema(head["schema"], path)
    _check_integers(text, path)
    try:
        stored = _adapter(_StoredDocument).validate_json(text, strict=True)
    except ValidationError as err:
        raise _first_problem(err, path) from None
    _check_suites(stored.suites, path)
    document = RunDocument(**{f.name: getattr(stored, f.name) for f in fields(RunDocument)})
    restore_nonfinite(document, [vars(n) for n in stored.nonfinite or []])
    return document


def _read_stream(text: str, path: Path) -> RunDocument:
    from pydantic import ValidationError

    lines = text.split("\n")
    torn = lines.pop() if lines else ""  # the text after the last newline: "" when the file ends whole
    document: RunDocument | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = _adapter(_Line).validate_json(line, strict=True)
        except ValidationError as err:
            if number == len(lines) and not torn and err.errors()[0]["type"] == "json_invalid":
                torn = line  # a last line cut short, then a newline: still a torn line
                break
            raise _first_problem(err, path, f", line {number}") from None
        _check_integers(line, path, f", line {number}")
        notes = [vars(n) for n in item.nonfinite or []]
        if item.header is not None:
            _check_schema(item.header.schema, path)
            _check_suites(item.header.suites, path, f", line {number}")
            restore_nonfinite(item, notes)
            h = item.header
            if document is None:
                document = RunDocument(h.environment, h.options, h.suites, schema=h.schema)
            else:
                document.environment, document.options, document.suites = h.environment, h.options, h.suites
            continue
        if document is None:
            raise ResultsFileError(f"{path}, line {number}: the stream does not start with its header")
        if item.record is not None:
            restore_nonfinite(item, notes)
            if item.replace is None:
                document.records.append(item.record)
            elif 0 <= item.replace < len(document.records):
                document.records[item.replace] = item.record
            else:
                raise ResultsFileError(f"{path}, line {number}: replaces record {item.replace}, which it does not have")
        elif item.end is not None:
            document.complete, document.interrupted = item.end.complete, item.end.interrupted
    if document is None:
        raise ResultsFileError(f"{path} is empty: not a bwbench results file")
    if torn.strip():
        warnings.warn(ResultsWarning(f"{path}: its last line is cut short (the run was killed while writing "
                                     f"it?); read the {len(document.records)} records before it"), stacklevel=3)
    return document


def _is_stream(text: str) -> bool:
    first = text.lstrip()[:64]
    return first.startswith('{"header"')


def read_document(path: str | os.PathLike) -> RunDocument:
    """Read a results file (a finished run's NAME.json, or the NAME.jsonl stream of a run still
    going or killed), typed: a missing, foreign, binary or oversized file, or a field of the wrong
    type, is a ResultsFileError (a ValueError) naming the file and the field."""
    path = Path(path)
    if not os.path.lexists(path):
        for other in (stream_path(path), export_path(path)):
            if other != path and other.is_file():
                path = other  # a run still going (only its stream) or finished (its stream exported)
                break
    try:
        text = read_text_bounded(path)
    except InputFileError as err:
        raise ResultsFileError(str(err)) from None
    if not text.strip():
        raise ResultsFileError(f"{path} is empty: not a bwbench results file")
    return _read_stream(text, path) if _is_stream(text) else _read_whole(text, path)

STAT_COLUMNS = ("count", "min_us", "p10_us", "median_us", "p90_us", "max_us", "mean_us", "stdev_us", "noise", "median_error", "converged")


FRAME_COLUMNS = ("kernel_sum_us", "writeback_us", "check_passed", "max_abs_err", "gpu", "source")
"""Columns to_frame adds beside the record's fields and STAT_COLUMNS."""


def frame_column_names() -> set[str]:
    """Every column to_frame writes besides the axes: an axis of one of these names would be overwritten."""
    return {f.name for f in fields(Record)} | set(STAT_COLUMNS) | set(FRAME_COLUMNS)


def to_frame(document: RunDocument, source: str | None = None):
    """One row per record; axis values and statistics as their own columns, raw samples as a list."""
    import pandas as pd

    env = document.environment
    rows = []
    for rec in document.records:
        row = {k: v for k, v in rec.to_dict().items() if k not in ("params", "stats", "check", "telemetry", "extra",
                                                               "timer_detail")}
        row.update(rec.params)
        for col in STAT_COLUMNS:
            row[col] = (rec.stats or {}).get(col)
        row["kernel_sum_us"] = (rec.timer_detail or {}).get("sum_median_us")
        row["writeback_us"] = (rec.timer_detail or {}).get("writeback_us")
        row["check_passed"] = (rec.check or {}).get("passed")
        row["max_abs_err"] = (rec.check or {}).get("max_abs_err")
        row["gpu"] = env.get("gpu_name")
        row["source"] = source
        rows.append(row)
    return pd.DataFrame(rows)


def load(path: str | os.PathLike):
    """A results file as a pandas DataFrame (one row per record) for notebooks and scripts."""
    return to_frame(read_document(path), source=str(path))


def write_csv(document: RunDocument, path: str | os.PathLike) -> Path:
    """The records as CSV, without the raw samples (those stay in the JSON)."""
    frame = to_frame(document)
    if "samples_us" in frame:
        frame = frame.drop(columns=["samples_us"])
    path = Path(path)
    frame = frame.map(_inert_cell) if hasattr(frame, "map") else frame.applymap(_inert_cell)
    with atomic_file(path, newline="") as fh:
        frame.to_csv(fh, index=False)
    return path


def _inert_cell(value):
    """Text a spreadsheet would run as a formula (=, +, -, @ first) gets a leading quote."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(value)
            return value
        except ValueError:
            return "'" + value
    return value
