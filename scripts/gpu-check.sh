#!/usr/bin/env bash
# One GPU session's check-and-measure sequence: GPU tests, then a suite's default sweep twice.
# Usage: scripts/gpu-check.sh OUTDIR [SUITE[,SUITE...]] [extra `bwbench run` options...]
# Writes OUTDIR/pytest-gpu.log, OUTDIR/runs.log, OUTDIR/NAME-run{1,2}.json (NAME: the suites joined
# by '_') and NAME-run1.html where plotly is installed; prints a short table (GB/s, % of copy and
# speedups per implementation, both runs) last.
# TESTS: the test files to run (default: all of tests/); SKIP_TESTS=1 skips them.
# RUN_LIMIT_S: each run is interrupted after this many seconds, keeping what it measured (default 240).
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR [SUITE[,SUITE...]] [options]}
suite=${2:-softmax}
name=${suite//,/_}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -z "${SKIP_TESTS:-}" ]; then
  { nvidia-smi --query-gpu=name,clocks.max.mem,clocks.sm,temperature.gpu,power.draw --format=csv
    python3 -m pytest -m gpu -q ${TESTS:-tests}; } > "$out/pytest-gpu.log" 2>&1
  echo "pytest: exit $?"
  tail -n 3 "$out/pytest-gpu.log"
fi
for n in 1 2; do
  start=$(date +%s)
  timeout -s INT "${RUN_LIMIT_S:-240}" python3 -m bwbench run "$suite" -o "$out" --name "$name-run$n" "$@" >> "$out/runs.log" 2>&1
  echo "$suite run $n: exit $?, $(( $(date +%s) - start )) s"
done
rm -f "$out"/*.csv "$out/$name-run2.html"
grep -E "device copy bandwidth|^FAILED|interrupted|disturbed|above" "$out/runs.log" | cut -c1-200
python3 scripts/summarize-runs.py "$out/$name-run1.json" "$out/$name-run2.json" > "$out/summary.txt" 2>&1
grep -A200 "times faster" "$out/summary.txt" | cut -c1-170
