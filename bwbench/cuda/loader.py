"""Compile kernels/*.cu with CuPy (NVRTC) and launch them on PyTorch's stream, zero-copy.

Why it looks the way it does:

- Launcher modules declare their sources at import (`KernelSource(...)`), so a CPU test can find
  every declared source and compile it with nvcc, and fail on any .cu that nobody declared.
- CuPy's on-disk kernel cache keys on the code text and options only, not on headers reached
  through `-I`. The code handed to CuPy therefore starts with a sha256 over the .cu and every
  header it includes, so editing a header changes the key instead of silently reusing a stale
  binary.
- `load()` compiles and fetches every kernel at once, so a compile error surfaces when an
  implementation is built (outside timing) with the NVRTC log, not at its first launch.
- Launches go to `torch.cuda.current_stream()` on the tensors' device and pass tensors as raw
  pointers: nothing is copied or allocated through CuPy, and no synchronisation happens, so a launch
  can be captured into a `torch.cuda.CUDAGraph`.
- Kernel arguments must carry their C++ width: numpy scalars (np.int32, np.int64, np.float32, ...)
  pass as they are; a bare Python int or float is refused, because CuPy would silently pass it as
  a 64-bit value and a kernel taking `int` or `float` would read garbage.
- CuPy is imported lazily, so this module imports (and its CPU tests run) without CUDA.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bwbench.cuda import driver_launch
from bwbench.cuda.errors import CupyUnavailable, KernelCompileError
from bwbench.cuda.launch_spec import MAX_GRID, PORTABLE_CLUSTER_BLOCKS, Launch, grid_blocks
from bwbench.paths import kernels_dir

__all__ = [
    "CompiledModule",
    "Kernel",
    "KernelCompileError",
    "KernelSource",
    "PlannedCall",
    "check_matrix",
    "cpp_type",
    "declared_sources",
    "device_index",
    "MAX_GRID",
    "grid_size",
    "kernel_arguments",
    "launch",
    "launch_grid_stride",
    "load",
    "run",
    "max_active_blocks_per_sm",
    "max_active_clusters",
    "allow_all_dynamic_shared_memory",
    "max_shared_memory_per_block",
    "set_max_dynamic_shared_memory",
    "source_files",
    "sources_sha256",
]

CUPY_MISSING = "CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x)"

# The first line of the code handed to CuPy; part of CuPy's disk-cache key.
HASH_COMMENT = "// bwbench-sources-sha256: "

# Options every kernel is compiled with (before the source's own).
BASE_OPTIONS = ("-std=c++17",)

EXTRA_OPTIONS_ENV = "BWBENCH_NVRTC_OPTIONS"
"""Extra NVRTC options for every kernel, after the source's own: e.g. `-lineinfo` for Nsight
Compute's source view. The kernels have no build switches of their own; these options are the one
build input besides the sources, so a run records them (the environment's `kernel_options`), since
they can change what was measured."""

# torch dtype -> the C++ storage type the kernels are instantiated for (kernels/common.cuh).
_CPP_TYPES: dict[torch.dtype, str] = {
    torch.float16: "half_t",
    torch.bfloat16: "bf16_t",
    torch.float32: "float",
}


def cpp_type(dtype: torch.dtype) -> str:
    """The C++ storage type name (half_t, bf16_t, float) for a torch dtype."""
    try:
        return _CPP_TYPES[dtype]
    except (KeyError, TypeError):  # TypeError: an unhashable "dtype" (a list)
        supported = ", ".join(str(d).removeprefix("torch.") for d in _CPP_TYPES)
        raise ValueError(f"no CUDA kernel for dtype {dtype}; supported: {supported}") from None


# ----------------------------------------------------------------------------------------------
# Declared sources
# ----------------------------------------------------------------------------------------------

_REGISTRY: dict[tuple[str, tuple[str, ...], tuple[str, ...]], KernelSource] = {}
_REGISTRY_LOCK = threading.Lock()


@dataclass(frozen=True)
class KernelSource:
    """One kernels/*.cu file and the kernels (C++ name expressions) instantiated from it.

    Declared at import time by the launcher module that uses it; every declaration is recorded in
    a process-wide registry (`declared_sources()`).
    """

    filename: str
    name_expressions: tuple[str, ...]
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Accept lists, store tuples: the source is a dict key and must be hashable.
        object.__setattr__(self, "name_expressions", tuple(self.name_expressions))
        object.__setattr__(self, "options", tuple(self.options))
        if not self.filename or Path(self.filename).is_absolute():
            raise ValueError(f"KernelSource filename must be relative to kernels/: {self.filename!r}")
        if not self.name_expressions:
            raise ValueError(f"KernelSource {self.filename!r} declares no kernels")
        if len(set(self.name_expressions)) != len(self.name_expressions):
            raise ValueError(f"KernelSource {self.filename!r} lists a kernel twice")
        for item in self.name_expressions + self.options:
            if not isinstance(item, str) or not item:
                raise TypeError(f"KernelSource {self.filename!r}: expected non-empty strings, got {item!r}")
        with _REGISTRY_LOCK:
            _REGISTRY[(self.filename, self.name_expressions, self.options)] = self


def declared_sources() -> tuple[KernelSource, ...]:
    """Every KernelSource declared so far in this process (import the launcher modules first)."""
    with _REGISTRY_LOCK:
        return tuple(_REGISTRY.values())


# ----------------------------------------------------------------------------------------------
# Include closure and its hash
# ----------------------------------------------------------------------------------------------

_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.MULTILINE)


def source_files(filename: str, folder: Path | str | None = None) -> list[Path]:
    """The .cu file and every header it includes, recursively, in first-seen order.

    Only quoted includes are followed (`#include "x.cuh"`): they are the project's own headers.
    Angle-bracket includes are the toolkit's, covered by CuPy's own key (NVRTC version). A quoted
    include is looked up next to the including file, then in `folder`, as the compiler does.
    """
    folder = Path(folder) if folder is not None else kernels_dir()
    root = folder / filename
    if not root.is_file():
        raise KernelCompileError(f"kernel source {filename!r} not found in {folder}")
    ordered: list[Path] = []
    seen: set[Path] = set()
    pending = [root.resolve()]
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        ordered.append(path)
        for name in _QUOTED_INCLUDE.findall(path.read_text(encoding="utf-8")):
            for candidate in (path.parent / name, folder / name):
                if candidate.is_file():
                    pending.append(candidate.resolve())
                    break
            else:
                raise KernelCompileError(
                    f'{_display(path, folder)} includes "{name}", which is neither next to it nor in {folder}'
                )
    return ordered


def sources_sha256(filename: str, folder: Path | str | None = None) -> str:
    """sha256 over the .cu file and every header it includes (names and contents)."""
    folder = Path(folder) if folder is not None else kernels_dir()
    digest = hashlib.sha256()
    for path in source_files(filename, folder):
        data = path.read_bytes()
        digest.update(_display(path, folder).encode("utf-8") + b"\0")
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def _display(path: Path, folder: Path) -> str:
    try:
        return path.relative_to(folder.resolve()).as_posix()
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------------------------
# Compilation
# ----------------------------------------------------------------------------------------------


def _import_cupy() -> Any:
    try:
        import cupy
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "cupy":
            raise CupyUnavailable(CUPY_MISSING) from exc
        raise CupyUnavailable(f"CuPy failed to import: {exc}") from exc
    except ImportError as exc:  # installed but broken, e.g. two cupy-cuda* wheels at once
        raise CupyUnavailable(f"CuPy failed to import: {exc}") from exc
    if cupy is None:  # sys.modules["cupy"] = None blocks the import the same way
        raise CupyUnavailable(CUPY_MISSING)
    return cupy


class Kernel:
    """One compiled kernel: call it as `kernel(grid, block, args, shared_mem=0)`.

    Wraps a `cupy.RawKernel`; its function attributes are per device in CUDA, so the ones this
    project sets (max dynamic shared memory) are remembered and applied on each device before the
    first launch there.
    """

    def __init__(self, name_expression: str, raw: Any, module: CompiledModule) -> None:
        self.name = name_expression
        self.raw = raw  # cupy.RawKernel
        self.module = module
        self._max_dynamic_smem: int | None = None
        self._non_portable_clusters = False
        self._prepared: set[int] = set()
        self._functions: dict[int, int] = {}
        """CUfunction handle per device, once a launch there has set the function's attributes."""
        self._occupancy: dict[tuple[int, int, int], int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Kernel {self.name} from {self.module.source.filename}>"

    def __call__(self, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any],
                 shared_mem: int = 0, cooperative: bool = False) -> None:
        launch(self, grid, block, args, shared_mem=shared_mem, cooperative=cooperative)

    def attributes(self, device: int | None = None) -> dict[str, int]:
        """CUDA function attributes (num_regs, local_size_bytes, ...) on a device."""
        cupy = _import_cupy()
        device = device_index(device)
        with cupy.cuda.Device(device):
            self._prepare(device)
            return dict(self.raw.attributes)

    def _prepare(self, device: int) -> None:
        # Called with the CuPy device already current.
        if device in self._prepared:
            return
        with self._lock:
            if self._max_dynamic_smem is not None:
                self.raw.max_dynamic_shared_size_bytes = self._max_dynamic_smem
            if self._non_portable_clusters:
                _import_cupy().cuda.driver.funcSetAttribute(self.raw.kernel.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
            self._prepared.add(device)


class CompiledModule:
    """The kernels of one KernelSource, compiled for this process."""

    def __init__(self, source: KernelSource, digest: str, options: tuple[str, ...], raw: Any,
                 kernels: dict[str, Any]) -> None:
        self.source = source
        self.digest = digest
        self.options = options
        self.raw = raw  # cupy.RawModule
        self._kernels = {name: Kernel(name, k, self) for name, k in kernels.items()}

    def __repr__(self) -> str:
        return f"<CompiledModule {self.source.filename} sha256={self.digest[:12]}>"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._kernels)

    def kernel(self, name_expression: str) -> Kernel:
        try:
            return self._kernels[name_expression]
        except KeyError:
            raise KeyError(
                f"{name_expression!r} is not declared by {self.source.filename}; declared: "
                + ", ".join(self._kernels)
            ) from None


_MODULES: dict[tuple[Any, ...], CompiledModule] = {}  # by (source, options, sources hash)
_FAST: dict[tuple[KernelSource, str, tuple[str, ...]], CompiledModule] = {}  # by (source, folder, extra options): skips re-hashing
_COMPILE_LOCK = threading.Lock()


_PARSED_OPTIONS: dict[str, tuple[str, ...]] = {}


def extra_options() -> tuple[str, ...]:
    """The options of $BWBENCH_NVRTC_OPTIONS (shell-style words), or () when unset."""
    raw = os.environ.get(EXTRA_OPTIONS_ENV, "")
    parsed = _PARSED_OPTIONS.get(raw)
    if parsed is None:
        parsed = _PARSED_OPTIONS[raw] = tuple(shlex.split(raw))
    return parsed


def code_for(source: KernelSource, folder: Path | str | None = None) -> tuple[str, str]:
    """The exact code text handed to NVRTC and its sources hash."""
    folder = Path(folder) if folder is not None else kernels_dir()
    digest = sources_sha256(source.filename, folder)
    text = (folder / source.filename).read_text(encoding="utf-8")
    # The #line keeps NVRTC's error positions those of the file on disk.
    code = f'{HASH_COMMENT}{digest}\n#line 1 "{source.filename}"\n{text}'
    return code, digest


def load(source: KernelSource, folder: Path | str | None = None) -> CompiledModule:
    """Compile `source` (once per process; on disk through CuPy's kernel cache) and fetch every kernel.

    Compiles for the current PyTorch device. Raises KernelCompileError with the NVRTC log when the
    source does not compile or a declared name expression is not in it.
    """
    folder = Path(folder) if folder is not None else kernels_dir()
    extra = extra_options()
    fast_key = (source, str(folder), extra)
    module = _FAST.get(fast_key)
    if module is not None:
        return module
    with _COMPILE_LOCK:
        module = _FAST.get(fast_key)
        if module is not None:
            return module
        code, digest = code_for(source, folder)
        options = BASE_OPTIONS + (f"-I{folder}",) + source.options + extra
        key = (source.filename, source.name_expressions, options, digest)
        module = _MODULES.get(key)
        if module is None:
            module = _compile(source, code, digest, options)
            _MODULES[key] = module
        _FAST[fast_key] = module
        return module


def _compile(source: KernelSource, code: str, digest: str, options: tuple[str, ...]) -> CompiledModule:
    cupy = _import_cupy()
    from cupy.cuda.compiler import CompileException

    what = f"{source.filename} (NVRTC options: {' '.join(options)})"
    raw = cupy.RawModule(code=code, options=options, name_expressions=source.name_expressions)
    kernels: dict[str, Any] = {}
    with cupy.cuda.Device(device_index(None)):
        try:
            raw.compile()
        except CompileException as exc:
            raise KernelCompileError(f"{what} failed to compile:", log=exc.get_message()) from exc
        for name in source.name_expressions:
            try:
                kernels[name] = raw.get_function(name)
            except CompileException as exc:
                raise KernelCompileError(f"{what} failed to compile:", log=exc.get_message()) from exc
            except Exception as exc:  # e.g. CUDA_ERROR_NOT_FOUND for a name that is not a kernel
                raise KernelCompileError(f"{what}: cannot get kernel {name!r}: {exc}") from exc
    return CompiledModule(source, digest, options, raw, kernels)


# ----------------------------------------------------------------------------------------------
# Launching
# ----------------------------------------------------------------------------------------------

_NUMPY_KINDS = frozenset("biuf")  # bool, signed, unsigned, floating


def kernel_arguments(args: Iterable[Any]) -> tuple[list[Any], int | None]:
    """Kernel arguments as CuPy passes them, and the CUDA device of the tensors among them.

    torch.Tensor -> its data_ptr as a 64-bit value (zero-copy; must be a CUDA tensor, all on one
    device); numpy scalar -> itself, with its exact width; None -> a null pointer. Anything else,
    a bare Python int/float/bool in particular, raises TypeError.
    """
    packed: list[Any] = []
    device: int | None = None
    for position, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            if arg.device.type != "cuda":
                raise ValueError(f"kernel argument {position} is a tensor on {arg.device}, not on a CUDA device")
            index = device_index(arg)
            if device is None:
                device = index
            elif index != device:
                raise ValueError(f"kernel arguments are on several devices (cuda:{device} and cuda:{index})")
            packed.append(np.uint64(arg.data_ptr()))
        elif isinstance(arg, np.generic):
            if arg.dtype.kind not in _NUMPY_KINDS or arg.dtype.itemsize > 8:
                raise TypeError(f"kernel argument {position}: unsupported numpy type {arg.dtype}")
            packed.append(arg)
        elif arg is None:
            packed.append(np.uint64(0))
        elif isinstance(arg, (bool, int, float)):
            raise TypeError(
                f"kernel argument {position} is a bare Python {type(arg).__name__} ({arg!r}), whose C++ "
                "width is ambiguous: pass a numpy scalar of the kernel's parameter type, e.g. "
                "np.int32(...), np.int64(...) or np.float32(...)"
            )
        else:
            raise TypeError(
                f"kernel argument {position}: unsupported type {type(arg).__name__} "
                "(expected a CUDA torch.Tensor, a numpy scalar or None)"
            )
    return packed, device


def _dims(value: int | Sequence[int], what: str) -> tuple[int, ...]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise TypeError(f"{what} dimensions must be integers, got {value!r}")
        # CuPy would silently launch max(1, d): an empty grid must not become one block.
        if d < 1:
            raise ValueError(f"{what} dimensions must be >= 1, got {value!r}")
        out.append(int(d))
    return tuple(out)


def device_index(device: int | torch.device | torch.Tensor | None) -> int:
    """The CUDA device number of a device, a tensor's device, or the current one (None, or a
    device without an index)."""
    if isinstance(device, torch.Tensor):
        device = device.device
    if isinstance(device, torch.device):
        device = device.index
    return torch.cuda.current_device() if device is None else int(device)


def check_count(what: str, name: str, value: Any) -> int:
    """A row or column count a caller gives a planner: a whole number of at least 1 (numpy's too).
    None or 2.5 failed deep in the plan with a TypeError, or only after compiling the kernels."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} takes {name} as a whole number of at least 1, not {type(value).__name__} {value!r}")
    return int(value)


def check_bool(what: str, name: str, value: Any) -> bool:
    """A yes-or-no option of a launcher as a real bool: rms=None or "no" picked no kernel source."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{what} takes {name} as True or False, not {type(value).__name__} {value!r}")
    return bool(value)


def check_matrix(t: torch.Tensor, what: str, name: str = "x", rows_only: bool = False) -> None:
    """`t` is a 2-D contiguous CUDA tensor of a dtype the kernels take (rows_only: only each row
    need be contiguous, any row stride); a ValueError naming `what` (the function) and `name` (the
    argument) otherwise."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{what} expects {name} to be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{what} expects a 2-D {name} (rows, cols), got shape {tuple(t.shape)}")
    if t.device.type != "cuda":
        raise ValueError(f"{what} expects CUDA tensors, got {name} on {t.device}")
    cpp_type(t.dtype)  # ValueError naming the supported dtypes
    if rows_only:
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ValueError(f"{what} expects {name} with contiguous rows (last-dim stride 1; any row stride "
                             f"works, e.g. a column slice), got strides {t.stride()}: call .contiguous() first")
    elif not t.is_contiguous():
        raise ValueError(f"{what} expects a contiguous {name}, got strides {t.stride()}")


class _StreamHandle:
    """A bare CUDA stream handle that speaks the CUDA stream protocol (for Stream.from_external)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


_STREAMS: dict[tuple[int, int], Any] = {}


def _cupy_stream(cupy: Any, ptr: int, device: int) -> Any:
    """A CuPy view (not owner) of PyTorch's stream `ptr`; cached, it holds no resources."""
    key = (device, ptr)
    stream = _STREAMS.get(key)
    if stream is None:
        if hasattr(cupy.cuda.Stream, "from_external"):  # CuPy >= 14
            stream = cupy.cuda.Stream.from_external(_StreamHandle(ptr))
        else:  # CuPy 13; deprecated (with a warning) since 14
            stream = cupy.cuda.ExternalStream(ptr, device)
        _STREAMS[key] = stream
    return stream


def launch(kernel: Kernel, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence[Any],
           shared_mem: int = 0, cooperative: bool = False) -> None:
    """Launch `kernel` on PyTorch's current stream of the tensors' device (asynchronous).

    cooperative: launch with cuLaunchCooperativeKernel, which guarantees that every block of the
    grid is resident at once (so blocks may wait for each other) and fails, rather than hangs,
    when the grid is larger than the GPU holds.

    Safe inside `torch.cuda.graph(...)` capture: it only enqueues the launch on the capturing
    stream. Launch it once outside capture first (as PyTorch's warm-up does anyway), so that
    per-device, per-thread set-up happens outside the capture.
    """
    grid_dims = _dims(grid, "grid")
    block_dims = _dims(block, "block")
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, (int, np.integer)) or shared_mem < 0:
        raise ValueError(f"shared_mem must be a non-negative integer, got {shared_mem!r}")
    packed, device = kernel_arguments(args)
    device = device_index(device)
    cupy = _import_cupy()
    stream_ptr = torch.cuda.current_stream(device).cuda_stream
    with cupy.cuda.Device(device):
        kernel._prepare(device)
        with _cupy_stream(cupy, stream_ptr, device):
            if cooperative:
                blocks = int(np.prod(grid_dims))
                resident = max_active_blocks_per_sm(kernel, int(np.prod(block_dims)), int(shared_mem), device) * \
                    torch.cuda.get_device_properties(device).multi_processor_count
                if blocks > resident:  # CuPy would shrink a 1-D grid with a warning: refuse instead
                    raise ValueError(f"cooperative launch of {kernel.name}: {blocks} blocks, but only {resident} "
                                     "can be resident at once")
                kernel.raw.kernel(grid_dims, block_dims, tuple(packed), shared_mem=int(shared_mem),
                                  enable_cooperative_groups=True)
            else:
                kernel.raw(grid_dims, block_dims, tuple(packed), shared_mem=int(shared_mem))


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)
"""torch's own cheap accessor of the current stream's handle (what Inductor's launchers use), where
this build has it; torch.cuda.current_stream() builds a Stream object on every call."""


def current_stream_ptr(device: int) -> int:
    """PyTorch's current CUDA stream on `device`, as a raw handle."""
    if _RAW_STREAM is not None:
        return int(_RAW_STREAM(device))
    return torch.cuda.current_stream(device).cuda_stream


def run(kernel: Kernel, spec: Launch, args: Sequence[Any], device: int) -> None:
    """Enqueue a planned launch on PyTorch's current stream of `device`: the fast path of `launch`
    for launchers that checked their tensors (CUDA, on `device`) and made `spec` once per shape.

    `args` are the kernel's arguments in order: tensors (passed as their data pointers), None (a
    null pointer) and numpy scalars of the kernel's parameter widths. A cooperative `spec` must
    have been checked to fit the GPU when it was planned (`check_cooperative`). Where `device` is
    the current device, the launch goes straight to the driver (driver_launch.py: a few µs of host
    time); otherwise, or without libcuda, through CuPy.
    """
    stream_ptr = current_stream_ptr(device)
    function = kernel._functions.get(device)
    if function is not None and _current_device() == device:
        try:
            _fast_enqueue(function, _dims3(spec.grid), _dims3(spec.block), spec.shared_mem, stream_ptr, args,
                          spec.cooperative)
            return
        except TypeError:  # an argument of no fixed width (refused before any launch): CuPy decides
            pass
    cupy = _import_cupy()
    packed = tuple(np.uint64(a.data_ptr()) if isinstance(a, torch.Tensor) else _NULL if a is None else a
                   for a in args)
    with cupy.cuda.Device(device):
        if device not in kernel._prepared:
            kernel._prepare(device)
        with _cupy_stream(cupy, stream_ptr, device):
            if spec.cooperative:
                kernel.raw.kernel(spec.grid, spec.block, packed, shared_mem=spec.shared_mem,
                                  enable_cooperative_groups=True)
            else:
                kernel.raw(spec.grid, spec.block, packed, shared_mem=spec.shared_mem)
        if _driver_available():
            kernel._functions[device] = int(kernel.raw.kernel.ptr)  # its attributes are set now


class PlannedCall:
    """A launch a launcher has checked and planned, kept for repeats on the same kind of
    arguments: `enqueue(values)` launches it on PyTorch's current stream of its device with the
    new argument values and nothing else, since everything a call on those arguments would check
    or plan is already settled.

    Made from the example arguments of a launch that has just run through `run` (tensors, None
    and numpy scalars, which fix the parameter widths). `values` are raw, in the same order:
    device addresses as ints (0 for None), scalars as numbers.
    """

    def __init__(self, kernel: Kernel, spec: Launch, args: Sequence[Any], device: int) -> None:
        self.kernel, self.spec, self.device = kernel, spec, device
        self._types = tuple(np.uint64 if kind == "pointer" else kind.type for kind in driver_launch.layout_of(args))
        function = kernel._functions.get(device)
        self._bound = None if function is None else driver_launch.BoundLaunch(
            function, _dims3(spec.grid), _dims3(spec.block), spec.shared_mem, args, spec.cooperative)

    def enqueue(self, values: Sequence[Any]) -> None:
        if self._bound is not None and _current_device() == self.device:
            self._bound(current_stream_ptr(self.device), values)
            return
        # Another device is current, or no driver: the general path, with typed arguments again.
        run(self.kernel, self.spec, [t(v) for t, v in zip(self._types, values)], self.device)


def _dims3(dims: tuple[int, ...]) -> tuple[int, int, int]:
    return (tuple(dims) + (1, 1))[:3]


_current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


_fast_enqueue = driver_launch.enqueue


def _driver_available() -> bool:
    try:
        driver_launch.driver()
    except driver_launch.DriverUnavailable:
        return False
    return True


_NULL = np.uint64(0)


def check_cooperative(kernel: Kernel, spec: Launch, device: int) -> None:
    """A cooperative launch's blocks must all be resident at once: ValueError where they cannot be
    (CuPy would shrink a 1-D grid with a warning; a larger grid would hang)."""
    resident = max_active_blocks_per_sm(kernel, spec.threads, spec.shared_mem, device) * \
        torch.cuda.get_device_properties(device).multi_processor_count
    if spec.blocks > resident:
        raise ValueError(f"cooperative launch of {kernel.name}: {spec.blocks} blocks, but only {resident} "
                         "can be resident at once")


# ----------------------------------------------------------------------------------------------
# Occupancy, grid sizes and shared memory
# ----------------------------------------------------------------------------------------------


def max_active_blocks_per_sm(kernel: Kernel, block_threads: int, dynamic_smem_bytes: int = 0,
                             device: int | torch.device | None = None) -> int:
    """How many blocks of `block_threads` threads fit on one SM at once (CUDA occupancy query)."""
    device = device_index(device)
    return _occupancy_query(kernel, device, (device, int(block_threads), int(dynamic_smem_bytes)),
                            lambda cupy, function: int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                                function, int(block_threads), int(dynamic_smem_bytes))))


def _occupancy_query(kernel: Kernel, device: int, key: tuple, ask) -> int:
    """`ask(cupy, function)` of `kernel`'s CUfunction on `device` with its attributes set, asked
    once per `key` (the answers are remembered until an attribute changes)."""
    cached = kernel._occupancy.get(key)
    if cached is not None:
        return cached
    cupy = _import_cupy()
    with cupy.cuda.Device(device):
        kernel._prepare(device)
        found = ask(cupy, int(kernel.raw.kernel.ptr))
    kernel._occupancy[key] = found
    return found


def grid_size(kernel: Kernel, block_threads: int, work_blocks: int, dynamic_smem_bytes: int = 0,
              device: int | torch.device | None = None, waves: int | None = 1) -> int:
    """Blocks for a launch of a grid-stride kernel with `work_blocks` blocks' worth of work: at
    most `waves` full waves (SMs x resident blocks per SM; the blocks then stride over the rest),
    or with waves=None a block for every piece of work, up to MAX_GRID. Never 0: callers return
    early on empty inputs. RuntimeError where not one block fits on an SM."""
    device = device_index(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    per_sm = max_active_blocks_per_sm(kernel, block_threads, dynamic_smem_bytes, device)
    if per_sm < 1:
        raise RuntimeError(
            f"{kernel.name} cannot run {block_threads} threads per block with {dynamic_smem_bytes} bytes "
            "of dynamic shared memory on this device (occupancy 0)"
        )
    return grid_blocks(work_blocks, per_sm, sms, waves)


def launch_grid_stride(kernel: Kernel, block_threads: int, work_blocks: int, args: Sequence[Any],
                       device: int | torch.device | None = None) -> None:
    """Launch a grid-stride kernel (no dynamic shared memory) with `grid_size`'s grid."""
    launch(kernel, grid_size(kernel, block_threads, work_blocks, device=device), block_threads, args)


def max_shared_memory_per_block(device: int | torch.device | None = None) -> int:
    """The most shared memory (static and dynamic) one block may opt in to on `device`, in bytes."""
    device = device_index(device)
    limit = getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", None)
    if not limit:
        cupy = _import_cupy()
        limit = cupy.cuda.Device(device).attributes["MaxSharedMemoryPerBlockOptin"]
    return int(limit)


def allow_all_dynamic_shared_memory(kernel: Kernel, device: int | torch.device | None = None) -> int:
    """Let `kernel` have all the shared memory a block may opt in to on `device`, beside its static
    shared memory; returns the dynamic bytes it may now ask for."""
    device = device_index(device)
    limit = max_shared_memory_per_block(device) - int(kernel.attributes(device).get("shared_size_bytes", 0))
    if kernel._max_dynamic_smem != limit:
        set_max_dynamic_shared_memory(kernel, limit, device)
    return limit


_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
"""CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h)."""


def max_active_clusters(kernel: Kernel, cluster: int, block_threads: int, dynamic_smem_bytes: int = 0,
                        device: int | torch.device | None = None) -> int:
    """How many clusters of `kernel` (whose compile-time cluster is `cluster` blocks) fit on the GPU
    at once with `block_threads` threads and `dynamic_smem_bytes` a block; 0 where it cannot launch.
    A cluster above the portable 8 blocks is opted in first (the launch needs that too)."""
    device = device_index(device)
    if cluster > PORTABLE_CLUSTER_BLOCKS and not kernel._non_portable_clusters:
        with kernel._lock:
            kernel._non_portable_clusters = True
            kernel._prepared.clear()
            kernel._occupancy.clear()

    def ask(cupy, function: int) -> int:
        try:
            return driver_launch.max_active_clusters(function, int(cluster), int(block_threads),
                                                     int(dynamic_smem_bytes))
        except driver_launch.DriverUnavailable:
            return 0

    key = ("clusters", device, int(cluster), int(block_threads), int(dynamic_smem_bytes))
    return _occupancy_query(kernel, device, key, ask)


def set_max_dynamic_shared_memory(kernel: Kernel, nbytes: int, device: int | torch.device | None = None) -> None:
    """Allow `kernel` to launch with up to `nbytes` of dynamic shared memory (above the 48 KiB default).

    Applied now on `device` (default: current) and on any other device before its first launch there.
    """
    cupy = _import_cupy()
    device = device_index(device)
    with kernel._lock:
        kernel._max_dynamic_smem = int(nbytes)
        kernel._prepared.clear()
        kernel._occupancy.clear()
    with cupy.cuda.Device(device):
        kernel._prepare(device)
