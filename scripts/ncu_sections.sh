#!/usr/bin/env bash
# Nsight Compute's speed-of-light, occupancy, launch, scheduler and warp-state sections for one
# call of each implementation of a case (the call bwbench profile makes), to see why one kernel
# is slower than another at the same bytes.
# Usage: scripts/ncu_sections.sh OUTDIR SUITE DTYPE 'PARAMS-JSON' IMPL [IMPL ...]
# e.g.   scripts/ncu_sections.sh /tmp/ncu layernorm float16 '{"rows":49152,"cols":1024,"eps":1e-05}' optimized compiled
set -uo pipefail
out=${1:?}; suite=${2:?}; dtype=${3:?}; params=${4:?}
shift 4
mkdir -p "$out"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
tag=$(echo "$params" | tr -dc '0-9,' | tr ',' '-')
for impl in "$@"; do
  spec="{\"suite\":\"$suite\",\"impl\":\"$impl\",\"params\":$params,\"dtype\":\"$dtype\",\"seed\":0,\"gpu\":0}"
  "$ncu" --clock-control none --nvtx --nvtx-include bwbench_profile/ \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    python3 -m bwbench.profile "$spec" > "$out/$suite-$dtype-$tag-$impl.txt" 2>&1
  echo "$suite $dtype $params $impl: ncu exit $?"
done
