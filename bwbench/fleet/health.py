"""Each GPU of a fleet against the fleet median: the slow card, found by numbers.

Two measures per GPU. Its device copy bandwidth (same buffer size on every GPU) against the median of
the fleet: a card with slow memory, a throttled one, one with a bad HBM stack. And, for each
optimized implementation (kind "cuda", the kernels under test), its % of copy against the fleet
median of the same case: a kernel that falls behind on one card although that card copies as fast
as the others. Per case the GPU's % of copy is divided by the fleet's median for that case; the
GPU's score for the implementation is the median of those ratios over the cases, so one noisy
small case does not flag a card, and a GPU that lost some cases is judged on the ones it has.
A GPU more than the threshold below the median on any measure is an outlier.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from statistics import median
from typing import Any, Iterable

UNDER_TEST_KIND = "cuda"


@dataclass
class ImplHealth:
    suite: str
    impl: str
    cases: int
    pct_copy_median: float
    vs_fleet: float
    """Median over cases of this GPU's % of copy / the fleet median % of copy (1.0 = typical)."""


@dataclass
class GpuHealth:
    gpu_index: int | None
    gpu_uuid: str | None
    host: str | None
    copy_gbps: float | None
    copy_vs_fleet: float | None
    impls: list[ImplHealth] = field(default_factory=list)
    outlier: bool = False
    reasons: list[str] = field(default_factory=list)


@dataclass
class FleetHealth:
    threshold: float
    gpus: list[GpuHealth]
    fleet_copy_gbps: float | None
    compared: bool
    """False with fewer than two GPUs that measured: nothing to compare with."""

    @property
    def outliers(self) -> list[GpuHealth]:
        return [g for g in self.gpus if g.outlier]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outliers"] = [g.gpu_uuid for g in self.outliers]
        return data


def assess(environments: Iterable[dict[str, Any]], records: Iterable[Any], threshold: float) -> FleetHealth:
    """Health of every GPU that sent its environment; `records` are Records with gpu_uuid set."""
    envs = [e for e in environments if e]
    gpus = [GpuHealth(e.get("gpu_index"), e.get("gpu_uuid"), e.get("host"), e.get("copy_gbps"), None) for e in envs]
    copies = [g.copy_gbps for g in gpus if g.copy_gbps]
    fleet_copy = median(copies) if copies else None
    compared = len(copies) >= 2
    floor = 1.0 - threshold
    for gpu in gpus:
        if fleet_copy and gpu.copy_gbps:
            gpu.copy_vs_fleet = gpu.copy_gbps / fleet_copy
            if compared and gpu.copy_vs_fleet < floor:
                gpu.outlier = True
                gpu.reasons.append(f"copy {gpu.copy_gbps:,.0f} GB/s is {1 - gpu.copy_vs_fleet:.1%} below the "
                                   f"fleet median {fleet_copy:,.0f} GB/s")

    by_case: dict[tuple, dict[str, float]] = defaultdict(dict)
    for rec in records:
        if rec.kind == UNDER_TEST_KIND and rec.status == "ok" and rec.pct_copy and rec.gpu_uuid:
            by_case[(rec.suite, rec.impl, rec.case, rec.dtype)][rec.gpu_uuid] = rec.pct_copy
    ratios: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for (suite, impl, _case, _dtype), per_gpu in by_case.items():
        if len(per_gpu) < 2:
            continue
        typical = median(per_gpu.values())
        for uuid, pct in per_gpu.items():
            ratios[(uuid, suite, impl)].append((pct / typical, pct))
    for gpu in gpus:
        for (uuid, suite, impl), values in sorted(ratios.items()):
            if uuid != gpu.gpu_uuid:
                continue
            score = median(r for r, _ in values)
            gpu.impls.append(ImplHealth(suite, impl, len(values), median(p for _, p in values), score))
            if score < floor:
                gpu.outlier = True
                gpu.reasons.append(f"{suite} {impl} reaches {1 - score:.1%} less of its copy bandwidth than "
                                   f"the fleet median (over {len(values)} cases)")
    return FleetHealth(threshold, gpus, fleet_copy, compared)
