"""The CUPTI timer without a GPU: a fake cupti-python module plays the device, so attribution of
kernels to samples, span against sum, exclusion of the flush and the sleep, and auto's fallback
are checked here; tests/test_timer_gpu.py checks the same against a real GPU."""

import enum
import sys
import types

import pytest

from bwbench.cupti_trace import (CuptiAttributionError, GpuActivity, SampleTime, attribute, sample_time,
                                 sample_times, summarize_sums)


# --- a fake cupti-python --------------------------------------------------------------------------
class _Record:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def make_fake_cupti(enable_error=None, external_records=True, api_records=True):
    """A module with the part of cupti-python's activity API the timer uses. `launch` plays a CUDA
    API call: it gets the next correlation id and an API record on the host clock, is tagged with
    the external id on top of the stack (when API and external-correlation records are on), and
    runs on a device clock in stream order."""
    mod = types.ModuleType("cupti.cupti")
    mod.ActivityKind = enum.IntEnum("ActivityKind", "CONCURRENT_KERNEL KERNEL MEMCPY MEMSET RUNTIME DRIVER "
                                                    "EXTERNAL_CORRELATION")
    mod.ExternalCorrelationKind = enum.IntEnum("ExternalCorrelationKind", "UNKNOWN CUSTOM0 CUSTOM1")
    mod.ActivityFlag = enum.IntEnum("ActivityFlag", {"NONE": 0, "FLUSH_FORCED": 1})
    mod.cuptiError = type("cuptiError", (Exception,), {})
    state = types.SimpleNamespace(enabled=set(), stack=[], pending=[], callbacks=None, correlation=100,
                                  clock_ns=1_000_000, host_ns=500, flushes=0, launched=[])
    mod.state = state
    kinds = mod.ActivityKind

    def activity_register_callbacks(requested, completed):
        size, _max_records = requested()
        assert size > 0
        state.callbacks = (requested, completed)

    def activity_enable(kind):
        if enable_error and kind == kinds[enable_error]:
            raise mod.cuptiError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")
        state.enabled.add(kinds(kind))

    def activity_disable(kind):
        state.enabled.discard(kinds(kind))

    def activity_push_external_correlation_id(kind, external_id):
        state.stack.append((int(kind), external_id))

    def activity_pop_external_correlation_id(kind):
        assert state.stack and state.stack[-1][0] == int(kind), "pop without a push"
        return state.stack.pop()[1]

    def activity_flush_all(flag):
        state.flushes += 1
        records, state.pending = state.pending, []
        if state.callbacks and records:
            # CUPTI hands records over in buffers; two halves exercise records split across buffers
            half = len(records) // 2
            state.callbacks[1](records[:half])
            state.callbacks[1](records[half:])

    def get_timestamp():
        state.host_ns += 100
        return state.host_ns

    def launch(name, duration_ns, kind="kernel", gap_ns=1500):
        state.correlation += 1
        corr = state.correlation
        state.launched.append(name)
        api_on = kinds.RUNTIME in state.enabled or kinds.DRIVER in state.enabled
        if api_records and api_on:
            state.pending.append(_Record(kind=kinds.RUNTIME, start=get_timestamp(), end=get_timestamp(),
                                         correlation_id=corr))
        if external_records and api_on and kinds.EXTERNAL_CORRELATION in state.enabled:
            for ext_kind, external_id in state.stack[-1:]:
                state.pending.append(_Record(kind=kinds.EXTERNAL_CORRELATION, external_kind=ext_kind,
                                             external_id=external_id, correlation_id=corr))
        activity_kind = {"kernel": kinds.CONCURRENT_KERNEL, "memcpy": kinds.MEMCPY}[kind]
        start = state.clock_ns + gap_ns
        state.clock_ns = start + duration_ns
        if activity_kind in state.enabled:
            fields = dict(kind=activity_kind, start=start, end=start + duration_ns, correlation_id=corr)
            if kind == "kernel":
                fields["name"] = name
            state.pending.append(_Record(**fields))

    for fn in (activity_register_callbacks, activity_enable, activity_disable, activity_push_external_correlation_id,
               activity_pop_external_correlation_id, activity_flush_all, get_timestamp):
        setattr(mod, fn.__name__, fn)
    mod.launch = launch
    return mod


@pytest.fixture
def fake_cupti(monkeypatch):
    mod = make_fake_cupti()
    install(monkeypatch, mod)
    return mod


def install(monkeypatch, mod):
    package = types.ModuleType("cupti")
    package.cupti = mod
    monkeypatch.setitem(sys.modules, "cupti", package)
    monkeypatch.setitem(sys.modules, "cupti.cupti", mod)


