"""The inputs a suite makes are checked when they are made: a dict of tensors on the run's device,
drawn from the generator each case is given (so a re-run, an ncu child or another GPU regenerates
the inputs that were checked)."""

import pytest

torch = pytest.importorskip("torch")

from bwbench import Suite, Traffic  # noqa: E402
from bwbench.runner import InputsError, make_case_inputs  # noqa: E402


def bwbench_tolerance():
    from bwbench import Tolerance

    return Tolerance(rtol=1e-5, atol=1e-8)


def suite_making(make) -> Suite:
    suite = Suite("scale", "y = 2 x", axes={"n": [64]}, dtypes=["float32"])
    suite.inputs(lambda case, gen: make(case, gen))
    suite.reference(lambda x: 2 * x.double())
    suite.traffic(lambda case: Traffic(read=4 * case.n, write=4 * case.n))
    return suite


def first_case(suite):
    return suite.cases(None, {})[0]


def test_inputs_from_the_generator_are_the_same_for_the_same_seed():
    suite = suite_making(lambda case, gen: {"x": torch.randn(case.n, generator=gen, device=gen.device)})
    one, two = (make_case_inputs(suite, first_case(suite), "cpu", 7)["x"] for _ in range(2))
    assert torch.equal(one, two)


@pytest.mark.parametrize("make, says", [
    (lambda case, gen: {"x": torch.randn(case.n)}, "global random state"),
    (lambda case, gen: {"x": torch.randn(case.n, generator=gen), "w": torch.rand(3)}, "global random state"),
    (lambda case, gen: {"x": torch.empty(case.n, device="meta")}, "input 'x' is on meta"),
    (lambda case, gen: {"x": [torch.zeros(2), torch.empty(2, device="meta")]}, "input 'x' is on meta"),
    (lambda case, gen: [torch.zeros(case.n)], "not a dict"),
])
def test_inputs_on_another_device_or_from_the_global_generator_are_refused(make, says):
    suite = suite_making(make)
    with pytest.raises(InputsError, match=says):
        make_case_inputs(suite, first_case(suite), "cpu", 7)


def test_inputs_that_draw_nothing_random_pass():
    suite = suite_making(lambda case, gen: {"x": torch.arange(case.n, dtype=torch.float32), "scale": 2.0})
    assert make_case_inputs(suite, first_case(suite), "cpu", 7)["scale"] == 2.0


def test_a_host_scalar_tensor_may_sit_beside_device_inputs():
    """torch passes a 0-dim CPU tensor to a GPU op as a scalar (the dropout suite's p); a 1-dim one
    it does not."""
    from bwbench.runner import _check_inputs

    suite = suite_making(lambda case, gen: {})
    meta = torch.device("meta")
    _check_inputs(suite, {"x": torch.empty(4, device=meta), "p": torch.tensor(0.5)}, meta, [])
    with pytest.raises(InputsError, match="input 'p' is on cpu"):
        _check_inputs(suite, {"x": torch.empty(4, device=meta), "p": torch.tensor([0.5])}, meta, [])


@pytest.mark.parametrize("reference, tolerance, says", [
    (lambda x: None, None, "reference returned NoneType, not a tensor"),
    (lambda x: (2 * x.double()).numpy(), None, "reference returned ndarray, not a tensor"),
    (lambda x: 2 * x.double(), (bwbench_tolerance(),) * 2, "2 tolerances for its 1 reference output"),
])
def test_a_reference_that_is_no_tensor_is_the_suites_fault_not_the_implementations(monkeypatch, reference,
                                                                                     tolerance, says):
    """A reference returning None failed the implementation under test with "run failed:
    AttributeError: 'NoneType' object has no attribute 'shape'", as if the user's kernel were wrong."""
    import bwbench
    from bwbench.session import Session
    from fakes import cpu_session

    monkeypatch.setattr(Session, "open", classmethod(lambda cls, gpu=0, settings=None, **kw: cpu_session()))
    suite = suite_making(lambda case, gen: {"x": torch.randn(case.n, generator=gen)})
    suite.reference(reference)
    if tolerance is not None:
        suite.tolerances["float32"] = tolerance
    suite.impl("mine", kind="cuda")(lambda case: (lambda x: 2 * x))
    frame = bwbench.run(suite)
    [reason] = frame.loc[frame.impl == "mine", "reason"]
    assert reason.startswith("inputs or reference failed") and says in reason, reason
