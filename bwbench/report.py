"""The HTML report: one self-contained page of charts and tables made from results files.

It reads only `RunDocument`s, so it runs on any machine (no GPU, no network). plotly.js is inlined
once, so the page opens offline and can be mailed or attached to a CI run as a single file.
Everything a results file says is treated as untrusted text: HTML-escaped in the page, and stripped
of angle brackets before it reaches plotly (which renders a subset of HTML tags in its labels).
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

from .results import Record, RunDocument, memory_text
from .suite import COPY_IMPL, format_value

ENVIRONMENT_ROWS = (
    ("gpu_name", "GPU"),
    ("gpu_uuid", "GPU UUID"),
    ("sm_count", "SMs"),
    ("l2_bytes", "L2 cache"),
    ("memory_bytes", "Memory"),
    ("driver_version", "Driver"),
    ("cuda_version", "CUDA"),
    ("torch_version", "torch"),
    ("cupy_version", "CuPy"),
    ("cudnn_version", "cuDNN"),
    ("peak_gbps", "Theoretical peak"),
    ("copy_gbps", "Measured copy"),
    ("bwbench_version", "bwbench"),
    ("git_commit", "Git commit"),
    ("kernel_options", "Kernel options"),
    ("host", "Host"),
    ("created", "Time"),
)

BASELINE_IMPL = "torch"
"""Speedups in the tables are against eager PyTorch: torch median time / implementation median time."""

MISSING = "—"

IMPL_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#17becf", "#bcbd22", "#7f7f7f")
COPY_COLOR = "#555555"
PEAK_COLORS = ("#b22222", "#8b008b", "#006400", "#00008b")
DOC_DASHES = ("solid", "dashdot", "longdashdot", "longdash")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down")

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d1d1f;
       background: #fff; }
main { max-width: 1300px; margin: 0 auto; padding: 1em 2em 3em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.3em; margin-top: 2em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
h3 { font-size: 1.1em; margin-top: 1.5em; }
p.sub, p.desc { color: #555; margin-top: 0.2em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.failed { background: #fde2e2; color: #a00; font-weight: 600; text-align: center; }
td.skipped { background: #f4f4f4; color: #777; text-align: center; }
td.missing { color: #aaa; text-align: center; }
.throttled { color: #b36b00; font-size: 0.85em; white-space: nowrap; }
.notice { background: #fff4d6; border: 1px solid #e0b400; padding: 0.5em 0.8em; margin: 0.6em 0; }
.tables { display: flex; flex-wrap: wrap; gap: 2em; }
.chart { border: 1px solid #e4e4e4; margin: 0.8em 0; }
ul.failures li { margin: 0.2em 0; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; }
pre#bwbench-js-errors:not(:empty) { background: #fde2e2; color: #a00; padding: 0.5em; }
"""

ERROR_COLLECTOR_JS = """
window.__bwbenchErrors = [];
(function () {
  function show() {
    var el = document.getElementById('bwbench-js-errors');
    if (el) { el.textContent = window.__bwbenchErrors.join('\\n'); }
  }
  function add(text) { window.__bwbenchErrors.push(String(text)); show(); }
  window.__bwbenchShowErrors = show;
  window.addEventListener('error', function (e) {
    add('error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || e) +
        (e.filename ? ' (' + e.filename + ':' + e.lineno + ')' : ''));
  }, true);
  window.addEventListener('unhandledrejection', function (e) { add('unhandled rejection: ' + e.reason); });
  document.addEventListener('securitypolicyviolation', function (e) {
    add('blocked by content security policy: ' + e.violatedDirective + ' ' + e.blockedURI);
  });
})();
"""

ERROR_FLUSH_JS = "window.__bwbenchShowErrors && window.__bwbenchShowErrors();"

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                           "img-src data: blob:; font-src data:")
"""Nothing outside the file may load: proves the page is offline and blocks any injected external script."""


# --- public API ------------------------------------------------------------------------------

def write_report(documents: list[tuple[str, RunDocument]], path: Path, title: str | None = None) -> Path:
    """Write the report page for one or more (label, document) pairs; returns the path written."""
    from .outputs import write_text

    return write_text(Path(path), render_html(documents, title))


def render_html(documents: list[tuple[str, RunDocument]], title: str | None = None) -> str:
    """The whole report page as one HTML string (plotly.js inlined once, no external resources)."""
    if not documents:
        raise ValueError("a report needs at least one results document")
    documents = list(documents)
    title = title or default_title(documents)
    parts: list[Any] = [f"<h1>{esc(title)}</h1>", _subtitle(documents)]
    parts += [_run_notices(label, doc, len(documents) > 1) for label, doc in documents]
    parts += [_environment_section(documents), _options_section(documents)]
    for suite, dtype in suite_dtype_groups(documents):
        parts += _group_section(documents, suite, dtype)
    return _page(title, _realize(parts))


