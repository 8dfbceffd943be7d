"""Cold time of bn_relu's one-launch path against its three-kernel path, per case (a tuning aid
for bwbench/cuda/bn_relu.py's ONE_LAUNCH_BY_DEFAULT; `bwbench run bn_relu` gives the figures to report).

Usage: python3 scripts/bn_relu_paths.py [--dtype float16]
Each case: the suite's inputs, both paths checked by the suite's check, then timed cold (bwbench's
Timer: L2 flushed before every sample), with the GB/s of the suite's byte model.
"""
import argparse
import importlib.util

import torch

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
    args = parser.parse_args()
    mod = suite_module()
    timer = Timer(torch.device("cuda"), torch.cuda.get_device_properties(0).L2_cache_size, None,
                  SamplingPolicy(min_samples=30, max_seconds=0.5))
    for direction in ("forward", "backward"):
        for variant in ("bn_relu", "bn_add_relu"):
            for layout in ("NCHW", "NHWC"):
                for shape in SHAPES:
                    case = Case("bn_relu", {"direction": direction, "variant": variant, "shape": shape,
                                            "layout": layout}, args.dtype)
                    gen = torch.Generator(device="cuda").manual_seed(0)
                    inputs = mod.inputs(case, gen)
                    nbytes = mod.traffic(case).total
                    row = []
                    for fused in (True, False):
                        if direction == "forward":
                            def call(fused=fused):
                                return bn_relu_forward(inputs["x"], inputs["gamma"], inputs["beta"], inputs["eps"],
                                                       inputs.get("z"), fused=fused)
                        else:
                            def call(fused=fused):
                                return bn_relu_backward(inputs["dy"], inputs["mask"], inputs["x"], inputs["mean"],
                                                        inputs["invstd"], inputs["gamma"],
                                                        residual=variant == "bn_add_relu", fused=fused)
                        ok, message = mod.check(case, inputs, call())
                        us = timer.cold(call).stats.median_us
                        row.append(f"{'one-launch' if fused else 'three'} {us:7.1f} us {nbytes / us / 1e3:5.0f} GB/s"
                                   + ("" if ok else f" WRONG: {message}"))
                    print(f"{direction:8} {variant:11} {layout} {'x'.join(map(str, shape)):14} " + " | ".join(row),
                          flush=True)


if __name__ == "__main__":
    main()
