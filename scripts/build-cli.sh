#!/usr/bin/env bash
# Builds the CLI as a static binary (the image's: Dockerfile) into OUT, named
# after the commit it is built from: `slidelog version` says the revision,
# its commit time and "modified" when the tree differs from it.
#   scripts/build-cli.sh OUT [go build flags...]
# The go command stamps a build's commit itself only where it recognises
# the repository (a clone's .git directory; not a linked worktree's .git
# file, not with -buildvcs=false); this script passes it with -ldflags -X
# (cmd/slidelog/version.go) wherever git knows it, so the binary, and the
# image made of it without any .git, names its commit either way. Outside a
# git checkout the binary says "revision unknown".
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/build-cli.sh OUT [go build flags...]" >&2; exit 2; }
out=$1; shift
case $out in /*) ;; *) out=$PWD/$out ;; esac
cd "$(dirname "$0")/.."
ldflags='-s -w'
if git rev-parse --git-dir >/dev/null 2>&1; then
  rev=$(git rev-parse HEAD)
  # the commit time in UTC, as the go command stamps it (vcs.time)
  at=$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
  # modified as the go command tells it: git status --porcelain says anything
  modified=false
  [ -z "$(git status --porcelain)" ] || modified=true
  ldflags+=" -X main.revision=$rev -X main.revisionTime=$at -X main.revisionModified=$modified"
fi
CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" "$@" -o "$out" ./cmd/slidelog
