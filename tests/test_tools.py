"""tools/tables.py: the markdown tables docs/ is made with, read through bwbench.load."""

import importlib.util
from pathlib import Path

import pytest

from bwbench.results import ResultsWriter
from synthetic_runs import IMPLEMENTATIONS, softmax_run

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("tables", TOOLS / "tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def written(tmp_path, run, rename=None):
    document = softmax_run(run)
    for record in document.records:
        if record.impl == rename:
            record.impl, record.kind = "optimized", "cuda"
    path = tmp_path / f"run{run}.json"
    ResultsWriter(path, document).finish()
    return path


def table_rows(text):
    return {line.split(" | ")[0].strip("| "): line.split(" | ") for line in text.splitlines() if line.startswith("| cols=")}


def test_one_run_gives_a_row_per_case_with_each_implementation_and_the_fastest_baseline(tables, tmp_path, capsys):
    assert tables.main([str(written(tmp_path, 1, rename="compiled"))]) == 0
    text = capsys.readouterr().out
    assert "### softmax · float16 · NVIDIA H200" in text
    head = next(line for line in text.splitlines() if line.startswith("| case"))
    assert "optimized GB/s" in head and "naive % of copy" in head and "optimized vs fastest baseline" in head
    assert "copy % of copy" not in head  # the ceiling is what the others divide by, not a column
    rows = table_rows(text)
    assert list(rows) == [f"cols={2**k}" for k in range(5, 16)]
    # `optimized` here is the model's compiled (0.92 of copy); torch (0.78) is the fastest baseline left.
    last = rows["cols=32768"]
    assert float(last[2]) == pytest.approx(92, abs=2.5)
    assert last[-1].strip("| ").endswith("× torch")
    ratio = float(last[-1].split("×")[0])
    assert ratio == pytest.approx(IMPLEMENTATIONS["compiled"][1] / IMPLEMENTATIONS["torch"][1], rel=0.04)


def test_two_runs_show_the_median_and_the_range(tables, tmp_path, capsys):
    paths = [str(written(tmp_path, run, rename="compiled")) for run in (1, 2)]
    assert tables.main(paths + ["--suite", "softmax", "--dtype", "float16"]) == 0
    cell = table_rows(capsys.readouterr().out)["cols=4096"][2]
    median, spread = cell.split(" (")
    low, high = (float(v) for v in spread.rstrip(")").split("–"))
    assert low < float(median) < high or low == float(median) == high


def test_no_matching_records_or_a_foreign_file_is_exit_2(tables, tmp_path, capsys):
    path = written(tmp_path, 1)
    assert tables.main([str(path), "--suite", "permute"]) == 2
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"schema": "other"}')
    assert tables.main([str(foreign)]) == 2
    assert "error:" in capsys.readouterr().err
