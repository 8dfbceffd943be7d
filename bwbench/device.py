"""Facts about the GPU a run measures: identity, software versions and the theoretical peak.

The peak comes from NVML (2 x max memory clock x bus width / 8, the double data rate of HBM);
the copy bandwidth is measured by the harness itself (see timing.measure_copy_ceiling).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import subprocess
from dataclasses import dataclass, asdict, field
from typing import Any

from . import __version__
from .paths import REPO_DIR


class NoGpuError(RuntimeError):
    """No CUDA device can be used: the run cannot measure anything."""


@dataclass
class DeviceInfo:
    """What a results file records about the machine (keys read by reports and gates)."""

    gpu_index: int
    gpu_name: str
    gpu_uuid: str | None
    compute_capability: str
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    sm_clock_max_mhz: float | None
    driver_version: str | None
    cuda_version: str | None
    torch_version: str
    cupy_version: str | None
    cudnn_version: int | None
    mem_clock_max_mhz: float | None = None
    bus_width_bits: int | None = None
    peak_gbps: float | None = None
    peak_note: str | None = None
    copy_gbps: float | None = None
    copy_bytes: int | None = None
    copy_gbps_by_method: dict[str, float] | None = None
    bwbench_version: str = __version__
    git_commit: str | None = None
    kernel_options: str | None = field(default_factory=lambda: os.environ.get("BWBENCH_NVRTC_OPTIONS") or None)
    """Extra NVRTC options the kernels were compiled with ($BWBENCH_NVRTC_OPTIONS, read by
    bwbench.cuda.loader.extra_options), if any."""
    host: str = field(default_factory=socket.gethostname)
    python_version: str = field(default_factory=platform.python_version)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def require_cuda(index: int = 0):
    """The torch device to measure on, or NoGpuError with what the user can do about it."""
    try:
        import torch
    except ImportError as err:  # pragma: no cover - torch is a dependency
        raise NoGpuError(f"PyTorch is not importable ({err})") from None
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"a CUDA {torch.version.cuda} build"
        raise NoGpuError(
            "no CUDA GPU is available: torch.cuda.is_available() is False "
            f"(PyTorch {torch.__version__} is {build}). bwbench measures GPU kernels, so `run` and `info` "
            "need a machine with an NVIDIA GPU and a CUDA build of PyTorch; `list` and `report` work anywhere."
        )
    count = torch.cuda.device_count()
    if not 0 <= index < count:  # torch.device("cuda", -1) is a RuntimeError, not a GPU
        raise NoGpuError(f"GPU index {index} does not exist (this machine has {count})")
    return torch.device("cuda", index)


def peak_from_clock(mem_clock_max_mhz: float, bus_width_bits: int) -> float:
    """Theoretical DRAM bandwidth in GB/s: two transfers per clock over the whole bus."""
    return 2.0 * mem_clock_max_mhz * 1e6 * bus_width_bits / 8 / 1e9


def _cupy_version() -> str | None:
    try:
        import cupy

        return cupy.__version__
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return None


def _git_commit() -> str | None:
    """$BWBENCH_COMMIT when set (CI, or a tree copied to a GPU machine whose .git is missing or
    stale: one such copy reported the session's first commit for runs made hours later), else the
    checkout's commit with -dirty."""
    if os.environ.get("BWBENCH_COMMIT"):
        return os.environ["BWBENCH_COMMIT"]
    if not (REPO_DIR / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(REPO_DIR), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(REPO_DIR), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def query_device(device) -> DeviceInfo:
    """Everything about the device except the measured copy bandwidth."""
    import torch

    props = torch.cuda.get_device_properties(device)
    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001
        cudnn = None
    uuid = str(props.uuid) if getattr(props, "uuid", None) is not None else None
    if uuid and not uuid.startswith("GPU-"):
        uuid = "GPU-" + uuid
    clock_khz = getattr(props, "clock_rate", None)
    info = DeviceInfo(
        gpu_index=device.index or 0,
        gpu_name=props.name,
        gpu_uuid=uuid,
        compute_capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count,
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0),
        memory_bytes=int(props.total_memory),
        sm_clock_max_mhz=clock_khz / 1000 if clock_khz else None,
        driver_version=None,
        cuda_version=torch.version.cuda,
        torch_version=torch.__version__,
        cupy_version=_cupy_version(),
        cudnn_version=cudnn,
        git_commit=_git_commit(),
    )
    _fill_from_nvml(info)
    return info


def nvml_handle(uuid: str | None, index: int):
    """The NVML handle of the device torch uses, by UUID (CUDA and NVML may number devices differently)."""
    import pynvml

    pynvml.nvmlInit()
    if uuid:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError:
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _fill_from_nvml(info: DeviceInfo) -> None:
    try:
        import pynvml

        handle = nvml_handle(info.gpu_uuid, info.gpu_index)
        info.driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
        info.mem_clock_max_mhz = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM))
        info.bus_width_bits = int(pynvml.nvmlDeviceGetMemoryBusWidth(handle))
        info.peak_gbps = peak_from_clock(info.mem_clock_max_mhz, info.bus_width_bits)
        if info.sm_clock_max_mhz is None:
            info.sm_clock_max_mhz = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception as err:  # noqa: BLE001 - NVML missing or refused: record why, keep going
        info.peak_note = f"NVML unavailable, no theoretical peak: {err}"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
