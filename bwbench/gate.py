"""Regression gates on recorded results: is the current run really slower than the baseline?

A record regresses only when its median bandwidth drops by at least the threshold AND the
difference is real: a Mann-Whitney rank test on the raw samples (enough samples), or disjoint
p10-p90 intervals (few samples). A drop past the threshold that the samples cannot tell from noise
is "ambiguous", never a silent pass or a false alarm. So is a change against a record whose samples
the run flagged as disturbed: its median measured the GPU's other load, not the code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, asdict, replace
from typing import Iterable, Sequence

from .method import method_mismatch, planned_method, run_method
from .results import Record, RunDocument
from .stats import DISTURBED_WARNING
from .suite import COPY_IMPL

VERDICTS = ("faster", "same", "slower", "ambiguous", "missing", "new", "failed", "still failing", "invalid",
            "incomplete")
REGRESSIONS = ("slower", "failed")
PARTIAL = ("invalid", "incomplete")
"""Verdicts on data the gate cannot judge (a NaN, infinite, negative or zero GB/s; a record absent
because the current run stopped early): they fail the gate unless it is told to allow partial data."""
LISTING_ORDER = ("failed", "slower", "invalid", "incomplete", "ambiguous", "still failing", "missing", "faster",
                 "new", "same")
"""The order verdicts are listed in (tables, markdown): what needs attention first."""
ABSENT = "absent from the current run"
"""The note of a baseline record the current run has no record for at all."""
RANK_TEST_MIN_SAMPLES = 10
SIGNIFICANCE = 0.01


class GateInputError(ValueError):
    """The two runs cannot be compared (different GPUs, nothing in common): exit code 2."""


@dataclass(frozen=True)
class Comparison:
    """One matched (suite, case, dtype, implementation) and what happened to it."""

    suite: str
    case: str
    dtype: str
    impl: str
    verdict: str
    baseline_gbps: float | None
    current_gbps: float | None
    change: float | None
    """Relative change of median bandwidth: +0.03 is 3% faster, -0.05 is 5% slower."""
    p_value: float | None
    test: str
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def record_key(r: Record) -> tuple[str, str, str, str]:
    return (r.suite, r.case, r.dtype, r.impl)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie-corrected)."""
    import numpy as np

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    both = np.concatenate([a, b])
    order = both.argsort(kind="mergesort")
    ranks = np.empty(len(both))
    sorted_vals = both[order]
    # average ranks over ties
    boundaries = np.flatnonzero(np.diff(sorted_vals)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(both)]])
    tie_term = 0.0
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2.0
        t = e - s
        tie_term += t ** 3 - t
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    mean = n1 * n2 / 2.0
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0 if u1 == mean else 0.0
    z = (abs(u1 - mean) - 0.5) / math.sqrt(var)
    return math.erfc(max(z, 0.0) / math.sqrt(2.0))


def _interval(r: Record) -> tuple[float, float]:
    s = r.stats or {}
    return s.get("p10_us", math.nan), s.get("p90_us", math.nan)


def real_difference(base: Record, cur: Record) -> tuple[bool, float | None, str]:
    """(is the timing difference real, p-value if a rank test ran, which test decided)."""
    if len(base.samples_us) >= RANK_TEST_MIN_SAMPLES and len(cur.samples_us) >= RANK_TEST_MIN_SAMPLES:
        p = mann_whitney_p(base.samples_us, cur.samples_us)
        return p < SIGNIFICANCE, p, "rank"
    (b_lo, b_hi), (c_lo, c_hi) = _interval(base), _interval(cur)
    return (c_lo > b_hi or c_hi < b_lo), None, "p10-p90"


def disturbed_note(base: Record, cur: Record) -> str:
    """Which run's samples were disturbed, or "": a change against a disturbed median is in the
    measurement (another process on the GPU, clocks), so it is neither a regression nor a gain."""
    parts = []
    for name, r in (("baseline", base), ("current", cur)):
        if getattr(r, "disturbed", False) or DISTURBED_WARNING in (r.reason or ""):  # text: files before the flag
            s = r.stats or {}
            ratio = f" (median {s['median_us'] / s['p10_us']:.1f}x p10)" if s.get("p10_us") else ""
            parts.append(f"{name} run's samples disturbed{ratio}")
    return "; ".join(parts) + ": re-run to judge" if parts else ""


