"""The suite model: a benchmark declares its axes, inputs, reference, bytes and implementations.

A suite file in suites/ builds one `Suite` and decorates plain functions onto it; the runner owns
everything else (sweeping, checking, timing, recording). Modelled on nvbench's declared memory
traffic and Triton's declarative `Benchmark`.
"""

from __future__ import annotations

import itertools
import math
import numbers
import traceback
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import skip as _skip

Skip = _skip.Skip  # re-exported: the kernel layer (bwbench.cuda) raises it too (bwbench/skip.py)

IMPLEMENTATION_KINDS = ("cuda", "triton", "naive", "cudnn", "torch", "compiled", "liger", "quack")
"""The kinds bwbench knows, in the order reports show them: this project's optimized kernels, a
Triton kernel, the multi-kernel or per-element version the articles start from, the cuDNN call,
eager PyTorch, torch.compile (Triton), and the peer libraries Liger-Kernel and QuACK. Any other
string is a kind too (a user's own library); those sort after the known ones."""

BASELINE_KINDS = frozenset({"naive", "cudnn", "torch", "compiled", "liger", "quack"})
"""Kinds that are baselines unless an implementation says otherwise: what the code under test is
measured against. A baseline outside tolerance is still timed and recorded as inexact; an
implementation under test (cuda, triton, any user kind) outside tolerance fails the run."""

ROLES = ("test", "baseline")

FIRST_CALL_IN_BUILD_KINDS = frozenset({"triton", "compiled"})
"""Kinds that compile (and autotune) on their first call: that call belongs to the build, outside
the check and the timing, and its time is part of the record's build_s."""


def kind_order(kinds: Iterable[str]) -> list[str]:
    """Kinds in report order: the known kinds in IMPLEMENTATION_KINDS order, then others by name."""
    known = {k: i for i, k in enumerate(IMPLEMENTATION_KINDS)}
    return sorted(dict.fromkeys(kinds), key=lambda k: (known.get(k, len(known)), k))


def default_role(kind: str) -> str:
    """The role an implementation of this kind plays when its suite does not say."""
    return "baseline" if kind in BASELINE_KINDS else "test"

COPY_IMPL = "copy"
"""The same-size device-to-device copy each case is measured against (kind "ceiling")."""

DTYPE_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
                  "int16": 2, "int32": 4, "int64": 8}


class SuiteDefinitionError(ValueError):
    """A suite file declares something inconsistent (a bug in the suite, not in the user's input)."""


class SelectionError(ValueError):
    """The user asked for an axis, value, dtype or implementation the suite does not have."""


@dataclass(frozen=True)
class Traffic:
    """The minimal compulsory memory traffic of one case: each input read once, each output written once."""

    read: int
    write: int

    def __post_init__(self) -> None:
        for side in ("read", "write"):
            value = getattr(self, side)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"Traffic({side}={value!r}): bytes are a whole number")
            if value < 0:
                raise ValueError(f"Traffic({side}={value!r}): bytes cannot be negative")
            object.__setattr__(self, side, int(value))  # numpy's int64 is no JSON: the results file takes ints
        if self.read + self.write == 0:
            raise ValueError("Traffic(read=0, write=0): a case moves some bytes")

    @property
    def total(self) -> int:
        return self.read + self.write


