#!/usr/bin/env bash
# Start the dev broker (Tansu, 127.0.0.1:19092), Redis (127.0.0.1:16379) and SeaweedFS S3 (http://127.0.0.1:18333).
# Idempotent: a service of ours that is already running is reused. Ports: KAFKA_PORT / REDIS_PORT / S3_PORT.
# A port taken by another program is reported (exit status 1), not fought over. State (pid files, logs, S3 data):
# KDSM_LOCAL_STATE. `start.sh --durable`: the broker keeps its log in the S3 server (survives kill -9 and restart);
# if our broker already runs with the other storage, start.sh refuses (exit status 3) instead of reusing it.
set -euo pipefail
cd "$(dirname "$0")/../.."
kport="${KAFKA_PORT:-19092}"
rport="${REDIS_PORT:-16379}"
sport="${S3_PORT:-18333}"
rc=0
python3 -m streamer.dev.local_services start --kafka-port "$kport" --redis-port "$rport" --s3-port "$sport" "$@" || rc=$?
if (( rc == 3 )); then
  exit 3  # our broker already runs with the other storage (in memory vs --durable); the line above says how to stop it
fi
if (( rc != 0 )); then
  echo "start.sh: not started. To use other ports: KAFKA_PORT=29092 REDIS_PORT=26379 S3_PORT=28333 bash deploy/local/start.sh" >&2
  echo "start.sh: (then KDSM_KAFKA__BOOTSTRAP=127.0.0.1:29092 KDSM_REDIS__URL=redis://127.0.0.1:26379/0 KDSM_STORAGE__S3_ENDPOINT=http://127.0.0.1:28333 for kdsm)" >&2
  exit 1
fi
if [[ "$kport" != 19092 || "$rport" != 16379 || "$sport" != 18333 ]]; then
  echo "start.sh: non-default ports; for kdsm: export KDSM_KAFKA__BOOTSTRAP=127.0.0.1:$kport KDSM_REDIS__URL=redis://127.0.0.1:$rport/0 KDSM_STORAGE__S3_ENDPOINT=http://127.0.0.1:$sport"
fi
echo "start.sh: object storage: s3://kdsm/ at http://127.0.0.1:$sport (dev keys: KDSM_STORAGE__S3_ACCESS_KEY=kdsm KDSM_STORAGE__S3_SECRET_KEY=kdsm-dev-secret)"
if [[ " $* " == *" --durable "* ]]; then
  # This broker answers an idempotent batch in flight at a crash as a duplicate without storing it
  # (docs/results/tansu-idempotence): without idempotence a retry is a duplicate, never a loss.
  echo "start.sh: durable broker: run kdsm with KDSM_KAFKA__IDEMPOTENT_PRODUCER=false (docs/operations.md)"
fi
