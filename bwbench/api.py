"""The public Python API behind `import bwbench`: measure a callable, run a suite, read results.

The command line is a layer on these functions; a notebook, a pytest gate or a user's own script
gets the same checks and the same numbers.
"""

from __future__ import annotations

import numbers
import os
from collections import abc
from typing import Any, Callable, Iterable

from .session import BenchResult, Session, SessionSettings, SuitePlan
from .stats import SamplingPolicy
from .suite import check_flag, is_whole

_SESSIONS: dict[tuple, Session] = {}
"""Sessions `bench` reuses per (device, sampling policy): the timer's flush buffer is made once."""


def _policy(max_time: float, noise: float, min_samples: int) -> SamplingPolicy:
    """The sampling arguments checked by value and type: max_time='1' was a TypeError from deep
    inside, and NaN passed every comparison."""
    for name, value in (("max_time", max_time), ("noise", noise)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
            raise ValueError(f"{name} must be a positive number, not {value!r}")
    if not is_whole(min_samples) or min_samples < 1:
        raise ValueError(f"min_samples must be a whole number, at least 1, not {min_samples!r}")
    return SamplingPolicy(min_samples=int(min_samples), max_median_error=float(noise), max_seconds=float(max_time))


def _check_gpu(gpu: Any) -> None:
    if gpu is not None and (not is_whole(gpu) or gpu < 0):
        raise ValueError(f"gpu must be a GPU index (0, 1, ...), not {gpu!r}")


def bench(fn: Callable[[], Any], *, bytes: int, mode: str = "cold", gpu: int | None = None,
          max_time: float = 1.0, noise: float = 0.002, min_samples: int = 20,
          timer: str = "auto") -> BenchResult:
    """Time `fn()` exactly as `bwbench run` times an implementation and compare it with a copy.

    `bytes` is the traffic one call must move (each input read once, each output written once).
    mode="cold" flushes L2 before every sample (the default, DRAM bandwidth); "hot" replays
    back-to-back calls from a CUDA graph. A device-to-device copy of the same bytes is measured
    in the same call through the same timer, so `pct_copy` is the headline ratio `run` reports.
    timer: "events" (CUDA events around each call), "cupti" (kernel times from CUPTI's activity
    records) or "auto" (CUPTI where it traces, else events), as `bwbench run --timer`.
    Returns a BenchResult: median_us, gbps, pct_copy, copy_gbps, samples_us and the statistics,
    and (cold) writeback_us, the part of median_us that is its writes reaching DRAM after it.
    """
    import torch

    from .session import check_bench_arguments
    from .timing import check_timer_kind

    check_bench_arguments(fn, bytes, mode)  # before any GPU work, as the command line checks its own
    check_timer_kind(timer)
    _check_gpu(gpu)
    policy = _policy(max_time, noise, min_samples)
    index = torch.cuda.current_device() if gpu is None and torch.cuda.is_available() else (gpu or 0)
    key = (index, policy, timer)
    if key not in _SESSIONS:
        _SESSIONS[key] = Session.open(index, SessionSettings(policy=policy, timer=timer), measure_copy=False,
                                      telemetry=False)
    return _SESSIONS[key].bench(fn, nbytes=bytes, mode=mode)


def _axis_values(suite, axes: dict[str, Any]) -> dict[str, list[Any]]:
    """Keyword axis values: one value or a list of them (a numpy array too); strings are read as the
    CLI reads them, numpy scalars become Python's (the results file holds no np.int64), a whole float
    for an axis of integers is that integer (as `--n 2.0` is), and a bool is refused for an axis of
    numbers (as `--n true` is)."""
    from .suite import FractionError, SelectionError, plain_value, whole_like

    values = {}
    for name, given in axes.items():
        if isinstance(given, abc.Mapping):  # its keys would be swept, its values dropped
            raise SelectionError(f"{name}= takes a value or a list of values, not a {type(given).__name__} {given!r}")
        many = isinstance(given, abc.Iterable) and not isinstance(given, (str, tuple))  # a tuple is one value
        items = list(given) if many else [given]
        if not items:
            raise SelectionError(f"{name}= needs at least one value")
        example = suite.axes.get(name, [None])[0]
        values[name] = []
        for v in items:
            try:
                values[name].append(suite.parse_axis_values(name, [v])[0] if isinstance(v, str) else
                                    whole_like(plain_value(v), example))
            except FractionError:
                raise SelectionError(f"{name}={v!r}: axis {name!r} of suite {suite.name!r} takes integers "
                                     f"(like {example!r})") from None
            except ValueError as err:  # the command line's wording names its option (--cols); here the keyword
                raise SelectionError(f"{name}={v!r}: {str(err).removeprefix(f'--{name}: ')}") from None
        for value in values[name]:  # True is an int to Python, not to `--n true`
            if isinstance(value, bool) and example is not None and not isinstance(example, bool):
                raise SelectionError(f"{name}={value!r}: suite {suite.name!r} takes values like {example!r} there, not a bool")
    return values


def _names(what: str, given: Any) -> list[str] | None:
    """`impls`, `dtypes` or `preset` as names: a comma-separated string or an iterable of strings
    (impls=5 is a SelectionError, not a TypeError from deep inside)."""
    from .suite import SelectionError

    if given is None:
        return None
    items = given.split(",") if isinstance(given, str) else list(given) if isinstance(given, abc.Iterable) else None
    if items is None or not all(isinstance(s, str) for s in items):
        raise SelectionError(f"{what}= takes names, as 'a,b' or ['a', 'b'], not {given!r}")
    names = [s.strip() for s in items]
    return [s for s in names if s] or None


def plan(suite_or_path, impls: Iterable[str] | str | None = None, dtypes: Iterable[str] | str | None = None,
         quick: bool = False, preset: str | Iterable[str] | None = None, **axes: Any) -> list[SuitePlan]:
    """The plans a run would measure, chosen and checked before any GPU work (SelectionError on
    a name, dtype or axis the suite does not have; SuiteDefinitionError on a traffic function that
    raises or returns no Traffic for one of the cases)."""
    from .discovery import resolve

    quick = check_flag("quick", quick)
    impl_names, dtype_names = _names("impls", impls), _names("dtypes", dtypes)
    presets = _names("preset", preset)
    preset = ",".join(presets) if presets else None
    plans = []
    for suite in resolve(suite_or_path):
        axis_values = _axis_values(suite, axes)
        cases = suite.cases(dtype_names, axis_values, quick=quick, preset=preset)
        chosen = suite.select_impls(impl_names)
        suite.check_traffic(cases, given=axis_values, impls=chosen)
        plans.append(SuitePlan(suite, chosen, cases))
    return plans


def run(suite_or_path, impls: Iterable[str] | str | None = None, *, dtypes: Iterable[str] | str | None = None,
        quick: bool = False, preset: str | Iterable[str] | None = None, output: str | os.PathLike | None = None,
        force: bool = False, gpu: int = 0, timing: str = "cold", timer: str = "auto",
        seed: int = 0, max_time: float = 1.0, noise: float = 0.002, min_samples: int = 20, **axes: Any):
    """Check and time a suite as `bwbench run` does; returns the records as a pandas DataFrame.

    `suite_or_path` is a Suite, a suite name, a suite file or folder, or a comma-separated mix.
    Axis values go as keywords (`cols=[1024, 4096]`, `rows=4096`). With `output` (a .json path)
    the results file is written as the run goes, readable by `bwbench report` and `compare`; an
    existing one is an OutputError unless `force`.
    """
    from .outputs import check_results_output
    from .results import to_frame
    from .timing import TIMING_MODES, check_timer_kind

    quick = check_flag("quick", quick)  # a Python bool: the results file's options hold no numpy bool
    force = check_flag("force", force)  # force="no" would replace the file as force=True does
    plans = plan(suite_or_path, impls, dtypes, quick, preset, **axes)
    if timing not in TIMING_MODES:  # each checked before the session measures the copy ceiling
        raise ValueError(f"timing must be one of {', '.join(TIMING_MODES)}, not {timing!r}")
    check_timer_kind(timer)
    _check_gpu(gpu)
    if not is_whole(seed):
        raise ValueError(f"seed must be a whole number, not {seed!r}")
    if output is not None:
        output = check_results_output(output, force)
    settings = SessionSettings(timing=timing, seed=int(seed), policy=_policy(max_time, noise, min_samples), timer=timer)
    session = Session.open(gpu, settings)
    document = session.run(plans, output=output, replace=force,
                           options={"api": True, "suite": str(suite_or_path), "quick": quick, "timing": timing,
                                    "seed": seed})
    return to_frame(document, source=str(output) if output is not None else None)


def load(path: str | os.PathLike):
    """A results file as a pandas DataFrame, one row per (suite, case, dtype, implementation)."""
    from .results import load as _load

    return _load(path)
