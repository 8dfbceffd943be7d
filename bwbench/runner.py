"""The run loop: for each case, make inputs and the reference, check every implementation, then time
the ones that passed next to the same-size copy, and record everything as it happens."""

from __future__ import annotations

import gc
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from .check import compare, poison_allocator
from .results import Check, Record, ResultsWriter
from .stats import disturbance
from .suite import COPY_IMPL, Case, Implementation, Skip, Suite, Traffic
from .telemetry import Telemetry, summarize_window
from .timing import Timer, measure_copy_ceiling


@dataclass
class RunSettings:
    """How to measure: timing mode, the clock of cold samples (events, cupti, auto) and the seed of
    the random inputs."""

    timing: str = "cold"
    seed: int = 0
    timer: str = "events"


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
                 on_step: Callable[[str], None] | None = None):
        self.device = device
        self.timer = timer
        self.writer = writer
        self.settings = settings
        self.peak_gbps = peak_gbps
        self.telemetry = telemetry
        self.on_step = on_step or (lambda text: None)
        self._case_counter = 0
        self._mask_bytes: dict[str, int] = {}
        """The current case's mask memory by implementation name, for every record made for it."""

    # --- records -----------------------------------------------------------------------
    def _record(self, case: Case, impl: str, kind: str, status: str, traffic: Traffic | None,
                reason: str | None = None, **fields: Any) -> Record:
        record = Record(
            suite=case.suite, case=case.id, params=dict(case.params), dtype=case.dtype, impl=impl, kind=kind,
            status=status, reason=reason,
            bytes_read=traffic.read if traffic else None, bytes_written=traffic.write if traffic else None,
            bytes_total=traffic.total if traffic else None, mask_bytes=self._mask_bytes.get(impl), **fields)
        self.writer.add(record)
        return record

    # --- one case ----------------------------------------------------------------------
    def run_case(self, suite: Suite, case: Case, impls: list[Implementation]) -> list[Record]:
        import torch

        self._case_counter += 1
        records: list[Record] = []
        traffic = suite.compute_traffic(case)
        self._mask_bytes = {i.name: m for i in impls if (m := suite.mask_bytes_of(i, case)) is not None}
        try:
            self.on_step(f"{case} inputs")
            generator = torch.Generator(device=self.device)
            generator.manual_seed(self.settings.seed + self._case_counter)
            inputs = suite.make_inputs(case, generator)
            reference = suite.compute_reference(**inputs)
        except Exception as err:  # noqa: BLE001
            self._release()
            status, reason = ("skipped", f"out of memory making inputs and reference: {_short_error(err)}") \
                if is_out_of_memory(err) else ("failed", f"inputs or reference failed: {_short_error(err)}")
            for name, kind in [(COPY_IMPL, "ceiling")] + [(i.name, i.kind) for i in impls]:
                records.append(self._record(case, name, kind, status, traffic, reason))
            return records

        passed: list[tuple[Implementation, Callable[[], Any], dict]] = []
        for impl in impls:
            self.on_step(f"{case} check {impl.name}")
            outcome = self._build_and_check(suite, case, impl, inputs, reference)
            if isinstance(outcome, Record):
                records.append(outcome)
            else:
                passed.append((impl, *outcome))
        del reference
        self._release()

        before = self.telemetry.sample() if self.telemetry else {}
        copy_record = self._time_copy(case, traffic)
        records.append(copy_record)
        own_copies: dict[int, dict] = {}
        for impl, fn, check in passed:
            self.on_step(f"{case} time {impl.name}")
            impl_traffic = suite.traffic_of(impl, case)
            own = self._own_copy_gbps(case, impl_traffic, copy_record, own_copies) if copy_record.status == "ok" else None
            record = self._time_impl(case, impl, fn, inputs, check, impl_traffic,
                                     own["gbps"] if own else copy_record.gbps)
            if own:
                record.extra = {**(record.extra or {}), "own_copy": own}
                self.writer.flush()
            records.append(record)
        after = self.telemetry.sample() if self.telemetry else {}
        if self.telemetry:
            window = summarize_window(before, after)
            for rec in records:
                if rec.status == "ok":
                    rec.telemetry = window
            self.writer.flush()
        del inputs, passed
        self._release()
        return records

    def _build_and_check(self, suite: Suite, case: Case, impl: Implementation, inputs: dict, reference):
        reason = impl.skip_reason(case)
        if reason:
            return self._record(case, impl.name, impl.kind, "skipped", suite.traffic_of(impl, case), reason)
        traffic = suite.traffic_of(impl, case)
        try:
            fn = impl.build(case)
        except Skip as err:
            return self._record(case, impl.name, impl.kind, "skipped", traffic, str(err))
        except Exception as err:  # noqa: BLE001 - a broken build must not stop the other implementations
            if is_out_of_memory(err):
                self._release()
                return self._record(case, impl.name, impl.kind, "skipped", traffic, f"out of memory: {_short_error(err)}")
            return self._record(case, impl.name, impl.kind, "failed", traffic,
                                f"build failed: {_short_error(err)}", check={"passed": False, "message": traceback.format_exc(limit=3)})
        try:
            poison_allocator(reference, case.torch_dtype)
            out = fn(**inputs)
            import torch

            torch.cuda.synchronize(self.device)
            check = self._judge(suite, case, inputs, out, reference)
            del out
        except Skip as err:
            return self._record(case, impl.name, impl.kind, "skipped", traffic, str(err))
        except Exception as err:  # noqa: BLE001
            self._release()
            if is_out_of_memory(err):
                return self._record(case, impl.name, impl.kind, "skipped", traffic, f"out of memory: {_short_error(err)}")
            return self._record(case, impl.name, impl.kind, "failed", traffic, f"run failed: {_short_error(err)}")
        check_dict = vars(check)
        if not check.passed:
            return self._record(case, impl.name, impl.kind, "failed", traffic,
                                f"wrong result: {check.message}", check=check_dict)
        return fn, check_dict

    @staticmethod
    def _judge(suite: Suite, case: Case, inputs: dict, out, reference) -> Check:
        if suite.output_check is None:
            return compare(out, reference, suite.tolerance(case.dtype))
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
        try:
            ceiling = measure_copy_ceiling(self.timer, traffic.total // 2, self.settings.timing)
        except Exception as err:  # noqa: BLE001
            self._release()
            status = "skipped" if is_out_of_memory(err) else "failed"
            return self._record(case, COPY_IMPL, "ceiling", status, traffic, f"copy ceiling: {_short_error(err)}")
        record = self._timed_record(case, COPY_IMPL, "ceiling", ceiling.measurement,
                                    Traffic(ceiling.nbytes, ceiling.nbytes), None, None)
        record.extra = {"method": ceiling.method, "gbps_by_method": ceiling.gbps_by_method}
        self.writer.flush()
        return record

    def _time_impl(self, case: Case, impl: Implementation, fn, inputs: dict, check: dict,
                   traffic: Traffic, copy_gbps: float | None) -> Record:
        try:
            m = self.timer.measure(lambda: fn(**inputs), self.settings.timing)
        except Exception as err:  # noqa: BLE001
            self._release()
            status = "skipped" if is_out_of_memory(err) else "failed"
            return self._record(case, impl.name, impl.kind, status, traffic, f"timing failed: {_short_error(err)}",
                                check=check)
        return self._timed_record(case, impl.name, impl.kind, m, traffic, copy_gbps, check)

    def _timed_record(self, case, name, kind, m, traffic: Traffic, copy_gbps, check) -> Record:
        gbps = traffic.total / (m.stats.median_us * 1e-6) / 1e9
        pct_peak = 100.0 * gbps / self.peak_gbps if self.peak_gbps else None
        warnings = [disturbance(m.stats)]
        if pct_peak is not None and pct_peak > 100.0:
            warnings.append("above the theoretical peak: a byte-model or timing bug, do not trust this number")
        reason = "; ".join(w for w in warnings if w) or None
        return self._record(
            case, name, kind, "ok", traffic, reason, timing=m.mode, stats=m.stats.to_dict(),
            samples_us=[round(s, 4) for s in m.samples_us], gbps=gbps,
            copy_gbps=copy_gbps if name != COPY_IMPL else gbps,
            pct_copy=100.0 * gbps / copy_gbps if copy_gbps else (100.0 if name == COPY_IMPL else None),
            pct_peak=pct_peak, check=check, timer=m.timer, host_us=m.host_us, timer_detail=m.detail)

    def _release(self) -> None:
        import torch

        gc.collect()
        torch.cuda.empty_cache()
