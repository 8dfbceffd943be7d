"""Parsing Nsight Compute's CSV and the profile command's errors (no GPU or ncu needed)."""

import pytest
from typer.testing import CliRunner

from bwbench.cli import app
from bwbench.profile import KernelMetrics, ProfileResult, ProfilerUnavailable, parse_ncu_csv

NCU_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "naive_reduce_max": 0%....50%....100% - 3 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"
"","","","","","","","","","","","byte","byte","nsecond"
"0","4242","python3.12","127.0.0.1","void naive_reduce_max<half_t>(const half_t *, float *, long, long)","1","7","(256, 1, 1)","(1056, 1, 1)","0","9.0","402,653,184","196,608","98,304"
"1","4242","python3.12","127.0.0.1","naive_exp","1","7","(256, 1, 1)","(2112, 1, 1)","0","9.0","805306368","805306368","401408"
==PROF== Disconnected from process 4242
'''


def test_ncu_csv_rows_are_summed_per_kernel():
    kernels = parse_ncu_csv(NCU_CSV)
    assert [k.name.split("(")[0] for k in kernels] == ["void naive_reduce_max<half_t>", "naive_exp"]
    assert kernels[0] == KernelMetrics(kernels[0].name, 402_653_184, 196_608, 98_304)
    result = ProfileResult(kernels, model_bytes=2 * 402_653_184, bwbench_median_us=500.0)
    assert result.dram_bytes == 402_653_184 + 196_608 + 2 * 805_306_368
    assert result.bytes_ratio == pytest.approx(result.dram_bytes / (2 * 402_653_184))
    assert result.ncu_time_us == pytest.approx(499.712)
    assert result.time_ratio == pytest.approx(499.712 / 500.0)
    assert result.to_dict()["kernel_count"] == 2
    # Nsight Compute times the kernels alone: the write-back bwbench charges after them is left out
    charged = ProfileResult(kernels, model_bytes=2 * 402_653_184, bwbench_median_us=510.0, writeback_us=10.0)
    assert charged.time_ratio == pytest.approx(499.712 / 500.0)
    assert charged.to_dict()["writeback_us"] == 10.0


def test_scaled_units_are_converted_to_bytes_and_nanoseconds():
    text = NCU_CSV.replace('"byte","byte","nsecond"', '"Mbyte","Kbyte","usecond"')
    first = parse_ncu_csv(text)[0]
    assert first.dram_read == pytest.approx(402_653_184e6) and first.time_ns == pytest.approx(98_304e3)


def test_missing_metrics_say_the_counters_are_unreadable():
    text = NCU_CSV.replace("dram__bytes_read.sum", "something_else")
    with pytest.raises(ProfilerUnavailable, match="dram__bytes_read.sum"):
        parse_ncu_csv(text)
    assert parse_ncu_csv("==PROF== nothing profiled\n") == []


def test_profile_without_ncu_is_a_clear_error(monkeypatch):
    import bwbench.profile as profile

    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    monkeypatch.setattr(profile.glob, "glob", lambda pattern: [])
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    result = CliRunner().invoke(app, ["profile", "softmax", "--impl", "naive", "--cols", "4096"])
    assert result.exit_code == 2
    assert "ncu" in result.output and "Traceback" not in result.output


def test_profile_argument_errors():
    runner = CliRunner()
    assert "one value per axis" in runner.invoke(app, ["profile", "softmax", "--impl", "naive", "--cols", "1,2"]).output
    assert runner.invoke(app, ["profile", "softmax", "--impl", "nope"]).exit_code == 2


def test_profile_target_run_by_hand_explains_itself():
    import subprocess
    import sys

    for args in ([], ["--help"], ["{not json"]):
        done = subprocess.run([sys.executable, "-m", "bwbench.profile", *args], capture_output=True, text=True)
        assert done.returncode != 0
        assert "Traceback" not in done.stderr and "bwbench profile --help" in done.stderr
