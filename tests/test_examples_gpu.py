"""The examples run on a GPU as a user would run them: checked, timed, recorded, exit 0."""

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("example,mine", [("triton_softmax.py", "triton"), ("raw_cuda_kernel.py", "raw_cuda")])
def test_example_suite_runs_checked_and_timed(example, mine, tmp_path):
    from typer.testing import CliRunner

    from bwbench.cli import app

    result = CliRunner().invoke(app, ["run", str(EXAMPLES / example), "--quick", "--max-time", "0.1",
                                      "--copy-size", "256MB", "--no-report", "-o", str(tmp_path), "--name", "ex"])
    assert result.exit_code == 0, result.output
    records = json.loads((tmp_path / "ex.json").read_text())["records"]
    timed = [r for r in records if r["impl"] == mine]
    assert timed and all(r["status"] == "ok" and r["role"] == "test" and r["gbps"] > 0 for r in timed), timed
    if mine == "triton":
        assert all(r["build_s"] > 0 for r in timed)  # compile and autotune, outside the timing
        assert {r["impl"] for r in records} >= {"copy", "triton", "torch", "bwbench"}