def valid_gbps(value) -> bool:
    """A bandwidth a gate can judge: a finite positive number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def invalid_note(base: Record | None, cur: Record | None) -> str:
    """Why a record's numbers cannot be judged ("current GB/s is nan"), or ""."""
    parts = []
    for name, r in (("baseline", base), ("current", cur)):
        if r is not None and r.status == "ok" and not valid_gbps(r.gbps):
            parts.append(f"{name} GB/s is {r.gbps!r}" if r.gbps is not None else f"{name} GB/s is absent")
    return "; ".join(parts)


def judge(base: Record | None, cur: Record | None, max_drop: float) -> Comparison:
    ref = cur or base
    key = dict(suite=ref.suite, case=ref.case, dtype=ref.dtype, impl=ref.impl)
    base_ok = base is not None and base.status == "ok" and valid_gbps(base.gbps)
    cur_ok = cur is not None and cur.status == "ok" and valid_gbps(cur.gbps)
    if cur is not None and cur.status == "failed":
        # Failing in both runs is not a change this comparison should stop a merge for (the run
        # itself exits 1 for it); failing now where the baseline passed, skipped or had no record
        # is: a wrong result in a record new to this run must stop the merge too, so it is not "new".
        verdict = "still failing" if base is not None and base.status == "failed" else "failed"
        return Comparison(**key, verdict=verdict, baseline_gbps=base.gbps if base_ok else None,
                          current_gbps=None, change=None, p_value=None, test="", note=cur.reason or "")
    bad = invalid_note(base, cur)
    if bad:
        return Comparison(**key, verdict="invalid",
                          baseline_gbps=base.gbps if base is not None and valid_gbps(base.gbps) else None,
                          current_gbps=cur.gbps if cur is not None and valid_gbps(cur.gbps) else None,
                          change=None, p_value=None, test="", note=bad)
    if not base_ok and not cur_ok:  # a record the current run lacks is absent, whatever the baseline did
        return Comparison(**key, verdict="missing", baseline_gbps=None, current_gbps=None, change=None,
                          p_value=None, test="", note=ABSENT if cur is None else "not measured in either run")
    if not cur_ok:
        return Comparison(**key, verdict="missing", baseline_gbps=base.gbps, current_gbps=None, change=None,
                          p_value=None, test="", note=(cur.reason if cur else ABSENT) or "")
    if not base_ok:
        return Comparison(**key, verdict="new", baseline_gbps=None, current_gbps=cur.gbps, change=None,
                          p_value=None, test="")
    change = cur.gbps / base.gbps - 1.0
    real, p, test = real_difference(base, cur)
    tolerance = 1e-9
    if change <= -max_drop + tolerance:
        verdict = "slower" if real else "ambiguous"
    elif change >= max_drop - tolerance:
        verdict = "faster" if real else "ambiguous"
    else:
        verdict = "same"
    note = disturbed_note(base, cur)
    if note and verdict in ("slower", "faster"):
        verdict = "ambiguous"
    return Comparison(**key, verdict=verdict, baseline_gbps=base.gbps, current_gbps=cur.gbps, change=change,
                      p_value=p, test=test, note=note)


def check_threshold(max_drop: float) -> None:
    if not (isinstance(max_drop, float) and math.isfinite(max_drop) and 0 < max_drop < 1):
        raise GateInputError(f"the threshold must be between 0% and 100% (got {max_drop:.2%})")


def check_same_gpu(baseline: RunDocument, current: RunDocument, ignore_gpu: bool) -> None:
    a, b = baseline.environment.get("gpu_name"), current.environment.get("gpu_name")
    if a != b and not ignore_gpu:
        raise GateInputError(f"the baseline ran on {a!r} and the current run on {b!r}: bandwidths of "
                             "different GPU models are not comparable (pass --ignore-gpu to compare anyway)")


def check_baseline(baseline: RunDocument, allow_partial: bool = False) -> None:
    """A baseline the gate can judge against: it has records, and (unless partial data is allowed)
    it finished. Checked when the gate's arguments are read, before any GPU time is spent."""
    if not baseline.records:
        raise GateInputError("the baseline run has no records")
    state = run_state(baseline)
    if state and not allow_partial:
        raise GateInputError(f"the baseline run {state} ({len(baseline.records)} records): "
                             "re-run it, or pass --allow-partial to gate against what it measured")


