"""Enqueue a compiled kernel through the CUDA driver's cuLaunchKernel, with its argument buffer
built once per kernel and argument layout.

Why not CuPy's own launch: CuPy's RawKernel call converts every argument into a fresh pointer object
on each call, about 12 µs of host time for six arguments, where torch enqueues a whole softmax in
about 11. A launcher's arguments have the same types on every call (tensors and numpy scalars of the
kernel's parameter widths), so their ctypes slots and the array of slot addresses the driver reads
are made once; a call only stores the new values and calls the driver. Kernels still come from
CuPy (compilation, caching, function attributes); only the enqueue is the driver's.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Sequence

import numpy as np

_SLOT_TYPES = {
    np.dtype(np.int8): ctypes.c_int8, np.dtype(np.uint8): ctypes.c_uint8,
    np.dtype(np.int16): ctypes.c_int16, np.dtype(np.uint16): ctypes.c_uint16,
    np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double,
}
"""ctypes slot per numpy scalar type: the kernel parameter's width and kind."""

_POINTER = "pointer"
"""The layout key of a tensor (or None) argument: passed as its device address."""


class DriverUnavailable(RuntimeError):
    """libcuda cannot be loaded here: launches fall back to CuPy's."""


class _Driver:
    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as err:
            raise DriverUnavailable(f"libcuda.so.1 cannot be loaded: {err}") from None
        args = [ctypes.c_void_p] + [ctypes.c_uint] * 6 + [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        self.launch = lib.cuLaunchKernel
        self.launch.argtypes = args + [ctypes.c_void_p]
        self.launch.restype = ctypes.c_int
        self.cooperative = lib.cuLaunchCooperativeKernel
        self.cooperative.argtypes = args
        self.cooperative.restype = ctypes.c_int
        self.error_name = lib.cuGetErrorName
        self.error_name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.error_name.restype = ctypes.c_int

    def error_text(self, code: int) -> str:
        name = ctypes.c_char_p()
        self.error_name(code, ctypes.byref(name))
        return (name.value or b"CUDA_ERROR_UNKNOWN").decode()


_DRIVER: _Driver | None = None
_DRIVER_LOCK = threading.Lock()


def driver() -> _Driver:
    global _DRIVER
    if _DRIVER is None:
        with _DRIVER_LOCK:
            if _DRIVER is None:
                _DRIVER = _Driver()
    return _DRIVER


def layout_of(args: Sequence[Any]) -> tuple:
    """The argument layout a slot set is made for: "pointer" for a tensor or None, else the numpy
    scalar's dtype (a Python int or float has no fixed width and is refused)."""
    layout = []
    for a in args:
        if a is None or hasattr(a, "data_ptr"):
            layout.append(_POINTER)
        elif isinstance(a, np.generic) and a.dtype in _SLOT_TYPES:
            layout.append(a.dtype)
        else:
            raise TypeError(f"kernel argument {a!r}: pass tensors, None or numpy scalars of the kernel's "
                            "parameter widths (np.int32, np.int64, np.float32, ...)")
    return tuple(layout)


class ArgumentSlots:
    """One ctypes slot per kernel argument and the array of their addresses the driver reads."""

    def __init__(self, layout: tuple) -> None:
        self.slots = [ctypes.c_void_p() if kind == _POINTER else _SLOT_TYPES[kind]() for kind in layout]
        self.kinds = layout
        self.addresses = (ctypes.c_void_p * max(1, len(self.slots)))(
            *[ctypes.cast(ctypes.pointer(s), ctypes.c_void_p) for s in self.slots])

    def store(self, args: Sequence[Any]) -> None:
        for slot, kind, a in zip(self.slots, self.kinds, args):
            if kind == _POINTER:
                slot.value = None if a is None else a.data_ptr()
            else:
                slot.value = a.item()


_LOCAL = threading.local()
"""Slots per thread, so two threads launching one kernel never share a buffer."""


def slots_for(function: int, args: Sequence[Any]) -> ArgumentSlots:
    cache = getattr(_LOCAL, "slots", None)
    if cache is None:
        cache = _LOCAL.slots = {}
    layout = layout_of(args)
    key = (function, layout)
    slots = cache.get(key)
    if slots is None:
        slots = cache[key] = ArgumentSlots(layout)
    return slots


def enqueue(function: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
            stream: int, args: Sequence[Any], cooperative: bool = False) -> None:
    """cuLaunchKernel (or cuLaunchCooperativeKernel) of `function` (a CUfunction handle) on `stream`
    in the calling thread's current context; RuntimeError naming the driver's error otherwise."""
    d = driver()
    slots = slots_for(function, args)
    slots.store(args)
    if cooperative:
        code = d.cooperative(function, *grid, *block, shared_mem, stream, slots.addresses)
    else:
        code = d.launch(function, *grid, *block, shared_mem, stream, slots.addresses, None)
    if code:
        raise RuntimeError(f"cuLaunchKernel failed: {d.error_text(code)} ({code})")