def default_title(documents: Sequence[tuple[str, RunDocument]]) -> str:
    """'bwbench: softmax, layernorm' so a saved page says what it holds."""
    suites = _unique(r.suite for _, doc in documents for r in doc.records)
    return "bwbench report" + (": " + ", ".join(suites) if suites else "")


def suite_dtype_groups(documents: Sequence[tuple[str, RunDocument]]) -> list[tuple[str, str]]:
    """The (suite, dtype) pairs present in the records, in the order they were measured."""
    return _unique((r.suite, r.dtype) for _, doc in documents for r in doc.records)


# --- page assembly ---------------------------------------------------------------------------

def _page(title: str, body: str) -> str:
    """Wrap the body in a page whose error collector runs before any other script."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CONTENT_SECURITY_POLICY}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n<script>{ERROR_COLLECTOR_JS}</script>\n"
        "</head>\n<body>\n<main>\n"
        f"{body}\n"
        "<h2>Page errors</h2>\n<p class=\"sub\">JavaScript errors on this page are listed here "
        "(empty when the charts rendered cleanly).</p>\n"
        "<pre id=\"bwbench-js-errors\"></pre>\n"
        f"<script>{ERROR_FLUSH_JS}</script>\n"
        "</main>\n</body>\n</html>\n"
    )


def _realize(parts: Iterable[Any]) -> str:
    """Turn figures into HTML in page order, so only the first one carries plotly.js."""
    out, charts = [], 0
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        else:
            out.append(_figure_html(part, f"bwbench-chart-{charts}", include_js=charts == 0))
            charts += 1
    return "\n".join(out)


def _figure_html(fig, div_id: str, include_js: bool) -> str:
    """One chart's div and script; plotly's JSON encoder escapes '<', '>' and '/' inside strings."""
    inner = fig.to_html(full_html=False, include_plotlyjs=include_js, div_id=div_id,
                        config=PLOTLY_CONFIG, include_mathjax=False)
    return f"<div class=\"chart\">{inner}</div>"


def _subtitle(documents: Sequence[tuple[str, RunDocument]]) -> str:
    """One line naming the runs compared."""
    labels = ", ".join(esc(label) for label, _ in documents)
    count = sum(len(doc.records) for _, doc in documents)
    return f"<p class=\"sub\">Runs: {labels} · {count} records · effective bandwidth = bytes moved / median time</p>"


def _run_notices(label: str, doc: RunDocument, show_label: bool) -> str:
    """Warn that a document holds only part of its sweep."""
    prefix = f"{esc(label)}: " if show_label else ""
    if doc.interrupted:
        return f"<p class=\"notice\">{prefix}interrupted run: partial results.</p>"
    if not doc.complete:
        return (f"<p class=\"notice\">{prefix}run not marked complete (still running or it crashed): "
                "results may be partial.</p>")
    return ""


# --- environment and options -----------------------------------------------------------------

def _environment_section(documents: Sequence[tuple[str, RunDocument]]) -> str:
    """The machines side by side: one column per document."""
    head = "".join(f"<th>{esc(label)}</th>" for label, _ in documents)
    rows = []
    for key, name in ENVIRONMENT_ROWS:
        cells = "".join(f"<td>{esc(format_environment_value(key, doc.environment.get(key)))}</td>"
                        for _, doc in documents)
        rows.append(f"<tr><th>{esc(name)}</th>{cells}</tr>")
    return (f"<h2>Environment</h2>\n<table class=\"environment\"><thead><tr><th></th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def format_environment_value(key: str, value: Any) -> str:
    """Human units for sizes, bandwidths and times; '—' for anything missing."""
    if value is None or value == "":
        return MISSING
    try:
        if key == "l2_bytes":
            return f"{float(value) / 2**20:.0f} MiB"
        if key == "memory_bytes":
            return f"{float(value) / 2**30:.1f} GiB"
        if key in ("peak_gbps", "copy_gbps"):
            return f"{float(value):.0f} GB/s"
        if key == "created" and isinstance(value, (int, float)):
            return _dt.datetime.fromtimestamp(value, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        pass
    return str(value)


def _options_section(documents: Sequence[tuple[str, RunDocument]]) -> str:
    """The run's options, one small table per document."""
    tables = []
    for label, doc in documents:
        rows = "".join(f"<tr><th>{esc(key)}</th><td class=\"mono\">{esc(format_option(value))}</td></tr>"
                       for key, value in (doc.options or {}).items())
        rows = rows or f"<tr><td>{MISSING}</td></tr>"
        caption = f"<caption>{esc(label)}</caption>" if len(documents) > 1 else ""
        tables.append(f"<table class=\"options\">{caption}<tbody>{rows}</tbody></table>")
    return f"<h2>Run options</h2>\n<div class=\"tables\">{''.join(tables)}</div>"