# --- pure attribution ------------------------------------------------------------------------------
def test_span_runs_first_start_to_last_end_and_sum_adds_durations():
    acts = [GpuActivity("kernel", 1_000, 4_000, 7, "reduce"), GpuActivity("kernel", 6_000, 7_000, 8, "scale")]
    t = sample_time(acts)
    assert t.span_us == pytest.approx(6.0) and t.sum_us == pytest.approx(4.0) and t.activities == 2
    assert t.sum_us <= t.span_us
    assert t.names == ("reduce", "scale")


def test_activities_outside_every_bracket_are_left_out():
    flush, sleep = GpuActivity("kernel", 0, 50_000, 1, "flush"), GpuActivity("kernel", 50_000, 90_000, 2, "sleep")
    call = GpuActivity("kernel", 90_500, 95_500, 3, "softmax")
    grouped = attribute([flush, sleep, call], {3: 42})
    assert grouped == {42: [call]}
    assert sample_times([flush, sleep, call], {3: 42}, [42])[0].span_us == pytest.approx(5.0)


def test_a_sample_without_a_complete_record_cannot_be_timed():
    with pytest.raises(CuptiAttributionError, match="sample 2 of 2: no kernel or copy"):
        sample_times([GpuActivity("kernel", 10, 20, 5)], {5: 1}, [1, 2])
    with pytest.raises(CuptiAttributionError, match="no end timestamp"):
        sample_time([GpuActivity("kernel", 10, 0, 5)])


def test_summary_keeps_sum_beside_span_and_the_calls_kernels():
    times = [SampleTime(10.0, 8.0, 2, ("a", "b")), SampleTime(12.0, 9.0, 2, ("a", "b")), SampleTime(11.0, 8.5, 3)]
    detail = summarize_sums(times)
    assert detail["span_median_us"] == 11.0 and detail["sum_median_us"] == 8.5
    assert detail["activities_per_call"] == 2 and detail["activities_per_call_range"] == [2, 3]
    assert detail["names"] == ["a", "b"]


# --- the clock against the fake module -------------------------------------------------------------
def _clock(fake):
    from bwbench.cupti_trace import ActivityTrace
    from bwbench.timing import CuptiClock

    return CuptiClock(ActivityTrace(fake), synchronize=lambda: None)


def test_clock_attributes_each_calls_kernels_and_copies_and_never_the_flush_or_sleep(fake_cupti):
    clock = _clock(fake_cupti)
    with clock.active():
        fake_cupti.launch("warm-up", 9_000)  # traced but outside any sample
        clock.begin(3)
        for i in range(3):
            fake_cupti.launch("flush", 40_000)
            fake_cupti.launch("sleep", 30_000)
            clock.start(i)
            fake_cupti.launch("row_max", 3_000 + 1_000 * i)
            fake_cupti.launch("row_scale", 2_000, gap_ns=500)
            if i == 2:
                fake_cupti.launch("memcpy", 4_000, kind="memcpy", gap_ns=250)
            clock.stop(i)
        times = clock.finish()
    assert [t.activities for t in times] == [2, 2, 3]
    assert [t.sum_us for t in times] == pytest.approx([5.0, 6.0, 11.0])
    assert [t.span_us for t in times] == pytest.approx([5.5, 6.5, 11.75])
    assert all("flush" not in t.names and "sleep" not in t.names for t in times)
    assert all(t.sum_us <= t.span_us for t in times)
    assert fake_cupti.state.enabled == set() and fake_cupti.state.stack == []


def test_clock_says_which_sample_launched_nothing(fake_cupti):
    clock = _clock(fake_cupti)
    with clock.active():
        clock.begin(2)
        clock.start(0)
        fake_cupti.launch("k", 1_000)
        clock.stop(0)
        clock.start(1)
        clock.stop(1)
        with pytest.raises(CuptiAttributionError, match="sample 2 of 2"):
            clock.finish()


def test_records_from_an_earlier_batch_never_land_in_a_later_one(fake_cupti):
    clock = _clock(fake_cupti)
    with clock.active():
        clock.begin(1)
        clock.start(0)
        fake_cupti.launch("first", 1_000)
        clock.stop(0)
        assert clock.finish()[0].span_us == pytest.approx(1.0)
        clock.begin(1)
        clock.start(0)
        fake_cupti.launch("second", 2_000)
        clock.stop(0)
        assert clock.finish()[0].names == ("second",)


