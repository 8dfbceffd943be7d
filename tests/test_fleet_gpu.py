"""Fleet runs on a GPU machine: the worker adapter on the real run loop, and `run --gpus all`."""

from __future__ import annotations

import json

import pytest

from bwbench.fleet.request import RunRequest
from bwbench.fleet.worker import RecordStream, measure_on_this_gpu

pytestmark = pytest.mark.gpu


def test_the_adapter_streams_checked_timed_records_of_this_gpu():
    """measure_on_this_gpu, without Dask: environment first, then each case's start and its records."""
    import torch

    events = []
    request = RunRequest(suites=("softmax",), impls=("optimized",), dtypes=("float16",), axes={"cols": ["1024"]},
                         quick=True, max_time=0.2, copy_bytes=256 * 2**20)
    measure_on_this_gpu(request, RecordStream("here", events.append))
    assert events[0]["event"] == "environment"
    env = json.loads(events[0]["json"])
    assert env["gpu_uuid"] == "GPU-" + str(torch.cuda.get_device_properties(0).uuid).removeprefix("GPU-")
    assert env["copy_gbps"] > 0 and env["identity"]["uuid"] == env["gpu_uuid"]
    assert isinstance(env["gpu_index"], int)
    kinds = [e["event"] for e in events[1:]]
    assert kinds and kinds[0] == "case" and kinds.count("case") == kinds.count("records")
    rows = [row for e in events if e["event"] == "records" for row in json.loads(e["json"])]
    assert {r["impl"] for r in rows} == {"copy", "optimized"}
    assert all(r["status"] == "ok" and r["pct_copy"] > 0 for r in rows)


def test_run_on_every_gpu_of_this_host_writes_one_document(tmp_path):
    pytest.importorskip("distributed")
    from typer.testing import CliRunner

    from bwbench.cli import app
    from bwbench.fleet.request import visible_gpus
    from bwbench.results import read_document

    result = CliRunner().invoke(app, ["run", "softmax", "--quick", "--impl", "optimized", "--dtype", "float16",
                                      "--cols", "1024,4096", "--max-time", "0.2", "--copy-size", "256MB",
                                      "--gpus", "all", "--out", str(tmp_path), "--name", "fleet", "--no-report"])
    assert result.exit_code == 0, result.output
    doc = read_document(tmp_path / "fleet.json")
    assert doc.complete and len(doc.gpus) == len(visible_gpus())
    assert all(g["status"] == "done" and g["environment"]["identity"]["serial"] for g in doc.gpus)
    assert {r.gpu_uuid for r in doc.records} == {g["gpu_uuid"] for g in doc.gpus}
    assert all(r.status == "ok" for r in doc.records)
    assert doc.health is not None and "fleet health" in result.output