def format_option(value: Any) -> str:
    """Lists as comma lists, mappings as JSON, nothing as '—'."""
    if value is None:
        return MISSING
    if isinstance(value, (list, tuple)):
        return ", ".join(format_option(v) for v in value) or "[]"
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    return str(value)


# --- one (suite, dtype) section --------------------------------------------------------------

def _group_section(documents: Sequence[tuple[str, RunDocument]], suite: str, dtype: str) -> list[Any]:
    """Heading, bandwidth chart, %-of-copy chart, and per-document tables for one suite and dtype."""
    meta = _suite_meta(documents, suite)
    groups = [(label, doc, [r for r in doc.records if r.suite == suite and r.dtype == dtype])
              for label, doc in documents]
    records = [r for _, _, recs in groups for r in recs]
    x_axis = meta.get("x_axis") or _last_param(records)
    series_axes = varying_axes(records, x_axis)
    multi = len(documents) > 1
    parts: list[Any] = [f"<h2 id=\"{esc(_anchor(suite, dtype))}\">{esc(suite)} · {esc(dtype)}</h2>",
                        _suite_description(meta, records, x_axis, series_axes)]
    if any(is_plottable(r) for r in records):
        impls = implementation_order(meta, records)
        parts.append(_bandwidth_figure(groups, suite, dtype, x_axis, series_axes, impls, multi))
        parts.append(_pct_copy_figure(groups, suite, dtype, x_axis, series_axes, impls, multi))
        if multi:
            parts.append(_pct_peak_figure(groups, suite, dtype, x_axis, series_axes, impls, multi))
            parts.append(_ratio_table(groups, meta))
    else:
        parts.append("<p class=\"notice\">No successful measurements to plot.</p>")
    for label, doc, recs in groups:
        if recs:
            parts.append(_case_table(label if multi else None, recs, meta, x_axis))
            parts.append(_profile_table(recs))
            parts.append(_problem_lists(recs))
    return parts


def _suite_meta(documents: Sequence[tuple[str, RunDocument]], suite: str) -> dict[str, Any]:
    """The suite's description from the first document that has it (reports never import suites)."""
    for _, doc in documents:
        meta = (doc.suites or {}).get(suite)
        if isinstance(meta, dict):
            return meta
    return {}


def _suite_description(meta: dict[str, Any], records: Sequence[Record], x_axis: str | None,
                       series_axes: Sequence[str]) -> str:
    """What the suite measures, the fixed axis values, and what each implementation is."""
    bits = []
    if meta.get("description"):
        bits.append(f"<p class=\"desc\">{esc(meta['description'])}</p>")
    fixed = fixed_axes(records, x_axis, series_axes)
    if fixed:
        text = ", ".join(f"{k}={v}" for k, v in fixed.items())
        bits.append(f"<p class=\"sub\">Fixed: {esc(text)}</p>")
    impls = meta.get("implementations") or {}
    if isinstance(impls, dict) and impls:
        items = "".join(f"<li><b>{esc(name)}</b> ({esc((info or {}).get('kind', '?'))}): "
                        f"{esc((info or {}).get('description', ''))}</li>"
                        for name, info in impls.items() if isinstance(info, dict) or info is None)
        bits.append(f"<details><summary>Implementations</summary><ul>{items}</ul></details>")
    return "\n".join(bits)


def _anchor(suite: str, dtype: str) -> str:
    return f"suite-{suite}-{dtype}"


# --- records: axes, ordering, numbers --------------------------------------------------------

def is_plottable(record: Record) -> bool:
    """Only a successful record with a finite bandwidth is ever drawn as a speed."""
    return record.status == "ok" and _finite(record.gbps)


def implementation_order(meta: dict[str, Any], records: Sequence[Record]) -> list[str]:
    """The suite's declared order, then any others as they appear; the copy ceiling last."""
    declared = list((meta.get("implementations") or {}).keys())
    present = _unique(r.impl for r in records)
    ordered = [name for name in declared if name in present] + [n for n in present if n not in declared]
    return [n for n in ordered if n != COPY_IMPL] + ([COPY_IMPL] if COPY_IMPL in present else [])


