#!/usr/bin/env bash
# Builds the images of Dockerfile, FROM scratch (nothing is pulled): the
# static CLI (scripts/build-cli.sh) in a context of its own, build/image,
# with bin/ratelimit a symbolic link to /slidelog.
#   scripts/build-image.sh [SERVE_TAG [RLS_TAG]]
# SERVE_TAG (default slidelog/slidelog:dev) runs `serve`; RLS_TAG (default
# slidelog/slidelog:dev-rls) runs /bin/ratelimit, the rate limit service
# set by envoyproxy/ratelimit's environment variables. Docker's output is
# shown only when a build fails.
set -euo pipefail
cd "$(dirname "$0")/.."
serve_tag=${1:-slidelog/slidelog:dev}
rls_tag=${2:-slidelog/slidelog:dev-rls}
ctx=build/image
rm -rf "$ctx"
mkdir -p "$ctx/bin"
bash scripts/build-cli.sh "$ctx/slidelog" # named after its commit: slidelog version
ln -s /slidelog "$ctx/bin/ratelimit"
chatter=$(mktemp)
trap 'rm -f "$chatter"' EXIT
for target in serve rls; do
  tag=$serve_tag
  [ "$target" = rls ] && tag=$rls_tag
  docker build -q --target "$target" -t "$tag" -f Dockerfile "$ctx" >"$chatter" 2>&1 || { cat "$chatter"; exit 1; }
  echo "built $tag (target $target)"
done
