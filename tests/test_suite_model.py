import re

import pytest

from bwbench.discovery import BrokenSuite, discover, get_suite
from bwbench.suite import (Case, SelectionError, Suite, SuiteDefinitionError, Traffic, format_value,
                           parse_like, pow2)


def make_suite(**kw):
    suite = Suite("demo", "a demo", axes={"rows": [8, 16], "cols": [32, 64, 128]},
                  dtypes=["float16", "float32"], quick={"cols": [32]}, **kw)
    suite.inputs(lambda case, gen: {})
    suite.reference(lambda **inputs: None)
    suite.traffic(lambda case: Traffic(case.rows * case.cols * case.itemsize, case.rows * case.cols * case.itemsize))

    @suite.impl("a", kind="torch")
    def a(case):
        """First implementation."""
        return lambda: None

    @suite.impl("b", kind="naive", unsupported=lambda case: "too wide" if case.cols > 64 else None)
    def b(case):
        return lambda: None

    return suite


def test_pow2():
    assert pow2(32, 32768) == [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert pow2(3, 9) == [4, 8]
    with pytest.raises(SuiteDefinitionError):
        pow2(10, 1)


def test_sweep_is_the_cartesian_product_in_order():
    cases = make_suite().cases()
    assert [c.id for c in cases] == ["rows=8,cols=32", "rows=8,cols=64", "rows=8,cols=128",
                                     "rows=16,cols=32", "rows=16,cols=64", "rows=16,cols=128"]
    assert {c.dtype for c in cases} == {"float16"}, "only the default dtype unless asked"


def test_filters_dtypes_axes_and_quick():
    suite = make_suite()
    assert len(suite.cases(dtypes=["float16", "float32"])) == 12
    cases = suite.cases(axis_values={"cols": [1000]})
    assert [(c.rows, c.cols) for c in cases] == [(8, 1000), (16, 1000)]
    assert [c.cols for c in suite.cases(quick=True)] == [32, 32]
    with pytest.raises(SelectionError, match="no axis 'depth'; axes: rows, cols"):
        suite.cases(axis_values={"depth": [1]})
    with pytest.raises(SelectionError, match="valid: float16, float32"):
        suite.cases(dtypes=["int8"])


def test_parse_axis_values_follows_the_declared_type():
    suite = make_suite()
    assert suite.parse_axis_values("cols", ["1024", "4097"]) == [1024, 4097]
    assert parse_like("32x2048x2048", (1, 2, 3)) == (32, 2048, 2048)
    assert parse_like("0,2,1", (0, 1, 2)) == (0, 2, 1)
    assert format_value((32, 2048)) == "32x2048"
    with pytest.raises(SelectionError, match="cannot read 'wide'"):
        suite.parse_axis_values("cols", ["wide"])


def test_a_yes_or_no_axis_reads_true_and_false_words_and_refuses_any_other():
    assert [parse_like(t, False) for t in ("true", "Yes", "1", "FALSE", "no", "0")] == [True, True, True,
                                                                                      False, False, False]
    with pytest.raises(ValueError, match="cannot read 'maybe' as true or false"):
        parse_like("maybe", True)


def test_an_axis_of_integers_reads_a_whole_number_written_any_way_and_refuses_a_fraction_plainly():
    """`--rows 1024.0` was 'cannot read' and `--rows 1.55e1` was swept as 15: a whole number reads
    as the integer it is, exactly (float() would be off past 2^53), and a fraction says integers."""
    suite = make_suite()
    assert suite.parse_axis_values("cols", ["1024.0", "1e3", "1.5e3", "12345678901234567e0"]) == \
        [1024, 1000, 1500, 12345678901234567]
    for text in ("1024.5", "1.55e1", "0.5"):
        with pytest.raises(SelectionError, match=f"--cols takes integers \\(like 32\\), not '{text}'"):
            suite.parse_axis_values("cols", [text])
    for text in ("1e400", "nan", "inf", "wide"):
        with pytest.raises(SelectionError, match=f"cannot read '{text}'"):
            suite.parse_axis_values("cols", [text])


def test_implementation_selection_and_skip_reasons():
    suite = make_suite()
    assert [i.name for i in suite.select_impls(None)] == ["a", "b"]
    assert [i.name for i in suite.select_impls(["b"])] == ["b"]
    with pytest.raises(SelectionError, match="valid: a, b"):
        suite.select_impls(["c"])
    b = suite.implementations["b"]
    assert b.skip_reason(Case("demo", {"rows": 8, "cols": 128}, "float16")) == "too wide"
    assert b.skip_reason(Case("demo", {"rows": 8, "cols": 64}, "float16")) is None
    assert suite.implementations["a"].description == "First implementation."


def test_bad_definitions_are_refused():
    with pytest.raises(SuiteDefinitionError):
        Suite("x", "", axes={})
    with pytest.raises(SuiteDefinitionError):
        Suite("x", "", axes={"n": [1]}, dtypes=["float8"])
    suite = make_suite()
    with pytest.raises(SuiteDefinitionError, match="kind"):
        suite.impl("c", kind="")
    with pytest.raises(SuiteDefinitionError, match="taken"):
        suite.impl("copy", kind="torch")
    incomplete = Suite("y", "", axes={"n": [1]})
    with pytest.raises(SuiteDefinitionError, match="inputs, reference, traffic"):
        incomplete.check_complete()


def test_case_attributes():
    case = Case("demo", {"rows": 8, "cols": 33}, "bfloat16")
    assert (case.rows, case.cols, case.itemsize, case.id) == (8, 33, 2, "rows=8,cols=33")
    assert str(case) == "demo[rows=8,cols=33, bfloat16]"
    with pytest.raises(AttributeError):
        case.depth


def test_softmax_suite_is_discovered_with_its_default_sweep():
    suite = get_suite("softmax")
    cases = suite.cases()
    assert [c.cols for c in cases] == pow2(32, 32768)
    assert {c.rows for c in cases} == {49152} and {c.dtype for c in cases} == {"float16"}
    assert {"naive", "cudnn", "torch", "compiled"} <= set(suite.implementations)
    assert {"naive", "cudnn", "torch", "compiled"} <= {i.kind for i in suite.implementations.values()}


@pytest.mark.parametrize("rows,cols,dtype,expected", [
    (49152, 1024, "float16", 2 * 49152 * 1024 * 2),
    (3, 33, "float32", 2 * 3 * 33 * 4),
    (1, 1, "bfloat16", 4),
])
def test_softmax_bytes_are_one_read_and_one_write(rows, cols, dtype, expected):
    suite = get_suite("softmax")
    traffic = suite.compute_traffic(Case("softmax", {"rows": rows, "cols": cols}, dtype))
    assert traffic.read == traffic.write and traffic.total == expected


def test_broken_suite_files_are_listed_not_hidden(tmp_path):
    (tmp_path / "good.py").write_text(
        "from bwbench.suite import Suite\nsuite = Suite('good', 'ok', axes={'n': [1]})\n")
    (tmp_path / "bad.py").write_text("raise ImportError('needs a thing')\n")
    (tmp_path / "_helper.py").write_text("x = 1\n")
    found = discover(tmp_path)
    assert set(found) == {"good", "bad"}
    assert isinstance(found["bad"], BrokenSuite) and "needs a thing" in found["bad"].error
    with pytest.raises(SelectionError, match="could not be loaded"):
        get_suite("bad", tmp_path)


def point_suite():
    suite = Suite("perm", "permute", axes={}, points=[
        {"shape": (4, 8, 16), "perm": (0, 2, 1)},
        {"shape": (4, 8, 16), "perm": (1, 0, 2)},
        {"shape": (2, 3, 4, 5), "perm": (2, 3, 0, 1)},
    ], dtypes=["float32", "int8"], quick={"shape": [(4, 8, 16)]})
    return suite


def test_explicit_points_are_not_a_cartesian_product():
    suite = point_suite()
    assert suite.axes == {"shape": [(4, 8, 16), (2, 3, 4, 5)], "perm": [(0, 2, 1), (1, 0, 2), (2, 3, 0, 1)]}
    assert [c.id for c in suite.cases()] == ["shape=4x8x16,perm=0x2x1", "shape=4x8x16,perm=1x0x2",
                                             "shape=2x3x4x5,perm=2x3x0x1"]
    assert len(suite.cases(quick=True)) == 2


def test_points_filtered_by_some_axes_or_replaced_by_all():
    suite = point_suite()
    assert [c.perm for c in suite.cases(axis_values={"perm": [(0, 2, 1)]})] == [(0, 2, 1)]
    mine = suite.cases(axis_values={"shape": [(32, 64, 64)], "perm": [(0, 2, 1)]})
    assert [(c.shape, c.perm) for c in mine] == [((32, 64, 64), (0, 2, 1))]
    with pytest.raises(SelectionError, match="give every axis"):
        suite.cases(axis_values={"shape": [(9, 9)]})


def test_an_implementation_may_declare_its_own_bytes():
    suite = make_suite()

    @suite.impl("bitmask", kind="cuda", traffic=lambda case: Traffic(1, 2))
    def bitmask(case):
        return lambda: None

    case = suite.cases()[0]
    assert suite.traffic_of(suite.implementations["bitmask"], case) == Traffic(1, 2)
    assert suite.traffic_of(suite.implementations["a"], case) == suite.compute_traffic(case)


def test_records_carry_the_mask_memory_an_implementation_declares(tmp_path):
    """Every record of an implementation that declares its mask memory carries it, even one made
    without a GPU (here the inputs fail, so nothing is timed); the others carry None."""
    from bwbench.results import ResultsWriter, RunDocument, read_document
    from bwbench.runner import Runner, RunSettings

    suite = make_suite()

    @suite.impl("bitmask", kind="cuda", mask_bytes=lambda case: 125)
    def bitmask(case):
        return lambda: None

    @suite.inputs
    def broken_inputs(case, gen):
        raise RuntimeError("no inputs on this machine")

    writer = ResultsWriter(tmp_path / "run.json", RunDocument({}, {}, {}))
    runner = Runner("cpu", None, writer, RunSettings(), None)
    records = runner.run_case(suite, suite.cases()[0], list(suite.implementations.values()))
    assert {r.impl: r.mask_bytes for r in records} == {"copy": None, "a": None, "b": None, "bitmask": 125}
    assert all(r.status == "failed" for r in records)
    saved = {r.impl: r.mask_bytes for r in read_document(tmp_path / "run.json").records}
    assert saved["bitmask"] == 125 and saved["a"] is None


def test_tuple_axes_read_one_tuple_from_comma_separated_cli_values():
    suite = point_suite()
    assert suite.parse_axis_values("perm", ["0", "2", "1"]) == [(0, 2, 1)]
    assert suite.parse_axis_values("perm", ["0x2x1", "1x0x2"]) == [(0, 2, 1), (1, 0, 2)]
    assert suite.parse_axis_values("shape", ["32x2048x2048"]) == [(32, 2048, 2048)]


def test_validate_rejects_user_cases_that_make_no_sense():
    suite = point_suite()
    suite.validate(lambda case: None if len(case.perm) == len(case.shape) else "perm and shape ranks differ")
    with pytest.raises(SelectionError, match="ranks differ"):
        suite.cases(axis_values={"shape": [(4, 8)], "perm": [(0, 2, 1)]})
    assert len(suite.cases()) == 3


def test_a_suite_output_check_replaces_the_reference_comparison():
    import torch

    from bwbench.runner import Runner

    suite = make_suite()
    case = suite.cases()[0]
    out, ref = torch.ones(4), torch.zeros(4, dtype=torch.float64)
    assert not Runner._judge(suite, case, {}, out, ref).passed, "without a hook: compared with the reference"
    suite.check_outputs(lambda case, inputs, outputs: (bool(outputs.sum() == 4), "four ones"))
    judged = Runner._judge(suite, case, {}, out, ref)
    assert judged.passed and judged.message == "four ones"
    suite.check_outputs(lambda case, inputs, outputs: 1 / 0)
    broken = Runner._judge(suite, case, {}, out, ref)
    assert not broken.passed and "ZeroDivisionError" in broken.message


def test_every_compiled_implementation_compiles_per_case_with_a_fresh_cache(monkeypatch):
    """Each suite's `compiled` resets dynamo and compiles once for its case, with static shapes."""
    import torch

    from bwbench.discovery import get_suite

    events = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: events.append("reset"))
    monkeypatch.setattr(torch, "compile", lambda fn, dynamic=None: events.append(("compile", dynamic)) or fn)
    for name in ("softmax", "log_softmax", "softmax_backward", "layernorm", "rmsnorm", "permute"):
        suite = get_suite(name)
        case = suite.cases(quick=True)[0]
        events.clear()
        fn = suite.implementations["compiled"].build(case)
        assert callable(fn) and events == ["reset", ("compile", False)], name