def varying_axes(records: Sequence[Record], x_axis: str | None) -> list[str]:
    """Axes other than x that take several values: each combination becomes its own trace."""
    axes = _unique(k for r in records for k in r.params)
    return [a for a in axes if a != x_axis and len(_unique(_axis_text(r, a) for r in records)) > 1]


def fixed_axes(records: Sequence[Record], x_axis: str | None, series_axes: Sequence[str]) -> dict[str, str]:
    """Axes with one value in this section (shown once instead of on every trace)."""
    axes = _unique(k for r in records for k in r.params)
    return {a: _axis_text(records[0], a) for a in axes if a != x_axis and a not in series_axes}


def x_is_numeric(records: Sequence[Record], x_axis: str | None) -> bool:
    """A log axis only makes sense when every x value is a positive number."""
    values = [r.params.get(x_axis) if x_axis else None for r in records]
    return bool(values) and all(_positive_number(v) for v in values)


def bandwidth_range(record: Record) -> tuple[float, float] | None:
    """GB/s at the p90 and p10 times: the spread of speeds one run will usually see."""
    stats = record.stats or {}
    p10, p90, total = stats.get("p10_us"), stats.get("p90_us"), record.bytes_total
    if not (_finite(p10) and _finite(p90) and _finite(total)) or p10 <= 0 or p90 <= 0:
        return None
    return total / p90 / 1e3, total / p10 / 1e3


def speedup(record: Record, baseline: Record | None) -> float | None:
    """Baseline median time / this record's median time (above 1 is faster than the baseline)."""
    if baseline is None or not is_plottable(baseline) or not is_plottable(record):
        return None
    base, mine = (baseline.stats or {}).get("median_us"), (record.stats or {}).get("median_us")
    if not (_finite(base) and _finite(mine)) or mine <= 0:
        return None
    return base / mine


def throttle_note(record: Record) -> str | None:
    """Why the record's clocks were throttled, when its telemetry says they were."""
    telemetry = record.telemetry or {}
    flag = telemetry.get("throttled")
    if not flag:
        return None
    if isinstance(flag, (list, tuple)):
        return ", ".join(str(f) for f in flag)
    return str(flag) if not isinstance(flag, bool) else "clocks throttled during the measurement"


def _series_key(record: Record, series_axes: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"{a}={_axis_text(record, a)}" for a in series_axes)


def _x_value(record: Record, x_axis: str | None, numeric: bool) -> Any:
    value = record.params.get(x_axis) if x_axis else None
    if numeric:
        return value
    return plot_text(format_value(value) if value is not None else record.case)


def _axis_text(record: Record, axis: str) -> str:
    value = record.params.get(axis)
    return MISSING if value is None else format_value(value)


def _sort_key(record: Record, axes: Sequence[str]) -> tuple:
    """Numbers sort as numbers, text naturally (digit runs as numbers), so 1024 comes after 32 and
    the shape 49152x1024 after 49152x32."""
    key = []
    for axis in axes:
        value = record.params.get(axis)
        key.append((0, (float(value),)) if _number(value) else (1, _natural_key(_axis_text(record, axis))))
    return tuple(key)


