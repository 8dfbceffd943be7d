"""The public API on the CPU: bench's arithmetic against the copy timed through the same timer,
run() returning a DataFrame and writing the results file it is given."""

import pytest
import torch

import bwbench
from bwbench.results import read_document
from bwbench.session import Session

from fakes import cpu_session


def test_bench_reports_median_bandwidth_and_percent_of_a_copy_timed_the_same_way():
    session = cpu_session(us=10.0)
    x = torch.ones(1000)
    result = session.bench(lambda: x * 2, nbytes=8000)
    assert result.median_us == pytest.approx(10.0)
    assert result.gbps == pytest.approx(8000 / 10e-6 / 1e9)
    assert result.copy_gbps == pytest.approx(result.gbps)  # the fake times the copy at the same 10 µs
    assert result.pct_copy == pytest.approx(100.0)
    assert len(result.samples_us) == 5 and result.mode == "cold"
    assert result.writeback_us == 0.0  # part of median_us, as the timer measured it (none here)
    assert "GB/s" in str(result)
    with pytest.raises(ValueError, match="mode"):
        session.bench(lambda: None, nbytes=8000, mode="warm")
    with pytest.raises(ValueError, match="bytes"):
        session.bench(lambda: None, nbytes=0)


@pytest.mark.parametrize("kwargs,error,message", [
    ({"bytes": 0}, ValueError, "bytes must be a positive whole number"),
    ({"bytes": -8}, ValueError, "bytes must be a positive whole number"),
    ({"bytes": 1.5}, ValueError, "bytes must be a positive whole number"),
    ({"bytes": True}, ValueError, "bytes must be a positive whole number"),
    ({"bytes": "8000"}, ValueError, "bytes must be a positive whole number"),
    ({"bytes": 8000, "mode": "warm"}, ValueError, "mode must be one of cold, hot"),
    ({"bytes": 8000, "timer": "stopwatch"}, Exception, "the timer must be one of"),
    ({"bytes": 8000, "max_time": 0}, ValueError, "max_time must be a positive number"),
    ({"bytes": 8000, "noise": "0.1"}, ValueError, "noise must be a positive number"),
    ({"bytes": 8000, "gpu": "1"}, ValueError, "gpu must be a GPU index"),
])
def test_bench_rejects_bad_arguments_before_any_gpu_work(monkeypatch, kwargs, error, message):
    def no_gpu_work(*args, **kw):
        raise AssertionError("a session was opened for arguments that were never valid")

    monkeypatch.setattr(Session, "open", classmethod(no_gpu_work))
    with pytest.raises(error, match=message):
        bwbench.bench(lambda: None, **kwargs)
    with pytest.raises(TypeError, match="fn must be a callable"):
        bwbench.bench("torch.softmax", bytes=8000)


def test_bench_takes_whole_numbers_of_bytes_of_any_numeric_type():
    import numpy as np

    from bwbench.session import check_bench_arguments

    assert check_bench_arguments(print, np.int64(8000), "cold") == 8000
    assert check_bench_arguments(print, 8e3, "hot") == 8000


def test_plan_is_what_run_would_measure_without_a_gpu():
    plans = bwbench.plan("softmax", impls="optimized,torch", dtypes="float16", preset="odd")
    [softmax] = plans
    assert [i.name for i in softmax.impls] == ["optimized", "torch"]
    assert {(c.rows, c.cols) for c in softmax.cases} >= {(49152, 31), (1024, 262144)}
    with pytest.raises(bwbench.suite.SelectionError, match="no axis 'colz'"):
        bwbench.plan("softmax", colz=5)


