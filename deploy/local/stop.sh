#!/usr/bin/env bash
# Stop the dev broker, Redis and SeaweedFS started by start.sh (only ours: found by pid file). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python3 -m streamer.dev.local_services stop --kafka-port "${KAFKA_PORT:-19092}" --redis-port "${REDIS_PORT:-16379}" \
  --s3-port "${S3_PORT:-18333}"
