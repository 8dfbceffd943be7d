#!/usr/bin/env bash
# Check a change on a GPU: the GPU tests, then the default sweep of the suites it touches twice, and
# a table of both runs side by side (the range between the runs shows the run-to-run spread to
# judge a difference against).
# Usage: tools/gpu-check.sh OUTDIR [SUITE[,SUITE...]] [extra `bwbench run` options...]
# Writes OUTDIR/pytest-gpu.log, OUTDIR/runs.log, OUTDIR/NAME-run1.json and NAME-run2.json (NAME: the
# suites joined by '_') and OUTDIR/tables.md, which it prints last.
# TESTS: the test files to run (default: all of tests/); SKIP_TESTS=1 skips them.
# RUN_LIMIT_S: each run is interrupted after this many seconds, keeping what it measured (default 600).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: tools/gpu-check.sh OUTDIR [SUITE[,SUITE...]] [options]}
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
  timeout -s INT "${RUN_LIMIT_S:-600}" python3 -m bwbench run "$suite" -o "$out" --name "$name-run$n" --no-report "$@" >> "$out/runs.log" 2>&1
  echo "$suite run $n: exit $?, $(( $(date +%s) - start )) s"
done
rm -f "$out/$name-run1.csv" "$out/$name-run2.csv"
grep -E "device copy bandwidth|^FAILED|interrupted|disturbed|above" "$out/runs.log" | cut -c1-200
PYTHONPATH="$(dirname "$here")${PYTHONPATH:+:$PYTHONPATH}" python3 "$here/tables.py" "$out/$name-run1.json" "$out/$name-run2.json" > "$out/tables.md"
cat "$out/tables.md"
