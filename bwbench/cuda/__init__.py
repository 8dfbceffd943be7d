"""CUDA kernels of this project (kernels/*.cu) compiled with CuPy, and the cuDNN baselines.

One shape per kernel family, in bwbench/cuda/<family>/: a pure `plan.py` (what a shape launches,
testable without a GPU, listing every kernel it can name) and a `launch.py` (checks the tensors,
finds the cached plan, enqueues). Shared pieces: launch_spec.py (the one `Launch` type),
loader.py (compile, cache, launch), errors.py (every exception), autotune.py (first-use timing).
A family package imports its launcher only when one of its public names is used, so importing a
plan pulls in neither torch nor CuPy.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

__all__ = ["FAMILIES", "lazy_exports"]

FAMILIES = ("softmax", "norm", "permute", "bitmask", "bn_relu")


def lazy_exports(package: str, **modules: str) -> tuple[Callable[[str], Any], list[str]]:
    """A module `__getattr__` and `__all__` for a family package: `modules` maps a submodule to the
    space-separated names it exports; a name's submodule is imported on first use."""
    where = {name: module for module, names in modules.items() for name in names.split()}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function (launch host cost)
        return value

    return __getattr__, sorted(where)
