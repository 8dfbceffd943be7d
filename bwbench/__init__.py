"""bwbench: how close do memory-bound GPU kernels get to the bandwidth the card can move?

The public API (imported on first use, so `import bwbench` stays cheap and does not import torch):

- `Suite`, `Traffic`, `Tolerance`, `Skip`, `pow2`, `compile_per_case`: declare a benchmark;
- `bench(fn, bytes=..., mode="cold")`: time one callable against a same-size copy;
- `plan(suite_or_path, impls=..., **axes)`: what `run` would measure, checked, with no GPU
  (`bwbench run --dry-run`);
- `run(suite_or_path, impls=..., **axes)`: check and time a suite, a pandas DataFrame back;
- `load(path)`: a results file as a DataFrame.

What they raise, all before any GPU work unless noted: `SelectionError` (a suite, implementation,
dtype, preset or axis value the suite does not have), its subclass `BrokenSuiteError` (a suite file
that cannot be imported: the message names its file and line), `SuiteDefinitionError` (a suite
declared wrong, such as a traffic function that raises or returns no Traffic), `OutputError`
(`run`'s output is no NAME.json, or exists and `force` is not given), and `NoGpuError` (`run`
and `bench` without a CUDA GPU); `load` raises `ResultsFileError` (a file that is missing, not
a results file, or of a mistyped field: the message names the file and the field)."""

__version__ = "0.1.0"

_EXPORTS = {
    "Suite": "suite", "Traffic": "suite", "Tolerance": "suite", "Skip": "suite", "pow2": "suite",
    "compile_per_case": "suite", "Case": "suite", "kind_order": "suite",
    "bench": "api", "plan": "api", "run": "api", "load": "api", "BenchResult": "session", "Session": "session",
    "SelectionError": "suite", "SuiteDefinitionError": "suite", "BrokenSuiteError": "discovery",
    "NoGpuError": "device", "OutputError": "outputs", "ResultsFileError": "results",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bwbench' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