def test_run_returns_a_frame_and_writes_the_file_it_is_given(tmp_path, monkeypatch):
    monkeypatch.setattr(Session, "open", classmethod(lambda cls, gpu=0, settings=None, **kw: cpu_session()))
    suite = bwbench.Suite("double", "y = 2x", axes={"n": [16, 33]}, dtypes=["float32"])
    suite.inputs(lambda case, gen: {"x": torch.randn(case.n, generator=gen)})
    suite.reference(lambda x: 2 * x.double())
    suite.traffic(lambda case: bwbench.Traffic(4 * case.n, 4 * case.n))
    suite.impl("mine", kind="triton")(lambda case: (lambda x: 2 * x))
    suite.impl("eager", kind="torch")(lambda case: (lambda x: x + x))
    out = tmp_path / "double.json"
    frame = bwbench.run(suite, impls="mine,eager", n=[33], output=out)
    assert sorted(frame["impl"]) == ["copy", "eager", "mine"]
    assert set(frame["n"]) == {33}
    assert set(frame.loc[frame.impl != "copy", "role"]) == {"test", "baseline"}
    assert read_document(out).complete
    frame = bwbench.run(suite, n="16")
    assert set(frame["n"]) == {16} and len(frame) == 3
    with pytest.raises(bwbench.suite.SelectionError):
        bwbench.run(suite, impls="nope")


def test_keyword_axis_values_from_numpy_are_swept_as_plain_values_and_an_empty_list_is_refused(tmp_path, monkeypatch):
    """cols=np.array([...]) was one case holding the array, np.int64 crashed the results writer
    after the first record, and cols=[] planned no case at all, so the run measured nothing and passed."""
    import numpy as np

    monkeypatch.setattr(Session, "open", classmethod(lambda cls, gpu=0, settings=None, **kw: cpu_session()))
    suite = bwbench.Suite("triple", "y = 3x", axes={"n": [16]}, dtypes=["float32"])
    suite.inputs(lambda case, gen: {"x": torch.randn(case.n, generator=gen)})
    suite.reference(lambda x: 3 * x.double())
    suite.traffic(lambda case: bwbench.Traffic(4 * case.n, 4 * case.n))
    suite.impl("mine", kind="cuda")(lambda case: (lambda x: 3 * x))
    [plan] = bwbench.plan(suite, n=np.array([8, 32]))
    assert [c.params for c in plan.cases] == [{"n": 8}, {"n": 32}] and type(plan.cases[0].n) is int
    frame = bwbench.run(suite, n=np.int64(8), output=tmp_path / "r.json")
    assert set(frame["n"]) == {8} and read_document(tmp_path / "r.json").complete
    with pytest.raises(bwbench.SelectionError, match="needs at least one value"):
        bwbench.plan(suite, n=[])


@pytest.mark.gpu
def test_bench_agrees_with_run_on_torch_softmax():
    """Done-when of the public API: bench on torch.softmax at (49152, 4096) float16 within 2% of
    what `run` records for the same implementation, in the same process."""
    x = torch.randn(49152, 4096, device="cuda", dtype=torch.float16)
    frame = bwbench.run("softmax", impls="torch", cols=4096, rows=49152)
    row = frame[frame.impl == "torch"].iloc[0]
    result = bwbench.bench(lambda: torch.softmax(x, dim=-1), bytes=2 * x.numel() * x.element_size())
    print(f"\nbench {result.median_us:.2f} us ({result.pct_copy:.1f}% of copy), run {row['median_us']:.2f} us "
          f"({row['pct_copy']:.1f}% of copy)")
    assert abs(result.median_us / row["median_us"] - 1) < 0.02, (result.median_us, row["median_us"])
    assert abs(result.pct_copy / row["pct_copy"] - 1) < 0.03


@pytest.mark.parametrize("keyword, value", [("impls", 5), ("dtypes", 5), ("preset", 5), ("impls", ["torch", 3])])
def test_names_of_the_wrong_type_are_a_selection_error(keyword, value):
    with pytest.raises(bwbench.SelectionError, match=f"{keyword}= takes names"):
        bwbench.plan("softmax", **{keyword: value})


def test_names_as_a_string_a_list_or_a_tuple_select_alike():
    by_text = bwbench.plan("softmax", impls="torch,naive", dtypes="float16", preset="models")
    by_list = bwbench.plan("softmax", impls=("torch", "naive"), dtypes=["float16"], preset=["models"])
    assert [i.name for i in by_text[0].impls] == [i.name for i in by_list[0].impls] == ["torch", "naive"]
    assert by_text[0].cases == by_list[0].cases


