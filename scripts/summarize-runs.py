"""Print GB/s and % of copy per implementation for one or more results files, side by side."""
import sys

import pandas as pd

import bwbench

frames = []
for n, path in enumerate(sys.argv[1:], 1):
    try:
        frames.append(bwbench.load(path).assign(run=n))
    except ValueError as err:
        print(f"run {n}: {err}")
if frames:
    df = pd.concat(frames)
    df["x"] = df["case"]
    ok = df[df.status == "ok"]
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    pd.set_option("display.max_rows", 500)
    for value in ("gbps", "pct_copy"):
        print(ok.pivot_table(index=["dtype", "x"], columns=["impl", "run"], values=value, sort=False).round(1).to_string())
    bad = df[df.status != "ok"]
    if len(bad):
        print(bad[["run", "case", "dtype", "impl", "status", "reason"]].to_string(max_colwidth=120))
