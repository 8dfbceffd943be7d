"""Fleet runs: one bwbench run per GPU, on every GPU of a host or of a Dask cluster, merged into one
results document with a health verdict per GPU.

The engine is Dask distributed (an optional extra, ``pip install "bwbench[fleet]"``): on one host a
local cluster with one worker per GPU, across hosts any scheduler whose workers declare a ``GPU``
resource. Modules, one job each:

- request  — what every GPU is asked to run (picklable; names and texts, no suite objects)
- worker   — the Dask task on a GPU worker, and the one adapter onto the single-GPU run loop
- identity — NVML facts that tell one card from another (serial, UUID, PCIe link, ECC, clocks)
- cluster  — a local cluster pinned one worker per GPU, or a client of an existing scheduler
- collect  — submits one task per GPU worker, streams records back, notices lost workers and Ctrl-C
- merge    — the merged results document, keyed by GPU index and UUID
- health   — each GPU against the fleet median
- command  — what `bwbench run --gpus/--scheduler` does
"""

from __future__ import annotations

INSTALL_HINT = 'pip install "bwbench[fleet]"'


class FleetUnavailable(RuntimeError):
    """Dask distributed is not importable: fleet runs cannot start."""


def require_dask() -> None:
    """Fail with the install command (and no GPU work done) when Dask distributed is missing."""
    import importlib

    try:
        importlib.import_module("distributed")
    except ImportError as err:
        raise FleetUnavailable(
            f"--gpus and --scheduler run through Dask distributed, which is not importable here ({err}); "
            f"install it with `{INSTALL_HINT}`") from None