@pytest.mark.parametrize("read, write, says", [(-1, 0, "negative"), (4.5, 8, "whole number"), ("4096", 8, "whole number"),
                                               (True, 8, "whole number"), (0, 0, "some bytes")])
def test_traffic_takes_whole_non_negative_bytes(read, write, says):
    with pytest.raises(ValueError, match=says):
        Traffic(read=read, write=write)


def test_traffic_accepts_numpy_integers():
    import numpy as np

    assert Traffic(read=np.int64(8), write=0).total == 8


BROKEN_TRAFFIC = """
import torch
from bwbench import Suite, Traffic

suite = Suite("mine", "y = 2 x", axes={"n": [1024, 4096]}, domains={"n": lambda v: None if v > 0 else "must be positive"})

@suite.inputs
def inputs(case, gen):
    return {"x": torch.randn(case.n, generator=gen)}

@suite.reference
def reference(x):
    return 2 * x.double()

@suite.traffic
def traffic(case):
    return BODY

@suite.impl("torch", kind="torch")
def double(case):
    return lambda x: 2 * x
"""


@pytest.mark.parametrize("body, says", [("case.n * 8", "returned int"), ("(case.n, case.n)", "returned tuple"),
                                        ("Traffic(read=-case.n, write=0)", "raised ValueError"),
                                        ("case.N", "raised AttributeError")])
