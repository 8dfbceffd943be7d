"""Per-kernel device time of one implementation of one case, from the CUDA profiler (CUPTI).

Usage: python scripts/kernel_breakdown.py SUITE IMPL "NAME=VALUE NAME=VALUE ..." [CASE ...] [--dtype float16]
e.g. scripts/kernel_breakdown.py bn_relu optimized "direction=forward shape=32x256x56x56 layout=NHWC"
(axes not named take their first value).

Each call runs after an L2 flush and a device sleep (as bwbench's cold samples do), inside
torch.profiler; the table shows every kernel the implementation launched with its mean time and
its share of the call, next to the whole call's cold time from bwbench's Timer. It answers "which
of the kernels is slow", which `bwbench run` (one time per call) cannot.
"""
from __future__ import annotations

import argparse
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from bwbench.discovery import get_suite
from bwbench.timing import Timer


def print_breakdown(suite, impl: str, case, timer: Timer, calls: int) -> None:
    generator = torch.Generator(device=timer.device)
    generator.manual_seed(0)
    inputs = suite.make_inputs(case, generator)
    built = suite.select_impls([impl])[0].build(case)

    def fn():
        return built(**inputs)

    whole = timer.cold(fn).stats.median_us
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            timer.flush_l2()
            timer._hide_launch(200.0)
            fn()
        torch.cuda.synchronize()
    rows = {}
    for event in prof.key_averages():
        if event.device_type.name != "CUDA" or event.count < calls:
            continue
        if "reduce_kernel" in event.key:
            continue  # the L2 flush (torch.sum)
        rows[event.key] = (event.count // calls, event.device_time_total / calls)
    total = sum(us for _, us in rows.values())
    print(f"{suite.name} {impl} {case}: cold call {whole:.1f} us (bwbench Timer), kernels {total:.1f} us")
    for name, (per_call, us) in sorted(rows.items(), key=lambda r: -r[1][1]):
        print(f"  {us:8.1f} us {100 * us / whole:5.1f}%  x{per_call}  {name[:110]}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("impl")
    parser.add_argument("cases", nargs="*", help='a case as "NAME=VALUE NAME=VALUE" (shape=32x256x56x56)')
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()

    suite = get_suite(args.suite)
    device = torch.device("cuda", 0)
    timer = Timer(device, torch.cuda.get_device_properties(0).L2_cache_size, None)
    for text in args.cases or [""]:
        values = {}
        for pair in text.split():
            axis, _, value = pair.partition("=")
            values[axis] = suite.parse_axis_values(axis, [value])
        case = suite.cases([args.dtype] if args.dtype else None, values)[0]
        print_breakdown(suite, args.impl, case, timer, args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
