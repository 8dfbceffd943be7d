"""What `bwbench compare` tells people and machines, made from the gate's verdicts.

The gate (gate.py) decides each record's verdict; this module only arranges them: a summary line
first, the ratio summary when the runs come from different GPUs (per suite and implementation, the
geometric-mean speed ratio beside the copy and peak ratios), the records skipped in both runs left
out and counted, and the rest as tables with one column per axis of the suite. It knows no verdict
names beyond the listing order gate.py exports, so new verdicts show up as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from .results import RunDocument
from .suite import format_value
from .summary import environment_ratio, group_label, run_ratios, short_gpu_name


@dataclass
class CompareView:
    """The verdicts to show and what frames them."""

    comparisons: list
    max_drop: float
    skipped_in_both: int = 0
    params: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    baseline_label: str = "baseline"
    current_label: str = "current"
    ratios: list = field(default_factory=list)
    copy_ratio: float | None = None
    peak_ratio: float | None = None
    regression: bool = False
    only_in_current: dict[str, int] = field(default_factory=dict)
    """Suites the baseline run did not include, with their record counts: one line, not a row each."""
    runs: tuple["RunIdentity", ...] = ()
    """The baseline and the current run, named: what was compared with what."""

    @property
    def different_gpus(self) -> bool:
        return bool(self.ratios) or self.copy_ratio is not None


@dataclass(frozen=True)
class RunIdentity:
    """Which run stands on one side of a comparison: where it came from, its GPU, when, which commit."""

    role: str
    source: str
    gpu: str | None
    created: str | None
    commit: str | None

    @classmethod
    def of(cls, role: str, source: str, document: RunDocument) -> "RunIdentity":
        env = document.environment

        def text(key: str) -> str | None:
            value = env.get(key)
            return str(value) if value not in (None, "") else None

        return cls(role, source, text("gpu_name"), text("created"), text("git_commit"))

    def line(self) -> str:
        """'baseline: a.json (NVIDIA H100 80GB HBM3, 2026-11-28T08:40:12, commit 99b2252)'."""
        facts = [self.gpu or "GPU not named"]
        if self.created:
            facts.append(self.created)
        if self.commit:
            facts.append(f"commit {self.commit[:12]}")
        return f"{self.role}: {self.source} ({', '.join(facts)})"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "gpu": self.gpu, "created": self.created, "commit": self.commit}


def record_keys_skipped_in_both(baseline: RunDocument, current: RunDocument) -> set[tuple[str, str, str, str]]:
    """(suite, case, dtype, impl) of records that both runs skipped: nothing to compare, nothing to fix."""
    base = {(r.suite, r.case, r.dtype, r.impl) for r in baseline.records if r.status == "skipped"}
    cur = {(r.suite, r.case, r.dtype, r.impl) for r in current.records if r.status == "skipped"}
    return base & cur


def build_view(baseline: RunDocument, current: RunDocument, comparisons: Sequence, max_drop: float,
               regression: bool, sources: tuple[str, str] = ("baseline", "current")) -> CompareView:
    """Leave out the records skipped in both runs (counted), name the two runs (`sources`: where each
    came from), and add the ratio summary when the runs come from different GPU models."""
    skipped = record_keys_skipped_in_both(baseline, current)
    kept = [c for c in comparisons if (c.suite, c.case, c.dtype, c.impl) not in skipped]
    params = {}
    for doc in (baseline, current):
        for r in doc.records:
            params[(r.suite, r.case, r.dtype, r.impl)] = r.params or {}
    a, b = baseline.environment.get("gpu_name"), current.environment.get("gpu_name")
    view = CompareView(kept, max_drop, len(comparisons) - len(kept), params, regression=regression,
                       runs=(RunIdentity.of("baseline", sources[0], baseline), RunIdentity.of("current", sources[1], current)))
    baseline_suites = {r.suite for r in baseline.records}
    for c in kept:
        if c.suite not in baseline_suites:
            view.only_in_current[c.suite] = view.only_in_current.get(c.suite, 0) + 1
    if a != b:
        view.baseline_label, view.current_label = short_gpu_name(a), short_gpu_name(b)
        if view.baseline_label == view.current_label:
            view.baseline_label, view.current_label = str(a), str(b)
        view.ratios = run_ratios(baseline, current)
        view.copy_ratio = environment_ratio(baseline, current, "copy_gbps")
        view.peak_ratio = environment_ratio(baseline, current, "peak_gbps")
    return view


def verdict_counts(comparisons: Sequence) -> dict[str, int]:
    """Counts per verdict, in the gate's listing order, then any verdict it does not list."""
    from .gate import LISTING_ORDER

    counts: dict[str, int] = {}
    for c in comparisons:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    order = {v: i for i, v in enumerate(LISTING_ORDER)}
    return dict(sorted(counts.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))