def _natural_key(text: str) -> tuple:
    """'49152x32' -> ('', 49152, 'x', 32, ''): split always alternates text and digits, so parts compare."""
    return tuple(int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", text)))


def _last_param(records: Sequence[Record]) -> str | None:
    for record in records:
        if record.params:
            return list(record.params)[-1]
    return None


# --- charts ----------------------------------------------------------------------------------

def _bandwidth_figure(groups, suite, dtype, x_axis, series_axes, impls, multi):
    """GB/s against x per implementation, with each case's copy ceiling and the card's peak."""
    import plotly.graph_objects as go

    fig = go.Figure()
    records = [r for _, _, recs in groups for r in recs]
    numeric = x_is_numeric(records, x_axis)
    for doc_index, (label, doc, recs) in enumerate(groups):
        for style_index, (impl, key, points) in enumerate(_series(recs, impls, series_axes, x_axis)):
            name = _trace_name(impl, key, label if multi else None)
            fig.add_trace(_bandwidth_trace(points, name, impl, impls, doc_index, style_index, x_axis, numeric))
    for doc_index, (label, doc, recs) in enumerate(groups):
        _add_peak_line(fig, doc, label if multi else None, doc_index)
    _layout(fig, f"{suite} · {dtype}: effective bandwidth (median)", "GB/s", x_axis, records, numeric)
    return fig


def _pct_copy_figure(groups, suite, dtype, x_axis, series_axes, impls, multi):
    """Each implementation as a share of the same-size copy: 100% means as fast as a copy."""
    return _share_figure(groups, suite, dtype, x_axis, series_axes, impls, multi, "pct_copy",
                         "% of same-size copy bandwidth", "% of copy", "copy = 100%")


def _pct_peak_figure(groups, suite, dtype, x_axis, series_axes, impls, multi):
    """Each implementation as a share of its own card's theoretical peak: GPUs side by side."""
    return _share_figure(groups, suite, dtype, x_axis, series_axes, impls, multi, "pct_peak",
                         "% of each GPU's theoretical peak", "% of peak", "peak = 100%", with_copy=True)


def _share_figure(groups, suite, dtype, x_axis, series_axes, impls, multi, attr, title, y_title, line_text,
                  with_copy=False):
    import plotly.graph_objects as go

    fig = go.Figure()
    records = [r for _, _, recs in groups for r in recs]
    numeric = x_is_numeric(records, x_axis)
    for doc_index, (label, doc, recs) in enumerate(groups):
        shown = [i for i in impls if with_copy or i != COPY_IMPL]
        series = _series(recs, shown, series_axes, x_axis)
        for style_index, (impl, key, points) in enumerate(series):
            points = [p for p in points if _finite(getattr(p, attr))]
            if points:
                name = _trace_name(impl, key, label if multi else None)
                fig.add_trace(go.Scatter(
                    x=[_x_value(p, x_axis, numeric) for p in points], y=[getattr(p, attr) for p in points],
                    mode="markers+lines", name=name,
                    line=_line_style(impl, impls, doc_index), marker=_marker_style(style_index),
                    hovertemplate="%{y:.1f}" + y_title + "<extra>" + _hover_name(name) + "</extra>"))
    fig.add_hline(y=100, line_dash="dash", line_color=COPY_COLOR, line_width=1.5,
                  annotation_text=line_text, annotation_position="top left")
    _layout(fig, f"{suite} · {dtype}: {title}", y_title, x_axis, records, numeric)
    fig.update_yaxes(ticksuffix="%")
    return fig


def _series(records: Sequence[Record], impls: Sequence[str], series_axes: Sequence[str],
            x_axis: str | None) -> list[tuple[str, tuple[str, ...], list[Record]]]:
    """Plottable records grouped by (implementation, other-axes combination), sorted along x."""
    keys = sorted(_unique(_series_key(r, series_axes) for r in records),
                  key=lambda k: _combo_sort(k, records, series_axes))
    out = []
    for impl in impls:
        for key in keys:
            points = _latest_per_case(r for r in records if r.impl == impl and is_plottable(r)
                                      and _series_key(r, series_axes) == key)
            if points:
                out.append((impl, key, sorted(points, key=lambda r: _sort_key(r, [x_axis] if x_axis else []))))
    return out


def _combo_sort(key: tuple[str, ...], records: Sequence[Record], series_axes: Sequence[str]) -> tuple:
    for record in records:
        if _series_key(record, series_axes) == key:
            return _sort_key(record, series_axes)
    return ()


def _latest_per_case(records: Iterable[Record]) -> list[Record]:
    """If a case was measured twice in one document, the later record wins."""
    by_case: dict[str, Record] = {}
    for record in records:
        by_case[record.case] = record
    return list(by_case.values())


def _bandwidth_trace(points, name, impl, impls, doc_index, style_index, x_axis, numeric):
    """One implementation's medians, with p10–p90 bandwidth as error bars and in the hover."""
    import plotly.graph_objects as go

    medians = [p.gbps for p in points]
    ranges = [bandwidth_range(p) for p in points]
    upper = [max(0.0, r[1] - m) if r else 0.0 for r, m in zip(ranges, medians)]
    lower = [max(0.0, m - r[0]) if r else 0.0 for r, m in zip(ranges, medians)]
    custom = [[r[0] if r else float("nan"), r[1] if r else float("nan"),
               p.pct_copy if _finite(p.pct_copy) else float("nan"),
               (p.stats or {}).get("median_us", float("nan")),
               "  ⚠ throttled" if throttle_note(p) else ""] for p, r in zip(points, ranges)]
    is_copy = impl == COPY_IMPL
    return go.Scatter(
        x=[_x_value(p, x_axis, numeric) for p in points], y=medians, name=name, mode="markers+lines",
        line=_line_style(impl, impls, doc_index), marker=_marker_style(style_index, small=is_copy),
        error_y=dict(type="data", symmetric=False, array=upper, arrayminus=lower, thickness=1, width=3,
                     visible=not is_copy),
        customdata=custom,
        hovertemplate=("%{y:.0f} GB/s (p10–p90 %{customdata[0]:.0f}–%{customdata[1]:.0f})"
                       " · %{customdata[2]:.1f}% of copy · %{customdata[3]:.2f} µs%{customdata[4]}"
                       "<extra>" + _hover_name(name) + "</extra>"))


def _add_peak_line(fig, doc: RunDocument, label: str | None, doc_index: int) -> None:
    """The card's theoretical peak as a labelled dotted line (missing peak: no line)."""
    peak = (doc.environment or {}).get("peak_gbps")
    if not _finite(peak) or peak <= 0:
        return
    text = f"theoretical peak {peak:.0f} GB/s" + (f" ({plot_text(label)})" if label else "")
    fig.add_hline(y=peak, line_dash="dot", line_width=1.5, line_color=PEAK_COLORS[doc_index % len(PEAK_COLORS)],
                  annotation_text=text, annotation_position="top left",
                  annotation_font_color=PEAK_COLORS[doc_index % len(PEAK_COLORS)])


def _layout(fig, title: str, y_title: str, x_axis: str | None, records: Sequence[Record], numeric: bool) -> None:
    """Shared look: white template, legend on the right, y from zero, the x axis set up for the sweep."""
    fig.update_layout(
        title=dict(text=plot_text(title), x=0.01), template="plotly_white", height=460,
        margin=dict(l=70, r=20, t=60, b=60), hovermode="closest",
        legend=dict(title_text="", orientation="v", x=1.01, y=1, xanchor="left"),
        font=dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=13))
    fig.update_yaxes(title_text=y_title, rangemode="tozero")
    _apply_x_axis(fig, x_axis, records, numeric)


