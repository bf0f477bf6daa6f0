#!/usr/bin/env bash
# Start the dev broker (Tansu, 127.0.0.1:19092) and Redis (127.0.0.1:16379). Idempotent.
# Ports: KAFKA_PORT / REDIS_PORT. A port taken by another program is reported, not fought over.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python3 -m streamer.local_services start --kafka-port "${KAFKA_PORT:-19092}" --redis-port "${REDIS_PORT:-16379}"
