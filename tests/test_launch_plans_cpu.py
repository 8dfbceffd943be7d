"""The kernel families' shared shape on the CPU: pure plans (no torch, no CuPy), the one Launch
type, and launchers that plan a shape once and then only enqueue (issue 31's host cost)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bwbench.cuda.launch_spec import MAX_GRID, Launch, grid_blocks

REPO_DIR = Path(__file__).resolve().parents[1]
PLANS = ("bwbench.cuda.softmax.plan", "bwbench.cuda.norm.plan", "bwbench.cuda.permute.plan",
         "bwbench.cuda.bitmask.plan", "bwbench.cuda.bn_relu.plan")


def test_plans_import_without_torch_or_cupy():
    code = ("import sys\nsys.modules['torch'] = None\nsys.modules['cupy'] = None\n"
            + "".join(f"import {name}\n" for name in PLANS) + "import bwbench.philox\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_launch_normalises_and_checks_its_dimensions():
    spec = Launch("k<1>", 5, (32, 4), shared_mem=16)
    assert spec.grid == (5,) and spec.block == (32, 4) and spec.threads == 128 and spec.blocks == 5
    with pytest.raises(ValueError):
        Launch("k", 0, 32)
    with pytest.raises(ValueError):
        Launch("k", 1, (1, 1, 1, 1))
    with pytest.raises(ValueError):
        Launch("k", 1, 32, shared_mem=-1)


def test_grid_blocks_caps_at_waves_or_the_largest_grid():
    assert grid_blocks(10_000, blocks_per_sm=4, sms=132, waves=1) == 528
    assert grid_blocks(10_000, 4, 132, waves=None) == 10_000
    assert grid_blocks(0, 4, 132) == 1
    assert grid_blocks(2**40, 4, 132, waves=None) == MAX_GRID


class FakeDevice:
    """DeviceQueries answered from a table: every kernel fits 8 blocks of 128 threads an SM and
    227 KiB of dynamic shared memory (an H100-like budget)."""

    sms = 132

    def __init__(self, clusters: bool = True, large_clusters: bool = True) -> None:
        self.asked: list[tuple] = []
        self.clusters = clusters
        self.large_clusters = large_clusters

    def smem_limit(self, kernel: str) -> int:
        self.asked.append(("limit", kernel))
        return 227 * 1024

    def blocks_per_sm(self, kernel: str, threads: int, smem: int) -> int:
        self.asked.append(("occupancy", kernel, threads, smem))
        by_smem = (227 * 1024) // smem if smem else 32
        return max(0, min(2048 // threads, by_smem, 32))

    def active_clusters(self, kernel: str, cluster: int, threads: int, smem: int) -> int:
        """Clusters of 16 blocks only where the GPU allows them (large_clusters), like an H100."""
        self.asked.append(("clusters", kernel, cluster, threads, smem))
        if cluster > 8 and not self.large_clusters:
            return 0
        if ("limit", kernel) not in self.asked:  # like CUDA: a kernel not yet given its shared memory
            return 0
        return self.sms * self.blocks_per_sm(kernel, threads, smem) // cluster


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "online_softmax", "softmax_backward",
                                "log_softmax_backward"])
@pytest.mark.parametrize("cols", [1, 33, 1000, 1024, 4096, 4097, 32768, 300_000])
def test_softmax_plans_name_declared_kernels(op, cols):
    from bwbench.cuda.softmax import dispatch
    from bwbench.cuda.softmax.plan import OPERATIONS, plan

    direction = OPERATIONS[op][0]
    for ctype, starts_aligned in (("half_t", True), ("half_t", False), ("float", False)):
        pack = dispatch.pack_elements(dispatch.ITEMSIZE[ctype], True)
        for dense in (False, True):
            chosen = plan(op, 49152, cols, ctype, pack, FakeDevice(), starts_aligned=starts_aligned, dense=dense)
            assert chosen.launch.kernel in dispatch.kernel_names(ctype, direction)
            assert chosen.launch.tier == chosen.tier and chosen.grid >= 1 and chosen.block in (128, 256, 512, 1024)
            small = plan(op, 49152, cols, ctype, pack, FakeDevice(), grid_waves=1, starts_aligned=starts_aligned,
                         dense=dense)
            assert small.grid <= chosen.grid and small.choice == chosen.choice


def _count_calls(monkeypatch, module, name: str) -> list:
    calls: list = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


class FakeModule:
    def kernel(self, name: str):
        return ("kernel", name)


def test_softmax_launcher_plans_a_shape_once(monkeypatch):
    from bwbench.cuda.softmax import launch

    monkeypatch.setattr(launch, "_PLANS", {})
    monkeypatch.setattr(launch, "load", lambda source: FakeModule())
    monkeypatch.setattr(launch, "_Queries", lambda module, device: FakeDevice())
    calls = _count_calls(monkeypatch, launch, "plan")
    first = launch.plan_launch("softmax", 4096, 1024, torch.float16, device=0)
    again = launch.plan_launch("softmax", 4096, 1024, torch.float16, device=0)
    assert again is first and len(calls) == 1
    launch.plan_launch("softmax", 4096, 2048, torch.float16, device=0)
    launch.plan_launch("softmax", 4096, 1024, torch.float32, device=0)
    launch.plan_launch("softmax", 4096, 1024, torch.float16, device=0, grid_waves=1)
    assert len(calls) == 4
    with pytest.raises(TypeError, match="unknown options"):
        launch.plan_launch("softmax", 4096, 1024, torch.float16, device=0, colour=1)


def test_norm_launcher_plans_a_shape_once(monkeypatch):
    from bwbench.cuda.norm import launch

    monkeypatch.setattr(launch, "_MODELS", {})
    monkeypatch.setattr(launch, "load", lambda source: FakeModule())
    monkeypatch.setattr(launch, "max_shared_memory_per_block", lambda device: 227 * 1024)
    monkeypatch.setattr(launch, "max_active_blocks_per_sm", lambda kernel, threads, smem, device: 4)
    monkeypatch.setattr(launch, "set_max_dynamic_shared_memory", lambda kernel, nbytes, device: None)
    monkeypatch.setattr(launch, "_launches_clusters", lambda device: True)
    monkeypatch.setattr(launch, "max_active_clusters", lambda kernel, size, threads, smem, device: 1)
    calls = _count_calls(monkeypatch, launch, "plan")
    for _ in range(3):
        launch._model(0, 4096, torch.float16, False, 8, None, None)
    assert len(calls) == 1
    launch._model(0, 4096, torch.float16, True, 8, None, None)
    assert len(calls) == 2
    # Rows no block holds take the cluster tier where the GPU launches clusters.
    assert launch._model(0, 65519, torch.float16, False, 1, None, None)[0].tier == "cluster"
    monkeypatch.setattr(launch, "_launches_clusters", lambda device: False)
    assert launch._model(0, 65521, torch.float16, False, 1, None, None)[0].tier != "cluster"


def test_norm_launcher_times_each_block_of_a_kernel(monkeypatch):
    """A kernel offered in several blocks with the same grid (the cluster tier's packs a thread) is
    timed in each, not folded into one."""
    import types

    from bwbench.cuda.norm import launch

    for name, value in [("_MODELS", {}), ("_CHOSEN", {}), ("load", lambda source: FakeModule()),
                        ("max_shared_memory_per_block", lambda device: 227 * 1024),
                        ("max_active_blocks_per_sm", lambda kernel, threads, smem, device: 2),
                        ("set_max_dynamic_shared_memory", lambda kernel, nbytes, device: None),
                        ("_launches_clusters", lambda device: True),
                        ("max_active_clusters", lambda kernel, size, threads, smem, device: 1)]:
        monkeypatch.setattr(launch, name, value)
    monkeypatch.setattr(launch.torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(
        multi_processor_count=132))
    monkeypatch.setattr(launch.torch.cuda, "is_current_stream_capturing", lambda: False)
    timed = []

    def fastest(options, device):  # each runner is its option (below): its cost by its shape
        timed.extend((option.launch.kernel, option.plan.block) for option in options)
        costs = [1.0 if option.plan.block == 64 and option.plan.cluster == 8 else 2.0 for option in options]
        return costs.index(min(costs))

    monkeypatch.setattr(launch, "_runner", lambda option, args, device: option)
    monkeypatch.setattr(launch, "fastest", fastest)
    x = types.SimpleNamespace(device=types.SimpleNamespace(index=0), shape=(4096, 65519), dtype=torch.float16)
    chosen = launch._tuned(x, False, 1, None, None, (1,), ())
    eighths = [block for kernel, block in timed if kernel == "norm_cluster<half_t, false, 8>"]
    assert sorted(eighths) == [64, 128, 256] and len(timed) == len(set(timed))
    assert (chosen.plan.cluster, chosen.plan.block) == (8, 64)


def test_permute_launch_is_planned_and_packed_once(monkeypatch):
    from bwbench.cuda.permute import launch

    launch._cached.cache_clear()
    calls = _count_calls(monkeypatch, launch, "plan_permute")
    first = launch._cached((33, 1000, 1000), (0, 2, 1), 2, 0, 0, None)
    again = launch._cached((33, 1000, 1000), (0, 2, 1), 2, 0, 0, None)
    assert again is first and len(calls) == 1
    plan, spec = first
    assert spec.kernel in launch.OPTIMIZED.name_expressions and spec.blocks == plan.kernel.blocks
    assert all(isinstance(a, np.generic) for a in spec.args)
    launch._cached.cache_clear()


def test_no_kernel_has_a_build_switch():
    """Kernels have no #ifdef/#ifndef switches of their own (only include guards and the arch
    checks): what runs is what the sources say, for every run."""
    import re

    from bwbench.paths import kernels_dir

    for path in sorted(kernels_dir().glob("*.cu*")):
        for line in path.read_text().splitlines():
            if re.match(r"\s*#\s*if", line):
                assert "__CUDA_ARCH__" in line, f"{path.name}: {line.strip()}"


def test_cluster_shape_splits_forward_rows_into_eighths_and_backward_rows_as_little_as_fits_twice():
    from bwbench.cuda.softmax.dispatch import CLUSTER_MIN_SLICE_BYTES, cluster_shape

    limit = 227 * 1024
    # float16 rows of 262144: 512 KiB; eighths of 64 KiB leave room for two blocks an SM.
    assert cluster_shape(262144, 8, 2, "forward", limit) == (8, 512, 64 * 1024, 0)
    # The forward splits rows that quarters or halves would leave two blocks an SM into eighths
    # too: 100003 columns (200 KiB) in slices of 25 KiB, 128256 (250 KiB) in 32 KiB.
    assert cluster_shape(100003, 8, 2, "forward", limit) == (8, 256, 1563 * 16, 0)
    assert cluster_shape(128256, 8, 2, "forward", limit)[:2] == (8, 256)
    # ...but no further than slices of CLUSTER_MIN_SLICE_BYTES: rows of 58000 halves take quarters.
    size, _, smem, _ = cluster_shape(58000, 8, 2, "forward", limit)
    assert size == 4 and smem >= CLUSTER_MIN_SLICE_BYTES
    # The backward caches y and dy, twice the bytes a slice, and takes the smallest cluster whose
    # slices leave two blocks an SM: quarters of a float16 row of 65536.
    assert cluster_shape(65536, 8, 2, "backward", limit)[0] == 4
    assert cluster_shape(100003, 8, 2, "backward", limit)[0] == 4
    assert cluster_shape(1 << 21, 8, 2, "forward", limit) is None, "eighths of 4 MiB do not fit"
    # Slices below the floor at every size: the smallest cluster that leaves two blocks an SM.
    assert cluster_shape(3000, 1, 4, "forward", limit) == (2, 256, 1500 * 4, 0), "one element a pack"


def test_cluster_shape_holds_packs_in_registers_only_where_that_leaves_more_blocks_an_sm():
    from bwbench.cuda.softmax.dispatch import cluster_shape

    limit = 227 * 1024
    # float32 rows of 262144: sixteenths of 64 KiB cached leave three; holding 3 packs a thread of
    # 256 threads (12 KiB) leaves four, by shared memory and by 64 registers a thread alike
    assert cluster_shape(262144, 4, 4, "forward", limit, 2) == (16, 256, 52 * 1024, 3)
    # 16-bit backward rows of 262144: sixteenths of y and dy of 64 KiB, 2 packs of each held
    assert cluster_shape(262144, 8, 2, "backward", limit) == (16, 256, 48 * 1024, 2)
    assert cluster_shape(262144, 8, 2, "forward", limit)[3] == 0, "the forward's 16-bit packs stay cached"
    # eighths of 512 threads holding 8 packs would leave a small slice, but two blocks an SM by
    # their registers: not more than the three that float32 rows of 151936 leave cached
    assert cluster_shape(151936, 4, 4, "forward", limit, 2) == (8, 1024, 151936 // 2, 0)
    # the occupancy query decides where given: a GPU holding one block of each held shape an SM
    assert cluster_shape(262144, 4, 4, "forward", limit, 2, resident=lambda shape: 4 if not shape.register_packs
                         else 1)[3] == 0
    # only the cluster size chosen cached is held: float16 backward rows of 128256 keep eighths,
    # holding 2 packs of y and dy (four blocks an SM against three); of 200000, cached (two either way)
    assert cluster_shape(128256, 8, 2, "backward", limit) == (8, 256, 128256 * 4 // 8 - 16 * 1024, 2)
    assert cluster_shape(200000, 8, 2, "backward", limit) == (8, 512, 100000, 0)


def test_float32_backward_sixteenths_hold_packs_where_that_leaves_as_many_blocks_an_sm():
    from bwbench.cuda.softmax.dispatch import cluster_shape

    limit = 227 * 1024
    # float32 backward rows of 200003: sixteenths leave two an SM either way (held: by registers)
    held = cluster_shape(200003, 4, 4, "backward", limit)
    assert (held.size, held.threads, held.register_packs) == (16, 512, 4)
    # the 16-bit shapes hold only where that leaves more: eighths of 151936 (three either way) and
    # sixteenths of 300007 (three either way) stay cached whole
    assert cluster_shape(151936, 8, 2, "backward", limit).register_packs == 0
    assert cluster_shape(300007, 8, 2, "backward", limit).register_packs == 0
    # a tie by the occupancy query: float32 backward sixteenths hold, the forward's and the 16-bit
    # eighths keep their slices cached
    assert cluster_shape(200003, 4, 4, "backward", limit, resident=lambda shape: 2).register_packs == 4
    assert cluster_shape(151936, 8, 2, "backward", limit, resident=lambda shape: 3).register_packs == 0
    assert cluster_shape(262144, 4, 4, "forward", limit, 2, resident=lambda shape: 4).register_packs == 0


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
@pytest.mark.parametrize("cols", [100_003, 262_144, 300_000])
def test_rows_past_shared_memory_take_a_cluster_where_the_gpu_has_clusters(op, cols):
    from bwbench.cuda.softmax import dispatch
    from bwbench.cuda.softmax.plan import OPERATIONS, plan

    direction = OPERATIONS[op][0]
    if direction == "forward" and cols == 100_003:  # 200 KiB: one shared-memory block still holds it
        assert plan(op, 1024, cols, "half_t", 8, FakeDevice(clusters=True)).tier == "smem"
        return
    device = FakeDevice(clusters=True)
    with_clusters = plan(op, 1024, cols, "half_t", 8, device)
    size = with_clusters.choice.cluster
    assert with_clusters.tier == "cluster" and size in dispatch.CLUSTER_SIZES
    assert with_clusters.grid % size == 0
    per_sm = device.blocks_per_sm(with_clusters.launch.kernel, with_clusters.block, with_clusters.smem)
    strides = dispatch.cluster_strides(size, direction, per_sm)
    if strides:  # held at once, striding
        resident = device.active_clusters(with_clusters.launch.kernel, size, with_clusters.block, with_clusters.smem)
        assert 0 < resident < 1024 and with_clusters.grid == resident * size
    else:
        assert with_clusters.grid == 1024 * size, "a cluster for every row"
    assert with_clusters.launch.kernel in dispatch.kernel_names("half_t", direction)
    assert with_clusters.smem <= 227 * 1024
    without = plan(op, 1024, cols, "half_t", 8, FakeDevice(clusters=False))
    assert without.tier != "cluster"
    capped = plan(op, 1024, cols, "half_t", 8, FakeDevice(clusters=True), grid_waves=1)
    assert capped.grid % capped.choice.cluster == 0
    if strides:
        assert capped.grid == with_clusters.grid, "striding clusters: the resident ones whatever the cap"
    else:
        assert capped.grid < with_clusters.grid


def test_a_forced_cluster_tier_needs_clusters():
    from bwbench.cuda.softmax.plan import plan

    forced = plan("softmax", 7, 33, "half_t", 8, FakeDevice(clusters=True), tier="cluster")
    assert forced.tier == "cluster" and forced.grid == 7 * forced.choice.cluster
    with pytest.raises(ValueError, match="clusters"):
        plan("softmax", 7, 33, "half_t", 8, FakeDevice(clusters=False), tier="cluster")


def test_a_forced_cluster_size_splits_the_row_so_and_refuses_what_cannot_run():
    from bwbench.cuda.softmax import dispatch
    from bwbench.cuda.softmax.plan import plan

    device = FakeDevice(clusters=True)
    for size in dispatch.CLUSTER_SIZES:
        forced = plan("softmax", 4096, 128256, "half_t", 8, device, cluster=size)
        assert forced.tier == "cluster" and forced.choice.cluster == size and forced.grid == 4096 * size
        assert forced.smem == dispatch.cluster_smem_bytes(128256, 8, 2, "forward", size)
        assert forced.alternatives == (), "a forced size is timed as it is"
    assert plan("softmax", 4096, 128256, "half_t", 8, device, tier="cluster", cluster=4).choice.cluster == 4
    backward = plan("softmax_backward", 1024, 262144, "float", 4, device, cluster=16)
    assert backward.choice.cluster == 16 and backward.grid < 1024 * 16, "the backward's sixteen still stride"
    with pytest.raises(ValueError, match="cluster must be one of"):
        plan("softmax", 4096, 128256, "half_t", 8, device, cluster=3)
    with pytest.raises(ValueError, match="cannot go with tier='smem'"):
        plan("softmax", 4096, 128256, "half_t", 8, device, tier="smem", cluster=8)
    with pytest.raises(ValueError, match="exceeds"):  # halves of a float32 row of 262144: 512 KiB each
        plan("softmax", 1024, 262144, "float", 4, device, cluster=2)
    with pytest.raises(ValueError, match="holds no cluster of 16"):
        plan("softmax", 1024, 262144, "float", 4, FakeDevice(clusters=True, large_clusters=False), cluster=16)
    with pytest.raises(ValueError, match="clusters"):
        plan("softmax", 4096, 128256, "half_t", 8, FakeDevice(clusters=False), cluster=8)


def test_the_cluster_tier_takes_a_cluster_only_where_two_blocks_fit_an_sm():
    from bwbench.cuda.softmax import dispatch
    from bwbench.cuda.softmax.plan import plan

    # float32 rows of 262144 (1 MiB): eighths of 128 KiB cached leave one block an SM and
    # sixteenths of 64 KiB three; with 3 of each thread's 16 packs in registers (256 threads:
    # 12 KiB) and 52 KiB cached, sixteenths leave four
    split = plan("softmax", 1024, 262144, "float", 4, FakeDevice(clusters=True))
    assert split.tier == "cluster" and split.choice.cluster == 16 and split.choice.cluster_regs == 3
    assert split.block == 256 and split.smem == 52 * 1024 and split.grid == 1024 * 16
    assert split.launch.kernel == "softmax_cluster<float, 0, 4, 16, 3>"
    assert split.launch.kernel in dispatch.kernel_names("float", "forward")
    # rows of 300007 (sixteenths of 4688 packs): 3 or 4 packs held leave three, 5 four
    five = plan("log_softmax", 1024, 300007, "float", 4, FakeDevice(clusters=True))
    assert five.choice.cluster == 16 and five.choice.cluster_regs == 5 and five.smem == (4688 - 5 * 256) * 16
    assert five.launch.kernel in dispatch.kernel_names("float", "forward")
    # where the GPU launches no clusters of 16: eighths of 512 threads holding 8 packs (64 KiB), two an SM
    eighths = plan("softmax", 1024, 262144, "float", 4, FakeDevice(clusters=True, large_clusters=False))
    assert eighths.choice.cluster == 8 and eighths.choice.cluster_regs == 8
    assert eighths.block == 512 and eighths.smem == 64 * 1024 and eighths.grid == 1024 * 8
    # where a row is too long for that (float32 rows of 400009: eighths of 195 KiB), sixteenths of
    # 98 KiB, where the GPU launches clusters of 16
    sixteen = plan("softmax", 1024, 400009, "float", 4, FakeDevice(clusters=True))
    assert sixteen.tier == "cluster" and sixteen.choice.cluster == 16 and sixteen.choice.cluster_regs == 0
    assert sixteen.grid == 1024 * 16
    portable = FakeDevice(clusters=True, large_clusters=False)
    assert plan("softmax", 1024, 400009, "float", 4, portable).tier == "uncached"
    assert any(q[0] == "clusters" and q[2] == 16 for q in portable.asked), "16 is asked about before it is used"
    forced = plan("softmax", 1024, 262144, "float", 4, portable, cluster=8)
    assert forced.choice.cluster == 8 and forced.choice.cluster_regs == 0 and forced.smem == 128 * 1024
    with pytest.raises(ValueError, match="runs 256 threads"):
        plan("softmax", 1024, 262144, "float", 4, FakeDevice(clusters=True), block=1024)
    # the backward too: y and dy of 512 KiB each take sixteenths (64 KiB) over eighths (128 KiB)
    assert plan("softmax_backward", 1024, 262144, "half_t", 8, FakeDevice(clusters=True)).choice.cluster == 16
    assert plan("softmax_backward", 1024, 262144, "half_t", 8, portable).choice.cluster == 8
    # where sixteenths leave one block an SM (float32 y and dy of 1 MiB each) but two with 4 of
    # each thread's 8 packs of y and of dy in registers (512 threads: 64 KiB), striding over the
    # rows: the clusters the GPU holds at once (this fake one counts shared memory only: three
    # blocks an SM, 24 clusters on 132 SMs)
    split = plan("softmax_backward", 1024, 262144, "float", 4, FakeDevice(clusters=True))
    assert split.tier == "cluster" and split.choice.cluster == 16 and split.choice.cluster_regs == 4
    assert split.block == 512 and split.smem == 64 * 1024 and split.grid == 132 * 3 // 16 * 16
    assert split.launch.kernel == "softmax_grad_cluster<float, 0, 4, 16, 4>"
    assert split.launch.kernel in dispatch.kernel_names("float", "backward")
    # and where even that leaves one (float32 rows of 400009: 195 KiB sixteenths), the backward's
    # sixteen stride over the rows, loading the next while they store
    strided = plan("softmax_backward", 1024, 400009, "float", 4, FakeDevice(clusters=True))
    assert strided.tier == "cluster" and strided.choice.cluster == 16 and strided.choice.cluster_regs == 0
    assert strided.grid < 1024 * 16 and strided.grid % 16 == 0
    # 16-bit y and dy of 512 KiB: sixteenths of 64 KiB cached leave three blocks an SM; 2 of each
    # thread's packs of y and of dy in registers (256 threads: 16 KiB) leave four, which take a
    # row a cluster rather than stride
    held = plan("softmax_backward", 1024, 262144, "half_t", 8, FakeDevice(clusters=True))
    assert held.choice.cluster == 16 and held.choice.cluster_regs == 2 and held.block == 256
    assert held.smem == 48 * 1024 and held.grid == 1024 * 16
    assert held.launch.kernel == "softmax_grad_cluster<half_t, 0, 8, 16, 2>"
    assert held.launch.kernel in dispatch.kernel_names("half_t", "backward")
    assert plan("softmax", 1024, 262144, "half_t", 8, FakeDevice(clusters=True)).choice.cluster_regs == 0, \
        "the forward's 16-bit packs stay cached"
    assert plan("softmax", 1024, 262144 * 2, "float", 4, FakeDevice(clusters=True)).tier == "uncached", \
        "forward sixteenths of one block an SM"
    # rows of 262147 starting mid-pack: sixteenths of 4097 packs, 768 of them in registers
    odd = plan("softmax", 1024, 262147, "float", 4, FakeDevice(clusters=True), starts_aligned=False)
    assert odd.choice.cluster == 16 and odd.choice.cluster_regs == 3 and odd.smem == (4097 - 768) * 16
    # sixteenths of 4097 packs would want 1024 threads, two blocks an SM; 512 keep the three their
    # shared memory allows
    odd = plan("softmax", 1024, 262147, "float", 4, FakeDevice(clusters=True), starts_aligned=False, cluster=16)
    assert odd.choice.cluster == 16 and odd.block == 512
    assert plan("softmax", 1024, 262147, "float", 4, FakeDevice(clusters=True), starts_aligned=False, cluster=16,
                block=1024).block == 1024, "a forced block stays"
    # a row whose eighths leave two blocks an SM keeps the portable size, and nothing asks about 16
    half = FakeDevice(clusters=True)
    assert plan("softmax", 1024, 262144, "half_t", 8, half, tier="cluster").choice.cluster == 8
    assert not any(q[0] == "clusters" for q in half.asked), "the rule; the other sizes timed beside it do ask"
    # the partly cached backward keeps rows whose y and dy one block mostly holds
    partly = plan("softmax_backward", 4096, 32768, "float", 4, FakeDevice(clusters=True))
    assert partly.tier == "smem" and partly.choice.partial


@pytest.mark.parametrize("cols", [1, 3, 31, 33, 127, 197, 577, 1023, 2047])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_tile_shape_holds_whole_rows_for_every_group(direction, cols):
    from bwbench.cuda import row_tile
    from bwbench.cuda.softmax import dispatch

    for itemsize in (2, 4):
        for rows in (1, 7, 130, 49152):
            shape = dispatch.tile_shape(rows, cols, itemsize, direction, 16384, 132, 227 * 1024)
            assert shape is not None
            assert shape.group in dispatch.GROUP_WIDTHS
            assert cols <= shape.group * row_tile.COLS_PER_LANE or shape.group == 32
            slots = dispatch.TILE_BLOCK // shape.group
            assert shape.tile_rows >= slots and shape.tile_rows % slots == 0, "every group gets as many rows"
            pack = 16 // itemsize
            packs = -(-(shape.tile_rows * cols + pack - 1) // pack)  # a run starting one element before a pack
            assert shape.smem >= packs * 16 * (2 if direction == "backward" else 1), "room at any phase"
            if rows == 49152:
                assert -(-rows // shape.tile_rows) >= 2 * 132 or shape.tile_rows == slots, "two tiles an SM"
                assert shape.tile_rows * cols * itemsize <= 16384 or shape.tile_rows == slots


def test_tile_shape_refuses_rows_one_group_each_cannot_hold():
    from bwbench.cuda.softmax import dispatch

    assert dispatch.tile_shape(100, 65535, 4, "forward", 16384, 132, 227 * 1024) is None


@pytest.mark.parametrize("op", ["softmax_backward", "log_softmax_backward"])
def test_backward_rows_of_odd_bytes_past_the_warp_tier_take_the_tile_tier(op):
    from bwbench.cuda.softmax import dispatch
    from bwbench.cuda.softmax.plan import OPERATIONS, plan

    direction = OPERATIONS[op][0]
    for cols in (1023, 1025, 1500):
        chosen = plan(op, 49152, cols, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True)
        assert chosen.tier == "tile", cols
        assert chosen.launch.kernel in dispatch.kernel_names("half_t", direction)
        tile_rows, group = (int(a) for a in chosen.launch.args)
        assert (tile_rows, group) == (chosen.choice.tile_rows, chosen.choice.group)
        assert chosen.grid == -(-49152 // tile_rows) and chosen.block == dispatch.TILE_BLOCK
        assert chosen.smem == dispatch.tile_smem_bytes(tile_rows, cols, 2, direction)
        # the same rows as a column slice, or with offsets that differ, keep the row tiers
        assert plan(op, 49152, cols, "half_t", 8, FakeDevice(), starts_aligned=False).tier == "smem"
        assert plan(op, 49152, cols, "half_t", 1, FakeDevice(), dense=True).tier != "tile"
    # rows the warp tier holds stay there, odd or not; so do rows past tile_max_row_bytes
    for cols in (31, 33, 197, 577, 1000):
        assert plan(op, 49152, cols, "half_t", 8, FakeDevice(), starts_aligned=cols % 8 == 0,
                    dense=True).tier == "warp", cols
    assert plan(op, 49152, 2047, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True).tier == "smem"
    assert plan(op, 49152, 1023, "float", 4, FakeDevice(), starts_aligned=False, dense=True).tier == "smem"


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "online_softmax"])
def test_the_forward_keeps_its_row_tiers_for_odd_rows(op):
    from bwbench.cuda.softmax.plan import plan

    for cols in (31, 197, 1023, 1025, 2047):
        assert plan(op, 49152, cols, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True).tier != "tile"


def test_a_forced_tile_tier_needs_dense_packed_rows():
    from bwbench.cuda.softmax.plan import plan

    forced = plan("softmax", 7, 64, "half_t", 8, FakeDevice(), dense=True, tier="tile")
    assert forced.tier == "tile" and forced.grid == 1
    with pytest.raises(ValueError, match="tile tier needs dense"):
        plan("softmax", 7, 64, "half_t", 8, FakeDevice(), dense=False, tier="tile")
    with pytest.raises(ValueError, match="tile tier needs dense"):
        plan("softmax", 7, 64, "half_t", 1, FakeDevice(), dense=True, tier="tile")
    with pytest.raises(ValueError, match="tile tier needs dense"):
        plan("softmax", 7, 65535, "float", 4, FakeDevice(), dense=True, tier="tile")
    with pytest.raises(ValueError, match="tile tier runs 256 threads"):
        plan("softmax", 7, 64, "half_t", 8, FakeDevice(), dense=True, tier="tile", block=512)
    with pytest.raises(ValueError, match="tile tier runs 256 threads"):  # chosen by the dispatch
        plan("softmax_backward", 49152, 1025, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True, block=512)


def test_a_forced_flat_tier_needs_a_dense_packed_backward():
    from bwbench.cuda.softmax.plan import plan

    forced = plan("softmax_backward", 49152, 33, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True,
                  tier="flat")
    assert forced.tier == "flat" and forced.block == 256 and forced.smem == 0
    assert forced.kernel_name == f"softmax_grad_flat<half_t, 0, {forced.choice.packs_per_thread}>"
    assert forced.grid * forced.choice.tile_rows >= 49152
    for op, rows, cols, pack, dense in [("softmax", 7, 64, 8, True),  # no forward of this shape
                                        ("softmax_backward", 7, 64, 8, False),  # a column slice
                                        ("softmax_backward", 7, 64, 1, True),  # offsets that differ
                                        ("softmax_backward", 7, 7, 8, True),  # rows under a pack
                                        ("softmax_backward", 7, 20000, 8, True)]:  # rows over a block's packs
        with pytest.raises(ValueError, match="flat tier needs"):
            plan(op, rows, cols, "half_t", pack, FakeDevice(), starts_aligned=False, dense=dense, tier="flat")
    with pytest.raises(ValueError, match="flat tier runs 256 threads"):
        plan("softmax_backward", 7, 64, "half_t", 8, FakeDevice(), dense=True, tier="flat", block=512)


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("cols", [8, 17, 31, 33, 127, 129, 197, 300, 577, 1023, 1025, 2047, 4095])
@pytest.mark.parametrize("rows", [1, 7, 1000, 49152, 151296, 10**7])
def test_flat_shapes_hold_their_tiles(rows, cols, itemsize):
    """A flat tile's packs (at any phase) fit its threads; the tiles cover the rows in as few waves
    of the resident blocks as the tile size allows, spread evenly (the last wave is within one row
    a tile of full); the row groups fit the block and are powers of two; the fewest packs a thread
    wherever one wave of them holds every row."""
    from bwbench.cuda import row_tile
    from bwbench.cuda.softmax import dispatch as d

    slots = {2: 6 * 132, 4: 4 * 132}
    shape = d.flat_shape(rows, cols, itemsize, slots)
    pack = 16 // itemsize
    if cols < pack or row_tile.packs_max(cols, itemsize) > d.FLAT_BLOCK * max(d.FLAT_PACKS_PER_THREAD):
        assert shape is None
        return
    k = shape.packs_per_thread
    assert row_tile.packs_max(shape.tile_rows * cols, itemsize) <= d.FLAT_BLOCK * k
    assert row_tile.packs_max((d.flat_rows_most(cols, itemsize, k) + 1) * cols, itemsize) > d.FLAT_BLOCK * k
    most = d.flat_rows_most(cols, itemsize, k)
    waves = -(-rows // (slots[k] * most))
    tiles = -(-rows // shape.tile_rows)
    assert tiles <= waves * slots[k], "no more waves than full tiles would take"
    assert shape.tile_rows * slots[k] * waves - rows < slots[k] * waves, "rows spread evenly over the tiles"
    small = [j for j in d.FLAT_PACKS_PER_THREAD if 1 <= d.flat_rows_most(cols, itemsize, j)
             and rows <= slots[j] * d.flat_rows_most(cols, itemsize, j)]
    assert k == (small[0] if small else max(j for j in d.FLAT_PACKS_PER_THREAD
                                           if d.flat_rows_most(cols, itemsize, j) >= 1))
    g = shape.group
    assert g & (g - 1) == 0 and 1 <= g <= 32
    assert g == 1 or g * shape.tile_rows <= d.FLAT_BLOCK


def test_tile_packs_cover_a_run_at_every_phase():
    """row_tile.packs_max (the kernels' shared-memory footprint of a run) is the most aligned packs
    a run of n elements covers, whatever element of a pack it starts at."""
    from bwbench.cuda import row_tile

    for itemsize in (2, 4):
        pack = 16 // itemsize
        for n in range(1, 70):
            covered = [(phase + n + pack - 1) // pack - phase // pack for phase in range(pack)]
            assert max(covered) == row_tile.packs_max(n, itemsize), (itemsize, n)
    assert row_tile.group_width(1) == 1 and row_tile.group_width(33) == 16 and row_tile.group_width(5000) == 32


def test_cluster_block_size_keeps_the_most_blocks_resident():
    from bwbench.cuda.softmax.dispatch import cluster_block_size

    assert cluster_block_size(1024, {128: 3, 256: 3, 512: 3, 1024: 2}) == 512
    assert cluster_block_size(512, {128: 3, 256: 3, 512: 3}) == 512, "no smaller block gains one: keep it"
    assert cluster_block_size(1024, {128: 1, 256: 1, 512: 1, 1024: 1}) == 1024
    assert cluster_block_size(256, {128: 7, 256: 7}) == 256


def test_timed_alternatives_where_measurements_split():
    from bwbench.cuda.softmax import dispatch as d

    warp = d.TierChoice("warp", warp=d.warp_shape(38, 8, "backward"), pack=8)
    elements = d.ELEMENTS_TIER
    assert d.timed_alternatives(warp, "backward", dense=True, row_bytes=62) == ("tile", "flat", elements)
    assert d.timed_alternatives(warp, "backward", dense=False, row_bytes=62) == (elements,), \
        "a column slice takes no tile"
    assert d.timed_alternatives(warp, "backward", dense=True, row_bytes=64) == (), "whole packs: the warp tier"
    assert d.timed_alternatives(warp, "forward", dense=True, row_bytes=62) == ("tile", elements)
    assert d.timed_alternatives(warp, "forward", dense=True, row_bytes=d.FORWARD_TILE_MAX_ROW_BYTES + 2) == \
        (elements,), "longer forward rows: no tile"
    assert d.timed_alternatives(warp, "backward", dense=True, row_bytes=d.FORWARD_TILE_MAX_ROW_BYTES + 2) == \
        ("tile", "flat", elements)
    tile = d.TierChoice("tile", block=d.TILE_BLOCK, pack=8, group=32, tile_rows=8)
    assert d.timed_alternatives(tile, "backward", dense=True, row_bytes=2046) == ("flat",)
    assert d.timed_alternatives(tile, "forward", dense=True, row_bytes=2046) == ()
    unpacked = d.TierChoice("warp", warp=d.warp_shape(31, 1, "forward"), pack=1)
    assert d.timed_alternatives(unpacked, "forward", dense=False, row_bytes=62) == (), "already one element an access"
    smem = d.TierChoice("smem", block=1024, pack=8)
    assert d.timed_alternatives(smem, "forward", dense=True, row_bytes=200006, smem_blocks_per_sm=1,
                                clusters=True) == ("cluster",)
    assert d.timed_alternatives(smem, "forward", dense=True, row_bytes=100514, smem_blocks_per_sm=2,
                                clusters=True) == ("cluster",), "two blocks an SM: 4096 x 50257 half columns"
    assert d.timed_alternatives(smem, "forward", dense=True, row_bytes=40022, smem_blocks_per_sm=3,
                                clusters=True) == ()
    assert d.timed_alternatives(smem, "backward", dense=True, row_bytes=100514, smem_blocks_per_sm=1,
                                clusters=True) == ("cluster",), "the backward's y and dy at one block an SM"
    assert d.timed_alternatives(smem, "backward", dense=True, row_bytes=100514, smem_blocks_per_sm=1,
                                clusters=False) == ()
    assert d.timed_alternatives(smem, "forward", dense=True, row_bytes=200006, smem_blocks_per_sm=1,
                                clusters=False) == ()
    # float32 rows of 16 KiB and more: the cluster is timed at any blocks an SM; shorter ones not
    single = d.TierChoice("smem", block=256, pack=4)
    assert d.timed_alternatives(single, "forward", dense=True, row_bytes=20012, smem_blocks_per_sm=9,
                                clusters=True, itemsize=4) == ("cluster",)
    assert d.timed_alternatives(single, "forward", dense=True, row_bytes=d.CLUSTER_MIN_SLICE_BYTES - 4,
                                smem_blocks_per_sm=9, clusters=True, itemsize=4) == ()
    assert d.timed_alternatives(single, "forward", dense=True, row_bytes=20012, smem_blocks_per_sm=9,
                                clusters=False, itemsize=4) == ()
    assert d.timed_alternatives(single, "backward", dense=True, row_bytes=20012, smem_blocks_per_sm=9,
                                clusters=True, itemsize=4) == ()
    assert d.timed_alternatives(smem, "forward", dense=True, row_bytes=40022, smem_blocks_per_sm=4,
                                clusters=True, itemsize=2) == (), "16-bit rows keep the cached block"


def test_plans_carry_the_alternatives_the_launcher_times():
    from bwbench.cuda.softmax.plan import plan

    odd = plan("softmax_backward", 49152, 31, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True)
    assert [c.tier for c in odd.candidates] == ["warp", "tile", "flat", "warp"]
    tile, flat = odd.alternatives[:2]
    assert len(tile.launch.args) == 2 and tile.grid >= 1, "the tile plan's own launch, extras included"
    assert flat.launch.args == (flat.choice.tile_rows, flat.choice.group) and flat.launch.shared_mem == 0
    assert "tile" not in [c.tier for c in plan("softmax_backward", 49152, 31, "half_t", 8, FakeDevice(),
                                                starts_aligned=False, dense=False).candidates]
    long = plan("softmax", 1024, 100003, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True)
    assert [c.tier for c in long.candidates] == ["smem"] + ["cluster"] * 4
    assert [c.choice.cluster for c in long.candidates[1:]] == [8, 2, 4, 16], "the rule's size, then the others"
    assert plan("softmax", 1024, 100003, "half_t", 8, FakeDevice(clusters=False), starts_aligned=False,
                dense=True).alternatives == ()
    # GPT-2's vocabulary: the cached block holds a forward row at two blocks an SM, a backward one at one
    for op in ("softmax", "log_softmax", "softmax_backward"):
        vocab = plan(op, 4096, 50257, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True)
        assert [c.tier for c in vocab.candidates] == ["smem"] + ["cluster"] * 4, op
        assert sorted(c.choice.cluster for c in vocab.candidates[1:]) == [2, 4, 8, 16], op
    assert plan("softmax", 4096, 20011, "half_t", 8, FakeDevice(), starts_aligned=False,
                dense=True).alternatives == (), "five blocks an SM: the cached block alone"
    # the other sizes only where their slices leave two blocks an SM: float16 backward rows of
    # 262144 leave one in eighths (128 KiB of y and dy) and fewer in halves and quarters
    assert [c.choice.cluster for c in plan("softmax_backward", 1024, 262144, "half_t", 8, FakeDevice(),
                                           dense=True).candidates] == [16]
    # a forced tier or block is what runs: nothing to time
    assert plan("softmax_backward", 49152, 31, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True,
                tier="warp").alternatives == ()
    assert plan("softmax", 1024, 100003, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True,
                block=512).alternatives == ()


def test_the_launcher_keeps_the_fastest_candidate(monkeypatch):
    """_fastest times every candidate once, keeps the fastest under the plan's key, and times
    nothing for an output that overlaps an input (torch on the CPU stands in for the tensors)."""
    import torch

    from bwbench.cuda.softmax import launch
    from bwbench.cuda.softmax.plan import plan

    chosen = plan("softmax_backward", 49152, 31, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True)

    class Module:
        def kernel(self, name):
            return name

    class Kernel:
        module = Module()

    ran, timed = [], []
    monkeypatch.setattr(launch, "run", lambda kernel, spec, args, device: ran.append(kernel))
    costs = {"warp": 5.0, "tile": 3.0}

    def cold(fn, device):
        fn()
        timed.append(ran[-1])
        return costs["tile" if "tile" in ran[-1] else "warp"]

    from bwbench.cuda import autotune

    monkeypatch.setattr(autotune, "cold_launch_us", cold)
    monkeypatch.setattr(launch, "_TIMED", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    y, dy, dx = (torch.zeros(49152 * 31, dtype=torch.float16).view(49152, 31) for _ in range(3))
    got, kernel = launch._fastest(chosen, Kernel(), (), (y, dy, dx), 0, ("key",))
    n = len(chosen.candidates)
    assert got.tier == "tile" and "tile" in kernel and len(timed) == n
    again, _ = launch._fastest(chosen, Kernel(), (), (y, dy, dx), 0, ("key",))
    assert again is got and len(timed) == n, "timed once per key"
    in_place, _ = launch._fastest(chosen, Kernel(), (), (y, dy, dy), 0, ("other",))
    assert in_place is chosen and len(timed) == n, "an output on an input is never timed"
    assert launch._overlaps(dx[1:], (dx[:2],)) and not launch._overlaps(dx, (y, dy))


def test_fit_shapes_hold_odd_spans_in_fewer_lane_slots():
    from bwbench.cuda.softmax import dispatch as d

    full_warp = d.warp_shape(127 + 7, 8, "forward")  # 17 packs: a whole warp, one pack a lane
    assert (full_warp.group, full_warp.packs_per_thread) == (32, 1)
    fit = d.fit_shape(127 + 7, 8, "forward", full_warp)
    assert (fit.group, fit.packs_per_thread) == (8, 3), "24 slots for 17 packs"
    five = d.fit_shape(31 + 7, 8, "forward", d.warp_shape(38, 8, "forward"))
    assert (five.group, five.packs_per_thread) == (2, 3), "6 slots for 5 packs, where 8 lanes left 3 idle"
    assert d.fit_shape(32, 8, "forward", d.warp_shape(32, 8, "forward")) is None, "4 packs fill 4 lanes"
    vit_warp = d.warp_shape(577 + 7, 8, "forward")  # 74 packs: a full warp of three, 96 slots
    assert d.fit_shape(577 + 7, 8, "forward", vit_warp) is None, "masked groups hold at most 48 slots"
    vit = d.fit_shape(577 + 7, 8, "forward", vit_warp, family="wide")
    assert (vit.group, vit.packs_per_thread) == (16, 5), "80 slots, the edges to their owner lanes"
    short_warp = d.warp_shape(197 + 7, 8, "forward")  # 26 packs: a full warp of one, 32 slots
    short = d.fit_shape(197 + 7, 8, "forward", short_warp)
    assert (short.group, short.packs_per_thread) == (16, 2), "as many slots, two rows a warp"
    wide = d.fit_shape(197 + 7, 8, "forward", short_warp, family="wide")
    assert (wide.group, wide.packs_per_thread) == (8, 4), "as many slots, four rows a warp"
    assert {(w.group, w.packs_per_thread) for w in d.fit_shapes(8, "forward", "wide")} == set(d.FIT_WIDE["forward"])
    with pytest.raises(ValueError, match="family must be one of"):
        d.fit_shapes(8, "forward", "narrow")
    assert d.fit_shape(256, 8, "forward", d.warp_shape(256, 8, "forward")) is None, "32 packs fill a warp"
    assert d.fit_shape(33 + 7, 1, "forward") is None, "no fitted shapes without 16-byte packs"
    for direction in ("forward", "backward"):
        for pack in (4, 8):
            for shape in d.fit_shapes(pack, direction):
                assert shape.group < 32 and shape.cols_per_thread <= d.MAX_COLS_PER_THREAD[direction]
    assert d.fit_shapes(8, "backward", "masked") == (), "the backward has no masked ones (FIT_PACKS)"
    back = d.fit_shape(197 + 7, 8, "backward", d.warp_shape(197 + 7, 8, "backward"), family="wide")
    assert (back.group, back.packs_per_thread) == (8, 4), "y and dy: 32 values a lane at most"


def test_plans_time_a_fitted_warp_shape_where_it_holds_the_row_tighter():
    from bwbench.cuda.softmax import dispatch as d
    from bwbench.cuda.softmax.plan import plan

    odd = plan("softmax", 49152, 127, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True)
    assert [c.tier for c in odd.candidates] == ["warp", "tile", "warp", "warp", "warp"], \
        "a short odd dense row: the tile"
    assert [(c.choice.warp.group, c.choice.warp.packs_per_thread) for c in odd.candidates if c.tier == "warp"] == \
        [(32, 1), (8, 3), (4, 5), (32, 4)], "the tightest masked and wide shapes, then one element a lane"
    fitted = odd.alternatives[1]
    assert fitted.launch.kernel in d.kernel_names("half_t", "forward")
    assert fitted.grid == -(-49152 // (d.WARP_BLOCK // 8)), "four rows a warp"
    assert plan("softmax", 49152, 128, "half_t", 8, FakeDevice()).alternatives == ()
    forced = plan("softmax", 49152, 127, "half_t", 8, FakeDevice(), starts_aligned=False, tier="warp_fit")
    assert forced.tier == "warp" and forced.choice.warp == fitted.choice.warp
    wide = plan("softmax", 49152, 127, "half_t", 8, FakeDevice(), starts_aligned=False, tier="warp_wide")
    assert wide.choice.warp == odd.alternatives[2].choice.warp
    vit = plan("softmax", 49152, 577, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True)
    assert [(c.choice.pack, c.choice.warp.group, c.choice.warp.packs_per_thread) for c in vit.candidates] == \
        [(8, 32, 3), (8, 16, 5), (1, 32, 24)]
    for tier in ("warp_fit", "warp_wide"):
        with pytest.raises(ValueError, match=f"no fitted warp shape \\({tier}\\)"):
            plan("softmax", 49152, 4096, "half_t", 8, FakeDevice(), tier=tier)
    with pytest.raises(ValueError, match=r"no fitted warp shape .*\(the backward has none\)"):
        plan("softmax_backward", 49152, 127, "half_t", 8, FakeDevice(), tier="warp_fit")


def test_plans_time_one_element_a_lane_where_no_pack_divides_the_row():
    """Odd rows in the packed warp tier also time the warp tier's one-element kernel: any row
    offset, so it is planned as for a fresh tensor of that shape, and it can be forced."""
    from bwbench.cuda.softmax import dispatch as d
    from bwbench.cuda.softmax.plan import plan

    vit = plan("softmax", 151296, 197, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True)
    elements = vit.alternatives[-1]
    assert elements.choice.pack == 1 and elements.choice.warp == d.WarpShape(1, 8, 32, 1)
    assert elements.launch.kernel in d.kernel_names("half_t", "forward")
    assert elements.grid == -(-151296 // (d.WARP_BLOCK // 32)), "a row a warp"
    forced = plan("softmax_backward", 151296, 197, "half_t", 8, FakeDevice(), starts_aligned=False,
                  tier=d.ELEMENTS_TIER)
    assert forced.alternatives == () and forced.choice.pack == 1 and forced.tier == "warp"
    assert forced.launch.kernel in d.kernel_names("half_t", "backward")
    assert d.ELEMENTS_TIER not in [c.tier for c in plan("softmax", 4096, 1024, "half_t", 8, FakeDevice()).candidates]
    assert len(plan("softmax", 4096, 1000, "float", 4, FakeDevice()).candidates) == 1, "4000-byte rows: whole packs"
    assert len(plan("softmax", 4096, 1001, "float", 4, FakeDevice(), starts_aligned=False).candidates) == 2
    with pytest.raises(ValueError, match="warp tier holds at most"):
        plan("softmax", 4096, 2047, "half_t", 8, FakeDevice(), starts_aligned=False, tier=d.ELEMENTS_TIER)


def test_tiles_hold_short_rows_in_registers():
    """The tile tier's kernel, both directions, is the instance whose lanes hold their part of the
    row (row_tile.lane_elements) where one holds it, and the one that reads the cache otherwise."""
    from bwbench.cuda import row_tile
    from bwbench.cuda.softmax import dispatch as d
    from bwbench.cuda.softmax.plan import plan

    kernels = {"softmax": "softmax_tile", "softmax_backward": "softmax_grad_tile"}
    for cols, held in ((31, 4), (127, 4), (129, 8), (197, 8), (255, 8), (577, 0), (1023, 0)):
        assert row_tile.lane_elements(cols) == held
        for op, direction in (("softmax", "forward"), ("softmax_backward", "backward")):
            p = plan(op, 49152, cols, "half_t", 8, FakeDevice(), starts_aligned=False, dense=True, tier="tile")
            assert p.choice.lane_elements == held and p.launch.kernel == f"{kernels[op]}<half_t, 0, {held}>"
            assert p.launch.kernel in d.kernel_names("half_t", direction)


def test_first_use_timing_keeps_the_fastest_candidate_and_the_first_of_equals(monkeypatch):
    """Each candidate timed once (cold_launch_us' own launches); a lone candidate is not timed."""
    from bwbench.cuda import autotune

    order = []
    times = {"a": 4.0, "b": 5.0, "c": 4.0}

    def cold(fn, device):
        order.append(fn())
        return times[order[-1]]

    monkeypatch.setattr(autotune, "cold_launch_us", cold)
    runs = [lambda: "a", lambda: "b", lambda: "c"]
    assert autotune.fastest(runs, 0) == 0, "a and c both take 4.0: the first of equals"
    assert order == ["a", "b", "c"]
    order.clear()
    assert autotune.fastest(runs[:1], 0) == 0 and order == []


def _no_kernel_work(monkeypatch):
    """Any compile or occupancy query fails the test: the arguments must be refused before."""
    import bwbench.cuda.norm.launch as norm_launch
    import bwbench.cuda.softmax.launch as softmax_launch

    def refuse(*args, **kwargs):
        raise AssertionError("kernels were loaded for arguments that were never valid")

    for module in (softmax_launch, norm_launch):
        monkeypatch.setattr(module, "load", refuse)


@pytest.mark.parametrize("kwargs, says", [
    ({"rows": None}, "plan_launch takes rows as a whole number of at least 1, not NoneType None"),
    ({"cols": None}, "plan_launch takes cols as a whole number of at least 1, not NoneType None"),
    ({"rows": 2.5}, "rows as a whole number of at least 1, not float 2.5"),
    ({"cols": "1024"}, "cols as a whole number of at least 1, not str '1024'"),
    ({"rows": 0}, "rows as a whole number of at least 1, not int 0"),
    ({"rows": True}, "rows as a whole number of at least 1, not bool True"),
    ({"op": None}, "op must be one of softmax"),
    ({"op": ["softmax"]}, "op must be one of softmax"),
    ({"dtype": None}, "no CUDA kernel for dtype None"),
    ({"dtype": [torch.float16]}, "no CUDA kernel for dtype [torch.float16]"),
    ({"aligned": "no"}, "plan_launch takes aligned as True or False, not str 'no'"),
])
def test_softmax_plan_launch_refuses_missing_or_ill_typed_arguments_before_any_kernel_work(monkeypatch, kwargs, says):
    """plan_launch('softmax', None, 1024, ...) compiled the kernels, or asked for a GPU, before
    failing with a TypeError from `None < 1` (or `None % 8` for cols) deep in the plan."""
    from bwbench.cuda.softmax import plan_launch

    _no_kernel_work(monkeypatch)
    args = {"op": "softmax", "rows": 8, "cols": 1024, "dtype": torch.float16, **kwargs}
    with pytest.raises(ValueError) as err:
        plan_launch(args.pop("op"), args.pop("rows"), args.pop("cols"), args.pop("dtype"), **args)
    assert says in str(err.value)


@pytest.mark.parametrize("call, says", [
    (lambda norm, x: norm.launch_plan(None, False, 8), "launch_plan expects x to be a torch.Tensor, got NoneType"),
    (lambda norm, x: norm.chosen_launch(None, False), "chosen_launch expects x to be a torch.Tensor, got NoneType"),
    (lambda norm, x: norm.launch_plan(x, None, 8), "launch_plan takes rms as True or False, not NoneType None"),
    (lambda norm, x: norm.chosen_launch(x, "yes"), "chosen_launch takes rms as True or False, not str 'yes'"),
    (lambda norm, x: norm.launch_plan(x, False, None), "launch_plan takes pack as a whole number of at least 1"),
    (lambda norm, x: norm.launch_plan(x, False, 4), "launch_plan takes pack as 8 (16-byte accesses of torch.float16) or 1"),
])
def test_norm_launch_plans_refuse_missing_or_ill_typed_arguments(monkeypatch, call, says):
    """launch_plan(None, ...) and chosen_launch(None, ...) were AttributeErrors ('NoneType' has no
    'device'); rms=None looked up no kernel source."""
    from bwbench.cuda import loader, norm
    from bwbench.cuda.norm import launch

    def cpu_stands_in(t, what, name="x", rows_only=False):  # no GPU here: a CPU x stands for a CUDA one
        if not isinstance(t, torch.Tensor):
            loader.check_matrix(t, what, name, rows_only)

    _no_kernel_work(monkeypatch)
    monkeypatch.setattr(launch, "check_matrix", cpu_stands_in)
    x = torch.empty(4, 64, dtype=torch.float16)
    with pytest.raises(ValueError) as err:
        call(norm, x)
    assert says in str(err.value)


@pytest.mark.parametrize("perm", [None, 3, [1.5, 0], "10"])
def test_permute_refuses_a_perm_that_is_no_sequence_of_dimensions(perm):
    """permute(x, None) was a TypeError from tuple(None); a perm of floats failed inside the plan."""
    from bwbench.cuda.permute import permute, plan_for

    x = torch.zeros(2, 3)
    for fn in (permute, plan_for):
        with pytest.raises(ValueError, match="takes perm as a sequence of dimension indices"):
            fn(x, perm)
