"""The results store and what reads it: idempotent import, trends, `bwbench history`, and gating
against the median of recent runs of the same GPU model. CPU only: documents are built here."""

from __future__ import annotations

import copy
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bwbench import store
from bwbench.cli import app
from bwbench.results import ResultsWriter, RunDocument
from tests.test_report import make_document

H100 = "NVIDIA H100 80GB HBM3"


def run_of(day: int, commit: str, speed: float = 1.0, gpu: str = H100, peak: float = 3352.0) -> RunDocument:
    """A softmax run made on 2026-11-<day> at `commit`, every implementation `speed` times the fixture."""
    doc = make_document(gpu, peak=peak, speed=speed)
    doc.environment.update(created=f"2026-11-{day:02d}T10:00:00+00:00", git_commit=commit,
                           gpu_uuid=f"GPU-{gpu[-4:]}")
    return doc


def write(tmp_path: Path, name: str, doc: RunDocument) -> Path:
    path = tmp_path / f"{name}.json"
    ResultsWriter(path, doc).finish()
    return path


def test_adding_a_run_twice_adds_nothing_and_a_grown_run_adds_its_new_records(tmp_path):
    db = tmp_path / "h.sqlite"
    doc = run_of(20, "aaaaaaa")
    first = store.add_document(doc, db)
    assert first.new_run and first.added_records == len(doc.records) == 15
    again = store.add_document(write(tmp_path, "same", doc), db)
    assert not again.new_run and again.added_records == 0 and again.run_id == first.run_id
    grown = copy.deepcopy(doc)
    extra = copy.deepcopy(doc.records[1])
    extra.case, extra.params = "rows=49152,cols=65536", {"rows": 49152, "cols": 65536}
    grown.records.append(extra)
    assert store.add_document(grown, db).added_records == 1
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
        assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 16
        # Failed records keep no speed (the fixture's failed record claims 86420 GB/s).
        assert conn.execute("SELECT MAX(gbps) FROM results WHERE status != 'ok'").fetchone()[0] is None
        row = conn.execute("SELECT gpu_name, gpu_uuid, git_commit, created FROM runs").fetchone()
    assert row == (H100, "GPU-HBM3", "aaaaaaa", "2026-11-20T10:00:00+00:00")


def test_trend_and_recent_runs_in_date_order(tmp_path):
    db = tmp_path / "h.sqlite"
    for day, commit, speed in ((22, "ccccccc", 1.1), (20, "aaaaaaa", 1.0), (21, "bbbbbbb", 0.9)):
        store.add_document(run_of(day, commit, speed), db)
    store.add_document(run_of(21, "bbbbbbb", 1.4, gpu="NVIDIA H200", peak=4800.0), db)
    runs = store.recent_runs(db, H100)
    assert [r.git_commit for r in runs] == ["ccccccc", "bbbbbbb", "aaaaaaa"]
    points = store.query_trend(db, "softmax", cases=["cols=1024"], impls=["torch"], gpu_name=H100)
    assert [p.git_commit for p in points] == ["aaaaaaa", "bbbbbbb", "ccccccc"]
    assert [round(p.gbps) for p in points] == [round(2900 * 0.80 * s) for s in (1.0, 0.9, 1.1)]
    assert {p.case for p in points} == {"rows=49152,cols=1024"}
    assert len(store.query_trend(db, "softmax", impls=["torch"])) == 4 * 3


