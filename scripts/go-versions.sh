#!/usr/bin/env bash
# The library module (the root: slidelog, httplimit, local, internal/...) on
# the Go releases it supports, each as its own module (GOWORK=off), so with
# the versions its own go.mod requires (the lowest go-redis it supports, not
# the newer one the workspace's CLI selects):
#   go1.24.0   the go line's minimum ("go 1.24")
#   go1.25.0
#   local      the Go on PATH (scripts/test.sh runs it again with -race, in the workspace)
# Each toolchain other than local is fetched once through the Go module proxy
# (GOTOOLCHAIN) and cached in the module cache. The tests need redis-server
# on PATH (scripts/test.sh and .ci/run install it). Set SLIDELOG_GO_VERSIONS
# to choose others, e.g. "go1.24.13 go1.25.14".
set -euo pipefail
cd "$(dirname "$0")/.."
export GOWORK=off

for v in ${SLIDELOG_GO_VERSIONS:-go1.24.0 go1.25.0 local}; do
  export GOTOOLCHAIN=$v
  echo "--- $(go version | cut -d' ' -f3-): go build + go test ./... (module github.com/slidelog/slidelog, GOWORK=off)"
  go build ./...
  set +e
  go test -count=1 -timeout 20m ./... 2>&1 | grep -v ' pool.go:[0-9]*: ' # go-redis' dial retries in the fault tests
  status=${PIPESTATUS[0]}
  set -e
  [ "$status" = 0 ] || exit "$status"
done
