"""The CI gate on recorded results: real drops flagged, noise not, exit codes as documented."""

import copy
import json
import random

import pytest
from typer.testing import CliRunner

from bwbench.cli import app
from bwbench.gate import (GateInputError, compare_runs, copy_fraction_violations, has_regression, judge,
                          mann_whitney_p, markdown, parse_fraction)
from bwbench.results import Record, ResultsWriter, RunDocument, read_document
from bwbench.stats import disturbance, summarize
from synthetic_runs import softmax_run


def timed(impl, samples, case="rows=4096,cols=1024", status="ok", pct_copy=95.0):
    samples = sorted(samples)
    n = len(samples)
    median = samples[n // 2]
    stats = {"count": n, "min_us": samples[0], "p10_us": samples[n // 10], "median_us": median,
             "p90_us": samples[(9 * n) // 10], "max_us": samples[-1]}
    return Record(suite="softmax", case=case, params={}, dtype="float16", impl=impl, kind="torch", status=status,
                  bytes_total=10**9, stats=stats, samples_us=list(samples), gbps=1e9 / (median * 1e-6) / 1e9,
                  pct_copy=pct_copy)


def noisy(center, n=200, spread=0.01, seed=0):
    rng = random.Random(seed)
    return [center * (1 + rng.gauss(0, spread)) for _ in range(n)]


def test_rank_test_separates_shifted_samples_and_not_equal_ones():
    assert mann_whitney_p(noisy(100, seed=1), noisy(100, seed=2)) > 0.01
    assert mann_whitney_p(noisy(100, seed=1), noisy(103, seed=2)) < 1e-6
    assert mann_whitney_p([1.0] * 20, [1.0] * 20) == 1.0


@pytest.mark.parametrize("slowdown,expected", [(1.0, "same"), (1.02, "same"), (1 / 0.95, "slower"),
                                               (1.10, "slower"), (0.90, "faster")])
def test_verdicts_on_clean_samples(slowdown, expected):
    samples = noisy(100, seed=1)
    base = timed("torch", samples)
    cur = timed("torch", [s * slowdown for s in samples])
    assert judge(base, cur, 0.05).verdict == expected


def test_a_drop_within_the_noise_is_ambiguous_not_a_regression():
    spread = [80 + 40 * i / 11 for i in range(12)]
    base = timed("torch", spread)
    cur = timed("torch", [s * 1.07 for s in spread])
    verdict = judge(base, cur, 0.05)
    assert verdict.change < -0.05 and verdict.verdict == "ambiguous"


def test_few_samples_use_disjoint_p10_p90_intervals():
    base = timed("torch", [100, 101, 102, 100, 101])
    assert judge(base, timed("torch", [110, 111, 112, 110, 111]), 0.05).verdict == "slower"
    assert judge(base, timed("torch", [100, 107, 109, 112, 111]), 0.05).verdict == "ambiguous"


def test_missing_new_and_failed():
    base = timed("torch", noisy(100))
    assert judge(base, None, 0.05).verdict == "missing"
    assert judge(None, base, 0.05).verdict == "new"
    failed = timed("torch", noisy(100), status="failed")
    failed.gbps = None
    assert judge(base, failed, 0.05).verdict == "failed"
    assert has_regression([judge(base, failed, 0.05)])
    assert judge(failed, failed, 0.05).verdict == "still failing"
    assert not has_regression([judge(failed, failed, 0.05)])


def test_a_wrong_result_new_to_the_current_run_is_failed_not_new():
    """README and `compare --help` once said `failed` meant wrong now, right before; a record the
    baseline lacks or skipped that fails its check must still fail the gate, so it is `failed` too."""
    failed = timed("torch", noisy(100), status="failed")
    failed.gbps, failed.reason = None, "wrong result: 3 elements off"
    skipped = timed("torch", noisy(100), status="skipped")
    skipped.gbps = None
    for base in (None, skipped):
        verdict = judge(base, failed, 0.05)
        assert verdict.verdict == "failed" and verdict.note == failed.reason
        assert has_regression([verdict])


def doc(records, gpu="NVIDIA H200"):
    return RunDocument(environment={"gpu_name": gpu}, options={}, suites={}, records=records)


def test_different_gpus_are_refused_unless_asked():
    a, b = doc([timed("torch", noisy(100))]), doc([timed("torch", noisy(100))], gpu="NVIDIA H100 80GB HBM3")
    with pytest.raises(GateInputError, match="--ignore-gpu"):
        compare_runs(a, b, 0.05)
    assert compare_runs(a, b, 0.05, ignore_gpu=True)[0].verdict == "same"
    with pytest.raises(GateInputError, match="in common"):
        compare_runs(a, doc([timed("naive", noisy(100))]), 0.05)


def test_copy_fraction_floor():
    d = doc([timed("optimized", noisy(100), pct_copy=93.0), timed("optimized", noisy(100), "rows=1,cols=1", pct_copy=85.0),
             timed("copy", noisy(100), pct_copy=100.0)])
    violations = copy_fraction_violations(d, 0.9)
    assert [(v.case, v.pct_copy) for v in violations] == [("rows=1,cols=1", 85.0)]
    assert copy_fraction_violations(d, 0.8) == []


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.05", 0.05), ("5", 0.05), ("12.5%", 0.125), ("1", 0.01),
                                        ("1.5", 0.015), ("0.9%", 0.009), ("90%", 0.9), ("0.4", 0.4)])
def test_fractions(text, value):
    assert parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["0.5", "0.9", " 0.99 "])
def test_a_bare_number_that_could_be_a_fraction_or_a_percentage_must_say_which(text):
    with pytest.raises(GateInputError, match="write the %"):
        parse_fraction(text)


def test_markdown_escapes_results_text():
    base = timed("a|b<script>", noisy(100))
    text = markdown([judge(base, base, 0.05)], 0.05, show_all=True)
    assert "a\\|b&lt;script>" in text and "no regression" in text
    assert "a\\|b" not in markdown([judge(base, base, 0.05)], 0.05), "unchanged records only with --all"


def disturbed(impl, samples):
    """A record as the runner writes it for a disturbed sample set: its warning in the reason."""
    record = timed(impl, samples)
    record.reason = disturbance(summarize(samples, converged=False))
    assert record.reason is not None
    return record


# Most samples 1/0.7x slower than a fast p10: the median says 30% less bandwidth, the p10 does not.
SLOWED_30 = noisy(100, n=40, seed=3) + noisy(100 / 0.7, n=160, seed=4)


def test_a_drop_in_disturbed_current_samples_is_ambiguous_not_a_regression(tmp_path):
    base = timed("torch", noisy(100, seed=1))
    clean = judge(base, timed("torch", SLOWED_30), 0.05)
    assert clean.verdict == "slower" and clean.change == pytest.approx(-0.3, abs=0.02) and clean.note == ""
    verdict = judge(base, disturbed("torch", SLOWED_30), 0.05)
    assert verdict.verdict == "ambiguous" and verdict.change == clean.change
    assert verdict.note.startswith("current run's samples disturbed (median 1.4x p10)")
    assert "baseline" not in verdict.note
    # Through the results files and the command: exit 0, the note in the JSON verdicts.
    comparisons = compare_runs(doc([base]), doc([disturbed("torch", SLOWED_30)]), 0.05)
    assert [c.verdict for c in comparisons] == ["ambiguous"] and not has_regression(comparisons)
    for name, records in (("base", [base]), ("cur", [disturbed("torch", SLOWED_30)])):
        ResultsWriter(tmp_path / f"{name}.json", doc(records)).finish()
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"),
                                      "--json", str(tmp_path / "verdicts.json")])
    assert result.exit_code == 0, result.output
    verdicts = json.loads((tmp_path / "verdicts.json").read_text())
    assert verdicts["regression"] is False
    assert verdicts["comparisons"][0]["note"].startswith("current run's samples disturbed")
    # The CI job summary says why too.
    summary = markdown(comparisons, 0.05)
    assert "| ambiguous |" in summary and "current run's samples disturbed" in summary