def test_history_command_prints_the_trend_and_writes_the_chart(tmp_path):
    db = tmp_path / "h.sqlite"
    paths = [write(tmp_path, f"r{day}", run_of(day, c, s)) for day, c, s in
             ((20, "aaaaaaa", 1.0), (21, "bbbbbbb", 0.9), (22, "ccccccc", 1.1))]
    runner = CliRunner()
    imported = runner.invoke(app, ["store", "import", *map(str, paths), "--store", str(db)])
    assert imported.exit_code == 0, imported.output
    assert imported.output.count("new run") == 3
    again = runner.invoke(app, ["store", "import", str(paths[0]), "--store", str(db)])
    assert "run already stored" in again.output and "0 records added" in again.output
    html = tmp_path / "trend.html"
    shown = runner.invoke(app, ["history", "softmax", "--case", "rows=49152,cols=1024", "--impl", "torch,compiled",
                                "--store", str(db), "-o", str(html)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if "2026-11-2" in line]
    assert [line.split("│")[2].strip() for line in lines] == ["aaaaaaa", "bbbbbbb", "ccccccc"]
    assert "2,320 (80%)" in shown.output  # torch at 80% of a 2900 GB/s copy on the first run
    page = html.read_text(encoding="utf-8")
    assert '"type":"date"' in page and "bbbbbbb" in page and page.count('class="bwbench-figure"') == 1
    missing = runner.invoke(app, ["history", "layernorm", "--store", str(db)])
    assert missing.exit_code == 2 and "it holds softmax" in missing.output
    nothing = runner.invoke(app, ["history", "softmax", "--store", str(tmp_path / "none.sqlite")])
    assert nothing.exit_code == 2 and "no results store" in nothing.output


def test_compare_against_the_median_of_recent_runs_of_the_same_gpu(tmp_path):
    db = tmp_path / "h.sqlite"
    for day, commit, speed in ((18, "old", 0.5), (20, "aaaaaaa", 1.0), (21, "bbbbbbb", 0.99), (22, "ccccccc", 1.01)):
        store.add_document(run_of(day, commit, speed), db)
    store.add_document(run_of(22, "h200run", 1.4, gpu="NVIDIA H200", peak=4800.0), db)
    base, runs = store.baseline_from_store(db, H100, last=3)
    assert [r.git_commit for r in runs] == ["ccccccc", "bbbbbbb", "aaaaaaa"]
    torch = next(r for r in base.records if r.impl == "torch" and r.case.endswith("cols=1024"))
    assert torch.gbps == pytest.approx(2900 * 0.80, rel=1e-6)  # the median run (speed 1.0), not the old 0.5 one

    runner = CliRunner()
    steady = write(tmp_path, "steady", run_of(23, "ddddddd", 1.0))
    ok = runner.invoke(app, ["compare", "--against-store", str(steady), "--store", str(db), "--last", "3"])
    assert ok.exit_code == 0, ok.output
    assert "median of 3 stored runs on NVIDIA H100" in ok.output
    slow = run_of(23, "eeeeeee", 1.0)
    for r in slow.records:
        if r.impl == "compiled" and r.status == "ok":
            r.gbps *= 0.8
            r.stats = {k: (v / 0.8 if k.endswith("_us") else v) for k, v in r.stats.items()}
    judged = runner.invoke(app, ["compare", "--against-store", str(write(tmp_path, "slow", slow)), "--store", str(db),
                                 "--last", "3", "--json", "-"])
    assert judged.exit_code == 1, judged.output
    verdicts = json.loads(judged.stdout)
    assert verdicts["counts"].get("slower") == 3  # compiled at each of its three cases
    assert {c["impl"] for c in verdicts["comparisons"] if c["verdict"] == "slower"} == {"compiled"}
    assert runner.invoke(app, ["compare", "--against-store", str(steady), str(steady)]).exit_code == 2
    empty = runner.invoke(app, ["compare", "--against-store", str(write(tmp_path, "b200", run_of(23, "x", gpu="NVIDIA B200"))),
                                "--store", str(db)])
    assert empty.exit_code == 2 and "no earlier run on 'NVIDIA B200'" in empty.output


def test_a_store_that_cannot_be_written_costs_the_entry_not_the_run(tmp_path):
    path = write(tmp_path, "run", run_of(20, "aaaaaaa"))
    bad = tmp_path / "not-a-store.sqlite"
    bad.write_text("this is not sqlite " * 100)
    note = store.add_finished_run(path, bad)
    assert note.startswith("warning: run not added") and store.add_finished_run(path, None) == ""
    assert store.add_finished_run(path, tmp_path / "ok.sqlite") == f"history: 15 records added to {tmp_path / 'ok.sqlite'}"


def test_the_trend_page_renders_in_chromium(tmp_path):
    from tests.test_report import render_in_chromium

    db = tmp_path / "h.sqlite"
    for day, commit, speed in ((20, "aaaaaaa", 1.0), (21, "bbbbbbb", 0.9), (22, "ccccccc", 1.1)):
        store.add_document(run_of(day, commit, speed), db)
    html = tmp_path / "trend.html"
    result = CliRunner().invoke(app, ["history", "softmax", "--store", str(db), "-o", str(html)])
    assert result.exit_code == 0, result.output
    seen = render_in_chromium(html, tmp_path)
    assert seen["errors"] == [] and seen["state"] == "drawn" and seen["drawn"] >= 1


@pytest.mark.gpu
def test_a_finished_run_lands_in_the_store(tmp_path):
    """`bwbench run` adds its results to OUT/bwbench-history.sqlite, and `--no-store` leaves none."""
    runner = CliRunner()
    result = runner.invoke(app, ["run", "softmax", "--quick", "--impl", "torch", "--no-report", "-o", str(tmp_path),
                                 "--name", "quick", "--max-time", "0.2", "--copy-size", "256MB"])
    assert result.exit_code == 0, result.output
    db = tmp_path / "bwbench-history.sqlite"
    assert "records added to" in result.output and db.is_file()
    runs = store.recent_runs(db)
    assert len(runs) == 1 and runs[0].records > 0
    points = store.query_trend(db, "softmax", impls=["torch"])
    assert points and all(p.status == "ok" and p.gbps > 0 for p in points)
    again = runner.invoke(app, ["run", "softmax", "--quick", "--impl", "torch", "--no-report", "-o", str(tmp_path / "b"),
                                "--name", "quick", "--max-time", "0.2", "--copy-size", "256MB", "--no-store"])
    assert again.exit_code == 0, again.output
    assert not (tmp_path / "b" / "bwbench-history.sqlite").exists()


def test_history_chart_never_replaces_its_store_or_a_results_file(tmp_path):
    db = tmp_path / "h.sqlite"
    path = write(tmp_path, "r20", run_of(20, "aaaaaaa"))
    runner = CliRunner()
    assert runner.invoke(app, ["store", "import", str(path), "--store", str(db)]).exit_code == 0
    kept = {p: p.read_bytes() for p in (db, path)}
    other = tmp_path / "other.sqlite"
    store.add_document(path, other)
    kept[other] = other.read_bytes()
    for target, says in ((db, "is one of the input files"), (path, "is a bwbench results file"),
                         (other, "is a database")):
        shown = runner.invoke(app, ["history", "softmax", "--store", str(db), "-o", str(target)])
        assert shown.exit_code == 2 and says in " ".join(shown.output.split()), shown.output
    assert all(p.read_bytes() == b for p, b in kept.items())


def test_import_reads_every_file_before_adding_any(tmp_path):
    db = tmp_path / "h.sqlite"
    good = write(tmp_path, "r20", run_of(20, "aaaaaaa"))
    bad = tmp_path / "empty.json"
    bad.write_text("")
    result = CliRunner().invoke(app, ["store", "import", str(good), str(bad), "--store", str(db)])
    assert result.exit_code == 2 and "empty.json" in result.output, result.output
    assert not db.exists() or not store.known_values(db, "suite"), "nothing was added"


def test_a_store_that_is_a_folder_is_refused_without_a_journal_beside_it(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    path = write(tmp_path, "r20", run_of(20, "aaaaaaa"))
    result = CliRunner().invoke(app, ["store", "import", str(path), "--store", str(folder)])
    assert result.exit_code == 2 and "not a regular file" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r20.json", "store"]


@pytest.mark.parametrize("command", [["history", "softmax"], ["store", "import", "RUN"],
                                     ["compare", "--against-store", "RUN"]])
def test_another_programs_sqlite_file_is_refused_and_left_as_it_was(tmp_path, command):
    """`--store app.db` named by mistake: bwbench added its tables to it, even for history, which
    only reads."""
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    conn.close()
    before = db.read_bytes()
    run = write(tmp_path, "run", run_of(20, "aaaaaaa"))
    result = CliRunner().invoke(app, [str(run) if part == "RUN" else part for part in command] + ["--store", str(db)])
    assert result.exit_code == 2 and "app.db is not a bwbench results store (it holds the tables users" in \
        " ".join(result.output.split()), result.output
    assert db.read_bytes() == before


def test_a_reading_command_adds_no_tables_to_an_empty_file(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(store.StoreError, match="holds no tables"):
        store.query_trend(empty, "softmax")
    assert empty.read_bytes() == b""
    assert store.add_document(run_of(20, "aaaaaaa"), empty).new_run  # a store may start as an empty file


@pytest.mark.parametrize("key, value, says", [("created", 1e20, "environment.created is 1e+20, which is no date"),
                                              ("gpu_name", ["H100"], "environment.gpu_name is list"),
                                              ("git_commit", 7, "environment.git_commit is int")])
def test_a_hand_edited_environment_is_one_line_and_adds_nothing(tmp_path, key, value, says):
    """An out-of-range date was an OverflowError traceback, a list a sqlite3.ProgrammingError."""
    good = write(tmp_path, "good", run_of(20, "aaaaaaa"))
    doc = run_of(21, "bbbbbbb")
    doc.environment[key] = value
    bad = write(tmp_path, "bad", doc)
    db = tmp_path / "h.sqlite"
    result = CliRunner().invoke(app, ["store", "import", str(good), str(bad), "--store", str(db)])
    assert result.exit_code == 2 and f"bad.json: {says}" in " ".join(result.output.split()), result.output
    assert not db.exists(), "every file is checked before any is added"


def test_a_negative_or_nan_speed_is_stored_as_no_speed(tmp_path):
    """-2000 GB/s and a negative median from a hand-edited file went into the history as measured."""
    doc = run_of(20, "aaaaaaa")
    naive = next(r for r in doc.records if r.impl == "naive" and r.status == "ok")
    naive.gbps, naive.stats = -2000.0, {**naive.stats, "median_us": -5.0, "p10_us": float("nan")}
    db = tmp_path / "h.sqlite"
    store.add_document(doc, db)
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT gbps, median_us, p10_us, pct_copy FROM results WHERE impl = 'naive' AND case_id = ?",
                           (naive.case,)).fetchone()
    conn.close()
    assert row == (None, None, None, None)


def test_a_store_locked_by_another_writer_says_so_not_that_it_is_no_store(tmp_path):
    import sqlite3

    from bwbench.store import StoreError, connect

    path = tmp_path / "runs.db"
    connect(path).close()
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="cannot use the results store") as err:
            connect(path)  # waits out sqlite3's 5 s busy timeout first
        assert "not a bwbench results store" not in str(err.value)
    finally:
        holder.rollback()
        holder.close()


def test_reading_a_store_made_before_a_column_existed_leaves_it_as_it_was(tmp_path):
    """history and compare --against-store upgraded an older store in place (ALTER TABLE, CREATE
    INDEX): a command that only reads changed a file it was not asked to write, and failed on a
    read-only copy of one."""
    db = tmp_path / "old.sqlite"
    store.add_document(run_of(20, "aaaaaaa"), db)
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("DROP INDEX results_by_case")
        conn.execute("ALTER TABLE runs DROP COLUMN timing")
    before = db.read_bytes()
    result = CliRunner().invoke(app, ["history", "softmax", "--store", str(db)])
    assert result.exit_code == 0, result.output
    assert [r.timing for r in store.recent_runs(db)] == [None]
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.sqlite"]


def test_against_store_refuses_a_run_that_names_no_gpu(tmp_path):
    """A run without environment.gpu_name (a hand-edited or trimmed file) was gated against the
    median of every stored run, H100 and H200 mixed, 'on None': a baseline of no one GPU."""
    db = tmp_path / "h.sqlite"
    store.add_document(run_of(20, "aaaaaaa", 1.0), db)
    store.add_document(run_of(21, "bbbbbbb", 1.4, gpu="NVIDIA H200", peak=4800.0), db)
    current = run_of(22, "ccccccc", 1.0)
    del current.environment["gpu_name"]
    result = CliRunner().invoke(app, ["compare", "--against-store", str(write(tmp_path, "nogpu", current)),
                                      "--store", str(db)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error:") and "gpu_name" in result.output
    with pytest.raises(store.StoreError):
        store.baseline_from_store(db, None, last=5)


@pytest.mark.parametrize("args, says", [
    (["--impl", "torhc"], "--impl torhc: no stored run of softmax has it; the store holds"),
    (["--impl", "torch,torhc"], "--impl torhc: no stored run"),  # not torch's trend alone, the typo unsaid
    (["--dtype", "float64"], "--dtype float64: no stored run of softmax has it; the store holds float16"),
    (["--gpu", "H100"], f"--gpu H100: no stored run of softmax has it; the store holds {H100}"),
    (["--case", "colz=1024"], "--case colz=1024: no stored case of softmax matches"),
])
def test_history_names_the_filter_that_matches_nothing_and_what_is_stored(tmp_path, args, says):
    """"no stored record matches --case/--impl/--dtype/--gpu" left the user to guess which one."""
    db = tmp_path / "h.sqlite"
    store.add_document(run_of(20, "aaaaaaa"), db)
    result = CliRunner().invoke(app, ["history", "softmax", "--store", str(db), *args], terminal_width=400)
    assert result.exit_code == 2 and says in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_store_with_a_column_this_bwbench_does_not_know_still_takes_its_runs(tmp_path):
    """A store a newer bwbench (or the user) gave another results column: `store import` was a
    traceback ('table results has 16 columns but 15 values were supplied')."""
    db = tmp_path / "h.sqlite"
    store.add_document(run_of(20, "aaaaaaa"), db)
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("ALTER TABLE results ADD COLUMN energy_j REAL")
        conn.execute("ALTER TABLE runs ADD COLUMN clocks TEXT")
    result = CliRunner().invoke(app, ["store", "import", str(write(tmp_path, "r21", run_of(21, "bbbbbbb"))),
                                      "--store", str(db)])
    assert result.exit_code == 0 and "new run" in result.output, result.output
    assert [r.git_commit for r in store.recent_runs(db)] == ["bbbbbbb", "aaaaaaa"]


def test_a_store_another_writer_is_writing_to_is_one_line_not_a_traceback(tmp_path):
    """A writer holding the store (a `bwbench run` finishing beside `store import`): the insert
    waited out the busy timeout and raised sqlite3.OperationalError through the CLI."""
    db = tmp_path / "h.sqlite"
    store.add_document(run_of(20, "aaaaaaa"), db)
    path = write(tmp_path, "r21", run_of(21, "bbbbbbb"))
    holder = sqlite3.connect(db)
    holder.execute("BEGIN IMMEDIATE")
    try:
        result = CliRunner().invoke(app, ["store", "import", str(path), "--store", str(db)])
    finally:
        holder.rollback()
        holder.close()
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.exception
    assert result.output.startswith("error: cannot use the results store") and "locked" in result.output, result.output
    assert len(store.recent_runs(db)) == 1


def test_history_says_runs_were_timed_differently_only_when_they_were(tmp_path):
    """A run whose records all failed or were skipped has no method (nothing was timed): history
    said the runs 'were timed differently' and put the step down to the method."""
    db = tmp_path / "h.sqlite"
    store.add_document(run_of(20, "aaaaaaa"), db)
    untimed = run_of(21, "bbbbbbb")
    untimed.records = [r for r in untimed.records if r.status != "ok"]
    store.add_document(untimed, db)
    store.add_document(run_of(22, "ccccccc"), db)
    result = CliRunner().invoke(app, ["history", "softmax", "--store", str(db)], terminal_width=300)
    assert result.exit_code == 0 and "bbbbbbb" in result.output, result.output
    assert "timed differently" not in result.output
    hot = run_of(23, "ddddddd")
    for r in hot.records:
        r.timing = "hot"
    store.add_document(hot, db)
    changed = CliRunner().invoke(app, ["history", "softmax", "--store", str(db)], terminal_width=300)
    assert changed.exit_code == 0 and "timed differently" in changed.output, changed.output


def test_history_reads_the_store_once(tmp_path, monkeypatch):
    """history read the suite's records twice, filtered and whole; it filters the one reading."""
    db = tmp_path / "h.sqlite"
    store.add_document(run_of(20, "aaaaaaa"), db)
    store.add_document(run_of(21, "bbbbbbb", 1.4, gpu="NVIDIA H200", peak=4800.0), db)
    reads = []
    real = store.connect
    monkeypatch.setattr(store, "connect", lambda *a, **k: reads.append(a) or real(*a, **k))
    result = CliRunner().invoke(app, ["history", "softmax", "--store", str(db), "--impl", "torch", "--gpu", H100,
                                      "--case", "cols=1024"], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert len(reads) == 1
    assert "aaaaaaa" in result.output and "bbbbbbb" not in result.output and "2,320 (80%)" in result.output
    assert store.select_points(store.query_trend(db, "softmax"), ["cols=1024"], ["torch"], (), H100) == \
        store.query_trend(db, "softmax", ["cols=1024"], ["torch"], (), H100)


def fleet_of(day: int) -> RunDocument:
    """A fleet run of two GPUs as one merged document: the same cases on both, GPU 1 half as fast;
    the top-level environment is GPU 0's, as a fleet file's is."""
    gpu0, gpu1 = run_of(day, "fleet01", 1.0), run_of(day, "fleet01", 0.5)
    gpu1.environment.update(gpu_uuid="GPU-other", gpu_index=1)
    gpu0.environment.update(gpu_index=0)
    for index, part in enumerate((gpu0, gpu1)):
        for r in part.records:
            r.gpu_index, r.gpu_uuid = index, part.environment["gpu_uuid"]
    gpus = [{"gpu_index": i, "gpu_uuid": p.environment["gpu_uuid"], "status": "done", "environment": dict(p.environment)}
            for i, p in enumerate((gpu0, gpu1))]
    return RunDocument(dict(gpu0.environment), gpu0.options, gpu0.suites, gpu0.records + gpu1.records,
                       complete=True, gpus=gpus)


def test_a_fleet_file_goes_in_as_a_run_per_gpu_each_with_its_own_records(tmp_path):
    db = tmp_path / "h.sqlite"
    doc = fleet_of(20)
    added = store.add_document(write(tmp_path, "fleet", doc), db)
    assert added.gpus == 2 and added.new_run and added.added_records == len(doc.records)
    with closing(sqlite3.connect(db)) as conn:
        runs = dict(conn.execute("SELECT gpu_uuid, run_id FROM runs").fetchall())
        assert set(runs) == {"GPU-HBM3", "GPU-other"}
        speeds = {uuid: sorted(v for (v,) in conn.execute(
                      "SELECT gbps FROM results WHERE run_id = ? AND gbps IS NOT NULL", (run_id,)))
                  for uuid, run_id in runs.items()}
    assert speeds["GPU-other"] and all(abs(b - a / 2) < 1e-6 * a for a, b in zip(speeds["GPU-HBM3"], speeds["GPU-other"]))
    again = store.add_document(write(tmp_path, "again", doc), db)
    assert not again.new_run and again.added_records == 0
