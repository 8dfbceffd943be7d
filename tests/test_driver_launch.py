"""The driver launch path's parameter buffers (bwbench/cuda/driver_launch.py), on the CPU: what
cuLaunchKernel reads must be each argument at its own 8-byte slot, in the kernel parameter's width."""

from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np
import pytest

from bwbench.cuda import driver_launch


class FakeTensor:
    def __init__(self, address: int) -> None:
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def _slot(slots: driver_launch.ArgumentSlots, index: int, fmt: str):
    address = slots.addresses[index]
    size = struct.calcsize(fmt)
    return struct.unpack(fmt, ctypes.string_at(address, size))[0]


def test_each_argument_lands_in_its_slot_at_its_width():
    args = (FakeTensor(0x7F0012345600), np.int64(-5), None, np.int32(7), np.float32(1.5), np.uint8(200))
    slots = driver_launch.slots_for(101, args)
    slots.store(args)
    assert [_slot(slots, i, f) for i, f in enumerate(["<Q", "<q", "<Q", "<i", "<f", "<B"])] == [
        0x7F0012345600, -5, 0, 7, 1.5, 200]
    assert [a - slots.addresses[0] for a in slots.addresses] == [0, 8, 16, 24, 32, 40]


def test_a_second_call_overwrites_the_values():
    first = (FakeTensor(0x1000), np.int32(1))
    second = (FakeTensor(0x2000), np.int32(-2))
    slots = driver_launch.slots_for(102, first)
    slots.store(first)
    assert driver_launch.slots_for(102, second) is slots
    slots.store(second)
    assert (_slot(slots, 0, "<Q"), _slot(slots, 1, "<i")) == (0x2000, -2)


def test_argument_types_choose_the_buffer():
    narrow = driver_launch.slots_for(103, (np.int32(1),))
    wide = driver_launch.slots_for(103, (np.int64(1),))
    assert narrow is not wide and narrow.format.format != wide.format.format


@pytest.mark.parametrize("bad", [3, 2.5, "x", np.float16(1)])
def test_arguments_of_no_fixed_width_are_refused(bad):
    with pytest.raises(TypeError, match="numpy scalars"):
        driver_launch.slots_for(104, (FakeTensor(0), bad))


def test_threads_get_their_own_buffers():
    args = (np.int64(1),)
    mine = driver_launch.slots_for(105, args)
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(driver_launch.slots_for(105, args)))
    worker.start()
    worker.join()
    assert theirs and theirs[0] is not mine


class _RecordingDriver:
    """Stands in for libcuda: records each launch and the parameter values it would read."""

    def __init__(self) -> None:
        self.handles: dict = {}
        self.calls: list = []
        self.launch = self._launch
        self.cooperative = lambda *a: self._launch(*a, None)

    handle = driver_launch._Driver.handle

    def _launch(self, function, gx, gy, gz, bx, by, bz, smem, stream, addresses, extra):
        self.calls.append((function.value, (gx, gy, gz), (bx, by, bz), smem, stream.value, self.read(addresses)))
        return 0

    layout = ("<Q", "<q", "<i", "<f")

    def read(self, addresses):
        return [struct.unpack(f, ctypes.string_at(addresses[i], struct.calcsize(f)))[0]
                for i, f in enumerate(self.layout)]


def test_a_bound_launch_writes_new_values_and_its_fixed_dimensions(monkeypatch):
    fake = _RecordingDriver()
    monkeypatch.setattr(driver_launch, "_DRIVER", fake)
    example = (FakeTensor(0x1000), np.int64(3), np.int32(4), np.float32(0.5))
    bound = driver_launch.BoundLaunch(0xABC, (7, 1, 1), (128, 2, 1), 4096, example)
    bound(0x55, (0x7F00_0000_0010, -9, 12, 2.25))
    bound(0x66, (0x20, 1, 2, 3.0))
    assert fake.calls == [(0xABC, (7, 1, 1), (128, 2, 1), 4096, 0x55, [0x7F00_0000_0010, -9, 12, 2.25]),
                          (0xABC, (7, 1, 1), (128, 2, 1), 4096, 0x66, [0x20, 1, 2, 3.0])]


