"""Output files that never replace what the user did not name: checked names, unique stems, atomic writes.

Every file bwbench writes (results, CSV, HTML, markdown, JSON verdicts) goes through here, so that
two runs started in the same second get different names, a results file is never replaced by a
report or a gate's verdicts, `--name ../x` cannot write outside `--out`, and a reader (or a second
writer) never sees half a file: each write lands in a unique temporary file in the target folder and
is renamed over the target in one step.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

RESULT_SUFFIXES = (".jsonl", ".json", ".csv", ".html")
"""The files one run writes for a stem: the record stream, its single-JSON export, CSV, report."""


class OutputError(Exception):
    """An output path that cannot or must not be written: a one-line message, exit code 2."""


def os_error_text(err: OSError, path: os.PathLike | str | None = None) -> str:
    """An OS error on a path as one line: 'cannot write reports/x.json: permission denied'."""
    where = path if path is not None else (err.filename or "")
    reason = (err.strerror or str(err)).lower() if err.strerror or str(err) else type(err).__name__
    return f"cannot write {where}: {reason}"


# --- names -----------------------------------------------------------------------------------
_UNSAFE_STEM = re.compile(r"[\x00-\x1f\x7f/\\]")


def check_stem(name: str) -> str:
    """A `--name` must be a plain file stem: no folder part, no '..', not absolute, no control
    characters. Returns it unchanged, or raises OutputError."""
    if not name or not name.strip():
        raise OutputError("--name must not be empty")
    if os.path.isabs(name) or _UNSAFE_STEM.search(name) or (os.altsep and os.altsep in name):
        raise OutputError(f"--name {name!r} must be a plain file name stem (no folders, no separators); "
                          "use --out for the folder")
    if ".." in name or name.startswith(".") or name.startswith("-"):
        raise OutputError(f"--name {name!r} must be a plain file name stem (no '..', no leading '.' or '-')")
    if len(name.encode("utf-8", "surrogateescape")) > 200:
        raise OutputError(f"--name is {len(name)} characters long; keep it under 200")
    return name


def unique_suffix() -> str:
    """A short random tag that keeps runs started in the same second (or on two GPUs) apart."""
    return secrets.token_hex(3)


def existing_outputs(folder: Path, stem: str, suffixes: Iterable[str] = RESULT_SUFFIXES) -> list[Path]:
    return [folder / f"{stem}{s}" for s in suffixes if os.path.lexists(folder / f"{stem}{s}")]


def same_file(a: os.PathLike | str, b: os.PathLike | str) -> bool:
    """True when two paths name one file (through links, '..' or case folding), or the same path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(os.path.abspath(a)) == Path(os.path.abspath(b))


def results_stem(folder: Path, name: str | None, default_stem: str, force: bool,
                 protected: Iterable[os.PathLike | str] = ()) -> str:
    """The stem a run writes its files under.

    A default name gets a random suffix and is never one whose files exist. A `--name` must be a
    plain stem; its files may exist only with `force`, and never when one of them is a protected
    file (an input of the run, such as its --baseline), force or not."""
    if name is None:
        for _ in range(100):
            stem = f"{default_stem}-{unique_suffix()}"
            if not existing_outputs(folder, stem):
                return stem
        raise OutputError(f"cannot find a free file name for {default_stem} in {folder}")
    stem = check_stem(name)
    taken = existing_outputs(folder, stem)
    for path in taken:
        if any(same_file(path, p) for p in protected):
            raise OutputError(f"{path} is an input of this run (--baseline); it is never replaced, even with --force")
    if taken and not force:
        raise OutputError(f"{taken[0]} exists; choose another --name or pass --force to replace it")
    return stem


def refuse_input_as_output(output: os.PathLike | str, inputs: Iterable[os.PathLike | str], option: str) -> None:
    """An output that is one of the command's inputs (`report A.json -o A.json`) is refused."""
    for path in inputs:
        if same_file(output, path):
            raise OutputError(f"{option} {output} is one of the input files; it would be replaced: choose another file")


