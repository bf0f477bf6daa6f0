#!/usr/bin/env bash
# The test command: set up, start a Tansu broker, Redis and SeaweedFS (S3) on free loopback ports, run pytest, stop them.
# Extra arguments go to pytest (e.g. -k decode, -x); a later -n overrides the two workers (-n 0: one process).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/setup.sh

state=$(mktemp -d -t kdsm-test-services.XXXXXX)
read -r kport rport sport < <(python3 -c "from streamer.dev.local_services import free_port as f; print(f(), f(), f())")
export KDSM_LOCAL_STATE="$state"
cleanup() { python3 -m streamer.dev.local_services stop --kafka-port "$kport" --redis-port "$rport" --s3-port "$sport" >/dev/null 2>&1 || true; rm -rf "$state"; }
trap cleanup EXIT
python3 -m streamer.dev.local_services start --kafka-port "$kport" --redis-port "$rport" --s3-port "$sport"
export KDSM_TEST_KAFKA="127.0.0.1:$kport" KDSM_TEST_REDIS="redis://127.0.0.1:$rport/0" KDSM_TEST_S3="http://127.0.0.1:$sport"

# Two pytest-xdist workers, each taking a whole test file at a time (a file's tests share their module's fixtures and
# order): most of the suite waits on the real servers (kills, restarts, timeouts, rebalances), not on the CPU.
# -p no:benchmark: a pytest-benchmark installed on the machine (not ours, no test uses it) warns under xdist.
python3 -m pytest -n 2 --dist loadfile -p no:benchmark "$@"
