"""A job's time limit ends a run the way Ctrl-C does.

`timeout`, Slurm and CI runners stop a program with SIGTERM, whose default ends Python at once: the
records stay in NAME.jsonl, but NAME.json, the CSV, the store and the summary never see them. While
a command measures, SIGTERM is handled instead, as Ctrl-C is: the run stops at its next step, keeps
every record, is marked interrupted and exits 130. Only the command line does this; the Python API
leaves a program's signals as it found them.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def _raise_interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


@contextmanager
def terminate_as_interrupt(handler: Callable | None = None) -> Iterator[None]:
    """Inside, SIGTERM calls `handler` (by default it raises KeyboardInterrupt, as Ctrl-C does).
    Only the main thread can own a signal, and a handler another program installed (or an ignored
    SIGTERM) is left alone."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler or _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
