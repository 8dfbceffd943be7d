"""The case loop: for each case, make inputs and the reference, check every implementation, then time
the ones that passed (and the baselines outside tolerance, marked inexact) next to the same-size
copy, and hand each record to the writer once, complete, as soon as it is made."""

from __future__ import annotations

import gc
import time
import traceback
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from .check import compare, expected_dtypes, poison_allocator
from .results import Check, Record, ResultsWriter
from .stats import disturbance
from .suite import COPY_IMPL, FIRST_CALL_IN_BUILD_KINDS, Case, Implementation, Skip, Suite, Traffic
from .telemetry import Telemetry, summarize_window
from .timing import Timer, measure_copy_ceiling


@dataclass
class RunSettings:
    """How to measure: timing mode, the clock of cold samples (events, cupti, auto) and the seed of
    the random inputs."""

    timing: str = "cold"
    seed: int = 0
    timer: str = "events"


def case_seed(seed: int, case: Case) -> int:
    """The seed of one case's inputs: fixed by the run's seed and the case itself (suite, axis
    values, dtype), not by its place in the sweep, so any process (an ncu child, a worker on
    another GPU) regenerates exactly the inputs that were checked."""
    return (int(seed) * 1_000_003 + zlib.crc32(str(case).encode())) % (2**62)


class InputsError(ValueError):
    """A suite's inputs function made tensors the run cannot use as they are: on another device, or
    drawn from torch's global random state instead of the generator it was given."""


