"""How a run was timed, and gates that refuse runs timed differently (CLI, gate, store)."""

from __future__ import annotations

import copy
import sqlite3

import pytest
from typer.testing import CliRunner

from bwbench import store
from bwbench.cli import app
from bwbench.gate import GateInputError, compare_runs
from bwbench.method import method_mismatch, planned_method, record_method, run_method
from bwbench.results import Record, ResultsWriter, RunDocument

GPU = "NVIDIA H100 80GB HBM3"


def record(impl="optimized", timing="cold", timer="cupti", charged=True, us=10.0, status="ok", case="n=1"):
    samples = [us * (1 + 0.001 * (k - 10)) for k in range(21)]
    stats = {"count": 21, "min_us": samples[0], "p10_us": samples[2], "median_us": us, "p90_us": samples[18],
             "max_us": samples[-1]}
    return Record(suite="s", case=case, params={"n": 1}, dtype="float16", impl=impl, kind="cuda", status=status,
                  bytes_total=10**6, timing=timing, stats=stats, samples_us=samples, gbps=1e6 / us / 1e3,
                  timer=timer, timer_detail={"writeback_us": 1.0, "span_median_us": us - 1.0} if charged else None)


def document(*records, created="2026-11-27T10:00:00+00:00"):
    return RunDocument(environment={"gpu_name": GPU, "created": created}, options={}, suites={},
                       records=list(records))


def test_a_record_says_how_it_was_timed():
    assert record_method(record()) == "cold, cupti, write-back charged"
    assert record_method(record(timer="events", charged=False)) == "cold, events, no write-back charge"
    assert record_method(record(timing="hot", timer="events", charged=False)) == "hot, events"
    assert record_method(record(status="skipped")) is None
    assert planned_method("cold", "cupti") == record_method(record())
    assert planned_method("hot", "cupti") == "hot, events"


def test_a_run_that_changed_clock_partway_names_both_and_an_untimed_run_none():
    mixed = document(record(), record(impl="torch", timer="events"))
    assert run_method(mixed) == "cold, cupti, write-back charged + cold, events, write-back charged"
    assert run_method(document(record(status="failed"))) is None
    assert method_mismatch(None, "hot, events") is None
    assert method_mismatch("hot, events", "hot, events") is None


def test_the_gate_refuses_runs_timed_differently_unless_told_to_ignore_it():
    old = document(record(charged=False, timer="events", us=12.0))
    new = document(record())
    with pytest.raises(GateInputError, match="no write-back charge.*not comparable.*--ignore-timing"):
        compare_runs(old, new, 0.05)
    (verdict,) = compare_runs(old, new, 0.05, ignore_timing=True)
    assert verdict.verdict == "faster"


def test_compare_exits_2_with_one_line_and_judges_with_ignore_timing(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    ResultsWriter(old, document(record(charged=False, timer="events", us=12.0))).finish()
    ResultsWriter(new, document(record())).finish()
    refused = CliRunner().invoke(app, ["compare", str(old), str(new)])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "timed cold, events, no write-back charge" in refused.output
    judged = CliRunner().invoke(app, ["compare", str(old), str(new), "--ignore-timing"])
    assert judged.exit_code == 0, judged.output


def test_an_old_store_gains_the_timing_column_and_keeps_its_runs(tmp_path):
    db = tmp_path / "old.sqlite"
    first_schema = store.SCHEMA.replace(",\n    timing          TEXT\n", "\n")
    assert "timing" not in first_schema
    conn = sqlite3.connect(db)
    conn.executescript(first_schema)
    conn.execute("INSERT INTO runs (run_id, gpu_name, created, added) VALUES ('r0', ?, '2026-11-20', '2026-11-20')",
                 (GPU,))
    conn.commit()
    conn.close()
    store.add_document(document(record()), db)
    runs = store.recent_runs(db, GPU)
    assert {r.run_id: r.timing for r in runs}["r0"] is None
    assert "cold, cupti, write-back charged" in {r.timing for r in runs}


def test_a_stored_baseline_takes_only_runs_timed_like_the_current_one(tmp_path):
    db = tmp_path / "h.sqlite"
    store.add_document(document(record(charged=False, timer="events", us=20.0), created="2026-11-20T10:00:00+00:00"),
                       db)
    base, runs = store.baseline_from_store(db, GPU, 5, method=None)
    assert len(runs) == 1
    with pytest.raises(store.StoreError, match="no earlier run on .* timed cold, cupti, write-back charged"):
        store.baseline_from_store(db, GPU, 5, method="cold, cupti, write-back charged")
    store.add_document(document(record(us=10.0), created="2026-11-21T10:00:00+00:00"), db)
    base, runs = store.baseline_from_store(db, GPU, 5, method="cold, cupti, write-back charged")
    assert len(runs) == 1 and base.records[0].stats["median_us"] == pytest.approx(10.0)

    current = tmp_path / "current.json"
    ResultsWriter(current, document(copy.deepcopy(record(us=10.0)), created="2026-11-22T10:00:00+00:00")).finish()
    judged = CliRunner().invoke(app, ["compare", "--against-store", str(current), "--store", str(db)])
    assert judged.exit_code == 0 and "median of 1 stored runs" in judged.output, judged.output


def test_history_says_how_each_run_was_timed_and_warns_where_it_changed(tmp_path):
    from bwbench.method import short_method

    db = tmp_path / "h.sqlite"
    store.add_document(document(record(charged=False, timer="events", us=20.0), created="2026-11-20T10:00:00+00:00"),
                       db)
    one = CliRunner().invoke(app, ["history", "s", "--store", str(db)], terminal_width=200)
    assert one.exit_code == 0 and "cold events" in one.output and "timed differently" not in one.output, one.output
    store.add_document(document(record(us=10.0), created="2026-11-21T10:00:00+00:00"), db)
    both = CliRunner().invoke(app, ["history", "s", "--store", str(db)], terminal_width=200)
    assert both.exit_code == 0, both.output
    assert "cold cupti +wb" in both.output and "timed differently" in both.output
    assert short_method(None) == "—" and short_method("hot, events") == "hot events"