def test_without_external_correlation_records_host_time_windows_tie_kernels_to_samples(monkeypatch):
    fake = make_fake_cupti(external_records=False)
    install(monkeypatch, fake)
    clock = _clock(fake)
    with clock.active():
        clock.begin(2)
        for i in range(2):
            fake.launch("flush", 40_000)
            fake.launch("sleep", 30_000)
            clock.start(i)
            fake.launch(f"call{i}", 2_000 + 1_000 * i)
            clock.stop(i)
        times = clock.finish()
    assert [t.names for t in times] == [("call0",), ("call1",)]
    assert [t.span_us for t in times] == pytest.approx([2.0, 3.0])
    assert clock.detail(times)["attributed_by"] == ["host time window"]


def test_host_windows_take_only_calls_that_started_inside():
    from bwbench.cupti_trace import ApiCall, correlations_in_windows

    calls = [ApiCall(5, 1), ApiCall(10, 2), ApiCall(15, 3), ApiCall(20, 4), ApiCall(31, 5)]
    assert correlations_in_windows(calls, {7: (20, 30), 6: (10, 15)}) == {2: 6, 3: 6, 4: 7}


# --- the whole cold measurement on the fake device ---------------------------------------------------
@pytest.fixture
def cpu_timer(monkeypatch):
    """A Timer on the CPU whose device calls are no-ops: the fake module is the only 'GPU'."""
    import torch

    from bwbench.stats import SamplingPolicy
    from bwbench.timing import Timer

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None, raising=False)
    timer = Timer("cpu", 1 << 20, 1500.0, SamplingPolicy(min_samples=6, max_samples=6, batch=3))
    timer._flush_src = torch.ones(16)
    return timer


def _fake_device_timer(timer, fake, monkeypatch):
    monkeypatch.setattr(timer, "flush_l2", lambda: fake.launch("flush", 40_000))
    monkeypatch.setattr(timer, "_hide_launch", lambda us: fake.launch("sleep", int(us * 1000)))
    monkeypatch.setattr(timer, "_probe_call", lambda: fake.launch("probe", 1_000))


def test_cold_measurement_with_cupti_reports_span_sum_and_host_cost(cpu_timer, fake_cupti, monkeypatch):
    from bwbench.timing import Timer

    _fake_device_timer(cpu_timer, fake_cupti, monkeypatch)
    timer = cpu_timer.using("cupti")
    _fake_device_timer(timer, fake_cupti, monkeypatch)
    assert isinstance(timer, Timer) and timer.kind == "cupti" and cpu_timer.kind == "events"

    def two_kernels():
        fake_cupti.launch("a", 4_000)
        fake_cupti.launch("b", 1_000, gap_ns=1_000)

    m = timer.cold(two_kernels)
    assert m.timer == "cupti" and m.mode == "cold" and len(m.samples_us) == 6
    assert m.stats.median_us == pytest.approx(6.0)
    assert m.detail["sum_median_us"] == pytest.approx(5.0) and m.detail["activities_per_call"] == 2
    assert m.detail["names"] == ["a", "b"] and m.detail["attributed_by"] == ["external correlation"]
    assert m.host_us is not None and m.host_us > 0
    assert fake_cupti.state.enabled == set()


def test_auto_takes_cupti_where_it_traces(cpu_timer, fake_cupti, monkeypatch):
    from bwbench import timing

    monkeypatch.setattr(timing.Timer, "_probe_call", lambda self: fake_cupti.launch("probe", 1_000))
    monkeypatch.setattr(timing, "Timer", lambda *a, **k: cpu_timer)
    timer = timing.make_timer("auto", "cpu", 1 << 20, 1500.0)
    assert timer.kind == "cupti"
    assert timer.choice.to_dict() == {"requested": "auto", "used": "cupti",
                                      "reason": "cupti-python is installed and CUPTI traces kernels here"}


def test_auto_falls_back_to_events_without_cupti_python_and_says_why(cpu_timer, monkeypatch):
    from bwbench import timing

    monkeypatch.setitem(sys.modules, "cupti", None)  # import cupti -> ImportError
    monkeypatch.setattr(timing, "Timer", lambda *a, **k: cpu_timer)
    timer = timing.make_timer("auto", "cpu", 1 << 20, 1500.0)
    assert timer.kind == "events" and timer.choice.used == "events"
    assert "cupti-python is not importable" in timer.choice.reason and "cupti-python~=13.0.0" in timer.choice.reason
    with pytest.raises(timing.TimerUnavailable, match="cupti-python~=13.0.0"):
        timing.check_timer_kind("cupti")