def refuse_results_file(output: os.PathLike | str, option: str) -> None:
    """A report or a gate's verdicts never replace an existing results file or results store."""
    path = Path(output)
    if path.is_file() and looks_like_results(path):
        raise OutputError(f"{option} {path} is a bwbench results file; it would be replaced: choose another file")
    if path.is_file() and looks_like_store(path):
        raise OutputError(f"{option} {path} is a database (a results store?); it would be replaced: choose another file")


def refuse_other_kind(output: os.PathLike | str, option: str, suffixes: tuple[str, ...]) -> None:
    """An existing file replaced by a page or a table must already be one (its name ends in one of
    `suffixes`): `report -o my_suite.py`, a slip of the hand, would have replaced the suite."""
    path = Path(output)
    if path.is_file() and path.suffix.lower() not in suffixes:
        raise OutputError(f"{option} {path} exists and is not a {'/'.join(suffixes)} file; it would be replaced: "
                          "choose another file")


def refuse_folder(output: os.PathLike | str, option: str) -> None:
    """An output that is a folder is refused before the work, not after the table is printed."""
    if Path(output).is_dir():
        raise OutputError(f"{option} {output} is a folder; name a file in it")


def looks_like_results(path: Path) -> bool:
    """A cheap sniff of a file's first bytes for a bwbench results document or stream."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"bwbench.results/' in head or head.lstrip().startswith(b'{"header"')


def looks_like_store(path: Path) -> bool:
    """An SQLite file, as the results store is."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def distinct_outputs(outputs: dict[str, os.PathLike | str | None]) -> None:
    """Two options writing one file would leave only the last, and two writing stdout ('-') would
    mix their formats in one stream: both refused."""
    seen: dict[str, str] = {}
    for option, target in outputs.items():
        if target is None:
            continue
        if str(target) == "-":
            if "-" in seen:
                raise OutputError(f"{seen['-']} and {option} both write to stdout ('-'); send one of them to a file")
            seen["-"] = option
            continue
        key = os.path.realpath(target)  # a link names the file it points at
        if key in seen:
            raise OutputError(f"{seen[key]} and {option} name the same file {target}")
        seen[key] = option


def check_run_outputs(folder: Path, name: str | None, force: bool, inputs: Iterable[os.PathLike | str]) -> None:
    """`run`'s outputs, checked before any GPU work: the folder can be written, a --name is a
    plain stem whose files exist only with --force, and never are one of the run's inputs."""
    check_writable_folder(folder)
    if name is not None:
        results_stem(Path(folder), name, "", force, inputs)


def check_results_output(path: os.PathLike | str, force: bool) -> Path:
    """`bwbench.run(output=...)`, checked before any GPU work: a NAME.json (or its stream, NAME.jsonl)
    in a folder that can be written; NAME.json and NAME.jsonl may exist only with `force`."""
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"output {target} is a folder; name a .json file in it")
    if target.suffix not in (".json", ".jsonl"):
        raise OutputError(f"output {target}: a results file is written as NAME.json; name one")
    for existing in (target.with_suffix(".json"), target.with_suffix(".jsonl")):
        if os.path.lexists(existing) and not force:
            raise OutputError(f"output {existing} exists; choose another file or pass force=True to replace it")
    check_writable_folder(target.parent)
    return target


PAGE_SUFFIXES = (".html", ".htm")
GATE_SUFFIXES = {"--markdown": (".md", ".markdown", ".txt"), "--json": (".json",)}
"""What an existing file may be named for `report`/`history -o` and `compare`'s outputs to replace it."""


def check_report_output(target: os.PathLike | str, inputs: Iterable[os.PathLike | str]) -> None:
    """`report -o`: never one of the results files it reads, never another results file; not '-',
    which other commands read as stdout (a page of megabytes is no terminal output)."""
    if str(target) == "-":
        raise OutputError("--output - : the HTML page is written to a file, not stdout; name one (e.g. report.html)")
    refuse_input_as_output(target, inputs, "--output")
    refuse_results_file(target, "--output")
    refuse_folder(target, "--output")
    refuse_other_kind(target, "--output", PAGE_SUFFIXES)
    check_writable_folder(Path(target).parent)