def summary_line(view: CompareView) -> str:
    """'regression: 1 slower, 2 ambiguous, 380 same of 383 records at a 5.0% threshold; 40 skipped in both runs left out'."""
    from .gate import PARTIAL

    counts = ", ".join(f"{n} {v}" for v, n in verdict_counts(view.comparisons).items())
    partial = any(c.verdict in PARTIAL for c in view.comparisons)  # the gate fails these unless --allow-partial
    head = "regression" if view.regression else ("no regression seen, but data is invalid or missing" if partial
                                                  else "no regression")
    line = f"{head}: {counts or 'nothing'} of {len(view.comparisons)} records at a {view.max_drop:.1%} threshold"
    if view.skipped_in_both:
        line += f"; {view.skipped_in_both} skipped in both runs left out"
    return line


def ratio_rows(view: CompareView) -> list[tuple[str, str, str, int]]:
    """(suite label, implementation, ratio text, cases): the copy first in each suite."""
    groups: dict[tuple[str, str], list] = {}
    for r in view.ratios:
        groups.setdefault((r.suite, r.dtype), []).append(r)
    dtypes: dict[str, int] = {}
    for suite, _dtype in groups:
        dtypes[suite] = dtypes.get(suite, 0) + 1
    rows = []
    for (suite, dtype), found in groups.items():
        found.sort(key=lambda r: (r.impl != "copy", r.impl))
        for r in found:
            rows.append((group_label(suite, dtype, dtypes[suite]), r.impl, f"{r.ratio:.2f}×", r.cases))
    return rows


def ratio_headline(view: CompareView) -> str:
    bits = [f"{view.current_label} / {view.baseline_label}"]
    if view.copy_ratio:
        bits.append(f"device copy {view.copy_ratio:.2f}×")
    if view.peak_ratio:
        bits.append(f"theoretical peak {view.peak_ratio:.2f}×")
    return ": ".join(bits[:1]) + (": " + ", ".join(bits[1:]) if len(bits) > 1 else "")


def ratio_matrix(view: CompareView) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Suites as rows, implementations as columns (copy first): compact for a terminal or markdown."""
    impls: list[str] = ["copy"]
    for r in view.ratios:
        if r.impl not in impls:
            impls.append(r.impl)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in view.ratios:
        groups.setdefault((r.suite, r.dtype), {})[r.impl] = r
    dtypes: dict[str, int] = {}
    for suite, _dtype in groups:
        dtypes[suite] = dtypes.get(suite, 0) + 1
    rows = []
    for (suite, dtype), found in groups.items():
        rows.append((group_label(suite, dtype, dtypes[suite]),
                     [f"{found[i].ratio:.2f}×" if i in found else "—" for i in impls]))
    return impls, rows


def axis_names(view: CompareView, suite: str) -> list[str]:
    """The suite's axes as columns; 'case' when the records carry no axis values."""
    names: dict[str, None] = {}
    for c in view.comparisons:
        if c.suite == suite:
            for name in view.params.get((c.suite, c.case, c.dtype, c.impl), {}):
                names.setdefault(name, None)
    return list(names) or ["case"]


def axis_cells(view: CompareView, comparison, axes: Sequence[str]) -> list[str]:
    params = view.params.get((comparison.suite, comparison.case, comparison.dtype, comparison.impl), {})
    if axes == ["case"] and "case" not in params:
        return [comparison.case]
    return [format_value(params[a]) if a in params else "—" for a in axes]


