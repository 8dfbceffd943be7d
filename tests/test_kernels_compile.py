"""Every kernels/*.cu compiles for sm_80 and sm_90 with no register spills, and the loader's CPU side.

Runs on machines without a GPU: nvcc compiles a small wrapper that instantiates every declared
kernel (skipped only where nvcc is absent); NVRTC, where CuPy can load it, compiles the exact code
text and options that the loader hands to CuPy at run time. Kernels are instantiated exactly as
declared by the launcher modules' KernelSource objects, so the tests check what actually runs.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bwbench.cuda
from bwbench.cuda import loader
from bwbench.cuda.loader import KernelCompileError, KernelSource
from bwbench.paths import kernels_dir

# Import every module of bwbench.cuda so that each launcher declares its KernelSource.
for _info in pkgutil.walk_packages(bwbench.cuda.__path__, prefix=f"{bwbench.cuda.__name__}."):
    importlib.import_module(_info.name)

SOURCES = sorted(loader.declared_sources(), key=lambda s: (s.filename, s.name_expressions))
ARCHS = ("sm_80", "sm_90")
# CuPy compiles with -ftz=true; compiling the same way keeps register counts comparable.
NVCC_FLAGS = ("-std=c++17", "--cubin", "-Xptxas", "-v", "-ftz=true")


def _source_id(source: KernelSource) -> str:
    return source.filename if sum(s.filename == source.filename for s in SOURCES) == 1 else (
        f"{source.filename}[{len(source.name_expressions)} kernels {'/'.join(source.options)}]"
    )


def _wrapper(source: KernelSource) -> str:
    """A translation unit that includes the source and takes every kernel's address: that forces
    each template instantiation to be compiled, exactly as NVRTC's name expressions do."""
    refs = ",\n".join(f"    (void*)&{name}" for name in source.name_expressions)
    return f'#include "{source.filename}"\n\nvoid* bwbench_kernel_refs[] = {{\n{refs}\n}};\n'


class PtxasFunction:
    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: list[str] = []
        self.registers: int | None = None
        self.stack_frame = 0
        self.spill_stores = 0
        self.spill_loads = 0


