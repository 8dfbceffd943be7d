"""The case loop through a Session on the CPU (fake timer): roles, inexact baselines, records that
are complete when written, the disturbed flag, picklable work, and profile's identical inputs."""

import pickle

import pytest
import torch

from bwbench import Suite
from bwbench.results import read_document
from bwbench.session import SuitePlan, WorkItem, fails_run
from bwbench.suite import default_role, kind_order

from fakes import cpu_session

SUITE_FILE = '''
import torch
from bwbench import Suite, Traffic, Tolerance

suite = Suite("scale", "y = 2x", axes={"n": [1000, 4097]}, dtypes=["float32"],
              tolerances={"float32": Tolerance(rtol=1e-6, atol=1e-6)})

SEEN = []

@suite.inputs
def inputs(case, gen):
    return {"x": torch.randn(case.n, generator=gen, device=gen.device)}

@suite.reference
def reference(x):
    return 2 * x.double()

@suite.traffic
def traffic(case):
    return Traffic(read=4 * case.n, write=4 * case.n)

@suite.impl("mine", kind="triton")
def mine(case):
    def run(x):
        SEEN.append(x.clone())
        return 2 * x
    return run

@suite.impl("sloppy", kind="torch")
def sloppy(case):
    return lambda x: 2 * x + 1e-3

@suite.impl("buggy", kind="my_library")
def buggy(case):
    return lambda x: 3 * x
'''


@pytest.fixture
def suite_file(tmp_path):
    path = tmp_path / "scale.py"
    path.write_text(SUITE_FILE)
    return path


def test_roles_by_kind_and_explicit():
    assert default_role("torch") == "baseline" and default_role("liger") == "baseline"
    assert default_role("triton") == "test" and default_role("anything_else") == "test"
    suite = Suite("s", "d", axes={"n": [1]})
    suite.impl("theirs", kind="cuda", baseline=True)(lambda case: None)
    suite.impl("mine", kind="torch", baseline=False)(lambda case: None)
    suite.impl("liger", kind="liger")(lambda case: None)
    assert suite.implementations["theirs"].role == "baseline"
    assert suite.implementations["mine"].role == "test"
    assert suite.describe()["implementations"]["liger"]["role"] == "baseline"


def test_kind_order_keeps_known_kinds_first_then_user_kinds_by_name():
    assert kind_order(["zeta", "torch", "cuda", "alpha", "triton", "torch"]) == \
        ["cuda", "triton", "torch", "alpha", "zeta"]


def test_wrong_code_under_test_fails_an_inexact_baseline_is_timed(suite_file, tmp_path):
    from bwbench.discovery import get_suite

    suite = get_suite(str(suite_file))
    out = tmp_path / "run.json"
    seen = []
    document = cpu_session().run([SuitePlan(suite, list(suite.implementations.values()), suite.cases())],
                                 output=out, on_record=seen.append)
    by = {(r.case, r.impl): r for r in document.records}
    for n in (1000, 4097):
        mine, sloppy, buggy = (by[(f"n={n}", name)] for name in ("mine", "sloppy", "buggy"))
        assert mine.status == "ok" and mine.role == "test" and not mine.inexact and mine.gbps
        assert mine.build_s is not None and mine.build_s >= 0
        assert sloppy.status == "ok" and sloppy.role == "baseline" and sloppy.inexact
        assert sloppy.gbps and sloppy.pct_copy and "inexact baseline" in sloppy.reason
        assert sloppy.check["max_abs_err"] == pytest.approx(1e-3, rel=1e-3)
        assert buggy.status == "failed" and buggy.role == "test" and "wrong result" in buggy.reason
        assert by[(f"n={n}", "copy")].role is None
    assert [fails_run(r) for r in document.records].count(True) == 2
    assert not any(fails_run(r) for r in document.records if r.impl != "buggy")
    assert len(seen) == len(document.records) == 8
    on_disk = read_document(out)
    assert on_disk.complete and [r.to_dict() for r in on_disk.records] == [r.to_dict() for r in document.records]