def is_whole(value: Any) -> bool:
    """A whole number (numpy's too), not a bool: True is an int to Python, not to a user."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_flag(name: str, value: Any, optional: bool = False) -> bool | None:
    """A yes-or-no argument as a real bool (numpy's too, None where `optional`): quick="no" is a
    non-empty string, so it was taken as yes."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    allowed = "True, False or None" if optional else "True or False"
    raise ValueError(f"{name} must be {allowed}, not {type(value).__name__} {value!r}")


def _is_traffic(value: Any) -> bool:
    return isinstance(value, Traffic)


def _is_bytes(value: Any) -> bool:
    """A mask's size as the results file takes it: a whole, non-negative number, or None."""
    return value is None or (is_whole(value) and value >= 0)


def _defined_at(fn: Callable, err: BaseException | None = None) -> str:
    """'FILE:LINE: ' of a suite's function: the line that raised `err`, else the function's first."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    line = code.co_firstlineno
    if err is not None:
        for frame in traceback.extract_tb(err.__traceback__):
            if frame.filename == code.co_filename:
                line = frame.lineno
    return f"{code.co_filename}:{line}: "


@dataclass(frozen=True)
class Tolerance:
    """An output element passes when |out - ref| <= atol + rtol * |ref| (NaN never passes)."""

    rtol: float
    atol: float

    def __post_init__(self) -> None:
        for side in ("rtol", "atol"):  # a NaN or infinite bound passes every element, NaN outputs too
            value = getattr(self, side)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < math.inf:
                raise ValueError(f"Tolerance({side}={value!r}): a finite number, 0 or more")


DEFAULT_TOLERANCES = {
    "float16": Tolerance(rtol=2e-3, atol=1e-6),
    "bfloat16": Tolerance(rtol=1.6e-2, atol=1e-5),
    "float32": Tolerance(rtol=1e-5, atol=1e-8),
    "float64": Tolerance(rtol=1e-12, atol=1e-15),
}


@dataclass(frozen=True)
class Case:
    """One point of the sweep: the suite's axis values and a dtype. Axis values read as attributes."""

    suite: str
    params: Mapping[str, Any]
    dtype: str

    def __getattr__(self, name: str) -> Any:
        params = self.__dict__.get("params", {})
        if name in params:
            return params[name]
        raise AttributeError(name)

    @property
    def id(self) -> str:
        return ",".join(f"{k}={format_value(v)}" for k, v in self.params.items())

    @property
    def itemsize(self) -> int:
        return DTYPE_ITEMSIZE[self.dtype]

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    def __str__(self) -> str:
        return f"{self.suite}[{self.id}, {self.dtype}]"


@dataclass(frozen=True)
class Implementation:
    """One way of computing the suite's operation.

    `build(case)` does everything that must stay out of the timing (compiling, descriptors,
    torch.compile) and returns the callable that is checked and timed: it takes the inputs as
    keyword arguments and returns the output tensor (or a tuple of them).
    `unsupported(case)` returns a reason to skip the case, or None. `traffic(case)`, where given,
    replaces the suite's byte model for this implementation (a bitmask moves fewer bytes than a
    byte mask: each is judged against a copy of its own bytes). `mask_bytes(case)`, where given, is
    the memory the forward keeps for the backward as its mask (a bitmask, a byte mask, or the y that
    torch keeps in its place): what a mask format saves is memory as well as traffic.
    """

    name: str
    kind: str
    build: Callable[[Case], Callable[..., Any]]
    description: str = ""
    unsupported: Callable[[Case], str | None] | None = None
    traffic: Callable[[Case], "Traffic"] | None = None
    mask_bytes: Callable[[Case], int] | None = None
    role: str = "test"
    """"test" (its wrong result fails the run) or "baseline" (timed and marked inexact instead)."""

    @property
    def is_baseline(self) -> bool:
        return self.role == "baseline"

    def skip_reason(self, case: Case) -> str | None:
        return self.unsupported(case) if self.unsupported else None


def format_value(value: Any) -> str:
    """The text form of an axis value, as the CLI and the results file write it."""
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value)
    return str(value)


class FractionError(ValueError):
    """A number with a fraction given for an axis of integers."""


