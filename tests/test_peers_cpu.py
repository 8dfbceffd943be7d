"""Peer libraries as baselines, without a GPU: the suites list them, a missing or unusable library
is skipped with the reason, and each adapter maps the suite's arguments onto the library's
forward launcher and its outputs back onto the suite's (checked with fake modules that record
their calls)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from bwbench import peers
from bwbench.discovery import get_suite
from bwbench.peers import liger, quack
from bwbench.suite import Case, Skip

ROOT = Path(__file__).resolve().parent.parent
PEER_SUITES = ("softmax", "rmsnorm", "layernorm")


def _case(suite: str, rows: int = 5, cols: int = 33, dtype: str = "float16") -> Case:
    params = {"rows": rows, "cols": cols} if suite == "softmax" else {"rows": rows, "cols": cols, "eps": 1e-5}
    return Case(suite, params, dtype)


def _build(suite: str, impl: str, case: Case | None = None):
    return get_suite(suite).implementations[impl].build(case or _case(suite))


@pytest.fixture
def installed(monkeypatch):
    """Pretend these distributions are installed at these versions (None: not installed)."""
    def pretend(**versions):
        names = {"liger": "liger-kernel", "quack": "quack-kernels"}
        table = {names[k]: v for k, v in versions.items()}
        monkeypatch.setattr(peers, "installed_version", lambda dist: table.get(dist))
    return pretend


@pytest.fixture
def fake_modules(monkeypatch):
    """Put modules (and their parent packages) into sys.modules for the test's duration."""
    def install(name: str, **attrs) -> types.ModuleType:
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent not in sys.modules:
                monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
        module = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)
        return module
    return install


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))


# --- the suites list them ---------------------------------------------------------------------

@pytest.mark.parametrize("suite", PEER_SUITES)
def test_suites_list_liger_and_quack_as_their_own_kinds(suite):
    impls = get_suite(suite).implementations
    assert impls["liger"].kind == "liger"
    assert impls["quack"].kind == "quack"
    described = get_suite(suite).describe()["implementations"]
    assert described["liger"]["description"] and described["quack"]["description"]


# --- skipped with the reason ------------------------------------------------------------------

@pytest.mark.parametrize("suite", PEER_SUITES)
def test_liger_not_installed_is_skipped_with_the_install_command(suite, installed):
    installed(liger=None)
    with pytest.raises(Skip, match=r"^liger-kernel is not installed: pip install 'bwbench\[liger\]'$"):
        _build(suite, "liger")


def test_liger_older_than_float32_statistics_is_skipped(installed):
    installed(liger="0.8.3")
    with pytest.raises(Skip, match=r"liger-kernel 0.8.3 is older than 0.8.4.*bwbench\[liger\]"):
        _build("layernorm", "liger")


def test_a_library_that_fails_to_import_is_skipped_with_the_error(installed, monkeypatch):
    installed(liger="0.8.5")
    monkeypatch.setitem(sys.modules, "liger_kernel.ops.rms_norm", None)  # import raises ImportError
    with pytest.raises(Skip, match=r"liger-kernel 0.8.5 failed to import liger_kernel.ops.rms_norm"):
        _build("rmsnorm", "liger")


def test_a_version_without_the_launcher_is_skipped(installed, fake_modules):
    installed(liger="0.9.0")
    fake_modules("liger_kernel.ops.softmax")
    with pytest.raises(Skip, match=r"liger-kernel 0.9.0 has no liger_kernel.ops.softmax._softmax_forward"):
        _build("softmax", "liger")


def test_liger_rows_longer_than_its_block_are_skipped(installed):
    installed(liger="0.8.5")
    with pytest.raises(Skip, match="at most 65536 columns; this row has 65537"):
        _build("rmsnorm", "liger", _case("rmsnorm", cols=65537))


@pytest.mark.parametrize("suite", PEER_SUITES)
def test_quack_without_a_gpu_is_skipped(suite, installed, monkeypatch):
    installed(quack="0.6.5")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Skip, match="quack-kernels needs a CUDA GPU"):
        _build(suite, "quack")


@pytest.mark.parametrize("suite", PEER_SUITES)
def test_quack_before_hopper_is_skipped(suite, installed, monkeypatch):
    installed(quack="0.6.5")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(Skip, match=r"sm90\+ GPU \(Hopper or newer\); this one is sm80"):
        _build(suite, "quack")


@pytest.mark.parametrize("suite", PEER_SUITES)
def test_quack_not_installed_is_skipped_with_the_install_command(suite, installed, hopper):
    installed(quack=None)
    with pytest.raises(Skip, match=r"^quack-kernels is not installed: pip install 'bwbench\[quack\]'$"):
        _build(suite, "quack")


def test_unsupported_dtype_is_skipped():
    with pytest.raises(Skip, match="liger-kernel has no kernel for float64"):
        liger.softmax(_case("softmax", dtype="float64"))


def test_version_tuple_reads_release_numbers():
    assert peers.version_tuple("0.8.4") == (0, 8, 4)
    assert peers.version_tuple("0.10.0") > peers.version_tuple("0.9.9")
    assert peers.version_tuple("1.0rc1") == (1, 0)
    assert peers.version_tuple("0.8.4.dev3") >= peers.version_tuple("0.8.4")


# --- argument and output mapping, with fake libraries ------------------------------------------

def _inputs(suite: str, rows: int = 5, cols: int = 33):
    case = _case(suite, rows, cols, "float32")
    return case, get_suite(suite).make_inputs(case, torch.Generator().manual_seed(0))


