"""The harness on a real GPU: timer against plain CUDA events, checks that catch wrong kernels,
every softmax implementation at odd shapes, and whole runs through the CLI."""

import importlib.util
import json

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def timer(device, facts):
    from bwbench.stats import SamplingPolicy
    from bwbench.timing import Timer

    return Timer(device, facts.l2_bytes, facts.sm_clock_max_mhz, SamplingPolicy(max_seconds=0.3))


def test_device_facts_and_nvml_peak(facts):
    assert facts.sm_count > 0 and facts.l2_bytes > 0 and facts.memory_bytes > 0
    assert facts.peak_gbps is not None, facts.peak_note
    assert 500 < facts.peak_gbps < 10_000


def test_copy_bandwidth_agrees_with_a_plain_event_timed_torch_copy(device, timer, facts):
    from bwbench.timing import measure_copy_bandwidth

    nbytes = 4_000_000_000
    ours, _ = measure_copy_bandwidth(timer, nbytes)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 256)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        dst.copy_(src)
    end.record()
    end.synchronize()
    plain = 2 * nbytes * reps / (start.elapsed_time(end) * 1e-3) / 1e9
    assert abs(ours - plain) / plain < 0.03, f"bwbench {ours:.0f} GB/s vs plain torch copy {plain:.0f} GB/s"
    assert ours < facts.peak_gbps


def test_hot_timing_replays_a_graph(timer, device):
    x = torch.randn(1024, 256, device=device, dtype=torch.float16)
    m = timer.measure(lambda: torch.softmax(x, -1), "hot")
    assert m.mode == "hot" and m.launches_per_sample > 1 and m.stats.median_us > 0