def test_a_broken_traffic_function_is_refused_before_any_gpu_work(tmp_path, body, says):
    """Called for every case by plan and `run` (a dry run too), on the CPU: a traceback after the
    sweep has begun becomes exit 2 naming the file and the line."""
    from typer.testing import CliRunner

    import bwbench
    from bwbench.cli import app

    path = tmp_path / "mine.py"
    path.write_text(BROKEN_TRAFFIC.replace("BODY", body))
    with pytest.raises(bwbench.SuiteDefinitionError, match=says):
        bwbench.plan(str(path))
    result = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--out", str(tmp_path / "out")])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and says in text and "Traceback" not in result.output, result.output
    line = BROKEN_TRAFFIC.splitlines().index("    return BODY" if "raised" in says else "@suite.traffic") + 1
    assert f"mine.py:{line}:" in text, "the line that raised, else where the function is declared"
    assert not (tmp_path / "out").exists()


def test_a_value_the_user_gave_that_the_byte_model_refuses_is_a_selection_error(tmp_path):
    """A suite without a domain for an axis: `--n 0` sizes no bytes. That is the user's value, so
    it is named as such (exit 2), not reported as a broken suite definition."""
    from typer.testing import CliRunner

    import bwbench
    from bwbench.cli import app

    path = tmp_path / "mine.py"
    source = BROKEN_TRAFFIC.replace(', domains={"n": lambda v: None if v > 0 else "must be positive"}', "")
    path.write_text(source.replace("BODY", "Traffic(read=4 * case.n, write=4 * case.n)"))
    with pytest.raises(bwbench.SelectionError, match="cannot take n=0"):
        bwbench.plan(str(path), n=[0, 8])
    result = CliRunner().invoke(app, ["run", str(path), "--n", "8,0", "--dry-run"])
    assert result.exit_code == 2 and "cannot take n=0" in result.output and "broken" not in result.output
    assert len(bwbench.plan(str(path), n=8)[0].cases) == 1


