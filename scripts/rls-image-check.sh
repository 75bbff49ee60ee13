#!/usr/bin/env bash
# Runs the rls image as Istio's sample rate limit service runs
# envoyproxy/ratelimit: command /bin/ratelimit, its environment variables
# (REDIS_URL, REDIS_SOCKET_TYPE=tcp, RUNTIME_ROOT=/data,
# RUNTIME_SUBDIRECTORY=ratelimit, RUNTIME_IGNOREDOTFILES=true,
# RUNTIME_WATCH_ROOT=false, LOG_LEVEL, USE_STATSD=false, HOST and
# GRPC_HOST "::"), the configuration mounted read-only at
# /data/ratelimit/config/config.yaml laid out as a Kubernetes ConfigMap
# (..data and a timestamped directory beside a link), and a Redis
# container on the same network. It checks that:
#   - the image runs as a non-root user and exposes 8080, 8081 and 6070;
#   - its HEALTHCHECK (slidelog healthcheck: the image has no curl) says
#     healthy;
#   - ShouldRateLimit answers exactly: 2 a minute admit 2 of 3, the third
#     told when the same hit fits again;
#   - a calendar day in Europe/Berlin answers in an image with no zoneinfo
#     (the zones are in the binary), its reset at Berlin's next midnight;
#   - /json, /rlconfig (HTTP and debug ports) and /metrics answer;
#   - docker stop (SIGTERM) drains and exits 0;
#   - deploy/compose (Redis and two replicas, set the same way) admits
#     exactly the limit across both replicas.
# Builds the images (scripts/build-image.sh) and the gRPC client
# (contrib/envoyrls/internal/rlsask); Redis is slidelog/redis:7.0 unless
# SLIDELOG_REDIS_IMAGE names another (scripts/build-images.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
image=${SLIDELOG_RLS_IMAGE:-slidelog/slidelog:dev-rls}
redis_image=${SLIDELOG_REDIS_IMAGE:-slidelog/redis:7.0}

echo "--- building $image (static binary, FROM scratch) and rlsask"
bash scripts/build-image.sh "${SLIDELOG_IMAGE:-slidelog/slidelog:dev}" "$image"
go build -o build/rlsask ./contrib/envoyrls/internal/rlsask

fail() { echo "rls image check failed: $*" >&2; exit 1; }

user=$(docker inspect --format '{{.Config.User}}' "$image")
ports=$(docker inspect --format '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}' "$image")
echo "user $user; exposes $ports"
case $user in "" | 0 | 0:* | root | root:*) fail "the image runs as root ($user)" ;; esac
for p in 8080/tcp 8081/tcp 6070/tcp; do
  [[ " $ports" == *" $p "* ]] || fail "the image does not expose $p"
done