def _doubling_suite():
    suite = bwbench.Suite("doubling", "y = 2x", axes={"n": [16]}, dtypes=["float32"])
    suite.inputs(lambda case, gen: {"x": torch.randn(case.n, generator=gen)})
    suite.reference(lambda x: 2 * x.double())
    suite.traffic(lambda case: bwbench.Traffic(4 * case.n, 4 * case.n))
    suite.impl("mine", kind="cuda")(lambda case: (lambda x: 2 * x))
    return suite


def test_run_never_replaces_a_file_unless_forced_and_checks_its_output_before_any_gpu_work(tmp_path, monkeypatch):
    """run(output=...) replaced an earlier results file, or any file at all (a suite file, notes.txt)
    with JSON, and a folder failed only after the session had measured the copy ceiling."""
    opened = []
    monkeypatch.setattr(Session, "open", classmethod(lambda cls, gpu=0, settings=None, **kw: opened.append(1)
                                                     or cpu_session()))
    suite = _doubling_suite()
    first = tmp_path / "r.json"
    bwbench.run(suite, output=first)
    kept = first.read_text()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    opened.clear()
    for output, message in ((first, "exists"), (tmp_path / "r.jsonl", "exists"), (notes, r"\.json"),
                            (tmp_path, r"\.json"), (tmp_path / "sub.json", "folder")):
        if output.name == "sub.json":
            output.mkdir()
        with pytest.raises(bwbench.OutputError, match=message):
            bwbench.run(suite, output=output)
    assert not opened and first.read_text() == kept and notes.read_text() == "mine"
    assert not (tmp_path / "notes.txt.jsonl").exists()
    frame = bwbench.run(suite, output=first, force=True)
    assert read_document(first).complete and len(frame) == 2



@pytest.mark.parametrize("kwargs, message", [
    ({"timing": "warm"}, "timing must be one of cold, hot"),
    ({"timer": "stopwatch"}, "the timer must be one of"),
    ({"gpu": "0"}, "gpu must be a GPU index"),
    ({"seed": "x"}, "seed must be a whole number"),
    ({"max_time": "1"}, "max_time must be a positive number"),
    ({"noise": float("nan")}, "noise must be a positive number"),
    ({"min_samples": 2.5}, "min_samples must be a whole number"),
])
def test_run_refuses_bad_arguments_before_any_gpu_work(monkeypatch, kwargs, message):
    """run(timing='warm') measured the copy ceiling and then failed every implementation (and
    without a GPU said only that there was none); max_time='1' was a TypeError from a comparison."""
    def no_gpu_work(*args, **kw):
        raise AssertionError("a session was opened for arguments that were never valid")

    monkeypatch.setattr(Session, "open", classmethod(no_gpu_work))
    with pytest.raises(Exception, match=message) as err:
        bwbench.run(_doubling_suite(), **kwargs)
    assert not isinstance(err.value, (TypeError, AssertionError))


def test_a_bool_for_an_axis_of_numbers_is_refused_as_the_command_line_refuses_it():
    """plan(suite, n=True) swept a case n=True (moving n=1's bytes) where `--n true` is an error."""
    suite = _doubling_suite()
    with pytest.raises(bwbench.SelectionError, match="n=True"):
        bwbench.plan(suite, n=True)
    with pytest.raises(bwbench.SelectionError, match="n=False"):
        bwbench.plan(suite, n=[16, False])
    assert [c.n for c in bwbench.plan(suite, n=[8, 16])[0].cases] == [8, 16]


def test_a_whole_float_for_an_axis_of_integers_is_that_integer_and_a_fraction_says_integers():
    """plan(suite, n=2.0) swept a case n=2.0 whose traffic then raised 'bytes are a whole number';
    now n=2.0 is n=2, as `--n 2.0` is, and n=2.5 names the axis and says it takes integers."""
    import numpy as np

    suite = _doubling_suite()
    [plan] = bwbench.plan(suite, n=[2.0, np.float64(4.0), "8.0"])
    assert [c.params for c in plan.cases] == [{"n": 2}, {"n": 4}, {"n": 8}] and type(plan.cases[0].n) is int
    for bad in (2.5, float("nan"), np.float32(0.5)):
        with pytest.raises(bwbench.SelectionError, match="axis 'n' of suite 'doubling' takes integers"):
            bwbench.plan(suite, n=bad)


