#!/usr/bin/env bash
# The CUDA check, run on a GPU machine from the repository root:
#   bash deploy/gpu/check.sh OUT_DIR
# It needs python3 with torch (CUDA) and the project's dependencies importable
# (pip install -e .[dev], or wheels on PYTHONPATH). Every step runs with
# device "auto", so this proves the CUDA paths rather than the CPU ones:
#   1. the offline tests (sigmas, training, artifact, offline CLI) on CUDA;
#   2. kdsm bench train (steps/s at the published configuration; bf16 on Ampere+);
#   3. kdsm train on the bundled cardio data (wall time, AUC-PR);
#   4. kdsm bench stream (Tansu broker, scorer on CUDA, end-to-end events/s).
# Results land in OUT_DIR (JSON + logs); docs/results.md quotes them.
set -uo pipefail
out=${1:-runs/gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 KDSM_TRAIN__DEVICE=auto
kdsm() { python3 -m streamer "$@"; }
step() { echo; echo "== $* =="; }

step "device"
python3 -c 'import torch; print(torch.__version__, "cuda:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' | tee "$out/device.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/device.txt"

step "offline tests on CUDA"
python3 -m pytest -q -p no:cacheprovider tests/test_sigmas.py tests/test_training.py tests/test_artifact.py \
    tests/test_cli_offline.py 2>&1 | tee "$out/pytest.log" | tail -15

step "bench train"
kdsm bench train --out "$out/bench-train.json" 2>&1 | tee "$out/bench-train.log"

step "train cardio (fast profile)"
start=$SECONDS
kdsm train --data offline_train/bundled/cardio.parquet --out /tmp/gpu-check-model --force --profile fast 2>&1 \
    | tail -8 | tee "$out/train-cardio.log"
echo "wall $((SECONDS - start)) s" | tee -a "$out/train-cardio.log"

step "bench stream"
kdsm bench stream --out "$out/bench-stream.json" 2>&1 | tee "$out/bench-stream.log" | tail -25
