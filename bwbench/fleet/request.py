"""What every GPU of a fleet run is asked to do, and which GPUs of this host take part.

The request travels to the workers by pickle, so it holds only names and texts (suite names, axis
values as the user typed them); each worker rebuilds the sweep from its own suites, exactly as a
plain `bwbench run` would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable


class GpuSelectionError(ValueError):
    """A --gpus value that names no GPU of this host (exit 2)."""


@dataclass(frozen=True)
class RunRequest:
    """One GPU's share of a fleet run: the same sweep on every GPU."""

    suites: tuple[str, ...]
    impls: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    axes: dict[str, list[str]] = field(default_factory=dict)
    """Axis values as text, per axis name (the worker parses them with the suite's own axis types)."""
    quick: bool = False
    preset: str | None = None
    """A named sweep of the suites (Suite.presets) instead of their default ones, or several,
    comma-separated."""
    timing: str = "cold"
    max_time: float = 1.0
    noise: float = 0.002
    min_samples: int = 20
    seed: int = 0
    copy_bytes: int = 4_000_000_000
    timer: str = "auto"
    """The clock of cold samples, as `bwbench run --timer` (events, cupti, auto)."""
    skip_cases: frozenset[str] = frozenset()
    """Case keys (see case_key) not to run: those already measured or lost before a restart."""
    measure: Callable[..., Any] | None = None
    """The function that measures on the worker's GPU; None is the real one
    (worker.measure_on_this_gpu). Tests put a fake GPU here."""

    def without(self, keys) -> "RunRequest":
        return replace(self, skip_cases=self.skip_cases | frozenset(keys))


def case_key(suite: str, case_id: str, dtype: str) -> str:
    """The name of one case across the fleet (its records share it on every GPU)."""
    return f"{suite}|{case_id}|{dtype}"


ALL = "all"


def parse_gpu_selection(text: str) -> str | list[int]:
    """`all`, or the distinct non-negative GPU numbers of `0,1,...` (syntax only: no GPU is touched)."""
    value = text.strip()
    if value.lower() == ALL:
        return ALL
    parts = [p.strip() for p in value.split(",")]
    if not value or any(not (p.isascii() and p.isdigit()) for p in parts):  # "²".isdigit(), but no int
        raise GpuSelectionError(f"--gpus takes `all` or GPU numbers such as 0,1,3 (got {text!r})")
    numbers = [int(p) for p in parts]
    if len(set(numbers)) != len(numbers):
        raise GpuSelectionError(f"--gpus names a GPU twice ({text!r})")
    return numbers


def visible_gpus() -> list[str]:
    """The GPUs of this host a local fleet may use, as CUDA_VISIBLE_DEVICES entries.

    Where CUDA_VISIBLE_DEVICES is set (a batch scheduler's allocation) its entries are the fleet;
    otherwise every GPU NVML sees, by UUID, so that a worker is pinned to the card NVML numbers
    whatever CUDA's own device order is.
    """
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    try:
        import pynvml

        pynvml.nvmlInit()
        uuids = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
            uuids.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
        return uuids
    except Exception:  # noqa: BLE001 - no NVML: fall back to CUDA's count, in CUDA's numbering
        try:
            import torch

            return [str(i) for i in range(torch.cuda.device_count())]
        except Exception:  # noqa: BLE001
            return []


def choose_gpus(selection: str | list[int], available: list[str]) -> list[tuple[int, str]]:
    """(position, CUDA_VISIBLE_DEVICES entry) of each GPU a local fleet runs on."""
    if not available:
        from ..device import NoGpuError

        raise NoGpuError("--gpus: this host has no GPU that NVML or CUDA can see")
    if selection == ALL:
        return list(enumerate(available))
    missing = [n for n in selection if n >= len(available)]
    if missing:
        raise GpuSelectionError(f"--gpus {','.join(map(str, missing))}: this host has {len(available)} GPU(s), "
                                f"numbered 0 to {len(available) - 1}")
    return [(n, available[n]) for n in selection]
