"""Measure every tier variant of the softmax family at the article's shape, to set the dispatcher's
thresholds (bwbench/cuda/softmax.py THRESHOLDS; the numbers go to notes/softmax.md).

Each variant is timed cold (L2 flushed before every sample, as `bwbench run` does) next to a
same-size copy, after a sanity check against PyTorch. One JSON line per measurement goes to
OUT/tune.jsonl as it is made, so a run cut short keeps what it measured.

    python3 scripts/softmax_tune.py OUT [--dtypes float16,float32] [--ops softmax,softmax_backward]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from bwbench.cuda import softmax as s
from bwbench.cuda import softmax_dispatch as d
from bwbench.device import query_device, require_cuda
from bwbench.stats import SamplingPolicy
from bwbench.timing import Timer, measure_copy_bandwidth

COLS = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]


def ab_variants(op: str, cols: int, pack: int) -> list[tuple[str, dict]]:
    """The choices `--pick` decides: rows per access of the warp tier, the block-size rule."""
    direction, _, key = s.OPERATIONS[op]
    if key == "online":
        return []
    base = s.THRESHOLDS[key]
    shape = d.warp_shape(cols, pack, direction, base.small_group_rows, base.full_warp_rows)
    out: list[tuple[str, dict]] = []
    if shape is not None and cols <= base.warp_max_cols:
        if shape.group < 32:
            for r in d.small_group_rows_options(direction):
                out.append((f"R{r}", {"thresholds": d.with_overrides(base, small_group_rows=r)}))
        elif shape.packs_per_thread <= d.FULL_WARP_MAX_PACKS:
            for w in d.FULL_WARP_ROWS:
                out.append((f"W{w}", {"thresholds": d.with_overrides(base, full_warp_rows=w)}))
    elif cols > base.warp_max_cols:
        for rule in d.BLOCK_RULES:
            out.append((f"rule-{rule}", {"thresholds": d.with_overrides(base, block_rule=rule)}))
    return out


def pick(records: list[dict]) -> dict[str, dict]:
    """Thresholds overrides from A/B records: per operation group, the choice with the highest mean
    % of copy over the cols where it was measured."""
    groups = {"softmax": "forward", "softmax_backward": "backward"}
    fields = {"R": ("small_group_rows", int), "W": ("full_warp_rows", int), "rule-": ("block_rule", str)}
    chosen: dict[str, dict] = {}
    for op, key in groups.items():
        for prefix, (field, kind) in fields.items():
            scores: dict[str, list[float]] = {}
            for rec in records:
                label = rec.get("variant", "")
                if rec.get("op") != op or rec.get("status") != "ok" or not label.startswith(prefix):
                    continue
                value = label[len(prefix):]
                if prefix != "rule-" and not value.isdigit():
                    continue
                scores.setdefault(value, []).append(rec["pct_copy"])
            if len(scores) > 1:
                best = max(scores, key=lambda v: sum(scores[v]) / len(scores[v]))
                chosen.setdefault(key, {})[field] = kind(best)
    return chosen


def variants(op: str, cols: int, pack: int) -> list[tuple[str, dict]]:
    direction, _, key = s.OPERATIONS[op]
    out: list[tuple[str, dict]] = [("auto", {})]
    if key == "online":
        if cols >= 512:
            out += [("online_block512", {"tier": "online_block",
                                         "thresholds": d.with_overrides(s.THRESHOLDS["online"], uncached_block=512)})]
        return out
    if direction == "forward" and cols >= 1024 and d.registers_shape(cols, pack) is not None:
        out.append(("registers", {"tier": "registers"}))
    if op == "log_softmax":
        return out
    base = s.THRESHOLDS[key]
    if cols >= 512 and d.warp_shape(cols, pack, direction) is not None:
        out.append(("warp", {"tier": "warp"}))
    if cols >= 512:
        for block in d.BLOCK_SIZES:
            out.append((f"smem{block}", {"tier": "smem", "block": block}))
        for block in (256, 512, 1024):
            out.append((f"uncached{block}", {"tier": "uncached", "block": block}))
        out.append(("auto-waves1", {"waves": 1}))
        if direction == "forward":
            one = d.with_overrides(base, one_pass=True)
            out.append(("smem-1p", {"tier": "smem", "thresholds": one}))
            for block in (512, 1024):
                out.append((f"uncached-1p{block}", {"tier": "uncached", "block": block, "thresholds": one}))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--dtypes", default="float16")
    parser.add_argument("--ops", default="softmax,softmax_backward,log_softmax,online_softmax")
    parser.add_argument("--cols", default=",".join(map(str, COLS)))
    parser.add_argument("--rows", type=int, default=49152)
    parser.add_argument("--max-time", type=float, default=0.15)
    parser.add_argument("--torch", action="store_true", help="time the PyTorch op too")
    parser.add_argument("--ab", action="store_true", help="only the choices --pick decides")
    parser.add_argument("--only", help="comma-separated variant labels to measure (default: all)")
    parser.add_argument("--pick", help="write the best choices as a thresholds file (BWBENCH_SOFTMAX_THRESHOLDS)")
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = (out_dir / "tune.jsonl").open("a")
    measured: list[dict] = []

    device = require_cuda(0)
    facts = query_device(device)
    timer = Timer(device, facts.l2_bytes, facts.sm_clock_max_mhz,
                  SamplingPolicy(min_samples=10, max_seconds=args.max_time, batch=5))
    print(f"# {torch.cuda.get_device_name(0)}  peak {facts.peak_gbps} GB/s", flush=True)
    rows = args.rows
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        itemsize = torch.empty((), dtype=dtype).element_size()
        for cols in map(int, args.cols.split(",")):
            gen = torch.Generator(device=device).manual_seed(cols)
            x = torch.randn(rows, cols, generator=gen, device=device, dtype=dtype)
            copies: dict[int, float] = {}
            for op in args.ops.split(","):
                direction = s.OPERATIONS[op][0]
                if direction == "forward":
                    inputs = (x,)
                    fn = {"softmax": s.softmax, "log_softmax": s.log_softmax, "online_softmax": s.online_softmax}[op]
                    ref = (torch.log_softmax if op == "log_softmax" else torch.softmax)(x.float(), -1)
                    tfn = (lambda: torch.log_softmax(x, -1)) if op == "log_softmax" else (lambda: torch.softmax(x, -1))
                    nbytes = 2 * x.numel() * itemsize
                else:
                    y = torch.softmax(x.float(), -1).to(dtype)
                    dy = torch.randn(rows, cols, generator=gen, device=device, dtype=dtype)
                    inputs = (y, dy)
                    fn = s.softmax_backward
                    yf, dyf = y.float(), dy.float()
                    ref = yf * (dyf - (dyf * yf).sum(-1, keepdim=True))
                    del yf, dyf
                    tfn = lambda: torch._softmax_backward_data(dy, y, -1, dtype)  # noqa: E731
                    nbytes = 3 * x.numel() * itemsize
                if nbytes not in copies:
                    copies[nbytes] = measure_copy_bandwidth(timer, nbytes // 2)[0]
                copy_gbps = copies[nbytes]
                result = torch.empty_like(x)
                pack = d.pack_elements(itemsize, cols, True)
                todo = ab_variants(op, cols, pack) if args.ab else variants(op, cols, pack)
                if args.only:
                    todo = [v for v in todo if v[0] in args.only.split(",")]
                if not todo:
                    continue
                if args.torch:
                    todo.append(("torch", None))
                for label, overrides in todo:
                    record = {"gpu": torch.cuda.get_device_name(0), "dtype": dtype_name, "op": op, "rows": rows,
                              "cols": cols, "variant": label, "copy_gbps": round(copy_gbps, 1)}
                    try:
                        if overrides is None:
                            call = tfn
                            record["tier"] = "torch"
                        else:
                            overrides = dict(overrides)
                            s.GRID_WAVES = overrides.pop("waves", None)
                            s._PLANS.clear()
                            plan = s.plan_launch(op, rows, cols, dtype, **overrides)
                            record.update(tier=plan.tier, block=plan.block, grid=plan.grid, smem=plan.smem,
                                          kernel=plan.kernel_name)
                            result.fill_(float("nan"))
                            fn(*inputs, out=result, **overrides)
                            torch.cuda.synchronize()
                            err = float((result.float() - ref).abs().max())
                            scale = float(ref.abs().max())
                            record["max_err"] = err
                            if not err <= 2e-2 * max(scale, 1e-3):
                                record["status"] = "WRONG"
                                print(json.dumps(record), flush=True)
                                log.write(json.dumps(record) + "\n")
                                continue
                            call = (lambda f=fn, ov=overrides: f(*inputs, out=result, **ov))
                        m = timer.measure(call)
                        gbps = nbytes / (m.stats.median_us * 1e-6) / 1e9
                        record.update(status="ok", us=round(m.stats.median_us, 2), gbps=round(gbps, 1),
                                      pct_copy=round(100 * gbps / copy_gbps, 1), noise=round(m.stats.noise, 4))
                    except Exception as exc:  # noqa: BLE001 - record and go on
                        record.update(status="error", error=f"{type(exc).__name__}: {exc}"[:300])
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    measured.append(record)
                    print(f"{dtype_name:8s} {op:16s} {cols:6d} {label:16s} {record.get('tier', ''):12s} "
                          f"b={record.get('block', '')!s:5s} {record.get('gbps', 0):8.1f} GB/s "
                          f"{record.get('pct_copy', 0):6.1f}% copy({copy_gbps:.0f}) {record['status']} "
                          f"{record.get('error', '')}", flush=True)
                del ref, inputs, result
                torch.cuda.empty_cache()
            del x
            torch.cuda.empty_cache()
    if args.pick:
        chosen = pick(measured)
        Path(args.pick).write_text(json.dumps(chosen, indent=1) + "\n")
        print(f"# picked {chosen} -> {args.pick}", flush=True)
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"# done in {time.time() - t0:.0f} s", file=sys.stderr)
    sys.exit(rc)