def _apply_x_axis(fig, x_axis: str | None, records: Sequence[Record], numeric: bool) -> None:
    """Log axis ticked at the swept values (readable powers of two), else categories in sweep order."""
    title = plot_text(x_axis or "case") + (" (log₂ scale)" if numeric else "")
    if numeric:
        values = sorted({float(r.params[x_axis]) for r in records})
        fig.update_xaxes(type="log", title_text=title, tickvals=values, ticktext=[_number_text(v) for v in values])
    else:
        ordered = sorted(records, key=lambda r: _sort_key(r, [x_axis] if x_axis else []))
        categories = _unique(_x_value(r, x_axis, False) for r in ordered)
        fig.update_xaxes(type="category", title_text=title, categoryorder="array",
                         categoryarray=categories)


def _trace_name(impl: str, key: tuple[str, ...], label: str | None) -> str:
    """'compiled rows=4096 · H100': implementation, other axes, then the run it came from."""
    name = "copy ceiling" if impl == COPY_IMPL else impl
    if key:
        name += " " + " ".join(key)
    if label:
        name += f" · {label}"
    return plot_text(name)


def _hover_name(name: str) -> str:
    """Trace names go into hovertemplate text, where '%{' would be read as a placeholder."""
    return name.replace("%{", "%\u200b{")


def _line_style(impl: str, impls: Sequence[str], doc_index: int) -> dict[str, Any]:
    """Colour says the implementation, dash says the run; the copy ceiling is always grey dashes."""
    if impl == COPY_IMPL:
        return dict(color=COPY_COLOR, dash="dash", width=2)
    color = IMPL_COLORS[impls.index(impl) % len(IMPL_COLORS)] if impl in impls else IMPL_COLORS[-1]
    return dict(color=color, dash=DOC_DASHES[doc_index % len(DOC_DASHES)], width=2)


def _marker_style(style_index: int, small: bool = False) -> dict[str, Any]:
    return dict(size=5 if small else 7, symbol=SYMBOLS[style_index % len(SYMBOLS)] if not small else "circle")


# --- tables ----------------------------------------------------------------------------------

