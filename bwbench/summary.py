"""The numbers a reader wants first: per suite and implementation, how close to copy, how much faster
than the baselines, and, between runs, how much faster on the other GPU or commit.

Pure functions over `RunDocument`s, shared by the HTML report's summary and `bwbench compare`.
Ratios over many cases are geometric means: a 2x gain on one case and a 2x loss on another average
to 1x, as they should for speed ratios.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .results import Record, RunDocument
from .suite import COPY_IMPL

BASELINE_KINDS = frozenset({"torch", "compiled", "cudnn", "naive", "peer", "peers", "library"})
"""Kinds that are references to beat when the suite does not say an implementation's role."""
CEILING_KIND = "ceiling"


def is_baseline(meta: dict[str, Any] | None, impl: str, kind: str | None = None) -> bool:
    """Whether an implementation is a baseline (not the code under test).

    The suite's own word wins: `implementations[impl]["role"]` in its `describe()` metadata
    ("baseline" or anything else, e.g. "under test"). Without one, the kind decides: eager torch,
    torch.compile, cuDNN, naive versions and peer libraries are baselines."""
    if impl == COPY_IMPL:
        return False
    info = ((meta or {}).get("implementations") or {}).get(impl)
    info = info if isinstance(info, dict) else {}
    role = info.get("role")
    if isinstance(role, str) and role.strip():
        return role.strip().lower() == "baseline"
    kind = info.get("kind", kind)
    return str(kind or "").lower() in BASELINE_KINDS


def ok_speed(record: Record | None) -> bool:
    """A record whose speed can be used: measured, passed, finite and positive bandwidth."""
    return (record is not None and record.status == "ok" and isinstance(record.gbps, (int, float))
            and math.isfinite(record.gbps) and record.gbps > 0)


def geometric_mean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def group_label(suite: str, dtype: str, dtypes_of_suite: int) -> str:
    """'softmax' when the suite ran one dtype, 'permute · float32' when it ran several."""
    return suite if dtypes_of_suite <= 1 else f"{suite} · {dtype}"


def latest_records(document: RunDocument) -> dict[tuple[str, str, str, str], Record]:
    """(suite, case, dtype, impl) -> record; a case measured twice keeps its later record."""
    return {(r.suite, r.case, r.dtype, r.impl): r for r in document.records}


def groups_of(documents: Sequence[RunDocument]) -> list[tuple[str, str]]:
    """(suite, dtype) pairs over all documents, in the order first measured."""
    seen: dict[tuple[str, str], None] = {}
    for doc in documents:
        for r in doc.records:
            seen.setdefault((r.suite, r.dtype), None)
    return list(seen)


def suite_meta(documents: Sequence[RunDocument], suite: str) -> dict[str, Any]:
    for doc in documents:
        meta = (doc.suites or {}).get(suite)
        if isinstance(meta, dict):
            return meta
    return {}


@dataclass(frozen=True)
class CopyShare:
    """One implementation's % of copy over the cases of one suite and dtype in one run."""

    suite: str
    dtype: str
    impl: str
    baseline: bool
    cases: int
    median_pct: float | None
    lowest_pct: float | None
    lowest_case: str | None
    failed: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class Speedup:
    """Geometric-mean speedup (baseline median time / implementation median time) over common cases."""

    suite: str
    dtype: str
    impl: str
    baseline: str
    ratio: float
    cases: int


@dataclass(frozen=True)
class RunRatio:
    """Geometric-mean bandwidth ratio of one implementation between two runs (other / first)."""

    suite: str
    dtype: str
    impl: str
    ratio: float
    cases: int
    lowest: float
    highest: float


def copy_shares(document: RunDocument) -> list[CopyShare]:
    """Median and lowest % of copy per (suite, dtype, implementation), the copy itself left out."""
    by_group: dict[tuple[str, str, str], list[Record]] = {}
    for r in latest_records(document).values():
        if r.impl != COPY_IMPL:
            by_group.setdefault((r.suite, r.dtype, r.impl), []).append(r)
    out = []
    for (suite, dtype, impl), recs in by_group.items():
        meta = (document.suites or {}).get(suite) or {}
        good = [r for r in recs if ok_speed(r) and isinstance(r.pct_copy, (int, float)) and math.isfinite(r.pct_copy)]
        lowest = min(good, key=lambda r: r.pct_copy) if good else None
        out.append(CopyShare(suite, dtype, impl, is_baseline(meta, impl, recs[0].kind), len(good),
                             statistics.median(r.pct_copy for r in good) if good else None,
                             lowest.pct_copy if lowest else None, lowest.case if lowest else None,
                             sum(r.status == "failed" for r in recs), sum(r.status == "skipped" for r in recs)))
    return out


