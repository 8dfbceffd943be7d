"""Chart specifications for the report: plain plotly.js figure dictionaries, drawn in the browser.

One series per implementation (colour = implementation, marker symbol = run), the other varying axes
(layout, variant, direction) behind a selector above the charts; numeric sweeps on a log axis joined
by lines, categorical axes (shapes) as markers only. With several runs, a ratio chart shows each
implementation's speed on the other run against the first, next to the ratio of the cards' peaks.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Sequence

from .results import Record
from .suite import COPY_IMPL, format_value
from .summary import environment_ratio, ok_speed

KIND_COLORS = {"cuda": "#1f77b4", "torch": "#ff7f0e", "compiled": "#2ca02c", "cudnn": "#d62728",
               "naive": "#9467bd", "triton": "#17becf", "peer": "#8c564b", "ceiling": "#555555"}
"""Colour of the first implementation of each known kind; the copy ceiling is always grey."""
EXTRA_COLORS = ("#e377c2", "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
                "#e6550d", "#31a354", "#756bb1", "#636363")
"""Colours of further implementations of a kind already shown, and of kinds not named above."""
COPY_COLOR = KIND_COLORS["ceiling"]
RUN_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "x", "star", "cross", "triangle-down")
PEAK_DASHES = ("dot", "dashdot", "longdash", "dash")
CHART_HEIGHT = 380
FOLD_BELOW_POINTS = 3
"""Other axes are folded into a categorical x axis when their combinations hold fewer points than
this each on average (permute: a perm per shape), instead of a selector of near-empty charts."""

BASE_LAYOUT = {
    "height": CHART_HEIGHT, "autosize": True, "margin": {"l": 60, "r": 15, "t": 30, "b": 60},
    "paper_bgcolor": "#fff", "plot_bgcolor": "#fff", "hovermode": "closest",
    "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
    "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "font": {"size": 11}},
}
AXIS_STYLE = {"gridcolor": "#e6e6e6", "linecolor": "#999", "zeroline": False, "automargin": True}


def color_for_kind(kind: str | None) -> str:
    """A colour for any kind string: the known kinds keep theirs, others a stable pick from a palette."""
    kind = str(kind or "")
    if kind in KIND_COLORS:
        return KIND_COLORS[kind]
    return EXTRA_COLORS[zlib.crc32(kind.encode("utf-8")) % len(EXTRA_COLORS)]


def implementation_colors(impls: Sequence[str], kinds: dict[str, str]) -> dict[str, str]:
    """Colour per implementation: the first of a kind gets the kind's colour, later ones distinct extras."""
    colors, used = {}, set()
    for impl in impls:
        if impl == COPY_IMPL:
            colors[impl] = COPY_COLOR
            continue
        color = color_for_kind(kinds.get(impl))
        if color in used:
            color = next((c for c in EXTRA_COLORS if c not in used), color)
        colors[impl] = color
        used.add(color)
    return colors


def plot_text(value: Any) -> str:
    """Text for plotly labels: plotly renders a subset of HTML tags, so angle brackets become ‹ ›."""
    return str(value).replace("<", "‹").replace(">", "›")


def hover_safe(text: str) -> str:
    """Names go into hovertemplate text, where '%{' would be read as a placeholder."""
    return plot_text(text).replace("%{", "%\u200b{")


def number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def rounded(value: float | None, digits: int = 4) -> float | None:
    """Four significant digits: what a chart can show, and a fraction of the page's bytes."""
    if not number(value):
        return None
    return float(f"{value:.{digits}g}")


def axis_text(record: Record, axis: str) -> str:
    value = record.params.get(axis)
    return "—" if value is None else format_value(value)


