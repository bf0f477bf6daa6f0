#!/usr/bin/env bash
# After run.sh: target 2's command as the README gives it, the low-latency config with the fetch process, and the
# price of exactly once with it. From the repository root, alone: bash docs/results/stream-fetch-process-1130/run2.sh
set -euo pipefail
d=docs/results/stream-fetch-process-1130
say() { echo "== $1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $d/console2.txt; }
export KDSM_STREAM__THREADS=1
say target2-fetch-process
kdsm bench stream --scorer none --events 200000 --rounds 7 --config configs/fetch-process.yaml \
    --out $d/target2-fetch-process.json 2>&1 | grep -v '^{' | tee -a $d/console2.txt
say low-latency-fetch-process
KDSM_STREAM__FETCH_PROCESS=true kdsm bench stream --config configs/low-latency.yaml \
    --out $d/low-latency-fetch-process.json 2>&1 | grep -v '^{' | tee -a $d/console2.txt
say delivery-both-fetch-process
kdsm bench stream --delivery both --scorer none --config configs/fetch-process.yaml \
    --out $d/delivery-both-fetch-process.json 2>&1 | grep -v '^{' | tee -a $d/console2.txt
