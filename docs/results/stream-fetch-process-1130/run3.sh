#!/usr/bin/env bash
# The shipped form (the group consumer polled at most every 50 ms): target 2's command twice, the default config with
# the model once, with the fetch process. From the repository root, alone: bash docs/results/stream-fetch-process-1130/run3.sh
set -euo pipefail
d=docs/results/stream-fetch-process-1130
say() { echo "== $1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $d/console4.txt; }
export KDSM_STREAM__THREADS=1
for i in 1 2; do
  say final-target2-$i
  kdsm bench stream --scorer none --events 200000 --rounds 7 --config configs/fetch-process.yaml \
      --out $d/final-target2-$i.json 2>&1 | grep -v '^{' | tee -a $d/console4.txt
done
say final-model
kdsm bench stream --config configs/fetch-process.yaml --out $d/final-model.json 2>&1 | grep -v '^{' | tee -a $d/console4.txt
# and, the same minutes, target 2's command in the loop for comparison:
#   KDSM_STREAM__THREADS=1 kdsm bench stream --scorer none --events 200000 --rounds 7 --out $d/final-target2-in-process.json