def test_a_disturbed_baseline_is_ambiguous_too_and_same_keeps_its_note():
    steady = timed("torch", noisy(100, seed=1))
    # The baseline's median was slowed by the disturbance: the steady run looks 43% faster.
    faster = judge(disturbed("torch", SLOWED_30), steady, 0.05)
    assert faster.change > 0.3 and faster.verdict == "ambiguous"
    assert faster.note.startswith("baseline run's samples disturbed (median 1.4x p10)")
    assert "current" not in faster.note
    assert judge(timed("torch", SLOWED_30), steady, 0.05).verdict == "faster"
    both = judge(disturbed("torch", SLOWED_30), disturbed("torch", SLOWED_30), 0.05)
    assert both.verdict == "same" and "baseline run's" in both.note and "current run's" in both.note
    failed = timed("torch", noisy(100), status="failed")
    failed.gbps = None
    assert judge(disturbed("torch", SLOWED_30), failed, 0.05).verdict == "failed"


# --- on two runs of the same code: the default softmax sweep, differing by run-to-run noise only ---

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two runs as results files, written the way `bwbench run` writes them."""
    folder = tmp_path_factory.mktemp("runs")
    paths = folder / "softmax-run1.json", folder / "softmax-run2.json"
    for run, path in enumerate(paths, 1):
        ResultsWriter(path, softmax_run(run)).finish()
    return paths


def inject_drop(document: RunDocument, impl: str, case: str, drop: float, baseline: RunDocument) -> RunDocument:
    """The rerun with one record slowed so that its median bandwidth is `drop` below the baseline's."""
    slowed = copy.deepcopy(document)
    base_gbps = next(r.gbps for r in baseline.records if r.impl == impl and r.case == case)
    for r in slowed.records:
        if r.impl == impl and r.case == case:
            scale = r.gbps / (base_gbps * (1 - drop))
            r.samples_us = [s * scale for s in r.samples_us]
            r.stats = {k: (v * scale if k.endswith("_us") else v) for k, v in r.stats.items()}
            r.gbps /= scale
            return slowed
    raise AssertionError(f"no record {impl} {case}")


