"""Static checks that catch, on a CPU-only machine, mistakes in code only a GPU would run.

Much of bwbench (launchers, cuDNN bindings, GPU-only branches of suites) never executes in CPU
CI; an undefined name there would first show up on the device. pyflakes finds those without
running anything.
"""

import subprocess
import sys
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parents[1]


def test_pyflakes_is_clean_on_the_package_and_suites():
    pytest.importorskip("pyflakes")
    found = subprocess.run([sys.executable, "-m", "pyflakes", "bwbench", "suites", "examples"], cwd=REPO_DIR,
                           capture_output=True, text=True)
    assert found.returncode == 0, f"pyflakes:\n{found.stdout}{found.stderr}"
