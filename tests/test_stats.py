import math

import pytest

from bwbench.stats import SamplingPolicy, percentile, relative_noise, summarize


def test_percentiles_interpolate_like_numpy():
    numpy = pytest.importorskip("numpy")
    values = sorted([3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0])
    for q in (0, 10, 50, 90, 100):
        assert percentile(values, q) == pytest.approx(numpy.percentile(values, q))


def test_summary_of_known_samples():
    s = summarize([10.0, 12.0, 11.0, 13.0, 14.0], converged=True)
    assert (s.count, s.min_us, s.median_us, s.max_us, s.mean_us) == (5, 10.0, 12.0, 14.0, 12.0)
    assert s.stdev_us == pytest.approx(math.sqrt(2.5))
    assert s.noise == pytest.approx((13.6 - 10.4) / (2.5631 * 12.0))
    assert s.median_error == pytest.approx(1.2533 * s.noise / math.sqrt(5))
    assert s.p10_us == pytest.approx(10.4) and s.p90_us == pytest.approx(13.6)
    assert s.converged


def test_one_sample_and_no_samples():
    s = summarize([7.0], converged=False)
    assert s.stdev_us == 0.0 and s.median_us == 7.0
    with pytest.raises(ValueError):
        summarize([], converged=False)
    assert relative_noise([1.0]) == math.inf


def test_robust_noise_ignores_a_few_outliers_but_not_a_wide_spread():
    steady = [100.0] * 45 + [100.5] * 45 + [900.0] * 4
    assert relative_noise(steady) < 0.003
    assert relative_noise([100.0, 200.0] * 20) > 0.25


def test_sampling_stops_when_the_median_settles():
    policy = SamplingPolicy(min_samples=10, max_median_error=0.01, max_seconds=5.0)
    quiet = [100.0 + 0.1 * (i % 3) for i in range(10)]
    assert policy.done(quiet[:9], 0.1) == (False, False), "never before min_samples"
    assert policy.done(quiet, 0.1) == (True, True)


def test_sampling_stops_at_the_time_or_count_cap_unconverged():
    policy = SamplingPolicy(min_samples=10, max_samples=50, max_median_error=0.001, max_seconds=1.0)
    noisy = [100.0, 150.0] * 10
    assert policy.done(noisy, 0.5) == (False, False)
    assert policy.done(noisy, 1.5) == (True, False)
    assert policy.done([100.0, 150.0] * 25, 0.1) == (True, False)
    assert policy.done([100.0] * 3, 2.0) == (False, False), "at least a few samples even past the cap"


def test_disturbed_samples_are_flagged_and_steady_ones_are_not():
    from bwbench.stats import disturbance

    steady = summarize([10.0, 10.1, 10.2, 10.05, 10.3, 10.15, 10.4, 10.1, 10.2, 10.25], converged=True)
    assert disturbance(steady) is None
    # The shape of the 2026-11-22 record: a fast p10, most samples slow, a long tail.
    disturbed = summarize([9.4] * 3 + [15.7] * 4 + [74.0] * 3, converged=False)
    message = disturbance(disturbed)
    assert message is not None and "re-run" in message and "1.67x" in message
    assert disturbance(summarize([5.0], converged=False)) is None  # one sample: no spread to judge