def check_baseline_device(baseline: RunDocument | None, gpu_name: str | None) -> None:
    """`run --baseline`: the baseline must come from this GPU model (checked before the sweep)."""
    if baseline is not None:
        check_same_gpu(baseline, RunDocument(environment={"gpu_name": gpu_name}, options={}, suites={}), False)


def check_same_method(baseline: RunDocument, current: RunDocument, ignore_timing: bool) -> None:
    problem = method_mismatch(run_method(baseline), run_method(current))
    if problem and not ignore_timing:
        raise GateInputError(f"{problem} (make the baseline again with this bwbench, or pass --ignore-timing "
                             "to compare anyway)")


def check_baseline_method(baseline: RunDocument | None, timing: str, timer: str) -> None:
    """`run --baseline`: the baseline must be timed as this run will be (`timer`: the clock of its
    cold samples), checked before the sweep."""
    if baseline is not None:
        problem = method_mismatch(run_method(baseline), planned_method(timing, timer))
        if problem:
            raise GateInputError(f"{problem} (make the baseline again with this bwbench, timed the same way)")


def compare_runs(baseline: RunDocument, current: RunDocument, max_drop: float, ignore_gpu: bool = False,
                 include_copy: bool = False, min_bytes: int = 0, ignore_timing: bool = False) -> list[Comparison]:
    """Every record of either run, matched by (suite, case, dtype, implementation) and judged.

    min_bytes: records that move fewer bytes (in both runs) are left out. Cases of a few
    microseconds drift between runs by more than a gate's threshold while each run's samples
    agree (H200: dropout at 8 MB, -7.5% between two runs of the same code), and the rank test only
    sees within-run noise."""
    check_threshold(max_drop)
    check_same_gpu(baseline, current, ignore_gpu)
    check_same_method(baseline, current, ignore_timing)
    base = {record_key(r): r for r in baseline.records}
    cur = {record_key(r): r for r in current.records}
    keys = list(dict.fromkeys([*base, *cur]))
    if not {k for k in set(base) & set(cur) if include_copy or k[3] != COPY_IMPL}:  # the copy alone judges nothing
        held = holdings(baseline), holdings(current)
        if held[0] == held[1]:  # the same suites and implementations: the cases differ, so name some
            held = tuple(f"{h} [e.g. {example_cases(d)}]" for h, d in zip(held, (baseline, current)))
        raise GateInputError("the two runs have no (suite, case, dtype, implementation) in common: the baseline "
                             f"has {held[0]}, the current run {held[1]}")
    def big_enough(key) -> bool:
        sizes = [r.bytes_total for r in (base.get(key), cur.get(key)) if r is not None and r.bytes_total]
        return not min_bytes or not sizes or max(sizes) >= min_bytes

    stopped = run_state(current)
    verdicts = []
    for k in keys:
        if not ((include_copy or k[3] != COPY_IMPL) and big_enough(k)):
            continue
        c = judge(base.get(k), cur.get(k), max_drop)
        if stopped and k not in cur:
            c = replace(c, verdict="incomplete", note=f"absent: the current run {stopped}")
        verdicts.append(c)
    return verdicts


def holdings(document: RunDocument) -> str:
    """What a run measured, for a message: 'softmax (float16; naive, torch; 11 cases)'."""
    records = [r for r in document.records if r.impl != COPY_IMPL]
    if not records:
        return "no record but the copy ceiling" if document.records else "no records"
    suites, dtypes, impls = (list(dict.fromkeys(getattr(r, a) for r in records)) for a in ("suite", "dtype", "impl"))
    cases = len({(r.suite, r.case) for r in records})
    return f"{', '.join(suites)} ({', '.join(dtypes)}; {', '.join(impls)}; {cases} cases)"


def example_cases(document: RunDocument, count: int = 2) -> str:
    """A run's first cases, for a message where two runs hold the same suites but other cases."""
    cases = list(dict.fromkeys(r.case for r in document.records if r.impl != COPY_IMPL))
    return "; ".join(cases[:count]) + (f"; {len(cases) - count} more" if len(cases) > count else "")


