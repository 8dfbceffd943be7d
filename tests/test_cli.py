"""The command line as a user meets it: help, listing, and clear errors with exit code 2."""

import json
import sys

import pytest
from typer.testing import CliRunner

from bwbench.cli import app, parse_axis_args, parse_size, UsageError

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def test_help_explains_every_command():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("run", "list", "info", "report"):
        assert command in result.output
    run_help = invoke("run", "--help").output
    for option in ("--dtype", "--impl", "--quick", "--timing", "--cols", "--axis", "--out"):
        assert option in run_help


def test_run_help_names_the_fleet_extra_to_install():
    """--gpus said "(needs bwbench)": the help is rich markup, which took "[fleet]" for a style tag."""
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    assert "needs bwbench[fleet]" in result.output, result.output


@pytest.mark.parametrize("args, words", [
    (("rn",), "No such command 'rn'"),
    (("run", "softmax", "--max-time", "x"), "--max-time"),
    (("run",), "Missing argument"),
    (("info", "--bogus"), "--bogus"),
    (("store", "bogus"), "No such command 'bogus'"),
])
def test_click_usage_errors_are_one_line_and_exit_2(args, words):
    """Errors click finds before any bwbench code runs read like bwbench's own: no framed box."""
    result = invoke(*args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], result.output


def test_list_shows_the_softmax_suite():
    result = invoke("list")
    assert result.exit_code == 0
    assert "softmax" in result.output and "naive" in result.output and "cudnn" in result.output


