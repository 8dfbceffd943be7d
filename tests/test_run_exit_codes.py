"""`bwbench run` end to end on a faked device: exit codes, gates, interruption, and the numbers.

The fake sits at the device/timer seam: require_cuda hands out the CPU, query_device a made-up
GPU (its name carries rich markup, which must print as written), Timer returns samples each
implementation declares, and the copy ceiling is a fixed bandwidth. The suite is a real Suite
whose implementations run on the CPU, so the check against the reference is the real check.
Everything else - cases, runner, records, results file, gates, exit codes - is the real code.
(The run loop lives in session.Session and runner.Runner; these tests only go through the CLI
and the seam.)
"""

from __future__ import annotations

import json
import math
import os
import signal

import pytest
import torch
from typer.testing import CliRunner

from fakes import cold_detail

import bwbench.device
import bwbench.discovery
import bwbench.runner
import bwbench.telemetry
import bwbench.timing
from bwbench.cli import app
from bwbench.device import DeviceInfo
from bwbench.results import Record, ResultsWriter, RunDocument, read_document
from bwbench.stats import summarize
from bwbench.suite import Suite, Traffic
from bwbench.timing import CopyCeiling, Measurement, TimerChoice

GPU_NAME = "Fake GPU [/] 80GB"
"""A GPU name with rich markup in it: printing it unescaped raises a MarkupError."""
PEAK_GBPS = 187.5
COPY_GBPS = 125.0
N = 1 << 16
"""Elements of the fake suite's case: 256 KiB of float32 read and 256 KiB written."""

TIMES_US = {"good": 5.0, "slow": 10.0, "wrong": 5.0, "ctrl_c": 5.0, "sigterm": 5.0}
"""Median microseconds each implementation reports to the fake timer."""


class FakeTimer:
    """Stands in for bwbench.timing.Timer: calls the function once (so it really runs) and
    reports 20 samples around the time the implementation declared (last_us)."""

    last_us: float | None = None
    measured = 0

    def __init__(self, device, l2_bytes, sm_clock_mhz, policy=None):
        self.device = device
        self.choice = TimerChoice("events", "events", "asked for")

    def measure(self, fn, mode: str = "cold") -> Measurement:
        FakeTimer.last_us = None
        fn()
        FakeTimer.measured += 1
        us = FakeTimer.last_us
        samples = [us * (1 + 0.0001 * (k - 10)) for k in range(21)]
        return Measurement(mode, samples, summarize(samples, True), detail=cold_detail(mode))


