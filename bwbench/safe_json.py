"""JSON that every tool can read, and input files read without trusting them.

Python's json writes NaN and Infinity as bare tokens that jq, browsers and most JSON parsers
reject. Here a non-finite number is written as null and noted beside it ({"at": [path], "was":
"inf"}), so the value is restored on reading and the file stays strict JSON. Input files are read
only when they are regular files under a size limit, so `/dev/zero`, a FIFO or a huge file is a
one-line refusal instead of a hang or an exhausted memory.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

MAX_INPUT_BYTES = 2 * 10**9
"""Largest results file read (2 GB: a `run all` with raw samples writes a few hundred MB)."""


class InputFileError(ValueError):
    """An input file that cannot be read as asked: its message names the file, exit code 2."""


def finite_copy(value: Any, notes: list | None = None, at: tuple = ()) -> Any:
    """A copy of a JSON-like value with every NaN/Infinity replaced by None; each replacement
    is appended to `notes` as {"at": [path...], "was": "nan" | "inf" | "-inf"}."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if notes is not None:
            notes.append({"at": list(at), "was": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")})
        return None
    if isinstance(value, dict):
        return {k: finite_copy(v, notes, at + (k,)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_copy(v, notes, at + (i,)) for i, v in enumerate(value)]
    return value


def dumps_finite(payload: dict, notes_key: str = "nonfinite", **kwargs) -> str:
    """json.dumps of `payload` with non-finite numbers as null and a `notes_key` list of them."""
    notes: list = []
    clean = finite_copy(payload, notes)
    if notes:
        clean[notes_key] = notes
    return json_dumps(clean, **kwargs)


def json_dumps(value: Any, **kwargs) -> str:
    return json.dumps(value, allow_nan=False, **kwargs)


def restore_nonfinite(root: Any, notes: list | None) -> None:
    """Put the noted non-finite values back into `root` (dicts, lists and dataclass objects).

    Only where the file holds the null the writer left: a hand-edited note pointing at an object
    (the environment, a record's stats) or at a number is ignored, not a NaN where a dict belongs."""
    for note in notes or []:
        try:
            path, was = list(note["at"]), float(note["was"])
        except (KeyError, TypeError, ValueError):
            continue
        if not path or math.isfinite(was):
            continue
        target = root
        try:
            for step in path[:-1]:
                target = _step(target, step)
            last = path[-1]
            if _step(target, last) is not None:
                continue
            if isinstance(target, (dict, list)):
                target[last] = was
            elif isinstance(last, str) and hasattr(target, last):
                setattr(target, last, was)
        except (KeyError, IndexError, TypeError, AttributeError):
            continue


def _step(target: Any, step: Any) -> Any:
    """target[step] or target.step; a list takes only an index from 0 (not -1, not true)."""
    if isinstance(target, list) and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise IndexError(step)
    return target[step] if isinstance(target, (dict, list)) else getattr(target, step)


def read_text_bounded(path: os.PathLike | str, limit: int | None = None) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes, or an InputFileError that names it.

    Opened without blocking and checked with fstat before anything is read, so a FIFO, a device
    (/dev/zero) or a folder is refused at once; the read is bounded even if the file grows."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputFileError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise InputFileError(f"{path} is a folder, not a results file") from None
    except OSError as err:
        raise InputFileError(f"cannot read {path}: {(err.strerror or str(err)).lower()}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputFileError(f"{path} is a folder, not a results file")
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(f"{path} is not a regular file (a device, a pipe or a socket): not a results file")
        if info.st_size > limit:
            raise InputFileError(f"{path} is {info.st_size / 1e9:.2f} GB, more than the {limit / 1e9:g} GB "
                                 "a results file may have")
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = None
            data = fh.read(limit + 1)
    except OSError as err:
        raise InputFileError(f"cannot read {path}: {(err.strerror or str(err)).lower()}") from None
    finally:
        if fd is not None:
            os.close(fd)
    if len(data) > limit:
        raise InputFileError(f"{path} is larger than the {limit / 1e9:g} GB a results file may have")
    if b"\x00" in data:
        raise InputFileError(f"{path} is a binary file, not a bwbench results file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(f"{path} is not UTF-8 text (byte {err.start}): not a bwbench results file") from None

