"""The results file: one JSON document per run, rewritten after every record.

Reports, gates and notebooks read only these files, so they work on machines without a GPU.
Each write goes to a temporary file and is renamed over the old one, so an interrupted run
(Ctrl-C, a crash, a killed job) leaves a complete, readable document with what it measured.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, asdict
from pathlib import Path
from typing import Any

SCHEMA = "bwbench.results/1"

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunDocument":
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ValueError(f"not a bwbench results file (schema {schema!r}, expected {SCHEMA!r})")
        return cls(
            environment=data.get("environment", {}),
            options=data.get("options", {}),
            suites=data.get("suites", {}),
            records=[Record(**r) for r in data.get("records", [])],
            complete=bool(data.get("complete")),
            interrupted=bool(data.get("interrupted")),
            schema=schema,
            gpus=data.get("gpus"),
            health=data.get("health"),
        )


class ResultsWriter:
    """Keeps the run's document on disk up to date after every record."""

    def __init__(self, path: Path, document: RunDocument, on_add=None):
        self.path = Path(path)
        self.document = document
        self.on_add = on_add
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush()

    def add(self, record: Record) -> None:
        self.document.records.append(record)
        self.flush()
        if self.on_add:
            self.on_add(record)

    def finish(self, interrupted: bool = False) -> None:
        self.document.complete = not interrupted
        self.document.interrupted = interrupted
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.document.to_dict(), fh, indent=1, allow_nan=True)
            fh.write("\n")
        os.replace(tmp, self.path)


def read_document(path: str | os.PathLike) -> RunDocument:
    """Read a results file, with a clear error for a missing or foreign file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"results file {path} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder, not a results file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a bwbench results file")
    try:
        return RunDocument.from_dict(data)
    except TypeError as err:
        raise ValueError(f"{path}: malformed record ({err})") from None


STAT_COLUMNS = ("count", "min_us", "p10_us", "median_us", "p90_us", "max_us", "mean_us", "stdev_us", "noise", "median_error", "converged")


def to_frame(document: RunDocument, source: str | None = None):
    """One row per record; axis values and statistics as their own columns, raw samples as a list."""
    import pandas as pd

    env = document.environment
    rows = []
    for rec in document.records:
        row = {k: v for k, v in rec.to_dict().items() if k not in ("params", "stats", "check", "telemetry", "extra")}
        row.update(rec.params)
        for col in STAT_COLUMNS:
            row[col] = (rec.stats or {}).get(col)
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
    frame.to_csv(path, index=False)
    return path
