#!/usr/bin/env bash
# One GPU session's check-and-measure sequence: GPU tests, then a suite's default sweep twice.
# Usage: scripts/gpu-check.sh OUTDIR [SUITE] [extra `bwbench run` options...]
# Writes OUTDIR/pytest-gpu.log, OUTDIR/runs.log, OUTDIR/SUITE-run{1,2}.json and SUITE-run1.html;
# prints a short table (GB/s and % of copy per implementation, both runs) last.
# Set SKIP_TESTS=1 to skip the GPU tests.
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR [SUITE] [options]}
suite=${2:-softmax}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -z "${SKIP_TESTS:-}" ]; then
  { nvidia-smi --query-gpu=name,clocks.max.mem,clocks.sm,temperature.gpu,power.draw --format=csv
    python3 -m pytest -m gpu -q ${TESTS:-tests}; } > "$out/pytest-gpu.log" 2>&1
  tail -n 4 "$out/pytest-gpu.log"
fi
for n in 1 2; do
  start=$(date +%s)
  python3 -m bwbench run "$suite" -o "$out" --name "$suite-run$n" "$@" >> "$out/runs.log" 2>&1
  echo "$suite run $n: exit $?, $(( $(date +%s) - start )) s"
done
rm -f "$out"/*.csv "$out/$suite-run2.html"
python3 scripts/summarize-runs.py "$out/$suite-run1.json" "$out/$suite-run2.json"