def test_a_rerun_within_its_noise_is_not_flagged(runs):
    first, second = runs
    comparisons = compare_runs(read_document(first), read_document(second), 0.05)
    assert len(comparisons) >= 40
    assert max(abs(c.change) for c in comparisons) > 0.01  # the runs really differ, by their noise
    assert not has_regression(comparisons), [c for c in comparisons if c.verdict in ("slower", "failed")]


@pytest.mark.parametrize("impl,case", [("torch", "rows=49152,cols=4096"), ("naive", "rows=49152,cols=32768"),
                                       ("cudnn", "rows=49152,cols=256")])
def test_a_5_percent_drop_injected_into_one_record_is_flagged(runs, impl, case):
    first, second = runs
    baseline = read_document(first)
    comparisons = compare_runs(baseline, inject_drop(read_document(second), impl, case, 0.05, baseline), 0.05)
    slower = [(c.impl, c.case) for c in comparisons if c.verdict == "slower"]
    assert slower == [(impl, case)]


def test_compare_command_exit_codes_and_outputs(runs, tmp_path):
    first, second = runs
    runner = CliRunner()
    same = runner.invoke(app, ["compare", str(first), str(second), "--markdown", str(tmp_path / "s.md"),
                               "--json", str(tmp_path / "s.json")])
    assert same.exit_code == 0, same.output
    assert "no regression" in (tmp_path / "s.md").read_text()
    assert json.loads((tmp_path / "s.json").read_text())["regression"] is False

    slowed = inject_drop(read_document(second), "torch", "rows=49152,cols=4096", 0.05, read_document(first))
    ResultsWriter(tmp_path / "slow.json", slowed).finish()
    worse = runner.invoke(app, ["compare", str(first), str(tmp_path / "slow.json"), "--markdown", "-"])
    assert worse.exit_code == 1
    assert worse.stdout.startswith("**bwbench compare**: ❌ regression: 1 slower, 43 same of 44 records")
    assert "**softmax**" in worse.stdout and "| verdict | rows | cols | dtype | impl |" in worse.stdout
    assert "| slower | 49152 | 4096 | float16 | torch |" in worse.stdout
    assert "┃" not in worse.stdout and "┃" in worse.stderr, "the table goes to stderr when stdout carries markdown"
    machine = runner.invoke(app, ["compare", str(first), str(tmp_path / "slow.json"), "--json", "-"])
    verdicts = json.loads(machine.stdout)
    assert verdicts["regression"] is True and verdicts["counts"] == {"slower": 1, "same": 43}
    assert verdicts["summary"].startswith("regression: 1 slower")
    # Judging only some implementations: a drop in the torch baseline does not fail the gate.
    ours = runner.invoke(app, ["compare", str(first), str(tmp_path / "slow.json"), "--impl", "naive,compiled"])
    assert ours.exit_code == 0, ours.output
    unknown = runner.invoke(app, ["compare", str(first), str(second), "--impl", "fastest"])
    assert unknown.exit_code == 2 and "not in these runs" in unknown.output

    other_gpu = read_document(second)
    other_gpu.environment["gpu_name"] = "NVIDIA H100 80GB HBM3"
    ResultsWriter(tmp_path / "h100.json", other_gpu).finish()
    refused = runner.invoke(app, ["compare", str(first), str(tmp_path / "h100.json")])
    assert refused.exit_code == 2 and "--ignore-gpu" in refused.output
    assert runner.invoke(app, ["compare", str(first), str(tmp_path / "nope.json")]).exit_code == 2
    assert runner.invoke(app, ["compare", str(first), str(second), "--max-drop", "lots"]).exit_code == 2


