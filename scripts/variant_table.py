"""Compare build or dispatch variants measured by `bwbench run` into files named VARIANT-rROUND.json
(e.g. h0-r1.json, h2-r1.json, h0-r2.json ...): per case and implementation, each variant's median
GB/s over its rounds with the rounds' spread, its % of the same-run copy, and its ratio to the
first variant named. Usage: python3 scripts/variant_table.py FILE.json [FILE.json ...]"""
import re
import sys
from pathlib import Path

import pandas as pd

import bwbench

frames = []
for path in sys.argv[1:]:
    stem = Path(path).stem
    match = re.fullmatch(r"(.+)-r(\d+)", stem)
    variant, rnd = (match.group(1), int(match.group(2))) if match else (stem, 1)
    try:
        frames.append(bwbench.load(path).assign(variant=variant, round=rnd))
    except ValueError as err:
        print(f"{path}: {err}")
if not frames:
    sys.exit("no results")
df = pd.concat(frames)
order = list(dict.fromkeys(df["variant"]))
bad = df[(df.status != "ok") & (df.impl != "copy")]
ok = df[df.status == "ok"].copy()
key = ["suite", "case", "dtype", "impl"]
g = ok.groupby(key + ["variant"], sort=False)
table = g.agg(gbps=("gbps", "median"), lo=("gbps", "min"), hi=("gbps", "max"), pct=("pct_copy", "median"),
              n=("gbps", "size")).reset_index()
first = table[table.variant == order[0]].set_index(key)["gbps"]
pd.set_option("display.width", 250)
pd.set_option("display.max_rows", 1000)
rows = []
for (suite, case, dtype, impl), part in table.groupby(key, sort=False):
    base = first.get((suite, case, dtype, impl))
    row = {"suite": suite, "case": case[:40], "dtype": dtype, "impl": impl}
    for _, r in part.iterrows():
        spread = f"±{50 * (r.hi - r.lo) / r.gbps:.1f}%" if r.n > 1 else ""
        ratio = f" x{r.gbps / base:.3f}" if base and r.variant != order[0] else ""
        row[r.variant] = f"{r.gbps:7.0f} {r.pct:5.1f}%{spread}{ratio}"
    rows.append(row)
out = pd.DataFrame(rows)
print(out.to_string(index=False))
if len(bad):
    print(bad[["variant", "round", "case", "dtype", "impl", "status", "reason"]].to_string(max_colwidth=100))
