"""bwbench: how close do memory-bound GPU kernels get to the bandwidth the card can move?"""

__version__ = "0.1.0"


def load(path):
    """A results file as a pandas DataFrame, one row per (suite, case, dtype, implementation)."""
    from .results import load as _load

    return _load(path)


__all__ = ["__version__", "load"]