def check_gate_outputs(outputs: dict[str, os.PathLike | str | None], inputs: Iterable[os.PathLike | str]) -> None:
    """`compare --json/--markdown`: never an input (the baseline), never a results file, never
    both options on one file; checked before the runs are read."""
    inputs = list(inputs)
    distinct_outputs(outputs)
    for option, target in outputs.items():
        if target is None or str(target) == "-":
            continue
        refuse_input_as_output(target, inputs, option)
        refuse_results_file(target, option)
        refuse_folder(target, option)
        refuse_other_kind(target, option, GATE_SUFFIXES.get(option, ()) or (Path(target).suffix.lower(),))
        check_writable_folder(Path(target).parent)


def check_store_output(store: os.PathLike | str, folder: Path | None = None, name: str | None = None) -> None:
    """`run --store`: a results store (an SQLite file) or a new file in a folder that can be written,
    and none of the files the run itself writes under `--out`/`--name`."""
    path = Path(store)
    if folder is not None and name is not None:
        distinct_outputs({**{f"--name {name} ({s})": Path(folder) / f"{name}{s}" for s in RESULT_SUFFIXES},
                          "--store": path})
    if path.exists() and not (path.is_file() and (looks_like_store(path) or path.stat().st_size == 0)):
        raise OutputError(f"--store {path} is not a results store; name a new file or an existing store")
    check_writable_folder(path.parent)


# --- folders ---------------------------------------------------------------------------------
def check_writable_folder(folder: Path) -> None:
    """Fail now (before any GPU time) when `folder` cannot hold the run's files. A folder that
    does not exist yet must be creatable: its nearest existing parent is probed instead."""
    folder = Path(folder)
    probe = folder
    while not probe.exists():
        if probe.is_symlink():
            raise OutputError(f"cannot write to {folder}: {probe} is a broken link")
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"cannot write to {folder}: {probe} is not a folder")
    try:
        fd, name = tempfile.mkstemp(dir=probe, prefix=".bwbench-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise OutputError(f"cannot write to {folder}: {(err.strerror or str(err)).lower()}") from None


def make_folder(folder: Path) -> None:
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(os_error_text(err, folder)) from None


# --- writing ---------------------------------------------------------------------------------
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_file(path: os.PathLike | str, mode: str = "w", encoding: str | None = "utf-8",
                newline: str | None = None) -> Iterator:
    """Write `path` through a unique temporary file in its folder, renamed over it when the block
    ends without an error: readers see the old file or the new one, never a mix, and two writers
    of one path never interleave (the last rename wins whole). On an error the target is untouched.
    A link is written through (the file it points at is replaced, the link stays), and a device or a
    pipe (/dev/null, a FIFO) is written into, never replaced by a file."""
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    if target.exists() and not target.is_file() and not target.is_dir():
        yield from _written_through(target, mode, encoding, newline)
        return
    make_folder(target.parent)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise OutputError(os_error_text(err, target)) from None
    try:
        binary = "b" in mode
        with os.fdopen(fd, mode, encoding=None if binary else encoding, newline=None if binary else newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        if target.is_dir():
            raise OutputError(f"cannot write {target}: it is a folder")
        os.replace(tmp, target)
    except OSError as err:
        _remove_quietly(tmp)
        raise OutputError(os_error_text(err, target)) from None
    except BaseException:
        _remove_quietly(tmp)
        raise


def _written_through(target: Path, mode: str, encoding: str | None, newline: str | None) -> Iterator:
    binary = "b" in mode
    try:
        with open(target, mode, encoding=None if binary else encoding, newline=None if binary else newline) as fh:
            yield fh
    except OSError as err:
        raise OutputError(os_error_text(err, target)) from None


def write_text(path: os.PathLike | str, text: str) -> Path:
    """Atomically write text (see atomic_file)."""
    with atomic_file(path, "w") as fh:
        fh.write(text)
    return Path(path)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def create_exclusive(path: os.PathLike | str, replace: bool = False):
    """Open a new file for appending that no one else has: an existing file is an OutputError
    unless `replace` (then it is truncated). Used for the record stream a run appends to."""
    target = Path(path)
    make_folder(target.parent)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if replace else os.O_EXCL)
    try:
        fd = os.open(target, flags, 0o666)
    except FileExistsError:
        raise OutputError(f"{target} exists; it is never replaced without --force") from None
    except OSError as err:
        raise OutputError(os_error_text(err, target)) from None
    return os.fdopen(fd, "a", encoding="utf-8")
