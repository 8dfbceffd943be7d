"""The GPU side of a fleet run: one Dask task per GPU worker, and the adapter onto the run loop.

Why a `distributed.Queue` carries the records back (and not Pub/Sub or a future per case):
- the scheduler holds each record the moment the worker's `put` returns, so what a worker measured
  before it died, or before Ctrl-C, is safe even though its task never finishes;
- one queue serves every worker of the run and keeps each worker's order, which the client needs to
  know which case was unfinished when a worker vanished;
- one long task per GPU keeps the expensive state of a GPU process (CUDA context, compiled kernels,
  the L2-flush buffer, the device copy ceiling) for the whole sweep, where a task per case would
  rebuild it or need worker pinning for every case; and Dask gives the GPU to one task at a time
  through the `GPU` resource the workers declare.
(This Dask has no Pub/Sub; where one has, its messages are dropped until the publisher learns of
the subscriber, so the first records could be lost.)

A stop request (Ctrl-C on the client) travels the other way as a `distributed.Event` that the
worker reads between steps of a case, so a worker on another host stops within one step.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from .request import RunRequest, case_key


class StopRequested(BaseException):
    """The client asked every worker to stop (a BaseException, so the run loop's per-implementation
    error handling does not record it as a failure)."""


class RecordStream:
    """How measurements leave a GPU worker: its environment once, each case as it starts, the
    case's records once they are final (the run loop completes a record's telemetry and own-copy
    figures at the end of the case). Environment and records travel as JSON text, exactly what the
    results file will hold, so the queue's msgpack never meets a value it cannot carry."""

    def __init__(self, slot: str, send: Callable[[dict], Any], stop_requested: Callable[[], bool] = lambda: False,
                 attempt: int = 0):
        self.slot = slot
        self.attempt = attempt
        """Which task of this worker slot sends (a restarted worker runs a new one): late messages of an
        abandoned task are told apart and dropped."""
        self._send = lambda event: send({**event, "attempt": attempt})
        self._stop_requested = stop_requested

    def process(self) -> None:
        """Which process measures here, sent first: if it dies, its nanny's log line about how it
        ended names this process id (fleet.exits)."""
        import os

        self._send({"slot": self.slot, "event": "process", "pid": os.getpid()})

    def environment(self, environment: dict[str, Any]) -> None:
        self._send({"slot": self.slot, "event": "environment", "json": json.dumps(environment)})

    def case_started(self, suite: str, case_id: str, dtype: str) -> None:
        self._send({"slot": self.slot, "event": "case", "key": case_key(suite, case_id, dtype),
                    "suite": suite, "case": case_id, "dtype": dtype})

    def records(self, records: list) -> None:
        rows = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in records]
        self._send({"slot": self.slot, "event": "records", "json": json.dumps(rows)})

    def check_stop(self) -> None:
        if self._stop_requested():
            raise StopRequested()


def run_on_gpu_worker(request: RunRequest, slot: str, queue_name: str, stop_name: str,
                      attempt: int = 0) -> dict[str, Any]:
    """The Dask task: run the request on this worker's GPU, streaming into the run's queue."""
    from distributed import Event, Queue

    queue, stop = Queue(queue_name), Event(stop_name)
    stream = RecordStream(slot, queue.put, stop.is_set, attempt)
    measure = request.measure or measure_on_this_gpu
    stream.process()
    try:
        measure(request, stream)
    except StopRequested:
        return {"slot": slot, "stopped": True}
    return {"slot": slot, "stopped": False}


def build_plans(request: RunRequest) -> list:
    """The sweep of the request, rebuilt from this worker's own suites (as `bwbench run` builds it)."""
    from ..discovery import get_suite
    from ..session import SuitePlan

    plans = []
    for name in request.suites:
        suite = get_suite(name)
        impls = suite.select_impls(list(request.impls))
        values = {axis: suite.parse_axis_values(axis, texts) for axis, texts in request.axes.items()}
        plans.append(SuitePlan(suite, impls, suite.cases(list(request.dtypes), values, quick=request.quick,
                                                        preset=request.preset)))
    return plans


def measure_on_this_gpu(request: RunRequest, stream: RecordStream) -> None:
    """The adapter onto the single-GPU run session: device facts and copy ceiling, then every case
    through the session's case loop, each case's records streamed when it ends. The worker is
    pinned to one GPU (CUDA_VISIBLE_DEVICES), so that GPU is CUDA device 0 here; its index in the
    environment and records is NVML's, the host's numbering. A case's inputs come from its own
    seed (runner.case_seed), so a resumed sweep that skips cases measures the same inputs."""
    from ..session import Session, SessionSettings, SuitePlan
    from ..stats import SamplingPolicy
    from .identity import gpu_identity

    plans = build_plans(request)
    policy = SamplingPolicy(min_samples=request.min_samples, max_median_error=request.noise,
                            max_seconds=request.max_time)
    session = Session.open(0, SessionSettings(timing=request.timing, seed=request.seed, policy=policy,
                                              copy_bytes=request.copy_bytes, timer=request.timer))
    environment = dict(session.environment)
    identity = gpu_identity(environment.get("gpu_uuid"))
    if isinstance(identity.get("index"), int):
        environment["gpu_index"] = identity["index"]
    stream.environment({**environment, "identity": identity})

    for plan in plans:
        for case in plan.cases:
            stream.check_stop()
            if case_key(case.suite, case.id, case.dtype) in request.skip_cases:
                continue
            stream.case_started(case.suite, case.id, case.dtype)
            document = session.run([SuitePlan(plan.suite, plan.impls, [case])],
                                   on_step=lambda _text: stream.check_stop())
            stream.records(document.records)
