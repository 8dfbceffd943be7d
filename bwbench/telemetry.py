"""NVML clocks, temperature, power and clock-event reasons sampled around each case.

A bandwidth measured while the card was power- or thermally-throttled is not comparable with one
measured at full clocks; the record says so instead of leaving the reader to guess.
"""

from __future__ import annotations

from typing import Any

# Clock-event reason bits (nvml.h). Idle and application-clock settings are not throttling.
_REASONS = {
    0x0000000000000001: "gpu_idle",
    0x0000000000000002: "applications_clocks_setting",
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000010: "sync_boost",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
    0x0000000000000100: "display_clock_setting",
}
THROTTLE_REASONS = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown"}


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in _REASONS.items() if mask & bit]


def is_throttled(reasons: list[str]) -> bool:
    return any(r in THROTTLE_REASONS for r in reasons)


class Telemetry:
    """Reads one device's sensors; every read degrades to an empty sample if NVML refuses."""

    def __init__(self, uuid: str | None, index: int):
        try:
            from .device import nvml_handle

            self._handle = nvml_handle(uuid, index)
        except Exception:  # noqa: BLE001
            self._handle = None

    def sample(self) -> dict[str, Any]:
        if self._handle is None:
            return {}
        import pynvml

        h, out = self._handle, {}
        reads = {
            "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "clock_event_mask": lambda: _clock_event_mask(pynvml, h),
        }
        for key, read in reads.items():
            try:
                out[key] = read()
            except Exception:  # noqa: BLE001 - a sensor this card or driver does not expose
                continue
        if "clock_event_mask" in out:
            out["clock_events"] = decode_reasons(int(out["clock_event_mask"]))
        return out


def _clock_event_mask(pynvml, handle) -> int:
    getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(getter(handle))


def summarize_window(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The telemetry a record keeps: both samples and whether either showed throttling."""
    reasons = sorted(set(before.get("clock_events", [])) | set(after.get("clock_events", [])))
    return {"before": before, "after": after, "throttled": is_throttled(reasons),
            "throttle_reasons": [r for r in reasons if r in THROTTLE_REASONS]}
