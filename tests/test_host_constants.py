"""Every constant the host copies from a kernel equals the kernel's: read from the .cu/.cuh text
(the source file and every header it includes), so a kernel edit that a launcher did not follow
fails here, on any machine, instead of launching with a wrong block size or buffer layout."""

from __future__ import annotations

import re

import pytest

from bwbench.cuda.loader import source_files

_CONSTEXPR = re.compile(r"constexpr\s+(?:int|unsigned|long long)\s+(\w+)\s*=\s*([^;]+);")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n/]+)", re.MULTILINE)


def kernel_constants(filename: str) -> dict[str, int]:
    """Integer constants of a kernel source and its headers: `constexpr int NAME = expr;` (expr of
    numbers, earlier constants and + - * /) and object-like `#define NAME value`."""
    found = [item for path in source_files(filename) for text in [path.read_text(encoding="utf-8")]
             for item in _DEFINE.findall(text) + _CONSTEXPR.findall(text)]
    values: dict[str, int] = {}
    for _ in range(len(found)):  # until every expression whose names are known is evaluated
        before = len(values)
        for name, expr in found:
            expr = re.sub(r"(0x[0-9A-Fa-f]+|\d+)[uUlL]*", r"\1", expr.strip())
            expr = re.sub(r"\b\w+::", "", expr)
            try:
                values[name] = int(eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(values)))  # noqa: S307
            except Exception:  # noqa: BLE001 - not a plain integer expression (a template, a cast)
                continue
        if len(values) == before:
            break
    return values


def _pairs():
    from bwbench import philox
    from bwbench.cuda.bitmask import plan as bitmask
    from bwbench.cuda.bn_relu import plan as bn_relu
    from bwbench.cuda.norm import plan as norm
    from bwbench.cuda.permute import plan as permute
    from bwbench.cuda.softmax import dispatch as softmax

    return [
        ("softmax.cu", "BW_SOFTMAX_WARP_BLOCK", softmax.WARP_BLOCK),
        ("softmax.cu", "kPortableCluster", softmax.PORTABLE_CLUSTER),
        ("norm.cu", "kWarpBlock", norm.WARP_BLOCK),
        ("norm.cu", "kBlockStoreBatch", norm.CACHED_STORE_BATCH),
        ("norm.cu", "kUncachedStoreBatch", norm.UNCACHED_STORE_BATCH),
        ("permute.cu", "MAX_DIMS", permute.MAX_DIMS),
        ("permute.cu", "MAX_BATCH_DIMS", permute.MAX_BATCH_DIMS),
        ("permute.cu", "NAIVE_THREADS", permute.NAIVE_THREADS),
        ("bitmask.cu", "MASK_LINE", bitmask.MASK_LINE),
        ("bitmask.cu", "PHILOX_M0", philox.M0),
        ("bitmask.cu", "PHILOX_M1", philox.M1),
        ("bitmask.cu", "PHILOX_W0", philox.W0),
        ("bitmask.cu", "PHILOX_W1", philox.W1),
        ("bn_relu.cu", "kBlock", bn_relu.BLOCK),
        ("bn_relu.cu", "kMergeGroup", bn_relu.MERGE_GROUP),
        ("bn_relu.cu", "kMergeRound", bn_relu.MERGE_ROUND),
        ("bn_relu.cu", "kReadyFlags", bn_relu.READY_FLAGS_AT),
    ]


@pytest.mark.parametrize("filename,name,host", _pairs(), ids=lambda v: str(v))
def test_host_constant_equals_kernel_constant(filename, name, host):
    constants = kernel_constants(filename)
    assert name in constants, f"{name} is not an integer constant of {filename} or its headers"
    assert constants[name] == host, f"{filename} {name} = {constants[name]}, the host copies {host}"


def test_the_parser_reads_expressions_of_earlier_constants(tmp_path, monkeypatch):
    (tmp_path / "k.cu").write_text('#include "h.cuh"\nconstexpr int kB = kA * 4 + 1;  // note\n')
    (tmp_path / "h.cuh").write_text("#define BW_X 7\nnamespace n { constexpr unsigned kA = 0x10u; }\n")
    from bwbench.cuda import loader

    monkeypatch.setattr(loader, "kernels_dir", lambda: tmp_path)
    assert kernel_constants("k.cu") == {"BW_X": 7, "kA": 16, "kB": 65}
