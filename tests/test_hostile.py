"""Hostile inputs and faults, as a new user (or a broken machine) would produce them.

Each case must end in a one-line message and exit code 2 (or the documented code), with no
traceback and no file changed that the user did not name as output. The `run` cases fail before
any GPU work, so they run here on the CPU: the message they print is the check's own, not "no GPU".
Sections: safe outputs, append-only results, typed reading, checks before GPU work, plain text,
gate verdicts on bad data, statistics and gate boundaries.
"""

from __future__ import annotations

import json
import math
import os
import threading
import warnings
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from bwbench import outputs
from bwbench.cli import app
from bwbench.console import comparison_table, device_table, problems, summary_tables
from bwbench.gate import Comparison, compare_runs, copy_fraction_violations, gate_fails, judge, partial_runs
from bwbench.results import (Record, ResultsFileError, ResultsWarning, ResultsWriter, RunDocument, read_document,
                             stream_path)
from bwbench.stats import summarize

CASE = "rows=4096,cols=1024"


def record(impl="torch", gbps=100.0, status="ok", reason=None, median=80.0, case=CASE, n=30, pct_copy=90.0):
    samples = [median * (1 + 0.001 * (k - n // 2)) for k in range(n)] if status == "ok" else []
    return Record(suite="softmax", case=case, params={"rows": 4096, "cols": 1024}, dtype="float16", impl=impl,
                  kind="torch", status=status, reason=reason, bytes_read=8 << 20, bytes_written=8 << 20,
                  bytes_total=16 << 20, timing="cold", stats=summarize(samples, True).to_dict() if samples else None,
                  samples_us=samples, gbps=gbps if status == "ok" else None, pct_copy=pct_copy if status == "ok" else None)


def document(records=(), gpu="NVIDIA H100 80GB HBM3"):
    return RunDocument(environment={"gpu_name": gpu}, options={"suite": "softmax"}, suites={}, records=list(records))


def save(path: Path, doc: RunDocument, interrupted=False) -> Path:
    ResultsWriter(path, doc).finish(interrupted=interrupted)
    return path


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    text = " ".join(result.output.split())
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, text


def one_error_line(text: str, code: int, expected: str) -> None:
    assert code == 2, text
    assert expected in text, text
    assert text.count("error:") == 1


def snapshot(folder: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def render(renderable) -> str:
    console = Console(width=400, record=True, file=open(os.devnull, "w"))
    console.print(renderable)
    return console.export_text()


# === safe outputs ===================================================================================
@pytest.mark.parametrize("name", ["../x", "/tmp/abs", "a/b", "..", "a\\b", "a\nb", "", "-rf", ".hidden"])
def test_run_name_must_be_a_plain_stem(tmp_path, name):
    code, text = cli("run", "softmax", "--out", tmp_path / "out", "--name", name)
    one_error_line(text, code, "--name")
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.json").exists()


def test_run_refuses_an_existing_results_name_without_force(tmp_path):
    save(tmp_path / "mine.json", document([record()]))
    before = snapshot(tmp_path)
    code, text = cli("run", "softmax", "--out", tmp_path, "--name", "mine")
    one_error_line(text, code, "exists; choose another --name or pass --force")
    assert snapshot(tmp_path) == before


def test_run_refuses_the_baseline_as_its_output_even_with_force(tmp_path):
    base = save(tmp_path / "base.json", document([record()]))
    before = snapshot(tmp_path)
    code, text = cli("run", "softmax", "--out", tmp_path, "--name", "base", "--force", "--baseline", base)
    one_error_line(text, code, "never replaced, even with --force")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("make", ["file", "under_file"])
def test_run_output_folder_that_cannot_be_written_fails_before_gpu_work(tmp_path, make):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = blocker if make == "file" else blocker / "sub"
    code, text = cli("run", "softmax", "--out", out)
    one_error_line(text, code, "is not a folder")


def test_report_refuses_to_write_over_its_input(tmp_path):
    a = save(tmp_path / "A.json", document([record()]))
    before = a.read_bytes()
    code, text = cli("report", a, "-o", a)
    one_error_line(text, code, "is one of the input files")
    assert a.read_bytes() == before


def test_report_refuses_to_write_over_another_results_file(tmp_path):
    a = save(tmp_path / "A.json", document([record()]))
    b = save(tmp_path / "B.json", document([record()]))
    before = b.read_bytes()
    code, text = cli("report", a, "-o", b)
    one_error_line(text, code, "is a bwbench results file")
    assert b.read_bytes() == before


def test_report_and_compare_refuse_to_write_over_a_file_of_another_kind(tmp_path):
    a = save(tmp_path / "A.json", document([record()]))
    b = save(tmp_path / "B.json", document([record()]))
    suite_file = tmp_path / "my_suite.py"
    suite_file.write_text("suite = None\n")
    for args in (("report", a, "-o", suite_file), ("compare", a, b, "--markdown", suite_file),
                 ("compare", a, b, "--json", suite_file)):
        code, text = cli(*args)
        one_error_line(text, code, "exists and is not a")
    assert suite_file.read_text() == "suite = None\n"
    page = tmp_path / "old.html"
    page.write_text("an earlier report")
    code, text = cli("report", a, "-o", page)
    assert code == 0 and page.read_text() != "an earlier report"


def test_a_link_is_written_through_and_stays_a_link(tmp_path):
    target = tmp_path / "real.html"
    target.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    outputs.write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_pipe_is_written_into_never_replaced_by_a_file(tmp_path):
    """`report -o /dev/stdout`, a FIFO: the bytes go through it, and it stays what it was (a
    rename over it would turn even /dev/null into a regular file)."""
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    outputs.write_text(fifo, "through")
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got == [b"through"]


def test_report_into_a_folder_is_one_line(tmp_path):
    a = save(tmp_path / "A.json", document([record()]))
    (tmp_path / "page.html").mkdir()
    code, text = cli("report", a, "-o", tmp_path / "page.html")
    one_error_line(text, code, "page.html")


@pytest.mark.parametrize("command", ["compare --json", "compare --markdown", "history -o"])
def test_an_output_that_is_a_folder_is_refused_before_the_table(tmp_path, command):
    """compare and history printed their whole table, then failed writing into the folder: the
    error came after the work, not as the one line bad input gets."""
    from bwbench.store import add_document

    base = save(tmp_path / "base.json", document([record()]))
    cur = save(tmp_path / "cur.json", document([record()]))
    add_document(base, tmp_path / "s.sqlite")
    (tmp_path / "out").mkdir()
    name, option = command.split()
    inputs = [base, cur] if name == "compare" else ["softmax", "--store", tmp_path / "s.sqlite"]
    code, text = cli(name, *inputs, option, tmp_path / "out")
    one_error_line(text, code, "is a folder")
    assert text.startswith("error:"), text


@pytest.mark.parametrize("option", ["--json", "--markdown"])
def test_compare_refuses_an_output_that_is_one_of_its_inputs(tmp_path, option):
    base = save(tmp_path / "base.json", document([record()]))
    cur = save(tmp_path / "cur.json", document([record()]))
    before = snapshot(tmp_path)
    for target in (base, cur):
        code, text = cli("compare", base, cur, option, target)
        one_error_line(text, code, "is one of the input files")
    assert snapshot(tmp_path) == before


def test_compare_refuses_both_outputs_on_one_file(tmp_path):
    base = save(tmp_path / "base.json", document([record()]))
    cur = save(tmp_path / "cur.json", document([record()]))
    code, text = cli("compare", base, cur, "--json", tmp_path / "v.txt", "--markdown", tmp_path / "v.txt")
    one_error_line(text, code, "name the same file")


def test_compare_refuses_both_outputs_on_stdout_before_reading_the_runs(tmp_path):
    """`--json - --markdown -` printed both formats into one stream, mixed: refused, even before
    the runs are read (these do not exist)."""
    code, text = cli("compare", tmp_path / "no-base.json", tmp_path / "no-cur.json", "--json", "-", "--markdown", "-")
    one_error_line(text, code, "stdout")


def test_compare_refuses_both_outputs_on_one_file_through_a_link(tmp_path):
    base = save(tmp_path / "base.json", document([record()]))
    cur = save(tmp_path / "cur.json", document([record()]))
    (tmp_path / "v.txt").write_text("old\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "v.txt")
    code, text = cli("compare", base, cur, "--json", tmp_path / "v.txt", "--markdown", tmp_path / "link.txt")
    one_error_line(text, code, "name the same file")
    assert (tmp_path / "v.txt").read_text() == "old\n"


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".csv", ".html"])
def test_run_refuses_a_store_that_is_one_of_its_own_files(tmp_path, suffix):
    """`--name x --store OUT/x.html`: the store was made, then replaced by the report (or the results
    file was opened as a store): refused before any GPU work."""
    code, text = cli("run", "softmax", "--quick", "--dry-run", "--out", tmp_path, "--name", "x",
                     "--store", tmp_path / f"x{suffix}")
    one_error_line(text, code, "name the same file")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["report", "history"])
def test_html_output_dash_is_refused_not_a_file_named_dash(tmp_path, monkeypatch, command):
    """`compare --json -` means stdout; `report -o -` and `history -o -` wrote a 2 MB file named '-'
    into the current folder instead."""
    monkeypatch.chdir(tmp_path)
    base = save(tmp_path / "base.json", document([record()]))
    args = ("report", base) if command == "report" else ("history", "softmax", "--store", tmp_path / "none.sqlite")
    code, text = cli(*args, "-o", "-")
    one_error_line(text, code, "stdout")
    assert not (tmp_path / "-").exists()


def test_compare_output_under_a_file_is_one_line_not_an_os_traceback(tmp_path):
    base = save(tmp_path / "base.json", document([record()]))
    cur = save(tmp_path / "cur.json", document([record()]))
    code, text = cli("compare", base, cur, "--json", tmp_path / "base.json" / "v.json")
    one_error_line(text, code, "is not a folder")


def test_two_writers_of_one_file_never_interleave(tmp_path):
    target = tmp_path / "page.html"
    texts = [c * 400_000 for c in "ab"]
    errors = []

    def write(text):
        try:
            for _ in range(20):
                outputs.write_text(target, text)
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=write, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert target.read_text() in texts, "one writer's whole file, never a mix"
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"], "no temporary file left behind"


def test_a_failed_write_leaves_the_old_file_untouched(tmp_path):
    target = tmp_path / "r.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with outputs.atomic_file(target) as fh:
            fh.write("half of the new")
            raise RuntimeError("disk trouble")
    assert target.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


def test_default_names_are_unique_and_skip_existing_files(tmp_path, monkeypatch):
    tags = iter(["aaaaaa", "aaaaaa", "bbbbbb"])
    monkeypatch.setattr(outputs, "unique_suffix", lambda: next(tags))
    first = outputs.results_stem(tmp_path, None, "softmax-h100-20260101-000000", force=False)
    (tmp_path / f"{first}.jsonl").write_text("taken")
    second = outputs.results_stem(tmp_path, None, "softmax-h100-20260101-000000", force=False)
    assert (first, second) == ("softmax-h100-20260101-000000-aaaaaa", "softmax-h100-20260101-000000-bbbbbb")


def test_the_record_stream_is_never_opened_over_an_existing_file(tmp_path):
    (tmp_path / "r.jsonl").write_text("someone else's")
    with pytest.raises(outputs.OutputError, match="exists"):
        ResultsWriter(tmp_path / "r.json", document())
    assert (tmp_path / "r.jsonl").read_text() == "someone else's"


# === append-only results ===========================================================================
def test_each_record_is_appended_never_rewriting_what_is_on_disk(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", document())
    stream = stream_path(tmp_path / "r.json")
    before = stream.read_bytes()
    growth = []
    for i in range(200):
        writer.add(record(case=f"rows=4096,cols={i + 1}"))
        now = stream.read_bytes()
        assert now.startswith(before), "earlier lines are never rewritten"
        growth.append(len(now) - len(before))
        assert now[len(before):].count(b"\n") == 1, "one line a record"
        before = now
    assert max(growth) < 2 * min(growth), "the cost of a record does not grow with the run"
    writer.finish()


def test_the_stream_is_readable_at_any_moment_under_either_name(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", document())
    writer.add(record("a"))
    writer.add(record("b"))
    for name in ("r.json", "r.jsonl"):
        doc = read_document(tmp_path / name)
        assert [r.impl for r in doc.records] == ["a", "b"] and not doc.complete and not doc.interrupted
    writer.finish()
    assert read_document(tmp_path / "r.jsonl").complete, "after the end the name of the stream finds the export"


def test_a_torn_last_line_is_ignored_with_a_warning(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", document())
    writer.add(record("a"))
    writer.add(record("b"))
    stream = stream_path(tmp_path / "r.json")
    stream.write_bytes(stream.read_bytes()[:-25])  # a kill -9 in the middle of writing "b"
    with pytest.warns(ResultsWarning, match="cut short"):
        doc = read_document(stream)
    assert [r.impl for r in doc.records] == ["a"]
    code, text = cli("report", stream, "-o", tmp_path / "page.html")
    assert code == 0 and "warning:" in text and "cut short" in text


def test_a_broken_line_in_the_middle_names_the_file_and_line(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", document())
    writer.add(record("a"))
    writer.add(record("b"))
    stream = stream_path(tmp_path / "r.json")
    lines = stream.read_text().splitlines()
    lines[1] = lines[1][:40]
    stream.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsFileError, match=r"r\.jsonl, line 2 is not valid JSON"):
        read_document(stream)


def test_a_line_cut_by_ctrl_c_is_dropped_before_the_next_one(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", document())
    writer.add(record("a"))
    writer._fh.write('{"record": {"suite": "soft')  # the write an interrupt cut short
    writer._fh.flush()
    writer.add(record("b"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.impl for r in read_document(stream_path(tmp_path / "r.json")).records] == ["a", "b"]
    writer.finish(interrupted=True)
    assert read_document(tmp_path / "r.json").interrupted


def test_a_record_changed_after_it_was_written_supersedes_its_line(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", document())
    rec = record("a")
    writer.add(rec)
    rec.extra = {"own_copy": {"gbps": 123.0}}  # what the run loop does after timing a case
    rec.telemetry = {"throttled": False}
    writer.flush()
    mid = read_document(stream_path(tmp_path / "r.json"))
    assert mid.records[0].extra == {"own_copy": {"gbps": 123.0}} and mid.records[0].telemetry == {"throttled": False}
    writer.document.environment["copy_gbps"] = 2900.0
    writer.finish()
    assert read_document(tmp_path / "r.json").environment["copy_gbps"] == 2900.0


def test_a_finished_run_is_one_json_document_without_nan_tokens(tmp_path):
    rec = record(gbps=math.inf)
    rec.check = {"passed": False, "max_abs_err": math.nan}
    save(tmp_path / "r.json", document([rec]))
    text = (tmp_path / "r.json").read_text()
    json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} written"))
    assert not (tmp_path / "r.jsonl").exists()
    again = read_document(tmp_path / "r.json").records[0]
    assert math.isinf(again.gbps) and math.isnan(again.check["max_abs_err"])


def test_an_old_single_json_file_with_nan_tokens_still_reads(tmp_path):
    data = document([record()]).to_dict()
    data["records"][0]["gbps"] = math.nan
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))  # Python's default: a bare NaN token
    assert math.isnan(read_document(path).records[0].gbps)


@pytest.mark.parametrize("at", [["environment"], ["records", 0, "stats"], ["records", 0, "gbps"], ["records", -1, "gbps"]])
def test_a_nonfinite_note_restores_only_a_null(tmp_path, at):
    """A hand-edited note pointing at an object (the environment, a record's stats) put NaN where
    a dict belongs and report/compare failed with an AttributeError; one pointing at a number
    replaced it. Only the null the writer left there takes the noted value back."""
    data = document([record()]).to_dict()
    data["nonfinite"] = [{"at": at, "was": "nan"}]
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    again = read_document(path)
    assert isinstance(again.environment, dict) and isinstance(again.records[0].stats, dict)
    assert again.records[0].gbps == 100.0
    code, text = cli("report", path, "-o", tmp_path / "p.html")
    assert code == 0, text


# === typed reading ==================================================================================
def results_text(mutate) -> str:
    data = document([record()]).to_dict()
    mutate(data)
    return json.dumps(data)


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["records"][0].update(gbps="fast"), "records[0].gbps"),
    (lambda d: d.update(environment=["H100"]), "environment"),
    (lambda d: d["records"][0].update(samples_us=[1.0, "x"]), "records[0].samples_us[1]"),
    (lambda d: d["records"][0].update(status="great"), "records[0]"),
    (lambda d: d["records"][0].update(suite=None), "records[0].suite"),
    (lambda d: d.update(records={"a": 1}), "records"),
    (lambda d: d.update(complete="yes"), "complete"),
])
def test_a_field_of_the_wrong_type_names_the_file_and_the_field(tmp_path, mutate, field):
    path = tmp_path / "bad.json"
    path.write_text(results_text(mutate))
    with pytest.raises(ResultsFileError, match="bad.json: field " + field.replace("[", r"\[").replace("]", r"\]")):
        read_document(path)
    code, text = cli("report", path, "-o", tmp_path / "p.html")
    one_error_line(text, code, f"bad.json: field {field}")


@pytest.mark.parametrize("mutate", [lambda d: d["records"][0].update(bytes_total=2**64),
                                    lambda d: d["environment"].update(peak_gbps=10**400)])
def test_an_integer_beyond_64_bits_is_one_line(tmp_path, mutate):
    """JSON integers have no bound: 10**400 failed converting to float in the report and 2**64
    binding to SQLite in `store import`, both with an OverflowError traceback."""
    path = tmp_path / "huge.json"
    path.write_text(results_text(mutate))
    for args in (("report", path, "-o", tmp_path / "p.html"), ("store", "import", path, "--store", tmp_path / "s.sqlite")):
        code, text = cli(*args)
        one_error_line(text, code, "huge.json: the integer")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.json"]


def test_an_integer_beyond_64_bits_in_the_stream_names_the_line(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", document())
    writer.add(record())
    stream = stream_path(tmp_path / "r.json")
    stream.write_text(stream.read_text().replace('"bytes_total":16777216', f'"bytes_total":{2**70}'))
    with pytest.raises(ResultsFileError, match="line 2: the integer 1180591620717411303424 is too large"):
        read_document(stream)


@pytest.mark.parametrize("suites,field", [
    ({"softmax": 5}, "suites.softmax"),
    ({"softmax": {"x_axis": ["cols"]}}, "suites.softmax.x_axis"),
    ({"softmax": {"implementations": 5}}, "suites.softmax.implementations"),
    ({"softmax": {"implementations": {"torch": "torch"}}}, "suites.softmax.implementations.torch"),
])
def test_suite_metadata_of_the_wrong_type_names_the_field(tmp_path, suites, field):
    """The suites' metadata is what reports read for axes and roles; of the wrong type it failed
    deep in the report with an AttributeError or TypeError traceback."""
    path = tmp_path / "bad.json"
    path.write_text(results_text(lambda d: d.update(suites=suites)))
    code, text = cli("report", path, "-o", tmp_path / "p.html")
    one_error_line(text, code, f"bad.json: field {field}:")


def test_a_wrong_type_in_the_stream_names_the_line(tmp_path):
    writer = ResultsWriter(tmp_path / "r.json", document())
    writer.add(record())
    stream = stream_path(tmp_path / "r.json")
    stream.write_text(stream.read_text().replace('"gbps":100.0', '"gbps":"100"'))
    with pytest.raises(ResultsFileError, match=r"line 2: field record\.gbps"):
        read_document(stream)


def test_unknown_fields_are_accepted(tmp_path):
    path = tmp_path / "future.json"
    path.write_text(results_text(lambda d: (d.update(added_later={"x": 1}),
                                            d["records"][0].update(new_metric=3.5))))
    assert read_document(path).records[0].gbps == 100.0


@pytest.mark.parametrize("content,message", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is a binary file"),
    ("caf\xe9".encode("latin-1"), "is not UTF-8 text"),
    (b"", "is empty"),
    (b"[" * 100_000, "nests too deeply"),
    (b'{"header": {"schema": "other/1"}}\n', "not a bwbench results file"),
    (b'{"record": {}}\n', "not valid JSON"),
])
def test_files_that_are_not_results_are_named_in_one_line(tmp_path, content, message):
    path = tmp_path / "input.json"
    path.write_bytes(content)
    code, text = cli("compare", path, path)
    one_error_line(text, code, "input.json")
    with pytest.raises(ResultsFileError) as err:
        read_document(path)
    assert "input.json" in str(err.value)
    if message != "not valid JSON":
        assert message in str(err.value)


def test_dev_zero_and_a_folder_are_refused_without_reading(tmp_path):
    for path, message in (("/dev/zero", "not a regular file"), (tmp_path, "is a folder")):
        code, text = cli("report", path, "-o", tmp_path / "p.html")
        one_error_line(text, code, message)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=cli("compare", fifo, fifo)), daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "reading a FIFO blocked"
    one_error_line(outcome["result"][1], outcome["result"][0], "not a regular file")


def test_a_file_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    import bwbench.safe_json

    path = save(tmp_path / "big.json", document([record()]))
    monkeypatch.setattr(bwbench.safe_json, "MAX_INPUT_BYTES", 1000)
    code, text = cli("compare", path, path)
    one_error_line(text, code, "more than the 1e-06 GB a results file may have")


# === checks before GPU work ===========================================================================
@pytest.mark.parametrize("args,message", [
    (("softmax", "--cols", "0"), "--cols 0: must be a positive integer"),
    (("softmax", "--cols", "-5"), "--cols -5: must be a positive integer"),
    (("softmax", "--rows", "4096", "--cols", "1e400"), "cannot read '1e400'"),
    (("softmax", "--rows", "1024.5"), "--rows takes integers (like 49152), not '1024.5'"),
    (("softmax", "--rows", "1.55e1"), "--rows takes integers (like 49152), not '1.55e1'"),
    (("softmax", "--cols", "99999999999"), "--cols 99999999999: must be at most 2,147,483,647"),
    (("dropout", "--p", "1.5"), "--p 1.5: must be a number above 0 and below 1 - 2^-17"),
    (("dropout", "--p", "0"), "--p 0.0: must be a number above 0 and below 1 - 2^-17"),
    (("dropout", "--p", "0.999999"), "--p 0.999999: must be a number above 0 and below 1 - 2^-17"),
    (("layernorm", "--eps", "-1"), "--eps -1.0: must be a positive finite number"),
    (("rmsnorm", "--eps", "nan"), "--eps nan: must be a positive finite number"),
    (("layernorm", "--eps", "inf"), "--eps inf: must be a positive finite number"),
    (("permute", "--shape", "0x5", "--perm", "1,0"), "--shape 0x5: dimension 0 (0) must be a positive integer"),
    (("permute", "--shape", "4x5", "--perm", "1,-1"), "--perm 1x-1"),
    (("bn_relu", "--shape", "2x3x5"), "--shape 2x3x5: must have 4 dimensions"),
    (("relu", "--direction", "sideways"), "--direction sideways: must be one of forward, backward"),
    (("softmax", "--max-drop", "150%", "--baseline", "x.json"), "threshold must be between 0% and 100%"),
    (("softmax", "--max-drop", "nan"), "cannot read 'nan' as a fraction"),
    (("softmax", "--min-copy-fraction", "7"), "--min-copy-fraction takes a fraction"),
    (("softmax", "--copy-size", "1e400"), "cannot read '1e400' as a size"),
    (("softmax", "--max-time", "nan"), "--max-time and --noise must be positive"),
    (("softmax", "--gpu", "-1"), "--gpu takes a device index of 0 or more"),
])
def test_bad_values_fail_before_any_gpu_work(tmp_path, args, message):
    code, text = cli("run", *args, "--out", tmp_path)
    one_error_line(text, code, message)
    assert "no CUDA GPU" not in text, "the check ran before the device was asked for"
    assert not list(tmp_path.iterdir())


def test_every_suite_declares_a_domain_for_every_axis():
    from bwbench.discovery import discover

    for name, suite in discover().items():
        assert set(suite.domains) == set(suite.axes), name


def test_a_suite_whose_own_values_break_its_domains_is_a_definition_error():
    from bwbench.domains import positive_int
    from bwbench.suite import Suite, SuiteDefinitionError

    with pytest.raises(SuiteDefinitionError, match="--cols 0"):
        Suite("s", "d", axes={"cols": [0, 32]}, domains={"cols": positive_int})
    with pytest.raises(SuiteDefinitionError, match="axes it does not have: depth"):
        Suite("s", "d", axes={"cols": [32]}, domains={"depth": positive_int})


# === plain text stays plain ===========================================================================
MARKUP = "[/] [enforce fail at alloc_cpu.cpp:117] [bold]x[/bold] \\"


def test_failure_reasons_and_names_print_as_written():
    rec = record(impl="[/]", status="failed", reason=MARKUP)
    text = render("\n".join(problems([rec])))
    assert MARKUP in " ".join(text.split()) and "[/]" in text
    assert "[/]" in render(summary_tables([rec, record(impl="copy")])[0])


def test_gpu_names_in_the_device_table_print_as_written():
    assert "[/] GPU [red]" in render(device_table({"gpu_name": "[/] GPU [red]", "gpu_index": 0}))


def test_comparison_table_and_gate_outputs_survive_markup_in_the_data(tmp_path):
    base = save(tmp_path / "base.json", document([record(impl="[/]"), record(impl="x[b]", case="[red]c")]))
    cur = save(tmp_path / "cur.json", document([record(impl="[/]", gbps=50.0, median=160.0),
                                                 record(impl="x[b]", case="[red]c")]))
    code, text = cli("compare", base, cur, "--all", "--json", tmp_path / "v.json", "--markdown", tmp_path / "v.md")
    assert code == 1 and "[/]" in text and "x[b]" in text  # the terminal shows axes as columns, not case ids
    assert json.loads((tmp_path / "v.json").read_text())["regression"] is True
    assert "[red]c" in (tmp_path / "v.json").read_text()
    assert "[/]" in (tmp_path / "v.md").read_text()
    comparisons = compare_runs(read_document(base), read_document(cur), 0.05)
    assert "[/]" in render(comparison_table(comparisons, 0.05, show_all=True))


def test_paths_and_arguments_with_markup_print_as_written(tmp_path):
    code, text = cli("report", tmp_path / "[bold]x[/].json")
    one_error_line(text, code, "[bold]x[/].json does not exist")
    code, text = cli("run", "[/]")
    one_error_line(text, code, "[/]: no such file or folder")


def test_a_file_that_is_no_python_is_no_suite(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("softmax at 4096 columns\n")
    code, text = cli("run", str(notes))
    one_error_line(text, code, "notes.txt: not a suite file (a *.py that defines `suite = Suite(...)`)")


# === gate verdicts on bad data ==========================================================================
@pytest.mark.parametrize("bad", [math.nan, math.inf, -100.0, 0.0, None])
def test_an_invalid_current_number_is_its_own_verdict_and_fails_the_gate(tmp_path, bad):
    base = save(tmp_path / "base.json", document([record()]))
    cur = save(tmp_path / "cur.json", document([record(gbps=bad)]))
    code, text = cli("compare", base, cur)
    assert code == 1 and "invalid" in text, text
    assert "no regression seen, but data is invalid or missing" in text and "no regression:" not in text, \
        "the headline does not read as a pass when the gate fails"
    code, text = cli("compare", base, cur, "--allow-partial")
    assert code == 0 and "invalid" in text


def test_an_invalid_baseline_number_is_invalid_too():
    c = judge(record(gbps=math.nan), record(), 0.05)
    assert c.verdict == "invalid" and "baseline GB/s is nan" in c.note


def test_an_interrupted_current_run_fails_the_gate_unless_partial_is_allowed(tmp_path):
    base = save(tmp_path / "base.json", document([record("a"), record("b")]))
    cur = save(tmp_path / "cur.json", document([record("a")]), interrupted=True)
    code, text = cli("compare", base, cur)
    assert code == 1 and "incomplete" in text and "the current run was interrupted" in text
    code, _ = cli("compare", base, cur, "--allow-partial")
    assert code == 0
    comparisons = compare_runs(read_document(base), read_document(cur), 0.05)
    assert {c.impl: c.verdict for c in comparisons} == {"a": "same", "b": "incomplete"}


def test_a_run_that_was_killed_is_partial_even_with_every_record(tmp_path):
    base = save(tmp_path / "base.json", document([record("a")]))
    writer = ResultsWriter(tmp_path / "cur.json", document())
    writer.add(record("a"))  # then killed: no end line
    cur = read_document(tmp_path / "cur.json")
    assert partial_runs(read_document(base), cur) == ["the current run did not finish (1 records)"]
    assert gate_fails(compare_runs(read_document(base), cur, 0.05), partial_runs(None, cur))
    code, _ = cli("compare", base, stream_path(tmp_path / "cur.json"))
    assert code == 1


def test_a_failed_or_invalid_record_never_passes_the_copy_floor():
    doc = document([record("ok", pct_copy=95.0), record("bad", status="failed"), record("nan", pct_copy=math.nan),
                    record("skip", status="skipped")])
    assert [v.impl for v in copy_fraction_violations(doc, 0.9)] == ["bad", "nan"]


def test_skipped_then_failed_is_a_new_failure_and_failed_twice_is_still_failing():
    failed = record(status="failed", reason="wrong result")
    assert judge(record(status="skipped", reason="no cuDNN"), failed, 0.05).verdict == "failed"
    assert judge(None, failed, 0.05).verdict == "failed"
    assert judge(record(status="failed"), failed, 0.05).verdict == "still failing"
    assert not gate_fails([judge(record(status="failed"), failed, 0.05)])
    assert gate_fails([judge(record(status="skipped"), failed, 0.05)])


# === statistics and gate boundaries ===================================================================
def test_statistics_of_skewed_samples():
    samples = [10.0] * 8 + [11.0, 40.0]  # a long right tail: mean 13.1, median 10
    s = summarize(samples, True)
    assert (s.min_us, s.median_us, s.max_us) == (10.0, 10.0, 40.0)
    assert s.p10_us == 10.0 and s.p90_us == pytest.approx(13.9)  # 11 + 0.1 * (40 - 11)
    assert s.mean_us == pytest.approx(13.1)
    assert s.noise == pytest.approx((13.9 - 10.0) / (2.5631 * 10.0)), "relative to the median, not the mean"
    assert s.median_error == pytest.approx(1.2533 * s.noise / math.sqrt(10))


def steady(median, n=40):
    return [median * (1 + 0.0005 * ((k * 7) % n - n / 2) / n) for k in range(n)]


@pytest.mark.parametrize("ratio,expected", [
    (0.95, "slower"),      # exactly at the threshold: a regression
    (0.9501, "same"),      # just inside it
    (1.05, "faster"),
    (1.0499, "same"),
])
def test_gate_boundaries(ratio, expected):
    base = record(gbps=100.0, median=100.0)
    base.samples_us = steady(100.0)
    cur = record(gbps=100.0 * ratio, median=100.0 / ratio)
    cur.samples_us = steady(100.0 / ratio)
    assert judge(base, cur, 0.05).verdict == expected


def test_verdict_listing_knows_every_verdict():
    from bwbench.console import VERDICT_STYLE
    from bwbench.gate import LISTING_ORDER, VERDICTS

    assert set(LISTING_ORDER) == set(VERDICTS) == set(VERDICT_STYLE)
    assert isinstance(Comparison, type)
