"""Suites are found by convention: every suites/NAME.py (not starting with "_") defines `suite`."""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from .paths import suites_dir
from .suite import SelectionError, Suite

PACKAGE = "bwbench_suites"


@dataclass(frozen=True)
class BrokenSuite:
    """A suite file that could not be imported; listed with its error instead of hiding it."""

    name: str
    path: Path
    error: str


def _package(directory: Path) -> None:
    # A synthetic package so suite files can import private helpers next to them (from ._x import y).
    if PACKAGE not in sys.modules:
        pkg = types.ModuleType(PACKAGE)
        pkg.__path__ = [str(directory)]
        sys.modules[PACKAGE] = pkg


def load_suite_file(path: Path) -> Suite | BrokenSuite:
    name = path.stem
    _package(path.parent)
    module_name = f"{PACKAGE}.{name}"
    if module_name in sys.modules:
        module = sys.modules[module_name]
    else:
        try:
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 - one broken suite must not hide the others
            sys.modules.pop(module_name, None)
            return BrokenSuite(name, path, f"{type(err).__name__}: {err}")
    suite = getattr(module, "suite", None)
    if not isinstance(suite, Suite):
        return BrokenSuite(name, path, "the file defines no `suite = Suite(...)`")
    if suite.name != name:
        return BrokenSuite(name, path, f"the file's suite is named {suite.name!r}, not {name!r}")
    return suite


def discover(directory: Path | None = None) -> dict[str, Suite | BrokenSuite]:
    directory = directory or suites_dir()
    return {p.stem: load_suite_file(p) for p in sorted(directory.glob("*.py")) if not p.name.startswith("_")}


def get_suite(name: str, directory: Path | None = None) -> Suite:
    found = discover(directory)
    entry = found.get(name)
    if entry is None:
        valid = ", ".join(k for k, v in found.items() if isinstance(v, Suite)) or "none"
        raise SelectionError(f"no suite named {name!r}; suites: {valid}")
    if isinstance(entry, BrokenSuite):
        raise SelectionError(f"suite {name!r} could not be loaded from {entry.path}: {entry.error}")
    entry.check_complete()
    return entry
