"""Where suites come from: bwbench's own suites/ folder, folders on $BWBENCH_SUITES_PATH, packages
that declare a `bwbench.suites` entry point, and any file or folder the user names.

A suite file is plain Python that builds `suite = Suite(...)`; files whose name starts with "_" are
helpers, not suites. A file that fails to import is kept as a BrokenSuite (with the file and line
that raised) so listing shows it instead of hiding it, and running it is a clear error. Two suites
with one name are an error naming both files: which one a run measured must never be a guess.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .paths import suites_dir
from .suite import SelectionError, Suite

PACKAGE = "bwbench_suites"
"""The synthetic package bwbench's own suite files are imported under (so they can import private
helpers next to them: from ._x import y); every other folder gets its own."""
ENTRY_POINT_GROUP = "bwbench.suites"
"""An entry point in this group names a Suite, a module defining `suite`, or a list of Suites."""
PATH_VARIABLE = "BWBENCH_SUITES_PATH"
"""Folders of suite files, separated by ':' (os.pathsep), searched after bwbench's own."""


NO_SUITE = "the file defines no `suite = Suite(...)`"


@dataclass(frozen=True)
class BrokenSuite:
    """A suite file that could not be imported; listed with its error instead of hiding it."""

    name: str
    path: Path
    error: str
    line: int | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else str(self.path)


class SuiteCollision(SelectionError):
    """Two suites share a name: the message names both files."""


class BrokenSuiteError(SelectionError):
    """The suite the user asked for cannot be imported: the message names the file and line."""


def _package_for(directory: Path) -> str:
    directory = directory.resolve()
    try:
        builtin = suites_dir().resolve()
    except FileNotFoundError:  # pragma: no cover - an install without its suites
        builtin = None
    name = PACKAGE if directory == builtin else \
        f"{PACKAGE}_{hashlib.sha1(str(directory).encode()).hexdigest()[:12]}"
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(directory)]
        sys.modules[name] = pkg
    return name


def _error_line(err: BaseException, path: Path) -> int | None:
    """The line of `path` the error came from: a syntax error's own line, else the traceback's last
    frame in that file."""
    if isinstance(err, SyntaxError) and err.filename and Path(err.filename).resolve() == path:
        return err.lineno
    line = None
    for frame in traceback.extract_tb(err.__traceback__):
        if Path(frame.filename).resolve() == path:
            line = frame.lineno
    return line


def _users_frame(err: BaseException) -> tuple[Path, int | None] | None:
    """Where in the user's own code an import failed: a syntax error's line, else the traceback's last
    frame outside bwbench and the import machinery (a bad Suite(...) argument raises in bwbench's
    suite.py, but the line to fix is the one that called it). None where no such frame is left (a
    module or attribute the entry point names that does not exist)."""
    if isinstance(err, SyntaxError) and err.filename:
        return Path(err.filename), err.lineno
    ours = Path(__file__).resolve().parent
    machinery = Path(importlib.util.__file__).resolve().parent
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if frame.filename.startswith("<"):
            continue
        file = Path(frame.filename).resolve()
        if not (file.is_relative_to(ours) or file.is_relative_to(machinery)):
            return file, frame.lineno
    return None


@contextlib.contextmanager
def _folder_importable(folder: Path):
    """A suite file imports the modules beside it (`import my_kernels`) as the same file run as a
    script would: its folder comes first on sys.path while it executes, and stays on the path
    afterwards, last, for the imports its build functions make later. bwbench's own suites/
    folder is left out: its helpers are imported relatively (from ._shapes import ...)."""
    try:
        builtin = suites_dir().resolve()
    except FileNotFoundError:  # pragma: no cover - an install without its suites
        builtin = None
    entry = str(folder)
    if folder == builtin:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        sys.path.remove(entry)  # the first occurrence: the one put in front above
        if entry not in sys.path:
            sys.path.append(entry)


def _why_no_suite(module: types.ModuleType, suite: object) -> str:
    """NO_SUITE for a helper file; a file that builds a Suite under another name, or binds
    `suite` to something else, is a suite file with a mistake, never a helper left out of a folder."""
    others = [name for name, value in vars(module).items()  # built here: one loaded elsewhere has its source
              if isinstance(value, Suite) and value.source is None and not name.startswith("_")]
    if others:
        return f"the file builds a Suite as `{others[0]}`, but bwbench takes the one named `suite` (suite = Suite(...))"
    if suite is not None and not isinstance(suite, types.ModuleType):
        return f"`suite` is {type(suite).__name__} {suite!r}, not a Suite (suite = Suite(...))"
    return NO_SUITE


def load_suite_file(path: str | os.PathLike) -> Suite | BrokenSuite:
    """Import one suite file (once per process) and return its `suite`, or why it cannot."""
    path = Path(path).resolve()
    module_name = f"{_package_for(path.parent)}.{path.stem}"
    module = sys.modules.get(module_name)
    if module is None or getattr(module, "__file__", None) != str(path):
        try:
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            with _folder_importable(path.parent):
                spec.loader.exec_module(module)
        except BaseException as err:  # noqa: BLE001 - one broken suite must not hide the others
            sys.modules.pop(module_name, None)
            if isinstance(err, KeyboardInterrupt):
                raise
            return BrokenSuite(path.stem, path, f"{type(err).__name__}: {err}", _error_line(err, path))
    suite = getattr(module, "suite", None)
    if not isinstance(suite, Suite):
        return BrokenSuite(path.stem, path, _why_no_suite(module, suite))
    suite.source = str(path)
    return suite


