"""The client side of a fleet run: one task per GPU worker, records streamed back as they are measured.

The same code serves a local cluster and a scheduler of many hosts: it asks the scheduler for the
workers that declare a `GPU` resource and pins one task to each. While the tasks run it drains the
run's queue, and it watches the workers: a worker that leaves (its process died) loses the case it
had started and not finished; when a worker of the same name comes back (a nanny restarts it) the
rest of that GPU's sweep continues there, without the lost case, which might kill it again. Ctrl-C
asks every worker to stop, keeps what was streamed, and cancels what is left.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..interrupts import terminate_as_interrupt
from .request import RunRequest
from .worker import run_on_gpu_worker

RUNNING, RESTARTING, DONE, STOPPED, LOST, FAILED = "running", "restarting", "done", "stopped", "lost", "failed"


class NoGpuWorkers(RuntimeError):
    """The scheduler has no worker that declares a GPU resource."""


@dataclass
class GpuRun:
    """One GPU worker's share of the run, as the client follows it."""

    slot: str
    """The worker's name (kept across a nanny's restart of the worker process)."""
    worker: str
    """The address of the worker now running the task."""
    future: Any = None
    status: str = RUNNING
    environment: dict[str, Any] | None = None
    current: dict[str, Any] | None = None
    """The case the worker started and has not sent records for yet."""
    finished: set[str] = field(default_factory=set)
    lost_cases: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    records: int = 0
    restarts: int = 0
    lost_at: float | None = None
    pid: int | None = None
    """The process id of the worker running the task, as the task reported it."""
    news_at: float = field(default_factory=time.monotonic)
    """When the worker last sent anything (or its task was submitted)."""
    quiet_told: bool = False


class Sink(Protocol):
    """Where the collector hands what arrives (merge.FleetResults)."""

    def environment(self, run: GpuRun) -> None: ...

    def records(self, run: GpuRun, rows: list[dict[str, Any]]) -> None: ...

    def changed(self, run: GpuRun) -> None: ...

    def quiet(self, run: GpuRun, seconds: float) -> None:
        """A running GPU has sent nothing for `seconds` (said once per silence)."""

    def idle(self) -> None:
        """Called after every poll: a moment to write what arrived."""


class _CtrlC:
    pressed = False


@contextmanager
def ctrl_c_between_polls():
    """The first Ctrl-C only raises a flag that the loop reads between polls, so that a batch of
    records taken off the queue is always written whole; a second Ctrl-C interrupts at once. SIGTERM
    (a job's time limit) counts as a Ctrl-C. (Only the main thread can own SIGINT; elsewhere, and
    where SIGINT is ignored, nothing changes.)"""
    state = _CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield state
        return

    def on_sigint(_signum, _frame):
        if state.pressed:
            raise KeyboardInterrupt
        state.pressed = True

    signal.signal(signal.SIGINT, on_sigint)
    try:
        with terminate_as_interrupt(on_sigint):  # a job's time limit stops the fleet as Ctrl-C does
            yield state
    finally:
        signal.signal(signal.SIGINT, previous)


def gpu_workers(client) -> dict[str, dict[str, Any]]:
    """Address -> facts of every worker that declares a GPU resource."""
    try:
        info = client.scheduler_info(n_workers=-1)  # newer Dask lists only a few workers by default
    except TypeError:
        info = client.scheduler_info()
    workers = info.get("workers", {})
    return {addr: w for addr, w in workers.items() if (w.get("resources") or {}).get("GPU", 0) >= 1}