def _demo_suite():
    from bwbench.suite import Suite, Traffic

    suite = Suite("demo", "x * 2", axes={"n": [1 << 20, 1000003]}, dtypes=["float32"])
    suite.inputs(lambda case, gen: {"x": torch.randn(case.n, generator=gen, device=gen.device)})
    suite.reference(lambda x: x.double() * 2)
    suite.traffic(lambda case: Traffic(4 * case.n, 4 * case.n))

    @suite.impl("right", kind="torch")
    def right(case):
        return lambda x: x * 2

    @suite.impl("wrong", kind="cuda")
    def wrong(case):
        return lambda x: x * 2.01

    @suite.impl("wrong_baseline", kind="naive")
    def wrong_baseline(case):
        return lambda x: x * 2.01

    @suite.impl("half_written", kind="cuda")
    def half_written(case):
        def run(x):
            y = torch.empty_like(x)  # the poisoned block comes back: unwritten elements stay NaN
            y[: x.numel() // 2] = x[: x.numel() // 2] * 2
            return y
        return run

    @suite.impl("broken_build", kind="compiled")
    def broken_build(case):
        raise RuntimeError("compiler says no")

    return suite


def _run_suite(suite, tmp_path, device, timer, facts):
    from bwbench.results import ResultsWriter, RunDocument
    from bwbench.runner import Runner, RunSettings

    doc = RunDocument(environment=facts.to_dict(), options={}, suites={suite.name: suite.describe()})
    writer = ResultsWriter(tmp_path / "demo.json", doc)
    runner = Runner(device, timer, writer, RunSettings(), facts.peak_gbps)
    for case in suite.cases():
        runner.run_case(suite, case, list(suite.implementations.values()))
    writer.finish()
    return doc


def test_wrong_and_unwritten_outputs_fail_and_are_never_timed(tmp_path, device, timer, facts):
    doc = _run_suite(_demo_suite(), tmp_path, device, timer, facts)
    by = {(r.case, r.impl): r for r in doc.records}
    for case in ("n=1048576", "n=1000003"):
        assert by[(case, "right")].status == "ok" and by[(case, "right")].gbps > 0
        assert by[(case, "copy")].status == "ok"
        for bad in ("wrong", "half_written", "broken_build"):
            rec = by[(case, bad)]
            assert rec.status == "failed", (bad, rec)
            assert rec.stats is None and rec.gbps is None
        assert "compiler says no" in by[(case, "broken_build")].reason
        inexact = by[(case, "wrong_baseline")]  # a baseline outside tolerance: timed, marked, not failed
        assert inexact.status == "ok" and inexact.inexact and inexact.gbps > 0 and inexact.role == "baseline"
        assert inexact.check["max_rel_err"] == pytest.approx(0.005, rel=0.01)
        assert "nan" in by[(case, "half_written")].reason.lower()
    assert all(r.pct_peak is None or r.pct_peak <= 100 for r in doc.records)


ODD_COLS = [1, 33, 1000, 1024, 4097]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("rows", [1, 7, 256])
def test_every_softmax_implementation_matches_the_reference_at_odd_shapes(dtype, rows, device):
    from bwbench.check import compare, poison_allocator
    from bwbench.discovery import get_suite
    from bwbench.suite import Skip

    suite = get_suite("softmax")
    generator = torch.Generator(device=device)
    for case in suite.cases([dtype], {"rows": [rows], "cols": ODD_COLS}):
        generator.manual_seed(hash(case.id) % 2**31)
        inputs = suite.make_inputs(case, generator)
        reference = suite.compute_reference(**inputs)
        for impl in suite.implementations.values():
            try:
                fn = impl.build(case)
            except Skip:
                continue
            poison_allocator(reference, case.torch_dtype)
            check = compare(fn(**inputs), reference, suite.tolerance(dtype))
            assert check.passed, f"{impl.name} {case}: {check.message}"


def test_cli_quick_run_writes_results_csv_and_report(tmp_path):
    from typer.testing import CliRunner

    from bwbench.cli import app

    result = CliRunner().invoke(app, ["run", "softmax", "--quick", "--max-time", "0.05", "--copy-size", "256MB",
                                      "-o", str(tmp_path), "--name", "quick"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "quick.json").read_text())
    assert data["complete"] and data["environment"]["copy_gbps"] > 0
    statuses = {(r["impl"], r["status"]) for r in data["records"]}
    assert ("torch", "ok") in statuses and ("copy", "ok") in statuses
    assert not any(r["status"] == "failed" for r in data["records"])
    assert all(r["pct_peak"] is None or r["pct_peak"] <= 100 for r in data["records"])
    assert (tmp_path / "quick.csv").exists()
    if importlib.util.find_spec("plotly") is not None:
        assert (tmp_path / "quick.html").exists()
    else:  # the results stand; the page is skipped with a message, not a traceback
        assert "no HTML report" in result.output and not (tmp_path / "quick.html").exists()


def test_interrupted_run_keeps_what_it_measured(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from bwbench.cli import app
    from bwbench.runner import Runner

    original, calls = Runner.run_case, []

    def interrupt_on_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Runner, "run_case", interrupt_on_second)
    result = CliRunner().invoke(app, ["run", "softmax", "--quick", "--impl", "torch", "--max-time", "0.05",
                                      "--copy-size", "256MB", "-o", str(tmp_path), "--name", "cut"])
    assert result.exit_code == 130, result.output
    data = json.loads((tmp_path / "cut.json").read_text())
    assert data["interrupted"] and len(data["records"]) == 2
    assert "interrupted" in result.output


def test_every_suite_makes_its_inputs_on_the_gpu_from_its_generator(device):
    """The inputs check (runner.make_case_inputs) passes every shipped suite: its smallest quick case
    on the run's device, nothing drawn from torch's global random state."""
    from bwbench.discovery import registry
    from bwbench.runner import make_case_inputs
    from bwbench.suite import Suite

    for suite in registry().values():
        if not isinstance(suite, Suite):
            continue
        cases = suite.cases(None, {}, quick=True)
        case = min(cases, key=lambda c: suite.compute_traffic(c).read)
        inputs = make_case_inputs(suite, case, device, 11)
        assert inputs, suite.name
        del inputs
        torch.cuda.empty_cache()
