"""NVML facts that tell one card of a fleet from another and explain a slow one.

A GPU that trails its peers often has a visible cause: a PCIe link trained at a lower generation or
width, ECC switched differently, application clocks pinned low. Each query stands alone and reads
"unknown" when this driver or card refuses it, so one missing sensor never loses the others.
"""

from __future__ import annotations

from typing import Any, Callable

UNKNOWN = "unknown"


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _read(query: Callable[[], Any]) -> Any:
    try:
        return _text(query())
    except Exception:  # noqa: BLE001 - NVMLError, a function this pynvml lacks, anything: unknown
        return UNKNOWN


def gpu_identity(uuid: str | None) -> dict[str, Any]:
    """Serial, UUID, NVML index, PCI bus, PCIe link (current and maximum), ECC mode and clocks of
    the GPU with this UUID; every field "unknown" where NVML cannot say."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception as err:  # noqa: BLE001
        return {"uuid": uuid or UNKNOWN, "nvml_error": str(err) or type(err).__name__}
    nv, h = pynvml, handle

    def ecc_mode() -> dict[str, Any]:
        current, pending = nv.nvmlDeviceGetEccMode(h)
        return {"current": bool(current), "pending": bool(pending)}

    return {
        "uuid": _read(lambda: nv.nvmlDeviceGetUUID(h)),
        "serial": _read(lambda: nv.nvmlDeviceGetSerial(h)),
        "index": _read(lambda: nv.nvmlDeviceGetIndex(h)),
        "name": _read(lambda: nv.nvmlDeviceGetName(h)),
        "pci_bus_id": _read(lambda: nv.nvmlDeviceGetPciInfo(h).busId),
        "vbios": _read(lambda: nv.nvmlDeviceGetVbiosVersion(h)),
        "pcie_link": {
            "generation": _read(lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            "width": _read(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
            "max_generation": _read(lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            "max_width": _read(lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h)),
        },
        "ecc": _read(ecc_mode),
        "clocks_mhz": {
            "sm": _read(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "mem": _read(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            "sm_max": _read(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            "mem_max": _read(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
            "sm_application": _read(lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM)),
            "mem_application": _read(lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_MEM)),
        },
        "power_limit_w": _read(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
    }
