"""One results document for the whole fleet, written as records arrive.

The document keeps the single-GPU shape that reports, gates and notebooks read, grown minimally:
each record names its GPU (`gpu_index`, `gpu_uuid`), `gpus` lists every GPU's environment, NVML
identity and how its part ended (done, stopped, lost with the lost cases, failed), and `health`
holds the verdict against the fleet median. `environment` is the first GPU's, so a reader that
knows nothing of fleets still finds a GPU name, a peak and a copy bandwidth there.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..results import Record, ResultsWriter, RunDocument
from .collect import GpuRun


def gpu_entry(run: GpuRun) -> dict[str, Any]:
    env = run.environment or {}
    return {
        "gpu_index": env.get("gpu_index"),
        "gpu_uuid": env.get("gpu_uuid"),
        "host": env.get("host"),
        "worker": run.slot,
        "status": run.status,
        "records": run.records,
        "restarts": run.restarts,
        "lost_cases": list(run.lost_cases),
        "error": run.error,
        "environment": run.environment,
    }


class FleetResults:
    """The sink of a FleetCollector: keeps the merged document on disk up to date.

    What arrives is appended to the record stream once per poll of the collector (`idle`). The
    file is created with the first news from a GPU, so a fleet that never starts leaves no file.
    """

    def __init__(self, path: Path, options: dict[str, Any], suites: dict[str, Any], replace: bool = False):
        self.document = RunDocument(environment={}, options=options, suites=suites, gpus=[])
        self.path = path
        self.replace = replace
        self._writer: ResultsWriter | None = None
        self._runs: list[GpuRun] = []
        self._unwritten = False

    @property
    def reported(self) -> bool:
        """Whether any GPU worker has reported (only then is there a results file to finish)."""
        return bool(self._runs)

    @property
    def writer(self) -> ResultsWriter:
        if self._writer is None:
            self._writer = ResultsWriter(self.path, self.document, replace=self.replace)
        return self._writer

    def _refresh(self, run: GpuRun) -> None:
        if run not in self._runs:
            self._runs.append(run)
        ordered = sorted(self._runs, key=lambda r: ((r.environment or {}).get("host") or "",
                                                    (r.environment or {}).get("gpu_index", 1 << 30), r.slot))
        self.document.gpus = [gpu_entry(r) for r in ordered]
        first = next((r.environment for r in ordered if r.environment), None)
        if first:
            self.document.environment = {k: v for k, v in first.items() if k != "identity"}

    def environment(self, run: GpuRun) -> None:
        self._refresh(run)
        self._unwritten = True

    def records(self, run: GpuRun, rows: list[dict[str, Any]]) -> None:
        env = run.environment or {}
        self._refresh(run)
        known = set(Record.__dataclass_fields__)
        for row in rows:
            record = Record(**{k: v for k, v in row.items() if k in known})  # a newer worker's extra fields
            record.gpu_index, record.gpu_uuid = env.get("gpu_index"), env.get("gpu_uuid")
            self.document.records.append(record)
        self._unwritten = True

    def changed(self, run: GpuRun) -> None:
        self._refresh(run)
        self._unwritten = True

    def quiet(self, run: GpuRun, seconds: float) -> None:
        """Nothing new to write: a silent GPU is the terminal's news."""

    def idle(self) -> None:
        if self._unwritten:
            self.writer.flush()
            self._unwritten = False

    def finish(self, interrupted: bool, health: dict[str, Any] | None) -> None:
        if self._writer is None and not self.reported:
            return  # no GPU ever reported: nothing to keep
        self.document.health = health
        self.writer.finish(interrupted=interrupted)
        if not interrupted and any(g["status"] != "done" or g["lost_cases"] for g in self.document.gpus or []):
            self.document.complete = False  # a GPU lost or failed part of the sweep
            self.writer.flush()


def per_gpu_documents(document: RunDocument) -> list[tuple[str, RunDocument]]:
    """The merged document split back into one document per GPU (label, document), for the
    terminal tables and the report's multi-run comparison."""
    outliers = set((document.health or {}).get("outliers") or [])
    hosts = {g.get("host") for g in document.gpus or []}
    parts = []
    for gpu in document.gpus or []:
        env = gpu.get("environment")
        if not env:
            continue
        uuid = gpu.get("gpu_uuid")
        label = f"GPU {gpu.get('gpu_index')} {env.get('gpu_name', '')}".strip()
        if len(hosts) > 1:
            label = f"{gpu.get('host')} {label}"
        if uuid in outliers:
            label += " (outlier)"
        records = [r for r in document.records if r.gpu_uuid == uuid]
        parts.append((label, replace(document, environment=env, records=records, gpus=[gpu])))
    return parts