def _doubling_suite(name: str, **impl_options) -> Suite:
    import torch

    suite = Suite(name, "y = 2 x", axes={"n": [8]}, dtypes=["float32"])
    suite.inputs(lambda case, gen: {"x": torch.randn(case.n, generator=gen, device=gen.device)})
    suite.reference(lambda x: 2 * x.double())
    suite.traffic(lambda case: Traffic(4 * case.n, 4 * case.n))
    suite.impl("mine", kind="cuda", **impl_options)(lambda case: (lambda x: 2 * x))
    return suite


@pytest.mark.parametrize("options, says", [
    ({"traffic": lambda case: 1 // 0}, "implementation 'mine': traffic(n=8) raised ZeroDivisionError"),
    ({"traffic": lambda case: (32, 32)}, "implementation 'mine': traffic(n=8) returned tuple"),
    ({"mask_bytes": lambda case: 2.5}, "implementation 'mine': mask_bytes(n=8) returned float"),
    ({"mask_bytes": lambda case: -1}, "not a whole number of bytes"),
])
def test_an_implementations_own_byte_functions_are_checked_before_any_gpu_work(options, says):
    """The run calls them for every case as it calls the suite's traffic: a broken one is a
    SuiteDefinitionError from plan, not a traceback once the sweep has begun."""
    import bwbench

    with pytest.raises(SuiteDefinitionError, match=re.escape(says)):
        bwbench.plan(_doubling_suite("own_bytes", **options))


def test_numpy_byte_counts_end_up_in_a_readable_results_file(tmp_path):
    """np.int64 bytes are whole numbers: accepted, and written as JSON ints instead of a TypeError
    from the writer after the case was measured."""
    import numpy as np

    import bwbench
    from bwbench.results import read_document

    from fakes import cpu_session

    suite = _doubling_suite("numpy_bytes", traffic=lambda case: Traffic(np.int64(32), np.int64(32)),
                            mask_bytes=lambda case: np.int64(1))
    document = cpu_session().run(bwbench.plan(suite), output=tmp_path / "r.json")
    mine = [r for r in read_document(tmp_path / "r.json").records if r.impl == "mine"]
    assert document.complete and [(r.status, r.bytes_total, r.mask_bytes) for r in mine] == [("ok", 64, 1)]


@pytest.mark.parametrize("rtol, atol", [(float("nan"), 0.0), (1e-3, float("inf")), (-1e-3, 0.0), ("1e-3", 0.0),
                                         (None, 0.0)])
def test_a_tolerance_is_finite_and_not_negative(rtol, atol):
    """NaN or infinity as a bound passes every element, a NaN output too: a wrong kernel would pass."""
    with pytest.raises(ValueError, match="finite number, 0 or more"):
        bwbench_tolerance(rtol=rtol, atol=atol)


@pytest.mark.parametrize("tolerance", [1e-3, (1e-3, 1e-6), ()])
def test_a_suites_tolerances_are_tolerances(tolerance):
    """A bare number would raise AttributeError in every check, after the GPU work began."""
    with pytest.raises(SuiteDefinitionError, match="tolerance of 'float16'"):
        Suite("tol", "d", axes={"n": [1]}, tolerances={"float16": tolerance})


def bwbench_tolerance(**kw):
    from bwbench import Tolerance

    return Tolerance(**kw)


@pytest.mark.parametrize("kw, says", [
    ({"name": 3}, "name must be non-empty text"),
    ({"name": "mine,theirs"}, "name must be non-empty text"),
    ({"axes": {"n": "abc"}}, "axis 'n' must be a non-empty list of values, not str"),
    ({"axes": {"n": 4096}}, "axis 'n' must be a non-empty list of values, not int"),
    ({"axes": [("n", [1])]}, "dict of name -> list of values"),
    ({"axes": {"n": [{1}]}}, "not a number, text or tuple"),
    ({"axes": {"n": [1, {"a": 1}]}}, "axis 'n': {'a': 1} is a dict, not a number, text or tuple"),
    ({"axes": {"n": [(1, [2])]}}, "axis 'n': [2] is a list, not a number, text or tuple"),
    ({"presets": {"big": [{"n": [{"a": 1}]}]}}, "preset 'big' axis 'n': {'a': 1} is a dict"),
    ({"points": [{"n": {"a": 1}}]}, "point {'n': {'a': 1}}: {'a': 1} is a dict"),
    ({"points": [{1: 2}]}, "axis name 1 must be text without ',' or '='"),
    ({"points": [{"n,m": 2}]}, "axis name 'n,m' must be text without ',' or '='"),
    ({"quick": {"n": []}}, "quick axis 'n' must be a non-empty list"),
    ({"presets": {"big": [{"n": 8192}]}}, "preset 'big' axis 'n' must be a non-empty list"),
    ({"dtypes": []}, "dtypes must be a list of dtype names"),
    ({"dtypes": "float16"}, "dtypes must be a list of dtype names, not 'float16'"),
    ({"dtypes": ["float16", "float32"], "default_dtypes": "float32"}, "default_dtypes must be a list of its dtypes"),
    ({"default_dtypes": ["float32"]}, "default_dtypes must be a list of its dtypes"),
    ({"x_axis": "cols"}, "x_axis 'cols' is not an axis"),
    ({"tolerances": {"fp16": bwbench_tolerance(rtol=1e-2, atol=0.0)}}, "a tolerance for 'fp16', which is no dtype"),
])
def test_a_suite_declared_with_the_wrong_shapes_is_a_definition_error(kw, says):
    """Each of these passed Suite(...) and went wrong later: "abc" swept as three cases a, b, c, a
    default dtype string as the dtypes 'f', 'l', 'o', ..., an int name wrote a results file its own
    reader refuses, an empty quick axis or dtype list ran nothing and passed."""
    args = {"name": "mine", "axes": {"n": [1024]}, **kw}
    with pytest.raises(SuiteDefinitionError, match=re.escape(says)):
        Suite(args.pop("name"), "d", **args)


@pytest.mark.parametrize("name", [3, "", "a,b"])
def test_an_implementation_name_is_text_that_can_be_selected(name):
    with pytest.raises(SuiteDefinitionError, match="name must be non-empty text without commas"):
        Suite("mine", "d", axes={"n": [1]}).impl(name, kind="torch")


@pytest.mark.parametrize("axis", ["count", "impl", "timing", "source"])
def test_an_axis_named_like_a_results_column_is_refused(axis):
    """The frame of bwbench.run and bwbench.load put the axis values under their names, then the
    record's own field or statistic over them: a `count` axis showed the sample count."""
    with pytest.raises(SuiteDefinitionError, match=f"axis name '{axis}' is a column of the results"):
        Suite("mine", "d", axes={"rows": [8], axis: [1, 2]})


def test_numpy_axis_values_are_plain_values_in_the_results_file(tmp_path):
    """list(np.arange(...)) holds np.int64: the writer raised TypeError after the first record."""
    import numpy as np

    import bwbench
    from bwbench.results import read_document

    from fakes import cpu_session

    suite = Suite("numpy_axes", "d", axes={"n": list(np.arange(8, 10))}, dtypes=["float32"])
    suite.inputs(_doubling_suite("donor").make_inputs)
    suite.reference(lambda x: 2 * x.double())
    suite.traffic(lambda case: Traffic(4 * case.n, 4 * case.n))
    suite.impl("mine", kind="cuda")(lambda case: (lambda x: 2 * x))
    assert suite.axes == {"n": [8, 9]} and all(type(v) is int for v in suite.axes["n"])
    cpu_session().run(bwbench.plan(suite), output=tmp_path / "r.json")
    assert [r.params for r in read_document(tmp_path / "r.json").records if r.impl == "mine"] == [{"n": 8}, {"n": 9}]


def test_a_file_or_folder_named_like_a_suite_does_not_hide_it_and_a_bare_folder_is_a_path(tmp_path, monkeypatch):
    from bwbench.discovery import listing, resolve

    monkeypatch.chdir(tmp_path)
    (tmp_path / "softmax").write_text("notes")
    (tmp_path / "all").mkdir()
    assert [s.name for s in resolve("softmax")] == ["softmax"]
    assert "softmax" in listing("softmax")
    assert len(resolve("all")) > 1, "`all` stays every suite"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "double.py").write_text(BROKEN_TRAFFIC.replace("BODY", "Traffic(read=case.n * 4, write=case.n * 4)"))
    assert [s.name for s in resolve("mine")] == ["mine"], "a bare folder name that names no suite"
    assert list(listing("mine")) == ["mine"]


def test_a_value_named_twice_is_measured_once():
    import bwbench

    [plan] = bwbench.plan("softmax", impls="torch,torch,naive", dtypes="float16,float16", rows=[4096], cols=[1024, 1024, 32])
    assert [i.name for i in plan.impls] == ["torch", "naive"]
    assert [(c.cols, c.dtype) for c in plan.cases] == [(1024, "float16"), (32, "float16")]


def test_a_suite_file_may_not_take_a_known_suites_name(tmp_path):
    """Results and the history store key records by suite name: a file's own `softmax` would be
    read as bwbench's."""
    from bwbench.discovery import SuiteCollision, resolve
    from bwbench.paths import suites_dir

    path = tmp_path / "mine.py"
    path.write_text(BROKEN_TRAFFIC.replace("BODY", "Traffic(read=case.n * 4, write=case.n * 4)")
                    .replace('Suite("mine"', 'Suite("softmax"'))
    with pytest.raises(SuiteCollision, match="names its suite 'softmax'"):
        resolve(str(path))
    assert [s.name for s in resolve(str(suites_dir() / "softmax.py"))] == ["softmax"], "bwbench's own file is itself"


@pytest.mark.parametrize("name", [5, "torch,eager", " "])
def test_reuse_under_a_new_name_takes_only_names_that_can_be_selected(name):
    """suite.reuse("softmax", "torch", name=5) registered an implementation keyed by an int (a results
    file its own reader refuses) and name="a,b" one that `--impl a,b` can never select."""
    mine = Suite("mine", "d", axes={"rows": [4], "cols": [8]})
    with pytest.raises(SuiteDefinitionError, match="name must be non-empty text without commas"):
        mine.reuse("softmax", "torch", name=name)
    assert not mine.implementations
    assert mine.reuse("softmax", "torch", name="eager").name == "eager"


@pytest.mark.parametrize("name", ["../evil", "mine/v2", "all", "bench.py", "..", "~x"])
def test_a_suite_name_that_reads_as_a_path_or_all_is_refused(name):
    """`bwbench run NAME` could never select it, and the default results file OUT/NAME-GPU-TIME.json
    of a name with a separator lands outside OUT (or in a folder that does not exist)."""
    with pytest.raises(SuiteDefinitionError, match="may not read as a path"):
        Suite(name, "d", axes={"n": [1]})


def test_the_default_results_stem_is_one_file_name_inside_out():
    from bwbench.cli import _default_stem

    for name in ("../evil", "a\\b", "my suite", ".."):
        stem = _default_stem(name, "NVIDIA H100")
        assert "/" not in stem and "\\" not in stem and not stem.startswith(".") and " " not in stem
