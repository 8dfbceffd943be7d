"""The copy ceiling's choice over methods and buffer pairs, with a fake timer (no GPU)."""

import pytest


def test_copy_ceiling_is_the_fastest_method_over_two_buffer_pairs():
    from bwbench.stats import summarize
    from bwbench.timing import Measurement, measure_copy_ceiling

    times = {("memcpy", 0): 110.0, ("kernel", 0): 105.0, ("memcpy", 1): 100.0, ("kernel", 1): 104.0}
    made = []

    class FakeTimer:
        device = "fake"

        def measure(self, fn, mode):
            us = fn()
            return Measurement(mode, [us], summarize([us], True))

    def make_copies(device, nbytes):
        k = len(made)
        made.append(nbytes)
        return {"memcpy": lambda: times[("memcpy", k)], "kernel": lambda: times[("kernel", k)]}

    ceiling = measure_copy_ceiling(FakeTimer(), 1_000_000, make_copies=make_copies)
    assert made == [1_000_000, 1_000_000]
    assert ceiling.method == "memcpy#2" and ceiling.gbps == pytest.approx(2e6 / 100e-6 / 1e9)
    assert set(ceiling.gbps_by_method) == {"memcpy", "kernel", "memcpy#2", "kernel#2"}


def test_copy_ceiling_keeps_the_first_pair_when_a_second_does_not_fit():
    from bwbench.stats import summarize
    from bwbench.timing import Measurement, measure_copy_ceiling

    class FakeTimer:
        device = "fake"

        def measure(self, fn, mode):
            return Measurement(mode, [fn()], summarize([fn()], True))

    calls = []

    def make_copies(device, nbytes):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 4.00 GiB")
        return {"memcpy": lambda: 50.0}

    assert measure_copy_ceiling(FakeTimer(), 1000, make_copies=make_copies).method == "memcpy"
    with pytest.raises(RuntimeError):
        measure_copy_ceiling(FakeTimer(), 1000, make_copies=lambda d, n: (_ for _ in ()).throw(RuntimeError("boom")))