def speedups(document: RunDocument) -> list[Speedup]:
    """Each implementation under test against each baseline of its suite and dtype."""
    records = latest_records(document)
    impls: dict[tuple[str, str], dict[str, str]] = {}
    for r in records.values():
        if r.impl != COPY_IMPL:
            impls.setdefault((r.suite, r.dtype), {}).setdefault(r.impl, r.kind)
    out = []
    for (suite, dtype), kinds in impls.items():
        meta = (document.suites or {}).get(suite) or {}
        tested = [i for i, k in kinds.items() if not is_baseline(meta, i, k)]
        baselines = [i for i, k in kinds.items() if is_baseline(meta, i, k)]
        cases = {case for (s, case, d, _i) in records if s == suite and d == dtype}
        for impl in tested:
            for base in baselines:
                ratios = []
                for case in cases:
                    mine, theirs = records.get((suite, case, dtype, impl)), records.get((suite, case, dtype, base))
                    if ok_speed(mine) and ok_speed(theirs):
                        t_mine, t_base = _median_us(mine), _median_us(theirs)
                        if t_mine and t_base:
                            ratios.append(t_base / t_mine)
                mean = geometric_mean(ratios)
                if mean is not None:
                    out.append(Speedup(suite, dtype, impl, base, mean, len(ratios)))
    return out


def run_ratios(first: RunDocument, other: RunDocument, include_copy: bool = True) -> list[RunRatio]:
    """Per (suite, dtype, implementation): geometric mean over the cases both runs measured of
    other GB/s / first GB/s. The copy ceiling's ratio is the reference the others are read against."""
    a, b = latest_records(first), latest_records(other)
    grouped: dict[tuple[str, str, str], list[float]] = {}
    for key, rec in a.items():
        suite, _case, dtype, impl = key
        if impl == COPY_IMPL and not include_copy:
            continue
        mine = b.get(key)
        if ok_speed(rec) and ok_speed(mine):
            grouped.setdefault((suite, dtype, impl), []).append(mine.gbps / rec.gbps)
    return [RunRatio(s, d, i, geometric_mean(v), len(v), min(v), max(v)) for (s, d, i), v in grouped.items()]


def environment_ratio(first: RunDocument, other: RunDocument, key: str) -> float | None:
    """other / first of an environment figure (copy_gbps, peak_gbps), or None when either lacks it."""
    x, y = (first.environment or {}).get(key), (other.environment or {}).get(key)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in (x, y)):
        return y / x
    return None


def _median_us(record: Record) -> float | None:
    value = (record.stats or {}).get("median_us")
    return value if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def short_gpu_name(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100', 'NVIDIA GeForce RTX 4090' -> 'RTX 4090': labels that fit a chart."""
    if not name:
        return "GPU"
    words = [w for w in str(name).split() if w.upper() not in ("NVIDIA", "GEFORCE", "TESLA", "AMD", "RADEON")]
    if not words:
        return str(name)
    if words[0].upper() in ("RTX", "GTX", "QUADRO") and len(words) > 1:
        return " ".join(words[:2])
    return words[0]


def run_labels(names: Sequence[str | None], stems: Sequence[str]) -> list[str]:
    """Short, distinct labels for several runs: the short GPU name, and the file stem only where
    two runs share a GPU model."""
    short = [short_gpu_name(n) for n in names]
    labels = []
    for i, (s, stem) in enumerate(zip(short, stems)):
        labels.append(s if short.count(s) == 1 else f"{s} {stem}")
    if len(set(labels)) < len(labels):
        labels = [f"{label} #{i + 1}" for i, label in enumerate(labels)]
    return labels


def one_run_per_gpu(documents: Sequence[Any], stems: Sequence[str]) -> tuple[list[Any], list[str]]:
    """Fleet files split into one run per GPU (as the fleet command's own report shows them), every
    other file as it is: read whole, a fleet file's GPUs would share one series and each case would
    appear once per GPU. Returns the documents and their stems (a GPU's: 'STEM GPU N NAME')."""
    from .fleet.merge import per_gpu_documents

    out: list[Any] = []
    names: list[str] = []
    for doc, stem in zip(documents, stems):
        parts = per_gpu_documents(doc)
        if not parts:
            out.append(doc)
            names.append(stem)
            continue
        for label, part in parts:
            out.append(part)
            names.append(f"{stem} {label}")
    return out, names


def merge_same_gpu(documents: Sequence[Any], stems: Sequence[str]) -> tuple[list[Any], list[str]]:
    """Results files of one GPU model that measured different suites, as one run each.

    A GPU's reference is often kept as one file per suite; read as separate runs they would compare
    softmax on the H100 with bn_relu on the H100. Files of the same GPU model whose (suite, dtype)
    pairs do not overlap are joined, in the order given (the first file's environment stands for
    the run); a file that repeats a pair stays its own run, so two runs of one suite still compare.
    Returns the documents and their stems (joined stems with '+')."""
    from dataclasses import replace

    merged: list[Any] = []
    names: list[str] = []
    pairs: list[set] = []
    for doc, stem in zip(documents, stems):
        mine = {(r.suite, r.dtype) for r in doc.records}
        gpu = doc.environment.get("gpu_name")
        for i, other in enumerate(merged):
            if other.environment.get("gpu_name") == gpu and not (pairs[i] & mine):
                merged[i] = replace(other, records=list(other.records) + list(doc.records),
                                    suites={**other.suites, **doc.suites},
                                    complete=other.complete and doc.complete,
                                    interrupted=other.interrupted or doc.interrupted)
                names[i] = f"{names[i]}+{stem}"
                pairs[i] |= mine
                break
        else:
            merged.append(doc)
            names.append(stem)
            pairs.append(mine)
    return merged, names
