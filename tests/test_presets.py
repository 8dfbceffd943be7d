"""Named sweeps beside the default one (Suite.presets, `bwbench run SUITE --preset NAME`)."""

import pytest
from typer.testing import CliRunner

from bwbench.cli import app
from bwbench.discovery import get_suite
from bwbench.domains import positive_int
from bwbench.suite import SelectionError, Suite, SuiteDefinitionError


def a_suite(**presets):
    return Suite("s", "a suite", axes={"rows": [8], "cols": [32, 64], "eps": [1e-5]},
                 domains={"rows": positive_int, "cols": positive_int, "eps": lambda v: None},
                 presets=presets or {"odd": [{"cols": [31, 33]}, {"rows": [2], "cols": [1000]}]})


def test_a_preset_sweeps_its_blocks_with_the_suites_defaults_for_the_rest():
    cases = a_suite().cases(preset="odd")
    assert [(c.rows, c.cols, c.eps) for c in cases] == [(8, 31, 1e-5), (8, 33, 1e-5), (2, 1000, 1e-5)]


def test_user_values_replace_an_axis_in_every_block_and_repeats_are_dropped():
    cases = a_suite().cases(axis_values={"rows": [4]}, preset="odd")
    assert [(c.rows, c.cols) for c in cases] == [(4, 31), (4, 33), (4, 1000)]
    cases = a_suite().cases(axis_values={"cols": [7]}, preset="odd")
    assert [(c.rows, c.cols) for c in cases] == [(8, 7), (2, 7)]


def test_several_presets_sweep_one_after_another_and_share_their_common_cases():
    suite = a_suite(odd=[{"cols": [31, 33]}], models=[{"cols": [33, 768]}, {"rows": [2], "cols": [1000]}])
    expected = [(8, 31), (8, 33), (8, 768), (2, 1000)]
    assert [(c.rows, c.cols) for c in suite.cases(preset="odd,models")] == expected
    assert [(c.rows, c.cols) for c in suite.cases(preset=["odd", "models"])] == expected
    assert [(c.rows, c.cols) for c in suite.cases(preset=" models , odd,models")] == \
        [(8, 33), (8, 768), (2, 1000), (8, 31)]


def test_a_list_of_presets_names_each_unknown_one_and_refuses_empty_names():
    with pytest.raises(SelectionError, match="no preset 'nope', 'models'; presets: odd"):
        a_suite().cases(preset="odd,nope,models")
    for bad in ["odd,", ",odd", ""]:
        with pytest.raises(SelectionError, match="--preset needs names"):
            a_suite().cases(preset=bad)


def test_an_unknown_preset_or_one_with_quick_is_a_selection_error():
    with pytest.raises(SelectionError, match="no preset 'models'; presets: odd"):
        a_suite().cases(preset="models")
    with pytest.raises(SelectionError, match="--quick and --preset"):
        a_suite().cases(quick=True, preset="odd")


@pytest.mark.parametrize("presets,problem", [
    ({"bad": [{"width": [3]}]}, "blocks of the suite's axes"),
    ({"bad": []}, "blocks of the suite's axes"),
    ({"bad": [{"cols": [0]}]}, "own axis values"),
])
def test_a_preset_outside_the_axes_or_domains_is_a_broken_suite(presets, problem):
    with pytest.raises(SuiteDefinitionError, match=problem):
        a_suite(**presets)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmax_backward", "layernorm", "rmsnorm"])
def test_the_softmax_and_norm_suites_have_models_and_odd_presets(name):
    suite = get_suite(name)
    assert set(suite.presets) == {"models", "odd"}
    odd = suite.cases(preset="odd")
    assert any(c.cols % 8 for c in odd) and any(c.cols in (31, 8191) for c in odd)  # widths no pack divides
    models = suite.cases(preset="models")
    assert {c.cols for c in models} & {768, 4096, 50257, 197}
    assert suite.describe()["presets"]["odd"][0]["cols"][0] == "31"


def test_bn_relu_presets_sweep_small_spatial_shapes():
    suite = get_suite("bn_relu")
    models = suite.cases(preset="models")
    assert {c.shape[2:] for c in models} == {(7, 7), (14, 14)}
    assert {c.layout for c in models} == {"NCHW", "NHWC"} and {c.direction for c in models} == {"forward", "backward"}
    odd = suite.cases(preset="odd")
    assert all(c.shape[1] % 8 or (c.shape[2] * c.shape[3]) % 8 for c in odd), "no pack divides a channel or a plane"


def test_run_with_an_unknown_preset_exits_2_before_any_gpu_work():
    result = CliRunner().invoke(app, ["run", "softmax", "--preset", "nope"])
    assert result.exit_code == 2 and "no preset 'nope'" in result.output
    result = CliRunner().invoke(app, ["run", "softmax", "--preset", "odd", "--quick"])
    assert result.exit_code == 2 and "--quick and --preset" in result.output
    result = CliRunner().invoke(app, ["run", "layernorm,rmsnorm", "--preset", "odd,modles"])
    assert result.exit_code == 2 and "no preset 'modles'; presets: models, odd" in result.output


def test_the_api_plans_several_presets_of_a_real_suite():
    from bwbench.api import plan

    (both,) = plan("layernorm", dtypes="float16", preset="odd,models")
    odd = get_suite("layernorm").cases(["float16"], preset="odd")
    models = get_suite("layernorm").cases(["float16"], preset="models")
    assert [c.params for c in both.cases] == [c.params for c in odd] + [c.params for c in models
                                                                      if c.params not in [o.params for o in odd]]