def test_list_names_each_suites_presets(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    result = invoke("list")
    assert result.exit_code == 0
    lines = [line for line in result.output.splitlines() if "presets:" in line]
    assert any("models, odd" in line for line in lines), result.output
    assert len(lines) >= 6, "softmax, log_softmax, softmax_backward, layernorm, rmsnorm and bn_relu have presets"


@pytest.mark.parametrize("args,message", [
    (("run", "nope"), "no suite named 'nope'; suites: "),
    (("run", "softmax,nope"), "no suite named 'nope'; suites: "),
    (("run", ","), "name a suite"),
    (("run", "softmax,permute", "--cols", "64"), "no axis 'cols'"),
    (("run", "softmax", "--impl", "fast"), "valid: naive, cudnn, torch, compiled"),
    (("run", "softmax", "--dtype", "int8"), "valid: float16, bfloat16, float32"),
    (("run", "softmax", "--depth", "3"), "no axis 'depth'; axes: rows, cols"),
    (("run", "softmax", "--cols", "wide"), "cannot read 'wide'"),
    (("run", "softmax", "--cols"), "as an axis it needs values, e.g. --cols 1024,4096"),
    (("run", "softmax", "--verbose"), "--verbose is no option of this command"),
    (("run", "softmax", "--timing", "lukewarm"), "--timing must be one of cold, hot"),
    (("run", "softmax", "--copy-size", "lots"), "cannot read 'lots' as a size"),
    (("report", "missing.json"), "does not exist"),
])
def test_bad_input_is_a_message_and_exit_code_2(args, message):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_dry_run_lists_what_would_be_measured_and_touches_nothing(tmp_path):
    out = tmp_path / "never"
    result = invoke("run", "softmax,layernorm", "--preset", "models", "--impl", "optimized,compiled",
                    "--dtype", "float16,float32", "--dry-run", "--out", str(out))
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "rows=4096,cols=50257" in text and "rows=16384,cols=12288" in text
    # softmax 7 cases and layernorm 12, in two dtypes, each with two implementations and the copy
    assert f"{(7 + 12) * 2 * 3} measurements" in text
    assert not out.exists(), "a dry run writes nothing"
    bad = invoke("run", "softmax", "--cols", "0", "--dry-run")
    assert bad.exit_code == 2 and "must be a positive integer" in bad.output


def test_run_all_names_every_suite_once():
    from bwbench.discovery import discover, resolve

    assert [s.name for s in resolve("all")] == list(discover())
    assert [s.name for s in resolve("relu, softmax,relu")] == ["relu", "softmax"]


def test_run_without_a_gpu_says_so(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = invoke("run", "softmax", "--quick")
    assert result.exit_code == 2
    assert "no CUDA GPU is available" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert invoke("info").exit_code == 2


@pytest.mark.parametrize("index", ["-1", "7"])
def test_info_on_a_gpu_that_does_not_exist_says_so(monkeypatch, index):
    """`info --gpu -1` on a GPU machine went past the index check to torch.device("cuda", -1), a
    RuntimeError traceback (run checks its own --gpu first; info and profile did not)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    result = invoke("info", "--gpu", index)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: GPU index {index} does not exist (this machine has 2)"), result.output


def test_axis_arguments_in_every_spelling():
    assert parse_axis_args(["--cols", "1024,4096", "--rows=7"], ["dtype_axis=a,b"]) == {
        "dtype_axis": ["a", "b"], "cols": ["1024", "4096"], "rows": ["7"]}
    assert parse_axis_args(["--shape", "2x3;4x5"], []) == {"shape": ["2x3", "4x5"]}
    with pytest.raises(UsageError):
        parse_axis_args(["cols"], [])
    with pytest.raises(UsageError):
        parse_axis_args([], ["cols"])


@pytest.mark.parametrize("text,expected", [("4GB", 4_000_000_000), ("512MiB", 512 * 2**20), ("1e9", 10**9), ("100", 100)])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("args", [("run", "softmax", "--dry-run", "--copy-size", "1.5.5"),
                                  ("run", "softmax", "--dry-run", "--copy-size", "0.5"),
                                  ("info", "--copy-size", "."),
                                  ("compare", "a.json", "b.json", "--min-bytes", "1..2MB")])
def test_a_malformed_or_fractional_byte_size_is_one_line(args):
    """'1.5.5' passed the size pattern and failed in float() with a traceback; '0.5' bytes of copy
    passed as positive and became a copy of 0 bytes."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: cannot read {args[-1]!r} as a") and len(result.output.splitlines()) == 1


def test_report_without_plotly_is_a_message_not_a_traceback(tmp_path, monkeypatch):
    from test_results import document, record

    from bwbench.results import ResultsWriter

    doc = document()
    doc.records = [record("torch")]
    path = tmp_path / "run.json"
    ResultsWriter(path, doc).finish()
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly now raises ImportError
    result = invoke("report", str(path), "-o", str(tmp_path / "out.html"))
    assert result.exit_code == 2
    assert "plotly" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out.html").exists()


def test_report_command_builds_html_from_a_results_file(tmp_path):
    from test_results import document, record

    from bwbench.results import ResultsWriter

    doc = document()
    doc.records = [record("torch"), record("naive", status="failed")]
    path = tmp_path / "run.json"
    ResultsWriter(path, doc).finish()
    result = invoke("report", str(path), "-o", str(tmp_path / "out.html"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out.html").stat().st_size > 100_000, "plotly.js is inlined"
    not_results = tmp_path / "other.json"
    not_results.write_text(json.dumps({"hello": 1}))
    assert invoke("report", str(not_results)).exit_code == 2
    doc.records = []  # a run stopped before its first record: no page of nothing
    ResultsWriter(tmp_path / "empty.json", doc).finish()
    result = invoke("report", str(tmp_path / "empty.json"), "-o", str(tmp_path / "empty.html"))
    assert result.exit_code == 2 and "no records to report" in result.output, result.output
    assert not (tmp_path / "empty.html").exists()


@pytest.mark.parametrize("args", [("run", "softmax", "--dry-run", "--impl", ""), ("run", "softmax", "--dry-run", "--impl", ","),
                                  ("run", "softmax", "--dry-run", "--dtype", " ")])
def test_an_option_given_but_naming_nothing_is_refused_not_read_as_all(args):
    """`--impl "$IMPLS"` with the variable unset would otherwise time every implementation."""
    result = invoke(*args)
    assert result.exit_code == 2 and "names nothing" in result.output, result.output


@pytest.mark.parametrize("args", [(["--rows", "4096", "--rows", "8"], []), (["--rows", "8"], ["rows=4096"]),
                                  ([], ["rows=4096", "rows=8"])])
def test_an_axis_given_twice_is_refused_not_the_last_one_kept(args):
    extra, axis = args
    with pytest.raises(UsageError, match="given twice"):
        parse_axis_args(extra, axis)


@pytest.mark.parametrize("args, option", [
    (["run", "softmax", "--impl", "torch", "--impl", "naive", "--dry-run"], "--impl"),
    (["run", "softmax", "-i", "torch", "--impl=naive", "--dry-run"], "--impl"),
    (["run", "softmax", "--dtype", "float16", "-d", "float32", "--dry-run"], "--dtype"),
    (["compare", "a.json", "b.json", "--max-drop", "5%", "--max-drop", "1%"], "--max-drop"),
    (["store", "import", "a.json", "--store", "x.sqlite", "--store", "y.sqlite"], "--store"),
])
def test_a_one_value_option_given_twice_is_refused_not_the_last_one_kept(args, option, tmp_path, monkeypatch):
    """`--impl mine --impl torch` measured torch alone: click keeps the last of a repeated option."""
    monkeypatch.chdir(tmp_path)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert f"{option} is given twice" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, hint", [
    (["run", "softmax", "--gpus", "0", "--gpus", "1", "--dry-run"], "--gpus a,b"),  # help says "0,1,...", not the phrase
    (["report", "a.json", "-s", "softmax", "--suite", "layer_norm"], "--suite a,b"),
    (["history", "softmax", "--dtype", "float16", "--dtype", "bfloat16"], "--dtype a,b"),
    (["compare", "a.json", "b.json", "--max-drop", "5%", "--max-drop", "1%"], None),
])
def test_a_list_option_given_twice_is_told_to_join_its_values(args, hint):
    """Whether an option takes a list was guessed from 'omma-separated' in its help text: --gpus,
    whose help says '0,1,...', got no hint; the option now declares it (its metavar, shown in --help)."""
    result = invoke(*args)
    assert result.exit_code == 2 and "given twice" in result.output, result.output
    assert (hint in result.output) if hint else ("comma-separated" not in result.output)


def test_list_options_show_their_shape_in_help():
    assert "A,B" in " ".join(invoke("history", "--help").output.split())


def test_repeatable_options_and_a_value_that_looks_like_an_option_still_work():
    assert invoke("run", "softmax", "--axis", "cols=1024", "--axis", "rows=64", "--dry-run").exit_code == 0
    result = invoke("run", "softmax", "--impl", "torch", "--name", "--impl", "--dry-run")
    assert "given twice" not in result.output


def test_version_is_printed_without_any_work():
    import bwbench

    result = invoke("--version")
    assert result.exit_code == 0 and result.output.strip() == f"bwbench {bwbench.__version__}"