def make_case_inputs(suite: Suite, case: Case, device, seed: int) -> dict[str, Any]:
    """The case's inputs from its seed (see case_seed): the one place inputs are generated."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    before = _global_random_states(generator.device)
    inputs = suite.make_inputs(case, generator)
    _check_inputs(suite, inputs, generator.device, before)
    return inputs


def _global_random_states(device) -> list:
    import torch

    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def _check_inputs(suite: Suite, inputs: Any, device, before: list) -> None:
    """Tensors on the run's device, drawn from the case's generator: an input on the CPU would time
    a host copy or fail inside a kernel, and one drawn from torch's global state differs in a re-run,
    an ncu child or a worker on another GPU from the one that was checked."""
    import torch

    if not isinstance(inputs, dict):
        raise InputsError(f"suite {suite.name!r}: inputs returned {type(inputs).__name__}, not a dict of name -> tensor")
    for name, value in inputs.items():
        for tensor in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(tensor, torch.Tensor) and not _on(tensor.device, device) and not _host_scalar(tensor):
                raise InputsError(f"suite {suite.name!r}: input {name!r} is on {tensor.device}, the run on {device}; "
                                  "make it with device=gen.device")
    if any(not torch.equal(a, b) for a, b in zip(before, _global_random_states(device))):
        raise InputsError(f"suite {suite.name!r}: inputs drew from torch's global random state; pass generator=gen "
                          "to every random call so that each case's inputs are the same wherever they are made")


def _check_reference(suite: Suite, case: Case, reference: Any) -> None:
    """The reference is tensors, one tolerance per output: anything else is the suite's fault, and
    found later it would fail every implementation as if its result were wrong."""
    import torch

    from .check import as_tuple

    outputs = as_tuple(reference)
    for output in outputs:
        if not isinstance(output, torch.Tensor):
            raise ValueError(f"suite {suite.name!r}: reference returned {type(output).__name__}, not a tensor "
                             "or a tuple of tensors")
    tolerance = suite.tolerance(case.dtype)  # a suite's own output check reads no tolerances
    if suite.output_check is None and isinstance(tolerance, tuple) and len(tolerance) != len(outputs):
        def count(n: int, noun: str) -> str:
            return f"{n} {noun}" + ("" if n == 1 else "s")

        raise ValueError(f"suite {suite.name!r}: {count(len(tolerance), 'tolerance')} for its "
                         f"{count(len(outputs), 'reference output')} of {case.dtype}")
    declared = suite.output_dtypes
    if suite.output_check is None and declared is not None and len(declared) != len(outputs):
        raise ValueError(f"suite {suite.name!r}: output_dtypes names {len(declared)} dtypes for its "
                         f"{len(outputs)} reference outputs")


def _host_scalar(tensor) -> bool:
    """A 0-dim CPU tensor, which torch passes to a GPU op as a scalar (dropout's p)."""
    return tensor.dim() == 0 and tensor.device.type == "cpu"


def _on(where, device) -> bool:
    return where.type == device.type and (device.index is None or where.index in (None, device.index))


AfterTiming = Callable[[Case, Implementation, dict[str, Any]], dict[str, Any] | None]
"""A hook called with (case, implementation, the record's fields) after an implementation is
timed and before its record is written; what it returns is merged into the record's `extra`
(profile adds Nsight Compute's figures so)."""


def is_out_of_memory(err: BaseException) -> bool:
    name = type(err).__name__
    return name in ("OutOfMemoryError", "OutOfMemory") or "out of memory" in str(err).lower()


def _short_error(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return f"{type(err).__name__}: {text}" if not text.startswith(type(err).__name__) else text


class Runner:
    """Runs cases of a suite on one device and hands each record to the writer as it is made."""

    def __init__(self, device, timer: Timer, writer: ResultsWriter, settings: RunSettings,
                 peak_gbps: float | None, telemetry: Telemetry | None = None,
                 on_step: Callable[[str], None] | None = None, after_timing: AfterTiming | None = None):
        self.after_timing = after_timing
        self.device = device
        self.timer = timer
        self.writer = writer
        self.settings = settings
        self.peak_gbps = peak_gbps
        self.telemetry = telemetry
        self.on_step = on_step or (lambda text: None)
        self._input_seed: int | None = None
        self._mask_bytes: dict[str, int] = {}
        """The current case's mask memory by implementation name, for every record made for it."""

    # --- records -----------------------------------------------------------------------
    def _record(self, case: Case, impl: str | Implementation, kind: str | None, status: str,
                traffic: Traffic | None, reason: str | None = None, **fields: Any) -> Record:
        """Make a record, complete, and hand it to the writer (records are never changed after)."""
        role = None
        if isinstance(impl, Implementation):
            impl, kind, role = impl.name, impl.kind, impl.role
        record = Record(
            suite=case.suite, case=case.id, params=dict(case.params), dtype=case.dtype, impl=impl, kind=kind,
            status=status, reason=reason,
            bytes_read=traffic.read if traffic else None, bytes_written=traffic.write if traffic else None,
            bytes_total=traffic.total if traffic else None, mask_bytes=self._mask_bytes.get(impl),
            role=role, input_seed=self._input_seed, **fields)
        self.writer.add(record)
        return record

    # --- one case ----------------------------------------------------------------------
    def run_case(self, suite: Suite, case: Case, impls: list[Implementation]) -> list[Record]:
        records: list[Record] = []
        traffic = suite.compute_traffic(case)
        self._mask_bytes = {i.name: m for i in impls if (m := suite.mask_bytes_of(i, case)) is not None}
        self._input_seed = case_seed(self.settings.seed, case)
        try:
            self.on_step(f"{case} inputs")
            inputs = make_case_inputs(suite, case, self.device, self._input_seed)
            reference = suite.compute_reference(**inputs)
            _check_reference(suite, case, reference)
        except Exception as err:  # noqa: BLE001
            self._release()
            status, reason = ("skipped", f"out of memory making inputs and reference: {_short_error(err)}") \
                if is_out_of_memory(err) else ("failed", f"inputs or reference failed: {_short_error(err)}")
            records.append(self._record(case, COPY_IMPL, "ceiling", status, traffic, reason))
            for impl in impls:
                records.append(self._record(case, impl, None, status, traffic, reason))
            return records

        passed: list[tuple[Implementation, Callable[[], Any], dict, float]] = []
        for impl in impls:
            self.on_step(f"{case} check {impl.name}")
            outcome = self._build_and_check(suite, case, impl, inputs, reference)
            if isinstance(outcome, Record):
                records.append(outcome)
            else:
                passed.append((impl, *outcome))
        del reference
        self._release()

        copy_record = self._time_copy(case, traffic)
        records.append(copy_record)
        own_copies: dict[int, dict] = {}
        for impl, fn, check, build_s in passed:
            self.on_step(f"{case} time {impl.name}")
            impl_traffic = suite.traffic_of(impl, case)
            own = self._own_copy_gbps(case, impl_traffic, copy_record, own_copies) if copy_record.status == "ok" else None
            records.append(self._time_impl(case, impl, fn, inputs, check, impl_traffic,
                                           own["gbps"] if own else copy_record.gbps, build_s,
                                           {"own_copy": own} if own else None))
        del inputs, passed
        self._release()
        return records

    def _build_and_check(self, suite: Suite, case: Case, impl: Implementation, inputs: dict, reference):
        traffic = suite.traffic_of(impl, case)
        try:
            reason = impl.skip_reason(case)
        except Exception as err:  # noqa: BLE001 - the suite's unsupported(), whatever it raises
            return self._record(case, impl, None, "failed", traffic, f"unsupported() raised: {_short_error(err)}",
                                check={"passed": False, "message": traceback.format_exc(limit=3)})
        if reason:
            return self._record(case, impl, None, "skipped", traffic, str(reason))
        began = time.perf_counter()
        try:
            fn = impl.build(case)
            if impl.kind in FIRST_CALL_IN_BUILD_KINDS:
                # torch.compile and Triton compile and autotune on the first call: build time,
                # recorded and kept out of both the check (a fresh call) and the timing.
                fn(**inputs)
                self._sync()
        except Skip as err:
            return self._record(case, impl, None, "skipped", traffic, str(err))
        except Exception as err:  # noqa: BLE001 - a broken build must not stop the other implementations
            self._release()
            if is_out_of_memory(err):
                return self._record(case, impl, None, "skipped", traffic, f"out of memory: {_short_error(err)}")
            return self._record(case, impl, None, "failed", traffic, f"build failed: {_short_error(err)}",
                                check={"passed": False, "message": traceback.format_exc(limit=3)})
        build_s = time.perf_counter() - began
        try:
            poison_allocator(reference, case.torch_dtype)
            out = fn(**inputs)
            self._sync()
            check = self._judge(suite, case, inputs, out, reference)
            del out
        except Skip as err:
            return self._record(case, impl, None, "skipped", traffic, str(err), build_s=build_s)
        except Exception as err:  # noqa: BLE001
            self._release()
            if is_out_of_memory(err):
                return self._record(case, impl, None, "skipped", traffic, f"out of memory: {_short_error(err)}",
                                    build_s=build_s)
            return self._record(case, impl, None, "failed", traffic, f"run failed: {_short_error(err)}",
                                build_s=build_s)
        check_dict = vars(check)
        if not check.passed and not impl.is_baseline:
            return self._record(case, impl, None, "failed", traffic, f"wrong result: {check.message}",
                                check=check_dict, build_s=build_s)
        return fn, check_dict, build_s

    @staticmethod
    def _judge(suite: Suite, case: Case, inputs: dict, out, reference) -> Check:
        if suite.output_check is None:
            dtypes = expected_dtypes(reference, case.dtype, suite.output_dtypes)
            return compare(out, reference, suite.tolerance(case.dtype), dtypes)
        try:
            passed, message = suite.output_check(case, inputs, out)
        except Exception as err:  # noqa: BLE001 - a check that cannot even read the outputs fails them
            passed, message = False, f"output check raised {_short_error(err)}"
        return Check(bool(passed), message=message or None)

    def _own_copy_gbps(self, case: Case, traffic: Traffic, shared: Record, cache: dict[int, dict]) -> dict | None:
        """The copy ceiling for an implementation that moves its own number of bytes (a byte mask
        against a bitmask): measured once per distinct byte count, so each is judged against a copy
        of exactly what it moves."""
        if shared.bytes_total is not None and abs(traffic.total - shared.bytes_total) <= 32:
            return None
        if traffic.total not in cache:
            try:
                ceiling = measure_copy_ceiling(self.timer, traffic.total // 2, self.settings.timing)
            except Exception:  # noqa: BLE001 - no own ceiling (out of memory): fall back to the suite's
                self._release()
                return None
            cache[traffic.total] = {"bytes": 2 * ceiling.nbytes, "gbps": ceiling.gbps, "method": ceiling.method,
                                    "gbps_by_method": ceiling.gbps_by_method}
        return cache[traffic.total]

    def _time_copy(self, case: Case, traffic: Traffic) -> Record:
        self.on_step(f"{case} time copy")
        before = self._telemetry()
        try:
            ceiling = measure_copy_ceiling(self.timer, traffic.total // 2, self.settings.timing)
        except Exception as err:  # noqa: BLE001
            self._release()
            status = "skipped" if is_out_of_memory(err) else "failed"
            return self._record(case, COPY_IMPL, "ceiling", status, traffic, f"copy ceiling: {_short_error(err)}")
        fields = self._timed_fields(COPY_IMPL, ceiling.measurement, Traffic(ceiling.nbytes, ceiling.nbytes),
                                    None, None, before)
        fields["extra"] = {"method": ceiling.method, "gbps_by_method": ceiling.gbps_by_method}
        return self._record(case, COPY_IMPL, "ceiling", "ok", Traffic(ceiling.nbytes, ceiling.nbytes), **fields)

    def _time_impl(self, case: Case, impl: Implementation, fn, inputs: dict, check: dict,
                   traffic: Traffic, copy_gbps: float | None, build_s: float | None = None,
                   extra: dict | None = None) -> Record:
        before = self._telemetry()
        try:
            m = self.timer.measure(lambda: fn(**inputs), self.settings.timing)
        except Exception as err:  # noqa: BLE001
            self._release()
            status = "skipped" if is_out_of_memory(err) else "failed"
            return self._record(case, impl, None, status, traffic, f"timing failed: {_short_error(err)}",
                                check=check, build_s=build_s)
        fields = self._timed_fields(impl.name, m, traffic, copy_gbps, check, before)
        fields["build_s"] = build_s
        if check and not check.get("passed", True):
            fields["inexact"] = True
            largest = _largest_error(check)
            fields["reason"] = "; ".join(x for x in (f"inexact baseline ({largest})", check.get("message"),
                                                     fields["reason"]) if x)
        if extra:
            fields["extra"] = dict(extra)
        if self.after_timing is not None:
            added = self.after_timing(case, impl, {**fields, "bytes_total": traffic.total,
                                                   "input_seed": self._input_seed})
            if added:
                fields["extra"] = {**(fields.get("extra") or {}), **added}
        return self._record(case, impl, None, "ok", traffic, **fields)

    def _timed_fields(self, name, m, traffic: Traffic, copy_gbps, check, before: dict) -> dict[str, Any]:
        gbps = traffic.total / (m.stats.median_us * 1e-6) / 1e9
        pct_peak = 100.0 * gbps / self.peak_gbps if self.peak_gbps else None
        disturbed = disturbance(m.stats)
        warnings = [disturbed]
        if pct_peak is not None and pct_peak > 100.0:
            warnings.append("above the theoretical peak: a byte-model or timing bug, do not trust this number")
        return dict(
            reason="; ".join(w for w in warnings if w) or None, timing=m.mode, stats=m.stats.to_dict(),
            samples_us=[round(s, 4) for s in m.samples_us], gbps=gbps,
            copy_gbps=copy_gbps if name != COPY_IMPL else gbps,
            pct_copy=100.0 * gbps / copy_gbps if copy_gbps else (100.0 if name == COPY_IMPL else None),
            pct_peak=pct_peak, check=check, disturbed=disturbed is not None,
            timer=m.timer, host_us=m.host_us, timer_detail=m.detail,
            telemetry=summarize_window(before, self.telemetry.sample()) if self.telemetry else None)

    def _telemetry(self) -> dict:
        return self.telemetry.sample() if self.telemetry else {}

    def _sync(self) -> None:
        import torch

        if getattr(torch.device(self.device), "type", "cuda") == "cuda":
            torch.cuda.synchronize(self.device)

    def _release(self) -> None:
        import torch

        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def _largest_error(check: dict) -> str:
    """The largest error of a check, as the inexact reason states it."""
    parts = [f"{label} {check[key]:.3g}" for key, label in (("max_abs_err", "max abs err"),
                                                          ("max_rel_err", "max rel err")) if check.get(key) is not None]
    return ", ".join(parts) or "outside tolerance"
