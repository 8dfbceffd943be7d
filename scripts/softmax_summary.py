"""Markdown tables of softmax-family runs: GB/s and % of the same-run copy per implementation and
cols, and the speedup of `optimized` over the fastest baseline (torch, compiled, cudnn).

    python3 scripts/softmax_summary.py reports/softmax-*.json reports/log_softmax-*.json ...
"""

from __future__ import annotations

import sys

import bwbench

ORDER = ["copy", "optimized", "online", "compiled", "torch", "cudnn", "naive"]
BASELINES = ("torch", "compiled", "cudnn")


def table(frame, suite: str, dtype: str) -> list[str]:
    part = frame[(frame.suite == suite) & (frame.dtype == dtype)]
    impls = [i for i in ORDER if i in set(part.impl)] + sorted(set(part.impl) - set(ORDER))
    gpu = part.gpu.iloc[0] if "gpu" in part and len(part) else ""
    lines = [f"### {suite}, {dtype} {gpu}".rstrip(), "",
             "| cols | " + " | ".join(impls) + " | optimized / best baseline |",
             "|---" * (len(impls) + 2) + "|"]
    for cols in sorted(set(part.cols)):
        row = part[part.cols == cols]
        cells, best_base, opt = [], None, None
        for impl in impls:
            rec = row[row.impl == impl]
            if rec.empty:
                cells.append("")
                continue
            r = rec.iloc[0]
            if r["status"] != "ok":
                cells.append(r["status"])
                continue
            pct = "" if impl == "copy" or r["pct_copy"] != r["pct_copy"] else f" ({r['pct_copy']:.0f}%)"
            cells.append(f"{r['gbps']:.0f}{pct}")
            if impl in BASELINES:
                best_base = max(best_base or 0.0, r["gbps"])
            if impl == "optimized":
                opt = r["gbps"]
        speedup = f"{opt / best_base:.2f}x" if opt and best_base else ""
        lines.append(f"| {cols} | " + " | ".join(cells) + f" | {speedup} |")
    return lines


def main(paths: list[str]) -> int:
    import pandas as pd

    frames = []
    for path in paths:
        frame = bwbench.load(path)
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    out: list[str] = []
    for suite in sorted(set(frame.suite)):
        for dtype in ("float16", "bfloat16", "float32"):
            if ((frame.suite == suite) & (frame.dtype == dtype)).any():
                out += table(frame, suite, dtype) + [""]
    bad = frame[(frame.status != "ok")]
    if not bad.empty:
        out.append("Not ok:")
        for _, r in bad.iterrows():
            out.append(f"- {r['suite']} {r['dtype']} cols={r['cols']} {r['impl']}: {r['status']}: {str(r['reason'])[:160]}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
