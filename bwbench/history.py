"""`bwbench history`: a suite's bandwidth over commits and dates, from the results store.

One row per stored run (date, commit, GPU), one column per implementation. With one case the cells
are that case's GB/s; with several, the geometric mean over the cases the run measured, and the
number of cases beside it (a run of fewer cases is not comparable at a glance, so it says so).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .report import _page
from .report_charts import AXIS_STYLE, BASE_LAYOUT, RUN_SYMBOLS, hover_safe, implementation_colors, plot_text, rounded
from .store import TrendPoint
from .summary import geometric_mean, short_gpu_name


@dataclass(frozen=True)
class TrendCell:
    """One implementation in one run: GB/s (geometric mean over cases), median % of copy, cases."""

    gbps: float | None
    pct_copy: float | None
    cases: int
    failed: int


@dataclass(frozen=True)
class TrendRow:
    run_id: str
    created: str | None
    git_commit: str | None
    gpu_name: str | None
    cells: dict[str, TrendCell]
    timing: str | None = None
    """How the run was timed (bwbench.method): a step in a trend where it changes is the method's."""


def trend_rows(points: Sequence[TrendPoint]) -> tuple[list[TrendRow], list[str]]:
    """Rows in date order and the implementations seen (columns)."""
    impls = list(dict.fromkeys(p.impl for p in points))
    impls = [i for i in impls if i != "copy"] + (["copy"] if "copy" in impls else [])
    runs: dict[str, list[TrendPoint]] = {}
    for p in points:
        runs.setdefault(p.run_id, []).append(p)
    rows = []
    for run_id, found in runs.items():
        cells = {}
        for impl in impls:
            mine = [p for p in found if p.impl == impl]
            if not mine:
                continue
            ok = [p for p in mine if p.status == "ok" and p.gbps]
            pct = [p.pct_copy for p in ok if p.pct_copy]
            cells[impl] = TrendCell(geometric_mean(p.gbps for p in ok), geometric_mean(pct), len(ok),
                                    sum(p.status == "failed" for p in mine))
        first = found[0]
        rows.append(TrendRow(run_id, first.created, first.git_commit, first.gpu_name, cells, first.timing))
    rows.sort(key=lambda r: (r.created or "", r.run_id))
    return rows, impls


def short_commit(commit: str | None) -> str:
    """Seven hex digits are enough to name a commit in a table."""
    return (commit or "—")[:7] if commit and all(c in "0123456789abcdef" for c in commit.lower()) else (commit or "—")


def cell_text(cell: TrendCell | None, several_cases: bool) -> str:
    if cell is None:
        return "—"
    if cell.gbps is None:
        return f"{cell.failed} failed" if cell.failed else "skipped"
    text = f"{cell.gbps:,.0f}"
    if cell.pct_copy is not None:
        text += f" ({cell.pct_copy:.0f}%)"
    if several_cases:
        text += f" ×{cell.cases}"
    return text


def trend_figure(rows: Sequence[TrendRow], impls: Sequence[str], kinds: dict[str, str]) -> dict:
    """GB/s over the runs' dates, a series per implementation and GPU model, the commit on hover."""
    gpus = list(dict.fromkeys(r.gpu_name for r in rows))
    colors = implementation_colors(list(impls), kinds)
    traces = []
    for g, gpu in enumerate(gpus):
        mine = [r for r in rows if r.gpu_name == gpu]
        for impl in impls:
            points = [r for r in mine if impl in r.cells and r.cells[impl].gbps]
            if not points:
                continue
            name = impl if len(gpus) == 1 else f"{impl} · {short_gpu_name(gpu)}"
            traces.append({
                "type": "scatter", "mode": "lines+markers", "name": plot_text(name),
                "x": [r.created for r in points], "y": [rounded(r.cells[impl].gbps) for r in points],
                "customdata": [[plot_text(short_commit(r.git_commit)), rounded(r.cells[impl].pct_copy, 3), r.cells[impl].cases]
                               for r in points],
                "marker": {"color": colors[impl], "size": 9,
                           "symbol": RUN_SYMBOLS[g % len(RUN_SYMBOLS)]},
                "line": {"color": colors[impl], "width": 2},
                "hovertemplate": ("%{y:.0f} GB/s · %{customdata[1]:.1f}% of copy · %{customdata[2]} cases"
                                  "<br>commit %{customdata[0]} · %{x}<extra>" + hover_safe(name) + "</extra>")})
    layout = {**BASE_LAYOUT, "height": 440,
              "xaxis": {**AXIS_STYLE, "type": "date", "title": {"text": "run date (commit on hover)"}},
              "yaxis": {**AXIS_STYLE, "title": {"text": "GB/s"}, "rangemode": "tozero"}}
    return {"data": traces, "layout": layout}


def render_trend_html(title: str, rows: Sequence[TrendRow], impls: Sequence[str], kinds: dict[str, str],
                      selection: str, several_cases: bool) -> str:
    """The trend page: the chart, then the same numbers as a table (self-contained, offline)."""
    esc = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    head = "".join(f"<th>{esc(i)}</th>" for i in impls)
    body = "".join(
        f"<tr><td>{esc(r.created or '—')}</td><td><code>{esc(short_commit(r.git_commit))}</code></td>"
        f"<td>{esc(r.gpu_name or '—')}</td>"
        + "".join(f"<td class=\"num\">{esc(cell_text(r.cells.get(i), several_cases))}</td>" for i in impls) + "</tr>"
        for r in rows)
    note = ("GB/s is the geometric mean over the cases each run measured (×N: how many); (%) the % of copy."
            if several_cases else "GB/s of the case; (%) its % of copy.")
    html_body = (f"<h1>{esc(title)}</h1><p class=\"sub\">{esc(selection)} · {len(rows)} runs from the results store. "
                 f"{esc(note)}</p><div class=\"chart-box\"><div class=\"chart\" id=\"trend\" style=\"height:440px\">"
                 f"</div></div><h2>Runs</h2><div class=\"scroll\"><table class=\"trend\"><thead><tr><th>date</th>"
                 f"<th>commit</th><th>GPU</th>{head}</tr></thead><tbody>{body}</tbody></table></div>")
    return _page(title, html_body, [("trend", trend_figure(rows, impls, kinds))])


def write_trend_html(path: Path, *args, **kwargs) -> Path:
    """Written as every output is (outputs.write_text): atomically, through links and into devices."""
    from .outputs import write_text

    return write_text(Path(path), render_trend_html(*args, **kwargs))
