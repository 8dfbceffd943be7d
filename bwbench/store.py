"""The results history: every run in one SQLite file, for trends and for gating against recent runs.

One file (default `reports/bwbench-history.sqlite`, beside the results), two tables:

    runs     one row per run: run_id, GPU model and UUID, git commit, date, host, copy and peak GB/s,
             how it was timed (bwbench.method: a gate only judges runs timed the same way)
    results  one row per (run, suite, case, dtype, implementation): status, GB/s, median/p10/p90 µs,
             % of copy, % of peak, bytes moved, the case's axis values (JSON)

A run's id is a digest of what identifies it (its environment, options and first record), so adding
the same results file twice adds nothing, and adding a file that has grown since (a run still going)
adds only its new records. SQLite comes with Python: no extra package, and the file opens anywhere.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import sqlite3
import statistics
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .method import run_method
from .results import Record, RunDocument, read_document
from .suite import format_value

DEFAULT_STORE_NAME = "bwbench-history.sqlite"
DEFAULT_STORE = Path("reports") / DEFAULT_STORE_NAME

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id          TEXT PRIMARY KEY,
    gpu_name        TEXT,
    gpu_uuid        TEXT,
    git_commit      TEXT,
    created         TEXT,
    host            TEXT,
    copy_gbps       REAL,
    peak_gbps       REAL,
    bwbench_version TEXT,
    complete        INTEGER,
    source          TEXT,
    added           TEXT,
    timing          TEXT
);
CREATE TABLE IF NOT EXISTS results (
    run_id      TEXT NOT NULL REFERENCES runs(run_id),
    suite       TEXT NOT NULL,
    case_id     TEXT NOT NULL,
    dtype       TEXT NOT NULL,
    impl        TEXT NOT NULL,
    kind        TEXT,
    status      TEXT NOT NULL,
    gbps        REAL,
    median_us   REAL,
    p10_us      REAL,
    p90_us      REAL,
    pct_copy    REAL,
    pct_peak    REAL,
    bytes_total INTEGER,
    params      TEXT,
    PRIMARY KEY (run_id, suite, case_id, dtype, impl)
);
CREATE INDEX IF NOT EXISTS results_by_case ON results (suite, case_id, dtype, impl);
CREATE INDEX IF NOT EXISTS runs_by_gpu ON runs (gpu_name, created);
"""


RESULT_COLUMNS = ("run_id", "suite", "case_id", "dtype", "impl", "kind", "status", "gbps", "median_us", "p10_us",
                  "p90_us", "pct_copy", "pct_peak", "bytes_total", "params")
"""The columns a record fills, named in the insert: a store that a newer bwbench gave another
column still takes this one's records (a bare VALUES list must match every column)."""


class StoreError(ValueError):
    """The store cannot be read or written (not a bwbench store, no such file): a one-line message."""


@dataclass(frozen=True)
class AddResult:
    """What adding one results document did."""

    run_id: str
    new_run: bool
    added_records: int
    gpu_name: str | None
    created: str | None
    gpus: int = 1
    """How many GPUs' runs were added (a fleet file adds one per GPU)."""


@dataclass(frozen=True)
class StoredRun:
    run_id: str
    gpu_name: str | None
    gpu_uuid: str | None
    git_commit: str | None
    created: str | None
    host: str | None
    copy_gbps: float | None
    peak_gbps: float | None
    records: int
    timing: str | None = None
    """How the run was timed (bwbench.method.run_method); None for runs stored before it was kept."""


@dataclass(frozen=True)
class TrendPoint:
    """One stored record of a run, with the run's facts: one point of a trend."""

    run_id: str
    created: str | None
    git_commit: str | None
    gpu_name: str | None
    gpu_uuid: str | None
    suite: str
    case: str
    dtype: str
    impl: str
    status: str
    gbps: float | None
    median_us: float | None
    pct_copy: float | None
    params: dict[str, Any]
    kind: str | None = None
    timing: str | None = None
    """How the run was timed (bwbench.method); None for runs stored before it was kept."""