@pytest.mark.parametrize("given", [{"a": 1}, {16: "x"}])
def test_a_dict_for_an_axis_is_refused_naming_its_type_not_swept_by_its_keys(given):
    """plan(suite, n={16: 'x'}) swept n=16 from the dict's keys and dropped its values without a word."""
    with pytest.raises(bwbench.SelectionError, match="n= takes a value or a list of values, not a dict"):
        bwbench.plan(_doubling_suite(), n=given)


@pytest.mark.parametrize("kwargs", [{"quick": "yes"}, {"quick": "no"}, {"quick": 1}, {"quick": None},
                                    {"force": "no"}, {"force": 0}])
def test_a_yes_or_no_argument_takes_a_bool_not_anything_truthy(tmp_path, monkeypatch, kwargs):
    """run(suite, quick="no") swept the quick cases and force="no" replaced an existing file: any
    non-empty string was taken as yes. Refused now, naming the argument, before any GPU work."""
    def no_gpu_work(*args, **kw):
        raise AssertionError("a session was opened for arguments that were never valid")

    monkeypatch.setattr(Session, "open", classmethod(no_gpu_work))
    existing = tmp_path / "r.json"
    existing.write_text("{}")
    [name] = kwargs
    with pytest.raises(ValueError, match=f"{name} must be True or False, not "):
        bwbench.run(_doubling_suite(), output=existing, **kwargs)
    assert existing.read_text() == "{}"
    if name == "quick":
        with pytest.raises(ValueError, match="quick must be True or False"):
            bwbench.plan(_doubling_suite(), **kwargs)


def test_a_numpy_bool_is_a_bool(tmp_path, monkeypatch):
    import numpy as np

    monkeypatch.setattr(Session, "open", classmethod(lambda cls, gpu=0, settings=None, **kw: cpu_session()))
    assert len(bwbench.plan(_doubling_suite(), quick=np.bool_(True))[0].cases) == 1
    frame = bwbench.run(_doubling_suite(), quick=np.bool_(False), force=np.bool_(True), output=tmp_path / "r.json")
    assert set(frame["n"]) == {16}
    assert read_document(tmp_path / "r.json").options["quick"] is False


@pytest.mark.parametrize("call", ["impl", "reuse"])
def test_baseline_takes_a_bool(call):
    """impl(..., baseline="no") made the implementation a baseline, whose wrong result passes."""
    suite = _doubling_suite()
    with pytest.raises(bwbench.SuiteDefinitionError, match="baseline must be True, False or None, not str 'no'"
                       if call == "impl" else "baseline must be True or False, not str 'no'"):
        if call == "impl":
            suite.impl("other", kind="cuda", baseline="no")
        else:
            suite.reuse("softmax", "torch", name="theirs", baseline="no")
    assert "other" not in suite.implementations and "theirs" not in suite.implementations


def test_the_error_load_raises_is_part_of_the_public_api(tmp_path):
    """A user catching `bwbench.load`'s error had to reach into bwbench.results for its class."""
    import bwbench

    assert "ResultsFileError" in bwbench.__all__
    with pytest.raises(bwbench.ResultsFileError, match="does not exist"):
        bwbench.load(tmp_path / "missing.json")


@pytest.mark.parametrize("selection, shown", [(None, "NoneType None"), (5, "int 5"), (["softmax", 3], "int 3")])
def test_a_selection_of_the_wrong_type_is_named_as_such(selection, shown):
    """plan(None) said "no suite named 'None'", as if a suite of that name were missing."""
    import bwbench

    with pytest.raises(bwbench.SelectionError, match=f"a suite selection takes a Suite.*not {shown}"):
        bwbench.plan(selection)


def test_an_unreadable_axis_value_is_named_by_its_keyword_not_a_command_line_option():
    import bwbench

    with pytest.raises(bwbench.SelectionError) as err:
        bwbench.plan("softmax", cols="abc")
    assert str(err.value).startswith("cols='abc': cannot read 'abc'") and "--cols" not in str(err.value)