def test_min_bytes_leaves_small_records_out_of_the_gate(runs, tmp_path):
    """A drop at cols 32 (6.4 MB moved) fails the gate; with --min-bytes 64MB it is not judged,
    while a drop at cols 4096 (805 MB) still is."""
    first, second = runs
    baseline = read_document(first)
    sizes = {r.case: r.bytes_total for r in baseline.records}
    small, large = "rows=49152,cols=32", "rows=49152,cols=4096"
    assert sizes[small] < 64e6 <= sizes[large]
    slowed_small = inject_drop(read_document(second), "torch", small, 0.10, baseline)
    every = compare_runs(baseline, slowed_small, 0.05)
    kept = compare_runs(baseline, slowed_small, 0.05, min_bytes=64_000_000)
    assert has_regression(every) and not has_regression(kept)
    assert {c.case for c in kept} < {c.case for c in every} and all(c.case != small for c in kept)

    runner = CliRunner()
    ResultsWriter(tmp_path / "small.json", slowed_small).finish()
    assert runner.invoke(app, ["compare", str(first), str(tmp_path / "small.json")]).exit_code == 1
    gated = runner.invoke(app, ["compare", str(first), str(tmp_path / "small.json"), "--min-bytes", "64MB"])
    assert gated.exit_code == 0, gated.output
    slowed_large = inject_drop(read_document(second), "torch", large, 0.10, baseline)
    ResultsWriter(tmp_path / "large.json", slowed_large).finish()
    assert runner.invoke(app, ["compare", str(first), str(tmp_path / "large.json"), "--min-bytes", "64MB"]).exit_code == 1
    bad = runner.invoke(app, ["compare", str(first), str(second), "--min-bytes", "lots"])
    assert bad.exit_code == 2 and "cannot read" in bad.output
    none = runner.invoke(app, ["compare", str(first), str(second), "--min-bytes", "1TB"])
    assert none.exit_code == 2 and "no record" in none.output


