"""Enqueue a compiled kernel through the CUDA driver's cuLaunchKernel, with its argument buffer
built once per kernel and argument layout.

Why not CuPy's own launch: CuPy's RawKernel call converts every argument into a fresh pointer object
on each call, about 12 µs of host time for six arguments, where torch enqueues a whole softmax in
about 7-11. A launcher's arguments have the same types on every call (tensors and numpy scalars of
the kernel's parameter widths), so the parameter buffer, its struct format and the array of
parameter addresses the driver reads are made once per kernel and argument types; a call writes
the new values with one struct.pack_into and calls the driver with no ctypes argument conversion
(handles pre-wrapped, dimensions as plain ints). Kernels still come from CuPy (compilation,
caching, function attributes); only the enqueue is the driver's.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any, Sequence

import numpy as np

_FORMATS = {
    np.dtype(np.int8): "b", np.dtype(np.uint8): "B", np.dtype(np.int16): "h", np.dtype(np.uint16): "H",
    np.dtype(np.int32): "i", np.dtype(np.uint32): "I", np.dtype(np.int64): "q", np.dtype(np.uint64): "Q",
    np.dtype(np.float32): "f", np.dtype(np.float64): "d",
}
"""struct format of each numpy scalar type: the kernel parameter's width and kind."""

_POINTER = "pointer"
"""The layout key of a tensor (or None) argument: passed as its device address."""

_SLOT = 8
"""Bytes per parameter in the buffer: every parameter starts 8-byte aligned."""


class DriverUnavailable(RuntimeError):
    """libcuda cannot be loaded here: launches fall back to CuPy's."""


class _Driver:
    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as err:
            raise DriverUnavailable(f"libcuda.so.1 cannot be loaded: {err}") from None
        # No argtypes: ctypes would convert all eleven arguments on every call. Callers pass the
        # handles as c_void_p and the dimensions as ints (C unsigned int, all below 2^31).
        self.launch = lib.cuLaunchKernel
        self.launch.restype = ctypes.c_int
        self.cooperative = lib.cuLaunchCooperativeKernel
        self.cooperative.restype = ctypes.c_int
        self.active_clusters = getattr(lib, "cuOccupancyMaxActiveClusters", None)  # CUDA 11.8 and later
        if self.active_clusters is not None:
            self.active_clusters.restype = ctypes.c_int
        self.error_name = lib.cuGetErrorName
        self.error_name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.error_name.restype = ctypes.c_int
        self.handles: dict[int, ctypes.c_void_p] = {}

    def handle(self, value: int) -> ctypes.c_void_p:
        """`value` (a CUfunction or CUstream) as the pointer the driver takes, made once."""
        wrapped = self.handles.get(value)
        if wrapped is None:
            wrapped = self.handles[value] = ctypes.c_void_p(value)
        return wrapped

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
        elif isinstance(a, np.generic) and a.dtype in _FORMATS:
            layout.append(a.dtype)
        else:
            raise TypeError(f"kernel argument {a!r}: pass tensors, None or numpy scalars of the kernel's "
                            "parameter widths (np.int32, np.int64, np.float32, ...)")
    return tuple(layout)


class ArgumentSlots:
    """The parameter buffer of one kernel and argument layout: 8 bytes a parameter, the struct
    format that writes them all at once, and the array of their addresses the driver reads."""

    def __init__(self, layout: tuple) -> None:
        self.kinds = layout
        self.pointer = tuple(kind == _POINTER for kind in layout)
        codes = ["Q" if kind == _POINTER else _FORMATS[kind] for kind in layout]
        self.format = struct.Struct("<" + "".join(c + "x" * (_SLOT - struct.calcsize(c)) for c in codes))
        self.buffer = ctypes.create_string_buffer(max(_SLOT, self.format.size))
        base = ctypes.addressof(self.buffer)
        self.addresses = (ctypes.c_void_p * max(1, len(layout)))(*[base + _SLOT * i for i in range(len(layout))])

    def store(self, args: Sequence[Any]) -> None:
        self.format.pack_into(self.buffer, 0, *[(0 if a is None else a.data_ptr()) if pointer else a
                                                for pointer, a in zip(self.pointer, args)])


