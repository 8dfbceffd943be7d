"""What the terminal shows: the summary table of a run and the device facts."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .results import Record, memory_text
from .suite import COPY_IMPL


def plain(value: Any) -> str:
    """External text (a GPU or implementation name, a failure reason, a path) made inert for rich
    markup: '[/]' or '[enforce fail at ...]' is printed as written, never read as a style tag."""
    return escape(str(value))


def _gb(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def cell(record: Record | None, show_mask: bool = False) -> str:
    """One implementation's result on one case: GB/s and % of the same-size copy (and, for suites
    with a mask, the memory it keeps as one; the host cost of one call where recorded), or why not."""
    if record is None:
        return ""
    if record.status == "failed":
        return "[bold red]FAILED[/]"
    if record.status == "skipped":
        return "[dim]skipped[/]"
    text = _gb(record.gbps)
    if record.pct_copy is not None and record.impl != COPY_IMPL:
        text += f" [dim]({record.pct_copy:.0f}%)[/]"
    if record.inexact:
        text += " [magenta]inexact[/]"
    if record.telemetry and record.telemetry.get("throttled"):
        text += " [yellow]⚠[/]"
    if record.pct_peak is not None and record.pct_peak > 100:
        text += " [bold red]>peak![/]"
    if show_mask and record.mask_bytes is not None:
        text += f" [cyan]{memory_text(record.mask_bytes)}[/]"
    if record.host_us is not None:
        text += f" [magenta]{record.host_us:,.0f}µs[/]"
    return text


def plan_table(plans) -> Table:
    """What a run would measure (`run --dry-run`), a row a suite and dtype: its cases by axis values
    and its implementations; every case also measures the same-size copy."""
    table = Table(title="bwbench run --dry-run: what would be measured", title_justify="left")
    for column in ("suite", "dtype", "cases", "implementations"):
        table.add_column(column)
    for plan in plans:
        by_dtype: dict[str, list[str]] = defaultdict(list)
        for case in plan.cases:
            by_dtype[case.dtype].append(case.id)
        impls = ", ".join(plain(i.name) for i in plan.impls)
        for dtype, ids in by_dtype.items():
            table.add_row(plain(plan.suite.name), dtype, f"{len(ids)}: " + "; ".join(plain(i) for i in ids), impls)
    return table


def summary_tables(records: Iterable[Record]) -> list[Table]:
    """One table per (suite, dtype): a row per case, a column per implementation, copy first."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for rec in records:
        groups[(rec.suite, rec.dtype)].append(rec)
    tables = []
    for (suite, dtype), recs in groups.items():
        impls = [COPY_IMPL] + sorted({r.impl for r in recs if r.impl != COPY_IMPL}, key=[r.impl for r in recs].index)
        cases = list(dict.fromkeys(r.case for r in recs))
        by_key = {(r.case, r.impl): r for r in recs}
        show_mask = any(r.mask_bytes is not None for r in recs)
        title = f"{plain(suite)} · {plain(dtype)} · GB/s (% of same-size copy)"
        if any(r.host_us is not None for r in recs):
            title += " · [magenta]host µs[/] per call"
        timers = sorted({r.timer for r in recs if r.timer})
        if timers:
            title += f" · timer: {plain(', '.join(timers))}"
        if show_mask:
            title += " · [cyan]mask[/] kept for the backward"
        table = Table(title=title, title_justify="left")
        table.add_column("case", style="bold")
        for impl in impls:
            table.add_column(plain(impl), justify="right")
        for case in cases:
            table.add_row(plain(case), *(cell(by_key.get((case, impl)), show_mask) for impl in impls))
        tables.append(table)
    return tables


def problems(records: Iterable[Record]) -> list[str]:
    """Lines for every failed record and every number not to trust."""
    lines = []
    for r in records:
        if r.status == "failed":
            role = " (baseline: does not fail the run)" if r.role == "baseline" else ""
            lines.append(f"[red]FAILED[/] {plain(f'{r.suite} {r.case} {r.dtype} {r.impl}{role}: {r.reason}')}")
        elif r.status == "ok" and r.inexact:
            lines.append(f"[magenta]inexact[/] {plain(f'{r.suite} {r.case} {r.dtype} {r.impl}')} (baseline, timed at "
                         f"{r.stats['median_us']:,.1f} µs): {plain(r.reason or '')}")
        elif r.status == "ok" and r.reason:
            lines.append(f"[yellow]warning[/] {plain(f'{r.suite} {r.case} {r.dtype} {r.impl}: {r.reason}')}")
    return lines


