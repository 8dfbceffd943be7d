#!/usr/bin/env bash
# One GPU session for the softmax family, in order of what matters most if time runs out:
# the A/B choices (--pick writes the thresholds file the rest of the session uses), the float16
# sweeps of the three suites with every implementation, the GPU tests, then float32/bfloat16
# sweeps of optimized and torch. Usage: scripts/softmax_gpu_session.sh OUTDIR
set -u
out=${1:?usage: scripts/softmax_gpu_session.sh OUTDIR}
export PYTHONUNBUFFERED=1
runs=/tmp/softmax-runs
mkdir -p "$runs" "$out"
nvidia-smi --query-gpu=name,clocks.max.mem,clocks.max.sm --format=csv,noheader > "$out/gpu.txt"
timeout 50 python3 scripts/softmax_tune.py "$runs/tune" --ab --ops softmax,softmax_backward \
  --cols 32,64,128,256,512,1024,8192,16384,32768 --max-time 0.1 --pick "$out/thresholds.json" > "$out/ab.log" 2>&1
echo "ab rc $?"
if [ -s "$out/thresholds.json" ]; then export BWBENCH_SOFTMAX_THRESHOLDS="$out/thresholds.json"; fi
for s in softmax softmax_backward log_softmax; do
  timeout 80 python3 -m bwbench run "$s" -o "$runs" --name "$s-float16" --max-time 0.5 > "$runs/$s-float16.log" 2>&1
  echo "$s float16 rc $?"
done
timeout 75 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_softmax_optimized_gpu.py --tb=short \
  --maxfail=20 > "$out/pytest.log" 2>&1
echo "pytest rc $?"
for dt in float32 bfloat16; do
  for s in softmax softmax_backward; do
    timeout 25 python3 -m bwbench run "$s" --dtype "$dt" --impl optimized,torch -o "$runs" --name "$s-$dt" \
      --max-time 0.3 > "$runs/$s-$dt.log" 2>&1
    echo "$s $dt rc $?"
  done
done
python3 scripts/softmax_summary.py "$runs"/*.json > "$out/summary.md" 2>&1
tar czf "$out/runs.tgz" --exclude='*.html' -C /tmp softmax-runs
