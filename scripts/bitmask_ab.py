"""A/B of the bitmask kernels in one process: another tree's kernels (e.g. the last commit's, copied
into a folder) against this tree's, interleaved round by round, cold L2, each variant checked
bit for bit before it is timed, next to torch and the same-size copy.

Usage: python3 scripts/bitmask_ab.py OLD_KERNELS_DIR [--log FILE.jsonl] [--rounds 2] [--max-time 0.5]
where OLD_KERNELS_DIR holds bitmask.cu, bitmask.cuh and common.cuh of the other tree, e.g.
  mkdir -p .ab/old && for f in bitmask.cu bitmask.cuh common.cuh; do git show HEAD:kernels/$f > .ab/old/$f; done

Variants (the old tree's kernels take the old signatures: no WideCounter parameter):
- backward (dx = dy where the mask bit is set): old (a thread per pack, one wave), packs (this
  tree built with -DBW_BACKWARD_PACKS: the same scheme, to see the noise between two builds),
  lines (a warp per 1024-element mask line, one wave), lines-all (the same, a warp for every line);
- dropout forward (p = 0.5): old, narrow (this tree, the counter's second word 0), wide (this
  tree's general draw, for 2^33 elements and more).
Not used by bwbench; `bwbench run relu` / `bwbench run dropout` measure what ships.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from bwbench.cuda import bitmask as bm
from bwbench.cuda.loader import KernelSource, grid_size, load
from bwbench.device import query_device
from bwbench.philox import dropout_keep_torch
from bwbench.stats import SamplingPolicy
from bwbench.timing import Timer, measure_copy_bandwidth

TYPES = {torch.float16: "half_t", torch.float32: "float"}


def sources():
    old = KernelSource("bitmask.cu", name_expressions=(
        *(f"bitmask_backward<{t}, true>" for t in TYPES.values()),
        *(f"dropout_forward_bitmask<{t}, true>" for t in TYPES.values())))
    packs = KernelSource("bitmask.cu", name_expressions=tuple(f"bitmask_backward<{t}, true>" for t in TYPES.values()),
                         options=("-DBW_BACKWARD_PACKS",))
    return old, packs


def launch(module, name, threads, args, waves=1):
    kernel = module.kernel(name)
    kernel(grid_size(kernel, bm.BLOCK, max(1, -(-threads // bm.BLOCK)), waves=waves), bm.BLOCK, args)


def backward_variants(old_mod, packs_mod, new_mod, dtype, n):
    t = TYPES[dtype]
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    name = f"bitmask_backward<{t}, true>"

    def make(module, threads, waves):
        def run(dy, mask):
            dx = torch.empty_like(dy)
            launch(module, name, threads, (dy, mask, np.int64(mask.numel()), dx, np.float32(1.0), np.int64(n)), waves)
            return dx
        return run

    lines = max(1, n // bm.MASK_LINE)
    return {"old": make(old_mod, -(-n // vec), 1), "packs": make(packs_mod, -(-n // vec), 1),
            "lines": make(new_mod, 32 * lines, 1), "lines-all": make(new_mod, 32 * lines, None)}


def dropout_variants(old_mod, new_mod, dtype, n, p, seed):
    t = TYPES[dtype]
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    thr, scale = np.uint32(bm.dropout_threshold(p)), np.float32(bm.dropout_scale(p))

    def make(module, name):
        def run(x):
            y = torch.empty_like(x)
            words = torch.empty((n + 31) // 32, dtype=torch.int32, device=x.device)
            launch(module, name, -(-n // vec), (x, y, words, thr, scale, np.uint64(seed), np.uint64(0), np.int64(n)))
            return y, words.view(torch.uint8)[:bm.packed_bytes(n)]
        return run

    return {"old": make(old_mod, f"dropout_forward_bitmask<{t}, true>"),
            "narrow": make(new_mod, f"dropout_forward_bitmask<{t}, true, false>"),
            "wide": make(new_mod, f"dropout_forward_bitmask<{t}, true, true>")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_kernels")
    parser.add_argument("--log", default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-time", type=float, default=0.5)
    args = parser.parse_args()

    device = torch.device("cuda")
    facts = query_device(device)
    timer = Timer(device, facts.l2_bytes, facts.sm_clock_max_mhz,
                  SamplingPolicy(min_samples=10, max_seconds=args.max_time, batch=5))
    old_src, packs_src = sources()
    old_mod, packs_mod, new_mod = load(old_src, args.old_kernels), load(packs_src), load(bm.SOURCE)
    log = open(args.log, "a") if args.log else None
    gen = torch.Generator(device=device).manual_seed(0)
    copies: dict[int, float] = {}
    rows = []

    def copy_gbps(nbytes):
        if nbytes not in copies:
            copies[nbytes] = measure_copy_bandwidth(timer, nbytes // 2)[0]
        return copies[nbytes]

    cases = [("backward", torch.float16, 1 << 26), ("backward", torch.float16, 1 << 28),
             ("backward", torch.float32, 1 << 26), ("dropout", torch.float16, 1 << 26),
             ("dropout", torch.float16, 1 << 28), ("dropout", torch.float32, 1 << 26)]
    for rnd in range(1, args.rounds + 1):
        for op, dtype, n in cases:
            s = torch.empty((), dtype=dtype).element_size()
            nbytes = 2 * n * s + bm.packed_bytes(n)
            a = torch.randn(n, generator=gen, device=device, dtype=torch.float32).to(dtype)
            if op == "backward":
                dy, y = a, torch.relu(torch.randn(n, generator=gen, device=device, dtype=torch.float32).to(dtype))
                mask = bm.pack_bits(y > 0)
                want = torch.where(y > 0, dy, torch.zeros_like(dy))
                variants = {k: (lambda f=f: f(dy, mask)) for k, f in
                            backward_variants(old_mod, packs_mod, new_mod, dtype, n).items()}
                variants["torch"] = lambda: torch.ops.aten.threshold_backward(dy, y, 0)
                own = {"torch": 3 * n * s}

                def ok(out):
                    return torch.equal(out, want)
            else:
                x, p, seed = a, 0.5, 0x5EED + n
                keep = dropout_keep_torch(n, p, seed, 0, device=device)
                want_y = (x.float() * keep.float() * torch.tensor(bm.dropout_scale(p))).to(dtype)
                want_bits = bm.pack_bits(keep)
                variants = {k: (lambda f=f: f(x)) for k, f in
                            dropout_variants(old_mod, new_mod, dtype, n, p, seed).items()}
                variants["torch"] = lambda: torch.ops.aten.native_dropout(x, p, True)
                own = {"torch": 3 * n * s}

                def ok(out):
                    return out is not None and torch.equal(out[0], want_y) and torch.equal(out[1], want_bits)
            for label, fn in variants.items():
                if label != "torch":
                    torch.cuda.synchronize()
                    if not ok(fn()):
                        print(f"{op} {dtype} {n} {label}: WRONG RESULT, not timed", flush=True)
                        continue
                m = timer.cold(fn)
                moved = own.get(label, nbytes)
                gbps = moved / (m.stats.median_us * 1e3)
                rec = {"round": rnd, "op": op, "dtype": str(dtype).removeprefix("torch."), "n": n, "variant": label,
                       "median_us": round(m.stats.median_us, 2), "p10_us": round(m.stats.p10_us, 2),
                       "p90_us": round(m.stats.p90_us, 2), "gbps": round(gbps, 1),
                       "pct_copy": round(100 * gbps / copy_gbps(moved), 1)}
                rows.append(rec)
                if log:
                    log.write(json.dumps(rec) + "\n")
                print(json.dumps(rec), flush=True)
            del a
    import pandas as pd
    df = pd.DataFrame(rows)
    table = df.pivot_table(index=["op", "dtype", "n", "variant"], columns="round", values=["median_us", "pct_copy"])
    pd.set_option("display.width", 200)
    print(table.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
