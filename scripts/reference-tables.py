"""Markdown tables of the optimized kernels across reference runs, for notes and issue reports.

Usage: python scripts/reference-tables.py LABEL=RUN.json [LABEL=RUN.json ...]
For every suite and dtype: per case, the optimized implementation's % of same-size copy in each
run, then its speedup over each baseline (median time of the baseline / optimized) in the first
run of each GPU. Records that failed their check show as "failed".
"""
import sys

import pandas as pd

import bwbench

BASELINES = ("torch", "compiled", "cudnn")


def load(args: list[str]) -> pd.DataFrame:
    frames = []
    for arg in args:
        label, _, path = arg.partition("=")
        frames.append(bwbench.load(path).assign(run=label))
    return pd.concat(frames)


def table(df: pd.DataFrame, suite: str, dtype: str) -> str:
    part = df[(df.suite == suite) & (df.dtype == dtype)]
    runs = list(dict.fromkeys(part.run))
    firsts = list(dict.fromkeys(part.drop_duplicates("gpu").run))
    head = ["case"] + [f"{r} % copy" for r in runs]
    head += [f"{r} ×{b}" for r in firsts for b in BASELINES if b in set(part.impl)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in dict.fromkeys(part.case):
        rows = part[part.case == case]
        cells = [case]
        for r in runs:
            rec = rows[(rows.run == r) & (rows.impl == "optimized")]
            cells.append("—" if rec.empty else ("failed" if rec.status.iloc[0] == "failed"
                                                else f"{rec.pct_copy.iloc[0]:.0f}%"))
        for r in firsts:
            mine = rows[(rows.run == r) & (rows.impl == "optimized") & (rows.status == "ok")]
            for b in BASELINES:
                if b not in set(part.impl):
                    continue
                other = rows[(rows.run == r) & (rows.impl == b)]
                if mine.empty or other.empty or other.status.iloc[0] != "ok":
                    cells.append(other.status.iloc[0] if not other.empty else "—")
                else:
                    cells.append(f"{other.median_us.iloc[0] / mine.median_us.iloc[0]:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    data = load(sys.argv[1:])
    for (suite, dtype) in dict.fromkeys(zip(data.suite, data.dtype)):
        print(f"\n### {suite} · {dtype}\n")
        print(table(data, suite, dtype))
