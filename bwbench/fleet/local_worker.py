"""Preloaded into each worker process of a local fleet cluster (see cluster.local_gpu_cluster).

Ctrl-C in a terminal reaches every process of its group, the local workers included. They ignore
it: the command that owns them asks them to stop between steps, keeps what they sent, and closes
them, instead of each dying with a traceback in the middle of a measurement.
"""

import signal


def dask_setup(worker) -> None:  # noqa: ARG001 - Dask's preload hook
    signal.signal(signal.SIGINT, signal.SIG_IGN)