def parse_ptxas(output: str) -> list[PtxasFunction]:
    """Per entry function: registers, stack frame and spill bytes from `ptxas -v` output."""
    functions: list[PtxasFunction] = []
    current: PtxasFunction | None = None
    for line in output.splitlines():
        entry = re.search(r"Compiling entry function '([^']+)'", line)
        if entry:
            current = PtxasFunction(entry.group(1))
            functions.append(current)
            continue
        if current is None:
            continue
        if re.search(r"Function properties for", line):
            continue
        current.lines.append(line.strip())
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if frame:
            current.stack_frame, current.spill_stores, current.spill_loads = map(int, frame.groups())
        regs = re.search(r"Used (\d+) registers", line)
        if regs:
            current.registers = int(regs.group(1))
    return functions


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    return nvcc


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES, ids=_source_id)
def test_kernels_compile_without_spills(source: KernelSource, arch: str, tmp_path: Path) -> None:
    nvcc = _nvcc()
    wrapper = tmp_path / f"instantiate_{Path(source.filename).stem}.cu"
    wrapper.write_text(_wrapper(source))
    cmd = [nvcc, *NVCC_FLAGS, f"-arch={arch}", f"-I{kernels_dir()}", *source.options,
           "-o", str(tmp_path / "out.cubin"), str(wrapper)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nvcc failed for {source.filename} ({arch}):\n$ {' '.join(cmd)}\n{output}"

    functions = parse_ptxas(output)
    assert len(functions) >= len(source.name_expressions), (
        f"expected {len(source.name_expressions)} kernels from {source.filename}, ptxas compiled "
        f"{len(functions)}:\n{output}"
    )
    bad = [f for f in functions if f.spill_stores or f.spill_loads or f.stack_frame]
    assert not bad, f"{source.filename} ({arch}) spills or uses a stack frame:\n" + "\n".join(
        f"{f.name}: regs={f.registers} stack={f.stack_frame} spill stores={f.spill_stores} "
        f"loads={f.spill_loads}\n    " + "\n    ".join(f.lines) for f in bad
    ) + f"\n\nfull ptxas output:\n{output}"



PACKED_FILES = ("norm.cu", "softmax.cu")
"""Kernel files whose half-precision, 8-element (16-byte) instantiations must move x and y in
16-byte accesses: `<half_t, _, 8, ...>` in both files' template order."""

PEELED_FILES = ("softmax.cu",)
"""Kernel files whose rows may start mid-pack or end in a partial pack: their head and tail packs
move element by element (2-byte accesses), so only the presence of 16-byte ones is checked."""


NO_PACK_ARGUMENT = ("norm_tile", "norm_span_rows", "norm_cluster")
"""Kernels of PACKED_FILES whose third template argument is no pack size (norm_tile's is the
elements a lane holds: its packs always move whole through cp.async, its tiles' edges element by
element; norm_span_rows' is the packs a thread holds, always 16-byte ones, with the edges and the
shifted gamma and beta element by element: test_span_rows_compiles_to_wide_accesses; norm_cluster's
is its blocks a row: its slices load through cp.async, and its stores are checked in
test_cluster_stores_whole_packs)."""


def _sixteen_byte_half_kernels(filename: str) -> list[str]:
    names = set()
    for source in SOURCES:
        if source.filename == filename:
            for name in source.name_expressions:
                if name.split("<", 1)[0] in NO_PACK_ARGUMENT:
                    continue
                args = [a.strip() for a in name.split("<", 1)[1].rstrip(">").split(",")]
                if len(args) > 2 and args[0] == "half_t" and args[2] == "8":
                    names.add(name)
    return sorted(names)


def global_accesses(ptx: str) -> dict[str, dict[str, int]]:
    """Per entry function of a PTX text: counts of 2-byte global loads and stores ("ld16", "st16")
    and of 16-byte ones ("ld128", "st128")."""
    counts: dict[str, dict[str, int]] = {}
    entry = None
    for line in ptx.splitlines():
        found = re.match(r"\.visible \.entry (\S+?)\(", line)
        if found:
            entry = found.group(1)
            counts[entry] = {"ld16": 0, "st16": 0, "ld128": 0, "st128": 0}
            continue
        if entry is None:
            continue
        narrow = re.search(r"\b(ld|st)\.global(?:\.nc)?\.(?:u16|b16|s16|f16|bf16)\b", line)
        if narrow:
            counts[entry][narrow.group(1) + "16"] += 1
        wide = re.search(r"\b(ld|st)\.global(?:\.nc)?\.v4\.(?:u32|b32|f32|s32)\b", line)
        if wide:
            counts[entry][wide.group(1) + "128"] += 1
        if re.search(r"\bcp\.async\.c[ag]\.shared\.global(?:\.L2::\w+)? \[[^]]+\], \[[^]]+\], 16\b", line):
            counts[entry]["ld128"] += 1  # a 16-byte load straight into shared memory
    return counts


def global_scalar_halves(ptx: str) -> dict[str, tuple[int, int]]:
    """Per entry function of a PTX text: (2-byte global loads, 2-byte global stores)."""
    return {name: (c["ld16"], c["st16"]) for name, c in global_accesses(ptx).items()}


def test_global_scalar_halves_counts_per_entry() -> None:
    ptx = (".visible .entry _Z1aPKs(\n ld.global.nc.u16 %rs1, [%rd1];\n st.global.v4.u32 [%rd2], {%r1, %r2, %r3, %r4};\n"
           ".visible .entry _Z1bPKs(\n ld.global.nc.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1];\n st.global.u16 [%rd2], %rs1;\n")
    assert global_scalar_halves(ptx) == {"_Z1aPKs": (1, 0), "_Z1bPKs": (0, 1)}
    copy = ".visible .entry _Z1cPKs(\n cp.async.cg.shared.global [%r1], [%rd1], 16;\n"
    assert global_accesses(copy)["_Z1cPKs"]["ld128"] == 1
    assert global_accesses(ptx)["_Z1aPKs"]["st128"] == 1 and global_accesses(ptx)["_Z1bPKs"]["ld128"] == 1


@pytest.mark.parametrize("filename", PACKED_FILES)
def test_sixteen_byte_packs_compile_to_wide_accesses(filename: str, tmp_path: Path) -> None:
    """A Pack<T, 8> copied through a reference or a local struct can be split by the compiler into
    eight 2-byte accesses (softmax_warp's loads and norm_block's stores once were). Files of
    aligned rows: no 2-byte access but LayerNorm's row shift K = x[row, 0]. Files that peel rows
    (PEELED_FILES): every kernel loads and stores in 16-byte accesses."""
    nvcc = _nvcc()
    names = _sixteen_byte_half_kernels(filename)
    assert names, f"no 16-byte half instantiations declared for {filename}"
    wrapper = tmp_path / "packs.cu"
    wrapper.write_text(_wrapper(KernelSource(filename, names)))
    cmd = [nvcc, "-std=c++17", "--ptx", "-ftz=true", "-arch=sm_90", f"-I{kernels_dir()}",
           "-o", str(tmp_path / "out.ptx"), str(wrapper)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = global_accesses((tmp_path / "out.ptx").read_text())
    assert len(counts) >= len(names)
    if filename in PEELED_FILES:
        # One lane holding a row of one pack (rows of at most 8 halves, 16 bytes): the compiler
        # merges the whole-pack and partial-pack paths into 2-byte accesses; nothing to gain there.
        one_pack_rows = {n for n in counts if re.search(r"Li8ELi1ELi1ELi\d+EEv", n)}
        narrow = {name: c for name, c in counts.items()
                  if name not in one_pack_rows and (not c["ld128"] or not c["st128"])}
        assert not narrow, f"{filename}: kernels without 16-byte global loads or stores: {narrow}"
    else:
        scalar = {name: c for name, c in counts.items() if c["ld16"] > 1 or c["st16"] > 0}
        assert not scalar, f"{filename}: 2-byte global accesses in 16-byte pack kernels: {scalar}"

def test_cluster_stores_whole_packs(tmp_path: Path) -> None:
    """norm_cluster copies its slice in 16-byte packs with cp.async, reads gamma and beta in packs
    and stores y in 16-byte accesses; only the span's two edge packs (with their gamma and beta)
    and LayerNorm's eight samples of K move element by element."""
    from bwbench.cuda.norm.plan import CLUSTER_SIZES, cluster_name

    nvcc = _nvcc()
    names = [cluster_name("half_t", rms, size) for rms in (False, True) for size in CLUSTER_SIZES]
    wrapper = tmp_path / "cluster.cu"
    wrapper.write_text(_wrapper(KernelSource("norm.cu", names)))
    out = tmp_path / "cluster.ptx"
    proc = subprocess.run([nvcc, "-std=c++17", "--ptx", "-ftz=true", "-arch=sm_90", f"-I{kernels_dir()}", "-o",
                           str(out), str(wrapper)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = global_accesses(out.read_text())
    assert len(counts) == len(names)
    for entry, c in counts.items():
        assert c["ld128"] >= 1 and c["st128"] >= 1, f"{entry}: {c}"  # ld128: the cp.async copies


def test_span_rows_compiles_to_wide_accesses(tmp_path: Path) -> None:
    """norm_span_rows (rows at any offset within a pack) loads each of its P packs of x and stores
    its whole packs of y in 16-byte accesses; only the edge packs and the shifted gamma and beta
    move element by element."""
    from bwbench.cuda.norm.plan import span_rows_configs

    nvcc = _nvcc()
    names = [c.name("half_t", rms) for rms in (False, True) for c in span_rows_configs(rms)]
    wrapper = tmp_path / "span_rows.cu"
    wrapper.write_text(_wrapper(KernelSource("norm.cu", tuple(names))))
    cmd = [nvcc, "-std=c++17", "--ptx", "-ftz=true", "-arch=sm_90", f"-I{kernels_dir()}",
           "-o", str(tmp_path / "out.ptx"), str(wrapper)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = global_accesses((tmp_path / "out.ptx").read_text())
    assert len(counts) == len(names)
    for entry, c in counts.items():
        packs = int(re.search(r"norm_span_rowsI\w+?Lb[01]ELi(\d+)ELi", entry).group(1))
        assert c["ld128"] >= packs and c["st128"] >= packs, f"{entry}: {c}"


def _nvrtc():
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # CuPy absent, or its NVRTC library not installed here
        pytest.skip(f"NVRTC not available through CuPy: {exc}")
    return nvrtc


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES, ids=_source_id)
def test_kernels_compile_with_nvrtc(source: KernelSource, arch: str) -> None:
    """The exact code text the loader gives CuPy, with CuPy's own extra NVRTC options, compiles
    and every name expression resolves: no hidden dependency on headers NVRTC may not find."""
    nvrtc = _nvrtc()
    code, _ = loader.code_for(source)
    options = (*loader.BASE_OPTIONS, f"-I{kernels_dir()}", *source.options,
               "-ftz=true", "--device-as-default-execution-space", f"-arch={arch}")
    prog = nvrtc.createProgram(code, "bwbench_check.cu", (), ())
    try:
        for name in source.name_expressions:
            nvrtc.addNameExpression(prog, name)
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            pytest.fail(f"NVRTC failed on {source.filename} ({arch}): {exc}\n{nvrtc.getProgramLog(prog)}")
        for name in source.name_expressions:
            assert nvrtc.getLoweredName(prog, name)
    finally:
        nvrtc.destroyProgram(prog)


def test_every_cu_file_is_declared() -> None:
    declared = {s.filename for s in SOURCES}
    on_disk = {p.relative_to(kernels_dir()).as_posix() for p in kernels_dir().rglob("*.cu")}
    assert on_disk, f"no .cu files found in {kernels_dir()}"
    undeclared = sorted(on_disk - declared)
    assert not undeclared, (
        f"kernels/ sources no KernelSource declares (so nothing compiles or checks them): {undeclared}"
    )
    missing = sorted(declared - on_disk)
    assert not missing, f"KernelSource declarations whose file is missing: {missing}"


def test_wrapper_references_every_name_expression() -> None:
    source = next(s for s in SOURCES if s.filename == "softmax_naive.cu")
    text = _wrapper(source)
    for name in source.name_expressions:
        assert f"(void*)&{name}" in text


# ---------------------------------------------------------------------------------------------
# Include hash
# ---------------------------------------------------------------------------------------------


def _kernels(tmp_path: Path) -> Path:
    folder = tmp_path / "kernels"
    (folder / "detail").mkdir(parents=True)
    (folder / "common.cuh").write_text('#pragma once\n#include "detail/math.cuh"\n#include <cuda_fp16.h>\n')
    (folder / "detail" / "math.cuh").write_text("#pragma once\n__device__ float twice(float v) { return 2 * v; }\n")
    (folder / "a.cu").write_text('#include "common.cuh"\n  #  include "common.cuh"\n__global__ void k() {}\n')
    return folder


def test_source_files_follow_quoted_includes(tmp_path: Path) -> None:
    folder = _kernels(tmp_path)
    names = [p.relative_to(folder.resolve()).as_posix() for p in loader.source_files("a.cu", folder)]
    assert names == ["a.cu", "common.cuh", "detail/math.cuh"]


def test_header_edit_changes_the_hash(tmp_path: Path) -> None:
    folder = _kernels(tmp_path)
    before = loader.sources_sha256("a.cu", folder)
    assert before == loader.sources_sha256("a.cu", folder)
    assert re.fullmatch(r"[0-9a-f]{64}", before)
    (folder / "detail" / "math.cuh").write_text("#pragma once\n__device__ float twice(float v) { return v + v; }\n")
    after = loader.sources_sha256("a.cu", folder)
    assert after != before
    # An unrelated file does not change it.
    (folder / "unused.cuh").write_text("// nothing\n")
    assert loader.sources_sha256("a.cu", folder) == after


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """KernelSources declared by a test go to a throw-away registry, not the process's."""
    monkeypatch.setattr(loader, "_REGISTRY", dict(loader._REGISTRY))


def test_hash_goes_into_the_code_text(tmp_path: Path, isolated_registry: None) -> None:
    folder = _kernels(tmp_path)
    source = KernelSource("a.cu", ("k",))
    code, digest = loader.code_for(source, folder)
    first, second = code.splitlines()[:2]
    assert first == f"{loader.HASH_COMMENT}{digest}"
    assert second == '#line 1 "a.cu"'
    assert code.endswith((folder / "a.cu").read_text())


def test_missing_include_is_a_clear_error(tmp_path: Path) -> None:
    folder = _kernels(tmp_path)
    (folder / "b.cu").write_text('#include "common.cuh"\n#include "nowhere.cuh"\n')
    with pytest.raises(KernelCompileError, match=r'b\.cu includes "nowhere\.cuh"'):
        loader.sources_sha256("b.cu", folder)
    with pytest.raises(KernelCompileError, match=r"'missing\.cu' not found"):
        loader.sources_sha256("missing.cu", folder)


def test_include_cycle_terminates(tmp_path: Path) -> None:
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / "x.cuh").write_text('#include "y.cuh"\n')
    (folder / "y.cuh").write_text('#include "x.cuh"\n')
    (folder / "c.cu").write_text('#include "x.cuh"\n')
    assert len(loader.source_files("c.cu", folder)) == 3


# ---------------------------------------------------------------------------------------------
# Loader behaviour that needs no GPU
# ---------------------------------------------------------------------------------------------


def test_kernel_arguments_refuse_ambiguous_python_numbers() -> None:
    for bad in (3, 2.5, True):
        with pytest.raises(TypeError, match="np.int32"):
            loader.kernel_arguments([bad])
    with pytest.raises(TypeError, match="unsupported type"):
        loader.kernel_arguments(["text"])
    with pytest.raises(ValueError, match="not on a CUDA device"):
        loader.kernel_arguments([torch.zeros(2)])


def test_kernel_arguments_keep_numpy_widths() -> None:
    args = [np.int32(7), np.int64(1 << 40), np.float32(0.5), np.uint64(3), None]
    packed, device = loader.kernel_arguments(args)
    assert device is None
    assert [type(a) for a in packed[:4]] == [np.int32, np.int64, np.float32, np.uint64]
    assert packed[4] == 0 and packed[4].dtype.itemsize == 8


def test_grid_must_not_be_empty() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        loader._dims((0,), "grid")
    assert loader._dims(5, "grid") == (5,)
    assert loader._dims((2, 3), "block") == (2, 3)


def test_cpp_type_map() -> None:
    assert loader.cpp_type(torch.float16) == "half_t"
    assert loader.cpp_type(torch.bfloat16) == "bf16_t"
    assert loader.cpp_type(torch.float32) == "float"
    with pytest.raises(ValueError, match="float16"):
        loader.cpp_type(torch.float64)


def test_check_matrix_names_the_function_and_argument() -> None:
    with pytest.raises(ValueError, match="layer_norm expects gamma to be a torch.Tensor"):
        loader.check_matrix([1.0], "layer_norm", "gamma")
    with pytest.raises(ValueError, match="softmax expects a 2-D x"):
        loader.check_matrix(torch.zeros(2, 3, 4), "softmax")
    with pytest.raises(ValueError, match="expects CUDA tensors, got dy on cpu"):
        loader.check_matrix(torch.zeros(2, 3), "naive_softmax_backward", "dy")


def test_grid_size_waves(monkeypatch: pytest.MonkeyPatch) -> None:
    """One wave by default, `waves` of them, or (None) a block for every piece of work up to
    CUDA's grid limit; a kernel that fits no block on an SM is refused."""
    class Props:
        multi_processor_count = 132

    occupancy = {"value": 6}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props())
    monkeypatch.setattr(loader, "max_active_blocks_per_sm", lambda *args, **kw: occupancy["value"])
    kernel = object.__new__(loader.Kernel)
    kernel.name = "k"
    assert loader.grid_size(kernel, 128, 10**6, device=0) == 132 * 6
    assert loader.grid_size(kernel, 128, 10**6, device=0, waves=3) == 132 * 6 * 3
    assert loader.grid_size(kernel, 128, 10**6, device=0, waves=None) == 10**6
    assert loader.grid_size(kernel, 128, 2**40, device=0, waves=None) == loader.MAX_GRID
    assert loader.grid_size(kernel, 128, 0, device=0, waves=None) == 1
    assert loader.grid_size(kernel, 128, 5, device=0) == 5
    occupancy["value"] = 0
    with pytest.raises(RuntimeError, match="occupancy 0"):
        loader.grid_size(kernel, 1024, 10, device=0, waves=None)


def test_extra_nvrtc_options_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loader.EXTRA_OPTIONS_ENV, raising=False)
    assert loader.extra_options() == ()
    monkeypatch.setenv(loader.EXTRA_OPTIONS_ENV, '-lineinfo -DNAME="a b"')
    assert loader.extra_options() == ("-lineinfo", "-DNAME=a b")


def test_device_index_of_devices_and_numbers() -> None:
    assert loader.device_index(3) == 3
    assert loader.device_index(torch.device("cuda", 2)) == 2


def test_missing_cupy_skips_with_a_clear_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from bwbench.suite import Skip

    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` fail
    with pytest.raises(Skip, match=r"CuPy is not installed \(pip install cupy-cuda12x or cupy-cuda13x\)"):
        loader._import_cupy()


def test_kernel_source_validation(isolated_registry: None) -> None:
    with pytest.raises(ValueError, match="declares no kernels"):
        KernelSource("x.cu", ())
    with pytest.raises(ValueError, match="twice"):
        KernelSource("x.cu", ("k", "k"))
    source = KernelSource("softmax_naive.cu", ["naive_exp"])  # lists become tuples: hashable
    assert source.name_expressions == ("naive_exp",)
    assert source in loader.declared_sources()


def test_compile_error_carries_the_log() -> None:
    err = KernelCompileError("softmax_naive.cu failed to compile:", log='softmax_naive.cu(3): error: boom\n')
    assert "error: boom" in str(err)
    assert err.log.startswith("softmax_naive.cu(3)")
    assert isinstance(err, RuntimeError)