def natural_key(text: str) -> tuple:
    return tuple(int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", text)))


def sort_key(record: Record, axes: Sequence[str]) -> tuple:
    """Numbers sort as numbers, text naturally, so 1024 comes after 32 and 49152x1024 after 49152x32."""
    return tuple((0, (float(record.params[a]),)) if number(record.params.get(a))
                 else (1, natural_key(axis_text(record, a))) for a in axes)


def tick_text(value: float) -> str:
    """Short tick labels: 4096, 65536, 2^20 (powers of two past a million), 3e+06."""
    if float(value).is_integer():
        v = int(value)
        if v >= 1_000_000:
            return f"2^{v.bit_length() - 1}" if v & (v - 1) == 0 else f"{v:.3g}"
        return str(v)
    return f"{value:g}"


@dataclass
class Section:
    """What the charts of one (suite, dtype) need: the runs' records and how to lay the axes out."""

    suite: str
    dtype: str
    runs: list[tuple[str, Any, list[Record]]]
    impls: list[str]
    kinds: dict[str, str]
    x_axis: str | None
    other_axes: list[str]
    folded: bool
    combos: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def records(self) -> list[Record]:
        return [r for _, _, recs in self.runs for r in recs]

    @property
    def wide(self) -> bool:
        """Many categories: the charts take the page's full width, one above the other."""
        return not self.numeric and len({self.x_value(r) for r in self.records}) > 12

    @property
    def numeric(self) -> bool:
        values = [r.params.get(self.x_axis) if self.x_axis else None for r in self.records]
        return bool(values) and not self.folded and all(number(v) and v > 0 for v in values)

    def combo(self, record: Record) -> tuple[str, ...]:
        return () if self.folded else tuple(f"{a}={axis_text(record, a)}" for a in self.other_axes)

    def x_value(self, record: Record) -> Any:
        if self.numeric:
            return record.params.get(self.x_axis)
        parts = [axis_text(record, self.x_axis)] if self.x_axis else [record.case]
        if self.folded:
            parts += [axis_text(record, a) for a in self.other_axes]
        return " ".join(plot_text(p) for p in parts)


def make_section(suite: str, dtype: str, runs, impls: list[str], kinds: dict[str, str], x_axis: str | None) -> Section:
    """Decide the chart layout: which axes vary besides x, and whether a selector or folding shows them."""
    records = [r for _, _, recs in runs for r in recs]
    axes = list(dict.fromkeys(k for r in records for k in r.params))
    other = [a for a in axes if a != x_axis and len({axis_text(r, a) for r in records}) > 1]
    section = Section(suite, dtype, runs, impls, kinds, x_axis, other, folded=False)
    combos = list(dict.fromkeys(section.combo(r) for r in records))  # in the order the sweep measured them
    numeric_x = all(number(r.params.get(x_axis)) for r in records) if x_axis else False
    if len(combos) > 1 and not numeric_x:
        cases = len({r.case for r in records})
        if cases / len(combos) < FOLD_BELOW_POINTS:
            section.folded = True
            combos = [()]
    section.combos = combos or [()]
    return section


def _points(section: Section, recs: Sequence[Record], impl: str, combo: tuple[str, ...]) -> list[Record]:
    latest: dict[str, Record] = {}
    for r in recs:
        if r.impl == impl and section.combo(r) == combo and ok_speed(r):
            latest[r.case] = r
    order = ([section.x_axis] if section.x_axis else []) + (section.other_axes if section.folded else [])
    return sorted(latest.values(), key=lambda r: sort_key(r, order))


def _base_trace(section: Section, impl: str, run_index: int, combo_index: int) -> dict[str, Any]:
    color = implementation_colors(section.impls, section.kinds)[impl]
    is_copy = impl == COPY_IMPL
    trace = {"type": "scatter", "mode": "lines+markers" if section.numeric else "markers",
             "name": "copy" if is_copy else plot_text(impl), "showlegend": False,
             "marker": {"color": color, "symbol": RUN_SYMBOLS[run_index % len(RUN_SYMBOLS)],
                        "size": 6 if is_copy else 8, "line": {"width": 0}},
             "line": {"color": color, "width": 1.5 if is_copy else 2, "dash": "dash" if is_copy else "solid"},
             "meta": {"combo": combo_index}, "visible": combo_index == 0}
    if not section.numeric:
        trace["offsetgroup"] = impl
    return trace


def _legend(section: Section, impls: Sequence[str], run_labels: Sequence[str]) -> list[dict[str, Any]]:
    """A key that stays put whatever the selector shows: one entry per implementation, one per run."""
    colors = implementation_colors(section.impls, section.kinds)
    mode = "lines+markers" if section.numeric else "markers"
    out = [{"type": "scatter", "x": [None], "y": [None], "mode": mode, "name": "copy" if i == COPY_IMPL else plot_text(i),
            "marker": {"color": colors[i], "size": 8}, "line": {"color": colors[i], "dash": "dash" if i == COPY_IMPL else "solid"},
            "hoverinfo": "skip"} for i in impls]
    if len(run_labels) > 1:
        out += [{"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": plot_text(label),
                 "marker": {"color": "#444", "size": 8, "symbol": RUN_SYMBOLS[k % len(RUN_SYMBOLS)]},
                 "hoverinfo": "skip"} for k, label in enumerate(run_labels)]
    return out


def _x_axis_layout(section: Section) -> dict[str, Any]:
    title = plot_text(section.x_axis or "case")
    if section.folded:
        title += " · " + " · ".join(plot_text(a) for a in section.other_axes)
    if section.numeric:
        values = sorted({float(r.params[section.x_axis]) for r in section.records})
        return {**AXIS_STYLE, "type": "log", "title": {"text": title + " (log scale)"}, "tickvals": values,
                "ticktext": [tick_text(v) for v in values]}
    order = ([section.x_axis] if section.x_axis else []) + (section.other_axes if section.folded else [])
    ordered = sorted(section.records, key=lambda r: sort_key(r, order))
    categories = list(dict.fromkeys(section.x_value(r) for r in ordered))
    return {**AXIS_STYLE, "type": "category", "title": {"text": title}, "categoryorder": "array",
            "categoryarray": categories, "tickfont": {"size": 10 if len(categories) > 12 else 11}}


def bandwidth_chart(section: Section) -> dict[str, Any]:
    """GB/s per implementation and run, the same-size copy as a grey dashed series, each card's peak dotted."""
    labels = [label for label, _, _ in section.runs]
    traces = _legend(section, section.impls, labels)
    for c, combo in enumerate(section.combos):
        for k, (label, _doc, recs) in enumerate(section.runs):
            for impl in section.impls:
                points = _points(section, recs, impl, combo)
                if not points:
                    continue
                trace = _base_trace(section, impl, k, c)
                trace.update(
                    x=[section.x_value(p) for p in points], y=[rounded(p.gbps) for p in points],
                    customdata=[[rounded(p.pct_copy, 3), rounded((p.stats or {}).get("median_us"), 4)] for p in points],
                    hovertemplate=("%{y:.0f} GB/s · %{customdata[0]:.1f}% of copy · %{customdata[1]:.2f} µs<br>%{x}"
                                   "<extra>" + hover_safe(f"{impl} · {label}" if len(labels) > 1 else impl) + "</extra>"))
                if impl == COPY_IMPL:
                    trace["hovertemplate"] = ("%{y:.0f} GB/s copy of the same size<br>%{x}<extra>"
                                              + hover_safe(label) + "</extra>")
                traces.append(trace)
    shapes, notes = [], []
    for k, (label, doc, _recs) in enumerate(section.runs):
        peak = (doc.environment or {}).get("peak_gbps")
        if number(peak) and peak > 0:
            shapes.append(_hline(peak, PEAK_DASHES[k % len(PEAK_DASHES)], "#b22222"))
            notes.append(_hnote(peak, f"peak {label} {peak:,.0f}" if len(labels) > 1 else f"peak {peak:,.0f} GB/s"))
    layout = _layout(section, "GB/s", shapes, notes)
    layout["yaxis"]["rangemode"] = "tozero"
    return {"data": traces, "layout": layout}


def copy_share_chart(section: Section) -> dict[str, Any]:
    """One run: each implementation as a share of the same-size copy (100% = as fast as a copy)."""
    impls = [i for i in section.impls if i != COPY_IMPL]
    traces = _legend(section, impls, [])
    for c, combo in enumerate(section.combos):
        for k, (label, _doc, recs) in enumerate(section.runs):
            for impl in impls:
                points = [p for p in _points(section, recs, impl, combo) if number(p.pct_copy)]
                if not points:
                    continue
                trace = _base_trace(section, impl, k, c)
                trace.update(x=[section.x_value(p) for p in points], y=[rounded(p.pct_copy, 3) for p in points],
                             hovertemplate="%{y:.1f}% of copy<br>%{x}<extra>" + hover_safe(impl) + "</extra>")
                traces.append(trace)
    layout = _layout(section, "% of copy", [_hline(100, "dash", COPY_COLOR)], [_hnote(100, "copy = 100%")])
    layout["yaxis"].update(rangemode="tozero", ticksuffix="%")
    return {"data": traces, "layout": layout}


def ratio_chart(section: Section) -> dict[str, Any]:
    """Several runs: each implementation's GB/s on run k over run 1, per case; the peaks' ratio dotted.
    A kernel that keeps up with the faster card sits on the copy series and near the peak line."""
    first_label, first_doc, first_recs = section.runs[0]
    others = section.runs[1:]
    traces = _legend(section, section.impls, [label for label, _, _ in others] if len(others) > 1 else [])
    for c, combo in enumerate(section.combos):
        for k, (label, _doc, recs) in enumerate(others):
            for impl in section.impls:
                base = {p.case: p for p in _points(section, first_recs, impl, combo)}
                points = [p for p in _points(section, recs, impl, combo) if p.case in base]
                if not points:
                    continue
                trace = _base_trace(section, impl, k, c)
                trace.update(x=[section.x_value(p) for p in points],
                             y=[rounded(p.gbps / base[p.case].gbps) for p in points],
                             customdata=[[rounded(base[p.case].gbps), rounded(p.gbps)] for p in points],
                             hovertemplate=("%{y:.2f}× (%{customdata[1]:.0f} / %{customdata[0]:.0f} GB/s)<br>%{x}<extra>"
                                            + hover_safe(f"{impl}: {label} / {first_label}") + "</extra>"))
                traces.append(trace)
    shapes, notes = [_hline(1.0, "solid", "#bbb")], []
    for k, (label, doc, _recs) in enumerate(others):
        peak = environment_ratio(first_doc, doc, "peak_gbps")
        if peak:
            shapes.append(_hline(peak, PEAK_DASHES[k % len(PEAK_DASHES)], "#b22222"))
            notes.append(_hnote(peak, f"peak ratio {peak:.2f}×" + (f" ({label})" if len(others) > 1 else "")))
    y_title = f"× {plot_text(first_label)}" if len(others) > 1 else f"{plot_text(others[0][0])} / {plot_text(first_label)}"
    layout = _layout(section, y_title, shapes, notes)
    layout["yaxis"]["ticksuffix"] = "×"
    values = [y for t in traces for y in t["y"] if number(y)] + [s["y0"] for s in shapes]
    if values:  # around the ratios and the peak line, not from zero: ratios near 1 need the resolution
        low, high = min(values), max(values)
        pad = 0.06 * (high - low or 1.0)
        layout["yaxis"]["range"] = [max(0.0, low - pad), high + pad]
    return {"data": traces, "layout": layout}


def _layout(section: Section, y_title: str, shapes, notes) -> dict[str, Any]:
    layout = {**BASE_LAYOUT, "xaxis": _x_axis_layout(section),
              "yaxis": {**AXIS_STYLE, "title": {"text": plot_text(y_title)}}, "shapes": shapes, "annotations": notes}
    if not section.numeric:
        layout["scattermode"] = "group"
    return layout


def _hline(y: float, dash: str, color: str) -> dict[str, Any]:
    return {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": y, "y1": y,
            "line": {"dash": dash, "color": color, "width": 1.5}}


def _hnote(y: float, text: str) -> dict[str, Any]:
    return {"xref": "paper", "x": 0.005, "xanchor": "left", "y": y, "yanchor": "bottom", "showarrow": False,
            "text": plot_text(text), "font": {"size": 10, "color": "#7a1f1f"}}
