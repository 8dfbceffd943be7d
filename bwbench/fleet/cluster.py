"""Where a fleet run's workers come from: a local cluster with one worker per GPU of this host, or
an existing scheduler. Either way the run gets a Dask client, and from there one code path.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator


CONNECT_TIMEOUT = "10s"


class SchedulerUnreachable(RuntimeError):
    """--scheduler names an address no Dask scheduler answers at."""


def local_gpu_cluster(gpus: list[tuple[int, str]]):
    """One worker process per GPU, each seeing only its GPU (CUDA_VISIBLE_DEVICES set by its nanny
    before the process starts) and declaring one `GPU` resource. Workers are named gpu-N after the
    position N of their GPU, so a restarted worker is recognised. No memory limit: the nanny must not
    kill a worker for the host memory PyTorch and CUDA take. The workers leave Ctrl-C to the command
    (bwbench.fleet.local_worker), which stops them between steps and keeps what they measured.
    Dask's warnings show (a worker restarted, a process that would not stop): a normal run has none,
    and where a GPU is lost they say what happened around it."""
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        f"gpu-{position}": {"cls": Nanny, "options": {
            "nthreads": 1, "resources": {"GPU": 1}, "memory_limit": 0,
            "env": {"CUDA_VISIBLE_DEVICES": device}, "silence_logs": logging.WARNING,
            "preload": ["bwbench.fleet.local_worker"]}}
        for position, device in gpus
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0", "host": "127.0.0.1"}}
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.WARNING, name="bwbench-fleet")


def check_scheduler(address: str) -> None:
    """Ask what answers at `address`, within CONNECT_TIMEOUT, before a Client connects: Dask's Client
    waits forever on a server that accepts the connection and never speaks, and fails with a traceback
    (an allocation of exabytes, a TypeError) where a web server or a Dask worker answers."""
    import asyncio

    from dask.utils import parse_timedelta
    from distributed.comm import connect
    from distributed.security import Security

    timeout = parse_timedelta(CONNECT_TIMEOUT)

    async def identity():
        comm = await connect(address, timeout=timeout, **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity"})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(identity(), 2 * timeout))  # connect's own error first
    except asyncio.TimeoutError:
        raise SchedulerUnreachable(f"--scheduler {address}: no Dask scheduler answers there (a connection was "
                                   f"accepted but nothing answered within {2 * timeout:g} s)") from None
    except (OSError, ValueError) as err:  # no server, a bad address
        raise SchedulerUnreachable(f"--scheduler {address}: no Dask scheduler answers there ({err})") from None
    except Exception as err:  # noqa: BLE001 - a server that answers something Dask cannot read
        raise SchedulerUnreachable(f"--scheduler {address}: what answers there does not speak Dask's protocol "
                                   f"({type(err).__name__})") from None
    kind = reply.get("type") if isinstance(reply, dict) else None
    if kind != "Scheduler":
        raise SchedulerUnreachable(f"--scheduler {address}: {'a Dask ' + str(kind) if kind else 'something'} answers "
                                   "there, not a Dask scheduler (its address is the one `dask scheduler` prints)")


@contextmanager
def fleet_client(gpus: list[tuple[int, str]] | None = None, scheduler: str | None = None) -> Iterator:
    """A client of the scheduler at `scheduler`, or of a fresh local cluster over `gpus` (closed on exit)."""
    from distributed import Client

    if scheduler:
        check_scheduler(scheduler)
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as err:
            raise SchedulerUnreachable(f"--scheduler {scheduler}: no Dask scheduler answers there ({err})") from None
        try:
            yield client
        finally:
            client.close()
        return
    cluster = local_gpu_cluster(gpus or [])
    client = Client(cluster)
    try:
        client.wait_for_workers(len(gpus or []), timeout=120)
        yield client
    finally:
        client.close()
        cluster.close()