def test_auto_falls_back_when_cupti_traces_no_kernel(cpu_timer, monkeypatch):
    from bwbench import timing

    fake = make_fake_cupti(external_records=False, api_records=False)  # kernels traced, never tied to a sample
    install(monkeypatch, fake)
    monkeypatch.setattr(timing.Timer, "_probe_call", lambda self: fake.launch("probe", 1_000))
    monkeypatch.setattr(timing, "Timer", lambda *a, **k: cpu_timer)
    timer = timing.make_timer("auto", "cpu", 1 << 20, 1500.0)
    assert timer.kind == "events"
    assert "CUPTI does not trace kernels here" in timer.choice.reason and "no kernel or copy" in timer.choice.reason
    with pytest.raises(timing.TimerUnavailable, match="does not trace"):
        timing.make_timer("cupti", "cpu", 1 << 20, 1500.0)
    assert fake.state.enabled == set() and fake.state.stack == []


def test_auto_falls_back_when_cupti_may_not_trace(cpu_timer, monkeypatch):
    from bwbench import timing

    fake = make_fake_cupti(enable_error="CONCURRENT_KERNEL")
    install(monkeypatch, fake)
    monkeypatch.setattr(timing, "Timer", lambda *a, **k: cpu_timer)
    timer = timing.make_timer("auto", "cpu", 1 << 20, 1500.0)
    assert timer.kind == "events" and "could not enable CONCURRENT_KERNEL" in timer.choice.reason
    assert "INSUFFICIENT_PRIVILEGES" in timer.choice.reason


def test_an_events_measurement_made_by_a_fallback_says_why(cpu_timer, monkeypatch):
    from bwbench.cupti_trace import SampleTime
    from bwbench.timing import TimerChoice

    class FakeEvents:
        name = "events"

        def __init__(self):
            from contextlib import nullcontext
            self.active = nullcontext

        def begin(self, n):
            self.n = n

        def start(self, i):
            pass

        def stop(self, i):
            pass

        def finish(self):
            return [SampleTime(3.0, 3.0)] * self.n

        @staticmethod
        def detail(times):
            return None

    cpu_timer.clock = FakeEvents()
    monkeypatch.setattr(cpu_timer, "flush_l2", lambda: None)
    cpu_timer.choice = TimerChoice("auto", "events", "cupti-python is not importable")
    m = cpu_timer.cold(lambda: None)
    assert m.timer == "events" and m.stats.median_us == 3.0
    assert m.detail["choice"] == {"requested": "auto", "used": "events", "reason": "cupti-python is not importable"}
    assert m.detail["writeback_us"] == 0.0


@pytest.mark.parametrize("writes, writeback_us", [(True, 5.0), (False, 0.0)])
def test_cold_samples_are_charged_the_write_back_their_call_left_in_l2(cpu_timer, fake_cupti, monkeypatch,
                                                                      writes, writeback_us):
    """A flush after the call that takes longer than a flush after a flush is the call's writes
    reaching DRAM: every sample carries it, and the record keeps the parts."""
    _fake_device_timer(cpu_timer, fake_cupti, monkeypatch)
    timer = cpu_timer.using("cupti")
    _fake_device_timer(timer, fake_cupti, monkeypatch)
    dirty = {"lines": False}

    def call():
        fake_cupti.launch("copy", 4_000)
        dirty["lines"] = writes

    def flush():
        fake_cupti.launch("flush", 45_000 if dirty["lines"] else 40_000)
        dirty["lines"] = False

    monkeypatch.setattr(timer, "flush_l2", flush)
    m = timer.cold(call)
    assert m.samples_us == pytest.approx([4.0 + writeback_us] * 6)
    assert m.stats.median_us == pytest.approx(4.0 + writeback_us)
    assert m.detail["span_median_us"] == pytest.approx(4.0)
    assert m.detail["writeback_us"] == pytest.approx(writeback_us)
    assert m.detail["flush_clean_us"] == pytest.approx(40.0)
    assert m.detail["flush_after_us"] == pytest.approx(40.0 + writeback_us)


def test_a_flush_faster_after_the_call_charges_nothing():
    from bwbench.timing import WriteBack

    assert WriteBack.of_pairs([39.5, 40.0, 39.8], [40.0, 40.1, 40.0]).us == 0.0
    # the median of the pairs' differences, not the difference of the medians
    charged = WriteBack.of_pairs([45.0, 41.0, 43.0], [41.0, 40.0, 42.0])
    assert charged.to_dict() == {"writeback_us": 1.0, "flush_after_us": 43.0, "flush_clean_us": 41.0}


def test_a_call_that_raises_closes_its_bracket(cpu_timer, fake_cupti, monkeypatch):
    _fake_device_timer(cpu_timer, fake_cupti, monkeypatch)
    timer = cpu_timer.using("cupti")
    _fake_device_timer(timer, fake_cupti, monkeypatch)
    calls = []

    def flaky():
        calls.append(1)
        fake_cupti.launch("k", 1_000)
        if len(calls) > 62:  # the second cold sample (after warm-up and host-cost calls)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        timer.cold(flaky)
    assert fake_cupti.state.stack == [] and fake_cupti.state.enabled == set()


