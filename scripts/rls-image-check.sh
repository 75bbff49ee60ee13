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
#   - with Envoy Gateway's environment for its rate limit Deployment
#     (CONFIG_TYPE=GRPC_XDS_SOTW from envoy-gateway:18001 as node
#     envoy-ratelimit over mutual TLS, FORCE_START_WITHOUT_INITIAL_CONFIG,
#     gRPC over TLS, the certificates at /certs as its Secret lays them out,
#     GRPC_SERVER_TLS_CA_CERT, Redis over tcp, USE_STATSD=false, RUNTIME_*,
#     LOG_LEVEL=info) and HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true, the
#     image connects to an xDS server (contrib/envoyrls/internal/xdsserve,
#     a container of its own) with its client certificate, listens at once,
#     unhealthy and answering with an error until the server pushes a
#     configuration, then healthy; over TLS, 2 a minute admit 2 of 3;
#   - deploy/compose (Redis and two replicas, set the same way) admits
#     exactly the limit across both replicas.
# Builds the images (scripts/build-image.sh), the gRPC client
# (contrib/envoyrls/internal/rlsask) and the xDS server's image (a static
# binary, FROM scratch); the certificates are made with openssl. Redis is
# slidelog/redis:7.0 unless SLIDELOG_REDIS_IMAGE names another
# (scripts/build-images.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
image=${SLIDELOG_RLS_IMAGE:-slidelog/slidelog:dev-rls}
redis_image=${SLIDELOG_REDIS_IMAGE:-slidelog/redis:7.0}

echo "--- building $image (static binary, FROM scratch), rlsask and the xDS server's image"
bash scripts/build-image.sh "${SLIDELOG_IMAGE:-slidelog/slidelog:dev}" "$image"
go build -o build/rlsask ./contrib/envoyrls/internal/rlsask
xds_image=slidelog/xdsserve:check-$$
rm -rf build/xdsserve
mkdir -p build/xdsserve
CGO_ENABLED=0 go build -o build/xdsserve/xdsserve ./contrib/envoyrls/internal/xdsserve
docker build -q -t "$xds_image" -f - build/xdsserve >build/xdsserve.log 2>&1 <<'DOCKERFILE' || { cat build/xdsserve.log; exit 1; }
FROM scratch
COPY xdsserve /xdsserve
USER 65534:65534
ENTRYPOINT ["/xdsserve"]
DOCKERFILE
echo "built $xds_image (contrib/envoyrls/internal/xdsserve)"

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
  docker rm -f "$run-rls" "$run-eg" "$run-xds" "$run-redis" >/dev/null 2>&1 || true
  docker rmi "$xds_image" >/dev/null 2>&1 || true
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
# (each page is read whole before grep -q looks at it: grep -q leaves at its
# first match, and a curl still writing into the pipe then fails the
# pipeline under pipefail, at random, by the page's size)
rlconfig=$(curl -sf "http://$http/rlconfig") && grep -q 'echo-ratelimit.PATH_/' <<<"$rlconfig" || fail "/rlconfig on 8080 does not show the rule"
rlconfig=$(curl -sf "http://$debug/rlconfig") && grep -q 'echo-ratelimit.PATH_/' <<<"$rlconfig" || fail "/rlconfig on 6070 does not show the rule"
metrics=$(curl -sf "http://$http/metrics") && grep -q 'ratelimit_service_rate_limit_over_limit{domain="echo-ratelimit",rule="PATH_/"} 2' <<<"$metrics" ||
  { grep -F 'rule="PATH_/"' <<<"$metrics" >&2 || true; fail "/metrics does not count the two denials of PATH=/"; }
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

