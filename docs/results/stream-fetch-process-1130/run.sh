#!/usr/bin/env bash
# The fetch process A/B (docs/streaming.md, "The fetch process"): the pipe alone (--scorer none) in the order
# in-process, fetch process, fetch process, in-process; then the default config with the model, each way once.
# Torch 1 thread, as in every figure of docs/streaming.md since 2026-11-27.
# Run from the repository root, alone on the machine: bash docs/results/stream-fetch-process-1130/run.sh
set -euo pipefail
d=docs/results/stream-fetch-process-1130
run() {  # name, fetch_process, extra args...
  local name=$1 fp=$2; shift 2
  echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $d/console.txt
  KDSM_STREAM__THREADS=1 KDSM_STREAM__FETCH_PROCESS=$fp kdsm bench stream "$@" --out $d/$name.json 2>&1 | grep -v '^{' | tee -a $d/console.txt
}
run none-a1-in-process false --scorer none --events 200000 --rounds 5
run none-b1-fetch-process true --scorer none --events 200000 --rounds 5
run none-b2-fetch-process true --scorer none --events 200000 --rounds 5
run none-a2-in-process false --scorer none --events 200000 --rounds 5
run model-in-process false
run model-fetch-process true
