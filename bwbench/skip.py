"""`Skip`: an implementation cannot run a case here (no cuDNN, no CuPy, a shape it does not take).

Its own tiny module so that the kernel layer (bwbench.cuda) and the suite model (bwbench.suite,
which re-exports it) share one exception without the kernels importing the suite model.
"""

from __future__ import annotations

__all__ = ["Skip"]


class Skip(Exception):
    """Raised by an implementation's build (or run) when it cannot run this case here: the case is
    recorded as skipped with this reason (no cuDNN, dtype unsupported), not silently dropped."""