def test_records_are_complete_when_handed_over(suite_file):
    """What the callback (a fleet worker streaming records) receives is never changed afterwards."""
    from bwbench.discovery import get_suite

    suite = get_suite(str(suite_file))
    snapshots = []
    document = cpu_session().run([SuitePlan(suite, list(suite.implementations.values()), suite.cases())],
                                 on_record=lambda r: snapshots.append(pickle.dumps(r)))
    assert [pickle.loads(s) for s in snapshots] == document.records


def test_disturbed_is_a_flag_not_only_text(suite_file):
    from bwbench.discovery import get_suite

    suite = get_suite(str(suite_file))
    plan = SuitePlan(suite, [suite.implementations["mine"]], suite.cases()[:1])
    calm = cpu_session().run([plan]).records
    noisy = cpu_session(samples=[10.0, 10.0, 20.0, 20.0, 20.0, 30.0]).run([plan]).records
    assert not any(r.disturbed for r in calm)
    assert all(r.disturbed for r in noisy if r.status == "ok")


def test_work_items_pickle_and_resolve_in_another_process_by_file(suite_file):
    from bwbench.discovery import get_suite

    suite = get_suite(str(suite_file))
    item = SuitePlan(suite, [suite.implementations["mine"]], suite.cases()).work_item()
    again = pickle.loads(pickle.dumps(item))
    assert isinstance(again, WorkItem) and again.suite == str(suite_file.resolve())
    document = cpu_session().run([again])
    assert {r.impl for r in document.records} == {"copy", "mine"}
    assert pickle.loads(pickle.dumps(document)).records == document.records


def test_the_same_seed_gives_the_same_inputs_whatever_the_order(suite_file):
    from bwbench.discovery import get_suite

    suite = get_suite(str(suite_file))
    impl = [suite.implementations["mine"]]
    a = cpu_session(seed=7).run([SuitePlan(suite, impl, suite.cases())]).records
    b = cpu_session(seed=7).run([SuitePlan(suite, impl, list(reversed(suite.cases())))]).records
    c = cpu_session(seed=8).run([SuitePlan(suite, impl, suite.cases())]).records
    seeds = lambda recs: {r.case: r.input_seed for r in recs if r.impl == "mine"}
    assert seeds(a) == seeds(b) and seeds(a) != seeds(c)


def test_profile_child_regenerates_exactly_the_checked_inputs(suite_file):
    """The ncu child loads the suite from the same file and rebuilds the inputs from the record's
    seed: the inputs it profiles equal, bit for bit, those the run checked and timed."""
    import sys

    from bwbench.discovery import get_suite
    from bwbench.profile import prepare_target, target_spec

    suite = get_suite(str(suite_file))
    seen = sys.modules[suite.make_inputs.__module__].SEEN
    seen.clear()
    specs = []

    def hook(case, impl, fields):
        specs.append(target_spec(suite, case, impl.name, fields["input_seed"], gpu=0))
        return {"profile": {"spec": "kept"}}

    document = cpu_session(seed=3).run([SuitePlan(suite, [suite.implementations["mine"]], suite.cases())],
                                       after_timing=hook)
    assert all(r.extra["profile"] == {"spec": "kept"} for r in document.records if r.impl == "mine")
    checked = {x.numel(): x for x in seen}  # the build's first call and the check see the run's inputs
    for spec in specs:
        fn, inputs = prepare_target(spec, "cpu")
        assert torch.equal(inputs["x"], checked[spec["params"]["n"]])
        assert torch.equal(fn(**inputs), 2 * inputs["x"])


def test_cli_run_exit_code_follows_the_code_under_test(suite_file, tmp_path, monkeypatch):
    """`bwbench run FILE` on the CPU session: an inexact baseline is shown and timed but the run
    exits 0; a wrong implementation under test makes it exit 1."""
    from typer.testing import CliRunner

    from bwbench.cli import app
    from bwbench.session import Session

    monkeypatch.setattr(Session, "open", classmethod(lambda cls, gpu=0, settings=None, **kw: cpu_session()))
    monkeypatch.setenv("COLUMNS", "200")
    args = ["run", str(suite_file), "--no-report", "-o", str(tmp_path), "--name"]
    ok = CliRunner().invoke(app, [*args, "ok", "--impl", "mine,sloppy"])
    assert ok.exit_code == 0, ok.output
    assert "inexact" in ok.output and "sloppy" in ok.output
    assert read_document(tmp_path / "ok.json").complete
    bad = CliRunner().invoke(app, [*args, "bad"])
    assert bad.exit_code == 1, bad.output
    assert "FAILED" in bad.output and "buggy" in bad.output