def device_table(env: dict[str, Any]) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("GPU", f"{env.get('gpu_name')} (index {env.get('gpu_index')}, {env.get('gpu_uuid')})"),
        ("compute capability", env.get("compute_capability")),
        ("SMs", env.get("sm_count")),
        ("L2", f"{(env.get('l2_bytes') or 0) / 2**20:.0f} MiB"),
        ("memory", f"{(env.get('memory_bytes') or 0) / 2**30:.1f} GiB"),
        ("memory clock (max) × bus", f"{env.get('mem_clock_max_mhz')} MHz × {env.get('bus_width_bits')} bit"),
        ("theoretical peak", f"{_gb(env.get('peak_gbps'))} GB/s" + (f" ({env['peak_note']})" if env.get("peak_note") else "")),
        ("copy bandwidth (measured)", f"{_gb(env.get('copy_gbps'))} GB/s"
         + (f" for a {env['copy_bytes'] / 1e9:.2f} GB copy" if env.get("copy_bytes") else "")
         + (f", {100 * env['copy_gbps'] / env['peak_gbps']:.1f}% of peak" if env.get("copy_gbps") and env.get("peak_gbps") else "")),
        ("driver / CUDA", f"{env.get('driver_version')} / {env.get('cuda_version')}"),
        ("torch / cupy / cuDNN", f"{env.get('torch_version')} / {env.get('cupy_version')} / {env.get('cudnn_version')}"),
        ("bwbench", f"{env.get('bwbench_version')} ({env.get('git_commit') or 'no git'})"),
    ]
    if env.get("kernel_options"):
        rows.append(("kernel options", env["kernel_options"]))
    for key, value in rows:
        table.add_row(key, plain(value))
    return table


def make_console() -> Console:
    """A console as wide as the terminal, or 160 columns in a CI log where there is none."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=160)
    return console


VERDICT_STYLE = {"faster": "green", "same": "dim", "slower": "bold red", "ambiguous": "yellow",
                 "missing": "magenta", "new": "cyan", "failed": "bold red", "still failing": "red",
                 "invalid": "bold red", "incomplete": "bold red"}
"""Known verdicts' colours; any other verdict is shown unstyled."""


def comparison_table(comparisons, max_drop: float, show_all: bool = False):
    """The verdicts of a gate as the terminal shows them (see comparison_output)."""
    from .comparison import CompareView
    from .gate import has_regression

    return comparison_output(CompareView(list(comparisons), max_drop, regression=has_regression(comparisons)), show_all)


def comparison_output(view, show_all: bool = False):
    """`bwbench compare` for people: the summary line, the ratio summary across GPUs, then a table per
    suite of what changed, one column per axis; unchanged records, and the records of baseline suites
    the current run did not include, only with --all (those suites get one line)."""
    from rich.console import Group
    from rich.text import Text

    from .comparison import (axis_cells, axis_names, left_out_lines, listed, number_text, ratio_headline,
                             ratio_matrix, summary_line)
    from .gate import absent_suites

    style = "bold red" if view.regression else "green"
    parts: list = [Text(summary_line(view), style=style)]
    parts += [Text(run.line(), style="dim") for run in view.runs]
    if view.different_gpus:
        impls, rows = ratio_matrix(view)
        ratios = Table(title=Text(ratio_headline(view) + " · geometric mean of GB/s ratios per suite"),
                       title_justify="left")
        ratios.add_column("suite")
        for impl in impls:
            ratios.add_column(Text(impl), justify="right")
        for label, cells in rows:
            ratios.add_row(Text(label), *cells)
        parts.append(ratios)
    absent = {} if show_all else absent_suites(view.comparisons)
    shown = listed(view, show_all, absent)
    for suite in dict.fromkeys(c.suite for c in shown):
        axes = axis_names(view, suite)
        table = Table(title=Text(suite, style="bold"), title_justify="left")
        table.add_column("verdict")
        for axis in axes:
            table.add_column(Text(axis), overflow="fold")
        for col, justify in (("dtype", "left"), ("impl", "left"), ("baseline GB/s", "right"),
                             ("current GB/s", "right"), ("change", "right"), ("p", "right"), ("note", "left")):
            table.add_column(col, justify=justify, overflow="fold")
        for c in (c for c in shown if c.suite == suite):
            color = VERDICT_STYLE.get(c.verdict)
            verdict = Text(c.verdict, style=color) if color else Text(c.verdict)
            table.add_row(verdict, *(Text(x) for x in axis_cells(view, c, axes)), Text(c.dtype), Text(c.impl), number_text(c.baseline_gbps, ",.0f"),
                          number_text(c.current_gbps, ",.0f"), number_text(c.change, "+.1%"),
                          number_text(c.p_value, ".2g"), Text(_short(c.note or "", 80)))
        parts.append(table)
    parts += [Text(line) for line in left_out_lines(view, show_all, absent)]
    return Group(*parts)


def _short(text: str, limit: int) -> str:
    """Notes cut for the terminal (the JSON and markdown keep them whole)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
