#!/usr/bin/env bash
# Brings up docker-compose.yml (Redis and two slidelog instances), sends 30
# requests for one API key alternately to both instances, and checks that
# exactly 10 (the limit) were admitted in total; then takes it down.
# Builds the static CLI image; the Redis image defaults to the one
# scripts/build-images.sh builds (slidelog/redis:7.0).
set -euo pipefail
cd "$(dirname "$0")/.."
compose() { if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi; }

echo "--- building slidelog/slidelog:dev (static binary, FROM scratch)"
bash scripts/build-image.sh "${SLIDELOG_IMAGE:-slidelog/slidelog:dev}"
# Docker's chatter (compose's progress) goes to $chatter, shown only when a
# step fails
chatter=$(mktemp)
docker run --rm "${SLIDELOG_IMAGE:-slidelog/slidelog:dev}" version
export SLIDELOG_REDIS_IMAGE=${SLIDELOG_REDIS_IMAGE:-slidelog/redis:7.0}
export SLIDELOG_PORT1=${SLIDELOG_PORT1:-18081} SLIDELOG_PORT2=${SLIDELOG_PORT2:-18082}
project=slidelog-compose-$$
trap 'compose -p "$project" down -v >/dev/null 2>&1 || true; rm -f "$chatter"' EXIT
echo "--- docker-compose up (redis: $SLIDELOG_REDIS_IMAGE)"
compose -p "$project" up -d >"$chatter" 2>&1 || { cat "$chatter"; exit 1; }

status() { curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $2" "http://127.0.0.1:$1/"; }
for port in "$SLIDELOG_PORT1" "$SLIDELOG_PORT2"; do
  for i in $(seq 1 100); do
    [ "$(status "$port" "warmup-$port")" = 200 ] && break
    [ "$i" = 100 ] && { echo "instance on $port never admitted a request"; compose -p "$project" logs; exit 1; }
    sleep 0.2
  done
done

admitted=0 denied=0
for i in $(seq 1 30); do
  port=$SLIDELOG_PORT1
  [ $((i % 2)) = 0 ] && port=$SLIDELOG_PORT2
  code=$(status "$port" ci)
  case $code in
    200) admitted=$((admitted + 1)) ;;
    429) denied=$((denied + 1)) ;;
    *) echo "request $i to $port: HTTP $code"; exit 1 ;;
  esac
done
echo "30 requests alternately to both instances: $admitted admitted, $denied denied (limit 10 per minute)"
curl -s -D - -o /dev/null -H "X-API-Key: ci" "http://127.0.0.1:$SLIDELOG_PORT2/" | grep -i -E '^(HTTP|ratelimit|retry-after)'
if [ "$admitted" != 10 ] || [ "$denied" != 20 ]; then
  echo "compose check failed: want exactly 10 admitted" >&2
  exit 1
fi
echo "compose check ok: exactly the limit admitted across both instances"