def _half_suite(**extra):
    """y = x in float16, and a second output of float32 statistics where `extra` declares it."""
    from bwbench import Traffic

    suite = Suite("half_copy", "y = x", axes={"n": [64]}, dtypes=["float16"], **extra)
    two = "output_dtypes" in extra

    @suite.inputs
    def inputs(case, gen):
        return {"x": torch.randn(case.n, generator=gen, device=gen.device).to(case.torch_dtype)}

    @suite.reference
    def reference(x):
        return (x.double(), x.double().sum().reshape(1)) if two else x.double()

    @suite.traffic
    def traffic(case):
        return Traffic(read=2 * case.n, write=2 * case.n)

    return suite


def _run(suite, impls):
    for name, fn in impls.items():
        suite.impl(name, kind="triton")(lambda case, fn=fn: fn)
    document = cpu_session().run([SuitePlan(suite, list(suite.implementations.values()), suite.cases())])
    return {r.impl: r for r in document.records}


def test_an_output_in_another_dtype_than_the_case_fails_its_check_naming_both():
    """A float32 (or float64) result of a float16 case was promoted and compared with the float64
    reference, so it passed: it holds more than a float16 kernel stores, and was never checked as one."""
    by = _run(_half_suite(), {"right": lambda x: x.clone(), "f32": lambda x: x.float(), "f64": lambda x: x.double()})
    assert by["right"].status == "ok"
    for name, got in (("f32", "float32"), ("f64", "float64")):
        assert by[name].status == "failed", by[name].reason
        assert f"output 0 is {got}, expected float16" in by[name].reason


def test_declared_output_dtypes_let_statistics_be_float32_and_hold_them_to_it():
    """A normalization's float32 statistics next to a half y: declared, they pass; in half they fail."""
    suite = _half_suite(output_dtypes=(None, "float32"))
    by = _run(suite, {"right": lambda x: (x.clone(), x.float().sum().reshape(1)),
                      "half_stats": lambda x: (x.clone(), x.sum().reshape(1))})
    assert by["right"].status == "ok", by["right"].reason
    assert by["half_stats"].status == "failed" and "output 1 is float16, expected float32" in by["half_stats"].reason


def test_a_boolean_reference_output_expects_a_boolean_output():
    """The case's dtype is the default of a float reference output only: a mask keeps its own."""
    from bwbench import Traffic

    suite = Suite("positive", "mask = x > 0", axes={"n": [64]}, dtypes=["float16"])
    suite.inputs(lambda case, gen: {"x": torch.randn(case.n, generator=gen, device=gen.device).half()})
    suite.reference(lambda x: x > 0)
    suite.traffic(lambda case: Traffic(read=2 * case.n, write=case.n))
    by = _run(suite, {"mask": lambda x: x > 0, "bytes": lambda x: (x > 0).to(torch.uint8)})
    assert by["mask"].status == "ok", by["mask"].reason
    assert by["bytes"].status == "failed" and "output 0 is uint8, expected bool" in by["bytes"].reason


@pytest.mark.parametrize("declared", ["float32", ["half"], [], [1]])
def test_output_dtypes_must_name_dtypes_one_per_output(declared):
    from bwbench.suite import SuiteDefinitionError

    with pytest.raises(SuiteDefinitionError, match="output_dtypes"):
        Suite("s", "d", axes={"n": [1]}, output_dtypes=declared)


def test_output_dtypes_of_another_length_than_the_reference_fail_the_case_not_the_run():
    by = _run(_half_suite(output_dtypes=(None, "float32", "float32")), {"right": lambda x: x})
    assert by["right"].status == "failed" and "output_dtypes names 3 dtypes for its 2 reference outputs" in by["right"].reason
