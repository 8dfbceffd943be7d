"""Every exception the kernel layer raises, in one place.

`Unsupported` (a `bwbench.skip.Skip`) means "cannot run here": the runner records the
implementation as skipped with the message. The others are bugs or bad input and fail loudly.
"""

from __future__ import annotations

from bwbench.skip import Skip

__all__ = ["CudnnError", "CudnnUnavailable", "CupyUnavailable", "KernelCompileError", "PermuteError", "Unsupported"]


class Unsupported(Skip):
    """This implementation cannot run this case on this machine; the message says why."""


class CupyUnavailable(Unsupported):
    """CuPy cannot be imported: kernel implementations are skipped with this reason, not failed."""


class CudnnUnavailable(Unsupported):
    """cuDNN (or its frontend) cannot run this here; the message says why."""


class KernelCompileError(RuntimeError):
    """A kernel source could not be compiled (or loaded); `log` holds the compiler's output."""

    def __init__(self, message: str, log: str = "") -> None:
        self.log = log
        super().__init__(f"{message}\n{log.rstrip()}" if log.strip() else message)


class CudnnError(RuntimeError):
    """A cuDNN call failed; carries the status and cudnnGetErrorString's text."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class PermuteError(ValueError):
    """The shape and permutation do not describe a permute the kernels can run."""
