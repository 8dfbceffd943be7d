"""The results schema: generated from the record types, versioned with them, and read leniently
(added fields ignored, older versions accepted) but strictly where a field is malformed."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bwbench import results
from bwbench.cli import app
from bwbench.results import SCHEMA, read_document
from bwbench.schema import fields_digest, json_schema, schema_text

from fakes import cpu_session

DOCS = Path(__file__).resolve().parent.parent / "docs" / "results-schema.json"


def test_committed_schema_is_current():
    assert DOCS.read_text() == schema_text(), "regenerate: python -m bwbench.schema > docs/results-schema.json"


def test_version_changes_when_fields_do():
    assert fields_digest() == results.FIELDS_DIGEST, (
        "Record/Check/RunDocument fields changed: bump results.SCHEMA_VERSION, set FIELDS_DIGEST to "
        f"{fields_digest()!r} and regenerate docs/results-schema.json")
    assert json_schema()["x-schema-version"] == results.SCHEMA_VERSION


def a_run(tmp_path):
    import torch

    from bwbench import Suite, Traffic
    from bwbench.session import SuitePlan

    suite = Suite("double", "y = 2x", axes={"n": [16]}, dtypes=["float32"])
    suite.inputs(lambda case, gen: {"x": torch.randn(case.n, generator=gen)})
    suite.reference(lambda x: 2 * x.double())
    suite.traffic(lambda case: Traffic(4 * case.n, 4 * case.n))
    suite.impl("mine", kind="triton")(lambda case: (lambda x: 2 * x))
    suite.impl("off", kind="torch")(lambda case: (lambda x: 2 * x + 1))
    path = tmp_path / "run.json"
    cpu_session().run([SuitePlan(suite, list(suite.implementations.values()), suite.cases())], output=path)
    return path


def test_a_written_file_validates_and_round_trips(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    path = a_run(tmp_path)
    data = json.loads(path.read_text())
    jsonschema.validate(data, json_schema())
    assert data["schema"] == SCHEMA
    again = read_document(path)
    assert again.to_dict() == data
    assert {r.impl: r.inexact for r in again.records} == {"copy": False, "mine": False, "off": True}


def test_readers_ignore_added_fields_and_read_older_versions(tmp_path):
    path = a_run(tmp_path)
    data = json.loads(path.read_text())
    data["made_by_a_newer_bwbench"] = True
    for rec in data["records"]:
        rec["a_field_from_the_future"] = [1, 2]
    path.write_text(json.dumps(data))
    assert len(read_document(path).records) == 3
    old = {"schema": "bwbench.results/1", "environment": {}, "options": {}, "suites": {}, "complete": True,
           "records": [{k: v for k, v in rec.items() if k not in ("role", "inexact", "disturbed", "build_s",
                                                                   "input_seed", "a_field_from_the_future")}
                       for rec in data["records"]]}
    path.write_text(json.dumps(old))
    records = read_document(path).records
    assert [r.role for r in records] == [None, None, None] and not any(r.inexact for r in records)


@pytest.mark.parametrize("field,value,says", [
    ("gbps", "fast", "records[1].gbps"),
    ("impl", None, "records[1].impl"),
    ("params", [1], "records[1].params"),
])
def test_a_malformed_file_is_exit_2_with_file_and_field(tmp_path, field, value, says):
    path = a_run(tmp_path)
    data = json.loads(path.read_text())
    if value is None:
        del data["records"][1][field]
    else:
        data["records"][1][field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=str(bad).replace(".", r"\.")):
        read_document(bad)
    result = CliRunner().invoke(app, ["compare", str(path), str(bad)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "bad.json" in text and says in text and "Traceback" not in text
