"""Nsight Compute on one case: the DRAM bytes a kernel really moved, next to the byte model.

bwbench's GB/s divides the *model's* bytes by time; a naive or uncoalesced kernel moves more than
that. `ncu` counts dram__bytes_read/write over every kernel the implementation launches inside an
NVTX range (the harness's warm-up launches stay outside it), so the ratio measured / model shows
the amplification, and ncu's kernel time next to bwbench's shows the timer agrees.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, asdict
from typing import Any

NVTX_RANGE = "bwbench_profile"
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")


class ProfilerUnavailable(RuntimeError):
    """ncu is missing or may not read the counters: said plainly, exit code 2."""


@dataclass
class KernelMetrics:
    name: str
    dram_read: float
    dram_write: float
    time_ns: float


@dataclass
class ProfileResult:
    """What ncu measured for one implementation on one case, against the model and bwbench's timer."""

    kernels: list[KernelMetrics]
    model_bytes: int
    bwbench_median_us: float | None
    writeback_us: float = 0.0
    """The part of bwbench's median that is the call's writes leaving L2 after its kernels ended:
    Nsight Compute's kernel duration does not include it, so the time ratio leaves it out."""

    @property
    def dram_bytes(self) -> float:
        return sum(k.dram_read + k.dram_write for k in self.kernels)

    @property
    def ncu_time_us(self) -> float:
        return sum(k.time_ns for k in self.kernels) / 1000.0

    @property
    def bytes_ratio(self) -> float:
        return self.dram_bytes / self.model_bytes if self.model_bytes else float("nan")

    @property
    def time_ratio(self) -> float | None:
        kernels_us = (self.bwbench_median_us or 0.0) - self.writeback_us
        return self.ncu_time_us / kernels_us if kernels_us > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"kernels": [asdict(k) for k in self.kernels], "kernel_count": len(self.kernels),
                "dram_bytes": self.dram_bytes, "model_bytes": self.model_bytes, "bytes_ratio": self.bytes_ratio,
                "ncu_time_us": self.ncu_time_us, "bwbench_median_us": self.bwbench_median_us,
                "writeback_us": self.writeback_us, "time_ratio": self.time_ratio}