def _name_of(entry: Suite | BrokenSuite) -> str:
    return entry.name


def _source_of(entry: Suite | BrokenSuite) -> str:
    return str(entry.path) if isinstance(entry, BrokenSuite) else (entry.source or f"<{entry.name}>")


NOT_SUITE_FILES = ("_*", "test_*", "*_test.py", "conftest.py", "setup.py", "noxfile.py")
"""Files a folder scan leaves alone: private helpers, pytest files, packaging scripts."""


def is_suite_file(path: Path) -> bool:
    return path.suffix == ".py" and not any(path.match(pattern) for pattern in NOT_SUITE_FILES)


def load_folder(directory: str | os.PathLike) -> list[Suite | BrokenSuite]:
    """Every suite file in a folder (not its subfolders), in name order. A file that imports but
    defines no `suite` is a helper, left out; one that fails to import is kept as broken."""
    directory = Path(directory)
    entries = [load_suite_file(p) for p in sorted(directory.glob("*.py")) if is_suite_file(p)]
    return [e for e in entries if not (isinstance(e, BrokenSuite) and e.error == NO_SUITE)]


def entry_point_suites() -> list[Suite | BrokenSuite]:
    """Suites that installed packages declare in the `bwbench.suites` entry-point group."""
    from importlib.metadata import entry_points

    found: list[Suite | BrokenSuite] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {ep.name} = {ep.value}"
        try:
            target = ep.load()
        except Exception as err:  # noqa: BLE001
            frame = _users_frame(err)
            if frame is None:  # the entry point itself is where: named once, not again in the error
                found.append(BrokenSuite(ep.name, Path(origin), f"{type(err).__name__}: {err}"))
            else:
                found.append(BrokenSuite(ep.name, frame[0], f"{origin}: {type(err).__name__}: {err}", frame[1]))
            continue
        if isinstance(target, types.ModuleType):
            target = getattr(target, "suite", None)
        suites = target if isinstance(target, (list, tuple)) else [target]
        for suite in suites:
            if isinstance(suite, Suite):
                if suite.source is None:
                    suite.source = getattr(sys.modules.get(getattr(ep, "module", "")), "__file__", None) or origin
                found.append(suite)
            else:
                found.append(BrokenSuite(ep.name, Path(origin), "the entry point names no Suite"))
    return found


def path_folders() -> list[Path]:
    """The folders on $BWBENCH_SUITES_PATH, in order; empty entries ignored."""
    value = os.environ.get(PATH_VARIABLE, "")
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p.strip()]


def _collect(entries: list[Suite | BrokenSuite]) -> dict[str, Suite | BrokenSuite]:
    found: dict[str, Suite | BrokenSuite] = {}
    for entry in entries:
        name = _name_of(entry)
        if name in found and _source_of(found[name]) != _source_of(entry):
            raise SuiteCollision(f"two suites are named {name!r}: {_source_of(found[name])} and {_source_of(entry)}; "
                                 "rename one (Suite(name=...)) or leave one folder out")
        found[name] = entry
    return found


def registry() -> dict[str, Suite | BrokenSuite]:
    """Every suite known by name: bwbench's own, $BWBENCH_SUITES_PATH folders, entry points."""
    entries = load_folder(suites_dir())
    for folder in path_folders():
        if not folder.is_dir():
            raise SelectionError(f"{PATH_VARIABLE} names {folder}, which is not a folder")
        entries += load_folder(folder)
    entries += entry_point_suites()
    return _collect(entries)


def discover(directory: Path | None = None) -> dict[str, Suite | BrokenSuite]:
    """The suites of one folder by name, or, without a folder, every suite known by name."""
    if directory is None:
        return registry()
    return _collect(load_folder(directory))


def looks_like_path(text: str) -> bool:
    """A selection that names a file or folder rather than a suite."""
    return text.endswith(".py") or "/" in text or os.sep in text or text in (".", "..") or text.startswith("~")


def names_a_path(text: str, known: Callable[[], dict]) -> bool:
    """A path by its form (./x, x.py), or a bare word that is on disk and names no suite: a file or
    folder called `softmax` in the working folder does not hide the suite, and a bare folder name
    works for `run` as for `list`."""
    if looks_like_path(text):
        return True
    return Path(text).exists() and text != "all" and text not in known()


