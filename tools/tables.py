"""Markdown tables of results files: per GPU, suite and dtype, every implementation's % of the
same-size copy per case, the optimized implementation's GB/s, and how it compares with the fastest
other implementation. The measured tables in docs/ are made with it; it also lines up two runs of
the same code to show their spread before a difference is believed.

    python3 tools/tables.py RUN.json [RUN.json ...] [--suite NAME] [--dtype NAME]

Several runs of the same GPU, suite, case, dtype and implementation are shown as their median,
with the runs' range in brackets. Reads results only through `bwbench.load`, so it needs no GPU.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

import bwbench

OURS = "optimized"
CEILING_KIND = "ceiling"
OWN_KIND = "cuda"


def read_runs(paths: list[str]) -> pd.DataFrame:
    """Every record of every file, with the file's position as `run`."""
    frames = [bwbench.load(path).assign(run=n) for n, path in enumerate(paths)]
    return pd.concat(frames, ignore_index=True)


def case_labels(cases: list[str]) -> dict[str, str]:
    """Each case named by the axis values that change within the table (`cols=4096`, not the full key)."""
    parsed = {case: dict(part.split("=", 1) for part in case.split(",") if "=" in part) for case in cases}
    keys = list(dict.fromkeys(k for axes in parsed.values() for k in axes))
    varying = [k for k in keys if len({axes.get(k) for axes in parsed.values()}) > 1] or keys
    return {case: " ".join(f"{k}={parsed[case][k]}" for k in varying if k in parsed[case]) or case
            for case in cases}


def cell(values: pd.Series, fmt: str) -> str:
    """The median over runs, with the range when there is more than one run."""
    values = values.dropna()
    if values.empty:
        return "—"
    text = format(values.median(), fmt)
    if len(values) > 1:
        text += f" ({format(values.min(), fmt)}–{format(values.max(), fmt)})"
    return text


def status_cell(rows: pd.DataFrame, column: str, fmt: str) -> str:
    ok = rows[rows.status == "ok"]
    if not ok.empty:
        return cell(ok[column], fmt)
    if rows.empty:
        return "—"
    return str(rows.status.iloc[0])


def table(part: pd.DataFrame) -> str:
    """One markdown table for the records of one GPU, suite and dtype."""
    impls = [i for i in dict.fromkeys(part.impl) if (part[part.impl == i].kind != CEILING_KIND).all()]
    impls.sort(key=lambda i: i != OURS)
    others = [i for i in impls if (part[part.impl == i].kind != OWN_KIND).all()]
    head = ["case"]
    if OURS in impls:
        head.append(f"{OURS} GB/s")
    head += [f"{i} % of copy" for i in impls]
    if OURS in impls and others:
        head.append(f"{OURS} vs fastest baseline")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cases = list(dict.fromkeys(part.case))
    labels = case_labels(cases)
    for case in cases:
        rows = part[part.case == case]
        cells = [labels[case]]
        if OURS in impls:
            cells.append(status_cell(rows[rows.impl == OURS], "gbps", ",.0f"))
        cells += [status_cell(rows[rows.impl == i], "pct_copy", ".1f") for i in impls]
        if OURS in impls and others:
            cells.append(speedup(rows, others))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup(rows: pd.DataFrame, others: list[str]) -> str:
    """The fastest baseline's median time over the optimized one's (above 1: ours is faster)."""
    ok = rows[rows.status == "ok"]
    times = ok.groupby("impl")["median_us"].median()
    rivals = times[times.index.isin(others)]
    if OURS not in times or rivals.empty:
        return "—"
    fastest = rivals.idxmin()
    return f"{rivals.min() / times[OURS]:.2f}× {fastest}"


def environment_line(part: pd.DataFrame) -> str:
    files = ", ".join(dict.fromkeys(str(s).split("/")[-1] for s in part.source))
    return f"{part.gpu.iloc[0]}, from {files}"


def render(data: pd.DataFrame) -> str:
    out = []
    for (gpu, suite, dtype), part in data.groupby(["gpu", "suite", "dtype"], sort=False):
        out.append(f"### {suite} · {dtype} · {gpu}\n")
        out.append(table(part))
        out.append(f"\n{environment_line(part)}\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="results files written by `bwbench run`")
    parser.add_argument("--suite", help="only this suite (comma-separated names allowed)")
    parser.add_argument("--dtype", help="only this dtype (comma-separated names allowed)")
    args = parser.parse_args(argv)
    try:
        data = read_runs(args.runs)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.suite:
        data = data[data.suite.isin(args.suite.split(","))]
    if args.dtype:
        data = data[data.dtype.isin(args.dtype.split(","))]
    if data.empty:
        print("error: no records match", file=sys.stderr)
        return 2
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