def whole_text(text: str) -> int:
    """Text for an axis of integers: digits, or a whole number written otherwise ("1e6", "1024.0"),
    read exactly (float() is off past 2^53). A fraction ("1.5e0") is a FractionError, not cut to 1."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"cannot read {text!r}") from None
    if not number.is_finite() or number.adjusted() > 18:  # past 64 bits (1e400): no value to read
        raise OverflowError(f"cannot read {text!r}")
    if number != number.to_integral_value():
        raise FractionError(f"{text!r} is not a whole number")
    return int(number)


def whole_like(value: Any, example: Any) -> Any:
    """A value given in Python for an axis like `example`: for an axis of integers, a whole float
    (2.0, numpy's too) is the int it equals, as "2.0" is on the command line; 2.5 is a FractionError."""
    if isinstance(example, bool) or not isinstance(example, int) or not isinstance(value, float):
        return value
    if not math.isfinite(value) or not value.is_integer():
        raise FractionError(f"{value!r} is not a whole number")
    return int(value)


_BOOL_WORDS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
"""What a yes-or-no axis takes on the command line (any case)."""


def parse_like(text: str, example: Any) -> Any:
    """Parse one CLI axis value into the type of the suite's own values."""
    text = text.strip()
    if isinstance(example, bool):
        word = text.lower()
        if word not in _BOOL_WORDS:  # "maybe" read as False ran the False cases without a word
            raise ValueError(f"cannot read {text!r} as true or false")
        return _BOOL_WORDS[word]
    if isinstance(example, int):
        return whole_text(text)
    if isinstance(example, float):
        return float(text)
    if isinstance(example, tuple):
        sep = "x" if "x" in text else ","
        return tuple(int(part) for part in text.split(sep) if part.strip())
    return text


def plain_value(value: Any) -> Any:
    """An axis value as the results file holds it: a number, text, bool, None or a tuple of them;
    numpy's scalars become Python's (np.int64 is no JSON). ValueError for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return tuple(plain_value(v) for v in value)
    if isinstance(value, numbers.Number) and callable(getattr(value, "item", None)):
        return value.item()
    raise ValueError(f"{value!r} is a {type(value).__name__}, not a number, text or tuple")


def check_name(what: str, name: Any) -> None:
    """Suites and implementations are selected by name, comma-separated, and keyed by it in the results file."""
    if not isinstance(name, str) or not name.strip() or "," in name:
        raise SuiteDefinitionError(f"{what} name must be non-empty text without commas, not {name!r}")


def check_suite_name(name: str) -> None:
    """A suite's name is selected on the command line (`bwbench run NAME`) and starts its results
    files' names (OUT/NAME-GPU-TIME.json): one that reads as a path there (a/b, x.py, ..) or as `all`
    could not be selected by name, and a separator would put the files outside OUT."""
    if "/" in name or "\\" in name or name.strip() in ("all", ".", "..") or name.endswith(".py") or name.startswith("~"):
        raise SuiteDefinitionError(f"a suite's name may not read as a path or as `all` on the command line, "
                                   f"not {name!r}: use letters, digits, '_' or '-' (Suite('my_softmax', ...))")


def pow2(low: int, high: int) -> list[int]:
    """Powers of two from low to high inclusive: pow2(32, 256) == [32, 64, 128, 256]."""
    if low <= 0 or high < low:
        raise SuiteDefinitionError(f"pow2({low}, {high}) is empty")
    values, v = [], 1
    while v <= high:
        if v >= low:
            values.append(v)
        v *= 2
    return values


def compile_per_case(fn: Callable) -> Callable:
    """torch.compile(fn, dynamic=False) with a fresh dynamo cache: a "compiled" implementation,
    Triton specialised to this case's shape. Resetting per case keeps a long sweep under
    dynamo's recompile limit, past which it would silently fall back to eager."""
    import torch

    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


@dataclass
class Suite:
    """A benchmark: axes to sweep, dtypes, and the functions that define the experiment."""

    name: str
    description: str
    axes: dict[str, list[Any]]
    dtypes: Sequence[str] = ("float16",)
    default_dtypes: Sequence[str] | None = None
    quick: dict[str, list[Any]] = field(default_factory=dict)
    x_axis: str | None = None
    points: list[dict[str, Any]] | None = None
    """Explicit sweep points where the axes are not a cartesian product (a permutation only fits
    shapes of its rank). `axes` then lists each axis's values in order of first appearance."""
    tolerances: dict[str, Tolerance | tuple[Tolerance, ...]] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    """Per dtype: one Tolerance for every output, or a tuple with one per output."""
    implementations: dict[str, Implementation] = field(default_factory=dict)
    make_inputs: Callable[[Case, Any], dict[str, Any]] | None = None
    compute_reference: Callable[..., Any] | None = None
    compute_traffic: Callable[[Case], Traffic] | None = None
    check_case: Callable[[Case], str | None] | None = None
    output_check: Callable[[Case, dict[str, Any], Any], tuple[bool, str]] | None = None
    source: str | None = field(default=None, compare=False)
    """The file the suite was loaded from (set by discovery), so another process can load it again."""
    domains: dict[str, Callable[[Any], str | None]] = field(default_factory=dict)
    """Per axis, the values it may take (bwbench.domains: positive_int, open_unit_interval, ...):
    every case is checked against them before any GPU work."""
    presets: dict[str, list[dict[str, list[Any]]]] = field(default_factory=dict)
    """Named sweeps beside the default one (`bwbench run SUITE --preset models`): each a list of
    blocks, a block being axis values whose cartesian product is swept (axes a block leaves out
    take the suite's defaults). Shapes from real models, odd widths: what no power-of-two sweep shows."""
    output_dtypes: Sequence[str | None] | None = None
    """Per output, the dtype name an implementation must return it in, None for the default: the
    case's dtype where the reference output is a float, the reference's own dtype otherwise. A
    normalization keeps float32 statistics next to a half y: (None, "float32", "float32")."""

    def __post_init__(self) -> None:
        check_name("a suite's", self.name)
        check_suite_name(self.name)
        self.points = None if self.points is None else [self._plain_point(p) for p in self.points]
        self.axes = self._plain_axes("axis", self.axes)
        self.quick = self._plain_axes("quick axis", self.quick)
        if not isinstance(self.presets, Mapping) or any(not isinstance(b, list) for b in self.presets.values()):
            raise SuiteDefinitionError(f"suite {self.name!r}: presets must be a dict of name -> list of blocks")
        self.presets = {name: [self._plain_axes(f"preset {name!r} axis", block) for block in blocks]
                        for name, blocks in self.presets.items()}
        if self.points is not None:
            if not self.points:
                raise SuiteDefinitionError(f"suite {self.name!r} declares an empty list of points")
            names = list(self.points[0])
            if any(list(p) != names for p in self.points):
                raise SuiteDefinitionError(f"suite {self.name!r}: every point must name the axes {names} in order")
            # the points' own names are the axes now: the same rules as declared ones (a=1,b=2 ids)
            self.axes = self._plain_axes("axis", {n: list(dict.fromkeys(p[n] for p in self.points)) for n in names})
        if not self.axes:
            raise SuiteDefinitionError(f"suite {self.name!r} declares no axes")
        from .results import frame_column_names

        taken = sorted(set(self.axes) & frame_column_names())
        if taken:  # the records' DataFrame (bwbench.run, load) would show the record's field under that name
            raise SuiteDefinitionError(f"suite {self.name!r}: axis name {', '.join(map(repr, taken))} is a column of "
                                       "the results (impl, dtype, status, count, ...): name the axis otherwise")
        for axis, values in self.axes.items():
            if not values:
                raise SuiteDefinitionError(f"suite {self.name!r}: axis {axis!r} has no values")
        for axis in self.quick:
            if axis not in self.axes:
                raise SuiteDefinitionError(f"suite {self.name!r}: quick axis {axis!r} is not an axis")
        for preset, blocks in self.presets.items():
            if not blocks or any(not block or set(block) - set(self.axes) for block in blocks):
                raise SuiteDefinitionError(f"suite {self.name!r}: preset {preset!r} must be blocks of the "
                                           f"suite's axes ({', '.join(self.axes)})")
            if self.points is not None:
                raise SuiteDefinitionError(f"suite {self.name!r}: presets need a cartesian sweep, not points")
        if isinstance(self.dtypes, str) or not self.dtypes:
            raise SuiteDefinitionError(f"suite {self.name!r}: dtypes must be a list of dtype names, not {self.dtypes!r}")
        for dtype in self.dtypes:
            if dtype not in DTYPE_ITEMSIZE:
                raise SuiteDefinitionError(f"suite {self.name!r}: unknown dtype {dtype!r}")
        for dtype, tolerance in self.tolerances.items():
            if dtype not in DTYPE_ITEMSIZE:  # a typo's tolerance would be ignored for the default one
                raise SuiteDefinitionError(f"suite {self.name!r}: a tolerance for {dtype!r}, which is no dtype "
                                           f"({', '.join(DTYPE_ITEMSIZE)})")
            parts = tolerance if isinstance(tolerance, tuple) else (tolerance,)
            if not parts or not all(isinstance(t, Tolerance) for t in parts):
                raise SuiteDefinitionError(f"suite {self.name!r}: the tolerance of {dtype!r} is {tolerance!r}, "
                                           "not a Tolerance(rtol=..., atol=...) or a tuple of them, one per output")
        self._check_output_dtypes()
        if self.default_dtypes is None:
            self.default_dtypes = list(self.dtypes[:1])
        if isinstance(self.default_dtypes, str) or not self.default_dtypes or \
                any(d not in self.dtypes for d in self.default_dtypes):
            raise SuiteDefinitionError(f"suite {self.name!r}: default_dtypes must be a list of its dtypes "
                                       f"({', '.join(self.dtypes)}), not {self.default_dtypes!r}")
        if self.x_axis is None:
            self.x_axis = list(self.axes)[-1]
        if self.x_axis not in self.axes:
            raise SuiteDefinitionError(f"suite {self.name!r}: x_axis {self.x_axis!r} is not an axis")
        self._check_own_domains()

    def _check_output_dtypes(self) -> None:
        if self.output_dtypes is None:
            return
        known = (*DTYPE_ITEMSIZE, "bool")
        if not isinstance(self.output_dtypes, (list, tuple)) or not self.output_dtypes or \
                not all(d is None or d in known for d in self.output_dtypes):
            raise SuiteDefinitionError(f"suite {self.name!r}: output_dtypes must list, per output, a dtype name "
                                       f"({', '.join(known)}) or None, not {self.output_dtypes!r}")
        self.output_dtypes = tuple(self.output_dtypes)

    def _plain_axes(self, what: str, axes: Any) -> dict[str, list[Any]]:
        """Axis name -> a list of plain values: a string would be swept letter by letter, a bare
        number is no list, and numpy's values would reach the results file as no JSON."""
        if not isinstance(axes, Mapping):
            raise SuiteDefinitionError(f"suite {self.name!r}: its {what} values must be a dict of name -> list of values")
        plain = {}
        for axis, values in axes.items():
            if not isinstance(axis, str) or not axis.strip() or "," in axis or "=" in axis:  # case ids: a=1,b=2
                raise SuiteDefinitionError(f"suite {self.name!r}: {what} name {axis!r} must be text without ',' or '='")
            if not isinstance(values, (list, tuple, range)) or not values:
                raise SuiteDefinitionError(f"suite {self.name!r}: {what} {axis!r} must be a non-empty list of values, "
                                           f"not {type(values).__name__} {values!r}")
            try:
                plain[axis] = [plain_value(v) for v in values]
            except ValueError as err:
                raise SuiteDefinitionError(f"suite {self.name!r}: {what} {axis!r}: {err}") from None
        return plain

    def _plain_point(self, point: Any) -> dict[str, Any]:
        if not isinstance(point, Mapping):
            raise SuiteDefinitionError(f"suite {self.name!r}: a point must be a dict of axis -> value, not {point!r}")
        try:
            return {axis: plain_value(v) for axis, v in point.items()}
        except ValueError as err:
            raise SuiteDefinitionError(f"suite {self.name!r}: point {point!r}: {err}") from None

    def _check_own_domains(self) -> None:
        from .domains import DomainError, check_declared, check_domains

        try:
            check_declared(self.name, self.axes, self.domains)
        except ValueError as err:
            raise SuiteDefinitionError(str(err)) from None
        try:
            check_domains(self.name, self.domains, self.points or [{a: v} for a, vals in self.axes.items() for v in vals])
            check_domains(self.name, self.domains, [{a: v} for a, vals in self.quick.items() for v in vals])
            check_domains(self.name, self.domains, [{a: v} for blocks in self.presets.values() for block in blocks
                                                    for a, vals in block.items() for v in vals])
        except (ValueError, DomainError) as err:
            raise SuiteDefinitionError(f"suite {self.name!r}'s own axis values: {err}") from None

    # --- decorators a suite file uses -------------------------------------------------------
    def inputs(self, fn: Callable[[Case, Any], dict[str, Any]]):
        self.make_inputs = fn
        return fn

    def reference(self, fn: Callable[..., Any]):
        self.compute_reference = fn
        return fn

    def traffic(self, fn: Callable[[Case], Traffic]):
        self.compute_traffic = fn
        return fn

    def check_outputs(self, fn: Callable[[Case, dict[str, Any], Any], tuple[bool, str]]):
        """Replace the element-wise comparison with the reference by the suite's own judgement,
        `fn(case, inputs, outputs) -> (passed, message)`, for outputs no single reference can pin
        down (another RNG's dropout mask, a mask in another format). The reference still sizes the
        poisoned blocks, so it must return tensors shaped like the outputs."""
        self.output_check = fn
        return fn

    def validate(self, fn: Callable[[Case], str | None]):
        """A check of the user's own cases (e.g. a permutation that fits its shape): returns why not."""
        self.check_case = fn
        return fn

    def impl(self, name: str, kind: str, description: str = "",
             unsupported: Callable[[Case], str | None] | None = None,
             traffic: Callable[[Case], Traffic] | None = None,
             mask_bytes: Callable[[Case], int] | None = None, baseline: bool | None = None):
        """Register `build(case) -> callable` as an implementation. `kind` is any short name (the
        known ones are IMPLEMENTATION_KINDS); `baseline` says whether it is a baseline rather than
        code under test (default: by kind, see BASELINE_KINDS)."""
        check_name(f"suite {self.name!r}: an implementation's", name)
        if not isinstance(kind, str) or not kind.strip() or kind == "ceiling":
            raise SuiteDefinitionError(f"implementation {name!r}: kind must be a non-empty name, not {kind!r}")
        try:
            baseline = check_flag("baseline", baseline, optional=True)
        except ValueError as err:
            raise SuiteDefinitionError(f"implementation {name!r}: {err}") from None
        role = default_role(kind) if baseline is None else ("baseline" if baseline else "test")
        if name == COPY_IMPL or name in self.implementations:
            raise SuiteDefinitionError(f"suite {self.name!r}: implementation name {name!r} is taken")

        def register(build: Callable[[Case], Callable[..., Any]]):
            text = description or (build.__doc__ or "").strip().split("\n")[0]
            self.implementations[name] = Implementation(name, kind, build, text, unsupported, traffic, mask_bytes, role)
            return build

        return register

    def reuse(self, suite: str, impl: str, name: str | None = None, baseline: bool = True) -> Implementation:
        """Add an implementation of another suite (bwbench's own, by suite name or file) to this
        one, as a baseline unless told otherwise: a user's kernel measured next to bwbench's.
        Its build reads the case's axes by the names that suite uses, so give them the same names."""
        from dataclasses import replace

        from .discovery import get_suite

        if name is not None:
            check_name(f"suite {self.name!r}: an implementation's", name)
        try:
            baseline = check_flag("baseline", baseline)
        except ValueError as err:
            raise SuiteDefinitionError(f"reuse of {impl!r}: {err}") from None
        source = get_suite(suite).select_impls([impl])[0]
        name = name or source.name
        if name == COPY_IMPL or name in self.implementations:
            raise SuiteDefinitionError(f"suite {self.name!r}: implementation name {name!r} is taken")
        self.implementations[name] = replace(source, name=name, role="baseline" if baseline else "test")
        return self.implementations[name]

    # --- what the runner asks --------------------------------------------------------------
    def check_complete(self) -> None:
        missing = [what for what, fn in (("inputs", self.make_inputs), ("reference", self.compute_reference),
                                         ("traffic", self.compute_traffic)) if fn is None]
        if missing:
            raise SuiteDefinitionError(f"suite {self.name!r} does not define: {', '.join(missing)}")
        if not self.implementations:
            raise SuiteDefinitionError(f"suite {self.name!r} has no implementations")

    def tolerance(self, dtype: str) -> Tolerance | tuple[Tolerance, ...]:
        return self.tolerances.get(dtype, DEFAULT_TOLERANCES["float32"])

    def check_traffic(self, cases: Iterable[Case], given: Mapping[str, Iterable[Any]] | None = None,
                      impls: Iterable[Implementation] = ()) -> None:
        """Every case's bytes, computed now, on the CPU and before any GPU work: a traffic function
        that raises, or returns anything but a Traffic, is a SuiteDefinitionError naming its file and
        line, instead of a traceback once the sweep has begun (the run needs them for every case).
        The same holds for each of `impls`' own traffic and mask_bytes functions, which the run calls
        as often. Where the case holds a value the user gave (`given`: axis -> values, e.g. `--cols 0`
        on a suite that declares no domain for cols), it is a SelectionError naming that value instead."""
        traffic, mask = (_is_traffic, "Traffic(read=..., write=...)"), (_is_bytes, "a whole number of bytes")
        checks = [("traffic", self.compute_traffic, *traffic)] if self.compute_traffic else []
        for impl in impls:
            checks += [(f"implementation {impl.name!r}: {what}", fn, *expected)
                       for what, fn, expected in (("traffic", impl.traffic, traffic),
                                                  ("mask_bytes", impl.mask_bytes, mask)) if fn]
        for case in cases:
            for what, fn, valid, wanted in checks:
                try:
                    value = fn(case)
                except Exception as err:  # noqa: BLE001 - the user's function, whatever it raises
                    self._traffic_failed(case, given, f"{type(err).__name__}: {err}", _defined_at(fn, err),
                                         f"{what}({case.id})")
                if not valid(value):
                    raise SuiteDefinitionError(f"{_defined_at(fn)}suite {self.name!r}: {what}({case.id}) returned "
                                               f"{type(value).__name__} {str(value)[:40]!r}, not {wanted}")

    def _traffic_failed(self, case: Case, given: Mapping[str, Iterable[Any]] | None, why: str, where: str,
                        what: str) -> None:
        chosen = [f"{axis}={case.params[axis]}" for axis, values in (given or {}).items()
                  if axis in case.params and case.params[axis] in list(values)]
        if chosen:  # the user's value, which no domain of the suite refused sooner
            raise SelectionError(f"suite {self.name!r} cannot take {', '.join(chosen)}: its {what} raised {why}")
        raise SuiteDefinitionError(f"{where}suite {self.name!r}: {what} raised {why}")

    def traffic_of(self, impl: Implementation, case: Case) -> Traffic:
        return impl.traffic(case) if impl.traffic else self.compute_traffic(case)

    @staticmethod
    def mask_bytes_of(impl: Implementation, case: Case) -> int | None:
        value = impl.mask_bytes(case) if impl.mask_bytes else None
        return None if value is None else int(value)  # numpy's int64 is no JSON

    def select_impls(self, names: Iterable[str] | None) -> list[Implementation]:
        if not names:
            return list(self.implementations.values())
        chosen = []
        for name in names:
            if name not in self.implementations:
                valid = ", ".join(self.implementations)
                raise SelectionError(f"suite {self.name!r} has no implementation {name!r}; valid: {valid}")
            if self.implementations[name] not in chosen:  # `--impl torch,torch`: measured once
                chosen.append(self.implementations[name])
        return chosen

    def select_dtypes(self, dtypes: Iterable[str] | None) -> list[str]:
        if not dtypes:
            return list(self.default_dtypes or [])
        chosen = []
        for dtype in dtypes:
            if dtype not in self.dtypes:
                raise SelectionError(f"suite {self.name!r} does not run dtype {dtype!r}; valid: {', '.join(self.dtypes)}")
            chosen.append(dtype)
        return chosen

    def parse_axis_values(self, axis: str, texts: Iterable[str]) -> list[Any]:
        if axis not in self.axes:
            raise SelectionError(f"suite {self.name!r} has no axis {axis!r}; axes: {', '.join(self.axes)}")
        example = self.axes[axis][0]
        texts = [t.strip() for t in texts]
        if isinstance(example, tuple) and len(texts) > 1 and not any("x" in t for t in texts):
            texts = [",".join(texts)]  # the CLI split `--perm 0,2,1` on its commas: one tuple
        values = []
        for text in texts:
            try:
                values.append(parse_like(text, example))
            except FractionError:
                raise SelectionError(f"--{axis} takes integers (like {format_value(example)}), not {text!r}") from None
            except (ValueError, OverflowError):
                raise SelectionError(f"--{axis}: cannot read {text!r} as a value like {format_value(example)!r}") from None
        if not values:
            raise SelectionError(f"--{axis} needs at least one value")
        return values

    def cases(self, dtypes: Iterable[str] | None = None, axis_values: Mapping[str, list[Any]] | None = None,
              quick: bool = False, preset: str | Iterable[str] | None = None) -> list[Case]:
        """The sweep: the cartesian product of the axes (quick values and user values replacing them),
        or, for a suite of explicit points, the points matching the user's values; with `preset`
        (a name, several comma-separated, or a list), each preset's blocks one after another (user
        values replacing an axis in every block), a case shared by two presets measured once."""
        quick = check_flag("quick", quick)
        if preset is not None:
            chosen = self._preset_cases(preset, dtypes, axis_values or {}, quick)
        else:
            chosen = self._sweep(dtypes, axis_values, quick)
        once: dict[tuple, Case] = {}  # `--cols 1024,1024`, `-d float16,float16` or two presets' case: once
        for case in chosen:
            once.setdefault((case.id, case.dtype), case)
        chosen = list(once.values())
        from .domains import DomainError, check_domains

        try:
            check_domains(self.name, self.domains, (case.params for case in chosen))
        except DomainError as err:
            raise SelectionError(str(err)) from None
        if self.check_case:
            for case in chosen:
                problem = self.check_case(case)
                if problem:
                    raise SelectionError(f"{case}: {problem}")
        return chosen

    def _sweep(self, dtypes, axis_values, quick) -> list[Case]:
        if self.points is not None:
            return self._point_cases(dtypes, axis_values or {}, quick)
        axes = dict(self.axes)
        if quick:
            axes.update(self.quick)
        for axis, values in (axis_values or {}).items():
            if axis not in axes:
                raise SelectionError(f"suite {self.name!r} has no axis {axis!r}; axes: {', '.join(self.axes)}")
            axes[axis] = list(values)
        chosen_dtypes = self.select_dtypes(dtypes)
        names = list(axes)
        return [Case(self.name, dict(zip(names, combo)), dtype)
                for dtype in chosen_dtypes
                for combo in itertools.product(*(axes[n] for n in names))]

    def _preset_cases(self, preset: str | Iterable[str], dtypes, axis_values: Mapping[str, list[Any]],
                      quick: bool) -> list[Case]:
        names = [n.strip() for n in (preset.split(",") if isinstance(preset, str) else preset)]
        if not all(names):
            raise SelectionError(f"--preset needs names separated by commas, not {','.join(names)!r}")
        unknown = [n for n in names if n not in self.presets]
        if unknown:
            known = ", ".join(self.presets) or "none"
            raise SelectionError(f"suite {self.name!r} has no preset {', '.join(map(repr, unknown))}; presets: {known}")
        if quick:
            raise SelectionError("--quick and --preset each choose the sweep: give one of them")
        cases: list[Case] = []  # a case two presets share is measured once: cases() keeps its first
        for name in names:
            for block in self.presets[name]:
                cases += self._sweep(dtypes, {**block, **axis_values}, False)
        return cases

    def _point_cases(self, dtypes, axis_values: Mapping[str, list[Any]], quick: bool) -> list[Case]:
        for axis in axis_values:
            if axis not in self.axes:
                raise SelectionError(f"suite {self.name!r} has no axis {axis!r}; axes: {', '.join(self.axes)}")
        names = list(self.axes)
        if axis_values and set(axis_values) == set(names):
            points = [dict(zip(names, combo)) for combo in itertools.product(*(axis_values[n] for n in names))]
        else:
            points = [p for p in self.points if all(p[a] in vals for a, vals in axis_values.items())]
            if quick and self.quick:
                points = [p for p in points if all(p[a] in vals for a, vals in self.quick.items())]
            if not points:
                wanted = ", ".join(f"--{a} {','.join(map(format_value, v))}" for a, v in axis_values.items())
                raise SelectionError(f"no case of suite {self.name!r} matches {wanted}; give every axis "
                                     f"({', '.join('--' + n for n in names)}) to run a case of your own")
        chosen_dtypes = self.select_dtypes(dtypes)
        return [Case(self.name, dict(p), dtype) for dtype in chosen_dtypes for p in points]

    def describe(self) -> dict[str, Any]:
        """What the results file records about the suite, so reports need not import it."""
        return {
            "description": self.description,
            "axes": {k: [format_value(v) for v in vals] for k, vals in self.axes.items()},
            "x_axis": self.x_axis,
            "dtypes": list(self.dtypes),
            "presets": {name: [{k: [format_value(v) for v in vals] for k, vals in block.items()} for block in blocks]
                        for name, blocks in self.presets.items()},
            "implementations": {i.name: {"kind": i.kind, "role": i.role, "description": i.description}
                                for i in self.implementations.values()},
        }