def run_state(document: RunDocument) -> str:
    """'' for a run that finished; otherwise how it stopped ('was interrupted', 'did not finish')."""
    if document.interrupted:
        return "was interrupted"
    if not document.complete:
        return "did not finish"
    return ""


def partial_runs(baseline: RunDocument | None, current: RunDocument) -> list[str]:
    """One line for each run that stopped early: the gate cannot vouch for what it did not measure."""
    lines = []
    for name, doc in (("baseline", baseline), ("current", current)):
        if doc is not None and run_state(doc):
            lines.append(f"the {name} run {run_state(doc)} ({len(doc.records)} records)")
    return lines


def gate_fails(comparisons: Sequence[Comparison], partial: Sequence[str] = (), allow_partial: bool = False) -> bool:
    """The gate's decision: a regression always fails it; invalid numbers, records a stopped run
    lacks, and a run that stopped early fail it unless partial data is allowed."""
    if has_regression(comparisons):
        return True
    return not allow_partial and (bool(partial) or any(c.verdict in PARTIAL for c in comparisons))


def absent_suites(comparisons: Sequence[Comparison]) -> dict[str, int]:
    """Suites of the baseline that the current run has no record of (a run of fewer suites than
    the baseline), with their record counts: listed as one line each instead of a row a record."""
    suites: dict[str, int] = {}
    present = {c.suite for c in comparisons if not (c.verdict == "missing" and c.note == ABSENT)}
    for c in comparisons:
        if c.suite not in present:
            suites[c.suite] = suites.get(c.suite, 0) + 1
    return suites


def absent_line(suites: dict[str, int]) -> str:
    """'not in the current run: bn_relu (24 records), dropout (48 records)', or ''."""
    if not suites:
        return ""
    return "not in the current run: " + ", ".join(f"{s} ({n} records)" for s, n in suites.items())


def has_regression(comparisons: Iterable[Comparison]) -> bool:
    return any(c.verdict in REGRESSIONS for c in comparisons)


@dataclass(frozen=True)
class FloorViolation:
    """A record below the required fraction of its same-run copy bandwidth."""

    suite: str
    case: str
    dtype: str
    impl: str
    pct_copy: float | None
    required_pct: float


def copy_fraction_violations(document: RunDocument, min_fraction: float,
                             impls: Sequence[str] | None = None) -> list[FloorViolation]:
    """The hardware-independent gate: every chosen implementation at >= min_fraction of its copy."""
    out = []
    for r in document.records:
        if r.impl == COPY_IMPL or (impls and r.impl not in impls) or r.status == "skipped":
            continue
        if r.status != "ok" or not valid_gbps(r.pct_copy) or r.pct_copy < 100 * min_fraction:
            out.append(FloorViolation(r.suite, r.case, r.dtype, r.impl, r.pct_copy, 100 * min_fraction))
    return out


AMBIGUOUS_FRACTIONS = (0.5, 1.0)
"""Bare numbers in [0.5, 1) are refused: '0.9' could mean a 90% drop or a 0.9% one (a bare 1.5 is
1.5%), and a gate that passes every 80% drop by a slip of the keyboard lets everything through."""


def parse_fraction(text: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05, '5' -> 0.05 (a bare number from 1 is a percentage; one from
    0.5 to 1 must say which it is with a %)."""
    raw = text.strip()
    try:
        value = float(raw.rstrip("%"))
    except ValueError:
        raise GateInputError(f"cannot read {text!r} as a fraction (examples: 5%, 0.05)") from None
    if not math.isfinite(value):
        raise GateInputError(f"cannot read {text!r} as a fraction (examples: 5%, 0.05)")
    if raw.endswith("%") or value >= 1:
        return value / 100.0
    low, high = AMBIGUOUS_FRACTIONS
    if low <= value < high:
        raise GateInputError(f"{text!r} could be {value:.0%} or {value:g}%: write the % ({value * 100:g}% or {value:g}%)")
    return value


def markdown(comparisons: Sequence[Comparison], max_drop: float, show_all: bool = False) -> str:
    """A table for a CI job summary, regressions first (the layout lives in comparison.py)."""
    from .comparison import CompareView, markdown as render

    return render(CompareView(list(comparisons), max_drop, regression=has_regression(comparisons)), show_all)
