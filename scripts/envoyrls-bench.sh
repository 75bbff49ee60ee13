#!/usr/bin/env bash
# Side by side: slidelog rls and envoyproxy/ratelimit on one redis-server,
# with one configuration (a descriptor per request, 100 per second per
# value), asked by the same gRPC load generator (contrib/envoyrls/internal/
# rlsload): 10 000 values at random, then one hot value, with 1, 16 and 64
# concurrent callers, in SLIDELOG_BENCH_ROUNDS (default 3) interleaved
# rounds. Prints a line per run (calls/s, p50, p99), then per cell the
# median ratio of the two services' calls/s and their median p99s.
#
#  - slidelog: cmd/slidelog built from a git archive of HEAD (commit first),
#    or of SLIDELOG_BENCH_REV; the load generator always from HEAD.
#  - envoyproxy/ratelimit: its src/service_cmd, built with go install from
#    the Go module proxy at SLIDELOG_RATELIMIT_VERSION (default latest) into
#    the temporary directory; none of its code enters the repository.
#
# Needs: git, go, redis-server on PATH, network for the module proxy the
# first time. SLIDELOG_BENCH_DURATION (default 5s) per run;
# SLIDELOG_BENCH_CALLERS (default "1 16 64"). Everything lives in one
# temporary directory, removed on exit.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
duration=${SLIDELOG_BENCH_DURATION:-5s}
callers=${SLIDELOG_BENCH_CALLERS:-1 16 64}
rounds=${SLIDELOG_BENCH_ROUNDS:-3}
version=${SLIDELOG_RATELIMIT_VERSION:-latest}
rev=${SLIDELOG_BENCH_REV:-HEAD}

work=$(mktemp -d "${TMPDIR:-/tmp}/slidelog-envoyrls-bench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "nothing listens on $1" >&2
  return 1
}

echo "--- build: slidelog ($rev, $(git -C "$repo" rev-parse --short "$rev")) and rlsload (HEAD $(git -C "$repo" rev-parse --short HEAD))"
mkdir -p "$work/src" "$work/head" "$work/bin"
git -C "$repo" archive --format=tar "$rev" | tar -x -C "$work/src"
git -C "$repo" archive --format=tar HEAD | tar -x -C "$work/head"
(cd "$work/src" && go build -o "$work/bin/slidelog" ./cmd/slidelog)
(cd "$work/head/contrib/envoyrls" && go build -o "$work/bin/rlsload" ./internal/rlsload)

echo "--- build: github.com/envoyproxy/ratelimit/src/service_cmd@$version (module proxy)"
mkdir -p "$work/gobuild"
(cd "$work/gobuild" && GOWORK=off GOFLAGS=-mod=mod GOBIN="$work/bin" go install "github.com/envoyproxy/ratelimit/src/service_cmd@$version")
(cd "$work/gobuild" && GOWORK=off go version -m "$work/bin/service_cmd" | sed -n '2,3p')

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
wait_port "$redis_port"
redis-server --version

mkdir -p "$work/rt/ratelimit/config" "$work/rls"
cat >"$work/rls/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 100
YAML
cp "$work/rls/bench.yaml" "$work/rt/ratelimit/config/bench.yaml"

# start NAME: starts one service on a fresh gRPC port, $port.
start() {
  local http debug
  port=$(free_port) http=$(free_port) debug=$(free_port)
  case $1 in
  slidelog)
    "$work/bin/slidelog" rls --config "$work/rls" --redis "127.0.0.1:$redis_port" \
      --listen "127.0.0.1:$port" --http "127.0.0.1:$http" --deadline 1s >"$work/slidelog.out" 2>"$work/slidelog.err" &
    ;;
  ratelimit)
    env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" \
      RUNTIME_ROOT="$work/rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false RUNTIME_IGNOREDOTFILES=true \
      HOST=127.0.0.1 GRPC_HOST=127.0.0.1 DEBUG_HOST=127.0.0.1 PORT="$http" GRPC_PORT="$port" DEBUG_PORT="$debug" \
      "$work/bin/service_cmd" >"$work/ratelimit.out" 2>"$work/ratelimit.err" &
    ;;
  esac
  pids+=($!)
  wait_port "$port"
}

# Both services run side by side; each round asks every cell of both, in
# an order that alternates round by round, so that the machine's load
# falls on both alike. The summary is, per cell, the median over rounds of
# slidelog's calls/s divided by envoyproxy/ratelimit's in the same round,
# and each one's median p99.
declare -A ports
for svc in ratelimit slidelog; do
  start "$svc"
  ports[$svc]=$port
done
: >"$work/results.txt"
for round in $(seq "$rounds"); do
  order="ratelimit slidelog"
  if ((round % 2 == 0)); then order="slidelog ratelimit"; fi
  for values in 10000 1; do
    for c in $callers; do
      for svc in $order; do
        redis-cli -p "$redis_port" flushall >/dev/null
        "$work/bin/rlsload" -addr "127.0.0.1:${ports[$svc]}" -callers "$c" -values "$values" -duration "$duration" -name "$svc" |
          tee -a "$work/results.txt"
      done
    done
  done
done
echo "--- medians of $rounds rounds (slidelog / envoyproxy/ratelimit, same round)"
python3 - "$work/results.txt" <<'PY'
import re, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'(\S+)\s+callers\s+(\d+) values\s+(\d+):\s+(\d+) calls/s\s+p50\s+([\d.]+)us\s+p99\s+([\d.]+)us', line)
    if m:
        rows.setdefault((int(m[3]), int(m[2])), {}).setdefault(m[1], []).append((float(m[4]), float(m[6])))
for (values, callers), by in sorted(rows.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
    r, s = by['ratelimit'], by['slidelog']
    ratio = [a[0] / b[0] for a, b in zip(s, r)]
    print(f"values {values:5} callers {callers:3}: calls/s ratio {st.median(ratio):.2f} [{min(ratio):.2f}-{max(ratio):.2f}]"
          f"  p99 slidelog {st.median(x[1] for x in s):8.1f}us  ratelimit {st.median(x[1] for x in r):8.1f}us")
PY
