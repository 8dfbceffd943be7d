"""The driver launch path's argument slots (CPU): layouts, widths and the values a call stores."""

import ctypes

import numpy as np
import pytest

from bwbench.cuda import driver_launch


class FakeTensor:
    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


def test_layout_names_pointers_and_numpy_widths():
    layout = driver_launch.layout_of((FakeTensor(16), None, np.int64(3), np.int32(4), np.float32(0.5)))
    assert layout == ("pointer", "pointer", np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.float32))


@pytest.mark.parametrize("bad", [3, 2.5, "x"])
def test_python_numbers_have_no_width_and_are_refused(bad):
    with pytest.raises(TypeError, match="numpy scalars"):
        driver_launch.layout_of((FakeTensor(16), bad))


def test_slots_hold_each_calls_values_at_fixed_addresses():
    args = (FakeTensor(0x1000), np.int64(-7), np.int32(2**31 - 1), None, np.float32(1.5))
    slots = driver_launch.slots_for(1234, args)
    addresses = [slots.addresses[i] for i in range(len(args))]
    slots.store(args)
    assert [ctypes.sizeof(s) for s in slots.slots] == [8, 8, 4, 8, 4]
    assert [s.value for s in slots.slots] == [0x1000, -7, 2**31 - 1, None, 1.5]
    again = (FakeTensor(0x2000), np.int64(5), np.int32(6), FakeTensor(0x30), np.float32(-2.0))
    same = driver_launch.slots_for(1234, again)
    same.store(again)
    assert same is slots and [same.addresses[i] for i in range(len(args))] == addresses
    assert [s.value for s in same.slots] == [0x2000, 5, 6, 0x30, -2.0]
    for slot, address in zip(same.slots, addresses):  # the driver reads each value where the array points
        assert ctypes.addressof(slot) == address


def test_another_layout_gets_its_own_slots():
    a = driver_launch.slots_for(99, (FakeTensor(1), np.int32(1)))
    b = driver_launch.slots_for(99, (FakeTensor(1), np.int64(1)))
    assert a is not b
