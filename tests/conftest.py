"""GPU tests carry @pytest.mark.gpu and skip cleanly where no CUDA device is visible."""

import pytest


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def device():
    """CUDA device 0 (GPU tests only)."""
    from bwbench.device import require_cuda

    return require_cuda(0)


@pytest.fixture(scope="module")
def facts(device):
    """The device's facts: L2 size, clocks, peak (GPU tests only)."""
    from bwbench.device import query_device

    return query_device(device)
