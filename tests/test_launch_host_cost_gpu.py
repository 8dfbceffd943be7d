"""Host cost per call of this project's launchers against torch's for the same operation (issue 31:
within 2x): the median host time to enqueue one call while the GPU is kept busy, so no call waits
for the device. Prints the table (`pytest -s` shows it)."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

pytestmark = [pytest.mark.gpu]

CALLS = 200
MAX_RATIO = 2.0


def _host_us(fn, calls: int = CALLS) -> float:
    """Median host microseconds per call of `fn`, enqueued behind a long device sleep."""
    for _ in range(3):
        fn()  # plans, compiles and caches outside the measurement
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # about 0.1 s of device time: every call below only enqueues
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def _cases():
    from bwbench.cuda import bitmask, norm, permute, softmax

    x = torch.randn(4096, 1024, device="cuda", dtype=torch.float16)
    g, b = torch.randn(1024, device="cuda", dtype=torch.float16), torch.randn(1024, device="cuda", dtype=torch.float16)
    y = torch.softmax(x, -1)
    t = torch.randn(32, 256, 1024, device="cuda", dtype=torch.float16)
    return [
        ("softmax", lambda: softmax.softmax(x), lambda: torch.softmax(x, -1)),
        ("log_softmax", lambda: softmax.log_softmax(x), lambda: torch.log_softmax(x, -1)),
        ("softmax_backward", lambda: softmax.softmax_backward(y, x),
         lambda: torch._softmax_backward_data(x, y, -1, x.dtype)),
        ("layer_norm", lambda: norm.layer_norm(x, g, b, 1e-5), lambda: torch.native_layer_norm(x, (1024,), g, b, 1e-5)),
        ("rms_norm", lambda: norm.rms_norm(x, g, 1e-5), lambda: torch.nn.functional.rms_norm(x, (1024,), g, 1e-5)),
        ("permute", lambda: permute.permute(t, (0, 2, 1)), lambda: t.permute(0, 2, 1).contiguous()),
        ("relu", lambda: bitmask.relu_forward(x), lambda: torch.relu(x)),
        ("dropout", lambda: bitmask.dropout_forward(x, 0.1, 7), lambda: torch.native_dropout(x, 0.1, True)),
    ]


ROUNDS = 3
"""Each side is measured this many times, alternating, and keeps its lowest median: host cost is a
fixed software cost, and what varies between rounds (the CPU's clock after the device sleep, the
first touch of a code path) only adds to it, on either side."""


def test_launchers_enqueue_within_twice_torchs_host_cost():
    rows, slow = [], []
    for name, ours, theirs in _cases():
        mine, torchs = float("inf"), float("inf")
        for _ in range(ROUNDS):
            mine, torchs = min(mine, _host_us(ours)), min(torchs, _host_us(theirs))
        rows.append(f"{name:18s} {mine:7.1f} us  torch {torchs:7.1f} us  ratio {mine / torchs:4.2f}")
        if mine > MAX_RATIO * torchs:
            slow.append(name)
    print("\nhost cost per call\n" + "\n".join(rows))
    assert not slow, f"launchers above {MAX_RATIO}x torch's host cost: {slow}\n" + "\n".join(rows)
