"""The values an axis may take, declared by its suite and checked before any GPU work.

A suite names a domain for each axis (`domains={"cols": positive_int, "p": open_unit_interval}`);
every case of a sweep is checked against them when the cases are made, so `--cols 0`, `--p 1.5`
or `--eps -1` is a one-line error before the copy ceiling is timed, not a sweep in which every
implementation fails. A domain is a callable that returns why a value is outside it, or None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

Domain = Callable[[Any], "str | None"]

INDEX_LIMIT = 2**31 - 1
"""Largest size a single axis may name: beyond int32 no tensor dimension fits a GPU's memory anyway."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class IntRange:
    """Integers from `low` to `high` inclusive."""

    low: int
    high: int = INDEX_LIMIT
    text: str = ""

    def __call__(self, value: Any) -> str | None:
        if _is_int(value) and value > self.high:
            return f"must be at most {self.high:,}"  # a positive count too large says so, not "positive"
        if not _is_int(value) or not self.low <= value <= self.high:
            return f"must be {self.text or f'an integer from {self.low} to {self.high}'}"
        return None


@dataclass(frozen=True)
class FloatRange:
    """Finite numbers between `low` and `high`; each end open or closed."""

    low: float
    high: float
    low_open: bool = True
    high_open: bool = True
    text: str = ""

    def __call__(self, value: Any) -> str | None:
        if not _is_number(value) or not math.isfinite(value):
            return f"must be {self.describe()}"
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return None if above and below else f"must be {self.describe()}"

    def describe(self) -> str:
        if self.text:
            return self.text
        return f"a number in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


positive_int = IntRange(1, text="a positive integer")
non_negative_int = IntRange(0, text="an integer of 0 or more")
positive_float = FloatRange(0.0, math.inf, text="a positive finite number")
open_unit_interval = FloatRange(0.0, 1.0, text="a number strictly between 0 and 1")
unit_interval = FloatRange(0.0, 1.0, low_open=False, high_open=False, text="a number from 0 to 1")


@dataclass(frozen=True)
class OneOf:
    """One of a fixed set of values (a direction, a layout)."""

    values: tuple

    def __call__(self, value: Any) -> str | None:
        return None if value in self.values else f"must be one of {', '.join(map(str, self.values))}"


def one_of(*values: Any) -> OneOf:
    return OneOf(tuple(values))


@dataclass(frozen=True)
class Shape:
    """A tuple of sizes, each in `each`, with a rank between `min_rank` and `max_rank`."""

    each: Domain = positive_int
    min_rank: int = 1
    max_rank: int = 8

    def __call__(self, value: Any) -> str | None:
        if not isinstance(value, tuple) or not self.min_rank <= len(value) <= self.max_rank:
            rank = f"{self.min_rank}" if self.min_rank == self.max_rank else f"{self.min_rank} to {self.max_rank}"
            return f"must have {rank} dimensions"
        for i, size in enumerate(value):
            problem = self.each(size)
            if problem:
                return f"dimension {i} ({size}) {problem}"
        return None


def shape_of(each: Domain = positive_int, rank: int | None = None, min_rank: int = 1, max_rank: int = 8) -> Shape:
    return Shape(each, rank or min_rank, rank or max_rank)


class DomainError(ValueError):
    """An axis value outside its declared domain (a SelectionError subclass wraps it in suite.py)."""


def check_domains(suite_name: str, domains: Mapping[str, Domain], params_list: Iterable[Mapping[str, Any]]) -> None:
    """Raise DomainError for the first axis value outside its domain, as `--AXIS VALUE: why`."""
    seen: set = set()
    for params in params_list:
        for axis, value in params.items():
            domain = domains.get(axis)
            key = (axis, repr(value))
            if domain is None or key in seen:
                continue
            seen.add(key)
            problem = domain(value)
            if problem:
                shown = "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
                raise DomainError(f"--{axis} {shown}: {problem} (suite {suite_name!r})")


def check_declared(suite_name: str, axes: Iterable[str], domains: Mapping[str, Domain]) -> None:
    """A domain for an axis the suite does not have is a bug in the suite."""
    unknown = [a for a in domains if a not in set(axes)]
    if unknown:
        raise ValueError(f"suite {suite_name!r} declares domains for axes it does not have: {', '.join(unknown)}")
    for axis, domain in domains.items():
        if not callable(domain):
            raise ValueError(f"suite {suite_name!r}: the domain of {axis!r} is not callable")
