import json

import pytest

import bwbench
from bwbench.results import SCHEMA, Record, ResultsWriter, RunDocument, read_document, write_csv


def record(impl="torch", status="ok", median=100.0, cols=1024):
    stats = {"count": 3, "min_us": median - 1, "p10_us": median - 0.5, "median_us": median, "p90_us": median + 0.5,
             "max_us": median + 1, "mean_us": median, "stdev_us": 1.0, "noise": 0.01, "converged": True}
    total = 2 * 4096 * cols * 2
    return Record(suite="softmax", case=f"rows=4096,cols={cols}", params={"rows": 4096, "cols": cols},
                  dtype="float16", impl=impl, kind="torch" if impl == "torch" else "naive", status=status,
                  reason=None if status == "ok" else "wrong result: element 3", bytes_read=total // 2,
                  bytes_written=total // 2, bytes_total=total, timing="cold",
                  stats=stats if status == "ok" else None, samples_us=[median - 1, median, median + 1] if status == "ok" else [],
                  gbps=total / (median * 1e-6) / 1e9 if status == "ok" else None)


def document():
    return RunDocument(environment={"gpu_name": "NVIDIA H100 80GB HBM3", "peak_gbps": 3352.0},
                       options={"suite": "softmax"}, suites={"softmax": {"x_axis": "cols"}})


def test_writer_keeps_a_complete_document_after_every_record(tmp_path):
    path = tmp_path / "run.json"
    seen = []
    writer = ResultsWriter(path, document(), on_add=seen.append)
    assert read_document(path).records == []
    writer.add(record("torch"))
    on_disk = read_document(path)
    assert len(on_disk.records) == 1 and not on_disk.complete, "an interrupted run still has a readable file"
    writer.add(record("naive", status="failed"))
    writer.finish(interrupted=True)
    final = read_document(path)
    assert [r.impl for r in final.records] == ["torch", "naive"]
    assert final.interrupted and not final.complete
    assert len(seen) == 2
    assert not list(tmp_path.glob("*.tmp"))


def test_round_trip_is_lossless(tmp_path):
    doc = document()
    doc.records = [record("torch"), record("naive", status="failed")]
    path = tmp_path / "r.json"
    ResultsWriter(path, doc).finish()
    again = read_document(path)
    assert again.to_dict() == doc.to_dict()
    assert json.loads(path.read_text())["schema"] == SCHEMA


def test_load_gives_one_row_per_record_with_axes_and_stats(tmp_path):
    doc = document()
    doc.records = [record("torch", cols=32), record("torch", cols=1024), record("naive", status="failed")]
    path = tmp_path / "r.json"
    ResultsWriter(path, doc).finish()
    frame = bwbench.load(path)
    assert len(frame) == 3
    assert list(frame["cols"]) == [32, 1024, 1024]
    assert frame.loc[0, "median_us"] == 100.0 and frame.loc[0, "gpu"] == "NVIDIA H100 80GB HBM3"
    assert frame.loc[2, "status"] == "failed"
    assert frame.loc[0, "samples_us"] == [99.0, 100.0, 101.0]
    csv_path = write_csv(doc, tmp_path / "r.csv")
    header = csv_path.read_text().splitlines()[0].split(",")
    assert "gbps" in header and "cols" in header and "samples_us" not in header


@pytest.mark.parametrize("content,message", [
    (None, "does not exist"),
    ("{not json", "not valid JSON"),
    ('{"schema": "other/1"}', "not a bwbench results file"),
    ("[1, 2]", "not a bwbench results file"),
])
def test_bad_results_files_give_clear_errors(tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_document(path)


def test_record_refuses_unknown_status():
    with pytest.raises(ValueError):
        record(status="great")


def test_an_explicit_commit_wins_over_the_checkout(monkeypatch):
    from bwbench.device import _git_commit

    monkeypatch.setenv("BWBENCH_COMMIT", "abc1234")
    assert _git_commit() == "abc1234"
    monkeypatch.delenv("BWBENCH_COMMIT")
    assert _git_commit() != "abc1234"