def listed(view: CompareView, show_all: bool, absent: dict[str, int]) -> list:
    """The verdicts worth a row, needing attention first; 'same' only with --all. Across GPU models
    the ratio summary answers for the speeds, so only regressions and records without a speed change
    (failed, missing, ...) get rows unless --all. A verdict that fails the gate is always a row, even
    in a suite summed up in one line: the exit code must point at something."""
    from .gate import LISTING_ORDER, PARTIAL, has_regression

    order = {v: i for i, v in enumerate(LISTING_ORDER)}

    def worth_a_row(c) -> bool:
        if show_all or has_regression([c]) or c.verdict in PARTIAL:
            return True
        if c.suite in absent or c.suite in view.only_in_current or c.verdict == "same":
            return False
        return not view.different_gpus or c.change is None or has_regression([c])

    return sorted((c for c in view.comparisons if worth_a_row(c)), key=lambda c: order.get(c.verdict, len(order)))


def left_out_lines(view: CompareView, show_all: bool, absent: dict[str, int]) -> list[str]:
    """One line each for what the rows leave out, so nothing disappears silently."""
    from .gate import absent_line

    lines = []
    if absent and not show_all:
        lines.append(absent_line(absent) + " (--all lists them)")
    if view.only_in_current and not show_all:
        lines.append("only in the current run: " + ", ".join(f"{s} ({n} records)" for s, n in view.only_in_current.items()))
    if view.different_gpus and not show_all:
        lines.append("per-record speed changes across GPU models: --all lists them")
    return lines


def number_text(value: float | None, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, fmt)


def to_json(view: CompareView) -> dict[str, Any]:
    """The machine-readable verdicts: the summary, the ratio summary, then every comparison."""
    payload: dict[str, Any] = {
        "max_drop": view.max_drop, "regression": view.regression, "summary": summary_line(view),
        "counts": verdict_counts(view.comparisons), "skipped_in_both": view.skipped_in_both,
        **{run.role: run.to_dict() for run in view.runs},
    }
    if view.different_gpus:
        payload["ratios"] = {"baseline": view.baseline_label, "current": view.current_label,
                             "copy_ratio": view.copy_ratio, "peak_ratio": view.peak_ratio,
                             "per_suite": [{"suite": r.suite, "dtype": r.dtype, "impl": r.impl, "ratio": r.ratio,
                                            "cases": r.cases} for r in view.ratios]}
    payload["comparisons"] = [{**c.to_dict(), "params": view.params.get((c.suite, c.case, c.dtype, c.impl), {})}
                              for c in view.comparisons]
    return payload


def _md(text: Any) -> str:
    """Text from a results file, made inert in a markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def markdown(view: CompareView, show_all: bool = False) -> str:
    """A CI job summary: the summary line, the ratio summary across GPUs, then a table per suite of
    what changed (one column per axis)."""
    from .gate import absent_suites

    mark = "❌" if view.regression else "✅"
    lines = [f"**bwbench compare**: {mark} {_md(summary_line(view))}", ""]
    if view.runs:
        lines += ["<br>".join(_md(run.line()) for run in view.runs), ""]
    if view.different_gpus:
        impls, rows = ratio_matrix(view)
        lines += [f"**{_md(ratio_headline(view))}** (geometric mean of GB/s ratios per suite)", "",
                  "| suite | " + " | ".join(_md(i) for i in impls) + " |",
                  "|---|" + "---:|" * len(impls)]
        lines += ["| " + _md(label) + " | " + " | ".join(cells) + " |" for label, cells in rows]
        lines.append("")
    absent = absent_suites(view.comparisons)
    shown = listed(view, show_all, absent)
    for suite in dict.fromkeys(c.suite for c in shown):
        axes = axis_names(view, suite)
        rows = [c for c in shown if c.suite == suite]
        lines += [f"**{_md(suite)}**", "",
                  "| verdict | " + " | ".join(_md(a) for a in axes) + " | "
                  + "dtype | impl | baseline GB/s | current GB/s | change | p | note |",
                  "|---|" + "---|" * len(axes) + "---|---|---:|---:|---:|---:|---|"]
        for c in rows:
            cells = [c.verdict, *axis_cells(view, c, axes), c.dtype, c.impl,
                     number_text(c.baseline_gbps, ",.0f"), number_text(c.current_gbps, ",.0f"),
                     number_text(c.change, "+.1%"), number_text(c.p_value, ".2g"), c.note or ""]
            lines.append("| " + " | ".join(_md(x) for x in cells) + " |")
        lines.append("")
    lines += [_md(line) for line in left_out_lines(view, show_all, absent)]
    return "\n".join(lines).rstrip() + "\n"