def fake_copy_ceiling(timer, nbytes, mode="cold", **_kwargs) -> CopyCeiling:
    nbytes = max(16, int(nbytes) // 16 * 16)
    median = 2 * nbytes / (COPY_GBPS * 1e9) * 1e6
    samples = [median] * 21
    FakeTimer.copies = getattr(FakeTimer, "copies", 0) + 1
    return CopyCeiling(nbytes, COPY_GBPS, "memcpy", {"memcpy": COPY_GBPS},
                       Measurement(mode, samples, summarize(samples, True), detail=cold_detail(mode)))


class FakeTelemetry:
    def __init__(self, *args):
        pass

    def sample(self):
        return {}


def fake_info(device) -> DeviceInfo:
    return DeviceInfo(gpu_index=0, gpu_name=GPU_NAME, gpu_uuid="GPU-fake", compute_capability="9.0", sm_count=132,
                      l2_bytes=50 << 20, memory_bytes=80 << 30, sm_clock_max_mhz=1980.0, driver_version="fake",
                      cuda_version="fake", torch_version=torch.__version__, cupy_version=None, cudnn_version=None,
                      peak_gbps=PEAK_GBPS)


def make_suite() -> Suite:
    """y = 2x over N float32 elements; 'wrong' computes 3x; 'ctrl_c' is interrupted while timed, and
    'sigterm' sends its own process SIGTERM there (as `timeout` or a batch system's time limit does)."""
    suite = Suite("scale", "y = 2 x", axes={"n": [N]}, dtypes=["float32"], domains={"n": lambda v: None if v > 0 else "must be positive"})

    @suite.inputs
    def inputs(case, gen):
        return {"x": torch.randn(case.n, generator=gen, dtype=torch.float32) + 3.0}

    @suite.reference
    def reference(x):
        return x.double() * 2

    @suite.traffic
    def traffic(case):
        return Traffic(read=case.n * case.itemsize, write=case.n * case.itemsize)

    def timed(name, factor):
        def build(case):
            def run(x):
                FakeTimer.last_us = TIMES_US[name]
                if name == "ctrl_c" and FakeTimer.measured >= 1:
                    raise KeyboardInterrupt
                if name == "sigterm" and FakeTimer.measured >= 1:  # unhandled, it would end pytest too
                    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, "SIGTERM would end the run"
                    os.kill(os.getpid(), signal.SIGTERM)
                return x * factor
            return run
        return build

    suite.impl("good", kind="torch")(timed("good", 2))
    suite.impl("slow", kind="naive")(timed("slow", 2))
    suite.impl("wrong", kind="cuda")(timed("wrong", 3))
    suite.impl("ctrl_c", kind="compiled")(timed("ctrl_c", 2))
    suite.impl("sigterm", kind="compiled")(timed("sigterm", 2))
    suite.impl("picky", kind="cuda", unsupported=lambda case: case.cols > 0)(timed("good", 2))  # no cols axis
    return suite


@pytest.fixture
def fake_gpu(monkeypatch):
    """The device seam faked; returns counters of the GPU work done."""
    calls = {"require_cuda": 0}

    def require_cuda(index=0):
        calls["require_cuda"] += 1
        return torch.device("cpu")

    suite = make_suite()
    real_resolve = bwbench.discovery.resolve
    monkeypatch.setattr(bwbench.discovery, "resolve", lambda name, *a: [suite] if name == "scale" else real_resolve(name, *a))
    monkeypatch.setattr(bwbench.device, "require_cuda", require_cuda)
    monkeypatch.setattr(bwbench.device, "query_device", fake_info)
    monkeypatch.setattr(bwbench.timing, "make_timer", lambda kind, *args: FakeTimer(*args))
    monkeypatch.setattr(bwbench.timing, "measure_copy_ceiling", fake_copy_ceiling)
    monkeypatch.setattr(bwbench.runner, "measure_copy_ceiling", fake_copy_ceiling)
    monkeypatch.setattr(bwbench.telemetry, "Telemetry", FakeTelemetry)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (16 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(bwbench.runner.gc, "collect", lambda *a: 0)
    FakeTimer.measured = 0
    FakeTimer.copies = 0
    return calls


def run(tmp_path, *args):
    size = [] if "--copy-size" in args else ["--copy-size", "1MB"]  # an option given twice is refused
    result = CliRunner().invoke(app, ["run", "scale", "--out", str(tmp_path), "--no-report", *size, *args])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def only_results(tmp_path, pattern="*.json"):
    found = sorted(tmp_path.glob(pattern))
    assert len(found) == 1, found
    return found[0]


# --- exit codes --------------------------------------------------------------------------------
def test_a_clean_run_exits_0_and_writes_a_complete_file(fake_gpu, tmp_path):
    result = run(tmp_path, "--impl", "good")
    assert result.exit_code == 0, result.output
    doc = read_document(only_results(tmp_path))
    assert doc.complete and not doc.interrupted
    assert [r.impl for r in doc.records] == ["copy", "good"]
    assert not list(tmp_path.glob("*.jsonl")), "the stream is exported and removed when the run ends"
    assert GPU_NAME in " ".join(result.output.split()), "markup in a GPU name prints as written"


def test_a_failed_check_exits_1_and_is_recorded_failed(fake_gpu, tmp_path):
    result = run(tmp_path, "--impl", "good,wrong")
    assert result.exit_code == 1, result.output
    doc = read_document(only_results(tmp_path))
    wrong = next(r for r in doc.records if r.impl == "wrong")
    assert wrong.status == "failed" and wrong.gbps is None


def test_an_unsupported_function_that_raises_fails_its_implementation_not_the_run(fake_gpu, tmp_path):
    result = run(tmp_path, "--impl", "good,picky")
    assert result.exit_code == 1, result.output
    doc = read_document(only_results(tmp_path))
    picky = next(r for r in doc.records if r.impl == "picky")
    assert picky.status == "failed" and "unsupported() raised" in picky.reason
    assert next(r for r in doc.records if r.impl == "good").status == "ok" and doc.complete


def test_interrupted_run_exits_130_and_keeps_what_it_measured(fake_gpu, tmp_path):
    result = run(tmp_path, "--impl", "good,ctrl_c")
    assert result.exit_code == 130, result.output
    doc = read_document(only_results(tmp_path))
    assert doc.interrupted and not doc.complete
    assert [r.impl for r in doc.records] == ["copy", "good"], "the records measured before Ctrl-C are kept"


def test_sigterm_ends_a_run_as_ctrl_c_does_and_is_then_left_as_it_was(fake_gpu, tmp_path):
    """`timeout`, Slurm and CI runners stop a job with SIGTERM: NAME.json, the CSV and the summary
    still get every record measured before it, and afterwards SIGTERM's handling is back as it was."""
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    result = run(tmp_path, "--impl", "good,sigterm")
    assert result.exit_code == 130, result.output
    doc = read_document(only_results(tmp_path))
    assert doc.interrupted and not doc.complete
    assert [r.impl for r in doc.records] == ["copy", "good"]
    assert only_results(tmp_path, "*.csv") and not list(tmp_path.glob("*.jsonl"))
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_bad_axis_value_exits_2_before_any_gpu_work(fake_gpu, tmp_path):
    result = run(tmp_path, "--n", "0")
    assert result.exit_code == 2 and "--n 0: must be positive" in result.output
    assert fake_gpu["require_cuda"] == 0 and FakeTimer.copies == 0
    assert not list(tmp_path.iterdir())


# --- the numbers ---------------------------------------------------------------------------------
def test_bytes_to_gbps_to_pct_copy_to_pct_peak_on_a_known_record(fake_gpu, tmp_path):
    assert run(tmp_path, "--impl", "good").exit_code == 0
    good = next(r for r in read_document(only_results(tmp_path)).records if r.impl == "good")
    assert (good.bytes_read, good.bytes_written, good.bytes_total) == (4 * N, 4 * N, 8 * N)
    gbps = 8 * N / (TIMES_US["good"] * 1e-6) / 1e9  # 104.86 GB/s: 512 KiB in 5 us
    assert good.gbps == pytest.approx(gbps, rel=1e-9)
    assert good.copy_gbps == pytest.approx(COPY_GBPS)
    assert good.pct_copy == pytest.approx(100 * gbps / COPY_GBPS, rel=1e-9)  # 83.89%
    assert good.pct_peak == pytest.approx(100 * gbps / PEAK_GBPS, rel=1e-9)  # 55.92%
    assert (good.pct_copy, good.pct_peak) == (pytest.approx(83.886, abs=1e-3), pytest.approx(55.924, abs=1e-3))
    assert good.stats["median_us"] == pytest.approx(TIMES_US["good"])


# --- gates ---------------------------------------------------------------------------------------
def baseline_file(tmp_path, gbps: float, gpu: str = GPU_NAME, complete: bool = True, name="base.json",
                  charged: bool = True):
    samples = [8 * N / (gbps * 1e9) * 1e6 * (1 + 0.0001 * (k - 10)) for k in range(21)]
    record = Record(suite="scale", case=f"n={N}", params={"n": N}, dtype="float32", impl="good", kind="torch",
                    status="ok", bytes_read=4 * N, bytes_written=4 * N, bytes_total=8 * N, timing="cold",
                    stats=summarize(samples, True).to_dict(), samples_us=samples, gbps=gbps, timer="events",
                    timer_detail={"writeback_us": 0.0} if charged else None)
    doc = RunDocument(environment={"gpu_name": gpu}, options={}, suites={}, records=[record])
    folder = tmp_path / "baselines"
    writer = ResultsWriter(folder / name, doc)
    writer.finish(interrupted=not complete)
    return folder / name


def current_gbps():
    return 8 * N / (TIMES_US["good"] * 1e-6) / 1e9


def test_run_baseline_gate_fails_a_real_regression_with_exit_1(fake_gpu, tmp_path):
    base = baseline_file(tmp_path, current_gbps() * 1.5)  # the baseline was 50% faster
    result = run(tmp_path, "--impl", "good", "--baseline", str(base))
    assert result.exit_code == 1, result.output
    assert "slower" in result.output


def test_run_baseline_gate_passes_a_faster_current_run(fake_gpu, tmp_path):
    base = baseline_file(tmp_path, current_gbps() / 1.5)  # the baseline was slower: current is faster
    result = run(tmp_path, "--impl", "good", "--baseline", str(base))
    assert result.exit_code == 0, result.output
    assert "faster" in result.output


def test_run_baseline_from_another_gpu_exits_2_before_the_sweep(fake_gpu, tmp_path):
    base = baseline_file(tmp_path, current_gbps(), gpu="NVIDIA A100")
    result = run(tmp_path, "--impl", "good", "--baseline", str(base))
    assert result.exit_code == 2 and "A100" in result.output
    assert FakeTimer.copies == 0 and FakeTimer.measured == 0, "nothing was timed"
    assert not list(tmp_path.glob("*.json*"))


@pytest.mark.parametrize("timer", ["events", "auto"])
def test_run_baseline_timed_otherwise_exits_2_before_the_sweep(fake_gpu, tmp_path, timer):
    """A baseline without the write-back charge would make every small case look slower: refused,
    before any sampling (with --timer auto, once the clock is chosen), and no results file is made."""
    base = baseline_file(tmp_path, current_gbps(), charged=False)
    result = run(tmp_path, "--impl", "good", "--baseline", str(base), "--timer", timer)
    assert result.exit_code == 2, result.output
    assert "no write-back charge" in result.output and "not comparable" in result.output
    assert FakeTimer.measured == 0
    if timer == "events":
        assert FakeTimer.copies == 0, "refused before the device copy was measured"
    assert not list(tmp_path.glob("*.json*"))


def test_run_baseline_interrupted_is_refused_unless_partial_is_allowed(fake_gpu, tmp_path):
    base = baseline_file(tmp_path, current_gbps(), complete=False)
    result = run(tmp_path, "--impl", "good", "--baseline", str(base))
    assert result.exit_code == 2 and "interrupted" in result.output and fake_gpu["require_cuda"] == 0
    result = run(tmp_path, "--impl", "good", "--baseline", str(base), "--allow-partial")
    assert result.exit_code == 0, result.output


def test_run_bad_max_drop_exits_2_before_the_sweep(fake_gpu, tmp_path):
    base = baseline_file(tmp_path, current_gbps())
    for bad in ("150%", "0", "nan", "-5%"):
        result = run(tmp_path, "--impl", "good", "--baseline", str(base), "--max-drop", bad)
        assert result.exit_code == 2, (bad, result.output)
    assert fake_gpu["require_cuda"] == 0


@pytest.mark.parametrize("fraction,code", [("0.8", 0), ("0.85", 1)])
def test_min_copy_fraction_gate(fake_gpu, tmp_path, fraction, code):
    # good runs at 83.9% of copy
    result = run(tmp_path, "--impl", "good", "--min-copy-fraction", fraction)
    assert result.exit_code == code, result.output


def test_min_copy_fraction_counts_a_failed_record_as_below_the_floor(fake_gpu, tmp_path):
    result = run(tmp_path, "--impl", "good,wrong", "--min-copy-fraction", "0.5")
    assert result.exit_code == 1
    assert "below floor" in result.output and "wrong" in result.output


def test_the_baseline_file_is_never_replaced_even_with_force(fake_gpu, tmp_path):
    base = baseline_file(tmp_path, current_gbps(), name="base.json")
    before = base.read_bytes()
    result = CliRunner().invoke(app, ["run", "scale", "--impl", "good", "--out", str(base.parent), "--name", "base",
                                      "--force", "--baseline", str(base), "--no-report", "--copy-size", "1MB"])
    assert result.exit_code == 2, result.output
    assert base.read_bytes() == before and fake_gpu["require_cuda"] == 0


def test_existing_name_needs_force_and_two_default_runs_never_share_a_file(fake_gpu, tmp_path):
    assert run(tmp_path, "--impl", "good", "--name", "mine").exit_code == 0
    first = (tmp_path / "mine.json").read_bytes()
    again = run(tmp_path, "--impl", "good", "--name", "mine")
    assert again.exit_code == 2 and "--force" in again.output
    assert (tmp_path / "mine.json").read_bytes() == first
    assert run(tmp_path, "--impl", "good", "--name", "mine", "--force").exit_code == 0
    assert json.loads((tmp_path / "mine.json").read_text())["complete"] is True
    for _ in range(3):
        assert run(tmp_path, "--impl", "good").exit_code == 0
    assert len([p for p in tmp_path.glob("scale-*.json")]) == 3, "three default runs in one second: three files"


def test_results_file_has_no_nan_tokens_when_a_number_is_not_finite(fake_gpu, tmp_path, monkeypatch):
    monkeypatch.setitem(TIMES_US, "good", 1e-300)  # a timer gone wrong: infinite GB/s
    result = run(tmp_path, "--impl", "good")
    text = only_results(tmp_path).read_text()
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} in the results file"))
    good = next(r for r in read_document(only_results(tmp_path)).records if r.impl == "good")
    assert math.isinf(good.gbps), "the value comes back as written, from the note beside the null"
    assert result.exit_code in (0, 1)


@pytest.mark.parametrize("args, says", [
    (["--copy-size", "0"], "as a positive size"),
    (["--copy-size", "-4GB"], "as a size"),
    (["--store", "{tmp}"], "is not a results store"),
    (["--store", "{tmp}/notes.txt"], "is not a results store"),
])
def test_copy_size_and_store_are_checked_before_any_gpu_work(fake_gpu, tmp_path, args, says):
    (tmp_path / "notes.txt").write_text("mine")
    result = run(tmp_path, "--impl", "good", *[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2 and says in " ".join(result.output.split()), result.output
    assert fake_gpu["require_cuda"] == 0 and FakeTimer.copies == 0
    assert (tmp_path / "notes.txt").read_text() == "mine"