def connect(store_path: str | Path, create: bool = True) -> sqlite3.Connection:
    """Open (and, if asked, create) the store, with its tables in place."""
    path = Path(store_path)
    if path.exists() and not path.is_file():  # a folder or a device: SQLite would leave a journal beside it
        raise StoreError(f"{path} is not a bwbench results store (not a regular file)")
    if not create and not path.is_file():
        raise StoreError(f"no results store at {path} (add runs with `bwbench store import FILE...`)")
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # a command that only reads opens it read-only: an older store is read as it is, never upgraded
        conn = sqlite3.connect(path) if create else sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        _check_tables(conn, path, create)
        if create:
            conn.executescript(SCHEMA)
            _add_missing_columns(conn)
        else:
            _show_missing_columns(conn)
    except sqlite3.OperationalError as err:  # locked by another writer, read-only: the file may be a fine store
        raise StoreError(f"cannot use the results store {path}: {err}") from None
    except sqlite3.DatabaseError as err:
        raise StoreError(f"{path} is not a bwbench results store ({err})") from None
    return conn


def _check_tables(conn: sqlite3.Connection, path: Path, create: bool) -> None:
    """Another program's SQLite file (--store app.db) is refused before bwbench adds its tables to
    it; a command that only reads never adds them at all."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if {"runs", "results"} <= tables or (create and not tables):
        return
    conn.close()
    held = f"it holds the tables {', '.join(sorted(tables))}" if tables else "it holds no tables"
    raise StoreError(f"{path} is not a bwbench results store ({held}, not bwbench's runs and results)")


ADDED_COLUMNS = {"runs": {"timing": "TEXT"}}
"""Columns newer than the first stores: added in place to a store that lacks them (left NULL for
the runs already there, which no gate then takes as timed like a new run)."""


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    for table, columns in ADDED_COLUMNS.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for column, kind in columns.items():
            if column not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def _show_missing_columns(conn: sqlite3.Connection) -> None:
    """A store older than a column, read without changing it: a temporary view (searched before
    the store's own table) shows the column as NULL."""
    for table, columns in ADDED_COLUMNS.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        missing = [column for column in columns if column not in have]
        if missing:
            added = ", ".join(f"NULL AS {column}" for column in missing)
            conn.execute(f"CREATE TEMP VIEW {table} AS SELECT *, {added} FROM main.{table}")


def run_id_of(document: RunDocument) -> str:
    """A digest of what identifies a run; the same run read twice gets the same id."""
    first = document.records[0] if document.records else None
    identity = {"environment": document.environment, "options": document.options,
                "first": [first.suite, first.case, first.dtype, first.impl] if first else None}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def created_text(value: Any) -> str | None:
    """The run's date as ISO 8601 in UTC (results files carry an ISO string or a Unix time)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return _dt.datetime.fromtimestamp(value, _dt.timezone.utc).isoformat(timespec="seconds")
        except (OverflowError, OSError, ValueError):  # 1e20 or NaN in a hand-edited file
            raise StoreError(f"environment.created is {value!r}, which is no date") from None
    text = str(value)
    try:
        parsed = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.timezone.utc)
    return parsed.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


def per_gpu_runs(document: RunDocument) -> list[RunDocument]:
    """A fleet document as one run per GPU, each with that GPU's environment and records only: the
    store keys a run by its GPU, and a fleet file's top-level environment is only its first GPU's,
    so stored whole, every GPU's records would be filed under that one and overwrite each other.
    A GPU that sent no record adds nothing."""
    from .fleet.merge import per_gpu_documents

    return [dataclasses.replace(part, environment={**(document.environment or {}), **part.environment},
                                complete=bool(document.complete) and part.gpus[0].get("status") == "done",
                                gpus=None, health=None)
            for _label, part in per_gpu_documents(document) if part.records]


def add_document(path_or_doc: str | Path | RunDocument, store_path: str | Path, source: str | None = None) -> AddResult:
    """Add a run (a results file or a document) to the store; records already there are kept as they are.
    A fleet run goes in as one run per GPU (per_gpu_runs); the result then sums them."""
    if isinstance(path_or_doc, RunDocument):
        document = path_or_doc
    else:
        document = read_document(path_or_doc)
        source = source or str(path_or_doc)
    if not document.gpus:
        return _add_run(document, store_path, source)
    parts = per_gpu_runs(document)
    for part in parts:  # every GPU's facts checked before any is added
        _checked_environment(part.environment or {}, source)
    added = [_add_run(part, store_path, source) for part in parts]
    if not added:
        return AddResult(run_id_of(document), False, 0, None, None, gpus=0)
    names = sorted({a.gpu_name for a in added if a.gpu_name})
    return AddResult(added[0].run_id, any(a.new_run for a in added), sum(a.added_records for a in added),
                     ", ".join(names) or None, added[0].created, gpus=len(added))


def _add_run(document: RunDocument, store_path: str | Path, source: str | None) -> AddResult:
    env = document.environment or {}
    created = _checked_environment(env, source)
    run_id = run_id_of(document)
    latest: dict[tuple[str, str, str, str], Record] = {}
    for r in document.records:
        latest[(r.suite, r.case, r.dtype, r.impl)] = r
    with closing(connect(store_path)) as conn:
        try:
            with conn:
                before = conn.total_changes
                conn.execute(
                    "INSERT OR IGNORE INTO runs (run_id, gpu_name, gpu_uuid, git_commit, created, host, copy_gbps, "
                    "peak_gbps, bwbench_version, complete, source, added, timing) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, env.get("gpu_name"), env.get("gpu_uuid"), env.get("git_commit"), created,
                     env.get("host"), _real(env.get("copy_gbps")), _real(env.get("peak_gbps")),
                     env.get("bwbench_version"), int(bool(document.complete)), source,
                     _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), run_method(document)))
                new_run = conn.total_changes > before
                if not new_run and document.complete:
                    conn.execute("UPDATE runs SET complete = 1 WHERE run_id = ?", (run_id,))
                before = conn.total_changes
                conn.executemany(f"INSERT OR IGNORE INTO results ({', '.join(RESULT_COLUMNS)}) "
                                 f"VALUES ({','.join('?' * len(RESULT_COLUMNS))})",
                                 [_result_row(run_id, r) for r in latest.values()])
                added = conn.total_changes - before
        except sqlite3.OperationalError as err:  # another writer holds the store past the busy timeout
            raise StoreError(f"cannot use the results store {store_path}: {err}") from None
    return AddResult(run_id, new_run, added, env.get("gpu_name"), created)


def _checked_environment(env: dict[str, Any], source: str | None) -> str | None:
    """The run's date, once its facts are known to fit the store: a hand-edited file's list or
    out-of-range date is a StoreError naming the file, not a traceback from SQLite or datetime."""
    for key in ("gpu_name", "gpu_uuid", "git_commit", "host", "bwbench_version"):  # SQLite binds no list
        if env.get(key) is not None and not isinstance(env[key], str):
            raise StoreError(f"{source or 'the run'}: environment.{key} is {type(env[key]).__name__} "
                             f"{str(env[key])[:40]!r}, not text")
    try:
        return created_text(env.get("created"))
    except StoreError as err:
        raise StoreError(f"{source or 'the run'}: {err}") from None


def add_finished_run(results_path: str | Path, store_path: str | Path | None) -> str:
    """The hook at the end of `bwbench run`: add the results file to the store and say so in one line.
    Never raises: a store that cannot be written costs the history entry, not the run."""
    if store_path is None:
        return ""
    try:
        result = add_document(results_path, store_path)
    except (StoreError, sqlite3.Error, OSError, ValueError) as err:
        return f"warning: run not added to the history store {store_path}: {err}"
    per_gpu = f" (a run for each of {result.gpus} GPUs)" if result.gpus != 1 else ""
    return f"history: {result.added_records} records added to {store_path}{per_gpu}"


def _result_row(run_id: str, r: Record) -> tuple:
    stats = (r.stats or {}) if r.status == "ok" else {}
    speed = _positive(r.gbps) if r.status == "ok" else None  # a wrong or skipped record has no speed
    return (run_id, r.suite, r.case, r.dtype, r.impl, r.kind, r.status, speed, _positive(stats.get("median_us")),
            _positive(stats.get("p10_us")), _positive(stats.get("p90_us")), _real(r.pct_copy) if speed else None,
            _real(r.pct_peak) if speed else None,
            r.bytes_total if isinstance(r.bytes_total, int) else None,
            json.dumps(r.params or {}, default=str, allow_nan=False, sort_keys=False))


def _real(value: Any) -> float | None:
    """A finite number or None: no NaN in the store."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _positive(value: Any) -> float | None:
    """A speed or a time: finite and above zero, else None (-2000 GB/s is no measurement)."""
    value = _real(value)
    return value if value is not None and value > 0 else None


def recent_runs(store_path: str | Path, gpu_name: str | None = None, limit: int | None = 20) -> list[StoredRun]:
    """Runs newest first, of one GPU model if named."""
    query = ("SELECT r.run_id, r.gpu_name, r.gpu_uuid, r.git_commit, r.created, r.host, r.copy_gbps, r.peak_gbps, "
             "(SELECT COUNT(*) FROM results x WHERE x.run_id = r.run_id), r.timing FROM runs r")
    args: list[Any] = []
    if gpu_name is not None:
        query += " WHERE r.gpu_name = ?"
        args.append(gpu_name)
    query += " ORDER BY r.created DESC, r.added DESC"
    if limit is not None:
        query += " LIMIT ?"
        args.append(int(limit))
    with closing(connect(store_path, create=False)) as conn:
        return [StoredRun(*row) for row in conn.execute(query, args)]


def query_trend(store_path: str | Path, suite: str, cases: Sequence[str] = (), impls: Sequence[str] = (),
                dtypes: Sequence[str] = (), gpu_name: str | None = None) -> list[TrendPoint]:
    """The stored records of a suite, oldest run first; cases as ids ('rows=4096,cols=1024') or as
    axis selections ('cols=1024': every case whose cols is 1024)."""
    query = ("SELECT s.run_id, r.created, r.git_commit, r.gpu_name, r.gpu_uuid, s.suite, s.case_id, s.dtype, s.impl, "
             "s.status, s.gbps, s.median_us, s.pct_copy, s.params, s.kind, r.timing FROM results s JOIN runs r USING (run_id) "
             "WHERE s.suite = ? ORDER BY r.created, r.added, s.case_id, s.impl")
    with closing(connect(store_path, create=False)) as conn:
        rows = list(conn.execute(query, [suite]))
    points = [TrendPoint(*row[:13], params=_params(row[13]), kind=row[14], timing=row[15]) for row in rows]
    return select_points(points, cases, impls, dtypes, gpu_name)


def select_points(points: Sequence[TrendPoint], cases: Sequence[str] = (), impls: Sequence[str] = (),
                  dtypes: Sequence[str] = (), gpu_name: str | None = None) -> list[TrendPoint]:
    """The points a trend's filters keep (an empty filter keeps all): `history` reads the suite once
    and filters here, since it also needs the unfiltered points to say which filter matched nothing."""
    return [p for p in points if (not impls or p.impl in impls) and (not dtypes or p.dtype in dtypes)
            and (not gpu_name or p.gpu_name == gpu_name) and (not cases or any(case_matches(p, c) for c in cases))]


def _params(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def case_matches(point: TrendPoint, selection: str) -> bool:
    """'rows=4096,cols=1024' matches that case id; 'cols=1024' every case whose cols axis is 1024."""
    if point.case == selection:
        return True
    wanted = [part.split("=", 1) for part in selection.split(",") if "=" in part]
    return bool(wanted) and all(name in point.params and format_value(point.params[name]) == value.strip()
                                for name, value in wanted)


def known_values(store_path: str | Path, column: str, suite: str | None = None) -> list[str]:
    """Distinct suites, implementations or dtypes in the store (for messages that say what exists)."""
    if column not in ("suite", "impl", "dtype", "case_id"):
        raise ValueError(column)
    query = f"SELECT DISTINCT {column} FROM results" + (" WHERE suite = ?" if suite else "") + f" ORDER BY {column}"
    with closing(connect(store_path, create=False)) as conn:
        return [row[0] for row in conn.execute(query, [suite] if suite else [])]


def baseline_from_store(store_path: str | Path, gpu_name: str, last: int, exclude_run: str | None = None,
                        method: str | None = None) -> tuple[RunDocument, list[StoredRun]]:
    """A baseline document made of the last `last` runs of one GPU model (timed by `method`, when
    given): per (suite, case, dtype, implementation), the median over those runs of the median time
    (and of p10 and p90), so one odd run does not decide the gate."""
    if not gpu_name or not isinstance(gpu_name, str):  # recent_runs(None) is every GPU model's runs
        raise StoreError(f"the run names no GPU (environment.gpu_name is {gpu_name!r}): the store's runs "
                         "cannot be matched to its GPU model")
    earlier = [r for r in recent_runs(store_path, gpu_name, None) if r.run_id != exclude_run]
    if not earlier:
        raise StoreError(f"the store has no earlier run on {gpu_name!r}")
    runs = [r for r in earlier if method is None or r.timing == method][:last]
    if not runs:
        others = sorted({r.timing or "before bwbench kept how runs were timed" for r in earlier})
        raise StoreError(f"the store has no earlier run on {gpu_name!r} timed {method} ({len(earlier)} timed otherwise: "
                         f"{'; '.join(others)}); pass --ignore-timing to compare anyway")
    ids = [r.run_id for r in runs]
    query = ("SELECT suite, case_id, dtype, impl, kind, status, median_us, p10_us, p90_us, bytes_total, params, "
             f"pct_copy FROM results WHERE run_id IN ({','.join('?' * len(ids))})")
    with closing(connect(store_path, create=False)) as conn:
        rows = list(conn.execute(query, ids))
    grouped: dict[tuple[str, str, str, str], list[tuple]] = {}
    for row in rows:
        grouped.setdefault(tuple(row[:4]), []).append(row)
    records = []
    for (suite, case, dtype, impl), found in grouped.items():
        ok = [row for row in found if row[5] == "ok" and row[6] and row[9]]
        example = found[0]
        if not ok:
            status = "failed" if all(row[5] == "failed" for row in found) else "skipped"
            records.append(Record(suite=suite, case=case, params=_params(example[10]), dtype=dtype, impl=impl,
                                  kind=example[4] or "", status=status, reason=f"{status} in the stored runs"))
            continue
        median_us = statistics.median(row[6] for row in ok)
        bytes_total = int(statistics.median(row[9] for row in ok))
        p10 = statistics.median(row[7] for row in ok if row[7]) if any(row[7] for row in ok) else median_us
        p90 = statistics.median(row[8] for row in ok if row[8]) if any(row[8] for row in ok) else median_us
        pct = [row[11] for row in ok if row[11] is not None]
        records.append(Record(suite=suite, case=case, params=_params(example[10]), dtype=dtype, impl=impl,
                              kind=example[4] or "", status="ok", bytes_total=bytes_total,
                              stats={"median_us": median_us, "p10_us": min(p10, median_us), "p90_us": max(p90, median_us),
                                     "count": len(ok)},
                              gbps=bytes_total / median_us / 1e3, pct_copy=statistics.median(pct) if pct else None))
    environment = {"gpu_name": gpu_name, "copy_gbps": statistics.median(r.copy_gbps for r in runs if r.copy_gbps)
                   if any(r.copy_gbps for r in runs) else None,
                   "peak_gbps": runs[0].peak_gbps, "git_commit": ",".join(sorted({r.git_commit or "?" for r in runs}))}
    document = RunDocument(environment=environment, options={"from_store": str(store_path), "runs": ids},
                           suites={}, records=records, complete=True)
    return document, runs


def import_files(paths: Iterable[str | Path], store_path: str | Path) -> list[tuple[Path, AddResult]]:
    """`bwbench store import`: every file is read first, so an unreadable one stops with its message
    before anything is added; then each is added."""
    documents = [(Path(path), read_document(path)) for path in paths]
    for path, document in documents:
        _checked_environment(document.environment or {}, str(path))
    return [(path, add_document(document, store_path, source=str(path))) for path, document in documents]
