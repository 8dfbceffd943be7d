"""Peer libraries as baselines: the best public kernels for the suites' operations.

Each peer is an optional extra (`pip install 'bwbench[liger]'`, `'bwbench[quack]'`). Its adapters
are imported by the suites only inside an implementation's build, so a missing library costs
nothing until it is asked for, and then the case is recorded as skipped with the reason and the
command that installs it. An adapter calls the library's forward launcher with the suite's own
arguments and returns the suite's outputs, so the suite's reference, tolerances and byte model
judge the peer exactly as they judge bwbench's own kernels.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType

from bwbench.suite import Skip

SUPPORTED_DTYPES = ("float16", "bfloat16", "float32")
"""The dtypes every adapter here passes through (the peers' kernels take these three)."""


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None where it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def version_tuple(version: str) -> tuple[int, ...]:
    """The release numbers of a version string: "0.8.4" -> (0, 8, 4); "1.0rc1" -> (1, 0)."""
    release = re.match(r"\d+(\.\d+)*", version.strip())
    return tuple(int(part) for part in release.group(0).split(".")) if release else ()


@dataclass(frozen=True)
class Peer:
    """A peer library: its name on PyPI, the bwbench extra that installs it, and the oldest
    version whose outputs match what the adapters return (older ones are skipped, not misjudged)."""

    distribution: str
    extra: str
    minimum: str

    @property
    def install_hint(self) -> str:
        return f"pip install 'bwbench[{self.extra}]'"

    def import_module(self, module: str) -> ModuleType:
        """Import one module of the library, or raise Skip saying why it cannot be used here."""
        version = installed_version(self.distribution)
        if version is None:
            raise Skip(f"{self.distribution} is not installed: {self.install_hint}")
        if version_tuple(version) < version_tuple(self.minimum):
            raise Skip(f"{self.distribution} {version} is older than {self.minimum}, the first version "
                       f"these adapters match: {self.install_hint}")
        try:
            return importlib.import_module(module)
        except (ImportError, OSError) as err:  # a missing dependency or a library that cannot load
            raise Skip(f"{self.distribution} {version} failed to import {module}: {err}") from err

    def function(self, module: str, name: str):
        """One function of the library (a kernel's forward launcher), or Skip where this version
        lacks it."""
        found = getattr(self.import_module(module), name, None)
        if found is None:
            raise Skip(f"{self.distribution} {installed_version(self.distribution)} has no {module}.{name}")
        return found


def require_dtype(peer: Peer, dtype: str) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise Skip(f"{peer.distribution} has no kernel for {dtype}")
