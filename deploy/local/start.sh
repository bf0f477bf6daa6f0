#!/usr/bin/env bash
# Start the dev broker (Tansu, 127.0.0.1:19092) and Redis (127.0.0.1:16379). Idempotent: a service of
# ours that is already running is reused. Ports: KAFKA_PORT / REDIS_PORT. A port taken by another
# program is reported (exit status 1), not fought over. State (pid files, logs): KDSM_LOCAL_STATE.
set -euo pipefail
cd "$(dirname "$0")/../.."
kport="${KAFKA_PORT:-19092}"
rport="${REDIS_PORT:-16379}"
if ! python3 -m streamer.dev.local_services start --kafka-port "$kport" --redis-port "$rport"; then
  echo "start.sh: not started. To use other ports: KAFKA_PORT=29092 REDIS_PORT=26379 bash deploy/local/start.sh" >&2
  echo "start.sh: (then KDSM_KAFKA__BOOTSTRAP=127.0.0.1:29092 KDSM_REDIS__URL=redis://127.0.0.1:26379/0 for kdsm)" >&2
  exit 1
fi
if [[ "$kport" != 19092 || "$rport" != 16379 ]]; then
  echo "start.sh: non-default ports; for kdsm: export KDSM_KAFKA__BOOTSTRAP=127.0.0.1:$kport KDSM_REDIS__URL=redis://127.0.0.1:$rport/0"
fi