def _names_not_taken(entries: list[Suite | BrokenSuite],
                     known: Callable[[], dict[str, Suite | BrokenSuite]]) -> list[Suite | BrokenSuite]:
    """A suite file's suite may not take the name of a known suite (bwbench's own, an installed
    one): results, gates and the history store key records by suite name, so its records would be
    read as that suite's."""
    for entry in entries:
        name = _name_of(entry)
        other = known().get(name)
        if other is not None and _source_of(other) != _source_of(entry):
            raise SuiteCollision(f"{_source_of(entry)} names its suite {name!r}, as {_source_of(other)} does: "
                                 "results and history are kept by suite name, so give it another (Suite(name=...))")
    return entries


def _usable(entry: Suite | BrokenSuite) -> Suite:
    if isinstance(entry, BrokenSuite):
        raise BrokenSuiteError(f"suite {entry.name!r} could not be loaded: {entry.where}: {entry.error}")
    entry.check_complete()
    return entry


def from_path(text: str) -> list[Suite | BrokenSuite]:
    """The suites a path names: one file, or every suite file in a folder."""
    path = Path(text).expanduser()
    if path.is_dir():
        try:  # a folder that cannot be listed globs as empty: "no suite files" would send the user looking
            os.listdir(path)
        except OSError as err:
            raise SelectionError(f"{text}: cannot read this folder ({err.strerror or err}); "
                                 "check its permissions") from None
        entries = load_folder(path)
        if not entries:
            raise SelectionError(f"{text}: no suite files in this folder (a *.py that defines `suite = Suite(...)`)")
        return entries
    if path.is_file():
        if path.suffix != ".py":
            raise SelectionError(f"{text}: not a suite file (a *.py that defines `suite = Suite(...)`)")
        return [load_suite_file(path)]
    if path.exists():  # a FIFO, a socket, a device
        raise SelectionError(f"{text}: not a suite file or folder (a *.py that defines `suite = Suite(...)`)")
    raise SelectionError(f"{text}: no such file or folder")


def resolve(selection: str | os.PathLike | Suite | list) -> list[Suite]:
    """The suites a selection names, in order, each once: a Suite, a name, `all`, a path to a file or
    folder, or a comma-separated mix (`softmax,./mine.py`). A broken file, an unknown name and two
    suites with one name are SelectionErrors."""
    if isinstance(selection, Suite):
        return [_usable(selection)]
    what = "a Suite, a suite name, a suite file or folder, or a list of them"
    if isinstance(selection, (list, tuple)):
        parts = list(selection)
        wrong = next((p for p in parts if not isinstance(p, (str, os.PathLike, Suite))), None)
        if wrong is not None:
            raise SelectionError(f"a suite selection takes {what}, not {type(wrong).__name__} {wrong!r}")
    elif isinstance(selection, os.PathLike):  # one path, whatever its name holds (a comma too)
        parts = [selection]
    elif isinstance(selection, str):
        parts = [p.strip() for p in selection.split(",") if p.strip()]
    else:  # None or 5 read as the text 'None': "no suite named 'None'" hid the real mistake
        raise SelectionError(f"a suite selection takes {what}, not {type(selection).__name__} {selection!r}")
    if not parts:
        raise SelectionError("name a suite (see `bwbench list`), a suite file or folder, several separated by commas, or `all`")
    chosen: list[Suite | BrokenSuite] = []
    known = functools.cache(registry)  # scanned once, and only if a part needs it
    for part in parts:
        if isinstance(part, Suite):
            chosen.append(part)
        elif isinstance(part, os.PathLike) or names_a_path(part, known):
            chosen += _names_not_taken(from_path(str(part)), known)
        elif part == "all":
            chosen += list(known().values())  # a broken one is an error below, never silently left out
        elif part in known():
            chosen.append(known()[part])
        else:
            valid = ", ".join(k for k, v in known().items() if isinstance(v, Suite)) or "none"
            raise SelectionError(f"no suite named {part!r}; suites: {valid} (or give a path: ./my_suite.py)")
    unique = _collect(chosen)
    return [_usable(entry) for entry in unique.values()]


def listing(selection: str | None = None) -> dict[str, Suite | BrokenSuite]:
    """What `bwbench list` shows: every known suite, or those a path names, broken ones included."""
    if not selection:
        return registry()
    entries: list[Suite | BrokenSuite] = []
    known = functools.cache(registry)
    for part in (p.strip() for p in selection.split(",") if p.strip()):
        if names_a_path(part, known):
            entries += from_path(part)
        elif part in known():
            entries.append(known()[part])
        else:
            valid = ", ".join(k for k, v in known().items() if isinstance(v, Suite)) or "none"
            raise SelectionError(f"no suite named {part!r}; suites: {valid} (or give a path: ./my_suite.py)")
    return _collect(entries)


def get_suite(name: str, directory: Path | None = None) -> Suite:
    """One suite by name (or path), ready to run."""
    if directory is not None:
        found = discover(directory)
        if name not in found:
            valid = ", ".join(k for k, v in found.items() if isinstance(v, Suite)) or "none"
            raise SelectionError(f"no suite named {name!r}; suites: {valid}")
        return _usable(found[name])
    suites = resolve(Path(name) if os.path.isabs(name) else name)  # a suite's source file: one path, commas or not
    if len(suites) != 1:
        raise SelectionError(f"{name!r} names {len(suites)} suites; name one")
    return suites[0]