def test_liger_rms_norm_maps_gamma_eps_and_the_gemma_casting_mode(installed, fake_modules):
    installed(liger="0.8.5")
    calls, y, x_view, rstd = [], torch.ones(5, 33), torch.zeros(5, 33), torch.full((5,), 2.0)

    def rms_norm_forward(X, W, eps, offset, casting_mode, row_mode):
        calls.append(dict(X=X, W=W, eps=eps, offset=offset, casting_mode=casting_mode, row_mode=row_mode))
        return y, x_view, rstd, 64, 4, 1

    fake_modules("liger_kernel.ops.rms_norm", rms_norm_forward=rms_norm_forward)
    case, inputs = _inputs("rmsnorm")
    out = _build("rmsnorm", "liger", case)(**inputs)
    (call,) = calls
    assert call["X"] is inputs["x"] and call["W"] is inputs["gamma"] and call["eps"] == inputs["eps"]
    assert call["offset"] == 0.0 and call["casting_mode"] == "gemma" and call["row_mode"] is None
    assert out[0] is y and out[1] is rstd and len(out) == 2


def test_liger_layer_norm_maps_gamma_beta_eps_and_returns_y_mean_rstd(installed, fake_modules):
    installed(liger="0.8.4")
    calls, y, x_view, mean, rstd = [], torch.ones(5, 33), torch.zeros(5, 33), torch.full((5,), 3.0), torch.full((5,), 2.0)

    def layer_norm_forward(X, W, B, eps):
        calls.append(dict(X=X, W=W, B=B, eps=eps))
        return y, x_view, mean, rstd, 64, 4

    fake_modules("liger_kernel.ops.layer_norm", layer_norm_forward=layer_norm_forward)
    case, inputs = _inputs("layernorm")
    out = _build("layernorm", "liger", case)(**inputs)
    (call,) = calls
    assert call["X"] is inputs["x"] and call["W"] is inputs["gamma"] and call["B"] is inputs["beta"]
    assert call["eps"] == inputs["eps"]
    assert out[0] is y and out[1] is mean and out[2] is rstd and len(out) == 3


def test_liger_softmax_returns_y_alone(installed, fake_modules):
    installed(liger="0.8.5")
    calls, y = [], torch.ones(5, 33)

    def _softmax_forward(x):
        calls.append(x)
        return y, 64, 4, False

    fake_modules("liger_kernel.ops.softmax", _softmax_forward=_softmax_forward)
    case, inputs = _inputs("softmax")
    assert _build("softmax", "liger", case)(**inputs) is y
    assert calls == [inputs["x"]]


def test_quack_rms_norm_stores_rstd_and_returns_y_rstd(installed, fake_modules, hopper):
    installed(quack="0.6.5")
    calls, y, residual_out, rstd = [], torch.ones(5, 33), torch.zeros(5, 33), torch.full((5,), 2.0)

    def rmsnorm_fwd(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None,
                    eps=1e-6, store_rstd=False, weight_offset=0.0):
        calls.append(dict(x=x, weight=weight, bias=bias, residual=residual, eps=eps, store_rstd=store_rstd,
                          weight_offset=weight_offset))
        return y, residual_out, rstd

    fake_modules("quack.rmsnorm", rmsnorm_fwd=rmsnorm_fwd)
    case, inputs = _inputs("rmsnorm")
    out = _build("rmsnorm", "quack", case)(**inputs)
    (call,) = calls
    assert call["x"] is inputs["x"] and call["weight"] is inputs["gamma"] and call["eps"] == inputs["eps"]
    assert call["store_rstd"] is True and call["bias"] is None and call["residual"] is None
    assert call["weight_offset"] == 0.0
    assert out[0] is y and out[1] is rstd and len(out) == 2


def test_quack_layer_norm_passes_its_own_outputs_in_the_ops_order(installed, fake_modules, hopper):
    installed(quack="0.6.5")
    calls = []

    def _rmsnorm_fwd(x, weight, out, bias=None, rstd=None, mean=None, residual=None, residual_out=None,
                     eps=1e-6, is_layernorm=False, weight_offset=0.0):
        calls.append(dict(x=x, weight=weight, out=out, bias=bias, rstd=rstd, mean=mean, residual=residual,
                          residual_out=residual_out, eps=eps, is_layernorm=is_layernorm))
        out.fill_(1.0), mean.fill_(3.0), rstd.fill_(2.0)

    fake_modules("quack.rmsnorm", _rmsnorm_fwd=_rmsnorm_fwd)
    case, inputs = _inputs("layernorm")
    y, mean, rstd = _build("layernorm", "quack", case)(**inputs)
    (call,) = calls
    assert call["x"] is inputs["x"] and call["weight"] is inputs["gamma"] and call["bias"] is inputs["beta"]
    assert call["eps"] == inputs["eps"] and call["is_layernorm"] is True
    assert call["residual"] is None and call["residual_out"] is None
    assert call["out"] is y and call["mean"] is mean and call["rstd"] is rstd
    assert y.dtype == inputs["x"].dtype and y.shape == inputs["x"].shape
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == rstd.shape == (5,)
    assert bool((mean == 3.0).all()) and bool((rstd == 2.0).all())


def test_quack_softmax_returns_y(installed, fake_modules, hopper):
    installed(quack="0.6.5")
    calls, y = [], torch.ones(5, 33)
    fake_modules("quack.softmax", softmax_fwd=lambda x: calls.append(x) or y)
    case, inputs = _inputs("softmax")
    assert _build("softmax", "quack", case)(**inputs) is y
    assert calls == [inputs["x"]]


# --- the extras that install them -------------------------------------------------------------

def test_pyproject_extras_install_the_versions_the_adapters_need():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["liger"] == [f"liger-kernel>={liger.LIGER.minimum}"]
    assert extras["quack"] == [f"quack-kernels>={quack.QUACK.minimum}"]
    assert liger.LIGER.extra == "liger" and quack.QUACK.extra == "quack"
