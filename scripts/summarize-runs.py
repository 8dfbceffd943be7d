"""Print GB/s and % of copy per implementation for one or more results files, side by side, then how
many times faster `optimized` is than each baseline in each run (the baseline's median time over
optimized's), so the runs' spread can be read beside the differences."""
import sys

import pandas as pd

import bwbench

BASELINES = ("torch", "compiled", "cudnn", "bytemask", "boolmask")

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
        print(ok.pivot_table(index=["suite", "dtype", "x"], columns=["impl", "run"], values=value, sort=False).round(1).to_string())
    times = ok.pivot_table(index=["suite", "dtype", "x"], columns=["impl", "run"], values="median_us", sort=False)
    if "optimized" in times.columns.get_level_values(0):
        speedups = {(b, run): times[(b, run)] / times[("optimized", run)]
                    for b, run in times.columns if b in BASELINES and ("optimized", run) in times.columns}
        if speedups:
            print("optimized is this many times faster than:")
            print(pd.DataFrame(speedups).round(3).to_string())
    bad = df[df.status != "ok"]
    if len(bad):
        print(bad[["run", "case", "dtype", "impl", "status", "reason"]].to_string(max_colwidth=120))