def test_suites_the_current_run_left_out_are_one_line_not_a_row_each(tmp_path):
    """A baseline of two suites against a run of one: the other suite's records are all `missing`
    (so JSON and the counts keep them) but are listed as one line; a record missing from a suite
    that did run is still a row of its own."""
    base = [timed("torch", noisy(100), case=f"rows=4096,cols={c}") for c in (256, 1024)]
    other = []
    for c in (32, 64, 128):
        r = timed("naive", noisy(50), case=f"rows=4096,cols={c}")
        r.suite = "layernorm"
        other.append(r)
    ResultsWriter(tmp_path / "base.json", doc(base + other)).finish()
    ResultsWriter(tmp_path / "cur.json", doc([timed("torch", noisy(100), case="rows=4096,cols=256")])).finish()

    runner = CliRunner()
    result = runner.invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"),
                                 "--markdown", str(tmp_path / "c.md"), "--json", str(tmp_path / "c.json")],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "not in the current run: layernorm (3 records)" in result.output
    assert "cols=32" not in result.output and "cols=1024" in result.output  # missing in a suite that ran
    text = (tmp_path / "c.md").read_text()
    assert "not in the current run: layernorm (3 records)" in text and "| layernorm |" not in text
    verdicts = [c["verdict"] for c in json.loads((tmp_path / "c.json").read_text())["comparisons"]]
    assert verdicts.count("missing") == 4
    everything = runner.invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"), "--all"],
                               terminal_width=200)
    assert "cols=32" in everything.output and "not in the current run" not in everything.output


def test_a_failure_in_a_suite_the_baseline_lacks_is_a_row_not_hidden(tmp_path):
    """A baseline of softmax against a run of softmax and layernorm whose layernorm fails its check:
    the summary said `regression: 1 failed` and exit 1, but the failure's row was folded into
    'only in the current run: layernorm' and no screen, markdown or table said which record failed."""
    bad = timed("naive", noisy(50), case="rows=4096,cols=32", status="failed")
    bad.suite, bad.reason = "layernorm", "wrong result: 7 elements off"
    fine = timed("naive", noisy(50), case="rows=4096,cols=64")
    fine.suite = "layernorm"
    ResultsWriter(tmp_path / "base.json", doc([timed("torch", noisy(100))])).finish()
    ResultsWriter(tmp_path / "cur.json", doc([timed("torch", noisy(100)), bad, fine])).finish()

    result = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"),
                                      "--markdown", str(tmp_path / "c.md")], terminal_width=200)
    assert result.exit_code == 1, result.output
    assert "cols=32" in result.output and "7 elements off" in result.output
    assert "cols=32" in (tmp_path / "c.md").read_text()
    assert "cols=64" not in result.output  # the suite's other records stay one line


def test_a_suite_absent_from_the_current_run_is_one_line_even_with_skipped_baseline_records(tmp_path):
    """The H200 reference against a run of relu only: bn_relu, layernorm and rmsnorm came out as
    hundreds of `missing` rows, because each had a record the baseline skipped (cuDNN), noted 'not
    measured in either run' instead of absent, which kept the suite from being summed up in one line."""
    other = [timed("naive", noisy(50), case=f"rows=4096,cols={c}") for c in (32, 64)]
    other.append(Record(suite="layernorm", case="rows=4096,cols=128", params={}, dtype="float16", impl="cudnn",
                        kind="cudnn", status="skipped", reason="cuDNN has no such kernel"))
    for r in other:
        r.suite = "layernorm"
    ResultsWriter(tmp_path / "base.json", doc([timed("torch", noisy(100))] + other)).finish()
    ResultsWriter(tmp_path / "cur.json", doc([timed("torch", noisy(100))])).finish()

    result = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json")],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "not in the current run: layernorm (3 records)" in result.output
    assert "cols=" not in result.output and "not measured" not in result.output


def test_runs_that_share_only_the_copy_ceiling_are_refused_and_say_what_each_holds(tmp_path):
    """A baseline of naive against a run of torch (each with its copy ceiling): the gate said
    'no regression: 11 missing, 11 new' and exit 0, having compared nothing; and the refusal named
    neither run's implementations or dtypes."""
    base, cur = softmax_run(1), softmax_run(2)
    base.records = [r for r in base.records if r.impl in ("copy", "naive")]
    cur.records = [r for r in cur.records if r.impl in ("copy", "torch")]
    ResultsWriter(tmp_path / "base.json", base).finish()
    ResultsWriter(tmp_path / "cur.json", cur).finish()
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json")],
                                terminal_width=300)
    assert result.exit_code == 2, result.output
    assert "in common" in result.output and "naive" in result.output and "torch" in result.output
    assert "float16" in result.output


