"""The HTML report: one self-contained page that answers first, then shows the detail.

Order: the summary (per suite and implementation: % of copy, speedups over the baselines and, with
several runs, the ratio between runs beside the ratio of the cards' copy bandwidths and peaks), a
table of contents, a section per suite and dtype (charts, then tables folded away), the environment
last. It reads only `RunDocument`s, so it runs on any machine (no GPU, no network).

plotly.js travels once, gzip-compressed inside the page, and is unpacked by the browser
(DecompressionStream): the page opens offline at under half the size of the plain bundle. Everything
a results file says is treated as untrusted text: HTML-escaped in the page, kept out of script
context in the chart data, and stripped of angle brackets before it reaches plotly's labels.
"""

from __future__ import annotations

import base64
import datetime as _dt
import gzip
import html
import json
import math
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from . import report_charts as charts
from .results import Record, RunDocument, memory_text
from .suite import COPY_IMPL, format_value
from .summary import (copy_shares, environment_ratio, group_label, groups_of, is_baseline, run_ratios, speedups,
                      suite_meta)

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
"""Speedups in the per-case tables are against eager PyTorch: torch median time / implementation median time."""

MISSING = "—"

PLOTLY_CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": False}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d1d1f;
       background: #fff; }
main { max-width: 1300px; margin: 0 auto; padding: 0.6em 1.5em 3em; }
h1 { font-size: 1.5em; margin: 0.3em 0 0.1em; }
h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
h3 { font-size: 1.02em; margin: 1em 0 0.3em; }
p.sub, p.desc { color: #555; margin: 0.2em 0; }
table { border-collapse: collapse; margin: 0.4em 0; font-size: 0.86em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.cases td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.failed, table.cases td.failed { background: #fde2e2; color: #a00; font-weight: 600; text-align: center; }
td.skipped, table.cases td.skipped { background: #f4f4f4; color: #777; text-align: center; }
td.missing, table.cases td.missing { color: #aaa; text-align: center; }
td.up { background: #e3f4e3; } td.down { background: #fbe3e3; }
.scroll { max-width: 100%; overflow-x: auto; }
.throttled { color: #b36b00; font-size: 0.85em; white-space: nowrap; }
.inexact { color: #8a2be2; font-size: 0.85em; white-space: nowrap; }
.notice { background: #fff4d6; border: 1px solid #e0b400; padding: 0.4em 0.8em; margin: 0.5em 0; }
.tables { display: flex; flex-wrap: wrap; gap: 1.5em; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 0.8em; }
.charts.wide { grid-template-columns: 1fr; }
.chart-box { border: 1px solid #e4e4e4; min-width: 0; }
.chart-box .caption { font-size: 0.85em; color: #444; padding: 0.3em 0.6em 0; }
.chart { height: 380px; }
.selector { margin: 0.3em 0; font-size: 0.9em; }
details { margin: 0.3em 0; } summary { cursor: pointer; color: #234; }
nav#contents ul { columns: 3 16em; margin: 0.3em 0; padding-left: 1.2em; }
#summary th, nav#contents li { overflow-wrap: anywhere; }
#summary .lead { font-size: 1.02em; margin: 0.3em 0; }
ul.failures li { margin: 0.15em 0; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; }
#bwbench-page-errors pre { background: #fde2e2; color: #a00; padding: 0.5em; white-space: pre-wrap; }
"""

ERROR_COLLECTOR_JS = """
window.__bwbenchErrors = [];
(function () {
  function show() {
    var el = document.getElementById('bwbench-js-errors');
    if (el) { el.textContent = window.__bwbenchErrors.join('\\n'); }
    var box = document.getElementById('bwbench-page-errors');
    if (box && window.__bwbenchErrors.length) { box.hidden = false; }
  }
  function add(text) { window.__bwbenchErrors.push(String(text)); show(); }
  window.__bwbenchShowErrors = show;
  window.__bwbenchAddError = add;
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

CHART_LOADER_JS = """
(function () {
  var config = %(config)s;
  function specs() { return Array.prototype.slice.call(document.querySelectorAll('script.bwbench-figure')); }
  async function unpack() {
    var packed = document.getElementById('bwbench-plotly');
    if (!packed || !specs().length) { return false; }
    if (!window.DecompressionStream) { throw new Error('this browser cannot unpack the charts (no DecompressionStream)'); }
    var raw = atob(packed.textContent.trim());
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { bytes[i] = raw.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    var code = await new Response(stream).text();
    var script = document.createElement('script');
    script.textContent = code;
    document.head.appendChild(script);
    return true;
  }
  function select(sel) {
    var combo = Number(sel.value);
    sel.getAttribute('data-charts').split(' ').forEach(function (id) {
      var div = document.getElementById(id);
      if (!div || !div.data) { return; }
      var visible = div.data.map(function (t) { return !t.meta || t.meta.combo === undefined || t.meta.combo === combo; });
      Plotly.restyle(div, {visible: visible});
    });
  }
  async function draw() {
    if (!(await unpack())) { return; }
    for (const spec of specs()) {
      var figure = JSON.parse(spec.textContent);
      await Plotly.newPlot(document.getElementById(spec.getAttribute('data-target')), figure.data, figure.layout, config);
    }
    document.querySelectorAll('select.bwbench-combo').forEach(function (sel) {
      sel.addEventListener('change', function () { select(sel); });
    });
    document.body.setAttribute('data-charts', 'drawn');
  }
  draw().catch(function (e) { window.__bwbenchAddError('charts: ' + (e && e.message ? e.message : e)); });
})();
"""

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                           "img-src data: blob:; font-src data:; connect-src data: blob:")
"""Nothing outside the file may load: proves the page is offline and blocks any injected external script."""


# --- public API ------------------------------------------------------------------------------

def write_report(documents: list[tuple[str, RunDocument]], path: Path, title: str | None = None) -> Path:
    """Write the report page for one or more (label, document) pairs; returns the path written."""
    from .outputs import write_text

    return write_text(Path(path), render_html(documents, title))


def render_html(documents: list[tuple[str, RunDocument]], title: str | None = None) -> str:
    """The whole report page as one HTML string (plotly.js packed once, no external resources)."""
    if not documents:
        raise ValueError("a report needs at least one results document")
    documents = list(documents)
    title = title or default_title(documents)
    groups = suite_dtype_groups(documents)
    sections = [_group_section(documents, suite, dtype, index) for index, (suite, dtype) in enumerate(groups)]
    figures = [spec for _, specs in sections for spec in specs]
    parts = [f"<h1>{esc(title)}</h1>", _subtitle(documents)]
    parts += [_run_notices(label, doc, len(documents) > 1) for label, doc in documents]
    parts += [summary_section(documents), _contents(documents, groups)]
    parts += [body for body, _ in sections]
    parts += [_environment_section(documents), _options_section(documents)]
    return _page(title, "\n".join(p for p in parts if p), figures)


def default_title(documents: Sequence[tuple[str, RunDocument]]) -> str:
    """'bwbench: softmax, layernorm' so a saved page says what it holds."""
    suites = _unique(r.suite for _, doc in documents for r in doc.records)
    if len(suites) > 4:
        return f"bwbench report: {len(suites)} suites"
    return "bwbench report" + (": " + ", ".join(suites) if suites else "")


def suite_dtype_groups(documents: Sequence[tuple[str, RunDocument]]) -> list[tuple[str, str]]:
    """The (suite, dtype) pairs present in the records, in the order they were measured."""
    return groups_of([doc for _, doc in documents])


class ReportFilterError(ValueError):
    """A --suite/--impl/--dtype name that none of the runs has."""


def filter_documents(documents: Sequence[tuple[str, RunDocument]], suites: Sequence[str] = (),
                     impls: Sequence[str] = (), dtypes: Sequence[str] = ()) -> list[tuple[str, RunDocument]]:
    """Keep only the chosen suites, implementations (the copy ceiling always stays) and dtypes."""
    records = [r for _, doc in documents for r in doc.records]
    for wanted, attr, option in ((suites, "suite", "--suite"), (impls, "impl", "--impl"), (dtypes, "dtype", "--dtype")):
        known = _unique(getattr(r, attr) for r in records)
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ReportFilterError(f"{option} {', '.join(unknown)}: not in these results; they have "
                                    f"{', '.join(str(k) for k in known if k != COPY_IMPL)}")

    def keep(r: Record) -> bool:
        return ((not suites or r.suite in suites) and (not dtypes or r.dtype in dtypes)
                and (not impls or r.impl in impls or r.impl == COPY_IMPL))

    return [(label, replace(doc, records=[r for r in doc.records if keep(r)])) for label, doc in documents]


# --- page assembly ---------------------------------------------------------------------------

@lru_cache(maxsize=1)
def packed_plotly_js() -> str:
    """plotly.min.js, gzip-compressed and base64-encoded (about 2 MB instead of 4.8 MB)."""
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode("utf-8"), 9, mtime=0)).decode("ascii")


def script_json(value: Any) -> str:
    """JSON that cannot leave its <script> element: '<', '>' and '&' written as \\u escapes."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_json_default)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def _page(title: str, body: str, figures: Sequence[tuple[str, dict]]) -> str:
    """Wrap the body; the error collector runs before any other script, the chart data comes last."""
    specs = "".join(f"<script type=\"application/json\" class=\"bwbench-figure\" data-target=\"{esc(div)}\">"
                    f"{script_json(_clean(fig))}</script>\n" for div, fig in figures)
    plotly = (f"<script type=\"application/octet-stream\" id=\"bwbench-plotly\">{packed_plotly_js()}</script>\n"
              f"<script>{CHART_LOADER_JS % {'config': json.dumps(PLOTLY_CONFIG)}}</script>\n") if figures else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CONTENT_SECURITY_POLICY}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n<script>{ERROR_COLLECTOR_JS}</script>\n"
        "</head>\n<body>\n<main>\n"
        f"{body}\n"
        "<section id=\"bwbench-page-errors\" hidden><h2>Page errors</h2>"
        "<p class=\"sub\">JavaScript errors while drawing this page.</p><pre id=\"bwbench-js-errors\"></pre></section>\n"
        "</main>\n"
        f"{specs}{plotly}"
        "</body>\n</html>\n"
    )


def _clean(value: Any) -> Any:
    """NaN and infinity become null: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _subtitle(documents: Sequence[tuple[str, RunDocument]]) -> str:
    """One line naming the runs compared."""
    labels = ", ".join(esc(label) for label, _ in documents)
    count = sum(len(doc.records) for _, doc in documents)
    return (f"<p class=\"sub\">Runs: {labels} · {count} records · effective bandwidth = bytes moved / median time; "
            "% of copy = against a device copy of the same size measured in the same run</p>")


def _run_notices(label: str, doc: RunDocument, show_label: bool) -> str:
    """Warn that a document holds only part of its sweep."""
    prefix = f"{esc(label)}: " if show_label else ""
    if doc.interrupted:
        return f"<p class=\"notice\">{prefix}interrupted run: partial results.</p>"
    if not doc.complete:
        return (f"<p class=\"notice\">{prefix}run not marked complete (still running or it crashed): "
                "results may be partial.</p>")
    return ""


def _contents(documents: Sequence[tuple[str, RunDocument]], groups: Sequence[tuple[str, str]]) -> str:
    dtypes_per_suite = _dtype_counts(groups)
    items = "".join(f"<li><a href=\"#{esc(_anchor(s, d))}\">{esc(group_label(s, d, dtypes_per_suite[s]))}</a></li>"
                    for s, d in groups)
    items += "<li><a href=\"#environment\">Environment and options</a></li>"
    return f"<nav id=\"contents\"><h2>Contents</h2><ul>{items}</ul></nav>"


def _dtype_counts(groups: Sequence[tuple[str, str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for suite, _dtype in groups:
        counts[suite] = counts.get(suite, 0) + 1
    return counts


# --- the summary -----------------------------------------------------------------------------

def summary_section(documents: Sequence[tuple[str, RunDocument]]) -> str:
    """What a reader came for, in the first screen: between runs the speed ratios per suite and
    implementation (beside the copy and peak ratios), then % of copy and speedups per run."""
    groups = suite_dtype_groups(documents)
    dtype_counts = _dtype_counts(groups)
    parts = ["<section id=\"summary\"><h2>Summary</h2>"]
    if len(documents) > 1:
        first_label, first = documents[0]
        for label, doc in documents[1:]:
            parts.append(_runs_ratio_table(first_label, first, label, doc, groups, dtype_counts, documents))
    parts.append(_copy_share_table(documents, groups, dtype_counts))
    parts.append(_speedup_table(documents, groups, dtype_counts))
    parts.append("</section>")
    return "\n".join(parts)


def _ratio_text(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}×"


def _runs_ratio_table(first_label, first, label, doc, groups, dtype_counts, documents) -> str:
    """Rows: suite (and dtype); columns: the copy, then each implementation; cells: geometric-mean
    GB/s ratio over the cases both runs measured, tinted where it beats or trails the copy's ratio."""
    copy_ratio, peak_ratio = environment_ratio(first, doc, "copy_gbps"), environment_ratio(first, doc, "peak_gbps")
    ratios = {(r.suite, r.dtype, r.impl): r for r in run_ratios(first, doc)}
    impls = _summary_impls(documents, groups)
    head = "".join(f"<th class=\"num\">{esc(i)}</th>" for i in impls)
    rows = []
    for suite, dtype in groups:
        copy = ratios.get((suite, dtype, COPY_IMPL))
        cells = f"<td class=\"num\">{_ratio_text(copy.ratio if copy else None)}</td>"
        for impl in impls:
            r = ratios.get((suite, dtype, impl))
            if r is None:
                cells += f"<td class=\"missing\">{MISSING}</td>"
                continue
            tint = ""
            if copy is not None:
                rel = r.ratio / copy.ratio
                tint = " up" if rel >= 1.05 else (" down" if rel <= 0.95 else "")
            title = f"{r.cases} cases, {r.lowest:.2f}× to {r.highest:.2f}×"
            cells += f"<td class=\"num{tint}\" title=\"{esc(title)}\">{r.ratio:.2f}×</td>"
        if any((suite, dtype, i) in ratios for i in [COPY_IMPL, *impls]):
            rows.append(f"<tr><th>{esc(group_label(suite, dtype, dtype_counts[suite]))}</th>{cells}</tr>")
        else:
            rows.append(f"<tr><th>{esc(group_label(suite, dtype, dtype_counts[suite]))}</th>"
                        f"<td class=\"missing\" colspan=\"{len(impls) + 1}\">in one run only</td></tr>")
    lead = (f"<p class=\"lead\"><b>{esc(label)} against {esc(first_label)}</b>: device copy "
            f"{_ratio_text(copy_ratio)}, theoretical peak {_ratio_text(peak_ratio)}. Each cell: "
            f"{esc(label)} GB/s / {esc(first_label)} GB/s, geometric mean over the cases both measured; "
            "green where an implementation gains 5% more than the same-size copy does, red where it gains 5% less.</p>")
    return (f"{lead}<div class=\"scroll\"><table class=\"summary ratios\"><thead><tr><th>suite</th>"
            f"<th class=\"num\">copy</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def _summary_impls(documents, groups) -> list[str]:
    """Implementations over all suites: those under test first, then the baselines, in suite order."""
    tested, baselines = [], []
    for suite, _dtype in groups:
        meta = suite_meta([d for _, d in documents], suite)
        for _, doc in documents:
            for r in doc.records:
                if r.suite != suite or r.impl == COPY_IMPL:
                    continue
                target = baselines if is_baseline(meta, r.impl, r.kind) else tested
                if r.impl not in tested and r.impl not in baselines:
                    target.append(r.impl)
    return tested + baselines


def _copy_share_table(documents, groups, dtype_counts) -> str:
    """Per run, suite and implementation: the median % of copy over the cases, and the lowest."""
    impls = _summary_impls(documents, groups)
    shares = [{(s.suite, s.dtype, s.impl): s for s in copy_shares(doc)} for _, doc in documents]
    multi = len(documents) > 1
    head = ("<th>run</th>" if multi else "") + "".join(f"<th class=\"num\">{esc(i)}</th>" for i in impls)
    rows = []
    for suite, dtype in groups:
        for k, (label, _doc) in enumerate(documents):
            found = [shares[k].get((suite, dtype, i)) for i in impls]
            if not any(found):
                continue
            cells = "".join(_share_cell(s) for s in found)
            run = f"<td>{esc(label)}</td>" if multi else ""
            rows.append(f"<tr><th>{esc(group_label(suite, dtype, dtype_counts[suite]))}</th>{run}{cells}</tr>")
    return ("<h3>% of copy: median over the cases (lowest)</h3><div class=\"scroll\"><table class=\"summary shares\">"
            f"<thead><tr><th>suite</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def _share_cell(share) -> str:
    if share is None:
        return f"<td class=\"missing\">{MISSING}</td>"
    if share.median_pct is None:
        if share.failed:
            return f"<td class=\"failed\" title=\"no successful measurement\">{share.failed} failed</td>"
        return "<td class=\"skipped\">skipped</td>"
    title = f"{share.cases} cases; lowest at {share.lowest_case}"
    if share.failed:
        title += f"; {share.failed} failed"
    failed = f" <span class=\"throttled\">{share.failed} failed</span>" if share.failed else ""
    return f"<td class=\"num\" title=\"{esc(title)}\">{share.median_pct:.0f}% ({share.lowest_pct:.0f}%){failed}</td>"


def _speedup_table(documents, groups, dtype_counts) -> str:
    """Each implementation under test against each baseline: geometric-mean speedup per run."""
    per_run = [speedups(doc) for _, doc in documents]
    baselines = _unique(s.baseline for run in per_run for s in run)
    rows_keys = _unique((s.suite, s.dtype, s.impl) for run in per_run for s in run)
    if not rows_keys:
        return ""
    found = [{(s.suite, s.dtype, s.impl, s.baseline): s for s in run} for run in per_run]
    labels = [label for label, _ in documents]
    rows = []
    order = {g: i for i, g in enumerate(groups)}
    for suite, dtype, impl in sorted(rows_keys, key=lambda k: order.get((k[0], k[1]), 0)):
        cells = ""
        for base in baselines:
            values = [f.get((suite, dtype, impl, base)) for f in found]
            if not any(values):
                cells += f"<td class=\"missing\">{MISSING}</td>"
                continue
            text = " / ".join(_ratio_text(v.ratio if v else None) for v in values)
            title = "; ".join(f"{lab}: {v.cases} cases" for lab, v in zip(labels, values) if v)
            cells += f"<td class=\"num\" title=\"{esc(title)}\">{text}</td>"
        rows.append(f"<tr><th>{esc(group_label(suite, dtype, dtype_counts[suite]))}</th><td>{esc(impl)}</td>{cells}</tr>")
    head = "".join(f"<th class=\"num\">vs {esc(b)}</th>" for b in baselines)
    runs = f" ({' / '.join(esc(l) for l in labels)})" if len(documents) > 1 else ""
    return (f"<h3>Speedup over each baseline: geometric mean of baseline time / time{runs}</h3>"
            f"<div class=\"scroll\"><table class=\"summary speedups\"><thead><tr><th>suite</th><th>under test</th>"
            f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


# --- environment and options -----------------------------------------------------------------

def _environment_section(documents: Sequence[tuple[str, RunDocument]]) -> str:
    """The machines side by side: one column per document."""
    head = "".join(f"<th>{esc(label)}</th>" for label, _ in documents)
    rows = []
    for key, name in ENVIRONMENT_ROWS:
        cells = "".join(f"<td>{esc(format_environment_value(key, doc.environment.get(key)))}</td>"
                        for _, doc in documents)
        rows.append(f"<tr><th>{esc(name)}</th>{cells}</tr>")
    return (f"<h2 id=\"environment\">Environment</h2>\n<div class=\"scroll\"><table class=\"environment\"><thead>"
            f"<tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


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
    """The run's options, one small table per document, folded away."""
    tables = []
    for label, doc in documents:
        rows = "".join(f"<tr><th>{esc(key)}</th><td class=\"mono\">{esc(format_option(value))}</td></tr>"
                       for key, value in (doc.options or {}).items())
        rows = rows or f"<tr><td>{MISSING}</td></tr>"
        caption = f"<caption>{esc(label)}</caption>" if len(documents) > 1 else ""
        tables.append(f"<table class=\"options\">{caption}<tbody>{rows}</tbody></table>")
    return (f"<details><summary>Run options</summary><div class=\"tables scroll\">{''.join(tables)}</div></details>")


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

def _group_section(documents: Sequence[tuple[str, RunDocument]], suite: str, dtype: str,
                   index: int) -> tuple[str, list[tuple[str, dict]]]:
    """Heading, charts (with a selector for the other axes), then the tables folded away.
    Returns the HTML and the (div id, figure) pairs the page draws."""
    meta = _suite_meta(documents, suite)
    runs = [(label, doc, [r for r in doc.records if r.suite == suite and r.dtype == dtype])
            for label, doc in documents]
    records = [r for _, _, recs in runs for r in recs]
    x_axis = meta.get("x_axis") or _last_param(records)
    multi = len(documents) > 1
    impls = implementation_order(meta, records)
    kinds = {r.impl: r.kind for r in records}
    for name, info in (meta.get("implementations") or {}).items():
        if isinstance(info, dict) and info.get("kind"):
            kinds.setdefault(name, str(info["kind"]))
    present = [run for run in runs if run[2]]
    parts = [f"<section class=\"suite\"><h2 id=\"{esc(_anchor(suite, dtype))}\">{esc(suite)} · {esc(dtype)}</h2>"]
    figures: list[tuple[str, dict]] = []
    section = charts.make_section(suite, dtype, present, impls, kinds, x_axis)
    parts.append(_suite_description(meta, records, x_axis, section))
    if any(is_plottable(r) for r in records):
        ids = [f"chart-{index}-a", f"chart-{index}-b"]
        parts.append(_selector(section, ids))
        second = charts.ratio_chart(section) if len(present) > 1 else charts.copy_share_chart(section)
        second_caption = (f"GB/s ratio to {esc(present[0][0])} per case, with the ratio of the theoretical peaks"
                          if len(present) > 1 else "% of the same-size copy (100% = as fast as a copy)")
        parts.append(f"<div class=\"charts{' wide' if section.wide else ''}\">"
                     f"{_chart_box(ids[0], 'Effective bandwidth (median), same-size copy dashed, peak dotted')}"
                     f"{_chart_box(ids[1], second_caption)}</div>")
        figures += [(ids[0], charts.bandwidth_chart(section)), (ids[1], second)]
    else:
        parts.append("<p class=\"notice\">No successful measurements to plot.</p>")
    if multi and len(present) > 1:
        parts.append(_folded("Runs side by side: median GB/s and ratios", _ratio_table(present, meta)))
    for label, doc, recs in present:
        title = f"Per case: GB/s, % of copy, speedup vs {BASELINE_IMPL}" + (f" · {label}" if multi else "")
        parts.append(_folded(title, _case_table(recs, meta) + _profile_table(recs)))
    parts.append(_problem_lists(present))
    parts.append("</section>")
    return "\n".join(p for p in parts if p), figures


def _chart_box(div_id: str, caption: str) -> str:
    return (f"<div class=\"chart-box\"><div class=\"caption\">{caption}</div>"
            f"<div class=\"chart\" id=\"{esc(div_id)}\"></div></div>")


def _folded(summary: str, body: str) -> str:
    return f"<details><summary>{esc(summary)}</summary><div class=\"scroll\">{body}</div></details>"


def _selector(section, ids: Sequence[str]) -> str:
    """A drop-down for the other axes' combinations (layout, variant, direction): one chart each."""
    if len(section.combos) <= 1:
        return ""
    options = "".join(f"<option value=\"{i}\">{esc(', '.join(combo))}</option>" for i, combo in enumerate(section.combos))
    return (f"<p class=\"selector\"><label>{esc(' · '.join(section.other_axes))}: "
            f"<select class=\"bwbench-combo\" data-charts=\"{esc(' '.join(ids))}\">{options}</select></label></p>")


def _suite_meta(documents: Sequence[tuple[str, RunDocument]], suite: str) -> dict[str, Any]:
    """The suite's description from the first document that has it (reports never import suites)."""
    return suite_meta([doc for _, doc in documents], suite)


def _suite_description(meta: dict[str, Any], records: Sequence[Record], x_axis: str | None, section) -> str:
    """What the suite measures, the fixed axis values, and what each implementation is."""
    bits = []
    fixed = fixed_axes(records, x_axis, section.other_axes)
    text = esc(meta.get("description") or "")
    if fixed:
        text += (" · " if text else "") + "fixed: " + esc(", ".join(f"{k}={v}" for k, v in fixed.items()))
    if text:
        bits.append(f"<p class=\"desc\">{text}</p>")
    impls = meta.get("implementations") or {}
    if isinstance(impls, dict) and impls:
        items = "".join(f"<li><b>{esc(name)}</b> ({esc((info or {}).get('kind', '?'))}"
                        f"{', baseline' if is_baseline(meta, name) else ''}): "
                        f"{esc((info or {}).get('description', ''))}</li>"
                        for name, info in impls.items() if isinstance(info, dict) or info is None)
        bits.append(f"<details><summary>Implementations</summary><ul>{items}</ul></details>")
    return "\n".join(bits)


def _anchor(suite: str, dtype: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"suite-{suite}-{dtype}")


# --- records: axes, ordering, numbers --------------------------------------------------------

def is_plottable(record: Record) -> bool:
    """Only a successful record with a finite, positive bandwidth is ever drawn as a speed."""
    return record.status == "ok" and _finite(record.gbps) and record.gbps > 0


def implementation_order(meta: dict[str, Any], records: Sequence[Record]) -> list[str]:
    """The suite's declared order, then any others as they appear; the copy ceiling last."""
    declared = list((meta.get("implementations") or {}).keys())
    present = _unique(r.impl for r in records)
    ordered = [name for name in declared if name in present] + [n for n in present if n not in declared]
    return [n for n in ordered if n != COPY_IMPL] + ([COPY_IMPL] if COPY_IMPL in present else [])


def varying_axes(records: Sequence[Record], x_axis: str | None) -> list[str]:
    """Axes other than x that take several values."""
    axes = _unique(k for r in records for k in r.params)
    return [a for a in axes if a != x_axis and len(_unique(_axis_text(r, a) for r in records)) > 1]


def fixed_axes(records: Sequence[Record], x_axis: str | None, series_axes: Sequence[str]) -> dict[str, str]:
    """Axes with one value in this section (shown once instead of on every trace)."""
    axes = _unique(k for r in records for k in r.params)
    return {a: _axis_text(records[0], a) for a in axes if a != x_axis and a not in series_axes}


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


def _axis_text(record: Record, axis: str) -> str:
    value = record.params.get(axis)
    return MISSING if value is None else format_value(value)


def _sort_key(record: Record, axes: Sequence[str]) -> tuple:
    return charts.sort_key(record, axes)


def _last_param(records: Sequence[Record]) -> str | None:
    for record in records:
        if record.params:
            return list(record.params)[-1]
    return None


# --- tables ----------------------------------------------------------------------------------

def _case_table(records: Sequence[Record], meta: dict[str, Any]) -> str:
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
        cells = "".join(f"<td>{esc(_axis_text(example, a))}</td>" for a in axes)
        baseline = by_cell.get((case, BASELINE_IMPL))
        cells += "".join(_impl_cells(by_cell.get((case, i)), i, baseline, i in masked) for i in impls)
        rows.append(f"<tr>{cells}</tr>")
    note = ("" if BASELINE_IMPL in impls else
            f"<p class=\"sub\">No “{BASELINE_IMPL}” implementation in this run: no speedups.</p>")
    return (f"<table class=\"cases\"><thead><tr>{head1}</tr><tr>{head2}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{note}")


def _ratio_table(runs, meta: dict[str, Any]) -> str:
    """Runs side by side: each implementation's median GB/s per run and its ratio to the first run."""
    labels = [label for label, _, _ in runs]
    records = [r for _, _, recs in runs for r in recs]
    impls = implementation_order(meta, records)
    axes = _unique(k for r in records for k in r.params)
    cells = [{(r.case, r.impl): r for r in recs} for _, _, recs in runs]
    head1 = "".join(f"<th rowspan=\"2\">{esc(a)}</th>" for a in axes)
    head1 += "".join(f"<th colspan=\"{2 * len(labels) - 1}\">{esc(i)}</th>" for i in impls)
    sub = "".join(f"<th class=\"num\">{esc(l)}</th>" for l in labels)
    sub += "".join(f"<th class=\"num\">{esc(l)} / {esc(labels[0])}</th>" for l in labels[1:])
    head2 = sub * len(impls)
    rows = []
    for case, example in _cases_in_order(records, axes):
        row = "".join(f"<td>{esc(_axis_text(example, a))}</td>" for a in axes)
        for impl in impls:
            found = [c.get((case, impl)) for c in cells]
            speeds = [r.gbps if r is not None and is_plottable(r) else None for r in found]
            row += "".join(f"<td>{_gbps_text(v) if v else MISSING}</td>" for v in speeds)
            row += "".join(f"<td>{v / speeds[0]:.2f}×</td>" if v and speeds[0] else
                           f"<td>{MISSING}</td>" for v in speeds[1:])
        rows.append(f"<tr>{row}</tr>")
    return (f"<p class=\"sub\">Median GB/s per run and ratios to {esc(labels[0])}</p>"
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
                    f"<td>{esc(p.get('kernel_count'))}</td>"
                    f"<td>{p['model_bytes'] / 1e6:,.1f}</td><td>{p['dram_bytes'] / 1e6:,.1f}</td>"
                    f"<td>{p['bytes_ratio']:.2f}×</td><td>{p['bwbench_median_us']:,.1f}</td>"
                    f"<td>{p['ncu_time_us']:,.1f}</td>"
                    f"<td>{'%.2f' % time_ratio if time_ratio else MISSING}</td></tr>")
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
    return f"<th>GB/s</th><th>% copy</th><th title=\"speedup vs {esc(BASELINE_IMPL)}\">vs {esc(BASELINE_IMPL)}</th>{mask}"


def _impl_cells(record: Record | None, impl: str, baseline: Record | None, masked: bool = False) -> str:
    """One implementation's cells for one case: numbers, or FAILED/skipped with the reason on hover."""
    span = _impl_span(impl, masked)
    if record is None:
        return f"<td class=\"missing\" colspan=\"{span}\">{MISSING}</td>"
    if record.status == "failed":
        return f"<td class=\"failed\" colspan=\"{span}\" title=\"{esc(record.reason or 'no reason recorded')}\">FAILED</td>"
    if record.status == "skipped":
        return f"<td class=\"skipped\" colspan=\"{span}\" title=\"{esc(record.reason or 'no reason recorded')}\">skipped</td>"
    if not is_plottable(record):  # a hand-edited or cut file: no speed shown as if measured
        return f"<td class=\"failed\" colspan=\"{span}\" title=\"GB/s is {esc(record.gbps)}\">invalid</td>"
    gbps = f"{_gbps_text(record.gbps)}{_throttle_html(record)}{_inexact_html(record)}"
    detail = esc(cell_detail(record))
    if impl == COPY_IMPL:
        return f"<td title=\"{detail}\">{gbps}</td>"
    pct = f"{record.pct_copy:.1f}%" if _finite(record.pct_copy) else MISSING
    ratio = speedup(record, baseline)
    ratio_text = f"{ratio:.2f}×" if ratio is not None else MISSING
    mask = ""
    if masked:
        mask = f"<td>{memory_text(record.mask_bytes)}</td>" if _number(record.mask_bytes) else \
            f"<td>{MISSING}</td>"
    return (f"<td title=\"{detail}\">{gbps}</td><td>{pct}</td>"
            f"<td>{ratio_text}</td>{mask}")


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


def _inexact_html(record: Record) -> str:
    """A baseline timed although its result was outside tolerance: its speed stands, marked, as the
    console marks it, so a speedup over it is not read as one over a right result."""
    if not record.inexact:
        return ""
    return f" <span class=\"inexact\" title=\"{esc(record.reason or 'outside tolerance')}\">inexact</span>"


def _problem_lists(runs) -> str:
    """Failed records with their reasons (always shown), inexact baselines and skipped records
    folded away; a record that failed or was skipped the same way in several runs is listed once,
    with the runs named."""
    multi = len(runs) > 1
    out = []
    for status, heading in (("failed", "Failed"), ("inexact", "Inexact baselines"), ("skipped", "Skipped")):
        merged: dict[tuple[str, str, str], list[str]] = {}
        for label, _doc, recs in runs:
            for r in recs:
                if r.status == status or (status == "inexact" and r.status == "ok" and r.inexact):
                    merged.setdefault((r.impl, r.case, r.reason or "no reason recorded"), []).append(label)
        if not merged:
            continue
        items = "".join(f"<li><b>{esc(impl)}</b> on <code>{esc(case)}</code>: {esc(reason)}"
                        f"{' (' + esc(', '.join(labels)) + ')' if multi else ''}</li>"
                        for (impl, case, reason), labels in merged.items())
        if status == "failed":
            out.append(f"<h3>Failed ({len(merged)})</h3><ul class=\"failures\">{items}</ul>")
        else:
            out.append(f"<details><summary>{heading} ({len(merged)})</summary><ul class=\"skips\">{items}</ul></details>")
    return "\n".join(out)


# --- small helpers ---------------------------------------------------------------------------

def esc(value: Any) -> str:
    """HTML-escape any value from a results file (quotes too: it may land in an attribute)."""
    return html.escape(str(value), quote=True)


plot_text = charts.plot_text


def _gbps_text(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _finite(value: Any) -> bool:
    return _number(value)


def _unique(items: Iterable[Any]) -> list[Any]:
    """Distinct items in first-seen order."""
    seen: dict[Any, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)