run=slidelog-rls-check-$$
work=$(mktemp -d)
compose() { if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi; }
composed=
cleanup() {
  docker rm -f "$run-rls" "$run-redis" >/dev/null 2>&1 || true
  docker network rm "$run" >/dev/null 2>&1 || true
  [ -z "$composed" ] || compose -f deploy/compose/docker-compose.yml -p "$run" down -v >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The configuration as a ConfigMap volume lays it out: the key a link to
# ..data/config.yaml, ..data a link to a timestamped directory.
cfg=$work/config
mkdir -p "$cfg/..2026_01_01_00_00_00.000000001"
cat >"$cfg/..2026_01_01_00_00_00.000000001/config.yaml" <<'YAML'
domain: echo-ratelimit
descriptors:
  - key: PATH
    value: "/"
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: PATH
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 2
      calendar: {time_zone: Europe/Berlin}
YAML
ln -s ..2026_01_01_00_00_00.000000001 "$cfg/..data"
ln -s ..data/config.yaml "$cfg/config.yaml"
chmod -R a+rX "$work"

docker network create "$run" >/dev/null
docker run -d --name "$run-redis" --network "$run" --network-alias redis "$redis_image" >/dev/null
echo "--- docker run $image, command /bin/ratelimit, Istio's sample's environment"
docker run -d --name "$run-rls" --network "$run" \
  --entrypoint /bin/ratelimit \
  -e LOG_LEVEL=debug -e REDIS_SOCKET_TYPE=tcp -e REDIS_URL=redis:6379 -e USE_STATSD=false \
  -e RUNTIME_ROOT=/data -e RUNTIME_SUBDIRECTORY=ratelimit -e RUNTIME_WATCH_ROOT=false -e RUNTIME_IGNOREDOTFILES=true \
  -e HOST=:: -e GRPC_HOST=:: \
  -v "$cfg:/data/ratelimit/config:ro" \
  --health-interval 1s \
  -p 127.0.0.1::8080 -p 127.0.0.1::8081 -p 127.0.0.1::6070 \
  "$image" >/dev/null

# Poll the container's health (its HEALTHCHECK, every second here) with a
# generous deadline: the machine may be busy.
health=
for _ in $(seq 1 240); do
  health=$(docker inspect --format '{{.State.Health.Status}}' "$run-rls" 2>/dev/null || echo gone)
  [ "$(docker inspect --format '{{.State.Running}}' "$run-rls")" = true ] || break
  [ "$health" = healthy ] && break
  sleep 0.5
done
if [ "$health" != healthy ]; then
  docker logs "$run-rls" >&2 || true
  fail "the container's health is '$health', not healthy"
fi
echo "HEALTHCHECK: healthy"
hostport() { docker port "$run-rls" "$1" | grep -m1 127.0.0.1; }
grpc=$(hostport 8081/tcp) http=$(hostport 8080/tcp) debug=$(hostport 6070/tcp)

ask() { build/rlsask --addr "$grpc" --domain echo-ratelimit "$@"; }
got=$(ask --n 3 PATH=/)
echo "$got"
codes=$(awk '{print $1}' <<<"$got" | tr '\n' ' ')
[ "$codes" = "OK OK OVER_LIMIT " ] || fail "PATH=/ (2 a minute), three asks: $codes, want OK OK OVER_LIMIT"
reset=$(tail -1 <<<"$got" | sed -n 's/.*reset=\([0-9]*\).*/\1/p')
[ -n "$reset" ] && [ "$reset" -ge 1 ] && [ "$reset" -le 60 ] || fail "the denial's reset is ${reset:-missing}s, want 1 to 60"
[ "$(ask PATH=/other | awk '{print $1}')" = OK ] || fail "PATH=/other (100 a minute) was not admitted"

# Three asks of one tenant; a sequence that straddles Berlin's midnight is
# asked again by another tenant, in the new day. The service reads its clock
# between before and after; the reset is in whole seconds.
berlin_midnight() { TZ=Europe/Berlin date -d "@$1" +%F; }
for attempt in 1 2 3; do
  before=$(date +%s)
  got=$(ask --n 3 "tenant=acme$attempt")
  after=$(date +%s)
  [ "$(berlin_midnight "$before")" = "$(berlin_midnight "$after")" ] && break
done
echo "$got"
codes=$(awk '{print $1}' <<<"$got" | tr '\n' ' ')
[ "$codes" = "OK OK OVER_LIMIT " ] || fail "a Berlin calendar day (2 a day), three asks: $codes, want OK OK OVER_LIMIT"
reset=$(tail -1 <<<"$got" | sed -n 's/.*reset=\([0-9]*\).*/\1/p')
next=$(TZ=Europe/Berlin date -d "$(berlin_midnight "$after") + 1 day 00:00" +%s)
want=$((next - after))
[ -n "$reset" ] && [ "$reset" -ge $((want - 1)) ] && [ "$reset" -le $((next - before + 1)) ] ||
  fail "the Berlin day's reset is ${reset:-missing}s, want $((want - 1)) to $((next - before + 1))s (Berlin's next midnight)"
echo "Europe/Berlin calendar day: reset ${reset}s, Berlin's midnight in ${want}s"

json=$(curl -s -o /dev/null -w '%{http_code}' -XPOST --data '{"domain":"echo-ratelimit","descriptors":[{"entries":[{"key":"PATH","value":"/"}]}]}' "http://$http/json")
[ "$json" = 429 ] || fail "/json of PATH=/ after the limit: HTTP $json, want 429"
curl -sf "http://$http/rlconfig" | grep -q 'echo-ratelimit.PATH_/' || fail "/rlconfig on 8080 does not show the rule"
curl -sf "http://$debug/rlconfig" | grep -q 'echo-ratelimit.PATH_/' || fail "/rlconfig on 6070 does not show the rule"
curl -sf "http://$http/metrics" | grep -q 'ratelimit_service_rate_limit_over_limit{domain="echo-ratelimit",rule="PATH_/"} 2' ||
  fail "/metrics does not count the two denials of PATH=/"
echo "/json 429, /rlconfig (8080 and 6070) and /metrics answer"

docker stop -t 30 "$run-rls" >/dev/null
code=$(docker inspect --format '{{.State.ExitCode}}' "$run-rls")
logs=$(docker logs "$run-rls" 2>&1)
[ "$code" = 0 ] || { echo "$logs" >&2; fail "docker stop: exit $code, want 0"; }
grep -q 'msg=stopped signal=terminated' <<<"$logs" || { echo "$logs" >&2; fail "no 'stopped' line after SIGTERM"; }
if grep -q 'variable ignored' <<<"$logs"; then
  echo "$logs" >&2
  fail "a variable of Istio's sample was logged as ignored"
fi
echo "docker stop: drained, exit 0"

echo "--- deploy/compose: Redis and two replicas"
export SLIDELOG_RLS_IMAGE=$image SLIDELOG_REDIS_IMAGE=$redis_image
export SLIDELOG_RLS_GRPC1= SLIDELOG_RLS_GRPC2= SLIDELOG_RLS_HTTP1= SLIDELOG_RLS_HTTP2= # free ports
composed=1
compose -f deploy/compose/docker-compose.yml -p "$run" up -d >"$work/compose.log" 2>&1 || { cat "$work/compose.log"; fail "docker-compose up"; }
cport() { compose -f deploy/compose/docker-compose.yml -p "$run" port "$1" "$2" | sed 's/^0\.0\.0\.0:/127.0.0.1:/'; }
declare -A grpcs
for replica in rls1 rls2; do
  h=$(cport "$replica" 8080)
  grpcs[$replica]=$(cport "$replica" 8081)
  ok=
  for _ in $(seq 1 240); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$h/healthcheck")" = 200 ] && { ok=1; break; }
    sleep 0.5
  done
  [ -n "$ok" ] || { compose -f deploy/compose/docker-compose.yml -p "$run" logs >&2; fail "$replica never answered /healthcheck"; }
done
admitted=0 denied=0
for i in $(seq 1 15); do
  replica=rls1
  [ $((i % 2)) = 0 ] && replica=rls2
  case $(build/rlsask --addr "${grpcs[$replica]}" --domain echo-ratelimit PATH=/ | awk '{print $1}') in
    OK) admitted=$((admitted + 1)) ;;
    OVER_LIMIT) denied=$((denied + 1)) ;;
    *) fail "ask $i to $replica failed" ;;
  esac
done
echo "15 asks alternately to both replicas: $admitted admitted, $denied denied (10 a minute)"
[ "$admitted" = 10 ] && [ "$denied" = 5 ] || fail "want exactly 10 admitted across both replicas"
echo "rls image check ok: Istio's sample's environment, /bin/ratelimit, exact answers; two replicas, one limit"
