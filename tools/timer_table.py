"""Side by side: the same sweep timed with CUDA events and with CUPTI, from two results files.

Usage: python tools/timer_table.py EVENTS.json CUPTI.json [--markdown]
(the order does not matter: each file's records name their timer).

One row per (suite, case, dtype, implementation) in both runs, the copy ceiling included: each
timer's median, their difference (what the events add), CUPTI's sum of kernel times beside its
span, kernels per call, GB/s and % of copy under each timer, and the host cost of one call in each
run. Built on `bwbench.load` only, so it runs anywhere the results files are.
"""

from __future__ import annotations

import argparse
import sys

import bwbench

KEYS = ["suite", "case", "dtype", "impl"]


def _timed(path: str):
    frame = bwbench.load(path)
    frame = frame[frame["status"] == "ok"]
    timers = sorted(set(frame["timer"].dropna()))
    if len(timers) != 1:
        sys.exit(f"{path}: expected records of one timer, found {timers or 'none (written before timers were named)'}")
    return timers[0], frame


def _number(value, digits: int = 1) -> str:
    try:
        if value != value:  # NaN: not recorded
            return "—"
        return f"{float(value):,.{digits}f}"
    except (TypeError, ValueError):
        return "—"


def side_by_side(events, cupti) -> tuple[list[str], list[list[str]]]:
    merged = events.merge(cupti, on=KEYS, suffixes=("_ev", "_cu"))
    header = ["suite", "case", "dtype", "impl", "events µs", "CUPTI µs", "events − CUPTI", "CUPTI kernel sum µs",
              "GB/s events", "GB/s CUPTI", "% copy events", "% copy CUPTI", "host µs (events run)",
              "host µs (CUPTI run)"]
    rows = []
    for _, r in merged.iterrows():
        rows.append([r["suite"], r["case"], r["dtype"], r["impl"], _number(r["median_us_ev"], 2),
                     _number(r["median_us_cu"], 2), _number(r["median_us_ev"] - r["median_us_cu"], 2),
                     _number(r.get("kernel_sum_us_cu"), 2), _number(r["gbps_ev"], 0), _number(r["gbps_cu"], 0),
                     _number(r["pct_copy_ev"]), _number(r["pct_copy_cu"]), _number(r["host_us_ev"]),
                     _number(r["host_us_cu"])])
    return header, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs=2, help="two results files of the same sweep, one per timer")
    parser.add_argument("--markdown", action="store_true", help="a markdown table instead of the terminal one")
    args = parser.parse_args(argv)
    by_timer = dict(_timed(path) for path in args.files)
    if set(by_timer) != {"events", "cupti"}:
        sys.exit(f"need one events run and one cupti run, got {sorted(by_timer)}")
    header, rows = side_by_side(by_timer["events"], by_timer["cupti"])
    if not rows:
        sys.exit("the two runs have no (suite, case, dtype, impl) in common")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" if i < 4 else "---:" for i in range(len(header))) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="the same sweep timed with CUDA events and with CUPTI", title_justify="left")
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i < 4 else "right", no_wrap=i < 4)
    for row in rows:
        table.add_row(*row)
    Console(width=max(240, Console().width)).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