@dataclass
class FleetCollector:
    """Runs a request on every GPU worker of the client's cluster and feeds the sink as records arrive."""

    client: Any
    request: RunRequest
    sink: Sink
    poll_s: float = 0.2
    stop_wait_s: float = 5.0
    """After Ctrl-C, how long workers get to stop at their next step before their tasks are cancelled."""
    restart_wait_s: float = 30.0
    """How long after its loss a worker may take to come back, judged once no GPU runs (a new process
    that imports, connects and registers again; more than 10 s on a busy host)."""
    exit_reason: Callable[[int | None], str | None] = lambda _pid: None
    """How a worker process ended, by its process id, where known (fleet.exits, local clusters)."""
    exit_grace_s: float = 2.0
    quiet_s: float = 300.0
    """How long a running GPU may send nothing before the run says so: a case this long is rare, a
    hung kernel or driver, or a worker busy with another run's task, sends nothing for ever."""
    runs: list[GpuRun] = field(default_factory=list)
    interrupted: bool = False

    def __post_init__(self) -> None:
        from distributed import Event, Queue

        run_id = uuid.uuid4().hex[:10]
        self._queue = Queue(f"bwbench-records-{run_id}", client=self.client)
        self._stop = Event(f"bwbench-stop-{run_id}", client=self.client)
        self._run_id = run_id
        self._gone_since: dict[tuple[str, int], float] = {}

    # --- the run -------------------------------------------------------------------------
    def run(self) -> list[GpuRun]:
        workers = gpu_workers(self.client)
        if not workers:
            raise NoGpuWorkers("no worker of this scheduler declares a GPU resource (start each GPU's worker "
                               "with `--resources GPU=1`)")
        # Ctrl-C is taken over before the first task is submitted: one that comes while tasks are being
        # handed out stops those already out, rather than leaving them running on a shared cluster.
        with ctrl_c_between_polls() as ctrl_c:
            try:
                for address, facts in sorted(workers.items(), key=lambda item: str(item[1].get("name", item[0]))):
                    run = GpuRun(slot=str(facts.get("name", address)), worker=address)
                    self._submit(run, self.request)
                    self.runs.append(run)
                while self._active():
                    self._poll()
                    self.sink.idle()
                    if ctrl_c.pressed:
                        raise KeyboardInterrupt
                    time.sleep(self.poll_s)
                self._deliver()
            except KeyboardInterrupt:
                self.interrupted = True
                self._stop_all()
            finally:
                self.sink.idle()
        return self.runs

    def _submit(self, run: GpuRun, request: RunRequest) -> None:
        run.future = self.client.submit(
            run_on_gpu_worker, request, run.slot, self._queue.name, self._stop.name, run.restarts,
            key=f"bwbench-{self._run_id}-{run.slot}-{run.restarts}", workers=[run.worker],
            allow_other_workers=False, resources={"GPU": 1}, pure=False, retries=0)
        run.status, run.news_at, run.quiet_told = RUNNING, time.monotonic(), False

    def _active(self) -> bool:
        if any(r.status == RUNNING for r in self.runs):
            return True
        waiting = [r for r in self.runs if r.status == RESTARTING]
        for run in waiting:  # nothing else runs: a lost worker gets restart_wait_s to come back
            if time.monotonic() - run.lost_at > self.restart_wait_s:
                run.status = LOST
                self.sink.changed(run)
        return any(r.status == RESTARTING for r in self.runs)

    def _poll(self) -> None:
        # Statuses first, then the queue: whatever a task put before it ended is in the queue by then.
        states = {id(r): r.future.status for r in self.runs if r.status == RUNNING}
        workers = gpu_workers(self.client)
        self._deliver()
        for run in self.runs:
            if run.status == RUNNING:
                self._settle(run, states[id(run)], run.worker in workers)
                self._tell_if_quiet(run)
            elif run.status == RESTARTING:
                self._resume_if_back(run, workers)

    def _settle(self, run: GpuRun, state: str, worker_alive: bool) -> None:
        if state == "finished":
            outcome = run.future.result()
            run.status = STOPPED if outcome.get("stopped") else DONE
            self.sink.changed(run)
        elif state == "error":
            err = run.future.exception()
            if type(err).__name__ == "KilledWorker" or not worker_alive:
                self._lose(run, f"worker died ({type(err).__name__}: {err})")
            else:
                run.status, run.error = FAILED, f"{type(err).__name__}: {err}"
                self._lose_current(run, run.error)
                self.sink.changed(run)
        elif state == "cancelled" or not worker_alive:
            how = self.exit_reason(run.pid)
            if how is None and self._nanny_may_still_say(run):
                return
            self._lose(run, f"worker {run.worker} left the cluster "
                            + (f"(its process {run.pid} {how})" if how else "(its process died or was killed)"))

    def _nanny_may_still_say(self, run: GpuRun) -> bool:
        """The scheduler can see a worker's connection drop before its nanny logs how the process
        ended: a reported process gets exit_grace_s for that line before the GPU is called lost."""
        if run.pid is None:
            return False
        first_seen = self._gone_since.setdefault((run.slot, run.restarts), time.monotonic())
        return time.monotonic() - first_seen < self.exit_grace_s

    def _tell_if_quiet(self, run: GpuRun) -> None:
        silent = time.monotonic() - run.news_at
        if run.status == RUNNING and silent > self.quiet_s and not run.quiet_told:
            run.quiet_told = True
            self.sink.quiet(run, silent)

    def _lose(self, run: GpuRun, reason: str) -> None:
        self.client.cancel([run.future], force=True)
        run.error = reason
        self._lose_current(run, reason)
        run.status, run.lost_at = RESTARTING, time.monotonic()
        self.sink.changed(run)

    def _lose_current(self, run: GpuRun, reason: str) -> None:
        if run.current is not None:
            run.lost_cases.append({**run.current, "reason": reason})
            run.current = None

    def _resume_if_back(self, run: GpuRun, workers: dict[str, dict[str, Any]]) -> None:
        """A worker of the same name is back (its nanny restarted it): run the rest of the sweep there."""
        address = next((a for a, w in workers.items() if str(w.get("name", a)) == run.slot), None)
        if address is None or address == run.worker:
            return
        run.worker, run.restarts = address, run.restarts + 1
        skip = run.finished | {c["key"] for c in run.lost_cases}
        self._submit(run, self.request.without(skip))
        self.sink.changed(run)

    # --- events ----------------------------------------------------------------------------
    def _deliver(self) -> None:
        for event in self._queue.get(batch=True):
            run = next((r for r in self.runs if r.slot == event.get("slot")), None)
            if run is None or event.get("attempt", 0) != run.restarts or run.status != RUNNING:
                continue  # a task this run abandoned (its worker was given up for lost) still talking
            run.news_at, run.quiet_told = time.monotonic(), False
            kind = event.get("event")
            if kind == "process":
                run.pid = event.get("pid")
            elif kind == "environment":
                if run.environment is None:
                    run.environment = json.loads(event["json"])
                    self.sink.environment(run)
            elif kind == "case":
                run.current = {k: event[k] for k in ("key", "suite", "case", "dtype")}
            elif kind == "records":
                rows = json.loads(event["json"])
                if run.current is not None:
                    run.finished.add(run.current["key"])
                run.current = None
                run.records += len(rows)
                self.sink.records(run, rows)

    # --- Ctrl-C ----------------------------------------------------------------------------
    def _stop_all(self) -> None:
        """Ask every worker to stop at its next step, keep what they streamed, cancel the rest."""
        self._stop.set()
        deadline = time.monotonic() + self.stop_wait_s
        running = [r for r in self.runs if r.status == RUNNING]
        while running and time.monotonic() < deadline:
            alive = set(gpu_workers(self.client))
            if all(r.future.status != "pending" or r.worker not in alive for r in running):
                break  # each task ended, or its worker is gone (a local worker takes Ctrl-C's SIGINT too)
            time.sleep(self.poll_s)
        self._deliver()
        for run in self.runs:
            if run.status in (RUNNING, RESTARTING):
                if run.future is not None and run.future.status == "pending":
                    self.client.cancel([run.future], force=True)
                self._lose_current(run, "interrupted (Ctrl-C)")
                run.status = STOPPED
                self.sink.changed(run)
