"""The wheel must carry suites/ and kernels/, so `pip install .` then `bwbench run` works anywhere."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bwbench.paths import REPO_DIR, kernels_dir, suites_dir


def test_checkout_paths_resolve():
    assert (suites_dir() / "softmax.py").is_file()
    assert list(kernels_dir().glob("*.cu"))


def test_wheel_contains_suites_and_kernels(tmp_path):
    if not (REPO_DIR / "pyproject.toml").is_file():
        pytest.skip("not running from a checkout")
    try:
        import hatchling  # noqa: F401
    except ImportError:
        pytest.skip("hatchling not installed (pip install hatchling)")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path), str(REPO_DIR)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(tmp_path.glob("bwbench-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "bwbench/suites/softmax.py" in names
    for cu in kernels_dir().glob("*.cu*"):
        assert f"bwbench/kernels/{cu.name}" in names
    assert "bwbench/cli.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "bwbench = bwbench.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
