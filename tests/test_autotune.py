"""bwbench/cuda/autotune.py: how many cold samples a launcher's candidate gets, on a fake timer."""

from __future__ import annotations

from types import SimpleNamespace

from bwbench.cuda import autotune


class FakeTimer:
    """Answers each cold() with the next of `batches` (microseconds), recording the sample counts asked."""

    def __init__(self, *batches: list[float]) -> None:
        self.batches = list(batches)
        self.asked: list[int] = []

    def cold(self, run, policy):
        self.asked.append(policy.max_samples)
        return SimpleNamespace(samples_us=self.batches.pop(0)[:policy.max_samples])


def test_long_kernels_take_the_fastest_of_a_few_samples(monkeypatch):
    timer = FakeTimer([120.0, 118.0, 119.5])
    monkeypatch.setattr(autotune, "_timer", lambda device: timer)
    assert autotune.cold_launch_us(lambda: None, 0) == 118.0
    assert timer.asked == [autotune.TIMED_LAUNCHES]


def test_short_kernels_take_more_samples_before_the_fastest_counts(monkeypatch):
    more = [9.0] * (autotune.SHORT_LAUNCHES - 1) + [6.5]
    timer = FakeTimer([8.0, 7.9, 8.2], more)
    monkeypatch.setattr(autotune, "_timer", lambda device: timer)
    assert autotune.cold_launch_us(lambda: None, 0) == 6.5
    assert timer.asked == [autotune.TIMED_LAUNCHES, autotune.SHORT_LAUNCHES]
    timer = FakeTimer([8.0, 7.9, 8.2], [9.0] * autotune.SHORT_LAUNCHES)
    monkeypatch.setattr(autotune, "_timer", lambda device: timer)
    assert autotune.cold_launch_us(lambda: None, 0) == 7.9, "the first samples still count"
