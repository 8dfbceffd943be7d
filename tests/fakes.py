"""A timer and session that run the whole case loop on the CPU: every sample is a fixed number of
microseconds per call, so the checks, roles, inexact marks and records can be tested without a GPU."""

from __future__ import annotations

from bwbench.session import Session, SessionSettings
from bwbench.stats import summarize
from bwbench.timing import Measurement, TimerChoice


class FakeTimer:
    """Calls fn a few times (so a crashing implementation still crashes) and reports `us` per call,
    or a per-call time from `by_name` keyed on the callable's name."""

    def __init__(self, us: float = 10.0, samples: list[float] | None = None):
        self.device = "cpu"
        self.us = us
        self.samples = samples
        self.calls = 0
        self.choice = TimerChoice("events", "events", "asked for")

    def measure(self, fn, mode: str = "cold") -> Measurement:
        for _ in range(3):
            fn()
            self.calls += 1
        samples = list(self.samples) if self.samples else [self.us * f for f in (0.99, 1.0, 1.0, 1.01, 1.0)]
        return Measurement(mode, samples, summarize(samples, True), detail=cold_detail(mode))


def cold_detail(mode: str) -> dict | None:
    """What a real cold measurement's detail always holds: the write-back charged (none here)."""
    return {"writeback_us": 0.0} if mode == "cold" else None


def cpu_session(us: float = 10.0, samples=None, seed: int = 0) -> Session:
    return Session("cpu", {"gpu_name": "CPU (fake)", "peak_gbps": None}, FakeTimer(us, samples),
                   SessionSettings(seed=seed))