def find_ncu() -> str:
    """The ncu binary: on PATH, in the CUDA toolkit, or in an Nsight Compute install."""
    candidates = [shutil.which("ncu"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ncu")]
    candidates += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    candidates += sorted(glob.glob("/usr/local/cuda*/bin/ncu"), reverse=True)
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ProfilerUnavailable("Nsight Compute (ncu) is not installed or not on PATH; install Nsight Compute "
                              "or the CUDA toolkit and try again")


_UNIT_SCALE = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "": 1}


def _number(text: str) -> float:
    return float(text.replace(",", "")) if text.strip() not in ("", "n/a") else 0.0


def parse_ncu_csv(text: str) -> list[KernelMetrics]:
    """Rows of `ncu --csv --page raw` (a header row, a units row, one row per kernel)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 2:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, units, data = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    missing = [m for m in METRICS if m not in col]
    if missing:
        raise ProfilerUnavailable(f"ncu's output has no {', '.join(missing)} (the counters may not be readable here)")

    def value(row, metric):
        i = col[metric]
        return _number(row[i]) * _UNIT_SCALE.get(units[i].strip().lower(), 1)

    name_col = col.get("Kernel Name", col.get("Function Name"))
    return [KernelMetrics(row[name_col] if name_col is not None else "?", value(row, METRICS[0]),
                          value(row, METRICS[1]), value(row, METRICS[2])) for row in data if len(row) == len(header)]


def run_ncu(spec: dict[str, Any], timeout_s: float = 600) -> list[KernelMetrics]:
    """Profile one call of the implementation in a child process under ncu. `spec` names the call
    (target_spec): the child loads the same suite file and regenerates the very inputs the run
    checked and timed from their seed."""
    ncu = find_ncu()
    cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
           "--metrics", ",".join(METRICS), "--csv", "--page", "raw", "--print-units", "base",
           sys.executable, "-m", "bwbench.profile", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    output = proc.stdout + proc.stderr
    if "ERR_NVGPUCTRPERM" in output or "permission" in output.lower() and "counter" in output.lower():
        raise ProfilerUnavailable("ncu may not read the GPU performance counters here (ERR_NVGPUCTRPERM): run as "
                                  "root or allow profiling for all users (NVreg_RestrictProfilingToAdminUsers=0)")
    if proc.returncode != 0:
        raise ProfilerUnavailable(f"ncu failed (exit {proc.returncode}): {output.strip()[-1500:]}")
    kernels = parse_ncu_csv(proc.stdout)
    if not kernels:
        raise ProfilerUnavailable(f"ncu profiled no kernel inside the NVTX range: {output.strip()[-1500:]}")
    return kernels


def target_spec(suite, case, impl_name: str, input_seed: int, gpu: int) -> dict[str, Any]:
    """What the ncu child needs to repeat one checked call: the suite's file (or name), the case,
    the implementation and the seed its inputs were generated from."""
    return {"suite": suite.source or suite.name, "impl": impl_name, "params": dict(case.params),
            "dtype": case.dtype, "input_seed": input_seed, "gpu": gpu}


def profile_hook(suite, gpu: int, on_profile=None, timer=None):
    """The session's after_timing hook for `bwbench profile`: ncu on the implementation just timed,
    with the same inputs, its figures returned for the record's extra["profile"]. With `timer`,
    the same call is also cold-timed under both clocks (CUDA events and CUPTI), so the three
    figures (events, CUPTI, Nsight Compute) stand side by side."""

    def hook(case, impl, fields: dict[str, Any]) -> dict[str, Any]:
        if on_profile:
            on_profile(case, impl.name)
        spec = target_spec(suite, case, impl.name, fields["input_seed"], gpu)
        clocks = _both_clocks(timer, spec) if timer is not None else {}
        kernels = run_ncu(spec)
        result = ProfileResult(kernels, fields["bytes_total"], (fields.get("stats") or {}).get("median_us"),
                               (fields.get("timer_detail") or {}).get("writeback_us") or 0.0)
        return {"profile": {**result.to_dict(), **clocks}}

    return hook


def _both_clocks(timer, spec: dict[str, Any]) -> dict[str, Any]:
    """Events and CUPTI cold medians of the profiled call, on the checked inputs."""
    from .timing import timer_medians

    fn, inputs = prepare_target(spec, timer.device)
    medians = timer_medians(timer, lambda: fn(**inputs))
    return {"events_median_us": medians.events_us, "cupti_median_us": medians.cupti_us,
            "cupti_reason": medians.cupti_reason, "host_us": medians.host_us}


def prepare_target(spec: dict[str, Any], device):
    """(implementation callable, inputs) of one profiled call: the suite loaded from the same file,
    the inputs regenerated from the run's seed for this case."""
    from .discovery import get_suite
    from .runner import make_case_inputs
    from .suite import Case

    suite = get_suite(spec["suite"])
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["params"].items()}
    case = Case(suite.name, params, spec["dtype"])
    inputs = make_case_inputs(suite, case, device, spec["input_seed"])
    return suite.implementations[spec["impl"]].build(case), inputs


def _profile_target(spec: dict[str, Any]) -> None:
    """Child process: build the case, warm up outside the NVTX range, then one call inside it."""
    import torch

    device = torch.device("cuda", spec["gpu"])
    torch.cuda.set_device(device)
    fn, inputs = prepare_target(spec, device)
    fn(**inputs)
    fn(**inputs)
    torch.cuda.synchronize(device)
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    fn(**inputs)
    torch.cuda.synchronize(device)
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    # The target process `bwbench profile` starts under Nsight Compute; run by hand, say what it wants.
    try:
        target = json.loads(sys.argv[1]) if len(sys.argv) == 2 else None
    except json.JSONDecodeError:
        target = None
    if not isinstance(target, dict):
        sys.exit("python -m bwbench.profile SPEC: SPEC is the JSON record of one call (suite, impl, params, "
                 "dtype, input_seed, gpu) that `bwbench profile` passes; use `bwbench profile --help` instead")
    _profile_target(target)
