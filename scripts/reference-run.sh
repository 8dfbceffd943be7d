#!/usr/bin/env bash
# A reference run for reports/reference: the default sweep of every suite into one results file.
# Usage: scripts/reference-run.sh OUTDIR NAME [extra `bwbench run` options...]
# Stops itself (as an interrupt, keeping every record) after ${LIMIT_S:-570} seconds, so a device
# call with a 10-minute cap still brings its results back. Prints the summary table last.
set -uo pipefail
out=${1:?usage: scripts/reference-run.sh OUTDIR NAME [options]}
name=${2:?usage: scripts/reference-run.sh OUTDIR NAME [options]}
shift 2
mkdir -p "$out"
export PYTHONUNBUFFERED=1
start=$(date +%s)
timeout -s INT "${LIMIT_S:-570}" python3 -m bwbench run all -o "$out" --name "$name" --no-report "$@" > "$out/$name.log" 2>&1
echo "bwbench run all: exit $?, $(( $(date +%s) - start )) s"
grep -E "^(FAILED|interrupted)|device copy bandwidth" "$out/$name.log" | cut -c1-220
rm -f "$out/$name.csv"
