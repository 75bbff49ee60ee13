#!/usr/bin/env bash
# The integration suite (integration/, its own Go module): real Redis 6.0,
# 7.0, 8.0 and Valkey 8.1 servers in containers, single, Cluster and
# Sentinel. Without a registry the images are built here from Debian's
# packages (scripts/build-images.sh); with one, set SLIDELOG_OFFICIAL_IMAGES=1
# to run the official images (redis:7.4-alpine, valkey/valkey:8, ...).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${SLIDELOG_OFFICIAL_IMAGES:-0}" != 1 ]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    aptlog=$(mktemp)
    { apt-get update -qq && apt-get install -y -qq debootstrap; } >"$aptlog" 2>&1 || { cat "$aptlog"; exit 1; }
    rm -f "$aptlog"
  fi
  bash scripts/build-images.sh
  export SLIDELOG_REDIS6_IMAGE=${SLIDELOG_REDIS6_IMAGE:-slidelog/redis:6.0}
  export SLIDELOG_REDIS7_IMAGE=${SLIDELOG_REDIS7_IMAGE:-slidelog/redis:7.0}
  export SLIDELOG_REDIS8_IMAGE=${SLIDELOG_REDIS8_IMAGE:-slidelog/redis:8.0}
  export SLIDELOG_VALKEY_IMAGE=${SLIDELOG_VALKEY_IMAGE:-slidelog/valkey:8.1}
  # Ryuk (testcontainers' reaper) is an image from a registry too; the tests
  # remove their containers themselves (testcontainers.CleanupContainer).
  export TESTCONTAINERS_RYUK_DISABLED=true
fi

echo "--- go test -race ./... (module github.com/slidelog/slidelog/integration)"
cd integration
export GOWORK=off # a module of its own, outside the go.work of the library and CLI
log=${SLIDELOG_INTEGRATION_LOG:-/tmp/slidelog-integration.log}
# -v for the REPORT lines (the tables of docs/operations.md); the full output stays in $log.
set +e
go test -race -count=1 -timeout 25m -v ./... 2>&1 | tee "$log" |
  grep --line-buffered -E '^(--- |\s+--- |ok|FAIL|PASS|panic)|REPORT|_test\.go:[0-9]+:'
status=${PIPESTATUS[0]}
set -e
exit "$status"
