"""Where the suites and CUDA sources live, installed or in a checkout.

The wheel carries them as bwbench/suites and bwbench/kernels (hatch force-include); a checkout or an
editable install keeps them at the top of the repository. One resolver so nothing else guesses.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent


def _first_existing(name: str) -> Path:
    for candidate in (PACKAGE_DIR / name, REPO_DIR / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bwbench cannot find its {name}/ folder (looked in {PACKAGE_DIR} and {REPO_DIR})")


def suites_dir() -> Path:
    return _first_existing("suites")


def kernels_dir() -> Path:
    return _first_existing("kernels")