# --- records, table, command line ----------------------------------------------------------------------
def test_record_keeps_timer_host_cost_and_detail_through_a_file(tmp_path):
    from bwbench.results import Record, RunDocument, ResultsWriter, read_document, to_frame

    rec = Record(suite="softmax", case="rows=8,cols=32", params={"rows": 8, "cols": 32}, dtype="float16",
                 impl="torch", kind="torch", status="ok", stats={"median_us": 6.5}, gbps=1.0,
                 timer="cupti", host_us=9.25, timer_detail={"sum_median_us": 6.0, "activities_per_call": 1,
                                                             "writeback_us": 1.5})
    path = tmp_path / "r.json"
    ResultsWriter(path, RunDocument({}, {}, {}, [rec])).finish()
    back = read_document(path).records[0]
    assert (back.timer, back.host_us, back.timer_detail) == ("cupti", 9.25, rec.timer_detail)
    row = to_frame(read_document(path)).iloc[0]
    assert row["timer"] == "cupti" and row["host_us"] == 9.25 and row["kernel_sum_us"] == 6.0
    assert row["writeback_us"] == 1.5
    assert "timer_detail" not in row.index
    old = Record(suite="s", case="c", params={}, dtype="float16", impl="i", kind="cuda", status="ok")
    assert old.timer is None and old.host_us is None  # files written before these fields still read


def test_terminal_table_shows_host_cost_and_timer():
    from rich.console import Console

    from bwbench.console import summary_tables
    from bwbench.results import Record

    recs = [Record(suite="softmax", case="cols=32", params={}, dtype="float16", impl=impl, kind=impl, status="ok",
                   gbps=1000.0, pct_copy=90.0, timer="cupti", host_us=host)
            for impl, host in (("copy", 5.2), ("torch", 12.4))]
    console = Console(width=200, record=True)
    for table in summary_tables(recs):
        console.print(table)
    text = console.export_text()
    assert "host µs per call" in text and "timer: cupti" in text and "12µs" in text and "5µs" in text


@pytest.mark.parametrize("args,message", [
    (("run", "softmax", "--timer", "sundial"), "the timer must be one of events, cupti, auto"),
])
def test_bad_timer_is_a_message_and_exit_code_2(args, message):
    from typer.testing import CliRunner

    from bwbench.cli import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2 and message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_cupti_timer_without_cupti_python_stops_before_gpu_work(monkeypatch):
    from typer.testing import CliRunner

    from bwbench import device
    from bwbench.cli import app

    monkeypatch.setitem(sys.modules, "cupti", None)
    monkeypatch.setattr(device, "require_cuda", lambda *a: pytest.fail("GPU work started"))
    result = CliRunner().invoke(app, ["run", "softmax", "--timer", "cupti"])
    assert result.exit_code == 2 and "cupti-python~=13.0.0" in " ".join(result.output.split()) and "Traceback" not in result.output


def test_side_by_side_table_from_two_results_files(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    from bwbench.results import Record, ResultsWriter, RunDocument

    def write(timer, median, host):
        recs = [Record(suite="softmax", case="rows=49152,cols=32", params={"rows": 49152, "cols": 32},
                       dtype="float16", impl=impl, kind=impl, status="ok", stats={"median_us": median + extra},
                       gbps=6.3e6 / (median + extra) / 1e3, pct_copy=100.0, timer=timer, host_us=host,
                       timer_detail={"sum_median_us": median + extra - 0.1} if timer == "cupti" else None)
                for impl, extra in (("copy", 0.0), ("torch", 1.0))]
        path = tmp_path / f"{timer}.json"
        ResultsWriter(path, RunDocument({}, {}, {}, recs)).finish()
        return str(path)

    cupti_path, events_path = write("cupti", 5.0, 9.0), write("events", 7.0, 8.5)
    spec = importlib.util.spec_from_file_location("timer_table", Path(__file__).parents[1] / "tools" / "timer_table.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main([cupti_path, events_path, "--markdown"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| suite | case | dtype | impl | events µs | CUPTI µs | events − CUPTI")
    torch_row = next(line for line in out if "| torch |" in line)
    assert "| 8.00 | 6.00 | 2.00 | 5.90 |" in torch_row and torch_row.endswith("| 8.5 | 9.0 |")
    with pytest.raises(SystemExit):
        tool.main([events_path, events_path])