def test_a_bound_launch_names_the_drivers_error(monkeypatch):
    fake = _RecordingDriver()
    fake.launch = lambda *a: 700
    fake.error_text = lambda code: "CUDA_ERROR_ILLEGAL_ADDRESS"
    monkeypatch.setattr(driver_launch, "_DRIVER", fake)
    bound = driver_launch.BoundLaunch(1, (1, 1, 1), (1, 1, 1), 0, (np.int32(1),))
    with pytest.raises(RuntimeError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        bound(0, (1,))


def test_a_planned_call_on_another_device_takes_the_general_path_with_typed_arguments(monkeypatch):
    from bwbench.cuda import loader
    from bwbench.cuda.launch_spec import Launch

    class Kernel:
        _functions: dict = {}

    seen = []
    monkeypatch.setattr(loader, "run", lambda kernel, spec, args, device: seen.append((args, device)))
    call = loader.PlannedCall(Kernel(), Launch("k", (1,), (32,)), (FakeTensor(16), np.int64(2), np.float32(1)), 3)
    call.enqueue((0x40, 5, 0.5))
    (args, device), = seen
    assert device == 3 and [type(a) for a in args] == [np.uint64, np.int64, np.float32]
    assert [a.item() for a in args] == [0x40, 5, 0.5]


class _Recorder:
    """Stands in for a PlannedCall: keeps the raw values each repeat would enqueue."""

    def __init__(self) -> None:
        self.values: list[tuple] = []

    def enqueue(self, values) -> None:
        self.values.append(tuple(values))


def test_softmax_repeats_pass_addresses_strides_and_sizes_in_kernel_order():
    import torch

    from bwbench.cuda.softmax.launch import _Call

    x = torch.zeros(6, 40, dtype=torch.float16)[:, :33]  # a column slice: row stride 40
    forward = _Recorder()
    out = _Call(forward, (40, 33), 6, 33)((x,))
    assert out.shape == (6, 33) and out.is_contiguous()
    assert forward.values == [(x.data_ptr(), 40, out.data_ptr(), 33, 6, 33)]

    y, dy = torch.zeros(6, 33, dtype=torch.float16), torch.zeros(6, 33, dtype=torch.float16)
    backward = _Recorder()
    dx = _Call(backward, (33, 33, 33), 6, 33)((y, dy))
    assert backward.values == [(y.data_ptr(), 33, dy.data_ptr(), 33, dx.data_ptr(), 33, 6, 33)]

    tiled = _Recorder()  # the tile tier's (tile_rows, group) follow the sizes
    dx = _Call(tiled, (33, 33, 33), 6, 33, (16, 16))((y, dy))
    assert tiled.values == [(y.data_ptr(), 33, dy.data_ptr(), 33, dx.data_ptr(), 33, 6, 33, 16, 16)]


def test_norm_and_permute_repeats_pass_their_kernels_arguments_in_order():
    import numpy as np
    import torch

    from bwbench.cuda.norm.launch import _Repeat as NormRepeat
    from bwbench.cuda.permute.launch import _Repeat as PermuteRepeat

    x, gamma, beta = torch.zeros(5, 64), torch.ones(64), torch.zeros(64)
    layer = _Recorder()
    y, mean, rstd = NormRepeat(layer, x, rms=False, y_phase=x.data_ptr() % 16)(x, gamma, beta, 1e-5)
    assert layer.values == [(x.data_ptr(), gamma.data_ptr(), beta.data_ptr(), y.data_ptr(), mean.data_ptr(),
                             rstd.data_ptr(), 5, 64, 1e-5)]
    assert mean.shape == rstd.shape == (5,) and mean.dtype == torch.float32
    rms = _Recorder()
    y, rstd = NormRepeat(rms, x, rms=True, y_phase=x.data_ptr() % 16)(x, gamma, None, 1e-6)
    assert rms.values == [(x.data_ptr(), gamma.data_ptr(), 0, y.data_ptr(), 0, rstd.data_ptr(), 5, 64, 1e-6)]

    t = torch.zeros(2, 3, 4)
    moved = _Recorder()
    out = PermuteRepeat(moved, t, (4, 3, 2), t.data_ptr() % 16, (np.int64(24), np.int32(7)))(t)
    assert out.shape == (4, 3, 2) and moved.values == [(t.data_ptr(), out.data_ptr(), 24, 7)]
