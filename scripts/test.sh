#!/usr/bin/env bash
# The project's test command: every test, with the race detector.
#
# Needs: Go; redis-server, valgrind and python3-limits (installed here from Debian's
# packages when missing, which takes root and apt); for the integration
# suite, a running Docker engine, and root with Debian's package mirror the
# first time, to build the Redis and Valkey images (debootstrap, about 3
# minutes; set SLIDELOG_SKIP_INTEGRATION=1 to leave the suite out).
# Leaves behind: nothing in the clone; the Debian roots the images are
# built from in /var/tmp/slidelog-images (IMAGE_WORK names another); the
# Docker images slidelog/redis:6.0,
# :7.0, :8.0, slidelog/valkey:8.1 and slidelog/slidelog:dev (a cache: the
# next run reuses them), and the integration suite's full output in
# /tmp/slidelog-integration.log (SLIDELOG_INTEGRATION_LOG names another).
#
# What runs:
#  - unit tests on miniredis (clock set to the microsecond),
#  - tests against a real redis-server that they start on a free loopback port,
#  - the measurements behind the "measure" build tag (bytes per event,
#    instructions per decision under callgrind),
#  - the demo CLI on its embedded Redis,
#  - the integration suite: Redis 6.0/7.0/8.0 and Valkey 8.1 in containers,
#    single, Cluster and Sentinel (scripts/integration.sh),
#  - docker-compose.yml: two slidelog instances share one limit
#    (scripts/compose-check.sh),
#  - the rls image run as Istio's sample runs envoyproxy/ratelimit's, and
#    deploy/compose: two rls replicas share one limit
#    (scripts/rls-image-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# The Python limits package: an independent moving window the block log's
# weighted traces are checked against (Debian's python3-limits, for the
# system's python3).
havelimits() { python3 -c 'import limits' 2>/dev/null || /usr/bin/python3 -c 'import limits' 2>/dev/null; }
if ! command -v redis-server >/dev/null 2>&1 || ! command -v valgrind >/dev/null 2>&1 || ! havelimits; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "--- installing redis-server, valgrind and python3-limits from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    aptlog=$(mktemp) # apt's chatter, shown only when it fails
    { apt-get update -qq && apt-get install -y -qq redis-server valgrind python3-limits; } >"$aptlog" 2>&1 || { cat "$aptlog"; exit 1; }
    rm -f "$aptlog"
  else
    echo "redis-server, valgrind or Python's limits package is missing: install them (apt-get install redis-server valgrind python3-limits) and run again" >&2
    exit 1
  fi
fi

echo "--- go test -race (the library, the CLI ./cmd/slidelog, the adapters ./contrib/prometheus and ./contrib/otel, the gRPC middleware ./contrib/grpclimit, the Envoy rate limit service ./contrib/envoyrls)"
# (-timeout 30m: a package's tests under the race detector on a machine
# whose cores other work shares take several times their quiet time; the
# default 10 minutes was reached there)
go test -race -count=1 -timeout 30m ./... ./cmd/slidelog/... ./contrib/prometheus/... ./contrib/otel/... ./contrib/grpclimit/... ./contrib/envoyrls/...

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
  bash scripts/rls-image-check.sh
fi
