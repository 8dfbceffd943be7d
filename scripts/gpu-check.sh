#!/usr/bin/env bash
# One GPU session's check-and-measure sequence: GPU tests, then the suite's default sweep twice.
# Usage: scripts/gpu-check.sh OUTDIR [SUITE] [extra `bwbench run` options...]
# Logs and results land in OUTDIR; the last thing printed is a short table per run.
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR [SUITE] [options]}
suite=${2:-softmax}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.mem,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$out/nvidia-smi.txt"
python3 -m pytest -m gpu -q -x tests 2>&1 | tee "$out/pytest-gpu.log" | tail -n 25
for n in 1 2; do
  /usr/bin/time -f "run $n wall %e s" python3 -m bwbench run "$suite" -o "$out" --name "$suite-run$n" "$@" \
    > "$out/$suite-run$n.log" 2>&1
  echo "run $n exit $?"; tail -n 3 "$out/$suite-run$n.log"
done
python3 - "$out" "$suite" <<'PY'
import sys, bwbench, pandas as pd
out, suite = sys.argv[1], sys.argv[2]
frames = [bwbench.load(f"{out}/{suite}-run{n}.json").assign(run=n) for n in (1, 2)]
df = pd.concat(frames)
ok = df[df.status == "ok"]
table = ok.pivot_table(index=["dtype", "cols"], columns=["impl", "run"], values="gbps").round(0)
pd.set_option("display.width", 250); pd.set_option("display.max_columns", 40)
print(table.to_string())
pct = ok.pivot_table(index=["dtype", "cols"], columns=["impl", "run"], values="pct_copy").round(1)
print(pct.to_string())
print("not ok:", df[df.status != "ok"][["run", "case", "impl", "status", "reason"]].to_string()[:3000])
PY
