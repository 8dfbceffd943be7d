"""How a local worker's process ended, for the line that reports its GPU lost.

A local cluster's nannies live in the command's own process, and each logs how its worker process
ended (an exit status, or the signal that killed it: SIGKILL is often the kernel's out-of-memory
killer, SIGSEGV or SIGABRT a crash) at INFO, below what the command shows. This handler keeps those
lines by process id; each worker's task reports its process id first (worker.RecordStream.process),
so a lost GPU can say how its process ended instead of only that it left. On a scheduler of other
hosts the nannies log elsewhere, and the reason stays unknown."""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager

_EXIT_LINE = re.compile(r"Worker process (\d+) (exited with status (-?\d+)|was killed by (?:unknown )?signal(?: (\d+))?)")


def describe_exit(status: int | None, signum: int | None) -> str:
    """'exited with status 3', 'was killed by signal 9 (SIGKILL)'."""
    if status is not None:
        return f"exited with status {status}"
    if signum is None:
        return "was killed by an unknown signal"
    try:
        return f"was killed by signal {signum} ({signal.Signals(signum).name})"
    except ValueError:
        return f"was killed by signal {signum}"


class WorkerExits(logging.Handler):
    """Keeps each worker process's end, as its nanny logs it, by process id."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.by_pid: dict[int, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            match = _EXIT_LINE.search(record.getMessage())
        except Exception:  # noqa: BLE001 - a log line that does not format is not ours to judge
            return
        if match is None:
            return
        status = int(match[3]) if match[3] is not None else None
        signum = int(match[4]) if match[4] is not None else None
        self.by_pid[int(match[1])] = describe_exit(status, signum)

    def reason_for(self, pid: int | None) -> str | None:
        return self.by_pid.get(pid) if pid is not None else None


@contextmanager
def watching_worker_exits() -> Iterator[WorkerExits]:
    """While inside, the nannies' lines about how worker processes ended are kept."""
    watcher = WorkerExits()
    nanny_log = logging.getLogger("distributed.nanny")
    nanny_log.addHandler(watcher)
    try:
        yield watcher
    finally:
        nanny_log.removeHandler(watcher)