echo "--- Envoy Gateway's environment: the configuration over xDS (mutual TLS), gRPC over TLS"
# Certificates as Envoy Gateway's Secrets hold them (tls.crt, tls.key,
# ca.crt): the rate limit service's serves gRPC and is its client
# certificate to the xDS server; the xDS server's is for envoy-gateway.
certs=$work/certs
mkdir -p "$certs/ratelimit" "$certs/envoy-gateway"
ossl() { openssl "$@" 2>>"$work/openssl.log" || { cat "$work/openssl.log" >&2; fail "openssl $1"; }; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=slidelog-check-ca \
  -keyout "$certs/ca.key" -out "$certs/ca.crt"
issue() { # DIR SANS EKU
  ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=${1##*/}" -keyout "$1/tls.key" -out "$1/tls.csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$2" "$3" >"$1/ext"
  ossl x509 -req -in "$1/tls.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" -CAcreateserial -days 1 -extfile "$1/ext" -out "$1/tls.crt"
  cp "$certs/ca.crt" "$1/ca.crt"
  rm -f "$1/tls.csr" "$1/ext"
}
rls_name=envoy-ratelimit.envoy-gateway-system.svc.cluster.local
issue "$certs/ratelimit" "DNS:envoy-ratelimit,DNS:envoy-ratelimit.envoy-gateway-system,DNS:envoy-ratelimit.envoy-gateway-system.svc,DNS:$rls_name" serverAuth,clientAuth
issue "$certs/envoy-gateway" "DNS:envoy-gateway,DNS:envoy-gateway.envoy-gateway-system,DNS:envoy-gateway.envoy-gateway-system.svc" serverAuth
chmod -R a+rX "$certs" # the containers run as 65534

# The xDS server pushes its configuration only when told (SIGHUP), so the
# service is first seen connected and without one.
docker run -d --name "$run-xds" --network "$run" --network-alias envoy-gateway \
  -v "$certs/envoy-gateway:/certs:ro" "$xds_image" \
  --listen :18001 --cert /certs/tls.crt --key /certs/tls.key --ca /certs/ca.crt --node envoy-ratelimit --on-hup >/dev/null
docker run -d --name "$run-eg" --network "$run" \
  --entrypoint /bin/ratelimit \
  -e REDIS_SOCKET_TYPE=tcp -e REDIS_URL=redis:6379 \
  -e RUNTIME_ROOT=/data -e RUNTIME_SUBDIRECTORY=ratelimit -e RUNTIME_IGNOREDOTFILES=true -e RUNTIME_WATCH_ROOT=false \
  -e LOG_LEVEL=info -e USE_STATSD=false \
  -e CONFIG_TYPE=GRPC_XDS_SOTW -e CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001 -e CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit \
  -e GRPC_SERVER_USE_TLS=true -e GRPC_SERVER_TLS_CERT=/certs/tls.crt -e GRPC_SERVER_TLS_KEY=/certs/tls.key \
  -e GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt \
  -e CONFIG_GRPC_XDS_SERVER_USE_TLS=true -e CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt \
  -e CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key -e CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt \
  -e FORCE_START_WITHOUT_INITIAL_CONFIG=true -e HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true \
  -v "$certs/ratelimit:/certs:ro" \
  --health-interval 1s \
  -p 127.0.0.1::8080 -p 127.0.0.1::8081 \
  "$image" >/dev/null
eg_logs() { echo "--- xDS server:" >&2; docker logs "$run-xds" >&2 2>&1 || true; echo "--- rate limit service:" >&2; docker logs "$run-eg" >&2 2>&1 || true; }
# waitfor WHAT CMD...: polls CMD (every half second, 4 minutes at most:
# the machine may be busy) until it succeeds.
waitfor() {
  local what=$1
  shift
  for _ in $(seq 1 480); do
    "$@" && return 0
    sleep 0.5
  done
  eg_logs
  fail "$what: not in 4 minutes"
}
xds_saw() { grep -qF -- "$1" <<<"$(docker logs "$run-xds" 2>/dev/null)"; }
waitfor "a discovery request from node envoy-ratelimit (over mutual TLS)" xds_saw 'request node=envoy-ratelimit version="" ack=false'
echo "the xDS server: a request from node envoy-ratelimit, over mutual TLS"
eg_http=$(docker port "$run-eg" 8080/tcp | grep -m1 127.0.0.1)
eg_grpc=$(docker port "$run-eg" 8081/tcp | grep -m1 127.0.0.1)
health_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://$eg_http/healthcheck" || true; }
answers() { [ "$(health_code)" != 000 ]; }
waitfor "/healthcheck answering" answers
code=$(health_code)
[ "$code" = 500 ] || { eg_logs; fail "/healthcheck before any configuration: HTTP $code, want 500"; }
egask() { build/rlsask --addr "$eg_grpc" --tls-ca "$certs/ca.crt" --tls-server-name "$rls_name" --domain default/eg/http "$@"; }
rule='httproute/default/backend/rule/0/match/0/*-key-rule-0-match-0=httproute/default/backend/rule/0/match/0/*-value-rule-0-match-0'
if err=$(egask "$rule" 2>&1); then fail "a request before any configuration was answered: $err"; fi
grep -q 'no rate limit configuration loaded' <<<"$err" || { eg_logs; fail "a request before any configuration: '$err', want 'no rate limit configuration loaded'"; }
echo "before the push: listening, /healthcheck 500, requests answered 'no rate limit configuration loaded'"
if err=$(build/rlsask --addr "$eg_grpc" --timeout 5s --domain default/eg/http "$rule" 2>&1); then
  fail "a plaintext request to the TLS port was answered: $err"
fi

docker kill -s HUP "$run-xds" >/dev/null
waitfor "the push of version 1 ACKed by node envoy-ratelimit" xds_saw 'request node=envoy-ratelimit version="1" ack=true'
healthy() { [ "$(docker inspect --format '{{.State.Health.Status}}' "$run-eg")" = healthy ]; }
waitfor "the container healthy after the push" healthy
code=$(health_code)
[ "$code" = 200 ] || { eg_logs; fail "/healthcheck after the push: HTTP $code, want 200"; }
echo "after the push: version 1 ACKed, /healthcheck 200, HEALTHCHECK healthy"
got=$(egask --n 3 "$rule") || { eg_logs; fail "asks over TLS failed"; }
echo "$got"
codes=$(awk '{print $1}' <<<"$got" | tr '\n' ' ')
[ "$codes" = "OK OK OVER_LIMIT " ] || fail "the pushed rule (2 a minute), three asks over TLS: $codes, want OK OK OVER_LIMIT"
reset=$(tail -1 <<<"$got" | sed -n 's/.*reset=\([0-9]*\).*/\1/p')
[ -n "$reset" ] && [ "$reset" -ge 1 ] && [ "$reset" -le 60 ] || fail "the denial's reset is ${reset:-missing}s, want 1 to 60"
eg_rlconfig=$(curl -sf "http://$eg_http/rlconfig") && grep -qF 'default/eg/http.httproute/default/backend/rule/0/match/0/*-key-rule-0-match-0_httproute/default/backend/rule/0/match/0/*-value-rule-0-match-0: unit=MINUTE requests_per_unit=2' <<<"$eg_rlconfig" ||
  { curl -s "http://$eg_http/rlconfig" >&2; fail "/rlconfig does not show the pushed rule"; }

docker stop -t 30 "$run-eg" >/dev/null
code=$(docker inspect --format '{{.State.ExitCode}}' "$run-eg")
logs=$(docker logs "$run-eg" 2>&1)
[ "$code" = 0 ] || { echo "$logs" >&2; fail "docker stop (Envoy Gateway's environment): exit $code, want 0"; }
if grep -q 'variable ignored' <<<"$logs"; then
  echo "$logs" >&2
  fail "a variable of Envoy Gateway's environment was logged as ignored"
fi
echo "Envoy Gateway's environment: no variable ignored; docker stop: exit 0"

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
echo "rls image check ok: Istio's sample's environment, /bin/ratelimit, exact answers; Envoy Gateway's, over xDS and TLS; two replicas, one limit"