_LOCAL = threading.local()
"""Parameter buffers per thread, so two threads launching one kernel never share one."""


def slots_for(function: int, args: Sequence[Any]) -> ArgumentSlots:
    """The buffer for `function` and the types of `args` (made, and the layout checked, on the
    first call with those types)."""
    cache = getattr(_LOCAL, "slots", None)
    if cache is None:
        cache = _LOCAL.slots = {}
    key = (function, *map(type, args))
    slots = cache.get(key)
    if slots is None:
        slots = cache[key] = ArgumentSlots(layout_of(args))
    return slots


class BoundLaunch:
    """One kernel's launch on one device with its dimensions and argument layout fixed: a call
    writes the argument values into the parameter buffer and enqueues, nothing else. What a
    launcher keeps for a call it has checked and planned before (the host cost of a repeat).

    Values are passed raw, in the kernel's parameter order: device addresses as ints (0 for
    None) and scalars as numbers of the widths the example arguments had. One buffer, guarded by
    a lock (the driver copies it during the call, which releases the GIL)."""

    def __init__(self, function: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                 args: Sequence[Any], cooperative: bool = False) -> None:
        d = driver()
        slots = ArgumentSlots(layout_of(args))
        self._call = d.cooperative if cooperative else d.launch
        self._head = (d.handle(function), *grid, *block, shared_mem)
        self._tail = (slots.addresses,) if cooperative else (slots.addresses, None)
        self._pack = slots.format.pack_into
        self._buffer = slots.buffer
        self._handle = d.handle
        self._lock = threading.Lock()

    def __call__(self, stream: int, values: Sequence[Any]) -> None:
        handle = self._handle(stream)
        with self._lock:
            self._pack(self._buffer, 0, *values)
            code = self._call(*self._head, handle, *self._tail)
        if code:
            raise RuntimeError(f"cuLaunchKernel failed: {driver().error_text(code)} ({code})")


def enqueue(function: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
            stream: int, args: Sequence[Any], cooperative: bool = False) -> None:
    """cuLaunchKernel (or cuLaunchCooperativeKernel) of `function` (a CUfunction handle) on `stream`
    in the calling thread's current context; RuntimeError naming the driver's error otherwise."""
    d = driver()
    slots = slots_for(function, args)
    slots.store(args)
    if cooperative:
        code = d.cooperative(d.handle(function), *grid, *block, shared_mem, d.handle(stream), slots.addresses)
    else:
        code = d.launch(d.handle(function), *grid, *block, shared_mem, d.handle(stream), slots.addresses, None)
    if code:
        raise RuntimeError(f"cuLaunchKernel failed: {d.error_text(code)} ({code})")


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig: the launch a cluster occupancy query is about."""

    _fields_ = [("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
                ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
                ("shared_mem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


def max_active_clusters(function: int, cluster: int, threads: int, shared_mem: int) -> int:
    """cuOccupancyMaxActiveClusters of `function` (a CUfunction whose cluster size, `cluster`
    blocks, is fixed at compile time) launched with `threads` threads and `shared_mem` dynamic
    bytes a block, in the calling thread's current context: how many such clusters the GPU holds
    at once. 0 where the driver has no such query or says the launch cannot run."""
    d = driver()
    if d.active_clusters is None:
        return 0
    config = _LaunchConfig(cluster, 1, 1, threads, 1, 1, shared_mem, None, None, 0)
    found = ctypes.c_int(0)
    code = d.active_clusters(ctypes.byref(found), d.handle(function), ctypes.byref(config))
    return int(found.value) if code == 0 else 0