def test_impl_that_the_baseline_lacks_is_refused_not_passed(tmp_path):
    """`--impl optimized` against a baseline made without it: every record was 'new' and the gate
    passed (exit 0) with nothing judged."""
    base, cur = softmax_run(1), softmax_run(2)
    base.records = [r for r in base.records if r.impl != "torch"]
    ResultsWriter(tmp_path / "base.json", base).finish()
    ResultsWriter(tmp_path / "cur.json", cur).finish()
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"),
                                      "--impl", "torch"], terminal_width=300)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error:") and "torch" in result.output
    both = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"),
                                    "--impl", "torch,naive"], terminal_width=300)
    assert both.exit_code == 0, both.output  # one of them judged in both runs: a real comparison


def test_a_reading_warning_stays_off_stdout_when_stdout_carries_json(tmp_path):
    """Comparing against the stream of a killed run with `--json -`: the warning about its cut-short
    last line was printed first on stdout, so the JSON no longer parsed."""
    ResultsWriter(tmp_path / "base.json", softmax_run(1)).finish()
    cur = softmax_run(2)
    records, cur.records = cur.records, []
    writer = ResultsWriter(tmp_path / "cur.json", cur)
    for r in records[:20]:
        writer.add(r)
    stream = tmp_path / "cur.jsonl"
    stream.write_bytes(stream.read_bytes()[:-50])  # killed mid-line
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(stream), "--json", "-",
                                      "--allow-partial"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True
    assert "cut short" in result.stderr


def test_compare_names_the_two_runs_it_compared(tmp_path):
    """Two runs of one GPU model used to be compared without saying which files, GPUs or commits
    stood on each side: every output now names them."""
    base, cur = softmax_run(1), softmax_run(2)
    base.environment = {**base.environment, "gpu_name": "GPU A", "created": "2026-01-01T00:00:00", "git_commit": "a" * 40}
    cur.environment = {**cur.environment, "gpu_name": "GPU A", "created": "2026-01-02T00:00:00"}
    cur.environment.pop("git_commit", None)
    ResultsWriter(tmp_path / "base.json", base).finish()
    ResultsWriter(tmp_path / "cur.json", cur).finish()
    args = ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json")]
    shown = CliRunner().invoke(app, [*args, "--markdown", str(tmp_path / "c.md")], terminal_width=300)
    assert shown.exit_code == 0, shown.output
    assert f"baseline: {tmp_path / 'base.json'} (GPU A, 2026-01-01T00:00:00, commit aaaaaaaaaaaa)" in shown.output
    assert f"current: {tmp_path / 'cur.json'} (GPU A, 2026-01-02T00:00:00)" in shown.output
    assert "commit aaaaaaaaaaaa" in (tmp_path / "c.md").read_text()
    payload = json.loads(CliRunner().invoke(app, [*args, "--json", "-"]).stdout)
    assert payload["baseline"] == {"source": str(tmp_path / "base.json"), "gpu": "GPU A",
                                   "created": "2026-01-01T00:00:00", "commit": "a" * 40}
    assert payload["current"]["commit"] is None and payload["current"]["created"] == "2026-01-02T00:00:00"


def test_runs_of_the_same_suite_on_other_cases_say_which_cases_they_hold():
    """Two runs of softmax at other row counts: 'the baseline has softmax (float16; ...; 11 cases),
    the current run softmax (float16; ...; 11 cases)', the same words twice and the cause unsaid."""
    base = softmax_run(1)
    other = copy.deepcopy(softmax_run(2))
    for r in other.records:
        r.case = r.case.replace("rows=49152", "rows=8")
    with pytest.raises(GateInputError, match="in common") as err:
        compare_runs(base, other, 0.05)
    message = str(err.value)
    assert "11 cases) [e.g. rows=49152,cols=32; rows=49152,cols=64; 9 more]" in message
    assert "[e.g. rows=8,cols=32; rows=8,cols=64; 9 more]" in message
