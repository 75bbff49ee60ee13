#!/usr/bin/env bash
# The project's test command: every test, with the race detector.
#  - unit tests on miniredis (clock set to the microsecond),
#  - tests against a real redis-server that they start on a free loopback port
#    (installed here from Debian's packages when missing, with valgrind for
#    the bench's instruction counts),
#  - the demo CLI on its embedded Redis,
#  - the integration suite: Redis 6.0/7.0/8.0 and Valkey 8.1 in containers,
#    single, Cluster and Sentinel (scripts/integration.sh; set
#    SLIDELOG_SKIP_INTEGRATION=1 to leave it out, e.g. without Docker),
#  - docker-compose.yml: two slidelog instances share one limit
#    (scripts/compose-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1 || ! command -v valgrind >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "--- installing redis-server and valgrind from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq redis-server valgrind >/dev/null
  else
    echo "redis-server or valgrind is missing: install them (apt-get install redis-server valgrind) and run again" >&2
    exit 1
  fi
fi

echo "--- go test -race (the library, the CLI ./cmd/slidelog, the adapter ./contrib/prometheus)"
go test -race -count=1 ./... ./cmd/slidelog/... ./contrib/prometheus/...

# Measurements behind the "measure" build tag, so that a plain go test
# needs nothing but a redis-server: bytes per stored event (MEMORY USAGE)
# and Redis instructions per decision (valgrind's callgrind).
echo "--- go test -tags measure (bytes per event, instructions per decision)"
go test -count=1 -tags measure -run 'TestMemoryPerEvent|TestBenchInstructions' . ./cmd/slidelog/

if [ "${SLIDELOG_SKIP_INTEGRATION:-0}" = 1 ]; then
  echo "--- integration suite skipped on request (SLIDELOG_SKIP_INTEGRATION=1)"
else
  bash scripts/integration.sh
  bash scripts/compose-check.sh
fi
