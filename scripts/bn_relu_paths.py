"""Cold time of bn_relu's one-launch path against its three-kernel path, per case (a tuning aid
for bwbench/cuda/bn_relu.py's one_launch_by_default; `bwbench run bn_relu` gives the figures to report).

Usage: python3 scripts/bn_relu_paths.py [--dtype float16] [--direction forward] [--shape 32x64x112x112 ...]
Each case: the suite's inputs, each path checked by the suite's check, then timed cold (bwbench's
Timer: L2 flushed before every sample), with the GB/s of the suite's byte model. The forward's
one-launch path runs with its x cache and without it (bn_relu.CACHE_X).
"""
import argparse
import importlib.util

import torch

from bwbench.cuda import bn_relu
from bwbench.cuda.bn_relu import bn_relu_backward, bn_relu_forward
from bwbench.paths import suites_dir
from bwbench.stats import SamplingPolicy
from bwbench.suite import Case
from bwbench.timing import Timer

SHAPES = [(32, 64, 112, 112), (32, 256, 56, 56)]


def suite_module():
    spec = importlib.util.spec_from_file_location("_bn_relu_suite", suites_dir() / "bn_relu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--direction", choices=("forward", "backward"), action="append")
    parser.add_argument("--shape", action="append", help="NxCxHxW (repeatable; default: the ResNet-50 stages)")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape] if args.shape else SHAPES
    mod = suite_module()
    timer = Timer(torch.device("cuda"), torch.cuda.get_device_properties(0).L2_cache_size, None,
                  SamplingPolicy(min_samples=30, max_seconds=0.5))
    for direction in args.direction or ("forward", "backward"):
        for variant in ("bn_relu", "bn_add_relu"):
            for layout in ("NCHW", "NHWC"):
                for shape in shapes:
                    case = Case("bn_relu", {"direction": direction, "variant": variant, "shape": shape,
                                            "layout": layout}, args.dtype)
                    gen = torch.Generator(device="cuda").manual_seed(0)
                    inputs = mod.inputs(case, gen)
                    nbytes = mod.traffic(case).total
                    row = []
                    paths = [(True, True), (True, False), (False, True)] if direction == "forward" else \
                        [(True, True), (False, True)]
                    for fused, cache in paths:
                        bn_relu.CACHE_X = cache
                        if direction == "forward":
                            def call(fused=fused):
                                return bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"],
                                                       inputs.get("z"), fused=fused)
                        else:
                            def call(fused=fused):
                                return bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"],
                                                        inputs["invstd"], inputs["gamma"],
                                                        residual=variant == "bn_add_relu", fused=fused)
                        try:
                            ok, message = mod.check(case, inputs, call())
                        except ValueError:  # the one-launch path does not apply to this shape
                            continue
                        us = timer.cold(call).stats.median_us
                        row.append(f"{'three' if not fused else 'one+cache' if cache and direction == 'forward' else 'one-launch'} {us:7.1f} us {nbytes / us / 1e3:5.0f} GB/s"
                                   + ("" if ok else f" WRONG: {message}"))
                    print(f"{direction:8} {variant:11} {layout} {'x'.join(map(str, shape)):14} " + " | ".join(row),
                          flush=True)
    for (name, _, layout, n, c, hw, _, _, on), plan in bn_relu.PLANS.items():
        if on and plan is not None:
            print(f"x cache: {name} {layout} n={n} c={c} hw={hw}: {plan.slots} slots a thread, "
                  f"{plan.elements_read_again(n * hw) / (n * hw):.0%} of x read again")

if __name__ == "__main__":
    main()