def _case_table(label: str | None, records: Sequence[Record], meta: dict[str, Any], x_axis: str | None) -> str:
    """Rows are cases, columns are implementations (GB/s, % of copy, speedup against torch, and the
    mask memory kept for the backward where the implementation declares one)."""
    impls = implementation_order(meta, records)
    masked = {r.impl for r in records if r.mask_bytes is not None}
    axes = _unique(k for r in records for k in r.params)
    cases = _cases_in_order(records, axes)
    by_cell = {(r.case, r.impl): r for r in records}
    head1 = "".join(f"<th rowspan=\"2\">{esc(a)}</th>" for a in axes)
    head1 += "".join(f"<th colspan=\"{_impl_span(i, i in masked)}\">{esc(i)}</th>" for i in impls)
    head2 = "".join(_impl_subheads(i, i in masked) for i in impls)
    rows = []
    for case, example in cases:
        cells = "".join(f"<td class=\"num\">{esc(_axis_text(example, a))}</td>" for a in axes)
        baseline = by_cell.get((case, BASELINE_IMPL))
        cells += "".join(_impl_cells(by_cell.get((case, i)), i, baseline, i in masked) for i in impls)
        rows.append(f"<tr>{cells}</tr>")
    caption = f"<h3>{esc(label)}</h3>" if label else ""
    note = ("" if BASELINE_IMPL in impls else
            f"<p class=\"sub\">No “{BASELINE_IMPL}” implementation in this run: no speedups.</p>")
    return (f"{caption}<table class=\"cases\"><thead><tr>{head1}</tr><tr>{head2}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{note}")


def _ratio_table(groups, meta: dict[str, Any]) -> str:
    """Runs side by side: each implementation's median GB/s per run and its ratio to the first run."""
    labels = [label for label, _, _ in groups]
    records = [r for _, _, recs in groups for r in recs]
    impls = implementation_order(meta, records)
    axes = _unique(k for r in records for k in r.params)
    cells = [{(r.case, r.impl): r for r in recs} for _, _, recs in groups]
    head1 = "".join(f"<th rowspan=\"2\">{esc(a)}</th>" for a in axes)
    head1 += "".join(f"<th colspan=\"{2 * len(labels) - 1}\">{esc(i)}</th>" for i in impls)
    sub = "".join(f"<th>{esc(l)} GB/s</th>" for l in labels)
    sub += "".join(f"<th>{esc(l)} / {esc(labels[0])}</th>" for l in labels[1:])
    head2 = sub * len(impls)
    rows = []
    for case, example in _cases_in_order(records, axes):
        row = "".join(f"<td class=\"num\">{esc(_axis_text(example, a))}</td>" for a in axes)
        for impl in impls:
            found = [c.get((case, impl)) for c in cells]
            speeds = [r.gbps if r is not None and r.status == "ok" and _finite(r.gbps) else None for r in found]
            row += "".join(f"<td class=\"num\">{_gbps_text(v) if v else MISSING}</td>" for v in speeds)
            row += "".join(f"<td class=\"num\">{v / speeds[0]:.2f}×</td>" if v and speeds[0] else
                           f"<td class=\"num\">{MISSING}</td>" for v in speeds[1:])
        rows.append(f"<tr>{row}</tr>")
    return (f"<h3>Runs compared: median GB/s and ratios to {esc(labels[0])}</h3>"
            f"<table class=\"cases\"><thead><tr>{head1}</tr><tr>{head2}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _profile_table(records: Sequence[Record]) -> str:
    """Nsight Compute's DRAM bytes and kernel time next to the byte model and bwbench's time."""
    profiled = [r for r in records if (r.extra or {}).get("profile")]
    if not profiled:
        return ""
    rows = []
    for r in profiled:
        p = r.extra["profile"]
        time_ratio = p.get("time_ratio")
        rows.append(f"<tr><td><code>{esc(r.case)}</code></td><td>{esc(r.impl)}</td>"
                    f"<td class=\"num\">{esc(p.get('kernel_count'))}</td>"
                    f"<td class=\"num\">{p['model_bytes'] / 1e6:,.1f}</td><td class=\"num\">{p['dram_bytes'] / 1e6:,.1f}</td>"
                    f"<td class=\"num\">{p['bytes_ratio']:.2f}×</td><td class=\"num\">{p['bwbench_median_us']:,.1f}</td>"
                    f"<td class=\"num\">{p['ncu_time_us']:,.1f}</td>"
                    f"<td class=\"num\">{'%.2f' % time_ratio if time_ratio else MISSING}</td></tr>")
    head = ("<tr><th>case</th><th>impl</th><th>kernels</th><th>model MB</th><th>DRAM MB (ncu)</th>"
            "<th>DRAM / model</th><th>bwbench µs</th><th>ncu µs</th><th>ncu / bwbench</th></tr>")
    return (f"<h3>Nsight Compute: bytes really moved</h3><table class=\"cases\"><thead>{head}</thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _cases_in_order(records: Sequence[Record], axes: Sequence[str]) -> list[tuple[str, Record]]:
    """Each case once (with a record to read its axis values from), sorted by its axis values."""
    first: dict[str, Record] = {}
    for record in records:
        first.setdefault(record.case, record)
    return sorted(first.items(), key=lambda item: _sort_key(item[1], axes))


def _impl_span(impl: str, masked: bool = False) -> int:
    return 1 if impl == COPY_IMPL else 3 + masked


def _impl_subheads(impl: str, masked: bool = False) -> str:
    if impl == COPY_IMPL:
        return "<th>GB/s</th>"
    mask = "<th title=\"memory the forward keeps for the backward as its mask\">mask kept</th>" if masked else ""
    return f"<th>GB/s</th><th>% copy</th><th>speedup vs {esc(BASELINE_IMPL)}</th>{mask}"


def _impl_cells(record: Record | None, impl: str, baseline: Record | None, masked: bool = False) -> str:
    """One implementation's cells for one case: numbers, or FAILED/skipped with the reason on hover."""
    span = _impl_span(impl, masked)
    if record is None:
        return f"<td class=\"missing\" colspan=\"{span}\">{MISSING}</td>"
    if record.status == "failed":
        return f"<td class=\"failed\" colspan=\"{span}\" title=\"{esc(record.reason or 'no reason recorded')}\">FAILED</td>"
    if record.status == "skipped":
        return f"<td class=\"skipped\" colspan=\"{span}\" title=\"{esc(record.reason or 'no reason recorded')}\">skipped</td>"
    gbps = f"{_gbps_text(record.gbps)}{_throttle_html(record)}"
    detail = esc(cell_detail(record))
    if impl == COPY_IMPL:
        return f"<td class=\"num\" title=\"{detail}\">{gbps}</td>"
    pct = f"{record.pct_copy:.1f}%" if _finite(record.pct_copy) else MISSING
    ratio = speedup(record, baseline)
    ratio_text = f"{ratio:.2f}×" if ratio is not None else MISSING
    mask = ""
    if masked:
        mask = f"<td class=\"num\">{memory_text(record.mask_bytes)}</td>" if _number(record.mask_bytes) else \
            f"<td class=\"num\">{MISSING}</td>"
    return (f"<td class=\"num\" title=\"{detail}\">{gbps}</td><td class=\"num\">{pct}</td>"
            f"<td class=\"num\">{ratio_text}</td>{mask}")


def cell_detail(record: Record) -> str:
    """Time and bytes behind a GB/s figure (shown on hover): implementations may move different bytes."""
    parts = []
    if record.stats and _finite(record.stats.get("median_us")):
        parts.append(f"median {record.stats['median_us']:,.1f} µs")
    if _number(record.bytes_total):
        parts.append(f"{record.bytes_total / 1e6:,.1f} MB moved")
    own = (record.extra or {}).get("own_copy")
    if own:
        parts.append(f"% of a copy of its own {own['bytes'] / 1e6:,.1f} MB ({own['gbps']:,.0f} GB/s)")
    return ", ".join(parts)


def _throttle_html(record: Record) -> str:
    note = throttle_note(record)
    return f" <span class=\"throttled\" title=\"{esc(note)}\">⚠ throttled</span>" if note else ""


def _problem_lists(records: Sequence[Record]) -> str:
    """Failed records with their reasons (always shown), skipped ones folded away."""
    failed = [r for r in records if r.status == "failed"]
    skipped = [r for r in records if r.status == "skipped"]
    out = []
    if failed:
        items = "".join(_problem_item(r) for r in failed)
        out.append(f"<h3>Failed ({len(failed)})</h3><ul class=\"failures\">{items}</ul>")
    if skipped:
        items = "".join(_problem_item(r) for r in skipped)
        out.append(f"<details><summary>Skipped ({len(skipped)})</summary><ul class=\"skips\">{items}</ul></details>")
    return "\n".join(out)


def _problem_item(record: Record) -> str:
    return (f"<li><b>{esc(record.impl)}</b> on <code>{esc(record.case)}</code>: "
            f"{esc(record.reason or 'no reason recorded')}</li>")


# --- small helpers ---------------------------------------------------------------------------

def esc(value: Any) -> str:
    """HTML-escape any value from a results file (quotes too: it may land in an attribute)."""
    return html.escape(str(value), quote=True)


def plot_text(value: Any) -> str:
    """Text for plotly labels: plotly renders a subset of HTML tags, so angle brackets become ‹ ›."""
    return str(value).replace("<", "‹").replace(">", "›")


def _gbps_text(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive_number(value: Any) -> bool:
    return _number(value) and value > 0


def _finite(value: Any) -> bool:
    return _number(value)


def _unique(items: Iterable[Any]) -> list[Any]:
    """Distinct items in first-seen order."""
    seen: dict[Any, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)
